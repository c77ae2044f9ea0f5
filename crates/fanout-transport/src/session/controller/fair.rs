//! The "essentially fair" window (TCP-SMO §II after Wang & Schwartz): the
//! session may take `B` with `a·B_tcp ≤ B ≤ b·f(N)·B_tcp`, `B_tcp` the
//! throughput of a TCP flow on the worst member's path. Within those
//! bounds the window is the member window at `percentile` (0 = the
//! smallest, 1 = the largest), so a few lossy members do not hold back all
//! the others, while the worst path gets at most `b·f(N)` times a TCP
//! flow's share.

use super::SessionController;
use crate::session::members::{IndexSpec, MemberKey, MemberView};
use crate::session::policy::{rank_at, FairScaling};

/// The essentially-fair controller ([`crate::session::WindowPolicy::EssentiallyFair`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EssentiallyFair {
    /// Member window rank aimed at, in `[0, 1]`.
    pub percentile: f64,
    /// Lower bound factor `a` (≥ 0).
    pub a: f64,
    /// Upper bound factor `b` (≥ a).
    pub b: f64,
    /// The group-size factor `f(N)`.
    pub scaling: FairScaling,
}

impl EssentiallyFair {
    /// The window within the bounds, counted from `worst` (the worst path's
    /// window), aiming at `target` (the window at the percentile's rank).
    pub fn bounded(&self, n: usize, worst: u64, target: u64) -> u64 {
        let floor = self.a.max(0.0) * worst as f64;
        let ceiling =
            (self.b.max(self.a).max(0.0) * self.scaling.factor(n) * worst as f64).max(floor);
        (target as f64).clamp(floor, ceiling) as u64
    }
}

impl SessionController for EssentiallyFair {
    fn indexes(&self) -> Vec<IndexSpec> {
        vec![
            IndexSpec {
                key: MemberKey::Cwnd,
                ranked: true,
            },
            IndexSpec {
                key: MemberKey::PipeBase,
                ranked: false,
            },
            IndexSpec {
                key: MemberKey::WindowEnd,
                ranked: false,
            },
            IndexSpec {
                key: MemberKey::SmoothedCwnd,
                ranked: false,
            },
        ]
    }

    fn window(&self, members: &MemberView<'_>) -> u64 {
        let min = members.min(MemberKey::Cwnd).unwrap_or(0);
        // The bounds count from the worst path's smoothed window: with
        // hundreds of members one is nearly always just after a loss or a
        // timeout, and the instantaneous minimum would pin the session to
        // that moment.
        let worst = members.min(MemberKey::SmoothedCwnd).unwrap_or(min);
        let n = members.len();
        let target = members
            .nth(MemberKey::Cwnd, rank_at(self.percentile, n))
            .unwrap_or(min);
        self.bounded(n, worst, target)
    }

    /// The session window beyond the furthest-behind pipe, and never past
    /// any member's receive window.
    fn send_limit(&self, members: &MemberView<'_>, window: u64) -> u64 {
        let base = members.min(MemberKey::PipeBase).unwrap_or(0);
        let window_end = members.min(MemberKey::WindowEnd).unwrap_or(0);
        (base + window).min(window_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_bounds() {
        let windows = [10u64, 20, 400, 500, 600, 700, 800, 900, 1000, 2000];
        let fair = |b, scaling| EssentiallyFair {
            percentile: 0.5,
            a: 1.0,
            b,
            scaling,
        };
        let n = windows.len();
        let w = |c: EssentiallyFair| c.bounded(n, windows[0], windows[rank_at(c.percentile, n)]);
        // The median (rank 4: 600) is above b·f(N)·min = 1·√10·10 = 31.6.
        assert_eq!(w(fair(1.0, FairScaling::Sqrt)), 31);
        assert_eq!(w(fair(1.0, FairScaling::One)), 10, "b = 1, f = 1: minimum");
        assert_eq!(w(fair(100.0, FairScaling::One)), 600, "loose bound: median");
        let floor = EssentiallyFair {
            percentile: 0.0,
            a: 2.0,
            b: 4.0,
            scaling: FairScaling::One,
        };
        assert_eq!(w(floor), 20, "at least a times the minimum");
    }
}
