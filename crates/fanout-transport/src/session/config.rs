//! Session policies (TCP-SMO §II), with the paper's defaults.

use super::eviction::OutlierEviction;
use super::member_token::TokenKey;
use super::policy::{RepairPolicy, RttPolicy, WindowPolicy};
use crate::config::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// Most members one session admits by default (a peer-controlled count).
pub const DEFAULT_MAX_MEMBERS: usize = 4096;

/// When the send buffer may release data (TCP-SMO §II.C, `snd.una` of the
/// master).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReleasePolicy {
    /// Once every member acknowledged it (default).
    SlowestReceiver,
    /// Once this fraction (0–1] of members acknowledged it; the rest may be
    /// evicted when they fall below the buffer.
    Quorum(f64),
    /// Once every member acknowledged it, or once the application needs its
    /// room: a write into a full buffer releases the oldest data already
    /// multicast at least once, so slow members never block the writer; a
    /// member still missing released data is evicted when it needs it
    /// repaired (the buffer-limited release of TCP-SMO §II.C).
    BufferLimited,
}

/// How a late joiner enters the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinPolicy {
    /// Bulk (files): members start at offset 0; joins are admitted while
    /// the send buffer still holds offset 0.
    FromStart,
    /// Live: a member starts at the current send position.
    Live,
    /// Bulk with late joiners: members that join before any data was sent
    /// start at 0; a later joiner starts at the current send position, and
    /// the ACCEPT's start offset tells it which prefix `[0, start)` it must
    /// fetch out of band (the file CLI's unicast catch-up).
    CatchUp,
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
    /// Multicast or unicast repairs (TCP-SMO §II.E; default: multicast when
    /// more than 5% of members miss a segment).
    pub repair: RepairPolicy,
    /// The session window from the members' (TCP-SMO §II.F `G`; default
    /// [`WindowPolicy::Auto`]: the acker's window, or the equation rate for
    /// messages with deadlines).
    pub window: WindowPolicy,
    /// The session RTT from the members' (TCP-SMO §II.E; default max).
    pub rtt: RttPolicy,
    /// Hold data until this many members joined (bulk sessions).
    pub wait_for_members: usize,
    /// ... or until this long after the session started, whichever first.
    pub wait_at_most: Duration,
    /// Multicast sessions: an OFFER to the group this often (four times as
    /// often until data starts), so a receiver that knows only the group
    /// learns the sender's address from it (`docs/wire.md` §4, "Discovery").
    /// `None`: receivers are told the sender's address.
    pub announce_every: Option<Duration>,
    /// Members admitted at most.
    pub max_members: usize,
    /// A member whose cumulative ACK has not advanced for this long while
    /// data is outstanding to it is evicted.
    pub stall_timeout: Duration,
    /// A member is evicted after more than this many consecutive RTO
    /// expiries.
    pub max_rto_backoffs: u32,
    /// A member whose address is not validated this long after it joined
    /// is evicted ([`crate::address_budget`]). It is PINGed every eighth
    /// of this meanwhile; an honest member validates within a round trip
    /// (it PINGs back on ACCEPT). Until validated, a member does not limit
    /// the session window nor hold its end; its start holds the release
    /// point.
    pub validation_timeout: Duration,
    /// Adaptive ACK frequency (TCP-SMO §II.D): members acknowledge every 2
    /// segments in slow start and after loss, every `steady_ack_every`
    /// otherwise; `None` leaves every member at its own policy.
    pub steady_ack_every: Option<u32>,
    /// Feedback budget: ACK packets per second from all members together.
    /// Each member's data-triggered ACKs are spaced at least
    /// `members / budget` apart, in staggered slots (0 = no time thinning).
    /// See `super::feedback`.
    pub feedback_budget_pps: u32,
    /// Evict members whose window or RTT is far outside the rest
    /// (`super::eviction`; `None` = off).
    pub outlier_eviction: Option<OutlierEviction>,
    /// The secret member tokens derive from ([`TokenKey`], `docs/wire.md` §4.10).
    /// The default is a fixed, public key, fit for tests and the
    /// simulator only: a runtime on a real network injects a random one
    /// (`fanout_io::random_token_key`, as the CLI and the library API do).
    pub token_key: TokenKey,
    /// Real-time mode ([`crate::realtime`]): messages through a pushed
    /// queue, no stale retransmission. `None`: a reliable stream.
    pub realtime: Option<crate::realtime::RealtimeSend>,
}

/// Members admitted but not validated yet, at most; joins beyond are
/// dropped unanswered (counted as `limit_exceeded`), so a flood of forged
/// joins cannot fill the member table.
pub const MAX_UNVALIDATED_MEMBERS: usize = 1024;

/// Unvalidated members from which an unprotected session stops admitting
/// unsolicited joins directly and answers them with a stateless RETRY
/// instead (`docs/wire.md` §4.11): a join flood then creates no state.
/// Honest joiners validate within a round trip, so below this a session
/// is not under a flood and joins cost no extra round trip.
pub const RETRY_ABOVE_UNVALIDATED: usize = 16;

/// Once a join flood made an unprotected session answer with RETRYs, it
/// keeps doing so until no unproven join came for this long: otherwise
/// every forged member evicted would make room for the next one.
pub const RETRY_MODE_HOLD: std::time::Duration = std::time::Duration::from_secs(10);

/// A RETRY's token is valid in the window it was made in and the next one
/// (so for one to two of these).
pub const RETRY_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

impl SessionConfig {
    /// A transfer to one receiver (a session of one, started with
    /// [`super::SessionSender::offer`]): no group, data as soon as the
    /// receiver joined, and the receiver acknowledges every second segment
    /// as TCP does (RFC 5681 §4.2): TCP-SMO §II thins ACKs against the
    /// feedback of many receivers, which one receiver does not produce, and
    /// a thinned ACK clock competes less well against TCP on a shared
    /// bottleneck (measured: 4 thinned transfers got half the rate of a
    /// session acknowledging every 2 segments, `scenarios/smo/fairness-4tcp.toml`).
    pub fn unicast(transport: TransportConfig) -> Self {
        SessionConfig {
            transport,
            group: None,
            wait_for_members: 1,
            steady_ack_every: None,
            ..SessionConfig::default()
        }
    }
}

impl SessionConfig {
    /// A member's RTO bounds: the transport's, with the backed-off timer
    /// at most an eighth of the stall timeout, so a member is retried about
    /// nine times before it counts as stalled rather than five (200 ms
    /// doubling reaches 6.4 s within a 10 s stall timeout). With 10% loss
    /// each way a repair and its ACK both get through 81% of the time: five
    /// failures in a row happen to one loss in 4000, nine to one in 3
    /// million.
    pub fn member_rto(&self) -> fanout_core::rtt::RtoConfig {
        let mut rto = self.transport.rto;
        rto.max = rto.max.min((self.stall_timeout / 8).max(rto.min));
        rto
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            transport: TransportConfig::default(),
            group: None,
            release: ReleasePolicy::SlowestReceiver,
            join: JoinPolicy::FromStart,
            repair: RepairPolicy::Threshold(0.05),
            window: WindowPolicy::Auto,
            rtt: RttPolicy::Maximum,
            wait_for_members: 1,
            wait_at_most: Duration::from_secs(5),
            announce_every: None,
            max_members: DEFAULT_MAX_MEMBERS,
            stall_timeout: Duration::from_secs(10),
            max_rto_backoffs: 10,
            validation_timeout: crate::address_budget::DEFAULT_VALIDATION_TIMEOUT,
            steady_ack_every: Some(8),
            feedback_budget_pps: super::feedback::DEFAULT_FEEDBACK_BUDGET_PPS,
            outlier_eviction: Some(OutlierEviction::default()),
            token_key: TokenKey::from_seed(0),
            realtime: None,
        }
    }
}
