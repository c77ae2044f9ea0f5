//! Random loss models applied to packets leaving a link: none, Bernoulli and
//! Gilbert-Elliott (two-state Markov chain).

use fanout_core::Rng;
use serde::Deserialize;

/// Loss model configuration (scenario key `loss`, tagged by `model`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Default)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossSpec {
    /// No random loss.
    #[default]
    None,
    /// Each packet is lost independently with probability `p`.
    Bernoulli {
        /// Loss probability in [0, 1].
        p: f64,
    },
    /// Gilbert-Elliott: a good and a bad state with per-state loss
    /// probabilities; the state changes once per packet.
    GilbertElliott {
        /// P(good → bad) per packet.
        p_gb: f64,
        /// P(bad → good) per packet.
        p_bg: f64,
        /// Loss probability in the good state (default 0).
        #[serde(default)]
        loss_good: f64,
        /// Loss probability in the bad state (default 1).
        #[serde(default = "one")]
        loss_bad: f64,
    },
}

fn one() -> f64 {
    1.0
}

impl LossSpec {
    /// Checks that every probability lies in [0, 1]; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("{name} = {p} is not a probability in [0, 1]"))
            }
        };
        match *self {
            LossSpec::None => Ok(()),
            LossSpec::Bernoulli { p } => check("p", p),
            LossSpec::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                check("p_gb", p_gb)?;
                check("p_bg", p_bg)?;
                check("loss_good", loss_good)?;
                check("loss_bad", loss_bad)?;
                if p_gb + p_bg == 0.0 {
                    return Err("p_gb + p_bg must be positive".into());
                }
                Ok(())
            }
        }
    }

    /// Long-run fraction of packets lost. Gilbert-Elliott: stationary
    /// π_bad = p_gb / (p_gb + p_bg); loss = π_good·loss_good + π_bad·loss_bad.
    pub fn stationary_loss_rate(&self) -> f64 {
        match *self {
            LossSpec::None => 0.0,
            LossSpec::Bernoulli { p } => p,
            LossSpec::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let pi_bad = p_gb / (p_gb + p_bg);
                (1.0 - pi_bad) * loss_good + pi_bad * loss_bad
            }
        }
    }
}

/// A loss model with its state (the Gilbert-Elliott chain starts good).
#[derive(Debug, Clone)]
pub struct LossModel {
    spec: LossSpec,
    bad: bool,
}

impl LossModel {
    /// A model in its initial state.
    pub fn new(spec: LossSpec) -> Self {
        LossModel { spec, bad: false }
    }

    /// The configuration.
    pub fn spec(&self) -> &LossSpec {
        &self.spec
    }

    /// True while a Gilbert-Elliott chain is in its bad state.
    pub fn in_bad_state(&self) -> bool {
        self.bad
    }

    /// Decides whether the next packet is lost. Gilbert-Elliott: first the
    /// per-packet state transition, then loss with the new state's probability.
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match self.spec {
            LossSpec::None => false,
            LossSpec::Bernoulli { p } => rng.bernoulli(p),
            LossSpec::GilbertElliott {
                p_gb,
                p_bg,
                loss_good,
                loss_bad,
            } => {
                let flip = if self.bad { p_bg } else { p_gb };
                if rng.bernoulli(flip) {
                    self.bad = !self.bad;
                }
                rng.bernoulli(if self.bad { loss_bad } else { loss_good })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(spec: LossSpec, n: u32, seed: u64) -> f64 {
        let mut m = LossModel::new(spec);
        let mut rng = Rng::new(seed);
        let lost = (0..n).filter(|_| m.lose(&mut rng)).count();
        lost as f64 / f64::from(n)
    }

    #[test]
    fn bernoulli_rate_within_tolerance() {
        let spec = LossSpec::Bernoulli { p: 0.05 };
        let r = measured(spec, 200_000, 11);
        // σ = sqrt(p(1-p)/n) ≈ 0.00049; allow ~6σ.
        assert!((r - 0.05).abs() < 0.003, "seed 11: measured {r}");
    }

    #[test]
    fn gilbert_elliott_matches_stationary_formula() {
        let spec = LossSpec::GilbertElliott {
            p_gb: 0.01,
            p_bg: 0.2,
            loss_good: 0.001,
            loss_bad: 0.5,
        };
        assert!(spec.validate().is_ok());
        let expect = spec.stationary_loss_rate();
        // π_bad = 0.01/0.21 ≈ 0.0476 → loss ≈ 0.0248
        assert!((expect - 0.024_762).abs() < 1e-5, "{expect}");
        let r = measured(spec, 1_000_000, 5);
        // Bursty losses correlate samples; 10% relative tolerance.
        assert!((r - expect).abs() < 0.1 * expect, "seed 5: {r} vs {expect}");
    }

    #[test]
    fn gilbert_elliott_losses_are_bursty() {
        let spec = LossSpec::GilbertElliott {
            p_gb: 0.01,
            p_bg: 0.1,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        let mut m = LossModel::new(spec);
        let mut rng = Rng::new(3);
        let seq: Vec<bool> = (0..200_000).map(|_| m.lose(&mut rng)).collect();
        let losses = seq.iter().filter(|&&l| l).count() as f64;
        let pairs = seq.windows(2).filter(|w| w[0] && w[1]).count() as f64;
        // P(loss | previous loss) = 1 - p_bg = 0.9, far above the mean rate.
        let cond = pairs / losses;
        assert!((cond - 0.9).abs() < 0.02, "seed 3: {cond}");
    }

    #[test]
    fn validate_rejects_bad_probabilities() {
        let e = LossSpec::Bernoulli { p: 1.5 }.validate().unwrap_err();
        assert!(e.contains("p = 1.5"), "{e}");
    }
}
