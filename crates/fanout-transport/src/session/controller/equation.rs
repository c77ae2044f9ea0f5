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
//! The session rate (the rate cap) is the member rate at a percentile, at
//! most `b·f(N)` times the smallest member rate (TCP-SMO §II.F's
//! essentially-fair bound, taken in rates: each member's rate is already
//! its own round trip's). At percentile 0 it is the smallest (TFMCC); with
//! one member, that member's rate whatever the percentile. The session
//! sends within a window of twice the session rate's worth per member
//! round trip and ACK hold (max_ack_delay) beyond what the member
//! acknowledged (so ACK clocking never throttles below the rate), and
//! within every receive window.

use super::SessionController;
use crate::session::member::Member;
use crate::session::members::{IndexSpec, MemberKey, MemberView};
use crate::session::policy::{rank_at, FairScaling};
use crate::session::MemberId;
use fanout_core::tfrc::mean_interval;
use fanout_core::time::Instant;
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// RFC 5348 §5.4's number of loss intervals averaged.
pub(super) const RFC_5348_INTERVALS: usize = fanout_core::tfrc::LOSS_INTERVALS;

/// Bytes a datagram's payload is counted as in the equation.
const SEGMENT: f64 = 1400.0;

/// A member's loss history and current figures: what a TCP flow on its
/// path would get (also the acker's yardstick, [`super::AckerWindow`]).
#[derive(Debug, Clone)]
pub(super) struct MemberRate {
    /// Loss events seen (recovery episodes + RTOs).
    events: u64,
    /// Where the open loss interval started (cumulative bytes).
    open_from: u64,
    /// Closed intervals in bytes, newest first (at most `history`).
    intervals: VecDeque<u64>,
    /// Loss intervals the loss event rate averages.
    history: usize,
    /// Acknowledged bytes now.
    cumulative: u64,
    /// Smoothed RTT (without the receiver's ACK delay).
    srtt: Duration,
    /// How long it may hold an ACK.
    max_ack_delay: Duration,
    /// Its own window's edge, until it has a loss history.
    send_edge: u64,
    /// Its congestion window's start.
    pub(super) pipe_base: u64,
    /// Offsets below this fit its receive window.
    window_end: u64,
    /// When it first acknowledged anything, and how much it had then.
    first_ack: Option<(Instant, u64)>,
}

impl MemberRate {
    /// Its smoothed RTT (without its ACK delay).
    pub(super) fn srtt(&self) -> Duration {
        self.srtt
    }
}

impl Default for MemberRate {
    fn default() -> Self {
        MemberRate::with_history(RFC_5348_INTERVALS)
    }
}

impl MemberRate {
    /// No loss yet; once there are, the loss event rate averages the last
    /// `history` (≥ 2) intervals.
    pub(super) fn with_history(history: usize) -> Self {
        MemberRate {
            events: 0,
            open_from: 0,
            intervals: VecDeque::new(),
            history: history.max(2),
            cumulative: 0,
            srtt: Duration::ZERO,
            max_ack_delay: Duration::ZERO,
            send_edge: 0,
            pipe_base: 0,
            window_end: 0,
            first_ack: None,
        }
    }

    /// Takes in `member`'s feedback at `now`.
    pub(super) fn observe(&mut self, now: Instant, member: &Member) {
        let r = member.recovery();
        self.srtt = r.srtt();
        self.max_ack_delay = member.max_ack_delay();
        self.on_progress(now, r.recovery_episodes(), r.cumulative());
        self.send_edge = member.send_edge();
        self.pipe_base = r.pipe_base();
        self.window_end = member.window_end();
    }

    /// `events` loss events so far, `cumulative` bytes acknowledged at
    /// `now`. Loss events are recovery episodes (RACK groups the losses of
    /// a round trip into one, as RFC 5348 §5.2 does; timeouts during a
    /// stall are not new events). An interval runs from one event to the
    /// next, and an event without progress since the last belongs to it.
    /// The first event opens the first interval and stands for the history
    /// before it with the interval that gives the rate the member received
    /// at (RFC 5348 §6.3.1: the bytes before it were slow start).
    fn on_progress(&mut self, now: Instant, events: u64, cumulative: u64) {
        self.cumulative = cumulative;
        if cumulative > 0 && self.first_ack.is_none() {
            self.first_ack = Some((now, cumulative));
        }
        if events <= self.events {
            return;
        }
        let progressed = cumulative > self.open_from;
        if self.events == 0 {
            let interval = self.synthetic_interval(now);
            self.intervals.push_front(interval);
        } else if progressed {
            self.intervals.push_front(cumulative - self.open_from);
            self.intervals.truncate(self.history);
        }
        if self.events == 0 || progressed {
            self.open_from = cumulative;
        }
        self.events = events;
    }

    /// The loss interval (bytes) whose rate is what the member received at
    /// before its first loss: its mean receive rate since its first
    /// acknowledgement, at least RFC 5348 §4.2's initial 4 segments per
    /// round trip.
    fn synthetic_interval(&self, now: Instant) -> u64 {
        let rtt = self.srtt.as_secs_f64().max(1e-4);
        let received = self.first_ack.map_or(0.0, |(at, bytes)| {
            let secs = now.saturating_duration_since(at).as_secs_f64();
            if secs > 0.0 {
                self.cumulative.saturating_sub(bytes) as f64 / secs
            } else {
                0.0
            }
        });
        let rate = received.max(4.0 * SEGMENT / rtt);
        (SEGMENT / loss_rate_for(SEGMENT, rtt, rate)) as u64
    }

    /// The loss event rate, once there was a loss.
    fn loss_event_rate(&self) -> Option<f64> {
        if self.intervals.is_empty() {
            return None;
        }
        let open = self.cumulative.saturating_sub(self.open_from) as f64;
        let closed = self.intervals.iter().map(|&b| b as f64);
        let bytes = mean_interval(open, closed, self.history)?.max(SEGMENT);
        Some(SEGMENT / bytes)
    }

    /// Its allowed rate, bytes per second (`None` before any loss).
    pub(super) fn rate(&self) -> Option<f64> {
        let p = self.loss_event_rate()?;
        Some(throughput_bps(
            SEGMENT,
            self.srtt.as_secs_f64().max(1e-4),
            p,
        ))
    }
}

pub use fanout_core::tfrc::{loss_rate_for, throughput as throughput_bps};

/// The equation-based session rate.
#[derive(Debug)]
pub struct EquationRate {
    members: BTreeMap<MemberId, MemberRate>,
    /// Member rate rank aimed at, in `[0, 1]`.
    percentile: f64,
    /// Upper bound factor `b`.
    b: f64,
    /// The group-size factor `f(N)`.
    scaling: FairScaling,
    /// The session rate, bytes per second, while no feedback changed it
    /// (`None` inside: not computed since).
    cached: Cell<Option<Option<f64>>>,
}

impl Default for EquationRate {
    /// TFMCC's rule: the worst member's rate.
    fn default() -> Self {
        EquationRate::new(0.0, 1.0, FairScaling::One)
    }
}

impl EquationRate {
    /// The rate of the member at `percentile` (in `[0, 1]`), at most
    /// `b·f(N)` (`b` ≥ 1) times the worst member's.
    pub fn new(percentile: f64, b: f64, scaling: FairScaling) -> Self {
        EquationRate {
            members: BTreeMap::new(),
            percentile: percentile.clamp(0.0, 1.0),
            b: b.max(1.0),
            scaling,
            cached: Cell::new(None),
        }
    }

    /// The session rate, bytes per second, if any member has a loss
    /// history (members without one follow their own windows).
    fn session_rate(&self) -> Option<f64> {
        if let Some(rate) = self.cached.get() {
            return rate;
        }
        let mut rates: Vec<f64> = self.members.values().filter_map(MemberRate::rate).collect();
        let rate = (!rates.is_empty()).then(|| {
            let rank = rank_at(self.percentile, rates.len());
            let (_, &mut target, _) = rates.select_nth_unstable_by(rank, f64::total_cmp);
            let worst = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let ceiling = self.b * self.scaling.factor(self.members.len()) * worst;
            target.min(ceiling)
        });
        self.cached.set(Some(rate));
        rate
    }

    /// Highest offset new data may reach for member `m` at session rate
    /// `rate`.
    fn edge(m: &MemberRate, rate: Option<f64>) -> u64 {
        let edge = match (m.intervals.is_empty(), rate) {
            (false, Some(rate)) => {
                // An ACK comes back a round trip plus its hold after the
                // data it covers.
                let clocked = (m.srtt + m.max_ack_delay).as_secs_f64();
                m.pipe_base + (2.0 * rate * clocked).max(4.0 * SEGMENT) as u64
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

    fn on_feedback(&mut self, now: Instant, member: &Member) {
        self.members
            .entry(member.id())
            .or_default()
            .observe(now, member);
        self.cached.set(None);
    }

    fn on_member_left(&mut self, id: MemberId) {
        self.members.remove(&id);
        self.cached.set(None);
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
    fn the_inverse_equation_gives_back_the_loss_rate() {
        for p in [1e-4, 0.003, 0.02, 0.1, 0.4] {
            let x = throughput_bps(1400.0, 0.05, p);
            let q = loss_rate_for(1400.0, 0.05, x);
            assert!((q - p).abs() / p < 1e-6, "{p}: {q}");
        }
    }

    #[test]
    fn intervals_run_between_losses_with_progress() {
        let t0 = Instant::from_nanos(1_000_000_000);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut m = MemberRate {
            srtt: Duration::from_millis(100),
            ..MemberRate::default()
        };
        m.on_progress(t0, 0, 10_000);
        // The first loss, 1 s later at 100 000 B/s received: it opens the
        // first interval and stands for what came before with the interval
        // whose equation rate is 100 000 B/s.
        m.on_progress(at(1000), 1, 110_000);
        assert_eq!(m.intervals.len(), 1);
        let rate = m.rate().unwrap();
        assert!((rate - 100_000.0).abs() < 100.0, "{rate}");
        let synthetic = m.intervals[0];
        m.on_progress(at(1100), 1, 150_000);
        m.on_progress(at(1200), 2, 250_000);
        assert_eq!(m.intervals, [140_000, synthetic]);
        // Losses without progress (a stall) belong to the last one.
        m.on_progress(at(1300), 3, 250_000);
        m.on_progress(at(1400), 5, 250_000);
        assert_eq!(m.intervals, [140_000, synthetic]);
        m.on_progress(at(1500), 6, 320_000);
        assert_eq!(m.intervals, [70_000, 140_000, synthetic]);
    }

    #[test]
    fn a_group_takes_the_best_rate_within_its_bound() {
        let member = |p: f64| {
            let mut m = MemberRate {
                srtt: Duration::from_millis(100),
                ..MemberRate::default()
            };
            m.intervals = std::iter::repeat_n((1400.0 / p) as u64, 8).collect();
            m
        };
        let rate = |c: &EquationRate| c.session_rate().unwrap();
        let mut c = EquationRate::new(1.0, 1.0, FairScaling::Log2);
        c.members.insert(MemberId(1), member(0.01));
        let one = throughput_bps(SEGMENT, 0.1, 0.01);
        assert!((rate(&c) - one).abs() < 1.0, "one member: its own rate");
        // Two members, one much lossier: the best rate, at most
        // (1 + log2 2) = 2 times the worst.
        c.members.insert(MemberId(2), member(0.2));
        c.cached.set(None);
        let worst = throughput_bps(SEGMENT, 0.1, 0.2);
        assert!((rate(&c) - 2.0 * worst).abs() < 1.0);
        // TFMCC's rule: the worst.
        let tfmcc = EquationRate {
            members: c.members.clone(),
            ..EquationRate::default()
        };
        assert!((rate(&tfmcc) - worst).abs() < 1.0);
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
