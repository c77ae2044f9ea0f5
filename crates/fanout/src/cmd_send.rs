//! `fanout send FILE --to HOST:PORT` (a transfer to one receiver: a
//! session of one, offered to the listening receiver) and
//! `fanout send FILE --group G:PORT --bind ADDR:PORT` (a TCP-SMO session).

use crate::catch_up::files::{open_file_feed, FilePrefix};
use crate::net_opts::{random_rng, random_session_id, TransportOpts};
use crate::outcome::{Outcome, ReceiverTally, Requirement};
use crate::progress::bytes_bar;
use crate::report::{
    drops_map, file_session_counters, goodput_bps, peak_rss_bytes, require_completed, MemberReport,
    OutputOpts, TransferReport,
};
use crate::restart_file::RestartFile;
use crate::security_opts::Side;
use crate::session_args::{CatchUpArgs, SessionSendArgs};
use crate::session_net::{open_sender_endpoint, run_session, SessionSpec};
use crate::session_view::SessionView;
use crate::stats_lines::{FileSessionLines, StatsOpts};
use anyhow::{Context, Result};
use clap::Args;
use fanout_app::catch_up::CatchUpServer;
use fanout_app::FileFeed;
use fanout_io::{Clock, SourceTree, TreeReader, UdpEndpoint};
use fanout_transport::session::{JoinPolicy, SessionConfig, SessionEvent, SessionSender};
use fanout_transport::CloseReason;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// Arguments of `fanout send`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  # one receiver: it listens, the sender connects
  fanout recv --listen 0.0.0.0:7000 -o downloads/
  fanout send model.bin --to 192.0.2.7:7000
  # many receivers over multicast: start them, then the sender
  fanout recv --group 239.1.1.1:7000 --from 192.0.2.1:6000 -o downloads/
  fanout send model.bin --group 239.1.1.1:7000 --bind 192.0.2.1:6000 --wait-for 8
  # a directory tree and two files in one session (receivers: -o DIR)
  fanout send release/ notes.txt checksums --group 239.1.1.1:7000 --bind 192.0.2.1:6000
  # at most 200 Mbit/s, done if 7 of 8 receivers complete, a JSON report
  fanout send model.bin --group 239.1.1.1:7000 --bind 192.0.2.1:6000 \\
      --wait-for 8 --max-rate 200M --require 7 --json > report.json

Exit codes: 0 done; 1 failed; 2 bad command line; 3 fewer receivers completed
than --require asks; 130 interrupted (the receivers are told).")]
pub struct SendArgs {
    /// The files or directories to send. One file arrives under its name
    /// (or the receiver's -o path); several, or a directory, arrive by
    /// their names inside the receiver's -o directory, directories with
    /// everything they hold (symbolic links are skipped).
    #[arg(required = true, value_name = "PATH")]
    pub files: Vec<PathBuf>,
    /// A single receiver (`fanout recv --listen ...`), e.g. `192.0.2.7:7000`.
    #[arg(long, value_name = "HOST:PORT", required_unless_present_any = ["group", "unicast"])]
    pub to: Option<String>,
    /// Multicast the file to every receiver that joins this group
    /// (`fanout recv --group G:PORT --from THIS-HOST:PORT`).
    #[arg(
        long,
        value_name = "GROUP:PORT",
        conflicts_with = "to",
        requires = "bind"
    )]
    pub group: Option<SocketAddr>,
    /// Run the session without multicast: each receiver gets its own copy
    /// by unicast (`fanout recv --from THIS-HOST:PORT`, with or without
    /// --group). Chosen automatically, with a warning, when --group cannot
    /// be used (socket options refused, no multicast route).
    #[arg(long, conflicts_with = "to", requires = "bind")]
    pub unicast: bool,
    /// Local address to bind; with --group/--unicast, the address receivers name in --from.
    #[arg(long, value_name = "ADDR:PORT")]
    pub bind: Option<SocketAddr>,
    /// With --group/--unicast: how many receivers must complete for exit
    /// code 0: `all` (every receiver that joined; a slow one holds the
    /// session to its pace) or a number (a receiver whose RTT stays 8× the
    /// median and 50 ms above it for 5 s is then evicted, so the others
    /// keep theirs). Fewer: exit code 3, after the report.
    #[arg(long, default_value = "all", value_name = "N|all")]
    pub require: Requirement,
    #[command(flatten)]
    pub session: SessionSendArgs,
    #[command(flatten)]
    pub catch_up: CatchUpArgs,
    /// With --group/--unicast: keep the session's state in FILE while it
    /// runs (removed once --require is met). Started again with the same
    /// FILE and files after a crash, the sender resumes that session where
    /// every receiver had acknowledged; receivers that restart or rejoin
    /// keep what their .part files hold.
    #[arg(long, value_name = "FILE", conflicts_with = "to")]
    pub restart_file: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputOpts,
    /// Statistics lines while the transfer runs.
    #[command(flatten)]
    pub stats: StatsOpts,
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

fn any_addr(like: SocketAddr) -> SocketAddr {
    match like {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("literal"),
        SocketAddr::V6(_) => "[::]:0".parse().expect("literal"),
    }
}

/// Sends `args.files`; returns the report.
pub fn send(args: &SendArgs) -> Result<TransferReport> {
    let (feed, tree) = open_file_feed(&args.files, args.out.quiet)?;
    args.net.security.warn_if_unprotected(args.out.quiet);
    if args.group.is_some() || args.unicast {
        let Some(path) = &args.restart_file else {
            return send_session(args, feed, tree, None);
        };
        let (restart, at) = RestartFile::open(path, &tree.manifest, random_session_id())?;
        let feed = match at {
            Some(at) => resumed_feed(&tree, at, args.out.quiet)?,
            None => feed,
        };
        send_session(args, feed, tree, Some((restart, at)))
    } else {
        send_unicast(args, feed)
    }
}

fn send_unicast(args: &SendArgs, mut feed: FileFeed<TreeReader>) -> Result<TransferReport> {
    let session_only = args.session.session_flags_given();
    anyhow::ensure!(
        session_only.is_empty(),
        "{} apply to sessions (--group or --unicast), not to --to",
        session_only.join(", ")
    );
    let peer = resolve(args.to.as_deref().context("--to or --group is required")?)?;
    let bind = args.bind.unwrap_or(any_addr(peer));
    let endpoint = UdpEndpoint::bind(bind).with_context(|| format!("cannot bind {bind}"))?;
    let path = args.net.fit_path(&endpoint, peer);
    let clock = Clock::new();
    let mut driver = args.net.driver_on(endpoint, clock)?;
    let config = SessionConfig {
        token_key: fanout_io::random_token_key(),
        ..SessionConfig::unicast(args.net.transport_on(Side::Sender, Some(&path))?)
    };
    let mut sender = SessionSender::new(config, random_session_id(), clock.now());
    sender.offer(clock.now(), peer);
    let size = feed.manifest().size;
    let header_len = feed.header_len();
    let bar = bytes_bar(size, "send", args.out.quiet || args.out.json);
    let mut started = None;
    // Why the receiver left, if it did (a reset, a stall, silence).
    let mut left: Option<String> = None;
    let mut lines = FileSessionLines::open(&args.stats, header_len + size)?;
    crate::interrupt::watch();
    let stats = driver.run(&mut sender, |s, now| {
        if crate::interrupt::interrupted() {
            s.abort("the sender was interrupted");
            return true;
        }
        lines.tick(now, s);
        feed.feed(s);
        while let Some(e) = s.poll_event() {
            if let SessionEvent::MemberLeft { reason, .. } = e {
                left = Some(reason);
            }
        }
        if s.bytes_acked_by_all() > 0 {
            started.get_or_insert(now);
        }
        bar.set_position(s.bytes_acked_by_all().saturating_sub(header_len).min(size));
        s.close_reason().is_some()
    })?;
    bar.finish_and_clear();
    if crate::interrupt::interrupted() {
        return Err(crate::interrupt::error("the receiver was told"));
    }
    lines.finish(clock.now(), &sender)?;
    if let Some(e) = feed.take_error() {
        return Err(anyhow::Error::new(e).context("read error"));
    }
    let what = match &left {
        Some(why) => format!("transfer to {peer} (the receiver left: {why})"),
        None => format!("transfer to {peer}"),
    };
    let reason = require_completed(sender.close_reason(), &sender.stats().drops, what)?;
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = sender.stats();
    let transport = vec![
        ("datagrams_sent", st.datagrams_sent),
        ("datagrams_received", st.datagrams_received),
        ("payload_bytes_sent", st.payload_bytes_sent),
        ("retransmitted_bytes", st.repair_bytes),
        ("acks_received", st.acks_received),
        ("recovery_episodes", st.recovery_episodes),
        ("rto_events", st.rto_events),
        ("spurious_repairs", st.spurious_repairs),
        ("recoveries_undone", st.recoveries_undone),
        ("send_syscalls", stats.send_syscalls),
    ];
    let mut report = sent_report(
        peer.to_string(),
        &feed,
        seconds,
        &reason,
        transport,
        &st.drops,
        &stats,
        Vec::new(),
        args.net.security.mode(),
    );
    report.path = Some(path);
    Ok(report)
}

/// The feed of a session resumed at stream offset `at`: the body hashed
/// first (its trailer), then read from there.
fn resumed_feed(tree: &SourceTree, at: u64, quiet: bool) -> Result<FileFeed<TreeReader>> {
    let m = &tree.manifest;
    let header = m.encode().len() as u64;
    if !quiet {
        eprintln!(
            "fanout: resuming the session at byte {} of {} (hashing the files first)",
            at - header,
            m.size
        );
    }
    let mut hasher = blake3::Hasher::new();
    let hashed = std::io::copy(&mut tree.reader(), &mut hasher).context("cannot read the files")?;
    anyhow::ensure!(
        hashed == m.size,
        "the files changed since they were scanned"
    );
    let mut reader = tree.reader();
    std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(at - header))?;
    Ok(FileFeed::resume_from(
        reader,
        m.clone(),
        at,
        *hasher.finalize().as_bytes(),
    )?)
}

/// The session's configuration: the session flags', and under `--require
/// all` no outlier eviction. A receiver behind a slow link holds the
/// session to its pace and its own queue inflates its RTT (115 ms against
/// a 5 ms median behind 10 Mbit/s and 100 packets); evicted for that, it
/// would turn a slower success into exit code 3. Stalled receivers are
/// still evicted (`--stall-timeout`).
fn session_config(
    args: &SendArgs,
    transport: fanout_transport::TransportConfig,
    group: Option<SocketAddr>,
) -> SessionConfig {
    let mut config = args.session.config(transport, group, JoinPolicy::CatchUp);
    if args.require == Requirement::All {
        config.outlier_eviction = None;
    }
    config
}

/// A session of `feed`'s files; with a restart file, its session and the
/// stream offset it resumes at (if any).
fn send_session(
    args: &SendArgs,
    mut feed: FileFeed<TreeReader>,
    tree: SourceTree,
    mut restart: Option<(RestartFile, Option<u64>)>,
) -> Result<TransferReport> {
    args.session.validate()?;
    let spec = SessionSpec {
        group: args.group,
        unicast: args.unicast,
        bind: args
            .bind
            .context("a session needs --bind ADDR:PORT (the address receivers name in --from)")?,
        ttl: args.session.ttl,
    };
    let (endpoint, mut delivery) = open_sender_endpoint(&spec)?;
    // Receivers' routes are not known yet: a group's route, or the flag.
    let path = delivery.group().map(|g| args.net.fit_path(&endpoint, g));
    let transport = || args.net.transport_on(Side::Sender, path.as_ref());
    let clock = Clock::new();
    let mut driver = args.net.driver_on(endpoint, clock)?;
    // Late joiners get the live stream from the current position and
    // the missed prefix by unicast catch-up (`catch_up`).
    let config = session_config(args, transport()?, delivery.group());
    let source = FilePrefix { tree };
    let session_id = restart
        .as_ref()
        .map_or_else(random_session_id, |(r, _)| r.session);
    let mut sender = SessionSender::new(config, session_id, clock.now());
    let resumed_at = restart.as_ref().and_then(|(_, at)| *at);
    if let Some(at) = resumed_at {
        anyhow::ensure!(
            sender.start_stream_at(at),
            "cannot start the session at {at}"
        );
    }
    let mut session = CatchUpServer::new(
        sender,
        Box::new(source),
        transport()?,
        args.catch_up.config(),
        random_rng(),
    );
    let size = feed.manifest().size;
    let header_len = feed.header_len();
    let mut view = SessionView::new(Some(size), &delivery.peer_label(), args.out);
    view.wait_for(args.session.wait_for);
    let mut started = None;
    let mut lines = FileSessionLines::open(&args.stats, header_len + size)?;
    crate::interrupt::watch();
    let stats = run_session(
        &mut driver,
        &mut session,
        &mut delivery,
        |s| &mut **s,
        |s, now| {
            if crate::interrupt::interrupted() {
                s.abort("the sender was interrupted");
                return true;
            }
            feed.feed(s);
            view.poll_events(s);
            if s.bytes_acked_by_all() > 0 {
                started.get_or_insert(now);
            }
            let position = s.bytes_acked_by_all().saturating_sub(header_len).min(size);
            view.update(s, now, position);
            if let Some((r, _)) = restart.as_mut() {
                if s.member_count() > 0 {
                    r.update(now, s.bytes_acked_by_all());
                }
            }
            lines.tick(now, s);
            s.close_reason().is_some() && s.active() == 0
        },
    );
    view.finish();
    let stats = stats?;
    lines.finish(clock.now(), &session)?;
    if crate::interrupt::interrupted() {
        let told = format!("{} receivers were told", session.member_count());
        return Err(crate::interrupt::error(&told));
    }
    if let Some(e) = feed.take_error() {
        return Err(anyhow::Error::new(e).context("read error"));
    }
    let reason = require_completed(
        session.close_reason(),
        &session.stats().drops,
        format_args!("session to {}", delivery.peer_label()),
    )
    .map_err(|e| view.explain(e))?;
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = session.stats();
    let cu = session.catch_up_stats().clone();
    let mut members = view.member_reports(&session);
    for m in members.iter_mut() {
        // A late joiner whose catch-up of the prefix failed did not get the
        // file. (One that asked for none held the prefix: it re-attached or
        // resumed at its position.)
        if m.outcome == Outcome::Completed && session.catch_up_outcome(m.id) == Some(false) {
            m.outcome = Outcome::Incomplete;
            m.reason = Some("its catch-up of the missed prefix failed".into());
        }
    }
    let tally = ReceiverTally::count(&members, args.require);
    if let Some((r, _)) = &restart {
        if tally.met {
            r.remove();
        }
    }
    let mut transport = file_session_counters(st, &cu, stats.send_syscalls);
    transport.extend([
        ("resumed_at", resumed_at.unwrap_or(0)),
        ("recv_syscalls", stats.recv_syscalls),
        ("loop_iterations", stats.iterations),
        ("gso_refused", stats.gso_refused),
        ("coalesced_waits", stats.coalesced_waits),
    ]);
    let mut report = sent_report(
        delivery.peer_label(),
        &feed,
        seconds,
        &reason,
        transport,
        &st.drops,
        &stats,
        members,
        args.net.security.mode(),
    );
    report.delivery = Some(delivery.report());
    report.path = view.fitted_path(path);
    report.receivers = Some(tally);
    Ok(report)
}

/// The report of a completed send.
#[allow(clippy::too_many_arguments)] // one report, assembled once per mode
fn sent_report(
    peer: String,
    feed: &FileFeed<TreeReader>,
    seconds: f64,
    close: &CloseReason,
    transport: Vec<(&'static str, u64)>,
    drops: &fanout_core::stats::DropCounters,
    io: &fanout_io::RunStats,
    members: Vec<MemberReport>,
    protection: &'static str,
) -> TransferReport {
    let bytes = feed.manifest().size;
    TransferReport {
        role: "send",
        files: Vec::new(),
        peer,
        file: match feed.manifest() {
            m if m.is_tree() => format!("{} ({})", m.name, fanout_io::files_label(m)),
            m => m.name.clone(),
        },
        bytes,
        seconds,
        goodput_bps: goodput_bps(bytes, seconds),
        blake3: feed.blake3_hex(),
        verified: true,
        close: close.to_string(),
        transport: transport.into_iter().collect(),
        drops: drops_map(drops),
        injected_drops: io.impair_rx.dropped(),
        peak_rss_bytes: peak_rss_bytes(),
        members,
        delivery: None,
        path: None,
        protection,
        receivers: None,
    }
}

/// Runs `fanout send`: the report, then exit code 3 if fewer receivers
/// completed than `--require` asks.
pub fn run(args: SendArgs) -> Result<()> {
    let report = send(&args)?;
    report.print(args.out.json);
    match report.receivers.as_ref().and_then(|t| t.unmet()) {
        Some(unmet) => Err(unmet.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> SendArgs {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            send: SendArgs,
        }
        let argv = [
            "send",
            "f",
            "--group",
            "239.1.1.1:7000",
            "--bind",
            "127.0.0.1:6000",
        ];
        <Wrap as clap::Parser>::parse_from(argv.iter().chain(extra)).send
    }

    fn config(extra: &[&str]) -> SessionConfig {
        let a = args(extra);
        session_config(&a, Default::default(), a.group)
    }

    #[test]
    fn slow_receivers_are_evicted_only_when_not_all_are_required() {
        // Every receiver required: a slow one is waited for (its queue's RTT
        // does not evict it), a stalled one still is.
        let all = config(&[]);
        assert_eq!(all.outlier_eviction, None);
        assert_eq!(all.stall_timeout, std::time::Duration::from_secs(10));
        // Some may be lost: the others keep their pace.
        let seven = config(&["--require", "7"]);
        assert!(seven.outlier_eviction.is_some());
    }
}
