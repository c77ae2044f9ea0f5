//! Packet reordering on a link: a fraction of the packets that survive the
//! loss model is held an extra time after its propagation delay, so the
//! packets serialized after it overtake it (as netem's `delay … reorder`
//! does, and as a multipath bundle, a Wi-Fi retry or a NIC with several
//! queues do on real paths).

use crate::units::HumanDuration;
use fanout_core::Rng;
use serde::Deserialize;
use std::time::Duration;

/// Reordering configuration (scenario key `reorder`; default none).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReorderSpec {
    /// Probability in [0, 1] that a delivered packet is held back.
    pub p: f64,
    /// How long a held packet arrives after its due time: `"5ms"`.
    pub extra: HumanDuration,
}

impl Default for ReorderSpec {
    fn default() -> Self {
        ReorderSpec::NONE
    }
}

impl ReorderSpec {
    /// No reordering.
    pub const NONE: ReorderSpec = ReorderSpec {
        p: 0.0,
        extra: HumanDuration(Duration::ZERO),
    };

    /// `p` of the delivered packets arrive `extra` late.
    pub fn new(p: f64, extra: Duration) -> Self {
        ReorderSpec {
            p,
            extra: HumanDuration(extra),
        }
    }

    /// Whether the link reorders at all.
    pub fn is_none(&self) -> bool {
        self.p == 0.0 || self.extra.0.is_zero()
    }

    /// Checks that `p` is a probability and that a held packet is held.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.p) {
            return Err(format!("p = {} is not a probability in [0, 1]", self.p));
        }
        if self.p > 0.0 && self.extra.0.is_zero() {
            return Err("p > 0 needs an `extra` delay (e.g. \"5ms\")".into());
        }
        Ok(())
    }

    /// The extra delay of one delivered packet. Draws from `rng` only
    /// when the link reorders, so a link without it keeps the same
    /// random sequence (and a seed its results).
    pub fn draw(&self, rng: &mut Rng) -> Duration {
        if self.is_none() || rng.next_f64() >= self.p {
            Duration::ZERO
        } else {
            self.extra.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_the_configured_fraction_and_draws_nothing_when_off() {
        let spec = ReorderSpec::new(0.1, Duration::from_millis(5));
        let mut rng = Rng::new(7);
        let held = (0..100_000)
            .filter(|_| !spec.draw(&mut rng).is_zero())
            .count();
        assert!((9_500..10_500).contains(&held), "{held}");
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        assert_eq!(ReorderSpec::NONE.draw(&mut a), Duration::ZERO);
        assert_eq!(a.next_u64(), b.next_u64(), "no draw without reordering");
    }

    #[test]
    fn refuses_what_is_not_a_reordering() {
        assert!(ReorderSpec::new(1.5, Duration::from_millis(1))
            .validate()
            .is_err());
        assert!(ReorderSpec::new(0.1, Duration::ZERO).validate().is_err());
        assert!(ReorderSpec::NONE.validate().is_ok());
        let parsed: ReorderSpec = toml::from_str("p = 0.02\nextra = \"3ms\"").unwrap();
        assert_eq!(parsed, ReorderSpec::new(0.02, Duration::from_millis(3)));
    }
}
