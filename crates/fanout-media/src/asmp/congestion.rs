//! ASMP's congestion indicator (§3.7): the interarrival jitter (RFC 3550,
//! itself a running average, the paper's "cumulative jitter") averaged
//! over the current report interval against its average over the whole
//! session (eq. 16–17). A short-run average above the long-run one means
//! queues are building: CONGESTED, and the rate moves slowly (σ = 0.2);
//! otherwise UNLOADED, and it follows its estimate closely (σ = 0.9).

/// The network's state as the indicator reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkState {
    /// Jitter is not rising.
    Unloaded,
    /// Jitter is rising: a queue is building.
    Congested,
}

impl NetworkState {
    /// The smoothing factor σ of the rate (eq. 19).
    pub fn smoothing(self) -> f64 {
        match self {
            NetworkState::Unloaded => 0.9,
            NetworkState::Congested => 0.2,
        }
    }
}

/// Long- and short-run averages of the jitter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CongestionIndicator {
    /// Average of every jitter value since the start (eq. 17).
    long: f64,
    /// Values in `long`.
    long_n: u64,
    /// Sum and count of this interval's values.
    short_sum: f64,
    short_n: u64,
}

impl CongestionIndicator {
    /// The jitter after a packet, any unit.
    pub fn on_jitter(&mut self, jitter: f64) {
        self.long_n += 1;
        self.long += (jitter - self.long) / self.long_n as f64;
        self.short_sum += jitter;
        self.short_n += 1;
    }

    /// Closes a report interval: the state its jitter shows (unloaded when
    /// no packet came).
    pub fn close_interval(&mut self) -> NetworkState {
        let n = std::mem::take(&mut self.short_n);
        let sum = std::mem::take(&mut self.short_sum);
        if n > 0 && sum / n as f64 > self.long {
            NetworkState::Congested
        } else {
            NetworkState::Unloaded
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rising_jitter_reads_as_congestion_and_steady_jitter_as_unloaded() {
        let mut c = CongestionIndicator::default();
        for _ in 0..100 {
            c.on_jitter(5.0);
        }
        assert_eq!(c.close_interval(), NetworkState::Unloaded);
        for j in 0..50 {
            c.on_jitter(5.0 + f64::from(j));
        }
        assert_eq!(c.close_interval(), NetworkState::Congested);
        // It falls back: below the long-run average.
        for _ in 0..50 {
            c.on_jitter(1.0);
        }
        assert_eq!(c.close_interval(), NetworkState::Unloaded);
        assert_eq!(c.close_interval(), NetworkState::Unloaded, "no packets");
        assert_eq!(NetworkState::Congested.smoothing(), 0.2);
        assert_eq!(NetworkState::Unloaded.smoothing(), 0.9);
    }
}
