//! `fanout stream send` (stdin into a live session) and `fanout stream recv` (a
//! live session onto stdout).
//!
//! The stream is raw bytes: no manifest, no trailer. The session is live
//! ([`JoinPolicy::Live`]): receivers present when data starts get the whole
//! stream; a late joiner starts at the sender's current position and gets
//! the suffix from there (its `start_offset` in the report). The sender
//! finishes the session at end of input. Neither end blocks its event loop
//! on the pipe ([`crate::pipe`]); a slow stdout at a receiver closes its
//! receive window, which slows the session down to it (slowest-receiver
//! release), and stdin is read no faster than the session sends.
//!
//! Real time ([`crate::realtime_opts`]): `stream send --latency MS` (or
//! `--queue`, `--queue-ms`) sends the input as messages that never wait
//! for the network and skips lost data once too late; `stream recv
//! --latency MS` writes the whole messages that came in time.
//!
//! Session relay (TCP-SMO §IV.B, [`fanout_app::upstream_relay`]): `stream recv
//! --upstream` sends the receiver's stdin to the sender on its own
//! connection; `stream send --echo-upstream` re-multicasts each complete
//! line of it, prefixed with the receiver's address, and `--upstream-out
//! FILE` writes those lines to a file.

use crate::merger_opts::MergerOpts;
use crate::net_opts::{random_session_id, TransportOpts};
use crate::pipe::{InputFeed, OutputDrain, CHUNK_BYTES};
use crate::realtime_opts::{
    realtime_receiver_counters, realtime_sender_counters, receive_in_real_time, receiver_line,
    sender_line, RealtimeSendOpts,
};
use crate::recv_counters::{close_label, receiver_counters};
use crate::report::{
    drops_map, goodput_bps, peak_rss_bytes, require_completed, OutputOpts, TransferReport,
};
use crate::security_opts::Side;
use crate::session_args::SessionSendArgs;
use crate::session_net::{
    join_session, open_sender_endpoint, run_session, Discovery, JoinSpec, SessionSpec,
};
use crate::session_view::SessionView;
use crate::stats_lines::{StatsLines, StatsOpts};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fanout_app::upstream_relay::UpstreamRelay;
use fanout_app::UpstreamSink;
use fanout_io::Clock;
use fanout_transport::session::{JoinPolicy, SessionSender};
use fanout_transport::Receiver;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `fanout stream`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  some-encoder | fanout stream send --group 239.1.1.1:7000 --bind 192.0.2.1:6000
  fanout stream recv --group 239.1.1.1:7000 > out.ts   # on each receiver")]
pub struct StreamArgs {
    #[command(subcommand)]
    pub command: StreamCommand,
}

/// The two ends of a stream.
#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Send stdin to every receiver of a live session until end of input.
    Send(StreamSendArgs),
    /// Join a live session and write what arrives to stdout (messages and
    /// the --json report go to stderr).
    Recv(StreamRecvArgs),
}

/// Arguments of `fanout stream send`.
#[derive(Debug, Args)]
#[command(
    mut_arg("wait_for", |a| a.help("Start streaming once this many receivers joined ...")),
    mut_arg("wait_secs", |a| a.help(
        "... or this many seconds after the sender started, if at least one \
         joined. Later joiners start at the current position"
    )),
    mut_arg("ttl", |a| a.help("Multicast TTL (1 = this link only)")),
    mut_arg("repair_threshold", |a| a.help(
        "Repair by multicast when more than this share of receivers miss a \
         segment, otherwise by unicast"
    )),
    mut_arg("stall_timeout", |a| a.help("Evict a receiver that makes no progress for this long")),
    after_help = "Examples:\n  \
      # every byte of a pipe, to each receiver that joins the group\n  \
      tar c dir | fanout stream send --group 239.1.2.3:7000 --bind 192.0.2.1:6000\n\n  \
      # live video: in time rather than complete, 200 ms of latency\n  \
      ffmpeg -re -i in.mp4 -c copy -f mpegts - | \\\n      \
      fanout stream send --group 239.1.2.3:7000 --bind 192.0.2.1:6000 --latency 200\n  \
      fanout stream recv --group 239.1.2.3:7000 --from 192.0.2.1:6000 --latency 200 | ffplay -"
)]
pub struct StreamSendArgs {
    /// Multicast to every receiver that joins this group (`fanout stream
    /// recv --group G:PORT --from THIS-HOST:PORT`).
    #[arg(long, value_name = "GROUP:PORT", required_unless_present = "unicast")]
    pub group: Option<SocketAddr>,
    /// Send each receiver its own copy by unicast instead of multicasting
    /// (also chosen automatically, with a warning, when the group cannot be
    /// used). Receivers join with `--from` (with or without `--group`).
    #[arg(long)]
    pub unicast: bool,
    /// Local address to bind: the address receivers name in --from.
    #[arg(long, value_name = "ADDR:PORT")]
    pub bind: SocketAddr,
    /// Session relay: re-multicast each complete line a receiver sends
    /// upstream (`stream recv --upstream`) to every receiver, prefixed with
    /// `[ADDR] ` (that receiver's address). Lines are inserted between
    /// lines of the input, so a text stream stays line by line.
    #[arg(long)]
    pub echo_upstream: bool,
    /// Session relay: write each line receivers send upstream, prefixed
    /// with `[ADDR] `, to FILE (created or truncated).
    #[arg(long, value_name = "FILE")]
    pub upstream_out: Option<PathBuf>,
    #[command(flatten)]
    pub session: SessionSendArgs,
    #[command(flatten)]
    pub out: OutputOpts,
    #[command(flatten)]
    pub net: TransportOpts,
    #[command(flatten, next_help_heading = "Real time")]
    pub realtime: RealtimeSendOpts,
}

/// Arguments of `fanout stream recv`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout stream recv --group 239.1.1.1:7000 --from 192.0.2.1:6000 > out.ts
  # live video in time rather than complete (200 ms latency budget)
  fanout stream recv --group 239.1.1.1:7000 --from 192.0.2.1:6000 --latency 200 | ffplay -")]
pub struct StreamRecvArgs {
    /// The session sender (its `--bind` address), e.g. `192.0.2.1:6000`.
    /// Optional with --group: without it, the first sender that announces
    /// a session on the group.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "group")]
    pub from: Option<String>,
    /// Join this multicast group; without it, data comes by unicast only
    /// (the sender must fan out by unicast).
    #[arg(long, value_name = "GROUP:PORT")]
    pub group: Option<SocketAddr>,
    /// With --group: the local IPv4 address of the interface to join on.
    #[arg(long, value_name = "ADDR")]
    pub interface: Option<Ipv4Addr>,
    /// With --group: accept its datagrams from this source only
    /// (source-specific multicast: IGMPv3 for IPv4, MLDv2 for IPv6; the
    /// address family of the group), usually the sender's address.
    #[arg(long, value_name = "ADDR", requires = "group")]
    pub source: Option<std::net::IpAddr>,
    /// Without --group: local address to bind (default: any, port chosen).
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "group")]
    pub listen: Option<SocketAddr>,
    #[command(flatten)]
    pub merger: MergerOpts,
    /// Give up if the sender does not accept within this many seconds (0 =
    /// the transport's handshake timeout).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub wait: u64,
    /// Session relay: send this process's stdin to the sender on this
    /// receiver's own connection (the sender shows it with `stream send
    /// --echo-upstream` or `--upstream-out`). End of stdin ends the
    /// upstream only; receiving goes on until the session ends.
    #[arg(long)]
    pub upstream: bool,
    /// Receive a real-time stream (`stream send --latency`): write only
    /// whole messages, in order, leaving out those the sender skipped; and
    /// skip a hole itself once the data behind it has waited MS
    /// milliseconds.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub latency: Option<u64>,
    #[command(flatten)]
    pub stats: StatsOpts,
    /// `--json` prints the report on stderr (stdout carries the stream).
    #[command(flatten)]
    pub out: OutputOpts,
    #[command(flatten)]
    pub net: TransportOpts,
}

/// Streams `input` to the session's receivers; returns the report.
pub fn stream_send(
    args: &StreamSendArgs,
    input: impl Read + Send + 'static,
) -> Result<TransferReport> {
    args.session.validate()?;
    if args.realtime.enabled() && (args.echo_upstream || args.upstream_out.is_some()) {
        bail!("--echo-upstream and --upstream-out need a reliable stream: drop --latency, --queue and --queue-ms");
    }
    let spec = SessionSpec {
        group: args.group,
        unicast: args.unicast,
        bind: args.bind,
        ttl: args.session.ttl,
    };
    let (endpoint, mut delivery) = open_sender_endpoint(&spec)?;
    let path = delivery.group().map(|g| args.net.fit_path(&endpoint, g));
    let clock = Clock::new();
    let mut driver = args.net.driver_on(endpoint, clock)?;
    let mut config = args.session.config(
        args.net.transport_on(Side::Sender, path.as_ref())?,
        delivery.group(),
        JoinPolicy::Live,
    );
    config.realtime = args.realtime.mode(config.transport.max_datagram);
    config.repair = args
        .session
        .repair_policy(config.group.is_some(), config.realtime.is_some());
    let mut messages = args.realtime.enabled().then(|| args.realtime.messages());
    let mut stats = StatsLines::open(&args.realtime.stats)?;
    let mut stats_error = None;
    let mut session = SessionSender::new(config, random_session_id(), clock.now());
    let mut feed = InputFeed::spawn(input, driver.waker(), clock);
    args.net.security.warn_if_unprotected(args.out.quiet);
    let mut view = SessionView::new(None, &delivery.peer_label(), args.out);
    view.wait_for(args.session.wait_for);
    let mut relay_out = match &args.upstream_out {
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            Some(OutputDrain::spawn(file, driver.waker()))
        }
        None => None,
    };
    let mut relay = (args.echo_upstream || relay_out.is_some())
        .then(|| UpstreamRelay::new(args.echo_upstream, relay_out.is_some()));
    if relay.is_some() {
        view.watch_upstream();
    }
    let mut relay_error = None;
    let mut started = None;
    let give_up = clock.now() + Duration::from_secs(args.session.wait_secs);
    let mut nobody = false;
    let io = run_session(
        &mut driver,
        &mut session,
        &mut delivery,
        |s| s,
        |s, now| {
            match messages.as_mut() {
                Some(m) => {
                    let mut sink = m.sink(s, now);
                    feed.feed(&mut sink);
                    sink.flush();
                }
                None => feed.feed(s),
            }
            if let Some(Err(e)) = stats.as_mut().map(|l| l.tick(now, |t| sender_line(t, s))) {
                stats_error.get_or_insert(e);
            }
            view.poll_events(s);
            if let Some(r) = relay.as_mut() {
                let events = view.take_upstream();
                r.pump(s, events, feed.at_line_start(), feed.ended());
                if let Some(Err(e)) = relay_out.as_mut().map(|out| write_relayed(r, out)) {
                    s.abort("sender's upstream output failed");
                    relay_error = Some(e);
                }
            }
            if s.snd_nxt() > 0 {
                started.get_or_insert(now);
            }
            view.update(s, now, s.bytes_acked_by_all());
            // The input is over and nobody ever came: nothing to wait for.
            nobody = feed.ended() && s.stats().members_joined == 0 && now >= give_up;
            s.close_reason().is_some() || nobody
        },
    );
    view.finish();
    let io = io?;
    if let Some(e) = relay_error {
        return Err(e);
    }
    if let Some(l) = stats.as_mut() {
        l.last(clock.now(), |t| sender_line(t, &session))?;
    }
    if let Some(e) = stats_error {
        return Err(e);
    }
    if let Some(r) = relay.as_mut() {
        r.finish();
        if let Some(out) = relay_out.as_mut() {
            finish_relayed(r, out)?;
        }
    }
    if let Some(e) = feed.take_error() {
        return Err(e);
    }
    if nobody {
        bail!(
            "no receiver joined within {} s (`fanout stream recv --from {}`)",
            args.session.wait_secs,
            args.bind
        );
    }
    let reason = require_completed(
        session.close_reason(),
        &session.stats().drops,
        format_args!("stream to {}", delivery.peer_label()),
    )
    .map_err(|e| view.explain(e))?;
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = session.stats();
    let bytes = feed.bytes();
    let mut transport: std::collections::BTreeMap<&'static str, u64> = [
        ("datagrams_sent", st.datagrams_sent),
        ("datagrams_received", st.datagrams_received),
        ("data_segments", st.data_segments),
        ("fanout_copies", st.fanout_copies),
        ("multicast_repairs", st.multicast_repairs),
        ("unicast_repairs", st.unicast_repairs),
        ("acks_received", st.acks_received),
        ("rto_events", st.rto_events),
        ("spurious_repairs", st.spurious_repairs),
        ("recoveries_undone", st.recoveries_undone),
        ("members_joined", st.members_joined),
        ("members_left", st.members_left),
        ("members_left_unreported", view.left_dropped()),
        ("send_syscalls", io.send_syscalls),
        ("datagrams_sent_by_driver", io.datagrams_sent),
    ]
    .into_iter()
    .collect();
    transport.extend(realtime_sender_counters(&session));
    if let Some(r) = &relay {
        let (c, up) = (r.counters(), session.upstream_stats());
        transport.extend([
            ("upstream_bytes", c.bytes),
            ("upstream_lines", c.lines),
            ("upstream_lines_echoed", c.echoed),
            ("upstream_lines_not_echoed", c.not_echoed),
            ("upstream_frames_received", up.frames_received),
            ("upstream_acks_sent", up.acks_sent),
            ("upstream_dropped_duplicate", up.dropped_duplicate),
            (
                "upstream_dropped_other",
                up.dropped_beyond_window
                    + up.dropped_limit
                    + up.dropped_invalid
                    + up.dropped_non_member,
            ),
        ]);
    }
    Ok(TransferReport {
        role: "stream-send",
        files: Vec::new(),
        peer: delivery.peer_label(),
        file: "-".into(),
        bytes,
        seconds,
        goodput_bps: goodput_bps(bytes, seconds),
        blake3: feed.blake3_hex(),
        verified: false,
        close: reason.to_string(),
        transport,
        drops: drops_map(&st.drops),
        injected_drops: io.impair_rx.dropped(),
        peak_rss_bytes: peak_rss_bytes(),
        members: view.member_reports(&session),
        delivery: Some(delivery.report()),
        path: view.fitted_path(path),
        protection: args.net.security.mode(),
        receivers: None,
    })
}

/// Receives the stream into `output`, sending `upstream` (if any) to the
/// sender; returns the report.
pub fn stream_recv(
    args: &StreamRecvArgs,
    output: impl Write + Send + 'static,
    upstream: Option<Box<dyn Read + Send>>,
) -> Result<TransferReport> {
    let (sockets, found) = join_session(
        args.from.as_deref(),
        JoinSpec {
            group: args.group,
            from: None,
            interface: args.interface,
            listen: args.listen,
            source: args.source,
        },
        Discovery {
            wait: (args.wait > 0).then(|| Duration::from_secs(args.wait)),
            skip: None,
            quiet: args.out.quiet || args.out.json,
        },
    )?;
    let from = found.sender;
    if !args.out.quiet {
        eprintln!("fanout: listening on {}", sockets.unicast.local_addr());
    }
    args.net.security.warn_if_unprotected(args.out.quiet);
    let quiet = args.out.quiet || args.out.json;
    let path = crate::session_net::fit_member_path(&args.net, &sockets.unicast, &found, quiet);
    let clock = Clock::new();
    let mut driver = args.net.member_driver(sockets, clock)?;
    let mut transport = args.net.transport_on(Side::Receiver, Some(&path))?;
    if args.wait > 0 {
        transport.handshake_timeout = Duration::from_secs(args.wait);
    }
    if let Some(ms) = args.latency {
        receive_in_real_time(&mut transport, Duration::from_millis(ms));
    }
    args.merger
        .apply(&mut transport, &args.net.security, Some(from))?;
    let mut stats = StatsLines::open(&args.stats)?;
    let mut stats_error = None;
    let mut receiver = Receiver::join(transport, from, clock.now());
    let mut out = OutputDrain::spawn(output, driver.waker());
    let mut up_feed = upstream.map(|input| InputFeed::spawn(input, driver.waker(), clock));
    let bar = crate::progress::stream_bar("recv", args.out.quiet || args.out.json);
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut app_error: Option<anyhow::Error> = None;
    let mut started = None;
    crate::interrupt::watch();
    let io = driver.run(&mut receiver, |r, now| {
        if crate::interrupt::reset_if_interrupted(r) {
            app_error.get_or_insert_with(|| crate::interrupt::error("the sender was told"));
            return true;
        }
        if let Some(f) = up_feed.as_mut() {
            f.feed(&mut UpstreamSink(r));
        }
        if r.peer().is_none() {
            return r.is_closed();
        }
        started.get_or_insert(now);
        // The session may close (every byte acknowledged) while bytes wait
        // in the receive buffer because stdout lagged: stop only once they
        // are all read.
        let mut drained = false;
        while app_error.is_none() {
            match out.has_room() {
                Ok(true) => {}
                Ok(false) => break, // stdout lags: leave the data in the window
                Err(e) => {
                    crate::outcome::tell_sender_of_failure(r, &e);
                    app_error = Some(e);
                    break;
                }
            }
            let chunk = if args.latency.is_some() {
                let mut m = Vec::new();
                r.read_message(now, &mut m).map(|_| m)
            } else {
                let n = r.read(&mut buf);
                (n > 0).then(|| buf[..n].to_vec())
            };
            let Some(chunk) = chunk else {
                drained = true;
                break;
            };
            if let Err(e) = out.push(chunk) {
                crate::outcome::tell_sender_of_failure(r, &e);
                app_error = Some(e);
            }
        }
        if let Some(Err(e)) = stats
            .as_mut()
            .map(|l| l.tick(now, |t| receiver_line(t, r, out.bytes())))
        {
            stats_error.get_or_insert(e);
        }
        bar.set_position(out.bytes());
        (r.is_closed() && drained) || app_error.is_some()
    });
    bar.finish_and_clear();
    let io = io?;
    if let Some(l) = stats.as_mut() {
        l.last(clock.now(), |t| receiver_line(t, &receiver, out.bytes()))?;
    }
    if let Some(e) = stats_error {
        return Err(e);
    }
    let flushed = out.finish();
    if let Some(e) = app_error {
        return Err(e);
    }
    flushed?;
    let Some(peer) = receiver.peer() else {
        match receiver.close_reason() {
            Some(why) => bail!("the sender at {from} did not admit this receiver: {why}"),
            None => bail!("the sender at {from} did not accept"),
        }
    };
    if !receiver.is_finished() {
        let why = receiver
            .close_reason()
            .map_or("unknown".into(), |r| r.to_string());
        bail!("stream from {peer} ended early: {why}");
    }
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = receiver.stats();
    let mut transport = receiver_counters(st);
    transport.insert("start_offset", receiver.start_offset());
    if args.latency.is_some() {
        transport.extend(realtime_receiver_counters(&receiver));
    }
    transport.insert("recv_syscalls", io.recv_syscalls);
    if let Some(f) = up_feed.as_mut() {
        if let Some(e) = f.take_error() {
            eprintln!("fanout: warning: upstream input: {e:#}");
        }
        let up = receiver.upstream_stats();
        transport.insert("upstream_bytes_written", up.bytes_written);
        transport.insert("upstream_bytes_acked", up.bytes_acked);
        transport.insert("upstream_retransmitted_bytes", up.retransmitted_bytes);
        transport.insert("upstream_rto_events", up.rto_events);
    }
    let bytes = out.bytes();
    Ok(TransferReport {
        role: "stream-recv",
        files: Vec::new(),
        peer: peer.to_string(),
        file: "-".into(),
        bytes,
        seconds,
        goodput_bps: goodput_bps(bytes, seconds),
        blake3: out.blake3_hex(),
        verified: false,
        close: close_label(&receiver),
        transport,
        drops: drops_map(&st.drops),
        injected_drops: io.impair_rx.dropped(),
        peak_rss_bytes: peak_rss_bytes(),
        members: Vec::new(),
        delivery: None,
        path: Some(path),
        protection: args.net.security.mode(),
        receivers: None,
    })
}

/// Runs `fanout stream`.
pub fn run(args: StreamArgs) -> Result<()> {
    match args.command {
        StreamCommand::Send(a) => stream_send(&a, std::io::stdin())
            .context("stream send")?
            .print(a.out.json),
        StreamCommand::Recv(a) => {
            let upstream = a
                .upstream
                .then(|| Box::new(std::io::stdin()) as Box<dyn Read + Send>);
            stream_recv(&a, std::io::stdout(), upstream)
        }
        .context("stream recv")?
        .eprint(a.out.json),
    }
    Ok(())
}

/// Writes the relayed lines the output has room for (`--upstream-out`).
fn write_relayed(relay: &mut UpstreamRelay, out: &mut OutputDrain) -> Result<()> {
    while out.has_room()? {
        let Some(line) = relay.pop_output() else {
            break;
        };
        out.push(line)?;
    }
    Ok(())
}

/// At the end of the session: writes every relayed line left and closes
/// the output.
fn finish_relayed(relay: &mut UpstreamRelay, out: &mut OutputDrain) -> Result<()> {
    let rest: Vec<u8> = std::iter::from_fn(|| relay.pop_output())
        .flatten()
        .collect();
    if !rest.is_empty() {
        // The transfer is over: waiting for the writer is fine now.
        while !out.has_room()? {
            std::thread::sleep(Duration::from_millis(1));
        }
        out.push(rest)?;
    }
    out.finish()
}
