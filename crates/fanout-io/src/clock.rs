//! The runtime's clock: the one place that reads the OS time.

use fanout_core::time::{duration_nanos, Instant};

/// Maps the OS monotonic clock to [`fanout_core::time::Instant`]: nanoseconds
/// since this clock was created. Cheap to copy; copies share the epoch.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: std::time::Instant,
}

/// The single sanctioned read of the OS clock in the whole workspace.
#[expect(clippy::disallowed_methods, reason = "the one sanctioned clock read")]
fn read_os_clock() -> std::time::Instant {
    std::time::Instant::now()
}

impl Clock {
    /// A clock whose epoch ([`Instant::ZERO`]) is now.
    pub fn new() -> Self {
        Clock {
            origin: read_os_clock(),
        }
    }

    /// The current time, in nanoseconds since this clock's epoch.
    pub fn now(&self) -> Instant {
        self.instant_of(read_os_clock())
    }

    /// Converts an OS instant to this clock's time (saturating at zero for
    /// instants before the epoch).
    pub fn instant_of(&self, t: std::time::Instant) -> Instant {
        Instant::from_nanos(duration_nanos(t.saturating_duration_since(self.origin)))
    }

    /// Converts this clock's time back to an OS instant (saturating at the
    /// far future if it does not fit).
    pub fn to_std(&self, t: Instant) -> std::time::Instant {
        let d = std::time::Duration::from_nanos(t.as_nanos());
        self.origin
            .checked_add(d)
            .unwrap_or_else(|| self.origin + std::time::Duration::from_secs(86_400 * 365 * 100))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn starts_near_zero_and_is_monotonic() {
        let clock = Clock::new();
        let a = clock.now();
        assert!(a < Instant::from_nanos(1_000_000_000), "{a}");
        std::thread::sleep(Duration::from_millis(2));
        let b = clock.now();
        assert!(b - a >= Duration::from_millis(2), "{a} -> {b}");
    }

    #[test]
    fn round_trips_through_std() {
        let clock = Clock::new();
        let t = Instant::from_nanos(123_456_789);
        assert_eq!(clock.instant_of(clock.to_std(t)), t);
        assert!(clock.to_std(Instant::MAX) > clock.to_std(t));
    }
}
