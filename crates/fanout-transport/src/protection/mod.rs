//! Packet protection and peer authentication (`docs/security.md`;
//! `docs/wire.md` §4.12).
//!
//! * [`noise`] — the per-member handshake inside CONNECT and ACCEPT.
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

mod data_key;
mod group_key;
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

use std::sync::Arc;

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
