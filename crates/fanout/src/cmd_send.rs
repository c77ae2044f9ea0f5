//! `fanout send FILE --to HOST:PORT`.

use crate::file_proto::{sanitize_name, Manifest};
use crate::net_opts::{random_session_id, TransportOpts};
use crate::progress::bytes_bar;
use crate::report::{drops_map, peak_rss_bytes, TransferReport};
use anyhow::{bail, Context, Result};
use clap::Args;
use fanout_io::{Clock, Driver, UdpEndpoint};
use fanout_transport::{CloseReason, Sender};
use std::fs::File;
use std::io::Read;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// Arguments of `fanout send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The file to send.
    pub file: PathBuf,
    /// The receiver (`fanout recv --listen ...`), e.g. `192.0.2.7:7000` or `[::1]:7000`.
    #[arg(long, value_name = "HOST:PORT")]
    pub to: String,
    /// Local address to bind (default: any address of the receiver's family).
    #[arg(long, value_name = "ADDR:PORT")]
    pub bind: Option<SocketAddr>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub net: TransportOpts,
}

/// Resolves `HOST:PORT` to one address, with a clear error.
pub fn resolve(target: &str) -> Result<SocketAddr> {
    target
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve `{target}` (expected HOST:PORT)"))?
        .next()
        .with_context(|| format!("`{target}` resolved to no address"))
}

/// Sends `args.file`; returns the report.
pub fn send(args: &SendArgs) -> Result<TransferReport> {
    let mut file =
        File::open(&args.file).with_context(|| format!("cannot open {}", args.file.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot stat {}", args.file.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", args.file.display());
    }
    let size = meta.len();
    let name = args
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .context("the file name is not valid UTF-8")?;
    let name = sanitize_name(name)?;
    let peer = resolve(&args.to)?;
    let bind = args.bind.unwrap_or(match peer {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("literal"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("literal"),
    });
    let endpoint = UdpEndpoint::bind(bind).with_context(|| format!("cannot bind {bind}"))?;
    let clock = Clock::new();
    let mut driver = Driver::new(endpoint, clock, args.net.driver())?;
    let mut sender = Sender::connect(args.net.transport(), peer, random_session_id(), clock.now());

    let manifest = Manifest {
        size,
        name: name.clone(),
    };
    let mut header = manifest.encode();
    let mut hasher = blake3::Hasher::new();
    let mut chunk = vec![0u8; 256 << 10];
    let mut file_done = 0u64;
    let mut trailer: Option<Vec<u8>> = None;
    let mut read_error: Option<anyhow::Error> = None;
    let bar = bytes_bar(size, "send", args.quiet || args.json);
    let mut started = None;

    let stats = driver.run(&mut sender, |s, now| {
        if !header.is_empty() {
            if s.write_message(&header) {
                header.clear();
            }
            return s.is_closed();
        }
        while file_done < size && s.writable() > 0 && read_error.is_none() {
            let want = chunk
                .len()
                .min(s.writable())
                .min((size - file_done) as usize);
            match file.read(&mut chunk[..want]) {
                Ok(0) => {
                    read_error = Some(anyhow::anyhow!(
                        "{} shrank while being sent",
                        args.file.display()
                    ));
                    s.reset(2, "sender's file changed");
                }
                Ok(n) => {
                    hasher.update(&chunk[..n]);
                    let taken = s.write(&chunk[..n]);
                    debug_assert_eq!(taken, n);
                    file_done += n as u64;
                }
                Err(e) => {
                    read_error = Some(anyhow::Error::new(e).context("read error"));
                    s.reset(2, "sender's read error");
                }
            }
        }
        if file_done == size && read_error.is_none() {
            let t = trailer.get_or_insert_with(|| hasher.finalize().as_bytes().to_vec());
            if !t.is_empty() && s.write_message(t) {
                t.clear();
                s.finish();
            }
        }
        if s.bytes_acked() > 0 {
            started.get_or_insert(now);
        }
        bar.set_position(
            s.bytes_acked()
                .saturating_sub(manifest.encode().len() as u64)
                .min(size),
        );
        s.is_closed()
    })?;
    bar.finish_and_clear();
    if let Some(e) = read_error {
        return Err(e);
    }
    let reason = sender
        .close_reason()
        .cloned()
        .unwrap_or(CloseReason::IdleTimeout);
    if reason != CloseReason::Completed {
        bail!("transfer to {peer} failed: {reason}");
    }
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = sender.stats();
    Ok(TransferReport {
        role: "send",
        peer: peer.to_string(),
        file: name,
        bytes: size,
        seconds,
        goodput_bps: if seconds > 0.0 {
            size as f64 * 8.0 / seconds
        } else {
            0.0
        },
        blake3: hasher.finalize().to_hex().to_string(),
        verified: true,
        close: reason.to_string(),
        transport: [
            ("datagrams_sent", st.datagrams_sent),
            ("datagrams_received", st.datagrams_received),
            ("payload_bytes_sent", st.payload_bytes_sent),
            ("retransmitted_bytes", st.retransmitted_bytes),
            ("acks_received", st.acks_received),
            ("recovery_episodes", st.recovery_episodes),
            ("rto_events", st.rto_events),
            ("send_syscalls", stats.send_syscalls),
        ]
        .into_iter()
        .collect(),
        drops: drops_map(&st.drops),
        injected_drops: stats.impair_rx.dropped(),
        peak_rss_bytes: peak_rss_bytes(),
    })
}

/// Runs `fanout send`.
pub fn run(args: SendArgs) -> Result<()> {
    send(&args)?.print(args.json);
    Ok(())
}
