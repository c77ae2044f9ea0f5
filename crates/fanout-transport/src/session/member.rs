//! A member's child control block (SMO §II): its own RTT/RTO, congestion
//! window, cumulative ACK, SACKed and lost ranges. Everything else about
//! sent data lives once in the master's [`SegmentLog`].
//!
//! State is bounded: SACKed ranges are capped at [`MAX_MEMBER_SACK_RANGES`]
//! and unicast repairs in flight at [`MAX_REPAIRS_IN_FLIGHT`], so a member
//! costs a few hundred bytes whatever it sends.

use super::segment_log::SegmentLog;
use super::snapshot::MemberSnapshot;
use super::MemberId;
use crate::sender::since_wire_timestamp;
use crate::wire::{AckFrame, AckFrequencyFrame};
use fanout_core::cc::{AckSample, CongestionController};
use fanout_core::rtt::RttEstimator;
use fanout_core::time::Instant;
use fanout_core::RangeSet;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

/// Most disjoint SACKed ranges kept per member; further ranges are ignored
/// (the data is then repaired as if lost — safe, merely wasteful).
pub const MAX_MEMBER_SACK_RANGES: usize = 256;
/// Most unicast repairs tracked in flight per member.
pub const MAX_REPAIRS_IN_FLIGHT: usize = 1024;

/// What one ACK did to a member.
#[derive(Debug, Default)]
pub struct MemberAck {
    /// The cumulative ACK advanced.
    pub progressed: bool,
    /// The ACK's cumulative point fell inside a segment (clipped).
    pub clipped: bool,
    /// SACK ranges were ignored because the member hit its range cap.
    pub sack_capped: bool,
    /// Ranges newly deemed lost (segment-aligned).
    pub newly_lost: Vec<Range<u64>>,
}

/// One receiver's control block.
#[derive(Debug)]
pub struct Member {
    /// Session-local id.
    pub id: MemberId,
    /// Where its ACKs come from and unicast goes to.
    pub addr: SocketAddr,
    /// Offset at which its delivery started.
    pub start: u64,
    /// Every byte below was acknowledged.
    pub cumulative: u64,
    sacked: RangeSet,
    sacked_bytes: u64,
    lost: RangeSet,
    lost_bytes: u64,
    repairs: VecDeque<(Range<u64>, Instant)>,
    /// RFC 6298 estimator of this member's path.
    pub rtt: RttEstimator,
    /// This member's congestion controller.
    pub cc: Box<dyn CongestionController>,
    /// Its congestion window smoothed over its last ~8 index updates
    /// (bytes): the essentially-fair policy's estimate of what one TCP
    /// flow gets on its path.
    pub cwnd_avg: u64,
    /// `SND.NXT` when its current recovery episode began (RFC 6582).
    pub recovery_point: Option<u64>,
    rack_sent_at: Option<Instant>,
    rack_rtt: Duration,
    /// Offsets below this fit its receive window.
    pub window_end: u64,
    /// Largest packet number of its ACKs (window updates only from newer).
    pub largest_ack_pn: Option<u64>,
    /// Last time its cumulative ACK advanced (or it joined).
    pub last_progress: Instant,
    /// Its retransmission timer.
    pub rto_deadline: Option<Instant>,
    /// Its RACK reorder timer.
    pub rack_deadline: Option<Instant>,
    /// Consecutive RTO expiries without progress.
    pub rto_backoffs: u32,
    /// ACKs processed.
    pub acks: u64,
    /// ACK schedule last asked of this member (every 2 segments, no time
    /// thinning = the receivers' default).
    pub ack_schedule: AckFrequencyFrame,
    /// Loss-recovery episodes entered.
    pub recovery_episodes: u64,
    /// Retransmission timeouts in all (for reports).
    rtos: u64,
    /// Bytes it was sent repairs of (for reports).
    repaired_bytes: u64,
}

impl Member {
    /// A member starting at `start`, with the given window and controller.
    pub fn new(
        id: MemberId,
        addr: SocketAddr,
        start: u64,
        window: u64,
        rtt: RttEstimator,
        cc: Box<dyn CongestionController>,
        now: Instant,
    ) -> Self {
        Member {
            id,
            addr,
            start,
            cumulative: start,
            sacked: RangeSet::new(),
            sacked_bytes: 0,
            lost: RangeSet::new(),
            lost_bytes: 0,
            repairs: VecDeque::new(),
            rtt,
            cwnd_avg: cc.cwnd(),
            cc,
            recovery_point: None,
            rack_sent_at: None,
            rack_rtt: Duration::ZERO,
            window_end: start.saturating_add(window),
            largest_ack_pn: None,
            last_progress: now,
            rto_deadline: None,
            rack_deadline: None,
            rto_backoffs: 0,
            acks: 0,
            ack_schedule: AckFrequencyFrame {
                every: 2,
                min_interval_us: 0,
            },
            recovery_episodes: 0,
            rtos: 0,
            repaired_bytes: 0,
        }
    }

    /// Its figures now, for displays and reports.
    pub fn snapshot(&self) -> MemberSnapshot {
        MemberSnapshot {
            id: self.id,
            addr: self.addr,
            start: self.start,
            cumulative: self.cumulative,
            cwnd: self.cc.cwnd(),
            srtt: self.rtt.srtt(),
            slow_start: self.cc.in_slow_start(),
            in_recovery: self.recovery_point.is_some(),
            acks: self.acks,
            recovery_episodes: self.recovery_episodes,
            rtos: self.rtos,
            repaired_bytes: self.repaired_bytes,
        }
    }

    /// Bytes in flight to this member (RFC 6675 "pipe"): sent, neither
    /// acknowledged nor SACKed nor deemed lost.
    pub fn in_flight(&self, snd_nxt: u64) -> u64 {
        snd_nxt
            .saturating_sub(self.cumulative)
            .saturating_sub(self.sacked_bytes + self.lost_bytes)
    }

    /// The highest offset new data may reach for this member: its
    /// congestion window beyond what it holds in flight, capped by its
    /// receive window. Independent of `SND.NXT`, so a multicast send leaves
    /// every member's edge unchanged.
    pub fn send_edge(&self) -> u64 {
        (self.pipe_base() + self.cc.cwnd()).min(self.window_end)
    }

    /// Where this member's congestion window starts: `SND.NXT` minus its
    /// bytes in flight, i.e. its cumulative ACK plus what it SACKed or lost.
    pub fn pipe_base(&self) -> u64 {
        self.cumulative + self.sacked_bytes + self.lost_bytes
    }

    /// Folds the current congestion window into [`Member::cwnd_avg`]
    /// (weight 1/8 per update) and returns the new average.
    pub fn smooth_cwnd(&mut self) -> u64 {
        self.cwnd_avg = (7 * self.cwnd_avg + self.cc.cwnd()) / 8;
        self.cwnd_avg
    }

    /// Earliest of its timers.
    pub fn next_timer(&self) -> Option<Instant> {
        earliest(self.rto_deadline, self.rack_deadline)
    }

    /// True if `range` is still lost for this member.
    pub fn is_lost(&self, range: Range<u64>) -> bool {
        self.lost.contains_range(range)
    }

    /// Bytes of `range` it has neither acknowledged nor SACKed (lost, or
    /// repaired and not yet confirmed).
    /// Only bytes below its highest SACKed offset count: beyond it,
    /// segments may simply be still on their way.
    pub fn unacked_bytes(&self, range: Range<u64>) -> u64 {
        let start = range.start.max(self.cumulative);
        let end = range.end.min(self.sacked.max_end().unwrap_or(start));
        if start >= end {
            return 0;
        }
        (end - start) - self.sacked.overlap_len(start..end)
    }

    /// A repair of `range` was sent (by unicast to it, or by multicast).
    pub fn on_repair_sent(&mut self, range: Range<u64>, now: Instant) {
        let removed = self.lost.remove(range.clone());
        self.lost_bytes -= removed;
        self.repaired_bytes += removed;
        if removed > 0 {
            if self.repairs.len() == MAX_REPAIRS_IN_FLIGHT {
                self.repairs.pop_front();
            }
            self.repairs.push_back((range, now));
        }
    }

    /// A member admitted at offset `cumulative` after data up to `snd_nxt`
    /// went out (bulk join while the start is still buffered): every
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

    fn add_lost(&mut self, range: Range<u64>) -> bool {
        let added = self.lost.insert(range);
        self.lost_bytes += added;
        added > 0
    }

    /// Processes an ACK already validated against `SND.NXT`.
    pub fn on_ack(
        &mut self,
        now: Instant,
        ack: &AckFrame,
        log: &SegmentLog,
        snd_nxt: u64,
        mss: u64,
        cwnd_limited: bool,
    ) -> MemberAck {
        let mut out = MemberAck::default();
        self.acks += 1;
        let mut delivered_latest: Option<Instant> = None;
        let mut newly_acked = 0u64;
        // Whole segments only (segment boundaries never change).
        let mut cum = ack.cumulative;
        if let Some(seg) = log.containing(cum).filter(|s| s.start < cum) {
            cum = seg.start;
            out.clipped = true;
        }
        let flight_before = self.in_flight(snd_nxt);
        if cum > self.cumulative {
            out.progressed = true;
            let newly = self.cumulative..cum;
            delivered_latest = delivered_latest.max(log.latest_first_sent_within(newly.clone()));
            let already = self.sacked.overlap_len(newly.clone());
            let was_lost = self.lost.remove(newly.clone());
            self.lost_bytes -= was_lost;
            newly_acked += (cum - self.cumulative) - already;
            self.sacked.remove_below(cum);
            self.sacked_bytes -= already;
            self.cumulative = cum;
            self.last_progress = now;
            self.rto_backoffs = 0;
            // RFC 7323 §4: RTT from the timestamp echo of new data.
            // RFC 9002 §5.3: the reported delay, at most what this member
            // was allowed to hold an ACK (its interval plus the timer).
            let max_delay = Duration::from_micros(u64::from(self.ack_schedule.min_interval_us))
                + fanout_core::ack_policy::DEFAULT_MAX_ACK_DELAY;
            self.rtt.on_sample_with_ack_delay(
                since_wire_timestamp(now, ack.timestamp_echo),
                Duration::from_micros(ack.ack_delay_us).min(max_delay),
            );
        }
        for r in &ack.sack {
            let Some(r) = clip_to_segments(log, r.start.max(self.cumulative)..r.end.min(snd_nxt))
            else {
                continue;
            };
            if self.sacked.range_count() >= MAX_MEMBER_SACK_RANGES
                && !self.sacked.contains_range(r.clone())
            {
                out.sack_capped = true;
                continue;
            }
            for gap in self.sacked.gaps_in(r.clone()) {
                delivered_latest = delivered_latest.max(log.latest_first_sent_within(gap.clone()));
                let was_lost = self.lost.remove(gap.clone());
                self.lost_bytes -= was_lost;
                newly_acked += gap.end - gap.start;
            }
            self.sacked_bytes += self.sacked.insert(r);
        }
        // Repairs delivered count as the latest evidence too (RFC 8985 §6.1:
        // only if delivered no sooner than min_rtt after being sent).
        let min_rtt = self.rtt.min_rtt().min(self.rtt.srtt());
        let (cum, sacked) = (self.cumulative, &self.sacked);
        // (Guarded: `retain` costs even on an empty deque, every ACK.)
        if !self.repairs.is_empty() {
            self.repairs.retain(|(r, t)| {
                let done = r.end <= cum || sacked.contains_range(r.clone());
                if done && now - *t >= min_rtt {
                    delivered_latest = delivered_latest.max(Some(*t));
                }
                !done
            });
        }
        if let Some(t) = delivered_latest {
            if self.rack_sent_at.is_none_or(|r| t >= r) {
                self.rack_sent_at = Some(t);
                self.rack_rtt = now - t;
            }
        }
        if let Some(rp) = self.recovery_point {
            if self.cumulative >= rp {
                self.recovery_point = None;
                self.cc.on_recovery_end(now);
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
        if out.progressed {
            self.rto_deadline = None;
        }
        self.arm_rto(now, snd_nxt);
        out
    }

    /// RACK (RFC 8985 §6.2) against the shared log: a hole segment is lost
    /// once something sent after it was delivered and `rack_rtt + reo_wnd`
    /// passed since it was sent. Returns the newly lost ranges.
    pub fn detect_losses(
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
        // RFC 8985 §6.2: reo_wnd = min_rtt/4, or 0 once DupThresh segments
        // were SACKed above the hole.
        let reo_wnd = if self.sacked_bytes >= 3 * mss {
            Duration::ZERO
        } else {
            self.rtt.min_rtt().min(self.rtt.srtt()) / 4
        };
        let top = self
            .sacked
            .max_end()
            .unwrap_or(self.cumulative)
            .min(snd_nxt);
        let mut timer: Option<Instant> = None;
        let holes = self.sacked.gaps_in(self.cumulative..top);
        'holes: for hole in holes {
            for seg in log.overlapping(hole.clone()) {
                let r = seg.start..seg.end;
                if self.lost.contains_range(r.clone()) || self.repairs.iter().any(|(x, _)| *x == r)
                {
                    continue;
                }
                if seg.sent_at >= rack_sent_at {
                    if seg.first_sent_at < rack_sent_at {
                        // Multicast again since: that copy may still be
                        // on its way; later holes may be overdue.
                        continue;
                    }
                    break 'holes;
                }
                let due = seg.sent_at + self.rack_rtt + reo_wnd;
                if now >= due {
                    if self.add_lost(r.clone()) {
                        newly.push(r);
                    }
                } else {
                    timer = Some(timer.map_or(due, |t| t.min(due)));
                    break 'holes;
                }
            }
        }
        // Lost repairs: sent before the latest delivery and overdue.
        let mut lost_repairs = Vec::new();
        self.repairs.retain(|(r, t)| {
            let overdue = *t < rack_sent_at && now >= *t + self.rack_rtt + reo_wnd;
            if overdue {
                lost_repairs.push(r.clone());
            }
            !overdue
        });
        for r in lost_repairs {
            if self.add_lost(r.clone()) {
                newly.push(r);
            }
        }
        self.rack_deadline = timer;
        if !newly.is_empty() && self.recovery_point.is_none() {
            // One congestion response per episode (RFC 6582 §3.2).
            self.recovery_point = Some(snd_nxt);
            self.recovery_episodes += 1;
            self.cc.on_congestion_event(now, flight_before);
        }
        newly
    }

    /// Arms the RTO if data is outstanding and it is not armed (RFC 6298 §5.1).
    pub fn arm_rto(&mut self, now: Instant, snd_nxt: u64) {
        if self.cumulative >= snd_nxt {
            self.rto_deadline = None;
        } else if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
    }

    /// RFC 6298 §5.4–5.6 / RFC 5681 §3.1: every outstanding, un-SACKed
    /// range is deemed lost; the timer backs off. Returns the newly lost ranges.
    pub fn on_rto(&mut self, now: Instant, snd_nxt: u64, log: &SegmentLog) -> Vec<Range<u64>> {
        self.rto_deadline = None;
        if self.cumulative >= snd_nxt {
            return Vec::new();
        }
        self.rto_backoffs += 1;
        self.rtos += 1;
        let flight = self.in_flight(snd_nxt);
        self.rtt.on_timeout();
        self.cc.on_retransmission_timeout(now, flight);
        self.recovery_point = Some(snd_nxt);
        self.repairs.clear();
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

/// The earlier of two optional deadlines (on the per-ACK path: plainer
/// than chaining iterators, which the compiler does not fold as well).
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
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
mod tests {
    use super::*;
    use crate::config::TransportConfig;
    use crate::sender::wire_timestamp;

    const SEG: u64 = 1000;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn ack(cumulative: u64, echo_ms: u64, sack: Vec<Range<u64>>) -> AckFrame {
        AckFrame {
            cumulative,
            window: 1 << 20,
            timestamp_echo: wire_timestamp(at(echo_ms)),
            ack_delay_us: 0,
            sack,
        }
    }

    /// RACK dates a delivery by the *first* transmission of a segment
    /// multicast again for other members: this member may have received
    /// the original, and dating it by the later copy declared the member's
    /// own repairs still in flight lost (a repeat repair each time).
    #[test]
    fn a_segment_multicast_again_for_others_does_not_date_this_members_delivery() {
        let t = TransportConfig::default();
        let mut log = SegmentLog::default();
        for k in 0..20 {
            log.push(k * SEG..(k + 1) * SEG, at(k));
        }
        let snd_nxt = 20 * SEG;
        let mut m = Member::new(
            MemberId(1),
            "10.0.0.2:7000".parse().unwrap(),
            0,
            1 << 20,
            RttEstimator::new(t.rto),
            t.cc.build(SEG),
            at(0),
        );
        // Segments 2 and 5 lost; 0-1, 3-4, 6-7 arrived.
        let a = ack(2 * SEG, 1, vec![6 * SEG..8 * SEG, 3 * SEG..5 * SEG]);
        let out = m.on_ack(at(12), &a, &log, snd_nxt, SEG, true);
        assert_eq!(out.newly_lost, vec![2 * SEG..3 * SEG, 5 * SEG..6 * SEG]);
        m.on_repair_sent(2 * SEG..3 * SEG, at(13));
        m.on_repair_sent(5 * SEG..6 * SEG, at(14));
        // Segment 9 goes out again at 15 ms, for another member.
        log.on_multicast_repair(9 * SEG, at(15));
        // The repair of 2 and the originals of 8-12 arrived; the repair of
        // 5 (sent at 14 ms) is still on its way.
        let a = ack(5 * SEG, 13, vec![6 * SEG..13 * SEG]);
        let out = m.on_ack(at(17), &a, &log, snd_nxt, SEG, true);
        assert!(out.newly_lost.is_empty(), "{:?}", out.newly_lost);
        assert!(!m.is_lost(5 * SEG..6 * SEG));
    }
}
