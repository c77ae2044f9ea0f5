//! NTP timestamps in sender reports, and the round trip a sender reads
//! from a reception report (RFC 3550 §6.4.1): the report's arrival A, in
//! the middle 32 bits of an NTP timestamp, less the LSR it echoes (the
//! middle bits of the last SR's timestamp) and the DLSR (the time the
//! receiver held it, in 1/65536 s).

use fanout_core::Instant;
use std::time::Duration;

/// Seconds from the NTP era (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

/// A wall clock for a sans-IO engine: the Unix time at one [`Instant`],
/// which the runtime reads once; later NTP times follow the monotonic
/// clock from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    /// The instant at which `unix` was read.
    pub at: Instant,
    /// Time since the Unix epoch then.
    pub unix: Duration,
}

impl WallClock {
    /// The 64-bit NTP timestamp (seconds since 1900, 32.32 fixed point) at
    /// `now`.
    pub fn ntp(&self, now: Instant) -> u64 {
        let t = self.unix + now.saturating_duration_since(self.at);
        let secs = t.as_secs().wrapping_add(NTP_UNIX_OFFSET_S);
        let frac = (u64::from(t.subsec_nanos()) << 32) / 1_000_000_000;
        (secs << 32) | frac
    }
}

/// The middle 32 bits of an NTP timestamp (16.16 fixed point): what LSR
/// carries and what A is compared in.
pub fn middle32(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// `d` in the units of DLSR, 1/65536 s (saturating).
pub fn to_short(d: Duration) -> u32 {
    let units = d.as_nanos() * 65_536 / 1_000_000_000;
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// A 16.16 fixed-point duration as a [`Duration`].
pub fn from_short(units: u32) -> Duration {
    Duration::from_nanos(u64::from(units) * 1_000_000_000 / 65_536)
}

/// The round trip from a report block that arrived at `arrival` (middle
/// 32 bits of the sender's NTP clock then), echoing `lsr` and `dlsr`:
/// `None` when the receiver had no SR yet (LSR 0) or the figures do not
/// make sense (a negative round trip, or more than half the 16-bit
/// seconds' range: a forged or stale block).
pub fn round_trip(arrival: u32, lsr: u32, dlsr: u32) -> Option<Duration> {
    if lsr == 0 {
        return None;
    }
    let rtt = arrival.wrapping_sub(lsr).wrapping_sub(dlsr);
    (rtt < 1 << 31).then(|| from_short(rtt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_reads_the_round_trip_of_a_report_as_rfc_3550_shows_it() {
        // RFC 3550 §6.4.1's example: A = 0xb710:8000 (46864.500 s), LSR =
        // 0xb705:2000 (46853.125 s), DLSR = 0x0005:4000 (5.250 s): the
        // round trip is 0x0006:2000 (6.125 s).
        let rtt = round_trip(0xb710_8000, 0xb705_2000, 0x0005_4000).unwrap();
        assert_eq!(rtt, Duration::from_millis(6125));
        assert_eq!(round_trip(0xb710_8000, 0, 0x0005_4000), None, "no SR yet");
        assert_eq!(round_trip(0xb705_2000, 0xb710_8000, 0), None, "negative");
    }

    #[test]
    fn ntp_time_follows_the_monotonic_clock_from_its_anchor() {
        let clock = WallClock {
            at: Instant::from_nanos(5_000_000_000),
            unix: Duration::from_secs(1_700_000_000),
        };
        let t0 = clock.ntp(clock.at);
        assert_eq!(t0 >> 32, 1_700_000_000 + NTP_UNIX_OFFSET_S);
        assert_eq!(t0 & 0xffff_ffff, 0);
        let later = clock.ntp(Instant::from_nanos(5_250_000_000));
        assert_eq!(later - t0, 1 << 30, "a quarter second");
        assert_eq!(middle32(later) - middle32(t0), 1 << 14);
        assert_eq!(to_short(Duration::from_millis(5250)), 0x0005_4000);
        assert_eq!(from_short(0x0006_2000), Duration::from_millis(6125));
    }
}
