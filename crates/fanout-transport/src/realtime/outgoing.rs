//! The sender's record of the messages in its send buffer: where each
//! lies in the stream and its deadline, to decide whether a lost segment
//! is still worth repairing (TCP-RTM) and to widen a SKIP to whole
//! messages (so a receiver drops a damaged message whole and keeps the
//! next one, [`super::reader`]).

use fanout_core::time::Instant;
use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

/// Messages sent or being sent, in stream order.
#[derive(Debug, Default)]
pub struct SentMessages {
    /// `(stream range, deadline)`, ranges adjacent and increasing.
    messages: VecDeque<(Range<u64>, Option<Instant>)>,
}

impl SentMessages {
    /// A message took `range` of the stream (right after the last one).
    pub fn push(&mut self, range: Range<u64>, deadline: Option<Instant>) {
        debug_assert!(self
            .messages
            .back()
            .is_none_or(|(r, _)| r.end <= range.start));
        self.messages.push_back((range, deadline));
    }

    /// Messages remembered.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True when none is remembered.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Index of the message holding `offset`.
    fn index_of(&self, offset: u64) -> Option<usize> {
        let i = self.messages.partition_point(|(r, _)| r.end <= offset);
        self.messages
            .get(i)
            .is_some_and(|(r, _)| r.start <= offset)
            .then_some(i)
    }

    /// The deadline of the message holding `offset`, if it has one.
    pub fn deadline_at(&self, offset: u64) -> Option<Instant> {
        self.index_of(offset).and_then(|i| self.messages[i].1)
    }

    /// Whether the lost bytes `range` are stale at `now`: some message
    /// they belong to has no deadline (TCP-CM: never repaired) or cannot
    /// be repaired in time — its deadline is less than `delivery` (what a
    /// repair takes to be read, about half the round trip) away (TCP-RTM). Bytes of no remembered message (a plain stream) are not.
    pub fn is_stale(&self, range: &Range<u64>, now: Instant, delivery: Duration) -> bool {
        let Some(first) = self.index_of(range.start) else {
            return false;
        };
        self.messages
            .range(first..)
            .take_while(|(r, _)| r.start < range.end)
            .any(|(_, deadline)| deadline.is_none_or(|d| now + delivery >= d))
    }

    /// `range` widened to the whole messages it touches, but not beyond
    /// `sent_to` (bytes not sent yet); and whether the result ends a
    /// message.
    pub fn widen(&self, range: Range<u64>, sent_to: u64) -> (Range<u64>, bool) {
        let start = self
            .index_of(range.start)
            .map_or(range.start, |i| self.messages[i].0.start);
        let last = range.end.saturating_sub(1).max(range.start);
        let end = self
            .index_of(last)
            .map_or(range.end, |i| self.messages[i].0.end);
        let clipped = end.min(sent_to.max(range.end));
        let ends_message = clipped == end && self.index_of(last).is_some();
        (start..clipped, ends_message)
    }

    /// Forgets messages wholly below `base` (released).
    pub fn release_below(&mut self, base: u64) {
        while self.messages.front().is_some_and(|(r, _)| r.end <= base) {
            self.messages.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn three() -> SentMessages {
        let mut m = SentMessages::default();
        m.push(0..100, None);
        m.push(100..3000, Some(at(50)));
        m.push(3000..3100, Some(at(80)));
        m
    }

    #[test]
    fn a_message_without_deadline_is_never_repaired_and_one_with_is_while_in_time() {
        let m = three();
        let half = Duration::from_millis(10);
        assert!(m.is_stale(&(0..100), at(0), half));
        assert!(!m.is_stale(&(1552..3000), at(39), half));
        assert!(m.is_stale(&(1552..3000), at(40), half), "50 ms - 10 ms");
        assert!(!m.is_stale(&(3000..3100), at(60), half));
        assert!(!m.is_stale(&(5000..5100), at(0), half), "not a message");
    }

    #[test]
    fn a_skip_widens_to_whole_messages_but_not_past_what_was_sent() {
        let m = three();
        assert_eq!(m.widen(1552..3000, 3100), (100..3000, true));
        assert_eq!(m.widen(50..1552, 3100), (0..3000, true));
        // The rest of the message is not sent yet: the skip stops there,
        // and the message's end will come with its last segment.
        assert_eq!(m.widen(100..1552, 1552), (100..1552, false));
        assert_eq!(m.widen(3000..3100, 3100), (3000..3100, true));
    }

    #[test]
    fn released_messages_are_forgotten() {
        let mut m = three();
        m.release_below(3000);
        assert_eq!(m.len(), 1);
        assert!(!m.is_stale(&(0..100), at(0), Duration::ZERO));
    }
}
