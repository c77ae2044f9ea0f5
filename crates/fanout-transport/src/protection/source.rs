//! Source authentication of multicast datagrams: signed hash lists
//! (`docs/security.md`, `docs/wire.md` §4.12).
//!
//! Every member holds the group key, so the group key alone cannot tell
//! the sender's multicast datagrams from a rogue member's. Data segments
//! are signed ahead of sending ([`super::segments`]); every other sealed
//! multicast datagram (control frames, coded repair symbols, data no
//! segment list names) is signed after, here, amortized: it hashes each sealed multicast
//! datagram (SHA-256, the first 16 bytes) and, every [`MAX_SIGNED`] datagrams or
//! [`SIGN_INTERVAL`], multicasts one SIGNATURE frame — the packet numbers
//! and hashes of that window, signed with an Ed25519 key (ring) whose
//! public half each member received inside its handshake answer. A
//! receiver holds a multicast datagram until a verified list names its
//! packet number and hash, then processes it; one never named is lost to
//! the transport (and repaired like any loss).
//!
//! Why signed hash lists: one signature per window keeps the cost per
//! datagram to a hash (0.9 µs for 1452 bytes with the SHA extensions of
//! current x86 and ARM processors; BLAKE3 took 1.2 µs on inputs this
//! short) and a fraction of a signature, with no clock synchronization
//! (TESLA, RFC 4082, needs one) and no added bytes in the datagrams; the
//! price here is a wait of at most one window before the datagram is
//! processed, which segment lists, sent ahead, avoid for data.

use fanout_core::time::Instant;
use ring::signature::{Ed25519KeyPair, UnparsedPublicKey, ED25519};
use std::collections::BTreeMap;
use std::time::Duration;

/// Most datagrams one signed list names.
pub const MAX_SIGNED: usize = 64;
/// A list is signed and sent at the latest this long after its first
/// datagram went out: the longest a receiver holds a datagram for its
/// list (plus the list's own transit; the hold is reported as ACK delay,
/// so the sender's RTT stays the path's). At 100 Mbit/s a list fills in
/// 7.4 ms. Measured in the lab's scenario (b) (200 MiB, 4 receivers at
/// 100 Mbit/s, 17.6 s unprotected): a 1 ms interval cost 0.35 s of
/// signing and 0.7 s of verifying per receiver; 8 ms saved most of that
/// but held data long enough to lengthen the transfer to 18.6–18.8 s;
/// 2 ms: 18.2 s.
pub const SIGN_INTERVAL: Duration = Duration::from_millis(2);
/// Bytes of a datagram's hash in a list.
pub const HASH_LEN: usize = 16;
/// Bytes of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;
/// Bytes of a datagram around a list: header, frame type, AEAD tag.
pub const LIST_OVERHEAD: usize = crate::wire::HEADER_LEN + 1 + super::TAG_LEN;
/// Multicast datagrams a receiver holds unverified at most; beyond it the
/// oldest is dropped (counted) — bounded memory against a flood of
/// datagrams no list will ever name.
pub const MAX_HELD: usize = 2048;
/// Verified entries a receiver remembers, for datagrams that arrive after
/// the list that names them.
const MAX_VERIFIED: usize = 4 * MAX_SIGNED;

const CONTEXT: &[u8] = b"fanout source v1";

/// One datagram's hash.
pub type DatagramHash = [u8; HASH_LEN];

/// The hash a list names a sealed datagram by: SHA-256, truncated.
pub fn datagram_hash(sealed: &[u8]) -> DatagramHash {
    let mut h = [0u8; HASH_LEN];
    h.copy_from_slice(&ring::digest::digest(&ring::digest::SHA256, sealed).as_ref()[..HASH_LEN]);
    h
}

/// A signed list: the packet numbers and hashes of a window of multicast
/// datagrams (the SIGNATURE frame, `docs/wire.md` §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedList {
    /// `(packet number, hash)`, packet numbers increasing.
    pub entries: Vec<(u64, DatagramHash)>,
    /// Ed25519 over the context, the session id and the entries.
    pub signature: [u8; SIGNATURE_LEN],
}

fn message(session_id: u64, entries: &[(u64, DatagramHash)]) -> Vec<u8> {
    let mut m = Vec::with_capacity(CONTEXT.len() + 8 + entries.len() * (8 + HASH_LEN));
    m.extend_from_slice(CONTEXT);
    m.extend_from_slice(&session_id.to_be_bytes());
    for (pn, h) in entries {
        m.extend_from_slice(&pn.to_be_bytes());
        m.extend_from_slice(h);
    }
    m
}

/// Encoded size of `entries` in a SIGNATURE frame (packet numbers as
/// varint gaps).
fn encoded_len(entries: &[(u64, DatagramHash)]) -> usize {
    let mut prev = entries.first().map_or(0, |e| e.0);
    let mut n = fanout_core::codec::varint_size(prev) + 1;
    for (pn, _) in entries {
        n += fanout_core::codec::varint_size(pn - prev) + HASH_LEN;
        prev = *pn;
    }
    n + SIGNATURE_LEN
}

/// The sender's side: the window being gathered and the key that signs.
pub struct Signer {
    key: Ed25519KeyPair,
    /// Largest encoded list: what a datagram holds.
    max_list_bytes: usize,
    window: Vec<(u64, DatagramHash)>,
    /// The window's list, encoded, in bytes (its signature included; kept
    /// as datagrams join, since the deadline is asked after every one).
    window_bytes: usize,
    /// When the window's first datagram went out.
    opened: Option<Instant>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("window", &self.window.len())
            .finish()
    }
}

impl Signer {
    /// A signer whose Ed25519 key comes from `seed` (fresh per session),
    /// its lists in datagrams of at most `max_datagram` bytes.
    pub fn new(seed: [u8; 32], max_datagram: usize) -> Self {
        Signer {
            key: Ed25519KeyPair::from_seed_unchecked(&seed).expect("any 32 bytes seed a key"),
            max_list_bytes: max_datagram.saturating_sub(LIST_OVERHEAD),
            window: Vec::with_capacity(MAX_SIGNED),
            window_bytes: 0,
            opened: None,
        }
    }

    /// Its lists fit datagrams of at most `max_datagram` bytes from now on.
    pub fn set_max_datagram(&mut self, max_datagram: usize) {
        self.max_list_bytes = max_datagram.saturating_sub(LIST_OVERHEAD);
    }

    /// The public key members verify with.
    pub fn public_key(&self) -> [u8; 32] {
        use ring::signature::KeyPair;
        self.key
            .public_key()
            .as_ref()
            .try_into()
            .expect("an Ed25519 public key is 32 bytes")
    }

    /// Signs `message` with the session's key (segment lists share it,
    /// under a context of their own).
    pub fn sign(&self, message: &[u8]) -> [u8; SIGNATURE_LEN] {
        self.key
            .sign(message)
            .as_ref()
            .try_into()
            .expect("64-byte signature")
    }

    /// Adds a sealed multicast datagram numbered `pn`, sent at `now`.
    pub fn add(&mut self, now: Instant, pn: u64, sealed: &[u8]) {
        self.opened.get_or_insert(now);
        let delta = self.window.last().map_or(0, |&(last, _)| pn - last);
        if self.window.is_empty() {
            // The first packet number, the count byte, the signature.
            self.window_bytes = fanout_core::codec::varint_size(pn) + 1 + SIGNATURE_LEN;
        }
        self.window_bytes += fanout_core::codec::varint_size(delta) + HASH_LEN;
        self.window.push((pn, datagram_hash(sealed)));
        debug_assert_eq!(self.window_bytes, encoded_len(&self.window));
    }

    /// When the window must be signed: at once if full (one more entry,
    /// at its largest, might not fit its datagram), else [`SIGN_INTERVAL`]
    /// after its first datagram; `None` if empty.
    pub fn deadline(&self) -> Option<Instant> {
        let opened = self.opened?;
        let full = self.window.len() >= MAX_SIGNED
            || self.window_bytes + 10 + HASH_LEN > self.max_list_bytes;
        Some(if full { opened } else { opened + SIGN_INTERVAL })
    }

    /// The signed list of the window if it is due at `now` (the window
    /// then starts afresh).
    pub fn take_due(&mut self, now: Instant, session_id: u64) -> Option<SignedList> {
        if self.deadline()? > now {
            return None;
        }
        self.opened = None;
        let entries = std::mem::replace(&mut self.window, Vec::with_capacity(MAX_SIGNED));
        let sig = self.key.sign(&message(session_id, &entries));
        Some(SignedList {
            signature: sig.as_ref().try_into().expect("64-byte signature"),
            entries,
        })
    }
}

/// A held datagram a verified list released: its packet number, when it
/// arrived, its frames.
pub type Released = (u64, Instant, Vec<u8>);

/// What became of a multicast datagram at a receiver.
#[derive(Debug, PartialEq, Eq)]
pub enum Held {
    /// Named by a verified list already: process it now.
    Verified,
    /// Held until a list names it.
    Waiting,
}

/// A receiver's side: the sender's key, datagrams held, hashes verified.
pub struct Verifier {
    key: [u8; 32],
    session_id: u64,
    /// Arrival and opened frames of held datagrams by packet number and
    /// hash (a rogue member can send a datagram under a number the sender
    /// uses too: both wait, and the list decides).
    held: BTreeMap<(u64, DatagramHash), (Instant, Vec<u8>)>,
    /// Hashes named by verified lists, by packet number.
    verified: BTreeMap<u64, DatagramHash>,
    /// Held datagrams dropped at the cap, or named with another hash.
    pub dropped: u64,
    /// Lists whose signature did not verify.
    pub bad_signatures: u64,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("held", &self.held.len())
            .finish()
    }
}

impl Verifier {
    /// A verifier of session `session_id`'s lists under `key`.
    pub fn new(key: [u8; 32], session_id: u64) -> Self {
        Verifier {
            key,
            session_id,
            held: BTreeMap::new(),
            verified: BTreeMap::new(),
            dropped: 0,
            bad_signatures: 0,
        }
    }

    /// A multicast datagram `pn` (`sealed` as it arrived at `now`, `frames`
    /// opened): verified already, or held.
    pub fn on_datagram(&mut self, now: Instant, pn: u64, sealed: &[u8], frames: &[u8]) -> Held {
        let hash = datagram_hash(sealed);
        if let Some(named) = self.verified.get(&pn) {
            return if *named == hash {
                Held::Verified
            } else {
                self.dropped += 1;
                Held::Waiting // never processed: another hash was signed
            };
        }
        if self.held.contains_key(&(pn, hash)) {
            return Held::Waiting;
        }
        if self.held.len() >= MAX_HELD {
            self.held.pop_first();
            self.dropped += 1;
        }
        self.held.insert((pn, hash), (now, frames.to_vec()));
        Held::Waiting
    }

    /// A signed list: if its signature verifies, the held datagrams it
    /// names, as `(packet number, arrival, frames)` by increasing number;
    /// `None` if not. Other datagrams held under a named number are
    /// dropped.
    pub fn on_list(&mut self, list: &SignedList) -> Option<Vec<Released>> {
        let ok = UnparsedPublicKey::new(&ED25519, &self.key)
            .verify(&message(self.session_id, &list.entries), &list.signature)
            .is_ok();
        if !ok {
            self.bad_signatures += 1;
            return None;
        }
        let mut released = Vec::new();
        for (pn, hash) in &list.entries {
            let under: Vec<_> = self
                .held
                .range((*pn, [0; HASH_LEN])..=(*pn, [0xff; HASH_LEN]))
                .map(|(k, _)| *k)
                .collect();
            for key in under {
                let (arrived, frames) = self.held.remove(&key).expect("listed above");
                if key.1 == *hash {
                    released.push((*pn, arrived, frames));
                } else {
                    self.dropped += 1;
                }
            }
            self.verified.insert(*pn, *hash);
        }
        while self.verified.len() > MAX_VERIFIED {
            self.verified.pop_first();
        }
        Some(released)
    }

    /// Datagrams held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The key lists verify under.
    pub fn key(&self) -> &[u8; 32] {
        &self.key
    }
}

/// Encodes a list's fields (the SIGNATURE frame after its type byte).
pub fn encode_list(list: &SignedList, out: &mut Vec<u8>) {
    use fanout_core::codec::Writer;
    let first = list.entries.first().map_or(0, |e| e.0);
    out.put_varint(first);
    out.put_u8(list.entries.len() as u8);
    let mut prev = first;
    for (pn, h) in &list.entries {
        out.put_varint(pn - prev);
        out.put_bytes(h);
        prev = *pn;
    }
    out.put_bytes(&list.signature);
}

/// Decodes a list's fields.
pub fn decode_list(
    r: &mut fanout_core::codec::Reader<'_>,
) -> Result<SignedList, fanout_core::codec::DecodeError> {
    use fanout_core::codec::DecodeError;
    let mut pn = r.varint()?;
    let n = usize::from(r.u8()?);
    if n == 0 || n > MAX_SIGNED {
        return Err(DecodeError::Invalid("signature.count"));
    }
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let gap = r.varint()?;
        if i > 0 && gap == 0 {
            return Err(DecodeError::Invalid("signature.gap"));
        }
        pn = pn
            .checked_add(gap)
            .ok_or(DecodeError::Invalid("signature.gap"))?;
        let h: DatagramHash = r
            .bytes(HASH_LEN)?
            .try_into()
            .map_err(|_| DecodeError::Invalid("signature.hash"))?;
        entries.push((pn, h));
    }
    let signature = r
        .bytes(SIGNATURE_LEN)?
        .try_into()
        .map_err(|_| DecodeError::Invalid("signature"))?;
    Ok(SignedList { entries, signature })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    #[test]
    fn held_datagrams_are_released_by_a_verified_list_only() {
        let mut s = Signer::new([1; 32], 1452);
        let mut v = Verifier::new(s.public_key(), 42);
        let datagrams: Vec<(u64, Vec<u8>)> = (0..10u64)
            .map(|i| (3 * i + 1, vec![i as u8; 100]))
            .collect();
        for (pn, d) in &datagrams {
            s.add(at(0), *pn, d);
        }
        assert_eq!(s.take_due(at(500), 42), None, "not due before the interval");
        let list = s.take_due(at(2000), 42).unwrap();
        assert_eq!(list.entries.len(), 10);
        // A forged datagram under a number the sender used waits beside
        // the real one, and is not released.
        assert_eq!(v.on_datagram(at(0), 7, b"forged", b"forged"), Held::Waiting);
        for (pn, d) in &datagrams[..5] {
            assert_eq!(v.on_datagram(at(0), *pn, d, d), Held::Waiting);
        }
        // A list signed by another key, or altered, releases nothing.
        let mut forged = list.clone();
        forged.entries[0].1[0] ^= 1;
        assert_eq!(v.on_list(&forged), None);
        let other = Signer::new([2; 32], 1452);
        let mut v2 = Verifier::new(other.public_key(), 42);
        assert_eq!(v2.on_list(&list), None);
        let mut wrong_session = Verifier::new(s.public_key(), 43);
        assert_eq!(wrong_session.on_list(&list), None);
        let released = v.on_list(&list).unwrap();
        let pns: Vec<u64> = released.iter().map(|r| r.0).collect();
        assert_eq!(pns, [1, 4, 7, 10, 13], "the forged one under 7 is not");
        assert_eq!(v.dropped, 1);
        assert_eq!(v.held(), 0);
        // Datagrams after their list are verified on arrival.
        for (pn, d) in &datagrams[5..] {
            assert_eq!(v.on_datagram(at(0), *pn, d, d), Held::Verified);
        }
        assert_eq!(
            v.on_datagram(at(0), 7, &datagrams[2].1, b""),
            Held::Verified
        );
        assert_eq!(v.on_datagram(at(0), 7, b"forged later", b""), Held::Waiting);
        assert_eq!(v.held(), 0, "never held: its number is settled");
    }

    #[test]
    fn a_full_window_is_due_at_once_and_lists_round_trip() {
        for (max_datagram, gap, expect) in [
            (1452, 1, 64),
            (1452, 1000, 64),
            (600, 1000, 27),
            (256, 1, 8),
        ] {
            let mut s = Signer::new([1; 32], max_datagram);
            let mut pn = 0;
            while s.deadline() != Some(at(0)) {
                pn += gap;
                s.add(at(0), pn, b"x");
            }
            let list = s.take_due(at(0), 1).unwrap();
            assert_eq!(list.entries.len(), expect);
            let mut out = Vec::new();
            encode_list(&list, &mut out);
            assert!(out.len() + LIST_OVERHEAD <= max_datagram, "{}", out.len());
        }
        let mut s = Signer::new([1; 32], 1452);
        s.add(at(0), 5, b"x");
        let list = s.take_due(at(2000), 1).unwrap();
        let mut out = Vec::new();
        encode_list(&list, &mut out);
        let mut r = fanout_core::codec::Reader::new(&out);
        assert_eq!(decode_list(&mut r).unwrap(), list);
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn holding_is_bounded() {
        let mut v = Verifier::new([0; 32], 1);
        for pn in 0..(MAX_HELD as u64 + 10) {
            v.on_datagram(at(0), pn, b"x", b"y");
        }
        assert_eq!(v.held(), MAX_HELD);
        assert_eq!(v.dropped, 10);
    }
}
