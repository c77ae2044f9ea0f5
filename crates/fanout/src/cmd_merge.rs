//! `fanout merge --listen ADDR:PORT --parent HOST:PORT`: an MCTCP ACK merger
//! (`docs/mctcp.md`; MCTCP §IV–§V).
//!
//! Children — receivers run with `fanout recv --merger`, or lower mergers
//! whose `--parent` is this one's `--listen` — send their CONNECT and ACKs
//! here; the merger sends one merged CONNECT and merged ACKs to its parent
//! (the session sender or a higher merger), and relays the parent's control
//! frames and repairs down. Data still reaches the receivers from the
//! sender (its group, or its unicast copies through the tree when the
//! sender fans out by unicast). One session per run: the merger exits when
//! the parent ends the session (CLOSE or RESET), when the parent falls
//! silent, or when its join times out.

use crate::report::{drops_map, peak_rss_bytes, OutputOpts};
use crate::security_opts::{pin_at, SecurityOpts, Side};
use anyhow::{bail, Context, Result};
use clap::Args;
use fanout_io::{Clock, Driver, DriverConfig, UdpEndpoint};
use fanout_transport::merge::{JoinMerge, Merger, MergerConfig, MergerStats};
use fanout_transport::CloseReason;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

/// How often a merger tells its children it is alive: a quarter of the
/// 1 s silence after which they re-attach elsewhere.
const KEEPALIVE: Duration = Duration::from_millis(250);

/// Arguments of `fanout merge`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  # four receivers report here; one merged flow goes to the sender
  fanout merge --listen 192.0.2.5:7100 --parent 192.0.2.1:6000 --children 4
  fanout recv --group 239.1.1.1:7000 --from 192.0.2.1:6000 --merger 192.0.2.5:7100 -o out/

  # protected: a pre-shared key on every host, or key pairs per hop
  fanout merge --listen 192.0.2.5:7100 --parent 192.0.2.1:6000 --psk-file session.psk
  fanout merge --listen 192.0.2.5:7100 --parent 192.0.2.1:6000 \\
      --key merger.key --sender-key sender.key.pub --allow-keys children.txt
  fanout recv ... --merger 192.0.2.5:7100 --key recv.key \\
      --sender-key sender.key.pub --merger-key merger.key.pub")]
pub struct MergeArgs {
    /// Local address the children send their feedback to (receivers name it
    /// in `fanout recv --merger`, lower mergers in `--parent`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Where merged feedback goes: the session sender (its `--bind`
    /// address) or a higher merger (its `--listen` address).
    #[arg(long, value_name = "HOST:PORT")]
    pub parent: String,
    /// Join the parent's session as soon as this many children asked
    /// (default: only by --join-ms) ...
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub children: Option<u64>,
    /// ... or this many milliseconds after the first child asked (children
    /// joining later are admitted at once, without a new join upstream).
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub join_ms: u64,
    /// Forget a child silent for this many seconds (soft state).
    #[arg(long, default_value_t = 30, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub child_timeout: u64,
    /// Evict a child whose progress stalled this many seconds behind its
    /// siblings (keep it below the sender's stall timeout, 10 s by default).
    #[arg(long, default_value_t = 5, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub child_stall: u64,
    /// Give up after this many seconds without hearing the parent, once
    /// joined.
    #[arg(long, default_value_t = 30, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub parent_timeout: u64,
    /// Ancestors above --parent to re-attach to, in order, if the parent
    /// (a merger) falls silent for 1 s: e.g. its parent, ..., the sender.
    /// The subtree continues from its merged position (`docs/mctcp.md`).
    /// With --key, `HOST:PORT=KEY` gives each one's public key (64 hex
    /// digits or a .pub file); one without is pinned by --sender-key.
    #[arg(long, value_name = "HOST:PORT[=KEY],...", value_delimiter = ',',
          value_parser = crate::security_opts::parse_peer)]
    pub fallback: Vec<crate::security_opts::PeerArg>,
    /// Evict a child that sent nothing for this many milliseconds while a
    /// sibling is ahead (a crashed lower merger; 0 = only --child-stall).
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    pub child_silence_ms: u64,
    /// Exit if no child joined within this many seconds (0 = wait forever).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    pub wait: u64,
    #[command(flatten)]
    pub security: SecurityOpts,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// What `fanout merge --json` prints at the end.
#[derive(Debug, Serialize)]
pub struct MergeReport {
    /// "merge".
    pub role: &'static str,
    /// The local address children reported to.
    pub listen: String,
    /// The parent.
    pub parent: String,
    /// Why the merger stopped.
    pub close: String,
    /// "none", "psk", "keys" or "keys+psk" (`docs/security.md`).
    pub protection: &'static str,
    /// From start to end, seconds.
    pub seconds: f64,
    /// Merger counters (children, ACKs in and out, relays, …).
    pub transport: BTreeMap<&'static str, u64>,
    /// Input dropped, by reason.
    pub drops: BTreeMap<&'static str, u64>,
    /// The socket's counters (datagrams, syscalls, refused sends).
    pub io: BTreeMap<&'static str, u64>,
    /// Peak resident memory of this process, bytes (Linux VmHWM).
    pub peak_rss_bytes: Option<u64>,
}

impl MergeReport {
    /// Prints the report: JSON on stdout, or one human line on stderr.
    pub fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(self).expect("serialisable")
            );
            return;
        }
        let get = |k| self.transport.get(k).copied().unwrap_or(0);
        eprintln!(
            "merged {} ACKs from {} children into {} to {} in {:.2} s ({})",
            get("acks_in"),
            get("children_joined"),
            get("acks_out"),
            self.parent,
            self.seconds,
            self.close,
        );
    }
}

/// The merger's counters by name.
fn counters(st: &MergerStats) -> BTreeMap<&'static str, u64> {
    [
        ("children_joined", st.children_joined),
        ("children_left", st.children_left),
        ("children_expired", st.children_expired),
        ("children_evicted", st.children_evicted),
        ("unvalidated_evicted", st.unvalidated_evicted),
        ("amplification_limited", st.amplification_limited),
        ("children_refused", st.children_refused),
        ("retries_sent", st.retries_sent),
        ("unknown_children", st.unknown_children),
        ("acks_in", st.acks_in),
        ("acks_out", st.acks_out),
        ("duplicate_forwards", st.duplicate_forwards),
        ("duplicates_suppressed", st.duplicates_suppressed),
        ("connects_out", st.connects_out),
        ("relayed", st.relayed),
        ("relay_overflow", st.relay_overflow),
        ("keepalives", st.keepalives),
        ("children_resumed", st.children_resumed),
        ("reattaches", st.reattaches),
        ("group_keys_passed", st.group_keys_passed),
        ("rekeys_sent", st.rekeys_sent),
        ("datagrams_received", st.datagrams_received),
        ("datagrams_sent", st.datagrams_sent),
    ]
    .into_iter()
    .collect()
}

/// Runs one merger until its session ends; returns its report. `bound` (if
/// given) learns the local address once bound (port 0 → chosen port).
pub fn merge(args: &MergeArgs, bound: Option<mpsc::Sender<SocketAddr>>) -> Result<MergeReport> {
    let parent = crate::cmd_send::resolve(&args.parent)?;
    let endpoint = UdpEndpoint::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = endpoint.local_addr();
    if !args.out.quiet && !args.out.json {
        eprintln!("fanout: merging on {local} for {parent}");
    }
    args.security
        .warn_if_unprotected(args.out.quiet || args.out.json);
    let mut protection = args.security.protection(Side::Merger)?;
    if let Some(tx) = bound {
        let _ = tx.send(local);
    }
    let clock = Clock::new();
    let driver_config = DriverConfig {
        max_recv_per_step: 256,
        ..DriverConfig::default()
    };
    let mut driver = Driver::new(endpoint, clock, driver_config)?;
    let config = MergerConfig {
        join: match args.children {
            Some(n) => JoinMerge::CountOrTimer(n as usize, Duration::from_millis(args.join_ms)),
            None => JoinMerge::Timer(Duration::from_millis(args.join_ms)),
        },
        child_timeout: Duration::from_secs(args.child_timeout),
        child_stall: Duration::from_secs(args.child_stall),
        parent_timeout: Duration::from_secs(args.parent_timeout),
        // Children with a fallback chain tell a crashed merger from a quiet
        // one by these (`fanout_transport::reattach`).
        keepalive: Some(KEEPALIVE),
        fallback: args
            .fallback
            .iter()
            .map(|a| {
                let addr = crate::cmd_send::resolve(&a.addr)?;
                pin_at(&mut protection, addr, a.key);
                Ok(addr)
            })
            .collect::<Result<Vec<_>>>()?,
        child_silence: (args.child_silence_ms > 0)
            .then(|| Duration::from_millis(args.child_silence_ms)),
        token_key: fanout_io::random_token_key(),
        protection,
        ..MergerConfig::new(parent)
    };
    let start = clock.now();
    let mut merger = Merger::new(config, start);
    let give_up = (args.wait > 0).then(|| start + Duration::from_secs(args.wait));
    let mut gave_up = false;
    let io = driver.run(&mut merger, |m, now| {
        if m.close_reason().is_some() {
            return true;
        }
        gave_up = m.stats().children_joined == 0 && give_up.is_some_and(|t| now >= t);
        gave_up
    })?;
    let st = merger.stats();
    let close = match merger.close_reason() {
        Some(r) => r.to_string(),
        None => format!("no child within {} s", args.wait),
    };
    let report = MergeReport {
        role: "merge",
        listen: local.to_string(),
        parent: parent.to_string(),
        close,
        protection: args.security.mode(),
        seconds: (clock.now() - start).as_secs_f64(),
        transport: counters(&st),
        drops: drops_map(&st.drops),
        io: [
            ("datagrams_received", io.datagrams_received),
            ("datagrams_sent", io.datagrams_sent),
            ("send_would_block", io.send_would_block),
            ("send_no_buffer", io.send_no_buffer),
            ("send_errors", io.send_errors),
            ("recv_errors", io.recv_errors),
        ]
        .into_iter()
        .collect(),
        peak_rss_bytes: peak_rss_bytes(),
    };
    report.print(args.out.json);
    if gave_up || merger.close_reason() != Some(&CloseReason::Completed) {
        bail!("merger for {parent} failed: {}", report.close);
    }
    Ok(report)
}

/// Runs `fanout merge`.
pub fn run(args: MergeArgs) -> Result<()> {
    merge(&args, None).map(|_| ())
}
