//! One group key of a protected multicast session and the keys derived
//! from it (`docs/wire.md` §4.12): the AEAD key of sealed multicast
//! datagrams and the listed-data key. Epochs count the session's group
//! keys from 0; the low bit is a datagram's `KEY_PHASE`.

use super::{DataKey, PacketKey};
use crate::wire::GroupKeyFrame;

/// A group key of one epoch.
pub struct GroupKey {
    /// Its epoch.
    pub epoch: u64,
    secret: [u8; 32],
    /// Seals (and opens) multicast datagrams under the group AEAD.
    pub key: PacketKey,
    /// Encrypts listed data ([`DataKey`]).
    pub data: DataKey,
}

impl std::fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupKey")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl GroupKey {
    /// The keys of `epoch` from its 32 secret bytes.
    pub fn new(epoch: u64, secret: [u8; 32]) -> Self {
        GroupKey {
            epoch,
            key: PacketKey::new(&secret),
            data: DataKey::from_group_secret(&secret),
            secret,
        }
    }

    /// The GROUP_KEY frame that hands it out.
    pub fn frame(&self) -> GroupKeyFrame {
        GroupKeyFrame {
            epoch: self.epoch,
            key: self.secret,
        }
    }
}
