//! The session-sender flags shared by `fanout send`, `fanout stream send`
//! and `fanout relay` (its downstream side), and the parts of
//! [`SessionConfig`] they set.
//!
//! The help texts here are those of `fanout send`; the other commands keep
//! their own wording by overriding them with `mut_arg` (see
//! [`crate::cmd_stream::StreamSendArgs`], [`crate::cmd_relay::RelayArgs`]),
//! so flag names, defaults and `--help` output are unchanged.

use anyhow::{ensure, Result};
use clap::Args;
use fanout_app::catch_up::CatchUpConfig;
use fanout_transport::session::{FairScaling, RepairPolicy, RttPolicy, WindowPolicy};
use fanout_transport::session::{JoinPolicy, ReleasePolicy, SessionConfig};
use fanout_transport::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// How often a multicast session announces itself to its group (four
/// times as often while it waits for receivers): a receiver started with
/// only the group joins within this long.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);

/// Flags of a session sender (the one-to-many engine).
#[derive(Debug, Args)]
pub struct SessionSendArgs {
    /// With --group: start once this many receivers joined ...
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub wait_for: usize,
    /// ... or this many seconds after the sender started, if at least one joined.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub wait_secs: u64,
    /// With --group: multicast TTL (1 = this link only).
    #[arg(long, default_value_t = 1, value_name = "HOPS",
          value_parser = clap::value_parser!(u32).range(1..=255))]
    pub ttl: u32,
    /// With --group: repair by multicast when more than this share of
    /// receivers miss a segment, otherwise by unicast.
    #[arg(
        help_heading = "Session tuning",
        long,
        default_value_t = 0.05,
        value_name = "SHARE"
    )]
    pub repair_threshold: f64,
    /// With --group: how losses are repaired. `segment`: each lost segment
    /// by itself (multicast or unicast by --repair-threshold); `coded`:
    /// Reed–Solomon repair symbols per block of --repair-block segments,
    /// as many as the receiver missing the most of the block needs (one
    /// symbol replaces a different lost segment at each receiver),
    /// per-segment repair (multicast when at least 2 receivers miss it)
    /// where that is no cheaper; `auto`: `coded` for a multicast session,
    /// `segment` without multicast or for real-time messages.
    #[arg(help_heading = "Session tuning", long, default_value = "auto", value_name = "POLICY", value_parser = ["auto", "segment", "coded"])]
    pub repair: String,
    /// With --repair coded: segments per block (2-64).
    #[arg(
        help_heading = "Session tuning",
        long,
        default_value_t = 32,
        value_name = "SEGMENTS"
    )]
    pub repair_block: usize,
    /// With --group: evict a receiver that makes no progress for this long.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub stall_timeout: u64,
    /// With --group: when the send buffer frees data. `slowest`:
    /// once every receiver acknowledged it; `quorum:SHARE`: once that share
    /// of receivers did (one missing freed data is evicted); `buffer`: also
    /// whenever the writer needs room, so a slow receiver never blocks the
    /// others (it is evicted when it misses freed data).
    #[arg(help_heading = "Session tuning", long, default_value = "slowest", value_name = "POLICY", value_parser = parse_release)]
    pub release: ReleasePolicy,
    /// With --group: the session window. `auto`: `equation`
    /// for messages with deadlines (--latency), `acker` otherwise; `acker`:
    /// one window driven by the receiver a TCP flow would get the least
    /// through, so receivers that lose independently do not each cut it
    /// (one TCP flow's rate to the worst receiver,
    /// docs/experiments/lossy.md); `min`: the smallest receiver window (the
    /// seed's behaviour), TCP-fair on every path but, with receivers that
    /// lose independently, far below one TCP flow's rate; `fair`: essentially fair, the median receiver's window kept
    /// between 1 and 1 + log2 N times a TCP flow's on the worst path, so a
    /// few lossy receivers do not hold back all the others; `equation`: a
    /// smooth rate, RFC 5348's equation at the best receiver's loss event
    /// rate and RTT, at most 1 + log2 N times the worst receiver's (one
    /// receiver: its TCP-friendly rate); `equation-min`: the worst
    /// receiver's equation rate, as TFMCC (docs/experiments/realtime.md).
    #[arg(help_heading = "Session tuning", long, default_value = "auto", value_name = "POLICY", value_parser = parse_window)]
    pub window_policy: WindowPolicy,
    /// With --group: the session RTT that paces sending. `max`:
    /// the largest receiver RTT; `pNN`: the largest among the fastest NN%
    /// of receivers (e.g. `p90`).
    #[arg(help_heading = "Session tuning", long, default_value = "max", value_name = "POLICY", value_parser = parse_rtt)]
    pub session_rtt: RttPolicy,
}

/// Flags of the catch-up server of a file session (`fanout send --group`,
/// `fanout relay --spool`): how late joiners get the prefix they missed.
#[derive(Debug, Args)]
pub struct CatchUpArgs {
    /// While the session runs, late joiners' catch-ups together send at
    /// most one byte per this many bytes the session sends (the rest once
    /// it ended), so they barely slow the others.
    #[arg(help_heading = "Session tuning", long, default_value_t = 32, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub catch_up_share: u64,
}

impl CatchUpArgs {
    /// The catch-up server's configuration.
    pub fn config(&self) -> CatchUpConfig {
        CatchUpConfig {
            session_bytes_per_catch_up_byte: self.catch_up_share,
            ..CatchUpConfig::default()
        }
    }
}

/// `--release`: `slowest`, `quorum:SHARE` (0 < SHARE ≤ 1) or `buffer`.
fn parse_release(text: &str) -> Result<ReleasePolicy, String> {
    match text {
        "slowest" => Ok(ReleasePolicy::SlowestReceiver),
        "buffer" => Ok(ReleasePolicy::BufferLimited),
        _ => {
            let share = text
                .strip_prefix("quorum:")
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|f| *f > 0.0 && *f <= 1.0)
                .ok_or("expected slowest, buffer or quorum:SHARE with 0 < SHARE <= 1")?;
            Ok(ReleasePolicy::Quorum(share))
        }
    }
}

/// `--window-policy`: `auto`, `min`, `acker`, `fair` (the simulator's `fair`
/// defaults: median window, a = b = 1, f(N) = 1 + log2 N), `equation` (the
/// real-time default) or `equation-min` (the worst member's rate).
fn parse_window(text: &str) -> Result<WindowPolicy, String> {
    match text {
        "auto" => Ok(WindowPolicy::Auto),
        "min" => Ok(WindowPolicy::Minimum),
        "acker" => Ok(WindowPolicy::Acker),
        "equation" => Ok(WindowPolicy::REALTIME),
        "equation-min" => Ok(WindowPolicy::EQUATION_WORST),
        "fair" => Ok(WindowPolicy::EssentiallyFair {
            percentile: 0.5,
            a: 1.0,
            b: 1.0,
            scaling: FairScaling::Log2,
        }),
        _ => Err("expected auto, min, acker, fair, equation or equation-min".into()),
    }
}

/// `--session-rtt`: `max` or `pNN` (0 < NN ≤ 100).
fn parse_rtt(text: &str) -> Result<RttPolicy, String> {
    if text == "max" {
        return Ok(RttPolicy::Maximum);
    }
    text.strip_prefix('p')
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p <= 100.0)
        .map(|p| RttPolicy::Percentile(p / 100.0))
        .ok_or_else(|| "expected max or pNN with 0 < NN <= 100 (e.g. p90)".into())
}

impl SessionSendArgs {
    /// Checks the flags that clap cannot: `--repair-threshold` is a share
    /// in [0, 1].
    /// The session-only flags given other values than their defaults (for
    /// `send --to`, a transfer to one receiver, where they mean nothing).
    pub fn session_flags_given(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        let mut note = |changed: bool, flag: &'static str| {
            if changed {
                given.push(flag);
            }
        };
        note(self.wait_for != 1, "--wait-for");
        note(self.wait_secs != 10, "--wait-secs");
        note(self.ttl != 1, "--ttl");
        note(self.repair_threshold != 0.05, "--repair-threshold");
        note(self.repair != "auto", "--repair");
        note(self.repair_block != 32, "--repair-block");
        note(self.stall_timeout != 10, "--stall-timeout");
        note(self.release != ReleasePolicy::SlowestReceiver, "--release");
        note(self.window_policy != WindowPolicy::Auto, "--window-policy");
        note(self.session_rtt != RttPolicy::Maximum, "--session-rtt");
        given
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(
            (0.0..=1.0).contains(&self.repair_threshold),
            "--repair-threshold must be between 0 and 1"
        );
        ensure!(
            (2..=64).contains(&self.repair_block),
            "--repair-block must be between 2 and 64"
        );
        Ok(())
    }

    /// The repair policy `--repair` names for a session with a multicast
    /// group or without, of real-time messages or of a reliable stream.
    /// `auto` codes where coding can pay: a multicast session of whole
    /// segments, where the coded policy still repairs each block by the
    /// cheaper of symbols and per-segment copies. Without a group every
    /// repair is a unicast copy anyway, and real-time messages are
    /// repaired only while in time, segment by segment.
    pub fn repair_policy(&self, multicast: bool, realtime: bool) -> RepairPolicy {
        let coded = match self.repair.as_str() {
            "coded" => true,
            "auto" => multicast && !realtime,
            _ => false,
        };
        if coded {
            RepairPolicy::Coded {
                block: self.repair_block,
                uplink_ratio: 1.0,
            }
        } else {
            RepairPolicy::Threshold(self.repair_threshold)
        }
    }

    /// The session configuration these flags describe: at least one member
    /// awaited, `--wait-secs` at most, the repair `--repair` names, and a stall timeout
    /// of at least 1 s; everything else is [`SessionConfig::default`].
    pub fn config(
        &self,
        transport: TransportConfig,
        group: Option<SocketAddr>,
        join: JoinPolicy,
    ) -> SessionConfig {
        SessionConfig {
            transport,
            group,
            join,
            wait_for_members: self.wait_for.max(1),
            wait_at_most: Duration::from_secs(self.wait_secs),
            repair: self.repair_policy(group.is_some(), false),
            stall_timeout: Duration::from_secs(self.stall_timeout.max(1)),
            release: self.release,
            window: self.window_policy,
            rtt: self.session_rtt,
            token_key: fanout_io::random_token_key(),
            // Receivers told only the group learn the sender from these.
            announce_every: Some(ANNOUNCE_EVERY),
            ..SessionConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_flags_parse_and_reject_nonsense() {
        assert_eq!(parse_release("slowest"), Ok(ReleasePolicy::SlowestReceiver));
        assert_eq!(parse_release("buffer"), Ok(ReleasePolicy::BufferLimited));
        assert_eq!(parse_release("quorum:0.8"), Ok(ReleasePolicy::Quorum(0.8)));
        for bad in ["quorum:0", "quorum:1.5", "quorum:", "fastest"] {
            assert!(parse_release(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_window("min"), Ok(WindowPolicy::Minimum));
        assert_eq!(parse_window("auto"), Ok(WindowPolicy::Auto));
        assert_eq!(parse_window("acker"), Ok(WindowPolicy::Acker));
        assert_eq!(parse_window("equation"), Ok(WindowPolicy::REALTIME));
        assert!(matches!(
            parse_window("fair"),
            Ok(WindowPolicy::EssentiallyFair { .. })
        ));
        assert!(parse_window("max").is_err());
        assert_eq!(parse_rtt("max"), Ok(RttPolicy::Maximum));
        assert_eq!(parse_rtt("p90"), Ok(RttPolicy::Percentile(0.9)));
        for bad in ["p0", "p101", "90", "pxx"] {
            assert!(parse_rtt(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_repair_codes_multicast_sessions_of_whole_segments_only() {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            session: SessionSendArgs,
        }
        let args = |extra: &[&str]| {
            let argv = ["send"].iter().chain(extra).copied();
            <Wrap as clap::Parser>::parse_from(argv).session
        };
        let coded = RepairPolicy::Coded {
            block: 32,
            uplink_ratio: 1.0,
        };
        let threshold = RepairPolicy::Threshold(0.05);
        let auto = args(&[]);
        assert_eq!(auto.repair_policy(true, false), coded, "the default");
        assert_eq!(auto.repair_policy(false, false), threshold, "no group");
        assert_eq!(auto.repair_policy(true, true), threshold, "real time");
        let segment = args(&["--repair", "segment"]);
        assert_eq!(segment.repair_policy(true, false), threshold);
        let forced = args(&["--repair", "coded", "--repair-block", "16"]);
        let block16 = RepairPolicy::Coded {
            block: 16,
            uplink_ratio: 1.0,
        };
        assert_eq!(forced.repair_policy(true, true), block16);
    }
}
