//! Block bookkeeping of the coded repair policy
//! ([`super::policy::RepairPolicy::Coded`], [`crate::fec`]).
//!
//! New full-size segments are grouped, as they are first sent, into blocks
//! of up to `k` consecutive segments (a short, message-ending or FIN segment
//! closes the open block and belongs to none). When repairs of a block's
//! segments are due, the sender compares two prices on its own link:
//!
//! * per-segment multicast: one copy per distinct missing segment (`d`);
//! * coded: one repair symbol per segment of the member missing the most
//!   of the block (`m`), since each symbol replaces a *different* missing
//!   segment at each member (RFC 5510 / NORM, RFC 5740 §2).
//!
//! It codes when `m < d` — with hundreds of independently lossy members
//! nearly always (a block of 32 at 2% loss: `d` ≈ 25, `m` ≈ 3–4) — and
//! otherwise falls back to per-segment repair (unicast or multicast by the
//! cost rule), which also serves stragglers and the tail.

use super::MemberId;
use crate::fec::{BlockGeometry, MAX_REPAIR_ID};
use std::collections::VecDeque;
use std::ops::Range;

/// Default segments per block (`k`).
pub const DEFAULT_BLOCK_SEGMENTS: usize = 32;

/// One block of consecutive full-size segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// First offset.
    pub start: u64,
    /// One past the last offset.
    pub end: u64,
    /// Segments in it.
    pub segments: usize,
    /// Next repair symbol id to send (ids are never reused within a block,
    /// so a member holding symbols of an earlier round can combine them).
    pub next_id: u16,
}

/// A repair symbol waiting to be encoded and multicast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedSymbol {
    /// Its block.
    pub block: BlockGeometry,
    /// Its id.
    pub id: u8,
}

/// The session's blocks (from the oldest unreleased) and queued symbols.
#[derive(Debug)]
pub struct CodedBlocks {
    k: usize,
    mss: u64,
    /// Closed blocks, in offset order.
    closed: VecDeque<Block>,
    /// The block being filled.
    open: Option<Block>,
    /// Symbols to send, oldest decision first.
    pub queue: VecDeque<QueuedSymbol>,
    /// The start offset and bytes of the block the send buffer was
    /// released into, up to the buffer's base: its symbols still need them.
    pub prefix: Option<(u64, Vec<u8>)>,
}

impl CodedBlocks {
    /// Blocks of up to `k` segments of `mss` bytes.
    pub fn new(k: usize, mss: u64) -> Self {
        CodedBlocks {
            k: k.clamp(2, crate::fec::MAX_SOURCE_SYMBOLS),
            mss,
            closed: VecDeque::new(),
            open: None,
            queue: VecDeque::new(),
            prefix: None,
        }
    }

    /// A new segment `range` was sent; `full` if it is `mss` bytes of data
    /// with neither FIN nor message end.
    pub fn on_segment(&mut self, range: Range<u64>, full: bool) {
        let fits = full && range.end - range.start == self.mss;
        match self.open.as_mut() {
            Some(b) if fits && b.end == range.start => {
                b.end = range.end;
                b.segments += 1;
                if b.segments >= self.k {
                    self.close_open();
                }
                return;
            }
            _ => self.close_open(),
        }
        if fits {
            self.open = Some(Block {
                start: range.start,
                end: range.end,
                segments: 1,
                next_id: 0,
            });
        }
    }

    fn close_open(&mut self) {
        if let Some(b) = self.open.take() {
            self.closed.push_back(b);
        }
    }

    /// The block (closed or open) holding `offset`, as filled so far.
    pub fn peek_block(&self, offset: u64) -> Option<Block> {
        let holds = |b: &Block| b.start <= offset && offset < b.end;
        if let Some(b) = self.open.filter(holds) {
            return Some(b);
        }
        let i = self.closed.partition_point(|b| b.end <= offset);
        self.closed.get(i).filter(|b| holds(b)).copied()
    }

    /// The block holding `offset`; the open block is closed first if it is
    /// that one (a repair decision fixes a block's extent).
    pub fn block_of(&mut self, offset: u64) -> Option<Block> {
        let block = self.peek_block(offset)?;
        if self.open == Some(block) {
            self.close_open();
        }
        Some(block)
    }

    /// Queues `count` new symbols of the block starting at `start`; false
    /// (nothing queued) if the block is unknown or would run out of ids.
    pub fn queue_symbols(&mut self, start: u64, count: usize) -> bool {
        let i = self.closed.partition_point(|b| b.end <= start);
        let Some(b) = self.closed.get_mut(i).filter(|b| b.start == start) else {
            return false;
        };
        let first = usize::from(b.next_id);
        if count == 0 || first + count > usize::from(MAX_REPAIR_ID) + 1 {
            return false;
        }
        let Some(block) = BlockGeometry::covering(b.start..b.end, self.mss as usize) else {
            return false;
        };
        b.next_id += count as u16;
        for id in first..first + count {
            self.queue.push_back(QueuedSymbol {
                block,
                id: id as u8,
            });
        }
        true
    }

    /// Forgets blocks wholly below `offset` (released by every member) and
    /// their queued symbols.
    pub fn release_below(&mut self, offset: u64) {
        while self.closed.front().is_some_and(|b| b.end <= offset) {
            self.closed.pop_front();
        }
        self.queue.retain(|q| q.block.end() > offset);
    }

    /// Blocks tracked (for tests and bounds: at most one per `k` segments
    /// of the send buffer, plus one per short segment).
    pub fn len(&self) -> usize {
        self.closed.len() + usize::from(self.open.is_some())
    }
}

/// The two prices of repairing a block's pending losses: `(m, d)` = (most
/// segments any one member misses, distinct segments missed), from the
/// members missing each segment.
pub fn block_need<'a>(entries: impl Iterator<Item = &'a [MemberId]>) -> (usize, usize) {
    let mut ids: Vec<MemberId> = Vec::new();
    let mut distinct = 0;
    for e in entries.filter(|e| !e.is_empty()) {
        distinct += 1;
        ids.extend_from_slice(e);
    }
    ids.sort_unstable();
    let mut most = 0;
    let mut run = 0;
    for (i, id) in ids.iter().enumerate() {
        run = if i > 0 && ids[i - 1] == *id {
            run + 1
        } else {
            1
        };
        most = most.max(run);
    }
    (most, distinct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_group_into_blocks_of_k() {
        let mut c = CodedBlocks::new(4, 10);
        for i in 0..10u64 {
            c.on_segment(i * 10..i * 10 + 10, true);
        }
        assert_eq!(c.len(), 3, "4 + 4 + 2 (open)");
        let b = c.block_of(45).unwrap();
        assert_eq!((b.start, b.end, b.segments), (40, 80, 4));
        // A short segment closes the open block and joins none.
        c.on_segment(100..105, true);
        assert!(c.block_of(102).is_none());
        assert_eq!(
            c.peek_block(95).map(|b| (b.start, b.end)),
            Some((80, 100)),
            "open"
        );
        assert_eq!(c.peek_block(102), None, "no block");
        let tail = c.block_of(95).unwrap();
        assert_eq!((tail.start, tail.end, tail.segments), (80, 100, 2));
        // Asking for the open block closes it: later segments start anew.
        c.on_segment(105..115, true);
        c.on_segment(115..125, true);
        assert_eq!(c.block_of(110).unwrap().end, 125);
        c.on_segment(125..135, true);
        assert_eq!(c.block_of(130).unwrap().start, 125);
        // A FIN or message end (not `full`) belongs to no block.
        c.on_segment(135..145, false);
        assert!(c.block_of(140).is_none());
    }

    #[test]
    fn symbols_get_fresh_ids_and_release_drops_them() {
        let mut c = CodedBlocks::new(4, 10);
        for i in 0..8u64 {
            c.on_segment(i * 10..i * 10 + 10, true);
        }
        assert!(c.queue_symbols(0, 3));
        assert!(c.queue_symbols(0, 2));
        let ids: Vec<u8> = c.queue.iter().map(|q| q.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(c.queue[0].block.k, 4);
        assert!(!c.queue_symbols(5, 1), "not a block start");
        assert!(!c.queue_symbols(40, 200), "ids run out");
        assert!(c.queue_symbols(40, 1));
        c.release_below(40);
        assert_eq!(c.queue.len(), 1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn need_is_the_worst_member_against_distinct_segments() {
        let (a, b, x) = (MemberId(1), MemberId(2), MemberId(3));
        let segs: Vec<Vec<MemberId>> = vec![vec![a], vec![b, x], vec![a, x], vec![], vec![b]];
        let (m, d) = block_need(segs.iter().map(|v| v.as_slice()));
        assert_eq!((m, d), (2, 4));
        assert_eq!(block_need(std::iter::empty()), (0, 0));
    }
}
