//! When a receiver acknowledges: every N full segments, on a delayed-ACK
//! timer, and at once on anything that signals loss.
//!
//! RFC 5681 §4.2: ACK at least every second full-sized segment and within
//! 500 ms; ACK immediately on out-of-order data and when a gap fills.
//! SMO §II (adaptive ACKs): every 2 segments normally, 4–8 after slow start
//! while there is no loss, back to 2 on loss — the sender steers `every`.

use crate::time::Instant;
use std::time::Duration;

/// Configuration of the acknowledgement schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AckPolicy {
    /// Acknowledge after this many segments received in order (≥ 1).
    pub every_segments: u32,
    /// Acknowledge no later than this after the first unacknowledged segment.
    pub max_delay: Duration,
}

impl Default for AckPolicy {
    fn default() -> Self {
        AckPolicy {
            every_segments: 2,
            max_delay: Duration::from_millis(25),
        }
    }
}

/// Receiver-side state of the schedule.
#[derive(Debug, Clone)]
pub struct AckScheduler {
    policy: AckPolicy,
    pending_segments: u32,
    deadline: Option<Instant>,
    immediate: bool,
}

impl AckScheduler {
    /// Nothing pending.
    pub fn new(policy: AckPolicy) -> Self {
        AckScheduler {
            policy,
            pending_segments: 0,
            deadline: None,
            immediate: false,
        }
    }

    /// The active policy.
    pub fn policy(&self) -> AckPolicy {
        self.policy
    }

    /// Changes how many segments one ACK covers (clamped to 1..=64).
    pub fn set_every_segments(&mut self, n: u32) {
        self.policy.every_segments = n.clamp(1, 64);
    }

    /// Changes `every` and offsets the count by `phase` segments, so many
    /// receivers given the same `every` acknowledge at different segments
    /// instead of in one synchronized burst (ACK implosion at the sender).
    pub fn set_every_segments_with_phase(&mut self, n: u32, phase: u32) {
        self.set_every_segments(n);
        self.pending_segments = phase % self.policy.every_segments;
    }

    /// A data segment arrived. `signals_loss` is true when it was out of
    /// order, filled a gap, or was a duplicate (RFC 5681 §4.2: ACK at once).
    pub fn on_segment(&mut self, now: Instant, signals_loss: bool) {
        self.pending_segments += 1;
        if signals_loss || self.pending_segments >= self.policy.every_segments {
            self.immediate = true;
        }
        if self.deadline.is_none() {
            self.deadline = Some(now + self.policy.max_delay);
        }
    }

    /// Asks for an ACK as soon as possible (handshake, close, window update).
    pub fn request_immediate(&mut self) {
        self.immediate = true;
    }

    /// True when an ACK should be sent now.
    pub fn should_ack(&self, now: Instant) -> bool {
        self.immediate || self.deadline.is_some_and(|d| d <= now)
    }

    /// The delayed-ACK deadline, if armed.
    pub fn deadline(&self) -> Option<Instant> {
        if self.immediate {
            None
        } else {
            self.deadline
        }
    }

    /// An ACK was sent: reset.
    pub fn on_ack_sent(&mut self) {
        self.pending_segments = 0;
        self.deadline = None;
        self.immediate = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_second_segment_or_timer() {
        let t0 = Instant::ZERO;
        let mut s = AckScheduler::new(AckPolicy::default());
        s.on_segment(t0, false);
        assert!(!s.should_ack(t0));
        assert_eq!(s.deadline(), Some(t0 + Duration::from_millis(25)));
        assert!(s.should_ack(t0 + Duration::from_millis(25)));
        s.on_segment(t0, false);
        assert!(s.should_ack(t0));
        s.on_ack_sent();
        assert!(!s.should_ack(t0));
        s.on_segment(t0, true);
        assert!(
            s.should_ack(t0),
            "out-of-order data is acknowledged at once"
        );
    }

    #[test]
    fn phase_staggers_the_first_ack() {
        let t0 = Instant::ZERO;
        let mut a = AckScheduler::new(AckPolicy::default());
        let mut b = AckScheduler::new(AckPolicy::default());
        a.set_every_segments_with_phase(4, 0);
        b.set_every_segments_with_phase(4, 2);
        let mut first = [0; 2];
        for seg in 1..=4 {
            for (i, s) in [&mut a, &mut b].into_iter().enumerate() {
                s.on_segment(t0, false);
                if first[i] == 0 && s.should_ack(t0) {
                    first[i] = seg;
                    s.on_ack_sent();
                }
            }
        }
        assert_eq!(first, [4, 2]);
    }

    #[test]
    fn adaptive_every() {
        let t0 = Instant::ZERO;
        let mut s = AckScheduler::new(AckPolicy::default());
        s.set_every_segments(8);
        for _ in 0..7 {
            s.on_segment(t0, false);
        }
        assert!(!s.should_ack(t0));
        s.on_segment(t0, false);
        assert!(s.should_ack(t0));
    }
}
