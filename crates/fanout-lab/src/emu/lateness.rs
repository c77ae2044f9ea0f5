//! How late the emulator releases packets: actual minus scheduled time of
//! each delivery to a host, in a fixed-size histogram.

use serde::Serialize;
use std::time::Duration;

/// Histogram resolution.
const BUCKET: Duration = Duration::from_micros(1);
/// Buckets: 1 µs each up to 20 ms; later releases land in the last one
/// (the exact maximum is kept apart).
const BUCKETS: usize = 20_000;

/// Lateness of every release, bounded memory (160 KB) however long the run.
#[derive(Debug, Clone)]
pub struct Lateness {
    counts: Vec<u64>,
    total: u64,
    max: Duration,
    sum_nanos: u128,
}

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
        Lateness {
            counts: vec![0; BUCKETS],
            total: 0,
            max: Duration::ZERO,
            sum_nanos: 0,
        }
    }
}

impl Lateness {
    /// Records one release `late` after its scheduled time.
    pub fn record(&mut self, late: Duration) {
        let bucket = usize::try_from(late.as_nanos() / BUCKET.as_nanos())
            .unwrap_or(usize::MAX)
            .min(BUCKETS - 1);
        self.counts[bucket] += 1;
        self.total += 1;
        self.max = self.max.max(late);
        self.sum_nanos += late.as_nanos();
    }

    /// The lateness not exceeded by a fraction `q` (0..=1) of releases
    /// (upper bucket edge; zero with no releases).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                if i == BUCKETS - 1 {
                    return self.max;
                }
                let edge = BUCKET * u32::try_from(i + 1).unwrap_or(u32::MAX);
                return edge.min(self.max);
            }
        }
        self.max
    }

    /// Percentiles for a report.
    pub fn summary(&self) -> LatenessSummary {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        LatenessSummary {
            releases: self.total,
            mean_us: if self.total == 0 {
                0.0
            } else {
                self.sum_nanos as f64 / self.total as f64 / 1e3
            },
            p50_us: us(self.quantile(0.5)),
            p99_us: us(self.quantile(0.99)),
            p999_us: us(self.quantile(0.999)),
            max_us: us(self.max),
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
