//! Lost segments waiting for their repair, with the members missing each
//! (TCP-SMO §II: a segment is repaired by multicast when more than a
//! threshold of receivers miss it, by unicast otherwise; the coded policy
//! decides per block). The sender's repair scheduling reads and takes from
//! it; the members' own lost sets stay the truth, and an entry whose member
//! no longer misses the segment is dropped when met.
//!
//! Bounded: at most [`MAX_QUEUED_REPAIRS`] member–segment entries. A loss
//! that does not fit is refused ([`RepairQueue::push`] returns it) and the
//! caller puts it back in flight for that member (and counts it), so it
//! is detected lost again, and queued, once there is room.

use super::MemberId;
use fanout_core::time::Instant;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Range;

/// Most member–segment entries queued at once (8 bytes each, plus the
/// map's nodes: about 16 MiB at the cap). 4096 members each missing a
/// whole 1 MiB window of 1.4 KB segments fit 2.9 M; real sessions queue a
/// few thousand (1000 members at 2% loss: about 300 per round trip).
pub const MAX_QUEUED_REPAIRS: usize = 1 << 20;

/// A lost segment waiting for its repair.
#[derive(Debug)]
pub struct PendingRepair {
    /// End offset of the segment.
    pub end: u64,
    /// Members that reported it lost and may still miss it.
    pub ids: Vec<MemberId>,
    /// When the first of them reported it.
    pub since: Instant,
}

/// The queue: segment start → its pending repair.
#[derive(Debug, Default)]
pub struct RepairQueue {
    pending: BTreeMap<u64, PendingRepair>,
    /// Σ `ids.len()` over entries (≤ [`MAX_QUEUED_REPAIRS`]).
    entries: usize,
}

impl RepairQueue {
    /// Member–segment entries held.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Queues member `id`'s `lost` segments reported at `now`; returns the
    /// ones refused because the queue is full.
    pub fn push(&mut self, now: Instant, id: MemberId, lost: Vec<Range<u64>>) -> Vec<Range<u64>> {
        let mut refused = Vec::new();
        for r in lost {
            if self.entries >= MAX_QUEUED_REPAIRS {
                refused.push(r);
                continue;
            }
            self.entries += 1;
            self.pending
                .entry(r.start)
                .or_insert(PendingRepair {
                    end: r.end,
                    ids: Vec::new(),
                    since: now,
                })
                .ids
                .push(id);
        }
        refused
    }

    /// The first queued segment starting at or after `cursor`.
    pub fn next_start(&self, cursor: u64) -> Option<u64> {
        self.pending.range(cursor..).next().map(|(&s, _)| s)
    }

    /// Keeps, in the entry of the segment at `start`, the members for
    /// which `still_missing(id, range)` holds; drops the entry if none is
    /// left. Returns the entry (range, members left, first report) if it
    /// remains.
    pub fn prune(
        &mut self,
        start: u64,
        mut still_missing: impl FnMut(MemberId, Range<u64>) -> bool,
    ) -> Option<(Range<u64>, usize, Instant)> {
        let Entry::Occupied(mut e) = self.pending.entry(start) else {
            return None;
        };
        let p = e.get_mut();
        let range = start..p.end;
        let before = p.ids.len();
        p.ids.retain(|&id| still_missing(id, range.clone()));
        self.entries -= before - p.ids.len();
        if p.ids.is_empty() {
            e.remove();
            return None;
        }
        Some((range, p.ids.len(), p.since))
    }

    /// The members queued for the segment at `start`.
    pub fn members_of(&self, start: u64) -> &[MemberId] {
        self.pending.get(&start).map_or(&[], |p| p.ids.as_slice())
    }

    /// Takes the whole entry of the segment at `start`.
    pub fn take(&mut self, start: u64) -> Option<PendingRepair> {
        let p = self.pending.remove(&start)?;
        self.entries -= p.ids.len();
        Some(p)
    }

    /// Takes one member of the entry at `start` (the entry goes once
    /// empty).
    pub fn take_one(&mut self, start: u64) -> Option<MemberId> {
        let Entry::Occupied(mut e) = self.pending.entry(start) else {
            return None;
        };
        let id = e.get_mut().ids.pop()?;
        self.entries -= 1;
        if e.get().ids.is_empty() {
            e.remove();
        }
        Some(id)
    }

    /// Starts of the queued segments in `range`, in order.
    pub fn starts_in(&self, range: Range<u64>) -> Vec<u64> {
        self.pending.range(range).map(|(&s, _)| s).collect()
    }

    /// The entries of the segments in `range`, in order.
    pub fn entries_in(
        &self,
        range: Range<u64>,
    ) -> impl Iterator<Item = (u64, &PendingRepair)> + '_ {
        self.pending.range(range).map(|(&s, p)| (s, p))
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one lost segment
mod tests {
    use super::*;

    #[test]
    fn counts_every_entry_and_refuses_beyond_the_cap() {
        let mut q = RepairQueue::default();
        let now = Instant::ZERO;
        assert!(q.push(now, MemberId(1), vec![0..10, 10..20]).is_empty());
        assert!(q.push(now, MemberId(2), vec![0..10]).is_empty());
        assert_eq!(q.entries(), 3);
        assert_eq!(q.members_of(0), [MemberId(1), MemberId(2)]);
        // Member 1 got segment 0 meanwhile.
        let left = q.prune(0, |id, _| id == MemberId(2));
        assert_eq!(left, Some((0..10, 1, now)));
        assert_eq!(q.entries(), 2);
        assert_eq!(q.take_one(0), Some(MemberId(2)));
        assert_eq!(q.next_start(0), Some(10));
        assert_eq!(q.take(10).map(|p| p.ids), Some(vec![MemberId(1)]));
        assert!(q.pending.is_empty() && q.entries() == 0);
        // At the cap, further losses are refused and counted.
        q.entries = MAX_QUEUED_REPAIRS - 1;
        let refused = q.push(now, MemberId(3), vec![0..10, 10..20, 20..30]);
        assert_eq!(refused, vec![10..20, 20..30]);
        assert_eq!(q.entries(), MAX_QUEUED_REPAIRS);
    }
}
