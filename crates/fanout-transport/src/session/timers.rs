//! The session sender's own named timers (after quinn-proto's
//! `connection/timer.rs`: an enum and a table; `handle_timeout` serves the
//! expired ones by name). Per-member timers are the member set's
//! ([`super::member::MemberTimer`]).

use fanout_core::time::Instant;

/// A session-wide timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// The pacer releases the next datagram.
    Pacing,
    /// Data starts even without the awaited members (`wait_at_most`).
    Admission,
    /// A held repair becomes due (its hold-off gathered the reports).
    Repair,
    /// An OFFER is due again, or its handshake time ran out.
    Offer,
    /// The list of multicast datagrams gathered is due to be signed and
    /// sent (a protected session's source authentication).
    Sign,
    /// Members that have not confirmed a new group key are sent it again
    /// (or evicted, after the update's timeout).
    KeyUpdate,
    /// New data has waited for the window inside a run since this long:
    /// the run's detail goes out, so members can check the part they hold.
    BlockedRun,
    /// The next announcement to the group is due.
    Announce,
}

impl Timer {
    /// Every session timer, in the order expired ones are served.
    pub const VALUES: [Timer; 8] = [
        Timer::Pacing,
        Timer::Admission,
        Timer::Repair,
        Timer::Offer,
        Timer::Sign,
        Timer::KeyUpdate,
        Timer::BlockedRun,
        Timer::Announce,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// One optional deadline per [`Timer`].
#[derive(Debug, Default, Clone)]
pub struct TimerTable {
    deadlines: [Option<Instant>; Timer::VALUES.len()],
}

impl TimerTable {
    /// Arms `timer` at `at` (`None` disarms it).
    pub fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.deadlines[timer.index()] = at;
    }

    /// Arms `timer` at `at` unless it is armed earlier.
    pub fn set_earliest(&mut self, timer: Timer, at: Instant) {
        let d = &mut self.deadlines[timer.index()];
        *d = Some(d.map_or(at, |t| t.min(at)));
    }

    /// `timer`'s deadline.
    #[cfg(test)]
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer.index()]
    }

    /// The earliest armed deadline.
    pub fn earliest(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }

    /// True (and disarmed) if `timer` is due at `now`.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        let d = &mut self.deadlines[timer.index()];
        if d.is_some_and(|t| t <= now) {
            *d = None;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_deadline_per_timer_taken_when_due() {
        let at = |ms| Instant::ZERO + Duration::from_millis(ms);
        let mut t = TimerTable::default();
        assert_eq!(t.earliest(), None);
        t.set(Timer::Admission, Some(at(50)));
        t.set_earliest(Timer::Repair, at(30));
        t.set_earliest(Timer::Repair, at(40));
        assert_eq!(t.get(Timer::Repair), Some(at(30)));
        assert_eq!(t.earliest(), Some(at(30)));
        assert!(!t.take_expired(Timer::Admission, at(30)));
        assert!(t.take_expired(Timer::Repair, at(30)));
        assert_eq!(t.get(Timer::Repair), None);
        assert_eq!(t.earliest(), Some(at(50)));
    }
}
