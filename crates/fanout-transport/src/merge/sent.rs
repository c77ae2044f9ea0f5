//! What a merger knows of how far its parent sent the stream: the SENT
//! answers to its ROSTER pages (`docs/wire.md` §4.8), each with the time
//! it learned it. A merger never sees the data, so this is its only
//! evidence of what a child can have received, and of *since when*: a
//! child is behind only once the stream was sent past it, so its stall
//! clock starts then, not at its last advance (an idle session stalls
//! nobody).

use fanout_core::time::Instant;
use std::collections::VecDeque;

/// Most SENT values kept. Older ones are forgotten, which only makes
/// [`SentLog::since`] later (a stall is found later, never sooner).
pub const MAX_SENT_HISTORY: usize = 64;

/// Increasing SENT values and when each was learned.
#[derive(Debug, Clone, Default)]
pub struct SentLog {
    /// (end, learned at), `end` strictly increasing.
    history: VecDeque<(u64, Instant)>,
}

impl SentLog {
    /// The parent said at `now` that the stream was sent up to `end`
    /// (ignored unless it is further than before).
    pub fn learn(&mut self, end: u64, now: Instant) {
        if self.history.back().is_some_and(|&(e, _)| e >= end) {
            return;
        }
        if self.history.len() == MAX_SENT_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((end, now));
    }

    /// How far the stream was sent, as far as known (0 before any SENT).
    pub fn end(&self) -> u64 {
        self.history.back().map_or(0, |&(e, _)| e)
    }

    /// Since when the stream is known to be sent past `offset` (`None`:
    /// not yet). O(log H).
    pub fn since(&self, offset: u64) -> Option<Instant> {
        let i = self.history.partition_point(|&(e, _)| e <= offset);
        self.history.get(i).map(|&(_, t)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(s: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(s)
    }

    #[test]
    fn since_is_when_the_stream_first_went_past_an_offset() {
        let mut log = SentLog::default();
        assert_eq!((log.end(), log.since(0)), (0, None));
        log.learn(1000, at(1));
        log.learn(1000, at(2));
        log.learn(500, at(3));
        log.learn(3000, at(4));
        assert_eq!(log.end(), 3000);
        assert_eq!(log.since(0), Some(at(1)));
        assert_eq!(log.since(999), Some(at(1)));
        assert_eq!(log.since(1000), Some(at(4)));
        assert_eq!(log.since(3000), None);
    }

    #[test]
    fn the_history_is_bounded_and_forgetting_only_delays() {
        let mut log = SentLog::default();
        for k in 1..=(MAX_SENT_HISTORY as u64 + 10) {
            log.learn(k * 100, at(k));
        }
        assert_eq!(log.history.len(), MAX_SENT_HISTORY);
        // Offset 0 was passed at 1 s; the oldest kept entry is from 11 s.
        assert_eq!(log.since(0), Some(at(11)));
    }
}
