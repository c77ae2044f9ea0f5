//! A member's child control block (TCP-SMO §II): who it is, its receive
//! window, when it was last heard, its ACK schedule, and its loss recovery
//! ([`Recovery`]: RTT/RTO, congestion window, what it acknowledged and
//! lost). Everything about sent data lives once in the master's
//! [`SegmentLog`].

use super::snapshot::MemberSnapshot;
use super::MemberId;
use crate::address_budget::AddressBudget;
use crate::recovery::{AckOutcome, Recovery, TimeoutOutcome};
use crate::segment_log::SegmentLog;
use crate::wire::{AckFrame, AckFrequencyFrame};
use fanout_core::ack_policy::DEFAULT_MAX_ACK_DELAY;
use fanout_core::time::Instant;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

/// A member's named timers (after smoltcp's `socket/tcp.rs` `Timer`); the
/// member set keeps the earliest of them in its timer index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberTimer {
    /// Retransmission timeout (RFC 6298).
    Rto,
    /// RACK reorder timer (RFC 8985 §6.2), or the tail loss probe's
    /// (§7.2), whichever is first.
    Rack,
    /// No progress for the stall timeout while data is outstanding: evict.
    Stall,
    /// Zero-window probe (RFC 9293 §3.8.6.1): its window blocks the
    /// session and nothing is in flight to it, so no ACK will reopen it.
    Persist,
    /// Silent for a third of the idle timeout: PING it (its ACK answers);
    /// a PING left unanswered is repeated every twelfth of it, so losing a
    /// few keep-alives or their answers does not end a live member (eight
    /// probes before [`MemberTimer::Silence`]).
    KeepAlive,
    /// Silent for the idle timeout: evict.
    Silence,
    /// Its address not validated within the validation timeout
    /// ([`crate::address_budget`]): evict. Until then it is PINGed (its
    /// ACK, under its token, validates it) every eighth of the timeout.
    Validation,
}

impl MemberTimer {
    /// Every member timer, in the order expired ones are served.
    pub const VALUES: [MemberTimer; 7] = [
        MemberTimer::Rack,
        MemberTimer::Rto,
        MemberTimer::Persist,
        MemberTimer::KeepAlive,
        MemberTimer::Stall,
        MemberTimer::Silence,
        MemberTimer::Validation,
    ];
}

/// The session's timing settings a member's timers follow.
#[derive(Debug, Clone, Copy)]
pub struct MemberClock {
    /// [`super::SessionConfig::stall_timeout`].
    pub stall_timeout: Duration,
    /// [`crate::TransportConfig::idle_timeout`].
    pub idle_timeout: Duration,
    /// [`super::SessionConfig::validation_timeout`].
    pub validation_timeout: Duration,
}

impl MemberClock {
    /// The timing settings of a session configured by `config`.
    pub fn of(config: &super::SessionConfig) -> Self {
        MemberClock {
            stall_timeout: config.stall_timeout,
            idle_timeout: config.transport.idle_timeout,
            validation_timeout: config.validation_timeout,
        }
    }
}

/// One receiver's control block.
#[derive(Debug)]
pub struct Member {
    id: MemberId,
    addr: SocketAddr,
    /// The header id its datagrams carry ([`super::member_token`]).
    token: u64,
    /// Offset at which its delivery started.
    start: u64,
    /// When it was admitted.
    joined: Instant,
    /// What its address was sent while unvalidated.
    address: AddressBudget,
    /// Admitted unvalidated after data up to this offset went out: what
    /// it missed is repaired once it is validated, not before (repairs to
    /// a forged address would amplify).
    missed_until: Option<u64>,
    /// Offsets below this fit its receive window.
    window_end: u64,
    /// Largest packet number of its ACKs (window updates only from newer).
    largest_ack_pn: Option<u64>,
    /// Last time its cumulative ACK advanced (or data became outstanding
    /// to it).
    last_progress: Instant,
    /// Last time any datagram of it arrived (or it joined).
    last_heard: Instant,
    /// Zero-window probe deadline and how many probes went unanswered.
    persist: Option<Instant>,
    /// Since when its closed window has blocked data waiting to go out
    /// (`None` while it does not).
    blocked_since: Option<Instant>,
    persist_probes: u32,
    /// Last keep-alive PING sent to it.
    last_ping: Option<Instant>,
    /// ACKs processed.
    acks: u64,
    /// ACK schedule last asked of it (every 2 segments, no time thinning
    /// = the receivers' default).
    ack_schedule: AckFrequencyFrame,
    /// Its congestion window smoothed over its last ~8 updates (bytes):
    /// the essentially-fair controller's estimate of what one TCP flow
    /// gets on its path.
    cwnd_avg: u64,
    /// Its loss recovery.
    recovery: Recovery,
    /// Starts of the blocks last repaired for it by coded symbols (at most
    /// [`RECENT_CODED_BLOCKS`], newest last).
    coded_blocks: Vec<u64>,
}

/// Coded blocks a member remembers: a loss in one of them reported again
/// is repaired by copies (symbols did not help: lost, or undecodable for
/// a receiver that never held the block's start).
pub const RECENT_CODED_BLOCKS: usize = 4;

impl Member {
    /// A member of id `id` at `addr` with token `token`, whose delivery
    /// starts at `start`, with receive window `window` and its recovery.
    #[allow(clippy::too_many_arguments)] // each a distinct fact of the join
    pub fn new(
        id: MemberId,
        addr: SocketAddr,
        token: u64,
        start: u64,
        window: u64,
        recovery: Recovery,
        now: Instant,
    ) -> Self {
        Member {
            id,
            addr,
            token,
            start,
            joined: now,
            address: AddressBudget::validated(),
            missed_until: None,
            window_end: start.saturating_add(window),
            largest_ack_pn: None,
            last_progress: now,
            last_heard: now,
            persist: None,
            blocked_since: None,
            persist_probes: 0,
            last_ping: None,
            acks: 0,
            // What a receiver starts with; `every` is 0 for a sender that
            // does not thin ACKs ([`crate::session::feedback::schedule`]).
            ack_schedule: AckFrequencyFrame {
                every: 2,
                min_interval_us: 0,
                max_ack_delay_us: crate::wire::MAX_ACK_INTERVAL_US,
            },
            cwnd_avg: recovery.cwnd(),
            recovery,
            coded_blocks: Vec::new(),
        }
    }

    /// Takes `cc` as its congestion controller, fresh (the session's
    /// segments became smaller before any data went out).
    pub fn replace_cc(&mut self, cc: Box<dyn fanout_core::cc::CongestionController>) {
        self.recovery.replace_cc(cc);
        self.cwnd_avg = self.recovery.cwnd();
    }

    /// Its id.
    pub fn id(&self) -> MemberId {
        self.id
    }

    /// The same member, its address not validated yet: its join was a
    /// datagram of `received` bytes ([`crate::address_budget`]).
    pub fn unvalidated(mut self, received: u64) -> Self {
        self.address = AddressBudget::unvalidated(received);
        self
    }

    /// True once its address proved itself (its token came back).
    pub fn is_validated(&self) -> bool {
        self.address.is_validated()
    }

    /// A datagram of `bytes` arrived from it; `echoed_token` if it carried
    /// its token. True if that validated its address just now.
    pub fn on_datagram_from(&mut self, bytes: u64, echoed_token: bool) -> bool {
        self.address.on_received(bytes);
        echoed_token && self.address.validate()
    }

    /// Whether a datagram of `bytes` may go to its address now (charged
    /// if so).
    pub fn try_send(&mut self, bytes: u64) -> bool {
        self.address.try_send(bytes)
    }

    /// Admitted unvalidated after data up to `snd_nxt` went out: repair
    /// what it missed once validated ([`Member::take_missed`]).
    pub fn defer_missed(&mut self, snd_nxt: u64) {
        self.missed_until = Some(snd_nxt);
    }

    /// Validated: marks what it missed before it was admitted, if that
    /// was deferred. Returns the segments to repair.
    pub fn take_missed(&mut self, now: Instant, log: &SegmentLog) -> Vec<Range<u64>> {
        match self.missed_until.take() {
            Some(until) => self.mark_missed(now, until, log),
            None => Vec::new(),
        }
    }

    /// Where its ACKs come from and unicast goes to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The header id its datagrams carry ([`super::TokenKey`], `docs/wire.md` §4.10).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Offset at which its delivery started.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Every offset below was acknowledged.
    pub fn cumulative(&self) -> u64 {
        self.recovery.cumulative()
    }

    /// Offsets below this fit its receive window.
    pub fn window_end(&self) -> u64 {
        self.window_end
    }

    /// Its loss recovery (RTT, congestion window, losses).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Its congestion window smoothed over its last ~8 updates, bytes.
    pub fn smoothed_cwnd(&self) -> u64 {
        self.cwnd_avg
    }

    /// The ACK schedule last asked of it.
    pub fn ack_schedule(&self) -> AckFrequencyFrame {
        self.ack_schedule
    }

    /// Expands a packet number of its datagrams (RFC 9000 §A.3).
    pub fn expand_pn(&self, truncated: u32) -> u64 {
        fanout_core::codec::expand_pn(self.largest_ack_pn.map_or(0, |l| l + 1), truncated)
    }

    /// Its figures now, for displays and reports.
    pub fn snapshot(&self) -> MemberSnapshot {
        let r = &self.recovery;
        MemberSnapshot {
            id: self.id,
            addr: self.addr,
            start: self.start,
            cumulative: r.cumulative(),
            cwnd: r.cwnd(),
            srtt: r.srtt(),
            slow_start: r.cc().in_slow_start(),
            in_recovery: r.in_recovery(),
            acks: self.acks,
            recovery_episodes: r.recovery_episodes(),
            rtos: r.rtos(),
            repaired_bytes: r.repaired_bytes(),
        }
    }

    /// The highest offset new data may reach for this member: its
    /// congestion window beyond what it holds in flight, capped by its
    /// receive window. Independent of `SND.NXT`, so a multicast send leaves
    /// every member's edge unchanged.
    pub fn send_edge(&self) -> u64 {
        (self.recovery.pipe_base() + self.recovery.cwnd()).min(self.window_end)
    }

    /// True if data below `snd_nxt` is unacknowledged by it.
    pub fn has_outstanding(&self, snd_nxt: u64) -> bool {
        self.recovery.cumulative() < snd_nxt
    }

    /// Folds the current congestion window into the smoothed window
    /// (weight 1/8 per update).
    pub(super) fn smooth_cwnd(&mut self) {
        self.cwnd_avg = (7 * self.cwnd_avg + self.recovery.cwnd()) / 8;
    }

    /// Its deadline for `timer`, `None` if that timer is not armed.
    pub fn deadline(
        &self,
        timer: MemberTimer,
        snd_nxt: u64,
        clock: &MemberClock,
    ) -> Option<Instant> {
        match timer {
            MemberTimer::Rto => self.recovery.rto_deadline(),
            MemberTimer::Rack => [self.recovery.rack_deadline(), self.recovery.tlp_deadline()]
                .into_iter()
                .flatten()
                .min(),
            // No progress while data is outstanding, or a window kept
            // closed while data waits (it answers the zero-window probes
            // but never reads): either way it holds the session.
            MemberTimer::Stall => if self.has_outstanding(snd_nxt) {
                Some(self.last_progress)
            } else {
                self.blocked_since
            }
            .map(|t| t + clock.stall_timeout),
            MemberTimer::Persist => self.persist,
            MemberTimer::KeepAlive if !self.is_validated() => {
                let every = clock.validation_timeout / 8;
                Some(self.last_ping.unwrap_or(self.joined) + every)
            }
            MemberTimer::KeepAlive => Some(match self.last_ping {
                Some(p) if p >= self.last_heard => p + clock.idle_timeout / 12,
                _ => self.last_heard + clock.idle_timeout / 3,
            }),
            MemberTimer::Silence => Some(self.last_heard + clock.idle_timeout),
            MemberTimer::Validation => {
                (!self.is_validated()).then(|| self.joined + clock.validation_timeout)
            }
        }
    }

    /// The earliest of its timers.
    pub fn next_deadline(&self, snd_nxt: u64, clock: &MemberClock) -> Option<Instant> {
        MemberTimer::VALUES
            .iter()
            .filter_map(|&t| self.deadline(t, snd_nxt, clock))
            .min()
    }

    /// A datagram of it arrived.
    pub fn on_heard(&mut self, now: Instant) {
        self.last_heard = now;
    }

    /// A keep-alive PING went to it.
    pub fn on_ping_sent(&mut self, now: Instant) {
        self.last_ping = Some(now);
    }

    /// How long it may hold an ACK (RFC 9002 §5.3's max_ack_delay): its
    /// feedback interval plus the delayed-ACK timer.
    pub fn max_ack_delay(&self) -> Duration {
        Duration::from_micros(u64::from(self.ack_schedule.min_interval_us)) + DEFAULT_MAX_ACK_DELAY
    }

    /// Processes an ACK already validated against `SND.NXT`, with packet
    /// number `pn`.
    #[allow(clippy::too_many_arguments)] // the ACK's context, each used once
    pub fn on_ack(
        &mut self,
        now: Instant,
        pn: u64,
        ack: &AckFrame,
        log: &SegmentLog,
        snd_nxt: u64,
        mss: u64,
        cwnd_limited: bool,
    ) -> AckOutcome {
        self.acks += 1;
        if self.largest_ack_pn.is_none_or(|l| pn > l) {
            self.largest_ack_pn = Some(pn);
            self.window_end = self
                .window_end
                .max(ack.cumulative.saturating_add(ack.window));
        }
        let max_delay = self.max_ack_delay();
        let out = self
            .recovery
            .on_ack(now, ack, log, snd_nxt, mss, cwnd_limited, max_delay);
        if out.progressed {
            self.last_progress = now;
        }
        if self.window_end > snd_nxt || self.has_outstanding(snd_nxt) {
            self.persist = None;
            self.persist_probes = 0;
            self.blocked_since = None;
        }
        out
    }

    /// Sets the ACK schedule it is asked for; true if that changed it (an
    /// ACK_FREQUENCY frame must go out).
    pub fn set_ack_schedule(&mut self, want: AckFrequencyFrame) -> bool {
        let changed = want != self.ack_schedule;
        self.ack_schedule = want;
        changed
    }

    /// Runs its recovery timers due at `now`.
    pub fn on_recovery_timeout(
        &mut self,
        now: Instant,
        log: &SegmentLog,
        snd_nxt: u64,
        mss: u64,
    ) -> TimeoutOutcome {
        self.recovery.on_timeout(now, log, snd_nxt, mss)
    }

    /// New data went out and it had nothing outstanding: its stall time
    /// counts from now, and its retransmission timer is armed.
    pub fn on_data_outstanding(&mut self, now: Instant, snd_nxt: u64) {
        self.last_progress = now;
        self.recovery.arm_rto(now, snd_nxt);
    }

    /// Its receive window blocks new data at `snd_nxt` while nothing is in
    /// flight to it: arms the zero-window probe (one RTO away, backing off
    /// per unanswered probe) unless armed, and starts its stall clock
    /// unless running ([`MemberTimer::Stall`]).
    pub fn on_window_blocked(&mut self, now: Instant, snd_nxt: u64) {
        if self.window_end > snd_nxt || self.has_outstanding(snd_nxt) {
            return;
        }
        self.blocked_since.get_or_insert(now);
        if self.persist.is_none() {
            let backoff = 1u32 << self.persist_probes.min(6);
            self.persist = Some(now + self.recovery.rtt().rto().saturating_mul(backoff));
        }
    }

    /// The zero-window probe fired: a PING goes out (its ACK carries the
    /// current window); the next probe is armed when the session is blocked
    /// again.
    pub fn on_persist_probe(&mut self) {
        self.persist = None;
        self.persist_probes = self.persist_probes.saturating_add(1);
    }

    /// Symbols of the block starting at `start` were sent for it.
    pub fn on_coded_repair(&mut self, start: u64) {
        if self.coded_blocks.last() == Some(&start) {
            return;
        }
        if self.coded_blocks.len() == RECENT_CODED_BLOCKS {
            self.coded_blocks.remove(0);
        }
        self.coded_blocks.push(start);
    }

    /// Whether symbols of the block starting at `start` were sent for it
    /// lately.
    pub fn was_coded(&self, start: u64) -> bool {
        self.coded_blocks.contains(&start)
    }

    /// A repair of `range` was sent.
    pub fn on_repair_sent(&mut self, range: Range<u64>, now: Instant) {
        self.recovery.on_repair_sent(range, now);
    }

    /// A repair of `range` could not be queued (queue full): it goes back
    /// in flight, to be detected lost again later.
    pub fn forget_loss(&mut self, range: Range<u64>) {
        self.recovery.forget_loss(range);
    }

    /// It no longer holds `range`, which it acknowledged selectively
    /// ([`Recovery::renege`]). Returns the segments to repair.
    pub fn renege(&mut self, range: Range<u64>, snd_nxt: u64, log: &SegmentLog) -> Vec<Range<u64>> {
        self.recovery.renege(range, snd_nxt, log)
    }

    /// Admitted after data up to `snd_nxt` went out: what it never
    /// received is lost to it. Returns the segments to repair.
    pub fn mark_missed(&mut self, now: Instant, snd_nxt: u64, log: &SegmentLog) -> Vec<Range<u64>> {
        self.recovery.mark_missed(now, snd_nxt, log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TransportConfig;
    use crate::recovery::Recovery;
    use fanout_core::rtt::RttEstimator;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn member(window: u64) -> Member {
        let t = TransportConfig::default();
        let r = Recovery::new(0, RttEstimator::new(t.rto), t.cc.build(1000));
        Member::new(
            MemberId(1),
            "10.0.0.2:7000".parse().unwrap(),
            99,
            0,
            window,
            r,
            at(0),
        )
    }

    #[test]
    fn timers_by_name() {
        let clock = MemberClock {
            stall_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            validation_timeout: Duration::from_secs(3),
        };
        let mut m = member(1 << 20);
        assert_eq!(
            m.deadline(MemberTimer::Stall, 0, &clock),
            None,
            "nothing outstanding"
        );
        assert_eq!(
            m.deadline(MemberTimer::Stall, 5000, &clock),
            Some(at(10_000))
        );
        assert_eq!(
            m.deadline(MemberTimer::KeepAlive, 0, &clock),
            Some(at(10_000))
        );
        assert_eq!(
            m.deadline(MemberTimer::Silence, 0, &clock),
            Some(at(30_000))
        );
        m.on_ping_sent(at(10_000));
        assert_eq!(
            m.deadline(MemberTimer::KeepAlive, 0, &clock),
            Some(at(12_500)),
            "unanswered: probed again soon"
        );
        m.on_heard(at(15_000));
        assert_eq!(
            m.deadline(MemberTimer::Silence, 0, &clock),
            Some(at(45_000))
        );
        assert_eq!(
            m.deadline(MemberTimer::KeepAlive, 0, &clock),
            Some(at(25_000))
        );
        assert_eq!(m.next_deadline(0, &clock), Some(at(25_000)));
    }

    #[test]
    fn a_closed_window_with_nothing_in_flight_arms_the_persist_probe() {
        let mut m = member(0);
        m.on_window_blocked(at(5), 0);
        let first = m.persist.expect("armed");
        m.on_persist_probe();
        assert_eq!(m.persist, None);
        m.on_window_blocked(at(5), 0);
        let second = m.persist.expect("re-armed");
        assert!(second - at(5) == 2 * (first - at(5)), "backs off");
        // An open window never arms it.
        let mut open = member(1 << 20);
        open.on_window_blocked(at(5), 0);
        assert_eq!(open.persist, None);
    }

    #[test]
    fn a_window_kept_closed_while_data_waits_is_a_stall() {
        let clock = MemberClock {
            stall_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            validation_timeout: Duration::from_secs(3),
        };
        let mut m = member(0);
        assert_eq!(m.deadline(MemberTimer::Stall, 0, &clock), None);
        m.on_window_blocked(at(5), 0);
        m.on_persist_probe();
        // Probed again later: the clock keeps running from the first block.
        m.on_window_blocked(at(3_000), 0);
        assert_eq!(m.deadline(MemberTimer::Stall, 0, &clock), Some(at(10_005)));
    }
}
