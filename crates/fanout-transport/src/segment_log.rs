//! The master block's record of sent segments, shared by every member
//! (TCP-SMO §II.B: one send buffer, one sequence space). Members keep only
//! what differs from it (SACKed and lost ranges), so per-member state stays
//! small and a multicast send costs O(1), not O(members).

use fanout_core::time::Instant;
use std::collections::VecDeque;
use std::ops::Range;

/// One segment as first sent (boundaries never change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedSegment {
    /// First offset.
    pub start: u64,
    /// One past the last offset.
    pub end: u64,
    /// Time of the latest multicast transmission.
    pub sent_at: Instant,
    /// Time of the first transmission (non-decreasing in offset order).
    pub first_sent_at: Instant,
    /// When it first went to the group again: multicast again, or in
    /// another form (coded symbols of its block, a SKIP naming it), from
    /// which a receiver may have taken it instead of the first sending.
    pub resent_at: Option<Instant>,
}

impl LoggedSegment {
    /// Whether it went once only: neither multicast again nor sent again
    /// in another form (Karn's rule: no later copy can be the one a
    /// receiver acknowledged). Unicast repairs are each peer's to count.
    pub fn sent_once(&self) -> bool {
        self.resent_at.is_none()
    }

    /// Whether nothing of it went to the group between the first sending
    /// and `at`: a receiver that has it a round trip after `at` had the
    /// first sending (or a unicast copy of its own).
    pub fn sent_once_before(&self, at: Instant) -> bool {
        self.resent_at.is_none_or(|again| again >= at)
    }
}

/// Segments from the oldest unreleased to `SND.NXT`, contiguous, in offset order.
///
/// Invariant: segments are pushed at non-decreasing times, so
/// `first_sent_at` is non-decreasing in offset order (`sent_at` too, except
/// for segments multicast again).
#[derive(Debug, Default)]
pub struct SegmentLog {
    segs: VecDeque<LoggedSegment>,
}

impl SegmentLog {
    /// Records a new segment; it must start where the last one ended.
    pub fn push(&mut self, range: Range<u64>, now: Instant) {
        debug_assert!(self.segs.back().is_none_or(|s| s.end == range.start));
        debug_assert!(self.segs.back().is_none_or(|s| s.sent_at <= now));
        self.segs.push_back(LoggedSegment {
            start: range.start,
            end: range.end,
            sent_at: now,
            first_sent_at: now,
            resent_at: None,
        });
    }

    /// Segments wholly below `offset` (those with `end <= offset`).
    ///
    /// Segments are mostly one size, so the answer is first guessed from
    /// the offset and checked in O(1); a wrong guess falls back to a binary
    /// search (O(log n) either way).
    fn below(&self, offset: u64) -> usize {
        let (Some(first), Some(last)) = (self.segs.front(), self.segs.back()) else {
            return 0;
        };
        if offset < first.end {
            return 0;
        }
        if offset >= last.end {
            return self.segs.len();
        }
        let size = (first.end - first.start).max(1);
        let guess = ((offset - first.start) / size) as usize;
        // `guess` is right if segment guess-1 ends at or below `offset` and
        // segment guess ends above it.
        if guess >= 1
            && guess < self.segs.len()
            && self.segs[guess - 1].end <= offset
            && self.segs[guess].end > offset
        {
            return guess;
        }
        self.segs.partition_point(|s| s.end <= offset)
    }

    /// Index of the segment holding `offset`.
    fn index_of(&self, offset: u64) -> Option<usize> {
        let i = self.below(offset);
        self.segs.get(i).filter(|s| s.start <= offset).map(|_| i)
    }

    /// The segment holding `offset`.
    pub fn containing(&self, offset: u64) -> Option<LoggedSegment> {
        self.index_of(offset).map(|i| self.segs[i])
    }

    /// Marks the segment starting at `start` as multicast again at `now`;
    /// true if it had been multicast again before.
    pub fn on_multicast_repair(&mut self, start: u64, now: Instant) -> bool {
        self.index_of(start).is_some_and(|i| {
            let seg = &mut self.segs[i];
            let again = seg.sent_at != seg.first_sent_at;
            seg.sent_at = now;
            seg.resent_at.get_or_insert(now);
            again
        })
    }

    /// Marks the segments overlapping `range` as sent again at `now` in
    /// another form (coded symbols, a SKIP).
    pub fn on_sent_again(&mut self, range: Range<u64>, now: Instant) {
        let first = self.segs.partition_point(|s| s.end <= range.start);
        for seg in self.segs.range_mut(first..) {
            if seg.start >= range.end {
                break;
            }
            seg.resent_at.get_or_insert(now);
        }
    }

    /// Segments overlapping `range`, in offset order.
    pub fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = LoggedSegment> + '_ {
        let first = self.segs.partition_point(|s| s.end <= range.start);
        self.segs
            .range(first..)
            .take_while(move |s| s.start < range.end)
            .copied()
    }

    /// Latest *first* transmission among segments lying wholly inside
    /// `range`, in O(1) (O(log n) for odd segment sizes): the delivery
    /// evidence an ACK of `range` gives RACK (RFC 8985 §6.1). A member
    /// SACKing a segment multicast again may have received either copy;
    /// taking the later one would date the delivery after copies of other
    /// segments still in flight to it and declare them lost (its own
    /// repairs are dated separately, `Member::on_ack`). With it, that
    /// segment's end: RACK orders segments sent at the same instant (one
    /// batch) by it (RFC 8985 §6.2).
    pub fn latest_first_sent_within(&self, range: Range<u64>) -> Option<(Instant, u64)> {
        let end = self.below(range.end);
        let last = self.segs.get(end.checked_sub(1)?)?;
        (last.start >= range.start).then_some((last.first_sent_at, last.end))
    }

    /// Forgets segments wholly below `offset` (released by every member).
    pub fn release_below(&mut self, offset: u64) {
        while self.segs.front().is_some_and(|s| s.end <= offset) {
            self.segs.pop_front();
        }
    }

    /// Segments held.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn lookup_and_release() {
        let mut log = SegmentLog::default();
        for i in 0..5u64 {
            log.push(i * 10..i * 10 + 10, at(i));
        }
        assert_eq!(log.containing(25).map(|s| s.start), Some(20));
        assert_eq!(log.containing(50), None);
        assert_eq!(
            log.latest_first_sent_within(0..35).map(|l| l.0),
            Some(at(2))
        );
        assert_eq!(log.overlapping(15..31).count(), 3);
        assert!(!log.on_multicast_repair(10, at(9)));
        assert_eq!(log.containing(15).map(|s| s.sent_at), Some(at(9)));
        // Delivery evidence stays the first transmission.
        assert_eq!(
            log.latest_first_sent_within(0..20).map(|l| l.0),
            Some(at(1))
        );
        assert_eq!(
            log.latest_first_sent_within(0..50).map(|l| l.0),
            Some(at(4))
        );
        assert_eq!(log.latest_first_sent_within(11..20), None);
        assert_eq!(
            log.latest_first_sent_within(5..35).map(|l| l.0),
            Some(at(2))
        );
        assert!(log.on_multicast_repair(10, at(10)));
        // Lookups agree with a scan, for every offset (segments of two sizes).
        let mut mixed = SegmentLog::default();
        for (i, len) in [10u64, 10, 7, 10, 3, 10, 10].iter().enumerate() {
            let start = mixed.segs.back().map_or(100, |s| s.end);
            mixed.push(start..start + len, at(i as u64));
        }
        for off in 90..180 {
            let want = mixed
                .segs
                .iter()
                .position(|s| s.start <= off && off < s.end);
            assert_eq!(mixed.index_of(off), want, "offset {off}");
            let below = mixed.segs.iter().filter(|s| s.end <= off).count();
            assert_eq!(mixed.below(off), below, "offset {off}");
        }
        log.release_below(25);
        assert_eq!(log.len(), 3);
        assert_eq!(log.containing(5), None);
    }
}
