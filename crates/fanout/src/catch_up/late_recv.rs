//! `fanout recv` for a late joiner of a file session: the live part comes
//! from the session (this thread, the session socket), the missed prefix
//! from a unicast catch-up transfer (a second thread with its own socket),
//! both written into one [`SplitFile`].

use super::split_file::SplitFile;
use crate::cmd_recv::{Progress, ProgressTicker, RecvArgs};
use crate::progress::bytes_bar;
use crate::recv_counters::{close_label, receiver_counters};
use crate::report::{drops_map, goodput_bps, peak_rss_bytes, TransferReport};
use crate::resume::{RecordKeeper, ResumeRecord};
use crate::security_opts::Side;
use anyhow::{bail, Context, Result};
use fanout_app::catch_up::CatchUpClient;
use fanout_core::time::Instant;
use fanout_io::{Clock, Driver, DriverConfig, UdpEndpoint};
use fanout_transport::{Receiver, TransportConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::sync::mpsc::{self, Receiver as Rx, SyncSender, TryRecvError, TrySendError};

/// Prefix bytes handed from the catch-up thread per message.
const CHUNK_BYTES: usize = 256 << 10;
/// Messages in flight between the threads (bounds memory to 4 MiB; when
/// full the catch-up thread stops reading, so its window closes).
const CHANNEL_CHUNKS: usize = 16;

/// What the catch-up transfer did.
#[derive(Default)]
struct Fetched {
    bytes: u64,
    datagrams_received: u64,
    /// Payload bytes in those datagrams (duplicates included).
    payload_bytes_received: u64,
    acks_sent: u64,
}

/// Where a session member's catch-up transfer comes from and goes to.
struct Plan {
    sender: SocketAddr,
    credential: u64,
    member_id: u64,
    /// Stream bytes wanted: `[0, start)`, or from what a resumed output
    /// holds.
    range: Range<u64>,
}

/// Receives the rest of a file whose session `receiver` joined late
/// (`receiver.start_offset() > 0`): fetches the prefix by catch-up while
/// reading the live part, verifies and renames. `started` is when the
/// session connected.
pub fn receive_rest(
    args: &RecvArgs,
    driver: &mut Driver,
    receiver: &mut Receiver,
    clock: Clock,
    started: Instant,
    progress: &mut dyn FnMut(&Progress),
) -> Result<TransferReport> {
    let start = receiver.start_offset();
    let session = receiver.session_id();
    let mut keeper = RecordKeeper::new(&args.output, session);
    let port = driver.endpoint().local_addr().port();
    keeper.set_member(receiver, port, args.net.security.mode() == "none");
    // A record of this session: resume what an earlier attempt wrote.
    let record = session.and_then(|s| ResumeRecord::load(&args.output, s));
    let mut out = match record.map(|r| SplitFile::resume(&args.output, start, args.existing(), &r))
    {
        Some(Ok(out)) => out,
        Some(Err(e)) => {
            if !args.out.quiet {
                eprintln!("fanout: cannot resume ({e:#}); receiving the whole session");
            }
            SplitFile::new(args.output.clone(), start, args.existing())
        }
        None => SplitFile::new(args.output.clone(), start, args.existing()),
    };
    let resumed_at = out.prefix_pos();
    if resumed_at > 0 && !args.out.quiet {
        eprintln!("fanout: resuming: {resumed_at} bytes of the session's stream kept from an earlier attempt");
    }
    let plan = Plan {
        // The session sender, also behind a merger (the feedback parent).
        sender: receiver.data_source().context("not connected")?,
        credential: receiver.catch_up_credential().context("not connected")?,
        member_id: receiver.member_id(),
        range: resumed_at..start,
    };
    let peer = plan.sender;
    let ip: IpAddr = match (args.interface, peer) {
        (Some(ip), SocketAddr::V4(_)) => ip.into(),
        (_, SocketAddr::V4(_)) => Ipv4Addr::UNSPECIFIED.into(),
        (_, SocketAddr::V6(_)) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let endpoint = UdpEndpoint::bind(SocketAddr::new(ip, 0))
        .with_context(|| format!("cannot bind a catch-up socket on {ip}"))?;
    args.net.tune(&endpoint)?;
    tracing::info!(
        range = ?plan.range,
        local = %endpoint.local_addr(),
        "joined late: fetching the missed prefix by catch-up"
    );
    let (tx, rx) = mpsc::sync_channel(CHANNEL_CHUNKS);
    let (transport, dcfg) = (args.net.transport(Side::Receiver)?, args.net.driver());
    let fetch = if plan.range.is_empty() {
        // The kept output reaches the live part: nothing to fetch.
        drop(tx);
        None
    } else {
        let thread = std::thread::Builder::new()
            .name("catch-up".into())
            .spawn(move || fetch_prefix(endpoint, clock, dcfg, transport, plan, tx))
            .context("cannot start the catch-up thread")?;
        Some(thread)
    };
    let result = assemble(args, driver, receiver, &mut out, &mut keeper, progress, rx);
    // The channel is closed now: the thread ends soon whatever happened.
    let fetched = match fetch {
        Some(thread) => thread
            .join()
            .map_err(|_| anyhow::anyhow!("the catch-up thread panicked")),
        None => Ok(Ok(Fetched::default())),
    };
    let (stats, fetched) = match (result, fetched) {
        (Ok(stats), Ok(Ok(f))) => (stats, f),
        // The catch-up thread's own error says more than the loop's.
        (_, Ok(Err(e))) | (Err(e), _) | (_, Err(e)) => {
            out.keep(&mut keeper);
            return Err(e);
        }
    };
    if !receiver.is_finished() {
        out.keep(&mut keeper);
        let why = receiver
            .close_reason()
            .map_or("unknown".into(), |r| r.to_string());
        bail!("transfer from {peer} incomplete: {why}");
    }
    let blake3 = match out.complete(receiver.stream_len()) {
        Ok(h) => h,
        Err(e) => {
            out.abandon();
            keeper.remove();
            return Err(e);
        }
    };
    keeper.remove();
    let m = out.manifest().cloned().context("no manifest")?;
    let seconds = (clock.now() - started).as_secs_f64();
    let st = receiver.stats();
    Ok(TransferReport {
        role: "recv",
        files: match (out.target(), m.is_tree()) {
            (Some(t), true) => t.files().iter().map(|p| p.display().to_string()).collect(),
            _ => Vec::new(),
        },
        peer: peer.to_string(),
        file: out
            .target()
            .map_or(m.name.clone(), |t| t.path().display().to_string()),
        bytes: m.size,
        seconds,
        goodput_bps: goodput_bps(m.size, seconds),
        blake3,
        verified: true,
        close: close_label(receiver),
        transport: receiver_counters(st)
            .into_iter()
            .chain([
                ("recv_syscalls", stats.recv_syscalls),
                ("start_offset", receiver.start_offset()),
                ("resumed_at", resumed_at),
                ("catch_up_bytes", fetched.bytes),
                ("catch_up_datagrams_received", fetched.datagrams_received),
                (
                    "catch_up_payload_bytes_received",
                    fetched.payload_bytes_received,
                ),
                ("catch_up_acks_sent", fetched.acks_sent),
            ])
            .collect(),
        drops: drops_map(&st.drops),
        injected_drops: stats.impair_rx.dropped(),
        peak_rss_bytes: peak_rss_bytes(),
        members: Vec::new(),
        delivery: None,
        path: None,
        protection: args.net.security.mode(),
        receivers: None,
    })
}

/// Runs the session receiver until it closes, writing live bytes and the
/// prefix chunks the catch-up thread hands over; then takes the rest of the
/// prefix. Returns the session socket's counters.
fn assemble(
    args: &RecvArgs,
    driver: &mut Driver,
    receiver: &mut Receiver,
    out: &mut SplitFile,
    keeper: &mut RecordKeeper,
    progress: &mut dyn FnMut(&Progress),
    rx: Rx<Vec<u8>>,
) -> Result<fanout_io::RunStats> {
    let mut ticker = ProgressTicker::default();
    let mut buf = vec![0u8; 1 << 20];
    let mut error: Option<anyhow::Error> = None;
    let mut bar = None;
    let mut take_live = |r: &mut Receiver, out: &mut SplitFile| -> Result<()> {
        while out.wants_live() {
            let n = r.read(&mut buf);
            if n == 0 {
                break;
            }
            out.put_live(&buf[..n])?;
        }
        Ok(())
    };
    let stats = driver.run(receiver, |r, now| {
        let step = (|| -> Result<()> {
            loop {
                match rx.try_recv() {
                    Ok(chunk) => out.put_prefix(&chunk)?,
                    Err(TryRecvError::Empty) => break,
                    // The catch-up thread ended: fine once the prefix is in,
                    // otherwise it failed (its error is reported) and the
                    // live part alone is useless.
                    Err(TryRecvError::Disconnected) if !out.prefix_complete() => {
                        bail!("the catch-up of the missed prefix ended early")
                    }
                    Err(TryRecvError::Disconnected) => break,
                }
            }
            take_live(r, out)
        })();
        if let Err(e) = step {
            crate::outcome::tell_sender_of_failure(r, &e);
            error = Some(e);
            return true;
        }
        if crate::interrupt::reset_if_interrupted(r) {
            error = Some(crate::interrupt::error(
                "the sender was told; what arrived is kept to resume",
            ));
            return true;
        }
        out.record(keeper, now);
        if ticker.due(now, out.manifest().is_some()) {
            Progress::report(progress, r, out.manifest(), out.body_written());
        }
        if let Some(m) = out.manifest() {
            let b = bar
                .get_or_insert_with(|| bytes_bar(m.size, "recv", args.out.quiet || args.out.json));
            b.set_position(out.body_written());
        }
        r.is_closed()
    })?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(e) = error {
        return Err(e);
    }
    // The session ended; the prefix may still be arriving.
    while let Ok(chunk) = rx.recv() {
        out.put_prefix(&chunk)?;
        take_live(receiver, out)?;
    }
    take_live(receiver, out)?;
    Ok(stats)
}

/// The catch-up thread: requests and receives the prefix on its own socket
/// and hands it over in order; returns once the transfer ended.
fn fetch_prefix(
    endpoint: UdpEndpoint,
    clock: Clock,
    driver_config: DriverConfig,
    transport: TransportConfig,
    plan: Plan,
    tx: SyncSender<Vec<u8>>,
) -> Result<Fetched> {
    let mut driver = Driver::new(endpoint, clock, driver_config)?;
    let mut client = CatchUpClient::new(
        transport,
        plan.sender,
        plan.credential,
        plan.member_id,
        plan.range.clone(),
        clock.now(),
    );
    let mut pending: Option<Vec<u8>> = None;
    let mut bytes = 0u64;
    let mut hung_up = false;
    // Hands over what the receiver holds without blocking the event loop;
    // false once the main thread hung up.
    let mut hand_over = |c: &mut CatchUpClient, pending: &mut Option<Vec<u8>>, block: bool| loop {
        if let Some(chunk) = pending.take() {
            let sent = if block {
                tx.send(chunk).map_err(|_| ())
            } else {
                match tx.try_send(chunk) {
                    Ok(()) => Ok(()),
                    Err(TrySendError::Full(chunk)) => {
                        *pending = Some(chunk);
                        return true;
                    }
                    Err(TrySendError::Disconnected(_)) => Err(()),
                }
            };
            if sent.is_err() {
                return false;
            }
        }
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let n = c.receiver_mut().read(&mut chunk);
        if n == 0 {
            return true;
        }
        chunk.truncate(n);
        bytes += n as u64;
        *pending = Some(chunk);
    };
    driver.run(&mut client, |c, _| {
        if !hand_over(c, &mut pending, false) {
            hung_up = true;
        }
        hung_up || c.is_done()
    })?;
    if hung_up {
        bail!("catch-up abandoned");
    }
    if !hand_over(&mut client, &mut pending, true) {
        bail!("catch-up abandoned");
    }
    let Range { start, end } = plan.range;
    if client.timed_out() {
        bail!(
            "the sender {} served no catch-up for the missed prefix [{start}, {end})",
            plan.sender,
        );
    }
    let r = client.receiver();
    let want = end - start;
    if r.stream_len() != Some(want) || bytes != want {
        let why = r.close_reason().map_or("unknown".into(), |c| c.to_string());
        bail!("catch-up of [{start}, {end}) incomplete: {bytes} bytes ({why})");
    }
    let st = r.stats();
    Ok(Fetched {
        bytes,
        datagrams_received: st.datagrams_received,
        payload_bytes_received: st.payload_bytes_received,
        acks_sent: st.acks_sent,
    })
}
