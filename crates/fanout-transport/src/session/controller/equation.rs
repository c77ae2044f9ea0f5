//! An equation-based session rate (RFC 5348's TCP throughput equation,
//! taken from the worst member as TFMCC does, RFC 4654 §3): smooth where
//! a window halves at every loss. For real-time sessions, whose stream
//! must keep flowing between losses.
//!
//! Each member's loss events are its loss-recovery episodes as the
//! sender's recovery sees them; the bytes it acknowledged between two
//! events are one loss interval. The loss event
//! rate is the inverse of the weighted mean of the last 8 intervals (RFC
//! 5348 §5.4: weights 1, 1, 1, 1, 0.8, 0.6, 0.4, 0.2, the open interval
//! counted when it raises the mean). The member's allowed rate is the
//! equation's (§3.1, b = 1, t_RTO = 4·R) at its smoothed RTT. Until a
//! member has a whole interval (two losses), its own congestion window
//! rules it (slow start, as TFRC's own start-up doubles per round trip).
//!
//! The session sends at the smallest member rate (the rate cap), within a
//! window of twice that rate's worth per member round trip beyond what the
//! member acknowledged (so ACK clocking never throttles below the rate),
//! and within every receive window.

use super::SessionController;
use crate::session::member::Member;
use crate::session::members::{IndexSpec, MemberKey, MemberView};
use crate::session::MemberId;
use fanout_core::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// RFC 5348 §5.4 loss interval weights, newest first.
const WEIGHTS: [f64; 8] = [1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2];

/// Bytes a datagram's payload is counted as in the equation.
const SEGMENT: f64 = 1400.0;

/// A member's loss history and current figures.
#[derive(Debug, Default, Clone)]
struct MemberRate {
    /// Loss events seen (recovery episodes + RTOs).
    events: u64,
    /// Where the open loss interval started (cumulative bytes).
    open_from: u64,
    /// Closed intervals in bytes, newest first (at most 8).
    intervals: VecDeque<u64>,
    /// Acknowledged bytes now.
    cumulative: u64,
    /// Smoothed RTT.
    srtt: Duration,
    /// Its own window's edge, until it has a loss history.
    send_edge: u64,
    /// Its congestion window's start.
    pipe_base: u64,
    /// Offsets below this fit its receive window.
    window_end: u64,
}

impl MemberRate {
    /// `events` loss events so far, `cumulative` bytes acknowledged. Loss
    /// events are recovery episodes (RACK groups the losses of a round trip
    /// into one, as RFC 5348 §5.2 does; timeouts during a stall are not new
    /// events). An interval runs from one event to the next; the first
    /// event only opens one (the bytes before it were slow start, RFC 5348
    /// §6.3.1), and an event without progress since the last belongs to it.
    fn on_progress(&mut self, events: u64, cumulative: u64) {
        self.cumulative = cumulative;
        if events <= self.events {
            return;
        }
        let progressed = cumulative > self.open_from;
        if self.events > 0 && progressed {
            self.intervals.push_front(cumulative - self.open_from);
            self.intervals.truncate(WEIGHTS.len());
        }
        if self.events == 0 || progressed {
            self.open_from = cumulative;
        }
        self.events = events;
    }

    /// The loss event rate, once there was a loss.
    fn loss_event_rate(&self) -> Option<f64> {
        if self.intervals.is_empty() {
            return None;
        }
        let open = self.cumulative.saturating_sub(self.open_from) as f64;
        let mean = |it: &mut dyn Iterator<Item = f64>| {
            let (mut sum, mut w) = (0.0, 0.0);
            for (x, wt) in it.zip(WEIGHTS) {
                sum += x * wt;
                w += wt;
            }
            sum / w
        };
        let closed = mean(&mut self.intervals.iter().map(|&b| b as f64));
        let with_open =
            mean(&mut std::iter::once(open).chain(self.intervals.iter().map(|&b| b as f64)));
        let bytes = closed.max(with_open).max(SEGMENT);
        Some(SEGMENT / bytes)
    }

    /// Its allowed rate, bytes per second (`None` before any loss).
    fn rate(&self) -> Option<f64> {
        let p = self.loss_event_rate()?;
        Some(throughput_bps(
            SEGMENT,
            self.srtt.as_secs_f64().max(1e-4),
            p,
        ))
    }
}

/// RFC 5348 §3.1: X = s / (R·√(2bp/3) + t_RTO·(3·√(3bp/8))·p·(1 + 32p²)),
/// b = 1, t_RTO = 4R; bytes per second.
pub fn throughput_bps(s: f64, r: f64, p: f64) -> f64 {
    let t_rto = 4.0 * r;
    s / (r * (2.0 * p / 3.0).sqrt()
        + t_rto * (3.0 * (3.0 * p / 8.0).sqrt()) * p * (1.0 + 32.0 * p * p))
}

/// The equation-based session rate.
#[derive(Debug, Default)]
pub struct EquationRate {
    members: BTreeMap<MemberId, MemberRate>,
}

impl EquationRate {
    /// The smallest member rate, bytes per second, if any member has a
    /// loss history.
    fn session_rate(&self) -> Option<f64> {
        self.members
            .values()
            .filter_map(MemberRate::rate)
            .min_by(f64::total_cmp)
    }

    /// Highest offset new data may reach for member `m` at session rate
    /// `rate`.
    fn edge(m: &MemberRate, rate: Option<f64>) -> u64 {
        let edge = match (m.intervals.is_empty(), rate) {
            (false, Some(rate)) => {
                m.pipe_base + (2.0 * rate * m.srtt.as_secs_f64()).max(4.0 * SEGMENT) as u64
            }
            _ => m.send_edge,
        };
        edge.min(m.window_end)
    }
}

impl SessionController for EquationRate {
    fn indexes(&self) -> Vec<IndexSpec> {
        [MemberKey::SendEdge, MemberKey::Cwnd]
            .map(|key| IndexSpec { key, ranked: false })
            .to_vec()
    }

    fn on_feedback(&mut self, _now: Instant, member: &Member) {
        let r = member.recovery();
        let m = self.members.entry(member.id()).or_default();
        m.on_progress(r.recovery_episodes(), r.cumulative());
        m.srtt = r.srtt();
        m.send_edge = member.send_edge();
        m.pipe_base = r.pipe_base();
        m.window_end = member.window_end();
    }

    fn on_member_left(&mut self, id: MemberId) {
        self.members.remove(&id);
    }

    fn window(&self, members: &MemberView<'_>) -> u64 {
        match self.session_rate() {
            // Reports show the rate's worth over the slowest round trip.
            Some(rate) => {
                let rtt = self
                    .members
                    .values()
                    .map(|m| m.srtt)
                    .max()
                    .unwrap_or_default();
                (rate * rtt.as_secs_f64()) as u64
            }
            None => members.min(MemberKey::Cwnd).unwrap_or(0),
        }
    }

    fn send_limit(&self, members: &MemberView<'_>, _window: u64) -> u64 {
        if self.members.is_empty() {
            return members.min(MemberKey::SendEdge).unwrap_or(0);
        }
        let rate = self.session_rate();
        self.members
            .values()
            .map(|m| Self::edge(m, rate))
            .min()
            .unwrap_or(0)
    }

    fn rate_cap(&self) -> Option<u64> {
        self.session_rate().map(|r| r as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_equation_matches_rfc_5348() {
        // 1400-byte segments, 100 ms, 1% loss events, t_RTO = 400 ms:
        // 1400 / (0.1·√(0.02/3) + 0.4·3·√(0.03/8)·0.01·1.0032) = 157 265 B/s.
        let x = throughput_bps(1400.0, 0.1, 0.01);
        assert!((x - 157_265.0).abs() < 10.0, "{x}");
        // Less loss, more rate; longer round trip, less rate.
        assert!(throughput_bps(1400.0, 0.1, 0.001) > x);
        assert!(throughput_bps(1400.0, 0.2, 0.01) < x);
    }

    #[test]
    fn intervals_run_between_losses_with_progress() {
        let mut m = MemberRate::default();
        m.on_progress(1, 50_000); // the first loss opens the first interval
        assert!(m.intervals.is_empty());
        m.on_progress(1, 90_000);
        m.on_progress(2, 190_000);
        assert_eq!(m.intervals, [140_000]);
        // Losses without progress (a stall) belong to the last one.
        m.on_progress(3, 190_000);
        m.on_progress(5, 190_000);
        assert_eq!(m.intervals, [140_000]);
        m.on_progress(6, 260_000);
        assert_eq!(m.intervals, [70_000, 140_000]);
    }

    #[test]
    fn the_loss_event_rate_is_the_inverse_of_the_weighted_mean_interval() {
        let mut m = MemberRate::default();
        assert_eq!(m.loss_event_rate(), None);
        // Intervals of 100 segments each: p = 1%.
        m.intervals = std::iter::repeat_n(100 * 1400, 8).collect();
        m.cumulative = 50 * 1400;
        m.open_from = 0;
        let p = m.loss_event_rate().unwrap();
        assert!((p - 0.01).abs() < 1e-9, "{p}");
        // A long open interval raises the mean (the loss is over).
        m.cumulative = 1000 * 1400;
        assert!(m.loss_event_rate().unwrap() < 0.01);
    }
}
