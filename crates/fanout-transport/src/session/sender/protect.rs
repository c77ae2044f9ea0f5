//! Packet protection at the session sender (`crate::protection`,
//! `docs/wire.md` §4.12): the handshake inside each join, every member's
//! pair of keys, the group key, sealing what goes out and opening what
//! comes in.
//!
//! # Group key updates
//! A member that leaves or is evicted before it holds the whole stream
//! still knows the group key. So the sender then draws the next one
//! (epoch + 1) and hands it to every remaining member under its pair key
//! (GROUP_KEY, repeated every [`KEY_UPDATE_RESEND`] until the member
//! answers GROUP_KEY_ACK). Multicast datagrams go under the new key once
//! every member has it; the header's KEY_PHASE bit (the epoch's low bit)
//! tells receivers which of the two keys opens a datagram. A member that
//! has not answered within [`KEY_UPDATE_TIMEOUT`] is evicted, so one dead
//! member cannot keep the departed one reading. A departure during an
//! update starts the next update once this one is done. Joiners get the
//! key in use and the one being handed out inside their answer.

use crate::protection::answering::{JoinerKeys, Joiners};
use crate::protection::segments::{
    run_hash, segment_hash_of_pieces, ListEntry, Listing, SegmentList, SegmentLists,
    DETAIL_INTERVAL, MAX_RUN, RUN_BYTES, RUN_SPAN,
};
use crate::protection::source::{SignedList, Signer};
use crate::protection::{GroupKey, Protection, SeedStream};
use crate::session::timers::Timer;
use crate::session::Departure;
use crate::wire::{GroupKeyFrame, HeaderFlags, SegmentsRequestFrame, HEADER_LEN};
use fanout_core::time::Instant;
use std::net::SocketAddr;

/// Fewest whole segments the send buffer must hold beyond `SND.NXT` before
/// they are listed ahead (unless the stream's end is known).
const MIN_LIST_SEGMENTS: u64 = 16;

/// How long new data may wait for the window inside a run, beyond twice
/// the slowest member's smoothed RTT, before the run's detail goes out
/// unasked: an ACK that opens the window comes within an RTT and its
/// delay (RFC 9002 §5.3's max_ack_delay, 25 ms by default).
const BLOCKED_RUN_GRACE: std::time::Duration = std::time::Duration::from_millis(25);
/// How often a member that has not confirmed a new group key is sent it
/// again.
pub(super) const KEY_UPDATE_RESEND: std::time::Duration = std::time::Duration::from_millis(50);
/// How long a member may take to confirm a new group key before it is
/// evicted (60 sends).
pub(super) const KEY_UPDATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A group key being handed out.
struct KeyUpdate {
    /// When it started (members not confirming within
    /// [`KEY_UPDATE_TIMEOUT`] are evicted).
    started: Instant,
    /// Another member left during it: update again once it is done.
    again: bool,
}

/// What the key update needs at a timer.
#[derive(Debug, Default)]
pub(super) struct KeyUpdateDue {
    /// Members to send the new key to.
    pub(super) send: Vec<SocketAddr>,
    /// Members to evict: they did not confirm it in time.
    pub(super) evict: Vec<SocketAddr>,
}

/// The sender's protection state.
pub(super) struct SenderKeys {
    seeds: SeedStream,
    /// Group keys by phase (epoch's low bit): the one multicast datagrams
    /// are sealed under, and the next while it is handed out.
    group: [Option<GroupKey>; 2],
    /// Epoch of the key multicast datagrams are sealed under.
    sealing: u64,
    /// The next key's hand-out, if one is under way (its key is
    /// `group[(sealing + 1) & 1]`).
    update: Option<KeyUpdate>,
    /// Group keys taken into use after the first.
    pub(super) key_updates: u64,
    /// An update started and its first sends are not queued yet.
    fresh_update: bool,
    /// Where the last round of key sends stopped for want of room.
    resend_after: Option<SocketAddr>,
    /// Signs the lists of multicast datagrams (source authentication).
    signer: Signer,
    /// Segments listed ahead of sending, and their lists.
    segments: SegmentLists,
    /// Every member's handshake and keys, and the join being read.
    members: Joiners,
    /// When each member was last sent a detail (at most one per
    /// [`DETAIL_INTERVAL`]: each costs hashes and a signature).
    details: std::collections::BTreeMap<SocketAddr, Instant>,
    /// The run (its offsets) inside which new data last waited for the
    /// window; its detail is due when [`Timer::BlockedRun`] fires.
    blocked_run: Option<std::ops::Range<u64>>,
    /// The datagram being built is one DATA frame exactly as a list names
    /// it (set where it is written, taken where it is sealed).
    pub(super) built_listed: bool,
}

impl std::fmt::Debug for SenderKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SenderKeys")
            .field("members", &self.members.len())
            .finish()
    }
}

impl SenderKeys {
    pub(super) fn new(protection: Protection, max_datagram: usize) -> Self {
        let mut seeds = SeedStream::new(protection.seed);
        let first = GroupKey::new(0, seeds.next_seed());
        let members = Joiners::new(protection.credentials.clone(), seeds.next_seed());
        SenderKeys {
            group: [Some(first), None],
            sealing: 0,
            update: None,
            key_updates: 0,
            fresh_update: false,
            resend_after: None,
            signer: Signer::new(seeds.next_seed(), max_datagram),
            segments: SegmentLists::new(max_datagram),
            seeds,
            members,
            details: std::collections::BTreeMap::new(),
            blocked_run: None,
            built_listed: false,
        }
    }

    /// Segments the next list's runs hold, at a pacing rate of `rate` bytes
    /// a second and a session window of `window` bytes, in segments of
    /// `mss` bytes: just over [`RUN_BYTES`], or less where that would hold
    /// a receiver's first segment long for its last: what goes out in
    /// [`RUN_SPAN`], or half the window (so a run completes within one
    /// window's sending); 1 (single segments) below 2.
    fn run_length(rate: u64, window: u64, mss: u64) -> u64 {
        let mss = mss.max(1);
        let by_size = RUN_BYTES.div_ceil(mss).min(MAX_RUN);
        let by_time = rate as u128 * RUN_SPAN.as_micros() / 1_000_000 / u128::from(mss);
        let by_window = u128::from(window / mss / 2);
        by_time.min(by_window).min(u128::from(by_size)).max(1) as u64
    }

    /// Lists and signatures fit `max_datagram`-byte datagrams from now on.
    pub(super) fn set_max_datagram(&mut self, max_datagram: usize) {
        self.signer.set_max_datagram(max_datagram);
        self.segments.set_max_datagram(max_datagram);
    }

    /// The joiners: their handshakes, keys, and the join being read
    /// ([`Joiners`]).
    pub(super) fn joins(&mut self) -> &mut Joiners {
        &mut self.members
    }

    /// The answer to `addr`'s handshake carrying `accept` (the encoded
    /// ACCEPT frame), the group key and the key lists are signed with:
    /// written once, then repeated.
    pub(super) fn answer(&mut self, addr: SocketAddr, accept: &[u8]) -> Option<&[u8]> {
        let source = self.signer.public_key();
        // The key in use, and the next one if it is being handed out.
        let group: Vec<GroupKeyFrame> = self.group.iter().flatten().map(GroupKey::frame).collect();
        (self.members.get_mut(&addr)?).answer_join(accept, &group, source)
    }

    /// A member at `addr` left at `now`: its keys stay only to seal what
    /// is still queued for it. Unless it `held_everything`, the group key
    /// it knows is replaced (see the module notes).
    pub(super) fn forget(&mut self, now: Instant, addr: SocketAddr, held_everything: bool) {
        self.details.remove(&addr);
        let Some(m) = self.members.depart(addr) else {
            return;
        };
        let knew_key = m.keys().is_some();
        if knew_key && !held_everything {
            match self.update.as_mut() {
                // It may also hold the key being handed out.
                Some(u) => u.again = true,
                None => return self.start_update(now),
            }
        }
        // It may have been the last one the update waited for.
        self.finish_update_if_confirmed(now);
    }

    /// A merger member says a member below it left before the end: the
    /// group key is replaced as if that member had left here.
    pub(super) fn rekey(&mut self, now: Instant, from: SocketAddr) {
        if self.members.get(&from).is_none_or(|m| m.keys().is_none()) {
            return;
        }
        match self.update.as_mut() {
            Some(u) => u.again = true,
            None => self.start_update(now),
        }
    }

    fn start_update(&mut self, now: Instant) {
        let epoch = self.sealing + 1;
        let next = GroupKey::new(epoch, self.seeds.next_seed());
        self.group[(epoch & 1) as usize] = Some(next);
        self.update = Some(KeyUpdate {
            started: now,
            again: false,
        });
        self.fresh_update = true;
        self.finish_update_if_confirmed(now);
    }

    /// The epoch being handed out, if an update is under way.
    fn next_epoch(&self) -> Option<u64> {
        self.update.as_ref().map(|_| self.sealing + 1)
    }

    /// The GROUP_KEY frame of the key being handed out.
    pub(super) fn next_key_frame(&self) -> Option<GroupKeyFrame> {
        let epoch = self.next_epoch()?;
        self.group[(epoch & 1) as usize]
            .as_ref()
            .map(GroupKey::frame)
    }

    /// The key update's work at `now`: at most `room` members to send the
    /// new key to, from where the last round stopped (so with more
    /// unconfirmed members than control room every one gets its turn), and
    /// the members to evict (not confirmed within [`KEY_UPDATE_TIMEOUT`]).
    pub(super) fn key_update_due(&mut self, now: Instant, room: usize) -> KeyUpdateDue {
        let mut due = KeyUpdateDue::default();
        let (Some(epoch), Some(u)) = (self.next_epoch(), self.update.as_ref()) else {
            return due;
        };
        let late = now >= u.started + KEY_UPDATE_TIMEOUT;
        let pending = |m: &JoinerKeys| m.keys().is_some() && m.epoch < epoch;
        if late {
            due.evict = (self.members.iter())
                .filter(|(_, m)| pending(m))
                .map(|(a, _)| *a)
                .collect();
            return due;
        }
        let after = self.resend_after.take();
        let tail = self
            .members
            .iter()
            .filter(|(a, _)| after.is_some_and(|c| **a > c));
        let head = self
            .members
            .iter()
            .filter(|(a, _)| after.is_none_or(|c| **a <= c));
        due.send = tail
            .chain(head)
            .filter(|(_, m)| pending(m))
            .map(|(a, _)| *a)
            .take(room)
            .collect();
        if due.send.len() == room {
            self.resend_after = due.send.last().copied();
        }
        due
    }

    /// `addr` holds the group key of `epoch` (its GROUP_KEY_ACK, at
    /// `now`).
    pub(super) fn on_key_ack(&mut self, now: Instant, addr: SocketAddr, epoch: u64) {
        if self.next_epoch() != Some(epoch) {
            return; // a repeat of one taken into use already
        }
        if let Some(m) = self.members.get_mut(&addr) {
            m.epoch = m.epoch.max(epoch);
            self.finish_update_if_confirmed(now);
        }
    }

    /// Takes the next key into use once every member with keys holds it.
    fn finish_update_if_confirmed(&mut self, now: Instant) {
        let Some(epoch) = self.next_epoch() else {
            return;
        };
        if self
            .members
            .iter()
            .any(|(_, m)| m.keys().is_some() && m.epoch < epoch)
        {
            return;
        }
        let again = self.update.take().is_some_and(|u| u.again);
        self.sealing = epoch;
        self.key_updates += 1;
        if again {
            self.start_update(now);
        }
    }

    /// Whether a key update is under way.
    pub(super) fn updating(&self) -> bool {
        self.update.is_some()
    }

    /// Whether an update started since the last call (its first sends are
    /// due at once).
    pub(super) fn take_fresh_update(&mut self) -> bool {
        std::mem::take(&mut self.fresh_update)
    }

    /// Seals the datagram just built at `out[start..]` for `to` (sent at
    /// `now`); false if it may not go (no keys for that address yet).
    /// Handshake messages and OFFERs go in the clear. A multicast datagram
    /// joins the list being gathered for signing (unless it is a list).
    pub(super) fn seal(
        &mut self,
        now: Instant,
        to: SocketAddr,
        out: &mut Vec<u8>,
        start: usize,
        numbers: &crate::PacketNumbers,
    ) -> bool {
        if crate::packet::travels_in_clear(&out[start + HEADER_LEN..]) {
            return true;
        }
        // Receivers open by the same flags.
        if out[start + 3] & HeaderFlags::MULTICAST != 0 {
            let phase = (self.sealing & 1) as usize;
            if phase == 1 {
                out[start + 3] |= HeaderFlags::KEY_PHASE;
            }
            let group = self.group[phase].as_ref().expect("the key in use");
            let frames = &out[start + HEADER_LEN..];
            if std::mem::take(&mut self.built_listed) {
                debug_assert!(self.segments.names(frames));
                // One DATA frame a list names: its hash is its proof.
                out[start + 3] |= HeaderFlags::LISTED;
                group.data.apply(&mut out[start..], numbers.last());
                return true;
            }
            let listed = !crate::wire::starts_with_signed_list(frames);
            crate::packet::seal(out, start, numbers, &group.key);
            if listed {
                self.signer.add(now, numbers.last(), &out[start..]);
            }
            return true;
        }
        crate::packet::seal_unless_clear(out, start, numbers, self.members.sealing_key(&to))
    }

    /// The next segment list to multicast (ahead of its segments).
    pub(super) fn take_segment_list(&mut self) -> Option<SegmentList> {
        self.segments.take_pending()
    }

    /// The listed segment at `offset`; the session sends it exactly so.
    pub(super) fn listed(&self, offset: u64) -> Option<Listing> {
        self.segments.listed(offset)
    }

    /// Forgets lists of data below `base` (released).
    pub(super) fn release_below(&mut self, base: u64) {
        self.segments.release_below(base);
    }

    /// The signed list of the multicast datagrams gathered, if due at
    /// `now`.
    pub(super) fn take_list(&mut self, now: Instant, session_id: u64) -> Option<SignedList> {
        self.signer.take_due(now, session_id)
    }

    /// When the list being gathered is due.
    pub(super) fn list_deadline(&self) -> Option<Instant> {
        self.signer.deadline()
    }
}

impl super::SessionSender {
    /// Merger member `id` asks for a new group key (REKEY): a member below
    /// it left before the end.
    pub(super) fn on_rekey(&mut self, now: Instant, id: crate::session::MemberId) {
        let Some(addr) = self.members.get(id).map(|m| m.addr()) else {
            return;
        };
        if let Some(k) = self.keys.as_mut() {
            k.rekey(now, addr);
        }
        self.arm_key_update(now);
    }

    /// Member `id` holds the group key of `epoch`.
    pub(super) fn on_group_key_ack(
        &mut self,
        now: Instant,
        id: crate::session::MemberId,
        epoch: u64,
    ) {
        let Some(addr) = self.members.get(id).map(|m| m.addr()) else {
            return;
        };
        if let Some(k) = self.keys.as_mut() {
            k.on_key_ack(now, addr, epoch);
        }
        self.arm_key_update(now);
    }

    /// Keeps the key update's timer in step with its state (after a member
    /// left or confirmed): due at once when an update just started, off
    /// when none is under way.
    pub(super) fn arm_key_update(&mut self, now: Instant) {
        let Some(k) = self.keys.as_mut() else {
            return;
        };
        self.stats.group_key_updates = k.key_updates;
        if k.take_fresh_update() {
            self.timers.set(Timer::KeyUpdate, Some(now));
        } else if !k.updating() {
            self.timers.set(Timer::KeyUpdate, None);
        }
    }

    /// The key update's timer: the new key to every member that has not
    /// confirmed it; those that did not within the timeout are evicted.
    pub(super) fn on_key_update_timer(&mut self, now: Instant) {
        let Some(k) = self.keys.as_mut() else {
            return;
        };
        let room = super::transmit::MAX_PENDING_CONTROL.saturating_sub(self.controls.len());
        let due = k.key_update_due(now, room);
        let evicted = !due.evict.is_empty();
        self.timers
            .set(Timer::KeyUpdate, Some(now + KEY_UPDATE_RESEND));
        for addr in due.send {
            self.control(addr, super::transmit::Control::GroupKey);
        }
        for addr in due.evict {
            if let Some(id) = self.members.at_addr(&addr).map(|m| m.id()) {
                self.remove(
                    now,
                    id,
                    "did not confirm the new group key",
                    Departure::Evicted,
                );
            }
        }
        self.arm_key_update(now);
        if evicted {
            self.after_progress(now);
        }
    }
}

impl super::SessionSender {
    /// Lists the next segments before they are sent (a protected multicast
    /// session, once data flows): when nothing from `SND.NXT` on is listed,
    /// signs a list of the segments the send buffer holds from there (up
    /// to a datagram's worth of entries: runs of whole segments, single
    /// segments where a message or the stream ends) and queues it to go out
    /// first.
    pub(super) fn list_segments_ahead(&mut self, now: Instant) {
        if self.config.group.is_none() || self.keys.is_none() || !self.data_may_flow(now) {
            return;
        }
        let window = self.controller.window(&self.members.view());
        let run = SenderKeys::run_length(self.pacer.rate_bytes_per_sec(), window, self.mss);
        let Some(k) = self.keys.as_mut() else {
            return;
        };
        let from = self.snd_nxt;
        if from < k.segments.listed_to() || k.segments.has_pending() {
            return;
        }
        let fin = self.buffer.fin();
        // A list costs a signature: it waits for enough data buffered (or
        // the end of the stream). Meanwhile, an application that writes as
        // fast as data goes out gets its segments signed by the datagram
        // lists, whose signatures are bounded in time.
        let buffered = self.buffer.end().saturating_sub(from);
        if fin.is_none() && buffered < MIN_LIST_SEGMENTS * self.mss {
            return;
        }
        let mut at = from;
        let mut entries = Vec::new();
        let mut flags = Vec::new();
        while entries.len() < k.segments.max_entries() {
            if at < self.buffer.base() {
                break;
            }
            // A run: whole segments of the session's size, no flags.
            let whole = |o: u64| {
                let end = o + self.mss;
                end <= self.buffer.end()
                    && fin.is_none_or(|f| end < f)
                    && !self.buffer.is_message_end(end)
            };
            let mut count = 0;
            while count < run && whole(at + count * self.mss) {
                count += 1;
            }
            if count >= 2 {
                let end = at + count * self.mss;
                let (a, b) = self.buffer.slices(at..end);
                entries.push(ListEntry {
                    len: self.mss,
                    count,
                    hash: run_hash(at, self.mss, count, &[a, b]),
                });
                flags.extend((0..count).map(|_| (false, false)));
                at = end;
                continue;
            }
            let (range, _) = self.buffer.next_segment(at, self.mss);
            let len = range.end - range.start;
            let ends_stream = fin == Some(range.end);
            if len == 0 && !ends_stream {
                break;
            }
            let message_end = len > 0 && self.buffer.is_message_end(range.end);
            if len < self.mss && !ends_stream && !message_end {
                // A tail the application is still writing: listed once
                // whole (a list fixes its length).
                break;
            }
            let (a, b) = self.buffer.slices(range.clone());
            entries.push(ListEntry::single(
                len,
                segment_hash_of_pieces(at, ends_stream, message_end, &[a, b]),
            ));
            flags.push((ends_stream, message_end));
            at = range.end;
            if ends_stream {
                break;
            }
        }
        if entries.is_empty() {
            return;
        }
        let list = SegmentList::sign(&k.signer, self.session_id, from, entries);
        k.segments.push(list, &flags);
        self.stats.segment_lists_sent += 1;
    }

    /// New data waits for the window at `SND.NXT`. Inside a run (its first
    /// segments sent), the members hold those segments unchecked — a run
    /// is checked whole — and so have data outstanding however long the
    /// window stays shut; past twice the slowest member's smoothed RTT and
    /// [`BLOCKED_RUN_GRACE`], the run's detail is multicast so they can
    /// take what they hold. A member that never opens the window (killed,
    /// or hostile) is evicted alone, not with everyone stalled behind it.
    pub(super) fn note_blocked_in_run(&mut self, now: Instant) {
        let snd_nxt = self.snd_nxt;
        let Some(k) = self.keys.as_mut() else {
            return;
        };
        if k.blocked_run.as_ref().is_some_and(|r| r.contains(&snd_nxt)) {
            return; // noted already
        }
        let Some(run) = k.listed(snd_nxt).filter(|l| l.continues_run) else {
            return; // at the start of a run, or not listed
        };
        let start = run.run_start;
        k.blocked_run = Some(start..run.run_end);
        if k.segments.detail(start).is_some() {
            return; // detailed already
        }
        let rtt = std::time::Duration::from_nanos(self.members.max_srtt_ns().unwrap_or(0));
        let wait = 2 * rtt + BLOCKED_RUN_GRACE;
        self.timers.set(Timer::BlockedRun, Some(now + wait));
    }

    /// [`Timer::BlockedRun`]: if new data still waits inside the same run,
    /// its detail goes out. (The run stays noted: while the window keeps
    /// new data inside it, nothing is looked up again.)
    pub(super) fn on_blocked_run_timer(&mut self) {
        let snd_nxt = self.snd_nxt;
        let Some(run) = self.keys.as_ref().and_then(|k| k.blocked_run.clone()) else {
            return;
        };
        if run.start < snd_nxt && snd_nxt < run.end && run.start >= self.buffer.base() {
            self.multicast_detail(run.start);
        }
    }

    /// Makes, signs and queues for multicast the detail of the run at
    /// `start`: each segment of the runs from there on named by its own
    /// hash, whole runs only, as far as one list holds (the runs that
    /// follow, which the same losses may have hit). Kept for members that
    /// ask again.
    fn multicast_detail(&mut self, start: u64) {
        let Some(k) = self.keys.as_mut() else {
            return;
        };
        if k.segments.detail(start).is_some() {
            return;
        }
        let mut entries = Vec::new();
        let mut at = start;
        while let Some(l) = k.segments.listed(at) {
            if !l.continues_run {
                let segments = (l.run_end - at) / l.len.max(1);
                if segments < 2 || entries.len() as u64 + segments > k.segments.max_entries() as u64
                {
                    break; // a single segment (listed as such), or no room
                }
            }
            let (a, b) = self.buffer.slices(at..at + l.len);
            let hash = segment_hash_of_pieces(at, l.fin, l.message_end, &[a, b]);
            entries.push(ListEntry::single(l.len, hash));
            at += l.len;
        }
        self.stats.segment_details_sent += 1;
        let list = SegmentList::sign(&k.signer, self.session_id, start, entries);
        k.segments.push_detail(list);
    }

    /// Member `id` no longer holds `ranges`, which it acknowledged
    /// selectively (held segments of a run that proved forged): they are
    /// lost to it again, and repaired.
    pub(super) fn on_renege(
        &mut self,
        now: Instant,
        id: crate::session::MemberId,
        ranges: &[std::ops::Range<u64>],
    ) {
        let (snd_nxt, log) = (self.snd_nxt, &self.log);
        let mut lost = Vec::new();
        self.members.update(id, snd_nxt, |m| {
            for r in ranges {
                lost.extend(m.renege(r.clone(), snd_nxt, log));
            }
        });
        if !lost.is_empty() {
            self.stats.reneged_segments += lost.len() as u64;
            self.queue_repairs(now, id, lost);
        }
    }

    /// Member `id` asks for the list naming the segment at `offset`, by
    /// unicast under its pair key; or (`detail`) for the detail of the run
    /// starting there. A detail is made and signed once and multicast (the
    /// members that lost the same segments want it too); one that asks
    /// again gets it by unicast. At most one detail per
    /// [`DETAIL_INTERVAL`] for a member.
    pub(super) fn on_segments_request(
        &mut self,
        now: Instant,
        id: crate::session::MemberId,
        q: SegmentsRequestFrame,
    ) {
        let Some(addr) = self.members.get(id).map(|m| m.addr()) else {
            return;
        };
        let Some(k) = self.keys.as_mut() else {
            return;
        };
        let list = if q.detail {
            let Some((start, _)) = k.segments.run_at(q.offset).filter(|(o, _)| *o == q.offset)
            else {
                return;
            };
            let recent = k
                .details
                .get(&addr)
                .is_some_and(|&t| now < t + DETAIL_INTERVAL);
            if recent || start < self.buffer.base() {
                return;
            }
            k.details.insert(addr, now);
            if let Some(d) = k.segments.detail(start) {
                let list = d.clone();
                self.control(addr, super::transmit::Control::Segments(Box::new(list)));
                return;
            }
            self.multicast_detail(start);
            return;
        } else {
            let Some(list) = k.segments.covering(q.offset).cloned() else {
                return;
            };
            self.stats.segment_lists_resent += 1;
            list
        };
        self.control(addr, super::transmit::Control::Segments(Box::new(list)));
    }
}
