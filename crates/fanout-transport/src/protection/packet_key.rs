//! One direction's packet key: AES-128-GCM over the frames of a datagram,
//! the header authenticated (`docs/wire.md` §4.12) — QUIC's mandatory
//! cipher (RFC 9001 §5.3), about 10% cheaper than AES-256-GCM here.
//!
//! Layout of a sealed datagram: the 16-byte header with `SEALED` set (the
//! associated data), the frames encrypted in place, a 16-byte tag. The
//! nonce is the sender's full 64-bit packet number, big-endian, after four
//! zero bytes (as Noise's transport messages, Noise §5.1): every key is used
//! by one packet-number space only, and a packet number is never reused, so
//! no nonce repeats under a key.

use crate::wire::{HeaderFlags, HEADER_LEN};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};

/// Bytes the seal adds to a datagram (the AEAD tag).
pub const TAG_LEN: usize = 16;

/// A sealed datagram failed to open: forged, mutated, truncated, or under
/// another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the datagram does not open under this key")]
pub struct Unauthenticated;

/// A 128-bit AES-GCM key for one direction of one peer relation.
pub struct PacketKey {
    key: LessSafeKey,
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PacketKey(..)")
    }
}

fn nonce(pn: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

impl PacketKey {
    /// The key from 32 secret bytes (a Noise split, or a random group
    /// key): their first 16.
    pub fn new(secret: &[u8; 32]) -> Self {
        let unbound = UnboundKey::new(&AES_128_GCM, &secret[..16]).expect("a 16-byte AES-128 key");
        PacketKey {
            key: LessSafeKey::new(unbound),
        }
    }

    /// Seals the datagram that starts at `out[start]` (header, then frames
    /// to the end of `out`) as packet number `pn`: sets `SEALED` in its
    /// header, encrypts the frames in place, appends the tag.
    ///
    /// # Panics
    /// If `out[start..]` is shorter than a header (a bug of the caller).
    pub fn seal(&self, out: &mut Vec<u8>, start: usize, pn: u64) {
        out[start + 3] |= HeaderFlags::SEALED;
        let (header, frames) = out[start..].split_at_mut(HEADER_LEN);
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(pn), Aad::from(&*header), frames)
            .expect("AES-GCM seals any datagram-sized input");
        out.extend_from_slice(tag.as_ref());
    }

    /// Opens a sealed datagram in place (`datagram` = header, ciphertext,
    /// tag) as packet number `pn`; returns its frames.
    pub fn open<'a>(&self, datagram: &'a mut [u8], pn: u64) -> Result<&'a [u8], Unauthenticated> {
        if datagram.len() < HEADER_LEN + TAG_LEN {
            return Err(Unauthenticated);
        }
        let (header, sealed) = datagram.split_at_mut(HEADER_LEN);
        let frames = self
            .key
            .open_in_place(nonce(pn), Aad::from(&*header), sealed)
            .map_err(|_| Unauthenticated)?;
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Header, HeaderFlags};

    fn datagram(pn: u32, frames: &[u8]) -> Vec<u8> {
        let mut out = vec![0xAA; 3]; // bytes of an earlier datagram of a batch
        Header {
            flags: HeaderFlags::default(),
            session_id: 7,
            packet_number: pn,
        }
        .encode(&mut out);
        out.extend_from_slice(frames);
        out
    }

    #[test]
    fn seals_and_opens_with_the_header_authenticated() {
        let key = PacketKey::new(&[1; 32]);
        let mut out = datagram(5, b"frames");
        key.seal(&mut out, 3, 5);
        let sealed = out[3..].to_vec();
        assert_eq!(sealed.len(), HEADER_LEN + 6 + TAG_LEN);
        assert!(Header::decode(&sealed)
            .unwrap()
            .0
            .flags
            .contains(HeaderFlags::SEALED));
        assert_ne!(&sealed[HEADER_LEN..HEADER_LEN + 6], b"frames");
        let mut copy = sealed.clone();
        assert_eq!(key.open(&mut copy, 5).unwrap(), b"frames");
        // Another packet number, another key, any flipped bit: refused.
        assert_eq!(key.open(&mut sealed.clone(), 6), Err(Unauthenticated));
        let other = PacketKey::new(&[2; 32]);
        assert_eq!(other.open(&mut sealed.clone(), 5), Err(Unauthenticated));
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x10;
            assert_eq!(key.open(&mut bad, 5), Err(Unauthenticated), "byte {i}");
        }
        assert_eq!(key.open(&mut sealed.clone()[..20], 5), Err(Unauthenticated));
    }
}
