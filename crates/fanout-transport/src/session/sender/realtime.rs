//! Real-time sending ([`crate::realtime`]): messages through the pushed
//! queue into the send buffer one at a time, and SKIP instead of a repair
//! that is stale (TCP-CM §3.2) or would come too late (TCP-RTM).

use super::SessionSender;
use crate::packet::PacketBuilder;
use crate::realtime::deadline::forward_delay;
use crate::realtime::{
    PushedQueue, QueueLimit, QueueStats, RealtimeSend, SentMessages, ARRIVAL_MARGIN,
};
use crate::session::MemberId;
use crate::wire::{DataFrame, Frame, SkipFrame, WireTimestamp};
use fanout_core::time::Instant;
use fanout_core::Transmit;
use std::net::SocketAddr;
use std::ops::Range;

/// A real-time session's queue and the messages it sent.
#[derive(Debug)]
pub(super) struct RealtimeOut {
    limit: QueueLimit,
    queue: PushedQueue,
    sent: SentMessages,
    /// Messages longer than the whole send buffer, dropped.
    too_long: u64,
    /// The application finished: the stream ends once the queue is empty.
    finishing: bool,
    /// DATA datagrams name their message's deadline (room kept for it).
    names_deadlines: bool,
    /// A repair to send once more, next.
    second_copy: Option<SecondCopy>,
    /// When the application last wrote a message.
    last_write: Option<Instant>,
    /// The smoothed time between its writes (1/8 gain, as RFC 6298's
    /// SRTT): when the next new data is due.
    write_gap: std::time::Duration,
}

/// A repair that goes twice: its first copy was sent, and an earlier
/// repair of it was lost.
#[derive(Debug)]
struct SecondCopy {
    range: Range<u64>,
    to: SocketAddr,
    /// The members it is for.
    members: Vec<MemberId>,
}

impl RealtimeOut {
    pub(super) fn new(mode: RealtimeSend, max_datagram: usize) -> Self {
        let bytes = match mode.limit {
            QueueLimit::Bytes(n) => n,
            // Until a rate is known: one datagram.
            QueueLimit::Time(_) => max_datagram,
        };
        RealtimeOut {
            limit: mode.limit,
            queue: PushedQueue::new(mode.order, bytes),
            sent: SentMessages::default(),
            too_long: 0,
            finishing: false,
            names_deadlines: mode.deadlines,
            second_copy: None,
            last_write: None,
            write_gap: std::time::Duration::ZERO,
        }
    }

    /// The application writes no more messages.
    pub(super) fn finish(&mut self) {
        self.finishing = true;
    }
}

/// Counters of a real-time session's sending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RealtimeStats {
    /// The pushed queue's.
    pub queue: QueueStats,
    /// Messages dropped because they are longer than the send buffer.
    pub too_long: u64,
    /// Messages queued now, and their bytes.
    pub queued_messages: usize,
    /// Bytes of the messages queued now.
    pub queued_bytes: usize,
}

impl SessionSender {
    /// Writes one message of a real-time session ([`crate::realtime`]):
    /// it never blocks — the pushed queue drops its oldest messages to make
    /// room. Past `deadline` (if any) the message is of no use: it is
    /// dropped from the queue, and a lost segment of it is not repaired
    /// once a repair could no longer arrive before it (TCP-RTM); without
    /// a deadline a lost segment is never repaired (TCP-CM). False if the
    /// session is not real-time or is closed (nothing queued).
    pub fn send_message(&mut self, now: Instant, msg: &[u8], deadline: Option<Instant>) -> bool {
        if self.closed.is_some() {
            return false;
        }
        let Some(rt) = self.realtime.as_mut().filter(|rt| !rt.finishing) else {
            return false;
        };
        if !msg.is_empty() {
            rt.queue.push(now, msg.to_vec(), deadline);
            if let Some(last) = rt.last_write {
                let gap = now.saturating_duration_since(last);
                rt.write_gap = if rt.write_gap.is_zero() {
                    gap
                } else {
                    (rt.write_gap * 7 + gap) / 8
                };
            }
            rt.last_write = Some(now);
        }
        true
    }

    /// The real-time queue's counters (`None` unless real-time).
    pub fn realtime_stats(&self) -> Option<RealtimeStats> {
        let rt = self.realtime.as_ref()?;
        Some(RealtimeStats {
            queue: *rt.queue.stats(),
            too_long: rt.too_long,
            queued_messages: rt.queue.len(),
            queued_bytes: rt.queue.bytes(),
        })
    }

    /// Moves the next queued message into the send buffer once everything
    /// before it was sent, if the buffer has room for it and its first
    /// segment fits under the session's send limit now:
    /// else it waits in the queue, which keeps dropping its oldest and
    /// expires what could no longer arrive in time. A message moved in
    /// while the window is shut would wait there unchecked and go out
    /// late. Returns the first segment's end if the limit holds it back.
    pub(super) fn feed_realtime(&mut self, now: Instant) -> Option<u64> {
        // Called before every new segment: nothing to do (and nothing to
        // compute) unless real-time and everything written was sent.
        if self.realtime.is_none()
            || self.snd_nxt < self.buffer.end()
            || self.buffer.fin().is_some()
        {
            return None;
        }
        // The limit only when a message waits for it.
        let limit = match self.realtime.as_ref() {
            Some(rt) if !rt.queue.is_empty() => self.send_limit(),
            _ => u64::MAX,
        };
        let rate = self.pacer.rate_bytes_per_sec();
        let max_datagram = self.config.transport.max_datagram;
        // Before every member acknowledged data, the session RTT is only
        // the initial guess (a third of the initial RTO): not a reason to
        // expire anything.
        let delivery = if self.bytes_acked_by_all() > 0 {
            self.delivery_time()
        } else {
            std::time::Duration::ZERO
        };
        let mss = self.mss;
        let rt = self.realtime.as_mut()?;
        if let QueueLimit::Time(d) = rt.limit {
            let bytes = (rate as f64 * d.as_secs_f64()) as usize;
            rt.queue.set_limit_bytes(now, bytes.max(max_datagram));
        }
        // A message that would arrive after its deadline (sent now, it
        // takes `delivery_time`) is of no use:
        // it expires in the queue, leaving the rate to messages that can
        // still make it. Else, when the rate falls below the stream's,
        // every message would be sent just in time to be late.
        let arrival = now + delivery;
        while let Some(len) = rt.queue.next_len(arrival) {
            if len > self.buffer.capacity() {
                rt.queue.take(arrival);
                rt.too_long += 1;
                continue;
            }
            if len > self.buffer.free() {
                return None;
            }
            let start = self.buffer.end();
            let first_end = start + len.min(mss.max(1) as usize) as u64;
            if first_end > limit {
                return Some(first_end);
            }
            let m = rt.queue.take(arrival).expect("a next message");
            if self.buffer.write_message(&m.bytes) {
                rt.sent.push(start..start + len as u64, m.deadline);
            }
            return None;
        }
        if rt.finishing {
            self.buffer.finish();
        }
        None
    }

    /// How long a datagram sent now takes to be read by a receiver, as
    /// its deadlines count it: the way there of the member whose round
    /// trip is the session's ([`forward_delay`]; half the session RTT
    /// before its first sample) and [`ARRIVAL_MARGIN`].
    fn delivery_time(&self) -> std::time::Duration {
        let way = self
            .session_rtt_member()
            .map(|m| m.recovery().rtt())
            .filter(|rtt| rtt.has_sample())
            .map_or_else(|| self.session_rtt() / 2, forward_delay);
        way + ARRIVAL_MARGIN
    }

    /// The deadline to name in a DATA datagram starting at stream
    /// `offset`: its message's, if it has one and the session names them.
    pub(super) fn message_deadline(&self, offset: u64) -> Option<Instant> {
        let rt = self.realtime.as_ref().filter(|rt| rt.names_deadlines)?;
        rt.sent.deadline_at(offset)
    }

    /// Forgets sent messages below `offset` (released).
    pub(super) fn realtime_release(&mut self, offset: u64) {
        if let Some(rt) = self.realtime.as_mut() {
            rt.sent.release_below(offset);
        }
    }

    /// If the lost `range` is not worth repairing at `now`, what to send
    /// instead ([`Skip`]). A lost FIN alone is repaired as usual.
    pub(super) fn stale_skip(&self, now: Instant, range: &Range<u64>) -> Option<Skip> {
        let rt = self.realtime.as_ref()?;
        let data = range.start..range.end.min(self.buffer.end());
        if data.is_empty() {
            return None;
        }
        if !rt.sent.is_stale(&data, now, self.delivery_time()) {
            return None;
        }
        let (skipped, ends_message) = rt.sent.widen(data.clone(), self.snd_nxt);
        let fin = self.buffer.fin() == Some(data.end) && range.end > data.end;
        Some(Skip {
            range: skipped,
            ends_message,
            fin,
        })
    }

    /// After a repair of `range` went to `to` for `members` at `now`: if
    /// a repair of it to one of them was lost before (a path that loses
    /// often) and the loss of this one could not be followed by another
    /// repair in time — it is known a round trip after the next new data
    /// is sent at the soonest, and a repair then takes
    /// [`Self::delivery_time`] — the same
    /// bytes go once more, next ([`Self::next_second_copy`]): a message
    /// then misses its deadline only if both copies are lost. A repair
    /// lost once is rare at low loss, so the extra bytes stay a small
    /// share of the repairs (those of the losses that were lost twice).
    pub(super) fn plan_second_copy(
        &mut self,
        now: Instant,
        range: &Range<u64>,
        to: SocketAddr,
        members: Vec<MemberId>,
    ) {
        let Some(rt) = self.realtime.as_ref() else {
            return;
        };
        let lost_before = members.iter().any(|&id| {
            self.members
                .get(id)
                .is_some_and(|m| m.recovery().repair_was_lost(range.clone()))
        });
        if !lost_before {
            return;
        }
        let data = range.start..range.end.min(self.buffer.end());
        // RACK knows a repair lost once something sent after it was
        // delivered: a round trip after the next new data goes out — at
        // once if some waits, else at the application's next write.
        let next_new = if self.snd_nxt < self.buffer.end() || !rt.queue.is_empty() {
            now
        } else {
            rt.last_write.map_or(now, |t| (t + rt.write_gap).max(now))
        };
        let rtt = self
            .session_rtt_member()
            .map(|m| m.recovery().srtt())
            .unwrap_or_else(|| self.session_rtt());
        let known_lost = next_new + rtt;
        if data.is_empty() || !rt.sent.is_stale(&data, known_lost, self.delivery_time()) {
            return;
        }
        if let Some(rt) = self.realtime.as_mut() {
            rt.second_copy = Some(SecondCopy {
                range: range.clone(),
                to,
                members,
            });
        }
    }

    /// The second copy [`Self::plan_second_copy`] planned, if a member it
    /// is for still lacks the bytes and they can still arrive in time.
    pub(super) fn next_second_copy(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Transmit> {
        let copy = self.realtime.as_mut()?.second_copy.take()?;
        let lacking = copy.members.iter().any(|&id| {
            self.members
                .get(id)
                .is_some_and(|m| m.recovery().unacked_bytes(copy.range.clone()) > 0)
        });
        if !lacking || self.stale_skip(now, &copy.range).is_some() {
            return None;
        }
        let len = copy.range.end.min(self.buffer.end()) - copy.range.start;
        self.stats.second_copies += 1;
        self.stats.repair_bytes += len;
        Some(self.write_repair(now, copy.range, copy.to, out))
    }

    /// Writes `skip` to `to` at `now`.
    pub(super) fn write_skip(
        &mut self,
        now: Instant,
        skip: Skip,
        to: SocketAddr,
        out: &mut Vec<u8>,
    ) -> Transmit {
        let multicast = to.ip().is_multicast();
        // A receiver may now acknowledge the skipped bytes it never got.
        self.log.on_sent_again(skip.range.clone(), now);
        let mut p = PacketBuilder::new(out, &mut self.numbers, self.session_id, multicast);
        p.frame(&Frame::Skip(SkipFrame {
            offset: skip.range.start,
            len: skip.range.end - skip.range.start,
            ends_message: skip.ends_message,
        }));
        if skip.fin {
            p.frame(&Frame::Data(DataFrame {
                offset: skip.range.end,
                timestamp: WireTimestamp::at(now),
                fin: true,
                message_end: false,
                payload: &[],
            }));
        }
        p.finish();
        self.stats.datagrams_sent += 1;
        self.stats.skips_sent += 1;
        self.stats.skipped_bytes += skip.range.end - skip.range.start;
        Transmit { destination: to }
    }
}

/// What a real-time sender sends instead of a stale repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Skip {
    /// The whole messages the lost bytes touch, as far as sent.
    pub(super) range: Range<u64>,
    /// A message ends at `range.end`.
    pub(super) ends_message: bool,
    /// The lost range held the FIN too: it goes along (an empty DATA with
    /// FIN at `range.end`), as the end of the stream is never skipped.
    pub(super) fin: bool,
}
