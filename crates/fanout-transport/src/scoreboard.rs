//! Sender-side record of sent segments for one receiver: what is in flight,
//! SACKed or lost (RFC 6675 scoreboard on byte offsets), and time-based loss
//! detection (RACK, RFC 8985).
//!
//! Costs are amortised O(log n) per segment event: every segment enters and
//! leaves each state once per transmission, and SACK ranges are clipped
//! against what is already known before any segment is visited, so a peer
//! repeating the same SACK cannot make the sender walk its window.

use fanout_core::time::Instant;
use fanout_core::RangeSet;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;
use std::time::Duration;

/// Where a sent segment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    /// Sent, neither acknowledged nor deemed lost.
    InFlight,
    /// Selectively acknowledged above the cumulative ACK.
    Sacked,
    /// Deemed lost, waiting for retransmission.
    Lost,
}

/// One sent segment; its boundaries never change.
#[derive(Debug, Clone)]
pub struct Segment {
    /// One past the last offset.
    pub end: u64,
    /// Time of the latest transmission.
    pub sent_at: Instant,
    /// Number of transmissions (1 = original only).
    pub transmissions: u32,
    /// Current state.
    pub state: SegmentState,
}

/// What one ACK changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Bytes newly acknowledged, cumulatively or by SACK.
    pub newly_acked_bytes: u64,
    /// True if the cumulative ACK advanced.
    pub cumulative_advanced: bool,
    /// True if the peer's cumulative point fell strictly inside a segment
    /// and was clipped to that segment's start (never sent by a correct
    /// receiver: segment boundaries never change).
    pub cumulative_clipped: bool,
}

/// The per-receiver scoreboard.
#[derive(Debug, Default)]
pub struct Scoreboard {
    segments: BTreeMap<u64, Segment>,
    cumulative: u64,
    sacked: RangeSet,
    lost: BTreeSet<u64>,
    /// (sent_at, start) in transmission order; stale entries skipped lazily.
    send_order: VecDeque<(Instant, u64)>,
    in_flight_bytes: u64,
    sacked_bytes: u64,
    lost_bytes: u64,
    /// RACK.xmit_ts: latest transmission time among delivered segments.
    rack_sent_at: Option<Instant>,
    /// RACK.rtt: RTT of that delivery.
    rack_rtt: Duration,
}

impl Scoreboard {
    /// An empty scoreboard.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every byte below this was cumulatively acknowledged.
    pub fn cumulative(&self) -> u64 {
        self.cumulative
    }

    /// Bytes in flight (RFC 6675 "pipe": sent, not SACKed, not deemed lost).
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    /// Bytes SACKed above the cumulative ACK.
    pub fn sacked_bytes(&self) -> u64 {
        self.sacked_bytes
    }

    /// Bytes deemed lost and not yet retransmitted.
    pub fn lost_bytes(&self) -> u64 {
        self.lost_bytes
    }

    /// True if nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// The oldest lost segment awaiting retransmission.
    pub fn first_lost(&self) -> Option<Range<u64>> {
        let start = *self.lost.first()?;
        self.segments.get(&start).map(|s| start..s.end)
    }

    /// Earliest transmission time among segments in flight (for the RTO).
    pub fn oldest_in_flight_sent_at(&self) -> Option<Instant> {
        self.send_order
            .iter()
            .find(|(t, s)| self.is_live(*t, *s))
            .map(|(t, _)| *t)
    }

    fn is_live(&self, t: Instant, start: u64) -> bool {
        self.segments
            .get(&start)
            .is_some_and(|s| s.sent_at == t && s.state == SegmentState::InFlight)
    }

    /// Records the first transmission of `range`.
    pub fn on_sent(&mut self, now: Instant, range: Range<u64>) {
        self.in_flight_bytes += range.end - range.start;
        self.segments.insert(
            range.start,
            Segment {
                end: range.end,
                sent_at: now,
                transmissions: 1,
                state: SegmentState::InFlight,
            },
        );
        self.send_order.push_back((now, range.start));
    }

    /// Records a retransmission of the lost segment starting at `start`.
    pub fn on_retransmitted(&mut self, now: Instant, start: u64) {
        let Some(seg) = self.segments.get_mut(&start) else {
            return;
        };
        if seg.state != SegmentState::Lost {
            return;
        }
        let len = seg.end - start;
        seg.state = SegmentState::InFlight;
        seg.sent_at = now;
        seg.transmissions += 1;
        self.lost.remove(&start);
        self.lost_bytes -= len;
        self.in_flight_bytes += len;
        self.send_order.push_back((now, start));
    }

    fn leave_state(&mut self, start: u64, seg: &Segment) {
        let len = seg.end - start;
        match seg.state {
            SegmentState::InFlight => self.in_flight_bytes -= len,
            SegmentState::Sacked => self.sacked_bytes -= len,
            SegmentState::Lost => {
                self.lost_bytes -= len;
                self.lost.remove(&start);
            }
        }
    }

    fn note_delivery(&mut self, now: Instant, seg: &Segment, min_rtt: Duration) {
        // RFC 8985 §6.1: a retransmitted segment delivered sooner than
        // min_rtt after its retransmission was delivered by an earlier copy;
        // its latest send time is then not evidence.
        let rtt = now - seg.sent_at;
        if seg.transmissions > 1 && rtt < min_rtt {
            return;
        }
        if self.rack_sent_at.is_none_or(|t| seg.sent_at >= t) {
            self.rack_sent_at = Some(seg.sent_at);
            self.rack_rtt = rtt;
        }
    }

    /// Applies a cumulative ACK and SACK ranges (already validated against
    /// what was sent). `min_rtt` disambiguates retransmissions (RACK).
    pub fn on_ack(
        &mut self,
        now: Instant,
        cumulative: u64,
        sack: &[Range<u64>],
        min_rtt: Duration,
    ) -> AckOutcome {
        let mut out = AckOutcome::default();
        // Acknowledge whole segments only: the send buffer is released up to
        // the cumulative point, and a retransmission needs its whole segment.
        let mut cumulative = cumulative;
        if let Some((&start, seg)) = self.segments.range(..cumulative).next_back() {
            if cumulative < seg.end && start < cumulative {
                cumulative = start;
                out.cumulative_clipped = true;
            }
        }
        if cumulative > self.cumulative {
            out.cumulative_advanced = true;
            self.cumulative = cumulative;
            while let Some(entry) = self.segments.first_entry() {
                if entry.get().end > cumulative {
                    break;
                }
                let (start, seg) = entry.remove_entry();
                if seg.state != SegmentState::Sacked {
                    out.newly_acked_bytes += seg.end - start;
                    self.note_delivery(now, &seg, min_rtt);
                }
                self.leave_state(start, &seg);
            }
            self.sacked.remove_below(cumulative);
        }
        for r in sack {
            let r = r.start.max(self.cumulative)..r.end;
            // Only the parts not yet known cost work.
            for gap in self.sacked.gaps_in(r.clone()) {
                let first = self
                    .segments
                    .range(..gap.start)
                    .next_back()
                    .filter(|(_, s)| s.end > gap.start)
                    .map_or(gap.start, |(&k, _)| k);
                let starts: Vec<u64> = self
                    .segments
                    .range(first..gap.end)
                    .filter(|(&k, s)| k >= r.start && s.end <= r.end)
                    .map(|(&k, _)| k)
                    .collect();
                for start in starts {
                    let Some(seg) = self.segments.get(&start).cloned() else {
                        continue;
                    };
                    if seg.state == SegmentState::Sacked {
                        continue;
                    }
                    self.leave_state(start, &seg);
                    self.note_delivery(now, &seg, min_rtt);
                    out.newly_acked_bytes += seg.end - start;
                    self.sacked_bytes += seg.end - start;
                    if let Some(s) = self.segments.get_mut(&start) {
                        s.state = SegmentState::Sacked;
                    }
                }
            }
            self.sacked.insert(r);
        }
        out
    }

    /// RACK loss detection (RFC 8985 §6.2): a segment in flight is lost once
    /// a segment sent after it was delivered and `rack_rtt + reo_wnd` has
    /// passed since it was sent. Returns the bytes newly deemed lost and the
    /// instant at which the next segment would be (RACK reorder timer).
    pub fn detect_losses(&mut self, now: Instant, reo_wnd: Duration) -> (u64, Option<Instant>) {
        let Some(rack_sent_at) = self.rack_sent_at else {
            return (0, None);
        };
        let mut newly_lost = 0;
        while let Some(&(t, start)) = self.send_order.front() {
            if !self.is_live(t, start) {
                self.send_order.pop_front();
                continue;
            }
            if t >= rack_sent_at {
                break;
            }
            let deadline = t + self.rack_rtt + reo_wnd;
            if now < deadline {
                return (newly_lost, Some(deadline));
            }
            self.send_order.pop_front();
            newly_lost += self.mark_lost(start);
        }
        (newly_lost, None)
    }

    fn mark_lost(&mut self, start: u64) -> u64 {
        let Some(seg) = self.segments.get_mut(&start) else {
            return 0;
        };
        if seg.state != SegmentState::InFlight {
            return 0;
        }
        let len = seg.end - start;
        seg.state = SegmentState::Lost;
        self.in_flight_bytes -= len;
        self.lost_bytes += len;
        self.lost.insert(start);
        len
    }

    /// RFC 6298 §5.4 / RFC 5681 §3.1: on RTO every segment in flight is
    /// deemed lost. Returns the bytes marked.
    pub fn on_retransmission_timeout(&mut self) -> u64 {
        let starts: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| s.state == SegmentState::InFlight)
            .map(|(&k, _)| k)
            .collect();
        self.send_order.clear();
        starts.into_iter().map(|s| self.mark_lost(s)).sum()
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one SACK block is the common case
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(ms: u64) -> Instant {
        Instant::ZERO + MS * ms as u32
    }

    fn sent(n: u64) -> Scoreboard {
        let mut s = Scoreboard::new();
        for i in 0..n {
            s.on_sent(at(i), i * 100..(i + 1) * 100);
        }
        s
    }

    #[test]
    fn cumulative_ack_releases_in_order() {
        let mut s = sent(4);
        assert_eq!(s.in_flight_bytes(), 400);
        let o = s.on_ack(at(50), 200, &[], MS);
        assert_eq!(
            o,
            AckOutcome {
                newly_acked_bytes: 200,
                cumulative_advanced: true,
                cumulative_clipped: false,
            }
        );
        assert_eq!(s.in_flight_bytes(), 200);
        assert_eq!(s.detect_losses(at(50), Duration::ZERO), (0, None));
    }

    #[test]
    fn sack_then_rack_marks_the_hole_lost() {
        let mut s = sent(5);
        // Segment 1 (100..200) lost; 2..5 SACKed.
        let o = s.on_ack(at(60), 100, &[200..500], MS);
        assert_eq!(o.newly_acked_bytes, 400);
        assert_eq!(s.sacked_bytes(), 300);
        assert_eq!(s.in_flight_bytes(), 100);
        // rack_rtt = 60 - 4 = 56 ms; seg 1 sent at 1 ms: lost at 57 + reo.
        let (lost, timer) = s.detect_losses(at(60), Duration::ZERO);
        assert_eq!((lost, timer), (100, None));
        assert_eq!(s.first_lost(), Some(100..200));
        s.on_retransmitted(at(61), 100);
        assert_eq!(s.first_lost(), None);
        assert_eq!(s.in_flight_bytes(), 100);
        let o = s.on_ack(at(120), 500, &[], MS);
        assert_eq!(o.newly_acked_bytes, 100);
        assert!(s.is_empty());
        assert_eq!(
            (s.in_flight_bytes(), s.sacked_bytes(), s.lost_bytes()),
            (0, 0, 0)
        );
    }

    #[test]
    fn reorder_window_defers_loss() {
        let mut s = sent(3);
        s.on_ack(at(50), 0, &[200..300], MS);
        let (lost, timer) = s.detect_losses(at(50), 10 * MS);
        assert_eq!(lost, 0);
        // seg 0 sent at 0, rack_rtt 48 ms, reo 10 ms.
        assert_eq!(timer, Some(at(58)));
        // seg 0 is due at 58 ms, seg 1 (sent at 1 ms) at 59 ms.
        assert_eq!(s.detect_losses(at(58), 10 * MS), (100, Some(at(59))));
        assert_eq!(s.detect_losses(at(59), 10 * MS), (100, None));
    }

    #[test]
    fn repeated_sack_is_idempotent() {
        let mut s = sent(10);
        let first = s.on_ack(at(30), 0, &[300..600], MS);
        assert_eq!(first.newly_acked_bytes, 300);
        for _ in 0..100 {
            assert_eq!(s.on_ack(at(31), 0, &[300..600], MS).newly_acked_bytes, 0);
        }
        assert_eq!(s.sacked_bytes(), 300);
    }

    #[test]
    fn cumulative_inside_a_segment_is_clipped_to_its_start() {
        let mut s = sent(3);
        let o = s.on_ack(at(10), 150, &[], MS);
        assert!(o.cumulative_clipped);
        assert_eq!(s.cumulative(), 100);
        assert_eq!(o.newly_acked_bytes, 100);
        assert_eq!(s.in_flight_bytes(), 200);
    }

    #[test]
    fn rto_marks_everything_in_flight() {
        let mut s = sent(3);
        s.on_ack(at(10), 0, &[100..200], MS);
        assert_eq!(s.on_retransmission_timeout(), 200);
        assert_eq!(s.in_flight_bytes(), 0);
        assert_eq!(s.first_lost(), Some(0..100));
    }
}
