//! The receiving side of a unicast session: accepts one sender, reassembles
//! the stream, acknowledges (cumulative + SACK + window + timestamp echo) on
//! the configured schedule, and lingers after the end so the sender's last
//! retransmissions are still answered.

use crate::config::TransportConfig;
use crate::event::{CloseReason, Event};
use crate::reattach::ParentChain;
use crate::recv_buffer::{RecvBuffer, Refused};
use crate::stats::ReceiverStats;
use crate::upstream::{UpstreamOut, UpstreamSendStats, UpstreamStatus};
use crate::wire::{
    decode_frames, AckFrame, CloseFrame, ConnectFrame, DataFrame, Frame, Header, HeaderFlags,
    MAX_SACK_RANGES,
};
use fanout_core::ack_policy::{slot_phase, AckScheduler};
use fanout_core::codec::{expand_pn, truncate_pn};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;

/// Most replies to strangers (busy resets) queued at once; the rest are
/// dropped, so a connect flood cannot grow memory.
const MAX_PENDING_REFUSALS: usize = 16;

/// First CONNECT retransmission while joining (then doubling): shorter than
/// the 1 s initial RTO so that a receiver started before its sender loses
/// at most this much.
const JOIN_FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Most bytes of the sender's datagrams held while the merger's ACCEPT is
/// on its way ([`TransportConfig::feedback_via`]): the sender starts on the
/// merged CONNECT's ACCEPT, which reaches receivers one hop per tree level
/// after its first multicast flight. Replayed once the ACCEPT names the
/// session; beyond this bound they are dropped (and repaired).
const MAX_EARLY_BYTES: usize = 128 << 10;
/// Least a held early datagram counts against [`MAX_EARLY_BYTES`], so tiny
/// datagrams cannot make the hold many small allocations (at most 1024).
const EARLY_MIN_CHARGE: usize = 128;

pub mod coded;
mod rejoin;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Listening,
    /// Receiver-initiated (SMO §II): CONNECT sent to `target`, waiting for ACCEPT.
    Joining {
        target: SocketAddr,
        attempts: u32,
        next_try: Instant,
        deadline: Instant,
    },
    Established,
    /// Whole stream read; answering retransmissions until `until`.
    Lingering {
        until: Option<Instant>,
    },
    Closed(CloseReason),
}

/// The receiving end of a unicast session.
#[derive(Debug)]
pub struct Receiver {
    config: TransportConfig,
    state: State,
    peer: Option<(SocketAddr, u64)>,
    buffer: RecvBuffer,
    fin: Option<u64>,
    acks: AckScheduler,
    /// RFC 7323 TS.Recent: timestamp to echo.
    ts_recent: u32,
    /// Cumulative point of the last ACK sent (RFC 7323 Last.ACK.sent).
    last_ack_sent: u64,
    advertised_window_end: u64,
    most_recent: Option<Range<u64>>,
    /// Arrival of the segment whose timestamp is `ts_recent`: ACK delay is
    /// counted from it, so the sender's `sample − ack_delay` is that
    /// segment's path RTT (RFC 9002 §5.3).
    ts_recent_at: Option<Instant>,
    accept_pending: Option<u32>,
    /// Id the session sender gave this member (1 for a unicast listener).
    member_id: u64,
    /// Stream offset at which delivery started (the ACCEPT's start offset;
    /// 0 unless a late joiner was admitted mid-stream).
    start: u64,
    /// RESET to send to the peer (code, reason).
    pending_reset: Option<(u64, String)>,
    refusals: VecDeque<(SocketAddr, u64)>,
    largest_pn: Option<u64>,
    next_pn: u64,
    last_heard: Instant,
    events: VecDeque<Event>,
    stats: ReceiverStats,
    /// Joined a session sender ([`Receiver::join`]): may send upstream.
    member: bool,
    /// The upstream stream (session relay), created on first use.
    upstream: Option<Box<UpstreamOut>>,
    /// The session sender, when feedback goes to a merger instead
    /// ([`TransportConfig::feedback_via`]): DATA and control are accepted
    /// from it as well as from the peer (the merger).
    source: Option<SocketAddr>,
    /// The sender's datagrams that arrived before the merger's ACCEPT
    /// (at most [`MAX_EARLY_BYTES`] in all).
    early: Vec<Box<[u8]>>,
    /// Bytes held in `early`, each datagram counted as at least
    /// [`EARLY_MIN_CHARGE`] (bookkeeping included).
    early_bytes: usize,
    /// Ancestors to re-attach to when the merger falls silent
    /// ([`TransportConfig::feedback_fallback`]; with `feedback_via` only).
    chain: Option<Box<ParentChain>>,
    /// Coded-repair state ([`coded`]), created on the first REPAIR.
    coded: Option<Box<coded::CodedRx>>,
    /// Newest DATA timestamp received and its arrival: what a hole filled
    /// by decoding (REPAIR carries no timestamp) echoes.
    ts_latest: Option<(u32, Instant)>,
}

impl Receiver {
    /// Waits for one sender.
    pub fn listen(config: TransportConfig, now: Instant) -> Self {
        Receiver {
            buffer: RecvBuffer::new(config.recv_window_bytes),
            acks: AckScheduler::new(config.ack),
            state: State::Listening,
            peer: None,
            fin: None,
            ts_recent: 0,
            last_ack_sent: 0,
            advertised_window_end: 0,
            most_recent: None,
            ts_recent_at: None,
            accept_pending: None,
            member_id: 1,
            start: 0,
            pending_reset: None,
            refusals: VecDeque::new(),
            largest_pn: None,
            next_pn: 0,
            last_heard: now,
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
            member: false,
            upstream: None,
            source: None,
            early: Vec::new(),
            early_bytes: 0,
            chain: None,
            coded: None,
            ts_latest: None,
            config,
        }
    }

    /// Joins the session of the sender at `sender` (receiver-initiated, SMO
    /// §II): sends CONNECT until ACCEPT arrives or the handshake times out.
    /// The sender's data may then arrive from its address on any destination
    /// (a multicast group this host joined, or unicast).
    ///
    /// With [`TransportConfig::feedback_via`] set, the CONNECT and all
    /// feedback go to that merger instead (MCTCP, [`crate::merge`]); the
    /// merger's ACCEPT names the session, and datagrams of that session are
    /// then taken from the merger or from `sender`.
    pub fn join(config: TransportConfig, sender: SocketAddr, now: Instant) -> Self {
        let deadline = now + config.handshake_timeout;
        let via = config.feedback_via;
        let chain = via.map(|_| {
            Box::new(ParentChain::new(
                &config.feedback_fallback,
                config.parent_silence,
                now,
            ))
        });
        let mut r = Receiver::listen(config, now);
        r.member = true;
        r.source = via.map(|_| sender);
        r.chain = chain;
        r.state = State::Joining {
            target: via.unwrap_or(sender),
            attempts: 0,
            next_try: now,
            deadline,
        };
        r
    }

    /// The id the session sender gave this member.
    pub fn member_id(&self) -> u64 {
        self.member_id
    }

    /// Stream offset at which this member's delivery starts: 0, or for a
    /// late joiner the sender's position when it was admitted (the prefix
    /// `[0, start)` never arrives on this session).
    pub fn start_offset(&self) -> u64 {
        self.start
    }

    /// The session id the sender named (once connected).
    pub fn session_id(&self) -> Option<u64> {
        self.peer.map(|(_, id)| id)
    }

    /// Copies in-order stream bytes into `out`; returns the count (0 when
    /// nothing is readable yet).
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let n = self.buffer.read(out);
        if n > 0 {
            // Window update once it opened by a quarter (RFC 9293 §3.8.6.2.2
            // receiver-side silly window avoidance).
            let opened = self.buffer.window_end() - self.advertised_window_end;
            let mss = self.config.max_payload();
            if opened >= (2 * mss).max(self.buffer.capacity() / 4) {
                // Urgent only if the sender may be nearly out of window;
                // otherwise it rides the next paced ACK (members of a large
                // session read in step, so urgent updates would all leave
                // at once).
                let left = self
                    .advertised_window_end
                    .saturating_sub(self.buffer.rcv_nxt());
                if left < self.buffer.capacity() / 4 {
                    self.acks.request_immediate();
                } else {
                    self.acks.request_paced();
                }
            }
        }
        if self.fin == Some(self.buffer.read_pos()) && self.state == State::Established {
            self.state = State::Lingering { until: None };
            self.events.push_back(Event::Finished);
            self.acks.request_immediate();
        }
        n
    }

    /// Bytes readable now.
    pub fn readable(&self) -> u64 {
        self.buffer.readable()
    }

    /// Stream bytes read by the application so far.
    pub fn bytes_read(&self) -> u64 {
        self.buffer.read_pos()
    }

    /// The stream length, once the sender's end of stream arrived.
    pub fn stream_len(&self) -> Option<u64> {
        self.fin
    }

    /// True once the whole stream was read.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Lingering { .. })
            || self.close_reason() == Some(&CloseReason::Completed)
    }

    /// Next application event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// True once the session ended.
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

    /// The sender's address once connected.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer.map(|(a, _)| a)
    }

    /// The session sender, the data source: the peer, or for a member
    /// reporting through a merger ([`TransportConfig::feedback_via`]) the
    /// sender it joined — where a late joiner asks for the missed prefix.
    pub fn data_source(&self) -> Option<SocketAddr> {
        self.source.or(self.peer())
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    /// Queues bytes for the session sender on this member's own connection
    /// (session relay, TCP-SMO §IV.B; [`crate::upstream`]); returns how
    /// many the bounded upstream buffer took (never blocks). Always 0 for
    /// a receiver of a plain unicast [`crate::Sender`] (created with
    /// [`Receiver::listen`]), which has no upstream, and once the session
    /// or the upstream stream ended.
    pub fn write_upstream(&mut self, data: &[u8]) -> usize {
        if data.is_empty() {
            return 0;
        }
        match self.upstream_mut() {
            Some(u) => u.write(data),
            None => 0,
        }
    }

    /// Bytes [`Receiver::write_upstream`] would take now.
    pub fn upstream_writable(&self) -> usize {
        match &self.upstream {
            Some(u) => u.writable(),
            None if self.may_send_upstream() => crate::upstream::UPSTREAM_SEND_BUFFER,
            None => 0,
        }
    }

    /// True for a member of an open session reporting straight to its
    /// sender: a member whose feedback goes through a merger
    /// (`feedback_via`) has no upstream (mergers do not relay it).
    fn may_send_upstream(&self) -> bool {
        self.member && !self.is_closed() && self.source.is_none()
    }

    /// Ends the upstream stream after what was written (the sender sees its
    /// end once every byte arrived).
    pub fn finish_upstream(&mut self) {
        if let Some(u) = self.upstream_mut() {
            u.finish();
        }
    }

    /// Where the upstream stream stands.
    pub fn upstream_status(&self) -> UpstreamStatus {
        match &self.upstream {
            Some(u) => u.status(),
            None if self.may_send_upstream() => UpstreamStatus::Idle,
            None => UpstreamStatus::Failed,
        }
    }

    /// Upstream counters (zero before any upstream use).
    pub fn upstream_stats(&self) -> UpstreamSendStats {
        self.upstream
            .as_ref()
            .map_or_else(Default::default, |u| u.stats())
    }

    /// The upstream stream, created on first use (members of an open
    /// session only).
    fn upstream_mut(&mut self) -> Option<&mut UpstreamOut> {
        if !self.may_send_upstream() {
            return None;
        }
        let (mss, rto) = (self.config.max_payload(), self.config.rto);
        Some(
            self.upstream
                .get_or_insert_with(|| Box::new(UpstreamOut::new(mss, rto))),
        )
    }

    /// Aborts the session, telling the sender why.
    pub fn reset(&mut self, code: u64, reason: &str) {
        if self.is_closed() {
            return;
        }
        if self.peer.is_some() {
            self.pending_reset = Some((code, reason.into()));
        }
        self.close(CloseReason::LocalReset {
            code,
            reason: reason.into(),
        });
    }

    fn close(&mut self, reason: CloseReason) {
        if let Some(u) = self.upstream.as_mut() {
            if u.status() != UpstreamStatus::Finished {
                u.fail();
            }
        }
        if !self.is_closed() {
            self.state = State::Closed(reason.clone());
            self.events.push_back(Event::Closed(reason));
        }
    }

    /// Cumulative ACK point: data in order, plus one for a received FIN.
    fn ack_point(&self) -> u64 {
        let nxt = self.buffer.rcv_nxt();
        nxt + u64::from(self.fin == Some(nxt))
    }

    fn on_data(&mut self, now: Instant, d: &DataFrame<'_>) {
        let range = d.range();
        if d.fin {
            let consistent = self.fin.is_none_or(|f| f == range.end)
                && range.end >= self.buffer.rcv_nxt()
                && self
                    .buffer
                    .out_of_order()
                    .last()
                    .is_none_or(|r| r.end <= range.end);
            if !consistent {
                self.stats.drops.count(DropReason::UnexpectedFrame);
                return;
            }
            self.fin = Some(range.end);
        }
        if self.fin.is_some_and(|f| range.end > f) {
            self.stats.drops.count(DropReason::BeyondWindow);
            return;
        }
        let nxt_before = self.buffer.rcv_nxt();
        let mut duplicate = false;
        if !d.payload.is_empty() {
            match self.buffer.insert(d.offset, d.payload) {
                Ok(n) => self.stats.payload_bytes_received += n,
                Err(Refused::Duplicate) => {
                    duplicate = true;
                    self.stats.duplicate_bytes += d.payload.len() as u64;
                    self.stats.drops.count(DropReason::Duplicate);
                }
                Err(Refused::BeyondWindow) => {
                    self.stats.drops.count(DropReason::BeyondWindow);
                    return;
                }
            }
        }
        // RFC 7323 §4.3: TS.Recent comes from segments at the left edge
        // (SEG.SEQ <= Last.ACK.sent) and never moves backwards
        // (SEG.TSval >= TS.Recent, compared modulo 2^32).
        if d.offset <= self.last_ack_sent && d.timestamp.wrapping_sub(self.ts_recent) as i32 >= 0 {
            self.ts_recent = d.timestamp;
            self.ts_recent_at = Some(now);
        }
        if self
            .ts_latest
            .is_none_or(|(t, _)| d.timestamp.wrapping_sub(t) as i32 >= 0)
        {
            self.ts_latest = Some((d.timestamp, now));
        }
        let out_of_order = d.offset > nxt_before;
        let filled_gap = !out_of_order && self.buffer.rcv_nxt() > range.end;
        self.most_recent = Some(range);
        self.acks
            .on_segment(now, out_of_order || filled_gap || duplicate || d.fin);
    }

    fn handle_frames(&mut self, now: Instant, body: &[u8]) {
        for frame in decode_frames(body) {
            let Ok(frame) = frame else {
                self.stats.drops.count(DropReason::MalformedFrame);
                return;
            };
            match frame {
                Frame::Connect(c) if c.sends_data => self.accept_pending = Some(c.timestamp),
                Frame::Data(d) => self.on_data(now, &d),
                Frame::Repair(f) => self.on_repair(now, &f),
                Frame::Ping => self.acks.request_immediate(),
                Frame::Close(_) => {
                    let complete = self.fin.is_some_and(|f| self.buffer.rcv_nxt() == f);
                    if complete {
                        self.close(CloseReason::Completed);
                    } else {
                        self.close(CloseReason::PeerReset {
                            code: 0,
                            reason: "closed before the end of the stream".into(),
                        });
                    }
                }
                Frame::Reset(CloseFrame { code, reason }) => {
                    self.close(CloseReason::PeerReset {
                        code,
                        reason: reason.into(),
                    });
                }
                // Phase by member id: the members of one session spread their
                // ACKs over `every` segments and over the feedback slot
                // instead of sending them together.
                Frame::AckFrequency(f) => {
                    let n = f.every.max(1);
                    self.acks
                        .set_every_segments_with_phase(n, (self.member_id % u64::from(n)) as u32);
                    self.acks.set_min_interval(
                        std::time::Duration::from_micros(u64::from(f.min_interval_us)),
                        slot_phase(self.member_id),
                    );
                }
                Frame::UpstreamAck(a) => match self.upstream.as_mut() {
                    Some(u) => {
                        if !u.on_ack(now, &a) {
                            self.stats.drops.count(DropReason::AckOfUnsent);
                        }
                    }
                    None => self.stats.drops.count(DropReason::UnexpectedFrame),
                },
                Frame::Padding => {}
                Frame::Connect(_)
                | Frame::Accept(_)
                | Frame::Ack(_)
                | Frame::Skip(_)
                | Frame::Upstream(_)
                | Frame::Roster(_) => {
                    self.stats.drops.count(DropReason::UnexpectedFrame);
                }
            }
        }
    }

    /// The next UPSTREAM datagram, if the upstream stream has one due.
    fn poll_upstream(
        &mut self,
        now: Instant,
        session_id: u64,
        peer: SocketAddr,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let u = self.upstream.as_mut()?;
        let pn = self.next_pn;
        let sent = u.poll_transmit(now, buf, |out| {
            Header {
                flags: HeaderFlags::default(),
                session_id,
                packet_number: truncate_pn(pn),
            }
            .encode(out)
        });
        if !sent {
            return None;
        }
        self.next_pn += 1;
        self.stats.datagrams_sent += 1;
        Some(Transmit { destination: peer })
    }

    fn header(&mut self, session_id: u64, out: &mut Vec<u8>) {
        let pn = self.next_pn;
        self.next_pn += 1;
        Header {
            flags: HeaderFlags::default(),
            session_id,
            packet_number: truncate_pn(pn),
        }
        .encode(out);
    }

    fn build_ack(&self, now: Instant) -> AckFrame {
        let cumulative = self.ack_point();
        let mut sack: Vec<Range<u64>> = self.buffer.out_of_order().collect();
        if let Some(f) = self.fin.filter(|&f| f > self.buffer.rcv_nxt()) {
            match sack.last_mut() {
                Some(last) if last.end == f => last.end += 1,
                _ => sack.push(f..f + 1),
            }
        }
        // RFC 2018 §4: the first block reports the most recent arrival.
        if let Some(recent) = &self.most_recent {
            if let Some(i) = sack
                .iter()
                .position(|r| r.start <= recent.start && recent.end <= r.end)
            {
                let r = sack.remove(i);
                sack.insert(0, r);
            }
        }
        sack.truncate(MAX_SACK_RANGES);
        AckFrame {
            cumulative,
            window: self
                .buffer
                .window_end()
                .saturating_sub(self.buffer.rcv_nxt()),
            timestamp_echo: self.ts_recent,
            ack_delay_us: self
                .ts_recent_at
                .map_or(0, |t| (now - t).as_micros() as u64),
            sack,
        }
    }
}

impl Engine for Receiver {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        let (header, body) = match crate::wire::accept_header(datagram) {
            Ok(ok) => ok,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        if self.is_closed() {
            // A closed receiver never revives, whoever asks.
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        if let State::Joining { target, .. } = self.state {
            match decode_frames(body).next() {
                Some(Ok(Frame::Accept(a))) if from == target && a.sends_data => {
                    self.peer = Some((from, header.session_id));
                    self.member_id = a.member_id;
                    self.buffer.start_at(a.start_offset);
                    self.start = self.buffer.read_pos();
                    self.last_ack_sent = a.start_offset;
                    self.state = State::Established;
                    self.events.push_back(Event::Connected);
                    // Those of this session are taken; the rest dropped.
                    if let Some(source) = self.source {
                        self.early_bytes = 0;
                        for d in std::mem::take(&mut self.early) {
                            self.stats.datagrams_received -= 1; // counted on arrival
                            self.handle_datagram(now, source, &d);
                        }
                    }
                }
                // The sender refused the join (session full, file start
                // already released): give up now, with its reason, rather
                // than at the handshake timeout.
                Some(Ok(Frame::Reset(CloseFrame { code, reason }))) if from == target => {
                    if self.join_next(now) {
                        return;
                    }
                    self.close(CloseReason::PeerReset {
                        code,
                        reason: reason.into(),
                    });
                    return;
                }
                _ if self.source == Some(from)
                    && self.early_bytes + datagram.len().max(EARLY_MIN_CHARGE)
                        <= MAX_EARLY_BYTES =>
                {
                    self.early_bytes += datagram.len().max(EARLY_MIN_CHARGE);
                    self.early.push(datagram.into());
                    return;
                }
                _ => {
                    self.stats.drops.count(if from == target {
                        DropReason::UnexpectedFrame
                    } else {
                        DropReason::UnknownPeer
                    });
                    return;
                }
            }
        }
        if self.rejoin_target() == Some(from) && self.on_rejoin_reply(now, header.session_id, body)
        {
            return;
        }
        let is_connect =
            matches!(decode_frames(body).next(), Some(Ok(Frame::Connect(c))) if c.sends_data);
        match self.peer {
            None if is_connect => {
                self.peer = Some((from, header.session_id));
                self.state = State::Established;
                self.events.push_back(Event::Connected);
            }
            None => {
                self.stats.drops.count(DropReason::UnknownSession);
                return;
            }
            // DATA straight from the sender while feedback goes to a merger.
            Some((_, id)) if self.source == Some(from) && id == header.session_id => {}
            Some((addr, id)) if (addr, id) != (from, header.session_id) => {
                if is_connect {
                    if self.refusals.len() < MAX_PENDING_REFUSALS {
                        self.refusals.push_back((from, header.session_id));
                    } else {
                        self.stats.drops.count(DropReason::LimitExceeded);
                    }
                } else {
                    self.stats.drops.count(if addr != from {
                        DropReason::UnknownPeer
                    } else {
                        DropReason::UnknownSession
                    });
                }
                return;
            }
            Some(_) => {}
        }
        let pn = expand_pn(self.largest_pn.map_or(0, |l| l + 1), header.packet_number);
        self.largest_pn = Some(self.largest_pn.map_or(pn, |l| l.max(pn)));
        self.last_heard = now;
        if self.peer.is_some_and(|(a, _)| a == from) {
            if let Some(c) = self.chain.as_mut() {
                c.heard(now);
            }
        }
        self.handle_frames(now, body);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let (Some((code, reason)), Some((addr, id))) = (self.pending_reset.take(), self.peer) {
            self.header(id, buf);
            Frame::Reset(CloseFrame {
                code,
                reason: &reason,
            })
            .encode(buf);
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: addr });
        }
        if let Some((addr, id)) = self.refusals.pop_front() {
            self.header(id, buf);
            let reason = "receiver busy with another session";
            Frame::Reset(CloseFrame { code: 1, reason }).encode(buf);
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: addr });
        }
        if let State::Joining {
            target,
            attempts,
            next_try,
            deadline,
        } = self.state
        {
            if next_try > now {
                return None;
            }
            // Session id 0: the sender names the session in its ACCEPT.
            self.header(0, buf);
            Frame::Connect(ConnectFrame {
                sends_data: false,
                max_payload: self.config.max_payload(),
                window: self.buffer.capacity(),
                timestamp: (now.as_nanos() / 1_000) as u32,
                member_id: 0,
                start_offset: 0,
            })
            .encode(buf);
            // Receivers usually start before their sender binds (receiver-
            // initiated sessions): a first CONNECT then meets a closed port,
            // and waiting the initial RTO (1 s, RFC 6298 §2.1) before the
            // retry idles the whole session. Retry after 200 ms, doubling up
            // to 64× the initial RTO; a CONNECT is one small datagram.
            let first = JOIN_FIRST_RETRY.min(self.config.rto.initial);
            let wait = first
                .saturating_mul(1 << attempts.min(9))
                .min(self.config.rto.initial * 64);
            self.state = State::Joining {
                target,
                attempts: attempts + 1,
                next_try: now + wait,
                deadline,
            };
            self.stats.datagrams_sent += 1;
            return Some(Transmit {
                destination: target,
            });
        }
        let (peer, session_id) = self.peer?;
        if let State::Lingering { until: None } = self.state {
            self.state = State::Lingering {
                until: Some(now + self.config.linger),
            };
        }
        if self.is_closed() {
            return None;
        }
        if let Some(t) = self.poll_rejoin(now, session_id, buf) {
            return Some(t);
        }
        if self.rejoin_target().is_some() {
            // Not a member of the new parent yet: its ACKs would be dropped.
            return None;
        }
        if let Some(ts) = self.accept_pending.take() {
            self.header(session_id, buf);
            Frame::Accept(ConnectFrame {
                sends_data: false,
                max_payload: self.config.max_payload(),
                window: self.buffer.window_end() - self.buffer.rcv_nxt(),
                timestamp: ts,
                member_id: 1,
                start_offset: 0,
            })
            .encode(buf);
            self.advertised_window_end = self.buffer.window_end();
            self.stats.datagrams_sent += 1;
            return Some(Transmit { destination: peer });
        }
        if !self.acks.should_ack(now) {
            return self.poll_upstream(now, session_id, peer, buf);
        }
        let ack = self.build_ack(now);
        self.header(session_id, buf);
        self.last_ack_sent = ack.cumulative;
        self.advertised_window_end = self.buffer.window_end();
        Frame::Ack(ack).encode(buf);
        self.acks.on_ack_sent(now);
        self.stats.acks_sent += 1;
        self.stats.datagrams_sent += 1;
        Some(Transmit { destination: peer })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let upstream = self.upstream.as_ref().and_then(|u| u.deadline());
        let engine = match self.state {
            State::Listening | State::Closed(_) => None,
            State::Joining {
                next_try, deadline, ..
            } => Some(next_try.min(deadline)),
            State::Established => [
                self.acks.deadline(),
                Some(self.last_heard + self.config.idle_timeout),
                self.chain.as_ref().and_then(|c| c.deadline()),
            ]
            .into_iter()
            .flatten()
            .min(),
            State::Lingering { until } => [self.acks.deadline(), until].into_iter().flatten().min(),
        };
        match self.state {
            State::Established | State::Lingering { .. } => {
                engine.into_iter().chain(upstream).min()
            }
            _ => engine,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(u) = self.upstream.as_mut() {
            u.on_timeout(now);
        }
        if let State::Joining { deadline, .. } = self.state {
            // Past the deadline: the next ancestor, if any, else give up.
            if now >= deadline && !self.join_next(now) {
                self.close(CloseReason::HandshakeTimeout);
            }
            return;
        }
        match self.state {
            State::Established if self.chain.is_some() => {
                if now >= self.last_heard + self.config.idle_timeout {
                    self.close(CloseReason::IdleTimeout);
                } else {
                    self.chain_timeout(now);
                }
            }
            State::Established if now >= self.last_heard + self.config.idle_timeout => {
                self.close(CloseReason::IdleTimeout);
            }
            State::Lingering { until: Some(t) } if now >= t => self.close(CloseReason::Completed),
            _ => {}
        }
    }
}
