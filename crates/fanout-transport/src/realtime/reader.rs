//! Reading a real-time stream message by message (TCP-CM §3.3 framing):
//! where messages end, and which bytes were skipped, so that only whole
//! messages reach the application and a damaged one is dropped as one.
//!
//! A message ends where a segment flagged MSG_END ends, or where a SKIP
//! that ends a message ends (the sender widens every SKIP to whole
//! messages, `docs/wire.md` §4.5). The bytes between the read position and
//! the next known end are one message; if any of them was skipped, it is
//! damaged and dropped whole.
//!
//! With a latency budget, the receiver also skips a hole by itself
//! (TCP-RTM): once the first data that arrived beyond it has waited the
//! budget, waiting longer for the hole would make that data late, so the
//! hole is given up and the data behind it delivered. Messages whose
//! deadline the sender named (DEADLINE, [`super::deadline`]) are read only
//! until it: a hole is skipped at the deadline of the first message behind
//! it, and a message complete only after its deadline is dropped.

use fanout_core::time::Instant;
use fanout_core::RangeSet;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::time::Duration;

/// Message ends held per byte of receive window at most: 1 per 64 bytes
/// (a sender's smallest honest message is far longer on average).
pub const WINDOW_BYTES_PER_MESSAGE_END: usize = 64;

/// The next message at the read position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextMessage {
    /// Its bytes in the stream.
    pub range: Range<u64>,
    /// Some of them were skipped: drop it.
    pub damaged: bool,
    /// Its deadline on this receiver's clock, if the sender named one.
    pub deadline: Option<Instant>,
    /// When the sender first sent some of it, on this receiver's clock.
    pub sent: Option<Instant>,
}

/// Message ends and skipped bytes above the read position.
#[derive(Debug)]
pub struct MessageBounds {
    ends: BTreeSet<u64>,
    skipped: RangeSet,
    max_ends: usize,
    /// How long data beyond a hole may wait for it (`None`: only the
    /// sender skips).
    latency: Option<Duration>,
    /// When data beyond RCV.NXT arrived, by the offset it starts at (the
    /// first arrival of each out-of-order range; at most one entry per
    /// held range, so bounded like them).
    arrivals: BTreeMap<u64, Instant>,
    /// Deadlines by the offset of the segment that named them (at most
    /// `max_ends`).
    deadlines: BTreeMap<u64, Instant>,
    /// When each segment held was sent, by its offset (at most
    /// `max_ends`).
    sent: BTreeMap<u64, Instant>,
}

impl MessageBounds {
    /// Bounds for a receive window of `window_bytes`; with a `latency`,
    /// holes are skipped once data behind them has waited that long.
    pub fn new(window_bytes: usize, latency: Option<Duration>) -> Self {
        MessageBounds {
            ends: BTreeSet::new(),
            skipped: RangeSet::new(),
            max_ends: (window_bytes / WINDOW_BYTES_PER_MESSAGE_END).max(1024),
            latency,
            arrivals: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            sent: BTreeMap::new(),
        }
    }

    /// The segment at `offset` was sent at `at` (this receiver's clock).
    /// The stream goes out in order, so it was first sent no later than
    /// any segment beyond it: a repair (whose first sending was lost)
    /// counts from the first sending of the next segment held.
    pub fn on_sent(&mut self, offset: u64, at: Instant) {
        if self.sent.len() < self.max_ends || self.sent.contains_key(&offset) {
            let later = self.sent.range(offset + 1..).next().map(|(_, &t)| t);
            let first = later.map_or(at, |l| l.min(at));
            let t = self.sent.entry(offset).or_insert(first);
            *t = (*t).min(first);
        }
    }

    /// The segment at `offset` belongs to a message due at `deadline`
    /// (forgotten when `max_ends` deadlines are held: that message is then
    /// read whenever it completes).
    pub fn on_deadline(&mut self, offset: u64, deadline: Instant) {
        if self.deadlines.len() < self.max_ends || self.deadlines.contains_key(&offset) {
            self.deadlines.insert(offset, deadline);
        }
    }

    /// The earliest deadline named for bytes of `range`.
    fn deadline_in(&self, range: Range<u64>) -> Option<Instant> {
        self.deadlines.range(range).map(|(_, &d)| d).min()
    }

    /// Data starting a held range at `start` above RCV.NXT arrived at `now`
    /// (kept only if no earlier arrival is known for that range).
    pub fn on_arrival_beyond(&mut self, held: Range<u64>, now: Instant) {
        if self.latency.is_some() && self.arrivals.range(held.clone()).next().is_none() {
            self.arrivals.insert(held.start, now);
        }
    }

    /// When the hole at `rcv_nxt` is to be skipped, if `next_held` (the
    /// first range held beyond it) exists: its earliest arrival plus the
    /// latency, or the deadline of data in it, whichever comes first.
    pub fn hole_deadline(&self, next_held: Option<Range<u64>>) -> Option<Instant> {
        let held = next_held?;
        let by_budget = self.latency.and_then(|latency| {
            let first = self.arrivals.range(held.clone()).map(|(_, &t)| t).min()?;
            Some(first + latency)
        });
        let by_deadline = self.deadline_in(held);
        match (by_budget, by_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets arrivals below `rcv_nxt` (the holes before them are gone).
    pub fn on_rcv_nxt(&mut self, rcv_nxt: u64) {
        while self
            .arrivals
            .first_key_value()
            .is_some_and(|(&o, _)| o < rcv_nxt)
        {
            self.arrivals.pop_first();
        }
    }

    /// Whether one more end may be remembered (a segment that would add
    /// one beyond the cap is refused and comes again).
    pub fn has_room(&self) -> bool {
        self.ends.len() < self.max_ends
    }

    /// A message ends at `offset`.
    pub fn on_message_end(&mut self, offset: u64) {
        if self.has_room() {
            self.ends.insert(offset);
        }
    }

    /// `range` was skipped (bytes this receiver lacked when the sender's
    /// SKIP came); its end ends a message if `ends_message`.
    pub fn on_skip(&mut self, range: Range<u64>, ends_message: bool) {
        if range.is_empty() {
            return;
        }
        if ends_message {
            self.on_message_end(range.end);
        }
        self.skipped.insert(range);
    }

    /// Skipped bytes remembered (above the read position).
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped.len()
    }

    /// The message starting at `read_pos` if all of it arrived (or was
    /// skipped) below `rcv_nxt`; `fin` (the stream's end, if known) ends
    /// the last one.
    pub fn next(&self, read_pos: u64, rcv_nxt: u64, fin: Option<u64>) -> Option<NextMessage> {
        let end = self
            .ends
            .range(read_pos + 1..)
            .next()
            .copied()
            .or(fin.filter(|&f| f > read_pos))?;
        if end > rcv_nxt {
            return None;
        }
        Some(NextMessage {
            range: read_pos..end,
            damaged: self.skipped.overlap_len(read_pos..end) > 0,
            deadline: self.deadline_in(read_pos..end),
            sent: self.sent.range(read_pos..end).map(|(_, &t)| t).min(),
        })
    }

    /// Forgets everything below `read_pos` (read).
    pub fn release_below(&mut self, read_pos: u64) {
        while self.ends.first().is_some_and(|&e| e <= read_pos) {
            self.ends.pop_first();
        }
        self.skipped.remove_below(read_pos);
        while self
            .deadlines
            .first_key_value()
            .is_some_and(|(&o, _)| o < read_pos)
        {
            self.deadlines.pop_first();
        }
        while self
            .sent
            .first_key_value()
            .is_some_and(|(&o, _)| o < read_pos)
        {
            self.sent.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_messages_come_out_and_a_skipped_one_is_damaged() {
        let mut b = MessageBounds::new(1 << 20, None);
        b.on_message_end(100);
        b.on_message_end(300);
        b.on_skip(100..300, true);
        b.on_message_end(400);
        assert_eq!(
            b.next(0, 400, None),
            Some(NextMessage {
                range: 0..100,
                damaged: false,
                deadline: None,
                sent: None,
            })
        );
        b.release_below(100);
        assert!(b.next(100, 400, None).unwrap().damaged);
        b.release_below(300);
        assert_eq!(b.next(300, 399, None), None, "not all of it arrived");
        assert!(!b.next(300, 400, None).unwrap().damaged);
    }

    #[test]
    fn a_skip_that_ends_a_message_keeps_the_next_one_whole() {
        // The segment carrying the first message's end was lost: the SKIP
        // says where it ended, so the second message still comes out.
        let mut b = MessageBounds::new(1 << 20, None);
        b.on_skip(0..1400, true);
        b.on_message_end(1500);
        assert!(b.next(0, 1500, None).unwrap().damaged);
        b.release_below(1400);
        assert_eq!(b.next(1400, 1500, None).unwrap().range, 1400..1500);
        assert!(!b.next(1400, 1500, None).unwrap().damaged);
    }

    #[test]
    fn the_end_of_the_stream_ends_the_last_message() {
        let b = MessageBounds::new(1 << 20, None);
        assert_eq!(b.next(0, 50, Some(50)).unwrap().range, 0..50);
        assert_eq!(b.next(50, 50, Some(50)), None);
    }

    #[test]
    fn a_hole_is_skipped_once_the_data_behind_it_waited_the_latency() {
        let at = |ms| Instant::ZERO + Duration::from_millis(ms);
        let mut b = MessageBounds::new(1 << 20, Some(Duration::from_millis(80)));
        assert_eq!(b.hole_deadline(None), None, "no hole");
        b.on_arrival_beyond(1000..2000, at(10));
        b.on_arrival_beyond(1000..3000, at(20)); // the range grew: still 10
        assert_eq!(b.hole_deadline(Some(1000..3000)), Some(at(90)));
        b.on_arrival_beyond(5000..6000, at(30));
        b.on_rcv_nxt(3000);
        assert_eq!(b.hole_deadline(Some(5000..6000)), Some(at(110)));
        let none = MessageBounds::new(1 << 20, None);
        assert_eq!(none.hole_deadline(Some(5000..6000)), None);
    }

    #[test]
    fn named_deadlines_bound_the_wait_for_a_hole_and_come_with_the_message() {
        let at = |ms| Instant::ZERO + Duration::from_millis(ms);
        let mut b = MessageBounds::new(1 << 20, Some(Duration::from_millis(500)));
        b.on_message_end(1000);
        b.on_message_end(2000);
        b.on_deadline(0, at(100));
        b.on_deadline(1000, at(140));
        b.on_arrival_beyond(1000..2000, at(20));
        // The message behind the hole is due before the budget runs out.
        assert_eq!(b.hole_deadline(Some(1000..2000)), Some(at(140)));
        assert_eq!(b.next(0, 2000, None).unwrap().deadline, Some(at(100)));
        b.release_below(1000);
        assert_eq!(b.next(1000, 2000, None).unwrap().deadline, Some(at(140)));
        b.release_below(2000);
        assert!(b.deadlines.is_empty());
        // Without a budget, deadlines alone skip holes.
        let mut d = MessageBounds::new(1 << 20, None);
        d.on_deadline(3000, at(70));
        assert_eq!(d.hole_deadline(Some(3000..4000)), Some(at(70)));
        assert_eq!(d.hole_deadline(Some(5000..6000)), None);
    }

    #[test]
    fn a_repaired_message_counts_from_the_first_sending_after_it() {
        let at = |ms| Instant::ZERO + Duration::from_millis(ms);
        let mut b = MessageBounds::new(1 << 20, None);
        b.on_message_end(1000);
        b.on_message_end(2000);
        b.on_message_end(3000);
        b.on_sent(0, at(0));
        b.on_sent(2000, at(20));
        // The segment at 1000 (first sent at 10, lost) comes as a repair
        // sent at 80: it was first sent before 20.
        b.on_sent(1000, at(80));
        assert_eq!(b.next(0, 3000, None).unwrap().sent, Some(at(0)));
        b.release_below(1000);
        assert_eq!(b.next(1000, 3000, None).unwrap().sent, Some(at(20)));
        b.release_below(2000);
        assert_eq!(b.next(2000, 3000, None).unwrap().sent, Some(at(20)));
    }

    #[test]
    fn ends_are_capped() {
        let mut b = MessageBounds::new(0, None);
        for e in 1..=2000 {
            b.on_message_end(e);
        }
        assert!(!b.has_room());
        assert_eq!(b.ends.len(), 1024);
    }
}
