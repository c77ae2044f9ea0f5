//! `fanout relay`: a member of one session and the sender of another,
//! forwarding the stream as it arrives (the relay servers of TCP-SMO §V.D
//! receive one session and multicast it in another).
//!
//! Two event loops, one per socket: the upstream [`Receiver`] runs on its
//! own thread and hands the bytes it reads, in order, through a bounded
//! channel to the downstream [`SessionSender`] on the main thread. Nothing
//! waits for the whole stream. The relay is stream-agnostic: it forwards
//! the session's byte stream verbatim (a file's manifest and BLAKE3 trailer
//! included), so downstream receivers verify end to end.
//!
//! Backpressure: the downstream send buffer is bounded (`--window-mib`);
//! when it is full the relay stops taking chunks, the channel fills
//! ([`CHANNEL_CHUNKS`]), the upstream thread stops reading, and the relay's
//! upstream receive window closes — flow control, not memory, absorbs a
//! slow downstream.
//!
//! Downstream late joiners: with `--spool FILE` the relay keeps the stream
//! on disk and serves a joiner's missed prefix by unicast catch-up, like
//! `fanout send` does for files (`catch_up`); without it the relay holds
//! only its send buffer, so a receiver joining after the stream's start
//! left that buffer is refused with a reason.

use crate::catch_up::files::SpoolPrefix;
use crate::net_opts::{random_rng, random_session_id, TransportOpts};
use crate::realtime_opts::{
    realtime_receiver_counters, realtime_sender_counters, receive_in_real_time,
};
use crate::recv_counters::receiver_counters;
use crate::report::{
    drops_map, file_session_counters, goodput_bps, peak_rss_bytes, require_completed, MemberReport,
    OutputOpts,
};
use crate::security_opts::Side;
use crate::session_args::{CatchUpArgs, SessionSendArgs};
use crate::session_net::{
    open_member_sockets, open_sender_endpoint, DeliveryReport, JoinSpec, SessionSpec,
};
use crate::session_view::SessionView;
use anyhow::{bail, Context, Result};
use clap::Args;
use fanout_app::catch_up::{CatchUpServer, PrefixSource, PrefixStream};
use fanout_core::time::Instant;
use fanout_io::{Clock, Driver, RunStats, Waker};
use fanout_transport::realtime::RealtimeSend;
use fanout_transport::session::{JoinPolicy, SessionSender};
use fanout_transport::{CloseReason, Receiver};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver as Rx, SyncSender, TryRecvError, TrySendError};
use std::time::Duration;

/// Bytes per chunk handed from the upstream thread to the downstream loop.
const CHUNK_BYTES: usize = 256 << 10;
/// Chunks in flight between the two loops: at most 4 MiB beyond the
/// downstream send buffer and the upstream receive window.
const CHANNEL_CHUNKS: usize = 16;

/// Arguments of `fanout relay`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:
  # receive session 1 (239.1.1.1) and serve it to a second group behind this host
  fanout relay --from 192.0.2.1:6000 --group 239.1.1.1:7000 \\
      --bind 198.51.100.1:6001 --out-group 239.1.1.2:7001 --wait-for 4
  fanout recv --group 239.1.1.2:7001 --from 198.51.100.1:6001 -o downloads/",
    mut_arg("wait_for", |a| a.help("Downstream: start once this many receivers joined ...")),
    mut_arg("wait_secs", |a| a.help(
        "... or this many seconds after the relay started, if one joined"
    )),
    mut_arg("ttl", |a| a.help("Downstream multicast TTL (1 = this link only)")),
    mut_arg("repair_threshold", |a| a.help(
        "Downstream: repair by multicast when more than this share of \
         receivers miss a segment, otherwise by unicast"
    )),
    mut_arg("stall_timeout", |a| a.help(
        "Downstream: evict a receiver that makes no progress for this long"
    )),
)]
pub struct RelayArgs {
    /// Upstream: the session sender to join (its `--bind` address, or the
    /// downstream address of another relay).
    #[arg(long, value_name = "HOST:PORT")]
    pub from: String,
    /// Upstream multicast group to join (omit it when the upstream fans out
    /// by unicast).
    #[arg(long, value_name = "GROUP:PORT")]
    pub group: Option<SocketAddr>,
    /// Local IPv4 address of the interface to join the upstream group on.
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<Ipv4Addr>,
    /// Downstream: local address to serve from; downstream receivers name
    /// it in `--from`.
    #[arg(long, value_name = "ADDR:PORT")]
    pub bind: SocketAddr,
    /// Downstream multicast group (`fanout recv --group` on the receivers).
    #[arg(long, value_name = "GROUP:PORT", required_unless_present = "unicast")]
    pub out_group: Option<SocketAddr>,
    /// Downstream by unicast fan-out (a copy per receiver) instead of a group.
    #[arg(long)]
    pub unicast: bool,
    /// Keep the forwarded stream in this file, so that a downstream receiver
    /// joining late gets the prefix it missed by unicast catch-up (without
    /// it such a joiner is refused once the stream's start left the send
    /// buffer). The file is removed at the end.
    #[arg(long, value_name = "FILE")]
    pub spool: Option<PathBuf>,
    /// Forward a real-time stream (`stream send --latency`): join it as
    /// `stream recv --latency MS` does (whole messages; a hole is skipped
    /// once the data behind it waited MS milliseconds) and send each
    /// message on with the deadline the upstream named (or MS after the
    /// relay read it), in a real-time session as `stream send --latency`
    /// runs one. Downstream receivers join it with `stream recv --latency`,
    /// a late one at the live position.
    #[arg(long, value_name = "MS", conflicts_with = "spool",
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub latency: Option<u64>,
    #[command(flatten)]
    pub session: SessionSendArgs,
    #[command(flatten)]
    pub catch_up: CatchUpArgs,
    #[command(flatten)]
    pub out: OutputOpts,
    #[command(flatten)]
    pub net: TransportOpts,
}

/// What `fanout relay --json` prints at the end.
#[derive(Debug, Serialize)]
pub struct RelayReport {
    /// "relay".
    pub role: &'static str,
    /// The upstream session sender.
    pub upstream: String,
    /// The upstream group, if joined by multicast.
    pub upstream_group: Option<String>,
    /// Where the downstream session delivered.
    pub delivery: DeliveryReport,
    /// Stream bytes forwarded (the whole stream, manifest and trailer
    /// included for a file).
    pub bytes: u64,
    /// From the first downstream acknowledgement to the end, seconds.
    pub seconds: f64,
    /// `bytes` × 8 over `seconds`, bit/s.
    pub goodput_bps: f64,
    /// Why the downstream session ended.
    pub close: String,
    /// Why the upstream session ended (for this relay).
    pub upstream_close: String,
    /// Upstream receiver counters.
    pub upstream_transport: BTreeMap<&'static str, u64>,
    /// Upstream input dropped, by reason.
    pub upstream_drops: BTreeMap<&'static str, u64>,
    /// Downstream session counters.
    pub transport: BTreeMap<&'static str, u64>,
    /// Downstream input dropped, by reason.
    pub drops: BTreeMap<&'static str, u64>,
    /// Peak resident memory of this process, bytes (Linux VmHWM).
    pub peak_rss_bytes: Option<u64>,
    /// Downstream receivers.
    pub members: Vec<MemberReport>,
}

impl RelayReport {
    /// Prints the report: JSON on stdout, or one human line on stderr.
    pub fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(self).expect("serialisable")
            );
            return;
        }
        eprintln!(
            "relayed {} bytes from {} to {} receivers in {:.2} s: {:.1} Mbit/s",
            self.bytes,
            self.upstream,
            self.members.len(),
            self.seconds,
            self.goodput_bps / 1e6,
        );
    }
}

/// What the upstream thread hands to the downstream loop, in order.
enum Up {
    Data(Vec<u8>),
    /// Whole messages of a real-time stream, each with its deadline.
    Messages(Vec<(Vec<u8>, Option<Instant>)>),
    End,
    Failed(String),
}

/// What the upstream thread did.
struct Upstream {
    bytes: u64,
    stats: RunStats,
    transport: BTreeMap<&'static str, u64>,
    drops: BTreeMap<&'static str, u64>,
    close: Option<CloseReason>,
}

/// Runs the relay; returns its report.
pub fn relay(args: &RelayArgs) -> Result<RelayReport> {
    args.session.validate()?;
    let from = crate::cmd_send::resolve(&args.from)?;
    let up_sockets = open_member_sockets(&JoinSpec {
        group: args.group,
        from: Some(from),
        interface: args.interface,
        listen: None,
        source: None,
    })?;
    let (down_ep, delivery) = open_sender_endpoint(&SessionSpec {
        group: args.out_group,
        unicast: args.unicast,
        bind: args.bind,
        ttl: args.session.ttl,
    })?;
    let spool = match &args.spool {
        Some(p) => Some(File::create(p).with_context(|| format!("cannot create {}", p.display()))?),
        None => None,
    };
    // Upstream toward its sender, downstream to its own group.
    let up_path = args.net.fit_path(&up_sockets.unicast, from);
    let down_path = delivery.group().map(|g| args.net.fit_path(&down_ep, g));
    let clock = Clock::new();
    let mut down = args.net.driver_on(down_ep, clock)?;
    let up = args.net.member_driver(up_sockets, clock)?;
    let (wake_down, wake_up) = (down.waker(), up.waker());
    let mut up_transport = args.net.transport_on(Side::RelayIn, Some(&up_path))?;
    let latency = args.latency.map(Duration::from_millis);
    if let Some(l) = latency {
        receive_in_real_time(&mut up_transport, l);
    }
    let receiver = Receiver::join(up_transport, from, clock.now());
    let (tx, rx) = mpsc::sync_channel(CHANNEL_CHUNKS);
    let realtime = latency.is_some();
    let upstream = std::thread::Builder::new()
        .name("relay-upstream".into())
        .spawn(move || pump_upstream(up, receiver, spool, realtime, tx, wake_down))
        .context("cannot start the upstream thread")?;
    let join = if realtime {
        JoinPolicy::Live
    } else if args.spool.is_some() {
        JoinPolicy::CatchUp
    } else {
        JoinPolicy::FromStart
    };
    let down_transport = || args.net.transport_on(Side::RelayOut, down_path.as_ref());
    let mut config = args
        .session
        .config(down_transport()?, delivery.group(), join);
    if realtime {
        let mut mode = RealtimeSend::with_defaults(config.transport.max_datagram);
        mode.deadlines = true;
        config.realtime = Some(mode);
    }
    let session_id = random_session_id();
    let session = SessionSender::new(config, session_id, clock.now());
    let source: Box<dyn PrefixSource> = match &args.spool {
        Some(p) => Box::new(SpoolPrefix { path: p.clone() }),
        // Never asked: without a spool no member starts past offset 0.
        None => Box::new(NoPrefix),
    };
    let mut session = CatchUpServer::new(
        session,
        source,
        down_transport()?,
        args.catch_up.config(),
        random_rng(),
    );
    args.net.security.warn_if_unprotected(args.out.quiet);
    let mut view = SessionView::new(None, &delivery.peer_label(), args.out);
    view.wait_for(args.session.wait_for);
    let mut forward = Forward {
        rx,
        latency,
        wake_up,
        current: None,
        bytes: 0,
        ended: false,
        failed: None,
    };
    let mut started = None;
    let stats = down.run(&mut session, |s, now| {
        forward.pump(s, now);
        view.poll_events(s);
        if s.bytes_acked_by_all() > 0 {
            started.get_or_insert(now);
        }
        let position = s.bytes_acked_by_all();
        view.update(s, now, position);
        s.close_reason().is_some() && s.active() == 0
    });
    view.finish();
    let Forward {
        rx, bytes, failed, ..
    } = forward;
    // Hang up: the upstream thread resets its session if it still runs.
    drop(rx);
    let up = upstream
        .join()
        .map_err(|_| anyhow::anyhow!("the upstream thread panicked"))?;
    if let Some(p) = &args.spool {
        let _ = std::fs::remove_file(p);
    }
    let stats = stats?;
    let up = up?;
    if let Some(why) = failed {
        bail!("upstream {from} failed: {why}");
    }
    let reason = require_completed(
        session.close_reason(),
        &session.stats().drops,
        format_args!("session to {}", delivery.peer_label()),
    )?;
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = session.stats();
    let cu = session.catch_up_stats().clone();
    let mut transport: BTreeMap<&'static str, u64> =
        file_session_counters(st, &cu, stats.send_syscalls)
            .into_iter()
            .collect();
    transport.extend(realtime_sender_counters(&session));
    let mut upstream_transport = up.transport;
    upstream_transport.insert("recv_syscalls", up.stats.recv_syscalls);
    upstream_transport.insert("bytes_read", up.bytes);
    Ok(RelayReport {
        role: "relay",
        upstream: from.to_string(),
        upstream_group: args.group.map(|g| g.to_string()),
        delivery: delivery.report(),
        bytes,
        seconds,
        goodput_bps: goodput_bps(bytes, seconds),
        close: reason.to_string(),
        upstream_close: up
            .close
            .map_or_else(|| "finished".into(), |c| c.to_string()),
        upstream_transport,
        upstream_drops: up.drops,
        transport,
        drops: drops_map(&st.drops),
        peak_rss_bytes: peak_rss_bytes(),
        members: view.member_reports(&session),
    })
}

/// The downstream loop's side of the channel.
struct Forward {
    rx: Rx<Up>,
    /// A real-time stream's budget: the deadline of a message the upstream
    /// named none for, after the relay took it.
    latency: Option<Duration>,
    wake_up: Waker,
    /// A chunk partly written into the session, and how much of it.
    current: Option<(Vec<u8>, usize)>,
    bytes: u64,
    ended: bool,
    failed: Option<String>,
}

impl Forward {
    /// Moves what the session takes now from the channel into it; ends or
    /// aborts the session when the upstream did.
    fn pump(&mut self, s: &mut SessionSender, now: Instant) {
        if self.ended || self.failed.is_some() {
            return;
        }
        loop {
            if let Some((chunk, used)) = &mut self.current {
                let n = s.write(&chunk[*used..]);
                *used += n;
                self.bytes += n as u64;
                if *used < chunk.len() {
                    return;
                }
                self.current = None;
                // Room in the channel again: let the upstream read on.
                self.wake_up.wake();
            }
            match self.rx.try_recv() {
                Ok(Up::Data(chunk)) => self.current = Some((chunk, 0)),
                Ok(Up::Messages(batch)) => {
                    for (msg, deadline) in batch {
                        let deadline = deadline.or(self.latency.map(|l| now + l));
                        // Never blocks: the pushed queue takes it (or
                        // drops its oldest).
                        s.send_message(now, &msg, deadline);
                        self.bytes += msg.len() as u64;
                    }
                    self.wake_up.wake();
                }
                Ok(Up::End) => {
                    s.finish();
                    self.ended = true;
                    return;
                }
                Ok(Up::Failed(why)) => {
                    s.abort(&format!("relay's upstream failed: {why}"));
                    self.failed = Some(why);
                    return;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    s.abort("relay's upstream vanished");
                    self.failed = Some("the upstream thread ended early".into());
                    return;
                }
            }
        }
    }
}

/// A prefix source for a relay without a spool (never used: such a relay
/// admits no member past offset 0).
struct NoPrefix;

impl PrefixSource for NoPrefix {
    fn open(&self, _range: std::ops::Range<u64>) -> std::io::Result<Box<dyn PrefixStream>> {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "this relay keeps no spool (--spool) to serve a missed prefix from",
        ))
    }
}

/// The upstream thread: joins the upstream session, reads the stream in
/// order (spooling it first, if asked; whole messages with their
/// deadlines if `realtime`) and hands it over without blocking its loop;
/// at the end of the stream it sends `End`, then lingers until the
/// upstream session closes so retransmissions are still acknowledged.
fn pump_upstream(
    mut driver: Driver,
    mut receiver: Receiver,
    mut spool: Option<File>,
    realtime: bool,
    tx: SyncSender<Up>,
    wake_down: Waker,
) -> Result<Upstream> {
    let mut pending: Option<Up> = None;
    let mut bytes = 0u64;
    let mut sent_end = false;
    let mut hung_up = false;
    let mut failure: Option<String> = None;
    let stats = driver.run(&mut receiver, |r, now| {
        // A live stream is joined where it is; a file needs its start.
        if !realtime && r.peer().is_some() && r.start_offset() > 0 && failure.is_none() {
            let why = format!(
                "the relay joined the upstream late (at offset {}); start it \
                 before the upstream's data (count it in the sender's --wait-for)",
                r.start_offset()
            );
            r.reset(
                crate::outcome::reset_code::APPLICATION,
                "relay cannot forward a stream joined mid-way",
            );
            failure = Some(why.clone());
            pending = Some(Up::Failed(why));
        }
        loop {
            if let Some(up) = pending.take() {
                match tx.try_send(up) {
                    Ok(()) => wake_down.wake(),
                    Err(TrySendError::Full(up)) => {
                        pending = Some(up);
                        break;
                    }
                    Err(TrySendError::Disconnected(_)) => {
                        hung_up = true;
                        break;
                    }
                }
            }
            if failure.is_some() || sent_end {
                break;
            }
            let (up, n) = if realtime {
                take_messages(r, now)
            } else {
                take_chunk(r)
            };
            if n == 0 {
                if r.is_finished() {
                    pending = Some(Up::End);
                    sent_end = true;
                    continue;
                }
                if r.is_closed() {
                    let why = r.close_reason().map_or("closed".into(), |c| c.to_string());
                    failure = Some(why.clone());
                    pending = Some(Up::Failed(why));
                    continue;
                }
                break;
            }
            if let (Some(f), Up::Data(chunk)) = (spool.as_mut(), &up) {
                if let Err(e) = f.write_all(chunk) {
                    let why = format!("spool write error: {e}");
                    r.reset(
                        crate::outcome::reset_code::APPLICATION,
                        "relay's spool failed",
                    );
                    failure = Some(why.clone());
                    pending = Some(Up::Failed(why));
                    continue;
                }
            }
            bytes += n as u64;
            pending = Some(up);
        }
        if hung_up {
            // The downstream ended first (it failed): stop the upstream too.
            r.reset(
                crate::outcome::reset_code::APPLICATION,
                "relay's downstream ended",
            );
            return true;
        }
        r.is_closed() && pending.is_none()
    })?;
    let st = receiver.stats();
    let mut transport = receiver_counters(st);
    if realtime {
        transport.extend(realtime_receiver_counters(&receiver));
    }
    Ok(Upstream {
        bytes,
        stats,
        transport,
        drops: drops_map(&st.drops),
        close: receiver.close_reason().cloned(),
    })
}

/// The stream bytes readable now, at most [`CHUNK_BYTES`], and how many.
fn take_chunk(r: &mut Receiver) -> (Up, usize) {
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let n = r.read(&mut chunk);
    chunk.truncate(n);
    (Up::Data(chunk), n)
}

/// The whole messages readable at `now` (about [`CHUNK_BYTES`] at most),
/// each with its deadline, and their bytes.
fn take_messages(r: &mut Receiver, now: Instant) -> (Up, usize) {
    let (mut batch, mut n) = (Vec::new(), 0);
    while n < CHUNK_BYTES {
        let mut msg = Vec::new();
        let Some(read) = r.read_message(now, &mut msg) else {
            break;
        };
        n += msg.len();
        batch.push((msg, read.deadline));
    }
    (Up::Messages(batch), n)
}

/// Runs `fanout relay`.
pub fn run(args: RelayArgs) -> Result<()> {
    relay(&args)?.print(args.out.json);
    Ok(())
}
