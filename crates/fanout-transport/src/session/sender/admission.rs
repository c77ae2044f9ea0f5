//! Who enters the session: receiver-initiated joins (CONNECT, TCP-SMO
//! §II.A), resumes after a merger crash (`super::super::resume`), and
//! sender-initiated transfers to known receivers — the session OFFERs
//! itself to a listener, which answers with an ordinary CONNECT (a unicast
//! transfer is a session of one).

use super::transmit::Control;
use super::{SessionEvent, SessionSender};
use crate::event::CloseReason;
use crate::handshake::retry_wait;
use crate::protection::answering::Clear;
use crate::recovery::Recovery;
use crate::session::config::{JoinPolicy, MAX_UNVALIDATED_MEMBERS};
use crate::session::member::Member;
use crate::session::timers::Timer;
use crate::session::RetryGate;
use crate::wire::{
    accept_header, decode_frames, read_header, ConnectFrame, Frame, Header, HeaderFlags,
    RosterFrame, HEADER_LEN,
};
use fanout_core::rtt::RttEstimator;
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use std::collections::BTreeSet;
use std::net::SocketAddr;

/// Most listeners one session invites (an application-side count; the
/// default member cap).
pub const MAX_OFFERS: usize = crate::session::DEFAULT_MAX_MEMBERS;

/// Smallest receive window a CONNECT may advertise, in segments. The
/// session window is the members' minimum, so a join with a smaller one
/// (a zero window, say) could only hold every member back; it is refused.
/// (A member's window may close later, by its ACKs: then the persist probe
/// and the stall timeout apply.)
pub const MIN_JOIN_WINDOW_SEGMENTS: u64 = 2;

/// An OFFER not answered yet.
#[derive(Debug)]
struct Offer {
    peer: SocketAddr,
    attempts: u32,
    next_try: Instant,
    deadline: Instant,
    /// Repeated with back-off ([`SessionSender::offer`]); false: sent once
    /// per request ([`SessionSender::answer_with_offer`]).
    repeat: bool,
}

/// The listeners this session invited.
#[derive(Debug, Default)]
pub(super) struct Offers {
    pending: Vec<Offer>,
    /// Every address invited: once any is, only these may join.
    invited: BTreeSet<SocketAddr>,
}

impl Offers {
    fn is_pending(&self, peer: SocketAddr) -> bool {
        self.pending.iter().any(|o| o.peer == peer)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .iter()
            .map(|o| o.next_try.min(o.deadline))
            .min()
    }
}

impl SessionSender {
    /// Invites the receiver listening at `peer` (sender-initiated, as a
    /// unicast transfer starts): OFFERs are sent, backing off, until it
    /// joins or the handshake timeout passes. Once any receiver is invited,
    /// only invited receivers are admitted. False if the session is closed
    /// or already invited [`MAX_OFFERS`] receivers.
    pub fn offer(&mut self, now: Instant, peer: SocketAddr) -> bool {
        self.invite(now, peer, true)
    }

    /// Invites `peer` in answer to a request of its own (a late joiner's
    /// catch-up): one OFFER now, none repeated. The requester repeats its
    /// request until it joins, and each repeat is answered by calling this
    /// again — so an address gets no more OFFERs than it sent requests (an
    /// OFFER is about as long as a request: no amplification toward an
    /// address that may be forged). The invitation lasts the handshake
    /// timeout from the latest call. False as [`SessionSender::offer`].
    pub fn answer_with_offer(&mut self, now: Instant, peer: SocketAddr) -> bool {
        self.invite(now, peer, false)
    }

    fn invite(&mut self, now: Instant, peer: SocketAddr, repeat: bool) -> bool {
        if self.closed.is_some() {
            return false;
        }
        let deadline = now + self.config.transport.handshake_timeout;
        if let Some(o) = self.offers.pending.iter_mut().find(|o| o.peer == peer) {
            if !o.repeat {
                o.next_try = now;
                o.deadline = deadline;
                self.timers.set_earliest(Timer::Offer, now);
            }
            return true;
        }
        if self.offers.invited.contains(&peer) {
            // Joined already (or its invitation ended).
            return true;
        }
        if self.offers.invited.len() >= MAX_OFFERS {
            return false;
        }
        self.offers.invited.insert(peer);
        self.offers.pending.push(Offer {
            peer,
            attempts: 0,
            next_try: now,
            deadline,
            repeat,
        });
        self.timers.set_earliest(Timer::Offer, now);
        true
    }

    /// OFFERs due again, and invitations whose handshake time ran out.
    pub(super) fn on_offer_timeout(&mut self, now: Instant) {
        let initial = self.config.transport.rto.initial;
        let mut due = Vec::new();
        let mut expired = 0;
        self.offers.pending.retain_mut(|o| {
            if now >= o.deadline {
                expired += 1;
                return false;
            }
            if o.next_try <= now {
                due.push(o.peer);
                o.next_try = if o.repeat {
                    now + retry_wait(o.attempts, initial)
                } else {
                    o.deadline
                };
                o.attempts += 1;
            }
            true
        });
        for peer in due {
            self.stats.offers_sent += 1;
            self.control(peer, Control::Offer);
        }
        self.timers.set(Timer::Offer, self.offers.next_deadline());
        if expired > 0 {
            self.after_offers_ended(CloseReason::HandshakeTimeout);
        }
    }

    /// Ends a session of invitations that nobody answered.
    fn after_offers_ended(&mut self, why: CloseReason) {
        if self.offers.pending.is_empty() && self.members.is_empty() && !self.data_open {
            self.close(why);
        }
    }

    /// One datagram: a member's, or a stranger's (a join, a refused OFFER).
    pub(super) fn on_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        if self.keys.is_none() {
            match accept_header(datagram) {
                Ok((header, body)) => self.on_frames(now, from, header, body, datagram.len()),
                Err(reason) => self.stats.drops.count(reason),
            }
            return;
        }
        // A protected session: sealed datagrams from members, handshakes
        // in the clear from joiners, nothing else.
        let header = match read_header(datagram) {
            Ok(h) => h,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        if self.closed.is_some() {
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let keys = self.keys.as_mut().expect("protected");
        if header.flags.contains(HeaderFlags::SEALED) {
            match keys.joins().open(from, &header, datagram, &mut scratch) {
                Ok(body) => self.on_frames(now, from, header, body, datagram.len()),
                Err(reason) => self.stats.drops.count(reason),
            }
        } else {
            match keys.joins().on_clear(now, from, &datagram[HEADER_LEN..]) {
                Ok(Clear::Join(payload)) => {
                    match decode_frames(&payload).next() {
                        Some(Ok(Frame::Connect(c))) => {
                            self.admit(now, from, 0, &c, &payload, datagram.len() as u64)
                        }
                        _ => self.stats.drops.count(DropReason::UnexpectedFrame),
                    }
                    if let Some(k) = self.keys.as_mut() {
                        k.joins().end_join();
                    }
                }
                Ok(Clear::Repeat) => self.on_repeated_join(from, datagram.len() as u64),
                Err(reason) => self.stats.drops.count(reason),
            }
        }
        self.scratch = scratch;
    }

    /// A protected joiner's retransmitted first handshake message: its
    /// answer goes again (charged to its address's budget).
    fn on_repeated_join(&mut self, from: SocketAddr, len: u64) {
        let Some(m) = self.members.at_addr(&from) else {
            return;
        };
        let (id, start, token) = (m.id(), m.start(), m.token());
        if !m.is_validated() {
            self.members
                .update(id, self.snd_nxt, |m| m.on_datagram_from(len, false));
        }
        // The answer written for its first message goes again as it was
        // (`protect::SenderKeys::answer`): the ACCEPT inside it is that
        // first one, so these fields only select the member.
        self.control(
            from,
            Control::Accept {
                member_id: id,
                timestamp: crate::wire::WireTimestamp(0),
                start,
                token,
            },
        );
    }

    /// The frames of one datagram (opened, if the session is protected).
    fn on_frames(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: Header,
        body: &[u8],
        datagram_len: usize,
    ) {
        if self.closed.is_some() {
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        let is_connect = matches!(decode_frames(body).next(), Some(Ok(Frame::Connect(_))));
        let joined_id = is_connect
            && (header.session_id == 0 || self.is_retry_token(now, from, header.session_id));
        if let Some(m) = self.members.at_addr(&from) {
            // A member speaks under its token (`super::super::member_token`):
            // under the public session id, anybody could. One whose ACCEPT
            // was lost retries its CONNECT, still under the id it joined
            // with (0, or a RETRY's token; it learns its token from the
            // ACCEPT).
            let echoed = header.session_id == m.token();
            let connect_retry = joined_id;
            if !(echoed || connect_retry) {
                self.stats.drops.count(DropReason::UnknownSession);
                return;
            }
            let (id, pn) = (m.id(), m.expand_pn(header.packet_number));
            if !m.is_validated() {
                // Its token came back: the address is its own.
                let len = datagram_len as u64;
                let newly = self
                    .members
                    .update(id, self.snd_nxt, |m| m.on_datagram_from(len, echoed));
                if newly == Some(true) {
                    self.on_validated(now, id);
                }
            }
            self.handle_member_frames(now, id, pn, body);
            return;
        }
        let ours = header.session_id == self.session_id;
        match decode_frames(body).next() {
            Some(Ok(Frame::Connect(c))) if ours || joined_id => {
                let id = header.session_id;
                self.admit(now, from, id, &c, body, datagram_len as u64);
            }
            // An invited listener refused (busy with another sender).
            Some(Ok(Frame::Reset(r))) if ours && self.offers.is_pending(from) => {
                let reason = r.reason.to_string();
                self.offers.pending.retain(|o| o.peer != from);
                self.timers.set(Timer::Offer, self.offers.next_deadline());
                self.after_offers_ended(CloseReason::PeerReset {
                    code: r.code,
                    reason,
                });
            }
            Some(Ok(Frame::Upstream(_))) => {
                self.stats.drops.count(DropReason::UnknownPeer);
                let table = self.upstream.get_or_insert_with(Default::default);
                table.stats.dropped_non_member += 1;
            }
            _ => self.stats.drops.count(DropReason::UnknownPeer),
        }
    }

    /// Refuses a join from `to` with `reason`.
    fn refuse(&mut self, to: SocketAddr, reason: &str) {
        if let Some(k) = self.keys.as_mut() {
            // Protected: inside the handshake's answer (authenticated).
            if let Some(answer) = k.joins().refusal(reason) {
                self.control(to, Control::Handshake(answer));
            }
            return;
        }
        self.control(
            to,
            Control::Reset {
                reason: reason.into(),
            },
        );
    }

    /// A member's address was just validated: what it missed before it
    /// joined is repaired now (deferred until then: [`Member::defer_missed`]).
    fn on_validated(&mut self, now: Instant, id: crate::session::MemberId) {
        let (snd_nxt, log) = (self.snd_nxt, &self.log);
        let missed = self
            .members
            .update(id, snd_nxt, |m| m.take_missed(now, log))
            .unwrap_or_default();
        tracing::debug!(
            session = self.session_id,
            member = id.0,
            "member address validated"
        );
        self.queue_repairs(now, id, missed);
        if let Some(m) = self.members.get(id) {
            let (addr, start) = (m.addr(), m.start());
            self.events
                .push_back(SessionEvent::MemberJoined { id, addr, start });
        }
    }

    /// Whether `id` is a RETRY token this session gave `addr` lately
    /// ([`crate::session::RetryGate`]; an unprotected session only).
    fn is_retry_token(&self, now: Instant, addr: SocketAddr, id: u64) -> bool {
        let key = &self.config.token_key;
        self.keys.is_none() && RetryGate::is_token(now, key, self.session_id, addr, id)
    }

    /// A CONNECT (in a datagram of `len` bytes, under header id
    /// `header_id`) from a stranger: admits it as a member (or refuses
    /// it), taking a merger's ROSTER riding with it (`docs/wire.md` §4.8).
    /// Its address is validated at once if the application invited it
    /// ([`SessionSender::offer`]) or it came back with a RETRY's token;
    /// otherwise it must echo its member token first
    /// ([`crate::address_budget`]). Under a join flood (many members
    /// unvalidated) an unprotected session answers an unproven join with a
    /// RETRY and keeps nothing.
    fn admit(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header_id: u64,
        connect: &ConnectFrame,
        body: &[u8],
        len: u64,
    ) {
        if !self.offers.invited.is_empty() && !self.offers.invited.contains(&from) {
            self.stats.drops.count(DropReason::UnknownPeer);
            self.refuse(from, "not invited to this transfer");
            return;
        }
        let named = self
            .offers
            .pending
            .iter()
            .any(|o| o.peer == from && o.repeat);
        let retried = self.is_retry_token(now, from, header_id);
        let unvalidated = self.members.len() - self.members.validated_len();
        let flood = self.retry.under_flood(now, unvalidated);
        if !named && !retried && self.keys.is_none() && flood {
            // Stateless: a RETRY no longer than the CONNECT, nothing kept.
            match (self.retry).retry(now, &self.config.token_key, self.session_id, from) {
                Some(token) => {
                    self.stats.retries_sent += 1;
                    self.control(from, Control::Retry(token));
                }
                None => self.stats.drops.count(DropReason::LimitExceeded),
            }
            return;
        }
        if !named && !retried && unvalidated >= MAX_UNVALIDATED_MEMBERS {
            // A join flood: dropped unanswered (the honest retry later).
            self.stats.drops.count(DropReason::LimitExceeded);
            return;
        }
        if self.members.len() >= self.config.max_members {
            self.stats.drops.count(DropReason::LimitExceeded);
            self.refuse(from, "session full");
            return;
        }
        if connect.window < MIN_JOIN_WINDOW_SEGMENTS * self.mss {
            self.stats.drops.count(DropReason::LimitExceeded);
            self.refuse(from, "receive window below two segments");
            return;
        }
        // A member re-attaching from a crashed merger holds `[0, P)` and
        // continues from P (`super::super::resume`).
        let resume = (connect.resume_from > 0).then(|| {
            crate::session::resume::resume_start(
                connect.resume_from,
                self.buffer.base(),
                self.snd_nxt,
            )
        });
        // The send position, but never past the last stream byte: a joiner
        // after the FIN went out starts at the FIN's offset and gets the
        // FIN as a repair (its prefix is then the whole stream).
        let position = self
            .buffer
            .fin()
            .map_or(self.snd_nxt, |f| f.min(self.snd_nxt));
        let start = match (resume, self.config.join) {
            (Some(Err(reason)), _) => {
                self.refuse(from, reason);
                return;
            }
            (Some(Ok(p)), _) => p,
            (None, JoinPolicy::Live) => position,
            (None, JoinPolicy::FromStart) if self.buffer.base() == 0 => 0,
            // Before any data went out a joiner starts at 0; after, at the
            // send position (data already sent is not in flight to it).
            (None, JoinPolicy::CatchUp) if self.snd_nxt == 0 => 0,
            (None, JoinPolicy::CatchUp) => position,
            (None, JoinPolicy::FromStart) => {
                self.refuse(from, "joined after the start of the file was released");
                return;
            }
        };
        self.offers.pending.retain(|o| o.peer != from);
        self.fit_datagrams_to(from, connect.max_payload);
        let id = self.members.next_id();
        let t = &self.config.transport;
        let mut recovery = Recovery::new(
            start,
            RttEstimator::new(self.config.member_rto()),
            t.cc.build(self.mss),
        );
        if self.realtime.is_some() {
            recovery.set_peer_skips_holes();
        }
        let token = self.config.token_key.token(self.session_id, id, from);
        let mut member = Member::new(id, from, token, start, connect.window, recovery, now);
        let validated = named || retried;
        if !validated {
            member = member.unvalidated(len);
        }
        if start < self.snd_nxt {
            // Joined a bulk session whose start is still buffered, after
            // data went out: what it missed is repaired like any loss,
            // once its address is validated.
            member.defer_missed(self.snd_nxt);
        }
        self.members.insert(member, self.snd_nxt);
        if let Some(k) = self.keys.as_mut() {
            k.joins().admitted(from);
        }
        self.stats.members_joined += 1;
        tracing::debug!(session = self.session_id, member = id.0, %from, start, "member joined");
        if validated {
            self.on_validated(now, id);
        }
        self.control(
            from,
            Control::Accept {
                member_id: id,
                timestamp: connect.timestamp,
                start,
                token,
            },
        );
        for f in decode_frames(body).skip(1) {
            if let Ok(Frame::Roster(r)) = f {
                self.on_roster(now, id, &r);
            }
        }
    }

    /// A merger member's roster page ([`crate::session::roster`]): its
    /// weight and its receivers' progress. Counts only; never releases
    /// data. The first page of each cycle is answered with SENT, which
    /// bounds what the merger believes of its children.
    pub(super) fn on_roster(
        &mut self,
        now: Instant,
        id: crate::session::MemberId,
        f: &RosterFrame,
    ) {
        self.roster.on_page(id, f, now);
        if f.first == 0 {
            if let Some(addr) = self.members.get(id).map(|m| m.addr()) {
                self.control(addr, Control::Sent);
            }
        }
    }
}
