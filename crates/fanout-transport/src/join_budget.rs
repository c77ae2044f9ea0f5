//! A token bucket for the work an engine does for strangers' joins (RETRYs
//! sent, handshakes read): a sustained rate, and a burst so that joiners
//! started together are all answered in their first round trip. A budget
//! counted per fixed period instead answers one period's share of a crowd
//! that arrives at once; the rest retry only at their handshake timer, all
//! together again, and a session waiting for every one of them starts
//! without half (1000 receivers: 516 admitted in 5 s).

use fanout_core::time::Instant;

/// Up to `burst` at once, then `per_second` on average.
#[derive(Debug, Clone, Copy)]
pub struct JoinBudget {
    per_second: u32,
    burst: u32,
    /// When the bucket was last filled (`None`: never used, so full) and
    /// what it holds.
    filled: Option<Instant>,
    tokens: u32,
}

impl JoinBudget {
    /// A full bucket of `burst`, refilled at `per_second` (both ≥ 1).
    pub const fn new(per_second: u32, burst: u32) -> Self {
        JoinBudget {
            per_second,
            burst,
            filled: None,
            tokens: 0,
        }
    }

    /// Takes one unit at `now`; `false` when the bucket is empty.
    pub fn take(&mut self, now: Instant) -> bool {
        match self.filled {
            None => {
                self.tokens = self.burst;
                self.filled = Some(now);
            }
            Some(at) => {
                let elapsed_us = now.saturating_duration_since(at).as_micros();
                let earned = elapsed_us * u128::from(self.per_second) / 1_000_000;
                if earned > 0 {
                    let tokens = u128::from(self.tokens) + earned;
                    if tokens >= u128::from(self.burst) {
                        self.tokens = self.burst;
                        self.filled = Some(now);
                    } else {
                        self.tokens = tokens as u32;
                        // The time of the whole units only: a fraction
                        // earned counts toward the next.
                        let spent_us = earned * 1_000_000 / u128::from(self.per_second);
                        self.filled = Some(at + std::time::Duration::from_micros(spent_us as u64));
                    }
                }
            }
        }
        let some = self.tokens > 0;
        self.tokens = self.tokens.saturating_sub(1);
        some
    }

    /// Units left now, without refilling (diagnostics).
    pub fn left(&self) -> u32 {
        self.tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_at_once_then_the_rate_and_no_more() {
        let mut b = JoinBudget::new(1000, 1024);
        let at = Instant::ZERO + Duration::from_secs(3);
        assert_eq!((0..2000).filter(|_| b.take(at)).count(), 1024);
        // Offered ten times the rate for two seconds: the rate gets through.
        let mut later = 0;
        for ms in 1..=2000u64 {
            let now = at + Duration::from_millis(ms);
            later += (0..10).filter(|_| b.take(now)).count();
        }
        assert_eq!(later, 2000);
        // Idle long enough, the bucket is full again, never fuller.
        let idle = at + Duration::from_secs(60);
        assert_eq!((0..2000).filter(|_| b.take(idle)).count(), 1024);
    }

    #[test]
    fn fractions_of_a_unit_add_up() {
        let mut b = JoinBudget::new(10, 4);
        let at = Instant::ZERO;
        assert_eq!((0..5).filter(|_| b.take(at)).count(), 4);
        // 10 per second, asked for every 30 ms: the bucket never fills, and
        // the 30 ms asked past each whole unit count toward the next.
        let got = (1..=100u64)
            .filter(|i| b.take(at + Duration::from_millis(30 * i)))
            .count();
        assert_eq!(got, 30, "3 s at 10 per second");
    }
}
