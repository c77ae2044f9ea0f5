//! `fanout send FILE --to HOST:PORT` (unicast) and
//! `fanout send FILE --group G:PORT --bind ADDR:PORT` (a TCP-SMO session).

use crate::file_feed::FileFeed;
use crate::net_opts::{random_session_id, TransportOpts};
use crate::progress::bytes_bar;
use crate::report::{
    drops_map, goodput_bps, peak_rss_bytes, MemberReport, OutputOpts, TransferReport,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use fanout_io::{Clock, Driver, UdpEndpoint};
use fanout_transport::session::{SessionConfig, SessionSender};
use fanout_transport::{CloseReason, Sender};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `fanout send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The file to send.
    pub file: PathBuf,
    /// A single receiver (`fanout recv --listen ...`), e.g. `192.0.2.7:7000`.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "group")]
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
    /// Local address to bind; with --group, the address receivers name in --from.
    #[arg(long, value_name = "ADDR:PORT")]
    pub bind: Option<SocketAddr>,
    /// With --group: start once this many receivers joined ...
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub wait_for: usize,
    /// ... or this many seconds after the sender started, if at least one joined.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub wait_secs: u64,
    /// With --group: multicast TTL (1 = this link only).
    #[arg(long, default_value_t = 1, value_name = "HOPS")]
    pub ttl: u32,
    /// With --group: repair by multicast when more than this share of
    /// receivers miss a segment, otherwise by unicast.
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    pub repair_threshold: f64,
    /// With --group: evict a receiver that makes no progress for this long.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub stall_timeout: u64,
    #[command(flatten)]
    pub out: OutputOpts,
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

/// Sends `args.file`; returns the report.
pub fn send(args: &SendArgs) -> Result<TransferReport> {
    let feed = FileFeed::open(&args.file)?;
    match args.group {
        Some(group) => send_session(args, feed, group),
        None => send_unicast(args, feed),
    }
}

fn send_unicast(args: &SendArgs, mut feed: FileFeed) -> Result<TransferReport> {
    let peer = resolve(args.to.as_deref().context("--to or --group is required")?)?;
    let bind = args.bind.unwrap_or(any_addr(peer));
    let endpoint = UdpEndpoint::bind(bind).with_context(|| format!("cannot bind {bind}"))?;
    let clock = Clock::new();
    let mut driver = Driver::new(endpoint, clock, args.net.driver())?;
    let mut sender = Sender::connect(args.net.transport(), peer, random_session_id(), clock.now());
    let size = feed.manifest().size;
    let header_len = feed.header_len();
    let bar = bytes_bar(size, "send", args.out.quiet || args.out.json);
    let mut started = None;
    let stats = driver.run(&mut sender, |s, now| {
        feed.feed(s);
        if s.bytes_acked() > 0 {
            started.get_or_insert(now);
        }
        bar.set_position(s.bytes_acked().saturating_sub(header_len).min(size));
        s.is_closed()
    })?;
    bar.finish_and_clear();
    if let Some(e) = feed.take_error() {
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
    let transport = vec![
        ("datagrams_sent", st.datagrams_sent),
        ("datagrams_received", st.datagrams_received),
        ("payload_bytes_sent", st.payload_bytes_sent),
        ("retransmitted_bytes", st.retransmitted_bytes),
        ("acks_received", st.acks_received),
        ("recovery_episodes", st.recovery_episodes),
        ("rto_events", st.rto_events),
        ("send_syscalls", stats.send_syscalls),
    ];
    Ok(sent_report(
        peer.to_string(),
        &feed,
        seconds,
        &reason,
        transport,
        &st.drops,
        &stats,
        Vec::new(),
    ))
}

fn send_session(args: &SendArgs, mut feed: FileFeed, group: SocketAddr) -> Result<TransferReport> {
    if !group.ip().is_multicast() {
        bail!("--group {group}: {} is not a multicast address", group.ip());
    }
    if !(0.0..=1.0).contains(&args.repair_threshold) {
        bail!("--repair-threshold must be between 0 and 1");
    }
    let bind = args
        .bind
        .context("--group needs --bind ADDR:PORT (the address receivers name in --from)")?;
    let endpoint = UdpEndpoint::bind(bind).with_context(|| format!("cannot bind {bind}"))?;
    match (group.ip(), bind.ip()) {
        (IpAddr::V4(_), IpAddr::V4(local)) => {
            endpoint.set_multicast_ttl_v4(args.ttl)?;
            endpoint.set_multicast_loop_v4(true)?;
            if !local.is_unspecified() {
                endpoint.set_multicast_if_v4(local)?;
            }
        }
        (IpAddr::V6(_), IpAddr::V6(_)) => endpoint.set_multicast_hops_v6(args.ttl)?,
        _ => bail!("--group {group} and --bind {bind} are of different IP versions"),
    }
    let clock = Clock::new();
    let mut driver = Driver::new(endpoint, clock, args.net.driver())?;
    let config = SessionConfig {
        transport: args.net.transport(),
        group: Some(group),
        wait_for_members: args.wait_for.max(1),
        wait_at_most: Duration::from_secs(args.wait_secs),
        multicast_repair_threshold: args.repair_threshold,
        stall_timeout: Duration::from_secs(args.stall_timeout.max(1)),
        ..SessionConfig::default()
    };
    let mut session = SessionSender::new(config, random_session_id(), clock.now());
    let size = feed.manifest().size;
    let header_len = feed.header_len();
    let bar = bytes_bar(size, "send", args.out.quiet || args.out.json);
    let mut started = None;
    let mut left = Vec::new();
    let stats = driver.run(&mut session, |s, now| {
        feed.feed(s);
        while let Some(e) = s.poll_event() {
            if let fanout_transport::session::SessionEvent::MemberLeft { addr, reason, .. } = e {
                if !args.out.quiet && !args.out.json {
                    bar.println(format!("receiver {addr} left: {reason}"));
                }
                left.push(MemberReport {
                    addr: addr.to_string(),
                    acked_bytes: 0,
                    srtt_ms: 0.0,
                    left: Some(reason),
                });
            }
        }
        if s.bytes_acked_by_all() > 0 {
            started.get_or_insert(now);
        }
        bar.set_message(format!("{} receivers", s.member_count()));
        bar.set_position(s.bytes_acked_by_all().saturating_sub(header_len).min(size));
        s.close_reason().is_some()
    })?;
    bar.finish_and_clear();
    if let Some(e) = feed.take_error() {
        return Err(e);
    }
    let reason = session
        .close_reason()
        .cloned()
        .unwrap_or(CloseReason::IdleTimeout);
    if reason != CloseReason::Completed {
        bail!("session to {group} failed: {reason}");
    }
    let seconds = started.map_or(0.0, |t| (clock.now() - t).as_secs_f64());
    let st = session.stats();
    let mut members: Vec<MemberReport> = session
        .members()
        .map(|(_, addr, acked, _, srtt)| MemberReport {
            addr: addr.to_string(),
            acked_bytes: acked,
            srtt_ms: srtt.as_secs_f64() * 1e3,
            left: None,
        })
        .collect();
    members.extend(left);
    let transport = vec![
        ("datagrams_sent", st.datagrams_sent),
        ("datagrams_received", st.datagrams_received),
        ("data_segments_multicast", st.data_segments),
        ("multicast_repairs", st.multicast_repairs),
        ("unicast_repairs", st.unicast_repairs),
        ("acks_received", st.acks_received),
        ("members_joined", st.members_joined),
        ("members_left", st.members_left),
        ("send_syscalls", stats.send_syscalls),
    ];
    Ok(sent_report(
        group.to_string(),
        &feed,
        seconds,
        &reason,
        transport,
        &st.drops,
        &stats,
        members,
    ))
}

/// The report of a completed send.
#[allow(clippy::too_many_arguments)] // one report, assembled once per mode
fn sent_report(
    peer: String,
    feed: &FileFeed,
    seconds: f64,
    close: &CloseReason,
    transport: Vec<(&'static str, u64)>,
    drops: &fanout_core::stats::DropCounters,
    io: &fanout_io::RunStats,
    members: Vec<MemberReport>,
) -> TransferReport {
    let bytes = feed.manifest().size;
    TransferReport {
        role: "send",
        peer,
        file: feed.manifest().name.clone(),
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
    }
}

/// Runs `fanout send`.
pub fn run(args: SendArgs) -> Result<()> {
    send(&args)?.print(args.out.json);
    Ok(())
}
