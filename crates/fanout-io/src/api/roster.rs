//! The sender handle's view of its members: the accept backlog and each
//! member's outcome, fed from [`SessionEvent`]s as the driver thread
//! produces them. Both are bounded (joins are peer-controlled).

use fanout_core::{Engine, Instant, Transmit};
use fanout_transport::session::{Departure, MemberId, SessionEvent, SessionSender};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// A receiver admitted to the session, as [`super::SessionListener::accept`]
/// returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Its id in the session.
    pub id: MemberId,
    /// Its address (where it connected from).
    pub addr: SocketAddr,
    /// Stream offset at which its delivery starts (0 unless it joined late).
    pub start: u64,
}

/// How one member's part of the session ended (or stands).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Still in the session (acknowledged everything once the session
    /// completed).
    Active,
    /// It reset its membership (its application failed, was stopped or
    /// dropped the connection), with the reason it gave.
    Failed(String),
    /// The sender removed it (stalled, unreachable, silent, ...), with why.
    Evicted(String),
}

/// One member's record in a [`super::SessionSummary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberOutcome {
    /// Who.
    pub member: MemberInfo,
    /// How it ended.
    pub outcome: Outcome,
}

/// [`SessionSender`] plus the bookkeeping the blocking API reads.
pub(crate) struct RosterEngine {
    pub session: SessionSender,
    /// Joined, not yet returned by `accept` (oldest first).
    pub backlog: VecDeque<MemberInfo>,
    /// Every member seen, by id (bounded: see `absorb`).
    pub records: BTreeMap<MemberId, MemberOutcome>,
    /// Ids of members that left, oldest first (evicted from `records`
    /// beyond `limit`).
    left_order: VecDeque<MemberId>,
    /// Records and backlog entries kept at most.
    limit: usize,
    /// Left members whose record was dropped to stay within `limit`.
    pub forgotten: u64,
    /// Members ever joined.
    pub joined: u64,
    /// Members whose upstream bytes (or end) wait to be read (session
    /// relay; at most one entry per member).
    pub upstream_ready: BTreeMap<MemberId, SocketAddr>,
}

impl RosterEngine {
    pub fn new(session: SessionSender, max_members: usize) -> Self {
        RosterEngine {
            session,
            backlog: VecDeque::new(),
            records: BTreeMap::new(),
            left_order: VecDeque::new(),
            limit: max_members.max(1),
            forgotten: 0,
            joined: 0,
            upstream_ready: BTreeMap::new(),
        }
    }

    /// Moves the session's pending events into the roster. Records of left
    /// members beyond `limit` are dropped oldest first, and the accept
    /// backlog keeps the newest `limit` joins (a listen backlog).
    pub fn absorb(&mut self) {
        while let Some(ev) = self.session.poll_event() {
            match ev {
                SessionEvent::MemberJoined { id, addr, start } => {
                    let member = MemberInfo { id, addr, start };
                    self.joined += 1;
                    if self.backlog.len() >= self.limit {
                        self.backlog.pop_front();
                    }
                    self.backlog.push_back(member.clone());
                    self.records.insert(
                        id,
                        MemberOutcome {
                            member,
                            outcome: Outcome::Active,
                        },
                    );
                }
                SessionEvent::MemberLeft {
                    id,
                    reason,
                    departure,
                    ..
                } => {
                    self.upstream_ready.remove(&id);
                    if let Some(r) = self.records.get_mut(&id) {
                        r.outcome = match departure {
                            Departure::MemberReset { .. } => Outcome::Failed(reason),
                            Departure::Evicted => Outcome::Evicted(reason),
                        };
                        self.left_order.push_back(id);
                    }
                    while self.left_order.len() > self.limit {
                        if let Some(old) = self.left_order.pop_front() {
                            self.records.remove(&old);
                            self.forgotten += 1;
                        }
                    }
                }
                SessionEvent::Upstream { id, addr } => {
                    self.upstream_ready.insert(id, addr);
                }
                SessionEvent::Finished
                | SessionEvent::Closed(_)
                | SessionEvent::DatagramsFitted { .. } => {}
            }
        }
    }
}

impl Engine for RosterEngine {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.session.handle_datagram(now, from, datagram);
        self.absorb();
    }
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let t = self.session.poll_transmit(now, buf);
        self.absorb();
        t
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.session.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
        self.absorb();
    }
    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        self.session.max_wake_delay()
    }
}
