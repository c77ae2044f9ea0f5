//! The ACK lattice: what a set of children has *all* acknowledged.
//!
//! An ACK from a child stands for the set of stream offsets it has received,
//! `[0, cumulative) ∪ SACK` (`docs/wire.md` §4.1), plus a right edge of its
//! receive window and a timestamp echo. [`AckSummary::meet`] is the greatest
//! lower bound of two such summaries (MCTCP §V.B: "when all children have
//! acknowledged a byte, the merger constructs a representative cumulative
//! acknowledgement"):
//!
//! * acknowledged set = the **intersection** of the children's sets, so the
//!   cumulative point is the **minimum** of the children's cumulative points
//!   (MCTCP Fig. 5 `minimum_ack_received`) and the SACK ranges are those every
//!   child holds above it;
//! * window right edge (`cumulative + window`) = the **minimum** of the
//!   children's right edges. MCTCP's rule "window = min" (Fig. 5
//!   `minimum_window_received`) is taken on absolute right edges, because our
//!   windows count from each child's own cumulative point: a child far ahead
//!   with a small window may still accept more than one far behind;
//! * timestamp echo = the **oldest** echo (modulo 2^32, RFC 7323 §5.2
//!   ordering): the newest probe every child has answered; a child that has
//!   not echoed anything yet is neutral (`None` is the top element). This
//!   lattice value is a bound, not what a merger sends: a child idle while
//!   its siblings catch up keeps an old echo, so the oldest echo would
//!   inflate the sender's RTT sample by the idle time. The MCTCP
//!   specification sends the echo of the ACK that completed the merged
//!   coverage instead (`super::mctcp`, `docs/mctcp.md` "RTT through
//!   mergers");
//! * ACK delay = the **maximum** (an upper bound on every child's delay).
//!
//! Each component is a meet (min, set intersection, max on the reversed
//! order), so the whole is commutative, associative and idempotent
//! (`tests/merge_lattice.rs`), and the merged set is a subset of every
//! child's: a merged ACK never acknowledges an offset some child lacks.
//!
//! Summaries are kept exact (untruncated) inside a merger; only
//! [`AckSummary::to_frame`] bounds the SACK list to [`MAX_SACK_RANGES`],
//! dropping the highest ranges, which only shrinks the acknowledged set.

use crate::wire::{AckFrame, WireTimestamp, MAX_SACK_RANGES};
use fanout_core::RangeSet;
use std::ops::Range;

/// One child's (or a subtree's) acknowledgement state, normalised.
///
/// Invariants: every range of `sack` starts strictly above `cumulative`
/// (a range touching it is absorbed into the cumulative point), and
/// `window_end >= cumulative`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckSummary {
    /// Every offset below this was received.
    pub cumulative: u64,
    /// Received ranges above `cumulative` (disjoint, coalesced).
    pub sack: RangeSet,
    /// Right edge of the receive window: `cumulative + window`, in stream
    /// offsets (one too high after the FIN, which is harmless: nothing is
    /// sent beyond the FIN).
    pub window_end: u64,
    /// Oldest timestamp echo (sender clock, µs, low 32 bits); `None` = no
    /// echo known.
    pub timestamp_echo: Option<WireTimestamp>,
    /// Largest ACK delay, µs.
    pub ack_delay_us: u64,
}

/// The older of two 32-bit timestamps in modulo-2^32 order (RFC 7323 §5.2).
/// Exactly half a range apart (ambiguous), the numerically smaller wins, so
/// the choice stays symmetric.
pub fn older_timestamp(a: WireTimestamp, b: WireTimestamp) -> WireTimestamp {
    if a.0.wrapping_sub(b.0) == 1 << 31 {
        WireTimestamp(a.0.min(b.0))
    } else if b.is_at_or_after(a) {
        a
    } else {
        b
    }
}

impl AckSummary {
    /// The state of a child admitted at `start` with a receive window of
    /// `window` bytes, before its first ACK: it has `[0, start)` (a late
    /// joiner never gets that prefix on this session) and nothing else.
    pub fn at_start(start: u64, window: u64) -> Self {
        AckSummary {
            cumulative: start,
            sack: RangeSet::new(),
            window_end: start.saturating_add(window),
            timestamp_echo: None,
            ack_delay_us: 0,
        }
    }

    /// Normalises a decoded ACK frame (whose SACK list the decoder already
    /// bounded to [`MAX_SACK_RANGES`]; blocks may overlap, touch the
    /// cumulative point or come in any order).
    pub fn from_frame(a: &AckFrame) -> Self {
        let mut sack = RangeSet::new();
        for r in a.sack.iter().take(MAX_SACK_RANGES) {
            if r.start < r.end {
                sack.insert(r.clone());
            }
        }
        let mut s = AckSummary {
            cumulative: a.cumulative,
            sack,
            window_end: a.cumulative.saturating_add(a.window),
            timestamp_echo: Some(a.timestamp_echo),
            ack_delay_us: a.ack_delay_us,
        };
        s.normalise();
        s
    }

    /// Restores the invariants: ranges at or below the cumulative point are
    /// absorbed into it.
    fn normalise(&mut self) {
        self.sack.remove_below(self.cumulative);
        if let Some(r) = self.sack.range_containing(self.cumulative) {
            self.cumulative = r.end;
            self.sack.remove_below(r.end);
        }
        self.window_end = self.window_end.max(self.cumulative);
    }

    /// The acknowledged set `[0, cumulative) ∪ sack` as one range set.
    fn acknowledged(&self) -> RangeSet {
        let mut s = self.sack.clone();
        if self.cumulative > 0 {
            s.insert(0..self.cumulative);
        }
        s
    }

    /// The greatest lower bound of `self` and `other` (module docs).
    pub fn meet(&self, other: &AckSummary) -> AckSummary {
        let cumulative = self.cumulative.min(other.cumulative);
        // Exact: the common part of the two acknowledged sets (a child
        // ahead with no SACK still holds the other's SACK ranges below its
        // own cumulative point).
        let mut sack = self.acknowledged().intersection(&other.acknowledged());
        sack.remove_below(cumulative);
        let timestamp_echo = match (self.timestamp_echo, other.timestamp_echo) {
            (Some(a), Some(b)) => Some(older_timestamp(a, b)),
            (a, b) => a.or(b),
        };
        let mut m = AckSummary {
            cumulative,
            sack,
            window_end: self.window_end.min(other.window_end),
            timestamp_echo,
            ack_delay_us: self.ack_delay_us.max(other.ack_delay_us),
        };
        m.normalise();
        m
    }

    /// True if every offset of `r` is acknowledged.
    pub fn acknowledges(&self, r: Range<u64>) -> bool {
        r.start >= r.end || r.end <= self.cumulative || self.acknowledged().contains_range(r)
    }

    /// Highest offset acknowledged, exclusive (`cumulative` or the end of
    /// the highest SACK range).
    pub fn highest(&self) -> u64 {
        self.sack.max_end().unwrap_or(0).max(self.cumulative)
    }

    /// The ACK frame standing for this summary: at most
    /// [`MAX_SACK_RANGES`] SACK ranges, the lowest ones (nearest the holes
    /// the sender must repair first), in ascending order. `fallback_echo` is
    /// echoed when no child echoed anything yet.
    pub fn to_frame(&self, fallback_echo: WireTimestamp) -> AckFrame {
        AckFrame {
            cumulative: self.cumulative,
            window: self.window_end - self.cumulative,
            timestamp_echo: self.timestamp_echo.unwrap_or(fallback_echo),
            ack_delay_us: self.ack_delay_us,
            sack: self.sack.iter().take(MAX_SACK_RANGES).collect(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one SACK block is the common case
mod tests {
    use super::*;

    fn ack(cum: u64, window: u64, ts: u32, sack: &[Range<u64>]) -> AckSummary {
        AckSummary::from_frame(&AckFrame {
            cumulative: cum,
            window,
            timestamp_echo: WireTimestamp(ts),
            ack_delay_us: 0,
            sack: sack.to_vec(),
        })
    }

    #[test]
    fn cumulative_is_the_minimum_and_sack_the_common_part() {
        // Child a misses [100, 200); child b misses [300, 400).
        let a = ack(100, 1000, 10, &[200..500]);
        let b = ack(300, 1000, 20, &[400..600]);
        let m = a.meet(&b);
        assert_eq!(m.cumulative, 100);
        assert_eq!(m.sack.iter().collect::<Vec<_>>(), vec![200..300, 400..500]);
        assert!(!m.acknowledges(100..101));
        assert!(!m.acknowledges(300..301));
        assert!(m.acknowledges(0..100));
        assert!(m.acknowledges(450..500));
    }

    #[test]
    fn window_is_the_lowest_right_edge() {
        // a is behind with a big window, b ahead with a small one.
        let a = ack(100, 1000, 0, &[]);
        let b = ack(1000, 50, 0, &[]);
        let m = a.meet(&b);
        assert_eq!(m.window_end, 1050);
        assert_eq!(m.to_frame(WireTimestamp(0)).window, 950);
    }

    #[test]
    fn a_sack_touching_the_cumulative_point_is_absorbed() {
        let a = ack(100, 10, 0, &[100..150, 170..180]);
        assert_eq!(a.cumulative, 150);
        assert_eq!(a.sack.iter().collect::<Vec<_>>(), vec![170..180]);
    }

    #[test]
    fn the_oldest_echo_wins_across_the_wrap() {
        let older = |a, b| older_timestamp(WireTimestamp(a), WireTimestamp(b)).0;
        assert_eq!(older(5, 9), 5);
        assert_eq!(older(u32::MAX - 3, 2), u32::MAX - 3);
        assert_eq!(older(0, 1 << 31), 0);
        assert_eq!(older(1 << 31, 0), 0);
        let a = ack(10, 0, 7, &[]);
        let none = AckSummary::at_start(0, 100);
        assert_eq!(a.meet(&none).timestamp_echo, Some(WireTimestamp(7)));
    }

    #[test]
    fn the_frame_keeps_the_lowest_ranges() {
        let ranges: Vec<Range<u64>> = (0..40).map(|i| 1000 + i * 10..1005 + i * 10).collect();
        let mut s = AckSummary::at_start(0, 1 << 20);
        for r in &ranges {
            s.sack.insert(r.clone());
        }
        let f = s.to_frame(WireTimestamp(0));
        assert_eq!(f.sack.len(), MAX_SACK_RANGES);
        assert_eq!(f.sack[..], ranges[..MAX_SACK_RANGES]);
    }
}
