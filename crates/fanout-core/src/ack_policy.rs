//! When a receiver acknowledges: every N full segments, on a delayed-ACK
//! timer, and at once on anything that signals loss.
//!
//! RFC 5681 §4.2: ACK at least every second full-sized segment and within
//! 500 ms; ACK immediately on out-of-order data and when a gap fills.
//! TCP-SMO §II.D (adaptive ACKs): every 2 segments normally, 4–8 after slow
//! start while there is no loss, back to 2 on loss — the sender steers
//! `every`.
//!
//! Feedback pacing (per-receiver feedback thinned by count *and* by time): a
//! session sender may also give each member a minimum interval between
//! data-triggered ACKs. Time is cut into slots of that length, offset by a
//! per-member phase; a member sends at most one data-triggered ACK per slot, at
//! the first moment its trigger (count, loss signal or delayed-ACK timer) and
//! its slot allow. With the phases spread over the slot, N members that hear
//! the same multicast segment at the same instant send their ACKs spread over
//! the slot instead of in one burst, and the sender receives at most
//! N / interval ACKs per second. Handshake, FIN, PING and window-update ACKs
//! are urgent and ignore the slot.

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

/// The default delayed-ACK timer; senders also take it as the most a
/// receiver may hold an ACK beyond its ACK_FREQUENCY interval when they
/// take the reported ACK delay off RTT samples (RFC 9002 §5.3 caps the
/// delay at max_ack_delay).
pub const DEFAULT_MAX_ACK_DELAY: Duration = Duration::from_millis(25);

impl Default for AckPolicy {
    fn default() -> Self {
        AckPolicy {
            every_segments: 2,
            max_delay: DEFAULT_MAX_ACK_DELAY,
        }
    }
}

/// A member's feedback-slot phase in `[0, 1)`: the fractional part of
/// `id · φ⁻¹` (golden-ratio sequence), so consecutive member ids land far
/// apart and any N of them cover the slot almost evenly.
pub fn slot_phase(member_id: u64) -> f64 {
    const INV_PHI: f64 = 0.618_033_988_749_894_9;
    (member_id as f64 * INV_PHI).fract()
}

/// Receiver-side state of the schedule.
#[derive(Debug, Clone)]
pub struct AckScheduler {
    policy: AckPolicy,
    pending_segments: u32,
    deadline: Option<Instant>,
    immediate: bool,
    /// An ACK that ignores the feedback slot (handshake, FIN, PING, window).
    urgent: bool,
    /// Slot length in ns (0: no feedback pacing).
    slot_ns: u64,
    /// This member's slot phase in ns, `< slot_ns`.
    phase_ns: u64,
    /// Earliest time of the next data-triggered ACK (start of the next slot).
    next_allowed: Option<Instant>,
}

impl AckScheduler {
    /// Nothing pending.
    pub fn new(policy: AckPolicy) -> Self {
        AckScheduler {
            policy,
            pending_segments: 0,
            deadline: None,
            immediate: false,
            urgent: false,
            slot_ns: 0,
            phase_ns: 0,
            next_allowed: None,
        }
    }

    /// Paces data-triggered ACKs to at most one per `interval` (zero turns
    /// pacing off). `phase` in `[0, 1)` places this member's slot boundary
    /// within the interval; members of one session use spread-out phases.
    pub fn set_min_interval(&mut self, interval: Duration, phase: f64) {
        self.slot_ns = crate::time::duration_nanos(interval);
        self.phase_ns = (phase.clamp(0.0, 1.0) * self.slot_ns as f64) as u64 % self.slot_ns.max(1);
        if self.slot_ns == 0 {
            self.next_allowed = None;
        }
    }

    /// The minimum interval between data-triggered ACKs (zero: none).
    pub fn min_interval(&self) -> Duration {
        Duration::from_nanos(self.slot_ns)
    }

    /// Start of the slot after the one holding `now`.
    fn next_slot_start(&self, now: Instant) -> Instant {
        let (t, iv) = (now.as_nanos(), self.slot_ns);
        let into_slot = (t % iv + iv - self.phase_ns) % iv;
        Instant::from_nanos(t.saturating_add(iv - into_slot))
    }

    /// True when the feedback slot allows a data-triggered ACK at `now`.
    fn slot_open(&self, now: Instant) -> bool {
        self.next_allowed.is_none_or(|t| t <= now)
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

    /// Asks for an ACK as soon as possible, ignoring the feedback slot
    /// (handshake, close, FIN, PING, window update).
    pub fn request_immediate(&mut self) {
        self.urgent = true;
    }

    /// Asks for an ACK at the next moment the feedback slot allows (a
    /// window update the sender does not need at once).
    pub fn request_paced(&mut self) {
        self.immediate = true;
    }

    /// True when an ACK should be sent now.
    pub fn should_ack(&self, now: Instant) -> bool {
        self.urgent
            || ((self.immediate || self.deadline.is_some_and(|d| d <= now)) && self.slot_open(now))
    }

    /// When the next ACK falls due, if one is pending and not due at once:
    /// the delayed-ACK deadline, or the next slot when the trigger already
    /// fired inside a used slot. `None` when nothing is pending or an ACK is
    /// due now (the caller polls for it).
    pub fn deadline(&self) -> Option<Instant> {
        if self.urgent {
            return None;
        }
        let slot = self.next_allowed;
        if self.immediate {
            return slot;
        }
        match (self.deadline, slot) {
            (Some(d), Some(s)) => Some(d.max(s)),
            (d, _) => d,
        }
    }

    /// An ACK was sent at `now`: reset, and close this slot.
    pub fn on_ack_sent(&mut self, now: Instant) {
        self.pending_segments = 0;
        self.deadline = None;
        self.immediate = false;
        self.urgent = false;
        self.next_allowed = (self.slot_ns > 0).then(|| self.next_slot_start(now));
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
        s.on_ack_sent(t0);
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
                    s.on_ack_sent(t0);
                }
            }
        }
        assert_eq!(first, [4, 2]);
    }

    #[test]
    fn feedback_slots_pace_data_acks_but_not_urgent_ones() {
        let ms = Duration::from_millis;
        let t0 = Instant::ZERO + ms(100);
        let mut s = AckScheduler::new(AckPolicy::default());
        s.set_min_interval(ms(10), 0.5); // slots start at 5, 15, 25 ... ms
        s.on_segment(t0, true);
        assert!(s.should_ack(t0), "the first ACK of a slot goes at once");
        s.on_ack_sent(t0);
        s.on_segment(t0 + ms(1), true);
        assert!(!s.should_ack(t0 + ms(1)), "one data ACK per slot");
        assert_eq!(s.deadline(), Some(t0 + ms(5)), "due at the next slot start");
        assert!(s.should_ack(t0 + ms(5)));
        s.on_ack_sent(t0 + ms(5));
        s.request_immediate();
        assert!(s.should_ack(t0 + ms(6)), "urgent ACKs ignore the slot");
        s.on_ack_sent(t0 + ms(6));
        // The delayed-ACK timer is also held to the slot.
        s.on_segment(t0 + ms(7), false);
        assert_eq!(s.deadline(), Some(t0 + ms(32)));
        s.set_min_interval(Duration::ZERO, 0.0);
        assert_eq!(
            s.deadline(),
            Some(t0 + ms(32)),
            "pacing off keeps the timer"
        );
    }

    #[test]
    fn phases_spread_members_over_the_slot() {
        let ms = Duration::from_millis;
        let t0 = Instant::ZERO + ms(1000);
        let firsts: Vec<Instant> = (0..4)
            .map(|i| {
                let mut s = AckScheduler::new(AckPolicy::default());
                s.set_min_interval(ms(8), f64::from(i) / 4.0);
                s.on_segment(t0, true);
                s.on_ack_sent(t0);
                s.on_segment(t0, true);
                s.deadline().expect("held to the next slot")
            })
            .collect();
        assert_eq!(
            firsts,
            [ms(1008), ms(1002), ms(1004), ms(1006)].map(|d| Instant::ZERO + d)
        );
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
