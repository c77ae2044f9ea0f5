//! Packet protection and peer authentication (`docs/security.md`;
//! `docs/wire.md` §4.12).
//!
//! * [`noise`] — the per-member handshake inside CONNECT and ACCEPT;
//!   [`joining`] and [`answering`] — its two sides as engines hold them
//!   (a merger holds both).
//! * [`PacketKey`] — AES-128-GCM over every later datagram, the header
//!   authenticated, the nonce from the 64-bit packet number.
//! * [`ReplayWindow`] — each packet number of a peer is accepted once.
//! * [`source`] — signed hash lists: multicast datagrams only the sender
//!   could have sent.
//! * [`segments`] — signed segment lists, sent ahead of their data:
//!   multicast DATA checked on arrival, sealed with [`DataKey`] (no tag).
//!
//! A session sender hands every member the session's group key inside
//! its ACCEPT; multicast datagrams are sealed with it, everything else
//! with the member's own pair of keys.

pub mod answering;
mod data_key;
mod group_key;
pub mod joining;
pub mod noise;
mod packet_key;
mod replay;
pub mod segments;
pub mod source;

pub use data_key::DataKey;
pub use group_key::GroupKey;
pub use noise::{Credentials, HandshakeError, PairKeys, PublicKey, SeedStream};
pub use packet_key::{PacketKey, Unauthenticated, TAG_LEN};
pub use replay::{Replay, ReplayWindow, REPLAY_WINDOW};

use fanout_core::stats::DropReason;
use std::sync::Arc;

/// Opens the sealed `datagram` (truncated packet number `packet_number`)
/// from one peer's packet-number space, whose accepted numbers `replay`
/// holds, under `key`, into `scratch`: its full packet number and frames,
/// or why it was refused (`replayed` before any decryption,
/// `unauthenticated`). The number is accepted in `replay` only if `commit`
/// (a multicast datagram's number is settled later, by its signed list).
pub fn open_sealed<'a>(
    key: &PacketKey,
    replay: &mut ReplayWindow,
    packet_number: u32,
    datagram: &[u8],
    scratch: &'a mut Vec<u8>,
    commit: bool,
) -> Result<(u64, &'a [u8]), DropReason> {
    let pn = replay.expand(packet_number);
    replay.check(pn).map_err(|_| DropReason::Replayed)?;
    scratch.clear();
    scratch.extend_from_slice(datagram);
    let frames = key
        .open(scratch, pn)
        .map_err(|_| DropReason::Unauthenticated)?;
    if commit {
        replay.commit(pn);
    }
    Ok((pn, frames))
}

/// What an engine needs to protect its sessions.
#[derive(Debug, Clone)]
pub struct Protection {
    /// Keys it proves itself with and expects of its peers.
    pub credentials: Arc<Credentials>,
    /// Seed of its randomness (ephemeral keys, the group key): from the OS
    /// random source in `fanout-io`, from the scenario in the simulator.
    pub seed: [u8; 32],
}

impl Protection {
    /// Protection under `credentials`, randomness from `seed`.
    pub fn new(credentials: Credentials, seed: [u8; 32]) -> Self {
        Protection {
            credentials: Arc::new(credentials),
            seed,
        }
    }
}
