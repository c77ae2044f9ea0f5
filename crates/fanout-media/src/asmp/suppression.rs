//! Feedback suppression for large groups (ASMP §3.8). When the RTCP
//! interval grows past a threshold (many receivers), a receiver instead
//! waits a time drawn from a truncated exponential distribution on
//! [0, T] (eq. 20: density `λ/T · e^{λz/T} / (e^λ − 1)`: most wait almost
//! T, a few report early) and gives up its report if it hears, first,
//! another receiver's report of a rate within 2% of its own: the sender
//! still hears the rates that matter, from few receivers.

use fanout_core::Rng;
use std::time::Duration;

/// λ of the distribution: with N receivers about ln N + 1 keeps the
/// expected early reports near one; 10 suits up to ~10 000.
pub const LAMBDA: f64 = 10.0;
/// Two rates are similar when they differ by at most this share.
pub const SIMILAR: f64 = 0.02;

/// A wait drawn from the truncated exponential distribution on `[0, t]`
/// with parameter `lambda` (by inverting its distribution function).
pub fn truncated_exponential(t: Duration, lambda: f64, rng: &mut Rng) -> Duration {
    let u = rng.next_f64();
    let z = (1.0 + u * lambda.exp_m1()).ln() / lambda;
    t.mul_f64(z.clamp(0.0, 1.0))
}

/// Whether a report of `heard` makes one of `own` unnecessary: within 2%
/// (the paper's rule).
pub fn suppresses(own: f64, heard: f64) -> bool {
    own > 0.0 && (heard - own).abs() <= SIMILAR * own
}

/// fanout's rule: a report of `heard` at most 2% above `own` makes it
/// unnecessary — the sender follows the least report, so one well above a
/// report already sent cannot move it either (as TFMCC suppresses, RFC
/// 4654 §4.5).
pub fn suppresses_at_or_below(own: f64, heard: f64) -> bool {
    own > 0.0 && heard <= (1.0 + SIMILAR) * own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_crowd_toward_the_end_and_few_report_early() {
        let t = Duration::from_secs(10);
        let mut rng = Rng::new(5);
        let draws: Vec<f64> = (0..20_000)
            .map(|_| truncated_exponential(t, LAMBDA, &mut rng).as_secs_f64())
            .collect();
        assert!(draws.iter().all(|&d| (0.0..=10.0).contains(&d)));
        // P(z < 0.5 T) = (e^{λ/2} − 1) / (e^λ − 1) ≈ 0.0067.
        let early = draws.iter().filter(|&&d| d < 5.0).count() as f64 / draws.len() as f64;
        let want = (LAMBDA / 2.0).exp_m1() / LAMBDA.exp_m1();
        assert!((early - want).abs() < 0.003, "{early} vs {want}");
        // Mean: T (1/(1 − e^{−λ}) − 1/λ) ≈ 0.9 T.
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let want = 10.0 * (1.0 / (1.0 - (-LAMBDA).exp()) - 1.0 / LAMBDA);
        assert!((mean - want).abs() < 0.05, "{mean} vs {want}");
    }

    #[test]
    fn only_a_rate_within_two_percent_suppresses() {
        assert!(suppresses(100_000.0, 101_900.0));
        assert!(suppresses(100_000.0, 98_000.0));
        assert!(!suppresses(100_000.0, 97_900.0));
        assert!(!suppresses(0.0, 0.0));
        assert!(suppresses_at_or_below(100_000.0, 101_900.0));
        assert!(suppresses_at_or_below(100_000.0, 50_000.0));
        assert!(!suppresses_at_or_below(100_000.0, 102_100.0));
    }
}
