//! End-of-run summaries: one human line set, or JSON for scripts.

use crate::outcome::Outcome;
use fanout_app::catch_up::CatchUpStats;
use fanout_core::stats::{DropCounters, DropReason};
use fanout_transport::session::SessionStats;
use fanout_transport::CloseReason;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Display;

/// How a sending engine ended (a missing reason counts as an idle timeout);
/// an error naming `what` unless it completed, with
/// [`version_hint`] from the engine's `drops`.
pub fn require_completed(
    reason: Option<&CloseReason>,
    drops: &DropCounters,
    what: impl Display,
) -> anyhow::Result<CloseReason> {
    let reason = reason.cloned().unwrap_or(CloseReason::IdleTimeout);
    if reason != CloseReason::Completed {
        anyhow::bail!("{what} failed: {reason}{}", version_hint(drops));
    }
    Ok(reason)
}

/// Why a transfer may have failed although a peer was there: datagrams of
/// another fanout wire version arrived (an older or newer build never
/// misreads ours, it drops them, and we drop its: `unsupported_version`).
/// Empty if none did.
pub fn version_hint(drops: &DropCounters) -> String {
    match drops.get(DropReason::UnsupportedVersion) {
        0 => String::new(),
        n => format!(
            " ({n} datagrams of another fanout wire version arrived and were dropped: \
             both ends must run a fanout build speaking wire version {})",
            fanout_transport::wire::VERSION
        ),
    }
}

/// A file session sender's counters (`send --group`, `relay`): the session's
/// and its catch-ups'.
pub fn file_session_counters(
    st: &SessionStats,
    cu: &CatchUpStats,
    send_syscalls: u64,
) -> Vec<(&'static str, u64)> {
    vec![
        ("datagrams_sent", st.datagrams_sent),
        ("datagrams_received", st.datagrams_received),
        ("data_segments_multicast", st.data_segments),
        ("fanout_copies", st.fanout_copies),
        ("multicast_repairs", st.multicast_repairs),
        ("unicast_repairs", st.unicast_repairs),
        ("spurious_repairs", st.spurious_repairs),
        ("recoveries_undone", st.recoveries_undone),
        ("acks_received", st.acks_received),
        ("members_joined", st.members_joined),
        ("members_left", st.members_left),
        ("unvalidated_evicted", st.unvalidated_evicted),
        ("retries_sent", st.retries_sent),
        ("amplification_limited", st.amplification_limited),
        ("group_key_updates", st.group_key_updates),
        ("segment_lists_sent", st.segment_lists_sent),
        ("segment_lists_resent", st.segment_lists_resent),
        ("segment_details_sent", st.segment_details_sent),
        ("reneged_segments", st.reneged_segments),
        ("catch_ups_completed", cu.completed),
        ("catch_ups_failed", cu.failed),
        ("catch_up_bytes", cu.bytes),
        ("catch_up_requests_refused", cu.refused),
        ("catch_up_bytes_during_session", cu.bytes_during_session),
        ("session_datagram_bytes", cu.session_bytes),
        ("send_syscalls", send_syscalls),
    ]
}

/// Output flags shared by the commands that report a transfer.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct OutputOpts {
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Drop counters as a label → count map (non-zero only).
pub fn drops_map(d: &DropCounters) -> BTreeMap<&'static str, u64> {
    d.nonzero().map(|(r, n)| (r.label(), n)).collect()
}

/// Summary of one transfer, as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct TransferReport {
    /// "send" or "recv".
    pub role: &'static str,
    /// Peer address.
    pub peer: String,
    /// File name (a tree's: its label or the output directory, with its
    /// count of files).
    pub file: String,
    /// A tree's files where they landed (receivers), in body order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// File size in bytes.
    pub bytes: u64,
    /// Wall time from first to last byte, seconds.
    pub seconds: f64,
    /// File bytes per second × 8 over `seconds`.
    pub goodput_bps: f64,
    /// BLAKE3 of the file, hex.
    pub blake3: String,
    /// True if the hash was verified end to end.
    pub verified: bool,
    /// Why the session ended.
    pub close: String,
    /// Engine counters.
    pub transport: BTreeMap<&'static str, u64>,
    /// Input dropped, by reason.
    pub drops: BTreeMap<&'static str, u64>,
    /// Datagrams dropped by injected loss.
    pub injected_drops: u64,
    /// Peak resident memory of this process, bytes (Linux VmHWM).
    pub peak_rss_bytes: Option<u64>,
    /// Session receivers (one-to-many sends only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberReport>,
    /// How a session's data went out: multicast, or unicast fan-out (and
    /// why, when that was an automatic fallback). Session senders only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery: Option<crate::session_net::DeliveryReport>,
    /// The datagram size and the route MTU it was fitted to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<crate::net_opts::PathReport>,
    /// The session's protection: "none", "psk", "keys" or "keys+psk"
    /// (`docs/security.md`).
    pub protection: &'static str,
    /// Session senders: receivers by outcome, and whether `--require` held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receivers: Option<crate::outcome::ReceiverTally>,
}

/// One receiver of a session, in the sender's report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemberReport {
    /// Its member id in the session.
    pub id: u64,
    /// Its address.
    pub addr: String,
    /// Stream offset its delivery started at (0, or where a late joiner
    /// entered).
    pub start_offset: u64,
    /// Stream bytes it acknowledged (cumulative ACK offset).
    pub acked_bytes: u64,
    /// Its smoothed RTT, milliseconds.
    pub srtt_ms: f64,
    /// Its congestion window, bytes.
    pub cwnd_bytes: u64,
    /// ACKs the sender processed from it.
    pub acks: u64,
    /// Loss-recovery episodes it went through.
    pub recovery_episodes: u64,
    /// Retransmission timeouts it caused.
    pub rtos: u64,
    /// Bytes repaired for it (unicast or within multicast repairs).
    pub repaired_bytes: u64,
    /// How its part ended: completed, failed (its own reason), evicted
    /// (the sender's reason) or incomplete.
    pub outcome: crate::outcome::Outcome,
    /// Why, unless it completed: the receiver's own words for a failure,
    /// the sender's for an eviction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why it left, if it did (as the session recorded it).
    pub left: Option<String>,
    /// Receivers it stands for: 1, or an ACK merger's subtree count (its
    /// ROSTER, `docs/wire.md` §4.8).
    pub receivers: u64,
    /// An ACK merger's receivers and how far each got, as its roster last
    /// reported them (empty for a receiver of its own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subtree: Vec<SubtreeReceiverReport>,
}

/// One receiver behind an ACK merger, in the sender's report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SubtreeReceiverReport {
    /// Its address (as its merger sees it).
    pub addr: String,
    /// Stream bytes it acknowledged (cumulative ACK offset), as last
    /// reported.
    pub acked_bytes: u64,
    /// "via merger ADDR (member ID)".
    pub via: String,
}

impl TransferReport {
    /// Prints the report on stderr only (JSON or human lines): for commands
    /// whose stdout carries data (`fanout stream recv`).
    pub fn eprint(&self, json: bool) {
        if json {
            eprintln!(
                "{}",
                serde_json::to_string_pretty(self).expect("serialisable")
            );
        } else {
            self.print(false);
        }
    }

    /// Prints the report: JSON on stdout, or a few human lines on stderr.
    pub fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(self).expect("serialisable")
            );
            return;
        }
        eprintln!(
            "{} {}{} ({} bytes) {} {} in {:.2} s: {:.1} Mbit/s, blake3 {}{}",
            if self.role == "send" {
                "sent"
            } else {
                "received"
            },
            self.file,
            match self.files.len() {
                0 => String::new(),
                1 => ": 1 file".into(),
                n => format!(": {n} files"),
            },
            self.bytes,
            if self.role == "send" { "to" } else { "from" },
            self.peer,
            self.seconds,
            self.goodput_bps / 1e6,
            &self.blake3[..16],
            if self.verified { " (verified)" } else { "" },
        );
        if let Some(t) = &self.receivers {
            eprintln!("  {}", t.summary());
            // The receivers that did not complete, a screenful at most
            // (the JSON lists every one).
            const SHOWN: usize = 16;
            let others: Vec<&MemberReport> = (self.members.iter())
                .filter(|m| m.outcome != Outcome::Completed)
                .collect();
            for m in others.iter().take(SHOWN) {
                eprintln!(
                    "  {} {}: {}",
                    m.addr,
                    m.outcome.label(),
                    m.reason.as_deref().unwrap_or("no reason given")
                );
            }
            if others.len() > SHOWN {
                eprintln!(
                    "  ... and {} more (--json lists them)",
                    others.len() - SHOWN
                );
            }
        }
        if !self.drops.is_empty() || self.injected_drops > 0 {
            eprintln!(
                "  dropped input: {:?}; injected loss: {}",
                self.drops, self.injected_drops
            );
        }
    }
}

/// Bytes over seconds as bit/s (0 for an instant transfer).
pub fn goodput_bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// Peak resident set size of this process in bytes, from /proc (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Writes `text` to stdout. A reader that went away (`fanout sim | head`)
/// ends the output quietly, as for other Unix tools, instead of a panic.
pub fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
