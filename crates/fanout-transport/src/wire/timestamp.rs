//! Wire timestamps: the sending endpoint's clock in microseconds, low 32
//! bits (RFC 7323-style), carried in DATA, CONNECT, OFFER and UPSTREAM and
//! echoed in ACK, ACCEPT and UPSTREAM_ACK. The one conversion from and to
//! [`Instant`]; differences use wrapping arithmetic, valid for intervals
//! below 2^31 µs (35.8 minutes).

use fanout_core::time::Instant;
use std::time::Duration;

/// A timestamp as carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct WireTimestamp(pub u32);

impl WireTimestamp {
    /// The timestamp of `now`.
    pub fn at(now: Instant) -> Self {
        WireTimestamp((now.as_nanos() / 1_000) as u32)
    }

    /// Time from this timestamp to `now` (both on the same clock).
    pub fn elapsed(self, now: Instant) -> Duration {
        Duration::from_micros(u64::from(Self::at(now).0.wrapping_sub(self.0)))
    }

    /// True if this timestamp is not older than `other` (compared modulo
    /// 2^32, RFC 7323 §4.3's `SEG.TSval >= TS.Recent`).
    pub fn is_at_or_after(self, other: WireTimestamp) -> bool {
        self.0.wrapping_sub(other.0) as i32 >= 0
    }

    /// True if this timestamp is strictly newer than `other` (modulo 2^32).
    pub fn is_after(self, other: WireTimestamp) -> bool {
        self.0.wrapping_sub(other.0) as i32 > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_and_order_across_the_wrap() {
        let t0 = Instant::from_nanos((u64::from(u32::MAX) - 5) * 1_000);
        let ts = WireTimestamp::at(t0);
        let later = t0 + Duration::from_micros(10);
        assert_eq!(ts.elapsed(later), Duration::from_micros(10));
        let ts2 = WireTimestamp::at(later);
        assert!(ts2.0 < ts.0, "wrapped");
        assert!(ts2.is_after(ts) && ts2.is_at_or_after(ts));
        assert!(!ts.is_after(ts2) && ts.is_at_or_after(ts));
    }
}
