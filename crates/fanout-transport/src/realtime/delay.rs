//! Delivery delays of a real-time receiver: from a message's first sending
//! (the sender's clock mapped onto ours, [`super::SenderClock`]) to its
//! reading, in fixed memory however long the stream runs: 1 ms buckets up
//! to 1 s, 100 ms buckets up to 60 s, the rest in the last.

use fanout_core::histogram::{Buckets, Histogram};
use std::time::Duration;

/// The delivery delays' buckets.
const DELAY_BUCKETS: Buckets = Buckets {
    fine: Duration::from_millis(1),
    fine_count: 1_000,
    coarse: Duration::from_millis(100),
    coarse_count: 590,
};

/// A histogram of delivery delays.
#[derive(Debug, Clone)]
pub struct DelayHistogram(Histogram);

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram(Histogram::new(DELAY_BUCKETS))
    }
}

impl DelayHistogram {
    /// One message took `delay`.
    pub fn record(&mut self, delay: Duration) {
        self.0.record(delay);
    }

    /// Delays recorded.
    pub fn count(&self) -> u64 {
        self.0.count()
    }

    /// The largest delay recorded.
    pub fn max(&self) -> Duration {
        self.0.max()
    }

    /// The delay a share `q` (in `[0, 1]`) of the messages stayed within,
    /// to the millisecond above (`None` before any).
    pub fn percentile(&self, q: f64) -> Option<Duration> {
        self.0.quantile(q)
    }
}
