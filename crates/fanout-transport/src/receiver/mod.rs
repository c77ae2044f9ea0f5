//! The receiving side of a session: joins one sender (or waits for one to
//! offer itself), reassembles the stream, acknowledges (cumulative + SACK +
//! window + timestamp echo) on the schedule the sender asks for, and
//! lingers after the end so the sender's last retransmissions are still
//! answered.
//!
//! A receiver plays one role: a listener waiting for a sender's OFFER,
//! a member that joined the sender itself, or a member reporting through
//! an ACK merger (MCTCP).

use crate::config::TransportConfig;
use crate::event::{CloseReason, Event};
use crate::handshake::{retry_wait, FIRST_RETRY};
use crate::packet::{PacketBuilder, PacketNumbers};
use crate::reattach::ParentChain;
use crate::recv_buffer::{RecvBuffer, Refused};
use crate::stats::ReceiverStats;
use crate::upstream::{UpstreamOut, UpstreamSendStats, UpstreamStatus};
use crate::wire::path_probe::PathProbe;
use crate::wire::{
    decode_frames, AckFrame, CloseFrame, ConnectFrame, DataFrame, Frame, SkipFrame, WireTimestamp,
    MAX_SACK_RANGES,
};
use fanout_core::ack_policy::{slot_phase, AckScheduler};
use fanout_core::codec::expand_pn;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;

/// The first data segments a receiver acknowledges at once, whatever its
/// ACK schedule (as Linux's quick-ACK mode at a connection's start): their
/// RTT samples hold no ACK delay, so the sender's `min_rtt` is the path's.
/// Without one, a receiver that always delays its ACKs (every second
/// segment of a slow stream) made `min_rtt` path + delay, RFC 9002 §5.3
/// then refused to take the reported delay off any sample, and a 0.5
/// Mbit/s stream on a 20 ms path measured 43 ms.
pub const QUICK_ACKS: u32 = 8;

/// Most replies to strangers (busy resets) queued at once; the rest are
/// dropped, so a connect flood cannot grow memory.
const MAX_PENDING_REFUSALS: usize = 16;

/// Most bytes of the sender's datagrams held while the merger's ACCEPT is
/// on its way ([`TransportConfig::feedback_via`]): the sender starts on the
/// merged CONNECT's ACCEPT, which reaches receivers one hop per tree level
/// after its first multicast flight. Replayed once the ACCEPT names the
/// session; beyond this bound they are dropped (and repaired).
const MAX_EARLY_BYTES: usize = 128 << 10;
/// Least a held early datagram counts against [`MAX_EARLY_BYTES`], so tiny
/// datagrams cannot make the hold many small allocations (at most 1024).
const EARLY_MIN_CHARGE: usize = 128;

mod allowed;
pub(crate) mod coded;
mod protect;
mod rejoin;

pub use allowed::AllowedSenders;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for a sender's OFFER.
    Listening,
    /// CONNECT sent to `target` (receiver-initiated, TCP-SMO §II; or in
    /// answer to an OFFER), waiting for ACCEPT.
    Joining {
        target: SocketAddr,
        attempts: u32,
        next_try: Instant,
        deadline: Instant,
        /// Invited by an OFFER: one CONNECT per OFFER, no retries of its
        /// own (the offering sender repeats its OFFER), so a forged OFFER
        /// gets no more bytes sent to its address than it carried.
        invited: bool,
    },
    Established,
    /// Whole stream read; answering retransmissions until `until`.
    Lingering {
        until: Option<Instant>,
    },
    Closed(CloseReason),
}

/// How a receiver came to its sender, and where its feedback goes.
#[derive(Debug)]
enum Role {
    /// Waits for an OFFER from a sender it allows, then joins the
    /// offering sender as a [`Role::Member`].
    Listener { allowed: AllowedSenders },
    /// Joined the session sender itself: feedback and upstream go to it.
    Member,
    /// Joined through an ACK merger ([`TransportConfig::feedback_via`]).
    ViaMerger(Box<MergerLink>),
}

/// A member's link through an ACK merger (MCTCP): DATA and control are
/// accepted from the session sender as well as from the merger.
#[derive(Debug)]
struct MergerLink {
    /// The session sender, the data source.
    source: SocketAddr,
    /// The sender's datagrams that arrived before the merger's ACCEPT
    /// (at most [`MAX_EARLY_BYTES`] in all).
    early: Vec<Box<[u8]>>,
    /// Bytes held in `early`, each datagram counted as at least
    /// [`EARLY_MIN_CHARGE`] (bookkeeping included).
    early_bytes: usize,
    /// Ancestors to re-attach to when the merger falls silent
    /// ([`TransportConfig::feedback_fallback`]).
    chain: ParentChain,
}

/// The receiving end of a session.
#[derive(Debug)]
pub struct Receiver {
    config: TransportConfig,
    state: State,
    peer: Option<(SocketAddr, u64)>,
    buffer: RecvBuffer,
    fin: Option<u64>,
    acks: AckScheduler,
    /// RFC 7323 TS.Recent: timestamp to echo.
    ts_recent: WireTimestamp,
    /// Cumulative point of the last ACK sent (RFC 7323 Last.ACK.sent).
    last_ack_sent: u64,
    advertised_window_end: u64,
    most_recent: Option<Range<u64>>,
    /// Arrival of the segment whose timestamp is `ts_recent`: ACK delay is
    /// counted from it, so the sender's `sample − ack_delay` is that
    /// segment's path RTT (RFC 9002 §5.3).
    ts_recent_at: Option<Instant>,
    /// Id the session sender gave this member (0 until accepted).
    member_id: u64,
    /// Stream offset at which delivery started (the ACCEPT's start offset;
    /// 0 unless a late joiner was admitted mid-stream).
    start: u64,
    /// RESET to send to the peer (code, reason).
    pending_reset: Option<(u64, String)>,
    /// The header id of its datagrams to its feedback target: the token of
    /// the ACCEPT it joined with (`crate::session` member tokens).
    token: u64,
    /// The token of the join target's RETRY, the header id of our next
    /// CONNECTs (0 until one came).
    retry_token: u64,
    /// The ACCEPT just arrived: echo the token at once (one PADDING
    /// datagram), which validates this receiver's address at the sender
    /// (`crate::address_budget`); until then it does not count as a member.
    confirm: bool,
    /// When the confirmation goes again, and how often it went: until the
    /// first DATA arrives. A lost confirmation would leave this receiver
    /// unvalidated, and a session waiting for its members would send no
    /// data and so draw no ACK from it that could validate it instead.
    confirm_retry: Option<(Instant, u32)>,
    /// When the last ACK, which reported a hole, goes again unless another
    /// ACK goes first (real-time receivers, [`ACK_REPEAT_FRACTION`]).
    ack_repeat_at: Option<Instant>,
    /// The ACK about to go is that repeat: it is not repeated in turn.
    ack_repeating: bool,
    refusals: VecDeque<(SocketAddr, u64)>,
    largest_pn: Option<u64>,
    numbers: PacketNumbers,
    last_heard: Instant,
    events: VecDeque<Event>,
    stats: ReceiverStats,
    role: Role,
    /// The upstream stream (session relay), created on first use.
    upstream: Option<Box<UpstreamOut>>,
    /// Coded-repair state ([`coded`]), created on the first REPAIR.
    coded: Option<Box<coded::CodedRx>>,
    /// Newest DATA timestamp received and its arrival: what a hole filled
    /// by decoding (REPAIR carries no timestamp) echoes.
    ts_latest: Option<(WireTimestamp, Instant)>,
    /// Data segments still acknowledged at once ([`QUICK_ACKS`] at the
    /// start).
    quick_acks_left: u32,
    /// The handshake and keys of a protected session ([`protect`]).
    keys: Option<Box<protect::ReceiverKeys>>,
    /// Where a sealed datagram is opened.
    scratch: Vec<u8>,
    /// When the datagram being processed arrived, if it waited for its
    /// signed list (source authentication) and is processed later.
    arrived: Option<Instant>,
    /// The datagrams being processed were counted for the ACK schedule
    /// when they arrived (segments of a run, held until it was complete).
    counted_on_arrival: bool,
    /// Ranges this receiver acknowledged selectively and no longer holds
    /// (held copies of a run that proved forged), to tell the sender until
    /// it sends them again (RENEGE, `docs/wire.md` §4.12), and when next.
    reneged: Vec<Range<u64>>,
    renege_at: Option<Instant>,
    /// Message ends and skipped bytes of a real-time receiver
    /// ([`TransportConfig::realtime`]).
    messages: Option<Box<crate::realtime::MessageBounds>>,
    /// The sender's timestamp clock on ours (real-time: message deadlines).
    sender_clock: crate::realtime::SenderClock,
    /// How long the sender asked this receiver to hold input or an ACK at
    /// most (ACK_FREQUENCY), µs; [`crate::wire::MAX_ACK_INTERVAL_US`]
    /// until it asked ([`Engine::max_wake_delay`]).
    max_ack_delay_us: u32,
    /// A DEADLINE frame's time, for the DATA after it in the same datagram.
    named_deadline: Option<WireTimestamp>,
    /// What the path from the sender carries (`crate::wire::path_probe`).
    path_probe: PathProbe,
    /// The session's payload size, from its ACCEPT, bytes.
    session_payload: u64,
    /// Delivery delays of the messages read (real-time).
    delays: Option<Box<crate::realtime::DelayHistogram>>,
}

impl Receiver {
    /// Waits for one sender to OFFER itself (a transfer to this receiver),
    /// then joins it.
    pub fn listen(config: TransportConfig, now: Instant) -> Self {
        Self::listen_from(config, AllowedSenders::Any, now)
    }

    /// Waits for an OFFER from `sender` only (a late joiner's catch-up
    /// transfer from the session sender it asked), then joins it.
    pub fn listen_to(config: TransportConfig, sender: SocketAddr, now: Instant) -> Self {
        Self::listen_from(config, AllowedSenders::Exactly(sender), now)
    }

    /// Waits for an OFFER from a sender `allowed` names, then joins it;
    /// others' OFFERs are dropped unanswered ([`AllowedSenders`]).
    pub fn listen_from(config: TransportConfig, allowed: AllowedSenders, now: Instant) -> Self {
        Self::with_role(config, now, Role::Listener { allowed })
    }

    fn with_role(config: TransportConfig, now: Instant, role: Role) -> Self {
        Receiver {
            buffer: RecvBuffer::new(config.recv_window_bytes),
            acks: AckScheduler::new(config.ack),
            state: State::Listening,
            peer: None,
            fin: None,
            ts_recent: WireTimestamp::default(),
            last_ack_sent: 0,
            advertised_window_end: 0,
            most_recent: None,
            ts_recent_at: None,
            member_id: 0,
            start: 0,
            pending_reset: None,
            token: 0,
            retry_token: 0,
            confirm: false,
            confirm_retry: None,
            ack_repeat_at: None,
            ack_repeating: false,
            refusals: VecDeque::new(),
            largest_pn: None,
            numbers: PacketNumbers::default(),
            last_heard: now,
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
            role,
            upstream: None,
            coded: None,
            ts_latest: None,
            quick_acks_left: QUICK_ACKS,
            keys: config
                .protection
                .clone()
                .map(|p| Box::new(protect::ReceiverKeys::new(p))),
            scratch: Vec::new(),
            arrived: None,
            counted_on_arrival: false,
            reneged: Vec::new(),
            renege_at: None,
            messages: config.realtime.then(|| {
                Box::new(crate::realtime::MessageBounds::new(
                    config.recv_window_bytes,
                    config.realtime_latency,
                ))
            }),
            sender_clock: crate::realtime::SenderClock::default(),
            max_ack_delay_us: crate::wire::MAX_ACK_INTERVAL_US,
            named_deadline: None,
            path_probe: PathProbe::default(),
            session_payload: 0,
            delays: config.realtime.then(Box::default),
            config,
        }
    }

    /// Joins the session of the sender at `sender` (receiver-initiated,
    /// TCP-SMO §II.A): sends CONNECT until ACCEPT arrives or the handshake
    /// times out.
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
        let role = match via {
            None => Role::Member,
            Some(_) => Role::ViaMerger(Box::new(MergerLink {
                source: sender,
                early: Vec::new(),
                early_bytes: 0,
                chain: ParentChain::new(&config.feedback_fallback, config.parent_silence, now),
            })),
        };
        let mut r = Receiver::with_role(config, now, role);
        r.state = State::Joining {
            target: via.unwrap_or(sender),
            invited: false,
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

    /// The header id of this member's datagrams to its sender: the token
    /// of its ACCEPT (0 before it).
    pub fn token(&self) -> u64 {
        self.token
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
        self.finish_if_read_to_end();
        n
    }

    /// The whole stream was read: linger (answering retransmissions) and
    /// tell the application.
    fn finish_if_read_to_end(&mut self) {
        if self.fin == Some(self.buffer.read_pos()) && self.state == State::Established {
            self.state = State::Lingering { until: None };
            self.events.push_back(Event::Finished);
            self.acks.request_immediate();
        }
    }

    /// Reads the next whole message into `out` (replacing its contents) — a
    /// real-time receiver ([`TransportConfig::realtime`]) only. Messages
    /// any of whose bytes the sender skipped are dropped on the way
    /// (counted as `messages_dropped`), and so are those whose deadline
    /// the sender named and `now` is past (`messages_late`). `None` when no
    /// whole message is readable now (or not a real-time receiver).
    pub fn read_message(
        &mut self,
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Option<crate::realtime::ReadMessage> {
        loop {
            let Some(next) = self
                .messages
                .as_ref()
                .and_then(|b| b.next(self.buffer.read_pos(), self.buffer.rcv_nxt(), self.fin))
            else {
                // The FIN may have come after the last message was read.
                self.finish_if_read_to_end();
                return None;
            };
            out.clear();
            out.resize((next.range.end - next.range.start) as usize, 0);
            let n = self.read(out);
            debug_assert_eq!(n, out.len(), "a whole message lies below RCV.NXT");
            if let Some(b) = self.messages.as_mut() {
                b.release_below(self.buffer.read_pos());
            }
            if next.damaged {
                self.stats.messages_dropped += 1;
                continue;
            }
            if next.deadline.is_some_and(|d| now > d) {
                self.stats.messages_late += 1;
                continue;
            }
            if let (Some(h), Some(sent)) = (self.delays.as_mut(), next.sent) {
                h.record(now.saturating_duration_since(sent));
            }
            self.stats.messages_read += 1;
            return Some(crate::realtime::ReadMessage {
                deadline: next.deadline,
            });
        }
    }

    /// Delivery delays of the messages read so far (a real-time receiver):
    /// from their first sending, on the sender's clock mapped onto ours, to
    /// their reading.
    pub fn delivery_delays(&self) -> Option<&crate::realtime::DelayHistogram> {
        self.delays.as_deref()
    }

    /// RFC 3550 interarrival jitter of the data so far (a real-time
    /// receiver's measure; zero otherwise).
    pub fn jitter(&self) -> std::time::Duration {
        self.sender_clock.jitter()
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

    /// The header id of a catch-up request (`fanout_app::catch_up`) once
    /// connected: its token when it reports to the session sender itself
    /// (which can check it), else — behind a merger, whose tokens the
    /// sender cannot check — the session id.
    pub fn catch_up_credential(&self) -> Option<u64> {
        let (peer, session) = self.peer?;
        Some(if Some(peer) == self.data_source() {
            self.token
        } else {
            session
        })
    }

    /// The session sender, the data source: the peer, or for a member
    /// reporting through a merger ([`TransportConfig::feedback_via`]) the
    /// sender it joined — where a late joiner asks for the missed prefix.
    pub fn data_source(&self) -> Option<SocketAddr> {
        self.source().or(self.peer())
    }

    /// The session sender when feedback goes through a merger.
    fn source(&self) -> Option<SocketAddr> {
        match &self.role {
            Role::ViaMerger(link) => Some(link.source),
            _ => None,
        }
    }

    /// The fallback chain of a member reporting through a merger.
    fn chain(&self) -> Option<&ParentChain> {
        match &self.role {
            Role::ViaMerger(link) => Some(&link.chain),
            _ => None,
        }
    }

    fn chain_mut(&mut self) -> Option<&mut ParentChain> {
        match &mut self.role {
            Role::ViaMerger(link) => Some(&mut link.chain),
            _ => None,
        }
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    /// Separate byte ranges its reassembly buffer holds now, and the most
    /// it ever holds (pieces that would add one beyond are refused and
    /// counted as [`DropReason::LimitExceeded`]).
    pub fn held_ranges(&self) -> (usize, usize) {
        (self.buffer.range_count(), self.buffer.max_ranges())
    }

    /// Queues bytes for the session sender on this member's own connection
    /// (session relay, TCP-SMO §IV.B; `crate::upstream`); returns how
    /// many the bounded upstream buffer took (never blocks). Always 0 for
    /// a member reporting through a merger (mergers do not relay it), and
    /// once the session or the upstream stream ended.
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
        matches!(self.role, Role::Member) && !self.is_closed()
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
            tracing::debug!(?reason, "receiver: closing");
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
        // Data flows: its ACKs validate this receiver from now on.
        self.confirm_retry = None;
        let range = d.range();
        if d.fin {
            let consistent = self.fin.is_none_or(|f| f == range.end)
                && range.end >= self.buffer.rcv_nxt()
                && self
                    .buffer
                    .highest_held_end()
                    .is_none_or(|end| end <= range.end);
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
        let named = self.named_deadline.take();
        let (mut due, mut sent) = (None, None);
        if let Some(b) = self.messages.as_mut() {
            self.sender_clock
                .on_timestamp(self.arrived.unwrap_or(now), d.timestamp);
            due = named.and_then(|t| self.sender_clock.local(now, t));
            sent = self.sender_clock.sent_at(now, d.timestamp);
            if d.message_end && range.end > self.buffer.read_pos() {
                if !b.has_room() {
                    // Comes again (or is skipped) once earlier messages
                    // were read.
                    self.stats.drops.count(DropReason::LimitExceeded);
                    return;
                }
                b.on_message_end(range.end);
            }
        }
        let nxt_before = self.buffer.rcv_nxt();
        let mut duplicate = false;
        if !d.payload.is_empty() {
            match self.buffer.insert(d.offset, d.payload) {
                Ok(n) => {
                    self.stats.payload_bytes_received += n;
                    if let Some(b) = self.messages.as_mut() {
                        if let Some(due) = due {
                            b.on_deadline(d.offset, due);
                        }
                        if let Some(sent) = sent {
                            b.on_sent(d.offset, sent);
                        }
                    }
                }
                Err(Refused::Duplicate) => {
                    duplicate = true;
                    self.stats.duplicate_bytes += d.payload.len() as u64;
                    self.stats.drops.count(DropReason::Duplicate);
                }
                Err(Refused::BeyondWindow) => {
                    self.stats.drops.count(DropReason::BeyondWindow);
                    return;
                }
                Err(Refused::TooFragmented) => {
                    self.stats.drops.count(DropReason::LimitExceeded);
                    return;
                }
            }
        }
        // RFC 7323 §4.3: TS.Recent comes from segments at the left edge
        // (SEG.SEQ <= Last.ACK.sent) and never moves backwards
        // (SEG.TSval >= TS.Recent, compared modulo 2^32).
        let arrived = self.arrived.unwrap_or(now);
        if d.offset <= self.last_ack_sent && d.timestamp.is_at_or_after(self.ts_recent) {
            self.ts_recent = d.timestamp;
            self.ts_recent_at = Some(arrived);
        }
        if self
            .ts_latest
            .is_none_or(|(t, _)| d.timestamp.is_at_or_after(t))
        {
            self.ts_latest = Some((d.timestamp, arrived));
        }
        let out_of_order = d.offset > nxt_before;
        let filled_gap = !out_of_order && self.buffer.rcv_nxt() > range.end;
        if let Some(b) = self.messages.as_mut() {
            b.on_rcv_nxt(self.buffer.rcv_nxt());
            if out_of_order && !duplicate {
                if let Some(held) = self.buffer.held_range_containing(d.offset) {
                    b.on_arrival_beyond(held, arrived);
                }
            }
        }
        self.most_recent = Some(range);
        if self.counted_on_arrival {
            return;
        }
        let quick = self.quick_acks_left > 0;
        self.quick_acks_left = self.quick_acks_left.saturating_sub(1);
        self.acks.on_segment(
            now,
            out_of_order || filled_gap || duplicate || d.fin || quick,
        );
    }

    /// A segment of a run arrived and is held until the rest came (it
    /// counts as received: SACKed): counted for the ACK schedule now, as an
    /// arrival out of order unless `in_order` (all it follows came).
    fn on_held_in_run(&mut self, now: Instant, range: Range<u64>, in_order: bool) {
        self.most_recent = Some(range);
        let quick = self.quick_acks_left > 0;
        self.quick_acks_left = self.quick_acks_left.saturating_sub(1);
        self.acks.on_segment(now, !in_order || quick);
    }

    /// Held datagrams dropped unreleased: what of them this receiver holds
    /// no copy of (acknowledged in vain) is reneged, told to the sender.
    fn collect_reneged(&mut self, now: Instant) {
        let Some(keys) = self.keys.as_mut() else {
            return;
        };
        let dropped = keys.take_dropped();
        if dropped.is_empty() {
            return;
        }
        let held = keys.held_ranges();
        for r in dropped {
            for gap in self.buffer.gaps_in(r) {
                for part in subtract(gap, &held) {
                    add_range(&mut self.reneged, part);
                }
            }
        }
        self.reneged.truncate(crate::wire::MAX_SACK_RANGES);
        // Not at once: the sender's copy may be on its way (a rogue
        // member's, ahead of it, was dropped); what came by then is not
        // reneged.
        if !self.reneged.is_empty() && self.renege_at.is_none() {
            self.renege_at = Some(now + RENEGE_INTERVAL);
        }
    }

    /// The sender gave up `[offset, offset + len)` (real-time mode): the
    /// hole is filled with nothing, so RCV.NXT moves on, and the messages
    /// it touched are dropped when read.
    fn on_skip(&mut self, now: Instant, s: &SkipFrame) {
        let range = s.offset..s.offset + s.len;
        if self.fin.is_some_and(|f| range.end > f) || range.end > self.buffer.window_end() {
            self.stats.drops.count(DropReason::BeyondWindow);
            return;
        }
        if range.end <= self.buffer.read_pos() {
            self.stats.drops.count(DropReason::Duplicate);
            // As for a duplicate segment (RFC 9293 §3.10.7.4): the sender
            // has not heard that this receiver is past the range (its ACK
            // was lost, or it skipped the hole itself); tell it at once,
            // or a sender whose window is full waits for an ACK that
            // never comes.
            self.acks.request_immediate();
            return;
        }
        let nxt_before = self.buffer.rcv_nxt();
        // Only the bytes this receiver lacks damage its messages: a SKIP
        // multicast for others' losses changes nothing here.
        let gaps = self.buffer.gaps_in(range.clone());
        let news = !gaps.is_empty();
        self.stats.skipped_bytes += self.buffer.skip(range.clone());
        if let Some(b) = self.messages.as_mut() {
            for gap in gaps {
                b.on_skip(gap, false);
            }
            if s.ends_message {
                b.on_message_end(range.end);
            }
        }
        // Like a segment filling a gap, or a duplicate: acknowledged at once.
        self.acks
            .on_segment(now, self.buffer.rcv_nxt() > nxt_before || !news);
    }

    /// When the hole at RCV.NXT is to be skipped by this receiver (a
    /// real-time receiver with a latency budget, TCP-RTM).
    fn hole_deadline(&self) -> Option<Instant> {
        let b = self.messages.as_ref()?;
        b.hole_deadline(self.buffer.out_of_order().next())
    }

    /// Skips every hole whose data behind it has waited the latency budget:
    /// RCV.NXT moves past it, the ACK says so, and the messages it damaged
    /// are dropped when read.
    fn skip_late_holes(&mut self, now: Instant) {
        while let Some(deadline) = self.hole_deadline() {
            if deadline > now {
                return;
            }
            let hole =
                self.buffer.rcv_nxt()..self.buffer.out_of_order().next().map_or(0, |r| r.start);
            if hole.is_empty() {
                return;
            }
            self.stats.late_skipped_bytes += self.buffer.skip(hole.clone());
            if let Some(b) = self.messages.as_mut() {
                b.on_skip(hole, false);
                b.on_rcv_nxt(self.buffer.rcv_nxt());
            }
            self.acks.request_immediate();
        }
    }

    fn handle_frames(&mut self, now: Instant, body: &[u8]) {
        self.named_deadline = None;
        for frame in decode_frames(body) {
            let Ok(frame) = frame else {
                self.stats.drops.count(DropReason::MalformedFrame);
                return;
            };
            match frame {
                Frame::Data(d) => self.on_data(now, &d),
                Frame::Renege(_) => self.stats.drops.count(DropReason::UnexpectedFrame),
                // For the DATA after it (ignored by a reliable receiver).
                Frame::Deadline(t) => self.named_deadline = Some(t),
                Frame::Skip(f) if self.messages.is_some() => self.on_skip(now, &f),
                // A real-time sender gives up bytes this reliable receiver
                // must have: it cannot go on, and says why.
                Frame::Skip(_) if self.peer.is_some() => {
                    self.stats.drops.count(DropReason::UnexpectedFrame);
                    self.reset(
                        4,
                        "the sender streams in real time (it skips lost data); \
                         this receiver takes every byte",
                    );
                }
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
                    self.max_ack_delay_us = f.max_ack_delay_us;
                    if f.every == 0 {
                        // Only the bound: the ACK schedule stays its own.
                        continue;
                    }
                    let n = f.every;
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
                // A repeated OFFER from the sender joined, or a repeated
                // ACCEPT: already answered.
                // A GROUP_KEY was taken under the pair key before
                // ([`protect::ReceiverKeys::on_pair_frames`]).
                // The sender's announcement names its payload size: smaller
                // than its ACCEPT said if it fitted its datagrams to a later
                // joiner's path before data flowed. (Only ever smaller: a
                // forged one can then only quiet the path verdict.)
                Frame::Offer(o) => self.session_payload = self.session_payload.min(o.max_payload),
                Frame::Padding | Frame::Accept(_) | Frame::GroupKey(_) | Frame::Segments(_) => {}
                Frame::Connect(_)
                | Frame::CatchUp(_)
                | Frame::Sent(_)
                | Frame::Ack(_)
                | Frame::Skip(_)
                | Frame::Upstream(_)
                | Frame::Handshake(_)
                | Frame::GroupKeyAck(_)
                | Frame::SegmentsRequest(_)
                | Frame::Rekey
                | Frame::Retry(_)
                | Frame::Signature(_)
                | Frame::SourceKey(_)
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
        let frame = u.poll_frame(now)?;
        let mut p = PacketBuilder::new(buf, &mut self.numbers, session_id, false);
        p.frames_with(|out| out.extend_from_slice(&frame));
        p.finish();
        self.stats.datagrams_sent += 1;
        Some(Transmit { destination: peer })
    }

    /// A datagram of one frame to `to`.
    fn send_frame(
        &mut self,
        buf: &mut Vec<u8>,
        session_id: u64,
        to: SocketAddr,
        frame: &Frame<'_>,
    ) -> Transmit {
        let mut p = PacketBuilder::new(buf, &mut self.numbers, session_id, false);
        p.frame(frame);
        p.finish();
        self.stats.datagrams_sent += 1;
        Transmit { destination: to }
    }

    fn build_ack(&self, now: Instant) -> AckFrame {
        let cumulative = self.ack_point();
        let nxt = self.buffer.rcv_nxt();
        // A received FIN is one more sequence number, just past its data.
        let fin = self.fin.filter(|&f| f > nxt);
        let with_fin = |r: Range<u64>| {
            if Some(r.end) == fin {
                r.start..r.end + 1
            } else {
                r
            }
        };
        // RFC 2018 §4: the first block reports the most recent arrival, the
        // others the lowest held ranges. Only the ranges reported are
        // visited (a buffer may hold thousands).
        // Segments of runs held until the rest came count as received
        // (protected sessions, `docs/wire.md` §4.12).
        let held = self
            .keys
            .as_ref()
            .map(|k| k.held_ranges())
            .unwrap_or_default();
        // A run held for a segment it still lacks may hold copies of
        // segments the buffer took otherwise (decoded from repair symbols,
        // sent by unicast): a block reports only what lies above the
        // cumulative point (a sender clips it anyway; one of an earlier
        // version refused it, and with it the whole ACK).
        let held_above = held.into_iter().filter_map(|r| {
            let start = r.start.max(cumulative);
            (start < r.end).then_some(start..r.end)
        });
        let ranges = merged(self.buffer.out_of_order(), held_above);
        let recent = self.most_recent.as_ref().and_then(|m| {
            (ranges.iter())
                .find(|r| r.contains(&m.start))
                .filter(|r| r.start > nxt)
                .cloned()
        });
        let mut sack = Vec::with_capacity(MAX_SACK_RANGES);
        sack.extend(recent.clone().map(with_fin));
        for r in ranges {
            if sack.len() == MAX_SACK_RANGES {
                break;
            }
            if Some(&r) != recent.as_ref() {
                sack.push(with_fin(r));
            }
        }
        if let Some(f) = fin {
            if sack.len() < MAX_SACK_RANGES && !sack.iter().any(|r| r.end == f + 1) {
                sack.push(f..f + 1);
            }
        }
        debug_assert!(
            sack.iter()
                .all(|r| r.start >= cumulative && r.start < r.end),
            "SACK blocks {sack:?} with the cumulative point at {cumulative}"
        );
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

impl Receiver {
    /// While joining: the target's ACCEPT or refusal, or the sender's
    /// datagrams arriving ahead of a merger's ACCEPT. True if consumed.
    fn on_joining(
        &mut self,
        now: Instant,
        from: SocketAddr,
        session_id: u64,
        datagram: &[u8],
        body: &[u8],
    ) -> bool {
        let State::Joining { target, .. } = self.state else {
            return false;
        };
        match decode_frames(body).next() {
            Some(Ok(Frame::Accept(a))) if from == target => {
                self.peer = Some((from, session_id));
                self.token = a.token;
                self.member_id = a.member_id;
                self.buffer.start_at(a.start_offset);
                self.start = self.buffer.read_pos();
                self.sender_clock
                    .set_join_rtt(a.timestamp_echo.elapsed(now));
                self.last_ack_sent = a.start_offset;
                self.state = State::Established;
                self.events.push_back(Event::Connected);
                self.confirm = true;
                self.confirm_retry = Some((now + retry_wait(0, self.config.rto.initial), 0));
                self.session_payload = a.max_payload;
                if a.max_payload > self.config.max_payload() {
                    // Its datagrams are larger than this receiver's route
                    // carries (its MTU): they would never arrive. Leave
                    // at once, telling the sender why.
                    let reason = format!(
                        "the sender's datagrams carry {}-byte payloads, more than \
                         this receiver's route takes ({})",
                        a.max_payload,
                        self.config.max_payload()
                    );
                    self.reset(3, &reason);
                    return true;
                }
                // The parent's silence counts from its ACCEPT, not from
                // when this receiver started waiting for the tree to form.
                if let Some(c) = self.chain_mut() {
                    c.heard(now);
                }
                // Those of this session are taken; the rest dropped.
                if let Role::ViaMerger(link) = &mut self.role {
                    link.early_bytes = 0;
                    let (source, early) = (link.source, std::mem::take(&mut link.early));
                    for d in early {
                        self.stats.datagrams_received -= 1; // counted on arrival
                        self.handle_datagram(now, source, &d);
                    }
                }
            }
            // The sender refused the join (session full, file start
            // already released): give up now, with its reason, rather
            // than at the handshake timeout.
            Some(Ok(Frame::Reset(CloseFrame { code, reason }))) if from == target => {
                if !self.join_next(now) {
                    self.close(CloseReason::PeerReset {
                        code,
                        reason: reason.into(),
                    });
                }
            }
            // The sender is under a join flood: join again at once under
            // its token, which proves this address receives.
            Some(Ok(Frame::Retry(token))) if from == target => {
                self.retry_token = token;
                if let State::Joining { next_try, .. } = &mut self.state {
                    *next_try = now;
                }
            }
            // The target offers (an invited join) or announces its
            // session: it is up. An invited CONNECT goes again at once; any
            // other within the first retry's wait, not after the backoff
            // that CONNECTs sent before the sender listened ran up (a
            // receiver started first, whose join then met a lost ACCEPT,
            // waited 1.6 s for its next try).
            Some(Ok(Frame::Offer(_))) if from == target => {
                if let State::Joining {
                    invited, next_try, ..
                } = &mut self.state
                {
                    let soon = if *invited { now } else { now + FIRST_RETRY };
                    *next_try = (*next_try).min(soon);
                }
            }
            _ => {
                let charge = datagram.len().max(EARLY_MIN_CHARGE);
                match &mut self.role {
                    Role::ViaMerger(link)
                        if link.source == from && link.early_bytes + charge <= MAX_EARLY_BYTES =>
                    {
                        link.early_bytes += charge;
                        link.early.push(datagram.into());
                    }
                    _ => self.stats.drops.count(if from == target {
                        DropReason::UnexpectedFrame
                    } else {
                        DropReason::UnknownPeer
                    }),
                }
            }
        }
        true
    }

    /// A listener's OFFER: join the offering sender. True if consumed.
    fn on_listening(&mut self, now: Instant, from: SocketAddr, body: &[u8]) -> bool {
        let Role::Listener { allowed } = &self.role else {
            return false;
        };
        if !allowed.allows(from) {
            self.stats.drops.count(DropReason::UnknownPeer);
            return true;
        }
        if !matches!(decode_frames(body).next(), Some(Ok(Frame::Offer(_)))) {
            self.stats.drops.count(DropReason::UnknownSession);
            return true;
        }
        self.role = Role::Member;
        self.state = State::Joining {
            target: from,
            invited: true,
            attempts: 0,
            next_try: now,
            deadline: now + self.config.handshake_timeout,
        };
        true
    }
}

impl Receiver {
    /// One datagram's frames (opened, in a protected session).
    fn on_frames(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: crate::wire::Header,
        datagram: &[u8],
        body: &[u8],
    ) {
        if self.is_closed() {
            // A closed receiver never revives, whoever asks.
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        if self.state == State::Listening {
            self.on_listening(now, from, body);
            return;
        }
        if self.on_joining(now, from, header.session_id, datagram, body) {
            return;
        }
        if self.rejoin_target() == Some(from) && self.on_rejoin_reply(now, header.session_id, body)
        {
            return;
        }
        let Some((peer, session)) = self.peer else {
            self.stats.drops.count(DropReason::UnknownSession);
            return;
        };
        // DATA straight from the sender while feedback goes to a merger.
        let from_source = self.source() == Some(from) && session == header.session_id;
        if !from_source && (peer, session) != (from, header.session_id) {
            let offer = matches!(decode_frames(body).next(), Some(Ok(Frame::Offer(_))));
            // Another sender offers itself: busy. (Another session's
            // announcement to a shared group is not for us: not answered.)
            if offer && from != peer && !header.flags.contains(crate::wire::HeaderFlags::MULTICAST)
            {
                if self.refusals.len() < MAX_PENDING_REFUSALS {
                    self.refusals.push_back((from, header.session_id));
                } else {
                    self.stats.drops.count(DropReason::LimitExceeded);
                }
            } else {
                self.stats.drops.count(if peer != from {
                    DropReason::UnknownPeer
                } else {
                    DropReason::UnknownSession
                });
            }
            return;
        }
        let pn = expand_pn(self.largest_pn.map_or(0, |l| l + 1), header.packet_number);
        self.largest_pn = Some(self.largest_pn.map_or(pn, |l| l.max(pn)));
        self.last_heard = now;
        if peer == from {
            if let Some(c) = self.chain_mut() {
                c.heard(now);
            }
        }
        if from == self.source().unwrap_or(peer) {
            self.path_probe.heard(datagram.len(), body);
        }
        self.handle_frames(now, body);
        self.check_path();
    }

    /// Leaves, saying why, once the sender's announcements show that its
    /// datagrams are too large for the path (`crate::wire::path_probe`).
    fn check_path(&mut self) {
        if self.state != State::Established || self.is_closed() {
            return;
        }
        let Some(largest) = self.path_probe.too_small(self.session_payload) else {
            return;
        };
        let fits = if largest > 0 {
            format!("{largest}-byte ones do: the sender's --max-datagram {largest} fits")
        } else {
            "nor do its 1232-byte probes: the path carries less than a 1280-byte MTU".into()
        };
        let reason = format!(
            "the sender's datagrams (payloads of {} bytes) do not reach this host over \
             the path, though its small announcements do: a link on the way takes less; {fits}",
            self.session_payload
        );
        self.reset(3, &reason);
    }

    /// A datagram of a protected session: sealed from the sender, or in
    /// the clear — an OFFER to a listener, the answer to our handshake.
    fn on_protected(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let header = match crate::wire::read_header(datagram) {
            Ok(h) => h,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        if self.is_closed() {
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let target = self.join_target();
        // Where this member's session announces itself from, once joined.
        let announcer = match (&self.state, self.peer) {
            (State::Established, Some((peer, session))) => {
                Some((self.source().unwrap_or(peer), session))
            }
            _ => None,
        };
        let delivered = self.ack_point();
        let via_merger = self.source().is_some_and(|s| s != from);
        let keys = self.keys.as_mut().expect("protected");
        let clear = &datagram[crate::wire::HEADER_LEN..];
        let buffer = &self.buffer;
        let taken = |r: Range<u64>, out: &mut Vec<u8>| buffer.copy_out(r, out);
        // Data taken otherwise than from a run (by unicast, decoded) may
        // complete runs held for it.
        let mut recheck = false;
        if header.flags.contains(crate::wire::HeaderFlags::LISTED) {
            let (outcome, refused) =
                keys.open_listed(now, &header, datagram, &mut scratch, delivered, &taken);
            for _ in 0..refused {
                self.stats.drops.count(DropReason::Unauthenticated);
            }
            match outcome {
                Ok(protect::Opened::Process(body)) => {
                    self.on_frames(now, from, header, datagram, body)
                }
                Ok(protect::Opened::Hold) => {} // for its list
                Ok(protect::Opened::HoldInRun(range, in_order)) => {
                    self.on_held_in_run(now, range, in_order)
                }
                Ok(protect::Opened::ReleaseRun { held, in_order }) => {
                    // The datagram that completed it, counted now as an
                    // arrival (one filling a hole asks for an ACK at once);
                    // the others were when they came.
                    let quick = self.quick_acks_left > 0;
                    self.quick_acks_left = self.quick_acks_left.saturating_sub(1);
                    self.acks.on_segment(now, !in_order || quick);
                    self.counted_on_arrival = true;
                    self.on_held(now, from, header, datagram, held);
                    self.counted_on_arrival = false;
                }
                Ok(protect::Opened::Settled(body)) => match self.settled_copy(body) {
                    Ok(()) => self.on_frames(now, from, header, datagram, body),
                    Err(reason) => self.stats.drops.count(reason),
                },
                Err(reason) => self.stats.drops.count(reason),
            }
        } else if header.flags.contains(crate::wire::HeaderFlags::SEALED) {
            match keys.open(&header, datagram, &mut scratch) {
                Ok((pn, body)) if header.flags.contains(crate::wire::HeaderFlags::MULTICAST) => {
                    // Multicast: only what the sender's signed lists name.
                    let (source, refused) =
                        keys.authenticate(now, pn, datagram, body, delivered, &taken);
                    for _ in 0..refused {
                        self.stats.drops.count(DropReason::Unauthenticated);
                    }
                    match source {
                        protect::Source::Process => {
                            recheck = has_data(body);
                            self.on_frames(now, from, header, datagram, body)
                        }
                        protect::Source::Hold => {}
                        protect::Source::Release(held) => {
                            // Coded repair symbols among them fill gaps.
                            recheck = true;
                            self.on_held(now, from, header, datagram, held)
                        }
                    }
                }
                Ok((_, body)) => {
                    // Behind a merger, data comes only from the group,
                    // under the sender's signed lists: DATA (or REPAIR)
                    // the merger relays it could have altered.
                    let relayed = keys.has_group() && via_merger;
                    let released = keys.on_pair_frames(body, delivered, &taken);
                    if relayed && has_data(body) {
                        self.stats.drops.count(DropReason::Unauthenticated);
                        let kept = without_data(body);
                        self.on_frames(now, from, header, datagram, &kept);
                    } else {
                        recheck = has_data(body);
                        self.on_frames(now, from, header, datagram, body);
                    }
                    recheck |= !released.is_empty();
                    self.on_held(now, from, header, datagram, released);
                }
                Err(reason) => self.stats.drops.count(reason),
            }
        } else {
            match decode_frames(clear).next() {
                Some(Ok(Frame::Offer(_))) if self.state == State::Listening => {
                    self.on_listening(now, from, clear);
                }
                // The offering sender offers again: the CONNECT goes again.
                Some(Ok(Frame::Offer(_))) if target == Some(from) => {
                    self.on_joining(now, from, header.session_id, datagram, clear);
                }
                // The sender's announcement (in clear, as for anyone): a
                // path probe (`crate::wire::path_probe`).
                Some(Ok(Frame::Offer(o))) if announcer == Some((from, header.session_id)) => {
                    self.session_payload = self.session_payload.min(o.max_payload);
                    self.path_probe.heard(datagram.len(), clear);
                    self.check_path();
                }
                Some(Ok(Frame::Handshake(answer))) if keys.is_joining() => {
                    match keys.on_answer(from, answer, header.session_id) {
                        Ok(frames) if self.rejoin_target() == Some(from) => {
                            self.on_rejoin_reply(now, header.session_id, &frames);
                        }
                        Ok(frames) => {
                            self.on_joining(now, from, header.session_id, datagram, &frames);
                        }
                        Err(reason) => self.stats.drops.count(reason),
                    }
                }
                _ => self.stats.drops.count(DropReason::Unauthenticated),
            }
        }
        self.scratch = scratch;
        if recheck && self.keys.as_ref().is_some_and(|k| k.holds_runs()) {
            self.recheck_runs(now, from, header, datagram);
        }
        self.collect_reneged(now);
    }

    /// Held runs completed by data taken otherwise (by unicast, decoded):
    /// those that check are released (their datagrams were counted for the
    /// ACK schedule as they came).
    fn recheck_runs(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: crate::wire::Header,
        datagram: &[u8],
    ) {
        let delivered = self.ack_point();
        let Some(keys) = self.keys.as_mut() else {
            return;
        };
        let buffer = &self.buffer;
        let released = keys.recheck_runs(delivered, &|r, out| buffer.copy_out(r, out));
        if !released.is_empty() {
            self.counted_on_arrival = true;
            self.on_held(now, from, header, datagram, released);
            self.counted_on_arrival = false;
        }
    }

    /// Whether a listed datagram's one DATA frame (`frames`), a copy of a
    /// segment of a run already settled, equals the bytes taken: where the
    /// buffer still holds them, a copy that differs is forged; where it no
    /// longer does, one below the delivery point is a duplicate.
    fn settled_copy(&self, frames: &[u8]) -> Result<(), DropReason> {
        let Some(Ok(Frame::Data(d))) = decode_frames(frames).next() else {
            return Err(DropReason::Unauthenticated);
        };
        let range = d.offset..d.offset + d.payload.len() as u64;
        let mut held = Vec::with_capacity(d.payload.len());
        if self.buffer.copy_out(range.clone(), &mut held) {
            return if held == d.payload {
                Ok(())
            } else {
                Err(DropReason::Unauthenticated)
            };
        }
        if range.end <= self.ack_point() {
            Err(DropReason::Duplicate)
        } else {
            Err(DropReason::Unauthenticated)
        }
    }

    /// Frames of held datagrams a verified list released (each with its
    /// arrival): processed in order, their ACK reporting the hold as ACK
    /// delay, so the sender's RTT stays the path's.
    fn on_held(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: crate::wire::Header,
        datagram: &[u8],
        held: Vec<(Instant, Vec<u8>)>,
    ) {
        for (arrived, frames) in held {
            self.arrived = Some(arrived);
            self.on_frames(now, from, header, datagram, &frames);
            if let Some(keys) = self.keys.as_mut() {
                keys.recycle(frames);
            }
        }
        self.arrived = None;
    }

    /// The ranges to renege now, if due: those still not held again and
    /// above the cumulative point, every [`RENEGE_INTERVAL`] until the
    /// sender has sent them again.
    fn take_renege(&mut self, now: Instant) -> Option<Vec<Range<u64>>> {
        if self.renege_at.is_none_or(|t| now < t) {
            return None;
        }
        let (nxt, held) = (
            self.ack_point(),
            self.keys
                .as_ref()
                .map(|k| k.held_ranges())
                .unwrap_or_default(),
        );
        let mut still = Vec::new();
        for r in std::mem::take(&mut self.reneged) {
            let r = r.start.max(nxt)..r.end;
            if r.is_empty() {
                continue;
            }
            for gap in self.buffer.gaps_in(r) {
                still.extend(subtract(gap, &held));
            }
        }
        self.reneged = still;
        if self.reneged.is_empty() {
            self.renege_at = None;
            return None;
        }
        self.renege_at = Some(now + RENEGE_INTERVAL);
        Some(self.reneged.clone())
    }

    /// Where the join under way goes, if one is.
    fn join_target(&self) -> Option<SocketAddr> {
        match self.state {
            State::Joining { target, .. } => Some(target),
            _ => None,
        }
    }

    /// The next datagram to send, before any seal.
    fn next_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let (Some((code, reason)), Some((addr, _))) = (self.pending_reset.take(), self.peer) {
            let reset = Frame::Reset(CloseFrame {
                code,
                reason: &reason,
            });
            return Some(self.send_frame(buf, self.token, addr, &reset));
        }
        if let Some((addr, id)) = self.refusals.pop_front() {
            let reason = "receiver busy with another session";
            return Some(self.send_frame(
                buf,
                id,
                addr,
                &Frame::Reset(CloseFrame { code: 1, reason }),
            ));
        }
        if let State::Joining {
            target,
            attempts,
            next_try,
            deadline,
            invited,
        } = self.state
        {
            if next_try > now {
                return None;
            }
            self.state = State::Joining {
                target,
                attempts: attempts + 1,
                next_try: if invited {
                    deadline
                } else {
                    now + retry_wait(attempts, self.config.rto.initial)
                },
                deadline,
                invited,
            };
            let connect = Frame::Connect(ConnectFrame {
                max_payload: self.config.max_payload(),
                window: self.buffer.capacity(),
                timestamp: WireTimestamp::at(now),
                resume_from: 0,
            });
            if let Some(keys) = self.keys.as_mut() {
                // Protected: the CONNECT rides inside the handshake.
                let mut inner = Vec::new();
                connect.encode(&mut inner);
                let first = keys.first_message(target, &inner)?.to_vec();
                return Some(self.send_frame(buf, 0, target, &Frame::Handshake(&first)));
            }
            // Session id 0 (or a RETRY's token): the sender names the
            // session in its ACCEPT.
            return Some(self.send_frame(buf, self.retry_token, target, &connect));
        }
        let (peer, session_id) = self.peer?;
        if std::mem::take(&mut self.confirm) && self.state == State::Established {
            return Some(self.send_frame(buf, self.token, peer, &Frame::Padding));
        }
        if let Some(epoch) = self.keys.as_mut().and_then(|k| k.take_key_ack()) {
            let ack = Frame::GroupKeyAck(epoch);
            return Some(self.send_frame(buf, self.token, peer, &ack));
        }
        if let Some(ranges) = self.take_renege(now) {
            let renege = Frame::Renege(ranges);
            return Some(self.send_frame(buf, self.token, peer, &renege));
        }
        if let Some((offset, detail)) = self
            .keys
            .as_mut()
            .and_then(|k| k.take_segments_request(now))
        {
            let ask = Frame::SegmentsRequest(crate::wire::SegmentsRequestFrame { offset, detail });
            return Some(self.send_frame(buf, self.token, peer, &ask));
        }
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
        if !self.acks.should_ack(now) {
            return self.poll_upstream(now, self.token, peer, buf);
        }
        let ack = self.build_ack(now);
        let repeat = !std::mem::take(&mut self.ack_repeating)
            && self.messages.is_some()
            && !ack.sack.is_empty();
        self.ack_repeat_at = repeat.then(|| {
            now + (self.sender_clock.join_rtt() / ACK_REPEAT_FRACTION).max(ACK_REPEAT_MIN)
        });
        self.last_ack_sent = ack.cumulative;
        self.advertised_window_end = self.buffer.window_end();
        let t = self.send_frame(buf, self.token, peer, &Frame::Ack(ack));
        self.acks.on_ack_sent(now);
        self.stats.acks_sent += 1;
        Some(t)
    }
}

/// Whether `f` carries stream bytes (DATA, or a coded REPAIR symbol).
fn is_data(f: &Frame<'_>) -> bool {
    matches!(f, Frame::Data(_) | Frame::Repair(_))
}

/// Whether `frames` carry stream bytes.
fn has_data(frames: &[u8]) -> bool {
    decode_frames(frames).any(|f| f.is_ok_and(|f| is_data(&f)))
}

/// `frames` without those that carry stream bytes.
fn without_data(frames: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in decode_frames(frames).map_while(Result::ok) {
        if !is_data(&f) {
            f.encode(&mut out);
        }
    }
    out
}

impl Engine for Receiver {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        if self.keys.is_some() {
            self.on_protected(now, from, datagram);
            return;
        }
        let (header, body) = match crate::wire::accept_header(datagram) {
            Ok(ok) => ok,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        self.on_frames(now, from, header, datagram, body);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let start = buf.len();
        loop {
            let t = self.next_datagram(now, buf)?;
            match &self.keys {
                None => return Some(t),
                Some(k) if k.seal(buf, start, &self.numbers) => return Some(t),
                Some(_) => {
                    // Nothing but the handshake goes before the keys.
                    self.stats.drops.count(DropReason::Unauthenticated);
                    self.stats.datagrams_sent -= 1;
                    buf.truncate(start);
                }
            }
        }
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
                self.chain().and_then(|c| c.deadline()),
                self.keys
                    .as_ref()
                    .and_then(|k| k.segments_request_deadline()),
                self.renege_at,
                self.hole_deadline(),
                self.confirm_retry.map(|(at, _)| at),
                self.ack_repeat_at,
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

    fn max_wake_delay(&self) -> Option<std::time::Duration> {
        (self.max_ack_delay_us < crate::wire::MAX_ACK_INTERVAL_US)
            .then(|| std::time::Duration::from_micros(u64::from(self.max_ack_delay_us)))
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
        if self.state == State::Established {
            self.skip_late_holes(now);
            if self.ack_repeat_at.is_some_and(|at| at <= now) {
                self.ack_repeat_at = None;
                self.ack_repeating = true;
                self.acks.request_paced();
            }
            if let Some((_, sent)) = self.confirm_retry.filter(|(at, _)| *at <= now) {
                self.confirm = true;
                let next = now + retry_wait(sent + 1, self.config.rto.initial);
                self.confirm_retry = Some((next, sent + 1));
            }
        }
        match self.state {
            State::Established if self.chain().is_some() => {
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

/// A real-time receiver's ACK that reports a hole goes again this
/// fraction of its join round trip later, unless another ACK went
/// meanwhile: once, not repeated in turn. If the first was lost, the
/// sender would hear of the hole only with the next data's ACK — a whole
/// message later on a sparse stream — while the hole's deadline runs.
/// One ACK more per loss at most, only where data is sparser than this.
const ACK_REPEAT_FRACTION: u32 = 4;

/// The least wait before an ACK goes again ([`ACK_REPEAT_FRACTION`]): not
/// back to back, where one burst of loss would take both.
const ACK_REPEAT_MIN: std::time::Duration = std::time::Duration::from_millis(1);

/// How often a receiver tells its sender again of ranges it reneged while
/// they have not come again.
const RENEGE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

/// `a` and `b` (each in increasing order, disjoint) as one list in
/// increasing order, overlapping or adjacent ranges joined.
fn merged(
    a: impl Iterator<Item = Range<u64>>,
    b: impl Iterator<Item = Range<u64>>,
) -> Vec<Range<u64>> {
    let mut all: Vec<Range<u64>> = a.chain(b).collect();
    all.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// The parts of `r` outside every range of `minus` (increasing, disjoint).
fn subtract(r: Range<u64>, minus: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = r.start;
    for m in minus {
        if m.end <= at {
            continue;
        }
        if m.start >= r.end {
            break;
        }
        if m.start > at {
            out.push(at..m.start);
        }
        at = at.max(m.end);
    }
    if at < r.end {
        out.push(at..r.end);
    }
    out
}

/// Adds `r` to the increasing, disjoint `ranges`, joining neighbours.
fn add_range(ranges: &mut Vec<Range<u64>>, r: Range<u64>) {
    ranges.push(r);
    let joined = merged(std::mem::take(ranges).into_iter(), std::iter::empty());
    *ranges = joined;
}
