//! Round-trip time estimation and the retransmission timer (RFC 6298).

use std::time::Duration;

/// RTO bounds and the initial value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RtoConfig {
    /// RFC 6298 §2.1: RTO before the first sample (1 s).
    pub initial: Duration,
    /// RFC 6298 §2.4 recommends 1 s; Linux uses 200 ms. Default 200 ms.
    pub min: Duration,
    /// RFC 6298 §2.5: an upper bound of at least 60 s.
    pub max: Duration,
    /// Clock granularity G of RFC 6298 §2.2–2.3.
    pub granularity: Duration,
}

impl Default for RtoConfig {
    fn default() -> Self {
        RtoConfig {
            initial: Duration::from_secs(1),
            min: Duration::from_millis(200),
            max: Duration::from_secs(60),
            granularity: Duration::from_millis(1),
        }
    }
}

/// SRTT/RTTVAR/RTO state of one path (one receiver).
#[derive(Debug, Clone)]
pub struct RttEstimator {
    config: RtoConfig,
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Duration,
    min_rtt: Duration,
    /// The first sample (zero before any).
    first: Duration,
    /// Number of consecutive RTO expiries; RTO is doubled that many times.
    backoff_exponent: u32,
}

impl RttEstimator {
    /// No samples yet; RTO = `config.initial`.
    pub fn new(config: RtoConfig) -> Self {
        RttEstimator {
            config,
            srtt: None,
            rttvar: Duration::ZERO,
            latest: Duration::ZERO,
            min_rtt: Duration::MAX,
            first: Duration::ZERO,
            backoff_exponent: 0,
        }
    }

    /// Smoothed RTT, or the initial RTO's third before any sample.
    #[inline]
    pub fn srtt(&self) -> Duration {
        // Not `unwrap_or`: the division would run on every call.
        match self.srtt {
            Some(s) => s,
            None => self.config.initial / 3,
        }
    }

    /// True once a sample was taken.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// Most recent sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// Smallest sample seen (`Duration::MAX` before any).
    #[inline]
    pub fn min_rtt(&self) -> Duration {
        self.min_rtt
    }

    /// The first sample (zero before any): the round trip around the
    /// peer's join, which a real-time receiver maps deadlines with.
    pub fn first_sample(&self) -> Duration {
        self.first
    }

    /// Feeds one RTT measurement. Callers follow Karn's rule (RFC 6298 §3):
    /// no samples from retransmitted segments unless a timestamp echo makes
    /// them unambiguous. A new sample clears the back-off (§5.7).
    pub fn on_sample(&mut self, rtt: Duration) {
        self.latest = rtt;
        self.min_rtt = self.min_rtt.min(rtt);
        self.backoff_exponent = 0;
        match self.srtt {
            // RFC 6298 §2.2: first measurement.
            None => {
                self.first = rtt;
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            // RFC 6298 §2.3: beta = 1/4, alpha = 1/8.
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
    }

    /// Feeds a measurement that includes `ack_delay`, the time the peer
    /// says it held its ACK back (RFC 9002 §5.3): the delay is taken off,
    /// but never below the smallest RTT seen, so a peer overstating it
    /// cannot shrink the estimate below `min_rtt`; the raw sample still
    /// updates `min_rtt`. Feedback thinned by time holds ACKs for a large
    /// part of the path's RTT, and pacing and the RTO would otherwise count
    /// that hold as path delay. (RFC 9002 keeps the whole raw sample where
    /// the delay would take it below `min_rtt`; taking it to `min_rtt`
    /// instead keeps the same floor without counting the hold whenever
    /// the path's own jitter puts a sample just under the minimum.)
    pub fn on_sample_with_ack_delay(&mut self, rtt: Duration, ack_delay: Duration) {
        let min_rtt = self.min_rtt.min(rtt);
        let adjusted = rtt.saturating_sub(ack_delay).max(min_rtt);
        self.on_sample(adjusted);
        self.min_rtt = min_rtt;
    }

    /// Ends the back-off without a sample: an acknowledgement of new data
    /// shows the path works even when it gives no RTT sample (RFC 9002
    /// §6.2.1 resets its backoff on any acknowledgement).
    pub fn clear_backoff(&mut self) {
        self.backoff_exponent = 0;
    }

    /// RFC 6298 §5.5: back off the timer (RTO *= 2), up to `max`.
    pub fn on_timeout(&mut self) {
        self.backoff_exponent = (self.backoff_exponent + 1).min(16);
    }

    /// The retransmission timeout including back-off.
    pub fn rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.config.initial,
            // RFC 6298 §2.3: RTO = SRTT + max(G, K*RTTVAR), K = 4; §2.4 floor.
            Some(srtt) => {
                (srtt + self.config.granularity.max(self.rttvar * 4)).max(self.config.min)
            }
        };
        base.saturating_mul(1 << self.backoff_exponent)
            .min(self.config.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_first_and_second_sample() {
        let mut e = RttEstimator::new(RtoConfig::default());
        assert_eq!(e.rto(), Duration::from_secs(1));
        e.on_sample(Duration::from_millis(100));
        assert_eq!(e.srtt(), Duration::from_millis(100));
        assert_eq!(e.rttvar(), Duration::from_millis(50));
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.on_sample(Duration::from_millis(200));
        // rttvar = 3/4*50 + 1/4*100 = 62.5; srtt = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.rttvar(), Duration::from_micros(62_500));
        assert_eq!(e.srtt(), Duration::from_micros(112_500));
        assert_eq!(e.first_sample(), Duration::from_millis(100));
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let mut e = RttEstimator::new(RtoConfig::default());
        e.on_sample(Duration::from_millis(10));
        assert_eq!(e.rto(), Duration::from_millis(200)); // floor
        e.on_timeout();
        assert_eq!(e.rto(), Duration::from_millis(400));
        for _ in 0..20 {
            e.on_timeout();
        }
        assert_eq!(e.rto(), Duration::from_secs(60));
        e.on_sample(Duration::from_millis(10));
        assert_eq!(e.rto(), Duration::from_millis(200));
    }

    #[test]
    fn ack_delay_is_taken_off_but_never_below_min_rtt() {
        let ms = Duration::from_millis;
        let mut e = RttEstimator::new(RtoConfig::default());
        e.on_sample_with_ack_delay(ms(12), ms(0));
        // 40 ms of it was the receiver holding its ACK.
        e.on_sample_with_ack_delay(ms(52), ms(40));
        assert_eq!(e.latest(), ms(12));
        // An overstated delay would go below min_rtt: the sample is
        // min_rtt, not less (and not the raw 20 ms either).
        e.on_sample_with_ack_delay(ms(20), ms(15));
        assert_eq!(e.latest(), ms(12));
        // The raw sample still lowers min_rtt.
        e.on_sample_with_ack_delay(ms(10), ms(5));
        assert_eq!(e.min_rtt(), ms(10));
    }
}
