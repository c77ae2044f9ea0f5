//! The one option a session sender is opened with (TCP-SMO §III: the
//! server is an ordinary listen/accept plus one option naming the group,
//! port and policies), and the receiver's counterpart.

use crate::DriverConfig;
use fanout_transport::session::{JoinPolicy, ReleasePolicy, SessionConfig};
use fanout_transport::session::{RepairPolicy, RttPolicy, WindowPolicy};
use fanout_transport::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// The group and policies of one session, with builder methods over
/// [`SessionConfig`] (its defaults follow TCP-SMO §II: release at the
/// slowest receiver, multicast repair above 5% missing; 10 s stall
/// eviction).
///
/// ```
/// use fanout_io::api::SessionOptions;
/// use std::time::Duration;
/// let opts = SessionOptions::group(Some("239.1.1.1:7000".parse().unwrap()))
///     .wait_for(3)
///     .wait_at_most(Duration::from_secs(2))
///     .repair_threshold(0.1);
/// assert_eq!(opts.config().wait_for_members, 3);
/// assert!(SessionOptions::unicast().config().group.is_none());
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    config: SessionConfig,
    ttl: u32,
    session_id: Option<u64>,
    driver: DriverConfig,
}

impl SessionOptions {
    /// A session multicast to `group` (`G:port`, a multicast address of the
    /// bind address's IP version), or with `None` fanned out by unicast, one
    /// copy per receiver (no multicast route needed).
    pub fn group(group: Option<SocketAddr>) -> Self {
        SessionOptions {
            config: SessionConfig {
                group,
                ..SessionConfig::default()
            },
            ttl: 1,
            session_id: None,
            driver: api_driver_config(),
        }
    }

    /// `SessionOptions::group(None)`: unicast fan-out.
    pub fn unicast() -> Self {
        SessionOptions::group(None)
    }

    /// Hold data until `n ≥ 1` receivers joined (or [`Self::wait_at_most`]
    /// passed with at least one).
    pub fn wait_for(mut self, n: usize) -> Self {
        self.config.wait_for_members = n.max(1);
        self
    }

    /// Start with fewer than [`Self::wait_for`] receivers this long after
    /// `bind`; also how long blocking calls wait for a first receiver before
    /// failing with [`std::io::ErrorKind::TimedOut`].
    pub fn wait_at_most(mut self, d: Duration) -> Self {
        self.config.wait_at_most = d;
        self
    }

    /// When the send buffer releases data (default: the slowest receiver).
    pub fn release(mut self, policy: ReleasePolicy) -> Self {
        self.config.release = policy;
        self
    }

    /// How late joiners enter (default [`JoinPolicy::FromStart`]; the API
    /// has no catch-up channel, so [`JoinPolicy::CatchUp`] late joiners just
    /// start mid-stream, as with [`JoinPolicy::Live`]).
    pub fn join(mut self, policy: JoinPolicy) -> Self {
        self.config.join = policy;
        self
    }

    /// How lost segments are repaired.
    pub fn repair(mut self, policy: RepairPolicy) -> Self {
        self.config.repair = policy;
        self
    }

    /// TCP-SMO's repair rule (§II.E): multicast when more than `share` (0–1,
    /// values outside are clamped) of the receivers miss a segment.
    pub fn repair_threshold(self, share: f64) -> Self {
        let share = if share.is_nan() { 0.05 } else { share };
        self.repair(RepairPolicy::Threshold(share.clamp(0.0, 1.0)))
    }

    /// How the session window follows the receivers' (TCP-SMO §II.F `G`;
    /// default the minimum, strictly TCP-fair).
    pub fn window(mut self, policy: WindowPolicy) -> Self {
        self.config.window = policy;
        self
    }

    /// How the session RTT (pacing) follows the receivers' (default the
    /// maximum).
    pub fn rtt(mut self, policy: RttPolicy) -> Self {
        self.config.rtt = policy;
        self
    }

    /// Evict a receiver whose cumulative ACK has not moved for this long.
    pub fn stall_timeout(mut self, d: Duration) -> Self {
        self.config.stall_timeout = d;
        self
    }

    /// Receivers admitted at most (a peer-controlled count).
    pub fn max_members(mut self, n: usize) -> Self {
        self.config.max_members = n.max(1);
        self
    }

    /// ACK packets per second from all receivers together (0 = no
    /// time-based thinning).
    pub fn feedback_budget(mut self, pps: u32) -> Self {
        self.config.feedback_budget_pps = pps;
        self
    }

    /// Per-receiver transport settings (windows, congestion control, pacing).
    pub fn transport(mut self, transport: TransportConfig) -> Self {
        self.config.transport = transport;
        self
    }

    /// Multicast TTL / hop limit (default 1: this link only).
    pub fn ttl(mut self, hops: u32) -> Self {
        self.ttl = hops;
        self
    }

    /// The session id (default: random from the OS).
    pub fn session_id(mut self, id: u64) -> Self {
        self.session_id = Some(id);
        self
    }

    /// Every policy, for those without a builder method (outlier
    /// eviction, ACK frequency, RTO backoffs, and any policy the session
    /// engine gains); its `group` field is the one [`Self::group`] set.
    pub fn config_mut(&mut self) -> &mut SessionConfig {
        &mut self.config
    }

    /// The session configuration these options describe.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The runtime's settings (impairment for tests, batching).
    pub fn driver_mut(&mut self) -> &mut DriverConfig {
        &mut self.driver
    }

    pub(crate) fn parts(&self) -> (SessionConfig, u32, Option<u64>, DriverConfig) {
        (
            self.config.clone(),
            self.ttl,
            self.session_id,
            self.driver.clone(),
        )
    }
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions::unicast()
    }
}

/// The runtime settings the API uses: the CLI's (ACKs are pumped at least
/// every 256 received datagrams).
pub(crate) fn api_driver_config() -> DriverConfig {
    DriverConfig {
        max_recv_per_step: 256,
        ..DriverConfig::default()
    }
}

/// How a [`super::Subscriber`] connects.
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    pub(crate) transport: TransportConfig,
    pub(crate) driver: DriverConfig,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            transport: TransportConfig::default(),
            driver: api_driver_config(),
        }
    }
}

impl SubscribeOptions {
    /// Give up connecting after this long (default 10 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.transport.handshake_timeout = d;
        self
    }

    /// Transport settings (receive window, ACK policy, idle timeout); this
    /// replaces the whole configuration, so call it before
    /// [`Self::connect_timeout`].
    pub fn transport(mut self, transport: TransportConfig) -> Self {
        self.transport = transport;
        self
    }

    /// The runtime's settings (impairment for tests, batching).
    pub fn driver_mut(&mut self) -> &mut DriverConfig {
        &mut self.driver
    }
}
