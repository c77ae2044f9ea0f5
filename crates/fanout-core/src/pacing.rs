//! Token-bucket pacing of a congestion-controlled sender.
//!
//! Spreading a window over the round trip instead of sending it in one burst
//! avoids filling router queues (RFC 9002 §7.7; Linux `sch_fq`). The rate is
//!
//! ```text
//! rate = gain · cwnd / SRTT          bytes per second
//! gain = 2.0 in slow start, 1.25 otherwise
//! ```
//!
//! In slow start the window doubles each round trip, so the rate must be
//! about twice `cwnd/SRTT` for the pacer not to hold the sender back (Linux
//! `tcp_pacing_ss_ratio` = 200%); in congestion avoidance a gain a little
//! above 1 keeps ACK-clock jitter from making the pacer the bottleneck
//! (RFC 9002 §7.7 suggests `N = 1.25`; Linux `tcp_pacing_ca_ratio` = 120%).
//! Both gains are configurable ([`Pacer::with_gains`]).
//!
//! The bucket holds at most `burst` bytes, refilling at `rate`. A packet may
//! leave when the bucket holds its size (or, for a packet larger than the
//! bucket, when the bucket is full); sending takes its size out, possibly
//! into debt. A sender idle for `burst/rate` may thus send `burst` bytes
//! back-to-back, after which packets are spaced by `size/rate`.
//!
//! The default burst is 10 segments, the initial window (RFC 9002 §7.7:
//! "senders SHOULD limit bursts to the initial congestion window"; Linux fq's
//! `initial_quantum` is 10 MTU too). It lets the first flight of a connection
//! and the first packets after an idle period leave without delay while
//! capping the burst a long-idle sender can dump into the network.
//!
//! Token arithmetic is exact integer math in units of byte·ns/s (bytes × 10⁹,
//! `i128`), so no rounding drift accumulates and nothing overflows for any
//! `u64` rate, size or time. Every operation is O(1) and allocation-free.

use crate::time::{duration_nanos, Instant};
use std::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Default pacing gain in slow start.
pub const DEFAULT_SLOW_START_GAIN: f64 = 2.0;
/// Default pacing gain in congestion avoidance (RFC 9002 §7.7's `N`).
pub const DEFAULT_CONGESTION_AVOIDANCE_GAIN: f64 = 1.25;
/// Default bucket size in segments (the initial window, RFC 9002 §7.7).
pub const DEFAULT_BURST_SEGMENTS: u64 = 10;
/// At high rates the bucket holds this much sending time, so one timer
/// wake-up (tens of µs late on a real host) releases a batch rather than a
/// packet — Linux sizes TSO bursts the same way (`sk_pacing_shift` = 10,
/// ~1 ms). Below `10·MSS / 1 ms` (≈ 116 Mbit/s at 1452 B) it has no effect.
pub const DEFAULT_BURST_TIME: Duration = Duration::from_millis(1);
/// Largest bucket, bytes, however fast the rate.
pub const MAX_BURST_BYTES: u64 = 1 << 20;

/// A token-bucket pacer; sans-IO, all times given by the caller.
///
/// Until the first [`Pacer::set_rate`] the rate is unlimited.
#[derive(Debug, Clone)]
pub struct Pacer {
    enabled: bool,
    /// Pacing gain while in slow start.
    slow_start_gain: f64,
    /// Pacing gain otherwise.
    ca_gain: f64,
    /// Bucket size, bytes (≥ 1): max(`min_burst`, rate · `burst_time`).
    burst: u64,
    /// Smallest bucket, bytes (≥ 1).
    min_burst: u64,
    /// Sending time the bucket holds at high rates.
    burst_time: Duration,
    /// Rate, bytes per second (≥ 1; `u64::MAX` = unlimited).
    rate: u64,
    /// Bucket content at `last`, bytes × 10⁹ (negative: debt).
    tokens: i128,
    /// When `tokens` was last brought up to date.
    last: Instant,
}

impl Pacer {
    /// An enabled pacer for segments of `mss` bytes: gains 2.0 / 1.25, a
    /// bucket of [`DEFAULT_BURST_SEGMENTS`]·`mss` bytes, initially full,
    /// and an unlimited rate until [`Pacer::set_rate`].
    pub fn new(mss: u64) -> Self {
        let burst = mss.saturating_mul(DEFAULT_BURST_SEGMENTS).max(1);
        Pacer {
            enabled: true,
            slow_start_gain: DEFAULT_SLOW_START_GAIN,
            ca_gain: DEFAULT_CONGESTION_AVOIDANCE_GAIN,
            burst,
            min_burst: burst,
            burst_time: DEFAULT_BURST_TIME,
            rate: u64::MAX,
            tokens: scaled(burst),
            last: Instant::ZERO,
        }
    }

    /// A pacer that never delays a packet ([`Pacer::next_send_time`] always
    /// returns `now`); it still computes [`Pacer::rate_bps`]. (Its bucket is
    /// sized for a 1-byte MSS; for a pacer to be switched on later, use
    /// [`Pacer::new`] and [`Pacer::set_enabled`].)
    pub fn disabled() -> Self {
        let mut pacer = Pacer::new(1);
        pacer.enabled = false;
        pacer
    }

    /// Sets the gains applied to `cwnd/SRTT` in slow start and otherwise.
    /// Non-finite or non-positive gains are replaced by the defaults.
    pub fn with_gains(mut self, slow_start: f64, congestion_avoidance: f64) -> Self {
        let sane = |g: f64, default| if g.is_finite() && g > 0.0 { g } else { default };
        self.slow_start_gain = sane(slow_start, DEFAULT_SLOW_START_GAIN);
        self.ca_gain = sane(congestion_avoidance, DEFAULT_CONGESTION_AVOIDANCE_GAIN);
        self
    }

    /// Sets the bucket size (maximum burst) in bytes, at least 1; the bucket
    /// starts full.
    pub fn with_burst(mut self, bytes: u64) -> Self {
        self.burst = bytes.max(1);
        self.min_burst = self.burst;
        self.tokens = scaled(self.burst);
        self
    }

    /// Sets how much sending time the bucket holds at high rates (zero:
    /// always the fixed minimum bucket).
    pub fn with_burst_time(mut self, time: Duration) -> Self {
        self.burst_time = time;
        self
    }

    /// Turns pacing on or off (off: never delays).
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    /// True if packets may be delayed.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The bucket size, bytes.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Updates the rate to `gain · cwnd_bytes / srtt`. A zero `srtt` (or a
    /// result beyond `u64::MAX`) means an unlimited rate; the rate is at
    /// least 1 byte/s.
    pub fn set_rate(&mut self, cwnd_bytes: u64, srtt: Duration, slow_start: bool) {
        let gain = if slow_start {
            self.slow_start_gain
        } else {
            self.ca_gain
        };
        let srtt = srtt.as_secs_f64();
        self.rate = if srtt > 0.0 {
            // `as` saturates at u64::MAX (and maps NaN to 0).
            ((gain * cwnd_bytes as f64 / srtt) as u64).max(1)
        } else {
            u64::MAX
        };
        self.resize_burst();
    }

    /// Sets the rate to `bytes_per_sec` directly (at least 1 byte/s), for a
    /// rate-based sender that has no window.
    pub fn set_bytes_per_sec(&mut self, bytes_per_sec: u64) {
        self.rate = bytes_per_sec.max(1);
        self.resize_burst();
    }

    /// Lowers the rate to at most `bytes_per_sec` (a rate cap set on top
    /// of [`Pacer::set_rate`]; at least 1 byte/s).
    pub fn cap_rate(&mut self, bytes_per_sec: u64) {
        self.rate = self.rate.min(bytes_per_sec.max(1));
        self.resize_burst();
    }

    /// The bucket holds `burst_time` of sending at the current rate, within
    /// its bounds.
    fn resize_burst(&mut self) {
        let timed = (self.rate as u128 * self.burst_time.as_nanos() / 1_000_000_000) as u64;
        self.burst = timed.clamp(self.min_burst, MAX_BURST_BYTES.max(self.min_burst));
    }

    /// The pacing rate in bytes per second (`u64::MAX`: unlimited).
    pub fn rate_bytes_per_sec(&self) -> u64 {
        self.rate
    }

    /// The pacing rate in bits per second, saturating (`u64::MAX`:
    /// unlimited).
    pub fn rate_bps(&self) -> u64 {
        self.rate.saturating_mul(8)
    }

    /// Bucket content at `now` (bytes × 10⁹), without changing state.
    fn tokens_at(&self, now: Instant) -> i128 {
        let elapsed = i128::from(duration_nanos(now.saturating_duration_since(self.last)));
        let cap = scaled(self.burst);
        if self.tokens >= cap {
            return cap;
        }
        self.tokens
            .saturating_add(elapsed.saturating_mul(i128::from(self.rate)))
            .min(cap)
    }

    /// The earliest instant, not before `now`, at which a packet of `bytes`
    /// bytes may be sent; `now` if it may be sent immediately (or pacing is
    /// disabled).
    pub fn next_send_time(&self, now: Instant, bytes: u64) -> Instant {
        if !self.enabled || self.rate == u64::MAX {
            return now;
        }
        let need = scaled(bytes.min(self.burst));
        let deficit = need.saturating_sub(self.tokens_at(now));
        if deficit <= 0 {
            return now;
        }
        // ceil(deficit / rate) nanoseconds; rate ≥ 1.
        let rate = i128::from(self.rate);
        let wait = deficit.saturating_add(rate - 1) / rate;
        now + Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
    }

    /// Accounts for a packet of `bytes` bytes sent at `now` (whether or not
    /// the pacer allowed it).
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        if !self.enabled {
            return;
        }
        if self.rate == u64::MAX {
            // Unlimited: the bucket stays full.
            self.tokens = scaled(self.burst);
            self.last = self.last.max(now);
            return;
        }
        if now > self.last {
            self.tokens = self.tokens_at(now);
            self.last = now;
        }
        self.tokens = self.tokens.saturating_sub(scaled(bytes));
    }

    /// Time to refill `bytes` bytes at the current rate (zero if unlimited).
    pub fn interval(&self, bytes: u64) -> Duration {
        if self.rate == u64::MAX {
            return Duration::ZERO;
        }
        let nanos = u128::from(bytes) * u128::from(NANOS_PER_SEC) / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// `bytes` in token units (bytes × 10⁹).
fn scaled(bytes: u64) -> i128 {
    i128::from(bytes) * i128::from(NANOS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Sends `count` packets of `size` bytes as early as the pacer allows,
    /// starting at `start`; returns the send times.
    fn send_paced(p: &mut Pacer, start: Instant, count: usize, size: u64) -> Vec<Instant> {
        let mut now = start;
        let mut times = Vec::new();
        for _ in 0..count {
            now = p.next_send_time(now, size);
            p.on_sent(now, size);
            times.push(now);
        }
        times
    }

    #[test]
    fn rate_follows_set_rate() {
        let mut p = Pacer::new(MSS);
        assert_eq!(p.rate_bytes_per_sec(), u64::MAX);
        // 100 kB over 100 ms = 1 MB/s.
        p.set_rate(100_000, ms(100), true);
        assert_eq!(p.rate_bytes_per_sec(), 2_000_000);
        assert_eq!(p.rate_bps(), 16_000_000);
        p.set_rate(100_000, ms(100), false);
        assert_eq!(p.rate_bytes_per_sec(), 1_250_000);
        p.set_rate(200_000, ms(50), false);
        assert_eq!(p.rate_bytes_per_sec(), 5_000_000);
        let mut p = Pacer::new(MSS).with_gains(1.0, 1.0);
        p.set_rate(100_000, ms(100), true);
        assert_eq!(p.rate_bytes_per_sec(), 1_000_000);
        assert_eq!(p.interval(MSS), ms(1));
    }

    #[test]
    fn burst_then_spaced_by_size_over_rate() {
        let mut p = Pacer::new(MSS);
        p.set_rate(100_000, ms(100), false); // 1.25 MB/s: 800 µs per 1000 B
        let t0 = Instant::from_nanos(5_000_000);
        let times = send_paced(&mut p, t0, 15, MSS);
        // The initial bucket (10 segments) goes at once...
        assert!(times[..10].iter().all(|&t| t == t0));
        // ...then one packet per 800 µs.
        for (i, &t) in times[10..].iter().enumerate() {
            assert_eq!(t, t0 + Duration::from_micros(800 * (i as u64 + 1)));
        }
    }

    #[test]
    fn steady_rate_has_no_drift() {
        // 3 bytes per 7 ns does not divide evenly; the integer bucket keeps
        // the long-run rate exact.
        let mut p = Pacer::new(MSS).with_burst(2 * MSS).with_gains(1.0, 1.0);
        p.set_rate(3_000, Duration::from_micros(7), false); // 428 571 428 B/s
        let rate = p.rate_bytes_per_sec();
        let times = send_paced(&mut p, Instant::ZERO, 10_002, MSS);
        let span = times[10_001] - times[1];
        let expect = 10_000 * MSS * NANOS_PER_SEC / rate;
        assert!(duration_nanos(span).abs_diff(expect) <= 1, "{span:?}");
    }

    #[test]
    fn idle_refills_up_to_burst_only() {
        let mut p = Pacer::new(MSS);
        p.set_rate(10_000, ms(10), false); // 1.25 MB/s
        let t0 = Instant::ZERO;
        send_paced(&mut p, t0, 20, MSS);
        // A long idle period: the bucket refills, but to 10 segments only.
        let t1 = t0 + Duration::from_secs(10);
        let times = send_paced(&mut p, t1, 12, MSS);
        assert!(times[..10].iter().all(|&t| t == t1));
        assert_eq!(times[10], t1 + Duration::from_micros(800));
    }

    #[test]
    fn packet_larger_than_burst_waits_for_full_bucket() {
        let mut p = Pacer::new(MSS).with_burst(1500);
        p.set_rate(1_000_000, Duration::from_secs(1), false); // 1.25 MB/s
        let t0 = Instant::ZERO;
        assert_eq!(p.next_send_time(t0, 4000), t0);
        // 2500 bytes of debt; the bucket is full
        p.on_sent(t0, 4000);
        // Full bucket again after 4000 B / 1.25 MB/s = 3.2 ms.
        assert_eq!(p.next_send_time(t0, 4000), t0 + Duration::from_micros(3200));
        assert_eq!(p.next_send_time(t0, 100), t0 + Duration::from_micros(2080));
    }

    #[test]
    fn rate_change_takes_effect() {
        let mut p = Pacer::new(MSS).with_burst(MSS);
        p.set_rate(100_000, ms(100), false); // 800 µs per packet
        let t0 = Instant::ZERO;
        p.on_sent(t0, MSS);
        assert_eq!(p.next_send_time(t0, MSS), t0 + Duration::from_micros(800));
        p.set_rate(200_000, ms(100), false); // 400 µs per packet
        assert_eq!(p.next_send_time(t0, MSS), t0 + Duration::from_micros(400));
    }

    #[test]
    fn bucket_holds_a_millisecond_at_high_rates() {
        let mut p = Pacer::new(1000);
        // 10 MB/s × gain 1.25 = 12.5 MB/s → 12.5 kB per ms: above 10 MSS.
        p.set_rate(10_000_000, Duration::from_millis(1000), false);
        assert_eq!(p.burst(), 12_500);
        // 1.25 MB/s → 1.25 kB per ms: the 10-MSS floor holds.
        p.set_rate(1_000_000, Duration::from_millis(1000), false);
        assert_eq!(p.burst(), 10_000);
        // Absurd rates are capped.
        p.set_rate(u64::MAX / 4, Duration::from_nanos(1), false);
        assert_eq!(p.burst(), MAX_BURST_BYTES);
        let mut fixed = Pacer::new(1000).with_burst_time(Duration::ZERO);
        fixed.set_rate(10_000_000, Duration::from_millis(1), false);
        assert_eq!(fixed.burst(), 10_000);
    }

    #[test]
    fn disabled_never_delays() {
        let mut p = Pacer::disabled();
        assert!(!p.is_enabled());
        p.set_rate(1, Duration::from_secs(1000), false);
        for _ in 0..100 {
            assert_eq!(p.next_send_time(Instant::ZERO, 65_000), Instant::ZERO);
            p.on_sent(Instant::ZERO, 65_000);
        }
        p.set_enabled(true);
        p.on_sent(Instant::ZERO, 65_000);
        assert!(p.next_send_time(Instant::ZERO, 65_000) > Instant::ZERO);
    }

    #[test]
    fn degenerate_inputs() {
        let mut p = Pacer::new(MSS);
        // srtt 0: unlimited.
        p.set_rate(100_000, Duration::ZERO, true);
        assert_eq!(p.rate_bytes_per_sec(), u64::MAX);
        assert_eq!(p.rate_bps(), u64::MAX);
        assert_eq!(p.interval(MSS), Duration::ZERO);
        for _ in 0..100 {
            assert_eq!(p.next_send_time(Instant::ZERO, u64::MAX), Instant::ZERO);
            p.on_sent(Instant::ZERO, u64::MAX);
        }
        // Huge cwnd, tiny srtt: saturates to unlimited.
        p.set_rate(u64::MAX, Duration::from_nanos(1), true);
        assert_eq!(p.rate_bytes_per_sec(), u64::MAX);
        // Tiny rate, huge packets and times: no overflow.
        p.set_rate(0, Duration::MAX, false);
        assert_eq!(p.rate_bytes_per_sec(), 1);
        p.on_sent(Instant::MAX, u64::MAX);
        p.on_sent(Instant::MAX, u64::MAX);
        assert_eq!(p.next_send_time(Instant::MAX, u64::MAX), Instant::MAX);
        assert_eq!(p.next_send_time(Instant::ZERO, 1), Instant::MAX);
        // Zero MSS still gives a usable bucket; odd gains fall back.
        let p = Pacer::new(0).with_gains(f64::NAN, -1.0).with_burst(0);
        assert_eq!(p.burst(), 1);
        let mut p = p;
        p.set_rate(1000, Duration::from_secs(1), true);
        assert_eq!(p.rate_bytes_per_sec(), 2000);
        // Time going backwards is tolerated.
        p.on_sent(Instant::from_nanos(10), 1);
        p.on_sent(Instant::from_nanos(5), 1);
        assert!(p.next_send_time(Instant::from_nanos(5), 1) > Instant::from_nanos(5));
    }
}
