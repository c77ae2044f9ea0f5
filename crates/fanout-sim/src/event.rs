//! The discrete-event queue: events ordered by (virtual time, insertion
//! sequence), so simultaneous events run in the order they were scheduled and
//! every run with the same inputs is identical.
//!
//! Most events of a large run are scheduled a *fixed* delay after the
//! current instant (a packet arrives a link's propagation delay after it
//! leaves). Such events are filed in a [`Lane`]: a FIFO keyed by that
//! delay. Since the clock never goes backwards and sequence numbers only
//! grow, a lane is always sorted by (time, sequence), so only its head needs
//! to sit in the binary heap. The heap then holds the irregular events
//! (timers, calls) plus one marker per non-empty lane instead of every packet
//! in flight: with 1000 links × ~100 packets in flight it shrinks from ~10⁵
//! to ~10³ entries. The pop order is exactly the (time, sequence) order of a
//! plain heap, so lanes change speed, never results.

use fanout_core::Instant;
use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

/// What a heap entry stands for.
enum Slot<E> {
    /// An event kept in the heap itself.
    Event(E),
    /// The head of lane `.0` (its time and sequence are the entry's).
    Lane(u32),
}

struct Entry<E> {
    at: Instant,
    seq: u64,
    slot: Slot<E>,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A FIFO of events all scheduled a fixed delay after the time they were
/// scheduled at (see the module docs). Obtained from [`EventQueue::lane`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(u32);

/// A min-queue of events keyed by (time, sequence number). The sequence
/// number is a monotone counter, so ties break in scheduling order (FIFO).
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    /// Per lane: pending (time, sequence, event), sorted.
    lanes: Vec<VecDeque<(Instant, u64, E)>>,
    /// Lane of each delay (ns).
    lane_by_delay: BTreeMap<u64, Lane>,
    next_seq: u64,
    /// Pending events (heap events plus lane contents).
    len: usize,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            lanes: Vec::new(),
            lane_by_delay: BTreeMap::new(),
            next_seq: 0,
            len: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lane for events scheduled `delay_nanos` ns after the current
    /// instant (created on first use; one lane per distinct delay).
    pub fn lane(&mut self, delay_nanos: u64) -> Lane {
        let next = Lane(u32::try_from(self.lanes.len()).expect("fewer than 2³² lanes"));
        let lane = *self.lane_by_delay.entry(delay_nanos).or_insert(next);
        if lane == next {
            self.lanes.push(VecDeque::new());
        }
        lane
    }

    /// Schedules `event` at virtual time `at`.
    pub fn schedule(&mut self, at: Instant, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.len += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq,
            slot: Slot::Event(event),
        }));
    }

    /// Schedules `event` at `at` in `lane`. The caller guarantees that `at`
    /// is not earlier than any event already in the lane (true when `at` is
    /// the current instant plus the lane's fixed delay); the order is then
    /// the same as [`EventQueue::schedule`]'s.
    pub fn schedule_in(&mut self, lane: Lane, at: Instant, event: E) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.len += 1;
        let q = &mut self.lanes[lane.0 as usize];
        debug_assert!(
            q.back().is_none_or(|&(t, _, _)| t <= at),
            "lane events out of order"
        );
        if q.is_empty() {
            self.heap.push(Reverse(Entry {
                at,
                seq,
                slot: Slot::Lane(lane.0),
            }));
        }
        q.push_back((at, seq, event));
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    /// Removes and returns the earliest event (FIFO among equal times).
    pub fn pop(&mut self) -> Option<(Instant, E)> {
        let mut top = self.heap.peek_mut()?;
        self.len -= 1;
        let Slot::Lane(i) = top.0.slot else {
            let Reverse(Entry { at, slot, .. }) = PeekMut::pop(top);
            let Slot::Event(event) = slot else {
                unreachable!("checked above")
            };
            return Some((at, event));
        };
        let q = &mut self.lanes[i as usize];
        let (at, seq, event) = q.pop_front().expect("lane marker without events");
        debug_assert_eq!((at, seq), (top.0.at, top.0.seq));
        match q.front() {
            // The lane's next event replaces its marker: one sift instead of
            // a pop and a push.
            Some(&(next_at, next_seq, _)) => {
                top.0.at = next_at;
                top.0.seq = next_seq;
            }
            None => {
                PeekMut::pop(top);
            }
        }
        Some((at, event))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no event is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_break_in_scheduling_order() {
        let mut q = EventQueue::new();
        let t = Instant::from_nanos(5);
        q.schedule(t, 'b');
        q.schedule(Instant::from_nanos(1), 'a');
        q.schedule(t, 'c');
        q.schedule(t, 'd');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['a', 'b', 'c', 'd']);
    }

    #[test]
    fn lanes_pop_in_the_same_order_as_the_heap() {
        // A pseudo-random mix of heap events and fixed-delay lane events,
        // popped interleaved with scheduling, against a heap-only queue.
        let mut lanes = EventQueue::new();
        let mut plain = EventQueue::new();
        let delays = [0u64, 3, 7, 7, 10];
        let mut x = 12_345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut now = 0u64;
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for id in 0..5_000u32 {
            let r = next();
            if r % 3 == 0 {
                let at = Instant::from_nanos(now + r % 11);
                lanes.schedule(at, id);
                plain.schedule(at, id);
            } else {
                let d = delays[(r % 5) as usize];
                let lane = lanes.lane(d);
                let at = Instant::from_nanos(now + d);
                lanes.schedule_in(lane, at, id);
                plain.schedule(at, id);
            }
            if next() % 2 == 0 {
                assert_eq!(lanes.peek_time(), plain.peek_time());
                let (a, b) = (lanes.pop().unwrap(), plain.pop().unwrap());
                now = a.0.as_nanos();
                got.push(a);
                want.push(b);
            }
            assert_eq!(lanes.len(), plain.len());
        }
        got.extend(std::iter::from_fn(|| lanes.pop()));
        want.extend(std::iter::from_fn(|| plain.pop()));
        assert_eq!(got, want);
        assert!(lanes.is_empty());
    }
}
