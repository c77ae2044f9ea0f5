//! The acker's window (PGMCC, Rizzo 2000, on TCP-SMO's per-member control
//! blocks): the session has one congestion window of its own, driven by one
//! member's acknowledgements and losses — the acker's, the member a TCP
//! flow would get the least through — so the session runs as one TCP flow
//! to its worst member does, ACK-clocked and cut at once by that member's
//! losses, while every other member's own losses are repaired without
//! cutting anything.
//!
//! Why not the minimum window: with members that lose independently, the
//! smallest of their windows is always some member's just after its own
//! loss, far below any one flow's average (the loss path multiplicity
//! problem, Bhattacharyya, Towsley and Kurose 1999). Why not the minimum of
//! equation rates (TFMCC): the minimum of N noisy estimates lies below the
//! worst member's true rate by about `σ·√(2 ln N)`, and an estimate has no
//! ACK clock. Here the estimates only choose the acker; the rate is a real
//! window's, and it carries over when the acker changes (as in PGMCC, a
//! switch does not reset the window). Adopting the new acker's own window
//! instead would land on a freshly cut one at nearly every switch, since a
//! member's estimate falls just when it has a loss.
//!
//! The yardstick is RFC 5348's throughput equation at each member's loss
//! event rate and RTT (as PGMCC's receivers report). A member takes over
//! when its rate falls below [`SWITCH_BELOW`] times the acker's (PGMCC's
//! hysteresis, so near-equal members do not trade the role at every loss);
//! a member without a loss yet has no rate and is never preferred to one
//! with a rate. A loss on a shared link is seen by every member at once,
//! the acker among them: one cut, as one TCP flow's.
//!
//! Until some member has a loss, the session is the minimum window: slow
//! start is shared and ACK-clocked by every member, so a slow member's
//! queue overflows no deeper than under the minimum; the session window
//! then takes over the window in force. Guards: new data goes out within
//! the session window beyond the acker's pipe, every member's pipe stays
//! within twice the window plus what the session sends between two of a
//! member's (time-thinned) ACKs (a member with no loss signal yet — a deep
//! queue, no drops — cannot run away), and every receive window holds.
//! The acker's own ACKs are not thinned by time: they clock the session.

use super::equation::MemberRate;
use super::SessionController;
use crate::session::member::Member;
use crate::session::members::{IndexSpec, MemberKey, MemberView};
use crate::session::MemberId;
use fanout_core::cc::{AckSample, CcAlgorithm, CongestionController};
use fanout_core::time::Instant;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Duration;

/// A member becomes the acker when its rate is below this times the
/// acker's.
pub const SWITCH_BELOW: f64 = 0.75;

/// Loss intervals a member's rate averages (RFC 5348 §5.4's weights over
/// four times its 8): enough that members with the same loss rate seldom
/// look 25% apart, so the acker changes for a lasting difference, not for
/// one member's latest loss.
const HISTORY: usize = 32;

/// The acker and what of its feedback the session window has taken in.
#[derive(Debug, Clone, Copy)]
struct Acker {
    id: MemberId,
    /// Bytes it acknowledged, cumulatively or by SACK.
    delivered: u64,
    /// Its recovery episodes.
    episodes: u64,
    /// Its retransmission timeouts.
    rtos: u64,
    /// Its recovery episodes undone (all they deemed lost arrived).
    undone: u64,
}

impl Acker {
    fn of(member: &Member) -> Self {
        let r = member.recovery();
        Acker {
            id: member.id(),
            delivered: r.delivered(),
            episodes: r.recovery_episodes(),
            rtos: r.rtos(),
            undone: r.undone_episodes(),
        }
    }
}

/// The acker's window ([`crate::session::WindowPolicy::Acker`]).
#[derive(Debug)]
pub struct AckerWindow {
    members: BTreeMap<MemberId, MemberRate>,
    acker: Option<Acker>,
    /// The session's congestion window, once it took over from the
    /// members' shared slow start.
    cc: Box<dyn CongestionController>,
    /// What `cc` runs.
    algorithm: CcAlgorithm,
    /// Whether `cc` took over.
    started: bool,
    /// The window last in force, bytes.
    last_window: Cell<u64>,
    /// The session window is in a recovery episode (the acker's).
    in_recovery: bool,
    /// The session window before that episode's cut, while the acker may
    /// still undo the episode (its path reordered: nothing was lost).
    undo_to: Option<Box<dyn CongestionController>>,
    /// Who takes over once heard, after the acker left.
    next: Option<MemberId>,
    /// Members' least ACK spacing (time thinning).
    feedback_interval: Duration,
}

impl AckerWindow {
    /// A session window run by `cc` for segments of `mss` bytes.
    pub fn new(cc: CcAlgorithm, mss: u64) -> Self {
        AckerWindow {
            members: BTreeMap::new(),
            acker: None,
            cc: cc.build(mss),
            algorithm: cc,
            started: false,
            last_window: Cell::new(0),
            in_recovery: false,
            undo_to: None,
            next: None,
            feedback_interval: Duration::ZERO,
        }
    }

    /// The current acker.
    pub fn acker(&self) -> Option<MemberId> {
        self.acker.map(|a| a.id)
    }

    /// Makes `member` the acker; the session window carries over (the
    /// first time, from the shared slow start's).
    fn switch_to(&mut self, now: Instant, member: &Member) {
        if !self.started {
            self.cc.take_over(self.last_window.get());
            self.started = true;
        }
        // A member's rate falls when it has a loss: the loss that makes
        // it the acker is its first congestion event as the acker (unless
        // the session window is in a recovery episode already: one cut per
        // round trip of losses). An episode in progress ends when the new
        // acker's does.
        let r = member.recovery();
        if !self.in_recovery && r.in_recovery() {
            // Not undone with the member's: the switch followed its rate,
            // and a window restored whole here overshot (RTOs) in slow
            // start on the reordering scenario.
            self.undo_to = None;
            self.cc.on_congestion_event(now, r.flight_at_congestion());
            self.in_recovery = true;
        }
        self.next = None;
        self.acker = Some(Acker::of(member));
    }

    /// Takes the acker's feedback into the session window.
    fn follow(&mut self, now: Instant, member: &Member, acker: Acker) {
        let r = member.recovery();
        let now_acker = Acker::of(member);
        if now_acker.rtos > acker.rtos {
            self.undo_to = None;
            self.cc
                .on_retransmission_timeout(now, r.flight_at_congestion());
            self.in_recovery = false;
        } else if now_acker.episodes > acker.episodes {
            self.undo_to = Some(self.cc.snapshot());
            self.cc.on_congestion_event(now, r.flight_at_congestion());
            self.in_recovery = true;
        } else if now_acker.undone > acker.undone && self.undo_to.is_some() {
            // The acker's episode proved spurious: so was the cut.
            if let Some(before) = self.undo_to.take() {
                self.cc = before;
            }
            self.in_recovery = false;
        } else if self.in_recovery && !r.in_recovery() {
            self.undo_to = None;
            self.cc.on_recovery_end(now);
            self.in_recovery = false;
        }
        let acked = now_acker.delivered.saturating_sub(acker.delivered);
        if acked > 0 && !self.in_recovery {
            self.cc.on_ack(
                now,
                AckSample {
                    acked_bytes: acked,
                    srtt: r.srtt(),
                    min_rtt: r.rtt().min_rtt(),
                    cwnd_limited: r.cwnd_limited(),
                },
            );
        }
        self.acker = Some(now_acker);
    }

    /// The member with the lowest rate, if any has one.
    fn worst(&self) -> Option<MemberId> {
        self.members
            .iter()
            .filter_map(|(&id, m)| Some((id, m.rate()?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(id, _)| id)
    }
}

impl SessionController for AckerWindow {
    fn set_segment_size(&mut self, mss: u64) {
        self.cc = self.algorithm.build(mss);
    }

    fn clocking_member(&self) -> Option<MemberId> {
        self.acker()
    }

    fn set_feedback_interval(&mut self, interval: Duration) {
        self.feedback_interval = interval;
    }

    fn indexes(&self) -> Vec<IndexSpec> {
        [
            MemberKey::SendEdge,
            MemberKey::Cwnd,
            MemberKey::PipeBase,
            MemberKey::WindowEnd,
        ]
        .map(|key| IndexSpec { key, ranked: false })
        .to_vec()
    }

    fn on_feedback(&mut self, now: Instant, member: &Member) {
        let id = member.id();
        let m = self
            .members
            .entry(id)
            .or_insert_with(|| MemberRate::with_history(HISTORY));
        m.observe(now, member);
        let rate = m.rate();
        match self.acker {
            Some(acker) if acker.id == id => self.follow(now, member, acker),
            Some(acker) => {
                let acker_rate = self.members.get(&acker.id).and_then(MemberRate::rate);
                let worse = match (rate, acker_rate) {
                    (Some(r), Some(a)) => r < SWITCH_BELOW * a,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if worse {
                    self.switch_to(now, member);
                }
            }
            None => {
                let waiting = self
                    .next
                    .is_some_and(|n| n != id && self.members.contains_key(&n));
                if rate.is_some() && !waiting {
                    self.switch_to(now, member);
                }
            }
        }
    }

    fn on_member_left(&mut self, id: MemberId) {
        self.members.remove(&id);
        if self.acker.is_some_and(|a| a.id == id) {
            // The worst by rate takes over at its next feedback (if none
            // has a rate, the first heard that has one); the window stays.
            self.acker = None;
            self.next = self.worst();
        }
    }

    fn window(&self, members: &MemberView<'_>) -> u64 {
        let window = if self.started {
            self.cc.cwnd()
        } else {
            members.min(MemberKey::Cwnd).unwrap_or(0)
        };
        self.last_window.set(window);
        window
    }

    /// The session window beyond the acker's pipe, every member's pipe
    /// within twice the session window plus what the session sends between
    /// two of a member's ACKs, and every receive window.
    fn send_limit(&self, members: &MemberView<'_>, window: u64) -> u64 {
        if !self.started {
            return members.min(MemberKey::SendEdge).unwrap_or(0);
        }
        let furthest_behind = members.min(MemberKey::PipeBase).unwrap_or(0);
        let window_end = members.min(MemberKey::WindowEnd).unwrap_or(0);
        let acker = self.acker.and_then(|a| self.members.get(&a.id));
        let acker_base = acker.map_or(furthest_behind, |m| m.pipe_base);
        // A member asked to ACK every 41 ms (N = 1000) holds the session's
        // sending of those 41 ms unacknowledged besides its round trip:
        // without this the guard, not the window, set the pace there.
        let between_acks = acker.map_or(0, |m| {
            let srtt_us = m.srtt().as_micros().max(1);
            (u128::from(window) * self.feedback_interval.as_micros() / srtt_us) as u64
        });
        (acker_base + window)
            .min(furthest_behind + 2 * window + between_acks)
            .min(window_end)
    }
}
