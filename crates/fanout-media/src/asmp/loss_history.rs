//! The loss rate a receiver uses (ASMP §3.3, eq. 2–3): the weighted mean
//! of the loss rates of its last m = 8 report intervals, the 4 most recent
//! weighted fully and older ones less, so that one spurious loss does not
//! dominate.

use std::collections::VecDeque;

/// Weights of the intervals, most recent first (ASMP eq. 3).
pub const LOSS_WEIGHTS: [f64; 8] = [1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2];

/// The loss rates of the last [`LOSS_WEIGHTS`]`.len()` report intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LossHistory {
    /// Most recent first.
    rates: VecDeque<f64>,
}

impl LossHistory {
    /// A report interval ended with loss rate `rate` (0–1).
    pub fn push(&mut self, rate: f64) {
        self.rates.push_front(rate.clamp(0.0, 1.0));
        self.rates.truncate(LOSS_WEIGHTS.len());
    }

    /// The weighted mean (0 before any interval; with fewer intervals than
    /// weights, over those there are).
    pub fn smoothed(&self) -> f64 {
        let (sum, weights) = self
            .rates
            .iter()
            .zip(LOSS_WEIGHTS)
            .fold((0.0, 0.0), |(s, w), (l, wi)| (s + wi * l, w + wi));
        if weights == 0.0 {
            0.0
        } else {
            sum / weights
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_eight_intervals_are_weighted_as_the_paper_says() {
        let mut h = LossHistory::default();
        assert_eq!(h.smoothed(), 0.0);
        h.push(0.04);
        assert!((h.smoothed() - 0.04).abs() < 1e-12);
        // Oldest first: 0.08 then seven intervals without loss. The 0.08
        // is now the 8th, weight 0.2 of 6.0.
        let mut h = LossHistory::default();
        h.push(0.08);
        for _ in 0..7 {
            h.push(0.0);
        }
        assert!((h.smoothed() - 0.08 * 0.2 / 6.0).abs() < 1e-12);
        // A ninth interval pushes it out.
        h.push(0.0);
        assert_eq!(h.smoothed(), 0.0);
    }
}
