//! ASMP's rate (§3.6), bytes per second.

/// The TCP throughput equation as ASMP uses it (eq. 12, after Padhye et
/// al.), with one packet per ACK (D = 1) and t_out = 4·RTT: packets of `p`
/// bytes, round trip `rtt` s, loss rate `l`:
/// `p / (rtt·√(2l/3) + t_out·min(1, 3·√(3l/8))·l·(1 + 32l²))`.
/// Unbounded (infinite) without loss. The same as RFC 5348 §3.1's, but
/// for the `min(1, ·)` the paper keeps from Padhye et al.
pub fn tcp_friendly(p: f64, rtt: f64, l: f64) -> f64 {
    if l <= 0.0 {
        return f64::INFINITY;
    }
    let t_out = 4.0 * rtt;
    p / (rtt * (2.0 * l / 3.0).sqrt()
        + t_out * (3.0 * (3.0 * l / 8.0).sqrt()).min(1.0) * l * (1.0 + 32.0 * l * l))
}

/// Eq. 13: without loss since the last report, one packet per RTT more.
pub fn increase(rate: f64, p: f64, rtt: f64) -> f64 {
    rate + p / rtt
}

/// Eq. 14: the new estimate `inst` taken with weight σ.
pub fn smooth(rate: f64, inst: f64, sigma: f64) -> f64 {
    sigma * inst + (1.0 - sigma) * rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_equation_matches_the_paper_and_falls_with_loss_and_delay() {
        // 1000-byte packets, 100 ms, 1% loss: 1000 / (0.1·√(0.02/3) +
        // 0.4·3·√(0.00375)·0.01·1.0032) ≈ 1000 / (0.008165 + 0.000737).
        let r = tcp_friendly(1000.0, 0.1, 0.01);
        let want = 1000.0
            / (0.1 * (0.02f64 / 3.0).sqrt()
                + 0.4 * 3.0 * (0.03f64 / 8.0).sqrt() * 0.01 * (1.0 + 32.0 * 1e-4));
        assert!((r - want).abs() < 1e-9, "{r} {want}");
        assert!((r - 112_334.0).abs() < 50.0, "{r}");
        assert!(tcp_friendly(1000.0, 0.1, 0.02) < r);
        assert!(tcp_friendly(1000.0, 0.2, 0.01) < r);
        // Heavy loss: the min(1, ·) caps the timeout term's factor.
        let heavy = tcp_friendly(1000.0, 0.1, 0.5);
        let capped = 1000.0 / (0.1 * (1.0f64 / 3.0).sqrt() + 0.4 * 0.5 * (1.0 + 8.0));
        assert!((heavy - capped).abs() < 1e-9);
        assert_eq!(tcp_friendly(1000.0, 0.1, 0.0), f64::INFINITY);
        assert_eq!(increase(10_000.0, 1000.0, 0.1), 20_000.0);
        assert_eq!(smooth(100.0, 200.0, 0.9), 190.0);
        assert_eq!(smooth(100.0, 200.0, 0.2), 120.0);
    }
}
