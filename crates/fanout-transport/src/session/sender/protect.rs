//! Packet protection at the session sender (`crate::protection`,
//! `docs/wire.md` §4.12): the handshake inside each join, every member's
//! pair of keys, the group key, sealing what goes out and opening what
//! comes in.

use crate::protection::noise::Responder;
use crate::protection::source::{SignedList, Signer};
use crate::protection::{
    HandshakeError, PacketKey, PairKeys, Protection, PublicKey, ReplayWindow, SeedStream,
};
use crate::wire::{Frame, Header, HeaderFlags, HEADER_LEN};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// Keys of members that left, kept to seal the RESET or CLOSE still
/// queued for them; the oldest is forgotten beyond this.
const DEPARTED_KEPT: usize = 64;
/// First handshake messages read per [`HANDSHAKE_PERIOD`] at most. Reading
/// one costs up to two X25519 operations (about 100 µs under `IK`) before
/// it can fail, so a flood of junk could otherwise take a core; beyond the
/// budget they are dropped unread (`limit_exceeded`) and honest joiners
/// retry. 200 per 100 ms admits 2 000 joiners a second.
const HANDSHAKES_PER_PERIOD: u32 = 200;
/// The period of [`HANDSHAKES_PER_PERIOD`].
const HANDSHAKE_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

/// One member's handshake and keys.
struct MemberKeys {
    /// Its first handshake message's ephemeral key: a retransmission of
    /// that message has the same.
    ephemeral: PublicKey,
    /// The handshake, until the answer is written.
    handshake: Option<Responder>,
    /// The answer, repeated for a retransmitted first message.
    answer: Vec<u8>,
    /// Set once the answer is written.
    keys: Option<PairKeys>,
    /// Packet numbers of its datagrams accepted so far.
    replay: ReplayWindow,
}

/// The sender's protection state.
pub(super) struct SenderKeys {
    protection: Protection,
    seeds: SeedStream,
    group_secret: [u8; 32],
    group: PacketKey,
    /// Signs the lists of multicast datagrams (source authentication).
    signer: Signer,
    members: BTreeMap<SocketAddr, MemberKeys>,
    departed: VecDeque<(SocketAddr, MemberKeys)>,
    /// The handshake of the join being admitted, between reading it and
    /// admitting (or refusing) it.
    answering: Option<Responder>,
    /// Start of the current handshake period and first messages read in it.
    handshake_budget: (Option<Instant>, u32),
}

impl std::fmt::Debug for SenderKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SenderKeys")
            .field("members", &self.members.len())
            .finish()
    }
}

/// What an unsealed datagram from a stranger or member asks.
pub(super) enum Clear {
    /// A first handshake message never seen: its CONNECT (the payload)
    /// is to be admitted or refused.
    Join(Vec<u8>),
    /// A retransmitted first message of a known member: answer again.
    Repeat,
}

impl SenderKeys {
    pub(super) fn new(protection: Protection, max_datagram: usize) -> Self {
        let mut seeds = SeedStream::new(protection.seed);
        let group_secret = seeds.next_seed();
        SenderKeys {
            group: PacketKey::new(&group_secret),
            signer: Signer::new(seeds.next_seed(), max_datagram),
            group_secret,
            protection,
            seeds,
            members: BTreeMap::new(),
            departed: VecDeque::new(),
            answering: None,
            handshake_budget: (None, 0),
        }
    }

    /// The frames of a sealed datagram from `from`, opened into `scratch`
    /// (its replay window updated), or why it was refused.
    pub(super) fn open<'a>(
        &mut self,
        from: SocketAddr,
        header: &Header,
        datagram: &[u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], DropReason> {
        let m = self.members.get_mut(&from).ok_or(DropReason::UnknownPeer)?;
        let key = m.keys.as_ref().ok_or(DropReason::Unauthenticated)?;
        let pn = m.replay.expand(header.packet_number);
        m.replay.check(pn).map_err(|_| DropReason::Replayed)?;
        scratch.clear();
        scratch.extend_from_slice(datagram);
        let frames = key
            .joiner_to_sender
            .open(scratch, pn)
            .map_err(|_| DropReason::Unauthenticated)?;
        m.replay.commit(pn);
        Ok(frames)
    }

    /// An unsealed datagram's `frames` from `from` at `now`: a first
    /// handshake message (read here, within the budget), or nothing to act
    /// on.
    pub(super) fn on_clear(
        &mut self,
        now: Instant,
        from: SocketAddr,
        frames: &[u8],
    ) -> Result<Clear, DropReason> {
        let Some(Ok(Frame::Handshake(first))) = crate::wire::decode_frames(frames).next() else {
            return Err(DropReason::Unauthenticated);
        };
        if let Some(m) = self.members.get(&from) {
            return if Some(m.ephemeral) == crate::protection::noise::first_ephemeral(first) {
                Ok(Clear::Repeat)
            } else {
                // Another handshake from a member's address: the member
                // stays as it is (it leaves, or is evicted, first).
                Err(DropReason::UnknownSession)
            };
        }
        let (start, read) = &mut self.handshake_budget;
        if start.is_none_or(|s| now >= s + HANDSHAKE_PERIOD) {
            *start = Some(now);
            *read = 0;
        }
        if *read >= HANDSHAKES_PER_PERIOD {
            return Err(DropReason::LimitExceeded);
        }
        *read += 1;
        let seed = self.seeds.next_seed();
        match Responder::read(&self.protection.credentials, seed, first) {
            Ok((r, payload)) => {
                self.answering = Some(r);
                Ok(Clear::Join(payload))
            }
            Err(HandshakeError::NotAllowed) => Err(DropReason::NotAllowed),
            Err(_) => Err(DropReason::Unauthenticated),
        }
    }

    /// The join being read was admitted at `addr`: its handshake is kept
    /// for the ACCEPT.
    pub(super) fn admitted(&mut self, addr: SocketAddr) {
        if let Some(r) = self.answering.take() {
            let m = MemberKeys {
                ephemeral: r.ephemeral(),
                handshake: Some(r),
                answer: Vec::new(),
                keys: None,
                replay: ReplayWindow::default(),
            };
            self.members.insert(addr, m);
        }
    }

    /// The join being read is refused with `reason`: the answer that
    /// tells the joiner (authenticated, so no forger can refuse for us).
    pub(super) fn refusal(&mut self, reason: &str) -> Option<Vec<u8>> {
        let r = self.answering.take()?;
        let mut inner = Vec::new();
        Frame::Reset(crate::wire::CloseFrame { code: 1, reason }).encode(&mut inner);
        let mut answer = Vec::new();
        r.answer(&inner, &mut answer).ok()?;
        Some(answer)
    }

    /// Forgets the handshake of a join that was neither admitted nor
    /// refused (dropped unanswered).
    pub(super) fn end_join(&mut self) {
        self.answering = None;
    }

    /// The answer to `addr`'s handshake carrying `accept` (the encoded
    /// ACCEPT frame), the group key and the key lists are signed with:
    /// written once, then repeated.
    pub(super) fn answer(&mut self, addr: SocketAddr, accept: &[u8]) -> Option<&[u8]> {
        let (group, source) = (self.group_secret, self.signer.public_key());
        let m = self.members.get_mut(&addr)?;
        if let Some(r) = m.handshake.take() {
            let mut inner = accept.to_vec();
            Frame::GroupKey(group).encode(&mut inner);
            Frame::SourceKey(source).encode(&mut inner);
            m.keys = r.answer(&inner, &mut m.answer).ok();
        }
        m.keys.as_ref()?;
        Some(&m.answer)
    }

    /// A member at `addr` left: its keys stay only to seal what is still
    /// queued for it.
    pub(super) fn forget(&mut self, addr: SocketAddr) {
        if let Some(m) = self.members.remove(&addr) {
            if self.departed.len() == DEPARTED_KEPT {
                self.departed.pop_front();
            }
            self.departed.push_back((addr, m));
        }
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
        // Receivers open by the same flag (it is authenticated).
        if out[start + 3] & HeaderFlags::MULTICAST != 0 {
            let listed = !crate::wire::starts_with_signature(&out[start + HEADER_LEN..]);
            crate::packet::seal(out, start, numbers, &self.group);
            if listed {
                self.signer.add(now, numbers.last(), &out[start..]);
            }
            return true;
        }
        let key = self
            .members
            .get(&to)
            .or_else(|| {
                self.departed
                    .iter()
                    .rev()
                    .find(|(a, _)| *a == to)
                    .map(|(_, m)| m)
            })
            .and_then(|m| m.keys.as_ref())
            .map(|k| &k.sender_to_joiner);
        match key {
            Some(key) => {
                crate::packet::seal(out, start, numbers, key);
                true
            }
            None => false,
        }
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
