//! The sending side of a session with one receiver: handshake, segmentation,
//! SACK/RACK loss recovery, RTO, congestion control, pacing, flow control,
//! close and reset.
//!
//! The pieces a one-to-many sender needs per receiver — [`Scoreboard`],
//! [`RttEstimator`], the congestion controller — are kept apart from the
//! shared [`SendBuffer`], so the SMO master/child split reuses them.

use crate::config::TransportConfig;
use crate::event::{CloseReason, Event};
use crate::scoreboard::Scoreboard;
use crate::send_buffer::SendBuffer;
use crate::stats::SenderStats;
use crate::wire::{
    decode_frames, encode_data_header, AckFrame, CloseFrame, ConnectFrame, Frame, Header,
    HeaderFlags,
};
use fanout_core::cc::{AckSample, CongestionController};
use fanout_core::codec::truncate_pn;
use fanout_core::pacing::Pacer;
use fanout_core::rtt::RttEstimator;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// Microsecond timestamp carried in DATA and echoed in ACKs (low 32 bits;
/// differences are taken with wrapping arithmetic, valid for RTTs < 71 min).
pub(crate) fn wire_timestamp(now: Instant) -> u32 {
    (now.as_nanos() / 1_000) as u32
}

/// Elapsed time since a wire timestamp.
pub(crate) fn since_wire_timestamp(now: Instant, ts: u32) -> Duration {
    Duration::from_micros(u64::from(wire_timestamp(now).wrapping_sub(ts)))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Connecting {
        attempts: u32,
        next_try: Instant,
        deadline: Instant,
    },
    Established,
    Closed(CloseReason),
}

/// The sending end of a unicast session.
#[derive(Debug)]
pub struct Sender {
    config: TransportConfig,
    session_id: u64,
    peer: SocketAddr,
    state: State,
    buffer: SendBuffer,
    /// Next new offset to send (TCP's SND.NXT); the FIN counts as one offset.
    snd_nxt: u64,
    board: Scoreboard,
    rtt: RttEstimator,
    cc: Box<dyn CongestionController>,
    pacer: Pacer,
    mss: u64,
    /// Offsets below this may be sent (peer's cumulative + window).
    peer_window_end: u64,
    largest_ack_pn: Option<u64>,
    /// SND.NXT when the current recovery episode began (RFC 6582 "recover").
    recovery_point: Option<u64>,
    rto_deadline: Option<Instant>,
    rack_deadline: Option<Instant>,
    keepalive_deadline: Option<Instant>,
    /// When the pacer next releases a segment (armed only while it holds one).
    pacing_deadline: Option<Instant>,
    /// Zero-window persist probe (RFC 9293 §3.8.6.1), armed while the peer's
    /// window blocks and nothing is in flight.
    persist_deadline: Option<Instant>,
    window_blocked: bool,
    cwnd_limited: bool,
    next_pn: u64,
    last_heard: Instant,
    pending: VecDeque<PendingControl>,
    events: VecDeque<Event>,
    stats: SenderStats,
}

#[derive(Debug, Clone)]
enum PendingControl {
    Ping,
    Close {
        code: u64,
        reason: String,
        reset: bool,
    },
}

impl Sender {
    /// Starts a session to `peer` at `now`. `session_id` should be random.
    pub fn connect(
        config: TransportConfig,
        peer: SocketAddr,
        session_id: u64,
        now: Instant,
    ) -> Self {
        let mss = config.max_payload();
        let mut pacer = Pacer::new(mss).with_burst_time(config.pacing_burst);
        if !config.pacing {
            pacer = Pacer::disabled();
        }
        Sender {
            buffer: SendBuffer::new(config.send_buffer_bytes),
            rtt: RttEstimator::new(config.rto),
            cc: config.cc.build(mss),
            state: State::Connecting {
                attempts: 0,
                next_try: now,
                deadline: now + config.handshake_timeout,
            },
            session_id,
            peer,
            snd_nxt: 0,
            board: Scoreboard::new(),
            pacer,
            mss,
            peer_window_end: 0,
            largest_ack_pn: None,
            recovery_point: None,
            rto_deadline: None,
            rack_deadline: None,
            keepalive_deadline: None,
            pacing_deadline: None,
            persist_deadline: None,
            window_blocked: false,
            cwnd_limited: false,
            next_pn: 0,
            last_heard: now,
            pending: VecDeque::new(),
            events: VecDeque::new(),
            stats: SenderStats::default(),
            config,
        }
    }

    /// Queues as much of `data` as the send buffer takes; never blocks.
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.is_closed() {
            return 0;
        }
        self.buffer.write(data)
    }

    /// Queues `msg` as one application message (its end is marked on the
    /// wire; segments never span two messages). False if it does not fit now.
    pub fn write_message(&mut self, msg: &[u8]) -> bool {
        !self.is_closed() && self.buffer.write_message(msg)
    }

    /// Bytes [`Sender::write`] would take now.
    pub fn writable(&self) -> usize {
        if self.is_closed() {
            0
        } else {
            self.buffer.free()
        }
    }

    /// No more data: the stream ends after what was written.
    pub fn finish(&mut self) {
        self.buffer.finish();
    }

    /// Aborts the session, telling the peer why.
    pub fn reset(&mut self, code: u64, reason: &str) {
        if self.is_closed() {
            return;
        }
        self.pending.push_back(PendingControl::Close {
            code,
            reason: reason.into(),
            reset: true,
        });
        self.close(CloseReason::LocalReset {
            code,
            reason: reason.into(),
        });
    }

    /// Next application event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// True once the session ended (see [`Sender::close_reason`]).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed(_))
    }

    /// Why the session ended, once it has.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        match &self.state {
            State::Closed(r) => Some(r),
            _ => None,
        }
    }

    /// Stream bytes acknowledged by the receiver (the FIN excluded).
    pub fn bytes_acked(&self) -> u64 {
        match self.buffer.fin() {
            Some(fin) => self.board.cumulative().min(fin),
            None => self.board.cumulative(),
        }
    }

    /// Congestion window in bytes.
    pub fn cwnd(&self) -> u64 {
        self.cc.cwnd()
    }

    /// Smoothed RTT.
    pub fn srtt(&self) -> Duration {
        self.rtt.srtt()
    }

    /// Bytes in flight.
    pub fn in_flight(&self) -> u64 {
        self.board.in_flight_bytes()
    }

    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// This session's id.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    fn close(&mut self, reason: CloseReason) {
        if !self.is_closed() {
            self.state = State::Closed(reason.clone());
            self.events.push_back(Event::Closed(reason));
        }
    }

    fn fin_offset(&self) -> Option<u64> {
        self.buffer.fin()
    }

    /// The offset one past the FIN, once the FIN is known.
    fn stream_end(&self) -> Option<u64> {
        self.fin_offset().map(|f| f + 1)
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        let pn = self.next_pn;
        self.next_pn += 1;
        Header {
            flags: HeaderFlags::default(),
            session_id: self.session_id,
            packet_number: truncate_pn(pn),
        }
        .encode(out);
    }

    fn on_frame_ack(&mut self, now: Instant, pn: u64, ack: &AckFrame) {
        self.stats.acks_received += 1;
        let sent_end = self.snd_nxt;
        if ack.cumulative > sent_end || ack.sack.iter().any(|r| r.end > sent_end) {
            self.stats.drops.count(DropReason::AckOfUnsent);
            return;
        }
        let newer = self.largest_ack_pn.is_none_or(|l| pn > l);
        if newer {
            self.largest_ack_pn = Some(pn);
            self.peer_window_end = self
                .peer_window_end
                .max(ack.cumulative.saturating_add(ack.window));
        }
        let cum_before = self.board.cumulative();
        let outcome = self.board.on_ack(
            now,
            ack.cumulative,
            &ack.sack,
            self.rtt.min_rtt().min(self.rtt.srtt()),
        );
        if outcome.cumulative_clipped {
            self.stats.drops.count(DropReason::InvalidAck);
        }
        if outcome.cumulative_advanced {
            // RFC 7323 §4: RTT from the echoed timestamp of an ACK that
            // acknowledges new data; unambiguous across retransmissions.
            // RFC 9002 §5.3: the reported delay, at most the delayed-ACK
            // timer (a unicast receiver is not thinned by time).
            self.rtt.on_sample_with_ack_delay(
                since_wire_timestamp(now, ack.timestamp_echo),
                Duration::from_micros(ack.ack_delay_us)
                    .min(fanout_core::ack_policy::DEFAULT_MAX_ACK_DELAY),
            );
            self.buffer
                .release(self.board.cumulative().min(self.buffer.end()));
        }
        // Recovery ends once the cumulative ACK passes the recovery point
        // (RFC 6582 §3.2 step 5).
        if let Some(rp) = self.recovery_point {
            if self.board.cumulative() >= rp {
                self.recovery_point = None;
                self.cc.on_recovery_end(now);
            }
        }
        if outcome.newly_acked_bytes > 0 && self.recovery_point.is_none() {
            self.cc.on_ack(
                now,
                AckSample {
                    acked_bytes: outcome.newly_acked_bytes,
                    srtt: self.rtt.srtt(),
                    min_rtt: self.rtt.min_rtt(),
                    cwnd_limited: self.cwnd_limited,
                },
            );
        }
        self.detect_losses(now);
        // RFC 6298 §5.3: restart the timer when new data is acknowledged.
        if self.board.cumulative() > cum_before {
            self.rto_deadline = None;
        }
        self.arm_rto(now);
        if self
            .stream_end()
            .is_some_and(|e| self.board.cumulative() >= e)
        {
            self.events.push_back(Event::Finished);
            self.pending.push_back(PendingControl::Close {
                code: 0,
                reason: String::new(),
                reset: false,
            });
            self.close(CloseReason::Completed);
        }
    }

    fn detect_losses(&mut self, now: Instant) {
        // RFC 8985 §6.2: reo_wnd = min_rtt/4, or 0 once DupThresh segments
        // were SACKed above (RFC 6675-equivalent trigger).
        let reo_wnd = if self.board.sacked_bytes() >= 3 * self.mss {
            Duration::ZERO
        } else {
            self.rtt.min_rtt().min(self.rtt.srtt()) / 4
        };
        let flight_before = self.board.in_flight_bytes() + self.board.lost_bytes();
        let (lost, timer) = self.board.detect_losses(now, reo_wnd);
        self.rack_deadline = timer;
        if lost > 0 && self.recovery_point.is_none() {
            // One congestion response per episode (RFC 6582 §3.2).
            self.recovery_point = Some(self.snd_nxt);
            self.stats.recovery_episodes += 1;
            self.cc.on_congestion_event(now, flight_before);
        }
    }

    fn arm_rto(&mut self, now: Instant) {
        let outstanding = !self.board.is_empty();
        if !outstanding {
            self.rto_deadline = None;
        } else if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto());
        }
    }

    fn on_rto(&mut self, now: Instant) {
        self.rto_deadline = None;
        if self.board.is_empty() {
            return;
        }
        self.stats.rto_events += 1;
        let flight = self.board.in_flight_bytes() + self.board.lost_bytes();
        self.board.on_retransmission_timeout();
        self.rtt.on_timeout();
        self.cc.on_retransmission_timeout(now, flight);
        self.recovery_point = Some(self.snd_nxt);
        self.arm_rto(now);
    }

    fn handle_frames(&mut self, now: Instant, pn: u64, body: &[u8]) {
        for frame in decode_frames(body) {
            let frame = match frame {
                Ok(f) => f,
                Err(_) => {
                    self.stats.drops.count(DropReason::MalformedFrame);
                    return;
                }
            };
            match frame {
                Frame::Accept(a) => {
                    if let State::Connecting { .. } = self.state {
                        if !a.sends_data {
                            self.state = State::Established;
                            self.peer_window_end = a.window;
                            self.mss = self.mss.min(a.max_payload.max(64));
                            self.rtt.on_sample(since_wire_timestamp(now, a.timestamp));
                            self.events.push_back(Event::Connected);
                        } else {
                            self.stats.drops.count(DropReason::UnexpectedFrame);
                        }
                    }
                }
                Frame::Ack(ack) => {
                    if self.state == State::Established {
                        self.on_frame_ack(now, pn, &ack);
                    } else {
                        self.stats.drops.count(DropReason::UnexpectedFrame);
                    }
                }
                Frame::Reset(CloseFrame { code, reason }) => {
                    self.close(CloseReason::PeerReset {
                        code,
                        reason: reason.into(),
                    });
                }
                Frame::Close(_) | Frame::Padding | Frame::Ping => {}
                // A unicast sender has no upstream (session relay is a
                // session feature): refused and counted.
                Frame::Connect(_)
                | Frame::Data(_)
                | Frame::Skip(_)
                | Frame::AckFrequency(_)
                | Frame::Upstream(_)
                | Frame::UpstreamAck(_)
                | Frame::Roster(_)
                | Frame::Repair(_) => {
                    self.stats.drops.count(DropReason::UnexpectedFrame);
                }
            }
        }
    }

    /// Chooses the next segment to send, if congestion, flow control and
    /// data allow: lost data first (RFC 6675 §5 NextSeg rule 1), then new.
    fn next_segment(&mut self) -> Option<(std::ops::Range<u64>, bool)> {
        let cwnd = self.cc.cwnd();
        let in_flight = self.board.in_flight_bytes();
        if let Some(r) = self.board.first_lost() {
            if in_flight + (r.end - r.start) <= cwnd.max(self.mss) {
                return Some((r, true));
            }
            self.cwnd_limited = true;
            return None;
        }
        let data_end = self.buffer.end();
        let fin = self.fin_offset();
        let fin_pending = fin.is_some_and(|f| self.snd_nxt <= f);
        if self.snd_nxt >= data_end && !fin_pending {
            self.cwnd_limited = false;
            return None;
        }
        let (mut range, _) = self.buffer.next_segment(self.snd_nxt, self.mss);
        if fin.is_some_and(|f| range.end == f) {
            range.end += 1; // the FIN occupies one offset, as in TCP
        }
        let len = range.end - range.start;
        if in_flight + len > cwnd {
            self.cwnd_limited = true;
            return None;
        }
        let data_len = range.end.min(data_end) - range.start;
        if data_len > 0 && range.start + data_len > self.peer_window_end {
            self.window_blocked = true;
            return None;
        }
        Some((range, false))
    }

    fn write_data(&mut self, now: Instant, range: std::ops::Range<u64>, out: &mut Vec<u8>) {
        self.header(out);
        let data_end = range.end.min(self.buffer.end());
        let fin = self.fin_offset().is_some_and(|f| range.end == f + 1);
        let len = (data_end - range.start) as usize;
        let message_end = self.buffer.is_message_end(data_end) && len > 0;
        encode_data_header(out, range.start, wire_timestamp(now), fin, message_end, len);
        self.buffer.copy_to(range.start..data_end, out);
        self.stats.payload_bytes_sent += len as u64;
    }
}

impl Engine for Sender {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        let (header, body) = match crate::wire::accept_header(datagram) {
            Ok(ok) => ok,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        if header.session_id != self.session_id {
            self.stats.drops.count(DropReason::UnknownSession);
            return;
        }
        if from != self.peer {
            self.stats.drops.count(DropReason::UnknownPeer);
            return;
        }
        if self.is_closed() {
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        self.last_heard = now;
        let pn = fanout_core::codec::expand_pn(
            self.largest_ack_pn.map_or(0, |l| l + 1),
            header.packet_number,
        );
        self.handle_frames(now, pn, body);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let to = Transmit {
            destination: self.peer,
        };
        if let Some(ctl) = self.pending.pop_front() {
            self.header(buf);
            match ctl {
                PendingControl::Ping => Frame::Ping.encode(buf),
                PendingControl::Close {
                    code,
                    reason,
                    reset,
                } => {
                    let f = CloseFrame {
                        code,
                        reason: &reason,
                    };
                    if reset {
                        Frame::Reset(f)
                    } else {
                        Frame::Close(f)
                    }
                    .encode(buf);
                }
            }
            self.stats.datagrams_sent += 1;
            return Some(to);
        }
        match self.state {
            State::Connecting {
                attempts,
                next_try,
                deadline,
            } if next_try <= now => {
                self.header(buf);
                Frame::Connect(ConnectFrame {
                    sends_data: true,
                    max_payload: self.mss,
                    window: 0,
                    timestamp: wire_timestamp(now),
                    member_id: 0,
                    start_offset: 0,
                })
                .encode(buf);
                // RFC 6298 §5.5-style back-off of the handshake retries.
                let wait = self.config.rto.initial.saturating_mul(1 << attempts.min(6));
                self.state = State::Connecting {
                    attempts: attempts + 1,
                    next_try: now + wait,
                    deadline,
                };
                self.stats.datagrams_sent += 1;
                return Some(to);
            }
            State::Established => {}
            _ => return None,
        }
        let release = self.pacer.next_send_time(now, self.mss);
        if release > now {
            self.pacing_deadline = Some(release);
            return None;
        }
        self.pacing_deadline = None;
        self.window_blocked = false;
        let Some((range, retransmission)) = self.next_segment() else {
            if self.window_blocked && self.board.is_empty() && self.persist_deadline.is_none() {
                self.persist_deadline = Some(now + self.rtt.rto());
            }
            return None;
        };
        self.persist_deadline = None;
        self.write_data(now, range.clone(), buf);
        let len = range.end - range.start;
        if retransmission {
            self.board.on_retransmitted(now, range.start);
            self.stats.retransmitted_bytes += len;
        } else {
            self.board.on_sent(now, range.clone());
            self.snd_nxt = range.end;
        }
        self.pacer
            .set_rate(self.cc.cwnd(), self.rtt.srtt(), self.cc.in_slow_start());
        self.pacer.on_sent(now, len);
        self.stats.datagrams_sent += 1;
        self.arm_rto(now);
        self.keepalive_deadline = Some(now + self.config.idle_timeout / 3);
        Some(to)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::Closed(_) => None,
            State::Connecting {
                next_try, deadline, ..
            } => Some(*next_try.min(deadline)),
            State::Established => {
                let t = [
                    self.rto_deadline,
                    self.rack_deadline,
                    self.keepalive_deadline,
                    self.pacing_deadline,
                    self.persist_deadline,
                    Some(self.last_heard + self.config.idle_timeout),
                ];
                t.into_iter().flatten().min()
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Connecting { deadline, .. } if now >= deadline => {
                self.close(CloseReason::HandshakeTimeout);
            }
            State::Established => {
                if now >= self.last_heard + self.config.idle_timeout {
                    self.close(CloseReason::IdleTimeout);
                    return;
                }
                if self.rack_deadline.is_some_and(|t| t <= now) {
                    self.detect_losses(now);
                }
                if self.rto_deadline.is_some_and(|t| t <= now) {
                    self.on_rto(now);
                }
                if self.pacing_deadline.is_some_and(|t| t <= now) {
                    self.pacing_deadline = None;
                }
                if self.persist_deadline.is_some_and(|t| t <= now) {
                    self.persist_deadline = None;
                    self.pending.push_back(PendingControl::Ping);
                }
                if self.keepalive_deadline.is_some_and(|t| t <= now) {
                    self.pending.push_back(PendingControl::Ping);
                    self.keepalive_deadline = Some(now + self.config.idle_timeout / 3);
                }
            }
            _ => {}
        }
    }
}
