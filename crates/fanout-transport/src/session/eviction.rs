//! Outlier eviction (TCP-SMO §II.E–F): a receiver whose RTT or window is
//! far outside the rest, or that stalls, is reset with a reason and the
//! others continue. Stalls are the stall timeout's job (see
//! [`super::SessionConfig::stall_timeout`]); this module finds members whose
//! smoothed RTT is far *above* the session's median because of their own
//! queue (default) or whose
//! congestion window is far *below* it (opt-in, see
//! [`OutlierEviction::window_ratio`]), for longer than a grace period.
//!
//! With the session window = the minimum over members (the TCP-SMO default),
//! one member behind a slow link holds every other member to its rate; its
//! RTT inflates (the queue at its own link; 0.6 s behind a 2 Mbit/s link
//! with 100 packets of queue, against 12 ms for the others). Evicting it
//! returns the others to their own pace.
//!
//! Only queueing counts, not distance: a member whose smoothed RTT is close
//! to its own smallest RTT is far away, not behind a full queue, and is
//! kept however low the median is. That also keeps the median out of an
//! attacker's hands: members who claim tiny RTTs (a timestamp echo is the
//! peer's word) can lower the median, but cannot make an honest member's
//! own path queue.
//!
//! Windows are compared capped at the send buffer (see
//! [`MemberSample::cwnd`]).
//!
//! The sweep runs at most once per [`OutlierEviction::check_interval`], in
//! O(N) (two median selections over members), so its cost per ACK is
//! amortised O(1) for any session that receives at least N ACKs per
//! interval, and it depends on no member index.

use super::MemberId;
use fanout_core::time::Instant;
use std::collections::BTreeMap;
use std::time::Duration;

/// The outlier-eviction policy (`SessionConfig::outlier_eviction`; `None`
/// turns it off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutlierEviction {
    /// A member whose cwnd stays below `median / window_ratio` is an
    /// outlier. Off by default (`None`): members' windows are not
    /// comparable yet. A member whose hole a multicast repair filled before
    /// it detected the loss itself never reduces its window, and every
    /// member grows its window while the session is window-limited, so on a
    /// bottleneck shared with TCP the members that *did* react (the honest
    /// ones) sat at 1/8 of an inflated median and were evicted, and the
    /// session collapsed (measured: docs/experiments/smo-scenarios.md).
    pub window_ratio: Option<u64>,
    /// A member whose smoothed RTT stays above `median × rtt_ratio`, at
    /// least [`OutlierEviction::min_rtt_excess`] above the median and at
    /// least as much above its own smallest RTT (its queue) is an outlier
    /// (default 8).
    pub rtt_ratio: u32,
    /// RTT differences below this never count (default 50 ms), so members
    /// on a LAN are not evicted over a few milliseconds, nor members whose
    /// queue is shorter than this.
    pub min_rtt_excess: Duration,
    /// An outlier is evicted once it has been one at every sweep for this
    /// long (default 5 s; a joiner in slow start has caught up by then).
    pub grace: Duration,
    /// Time between sweeps (default 200 ms).
    pub check_interval: Duration,
    /// No eviction with fewer members than this (default 3: a median of
    /// two says nothing about which one is slow).
    pub min_members: usize,
}

impl Default for OutlierEviction {
    fn default() -> Self {
        OutlierEviction {
            window_ratio: None,
            rtt_ratio: 8,
            min_rtt_excess: Duration::from_millis(50),
            grace: Duration::from_secs(5),
            check_interval: Duration::from_millis(200),
            min_members: 3,
        }
    }
}

/// One member's figures as the sweep sees them.
#[derive(Debug, Clone, Copy)]
pub struct MemberSample {
    /// The member.
    pub id: MemberId,
    /// Its congestion window, bytes, capped at the send buffer: a member
    /// that does not limit the session keeps growing its cwnd (every ACK
    /// counts as window-limited while the session is), so uncapped windows
    /// of fast members reach tens of megabytes and the median says nothing
    /// (measured: a 92 MB median evicted members at 10 MB).
    pub cwnd: u64,
    /// Its smoothed RTT.
    pub srtt: Duration,
    /// Its smallest RTT sample (`Duration::MAX` before any): `srtt −
    /// min_rtt` is the queue on its path.
    pub min_rtt: Duration,
}

/// Which members have been outliers since when. Holds at most one entry
/// per member of the last sweep (entries of members gone are dropped).
#[derive(Debug, Default)]
pub struct OutlierTracker {
    next_check: Option<Instant>,
    since: BTreeMap<MemberId, Instant>,
}

impl OutlierTracker {
    /// True if a sweep is due at `now` (the first call starts the clock).
    pub fn due(&mut self, now: Instant, policy: &OutlierEviction) -> bool {
        match self.next_check {
            Some(t) if now < t => false,
            _ => {
                self.next_check = Some(now + policy.check_interval);
                true
            }
        }
    }

    /// Members to evict now, each with its reason. `members` is every
    /// current member; the tracker forgets the others.
    pub fn sweep(
        &mut self,
        now: Instant,
        policy: &OutlierEviction,
        members: &[MemberSample],
    ) -> Vec<(MemberId, String)> {
        if members.len() < policy.min_members.max(2) {
            self.since.clear();
            return Vec::new();
        }
        let mut cwnds: Vec<u64> = members.iter().map(|m| m.cwnd).collect();
        let mut srtts: Vec<Duration> = members.iter().map(|m| m.srtt).collect();
        let mid = members.len() / 2;
        let median_cwnd = *cwnds.select_nth_unstable(mid).1;
        let median_srtt = *srtts.select_nth_unstable(mid).1;
        let mut evict = Vec::new();
        let mut since = BTreeMap::new();
        for m in members {
            let small_window = policy
                .window_ratio
                .is_some_and(|k| m.cwnd.saturating_mul(k.max(1)) < median_cwnd);
            let long_rtt = m.srtt > median_srtt.saturating_mul(policy.rtt_ratio.max(1))
                && m.srtt.saturating_sub(median_srtt) >= policy.min_rtt_excess
                && m.srtt.saturating_sub(m.min_rtt) >= policy.min_rtt_excess;
            if !(small_window || long_rtt) {
                continue;
            }
            let first = self.since.get(&m.id).copied().unwrap_or(now);
            if now.saturating_duration_since(first) >= policy.grace {
                let what = if small_window {
                    format!(
                        "outlier: window {} B below 1/{} of the median {} B",
                        m.cwnd,
                        policy.window_ratio.unwrap_or(0),
                        median_cwnd
                    )
                } else {
                    format!(
                        "outlier: RTT {} ms above {}x the median {} ms",
                        m.srtt.as_millis(),
                        policy.rtt_ratio,
                        median_srtt.as_millis()
                    )
                };
                evict.push((m.id, format!("{what} for {} s", policy.grace.as_secs_f64())));
            } else {
                since.insert(m.id, first);
            }
        }
        self.since = since;
        evict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn at(s: f64) -> Instant {
        Instant::ZERO + Duration::from_secs_f64(s)
    }

    /// A member whose path's smallest RTT is 1 ms (any more is queue).
    fn sample(id: u64, cwnd: u64, srtt_ms: u64) -> MemberSample {
        MemberSample {
            id: MemberId(id),
            cwnd,
            srtt: ms(srtt_ms),
            min_rtt: ms(1),
        }
    }

    /// Nine members at 1 MB / 12 ms and one at `cwnd` / `srtt_ms`.
    fn session(cwnd: u64, srtt_ms: u64) -> Vec<MemberSample> {
        let mut v: Vec<MemberSample> = (1..10).map(|i| sample(i, 1_000_000, 12)).collect();
        v.push(sample(10, cwnd, srtt_ms));
        v
    }

    fn by_window() -> OutlierEviction {
        OutlierEviction {
            window_ratio: Some(8),
            ..OutlierEviction::default()
        }
    }

    #[test]
    fn windows_count_only_when_asked() {
        let mut t = OutlierTracker::default();
        let p = OutlierEviction::default();
        t.sweep(at(0.0), &p, &session(1_000, 12));
        assert!(t.sweep(at(60.0), &p, &session(1_000, 12)).is_empty());
    }

    #[test]
    fn a_small_window_is_evicted_after_the_grace_period_only() {
        let p = by_window();
        let mut t = OutlierTracker::default();
        let slow = session(100_000, 12);
        assert!(t.sweep(at(0.0), &p, &slow).is_empty());
        assert!(t.sweep(at(4.9), &p, &slow).is_empty());
        let out = t.sweep(at(5.0), &p, &slow);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, MemberId(10));
        assert!(out[0].1.contains("window"), "{}", out[0].1);
    }

    #[test]
    fn recovering_within_the_grace_period_restarts_the_clock() {
        let p = by_window();
        let mut t = OutlierTracker::default();
        assert!(t.sweep(at(0.0), &p, &session(100_000, 12)).is_empty());
        // Back within 1/8 of the median: no longer an outlier.
        assert!(t.sweep(at(3.0), &p, &session(200_000, 12)).is_empty());
        assert!(t.sweep(at(6.0), &p, &session(100_000, 12)).is_empty());
        assert!(t.sweep(at(10.9), &p, &session(100_000, 12)).is_empty());
        assert_eq!(t.sweep(at(11.0), &p, &session(100_000, 12)).len(), 1);
    }

    #[test]
    fn a_long_rtt_is_evicted_but_small_rtt_spreads_are_not() {
        let p = OutlierEviction::default();
        let mut t = OutlierTracker::default();
        // 10x the median but only 108 ms more: evicted.
        t.sweep(at(0.0), &p, &session(1_000_000, 120));
        let out = t.sweep(at(5.0), &p, &session(1_000_000, 120));
        assert_eq!(out.len(), 1);
        assert!(out[0].1.contains("RTT"), "{}", out[0].1);
        // 10x the median of 1 ms is only 9 ms more: kept.
        let mut lan: Vec<MemberSample> = (1..10).map(|i| sample(i, 1_000_000, 1)).collect();
        lan.push(sample(10, 1_000_000, 10));
        let mut t = OutlierTracker::default();
        t.sweep(at(0.0), &p, &lan);
        assert!(t.sweep(at(9.0), &p, &lan).is_empty());
    }

    #[test]
    fn a_far_member_without_a_queue_is_kept_however_low_the_median() {
        let p = OutlierEviction::default();
        let mut t = OutlierTracker::default();
        // Nine members claiming 0 ms, one honest member 60 ms away.
        let mut v: Vec<MemberSample> = (1..10)
            .map(|i| MemberSample {
                min_rtt: ms(0),
                ..sample(i, 1_000_000, 0)
            })
            .collect();
        let far = MemberSample {
            min_rtt: ms(58),
            ..sample(10, 1_000_000, 60)
        };
        v.push(far);
        t.sweep(at(0.0), &p, &v);
        assert!(t.sweep(at(60.0), &p, &v).is_empty());
        // The same member behind a queue of 100 ms is evicted.
        v[9].srtt = ms(160);
        t.sweep(at(61.0), &p, &v);
        assert_eq!(t.sweep(at(66.0), &p, &v).len(), 1);
    }

    #[test]
    fn small_sessions_and_gone_members_are_left_alone() {
        let p = by_window();
        let mut t = OutlierTracker::default();
        let two = [sample(1, 1_000_000, 12), sample(2, 1_000, 900)];
        t.sweep(at(0.0), &p, &two);
        assert!(t.sweep(at(60.0), &p, &two).is_empty());
        // A member that left is forgotten: rejoining restarts its clock.
        let slow = session(100_000, 12);
        t.sweep(at(0.0), &p, &slow);
        t.sweep(at(3.0), &p, &slow[..9]);
        assert!(t.sweep(at(6.0), &p, &slow).is_empty());
    }

    #[test]
    fn sweeps_are_rate_limited() {
        let p = OutlierEviction::default();
        let mut t = OutlierTracker::default();
        assert!(t.due(at(0.0), &p));
        assert!(!t.due(at(0.1), &p));
        assert!(t.due(at(0.2), &p));
    }
}
