//! How late the emulator releases packets: actual minus scheduled time of
//! each delivery to a host, in a fixed-size histogram.

use fanout_core::histogram::{Buckets, Histogram};
use serde::Serialize;
use std::time::Duration;

/// 1 µs buckets up to 20 ms; later releases land in the last one (the
/// exact maximum is kept apart).
const BUCKETS: Buckets = Buckets {
    fine: Duration::from_micros(1),
    fine_count: 20_000,
    coarse: Duration::ZERO,
    coarse_count: 0,
};

/// Lateness of every release, bounded memory (160 KB) however long the run.
#[derive(Debug, Clone)]
pub struct Lateness(Histogram);

/// Percentiles of [`Lateness`], for reports.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatenessSummary {
    /// Releases measured.
    pub releases: u64,
    /// Mean lateness, µs.
    pub mean_us: f64,
    /// Median, µs (1 µs resolution).
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// 99.9th percentile, µs.
    pub p999_us: u64,
    /// Largest, µs.
    pub max_us: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness(Histogram::new(BUCKETS))
    }
}

impl Lateness {
    /// Records one release `late` after its scheduled time.
    pub fn record(&mut self, late: Duration) {
        self.0.record(late);
    }

    /// The lateness not exceeded by a fraction `q` (0..=1) of releases
    /// (upper bucket edge; zero with no releases).
    pub fn quantile(&self, q: f64) -> Duration {
        self.0.quantile(q).unwrap_or_default()
    }

    /// Percentiles for a report.
    pub fn summary(&self) -> LatenessSummary {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        LatenessSummary {
            releases: self.0.count(),
            mean_us: self.0.mean().as_nanos() as f64 / 1e3,
            p50_us: us(self.quantile(0.5)),
            p99_us: us(self.quantile(0.99)),
            p999_us: us(self.quantile(0.999)),
            max_us: us(self.0.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let mut l = Lateness::default();
        assert_eq!(l.quantile(0.99), Duration::ZERO);
        for i in 0..1000u64 {
            l.record(Duration::from_micros(i));
        }
        assert_eq!(l.quantile(0.5), Duration::from_micros(500));
        assert_eq!(l.quantile(0.99), Duration::from_micros(990));
        assert_eq!(l.quantile(1.0), Duration::from_micros(999));
        l.record(Duration::from_secs(3));
        let s = l.summary();
        assert_eq!(s.releases, 1001);
        assert_eq!(s.max_us, 3_000_000);
        assert_eq!(l.quantile(1.0), Duration::from_secs(3));
    }
}
