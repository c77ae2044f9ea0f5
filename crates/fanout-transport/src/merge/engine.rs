//! The merger as a sans-IO engine: children's CONNECT / ACK / CLOSE in,
//! merged CONNECT and ACKs out to the parent; the parent's ACCEPT and
//! control frames (and any DATA it sends the merger) relayed down.

use super::ack_meet::AckSummary;
use super::children::{ChildTable, MAX_CHILDREN};
use super::config::{MergerConfig, MergerStats};
use super::join::ConnectSummary;
use super::mctcp::{ChildMsg, Mctcp, MctcpState, MctcpTag, Upstream};
use super::relay;
use super::roster::SubtreeRoster;
use super::sent::SentLog;
use super::spec::MergeTable;
use crate::event::CloseReason;
use crate::packet::{PacketBuilder, PacketNumbers};
use crate::session::RetryGate;
use crate::wire::{
    accept_header, decode_frames, AcceptFrame, AckFrame, CloseFrame, ConnectFrame, Frame, Header,
    SentFrame, WireTimestamp, HEADER_LEN,
};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use fanout_core::{Engine, Transmit};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

mod probe;
mod protect;
mod rejoin;

/// Most datagrams queued toward children; a relay beyond it is dropped and
/// counted (the parent's retransmission covers it).
pub const MAX_QUEUED: usize = 4 * MAX_CHILDREN;
/// Most RETRYs waiting to go out; beyond, unproven joins are dropped
/// unanswered (`limit_exceeded`; honest joiners try again). They go after
/// everything for the children, so a join flood cannot starve the
/// children's keep-alives and relays.
pub const MAX_QUEUED_RETRIES: usize = MAX_QUEUED / 4;

/// The merger's membership upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Up {
    /// Gathering children's CONNECTs ([`super::JoinMerge`]).
    Gathering,
    /// Merged CONNECT sent, waiting for ACCEPT.
    Connecting {
        attempts: u32,
        next_try: Instant,
        deadline: Instant,
    },
    /// A member of the parent's session.
    Established,
    Closed(CloseReason),
}

/// A concast ACK merger (MCTCP) for one session.
#[derive(Debug)]
pub struct Merger {
    config: MergerConfig,
    table: MergeTable<Mctcp>,
    up: Up,
    /// The merged CONNECT (repeated until ACCEPT).
    connect: Option<ConnectSummary>,
    /// The parent's session id (0 until ACCEPT).
    session_id: u64,
    /// The parent's ACCEPT.
    accept: Option<AcceptFrame>,
    /// Latest merged ACK not yet sent (a newer one supersedes it).
    pending_ack: Option<AckFrame>,
    /// RESET to send upstream: (session id, reason).
    pending_reset: Option<(u64, String)>,
    /// The parent just accepted: echo its token at once (one PADDING
    /// datagram), which validates this merger's address there
    /// (`crate::address_budget`).
    confirm_up: bool,
    /// The token of a parent's (or ancestor's) RETRY: the header id of the
    /// next CONNECTs to it (0 until one came).
    retry_token: u64,
    /// When unproven joins of children get a RETRY (unprotected, under a
    /// join flood).
    retry: crate::session::RetryGate,
    /// Datagrams toward children: (address, session id, frames).
    down: VecDeque<(SocketAddr, u64, Arc<[u8]>)>,
    /// RETRYs to unproven joiners: (address, header id, token).
    retries: VecDeque<(SocketAddr, u64, u64)>,
    parent_heard: Instant,
    /// Next scan for stalled children (while established).
    stall_check: Instant,
    numbers: PacketNumbers,
    stats: MergerStats,
    /// Ancestors to re-attach to when the parent falls silent
    /// ([`crate::reattach`]); `config.parent` is the current parent.
    chain: crate::reattach::ParentChain,
    /// Next keep-alive to the children ([`MergerConfig::keepalive`]).
    next_keepalive: Instant,
    /// Next round of PINGs to silent children ([`probe`]).
    next_probe: Instant,
    /// The subtree's receiver count and per-receiver progress, paged
    /// upstream in ROSTER frames ([`super::roster`]).
    roster: SubtreeRoster,
    /// How far the parent says the stream was sent (its SENT answers, and
    /// the ACCEPT's start offset), and since when. Children's claims beyond
    /// it are not believed (stall and silence eviction, late children's
    /// start); child mergers get it in SENT answers to their ROSTER pages.
    sent: SentLog,
    /// The handshakes and keys of a protected session ([`protect`]).
    keys: Option<Box<protect::MergerKeys>>,
    /// Where a sealed datagram is opened.
    scratch: Vec<u8>,
}

impl Merger {
    /// A merger with no children yet, reporting to `config.parent`.
    pub fn new(config: MergerConfig, now: Instant) -> Self {
        Merger {
            table: Self::fresh_table(&config),
            up: Up::Gathering,
            connect: None,
            session_id: 0,
            accept: None,
            pending_ack: None,
            pending_reset: None,
            confirm_up: false,
            retry_token: 0,
            retry: crate::session::RetryGate::default(),
            down: VecDeque::new(),
            retries: VecDeque::new(),
            parent_heard: now,
            stall_check: Instant::MAX,
            numbers: PacketNumbers::default(),
            stats: MergerStats::default(),
            chain: crate::reattach::ParentChain::new(&config.fallback, config.parent_silence, now),
            next_keepalive: now,
            next_probe: now,
            roster: SubtreeRoster::default(),
            sent: SentLog::default(),
            keys: config
                .protection
                .clone()
                .map(|p| Box::new(protect::MergerKeys::new(p))),
            scratch: Vec::new(),
            config,
        }
    }

    fn fresh_table(config: &MergerConfig) -> MergeTable<Mctcp> {
        let children = ChildTable::new(config.child_timeout, config.max_children);
        MergeTable::new(Mctcp::new(children, config.join))
    }

    /// Counters.
    pub fn stats(&self) -> MergerStats {
        let mut s = self.stats.clone();
        if let Some(MctcpState::Ack(a)) = self.table.state(MctcpTag::Ack) {
            s.duplicate_forwards = a.duplicates_forwarded;
            s.duplicates_suppressed = a.duplicates_suppressed;
        }
        if let Some(k) = &self.keys {
            s.group_keys_passed = k.key_updates;
            s.rekeys_sent = k.rekeys;
        }
        s
    }

    /// Children currently held.
    pub fn children(&self) -> usize {
        self.table.spec.children.len()
    }

    /// The parent's session id, once a member upstream.
    pub fn session_id(&self) -> Option<u64> {
        (self.up == Up::Established).then_some(self.session_id)
    }

    /// True while a member of the parent's session.
    pub fn is_established(&self) -> bool {
        self.up == Up::Established
    }

    /// Why the merger stopped, once it has.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        match &self.up {
            Up::Closed(r) => Some(r),
            _ => None,
        }
    }

    /// Receivers behind this merger (its subtree member count, as sent in
    /// its ROSTER pages).
    pub fn subtree_receivers(&self) -> u64 {
        self.roster.receivers(&self.table.spec.children)
    }

    /// The subtree's roster ([`SubtreeRoster`]): counts, pages, drops.
    pub fn roster(&self) -> &SubtreeRoster {
        &self.roster
    }

    /// Every receiver of the subtree and its cumulative ACK (direct
    /// children first-hand, deeper ones as their mergers reported them).
    pub fn roster_entries(&self) -> Vec<crate::wire::RosterEntry> {
        self.roster.list(&self.table.spec.children)
    }

    /// The last merged ACK built (what the parent knows of the subtree).
    pub fn merged(&self) -> Option<&AckSummary> {
        match self.table.state(MctcpTag::Ack) {
            Some(MctcpState::Ack(a)) => a.last.as_ref(),
            _ => None,
        }
    }

    /// The token child `addr` speaks under (its ACCEPT gave it), if any.
    pub fn child_token(&self, addr: &SocketAddr) -> Option<u64> {
        let c = self.table.spec.children.get(addr)?;
        (c.token != 0).then_some(c.token)
    }

    fn queue(&mut self, to: SocketAddr, session_id: u64, body: Arc<[u8]>) {
        // Half the queue is kept for validated children: datagrams to
        // addresses that never proved themselves (forged joins, strangers)
        // must not crowd out the keep-alives and relays of the children
        // that did.
        let validated =
            (self.table.spec.children.get(&to)).is_some_and(|c| c.address.is_validated());
        let room = if validated {
            MAX_QUEUED
        } else {
            MAX_QUEUED / 2
        };
        if self.down.len() >= room {
            self.stats.relay_overflow += 1;
            self.stats.drops.count(DropReason::LimitExceeded);
            return;
        }
        self.down.push_back((to, session_id, body));
    }

    /// Removes child `addr`, telling it with `reset` (RESET) only if its
    /// address was validated: a forged child's address may be a victim's.
    fn evict(&mut self, addr: SocketAddr, reset: &Arc<[u8]>) {
        let Some(child) = self.table.spec.children.remove(&addr) else {
            return;
        };
        self.stats.children_evicted += 1;
        if child.address.is_validated() {
            self.queue(addr, self.session_id, reset.clone());
        } else {
            self.forget_queued(addr);
        }
    }

    /// Drops what is queued for `addr`, a child gone unvalidated: nothing
    /// more goes to an address that never proved itself.
    fn forget_queued(&mut self, addr: SocketAddr) {
        self.down.retain(|(to, _, _)| *to != addr);
    }

    fn reset_body(reason: &str) -> Arc<[u8]> {
        let mut b = Vec::new();
        Frame::Reset(CloseFrame { code: 1, reason }).encode(&mut b);
        b.into()
    }

    /// The header id of its datagrams to the parent: the token of the
    /// parent's ACCEPT (`crate::session` member tokens).
    fn up_id(&self) -> u64 {
        self.accept.map_or(self.session_id, |a| a.token)
    }

    fn queue_accept(&mut self, to: SocketAddr, now: Instant) {
        let (Some(a), Some(c)) = (self.accept, self.table.spec.children.get(&to)) else {
            return;
        };
        let Some(start) = c.start else {
            return;
        };
        // The echo leaves out how long the merger held the CONNECT (while
        // it joined upstream), as QUIC's ACK delay does (RFC 9000 §13.2.5):
        // the child takes the ACCEPT's round trip for its path's, and a
        // real-time receiver half of it for the one-way delay its
        // deadlines are mapped with.
        let held = now.saturating_duration_since(c.connect_at).as_micros();
        let timestamp = WireTimestamp(c.connect_timestamp.0.wrapping_add(held as u32));
        let (key, session) = (&self.config.token_key, self.session_id);
        let Some(token) = self.table.spec.children.token(&to, now, |id| {
            key.token(session, crate::session::MemberId(id), to)
        }) else {
            return;
        };
        let mut b = Vec::new();
        Frame::Accept(AcceptFrame {
            max_payload: a.max_payload,
            timestamp_echo: timestamp,
            // The subtree is one member of the parent's session: every child
            // gets the merger's own member id, which phases a member's ACK
            // schedule (ACK_FREQUENCY, `ack_policy::slot_phase`), so the
            // children acknowledge in step and their ACKs merge into one per
            // round. With distinct ids they were spread over the slot, the
            // merged point advanced at nearly every child's ACK, and a merger
            // forwarded about half of what it received
            // (`docs/experiments/mctcp.md`).
            member_id: a.member_id,
            start_offset: start,
            // Each child speaks under a token of its own, which proves its
            // address (`crate::address_budget`).
            token,
        })
        .encode(&mut b);
        if let Some(keys) = self.keys.as_mut() {
            // Protected: the ACCEPT rides in the answer to its handshake.
            match keys.answer(to, &b) {
                Some(answer) => b = answer,
                None => return,
            }
        }
        self.queue(to, self.session_id, b.into());
    }

    /// Runs one message through the merge specification and acts on what
    /// it forwards.
    fn process(&mut self, msg: ChildMsg, now: Instant) {
        match self.table.process(msg, now) {
            Ok(Some(out)) => self.forward(out, now),
            Ok(None) => {}
            Err(_) => self.stats.drops.count(DropReason::LimitExceeded),
        }
    }

    fn forward(&mut self, out: Upstream, now: Instant) {
        match out {
            Upstream::Ack(m) => self.pending_ack = Some(m.to_frame(WireTimestamp(0))),
            Upstream::Connect(c) => {
                self.connect = Some(c);
                if self.up == Up::Gathering {
                    self.up = Up::Connecting {
                        attempts: 0,
                        next_try: now,
                        deadline: now + self.config.handshake_timeout,
                    };
                }
            }
        }
    }

    /// Where a child admitted after the merger joined upstream starts: the
    /// highest offset any child already acknowledged, but no further than
    /// what the parent said it sent or the last merged ACK told it (a
    /// child's claim beyond both is not believed), and at least the
    /// parent's start. Its `[0, start)` then covers every range the parent
    /// was told, so admitting it never shrinks the merged ACK (no SACK
    /// reneging toward the sender), and everything above is still held by
    /// the sender for this subtree (the merged point is below it).
    fn late_start(&self) -> u64 {
        let base = self.accept.map_or(0, |a| a.start_offset);
        let told = self.merged().map_or(0, AckSummary::highest);
        let believed = self.sent.end().max(told);
        self.table
            .spec
            .children
            .highest()
            .unwrap_or(base)
            .min(believed)
            .max(base)
    }

    /// A CONNECT from `from` (header id `header_session`; `retried`: it
    /// came back with a RETRY's token). Under a join flood an unprotected
    /// merger answers an unproven one with a stateless RETRY instead
    /// ([`RetryGate`]).
    fn admit(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header_session: u64,
        c: &ConnectFrame,
        retried: bool,
    ) {
        let unvalidated = self.table.spec.children.unvalidated();
        let established = self.up == Up::Established;
        if self.keys.is_none()
            && !retried
            && established
            && self.retry.under_flood(now, unvalidated)
        {
            if self.retries.len() >= MAX_QUEUED_RETRIES {
                self.stats.drops.count(DropReason::LimitExceeded);
                return;
            }
            let key = &self.config.token_key;
            let Some(token) = self.retry.retry(now, key, self.session_id, from) else {
                self.stats.drops.count(DropReason::LimitExceeded);
                return;
            };
            self.stats.retries_sent += 1;
            self.retries.push_back((from, header_session, token));
            return;
        }
        if self.admit_resume(now, from, header_session, c) {
            return;
        }
        let closed = matches!(self.up, Up::Closed(_));
        if closed || self.table.spec.children.is_full() {
            self.stats.children_refused += 1;
            self.stats.drops.count(DropReason::LimitExceeded);
            let reason = if closed {
                "merger closed"
            } else {
                "merger full"
            };
            tracing::debug!(child = %from, reason, "merger: refusing a join");
            self.refuse_join(from, header_session, reason);
            return;
        }
        let summary = ConnectSummary::of(c);
        self.table
            .spec
            .children
            .insert(from, summary, c.timestamp, now);
        self.stats.children_joined += 1;
        if self.up == Up::Established {
            let start = self.late_start();
            self.table.spec.children.admit(&from, start, now);
            self.queue_accept(from, now);
        } else {
            self.process(ChildMsg::Join(summary), now);
        }
    }

    /// After children left or expired: re-evaluate the merged ACK; with no
    /// child left, leave the parent's session (RESET "subtree empty") and
    /// gather anew.
    fn after_leave(&mut self, now: Instant) {
        self.roster.retain_children(&self.table.spec.children);
        if let Some(keys) = self.keys.as_mut() {
            let early = !matches!(self.up, Up::Closed(_));
            let children = &self.table.spec.children;
            keys.forget_gone(now, |a| children.get(a).is_none(), early);
        }
        if !self.table.spec.children.is_empty() {
            self.process(ChildMsg::Leave, now);
            return;
        }
        if matches!(self.up, Up::Connecting { .. } | Up::Established) {
            self.pending_reset = Some((self.up_id(), "subtree empty".into()));
        }
        if !matches!(self.up, Up::Closed(_)) {
            self.up = Up::Gathering;
        }
        self.table = Self::fresh_table(&self.config);
        self.connect = None;
        if let Some(keys) = self.keys.as_mut() {
            keys.restart_join();
        }
        self.accept = None;
        self.session_id = 0;
        self.pending_ack = None;
    }

    fn close(&mut self, reason: CloseReason, tell_children: Option<&str>) {
        if let Some(why) = tell_children {
            let body = Self::reset_body(why);
            let to: Vec<SocketAddr> = self.table.spec.children.iter().map(|(a, _)| *a).collect();
            for a in to {
                self.queue(a, self.session_id, body.clone());
            }
        }
        self.up = Up::Closed(reason);
        self.pending_ack = None;
    }

    /// A datagram of `len` bytes from `from`, not the parent.
    fn on_child(&mut self, now: Instant, from: SocketAddr, header: Header, body: &[u8], len: u64) {
        let first = decode_frames(body).next();
        let is_connect = matches!(first, Some(Ok(Frame::Connect(_))));
        let Some(child) = self.table.spec.children.get(&from) else {
            // Back with a RETRY's token: its address is proven.
            let key = &self.config.token_key;
            let retried = self.keys.is_none()
                && RetryGate::is_token(now, key, self.session_id, from, header.session_id);
            match first {
                Some(Ok(Frame::Connect(c)))
                    if header.session_id == 0
                        || (self.session_id != 0 && header.session_id == self.session_id)
                        || retried =>
                {
                    let id = if retried {
                        self.session_id
                    } else {
                        header.session_id
                    };
                    self.admit(now, from, id, &c, retried);
                    // A lower merger's CONNECT carries its subtree's count
                    // (a ROSTER summary, `docs/wire.md` §4.8).
                    if self.table.spec.children.get(&from).is_some() {
                        self.table.spec.children.on_datagram(&from, len, retried);
                        for f in decode_frames(body).skip(1) {
                            if let Ok(Frame::Roster(r)) = f {
                                self.roster.on_page(from, &r, now);
                            }
                        }
                    }
                }
                _ => {
                    self.stats.unknown_children += 1;
                    self.stats.drops.count(DropReason::UnknownPeer);
                }
            }
            return;
        };
        let retried_connect = header.session_id == 0 && is_connect;
        // A child speaks under its token (its ACCEPT gave it), which also
        // proves its address; a CONNECT retried for a lost ACCEPT under 0.
        let echoed = child.token != 0 && header.session_id == child.token;
        if !(echoed || retried_connect) {
            self.stats.drops.count(DropReason::UnknownSession);
            return;
        }
        let admitted = child.ack.is_some();
        let child_start = child.start;
        self.table.spec.children.on_datagram(&from, len, echoed);
        self.table.spec.children.touch(&from, now);
        for frame in decode_frames(body) {
            let Ok(frame) = frame else {
                self.stats.drops.count(DropReason::MalformedFrame);
                return;
            };
            match frame {
                // Its ACCEPT was lost: repeat it.
                Frame::Connect(c) => {
                    self.table
                        .spec
                        .children
                        .set_connect_timestamp(&from, c.timestamp, now);
                    if admitted {
                        self.queue_accept(from, now);
                    }
                }
                Frame::Ack(ack) if !admitted && child_start.is_some() => {
                    self.on_resumed_ack(now, from, ack);
                    return;
                }
                Frame::Ack(ack) if admitted => {
                    self.stats.acks_in += 1;
                    self.process(ChildMsg::Ack { child: from, ack }, now);
                }
                // A lower merger's roster page (its subtree's count and
                // receivers); the first of a cycle is answered with SENT.
                Frame::Roster(r) => {
                    self.roster.on_page(from, &r, now);
                    if r.first == 0 && admitted {
                        self.queue_sent(from);
                    }
                }
                Frame::Close(_) | Frame::Reset(_) => {
                    self.table.spec.children.remove(&from);
                    self.stats.children_left += 1;
                    self.after_leave(now);
                    return;
                }
                Frame::Ping | Frame::Padding => {}
                f if self.on_child_protection_frame(now, from, &f) => {}
                _ => self.stats.drops.count(DropReason::UnexpectedFrame),
            }
        }
    }

    fn establish(&mut self, now: Instant, session_id: u64, accept: AcceptFrame) {
        self.session_id = session_id;
        self.sent.learn(accept.start_offset, now);
        self.accept = Some(accept);
        self.up = Up::Established;
        self.confirm_up = true;
        self.parent_heard = now;
        self.chain.heard(now);
        self.stall_check = now + self.stall_period();
        self.table.spec.established = true;
        let waiting: Vec<SocketAddr> = self
            .table
            .spec
            .children
            .iter()
            .filter(|(_, c)| c.start.is_none())
            .map(|(a, _)| *a)
            .collect();
        for a in waiting {
            self.table.spec.children.admit(&a, accept.start_offset, now);
            self.queue_accept(a, now);
        }
        if self.table.spec.children.is_empty() {
            self.after_leave(now);
        }
    }

    fn on_parent(&mut self, now: Instant, header: Header, body: &[u8]) {
        match self.up {
            Up::Closed(_) => unreachable!("checked by the caller"),
            Up::Gathering => self.stats.drops.count(DropReason::UnexpectedFrame),
            Up::Connecting { .. } => match decode_frames(body).next() {
                Some(Ok(Frame::Accept(a))) => {
                    self.retry_token = 0;
                    self.establish(now, header.session_id, a)
                }
                // The parent is under a join flood: join again at once
                // under its token.
                Some(Ok(Frame::Retry(token))) => {
                    self.retry_token = token;
                    if let Up::Connecting { next_try, .. } = &mut self.up {
                        *next_try = now;
                    }
                }
                Some(Ok(Frame::Reset(CloseFrame { code, reason }))) => {
                    let reason = reason.to_string();
                    self.close(
                        CloseReason::PeerReset { code, reason },
                        Some("parent refused"),
                    );
                }
                _ => self.stats.drops.count(DropReason::UnexpectedFrame),
            },
            Up::Established if header.session_id != self.session_id => {
                self.stats.drops.count(DropReason::UnknownSession);
            }
            Up::Established => {
                self.parent_heard = now;
                self.chain.heard(now);
                self.relay(now, body);
            }
        }
    }

    /// Relays the parent's frames to the children ([`relay::plan`]).
    fn relay(&mut self, now: Instant, body: &[u8]) {
        let plan = relay::plan(&self.table.spec.children, body);
        if plan.malformed {
            self.stats.drops.count(DropReason::MalformedFrame);
        }
        for _ in 0..plan.unexpected {
            self.stats.drops.count(DropReason::UnexpectedFrame);
        }
        for (addr, body) in plan.out {
            self.stats.relayed += 1;
            self.queue(addr, self.session_id, body);
        }
        if let Some(end) = plan.sent {
            self.sent.learn(end, now);
        }
        if let Some(reason) = plan.end {
            self.close(reason, None);
        }
    }

    /// SENT to a child merger: how far the stream was sent, as far as this
    /// merger knows.
    fn queue_sent(&mut self, to: SocketAddr) {
        let mut b = Vec::new();
        Frame::Sent(SentFrame {
            end: self.sent.end(),
        })
        .encode(&mut b);
        self.queue(to, self.session_id, b.into());
    }

    /// How often stalled children are looked for: eight times per stall
    /// time (O(N) each), so a holder is evicted at most an eighth late.
    fn stall_period(&self) -> std::time::Duration {
        (self.config.child_stall / 8).max(std::time::Duration::from_millis(1))
    }

    /// Evicts the children stalled behind their siblings
    /// ([`ChildTable::stalled`]).
    fn evict_stalled(&mut self, now: Instant) {
        self.stall_check = now + self.stall_period();
        let body = Self::reset_body("stalled");
        let mut evicted = false;
        // The holders, then whoever holds the subtree once they are gone
        // (each round removes at least one child).
        loop {
            let stalled =
                self.table
                    .spec
                    .children
                    .stalled(now, self.config.child_stall, &self.sent);
            if stalled.is_empty() {
                break;
            }
            for addr in stalled {
                tracing::debug!(child = %addr, "merger: evicting a stalled child");
                self.evict(addr, &body);
            }
            let stall = self.config.child_stall;
            self.table
                .spec
                .children
                .restart_stall_clocks(now, self.sent.end(), stall, stall / 4);
            evicted = true;
        }
        if evicted {
            self.after_leave(now);
        }
    }

    /// A datagram of `session_id` to `to` whose frames `write` encodes.
    fn send(
        &mut self,
        buf: &mut Vec<u8>,
        session_id: u64,
        to: SocketAddr,
        write: impl FnOnce(&mut PacketBuilder<'_>),
    ) -> Transmit {
        let mut p = PacketBuilder::new(buf, &mut self.numbers, session_id, false);
        write(&mut p);
        p.finish();
        self.stats.datagrams_sent += 1;
        Transmit { destination: to }
    }
}

impl Merger {
    /// The next datagram to send, before any seal.
    fn next_datagram(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let parent = self.config.parent;

        if let Some((session_id, reason)) = self.pending_reset.take() {
            let reset = Frame::Reset(CloseFrame {
                code: 1,
                reason: &reason,
            });
            return Some(self.send(buf, session_id, parent, |p| {
                p.frame(&reset);
            }));
        }
        if let (
            Up::Connecting {
                attempts,
                next_try,
                deadline,
            },
            Some(c),
        ) = (&self.up, self.connect)
        {
            if *next_try <= now {
                let (attempts, deadline) = (*attempts, *deadline);
                let wait = self.config.connect_rto.saturating_mul(1 << attempts.min(6));
                self.up = Up::Connecting {
                    attempts: attempts + 1,
                    next_try: now + wait,
                    deadline,
                };
                self.stats.connects_out += 1;
                // The subtree's count rides with the CONNECT, so the parent
                // weighs this member right from its admission (a parent
                // without ROSTER support reads the CONNECT and stops).
                let roster = Frame::Roster(self.roster.summary(now, &self.table.spec.children));
                let connect = Frame::Connect(c.to_connect(WireTimestamp::at(now)));
                if let Some(keys) = self.keys.as_mut() {
                    // Protected: the CONNECT rides inside the handshake
                    // (its first message, the same on every attempt).
                    let mut inner = Vec::new();
                    connect.encode(&mut inner);
                    roster.encode(&mut inner);
                    let first = keys.first_message(parent, &inner).map(|f| {
                        let mut b = Vec::new();
                        Frame::Handshake(f).encode(&mut b);
                        b
                    })?;
                    return Some(self.send(buf, 0, parent, |p| {
                        p.frames_with(|out| out.extend_from_slice(&first));
                    }));
                }
                // Session id 0 (or a RETRY's token): the parent names the
                // session in its ACCEPT.
                return Some(self.send(buf, self.retry_token, parent, |p| {
                    p.frame(&connect).frame(&roster);
                }));
            }
        }
        if std::mem::take(&mut self.confirm_up) && self.up == Up::Established {
            return Some(self.send(buf, self.up_id(), parent, |p| {
                p.frame(&Frame::Padding);
            }));
        }
        if let Some(t) = self.poll_rejoin(now, buf) {
            return Some(t);
        }
        if self.up == Up::Established && self.chain.rejoin().is_none() {
            if let Some(f) = self.keys.as_mut().and_then(|k| k.take_upstream()) {
                return Some(self.send(buf, self.up_id(), parent, |p| {
                    p.frame(&f);
                }));
            }
        }
        if let Some(ack) = self.pending_ack.take_if(|_| self.chain.rejoin().is_none()) {
            self.stats.acks_out += 1;
            let ack = Frame::Ack(ack);
            return Some(self.send(buf, self.up_id(), parent, |p| {
                p.frame(&ack);
            }));
        }
        if self.up == Up::Established {
            if let Some(page) = self.roster.poll_page(now, &self.table.spec.children) {
                let page = Frame::Roster(page);
                return Some(self.send(buf, self.up_id(), parent, |p| {
                    p.frame(&page);
                }));
            }
        }
        loop {
            let Some((to, session_id, body)) = self.down.pop_front() else {
                // Stateless: a RETRY is shorter than the CONNECT it answers.
                let (to, id, token) = self.retries.pop_front()?;
                return Some(self.send(buf, id, to, |p| {
                    p.frame(&Frame::Retry(token));
                }));
            };
            // A child whose address is not validated gets at most 3x what
            // it sent (`crate::address_budget`), the seal's tag counted.
            let sealed = self.keys.is_some() && !crate::packet::travels_in_clear(&body);
            let tag = if sealed {
                crate::protection::TAG_LEN
            } else {
                0
            };
            let len = (HEADER_LEN + body.len() + tag) as u64;
            if self.table.spec.children.try_send(&to, len) == Some(false) {
                self.stats.amplification_limited += 1;
                continue;
            }
            return Some(self.send(buf, session_id, to, |p| {
                p.frames_with(|out| out.extend_from_slice(&body));
            }));
        }
    }
}

impl Engine for Merger {
    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        if matches!(self.up, Up::Closed(_)) {
            self.stats.drops.count(DropReason::SessionClosed);
            return;
        }
        if self.keys.is_some() {
            self.on_protected(now, from, datagram);
            return;
        }
        let (header, body) = match accept_header(datagram) {
            Ok(ok) => ok,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        if self.rejoin_target() == Some(from) && self.on_rejoin_reply(now, header, body) {
            return;
        }
        if from == self.config.parent {
            self.on_parent(now, header, body);
        } else {
            self.on_child(now, from, header, body, datagram.len() as u64);
        }
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let start = buf.len();
        loop {
            let t = self.next_datagram(now, buf)?;
            let Some(keys) = &self.keys else {
                return Some(t);
            };
            let to = t.destination;
            let upstream = to == self.config.parent || self.rejoin_target() == Some(to);
            if keys.seal(to, upstream, buf, start, &self.numbers) {
                return Some(t);
            }
            // Nothing but a handshake goes to an address without keys.
            self.stats.drops.count(DropReason::Unauthenticated);
            self.stats.datagrams_sent -= 1;
            buf.truncate(start);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let up = match &self.up {
            Up::Closed(_) => return None,
            Up::Gathering => None,
            Up::Connecting {
                next_try, deadline, ..
            } => Some((*next_try).min(*deadline)),
            Up::Established => Some(
                (self.parent_heard + self.config.parent_timeout)
                    .min(self.stall_check)
                    .min(self.roster.next_due(&self.table.spec.children)),
            ),
        };
        [
            up,
            self.table.deadline(),
            self.table.spec.children.next_expiry(),
            self.keepalive_deadline(),
            self.probe_deadline(),
            self.chain.deadline().filter(|_| self.up == Up::Established),
            self.keys.as_ref().and_then(|k| k.deadline()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.up {
            Up::Closed(_) => return,
            Up::Connecting { deadline, .. } if now >= deadline => {
                self.close(CloseReason::HandshakeTimeout, Some("parent unreachable"));
                return;
            }
            Up::Established if now >= self.parent_heard + self.config.parent_timeout => {
                self.close(CloseReason::IdleTimeout, Some("parent silent"));
                return;
            }
            _ => {}
        }
        self.chain_timeout(now);
        if matches!(self.up, Up::Closed(_)) {
            return;
        }
        self.keepalive_due(now);
        self.probe_due(now);
        self.key_update_timer(now);
        for tag in self.table.due(now) {
            if let Some(out) = self.table.poll(tag, now) {
                self.forward(out, now);
            }
        }
        if self.up == Up::Established && now >= self.stall_check {
            self.evict_stalled(now);
        }
        let expired = self.table.spec.children.expire(now);
        if !expired.is_empty() {
            let body = Self::reset_body("expired");
            for (addr, child) in &expired {
                if child.address.is_validated() {
                    self.stats.children_expired += 1;
                    self.queue(*addr, self.session_id, body.clone());
                } else {
                    // Its address may be a victim's: nothing more goes there.
                    self.stats.unvalidated_evicted += 1;
                    self.forget_queued(*addr);
                }
            }
            self.after_leave(now);
        }
    }
}
