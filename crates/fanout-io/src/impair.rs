//! User-space network impairment for tests and benches (the kernel here has
//! no netem): Bernoulli loss from a seeded [`Rng`] and a fixed added delay,
//! applied by the driver to one direction of traffic.

use crate::error::IoError;
use fanout_core::{Instant, Rng};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// Default bound on datagrams held for delay: 1 s at 100k datagrams/s.
/// Beyond it a datagram is dropped and counted (a finite queue, like a link).
pub const DEFAULT_MAX_HELD: usize = 100_000;

/// Spare buffers kept for reuse, so a steady delay does not allocate.
const MAX_SPARE_BUFFERS: usize = 1024;

/// Impairment of one direction.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpairConfig {
    /// Probability in `[0, 1]` that a datagram is dropped (independent draws).
    pub loss: f64,
    /// Fixed delay added to every surviving datagram.
    pub delay: Duration,
    /// Seed of the loss draws; same seed and traffic, same drops.
    pub seed: u64,
    /// Most datagrams held for delay at once; more are dropped as overflow.
    pub max_held: usize,
}

impl ImpairConfig {
    /// Loss only, probability `loss`, seeded with `seed`.
    pub fn loss(loss: f64, seed: u64) -> Self {
        ImpairConfig {
            loss,
            seed,
            ..ImpairConfig::default()
        }
    }

    /// Delay only, `delay` per datagram.
    pub fn delay(delay: Duration) -> Self {
        ImpairConfig {
            delay,
            ..ImpairConfig::default()
        }
    }
}

impl Default for ImpairConfig {
    /// No loss, no delay: transparent.
    fn default() -> Self {
        ImpairConfig {
            loss: 0.0,
            delay: Duration::ZERO,
            seed: 0,
            max_held: DEFAULT_MAX_HELD,
        }
    }
}

/// What an impairment did with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it now, untouched.
    Pass,
    /// Dropped (loss or overflow); already counted.
    Drop,
    /// Copied and held; [`Impairment::release`] hands it out later.
    Held,
}

/// Counters of one impairment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Datagrams offered to the impairment.
    pub offered: u64,
    /// Datagrams dropped by the Bernoulli draw.
    pub dropped_loss: u64,
    /// Datagrams dropped because [`ImpairConfig::max_held`] were already held.
    pub dropped_overflow: u64,
    /// Datagrams held for delay (released or still held).
    pub delayed: u64,
}

impl ImpairStats {
    /// All drops, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_overflow
    }
}

#[derive(Debug)]
struct Held {
    release_at: Instant,
    addr: SocketAddr,
    datagram: Vec<u8>,
}

/// Loss and delay for one direction. A fixed delay keeps release order equal
/// to arrival order, so the hold queue is a FIFO.
#[derive(Debug)]
pub struct Impairment {
    config: ImpairConfig,
    rng: Rng,
    held: VecDeque<Held>,
    spare: Vec<Vec<u8>>,
    stats: ImpairStats,
}

impl Impairment {
    /// An impairment; fails if `loss` is not a probability.
    pub fn new(config: ImpairConfig) -> Result<Self, IoError> {
        if !(0.0..=1.0).contains(&config.loss) {
            return Err(IoError::Config("impairment loss must be in [0, 1]"));
        }
        Ok(Impairment {
            rng: Rng::new(config.seed),
            config,
            held: VecDeque::new(),
            spare: Vec::new(),
            stats: ImpairStats::default(),
        })
    }

    /// True when it neither drops nor delays (the driver then skips it).
    pub fn is_transparent(&self) -> bool {
        self.config.loss == 0.0 && self.config.delay.is_zero()
    }

    /// Decides the fate of `datagram` from/to `addr` offered at `now`.
    pub fn handle(&mut self, now: Instant, addr: SocketAddr, datagram: &[u8]) -> Verdict {
        self.stats.offered += 1;
        if self.rng.bernoulli(self.config.loss) {
            self.stats.dropped_loss += 1;
            return Verdict::Drop;
        }
        if self.config.delay.is_zero() {
            return Verdict::Pass;
        }
        if self.held.len() >= self.config.max_held {
            self.stats.dropped_overflow += 1;
            return Verdict::Drop;
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(datagram);
        self.held.push_back(Held {
            release_at: now + self.config.delay,
            addr,
            datagram: buf,
        });
        self.stats.delayed += 1;
        Verdict::Held
    }

    /// When the next held datagram is due, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.held.front().map(|h| h.release_at)
    }

    /// Hands every held datagram due at or before `now` to `deliver`, oldest
    /// first; returns how many.
    pub fn release(&mut self, now: Instant, mut deliver: impl FnMut(SocketAddr, &[u8])) -> usize {
        let mut n = 0;
        while self.held.front().is_some_and(|h| h.release_at <= now) {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            deliver(h.addr, &h.datagram);
            n += 1;
            if self.spare.len() < MAX_SPARE_BUFFERS {
                self.spare.push(h.datagram);
            }
        }
        n
    }

    /// Datagrams currently held for delay.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> ImpairStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn transparent_by_default() {
        let mut imp = Impairment::new(ImpairConfig::default()).unwrap();
        assert!(imp.is_transparent());
        for _ in 0..1000 {
            assert_eq!(imp.handle(Instant::ZERO, addr(), b"x"), Verdict::Pass);
        }
        assert_eq!(imp.stats().dropped(), 0);
        assert_eq!(imp.poll_timeout(), None);
    }

    #[test]
    fn loss_rate_within_bounds_and_seeded() {
        let run = |seed| {
            let mut imp = Impairment::new(ImpairConfig::loss(0.1, seed)).unwrap();
            let verdicts: Vec<Verdict> = (0..20_000)
                .map(|_| imp.handle(Instant::ZERO, addr(), b"x"))
                .collect();
            (verdicts, imp.stats())
        };
        let (a, stats) = run(7);
        let drops = a.iter().filter(|v| **v == Verdict::Drop).count() as u64;
        assert_eq!(drops, stats.dropped_loss);
        // 20000 * 0.1 = 2000, sd ~ 42: +-5 sd.
        assert!((1_790..=2_210).contains(&drops), "{drops}");
        assert_eq!(run(7).0, a, "same seed, same drops");
        assert_ne!(run(8).0, a, "another seed, other drops");
    }

    #[test]
    fn delay_holds_in_order_until_due() {
        let mut imp = Impairment::new(ImpairConfig::delay(Duration::from_millis(5))).unwrap();
        let t0 = Instant::from_nanos(1_000);
        assert_eq!(imp.handle(t0, addr(), b"one"), Verdict::Held);
        let t1 = t0 + Duration::from_millis(1);
        assert_eq!(imp.handle(t1, addr(), b"two"), Verdict::Held);
        assert_eq!(imp.poll_timeout(), Some(t0 + Duration::from_millis(5)));
        let mut out = Vec::new();
        let mut take = |now| imp.release(now, |_, d| out.push(d.to_vec()));
        assert_eq!(take(t0 + Duration::from_micros(4_999)), 0);
        assert_eq!(take(t0 + Duration::from_millis(5)), 1);
        assert_eq!(take(t1 + Duration::from_millis(5)), 1);
        assert_eq!(out, [b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(imp.held(), 0);
        assert_eq!(imp.stats().delayed, 2);
    }

    #[test]
    fn overflow_is_counted() {
        let mut imp = Impairment::new(ImpairConfig {
            max_held: 3,
            ..ImpairConfig::delay(Duration::from_secs(1))
        })
        .unwrap();
        for _ in 0..5 {
            imp.handle(Instant::ZERO, addr(), b"x");
        }
        assert_eq!(imp.held(), 3);
        assert_eq!(imp.stats().dropped_overflow, 2);
        assert_eq!(imp.stats().dropped(), 2);
    }

    #[test]
    fn rejects_bad_probability() {
        assert!(Impairment::new(ImpairConfig::loss(1.5, 0)).is_err());
        assert!(Impairment::new(ImpairConfig::loss(f64::NAN, 0)).is_err());
    }
}
