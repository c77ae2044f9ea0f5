//! The answering side of joins (a session sender, a merger for its
//! children): first handshake messages read within a budget, and each
//! joiner's handshake, answer and keys.

use super::noise::{first_ephemeral, Responder};
use super::{
    Credentials, HandshakeError, PacketKey, PairKeys, PublicKey, ReplayWindow, SeedStream,
};
use crate::join_budget::JoinBudget;
use crate::wire::{decode_frames, Frame, GroupKeyFrame, Header};
use fanout_core::stats::DropReason;
use fanout_core::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

/// First handshake messages read per second at most, on average. Reading
/// one costs up to two X25519 operations (about 100 µs under `IK`) before
/// it can fail, so a flood of junk could otherwise take a core; beyond the
/// budget they are dropped unread (`limit_exceeded`) and honest joiners
/// retry.
pub const HANDSHAKES_PER_SECOND: u32 = 2000;
/// First handshake messages that may be read at once (a token bucket): a
/// thousand receivers started together are all answered in their first
/// round trip (about 0.1 s of X25519 work).
pub const HANDSHAKE_BURST: u32 = 1024;

/// One joiner's handshake and keys.
pub struct JoinerKeys {
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
    /// Newest group key epoch it holds (handed in its answer or
    /// confirmed).
    pub epoch: u64,
}

impl std::fmt::Debug for JoinerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinerKeys")
            .field("answered", &self.keys.is_some())
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl JoinerKeys {
    /// A joiner whose first message `handshake` read.
    pub fn new(handshake: Responder) -> Self {
        JoinerKeys {
            ephemeral: handshake.ephemeral(),
            handshake: Some(handshake),
            answer: Vec::new(),
            keys: None,
            replay: ReplayWindow::default(),
            epoch: 0,
        }
    }

    /// The pair's keys, once answered.
    pub fn keys(&self) -> Option<&PairKeys> {
        self.keys.as_ref()
    }

    /// Whether the answer was written.
    pub fn is_answered(&self) -> bool {
        self.handshake.is_none()
    }

    /// The answer carrying `payload` (encoded frames): written on the
    /// first call, repeated as is after (a retransmitted first message
    /// gets the same answer). `None` if writing it failed.
    pub fn answer(&mut self, payload: impl FnOnce() -> Vec<u8>) -> Option<&[u8]> {
        if let Some(r) = self.handshake.take() {
            self.keys = r.answer(&payload(), &mut self.answer).ok();
        }
        self.keys.as_ref()?;
        Some(&self.answer)
    }

    /// The answer admitting this joiner: `accept` (an encoded ACCEPT
    /// frame) with the session's group keys `group` and the `source` key
    /// its lists verify under (`docs/wire.md` §4.12); the joiner holds
    /// those epochs from then on. Written once, then repeated.
    pub fn answer_join(
        &mut self,
        accept: &[u8],
        group: &[GroupKeyFrame],
        source: [u8; 32],
    ) -> Option<&[u8]> {
        if !self.is_answered() {
            self.epoch = (group.iter().map(|k| k.epoch)).fold(self.epoch, u64::max);
        }
        self.answer(|| {
            let mut inner = accept.to_vec();
            for k in group {
                Frame::GroupKey(*k).encode(&mut inner);
            }
            Frame::SourceKey(source).encode(&mut inner);
            inner
        })
    }

    /// The frames of a sealed datagram from this joiner, opened into
    /// `scratch` (its replay window updated), or why it was refused.
    pub fn open<'a>(
        &mut self,
        header: &Header,
        datagram: &[u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], DropReason> {
        let key = self.keys.as_ref().ok_or(DropReason::Unauthenticated)?;
        let replay = &mut self.replay;
        let pn = header.packet_number;
        super::open_sealed(&key.joiner_to_sender, replay, pn, datagram, scratch, true)
            .map(|(_, frames)| frames)
    }
}

/// What an unsealed datagram from a stranger or joiner asks.
pub enum Clear {
    /// A first handshake message never seen: its CONNECT (the payload)
    /// is to be admitted ([`Answering::take`]) or refused
    /// ([`Answering::refusal`]).
    Join(Vec<u8>),
    /// A retransmitted first message of a known joiner: answer again.
    Repeat,
}

/// Reads first handshake messages within the budget, and holds the one
/// being admitted.
pub struct Answering {
    /// First messages that may be read.
    budget: JoinBudget,
    /// The handshake of the join being admitted, between reading it and
    /// admitting (or refusing) it.
    pending: Option<Responder>,
}

impl Default for Answering {
    fn default() -> Self {
        Answering {
            budget: JoinBudget::new(HANDSHAKES_PER_SECOND, HANDSHAKE_BURST),
            pending: None,
        }
    }
}

impl std::fmt::Debug for Answering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answering")
            .field("budget_left", &self.budget.left())
            .finish()
    }
}

impl Answering {
    /// An unsealed datagram's `frames` at `now`, from an address whose
    /// joiner is `known` (if any): a first handshake message (read here
    /// under `creds` with randomness `seed`, within the budget), or
    /// nothing to act on.
    pub fn on_clear(
        &mut self,
        now: Instant,
        creds: &Credentials,
        seed: impl FnOnce() -> [u8; 32],
        known: Option<&JoinerKeys>,
        frames: &[u8],
    ) -> Result<Clear, DropReason> {
        let Some(Ok(Frame::Handshake(first))) = decode_frames(frames).next() else {
            return Err(DropReason::Unauthenticated);
        };
        if let Some(j) = known {
            return if Some(j.ephemeral) == first_ephemeral(first) {
                Ok(Clear::Repeat)
            } else {
                // Another handshake from a joiner's address: the joiner
                // stays as it is (it leaves, or is evicted, first).
                Err(DropReason::UnknownSession)
            };
        }
        if !self.budget.take(now) {
            return Err(DropReason::LimitExceeded);
        }
        match Responder::read(creds, seed(), first) {
            Ok((r, payload)) => {
                self.pending = Some(r);
                Ok(Clear::Join(payload))
            }
            Err(HandshakeError::NotAllowed) => Err(DropReason::NotAllowed),
            Err(_) => Err(DropReason::Unauthenticated),
        }
    }

    /// The join being read was admitted: its keys-to-be.
    pub fn take(&mut self) -> Option<JoinerKeys> {
        self.pending.take().map(JoinerKeys::new)
    }

    /// The join being read is refused with `reason`: the answer that
    /// tells the joiner (authenticated, so no forger can refuse for us).
    pub fn refusal(&mut self, reason: &str) -> Option<Vec<u8>> {
        let r = self.pending.take()?;
        let mut inner = Vec::new();
        Frame::Reset(crate::wire::CloseFrame { code: 1, reason }).encode(&mut inner);
        let mut answer = Vec::new();
        r.answer(&inner, &mut answer).ok()?;
        Some(answer)
    }

    /// Forgets the handshake of a join that was neither admitted nor
    /// refused (dropped unanswered).
    pub fn end_join(&mut self) {
        self.pending = None;
    }
}

/// Keys of joiners that left, kept to seal what is still queued for them;
/// the oldest is forgotten beyond this.
const DEPARTED_KEPT: usize = 64;

/// The joiners an answering engine (a session sender, a merger) keeps by
/// address: each one's handshake and keys, the keys of those that left
/// (to seal what is still queued for them), and the join being read.
#[derive(Debug)]
pub struct Joiners {
    credentials: Arc<Credentials>,
    seeds: SeedStream,
    joined: BTreeMap<SocketAddr, JoinerKeys>,
    departed: VecDeque<(SocketAddr, JoinerKeys)>,
    answering: Answering,
}

impl Joiners {
    /// No joiners yet; handshakes answered under `credentials`, with
    /// randomness from `seed`.
    pub fn new(credentials: Arc<Credentials>, seed: [u8; 32]) -> Self {
        Joiners {
            credentials,
            seeds: SeedStream::new(seed),
            joined: BTreeMap::new(),
            departed: VecDeque::new(),
            answering: Answering::default(),
        }
    }

    /// An unsealed datagram's `frames` from `from` at `now`: a first
    /// handshake message (read here, within the budget), a retransmission
    /// of a joiner's, or nothing to act on.
    pub fn on_clear(
        &mut self,
        now: Instant,
        from: SocketAddr,
        frames: &[u8],
    ) -> Result<Clear, DropReason> {
        let (seeds, known) = (&mut self.seeds, self.joined.get(&from));
        let creds = &self.credentials;
        (self.answering).on_clear(now, creds, || seeds.next_seed(), known, frames)
    }

    /// The frames of a sealed datagram from the joiner at `from`, opened
    /// into `scratch`.
    pub fn open<'a>(
        &mut self,
        from: SocketAddr,
        header: &Header,
        datagram: &[u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], DropReason> {
        let j = self.joined.get_mut(&from).ok_or(DropReason::UnknownPeer)?;
        j.open(header, datagram, scratch)
    }

    /// The join being read was admitted at `addr`: its handshake is kept
    /// for the answer.
    pub fn admitted(&mut self, addr: SocketAddr) {
        if let Some(j) = self.answering.take() {
            self.joined.insert(addr, j);
        }
    }

    /// The join being read is refused with `reason`: the answer that tells
    /// the joiner.
    pub fn refusal(&mut self, reason: &str) -> Option<Vec<u8>> {
        self.answering.refusal(reason)
    }

    /// Forgets the join being read if it was neither admitted nor refused.
    pub fn end_join(&mut self) {
        self.answering.end_join();
    }

    /// The joiner at `addr`.
    pub fn get(&self, addr: &SocketAddr) -> Option<&JoinerKeys> {
        self.joined.get(addr)
    }

    /// The joiner at `addr`, to update.
    pub fn get_mut(&mut self, addr: &SocketAddr) -> Option<&mut JoinerKeys> {
        self.joined.get_mut(addr)
    }

    /// Every joiner, by address.
    pub fn iter(&self) -> impl Iterator<Item = (&SocketAddr, &JoinerKeys)> {
        self.joined.iter()
    }

    /// Joiners kept.
    pub fn len(&self) -> usize {
        self.joined.len()
    }

    /// Whether no joiner is kept.
    pub fn is_empty(&self) -> bool {
        self.joined.is_empty()
    }

    /// The joiner at `addr` left: its keys stay (among the
    /// last 64) only to seal what is still queued for it.
    /// Returns it, if it was kept.
    pub fn depart(&mut self, addr: SocketAddr) -> Option<&JoinerKeys> {
        let j = self.joined.remove(&addr)?;
        if self.departed.len() == DEPARTED_KEPT {
            self.departed.pop_front();
        }
        self.departed.push_back((addr, j));
        self.departed.back().map(|(_, j)| j)
    }

    /// The key that seals what goes to `to` (a joiner's, or one that left
    /// lately), once its answer is written.
    pub fn sealing_key(&self, to: &SocketAddr) -> Option<&PacketKey> {
        let departed = || self.departed.iter().rev().find(|(a, _)| a == to);
        (self.joined.get(to).or_else(|| departed().map(|(_, j)| j)))
            .and_then(JoinerKeys::keys)
            .map(|k| &k.sender_to_joiner)
    }
}
