//! Session policies (SMO §II), with the seed's defaults.

use crate::config::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// Most members one session admits by default (a peer-controlled count).
pub const DEFAULT_MAX_MEMBERS: usize = 4096;

/// When the send buffer may release data (SMO §II, `snd.una` of the master).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReleasePolicy {
    /// Once every member acknowledged it (default).
    SlowestReceiver,
    /// Once this fraction (0–1] of members acknowledged it; the rest may be
    /// evicted when they fall below the buffer.
    Quorum(f64),
}

/// How a late joiner enters the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinPolicy {
    /// Bulk (files): members start at offset 0; joins are admitted while
    /// the send buffer still holds offset 0.
    FromStart,
    /// Live: a member starts at the current send position.
    Live,
}

/// Everything a session sender is configured with.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Per-member transport settings (windows, RTO, congestion control).
    pub transport: TransportConfig,
    /// Where data is multicast: a group address, or `None` to fan out by
    /// unicast to each member (the explicit fallback without multicast).
    pub group: Option<SocketAddr>,
    /// Send-buffer release.
    pub release: ReleasePolicy,
    /// Start and late-join behaviour.
    pub join: JoinPolicy,
    /// A segment missed by more than this fraction of members is repaired
    /// by multicast, otherwise by unicast to those missing it (SMO §II,
    /// default 5%; 0 = always multicast).
    pub multicast_repair_threshold: f64,
    /// Hold data until this many members joined (bulk sessions).
    pub wait_for_members: usize,
    /// ... or until this long after the session started, whichever first.
    pub wait_at_most: Duration,
    /// Members admitted at most.
    pub max_members: usize,
    /// A member whose cumulative ACK has not advanced for this long while
    /// data is outstanding to it is evicted.
    pub stall_timeout: Duration,
    /// A member is evicted after this many consecutive RTO expiries.
    pub max_rto_backoffs: u32,
    /// Adaptive ACK frequency (SMO §II): members acknowledge every 2
    /// segments in slow start and after loss, every `steady_ack_every`
    /// otherwise; `None` leaves every member at its own policy.
    pub steady_ack_every: Option<u32>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            transport: TransportConfig::default(),
            group: None,
            release: ReleasePolicy::SlowestReceiver,
            join: JoinPolicy::FromStart,
            multicast_repair_threshold: 0.05,
            wait_for_members: 1,
            wait_at_most: Duration::from_secs(5),
            max_members: DEFAULT_MAX_MEMBERS,
            stall_timeout: Duration::from_secs(10),
            max_rto_backoffs: 6,
            steady_ack_every: Some(8),
        }
    }
}
