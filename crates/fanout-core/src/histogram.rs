//! A histogram of durations in fixed memory however many are recorded:
//! fine buckets up to a point, coarser ones after, the rest in the last
//! bucket (the exact maximum kept apart). Percentiles are bucket upper
//! edges, never above the maximum.

use std::time::Duration;

/// Bucket widths: `fine_count` buckets of `fine`, then `coarse_count` of
/// `coarse`, then one for everything longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    /// Width of the fine buckets.
    pub fine: Duration,
    /// How many fine buckets.
    pub fine_count: u32,
    /// Width of the coarse buckets after them.
    pub coarse: Duration,
    /// How many coarse buckets (0: none).
    pub coarse_count: u32,
}

impl Buckets {
    fn len(&self) -> usize {
        (self.fine_count + self.coarse_count) as usize + 1
    }

    fn fine_end(&self) -> Duration {
        self.fine * self.fine_count
    }

    fn index(&self, d: Duration) -> usize {
        let last = self.len() - 1;
        if d < self.fine_end() {
            return ((d.as_nanos() / self.fine.as_nanos().max(1)) as usize).min(last);
        }
        let beyond = (d - self.fine_end()).as_nanos() / self.coarse.as_nanos().max(1);
        (self.fine_count as usize + usize::try_from(beyond).unwrap_or(usize::MAX)).min(last)
    }

    /// The upper edge of bucket `i` (not the last).
    fn upper(&self, i: usize) -> Duration {
        let i = i as u32;
        if i < self.fine_count {
            self.fine * (i + 1)
        } else {
            self.fine_end() + self.coarse * (i - self.fine_count + 1)
        }
    }
}

/// Durations counted in [`Buckets`].
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Buckets,
    counts: Vec<u64>,
    total: u64,
    max: Duration,
    sum_nanos: u128,
}

impl Histogram {
    /// An empty histogram.
    pub fn new(buckets: Buckets) -> Self {
        Histogram {
            counts: vec![0; buckets.len()],
            buckets,
            total: 0,
            max: Duration::ZERO,
            sum_nanos: 0,
        }
    }

    /// Counts one duration.
    pub fn record(&mut self, d: Duration) {
        self.counts[self.buckets.index(d)] += 1;
        self.total += 1;
        self.max = self.max.max(d);
        self.sum_nanos += d.as_nanos();
    }

    /// Durations recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The longest recorded.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// Their mean (zero with none).
    pub fn mean(&self) -> Duration {
        match self.total {
            0 => Duration::ZERO,
            n => Duration::from_nanos(
                u64::try_from(self.sum_nanos / u128::from(n)).unwrap_or(u64::MAX),
            ),
        }
    }

    /// The duration a share `q` (in `[0, 1]`) of those recorded did not
    /// exceed: its bucket's upper edge, at most the maximum (`None` with
    /// none recorded).
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                if i == self.counts.len() - 1 {
                    break;
                }
                return Some(self.buckets.upper(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn fine_then_coarse_then_the_rest() {
        let mut h = Histogram::new(Buckets {
            fine: MS,
            fine_count: 1000,
            coarse: 100 * MS,
            coarse_count: 590,
        });
        assert_eq!(h.quantile(0.5), None);
        for ms in 1..=100u64 {
            h.record(Duration::from_micros(ms * 1000 + 500));
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), Some(51 * MS));
        assert_eq!(h.quantile(0.99), Some(100 * MS));
        assert_eq!(h.quantile(1.0), Some(Duration::from_micros(100_500)));
        assert_eq!(h.mean(), Duration::from_micros(51_000));
        h.record(2345 * MS);
        assert_eq!(h.quantile(1.0), Some(2345 * MS));
        assert_eq!(h.buckets.upper(h.buckets.index(2345 * MS)), 2400 * MS);
        // Beyond the coarse buckets: the last, whose quantile is the max.
        h.record(Duration::from_secs(600));
        assert_eq!(h.quantile(1.0), Some(Duration::from_secs(600)));
    }
}
