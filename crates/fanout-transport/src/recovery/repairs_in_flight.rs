//! The repairs a peer has been sent and has not confirmed: in send order
//! (RACK dates them, RFC 8985 §6.1) and indexed by range, so that loss
//! detection asks "is this segment being repaired?" in O(log n) instead of
//! scanning all of them for every segment of every hole at every ACK.

use fanout_core::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

/// Repairs in flight, oldest first, at most `cap` (the oldest is forgotten
/// first).
#[derive(Debug)]
pub(super) struct RepairsInFlight {
    /// `(range, sent at)`, in send order.
    order: VecDeque<(Range<u64>, Instant)>,
    /// How many entries of `order` have each range (a range repaired again
    /// before the first repair was settled appears twice).
    index: BTreeMap<(u64, u64), u32>,
    cap: usize,
}

impl RepairsInFlight {
    /// None, holding at most `cap`.
    pub(super) fn new(cap: usize) -> Self {
        RepairsInFlight {
            order: VecDeque::new(),
            index: BTreeMap::new(),
            cap: cap.max(1),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// In send order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &(Range<u64>, Instant)> {
        self.order.iter()
    }

    /// When the oldest repair in flight went out.
    pub(super) fn oldest_sent_at(&self) -> Option<Instant> {
        self.order.front().map(|(_, t)| *t)
    }

    /// Whether a repair of exactly `r` is in flight.
    pub(super) fn contains(&self, r: &Range<u64>) -> bool {
        self.index.contains_key(&(r.start, r.end))
    }

    /// A repair of `range` went out at `at` (no earlier than the one
    /// before). Returns the oldest repair, forgotten to make room.
    pub(super) fn push(&mut self, range: Range<u64>, at: Instant) -> Option<Range<u64>> {
        debug_assert!(self.order.back().is_none_or(|(_, t)| *t <= at));
        let mut forgotten = None;
        if self.order.len() >= self.cap {
            if let Some((old, _)) = self.order.pop_front() {
                unindex(&mut self.index, &old);
                forgotten = Some(old);
            }
        }
        *self.index.entry((range.start, range.end)).or_insert(0) += 1;
        self.order.push_back((range, at));
        forgotten
    }

    /// Removes and returns, oldest first, the repairs that `overdue` says
    /// are, among the oldest ones whose send time `candidate` accepts:
    /// `candidate` must hold for none after the first it fails for (a
    /// bound on the send time), so only those are visited.
    pub(super) fn take_overdue(
        &mut self,
        candidate: impl Fn(Instant) -> bool,
        overdue: impl Fn(&Range<u64>, Instant) -> bool,
    ) -> Vec<Range<u64>> {
        let n = self.order.iter().take_while(|(_, t)| candidate(*t)).count();
        let mut taken = Vec::new();
        if n == 0 {
            return taken;
        }
        let head: Vec<_> = self.order.drain(..n).collect();
        for (r, t) in head.into_iter().rev() {
            if overdue(&r, t) {
                unindex(&mut self.index, &r);
                taken.push(r);
            } else {
                self.order.push_front((r, t));
            }
        }
        taken.reverse();
        taken
    }

    /// Keeps the repairs `keep` says yes to, in order.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&(Range<u64>, Instant)) -> bool) {
        let index = &mut self.index;
        self.order.retain(|e| {
            let kept = keep(e);
            if !kept {
                unindex(index, &e.0);
            }
            kept
        });
    }

    pub(super) fn clear(&mut self) {
        self.order.clear();
        self.index.clear();
    }
}

/// One entry of `r` fewer in `index`.
fn unindex(index: &mut BTreeMap<(u64, u64), u32>, r: &Range<u64>) {
    let key = (r.start, r.end);
    if let Some(n) = index.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            index.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + std::time::Duration::from_millis(ms)
    }

    #[test]
    fn the_index_follows_pushes_retains_the_cap_and_clears() {
        let mut r = RepairsInFlight::new(3);
        r.push(0..10, at(1));
        r.push(10..20, at(2));
        r.push(0..10, at(3));
        assert!(r.contains(&(0..10)) && r.contains(&(10..20)));
        assert!(!r.contains(&(0..20)), "exact ranges only");
        // The cap forgets the oldest copy of 0..10; the newer one stays.
        r.push(20..30, at(4));
        assert!(r.contains(&(0..10)));
        r.retain(|(_, t)| *t != at(3));
        assert!(!r.contains(&(0..10)));
        assert_eq!(
            r.iter().map(|(x, _)| x.clone()).collect::<Vec<_>>(),
            [10..20, 20..30],
            "send order kept"
        );
        r.clear();
        assert!(r.is_empty() && !r.contains(&(10..20)));
    }

    #[test]
    fn overdue_repairs_are_taken_from_the_oldest_only() {
        let mut r = RepairsInFlight::new(8);
        for (i, ms) in [1, 2, 2, 5, 9].into_iter().enumerate() {
            let i = i as u64;
            r.push(i * 10..i * 10 + 10, at(ms));
        }
        // Sent by 5 ms, and not the one ending at 20 (a tie broken by end).
        let taken = r.take_overdue(|t| t <= at(5), |x, _| x.end != 20);
        assert_eq!(taken, [0..10, 20..30, 30..40]);
        assert_eq!(
            r.iter().map(|(x, _)| x.clone()).collect::<Vec<_>>(),
            [10..20, 40..50],
            "the rest stays, in order"
        );
        assert!(r.contains(&(10..20)) && !r.contains(&(0..10)));
        assert!(r.take_overdue(|_| false, |_, _| true).is_empty());
    }
}
