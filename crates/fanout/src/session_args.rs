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
use fanout_transport::session::policy::RepairPolicy;
use fanout_transport::session::{JoinPolicy, SessionConfig};
use fanout_transport::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

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
    #[arg(long, default_value_t = 1, value_name = "HOPS")]
    pub ttl: u32,
    /// With --group: repair by multicast when more than this share of
    /// receivers miss a segment, otherwise by unicast.
    #[arg(long, default_value_t = 0.05, value_name = "SHARE")]
    pub repair_threshold: f64,
    /// With --group: how losses are repaired. `segment`: each lost segment
    /// by itself (multicast or unicast by --repair-threshold); `coded`:
    /// Reed–Solomon repair symbols per block of --repair-block segments,
    /// as many as the receiver missing the most of the block needs (one
    /// symbol replaces a different lost segment at each receiver),
    /// per-segment repair where that is no cheaper.
    #[arg(long, default_value = "segment", value_name = "POLICY", value_parser = ["segment", "coded"])]
    pub repair: String,
    /// With --repair coded: segments per block (2-64).
    #[arg(long, default_value_t = 32, value_name = "SEGMENTS")]
    pub repair_block: usize,
    /// With --group: evict a receiver that makes no progress for this long.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub stall_timeout: u64,
}

impl SessionSendArgs {
    /// Checks the flags that clap cannot: `--repair-threshold` is a share
    /// in [0, 1].
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

    /// The session configuration these flags describe: at least one member
    /// awaited, `--wait-secs` at most, threshold repair, and a stall timeout
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
            repair: if self.repair == "coded" {
                RepairPolicy::Coded {
                    block: self.repair_block,
                    uplink_ratio: 1.0,
                }
            } else {
                RepairPolicy::Threshold(self.repair_threshold)
            },
            stall_timeout: Duration::from_secs(self.stall_timeout.max(1)),
            ..SessionConfig::default()
        }
    }
}
