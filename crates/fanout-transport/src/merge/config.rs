//! Merger configuration and counters.

use super::children::MAX_CHILDREN;
use super::join::JoinMerge;
use fanout_core::stats::DropCounters;
use std::net::SocketAddr;
use std::time::Duration;

/// How a [`super::Merger`] runs.
#[derive(Debug, Clone)]
pub struct MergerConfig {
    /// Where merged CONNECTs and ACKs go: the session sender or a higher
    /// merger.
    pub parent: SocketAddr,
    /// When the merged CONNECT goes upstream.
    pub join: JoinMerge,
    /// A child silent this long is forgotten (soft state). Children are
    /// silent while no data flows; the merger PINGs one silent for a third
    /// of this, and every twelfth of it after, so a live child answers
    /// well before it expires.
    pub child_timeout: Duration,
    /// A child behind a sibling whose cumulative point has not advanced
    /// for this long is evicted (RESET "stalled"), so one stalled or bogus
    /// child cannot hold its whole subtree. Keep it below the parent's own
    /// stall timeout (the session sender's default is 10 s), or the parent
    /// evicts the whole merger first.
    pub child_stall: Duration,
    /// Most children (clamped to [`MAX_CHILDREN`]).
    pub max_children: usize,
    /// First CONNECT retry interval; doubles per attempt up to 2^6 times
    /// (as a joining receiver's, `docs/wire.md` §5.1).
    pub connect_rto: Duration,
    /// Give up joining upstream after this long.
    pub handshake_timeout: Duration,
    /// Close (resetting the children) after hearing nothing from the
    /// parent for this long.
    pub parent_timeout: Duration,
    /// Send every admitted child a keep-alive (a PADDING datagram) this
    /// often, so children with a fallback chain can tell a crashed merger
    /// from a quiet one (`crate::reattach`). `None`: no keep-alives.
    pub keepalive: Option<Duration>,
    /// Ancestors to re-attach to, in order, when the parent (a merger, not
    /// the last of this list) falls silent for `parent_silence`: its
    /// parent, ..., then the session sender. Empty: never re-attach.
    pub fallback: Vec<SocketAddr>,
    /// Silence after which a parent that is not the last ancestor is taken
    /// for dead (it must send keep-alives more often than this).
    pub parent_silence: Duration,
    /// With keep-alives on: evict (RESET "silent") a child behind a sibling
    /// that sent nothing for this long — a crashed lower merger, whose
    /// children re-attach here, would otherwise hold the merged ACK for
    /// `child_stall`. `None`: only `child_stall` applies.
    pub child_silence: Option<Duration>,
    /// The secret children's tokens derive from (`docs/wire.md` §4.10).
    /// The default is fixed and public, for tests and the simulator only:
    /// a runtime on a real network injects a random one
    /// (`fanout_io::random_token_key`, as `fanout merge` does).
    pub token_key: crate::session::TokenKey,
    /// Keys that protect every datagram, both ways (`crate::protection`):
    /// the merger joins its parent with them and checks its children's
    /// handshakes against them. `None`: an unprotected session.
    pub protection: Option<crate::protection::Protection>,
}

impl MergerConfig {
    /// Defaults for a merger reporting to `parent`: the merged CONNECT goes
    /// 200 ms after the first child asked (or once [`MAX_CHILDREN`] asked),
    /// children are forgotten after 30 s of silence.
    pub fn new(parent: SocketAddr) -> Self {
        MergerConfig {
            parent,
            join: JoinMerge::CountOrTimer(MAX_CHILDREN, Duration::from_millis(200)),
            child_timeout: Duration::from_secs(30),
            child_stall: Duration::from_secs(5),
            max_children: MAX_CHILDREN,
            connect_rto: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(10),
            parent_timeout: Duration::from_secs(30),
            keepalive: None,
            fallback: Vec::new(),
            parent_silence: crate::reattach::DEFAULT_PARENT_SILENCE,
            child_silence: None,
            token_key: crate::session::TokenKey::from_seed(0),
            protection: None,
        }
    }
}

/// A merger's counters.
#[derive(Debug, Clone, Default)]
pub struct MergerStats {
    /// Children admitted.
    pub children_joined: u64,
    /// Children that left (CLOSE or RESET).
    pub children_left: u64,
    /// Children forgotten after their soft-state timeout.
    pub children_expired: u64,
    /// Children evicted for stalling behind their siblings.
    pub children_evicted: u64,
    /// PINGs to children silent for a third of `child_timeout`.
    pub probes: u64,
    /// Datagrams to children whose address is not validated, not sent:
    /// they would have exceeded three times what the address sent
    /// ([`crate::address_budget`]).
    pub amplification_limited: u64,
    /// Children dropped because their address was not validated within
    /// the validation timeout of their ACCEPT.
    pub unvalidated_evicted: u64,
    /// CONNECTs refused (merger full or closed).
    pub children_refused: u64,
    /// Stateless RETRYs sent under a join flood (unprotected;
    /// `docs/wire.md` §4.11): the join left no state.
    pub retries_sent: u64,
    /// Datagrams from addresses that are neither the parent nor a child
    /// (and not a CONNECT): forged or stale, dropped.
    pub unknown_children: u64,
    /// ACK frames received from children.
    pub acks_in: u64,
    /// Merged ACKs sent upstream.
    pub acks_out: u64,
    /// Merged ACKs built at once because a child repeated its ACK.
    pub duplicate_forwards: u64,
    /// Children's duplicate ACKs not forwarded: a duplicate at the same
    /// merged point already went up (`super::mctcp` rule 2).
    pub duplicates_suppressed: u64,
    /// Merged CONNECTs sent upstream (with retries).
    pub connects_out: u64,
    /// Datagrams relayed from the parent to children.
    pub relayed: u64,
    /// Relays dropped because the queue was full.
    pub relay_overflow: u64,
    /// Keep-alives sent to children.
    pub keepalives: u64,
    /// Children that re-attached here from a crashed merger (resume
    /// CONNECTs accepted).
    pub children_resumed: u64,
    /// Re-attachments of this merger to an ancestor after its parent fell
    /// silent.
    pub reattaches: u64,
    /// New group keys passed down to the children (protected sessions).
    pub group_keys_passed: u64,
    /// REKEYs sent upstream: a child that knew the group key left early.
    pub rekeys_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Input refused, by reason.
    pub drops: DropCounters,
}
