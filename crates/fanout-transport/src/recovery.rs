//! One peer's loss recovery — the only implementation of it: every peer of
//! every engine that sends data (each member of a session, and so a
//! unicast transfer, which is a session of one) has one [`Recovery`].
//!
//! It holds what the peer acknowledged, SACKed and lost, detects loss by
//! RACK (RFC 8985) with a reordering window that adapts to the path
//! (`recovery/reorder_window.rs`), runs the retransmission timer with
//! back-off (RFC 6298), keeps the recovery episode (RFC 6582 "recover",
//! RFC 6675 pipe), feeds the peer's congestion controller, and undoes a
//! congestion response that proves spurious (`recovery/undo.rs`). Sent
//! segments live once in the sender's [`SegmentLog`] (TCP-SMO §II: one
//! send buffer, one sequence space); a peer keeps only what differs from
//! it, so its state stays a few hundred bytes whatever it sends.
//!
//! Bounds: SACKed ranges at [`MAX_SACK_RANGES_KEPT`], repairs in flight at
//! [`MAX_REPAIRS_IN_FLIGHT`].

use crate::segment_log::SegmentLog;
use crate::wire::AckFrame;
use fanout_core::cc::{AckSample, CongestionController};
use fanout_core::rtt::RttEstimator;
use fanout_core::time::Instant;
use fanout_core::RangeSet;
mod reorder_window;
mod repairs_in_flight;
mod undo;
use reorder_window::ReorderWindow;
use repairs_in_flight::RepairsInFlight;
use std::ops::Range;
use std::time::Duration;
use undo::UndoPoint;

/// Resolution of wire timestamps (whole microseconds): an echo may read up
/// to this much older than the instant it stands for.
const ECHO_GRANULARITY: Duration = Duration::from_micros(1);

/// A repair acknowledged sooner than this share of `min_rtt` after it went
/// was not the copy that arrived. Less than 1: `min_rtt` overstates the
/// path's while a queue that stood at the first sample drains (a flow
/// joining a full bottleneck), and the echo rounds to microseconds.
const SPURIOUS_SHARE_OF_MIN_RTT: f64 = 0.5;

/// Most disjoint SACKed ranges kept per peer; further ranges are ignored
/// (the data is then repaired as if lost — safe, merely wasteful).
pub const MAX_SACK_RANGES_KEPT: usize = 256;
/// Most repairs tracked in flight per peer (oldest forgotten first).
pub const MAX_REPAIRS_IN_FLIGHT: usize = 1024;

/// What one ACK did.
#[derive(Debug, Default)]
pub struct AckOutcome {
    /// The cumulative ACK advanced.
    pub progressed: bool,
    /// The ACK's cumulative point fell inside a segment (clipped).
    pub clipped: bool,
    /// SACK ranges were ignored because the peer hit its range cap.
    pub sack_capped: bool,
    /// Ranges newly deemed lost (segment-aligned).
    pub newly_lost: Vec<Range<u64>>,
    /// Repairs this ACK showed spurious (acknowledged too soon after they
    /// went to have been the copy that arrived).
    pub spurious_repairs: u64,
    /// The latest congestion response proved spurious and was undone.
    pub undone: bool,
}

/// What an expired timer did.
#[derive(Debug, Default)]
pub struct TimeoutOutcome {
    /// Ranges newly deemed lost (segment-aligned).
    pub newly_lost: Vec<Range<u64>>,
    /// The retransmission timer fired (RFC 6298 §5.4).
    pub rto: bool,
    /// The tail loss probe fired (RFC 8985 §7): `newly_lost` holds the
    /// segment to send again as the probe.
    pub probe: bool,
}

/// One peer's loss recovery.
#[derive(Debug)]
pub struct Recovery {
    /// Every byte below was acknowledged.
    cumulative: u64,
    sacked: RangeSet,
    sacked_bytes: u64,
    lost: RangeSet,
    lost_bytes: u64,
    /// One past the highest offset ever deemed lost: a segment at or above
    /// it was never sent to this peer again by unicast, so its first
    /// transmission dates its delivery (Karn's rule, RFC 6298 §3).
    lost_frontier: u64,
    /// Repairs sent and not yet confirmed, oldest first.
    repairs: RepairsInFlight,
    /// Ranges above the cumulative point a repair of which was deemed lost
    /// in turn (the first sending and a repair both lost).
    relost: RangeSet,
    /// Ranges above the cumulative point repaired to this peer (unicast or
    /// multicast): a later delivery there may be either copy's.
    repaired: RangeSet,
    /// Every hole segment below it is deemed lost or is being repaired:
    /// loss detection starts its walk here. Lowered wherever a segment
    /// below it can become undecided again (a repair forgotten, a loss
    /// refused a repair, a SACK reneged).
    decided_below: u64,
    /// RACK's reordering window and what the path showed of reordering.
    reorder: ReorderWindow,
    /// While the latest recovery episode may prove spurious: what undoing
    /// its congestion response goes back to.
    undo: Option<UndoPoint>,
    /// Congestion responses undone.
    undone_episodes: u64,
    /// The peer may acknowledge holes it skipped itself (a real-time
    /// receiver past its deadline): a lost range acknowledged is no proof
    /// that it arrived.
    peer_skips_holes: bool,
    /// The peer may hold data below this that it has not reported yet: an
    /// ACK carried as many SACK blocks as one can (the receiver then leaves
    /// some out), or blocks beyond [`MAX_SACK_RANGES_KEPT`] were ignored.
    /// A delivery reported below it proves no reordering and no spurious
    /// loss: it may have arrived long before.
    unreported_below: u64,
    /// Pieces newly delivered by the ACK being processed, each with
    /// whether any of it was deemed lost (scratch, kept
    /// to spare an allocation per ACK while no reordering was seen).
    delivered_scratch: Vec<(Range<u64>, bool)>,
    rtt: RttEstimator,
    cc: Box<dyn CongestionController>,
    /// `SND.NXT` when the current recovery episode began (RFC 6582 "recover").
    recovery_point: Option<u64>,
    /// `SND.NXT` when the latest episode began: a loss wholly below it is
    /// of data sent before that episode's congestion response, and opens no
    /// new one (RFC 9002 §7.3.2).
    episode_start_edge: u64,
    /// Whether the data the last ACK covered was sent while the window
    /// limited the sending (RFC 7661).
    cwnd_limited: bool,
    /// Bytes in flight when the latest congestion event (a recovery
    /// episode or an RTO) was detected.
    flight_at_congestion: u64,
    /// RACK.xmit_ts: latest transmission time among delivered segments.
    rack_sent_at: Option<Instant>,
    /// RACK.end_seq: the end of that segment; of segments sent at the same
    /// instant (a batch), those ending lower were sent before it (RFC 8985
    /// §6.2, `RACK_sent_after`).
    rack_end: u64,
    /// RACK.rtt: the RTT of that delivery.
    rack_rtt: Duration,
    rto_deadline: Option<Instant>,
    rack_deadline: Option<Instant>,
    /// The tail loss probe timer (RFC 8985 §7.2's PTO).
    tlp_deadline: Option<Instant>,
    /// A probe went out and nothing was acknowledged since: no other.
    probe_out: bool,
    /// The longest the peer may hold an ACK (from its latest ACK).
    max_ack_delay: Duration,
    /// Consecutive RTO expiries without progress.
    rto_backoffs: u32,
    recovery_episodes: u64,
    rtos: u64,
    repaired_bytes: u64,
}

impl Recovery {
    /// A peer whose stream starts at `start`, with its RTT estimator and
    /// congestion controller.
    pub fn new(start: u64, rtt: RttEstimator, cc: Box<dyn CongestionController>) -> Self {
        Recovery {
            cumulative: start,
            sacked: RangeSet::new(),
            sacked_bytes: 0,
            lost: RangeSet::new(),
            lost_bytes: 0,
            lost_frontier: start,
            relost: RangeSet::new(),
            repaired: RangeSet::new(),
            repairs: RepairsInFlight::new(MAX_REPAIRS_IN_FLIGHT),
            decided_below: start,
            reorder: ReorderWindow::new(start),
            undo: None,
            undone_episodes: 0,
            peer_skips_holes: false,
            unreported_below: start,
            delivered_scratch: Vec::new(),
            rtt,
            cc,
            recovery_point: None,
            episode_start_edge: start,
            rack_sent_at: None,
            rack_end: 0,
            rack_rtt: Duration::ZERO,
            rto_deadline: None,
            rack_deadline: None,
            tlp_deadline: None,
            probe_out: false,
            max_ack_delay: fanout_core::ack_policy::DEFAULT_MAX_ACK_DELAY,
            rto_backoffs: 0,
            recovery_episodes: 0,
            rtos: 0,
            repaired_bytes: 0,
            cwnd_limited: false,
            flight_at_congestion: 0,
        }
    }

    /// Whether this peer's path was seen to reorder (RFC 8985 §6.2).
    pub fn reordering_seen(&self) -> bool {
        self.reorder.seen()
    }

    /// Repairs acknowledged too soon to have been the copy that arrived:
    /// the original was late, not lost.
    pub fn spurious_repairs(&self) -> u64 {
        self.reorder.spurious_repairs()
    }

    /// The peer may acknowledge holes it skipped itself, never received
    /// (a real-time receiver with deadlines).
    pub fn set_peer_skips_holes(&mut self) {
        self.peer_skips_holes = true;
    }

    /// Congestion responses undone: every byte their episode deemed lost
    /// arrived in its first sending.
    pub fn undone_episodes(&self) -> u64 {
        self.undone_episodes
    }

    /// Every offset below was acknowledged.
    pub fn cumulative(&self) -> u64 {
        self.cumulative
    }

    /// The peer's congestion controller.
    pub fn cc(&self) -> &dyn CongestionController {
        self.cc.as_ref()
    }

    /// Replaces the congestion controller with `cc` (a fresh one for
    /// another segment size, before any data was sent).
    pub fn replace_cc(&mut self, cc: Box<dyn CongestionController>) {
        self.cc = cc;
    }

    /// The peer's RTT estimator (RFC 6298).
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// Congestion window, bytes.
    pub fn cwnd(&self) -> u64 {
        self.cc.cwnd()
    }

    /// Smoothed RTT.
    pub fn srtt(&self) -> Duration {
        self.rtt.srtt()
    }

    /// True during a recovery episode (RFC 6582).
    pub fn in_recovery(&self) -> bool {
        self.recovery_point.is_some()
    }

    /// True in slow start or a recovery episode: the phases in which the
    /// peer is asked to acknowledge every second segment (TCP-SMO §II).
    pub fn in_fast_feedback(&self) -> bool {
        self.cc.in_slow_start() || self.recovery_point.is_some()
    }

    /// Whether the data the last ACK covered was sent while the window
    /// limited the sending (RFC 7661: windows grow only then).
    pub fn cwnd_limited(&self) -> bool {
        self.cwnd_limited
    }

    /// Bytes acknowledged cumulatively or by SACK.
    pub fn delivered(&self) -> u64 {
        self.cumulative + self.sacked_bytes
    }

    /// Bytes in flight when the latest congestion event (a recovery
    /// episode or an RTO) was detected: what a window reduction counts from.
    pub fn flight_at_congestion(&self) -> u64 {
        self.flight_at_congestion
    }

    /// Consecutive RTO expiries without progress.
    pub fn rto_backoffs(&self) -> u32 {
        self.rto_backoffs
    }

    /// Recovery episodes entered.
    pub fn recovery_episodes(&self) -> u64 {
        self.recovery_episodes
    }

    /// Retransmission timeouts in all.
    pub fn rtos(&self) -> u64 {
        self.rtos
    }

    /// Bytes repaired for this peer.
    pub fn repaired_bytes(&self) -> u64 {
        self.repaired_bytes
    }

    /// The retransmission timer (RFC 6298).
    pub fn rto_deadline(&self) -> Option<Instant> {
        self.rto_deadline
    }

    /// The RACK reorder timer (RFC 8985 §6.2).
    pub fn rack_deadline(&self) -> Option<Instant> {
        self.rack_deadline
    }

    /// The tail loss probe timer (RFC 8985 §7.2).
    pub fn tlp_deadline(&self) -> Option<Instant> {
        self.tlp_deadline
    }

    /// Bytes in flight (RFC 6675 "pipe"): sent, neither acknowledged nor
    /// SACKed nor deemed lost.
    pub fn in_flight(&self, snd_nxt: u64) -> u64 {
        snd_nxt
            .saturating_sub(self.cumulative)
            .saturating_sub(self.sacked_bytes + self.lost_bytes)
    }

    /// Where the congestion window starts: `SND.NXT` minus the bytes in
    /// flight, i.e. the cumulative ACK plus what was SACKed or lost.
    /// Independent of `SND.NXT`, so a multicast send leaves it unchanged.
    pub fn pipe_base(&self) -> u64 {
        self.cumulative + self.sacked_bytes + self.lost_bytes
    }

    /// True if `range` is still lost.
    pub fn is_lost(&self, range: Range<u64>) -> bool {
        self.lost.contains_range(range)
    }

    /// Bytes of `range` neither acknowledged nor SACKed (lost, or repaired
    /// and not yet confirmed). Only bytes below the highest SACKed offset
    /// count: beyond it, segments may simply be still on their way.
    pub fn unacked_bytes(&self, range: Range<u64>) -> u64 {
        let start = range.start.max(self.cumulative);
        let end = range.end.min(self.sacked.max_end().unwrap_or(start));
        if start >= end {
            return 0;
        }
        (end - start) - self.sacked.overlap_len(start..end)
    }

    /// The highest offset acknowledged, cumulatively or by SACK: the peer
    /// has reported on every segment below it.
    pub fn highest_acked(&self) -> u64 {
        self.sacked.max_end().unwrap_or(0).max(self.cumulative)
    }

    /// Bytes of `range` below the highest SACKed offset that are neither
    /// acknowledged, nor deemed lost, nor repaired: holes whose loss is not
    /// detected yet (RACK's reordering window, RFC 8985 §6.2).
    pub fn undetected_bytes(&self, range: Range<u64>) -> u64 {
        let holes = self.unacked_bytes(range.clone());
        if holes == 0 {
            return 0;
        }
        let known = self.lost.overlap_len(range.clone())
            + self
                .repairs
                .iter()
                .map(|(r, _)| {
                    r.end
                        .min(range.end)
                        .saturating_sub(r.start.max(range.start))
                })
                .sum::<u64>();
        holes.saturating_sub(known)
    }

    /// Whether a repair of some of `range` was sent and deemed lost.
    pub fn repair_was_lost(&self, range: Range<u64>) -> bool {
        self.relost.overlap_len(range) > 0
    }

    /// A repair of `range` was sent (by unicast to this peer, or by
    /// multicast).
    pub fn on_repair_sent(&mut self, range: Range<u64>, now: Instant) {
        if range.end > self.cumulative {
            self.repaired
                .insert(range.start.max(self.cumulative)..range.end);
        }
        let removed = self.lost.remove(range.clone());
        self.lost_bytes -= removed;
        self.repaired_bytes += removed;
        if removed > 0 {
            if let Some(forgotten) = self.repairs.push(range, now) {
                self.decided_below = self.decided_below.min(forgotten.start);
            }
            // The timer runs from the latest transmission (RFC 9002
            // §6.2.1; Linux re-arms it when it retransmits the head): a
            // repair sent less than an RTO before it would fire has not
            // had its round trip yet.
            self.rto_deadline = Some(now + self.rtt.rto());
        }
    }

    /// A repair of `range` could not be queued: the range goes back in
    /// flight, to be detected lost again (RACK or RTO) later.
    pub fn forget_loss(&mut self, range: Range<u64>) {
        self.decided_below = self.decided_below.min(range.start);
        self.lost_bytes -= self.lost.remove(range);
    }

    /// The peer no longer holds `range`, which it acknowledged selectively
    /// (RFC 2018 §8 allows a receiver to renege; here: held segments of a
    /// protected run that proved forged, `docs/wire.md` §4.12): its SACKed
    /// segments there, below `snd_nxt` and above the cumulative point, are
    /// lost again, without a congestion response (nothing was dropped by
    /// the network). Returns the segments to repair.
    pub fn renege(&mut self, range: Range<u64>, snd_nxt: u64, log: &SegmentLog) -> Vec<Range<u64>> {
        let range = range.start.max(self.cumulative)..range.end.min(snd_nxt);
        let mut lost = Vec::new();
        if range.is_empty() {
            return lost;
        }
        self.decided_below = self.decided_below.min(range.start);
        for seg in log.overlapping(range) {
            let r = seg.start..seg.end;
            if self.sacked.overlap_len(r.clone()) == 0 {
                continue;
            }
            self.sacked_bytes -= self.sacked.remove(r.clone());
            if self.add_lost(r.clone()) {
                lost.push(r);
            }
        }
        lost
    }

    /// A peer admitted at its cumulative point after data up to `snd_nxt`
    /// went out (a bulk join while the start is still buffered): every
    /// segment it never received is lost to it — without a congestion
    /// penalty, it was never in flight — and its RTO is armed. Returns the
    /// segments to repair.
    pub fn mark_missed(&mut self, now: Instant, snd_nxt: u64, log: &SegmentLog) -> Vec<Range<u64>> {
        let mut missed = Vec::new();
        for seg in log.overlapping(self.cumulative..snd_nxt) {
            let r = seg.start..seg.end;
            if self.add_lost(r.clone()) {
                missed.push(r);
            }
        }
        if !missed.is_empty() {
            self.arm_rto(now, snd_nxt);
        }
        missed
    }

    /// An RTT sample from an ACK that SACKed new data but did not advance
    /// the cumulative point (as Linux takes `sack_rtt_us`): the time since
    /// the first transmission of the newly SACKed segment ending at `top`,
    /// if that is the highest offset the peer holds (the arrival that triggered this ACK: a
    /// receiver acknowledges out-of-order data at once, RFC 5681 §4.2), it
    /// was sent once only (never deemed lost for this peer, never
    /// multicast again: Karn's rule) and the peer's ACKs are not held to a
    /// feedback slot (`max_ack_delay` beyond the delayed-ACK timer: the
    /// hold would count as path). The echoed timestamp cannot serve: it
    /// stays on the last in-order segment while a hole is open (RFC 7323
    /// §4.3). Without these samples the RTT is blind for as long as a hole
    /// waits for its repair, which is when a queue drains or builds.
    fn sack_rtt_sample(
        &self,
        now: Instant,
        top: u64,
        log: &SegmentLog,
        max_ack_delay: Duration,
    ) -> Option<Duration> {
        if max_ack_delay > fanout_core::ack_policy::DEFAULT_MAX_ACK_DELAY {
            return None;
        }
        if self.sacked.max_end() != Some(top) {
            return None;
        }
        let seg = log.containing(top - 1)?;
        (seg.end == top && seg.start >= self.lost_frontier && seg.sent_at == seg.first_sent_at)
            .then(|| now.saturating_duration_since(seg.first_sent_at))
    }

    fn add_lost(&mut self, range: Range<u64>) -> bool {
        self.lost_frontier = self.lost_frontier.max(range.end);
        let added = self.lost.insert(range);
        self.lost_bytes += added;
        added > 0
    }

    /// Processes an ACK already validated against `SND.NXT`. `max_ack_delay`
    /// is the longest the peer may have held it (RFC 9002 §5.3).
    #[allow(clippy::too_many_arguments)] // the ACK's context, each used once
    pub fn on_ack(
        &mut self,
        now: Instant,
        ack: &AckFrame,
        log: &SegmentLog,
        snd_nxt: u64,
        mss: u64,
        cwnd_limited: bool,
        max_ack_delay: Duration,
    ) -> AckOutcome {
        let mut out = AckOutcome::default();
        self.cwnd_limited = cwnd_limited;
        let mut delivered_latest: Option<(Instant, u64)> = None;
        let mut newly_acked = 0u64;
        // What this ACK covered that was not covered before (kept only
        // while repairs are in flight: it settles them).
        let mut covered_now: Vec<Range<u64>> = Vec::new();
        let settles = !self.repairs.is_empty();
        // Whole segments only (segment boundaries never change).
        let mut cum = ack.cumulative;
        if let Some(seg) = log.containing(cum).filter(|s| s.start < cum) {
            cum = seg.start;
            out.clipped = true;
        }
        let flight_before = self.in_flight(snd_nxt);
        let mut sampled = false;
        // Bytes deemed lost in the latest episode and proven to have
        // arrived in their first sending cover all it lost: undo it.
        let mut all_proven = false;
        if ack.sack.len() >= crate::wire::MAX_SACK_RANGES {
            self.unreported_below = self.unreported_below.max(snd_nxt);
        }
        // RFC 8985 §6.2 step 3 needs what was newly delivered, in order,
        // until reordering is seen (SACKed pieces gathered here, sorted).
        let watch_order = !self.reorder.seen();
        let mut delivered = std::mem::take(&mut self.delivered_scratch);
        delivered.clear();
        if cum > self.cumulative {
            out.progressed = true;
            let newly = self.cumulative..cum;
            if watch_order {
                // The lowest of what this ACK delivered, in order, judged
                // before the pruning below forgets their repairs.
                for gap in self.sacked.gaps(newly.clone()) {
                    let unreported = gap.end <= self.unreported_below;
                    let once = || {
                        !unreported
                            && (!self.peer_skips_holes || self.lost.overlap_len(gap.clone()) == 0)
                            && sent_once(&self.repaired, log, &gap)
                    };
                    self.reorder.on_delivered(gap.end, once);
                }
            }
            delivered_latest = delivered_latest.max(log.latest_first_sent_within(newly.clone()));
            let already = self.sacked.overlap_len(newly.clone());
            let was_lost = self.lost.remove(newly.clone());
            self.lost_bytes -= was_lost;
            if was_lost > 0 && !self.peer_skips_holes && newly.end > self.unreported_below {
                all_proven |= first_sending_arrived(self.undo.as_mut(), log, &newly, was_lost);
            }
            newly_acked += (cum - self.cumulative) - already;
            self.sacked.remove_below(cum);
            self.relost.remove_below(cum);
            self.repaired.remove_below(cum);
            self.sacked_bytes -= already;
            self.cumulative = cum;
            if settles {
                covered_now.push(newly.clone());
            }
            self.rto_backoffs = 0;
            self.rtt.clear_backoff();
            // RFC 7323 §4: RTT from the timestamp echo of new data.
            // RFC 9002 §5.3: minus the reported delay, at most what the
            // peer was allowed to hold the ACK. An ACK held longer than
            // that (a merger's, released by a silent child's eviction)
            // measures the hold, not the path: no sample. Nor does an echo
            // older than the first transmission of the data it
            // acknowledges (stale, forged, or from the future modulo 2^32).
            let ack_delay = Duration::from_micros(ack.ack_delay_us);
            let sample = ack.timestamp_echo.elapsed(now);
            let plausible = log.containing(newly.start).is_none_or(|s| {
                sample <= now.saturating_duration_since(s.first_sent_at) + ECHO_GRANULARITY
            });
            if ack_delay <= max_ack_delay && plausible {
                self.rtt.on_sample_with_ack_delay(sample, ack_delay);
                sampled = true;
            }
        }
        let mut newly_sacked_top: Option<u64> = None;
        for r in &ack.sack {
            let Some(r) = clip_to_segments(log, r.start.max(self.cumulative)..r.end.min(snd_nxt))
            else {
                continue;
            };
            // Most blocks repeat what earlier ACKs said: one descent.
            if self.sacked.contains_range(r.clone()) {
                continue;
            }
            if self.sacked.range_count() >= MAX_SACK_RANGES_KEPT {
                out.sack_capped = true;
                self.unreported_below = self.unreported_below.max(snd_nxt);
                continue;
            }
            for gap in self.sacked.gaps(r.clone()) {
                delivered_latest = delivered_latest.max(log.latest_first_sent_within(gap.clone()));
                let was_lost = self.lost.remove(gap.clone());
                self.lost_bytes -= was_lost;
                if was_lost > 0 && !self.peer_skips_holes && gap.end > self.unreported_below {
                    all_proven |= first_sending_arrived(self.undo.as_mut(), log, &gap, was_lost);
                }
                newly_acked += gap.end - gap.start;
                newly_sacked_top = newly_sacked_top.max(Some(gap.end));
                if watch_order {
                    delivered.push((gap.clone(), was_lost > 0));
                }
                if settles {
                    covered_now.push(gap);
                }
            }
            self.sacked_bytes += self.sacked.insert(r);
        }
        if !sampled {
            if let Some(sample) =
                newly_sacked_top.and_then(|top| self.sack_rtt_sample(now, top, log, max_ack_delay))
            {
                self.rtt.on_sample(sample);
            }
        }
        if watch_order {
            delivered.sort_unstable_by_key(|(r, _)| r.end);
            for (piece, was_lost) in &delivered {
                let skips = self.peer_skips_holes;
                let once = || {
                    piece.end > self.unreported_below
                        && !(skips && *was_lost)
                        && sent_once(&self.repaired, log, piece)
                };
                if self.reorder.on_delivered(piece.end, once) {
                    break;
                }
            }
        }
        self.delivered_scratch = delivered;
        // Repairs delivered count as the latest evidence too (RFC 8985 §6.1:
        // only if delivered no sooner than min_rtt after being sent).
        let min_rtt = self.rtt.min_rtt().min(self.rtt.srtt());
        let (cum, sacked, unreported_below) =
            (self.cumulative, &self.sacked, self.unreported_below);
        // A repair not settled by the last ACK is settled by this one only
        // if this one covered part of it.
        if !covered_now.is_empty() {
            let mut spurious = Vec::new();
            let mut genuine = false;
            self.repairs.retain(|(r, t)| {
                let touched = covered_now
                    .iter()
                    .any(|c| c.start < r.end && r.start < c.end);
                let done = touched && (r.end <= cum || sacked.contains_range(r.clone()));
                let since = now - *t;
                if done && since >= min_rtt {
                    delivered_latest = delivered_latest.max(Some((*t, r.end)));
                }
                if done
                    && since < min_rtt.mul_f64(SPURIOUS_SHARE_OF_MIN_RTT)
                    && r.end > unreported_below
                    && log
                        .overlapping(r.clone())
                        .all(|seg| seg.sent_once_before(*t))
                {
                    // Acknowledged well within a round trip after it went,
                    // and no copy went to the group between the first and
                    // this one: the first arrived late (the DSACK RFC 8985
                    // §6.2 step 4 adapts to). A copy another member's
                    // repair multicast meanwhile proves nothing of the path.
                    spurious.push((r.clone(), *t));
                } else if done {
                    genuine = true;
                }
                !done
            });
            if genuine {
                // A repair that may have been the copy delivered: the
                // episode may have had a real loss.
                self.undo = None;
            }
            for (r, sent_at) in spurious {
                let counted = self
                    .reorder
                    .on_spurious_repair(r.end, self.cumulative, snd_nxt);
                out.spurious_repairs += u64::from(counted);
                // A tail probe's bytes were never deemed lost by RACK.
                if let Some(u) = self.undo.as_mut().filter(|_| counted) {
                    all_proven |= u.on_proven(r.end - r.start, Some(sent_at));
                }
            }
        }
        if all_proven && self.undo.is_some() {
            out.undone = self.undo_episode();
        }
        if let Some((t, end)) = delivered_latest {
            if self
                .rack_sent_at
                .is_none_or(|r| (t, end) >= (r, self.rack_end))
            {
                self.rack_sent_at = Some(t);
                self.rack_end = end;
                self.rack_rtt = now - t;
            }
        }
        // The episode ends once the cumulative ACK passes the recovery
        // point (RFC 6582 §3.2 step 5) or a segment sent after it began is
        // acknowledged (RFC 9002 §7.3.2): holes still being repaired then
        // (a repair lost, or held to be coded with other members' losses)
        // no longer hold the window's growth.
        if let Some(rp) = self.recovery_point {
            if self.cumulative >= rp || self.highest_acked() > rp {
                self.recovery_point = None;
                self.cc.on_recovery_end(now);
                self.reorder.on_recovery_end();
                // Undone while it lasts, or never (as Linux's undo).
                self.undo = None;
            }
        }
        if newly_acked > 0 && self.recovery_point.is_none() {
            self.cc.on_ack(
                now,
                AckSample {
                    acked_bytes: newly_acked,
                    srtt: self.rtt.srtt(),
                    min_rtt: self.rtt.min_rtt(),
                    cwnd_limited,
                },
            );
        }
        out.newly_lost = self.detect_losses(now, log, snd_nxt, mss, flight_before);
        // RFC 6298 §5.3: restart the timer when new data is acknowledged;
        // RFC 8985 §7.2: and the probe timer, once anything was delivered.
        self.max_ack_delay = max_ack_delay;
        if out.progressed {
            self.rto_deadline = None;
        }
        if out.progressed || newly_acked > 0 {
            self.tlp_deadline = None;
            self.probe_out = false;
        }
        self.arm_rto(now, snd_nxt);
        out
    }

    /// Runs the timers due at `now`: RACK's reorder timer (more segments
    /// may now be overdue) and the retransmission timer.
    pub fn on_timeout(
        &mut self,
        now: Instant,
        log: &SegmentLog,
        snd_nxt: u64,
        mss: u64,
    ) -> TimeoutOutcome {
        let mut out = TimeoutOutcome::default();
        if self.rack_deadline.is_some_and(|t| t <= now) {
            let flight = self.in_flight(snd_nxt);
            out.newly_lost = self.detect_losses(now, log, snd_nxt, mss, flight);
        }
        if self.rto_deadline.is_some_and(|t| t <= now) && self.cumulative < snd_nxt {
            out.newly_lost.extend(self.on_rto(now, snd_nxt, log));
            out.rto = true;
        } else if self.tlp_deadline.is_some_and(|t| t <= now) {
            out.probe = self.on_tail_probe(snd_nxt, log, &mut out.newly_lost);
        }
        out
    }

    /// Whether the hole segment `r` is deemed lost or is being repaired.
    fn is_decided(&self, r: &Range<u64>) -> bool {
        self.lost.contains_range(r.clone()) || self.repairs.contains(r)
    }

    /// Whether every hole segment in `range` is decided (what
    /// [`Recovery::decided_below`] promises; checked in debug builds).
    fn decided(&self, log: &SegmentLog, range: Range<u64>) -> bool {
        self.sacked.gaps_in(range).into_iter().all(|hole| {
            log.overlapping(hole)
                .all(|seg| self.is_decided(&(seg.start..seg.end)))
        })
    }

    /// RACK (RFC 8985 §6.2) against the shared log: a hole segment is lost
    /// once something sent after it was delivered and `rack_rtt + reo_wnd`
    /// passed since it was sent. Returns the newly lost ranges.
    fn detect_losses(
        &mut self,
        now: Instant,
        log: &SegmentLog,
        snd_nxt: u64,
        mss: u64,
        flight_before: u64,
    ) -> Vec<Range<u64>> {
        self.rack_deadline = None;
        let mut newly = Vec::new();
        let Some(rack_sent_at) = self.rack_sent_at else {
            return newly;
        };
        let rack_end = self.rack_end;
        // RFC 8985 §6.2: reo_wnd = min_rtt/4 (in steps that spurious
        // repairs add), or 0 once DupThresh (3) segments were SACKed above
        // the hole (the RFC 6675 trigger) on a path not seen to reorder.
        let srtt = self.rtt.srtt();
        let reo_wnd = self.reorder.window(
            self.rtt.min_rtt().min(srtt),
            srtt,
            self.sacked_bytes >= 3 * mss,
        );
        let top = self
            .sacked
            .max_end()
            .unwrap_or(self.cumulative)
            .min(snd_nxt);
        let mut timer: Option<Instant> = None;
        // Below `from` every hole segment is decided: the walk of the
        // last ACK left it so, and nothing undid it since.
        let from = self
            .decided_below
            .clamp(self.cumulative, top.max(self.cumulative));
        debug_assert!(self.decided(log, self.cumulative..from));
        let mut undecided = None;
        // Lost here, taken into `lost` after the walk (which borrows the
        // scoreboard); segments are disjoint, so none decides another.
        let mut overdue = Vec::new();
        'holes: for hole in self.sacked.gaps(from..top) {
            for seg in log.overlapping(hole.clone()) {
                let r = seg.start..seg.end;
                if self.is_decided(&r) {
                    continue;
                }
                // RFC 8985 §6.2 RACK_sent_after: later, or at the same
                // instant and ending higher.
                if (seg.sent_at, seg.end) > (rack_sent_at, self.rack_end) {
                    undecided.get_or_insert(seg.start);
                    if seg.first_sent_at < rack_sent_at {
                        // Multicast again since: that copy may still be
                        // on its way; later holes may be overdue.
                        continue;
                    }
                    break 'holes;
                }
                let due = seg.sent_at + self.rack_rtt + reo_wnd;
                if now >= due {
                    overdue.push(r);
                } else {
                    undecided.get_or_insert(seg.start);
                    timer = Some(timer.map_or(due, |t| t.min(due)));
                    break 'holes;
                }
            }
        }
        for r in overdue {
            if self.add_lost(r.clone()) {
                newly.push(r);
            }
        }
        self.decided_below = undecided.unwrap_or(top).max(from);
        // Lost repairs: sent before the latest delivery and overdue (only
        // the oldest can be: the repairs are in send order).
        let wait = self.rack_rtt + reo_wnd;
        let lost_repairs = self.repairs.take_overdue(
            |t| t <= rack_sent_at && now >= t + wait,
            |r, t| (t, r.end) < (rack_sent_at, rack_end),
        );
        if !lost_repairs.is_empty() {
            self.undo = None;
        }
        for r in lost_repairs {
            if self.add_lost(r.clone()) {
                self.relost.insert(r.clone());
                newly.push(r);
            }
        }
        // A repair sent before the latest delivery and not yet overdue
        // arms the reorder timer like any segment (RFC 8985 §6.2 step 5:
        // a retransmission is dated by its last sending). Without it, a
        // lost repair waits for the next ACK, which a sparse stream (one
        // message per 20 ms) sends only a message later.
        if let Some(sent) = self.repairs.oldest_sent_at().filter(|&t| t <= rack_sent_at) {
            let due = sent + wait;
            if due > now {
                timer = Some(timer.map_or(due, |t| t.min(due)));
            }
        }
        self.rack_deadline = timer;
        let fresh = newly.iter().any(|r| r.end > self.episode_start_edge);
        if fresh && self.recovery_point.is_none() {
            // One congestion response per episode (RFC 6582 §3.2), and
            // none for data sent before the latest one began.
            self.undo = Some(UndoPoint::new(
                self.cc.snapshot(),
                self.episode_start_edge,
                now,
            ));
            self.recovery_point = Some(snd_nxt);
            self.episode_start_edge = snd_nxt;
            self.recovery_episodes += 1;
            self.flight_at_congestion = flight_before;
            self.cc.on_congestion_event(now, flight_before);
        }
        if let Some(u) = self.undo.as_mut() {
            u.on_deemed_lost(newly.iter().map(|r| r.end - r.start).sum());
        }
        newly
    }

    /// Every byte the latest episode deemed lost arrived in its first
    /// sending: its congestion response is undone — the controller as
    /// before it, the episode over, and a loss of data sent before it a
    /// congestion event again.
    fn undo_episode(&mut self) -> bool {
        let Some(u) = self.undo.take() else {
            return false;
        };
        self.cc = u.before;
        self.recovery_point = None;
        self.episode_start_edge = u.edge_before;
        self.undone_episodes += 1;
        true
    }

    /// Arms the RTO if data is outstanding and it is not armed (RFC 6298
    /// §5.1); disarms it when nothing is.
    pub fn arm_rto(&mut self, now: Instant, snd_nxt: u64) {
        if self.cumulative >= snd_nxt {
            self.rto_deadline = None;
            self.tlp_deadline = None;
            return;
        }
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
        // RFC 8985 §7.2: PTO = 2·SRTT, plus the peer's ACK hold (its
        // receivers always may hold one), if it comes before the RTO.
        if self.tlp_deadline.is_none() && !self.probe_out && self.rtt.has_sample() {
            let pto = now + 2 * self.rtt.srtt() + self.max_ack_delay;
            self.tlp_deadline = self.rto_deadline.filter(|&rto| pto < rto).map(|_| pto);
        }
    }

    /// RFC 8985 §7.3: nothing was acknowledged for a PTO while data is
    /// outstanding — the tail of the flight, or a repair sent when no
    /// newer data could follow it (a full window), may be lost with no
    /// later delivery for RACK to see it by. The last segment sent that
    /// is not known delivered goes again (pushed onto `probe`, deemed lost
    /// without a congestion response: its ACK, by SACK, lets RACK find
    /// what really was lost, RFC 8985 §7.4); one probe until something is
    /// acknowledged. Returns whether a probe was chosen.
    fn on_tail_probe(
        &mut self,
        snd_nxt: u64,
        log: &SegmentLog,
        probe: &mut Vec<Range<u64>>,
    ) -> bool {
        self.tlp_deadline = None;
        self.probe_out = true;
        let last = log
            .overlapping(self.cumulative..snd_nxt)
            .map(|seg| seg.start..seg.end)
            .filter(|r| {
                !self.sacked.contains_range(r.clone()) && !self.lost.contains_range(r.clone())
            })
            .last();
        match last {
            Some(r) if self.add_lost(r.clone()) => {
                self.reorder.on_tail_probe(r.clone());
                probe.push(r);
                true
            }
            _ => false,
        }
    }

    /// RFC 6298 §5.4–5.6 / RFC 5681 §3.1: every outstanding, un-SACKed
    /// range is deemed lost; the timer backs off. Returns the newly lost
    /// ranges.
    fn on_rto(&mut self, now: Instant, snd_nxt: u64, log: &SegmentLog) -> Vec<Range<u64>> {
        self.rto_deadline = None;
        if self.cumulative >= snd_nxt {
            return Vec::new();
        }
        self.rto_backoffs += 1;
        self.rtos += 1;
        let flight = self.in_flight(snd_nxt);
        self.flight_at_congestion = flight;
        self.rtt.on_timeout();
        self.cc.on_retransmission_timeout(now, flight);
        self.recovery_point = Some(snd_nxt);
        self.episode_start_edge = snd_nxt;
        self.reorder.on_rto(snd_nxt);
        self.undo = None;
        self.repairs.clear();
        self.decided_below = self.cumulative;
        let mut newly = Vec::new();
        for gap in self.sacked.gaps_in(self.cumulative..snd_nxt) {
            for seg in log.overlapping(gap) {
                let r = seg.start..seg.end;
                if self.add_lost(r.clone()) {
                    newly.push(r);
                }
            }
        }
        self.arm_rto(now, snd_nxt);
        newly
    }
}

/// Whether `piece` went to the peer once only: never repaired to it, and
/// no segment of it sent again to the group (Karn's ambiguity: a later
/// copy may be the one delivered). Where the peer skips holes itself (a
/// real-time receiver past its deadline, which then acknowledges them)
/// callers also exclude pieces deemed lost: no reordering delivered them.
fn sent_once(repaired: &RangeSet, log: &SegmentLog, piece: &Range<u64>) -> bool {
    repaired.overlap_len(piece.clone()) == 0
        && log.overlapping(piece.clone()).all(|seg| seg.sent_once())
}

/// `lost` bytes of `piece`, deemed lost and never repaired, were
/// acknowledged: if nothing of it went to the group again, its first
/// sending arrived, late — proof for `undo`. True once all its episode's
/// lost bytes are proven.
fn first_sending_arrived(
    undo: Option<&mut UndoPoint>,
    log: &SegmentLog,
    piece: &Range<u64>,
    lost: u64,
) -> bool {
    undo.filter(|_| log.overlapping(piece.clone()).all(|seg| seg.sent_once()))
        .is_some_and(|u| u.on_proven(lost, None))
}

/// `range` shrunk to whole segments; `None` if none is wholly inside.
fn clip_to_segments(log: &SegmentLog, range: Range<u64>) -> Option<Range<u64>> {
    if range.is_empty() {
        return None;
    }
    let start = match log.containing(range.start) {
        Some(s) if s.start < range.start => s.end,
        _ => range.start,
    };
    let end = match log.containing(range.end - 1) {
        Some(s) if s.end > range.end => s.start,
        _ => range.end,
    };
    (start < end).then_some(start..end)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one SACK block
mod tests;
