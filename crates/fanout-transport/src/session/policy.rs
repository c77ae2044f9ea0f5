//! The session's policies as configured (TCP-SMO §II): which controller
//! sets the master block's window `G` of the children's windows
//! ([`super::SessionController`]s implement them), how the session RTT follows
//! the members' (`max` or a percentile), and how losses are repaired.

use std::time::Duration;

/// How the session window follows the members' congestion windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowPolicy {
    /// The default: [`WindowPolicy::REALTIME`] for a real-time session
    /// whose messages carry deadlines, [`WindowPolicy::Acker`] otherwise
    /// (with one member, or before any member has lost, the same window as
    /// [`WindowPolicy::Minimum`]).
    Auto,
    /// The smallest member window (the seed's behaviour, TCP-SMO §II):
    /// strictly TCP-fair on every shared link, and every member runs at the
    /// pace of the slowest; with members that lose independently, far
    /// below one TCP flow's rate to any of them (loss path multiplicity).
    Minimum,
    /// The window of the member a TCP flow would get the least through
    /// (PGMCC's acker, [`super::AckerWindow`]): one TCP flow to the worst
    /// member, ACK-clocked, while other members' own losses are repaired
    /// without cutting the session.
    Acker,
    /// An equation-based rate (RFC 5348's throughput equation at each
    /// member's loss event rate and RTT, as TFMCC and TCP-CM): smooth, for
    /// real-time sessions ([`super::EquationRate`]). The session rate is
    /// the member rate at `percentile`, at most `b·f(N)` times the worst
    /// member's (the essentially-fair bound of TCP-SMO §II.F in rates):
    /// with one member, exactly its TCP-friendly rate.
    Equation {
        /// Member rate rank aimed at, in `[0, 1]` (0 = the worst member,
        /// as TFMCC; 1 = the best).
        percentile: f64,
        /// Upper bound factor `b` (≥ 1).
        b: f64,
        /// The group-size factor `f(N)`.
        scaling: FairScaling,
    },
    /// "Essentially fair" (TCP-SMO §II.F after Wang & Schwartz): the session
    /// may take `B` with `a·B_tcp ≤ B ≤ b·f(N)·B_tcp`, `B_tcp` the throughput
    /// of a TCP flow on the worst member's path (its window). Within those
    /// bounds the window is the member window at `percentile` (0 = the
    /// smallest, 1 = the largest), so a few lossy members do not hold back
    /// all the others, while the worst path gets at most `b·f(N)` times a
    /// TCP flow's share.
    EssentiallyFair {
        /// Member window rank aimed at, in `[0, 1]`.
        percentile: f64,
        /// Lower bound factor `a` (≥ 0).
        a: f64,
        /// Upper bound factor `b` (≥ a).
        b: f64,
        /// The group-size factor `f(N)`.
        scaling: FairScaling,
    },
}

impl WindowPolicy {
    /// A real-time session's default: the equation rate of the best
    /// member, at most `1 + log2 N` times the worst member's. One member:
    /// its TCP-friendly rate; 100 members: at most 7.6 times a TCP flow's
    /// rate on the worst path, so a few lossy or distant members do not
    /// starve a stream every other path can carry (TCP-SMO §II.F: a
    /// real-time session "can choose to move on at a relatively regular
    /// pace").
    pub const REALTIME: WindowPolicy = WindowPolicy::Equation {
        percentile: 1.0,
        b: 1.0,
        scaling: FairScaling::Log2,
    };

    /// The equation rate of the worst member (TFMCC's rule, RFC 4654 §3):
    /// TCP-friendly on every member's path.
    pub const EQUATION_WORST: WindowPolicy = WindowPolicy::Equation {
        percentile: 0.0,
        b: 1.0,
        scaling: FairScaling::One,
    };

    /// The policy `Auto` stands for in a session whose messages carry
    /// deadlines or not.
    pub fn resolve(self, deadlines: bool) -> WindowPolicy {
        match self {
            WindowPolicy::Auto if deadlines => WindowPolicy::REALTIME,
            WindowPolicy::Auto => WindowPolicy::Acker,
            other => other,
        }
    }
}

/// `f(N)` of the essentially-fair upper bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairScaling {
    /// `f(N) = 1`.
    One,
    /// `f(N) = 1 + log2 N`.
    Log2,
    /// `f(N) = √N`.
    Sqrt,
}

impl FairScaling {
    /// `f(n)` for a session of `n ≥ 1` members.
    pub fn factor(self, n: usize) -> f64 {
        let n = n.max(1) as f64;
        match self {
            FairScaling::One => 1.0,
            FairScaling::Log2 => 1.0 + n.log2(),
            FairScaling::Sqrt => n.sqrt(),
        }
    }
}

/// How the session RTT (pacing, TCP-SMO §II.E "master RTT") follows the
/// members'.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RttPolicy {
    /// The largest member RTT (default).
    Maximum,
    /// The largest RTT among the fastest `p` fraction of members (TCP-SMO
    /// §II.E: the maximum of the fastest p%), `p` in `(0, 1]`.
    Percentile(f64),
}

/// How a lost segment is repaired (TCP-SMO §II.E).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RepairPolicy {
    /// TCP-SMO's rule: multicast when more than this fraction of members
    /// miss the segment (default 5%; 0 = always multicast), otherwise
    /// unicast to each member missing it.
    Threshold(f64),
    /// Fewest bottleneck bytes: a multicast repair costs one copy on the
    /// sender's link and one on every member's link; unicast to `k` members
    /// costs `k` copies on the sender's link and one on each of their links.
    /// With the sender's link `uplink_ratio` times as fast as a member's,
    /// multicast is cheaper once `k ≥ max(2, uplink_ratio)` (1 = the setting
    /// of TCP-SMO §V, a sender link no faster than the members').
    Cost {
        /// Sender-link capacity over a member link's (≥ 1).
        uplink_ratio: f64,
    },
    /// Coded (parity) repair (`super::coded_repair`, [`crate::fec`]):
    /// new segments are grouped into blocks of `block` segments; when a
    /// block's losses are due, `m` Reed–Solomon repair symbols are
    /// multicast, `m` the most segments any one member misses in it,
    /// whenever that is fewer than the block's distinct missing segments.
    /// Otherwise (stragglers, the tail, short segments) each segment is
    /// repaired by itself under the cost rule with `uplink_ratio`.
    /// Multicast sessions only; without a group it is the cost rule.
    Coded {
        /// Segments per block, 2 ..= 64 (default 32).
        block: usize,
        /// The fallback cost rule's sender-link over member-link ratio.
        uplink_ratio: f64,
    },
}

impl RepairPolicy {
    /// True when a segment that `missing` of `members` members lack should
    /// be repaired by multicast (when the session has a group at all).
    pub fn multicast(self, missing: usize, members: usize) -> bool {
        match self {
            RepairPolicy::Threshold(t) => t <= 0.0 || missing as f64 / members.max(1) as f64 > t,
            RepairPolicy::Cost { uplink_ratio } | RepairPolicy::Coded { uplink_ratio, .. } => {
                missing >= 2 && missing as f64 >= uplink_ratio
            }
        }
    }

    /// [`Self::multicast`] for members that stand for several receivers
    /// (ACK mergers, `docs/mctcp.md`): `missing_members` of the members
    /// lack the segment, standing for `missing_receivers` of the session's
    /// `receivers` (a merger's loss counted as its whole subtree's: an
    /// upper bound, since its merged ACK shows only that some child lacks
    /// it). The threshold compares the share of receivers; the cost rule
    /// counts copies on the sender's link, one per member (a unicast
    /// repair to a merger is one copy there, relayed below it).
    pub fn multicast_weighted(
        self,
        missing_members: usize,
        missing_receivers: u64,
        receivers: u64,
    ) -> bool {
        match self {
            RepairPolicy::Threshold(t) => {
                t <= 0.0 || missing_receivers as f64 / receivers.max(1) as f64 > t
            }
            RepairPolicy::Cost { .. } | RepairPolicy::Coded { .. } => {
                self.multicast(missing_members, 0)
            }
        }
    }
}

/// 0-based rank of the element at fraction `p` of `n` sorted elements
/// (`p = 1` → the largest, `p = 0` → the smallest).
pub fn rank_at(p: f64, n: usize) -> usize {
    let n = n.max(1);
    (((p.clamp(0.0, 1.0) * n as f64).ceil() as usize).max(1) - 1).min(n - 1)
}

/// The session RTT: the largest, or the largest of the fastest `p`.
pub fn session_rtt(
    policy: RttPolicy,
    n: usize,
    max: Duration,
    nth: impl FnOnce(usize) -> Duration,
) -> Duration {
    match policy {
        RttPolicy::Maximum => max,
        RttPolicy::Percentile(p) => nth(rank_at(p, n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks() {
        assert_eq!(rank_at(1.0, 10), 9);
        assert_eq!(rank_at(0.0, 10), 0);
        assert_eq!(rank_at(0.5, 10), 4);
        assert_eq!(rank_at(0.95, 1000), 949);
        assert_eq!(rank_at(0.5, 0), 0);
    }

    #[test]
    fn repair_rules() {
        let seed = RepairPolicy::Threshold(0.05);
        assert!(!seed.multicast(5, 100), "5% is not more than 5%");
        assert!(seed.multicast(6, 100));
        assert!(RepairPolicy::Threshold(0.0).multicast(1, 1000));
        let cost = RepairPolicy::Cost { uplink_ratio: 1.0 };
        assert!(!cost.multicast(1, 1000), "one copy either way: unicast");
        assert!(cost.multicast(2, 1000));
        let fast_uplink = RepairPolicy::Cost { uplink_ratio: 10.0 };
        assert!(!fast_uplink.multicast(9, 1000));
        assert!(fast_uplink.multicast(10, 1000));
    }

    #[test]
    fn percentile_rtt() {
        let ms = Duration::from_millis;
        let rtts = [ms(10), ms(11), ms(12), ms(500)];
        let rtt = |p| session_rtt(p, 4, ms(500), |k| rtts[k]);
        assert_eq!(rtt(RttPolicy::Maximum), ms(500));
        assert_eq!(
            rtt(RttPolicy::Percentile(0.75)),
            ms(12),
            "ignores the outlier"
        );
    }
}
