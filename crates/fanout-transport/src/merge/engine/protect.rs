//! Packet protection at a merger (`crate::protection`, `docs/wire.md`
//! §4.12, "Mergers"): it joins its parent as a member does (the merged
//! CONNECT inside a handshake, the pair's keys from the answer), and
//! answers its children's handshakes as a sender does, with keys of its
//! own per child. What its parent handed it — the group keys and the key
//! the session sender signs its lists with — it hands its children inside
//! their answers; key updates it passes down under each child's pair key.
//!
//! # Key updates through the tree
//! A GROUP_KEY from the parent goes to every child that has keys, again
//! every [`KEY_UPDATE_RESEND`] until the child answers GROUP_KEY_ACK. The
//! merger confirms upstream once every child holds the key, or after
//! [`KEY_CONFIRM_GRACE`] at the latest: a dead leaf deep in the tree must
//! not make each level evict the whole subtree above it. A child that has
//! not confirmed within [`KEY_UPDATE_TIMEOUT`] is evicted; until it
//! confirms, what it misses under the new key is repaired like any loss.
//! A child that leaves before the end knows the group key, so the merger
//! asks its parent for a new one (REKEY), which passes it on up to the
//! session sender.

use super::Merger;
use crate::protection::answering::{Clear, Joiners};
use crate::protection::joining::Joining;
use crate::protection::{open_sealed, PairKeys, Protection, ReplayWindow, SeedStream};
use crate::wire::{
    decode_frames, Frame, GroupKeyFrame, Header, HeaderFlags, SegmentsRequestFrame, HEADER_LEN,
};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How often a child that has not confirmed a new group key is sent it
/// again (as the session sender does to its members).
pub const KEY_UPDATE_RESEND: Duration = Duration::from_millis(50);
/// The longest a merger waits for its children before it confirms a new
/// group key upstream (ten resends).
pub const KEY_CONFIRM_GRACE: Duration = Duration::from_millis(500);
/// How long a child may take to confirm a new group key before it is
/// evicted (the session sender's limit for its members).
pub const KEY_UPDATE_TIMEOUT: Duration = Duration::from_secs(3);
/// SEGMENTS_REQUESTs waiting to go upstream at most; more are dropped
/// (the children ask again).
const MAX_FORWARDED_REQUESTS: usize = 32;

/// A group key being passed down.
#[derive(Debug, Clone, Copy)]
struct KeyUpdate {
    epoch: u64,
    started: Instant,
    /// Confirmed upstream already (every child had it, or the grace
    /// ran out).
    confirmed: bool,
}

/// A merger's protection state.
pub(super) struct MergerKeys {
    protection: Protection,
    seeds: SeedStream,
    /// Our join upstream under way (to the parent, or an ancestor taking
    /// over) and where it goes.
    joining: Joining,
    /// The pair's keys with the parent.
    up: Option<PairKeys>,
    /// Packet numbers accepted from the parent.
    up_replay: ReplayWindow,
    /// The session's group keys the parent handed over, by phase.
    group: [Option<GroupKeyFrame>; 2],
    /// The key the session sender signs its lists with.
    source: Option<[u8; 32]>,
    /// The group key being passed down, if any.
    update: Option<KeyUpdate>,
    /// A GROUP_KEY_ACK due upstream (the epoch).
    ack_up: Option<u64>,
    /// A REKEY due upstream.
    rekey_up: bool,
    /// Next round of GROUP_KEY sends to unconfirmed children.
    next_key_send: Option<Instant>,
    /// Every child's handshake and keys, and the join being read.
    children: Joiners,
    /// Children's SEGMENTS_REQUESTs to pass upstream (offsets).
    requests: VecDeque<SegmentsRequestFrame>,
    /// Ranges children reneged, to pass upstream (the merged ACK covered
    /// them).
    renege_up: Vec<std::ops::Range<u64>>,
    /// Group keys passed down (updates), for the counters.
    pub(super) key_updates: u64,
    /// REKEYs sent upstream.
    pub(super) rekeys: u64,
}

impl std::fmt::Debug for MergerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergerKeys")
            .field("joined", &self.up.is_some())
            .field("children", &self.children.len())
            .finish()
    }
}

impl MergerKeys {
    pub(super) fn new(protection: Protection) -> Self {
        let mut seeds = SeedStream::new(protection.seed);
        MergerKeys {
            children: Joiners::new(protection.credentials.clone(), seeds.next_seed()),
            seeds,
            protection,
            joining: Joining::default(),
            up: None,
            up_replay: ReplayWindow::default(),
            group: [None, None],
            source: None,
            update: None,
            ack_up: None,
            rekey_up: false,
            next_key_send: None,
            requests: VecDeque::new(),
            renege_up: Vec::new(),
            key_updates: 0,
            rekeys: 0,
        }
    }

    /// The first handshake message to `target` carrying `connect`
    /// (encoded frames): made on the first attempt, repeated as is after.
    pub(super) fn first_message(&mut self, target: SocketAddr, connect: &[u8]) -> Option<&[u8]> {
        let seeds = &mut self.seeds;
        let creds = &self.protection.credentials;
        (self.joining).first_message(creds, || seeds.next_seed(), target, connect)
    }

    /// Forgets the join under way (a new merged CONNECT starts another).
    pub(super) fn restart_join(&mut self) {
        self.joining.forget();
    }

    /// The answer to our handshake from `from`: installs the pair's keys
    /// and what the parent handed over; returns the frames it carried (an
    /// ACCEPT, or the refusal).
    pub(super) fn on_answer(
        &mut self,
        from: SocketAddr,
        answer: &[u8],
    ) -> Result<Vec<u8>, DropReason> {
        let a = (self.joining).finish(&self.protection.credentials, from, answer)?;
        if a.source.is_some() && a.source != self.source {
            // A first join (or another session): what the parent hands
            // replaces all.
            self.group = [None, None];
            self.source = a.source;
        }
        for g in a.group.iter().flatten() {
            self.install(g.frame());
        }
        self.up = Some(a.pair);
        self.up_replay = ReplayWindow::default();
        Ok(a.frames)
    }

    /// Whether our own handshake is waiting for an answer.
    pub(super) fn is_joining(&self) -> bool {
        self.joining.is_under_way()
    }

    /// Installs group key `k` (a newer epoch replaces the key of its
    /// phase); true if it is new.
    fn install(&mut self, k: GroupKeyFrame) -> bool {
        let slot = &mut self.group[(k.epoch & 1) as usize];
        if slot.is_some_and(|old| old.epoch >= k.epoch) {
            return false;
        }
        *slot = Some(k);
        true
    }

    /// The frames of a sealed datagram from the parent, opened into
    /// `scratch`.
    pub(super) fn open_up<'a>(
        &mut self,
        header: &Header,
        datagram: &[u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], DropReason> {
        let key = self.up.as_ref().ok_or(DropReason::Unauthenticated)?;
        if header.flags.contains(HeaderFlags::MULTICAST) {
            // A merger takes nothing from the group.
            return Err(DropReason::UnexpectedFrame);
        }
        let (replay, pn) = (&mut self.up_replay, header.packet_number);
        open_sealed(&key.sender_to_joiner, replay, pn, datagram, scratch, true).map(|(_, f)| f)
    }

    /// The children: their handshakes, keys, and the join being read
    /// ([`Joiners`]).
    pub(super) fn joins(&mut self) -> &mut Joiners {
        &mut self.children
    }

    /// The answer to child `addr`'s handshake carrying `accept` (an
    /// encoded ACCEPT frame), the group keys and the source key: written
    /// once (only once the parent handed them over), then repeated.
    pub(super) fn answer(&mut self, addr: SocketAddr, accept: &[u8]) -> Option<Vec<u8>> {
        let source = self.source?;
        let group: Vec<GroupKeyFrame> = self.group.iter().flatten().copied().collect();
        let answer = (self.children.get_mut(&addr)?).answer_join(accept, &group, source)?;
        let mut b = Vec::new();
        Frame::Handshake(answer).encode(&mut b);
        Some(b)
    }

    /// Forgets the children `gone` says left, at `now`: their keys stay
    /// only to seal what is still queued for them. If one knew the group
    /// key and the session is not over (`early`), a REKEY goes upstream.
    pub(super) fn forget_gone(
        &mut self,
        now: Instant,
        gone: impl Fn(&SocketAddr) -> bool,
        early: bool,
    ) {
        let left: Vec<SocketAddr> = (self.children.iter())
            .map(|(a, _)| *a)
            .filter(|a| gone(a))
            .collect();
        for addr in left {
            let knew_key = self
                .children
                .depart(addr)
                .is_some_and(|c| c.keys().is_some());
            self.rekey_up |= early && knew_key;
        }
        self.confirm_if_done(now);
    }

    /// A GROUP_KEY from the parent at `now`: installed, and passed down to
    /// every child that has keys until each confirms. A repeat of a key
    /// already confirmed is confirmed again (our answer may have been
    /// lost).
    fn on_group_key(&mut self, now: Instant, k: GroupKeyFrame) {
        if !self.install(k) {
            if self
                .update
                .is_none_or(|u| u.epoch == k.epoch && u.confirmed)
            {
                self.ack_up = Some(k.epoch);
            }
            return;
        }
        self.key_updates += 1;
        self.update = Some(KeyUpdate {
            epoch: k.epoch,
            started: now,
            confirmed: false,
        });
        self.next_key_send = Some(now);
        self.confirm_if_done(now);
    }

    /// Confirms the key being passed down upstream once no child with
    /// keys lacks it.
    fn confirm_if_done(&mut self, now: Instant) {
        let Some(u) = self.update.as_mut() else {
            return;
        };
        let epoch = u.epoch;
        let pending = self
            .children
            .iter()
            .any(|(_, c)| c.keys().is_some() && c.epoch < epoch);
        if !pending {
            self.update = None;
            self.next_key_send = None;
            self.ack_up = Some(epoch);
        } else if !u.confirmed && now >= u.started + KEY_CONFIRM_GRACE {
            u.confirmed = true;
            self.ack_up = Some(epoch);
        }
    }

    /// Child `addr` holds the group key of `epoch`.
    fn on_key_ack(&mut self, now: Instant, addr: SocketAddr, epoch: u64) {
        if let Some(c) = self.children.get_mut(&addr) {
            c.epoch = c.epoch.max(epoch);
        }
        self.confirm_if_done(now);
    }

    /// The key update's timer at `now`: the children to send the key to
    /// again, and those to evict (not confirmed in time).
    fn key_update_due(&mut self, now: Instant) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        self.confirm_if_done(now);
        let Some(u) = self.update else {
            return (Vec::new(), Vec::new());
        };
        let pending: Vec<SocketAddr> = self
            .children
            .iter()
            .filter(|(_, c)| c.keys().is_some() && c.epoch < u.epoch)
            .map(|(a, _)| *a)
            .collect();
        if now >= u.started + KEY_UPDATE_TIMEOUT {
            self.next_key_send = None;
            return (Vec::new(), pending);
        }
        self.next_key_send = Some(now + KEY_UPDATE_RESEND);
        (pending, Vec::new())
    }

    /// When the key update's timer fires.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let grace = self
            .update
            .filter(|u| !u.confirmed)
            .map(|u| u.started + KEY_CONFIRM_GRACE);
        [self.next_key_send, grace].into_iter().flatten().min()
    }

    /// The GROUP_KEY frame being passed down.
    fn update_frame(&self) -> Option<GroupKeyFrame> {
        let u = self.update?;
        self.group[(u.epoch & 1) as usize].filter(|k| k.epoch == u.epoch)
    }

    /// A SEGMENTS_REQUEST from a child, to pass upstream (one of each).
    fn on_segments_request(&mut self, q: SegmentsRequestFrame) {
        if self.requests.contains(&q) {
            return;
        }
        if self.requests.len() >= MAX_FORWARDED_REQUESTS {
            return;
        }
        self.requests.push_back(q);
    }

    /// The next frame due upstream: a GROUP_KEY_ACK, a REKEY, children's
    /// RENEGEs, or a child's SEGMENTS_REQUEST.
    pub(super) fn take_upstream(&mut self) -> Option<Frame<'static>> {
        self.up.as_ref()?;
        if let Some(epoch) = self.ack_up.take() {
            return Some(Frame::GroupKeyAck(epoch));
        }
        if std::mem::take(&mut self.rekey_up) {
            self.rekeys += 1;
            return Some(Frame::Rekey);
        }
        if !self.renege_up.is_empty() {
            let mut ranges = std::mem::take(&mut self.renege_up);
            ranges.sort_by_key(|r| r.start);
            let mut joined: Vec<std::ops::Range<u64>> = Vec::with_capacity(ranges.len());
            for r in ranges {
                match joined.last_mut() {
                    Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                    _ => joined.push(r),
                }
            }
            return Some(Frame::Renege(joined));
        }
        self.requests.pop_front().map(Frame::SegmentsRequest)
    }

    /// Seals the datagram just built at `out[start..]` for `to`: toward
    /// `upstream` under our pair key with it, toward a child under that
    /// child's; false if it may not go (no keys for that address). A
    /// handshake message goes in the clear.
    pub(super) fn seal(
        &self,
        to: SocketAddr,
        upstream: bool,
        out: &mut Vec<u8>,
        start: usize,
        numbers: &crate::PacketNumbers,
    ) -> bool {
        let key = if upstream {
            self.up.as_ref().map(|p| &p.joiner_to_sender)
        } else {
            self.children.sealing_key(&to)
        };
        crate::packet::seal_unless_clear(out, start, numbers, key)
    }
}

impl Merger {
    /// A datagram of a protected session (the merger not closed): sealed
    /// from the parent or a child, or in the clear — the answer to our
    /// handshake, a child's handshake.
    pub(super) fn on_protected(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let header = match crate::wire::read_header(datagram) {
            Ok(h) => h,
            Err(reason) => {
                self.stats.drops.count(reason);
                return;
            }
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let upstream = from == self.config.parent || self.rejoin_target() == Some(from);
        let keys = self.keys.as_mut().expect("protected");
        let len = datagram.len() as u64;
        if header.flags.contains(HeaderFlags::SEALED) && upstream {
            match keys.open_up(&header, datagram, &mut scratch) {
                Ok(body) => self.on_upstream_frames(now, from, header, body),
                Err(reason) => self.stats.drops.count(reason),
            }
        } else if header.flags.contains(HeaderFlags::SEALED) {
            match keys.joins().open(from, &header, datagram, &mut scratch) {
                Ok(body) => self.on_child(now, from, header, body, len),
                Err(DropReason::UnknownPeer) => {
                    self.stats.unknown_children += 1;
                    self.stats.drops.count(DropReason::UnknownPeer);
                }
                Err(reason) => self.stats.drops.count(reason),
            }
        } else {
            let clear = &datagram[HEADER_LEN..];
            match decode_frames(clear).next() {
                Some(Ok(Frame::Handshake(answer))) if upstream && keys.is_joining() => {
                    match keys.on_answer(from, answer) {
                        Ok(frames) => self.on_upstream_frames(now, from, header, &frames),
                        Err(reason) => self.stats.drops.count(reason),
                    }
                }
                _ if upstream => self.stats.drops.count(DropReason::Unauthenticated),
                _ => self.on_child_handshake(now, from, header, clear, len),
            }
        }
        self.scratch = scratch;
    }

    /// Frames from the parent (or the ancestor asked to take over), opened:
    /// the protection frames are taken here, the rest go the usual way.
    fn on_upstream_frames(&mut self, now: Instant, from: SocketAddr, header: Header, body: &[u8]) {
        let mut rest = Vec::with_capacity(body.len());
        for f in decode_frames(body) {
            match f {
                Ok(Frame::GroupKey(k)) => {
                    if let Some(keys) = self.keys.as_mut() {
                        keys.on_group_key(now, k);
                    }
                }
                Ok(f) => f.encode(&mut rest),
                Err(_) => {
                    self.stats.drops.count(DropReason::MalformedFrame);
                    break;
                }
            }
        }
        if rest.is_empty() {
            if from == self.config.parent {
                self.parent_heard = now;
                self.chain.heard(now);
            }
            return;
        }
        if self.rejoin_target() == Some(from) && self.on_rejoin_reply(now, header, &rest) {
            return;
        }
        if from == self.config.parent {
            self.on_parent(now, header, &rest);
        }
    }

    /// A child's datagram in the clear: a first handshake message (its
    /// CONNECT inside), or a retransmission of one.
    fn on_child_handshake(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: Header,
        clear: &[u8],
        len: u64,
    ) {
        let keys = self.keys.as_mut().expect("protected");
        match keys.joins().on_clear(now, from, clear) {
            Ok(Clear::Join(payload)) => {
                // The handshake proves membership of the session's tree,
                // which the header's id proves for an unprotected join
                // (a resume CONNECT names the session).
                let header = Header {
                    session_id: self.session_id,
                    ..header
                };
                self.on_child(now, from, header, &payload, len);
                let keys = self.keys.as_mut().expect("protected");
                if self.table.spec.children.get(&from).is_some() {
                    keys.joins().admitted(from);
                    self.queue_accept(from, now);
                } else {
                    keys.joins().end_join();
                }
            }
            Ok(Clear::Repeat) => {
                if self.table.spec.children.get(&from).is_some() {
                    self.table.spec.children.on_datagram(&from, len, false);
                    self.queue_accept(from, now);
                }
            }
            Err(DropReason::UnknownSession) => {
                self.stats.unknown_children += 1;
                self.stats.drops.count(DropReason::UnknownSession);
            }
            Err(reason) => self.stats.drops.count(reason),
        }
    }

    /// A refusal to a joiner at `from` (header id `session`): in a
    /// protected session the answer to its handshake, else a RESET.
    pub(super) fn refuse_join(&mut self, from: SocketAddr, session: u64, why: &str) {
        if let Some(keys) = self.keys.as_mut() {
            if let Some(answer) = keys.joins().refusal(why) {
                let mut b = Vec::new();
                Frame::Handshake(&answer).encode(&mut b);
                self.queue(from, session, b.into());
            }
            return;
        }
        self.queue(from, session, Self::reset_body(why));
    }

    /// A child's protection frames (GROUP_KEY_ACK, SEGMENTS_REQUEST,
    /// REKEY); false for any other frame.
    pub(super) fn on_child_protection_frame(
        &mut self,
        now: Instant,
        from: SocketAddr,
        frame: &Frame<'_>,
    ) -> bool {
        let Some(keys) = self.keys.as_mut() else {
            return false;
        };
        match frame {
            Frame::GroupKeyAck(epoch) => keys.on_key_ack(now, from, *epoch),
            Frame::SegmentsRequest(q) => keys.on_segments_request(*q),
            // A child no longer holds what it acknowledged: passed on up
            // (at most a RENEGE's worth waiting).
            Frame::Renege(ranges) => {
                for r in ranges {
                    if keys.renege_up.len() < crate::wire::MAX_SACK_RANGES
                        && !keys.renege_up.contains(r)
                    {
                        keys.renege_up.push(r.clone());
                    }
                }
            }
            // A lower merger lost a child that knew the key: passed on up.
            Frame::Rekey => keys.rekey_up = true,
            _ => return false,
        }
        true
    }

    /// The key update's timer: the new key to children that lack it,
    /// eviction of those past the timeout.
    pub(super) fn key_update_timer(&mut self, now: Instant) {
        let Some(keys) = self.keys.as_mut() else {
            return;
        };
        if keys.deadline().is_none_or(|d| d > now) {
            return;
        }
        let frame = keys.update_frame();
        let (send, evict) = keys.key_update_due(now);
        if let Some(k) = frame {
            let mut b = Vec::new();
            Frame::GroupKey(k).encode(&mut b);
            let body: Arc<[u8]> = b.into();
            for a in send {
                self.queue(a, self.session_id, body.clone());
            }
        }
        if !evict.is_empty() {
            let body = Self::reset_body("did not confirm the new group key");
            for a in evict {
                self.evict(a, &body);
            }
            self.after_leave(now);
        }
    }
}
