//! The master block's record of sent segments, shared by every member
//! (SMO §II: one send buffer, one sequence space). Members keep only what
//! differs from it (SACKed and lost ranges), so per-member state stays small
//! and a multicast send costs O(1), not O(members).

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
}

/// Segments from the oldest unreleased to `SND.NXT`, contiguous, in offset order.
#[derive(Debug, Default)]
pub struct SegmentLog {
    segs: VecDeque<LoggedSegment>,
}

impl SegmentLog {
    /// Records a new segment; it must start where the last one ended.
    pub fn push(&mut self, range: Range<u64>, now: Instant) {
        debug_assert!(self.segs.back().is_none_or(|s| s.end == range.start));
        self.segs.push_back(LoggedSegment {
            start: range.start,
            end: range.end,
            sent_at: now,
        });
    }

    /// Index of the segment holding `offset`.
    fn index_of(&self, offset: u64) -> Option<usize> {
        let i = self.segs.partition_point(|s| s.end <= offset);
        self.segs.get(i).filter(|s| s.start <= offset).map(|_| i)
    }

    /// The segment holding `offset`.
    pub fn containing(&self, offset: u64) -> Option<LoggedSegment> {
        self.index_of(offset).map(|i| self.segs[i])
    }

    /// Marks the segment starting at `start` as multicast again at `now`.
    pub fn on_multicast_repair(&mut self, start: u64, now: Instant) {
        if let Some(i) = self.index_of(start) {
            self.segs[i].sent_at = now;
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

    /// Latest transmission time among segments lying wholly inside `range`.
    pub fn latest_sent_within(&self, range: Range<u64>) -> Option<Instant> {
        self.overlapping(range.clone())
            .filter(|s| s.start >= range.start && s.end <= range.end)
            .map(|s| s.sent_at)
            .max()
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
        assert_eq!(log.latest_sent_within(0..35), Some(at(2)));
        assert_eq!(log.overlapping(15..31).count(), 3);
        log.on_multicast_repair(10, at(9));
        assert_eq!(log.latest_sent_within(0..20), Some(at(9)));
        log.release_below(25);
        assert_eq!(log.len(), 3);
        assert_eq!(log.containing(5), None);
    }
}
