//! The receiver's reassembly buffer: out-of-order segments land in a ring of
//! fixed capacity (the receive window) and are read in order.
//!
//! Bytes already held are never overwritten: a segment overlapping them
//! stores only its new bytes (RFC 9293 §3.10.7.4 keeps the first copy too).
//! The held ranges are capped (RFC 9000 §21.7): a peer sending 1-byte
//! pieces at every other offset cannot grow them past [`RecvBuffer::max_ranges`];
//! a segment that would start a new range beyond the cap is refused and
//! comes again as a retransmission.

use fanout_core::RangeSet;
use std::ops::Range;

/// Why a segment was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Entirely below the read position or already held.
    Duplicate,
    /// Ends beyond the window (read position + capacity).
    BeyondWindow,
    /// Would add a held range beyond [`RecvBuffer::max_ranges`].
    TooFragmented,
}

/// Fewest held ranges any buffer allows.
pub const MIN_HELD_RANGES: usize = 64;

/// Bytes of window per allowed held range by default: an honest sender's
/// segments of at least 1 200 bytes (RFC 9000 §14's smallest path) leave
/// at most one range per 2 400 bytes (a segment held, a segment missing),
/// so the default cap of one per 512 bytes is 4.7× what honest loss needs.
pub const WINDOW_BYTES_PER_RANGE: usize = 512;

/// Bytes from `read_pos` to `read_pos + capacity`.
#[derive(Debug)]
pub struct RecvBuffer {
    ring: Vec<u8>,
    read_pos: u64,
    /// Held ranges at or above `read_pos` (including ones already readable).
    held: RangeSet,
    /// First offset this buffer ever held (its start).
    floor: u64,
    /// One past the highest offset ever written into the ring: a byte at
    /// `x < read_pos` is still in the ring while `x + capacity ≥` this.
    high_water: u64,
    /// Most ranges `held` may have.
    max_ranges: usize,
}

impl RecvBuffer {
    /// A buffer whose window is `capacity` bytes, holding at most one
    /// range per [`WINDOW_BYTES_PER_RANGE`] of it (and at least
    /// [`MIN_HELD_RANGES`]).
    pub fn new(capacity: usize) -> Self {
        Self::with_max_ranges(
            capacity,
            (capacity / WINDOW_BYTES_PER_RANGE).max(MIN_HELD_RANGES),
        )
    }

    /// A buffer whose window is `capacity` bytes, holding at most
    /// `max_ranges` (≥ 1) separate ranges.
    pub fn with_max_ranges(capacity: usize, max_ranges: usize) -> Self {
        RecvBuffer {
            ring: vec![0; capacity.max(1)],
            read_pos: 0,
            held: RangeSet::new(),
            floor: 0,
            high_water: 0,
            max_ranges: max_ranges.max(1),
        }
    }

    /// Most separate ranges this buffer holds at once.
    pub fn max_ranges(&self) -> usize {
        self.max_ranges
    }

    /// Moves an untouched buffer's start to `offset` (a member joining a
    /// live stream mid-way). Ignored once anything was stored or read.
    pub fn start_at(&mut self, offset: u64) {
        if self.read_pos == 0 && self.held.is_empty() {
            self.read_pos = offset;
            self.floor = offset;
            self.high_water = offset;
        }
    }

    /// Window size in bytes.
    pub fn capacity(&self) -> u64 {
        self.ring.len() as u64
    }

    /// Next offset the application will read.
    pub fn read_pos(&self) -> u64 {
        self.read_pos
    }

    /// First offset not yet received in order (TCP's RCV.NXT).
    pub fn rcv_nxt(&self) -> u64 {
        self.held
            .range_containing(self.read_pos)
            .map_or(self.read_pos, |r| r.end)
    }

    /// Offsets that may be stored: `[read_pos, read_pos + capacity)`.
    pub fn window_end(&self) -> u64 {
        self.read_pos + self.capacity()
    }

    /// Received ranges above [`RecvBuffer::rcv_nxt`].
    pub fn out_of_order(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        let nxt = self.rcv_nxt();
        self.held.iter().filter(move |r| r.start > nxt)
    }

    /// Number of held ranges (at most [`RecvBuffer::max_ranges`]).
    pub fn range_count(&self) -> usize {
        self.held.range_count()
    }

    /// The held range containing `offset`, if any.
    pub fn held_range_containing(&self, offset: u64) -> Option<Range<u64>> {
        self.held.range_containing(offset)
    }

    /// One past the highest byte held, if any is.
    pub fn highest_held_end(&self) -> Option<u64> {
        self.held.max_end()
    }

    /// Stores the bytes of `data` at `offset` that are not held yet (held
    /// bytes keep their first copy); returns how many were stored.
    pub fn insert(&mut self, offset: u64, data: &[u8]) -> Result<u64, Refused> {
        let end = offset + data.len() as u64;
        if end > self.window_end() {
            return Err(Refused::BeyondWindow);
        }
        let start = offset.max(self.read_pos);
        if start >= end || self.held.contains_range(start..end) {
            return Err(Refused::Duplicate);
        }
        if self.held.range_count() >= self.max_ranges && !self.held.touches(start..end) {
            return Err(Refused::TooFragmented);
        }
        let mut at = start;
        while at < end {
            let (gap_start, gap_end) = self.held.next_gap(at);
            if gap_start >= end {
                break;
            }
            let gap_end = gap_end.map_or(end, |e| e.min(end));
            let from = (gap_start - offset) as usize;
            let to = (gap_end - offset) as usize;
            self.write_ring(gap_start, &data[from..to]);
            at = gap_end;
        }
        self.high_water = self.high_water.max(end);
        Ok(self.held.insert(start..end))
    }

    /// Copies `src` into the ring slots of `[at, at + src.len())`.
    fn write_ring(&mut self, mut at: u64, mut src: &[u8]) {
        let cap = self.capacity();
        while !src.is_empty() {
            let idx = (at % cap) as usize;
            let n = src.len().min(self.ring.len() - idx);
            self.ring[idx..idx + n].copy_from_slice(&src[..n]);
            src = &src[n..];
            at += n as u64;
        }
    }

    /// Marks `[offset, offset+len)` as delivered without data (a skip:
    /// bytes that will never come); they read as zeros.
    #[allow(
        dead_code,
        reason = "the real-time modes' SKIP; no engine sends it yet"
    )]
    pub fn skip(&mut self, range: Range<u64>) -> u64 {
        let start = range.start.max(self.read_pos);
        let end = range.end.min(self.window_end());
        if start >= end {
            return 0;
        }
        for gap in self.held.gaps_in(start..end) {
            let cap = self.capacity();
            for at in gap {
                self.ring[(at % cap) as usize] = 0;
            }
        }
        self.high_water = self.high_water.max(end);
        self.held.insert(start..end)
    }

    /// Bytes readable now.
    pub fn readable(&self) -> u64 {
        self.rcv_nxt() - self.read_pos
    }

    /// Gaps of `range` this buffer never received: bytes below the read
    /// position count as received.
    pub fn gaps_in(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let start = range.start.max(self.read_pos);
        self.held.gaps_in(start..range.end.max(start))
    }

    /// Copies the bytes of `range` into `out` if every one of them is
    /// still here: held at or above the read position, or already read but
    /// not yet overwritten in the ring (`[high_water − capacity, read_pos)`,
    /// never below the buffer's start). Coded repair decodes against them
    /// ([`crate::fec`]). False (and `out` unchanged) otherwise.
    pub fn copy_out(&self, range: Range<u64>, out: &mut Vec<u8>) -> bool {
        let cap = self.capacity();
        let oldest = self.floor.max(self.high_water.saturating_sub(cap));
        if range.start < oldest || range.end > self.window_end() || range.start > range.end {
            return false;
        }
        if !self.gaps_in(range.clone()).is_empty() {
            return false;
        }
        let mut at = range.start;
        while at < range.end {
            let idx = (at % cap) as usize;
            let n = ((range.end - at) as usize).min(self.ring.len() - idx);
            out.extend_from_slice(&self.ring[idx..idx + n]);
            at += n as u64;
        }
        true
    }

    /// Copies readable bytes into `out`; returns the count.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let n = (self.readable() as usize).min(out.len());
        let cap = self.capacity();
        let mut done = 0;
        while done < n {
            let idx = ((self.read_pos + done as u64) % cap) as usize;
            let k = (n - done).min(self.ring.len() - idx);
            out[done..done + k].copy_from_slice(&self.ring[idx..idx + k]);
            done += k;
        }
        self.read_pos += n as u64;
        self.held.remove_below(self.read_pos);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reassembles_out_of_order() {
        let mut b = RecvBuffer::new(8);
        assert_eq!(b.insert(4, b"efgh"), Ok(4));
        assert_eq!(b.rcv_nxt(), 0);
        assert_eq!(b.out_of_order().collect::<Vec<_>>(), vec![4..8]);
        assert_eq!(b.insert(8, b"i"), Err(Refused::BeyondWindow));
        assert_eq!(b.insert(0, b"abcd"), Ok(4));
        assert_eq!(b.insert(2, b"cd"), Err(Refused::Duplicate));
        let mut out = [0u8; 5];
        assert_eq!(b.read(&mut out), 5);
        assert_eq!(&out, b"abcde");
        assert_eq!(b.insert(8, b"ijklm"), Ok(5));
        let mut out = [0u8; 16];
        assert_eq!(b.read(&mut out), 8);
        assert_eq!(&out[..8], b"fghijklm");
    }

    #[test]
    fn held_bytes_keep_their_first_copy() {
        let mut b = RecvBuffer::new(16);
        b.insert(2, b"cd").unwrap();
        b.insert(6, b"gh").unwrap();
        // Overlaps both held pieces: only the gaps 0..2, 4..6 and 8..10 are new.
        assert_eq!(b.insert(0, b"XYxyZZzzWW"), Ok(6));
        let mut out = [0u8; 10];
        assert_eq!(b.read(&mut out), 10);
        assert_eq!(&out, b"XYcdZZghWW");
    }

    #[test]
    fn held_ranges_are_capped_but_adjoining_pieces_still_land() {
        let mut b = RecvBuffer::with_max_ranges(64, 3);
        for at in [10, 20, 30] {
            b.insert(at, b"x").unwrap();
        }
        assert_eq!(b.insert(40, b"x"), Err(Refused::TooFragmented));
        assert_eq!(b.range_count(), 3);
        // Adjoining or bridging pieces add no range and are taken.
        assert_eq!(b.insert(11, b"yy"), Ok(2));
        assert_eq!(b.insert(13, b"zzzzzzz"), Ok(7));
        assert_eq!(b.range_count(), 2, "10..21 merged");
        assert_eq!(b.insert(40, b"x"), Ok(1));
        assert_eq!(b.insert(0, &[7; 10]), Ok(10), "in-order data always lands");
        assert_eq!(b.rcv_nxt(), 21);
    }

    #[test]
    fn the_default_cap_follows_the_window() {
        assert_eq!(RecvBuffer::new(4 << 20).max_ranges(), (4 << 20) / 512);
        assert_eq!(RecvBuffer::new(1000).max_ranges(), MIN_HELD_RANGES);
        // A 1-byte piece at every other offset of a 64 KiB window stops at
        // the cap.
        let mut b = RecvBuffer::new(64 << 10);
        let refused = (1..(64u64 << 10))
            .step_by(2)
            .filter(|&at| b.insert(at, b"x") == Err(Refused::TooFragmented))
            .count();
        assert_eq!(b.range_count(), MIN_HELD_RANGES.max((64 << 10) / 512));
        assert_eq!(refused, (32 << 10) - b.range_count());
    }

    #[test]
    fn copy_out_reaches_back_into_what_was_read() {
        let mut b = RecvBuffer::new(8);
        b.insert(0, b"abcdef").unwrap();
        let mut out = [0u8; 4];
        assert_eq!(b.read(&mut out), 4);
        let mut v = Vec::new();
        assert!(b.copy_out(1..6, &mut v), "read bytes are still in the ring");
        assert_eq!(v, b"bcdef");
        assert!(!b.copy_out(5..7, &mut Vec::new()), "6 never arrived");
        assert_eq!(b.gaps_in(0..8), vec![6..8]);
        b.insert(8, b"ij").unwrap(); // overwrites the ring slots of 0 and 1
        assert!(!b.copy_out(1..3, &mut Vec::new()), "overwritten");
        let mut v = Vec::new();
        assert!(b.copy_out(2..4, &mut v));
        assert_eq!(v, b"cd");
        let mut late = RecvBuffer::new(8);
        late.start_at(100);
        assert!(!late.copy_out(96..100, &mut Vec::new()), "before its start");
    }

    proptest! {
        /// Any arrival order of any segmentation reads back the original stream.
        #[test]
        fn any_order_reads_back(data in proptest::collection::vec(any::<u8>(), 1..300),
                                cuts in proptest::collection::vec(1usize..40, 1..20),
                                seed: u64) {
            let mut segs = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < data.len() {
                let n = cuts[i % cuts.len()].min(data.len() - at);
                segs.push((at, n));
                at += n;
                i += 1;
            }
            let mut rng = fanout_core::Rng::new(seed);
            for k in (1..segs.len()).rev() {
                segs.swap(k, rng.below(k as u64 + 1) as usize);
            }
            let mut b = RecvBuffer::new(64);
            let mut got = Vec::new();
            let mut pending = segs;
            while !pending.is_empty() {
                pending.retain(|&(o, n)| b.insert(o as u64, &data[o..o + n]) == Err(Refused::BeyondWindow));
                let mut out = [0u8; 17];
                loop {
                    let k = b.read(&mut out);
                    if k == 0 { break; }
                    got.extend_from_slice(&out[..k]);
                }
            }
            prop_assert_eq!(got, data);
        }
    }
}
