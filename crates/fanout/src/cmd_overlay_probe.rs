//! `fanout overlay probe`: measures what one TCP connection gets from each
//! candidate parent (ROMA §VI-C's hop throughputs), as hop lines for
//! `fanout overlay plan`. A host serves probes with `--serve`, streaming
//! only to holders of the overlay's key (`fanout_overlay::probe`).

use anyhow::{bail, Context, Result};
use clap::Args;
use fanout_overlay::probe::{self, ANSWER_LEN, NONCE_LEN, REQUEST_LEN};
use fanout_overlay::SymbolKey;
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// How long a peer may take over each handshake step.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes per write and per read of a probe's stream.
const CHUNK: usize = 64 << 10;

/// Arguments of `fanout overlay probe`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  # on every candidate parent (the source too):
  fanout overlay probe --serve 0.0.0.0:7001 --psk-file overlay.psk
  # on each host, what each candidate would give it, as hop lines:
  fanout overlay probe --from 10.0.0.1:7001 --from 10.0.0.2:7001 --psk-file overlay.psk \\
      --name 10.0.0.3 >> hops.toml
  # then, with `source = \"10.0.0.1\"` at the top of hops.toml:
  fanout overlay plan hops.toml --max-children 4

A probe is one TCP connection from the candidate to this host for
--seconds; its rate leaves out the first third (slow start), its round
trip is the handshake's (before the stream loads the path). The serving
host streams only to holders of the key (a keyed BLAKE3 tag over its fresh
nonce), at most 10 s a probe, one probe at a time.")]
pub struct ProbeArgs {
    /// Serve probes here (TCP), until Ctrl-C or --count probes.
    #[arg(
        long,
        value_name = "ADDR:PORT",
        conflicts_with = "from",
        required_unless_present = "from"
    )]
    pub serve: Option<SocketAddr>,
    /// With --serve: stop after this many probes (0: until Ctrl-C).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub count: u64,
    /// Probe these hosts (their --serve address), one after another.
    #[arg(long, value_name = "HOST:PORT")]
    pub from: Vec<SocketAddr>,
    /// This host's name in the hop lines (default: the address each
    /// probe's connection came to).
    #[arg(long)]
    pub name: Option<String>,
    /// Seconds each probe streams.
    #[arg(long, default_value_t = 3.0, value_name = "SECS")]
    pub seconds: f64,
    /// The overlay's pre-shared key.
    #[arg(long, value_name = "FILE", value_parser = crate::security_opts::read_secret)]
    pub psk_file: crate::security_opts::Secret,
    /// Print the probes as JSON on stdout instead of hop lines.
    #[arg(long)]
    pub json: bool,
}

/// One probe's result.
#[derive(Debug, Serialize)]
struct Measured {
    /// The host probed (the hop's parent end).
    from: String,
    /// This host.
    to: String,
    /// Steady rate, bit/s.
    rate_bps: f64,
    /// Round trip of the handshake (the request out, the nonce back),
    /// seconds: the hop's round trip before the stream loads it.
    rtt_s: f64,
    /// Bytes the stream carried.
    bytes: u64,
}

/// Runs `fanout overlay probe`.
pub fn run(args: ProbeArgs) -> Result<()> {
    let key = SymbolKey::derive(&args.psk_file.0);
    match args.serve {
        Some(addr) => serve(addr, &key, args.count),
        None => {
            if !(0.5..=10.0).contains(&args.seconds) {
                bail!("--seconds must be within 0.5..=10");
            }
            let mut all = Vec::new();
            for from in &args.from {
                let m = measure(*from, &key, args.seconds, args.name.as_deref())
                    .with_context(|| format!("probing {from}"))?;
                eprintln!(
                    "overlay probe: {} -> {}: {:.1} Mbit/s",
                    m.from,
                    m.to,
                    m.rate_bps / 1e6
                );
                all.push(m);
            }
            if args.json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                for m in &all {
                    println!(
                        "[[hop]]\nfrom = \"{}\"\nto = \"{}\"\nrate = \"{:.3}Mbit\"\nrtt = \"{:.3}ms\"\n",
                        m.from,
                        m.to,
                        m.rate_bps / 1e6,
                        m.rtt_s * 1e3
                    );
                }
            }
            Ok(())
        }
    }
}

/// Serves probes one at a time; a peer that fails the handshake is
/// dropped and counted.
fn serve(addr: SocketAddr, key: &SymbolKey, count: u64) -> Result<()> {
    let listener = TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!("overlay probe: serving on {}", listener.local_addr()?);
    crate::interrupt::watch();
    listener.set_nonblocking(true)?;
    let (mut served, mut refused) = (0u64, 0u64);
    while !crate::interrupt::interrupted() && (count == 0 || served + refused < count) {
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match stream_to(stream, key) {
            Ok(bytes) => {
                served += 1;
                eprintln!("overlay probe: streamed {bytes} bytes to {peer}");
            }
            Err(e) => {
                refused += 1;
                eprintln!("overlay probe: refused {peer}: {e:#}");
            }
        }
    }
    eprintln!("overlay probe: {served} probes served, {refused} refused");
    Ok(())
}

/// The serving side of one probe: the handshake, then zeros until the
/// time asked for (at most 10 s) has passed.
fn stream_to(mut s: TcpStream, key: &SymbolKey) -> Result<u64> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut req = [0u8; REQUEST_LEN];
    s.read_exact(&mut req)?;
    let ms = probe::parse_request(&req)?;
    let mut nonce = [0u8; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    s.write_all(&nonce)?;
    let mut got = [0u8; ANSWER_LEN];
    s.read_exact(&mut got)?;
    probe::check_answer(key, &nonce, &req, &got)?;
    let clock = fanout_io::Clock::new();
    let end = f64::from(ms) / 1e3;
    let zeros = vec![0u8; CHUNK];
    let mut sent = 0u64;
    while clock.now().as_secs_f64() < end {
        match s.write(&zeros) {
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(sent)
}

/// The probing side: asks `from` for `seconds` of stream and measures it.
fn measure(
    from: SocketAddr,
    key: &SymbolKey,
    seconds: f64,
    name: Option<&str>,
) -> Result<Measured> {
    let mut s = TcpStream::connect_timeout(&from, HANDSHAKE_TIMEOUT)?;
    let to = name.map_or_else(
        || s.local_addr().map(|a| a.ip().to_string()),
        |n| Ok(n.to_owned()),
    )?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let req = probe::request((seconds * 1000.0) as u32);
    let asked = fanout_io::Clock::new();
    s.write_all(&req)?;
    let mut nonce = [0u8; NONCE_LEN];
    s.read_exact(&mut nonce)
        .context("the host did not answer (not serving probes, or another key)")?;
    let rtt_s = asked.now().as_secs_f64();
    s.write_all(&probe::answer(key, &nonce, &req))?;
    let clock = fanout_io::Clock::new();
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    let mut arrivals = Vec::new();
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        bytes += n as u64;
        arrivals.push((clock.now().as_secs_f64(), bytes));
    }
    let rate_bps = probe::steady_rate_bps(&arrivals, seconds / 3.0)
        .context("the stream ended too soon to measure (the host refused the key?)")?;
    Ok(Measured {
        from: from.ip().to_string(),
        to,
        rate_bps,
        rtt_s,
        bytes,
    })
}
