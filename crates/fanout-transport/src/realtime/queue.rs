//! The pushed send queue of TCP-CM §3: the application's writes never
//! block; when the queue is full the oldest message is dropped, and the
//! transport takes either the oldest message next (P-FIFO) or the newest
//! (P-LIFO).

use fanout_core::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// Which queued message goes next (TCP-CM §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueOrder {
    /// P-FIFO: the oldest first.
    #[default]
    Fifo,
    /// P-LIFO: the newest first (the freshest frame of a live source).
    Lifo,
}

/// How long the queue may grow (TCP-CM §3.1: at most rate × tolerable
/// delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many bytes of messages.
    Bytes(usize),
    /// At most this long at the session's current sending rate (at least
    /// one largest datagram's worth).
    Time(Duration),
}

/// Messages TCP-CM's default queue holds: 100 × MTU.
pub const DEFAULT_QUEUE_DATAGRAMS: usize = 100;

/// A message waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// When the application wrote it.
    pub queued: Instant,
    /// When it is of no more use to any receiver, if ever.
    pub deadline: Option<Instant>,
}

/// What the queue dropped and sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages written.
    pub queued: u64,
    /// Messages taken to be sent.
    pub taken: u64,
    /// Messages dropped to make room (the oldest, TCP-CM §3.1).
    pub discarded: u64,
    /// Bytes of those.
    pub discarded_bytes: u64,
    /// Messages dropped because their deadline passed while queued.
    pub expired: u64,
    /// Summed time dropped messages had waited, in microseconds (divided
    /// by `discarded + expired`: their mean age).
    pub discarded_age_us: u64,
    /// Longest time a dropped message had waited, in microseconds.
    pub max_discarded_age_us: u64,
}

/// The pushed queue: messages in the order written, at most
/// [`PushedQueue::limit_bytes`] of them (but always the newest one).
#[derive(Debug)]
pub struct PushedQueue {
    order: QueueOrder,
    limit_bytes: usize,
    messages: VecDeque<QueuedMessage>,
    bytes: usize,
    stats: QueueStats,
}

impl PushedQueue {
    /// An empty queue taking messages in `order`, holding `limit_bytes`.
    pub fn new(order: QueueOrder, limit_bytes: usize) -> Self {
        PushedQueue {
            order,
            limit_bytes: limit_bytes.max(1),
            messages: VecDeque::new(),
            bytes: 0,
            stats: QueueStats::default(),
        }
    }

    /// Which message goes next.
    pub fn order(&self) -> QueueOrder {
        self.order
    }

    /// Bytes of messages the queue holds at most (a single message longer
    /// than this is still held, alone).
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    /// Messages queued.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True when no message waits.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Bytes of the queued messages.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Counters.
    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }

    /// Adds a message written at `now`; drops the oldest ones while the
    /// queue holds more than its limit (never the one just written).
    /// Never refuses. Returns how many were dropped.
    pub fn push(&mut self, now: Instant, bytes: Vec<u8>, deadline: Option<Instant>) -> usize {
        self.stats.queued += 1;
        self.bytes += bytes.len();
        self.messages.push_back(QueuedMessage {
            bytes,
            queued: now,
            deadline,
        });
        self.trim(now)
    }

    /// Sets the limit (a time limit follows the sending rate) and drops
    /// the oldest messages beyond it; returns how many were dropped.
    pub fn set_limit_bytes(&mut self, now: Instant, limit_bytes: usize) -> usize {
        self.limit_bytes = limit_bytes.max(1);
        self.trim(now)
    }

    fn trim(&mut self, now: Instant) -> usize {
        let mut dropped = 0;
        while self.bytes > self.limit_bytes && self.messages.len() > 1 {
            let m = self.messages.pop_front().expect("more than one message");
            self.bytes -= m.bytes.len();
            self.stats.discarded += 1;
            self.stats.discarded_bytes += m.bytes.len() as u64;
            self.count_age(now, &m);
            dropped += 1;
        }
        dropped
    }

    fn count_age(&mut self, now: Instant, m: &QueuedMessage) {
        let age =
            u64::try_from(now.saturating_duration_since(m.queued).as_micros()).unwrap_or(u64::MAX);
        self.stats.discarded_age_us = self.stats.discarded_age_us.saturating_add(age);
        self.stats.max_discarded_age_us = self.stats.max_discarded_age_us.max(age);
    }

    /// Drops messages whose deadline is at or before `now`.
    fn expire(&mut self, now: Instant) {
        let mut kept = VecDeque::with_capacity(self.messages.len());
        for m in std::mem::take(&mut self.messages) {
            if m.deadline.is_some_and(|d| d <= now) {
                self.bytes -= m.bytes.len();
                self.stats.expired += 1;
                self.count_age(now, &m);
            } else {
                kept.push_back(m);
            }
        }
        self.messages = kept;
    }

    /// The length of the message [`PushedQueue::take`] would return at
    /// `now` (expired messages are dropped first).
    pub fn next_len(&mut self, now: Instant) -> Option<usize> {
        if self
            .messages
            .iter()
            .any(|m| m.deadline.is_some_and(|d| d <= now))
        {
            self.expire(now);
        }
        let m = match self.order {
            QueueOrder::Fifo => self.messages.front(),
            QueueOrder::Lifo => self.messages.back(),
        }?;
        Some(m.bytes.len())
    }

    /// The next message to send at `now`: the oldest (P-FIFO) or newest
    /// (P-LIFO) whose deadline has not passed.
    pub fn take(&mut self, now: Instant) -> Option<QueuedMessage> {
        self.next_len(now)?;
        let m = match self.order {
            QueueOrder::Fifo => self.messages.pop_front(),
            QueueOrder::Lifo => self.messages.pop_back(),
        }?;
        self.bytes -= m.bytes.len();
        self.stats.taken += 1;
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn fifo_sends_oldest_first_and_a_full_queue_drops_the_oldest() {
        let mut q = PushedQueue::new(QueueOrder::Fifo, 10);
        assert_eq!(q.push(at(0), vec![1; 4], None), 0);
        assert_eq!(q.push(at(1), vec![2; 4], None), 0);
        // 12 bytes > 10: the oldest goes, 1 ms after it was written.
        assert_eq!(q.push(at(2), vec![3; 4], None), 1);
        assert_eq!(q.stats().discarded, 1);
        assert_eq!(q.stats().max_discarded_age_us, 2000);
        assert_eq!(q.take(at(3)).unwrap().bytes, vec![2; 4]);
        assert_eq!(q.take(at(3)).unwrap().bytes, vec![3; 4]);
        assert!(q.take(at(3)).is_none());
    }

    #[test]
    fn lifo_sends_newest_first_and_still_drops_the_oldest() {
        let mut q = PushedQueue::new(QueueOrder::Lifo, 10);
        q.push(at(0), vec![1; 4], None);
        q.push(at(1), vec![2; 4], None);
        q.push(at(2), vec![3; 4], None);
        assert_eq!(q.take(at(3)).unwrap().bytes, vec![3; 4]);
        assert_eq!(q.take(at(3)).unwrap().bytes, vec![2; 4]);
        assert_eq!(q.stats().discarded, 1);
    }

    #[test]
    fn a_message_longer_than_the_limit_is_kept_alone() {
        let mut q = PushedQueue::new(QueueOrder::Fifo, 10);
        q.push(at(0), vec![1; 4], None);
        assert_eq!(q.push(at(0), vec![2; 50], None), 1);
        assert_eq!(q.len(), 1);
        assert_eq!(q.take(at(0)).unwrap().bytes.len(), 50);
    }

    #[test]
    fn expired_messages_are_dropped_and_counted() {
        let mut q = PushedQueue::new(QueueOrder::Fifo, 100);
        q.push(at(0), vec![1; 4], Some(at(5)));
        q.push(at(1), vec![2; 4], Some(at(50)));
        let m = q.take(at(10)).unwrap();
        assert_eq!(m.bytes, vec![2; 4]);
        assert_eq!(q.stats().expired, 1);
        assert_eq!(q.stats().max_discarded_age_us, 10_000);
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn a_lower_limit_drops_the_oldest_at_once() {
        let mut q = PushedQueue::new(QueueOrder::Fifo, 100);
        for i in 0..5 {
            q.push(at(i), vec![i as u8; 10], None);
        }
        assert_eq!(q.set_limit_bytes(at(5), 25), 3);
        assert_eq!(q.take(at(5)).unwrap().bytes, vec![3; 10]);
    }

    /// The naive model: every message written, minus the oldest while over
    /// the limit; taken from the front or the back.
    #[derive(Debug, Clone)]
    enum Op {
        Push(usize),
        Take,
        Limit(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1usize..40).prop_map(Op::Push),
            Just(Op::Take),
            (1usize..120).prop_map(Op::Limit),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_naive_model(lifo: bool, ops in proptest::collection::vec(op(), 0..200)) {
            let order = if lifo { QueueOrder::Lifo } else { QueueOrder::Fifo };
            let mut q = PushedQueue::new(order, 60);
            let mut model: Vec<(u32, usize)> = Vec::new();
            let mut limit = 60usize;
            let mut next_id = 0u32;
            let mut dropped = 0u64;
            for o in ops {
                match o {
                    Op::Push(len) => {
                        let mut bytes = vec![0u8; len];
                        bytes[..4.min(len)].copy_from_slice(&next_id.to_be_bytes()[..4.min(len)]);
                        q.push(at(0), bytes, None);
                        model.push((next_id, len));
                        next_id += 1;
                    }
                    Op::Take => {
                        let got = q.take(at(0)).map(|m| m.bytes.len());
                        let want = if lifo { model.pop() } else if model.is_empty() { None } else { Some(model.remove(0)) };
                        prop_assert_eq!(got, want.map(|w| w.1));
                    }
                    Op::Limit(l) => {
                        q.set_limit_bytes(at(0), l);
                        limit = l;
                    }
                }
                while model.iter().map(|m| m.1).sum::<usize>() > limit && model.len() > 1 {
                    model.remove(0);
                    dropped += 1;
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.bytes(), model.iter().map(|m| m.1).sum::<usize>());
                prop_assert_eq!(q.stats().discarded, dropped);
            }
        }
    }
}
