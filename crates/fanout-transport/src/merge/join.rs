//! Join (CONNECT) merging: when a merger opens its own membership upstream.
//!
//! MCTCP merges the receivers' SYNs into one (MCTCP §V.A): "our current merge
//! spec contains both time, sender count, and a time/sender count
//! combination mechanism for connection establishment". [`JoinMerge`] is
//! that choice; [`ConnectSummary`] merges the children's CONNECT options the
//! way MCTCP merges TCP options (§V.C): the MSS is the **minimum**
//! advertised by any child — here CONNECT's `max_payload`, the only place our
//! protocol carries an MSS (ACKs have none) — and the initial window the
//! **minimum** (CONNECT's window counts from the start of delivery, so the
//! minimum is the common right edge).

use crate::wire::{ConnectFrame, WireTimestamp};
use fanout_core::time::Instant;
use std::time::Duration;

/// When the merged CONNECT goes upstream (MCTCP §V.A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinMerge {
    /// Once this many children have asked to join.
    Count(usize),
    /// This long after the first child asked.
    Timer(Duration),
    /// Whichever comes first: the count, or the timer.
    CountOrTimer(usize, Duration),
}

impl JoinMerge {
    /// Whether the gathered joins are ready to go upstream: `children`
    /// joined, the first at `first`.
    pub fn ready(self, children: usize, first: Instant, now: Instant) -> bool {
        let by_count = |n: usize| children >= n.max(1);
        let by_timer = |d: Duration| now >= first + d;
        match self {
            JoinMerge::Count(n) => by_count(n),
            JoinMerge::Timer(d) => children > 0 && by_timer(d),
            JoinMerge::CountOrTimer(n, d) => by_count(n) || (children > 0 && by_timer(d)),
        }
    }

    /// When the timer part fires, for a first join at `first`.
    pub fn deadline(self, first: Instant) -> Option<Instant> {
        match self {
            JoinMerge::Count(_) => None,
            JoinMerge::Timer(d) | JoinMerge::CountOrTimer(_, d) => Some(first + d),
        }
    }
}

/// The merged options of the children's CONNECTs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectSummary {
    /// Smallest `max_payload` (the subtree's MSS), bytes.
    pub max_payload: u64,
    /// Smallest initial receive window, bytes from the start of delivery.
    pub window: u64,
}

impl ConnectSummary {
    /// The options of one child's CONNECT.
    pub fn of(c: &ConnectFrame) -> Self {
        ConnectSummary {
            max_payload: c.max_payload,
            window: c.window,
        }
    }

    /// The meet of two children's options (minimum of each).
    pub fn meet(self, other: ConnectSummary) -> ConnectSummary {
        ConnectSummary {
            max_payload: self.max_payload.min(other.max_payload),
            window: self.window.min(other.window),
        }
    }

    /// The CONNECT a merger sends upstream for its subtree; `timestamp` is
    /// the merger's own clock: the parent's ACCEPT echoes it, which gives
    /// the merger its RTT to the parent.
    pub fn to_connect(self, timestamp: WireTimestamp) -> ConnectFrame {
        ConnectFrame {
            max_payload: self.max_payload,
            window: self.window,
            timestamp,
            resume_from: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn by_count_waits_for_the_count_only() {
        let p = JoinMerge::Count(3);
        assert!(!p.ready(2, at(0), at(1_000_000)));
        assert!(p.ready(3, at(0), at(0)));
        assert_eq!(p.deadline(at(0)), None);
    }

    #[test]
    fn by_timer_waits_for_the_timer_only() {
        let p = JoinMerge::Timer(Duration::from_millis(200));
        assert!(!p.ready(100, at(0), at(199)));
        assert!(p.ready(1, at(0), at(200)));
        assert!(!p.ready(0, at(0), at(500)), "nobody to announce");
        assert_eq!(p.deadline(at(10)), Some(at(210)));
    }

    #[test]
    fn count_or_timer_takes_the_first() {
        let p = JoinMerge::CountOrTimer(4, Duration::from_millis(200));
        assert!(p.ready(4, at(0), at(1)));
        assert!(!p.ready(3, at(0), at(199)));
        assert!(p.ready(3, at(0), at(200)));
    }

    #[test]
    fn options_merge_to_the_minimum() {
        let a = ConnectSummary {
            max_payload: 1400,
            window: 1 << 20,
        };
        let b = ConnectSummary {
            max_payload: 1200,
            window: 1 << 22,
        };
        assert_eq!(
            a.meet(b),
            ConnectSummary {
                max_payload: 1200,
                window: 1 << 20
            }
        );
        assert_eq!(a.meet(b), b.meet(a));
    }
}
