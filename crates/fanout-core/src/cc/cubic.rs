//! CUBIC congestion control (RFC 9438).
//!
//! `cwnd` and `ssthresh` are kept in bytes (`u64`); the cubic function works
//! in segments of SMSS bytes and seconds (`f64`), as the RFC's constants
//! assume.
//!
//! * **Slow start** exactly as [`NewReno`](super::NewReno): RFC 5681 with
//!   RFC 3465 ABC (`L` as in NewReno, 1·SMSS after an RTO); no HyStart.
//! * **Window increase** (§4.2): `W_cubic(t) = C·(t − K)³ + W_max` with
//!   `K = ∛((W_max − cwnd_epoch)/C)`. For the usual `cwnd_epoch = β·W_max`
//!   this is RFC 8312's `K = ∛(W_max·(1 − β)/C)`; with fast convergence or an
//!   application-limited flight, `cwnd_epoch` differs and the RFC 9438 form
//!   keeps the curve through `(0, cwnd_epoch)`. `t` runs from the epoch start
//!   `t_epoch` — the first ACK of the congestion-avoidance stage — with
//!   application-limited periods cut out (§5.8: `t_epoch` is moved forward by
//!   their length). On each ACK the target is `W_cubic(t + SRTT)` clamped to
//!   `[cwnd, 1.5·cwnd]`.
//! * **Reno-friendly region** (§4.3): `W_est` starts at `cwnd_epoch` and
//!   grows by `α·segments_acked/cwnd`, `α = 3(1 − β)/(1 + β)`, or `α = 1` once
//!   `W_est ≥ cwnd_prior`. When `W_cubic(t) < W_est`, cwnd is set to `W_est`
//!   (unless cwnd is already larger: an ACK never shrinks the window).
//! * **Concave and convex regions** (§4.4, §4.5): otherwise cwnd grows by
//!   `(target − cwnd)/cwnd` per segment acknowledged (byte-counted; fractional
//!   bytes are carried between ACKs).
//! * **Multiplicative decrease** (§4.6): `ssthresh = max(β·FlightSize,
//!   2·SMSS)`, `cwnd = ssthresh`, `cwnd_prior` = the window before the
//!   reduction. FlightSize is capped at cwnd as in [`NewReno`](super::NewReno)
//!   (the §4.6 "use cwnd" variant is allowed because growth is gated on
//!   `cwnd_limited`).
//! * **Fast convergence** (§4.7): if the window before the reduction is below
//!   the previous `W_max`, `W_max = cwnd·(1 + β)/2`, else `W_max = cwnd`.
//! * **Timeout** (§4.8): ssthresh as in §4.6 (held constant on a repeated RTO
//!   or inside a recovery episode, as in [`NewReno`](super::NewReno)),
//!   `cwnd = 1·SMSS`; the first congestion-avoidance stage afterwards uses
//!   `K = 0`, `W_max = W_est = cwnd_epoch`.
//! * No growth from ACKs of data not sent cwnd-limited (§4.2, §5.8).

use super::newreno::WindowCore;
use super::{AckSample, CongestionController};
use crate::time::Instant;
use std::time::Duration;

/// CUBIC (RFC 9438); see the module documentation for the exact rules.
#[derive(Debug, Clone)]
pub struct Cubic {
    core: WindowCore,
    /// §4.7 fast convergence enabled (default true).
    fast_convergence: bool,
    /// `W_max`, segments.
    w_max: f64,
    /// `cwnd_prior`: cwnd just before the last reduction, segments.
    cwnd_prior: f64,
    /// `K`, seconds (negative when `cwnd_epoch > W_max`).
    k: f64,
    /// `t_epoch`, shifted forward past application-limited periods; `None`
    /// until the first ACK of a congestion-avoidance stage.
    epoch_start: Option<Instant>,
    /// When the current application-limited period started: the last
    /// cwnd-limited ACK before an ACK with `cwnd_limited == false`.
    app_limited_since: Option<Instant>,
    /// Time of the last cwnd-limited ACK in congestion avoidance.
    last_limited_ack: Instant,
    /// `W_est`, segments.
    w_est: f64,
    /// Fraction of a byte of cwnd growth carried to the next ACK, in [0, 1).
    growth_carry: f64,
    /// The next congestion-avoidance stage is the first after an RTO (§4.8).
    after_rto: bool,
}

impl Cubic {
    /// `C`, the aggressiveness constant (§4.1), segments/s³.
    pub const C: f64 = 0.4;
    /// `β_cubic`, the multiplicative decrease factor (§4.1).
    pub const BETA: f64 = 0.7;
    /// `α_cubic = 3(1 − β)/(1 + β)` (§4.3), the Reno-friendly additive
    /// increase, segments per window of acknowledged data.
    pub const ALPHA: f64 = 3.0 * (1.0 - Self::BETA) / (1.0 + Self::BETA);

    /// A controller for segments of `mss` bytes (SMSS; 0 is treated as 1),
    /// starting in slow start with the initial window; fast convergence on.
    pub fn new(mss: u64) -> Self {
        Cubic {
            core: WindowCore::new(mss),
            fast_convergence: true,
            w_max: 0.0,
            cwnd_prior: 0.0,
            k: 0.0,
            epoch_start: None,
            app_limited_since: None,
            last_limited_ack: Instant::ZERO,
            w_est: 0.0,
            growth_carry: 0.0,
            after_rto: false,
        }
    }

    /// Enables or disables fast convergence (§4.7).
    pub fn set_fast_convergence(&mut self, enabled: bool) {
        self.fast_convergence = enabled;
    }

    /// The segment size (SMSS) in bytes.
    pub fn mss(&self) -> u64 {
        self.core.mss
    }

    /// `W_max` in bytes (0 before the first congestion event).
    pub fn w_max(&self) -> u64 {
        f64_to_u64(self.w_max * self.core.mss as f64)
    }

    /// `W_cubic(t)` in segments, `t` in seconds since the epoch start (§4.2).
    fn w_cubic(&self, t: f64) -> f64 {
        let d = t - self.k;
        Self::C * d * d * d + self.w_max
    }

    fn cwnd_segments(&self) -> f64 {
        self.core.cwnd as f64 / self.core.mss as f64
    }

    /// Starts a congestion-avoidance stage at `now` (§4.2, §4.3, §4.8).
    fn start_epoch(&mut self, now: Instant) -> Instant {
        let cwnd_epoch = self.cwnd_segments();
        self.epoch_start = Some(now);
        self.app_limited_since = None;
        self.w_est = cwnd_epoch;
        self.growth_carry = 0.0;
        if self.after_rto {
            self.after_rto = false;
            self.w_max = cwnd_epoch;
            self.k = 0.0;
        } else {
            self.k = ((self.w_max - cwnd_epoch) / Self::C).cbrt();
        }
        now
    }

    /// One ACK of `acked` bytes in congestion avoidance.
    fn congestion_avoidance(&mut self, now: Instant, acked: u64, srtt: Duration) {
        let epoch = match (self.epoch_start, self.app_limited_since.take()) {
            (None, _) => self.start_epoch(now),
            (Some(start), None) => start,
            // §5.8: the application-limited period does not count towards t.
            (Some(start), Some(since)) => {
                let start = start + now.saturating_duration_since(since);
                self.epoch_start = Some(start);
                start
            }
        };
        self.last_limited_ack = now;
        let mss = self.core.mss as f64;
        let cwnd = self.cwnd_segments();
        let segments_acked = acked as f64 / mss;
        let t = now.saturating_duration_since(epoch).as_secs_f64();

        // §4.3: the Reno estimate.
        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            Self::ALPHA
        };
        self.w_est += alpha * segments_acked / cwnd;

        if self.w_cubic(t) < self.w_est {
            // Reno-friendly region. If cwnd is already above W_est (it ran
            // ahead towards W_cubic(t + RTT)), the cubic step below applies
            // instead of stalling, as in Linux (max of both targets).
            let w_est = f64_to_u64(self.w_est * mss);
            if w_est > self.core.cwnd {
                self.core.cwnd = w_est;
                self.growth_carry = 0.0;
                return;
            }
        }
        // §4.2: target = W_cubic(t + RTT) within [cwnd, 1.5 cwnd] (max/min
        // rather than clamp so that a NaN cannot panic).
        let target = self
            .w_cubic(t + srtt.as_secs_f64())
            .max(cwnd)
            .min(1.5 * cwnd);
        // §4.4 / §4.5: (target − cwnd)/cwnd per acknowledged segment.
        let growth = (target - cwnd) / cwnd * segments_acked * mss + self.growth_carry;
        let whole = growth.floor();
        self.growth_carry = growth - whole;
        self.core.cwnd = self.core.cwnd.saturating_add(f64_to_u64(whole));
    }
}

/// Saturating, NaN-to-zero conversion (the semantics of `as`).
fn f64_to_u64(x: f64) -> u64 {
    x as u64
}

impl CongestionController for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn on_ack(&mut self, now: Instant, ack: AckSample) {
        let limit = self.core.begin_ack(ack.acked_bytes);
        if ack.acked_bytes == 0 {
            return;
        }
        if !ack.cwnd_limited {
            if self.epoch_start.is_some() && self.app_limited_since.is_none() {
                self.app_limited_since = Some(self.last_limited_ack);
            }
            return;
        }
        let mut acked = ack.acked_bytes;
        if self.core.cwnd < self.core.ssthresh {
            acked = self.core.slow_start(acked, limit);
        }
        if acked > 0 {
            self.congestion_avoidance(now, acked, ack.srtt);
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, flight_size: u64) {
        let cwnd = self.cwnd_segments();
        // §4.7 fast convergence.
        self.w_max = if self.fast_convergence && cwnd < self.w_max {
            cwnd * (1.0 + Self::BETA) / 2.0
        } else {
            cwnd
        };
        // §4.6 multiplicative decrease.
        self.cwnd_prior = cwnd;
        let core = &mut self.core;
        core.enter_recovery();
        let reduced = f64_to_u64(core.reduction_base(flight_size) as f64 * Self::BETA);
        core.ssthresh = reduced.max(core.min_window());
        core.cwnd = core.ssthresh;
        self.epoch_start = None;
        self.app_limited_since = None;
        self.after_rto = false;
    }

    fn on_recovery_end(&mut self, _now: Instant) {
        self.core.exit_recovery();
    }

    fn on_retransmission_timeout(&mut self, _now: Instant, flight_size: u64) {
        // §4.8: ssthresh as in §4.6, cwnd as Reno.
        if self.core.rto_reduces() {
            self.cwnd_prior = self.cwnd_segments();
            let core = &mut self.core;
            let reduced = f64_to_u64(core.reduction_base(flight_size) as f64 * Self::BETA);
            core.ssthresh = reduced.max(core.min_window());
        }
        self.core.on_rto(flight_size);
        self.epoch_start = None;
        self.app_limited_since = None;
        self.after_rto = true;
    }

    fn snapshot(&self) -> Box<dyn CongestionController> {
        Box::new(self.clone())
    }

    fn cwnd(&self) -> u64 {
        self.core.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.core.ssthresh
    }

    fn take_over(&mut self, cwnd: u64) {
        self.core.take_over(cwnd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::INITIAL_WINDOW_SEGMENTS;

    const MSS: u64 = 1000;

    fn sample(bytes: u64, srtt: Duration) -> AckSample {
        AckSample {
            acked_bytes: bytes,
            srtt,
            min_rtt: srtt,
            cwnd_limited: true,
        }
    }

    fn at(secs: f64) -> Instant {
        Instant::from_nanos((secs * 1e9) as u64)
    }

    /// A controller that just lost at `w_max_segments` (no previous W_max,
    /// flight = cwnd) and has left recovery.
    fn after_loss_at(w_max_segments: u64) -> Cubic {
        let mut cc = Cubic::new(MSS);
        cc.core.cwnd = w_max_segments * MSS;
        cc.on_congestion_event(Instant::ZERO, w_max_segments * MSS);
        cc.on_recovery_end(Instant::ZERO);
        cc
    }

    /// Runs `rounds` round trips of `rtt` from `start`: each acknowledges the
    /// current cwnd in per-segment ACKs spread evenly over the round.
    /// Returns cwnd in segments at the end of each round.
    fn run_rounds(cc: &mut Cubic, start: Instant, rtt: Duration, rounds: usize) -> Vec<u64> {
        let mut now = start;
        let mut out = Vec::new();
        for _ in 0..rounds {
            let segments = cc.cwnd() / MSS;
            let step = rtt / segments as u32;
            for _ in 0..segments {
                now += step;
                cc.on_ack(now, sample(MSS, rtt));
            }
            out.push(cc.cwnd() / MSS);
        }
        out
    }

    #[test]
    fn constants() {
        assert!((Cubic::ALPHA - 0.529_411_764_7).abs() < 1e-9);
        let cc = Cubic::new(MSS);
        assert_eq!(cc.cwnd(), INITIAL_WINDOW_SEGMENTS * MSS);
        assert_eq!(cc.ssthresh(), u64::MAX);
        assert_eq!(cc.name(), "cubic");
    }

    #[test]
    fn slow_start_like_newreno() {
        let mut cc = Cubic::new(MSS);
        for _ in 0..10 {
            cc.on_ack(Instant::ZERO, sample(MSS, Duration::from_millis(50)));
        }
        assert_eq!(cc.cwnd(), 20 * MSS);
        // A stretch ACK counts every byte up to the ABC limit.
        cc.on_ack(Instant::ZERO, sample(10 * MSS, Duration::from_millis(50)));
        assert_eq!(cc.cwnd(), 30 * MSS);
    }

    #[test]
    fn multiplicative_decrease() {
        let cc = after_loss_at(100);
        assert_eq!(cc.cwnd(), 70 * MSS);
        assert_eq!(cc.ssthresh(), 70 * MSS);
        assert_eq!(cc.w_max(), 100 * MSS);
        assert!(!cc.in_slow_start());
        // Floor of 2 SMSS.
        let cc = after_loss_at(2);
        assert_eq!(cc.cwnd(), 2 * MSS);
    }

    #[test]
    fn k_and_w_cubic_at_k_is_w_max() {
        let mut cc = after_loss_at(100);
        cc.on_ack(Instant::ZERO, sample(MSS, Duration::from_millis(100)));
        // K = ∛(W_max·(1 − β)/C) = ∛(100·0.3/0.4) = ∛75.
        let k = 75f64.cbrt();
        assert!((cc.k - k).abs() < 1e-9, "K {}", cc.k);
        assert!((cc.w_cubic(k) - 100.0).abs() < 1e-9);
        assert!((cc.w_cubic(0.0) - 70.0).abs() < 1e-9);
        // Concave below K: increments shrink as t approaches K.
        let d1 = cc.w_cubic(1.0) - cc.w_cubic(0.0);
        let d2 = cc.w_cubic(2.0) - cc.w_cubic(1.0);
        let d3 = cc.w_cubic(k) - cc.w_cubic(k - 1.0);
        assert!(d1 > d2 && d2 > d3 && d3 > 0.0);
    }

    #[test]
    fn cwnd_follows_w_cubic_and_plateaus_at_w_max() {
        // Large BDP (RTT 100 ms, W_max 1000): the cubic region dominates.
        let rtt = Duration::from_millis(100);
        let mut cc = after_loss_at(1000);
        let k = (1000.0f64 * 0.3 / 0.4).cbrt(); // ≈ 9.09 s
        let rounds = run_rounds(&mut cc, Instant::ZERO, rtt, 200);
        for (i, &cwnd) in rounds.iter().enumerate() {
            let t = (i + 1) as f64 * 0.1;
            // cwnd tracks the target one RTT ahead, within a few segments.
            let expect = cc.w_cubic(t + 0.1);
            assert!(
                (cwnd as f64 - expect).abs() < 0.02 * expect + 3.0,
                "round {i}: cwnd {cwnd} vs W_cubic {expect:.1}"
            );
        }
        // Around t = K the window is at W_max, and it is flat there.
        let at_k = rounds[(k * 10.0) as usize - 1];
        assert!((995..=1005).contains(&at_k), "cwnd at K: {at_k}");
        let before = rounds[(k * 10.0) as usize - 11];
        assert!(at_k - before < 5, "plateau: {before} -> {at_k}");
        // Convex after K.
        assert!(rounds[199] > 1100, "convex growth: {}", rounds[199]);
    }

    #[test]
    fn reno_friendly_region_dominates_small_bdp() {
        // Tiny W_max and RTT: W_cubic hardly moves within many RTTs, the
        // Reno estimate grows α segments per RTT and then 1 (W_est ≥ prior).
        let rtt = Duration::from_millis(1);
        let mut cc = after_loss_at(20);
        assert_eq!(cc.cwnd(), 14 * MSS);
        let rounds = run_rounds(&mut cc, Instant::ZERO, rtt, 40);
        // 14 + ~0.53/round until W_est reaches 20 (≈11 rounds), then +1/round.
        assert!(cc.w_cubic(0.04) < cc.w_est);
        assert_eq!(rounds[0], 14);
        assert!((19..=21).contains(&rounds[11]), "{rounds:?}");
        let last = *rounds.last().unwrap();
        assert!((45..=50).contains(&last), "{rounds:?}");
        // The cubic curve alone would still be ≈ 14.5 segments at t = 40 ms.
        assert!(cc.w_cubic(0.04) < 15.0);
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut cc = after_loss_at(100);
        // Loss again before regaining W_max: cwnd 70 < W_max 100.
        cc.on_congestion_event(Instant::ZERO, 70 * MSS);
        assert_eq!(cc.w_max(), 59_500); // 70·(1 + 0.7)/2 = 59.5 segments
        assert_eq!(cc.cwnd(), 49 * MSS);
        let mut cc = after_loss_at(100);
        cc.set_fast_convergence(false);
        cc.on_congestion_event(Instant::ZERO, 70 * MSS);
        assert_eq!(cc.w_max(), 70 * MSS);
        // Loss above W_max: W_max = cwnd.
        let mut cc = after_loss_at(100);
        cc.core.cwnd = 120 * MSS;
        cc.on_congestion_event(Instant::ZERO, 120 * MSS);
        assert_eq!(cc.w_max(), 120 * MSS);
    }

    #[test]
    fn epoch_starts_at_first_ack_after_congestion_event() {
        let rtt = Duration::from_millis(100);
        let mut a = after_loss_at(1000);
        let mut b = after_loss_at(1000);
        // Same trajectory relative to the first ACK, whenever it comes.
        let ra = run_rounds(&mut a, at(1.0), rtt, 30);
        let rb = run_rounds(&mut b, at(50.0), rtt, 30);
        assert_eq!(ra, rb);
    }

    #[test]
    fn app_limited_time_is_excluded_and_does_not_grow() {
        let rtt = Duration::from_millis(100);
        let mut a = after_loss_at(1000);
        let mut b = after_loss_at(1000);
        run_rounds(&mut a, Instant::ZERO, rtt, 20);
        run_rounds(&mut b, Instant::ZERO, rtt, 20);
        let before = b.cwnd();
        // b idles (application-limited) for 5 s.
        let idle = AckSample {
            cwnd_limited: false,
            ..sample(MSS, rtt)
        };
        for i in 1..=50 {
            b.on_ack(at(2.0 + i as f64 * 0.1), idle);
        }
        assert_eq!(b.cwnd(), before);
        let ra = run_rounds(&mut a, at(2.0), rtt, 20);
        let rb = run_rounds(&mut b, at(7.0), rtt, 20);
        // b resumes on the curve where it left it (a few segments' slack:
        // the idle ACKs shift the curve by at most one ACK spacing).
        for (x, y) in ra.iter().zip(&rb) {
            assert!(x.abs_diff(*y) <= 3, "{ra:?} vs {rb:?}");
        }
    }

    #[test]
    fn target_capped_at_one_and_a_half_cwnd() {
        // Far into the convex region W_cubic explodes, but cwnd may grow by
        // at most 50% per window of ACKs.
        let rtt = Duration::from_millis(100);
        let mut cc = after_loss_at(100);
        cc.on_ack(Instant::ZERO, sample(MSS, rtt));
        let w = cc.cwnd();
        let mut acked = 0;
        while acked < w {
            cc.on_ack(at(1000.0), sample(MSS, rtt));
            acked += MSS;
        }
        // Compounding within the window stays below 1.5^1 · e^… : ≤ 1.65 w.
        assert!(cc.cwnd() > w * 3 / 2 && cc.cwnd() < w * 165 / 100);
    }

    #[test]
    fn rto_resets_to_one_segment_and_restarts_curve() {
        let rtt = Duration::from_millis(100);
        let mut cc = after_loss_at(100);
        run_rounds(&mut cc, Instant::ZERO, rtt, 5);
        let cwnd = cc.cwnd();
        cc.on_retransmission_timeout(at(1.0), cwnd);
        assert_eq!(cc.cwnd(), MSS);
        assert_eq!(cc.ssthresh(), (cwnd as f64 * 0.7) as u64);
        // Repeated RTO: ssthresh held.
        cc.on_retransmission_timeout(at(2.0), cwnd);
        assert_eq!(cc.ssthresh(), (cwnd as f64 * 0.7) as u64);
        assert!(cc.in_slow_start());
        // Slow start back to ssthresh, then K = 0, W_max = cwnd_epoch.
        let mut now = at(3.0);
        while cc.in_slow_start() {
            now += Duration::from_millis(1);
            cc.on_ack(now, sample(MSS, rtt));
        }
        now += Duration::from_millis(1);
        cc.on_ack(now, sample(MSS, rtt));
        assert_eq!(cc.k, 0.0);
        assert!((cc.w_max - cc.ssthresh() as f64 / MSS as f64).abs() < 0.01);
        assert!(cc.w_est >= cc.w_max);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let rtt = Duration::from_millis(10);
        let idle = AckSample {
            cwnd_limited: false,
            ..sample(MSS, rtt)
        };
        let mut cc = Cubic::new(MSS);
        for i in 0..100 {
            cc.on_ack(at(i as f64), idle);
        }
        assert_eq!(cc.cwnd(), 10 * MSS);
        let mut cc = after_loss_at(100);
        for i in 0..1000 {
            cc.on_ack(at(i as f64), idle);
        }
        assert_eq!(cc.cwnd(), 70 * MSS);
        assert!(cc.epoch_start.is_none());
    }

    #[test]
    fn extreme_inputs_do_not_panic() {
        let mut cc = Cubic::new(0);
        cc.on_retransmission_timeout(Instant::ZERO, 0);
        assert_eq!(cc.cwnd(), 1);
        cc.on_ack(Instant::MAX, sample(u64::MAX, Duration::MAX));
        cc.on_ack(Instant::MAX, sample(u64::MAX, Duration::ZERO));
        let mut cc = Cubic::new(u64::MAX / 2);
        cc.on_ack(Instant::ZERO, sample(u64::MAX, Duration::MAX));
        cc.on_congestion_event(Instant::ZERO, u64::MAX);
        cc.on_recovery_end(Instant::ZERO);
        cc.on_ack(Instant::ZERO, sample(u64::MAX, Duration::MAX));
        cc.on_ack(Instant::MAX, sample(u64::MAX, Duration::MAX));
        assert!(cc.cwnd() >= u64::MAX / 2);
    }

    /// Golden trajectory: W_max = 100 segments, RTT 100 ms, per-segment ACKs;
    /// cwnd in segments at the end of each round trip. Guards against
    /// accidental changes; K = ∛75 ≈ 4.22 s ≈ 42 rounds.
    #[test]
    fn golden_trajectory() {
        let rtt = Duration::from_millis(100);
        let mut cc = after_loss_at(100);
        let rounds = run_rounds(&mut cc, Instant::ZERO, rtt, 60);
        #[rustfmt::skip]
        let golden: [u64; 60] = [
            72, 73, 75, 77, 79, 80, 82, 83, 85, 86,
            87, 88, 90, 91, 91, 92, 93, 94, 94, 95,
            96, 96, 97, 97, 97, 98, 98, 98, 99, 99,
            99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
            99, 99, 100, 100, 100, 100, 100, 100, 100, 100,
            100, 100, 100, 100, 100, 101, 101, 101, 101, 102,
        ];
        assert_eq!(rounds, golden, "{rounds:?}");
    }
}
