//! The sender's clock as a real-time receiver sees it: where on its own
//! clock a deadline the sender wrote on its timestamp clock (DEADLINE,
//! `docs/wire.md` §4.5) falls.
//!
//! Every DATA carries the sender's timestamp (µs, modulo 2^32). Its
//! distance from the arrival — the transit — is the clocks' offset plus
//! the path's delay; the smallest transit seen is the offset plus the
//! path's propagation delay. A deadline mapped with it falls that
//! propagation delay late, so half the round trip the receiver measured
//! when it joined is taken off (SRT's timestamp-based delivery maps its
//! packets' times the same way, from the handshake). The smallest transit
//! also holds the time a full datagram takes to go onto the slowest link,
//! which the join's small datagrams do not: [`GUARD`] more is taken off
//! for it (a full datagram on a link of 6 Mbit/s or faster). The smallest
//! transit may rise, but by at most [`DRIFT_PPM`] of the time passing: a
//! clock running fast against the sender's is followed, while a queue that
//! stands for seconds (a competing TCP flow keeps one full) does not pass
//! for a longer path and push the deadlines late. (A path that really got
//! longer by 10 ms takes 50 s to be followed; meanwhile deadlines fall
//! early, not late.)
//!
//! The same transits give RFC 3550's interarrival jitter (§6.4.1: `J +=
//! (|D| − J)/16`, `D` the difference of consecutive transits), and the
//! sender's clock mapped without the guard dates a message's first sending
//! on ours, which its delivery delay counts from.

use crate::wire::WireTimestamp;
use fanout_core::time::Instant;
use std::time::Duration;

/// How fast the smallest transit may rise, millionths of the time passing
/// (crystal clocks drift by tens of millionths).
pub const DRIFT_PPM: u64 = 200;

/// Taken off every mapped deadline: a full datagram's transmission time
/// on a 6 Mbit/s link, and the clocks' granularity.
pub const GUARD: Duration = Duration::from_millis(2);

/// How long after its sending a datagram may arrive, seen from the
/// sender's RTT estimator for a receiver (`rtt`, with a sample): the
/// sender lets a message or a repair go only if its deadline is at least
/// this far away.
///
/// The whole round trip (the smoothed one, or the latest sample if that is
/// longer) may lie on the data's way: data fills queues, ACKs hardly, and
/// neither end can tell a queue that stood on the data's way since before
/// the receiver joined (a competing TCP flow keeps one) from propagation.
/// The receiver maps deadlines with half its join round trip as the way
/// ([`SenderClock`], as SRT does from its handshake); through such a queue
/// that mapping falls late, and a message the sender counted in time by
/// half a round trip was read after its real deadline. Counting the whole
/// round trip, what leaves arrives by the real deadline. Added: half the
/// join round trip's excess over the smallest, by which the receiver's
/// mapping falls early after a queue the join met has drained. Costs half
/// a round trip of budget against a symmetric path.
pub fn forward_delay(rtt: &fanout_core::rtt::RttEstimator) -> Duration {
    let join_excess = rtt.first_sample().saturating_sub(rtt.min_rtt());
    rtt.srtt().max(rtt.latest()) + join_excess / 2
}

/// Maps the sender's timestamps onto this receiver's clock.
#[derive(Debug, Default, Clone)]
pub struct SenderClock {
    /// The smallest transit (µs modulo 2^32), risen by drift at most.
    min_transit: Option<u32>,
    /// When it was last set or risen.
    min_at: Option<Instant>,
    /// Half the round trip measured at the join.
    one_way: Duration,
    /// The last DATA's transit (µs modulo 2^32).
    last_transit: Option<u32>,
    /// RFC 3550 interarrival jitter, µs.
    jitter_us: f64,
}

/// `now` on the 32-bit microsecond clock of [`WireTimestamp`].
fn local_us(now: Instant) -> u32 {
    WireTimestamp::at(now).0
}

/// `a` before `b`, modulo 2^32.
fn earlier(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl SenderClock {
    /// The round trip measured when joining (its half is taken as the
    /// path's one-way delay).
    pub fn set_join_rtt(&mut self, rtt: Duration) {
        self.one_way = rtt / 2;
    }

    /// A DATA stamped `sent` (the sender's clock) arrived at `arrived`.
    pub fn on_timestamp(&mut self, arrived: Instant, sent: WireTimestamp) {
        let transit = local_us(arrived).wrapping_sub(sent.0);
        if let Some(last) = self.last_transit {
            let d = f64::from((transit.wrapping_sub(last) as i32).unsigned_abs());
            self.jitter_us += (d - self.jitter_us) / 16.0;
        }
        self.last_transit = Some(transit);
        match (self.min_transit, self.min_at) {
            (Some(min), Some(at)) if !earlier(transit, min) => {
                // Rise towards this transit by the drift allowed since.
                let elapsed = arrived.saturating_duration_since(at).as_micros() as u64;
                let rise = elapsed.saturating_mul(DRIFT_PPM) / 1_000_000;
                if rise > 0 {
                    let gap = u64::from(transit.wrapping_sub(min));
                    self.min_transit = Some(min.wrapping_add(rise.min(gap) as u32));
                    self.min_at = Some(arrived);
                }
            }
            _ => {
                self.min_transit = Some(transit);
                self.min_at = Some(arrived);
            }
        }
    }

    /// The smallest transit, if any DATA arrived.
    fn transit(&self) -> Option<u32> {
        self.min_transit
    }

    /// The round trip measured when joining (zero before).
    pub fn join_rtt(&self) -> Duration {
        self.one_way * 2
    }

    /// RFC 3550 interarrival jitter of the DATA so far.
    pub fn jitter(&self) -> Duration {
        Duration::from_micros(self.jitter_us as u64)
    }

    /// When the sender sent at its time `at`, on this receiver's clock
    /// (`None` before any DATA).
    pub fn sent_at(&self, now: Instant, at: WireTimestamp) -> Option<Instant> {
        self.local(now, at).map(|t| t + GUARD)
    }

    /// Where the sender's time `at` falls on this receiver's clock, seen
    /// from `now`, for a deadline: early by [`GUARD`] (`None` before any
    /// DATA). Within about 35 minutes of `now` (the timestamps wrap after
    /// 71).
    pub fn local(&self, now: Instant, at: WireTimestamp) -> Option<Instant> {
        let here = at.0.wrapping_add(self.transit()?);
        let ahead_us = here.wrapping_sub(local_us(now)) as i32;
        let mapped = if ahead_us >= 0 {
            now + Duration::from_micros(ahead_us as u64)
        } else {
            now.saturating_sub(Duration::from_micros(u64::from(ahead_us.unsigned_abs())))
        };
        Some(mapped.saturating_sub(self.one_way + GUARD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_core::rtt::{RtoConfig, RttEstimator};

    fn estimator(samples_ms: &[u64]) -> RttEstimator {
        let mut e = RttEstimator::new(RtoConfig::default());
        for &ms in samples_ms {
            e.on_sample(Duration::from_millis(ms));
        }
        e
    }

    #[test]
    fn the_whole_round_trip_counts_on_the_datas_way() {
        let ms = Duration::from_millis;
        // Joined at 20 ms, no queue: the whole 20 ms (where half of it
        // would do on this symmetric path).
        assert_eq!(forward_delay(&estimator(&[20; 8])), ms(20));
        // A 40 ms queue built since: all of it, and the latest sample
        // where the smoothed one still lags.
        let e = estimator(&[20; 1].iter().chain(&[60; 40]).copied().collect::<Vec<_>>());
        assert!(e.srtt() > ms(59) && e.srtt() < ms(60));
        assert_eq!(forward_delay(&e), ms(60));
        let e = estimator(&[20, 20, 20, 50]);
        assert_eq!(forward_delay(&e), ms(50));
        // Joined through a 40 ms queue that drained since: the receiver's
        // mapping falls 20 ms early, which counts too.
        let e = estimator(&[60, 20, 20, 20]);
        assert_eq!(forward_delay(&e), e.srtt() + ms(20));
    }

    /// The sender's clock runs `offset_us` ahead of the receiver's; the
    /// path takes `delay_ms` plus `jitter_ms`.
    fn stamp(receiver_now: Instant, offset_us: u64, delay_ms: u64) -> WireTimestamp {
        let sent_local = receiver_now.saturating_sub(Duration::from_millis(delay_ms));
        WireTimestamp(local_us(sent_local).wrapping_add(offset_us as u32))
    }

    #[test]
    fn deadlines_map_through_the_smallest_transit_less_half_the_join_rtt() {
        let t0 = Instant::ZERO + Duration::from_secs(100);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Any offset, across the 32-bit wrap.
        for offset in [0u64, 123_456_789, u64::from(u32::MAX) - 1000] {
            let mut c = SenderClock::default();
            assert_eq!(c.local(t0, WireTimestamp(0)), None);
            c.set_join_rtt(Duration::from_millis(40));
            // 20 ms one way, sometimes 35 ms (queueing).
            for (i, extra) in [15u64, 0, 7, 15, 3].into_iter().enumerate() {
                let now = at(i as u64 * 10);
                c.on_timestamp(now, stamp(now, offset, 20 + extra));
            }
            // A deadline the sender wrote for 300 ms after it sent at
            // t0: falls at t0 + 300 ms here.
            let sent = stamp(t0, offset, 0);
            let deadline = WireTimestamp(sent.0.wrapping_add(300_000));
            let now = at(50);
            // Within the drift the smallest transit may rise meanwhile
            // (200 ppm of 30 ms: 6 µs).
            let near = |got: Option<Instant>, want: Instant| {
                let got = got.unwrap();
                let off = got.max(want).saturating_duration_since(got.min(want));
                assert!(
                    off <= Duration::from_micros(10),
                    "{got:?} {want:?}, offset {offset}"
                );
            };
            let guard = GUARD.as_millis() as u64;
            near(c.local(now, deadline), at(300 - guard));
            // One already past maps into the past.
            let past = WireTimestamp(sent.0.wrapping_add(10_000));
            near(c.local(now, past), at(10 - guard));
        }
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        let t0 = Instant::ZERO + Duration::from_secs(1);
        let mut c = SenderClock::default();
        // Transits 10, 14, 10 ms: |D| = 4 ms twice.
        for (i, delay) in [10u64, 14, 10].into_iter().enumerate() {
            let now = t0 + Duration::from_millis(20 * i as u64);
            c.on_timestamp(now, stamp(now, 0, delay));
        }
        // J = 4000/16 = 250, then 250 + (4000 − 250)/16 = 484.375 µs.
        assert_eq!(c.jitter(), Duration::from_micros(484));
    }

    #[test]
    fn a_standing_queue_is_not_a_longer_path_but_drift_is_followed() {
        let t0 = Instant::ZERO + Duration::from_secs(5);
        let mut c = SenderClock::default();
        c.on_timestamp(t0, stamp(t0, 0, 10));
        // A queue of 40 ms stands for 20 s: the minimum rises by 200 ppm
        // of it, 4 ms, not to 50 ms.
        let mut now = t0;
        for _ in 0..200 {
            now += Duration::from_millis(100);
            c.on_timestamp(now, stamp(now, 0, 50));
        }
        let sent_now = stamp(now, 0, 0);
        let mapped = |c: &SenderClock| c.local(now, sent_now).unwrap() + GUARD;
        assert_eq!(mapped(&c), now + Duration::from_millis(14));
        // A shorter transit resets it at once.
        c.on_timestamp(now, stamp(now, 0, 10));
        assert_eq!(mapped(&c), now + Duration::from_millis(10));
    }
}
