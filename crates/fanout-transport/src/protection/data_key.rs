//! The key of listed multicast DATA: AES-128-CTR, no tag
//! (`docs/wire.md` §4.12, listed data).
//!
//! A multicast datagram that carries one DATA frame named by a signed
//! segment list ([`super::segments`]) needs no AEAD tag: the receiver
//! checks the frame's hash against the list, which only the sender could
//! sign, so the tag would add 16 bytes per datagram and prove nothing the
//! list does not. It still needs encryption against outsiders; this is it.
//! The key is derived from the group key's secret (HKDF-SHA256, RFC 5869,
//! info `"fanout listed data v1"`), so it differs from the group AEAD key
//! and changes with it. The counter block is the sender's 64-bit packet
//! number, big-endian, then 64 zero bits, counted up per 16-byte block: a
//! datagram spans fewer than 2^64 blocks, so no block repeats under a key.

use crate::wire::HEADER_LEN;
use aes::cipher::{InnerIvInit, KeyInit, StreamCipher};

type Aes128Ctr = ctr::Ctr128BE<aes::Aes128Enc>;

const INFO: &[u8] = b"fanout listed data v1";

/// AES-128-CTR key for listed multicast DATA (its key schedule computed
/// once).
#[derive(Clone)]
pub struct DataKey {
    cipher: aes::Aes128Enc,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

struct Len16;

impl ring::hkdf::KeyType for Len16 {
    fn len(&self) -> usize {
        16
    }
}

impl DataKey {
    /// The key derived from a group key's 32 secret bytes.
    pub fn from_group_secret(secret: &[u8; 32]) -> Self {
        let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(secret);
        let mut key = [0u8; 16];
        prk.expand(&[INFO], Len16)
            .and_then(|okm| okm.fill(&mut key))
            .expect("16 bytes are within HKDF-SHA256's output");
        DataKey {
            cipher: aes::Aes128Enc::new(&key.into()),
        }
    }

    /// Encrypts (or decrypts: the same operation) the frames of the
    /// datagram at `datagram` (header, then frames) as packet number `pn`.
    /// Datagrams shorter than a header are left alone.
    pub fn apply(&self, datagram: &mut [u8], pn: u64) {
        let Some(frames) = datagram.get_mut(HEADER_LEN..) else {
            return;
        };
        let mut iv = [0u8; 16];
        iv[..8].copy_from_slice(&pn.to_be_bytes());
        let mut c =
            Aes128Ctr::from_core(ctr::CtrCore::inner_iv_init(self.cipher.clone(), &iv.into()));
        c.apply_keystream(frames);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_depends_on_key_and_packet_number() {
        let k = DataKey::from_group_secret(&[1; 32]);
        let plain: Vec<u8> = (0..1452).map(|i| i as u8).collect();
        let mut d = plain.clone();
        k.apply(&mut d, 7);
        assert_eq!(d[..HEADER_LEN], plain[..HEADER_LEN], "the header stays");
        assert_ne!(d[HEADER_LEN..], plain[HEADER_LEN..]);
        let mut other_pn = plain.clone();
        k.apply(&mut other_pn, 8);
        assert_ne!(other_pn, d);
        let mut other_key = plain.clone();
        DataKey::from_group_secret(&[2; 32]).apply(&mut other_key, 7);
        assert_ne!(other_key, d);
        k.apply(&mut d, 7);
        assert_eq!(d, plain);
        let mut short = vec![1u8; 3];
        k.apply(&mut short, 1);
        assert_eq!(short, [1, 1, 1]);
    }
}
