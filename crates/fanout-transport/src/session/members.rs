//! The session's members: slots, the address index, the ordered indexes
//! over member figures, member timers and the idle list — kept right by
//! the set itself. Every change of a member goes through
//! [`MemberSet::update`], which re-keys it in every index afterwards, so
//! no caller can forget one.
//!
//! Per-ACK cost is O(log N): each index skips an unchanged key, and the
//! extremes are read in O(1) ([`OrderedIndex`]).

use super::addr_index::AddrIndex;
use super::member::{Member, MemberClock};
use super::member_timers::MemberTimers;
use super::ordered::{Extreme, OrderedIndex};
use super::slots::SlotTable;
use super::MemberId;
use fanout_core::time::Instant;
use std::collections::BTreeSet;
use std::net::SocketAddr;

/// A member figure a session controller can keep an ordered index of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKey {
    /// Highest offset new data may reach for it ([`Member::send_edge`]).
    SendEdge,
    /// Its congestion window, bytes.
    Cwnd,
    /// Where its congestion window starts ([`crate::Recovery::pipe_base`]).
    PipeBase,
    /// Offsets below this fit its receive window.
    WindowEnd,
    /// Its congestion window smoothed over its last ~8 updates.
    SmoothedCwnd,
}

impl MemberKey {
    /// The figure of `m`.
    pub fn of(self, m: &Member) -> u64 {
        match self {
            MemberKey::SendEdge => m.send_edge(),
            MemberKey::Cwnd => m.recovery().cwnd(),
            MemberKey::PipeBase => m.recovery().pipe_base(),
            MemberKey::WindowEnd => m.window_end(),
            MemberKey::SmoothedCwnd => m.smoothed_cwnd(),
        }
    }
}

/// An index a controller asks the member set to keep (smallest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSpec {
    /// The figure indexed.
    pub key: MemberKey,
    /// Also answer ranks ([`MemberView::nth`]) in O(log N).
    pub ranked: bool,
}

/// How the always-kept indexes are built.
#[derive(Debug, Clone, Copy)]
pub struct SetIndexes {
    /// Cumulative ACKs answer ranks (quorum release).
    pub cumulative_ranked: bool,
    /// Smoothed RTTs answer ranks (percentile session RTT).
    pub srtt_ranked: bool,
}

/// A member and its place in the idle list.
#[derive(Debug)]
struct Slot {
    member: Member,
    /// Nothing outstanding: no retransmission timer until new data.
    idle: bool,
    /// In [`MemberSet::idle`] (at most once).
    listed: bool,
    /// In the RTT and keyed indexes: its address is validated.
    indexed: bool,
}

/// The members of one session.
#[derive(Debug)]
pub struct MemberSet {
    /// Members by dense slot; every index below is keyed by slot.
    slots: SlotTable<Slot>,
    by_addr: AddrIndex,
    next_id: u64,
    cumulative: OrderedIndex,
    srtt: OrderedIndex,
    /// The controller's indexes (and always [`MemberKey::WindowEnd`]: the
    /// zero-window probe looks up who blocks). These, `srtt` and
    /// `cumulative` hold only validated members ([`crate::address_budget`]):
    /// a forged join must not set the session's window or RTT, nor hold
    /// the end of the session.
    keyed: Vec<(MemberKey, OrderedIndex)>,
    /// (start, id) of members not validated yet: their start holds the
    /// release point (an honest joiner whose ACCEPT was lost still needs
    /// its data) until they are validated or evicted. They send nothing
    /// before they are validated, so their start is their cumulative ACK.
    unvalidated: BTreeSet<(u64, MemberId)>,
    /// [`MemberKey::SmoothedCwnd`] is indexed: smooth on every update.
    smooth: bool,
    timers: MemberTimers,
    /// Members that became idle since the last send ([`Slot::listed`]); an
    /// entry whose slot is no longer idle, or now holds another member, is
    /// skipped when taken.
    idle: Vec<(u32, MemberId)>,
    clock: MemberClock,
}

impl MemberSet {
    /// An empty set keeping the `specs` indexes besides its own.
    pub fn new(specs: &[IndexSpec], own: SetIndexes, clock: MemberClock) -> Self {
        let index = |ranked: bool, extreme| {
            let i = OrderedIndex::new(extreme);
            if ranked {
                i.with_rank()
            } else {
                i
            }
        };
        let mut keyed: Vec<(MemberKey, OrderedIndex)> = Vec::new();
        let window_end = IndexSpec {
            key: MemberKey::WindowEnd,
            ranked: false,
        };
        for spec in specs.iter().chain([&window_end]) {
            match keyed.iter_mut().find(|(k, _)| *k == spec.key) {
                Some((_, i)) if spec.ranked && i.is_ranked() => {}
                Some(entry) if spec.ranked => entry.1 = index(true, Extreme::Min),
                Some(_) => {}
                None => keyed.push((spec.key, index(spec.ranked, Extreme::Min))),
            }
        }
        MemberSet {
            slots: SlotTable::default(),
            by_addr: AddrIndex::default(),
            next_id: 1,
            cumulative: index(own.cumulative_ranked, Extreme::Min),
            srtt: index(own.srtt_ranked, Extreme::Max),
            smooth: keyed.iter().any(|(k, _)| *k == MemberKey::SmoothedCwnd),
            keyed,
            unvalidated: BTreeSet::new(),
            timers: MemberTimers::default(),
            idle: Vec::new(),
            clock,
        }
    }

    /// Members held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Members whose address is validated (those in `keyed`, `srtt` and
    /// `cumulative`).
    pub fn validated_len(&self) -> usize {
        self.slots.len() - self.unvalidated.len()
    }

    /// The id the next admitted member gets.
    pub fn next_id(&self) -> MemberId {
        MemberId(self.next_id)
    }

    /// Admits the member `make` builds for the next id (see
    /// [`MemberSet::next_id`]); it starts idle.
    pub fn insert(&mut self, member: Member, snd_nxt: u64) -> MemberId {
        let id = member.id();
        debug_assert_eq!(id, self.next_id(), "members are numbered in order");
        self.next_id = id.0 + 1;
        let addr = member.addr();
        let s = self.slots.insert(
            id,
            Slot {
                member,
                idle: false,
                listed: false,
                indexed: false,
            },
        );
        self.by_addr.insert(addr, s);
        self.reindex_slot(s, snd_nxt, false);
        if let Some(m) = self.slots.at(s).map(|slot| &slot.member) {
            if !m.is_validated() {
                self.unvalidated.insert((m.cumulative(), id));
            }
        }
        id
    }

    /// Removes member `id`.
    pub fn remove(&mut self, id: MemberId) -> Option<Member> {
        let (s, slot) = self.slots.remove(&id)?;
        if !slot.indexed {
            self.unvalidated.remove(&(slot.member.cumulative(), id));
        }
        self.cumulative.remove(s);
        self.srtt.remove(s);
        for (_, i) in &mut self.keyed {
            i.remove(s);
        }
        self.timers.set(s, id, None);
        self.by_addr.remove(&slot.member.addr());
        Some(slot.member)
    }

    /// Member `id`.
    pub fn get(&self, id: MemberId) -> Option<&Member> {
        self.slots.get(&id).map(|s| &s.member)
    }

    /// The member at `addr`, if any; later lookups of its id are O(1)
    /// until another member is looked up this way.
    pub fn at_addr(&mut self, addr: &SocketAddr) -> Option<&Member> {
        let s = self.by_addr.get(addr)?;
        self.slots.set_hint(s);
        self.slots.at(s).map(|slot| &slot.member)
    }

    /// Changes member `id` with `f`, then re-keys it in every index, re-arms
    /// its timer and files it as idle or not. `None` if it is not a member.
    pub fn update<R>(
        &mut self,
        id: MemberId,
        snd_nxt: u64,
        f: impl FnOnce(&mut Member) -> R,
    ) -> Option<R> {
        let s = self.slots.slot_of(&id)?;
        let r = f(&mut self.slots.at_mut(s)?.member);
        self.reindex_slot(s, snd_nxt, self.smooth);
        Some(r)
    }

    /// Re-keys the member at `slot` in every index (each skips an
    /// unchanged key) and files it as idle or not.
    fn reindex_slot(&mut self, s: u32, snd_nxt: u64, smooth: bool) {
        let clock = self.clock;
        let Some(slot) = self.slots.at_mut(s) else {
            return;
        };
        if smooth {
            slot.member.smooth_cwnd();
        }
        let m = &slot.member;
        let id = m.id();
        if m.is_validated() {
            if !slot.indexed {
                self.unvalidated.remove(&(m.cumulative(), id));
            }
            slot.indexed = true;
            self.cumulative.update(s, id, m.cumulative());
            self.srtt
                .update(s, id, m.recovery().srtt().as_nanos() as u64);
            for (key, index) in &mut self.keyed {
                index.update(s, id, key.of(m));
            }
        }
        self.timers.set(s, id, m.next_deadline(snd_nxt, &clock));
        slot.idle = !m.has_outstanding(snd_nxt);
        if slot.idle && !slot.listed {
            slot.listed = true;
            self.list_idle(s, id);
        }
    }

    /// Appends to the idle list. Entries of members that left stay until
    /// the next send takes the list; if churn piles them up first, the list
    /// is compacted (amortised O(1) per entry, at most one live entry per
    /// member), so peers joining and leaving cannot grow it without bound.
    fn list_idle(&mut self, s: u32, id: MemberId) {
        self.idle.push((s, id));
        if self.idle.len() > 2 * self.slots.len() + 64 {
            let slots = &self.slots;
            self.idle
                .retain(|&(s, id)| slots.at(s).is_some_and(|x| x.member.id() == id && x.listed));
        }
    }

    /// Takes the idle members (in id order); none is idle afterwards until
    /// it is updated again.
    pub fn take_idle(&mut self) -> Vec<MemberId> {
        let mut ids: Vec<MemberId> = std::mem::take(&mut self.idle)
            .into_iter()
            .filter_map(|(s, id)| {
                let slot = self.slots.at_mut(s).filter(|x| x.member.id() == id)?;
                slot.listed = false;
                std::mem::replace(&mut slot.idle, false).then_some(id)
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Members in id order.
    pub fn iter(&self) -> impl Iterator<Item = &Member> + '_ {
        self.slots.values().map(|s| &s.member)
    }

    /// The earliest member deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// A member whose deadline is at or before `now` (earliest first); its
    /// timer is disarmed until it is updated.
    pub fn pop_expired(&mut self, now: Instant) -> Option<MemberId> {
        self.timers.pop_expired(now)
    }

    /// The smallest cumulative ACK of a validated member.
    pub fn min_cumulative(&self) -> Option<u64> {
        self.cumulative.min_key()
    }

    /// The earliest admitted member whose address is not validated (O(n)
    /// for the n ≤ 1 024 unvalidated: only
    /// once the stream is acknowledged by every validated member).
    pub fn oldest_unvalidated(&self) -> Option<MemberId> {
        self.unvalidated.iter().map(|&(_, id)| id).min()
    }

    /// The lowest offset a member may still need: the smallest cumulative
    /// ACK, or an unvalidated member's start if lower (the release point).
    pub fn min_needed(&self) -> Option<u64> {
        let unvalidated = self.unvalidated.first().map(|&(start, _)| start);
        [self.min_cumulative(), unvalidated]
            .into_iter()
            .flatten()
            .min()
    }

    /// The cumulative ACK of rank `k` from the smallest.
    pub fn nth_cumulative(&self, k: usize) -> Option<u64> {
        self.cumulative.nth(k).map(|(c, _)| c)
    }

    /// The largest smoothed RTT, ns.
    pub fn max_srtt_ns(&self) -> Option<u64> {
        self.srtt.max_key()
    }

    /// A member whose smoothed RTT is the largest.
    pub fn max_srtt_member(&self) -> Option<MemberId> {
        self.srtt.max().map(|(_, id)| id)
    }

    /// The member whose smoothed RTT is of rank `k` from the smallest.
    pub fn nth_srtt_member(&self, k: usize) -> Option<MemberId> {
        self.srtt.nth(k).map(|(_, id)| id)
    }

    /// The smoothed RTT of rank `k` from the smallest, ns.
    pub fn nth_srtt_ns(&self, k: usize) -> Option<u64> {
        self.srtt.nth(k).map(|(s, _)| s)
    }

    /// The member with the smallest receive-window end.
    pub fn tightest_window(&self) -> Option<(u64, MemberId)> {
        self.index(MemberKey::WindowEnd)?.min()
    }

    fn index(&self, key: MemberKey) -> Option<&OrderedIndex> {
        self.keyed.iter().find(|(k, _)| *k == key).map(|(_, i)| i)
    }

    /// What session controllers read.
    pub fn view(&self) -> MemberView<'_> {
        MemberView { set: self }
    }
}

/// A session controller's read access to the members' indexed figures.
#[derive(Debug, Clone, Copy)]
pub struct MemberView<'a> {
    set: &'a MemberSet,
}

impl MemberView<'_> {
    /// Members in the indexes: those whose address is validated.
    pub fn len(&self) -> usize {
        self.set.validated_len()
    }

    /// True if no member is validated.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The smallest `key` over members (`None`: no member, or `key` is not
    /// among the controller's indexes).
    pub fn min(&self, key: MemberKey) -> Option<u64> {
        self.set.index(key)?.min_key()
    }

    /// The `key` of rank `k` from the smallest (ranked indexes: O(log N)).
    pub fn nth(&self, key: MemberKey, k: usize) -> Option<u64> {
        self.set.index(key)?.nth(k).map(|(v, _)| v)
    }

    /// Every validated member (O(N): for controllers that read figures no
    /// index keeps, and only off the per-packet path).
    pub fn members(&self) -> impl Iterator<Item = &Member> + '_ {
        self.set.iter().filter(|m| m.is_validated())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TransportConfig;
    use crate::recovery::Recovery;
    use fanout_core::rtt::RttEstimator;
    use std::time::Duration;

    fn member(id: u64, window: u64) -> Member {
        let t = TransportConfig::default();
        let r = Recovery::new(0, RttEstimator::new(t.rto), t.cc.build(1000));
        let addr = SocketAddr::from(([10, 0, 0, id as u8], 7000));
        Member::new(MemberId(id), addr, 99, 0, window, r, Instant::ZERO)
    }

    fn set(specs: &[IndexSpec]) -> MemberSet {
        let clock = MemberClock {
            stall_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            validation_timeout: Duration::from_secs(3),
        };
        let own = SetIndexes {
            cumulative_ranked: false,
            srtt_ranked: false,
        };
        MemberSet::new(specs, own, clock)
    }

    #[test]
    fn indexes_follow_every_update() {
        let specs = [IndexSpec {
            key: MemberKey::SendEdge,
            ranked: true,
        }];
        let mut s = set(&specs);
        for (id, w) in [(1, 5000), (2, 3000), (3, 9000)] {
            s.insert(member(id, w), 0);
        }
        assert_eq!(s.view().min(MemberKey::SendEdge), Some(3000));
        assert_eq!(s.view().nth(MemberKey::SendEdge, 2), Some(9000));
        assert_eq!(s.tightest_window(), Some((3000, MemberId(2))));
        assert_eq!(s.view().min(MemberKey::Cwnd), None, "not indexed");
        // Removing the tightest member moves the minimum.
        s.remove(MemberId(2));
        assert_eq!(s.view().min(MemberKey::SendEdge), Some(5000));
        assert!(s.at_addr(&"10.0.0.2:7000".parse().unwrap()).is_none());
        assert_eq!(
            s.at_addr(&"10.0.0.3:7000".parse().unwrap()).map(Member::id),
            Some(MemberId(3))
        );
        // Every member starts idle, listed once, in id order.
        assert_eq!(s.take_idle(), [MemberId(1), MemberId(3)]);
        assert!(s.take_idle().is_empty());
        // An update with data outstanding arms its stall timer.
        s.update(MemberId(1), 1000, |_| ());
        assert_eq!(
            s.next_deadline(),
            Some(Instant::ZERO + Duration::from_secs(10))
        );
        assert!(s.take_idle().is_empty(), "not idle: data outstanding");
        s.update(MemberId(3), 0, |_| ());
        assert_eq!(s.take_idle(), [MemberId(3)]);
    }

    #[test]
    fn churn_cannot_grow_the_idle_list() {
        let mut s = set(&[]);
        for id in 1..=10_000 {
            s.insert(member(id, 1000), 0);
            s.remove(MemberId(id));
        }
        assert!(s.idle.len() <= 64 + 2);
        assert!(s.is_empty());
    }
}
