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

/// The wall clock, read only to convert the kernel's receive timestamps
/// (`SO_TIMESTAMPNS` stamps datagrams in `CLOCK_REALTIME`) to this clock;
/// never used as a time source itself.
#[expect(
    clippy::disallowed_methods,
    reason = "converts kernel receive timestamps only"
)]
fn read_wall_clock() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// Seconds since the Unix epoch by the wall clock (0 before it), for
/// records people and log collectors read (a service's events); never a
/// time source for an engine.
pub fn unix_time() -> f64 {
    read_wall_clock()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A reading of this clock and of the wall clock taken together, to convert
/// kernel receive timestamps ([`Clock::stamp`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StampBase {
    /// This clock's time at the reading.
    pub now: Instant,
    /// The wall clock at the reading, as time since the Unix epoch (`None`
    /// if it reads before the epoch).
    unix: Option<std::time::Duration>,
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

    /// Reads this clock and the wall clock together.
    pub(crate) fn stamp_base(&self) -> StampBase {
        let now = self.now();
        let unix = read_wall_clock().duration_since(std::time::UNIX_EPOCH).ok();
        StampBase { now, unix }
    }

    /// This clock's time of a kernel receive timestamp `unix` (time since
    /// the Unix epoch, `SO_TIMESTAMPNS`): `base.now` minus the datagram's
    /// age by the wall clock, kept within `[floor, base.now]` so a wall-clock
    /// step can neither date a datagram in the future nor before `floor`.
    pub(crate) fn stamp(
        &self,
        base: &StampBase,
        unix: Option<std::time::Duration>,
        floor: Instant,
    ) -> Instant {
        let dated = match (base.unix, unix) {
            (Some(wall), Some(stamp)) => {
                let age = wall.saturating_sub(stamp);
                Instant::from_nanos(base.now.as_nanos().saturating_sub(duration_nanos(age)))
            }
            _ => base.now,
        };
        dated.max(floor).min(base.now.max(floor))
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
    fn kernel_stamps_convert_by_their_age_and_stay_in_bounds() {
        let clock = Clock::new();
        std::thread::sleep(Duration::from_millis(5));
        let base = clock.stamp_base();
        let wall = base.unix.unwrap();
        let floor = Instant::from_nanos(1_000_000);
        let ms = Duration::from_millis;
        // Two ms old by the wall clock: two ms before `now`.
        let t = clock.stamp(&base, Some(wall - ms(2)), floor);
        assert_eq!(base.now - t, ms(2));
        // From the future (a wall-clock step): now, never later.
        assert_eq!(clock.stamp(&base, Some(wall + ms(50)), floor), base.now);
        // Older than the floor: the floor (the engine's time never goes back).
        assert_eq!(clock.stamp(&base, Some(wall - ms(3600)), floor), floor);
        // No stamp: now.
        assert_eq!(clock.stamp(&base, None, floor), base.now);
    }

    #[test]
    fn round_trips_through_std() {
        let clock = Clock::new();
        let t = Instant::from_nanos(123_456_789);
        assert_eq!(clock.instant_of(clock.to_std(t)), t);
        assert!(clock.to_std(Instant::MAX) > clock.to_std(t));
    }
}
