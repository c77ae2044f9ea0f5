//! RACK's reordering window and its adaptation (RFC 8985 §6.2 steps 3–4).
//!
//! A path that reorders (a multipath bundle, a Wi-Fi retry, a NIC with
//! several queues) delivers some segments after later ones. Until that is
//! seen, a hole with DupThresh segments SACKed above it is lost at once
//! (RFC 6675's trigger); once seen, a hole waits `min_rtt / 4` for its
//! segment, and longer each round trip in which a repair proves spurious.
//! Without this every reordered segment is a loss, a repair and a
//! congestion response: 1% of the segments arriving 2 ms late cut a
//! 100 Mbit/s session to a tenth.
//!
//! RFC 8985 learns that a repair was spurious from a DSACK (RFC 2883),
//! which fanout's receivers do not send. The sender learns it from the
//! timing instead, as RFC 8985 §6.1 already does for RACK: a repair
//! acknowledged well within `min_rtt` after it went out (half of it, in
//! `recovery.rs`) cannot have been the copy that arrived.

use std::time::Duration;

/// Recovery episodes without a spurious repair after which the window
/// shrinks back to one step (RFC 8985 §6.2 step 4: `reo_wnd_persist`).
const PERSIST_EPISODES: u32 = 16;
/// Most steps of `min_rtt / 4` (the window is also capped at SRTT).
const MAX_STEPS: u32 = 255;

/// One peer's view of how much its path reorders.
#[derive(Debug, Clone)]
pub(super) struct ReorderWindow {
    /// RACK.fack: the highest end of a segment delivered so far.
    fack: u64,
    /// RACK.reordering_seen: a segment sent once was delivered below
    /// `fack`, or a repair proved spurious.
    seen: bool,
    /// RACK.reo_wnd_mult: the window in steps of `min_rtt / 4` (≥ 1).
    steps: u32,
    /// Recovery episodes left before `steps` resets to 1.
    persist: u32,
    /// RACK.dsack_round: `SND.NXT` when `steps` last grew; it grows again
    /// only once the cumulative ACK passes it (once per round trip).
    round_end: Option<u64>,
    /// `SND.NXT` at the latest RTO, until the cumulative ACK passes it:
    /// an RTO deems the whole flight lost, and the copies of what was
    /// merely in flight are acknowledged early — no sign of reordering.
    rto_edge: Option<u64>,
    /// The latest tail loss probe (RFC 8985 §7.3): a probe sent because
    /// an ACK was lost is acknowledged early too, and says nothing of the
    /// path's order (as Linux leaves a DSACK of a probe out).
    probe: Option<std::ops::Range<u64>>,
    /// Repairs acknowledged too soon to have been the copy delivered.
    spurious_repairs: u64,
}

impl ReorderWindow {
    /// No reordering seen; the window is one step.
    pub(super) fn new(start: u64) -> Self {
        ReorderWindow {
            fack: start,
            seen: false,
            steps: 1,
            persist: 0,
            round_end: None,
            rto_edge: None,
            probe: None,
            spurious_repairs: 0,
        }
    }

    /// Whether the path was seen to reorder.
    pub(super) fn seen(&self) -> bool {
        self.seen
    }

    /// Repairs that proved spurious so far.
    pub(super) fn spurious_repairs(&self) -> u64 {
        self.spurious_repairs
    }

    /// A piece of data ending at `end` was newly delivered (RFC 8985 §6.2
    /// step 3; pieces in ascending order of `end`). `sent_once` (asked
    /// only for a piece below `fack`): whether it was never sent to this
    /// peer again, so that its delivery there can only be the path's
    /// reordering. Returns whether reordering is now seen.
    pub(super) fn on_delivered(&mut self, end: u64, sent_once: impl FnOnce() -> bool) -> bool {
        if end > self.fack {
            self.fack = end;
        } else if end < self.fack && sent_once() {
            self.seen = true;
        }
        self.seen
    }

    /// A tail loss probe of `range` is going out.
    pub(super) fn on_tail_probe(&mut self, range: std::ops::Range<u64>) {
        self.probe = Some(range);
    }

    /// An RTO at `snd_nxt` deemed the flight lost.
    pub(super) fn on_rto(&mut self, snd_nxt: u64) {
        self.rto_edge = Some(snd_nxt);
    }

    /// A repair ending at `end` was acknowledged too soon to be the copy
    /// that arrived (the DSACK of RFC 8985 §6.2 step 4): the window grows
    /// a step, at most once per round trip, unless an RTO or a tail loss
    /// probe sent the repair. `cumulative` and `snd_nxt` are the sender's.
    /// Returns whether it counted.
    pub(super) fn on_spurious_repair(&mut self, end: u64, cumulative: u64, snd_nxt: u64) -> bool {
        if self.probe.as_ref().is_some_and(|p| p.end == end) {
            return false;
        }
        if self.rto_edge.is_some_and(|edge| cumulative >= edge) {
            self.rto_edge = None;
        }
        if self.rto_edge.is_some_and(|edge| end <= edge) {
            return false;
        }
        self.spurious_repairs += 1;
        self.seen = true;
        if self.round_end.is_some_and(|end| cumulative >= end) {
            self.round_end = None;
        }
        if self.round_end.is_none() {
            self.round_end = Some(snd_nxt);
            self.steps = (self.steps + 1).min(MAX_STEPS);
            self.persist = PERSIST_EPISODES;
        }
        true
    }

    /// A recovery episode ended: after [`PERSIST_EPISODES`] without a
    /// spurious repair the window is one step again.
    pub(super) fn on_recovery_end(&mut self) {
        self.persist = self.persist.saturating_sub(1);
        if self.persist == 0 {
            self.steps = 1;
        }
    }

    /// RACK.reo_wnd (RFC 8985 §6.2 step 4): zero while no reordering was
    /// seen and `dupthresh_reached` (DupThresh segments SACKed above the
    /// oldest hole), else `steps · min_rtt / 4`, at most `srtt`.
    pub(super) fn window(
        &self,
        min_rtt: Duration,
        srtt: Duration,
        dupthresh_reached: bool,
    ) -> Duration {
        if !self.seen && dupthresh_reached {
            return Duration::ZERO;
        }
        (min_rtt / 4 * self.steps).min(srtt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_segment_sent_once_delivered_below_the_highest_is_reordering() {
        let mut w = ReorderWindow::new(0);
        assert!(!w.on_delivered(3000, || unreachable!("above fack")));
        assert_eq!(w.window(20 * MS, 20 * MS, true), Duration::ZERO);
        // A repair's delivery below the highest proves nothing.
        assert!(!w.on_delivered(1000, || false));
        assert!(w.on_delivered(2000, || true));
        assert_eq!(w.window(20 * MS, 20 * MS, true), 5 * MS);
    }

    #[test]
    fn spurious_repairs_widen_it_once_per_round_trip_up_to_srtt_and_it_shrinks_back() {
        let mut w = ReorderWindow::new(0);
        assert!(w.on_spurious_repair(1000, 0, 10_000));
        assert!(w.on_spurious_repair(6000, 5_000, 12_000)); // the same round trip
        assert_eq!(w.window(20 * MS, 30 * MS, true), 10 * MS);
        w.on_spurious_repair(11_000, 10_000, 20_000);
        assert_eq!(w.window(20 * MS, 30 * MS, true), 15 * MS);
        for _ in 0..5 {
            w.on_spurious_repair(u64::MAX, u64::MAX, u64::MAX);
        }
        assert_eq!(w.window(20 * MS, 30 * MS, true), 30 * MS, "capped at SRTT");
        assert_eq!(w.spurious_repairs(), 8);
        for _ in 0..PERSIST_EPISODES {
            w.on_recovery_end();
        }
        assert_eq!(w.window(20 * MS, 30 * MS, true), 5 * MS);
        assert!(w.seen(), "the path still reorders: one step, not zero");
    }

    #[test]
    fn what_an_rto_sent_again_proves_nothing_until_its_flight_is_acknowledged() {
        let mut w = ReorderWindow::new(0);
        w.on_rto(50_000);
        assert!(!w.on_spurious_repair(3000, 1000, 60_000));
        assert!(!w.seen());
        assert_eq!(w.window(20 * MS, 20 * MS, true), Duration::ZERO);
        // Above the edge, or once the cumulative ACK passed it, it counts.
        assert!(w.on_spurious_repair(55_000, 2000, 60_000));
        assert!(w.on_spurious_repair(52_000, 50_000, 60_000));
        assert_eq!(w.spurious_repairs(), 2);
        // Nor does a tail loss probe (an ACK lost, the tail delivered).
        w.on_tail_probe(58_000..60_000);
        assert!(!w.on_spurious_repair(60_000, 58_000, 60_000));
        assert_eq!(w.spurious_repairs(), 2);
    }
}
