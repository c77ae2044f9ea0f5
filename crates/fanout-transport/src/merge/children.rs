//! A merger's children held as soft state (concast keeps its upstream neighbour
//! list "using soft-state techniques similar to RSVP", MCTCP §II): each child
//! is refreshed by every datagram it sends and forgotten after a timeout
//! without one.
//!
//! Ordered indexes over the children's cumulative points and window right
//! edges make the merge decision ([`super::mctcp`]) O(log N) per ACK; the
//! full meet (SACK intersection) is computed only when a merged ACK is
//! built, O(N · R) for N children of at most R SACK ranges each.

use super::ack_meet::AckSummary;
use super::join::ConnectSummary;
use super::sent::SentLog;
use crate::address_budget::{AddressBudget, DEFAULT_VALIDATION_TIMEOUT};
use crate::wire::WireTimestamp;
use fanout_core::time::Instant;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

/// Most children one merger keeps (its fan-out). Children are
/// peer-controlled: a CONNECT beyond this is refused.
pub const MAX_CHILDREN: usize = 256;

/// One child: a receiver or a lower merger.
#[derive(Debug, Clone)]
pub struct Child {
    /// Id the merger gave it (in the ACCEPT it relayed); never reused.
    pub id: u64,
    /// Options of its CONNECT.
    pub connect: ConnectSummary,
    /// Timestamp of its latest CONNECT (echoed in the ACCEPT relayed to it).
    pub connect_timestamp: WireTimestamp,
    /// When its latest CONNECT arrived.
    pub connect_at: Instant,
    /// Offset at which its delivery starts, once admitted upstream.
    pub start: Option<u64>,
    /// Its acknowledgement state, once admitted upstream (ACCEPT relayed):
    /// until then it has no start offset and takes no part in merged ACKs.
    pub ack: Option<AckSummary>,
    /// Last time any datagram came from it.
    pub last_heard: Instant,
    /// Last time its cumulative point advanced (or it was admitted).
    pub advanced: Instant,
    /// Last time its window's right edge advanced (or it was admitted).
    pub window_moved: Instant,
    /// When its acknowledgement state (and so its timestamp echo) last
    /// arrived.
    pub acked_at: Instant,
    /// The header id it speaks under once its ACCEPT went out (member
    /// tokens, `docs/wire.md` §4.10); 0 before.
    pub token: u64,
    /// What its address was sent while unvalidated
    /// ([`crate::address_budget`]): validated by a datagram under its token.
    pub address: AddressBudget,
    /// Dropped at this time unless validated by then (set when its token
    /// is first given).
    pub validate_by: Option<Instant>,
}

/// The children, by address.
#[derive(Debug)]
pub struct ChildTable {
    children: BTreeMap<SocketAddr, Child>,
    expiry: BTreeSet<(Instant, SocketAddr)>,
    /// (deadline, address) of children given a token but not validated.
    validation: BTreeSet<(Instant, SocketAddr)>,
    /// (cumulative, address) of admitted children.
    cums: BTreeSet<(u64, SocketAddr)>,
    /// (window right edge, address) of admitted children.
    wends: BTreeSet<(u64, SocketAddr)>,
    /// Admitted children reporting SACK ranges (a hole below them).
    sacked: usize,
    next_id: u64,
    timeout: Duration,
    capacity: usize,
}

impl ChildTable {
    /// An empty table forgetting children silent for `timeout`, holding at
    /// most `capacity` (at most [`MAX_CHILDREN`]).
    pub fn new(timeout: Duration, capacity: usize) -> Self {
        ChildTable {
            children: BTreeMap::new(),
            expiry: BTreeSet::new(),
            validation: BTreeSet::new(),
            cums: BTreeSet::new(),
            wends: BTreeSet::new(),
            sacked: 0,
            next_id: 1,
            timeout,
            capacity: capacity.clamp(1, MAX_CHILDREN),
        }
    }

    /// Number of children.
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// True when no further child fits.
    pub fn is_full(&self) -> bool {
        self.children.len() >= self.capacity
    }

    /// The child at `addr`.
    pub fn get(&self, addr: &SocketAddr) -> Option<&Child> {
        self.children.get(addr)
    }

    /// Children in address order.
    pub fn iter(&self) -> impl Iterator<Item = (&SocketAddr, &Child)> {
        self.children.iter()
    }

    /// Adds a child heard at `now`; `None` if the table is full or it is
    /// already known.
    pub fn insert(
        &mut self,
        addr: SocketAddr,
        connect: ConnectSummary,
        connect_timestamp: WireTimestamp,
        now: Instant,
    ) -> Option<&Child> {
        if self.is_full() || self.children.contains_key(&addr) {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.children.insert(
            addr,
            Child {
                id,
                connect,
                connect_timestamp,
                connect_at: now,
                start: None,
                ack: None,
                last_heard: now,
                advanced: now,
                window_moved: now,
                acked_at: now,
                token: 0,
                address: AddressBudget::unvalidated(0),
                validate_by: None,
            },
        );
        self.expiry.insert((now + self.timeout, addr));
        self.children.get(&addr)
    }

    /// A datagram of `bytes` came from child `addr`, under its token if
    /// `echoed`. True if that validated its address just now.
    pub fn on_datagram(&mut self, addr: &SocketAddr, bytes: u64, echoed: bool) -> bool {
        let Some(c) = self.children.get_mut(addr) else {
            return false;
        };
        c.address.on_received(bytes);
        let newly = echoed && c.address.validate();
        if newly {
            if let Some(by) = c.validate_by.take() {
                self.validation.remove(&(by, *addr));
            }
        }
        newly
    }

    /// The token child `addr` speaks under, derived by `make` from its id
    /// the first time (when its ACCEPT first goes out, at `now`: from then
    /// it has [`DEFAULT_VALIDATION_TIMEOUT`] to come back).
    pub fn token(
        &mut self,
        addr: &SocketAddr,
        now: Instant,
        make: impl FnOnce(u64) -> u64,
    ) -> Option<u64> {
        let c = self.children.get_mut(addr)?;
        if c.token == 0 {
            c.token = make(c.id);
            if !c.address.is_validated() {
                let by = now + DEFAULT_VALIDATION_TIMEOUT;
                c.validate_by = Some(by);
                self.validation.insert((by, *addr));
            }
        }
        Some(c.token)
    }

    /// Children given a token that have not come back under it yet.
    pub fn unvalidated(&self) -> usize {
        self.validation.len()
    }

    /// Whether a datagram of `bytes` may go to child `addr` now (charged to
    /// its budget while unvalidated); `None` if it is not a child.
    pub fn try_send(&mut self, addr: &SocketAddr, bytes: u64) -> Option<bool> {
        Some(self.children.get_mut(addr)?.address.try_send(bytes))
    }

    /// Refreshes the soft state of `addr` (it was heard at `now`).
    pub fn touch(&mut self, addr: &SocketAddr, now: Instant) {
        if let Some(c) = self.children.get_mut(addr) {
            self.expiry.remove(&(c.last_heard + self.timeout, *addr));
            c.last_heard = now;
            self.expiry.insert((now + self.timeout, *addr));
        }
    }

    /// Sets the acknowledgement state of `addr` (admits it to merged ACKs
    /// if it had none).
    pub fn set_ack(&mut self, addr: &SocketAddr, ack: AckSummary, now: Instant) {
        let Some(c) = self.children.get_mut(addr) else {
            return;
        };
        if c.ack.as_ref().is_none_or(|o| ack.cumulative > o.cumulative) {
            c.advanced = now;
        }
        if c.ack.as_ref().is_none_or(|o| ack.window_end > o.window_end) {
            c.window_moved = now;
        }
        c.acked_at = now;
        if let Some(old) = &c.ack {
            self.cums.remove(&(old.cumulative, *addr));
            self.wends.remove(&(old.window_end, *addr));
            self.sacked -= usize::from(!old.sack.is_empty());
        }
        self.cums.insert((ack.cumulative, *addr));
        self.wends.insert((ack.window_end, *addr));
        self.sacked += usize::from(!ack.sack.is_empty());
        c.ack = Some(ack);
    }

    /// Admits `addr` to merged ACKs with its delivery starting at `start`
    /// (it holds `[0, start)` and offers its CONNECT window from there).
    pub fn admit(&mut self, addr: &SocketAddr, start: u64, now: Instant) {
        let Some(c) = self.children.get_mut(addr) else {
            return;
        };
        c.start = Some(start);
        let ack = AckSummary::at_start(start, c.connect.window);
        self.set_ack(addr, ack, now);
    }

    /// Gives `addr` the start offset `start` without admitting it to
    /// merged ACKs yet: a child re-attaching from a crashed merger, whose
    /// first ACK decides ([`super::Merger`]).
    pub fn set_start(&mut self, addr: &SocketAddr, start: u64) {
        if let Some(c) = self.children.get_mut(addr) {
            c.start = Some(start);
        }
    }

    /// Admitted children that have held the subtree back for `stall` (a
    /// stalled or bogus child; TCP-SMO §II.C removes such receivers). A
    /// child holds it
    /// * at the merged point (the lowest cumulative point), behind some
    ///   sibling and behind what the parent says it sent (a sibling's claim
    ///   beyond that is not evidence): from when the stream was sent past
    ///   it, or from its last advance if later;
    /// * at the merged window's edge (the lowest right edge) with the
    ///   stream sent up to it: from when the stream reached it, or from
    ///   when its window last moved if later — a window that stays closed
    ///   holds the subtree as surely as a missing ACK.
    ///
    /// Only the holders: a child behind them may be waiting for repairs
    /// the held merged ACK cannot ask for
    /// ([`ChildTable::restart_stall_clocks`]). O(N log H): called on a slow
    /// periodic timer.
    pub fn stalled(&self, now: Instant, stall: Duration, sent: &SentLog) -> Vec<SocketAddr> {
        let (Some(top), Some(low), Some(edge)) = (
            self.front(sent.end()),
            self.min_cumulative(),
            self.min_window_end(),
        ) else {
            return Vec::new();
        };
        // When it began to hold by not advancing, or by not opening its
        // window; whichever is due first.
        let held_since = |c: &Child| {
            let a = c.ack.as_ref()?;
            let behind = (a.cumulative == low && a.cumulative < top)
                .then(|| Some(sent.since(a.cumulative)?.max(c.advanced)))
                .flatten();
            let closed = (a.window_end == edge && edge <= sent.end())
                .then(|| Some(sent.since(edge.saturating_sub(1))?.max(c.window_moved)))
                .flatten();
            behind.into_iter().chain(closed).min()
        };
        self.children
            .iter()
            .filter(|(_, c)| held_since(c).is_some_and(|since| now >= since + stall))
            .map(|(a, _)| *a)
            .collect()
    }

    /// Admitted children behind some sibling that sent nothing for
    /// `silence`: while data flows every live child acknowledges (or
    /// reports a hole), so this is a crashed one — typically a merger whose
    /// children re-attach elsewhere. `sent` bounds the siblings' claims as
    /// in [`ChildTable::stalled`]. O(N): called on a periodic timer.
    ///
    /// Silence counts from when the stream was known sent past the child
    /// (as in [`ChildTable::stalled`]), not from its last datagram alone: a
    /// child idle while nothing was sent (the session not started yet) is
    /// not silent when the first data goes out.
    pub fn silent_behind(
        &self,
        now: Instant,
        silence: Duration,
        sent: &SentLog,
    ) -> Vec<SocketAddr> {
        let Some(top) = self.front(sent.end()) else {
            return Vec::new();
        };
        let silent_since = |c: &Child| {
            let a = c.ack.as_ref().filter(|a| a.cumulative < top)?;
            Some(c.last_heard.max(sent.since(a.cumulative)?))
        };
        self.children
            .iter()
            .filter(|(_, c)| silent_since(c).is_some_and(|t| now >= t + silence))
            .map(|(a, _)| *a)
            .collect()
    }

    /// After holders were evicted: the children that now hold the merged
    /// point may have been waiting for repairs the held merged ACK could
    /// not ask for, so none of them is found stalled before `now + grace`
    /// — unless it also holds the window closed (no repair opens a
    /// window). A short grace, not a fresh stall time: strangers taking
    /// turns at holding must not add up to the parent's stall timeout.
    pub fn restart_stall_clocks(
        &mut self,
        now: Instant,
        sent: u64,
        stall: Duration,
        grace: Duration,
    ) {
        let from = (now + grace).saturating_sub(stall);
        let (Some(low), Some(edge)) = (self.min_cumulative(), self.min_window_end()) else {
            return;
        };
        for c in self.children.values_mut() {
            let Some(a) = &c.ack else { continue };
            let waiting = a.cumulative == low && !(a.window_end == edge && edge <= sent);
            if waiting {
                c.advanced = c.advanced.max(from);
                c.window_moved = c.window_moved.max(from);
            }
        }
    }

    /// The highest cumulative point of the admitted children, at most
    /// `sent` (how far the stream was sent).
    pub fn front(&self, sent: u64) -> Option<u64> {
        self.cums.last().map(|&(top, _)| top.min(sent))
    }

    /// Records the timestamp of a repeated CONNECT from `addr`, arrived
    /// at `now`.
    pub fn set_connect_timestamp(&mut self, addr: &SocketAddr, ts: WireTimestamp, now: Instant) {
        if let Some(c) = self.children.get_mut(addr) {
            c.connect_timestamp = ts;
            c.connect_at = now;
        }
    }

    /// Forgets `addr`.
    pub fn remove(&mut self, addr: &SocketAddr) -> Option<Child> {
        let c = self.children.remove(addr)?;
        self.expiry.remove(&(c.last_heard + self.timeout, *addr));
        if let Some(by) = c.validate_by {
            self.validation.remove(&(by, *addr));
        }
        if let Some(a) = &c.ack {
            self.cums.remove(&(a.cumulative, *addr));
            self.wends.remove(&(a.window_end, *addr));
            self.sacked -= usize::from(!a.sack.is_empty());
        }
        Some(c)
    }

    /// When the next child expires (silent, or not validated in time).
    pub fn next_expiry(&self) -> Option<Instant> {
        [self.expiry.first(), self.validation.first()]
            .into_iter()
            .flatten()
            .map(|(t, _)| *t)
            .min()
    }

    /// Admitted children silent for at least `silence` at `now`, longest
    /// silent first. O(k log N) for the k returned.
    pub fn silent_for(
        &self,
        now: Instant,
        silence: Duration,
    ) -> impl Iterator<Item = SocketAddr> + '_ {
        // Last heard + silence <= now, i.e. expiry <= now + timeout - silence.
        let horizon = now + self.timeout.saturating_sub(silence);
        self.expiry
            .iter()
            .take_while(move |(expires, _)| *expires <= horizon)
            .filter(|(_, a)| self.children.get(a).is_some_and(|c| c.start.is_some()))
            .map(|(_, a)| *a)
    }

    /// Removes and returns the children silent since `now - timeout`, and
    /// those whose address was not validated in time.
    pub fn expire(&mut self, now: Instant) -> Vec<(SocketAddr, Child)> {
        let mut out = Vec::new();
        while self.validation.first().is_some_and(|&(t, _)| t <= now) {
            let Some((_, addr)) = self.validation.pop_first() else {
                break;
            };
            if let Some(c) = self.remove(&addr) {
                out.push((addr, c));
            }
        }
        while self.expiry.first().is_some_and(|&(t, _)| t <= now) {
            let Some((_, addr)) = self.expiry.pop_first() else {
                break;
            };
            if let Some(c) = self.remove(&addr) {
                out.push((addr, c));
            }
        }
        out
    }

    /// True if some admitted child reports SACK ranges.
    pub fn any_sack(&self) -> bool {
        self.sacked > 0
    }

    /// Lowest cumulative point of the admitted children.
    pub fn min_cumulative(&self) -> Option<u64> {
        self.cums.first().map(|(c, _)| *c)
    }

    /// Lowest window right edge of the admitted children.
    pub fn min_window_end(&self) -> Option<u64> {
        self.wends.first().map(|(w, _)| *w)
    }

    /// Highest offset any admitted child acknowledged (cumulatively or by
    /// SACK).
    pub fn highest(&self) -> Option<u64> {
        self.children
            .values()
            .filter_map(|c| c.ack.as_ref().map(AckSummary::highest))
            .max()
    }

    /// The meet of the admitted children's states ([`AckSummary::meet`]).
    pub fn meet(&self) -> Option<AckSummary> {
        self.children.values().filter_map(|c| c.ack.as_ref()).fold(
            None,
            |acc: Option<AckSummary>, a| {
                Some(match acc {
                    None => a.clone(),
                    Some(m) => m.meet(a),
                })
            },
        )
    }
}
