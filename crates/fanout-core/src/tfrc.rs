//! The arithmetic of TCP-friendly rate control that fanout's equation-based
//! controllers share (the session's equation rate, TFMCC, ASMP): the TCP
//! throughput equation (RFC 5348 §3.1, the Padhye et al. model ASMP §3.6
//! also uses), its inverse, and the weighted mean of loss intervals (RFC
//! 5348 §5.4).

/// RFC 5348 §5.4's number of loss intervals averaged.
pub const LOSS_INTERVALS: usize = 8;

/// RFC 5348 §3.1: `X = s / (R·√(2bp/3) + t_RTO·(3·√(3bp/8))·p·(1 + 32p²))`
/// with b = 1 and t_RTO = 4R: bytes per second for packets of `s` bytes,
/// round trip `r` s and loss event rate `p` (infinite at `p` = 0).
pub fn throughput(s: f64, r: f64, p: f64) -> f64 {
    let t_rto = 4.0 * r;
    s / (r * (2.0 * p / 3.0).sqrt()
        + t_rto * (3.0 * (3.0 * p / 8.0).sqrt()) * p * (1.0 + 32.0 * p * p))
}

/// The loss event rate at which [`throughput`] gives `rate` (bytes per
/// second) for packets of `s` bytes and round trip `r` seconds: the
/// equation inverted by bisection (it falls monotonically with `p`),
/// within `[1e-8, 1]`.
pub fn loss_rate_for(s: f64, r: f64, rate: f64) -> f64 {
    let (mut lo, mut hi) = (1e-8_f64, 1.0_f64);
    if throughput(s, r, lo) <= rate {
        return lo;
    }
    if throughput(s, r, hi) >= rate {
        return hi;
    }
    for _ in 0..60 {
        // Bisect in the logarithm: p spans eight decades.
        let mid = (lo * hi).sqrt();
        if throughput(s, r, mid) > rate {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo * hi).sqrt()
}

/// RFC 5348 §5.4's weight of the `i`-th newest (0-based) of `n` loss
/// intervals: 1 for the newer half, then falling linearly (for `n = 8`:
/// 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2).
pub fn interval_weight(i: usize, n: usize) -> f64 {
    if i < n / 2 {
        1.0
    } else {
        2.0 * (n - i) as f64 / (n + 2) as f64
    }
}

/// RFC 5348 §5.4's mean loss interval: the weighted mean of the `closed`
/// intervals (newest first, the first `n` counted), or, if larger, of the
/// `open` one followed by them (the open one counts only when it raises
/// the mean). `None` without a closed interval.
pub fn mean_interval(
    open: f64,
    closed: impl Iterator<Item = f64> + Clone,
    n: usize,
) -> Option<f64> {
    let mean = |it: &mut dyn Iterator<Item = f64>| {
        let (mut sum, mut w) = (0.0, 0.0);
        for (x, wt) in it.zip((0..n).map(|i| interval_weight(i, n))) {
            sum += x * wt;
            w += wt;
        }
        (w > 0.0).then(|| sum / w)
    };
    let without = mean(&mut closed.clone())?;
    let with = mean(&mut std::iter::once(open).chain(closed)).unwrap_or(without);
    Some(without.max(with))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_equation_its_inverse_and_the_interval_mean() {
        // 1000-byte packets, 100 ms, 1% loss: about 112 kB/s.
        let x = throughput(1000.0, 0.1, 0.01);
        assert!((x - 112_334.0).abs() < 50.0, "{x}");
        assert_eq!(throughput(1000.0, 0.1, 0.0), f64::INFINITY);
        let p = loss_rate_for(1000.0, 0.1, x);
        assert!((p - 0.01).abs() < 1e-9, "{p}");
        let w: Vec<f64> = (0..8).map(|i| interval_weight(i, 8)).collect();
        assert!(w
            .iter()
            .zip([1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2])
            .all(|(a, b)| (a - b).abs() < 1e-12));
        // Longer: the newer half 1, then falling to 2/(n + 2).
        let long: Vec<f64> = (0..32).map(|i| interval_weight(i, 32)).collect();
        assert_eq!(long[15], 1.0);
        assert!((long[31] - 2.0 / 34.0).abs() < 1e-12);
        assert!(long.windows(2).all(|p| p[1] <= p[0]));
        assert_eq!(mean_interval(5.0, std::iter::empty(), 8), None);
        // Closed 100 and 50: mean 75; a short open interval does not
        // count, a long one does.
        let closed = [100.0, 50.0];
        assert_eq!(mean_interval(10.0, closed.iter().copied(), 8), Some(75.0));
        assert_eq!(mean_interval(300.0, closed.iter().copied(), 8), Some(150.0));
    }
}
