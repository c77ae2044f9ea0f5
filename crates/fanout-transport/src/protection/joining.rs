//! The joining side of a handshake (a receiver, a merger joining its
//! parent): the first message carrying the CONNECT, repeated byte for byte
//! on every retry, and the keys the answer hands over.

use super::noise::Initiator;
use super::{Credentials, GroupKey, PairKeys};
use crate::wire::{decode_frames, Frame};
use fanout_core::stats::DropReason;
use std::net::SocketAddr;

/// A join's handshake, kept as what rebuilds it: a forged answer that
/// fails to open must not spend the real one's handshake state (a Noise
/// handshake that failed to read a message is not usable again).
#[derive(Debug)]
pub struct JoinHandshake {
    seed: [u8; 32],
    connect: Vec<u8>,
    first: Vec<u8>,
}

/// What the answer to a join handed over.
#[derive(Debug)]
pub struct Answer {
    /// The pair's keys.
    pub pair: PairKeys,
    /// The frames for the engine: an ACCEPT, or the refusal (RESET).
    pub frames: Vec<u8>,
    /// The session's group keys by phase (epoch's low bit).
    pub group: [Option<GroupKey>; 2],
    /// The key the session sender signs its lists with.
    pub source: Option<[u8; 32]>,
}

impl JoinHandshake {
    /// Starts a handshake under `creds` whose first message carries
    /// `connect` (encoded frames); `None` if the credentials cannot start
    /// one.
    pub fn start(creds: &Credentials, seed: [u8; 32], connect: &[u8]) -> Option<Self> {
        let mut first = Vec::new();
        Initiator::start(creds, seed, connect, &mut first).ok()?;
        Some(JoinHandshake {
            seed,
            connect: connect.to_vec(),
            first,
        })
    }

    /// The first message, the same on every attempt (so a late answer to
    /// any attempt opens, and both ends agree on one pair of keys).
    pub fn first(&self) -> &[u8] {
        &self.first
    }

    /// Reads `answer`; an answer that does not open (a forgery, another
    /// key) or hands group keys without the key that authenticates the
    /// group's data is refused, and this handshake stays usable.
    pub fn finish(&self, creds: &Credentials, answer: &[u8]) -> Result<Answer, DropReason> {
        let mut first = Vec::new();
        let i = Initiator::start(creds, self.seed, &self.connect, &mut first)
            .map_err(|_| DropReason::Unauthenticated)?;
        debug_assert_eq!(first, self.first, "a seeded handshake rebuilds the same");
        let (payload, pair) = i.finish(answer).map_err(|_| DropReason::Unauthenticated)?;
        let mut out = Answer {
            pair,
            frames: Vec::new(),
            group: [None, None],
            source: None,
        };
        for f in decode_frames(&payload) {
            match f {
                Ok(Frame::GroupKey(k)) => {
                    out.group[(k.epoch & 1) as usize] = Some(GroupKey::new(k.epoch, k.key))
                }
                Ok(Frame::SourceKey(k)) => out.source = Some(k),
                Ok(f) => f.encode(&mut out.frames),
                Err(_) => return Err(DropReason::MalformedFrame),
            }
        }
        if out.group.iter().any(Option::is_some) && out.source.is_none() {
            // Multicast data nobody could authenticate as the sender's.
            return Err(DropReason::Unauthenticated);
        }
        Ok(out)
    }
}

/// The join an engine has under way, and where it goes: a receiver's to
/// its sender or merger, a merger's to its parent, either's to an
/// ancestor taking over.
#[derive(Debug, Default)]
pub struct Joining {
    under_way: Option<(SocketAddr, JoinHandshake)>,
}

impl Joining {
    /// The first handshake message to `target` carrying `connect`
    /// (encoded frames), under `creds` as they join `target`: made on the
    /// first attempt (randomness from `seed`), repeated as is after; a new
    /// target starts a new handshake. `None` if the credentials cannot
    /// start one.
    pub fn first_message(
        &mut self,
        creds: &Credentials,
        seed: impl FnOnce() -> [u8; 32],
        target: SocketAddr,
        connect: &[u8],
    ) -> Option<&[u8]> {
        if self.under_way.as_ref().is_none_or(|(t, _)| *t != target) {
            let creds = creds.toward(&target);
            self.under_way = Some((target, JoinHandshake::start(&creds, seed(), connect)?));
        }
        self.under_way.as_ref().map(|(_, j)| j.first())
    }

    /// The answer `answer` from `from` to the join under way: what it
    /// handed over, the join then done. An answer from elsewhere, or one
    /// that does not open, changes nothing.
    pub fn finish(
        &mut self,
        creds: &Credentials,
        from: SocketAddr,
        answer: &[u8],
    ) -> Result<Answer, DropReason> {
        let (target, j) = self.under_way.as_ref().ok_or(DropReason::UnexpectedFrame)?;
        if *target != from {
            return Err(DropReason::UnknownPeer);
        }
        let a = j.finish(&creds.toward(target), answer)?;
        self.under_way = None;
        Ok(a)
    }

    /// Whether an answer is awaited.
    pub fn is_under_way(&self) -> bool {
        self.under_way.is_some()
    }

    /// Forgets the join under way.
    pub fn forget(&mut self) {
        self.under_way = None;
    }
}
