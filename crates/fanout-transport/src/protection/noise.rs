//! The per-member handshake: Noise (the Noise Protocol Framework, rev. 34)
//! through the `snow` crate, inside the CONNECT and ACCEPT datagrams
//! (`docs/wire.md` §4.12).
//!
//! The joiner is the initiator, the accepting side (a session sender) the
//! responder. The pattern follows the credentials both ends hold:
//! * a pre-shared key only: `NNpsk0` — whoever holds the key may join;
//! * long-term keys: `IK` — the joiner knows (pins) the sender's public key
//!   and proves its own, which the sender checks against its allow-list;
//! * both: `IKpsk2`.
//!
//! Every handshake gives the pair two fresh keys (Noise's split), one per
//! direction, with forward secrecy from the ephemeral keys; the packets
//! of the session are then sealed with them ([`super::PacketKey`]).
//! Randomness is seeded by the caller (engines never read the OS random
//! source, so the simulator stays deterministic).

use super::PacketKey;
use rand_chacha::ChaCha20Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// Bound into every handshake (Noise §6): the wire version, so a peer of
/// another version cannot be talked into this one's keys.
const PROLOGUE: &[u8] = b"fanout wire 4";
/// Largest handshake payload, in bytes (the frames a CONNECT or ACCEPT
/// carries inside the handshake are far smaller).
pub const MAX_HANDSHAKE_PAYLOAD: usize = 512;
/// Longest handshake message: an `IKpsk2` first message (ephemeral key,
/// encrypted static key, tags) with the largest payload.
pub const MAX_HANDSHAKE_MESSAGE: usize = 32 + 48 + MAX_HANDSHAKE_PAYLOAD + 16;
/// Bytes of a key (X25519 private or public key, pre-shared key).
pub const KEY_LEN: usize = 32;

/// A 32-byte X25519 public key: a peer's identity.
pub type PublicKey = [u8; KEY_LEN];

/// Why a handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The message does not open: another key, a forgery, or a peer whose
    /// credentials are not ours.
    #[error("the handshake does not authenticate (another key or a forgery)")]
    Unauthenticated,
    /// The peer proved a key that is not on the allow-list.
    #[error("the peer's key is not allowed")]
    NotAllowed,
    /// A payload too long, or a message out of turn.
    #[error("a malformed handshake message")]
    Malformed,
}

/// What one end proves itself with, and what it expects of the other.
#[derive(Clone, Default)]
pub struct Credentials {
    psk: Option<[u8; KEY_LEN]>,
    /// Our long-term X25519 private key.
    identity: Option<[u8; KEY_LEN]>,
    /// A joiner's pinned key of its sender.
    sender_key: Option<PublicKey>,
    /// A sender's allow-list of joiners' keys.
    allowed: BTreeSet<PublicKey>,
    /// Keys pinned for particular peers (a merger, an ancestor of a
    /// merger), instead of `sender_key`.
    pinned: BTreeMap<SocketAddr, PublicKey>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("psk", &self.psk.is_some())
            .field("identity", &self.identity.map(|k| public_key(&k)))
            .field("sender_key", &self.sender_key)
            .field("allowed", &self.allowed.len())
            .field("pinned", &self.pinned)
            .finish()
    }
}

/// The X25519 public key of a private key.
pub fn public_key(private: &[u8; KEY_LEN]) -> PublicKey {
    curve25519_dalek::MontgomeryPoint::mul_base_clamped(*private).to_bytes()
}

impl Credentials {
    /// Credentials of a pre-shared key: every holder may join.
    pub fn with_psk(psk: [u8; KEY_LEN]) -> Self {
        Credentials {
            psk: Some(psk),
            ..Default::default()
        }
    }

    /// Adds a pre-shared key (with long-term keys: both are required).
    pub fn psk(mut self, psk: [u8; KEY_LEN]) -> Self {
        self.psk = Some(psk);
        self
    }

    /// Our long-term private key.
    pub fn identity(mut self, private: [u8; KEY_LEN]) -> Self {
        self.identity = Some(private);
        self
    }

    /// A joiner's pinned key of the sender it joins.
    pub fn sender_key(mut self, key: PublicKey) -> Self {
        self.sender_key = Some(key);
        self
    }

    /// The key to pin when joining the peer at `addr` (a merger, or an
    /// ancestor taking over from one) instead of the sender's.
    pub fn pin_at(mut self, addr: SocketAddr, key: PublicKey) -> Self {
        self.pinned.insert(addr, key);
        self
    }

    /// These credentials as they join the peer at `addr`: its pinned key
    /// in place of the sender's, if one is pinned for it.
    pub fn toward(&self, addr: &SocketAddr) -> Cow<'_, Credentials> {
        match self.pinned.get(addr) {
            Some(k) if self.sender_key != Some(*k) => Cow::Owned(Credentials {
                sender_key: Some(*k),
                ..self.clone()
            }),
            _ => Cow::Borrowed(self),
        }
    }

    /// A sender's allow-list entry: a joiner's public key.
    pub fn allow(mut self, key: PublicKey) -> Self {
        self.allowed.insert(key);
        self
    }

    /// Our public key, if we have a long-term key.
    pub fn public(&self) -> Option<PublicKey> {
        self.identity.as_ref().map(public_key)
    }

    /// Why these credentials cannot start a handshake as a joiner, if so.
    pub fn check_joiner(&self) -> Result<(), &'static str> {
        match (&self.psk, &self.identity, &self.sender_key) {
            (None, None, _) => Err("no pre-shared key and no key pair"),
            (_, Some(_), None) => Err("a key pair needs the sender's public key to pin"),
            (_, None, Some(_)) => Err("pinning a sender's key needs a key pair of our own"),
            _ => Ok(()),
        }
    }

    /// Why these credentials cannot answer handshakes as a sender, if so.
    pub fn check_sender(&self) -> Result<(), &'static str> {
        if self.psk.is_none() && self.identity.is_none() {
            Err("no pre-shared key and no key pair")
        } else if self.psk.is_none() && self.allowed.is_empty() {
            Err("a key pair without an allow-list of receivers' keys would admit anyone")
        } else {
            Ok(())
        }
    }

    fn pattern(&self) -> &'static str {
        match (self.psk.is_some(), self.identity.is_some()) {
            (true, false) => "Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s",
            (false, _) => "Noise_IK_25519_ChaChaPoly_BLAKE2s",
            (true, true) => "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s",
        }
    }

    fn builder(&self, seed: [u8; 32]) -> snow::Builder<'_> {
        let params = self.pattern().parse().expect("a valid Noise pattern");
        let mut b = snow::Builder::with_resolver(params, Box::new(Seeded(seed))).prologue(PROLOGUE);
        if let Some(psk) = &self.psk {
            b = b.psk(if self.identity.is_some() { 2 } else { 0 }, psk);
        }
        if let Some(private) = &self.identity {
            b = b.local_private_key(private);
        }
        b
    }
}

/// The two keys a handshake gives a pair.
#[derive(Debug)]
pub struct PairKeys {
    /// Seals what the joiner sends to the sender.
    pub joiner_to_sender: PacketKey,
    /// Seals what the sender sends to this joiner alone.
    pub sender_to_joiner: PacketKey,
}

fn split(state: &mut snow::HandshakeState) -> PairKeys {
    let (i2r, r2i) = state.dangerously_get_raw_split();
    PairKeys {
        joiner_to_sender: PacketKey::new(&i2r),
        sender_to_joiner: PacketKey::new(&r2i),
    }
}

fn write(
    state: &mut snow::HandshakeState,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), HandshakeError> {
    if payload.len() > MAX_HANDSHAKE_PAYLOAD {
        return Err(HandshakeError::Malformed);
    }
    let mut buf = [0u8; MAX_HANDSHAKE_MESSAGE];
    let n = state
        .write_message(payload, &mut buf)
        .map_err(|_| HandshakeError::Malformed)?;
    out.extend_from_slice(&buf[..n]);
    Ok(())
}

fn read(state: &mut snow::HandshakeState, message: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    if message.len() > MAX_HANDSHAKE_MESSAGE {
        return Err(HandshakeError::Malformed);
    }
    let mut buf = [0u8; MAX_HANDSHAKE_MESSAGE];
    let n = state.read_message(message, &mut buf).map_err(|e| match e {
        snow::Error::Decrypt | snow::Error::Dh => HandshakeError::Unauthenticated,
        _ => HandshakeError::Malformed,
    })?;
    Ok(buf[..n].to_vec())
}

/// A joiner's handshake, between its first message and the answer.
pub struct Initiator {
    state: snow::HandshakeState,
}

impl std::fmt::Debug for Initiator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Initiator(..)")
    }
}

impl Initiator {
    /// Starts a handshake whose first message, carrying `payload`
    /// (encrypted and authenticated), is appended to `out`.
    pub fn start(
        creds: &Credentials,
        seed: [u8; 32],
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Self, HandshakeError> {
        creds
            .check_joiner()
            .map_err(|_| HandshakeError::Malformed)?;
        let mut b = creds.builder(seed);
        if let Some(key) = &creds.sender_key {
            b = b.remote_public_key(key);
        }
        let mut state = b.build_initiator().map_err(|_| HandshakeError::Malformed)?;
        write(&mut state, payload, out)?;
        Ok(Initiator { state })
    }

    /// Reads the sender's answer: its payload and the pair's keys.
    pub fn finish(mut self, answer: &[u8]) -> Result<(Vec<u8>, PairKeys), HandshakeError> {
        let payload = read(&mut self.state, answer)?;
        if !self.state.is_handshake_finished() {
            return Err(HandshakeError::Malformed);
        }
        Ok((payload, split(&mut self.state)))
    }
}

/// A sender's side of one joiner's handshake, after its first message.
pub struct Responder {
    state: snow::HandshakeState,
    ephemeral: PublicKey,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

impl Responder {
    /// Reads a joiner's first message; returns the handshake and its
    /// payload. Fails unless the message authenticates under our
    /// credentials and its key (if any) is allowed.
    pub fn read(
        creds: &Credentials,
        seed: [u8; 32],
        first: &[u8],
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        let mut state = creds
            .builder(seed)
            .build_responder()
            .map_err(|_| HandshakeError::Malformed)?;
        let payload = read(&mut state, first)?;
        if creds.identity.is_some() {
            let key: Option<PublicKey> = state.get_remote_static().and_then(|k| k.try_into().ok());
            if !key.is_some_and(|k| creds.allowed.contains(&k)) {
                return Err(HandshakeError::NotAllowed);
            }
        }
        let ephemeral = first_ephemeral(first).ok_or(HandshakeError::Malformed)?;
        Ok((Responder { state, ephemeral }, payload))
    }

    /// The joiner's ephemeral key: a retransmitted first message has the
    /// same, a new handshake another.
    pub fn ephemeral(&self) -> PublicKey {
        self.ephemeral
    }

    /// The joiner's long-term key, under `IK`.
    pub fn joiner_key(&self) -> Option<PublicKey> {
        self.state
            .get_remote_static()
            .and_then(|k| k.try_into().ok())
    }

    /// Writes the answer carrying `payload` to `out`; returns the pair's
    /// keys.
    pub fn answer(mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<PairKeys, HandshakeError> {
        write(&mut self.state, payload, out)?;
        Ok(split(&mut self.state))
    }
}

/// The ephemeral key at the front of a first message (every pattern here
/// starts with `e`).
pub fn first_ephemeral(first: &[u8]) -> Option<PublicKey> {
    first.get(..KEY_LEN)?.try_into().ok()
}

/// snow's resolver with the randomness seeded by the caller.
struct Seeded([u8; 32]);

struct SeededRng(ChaCha20Rng);

impl RngCore for SeededRng {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.0.try_fill_bytes(dest)
    }
}
impl CryptoRng for SeededRng {}
impl Random for SeededRng {}

impl CryptoResolver for Seeded {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRng(ChaCha20Rng::from_seed(self.0))))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// Fresh randomness for each handshake of an engine: a counter hashed
/// under the engine's seed (the seed comes from the OS random source in
/// `fanout-io`, from the scenario's seed in the simulator).
#[derive(Debug, Clone)]
pub struct SeedStream {
    seed: [u8; 32],
    counter: u64,
}

impl SeedStream {
    /// A stream under `seed`.
    pub fn new(seed: [u8; 32]) -> Self {
        SeedStream { seed, counter: 0 }
    }

    /// The next 32 bytes.
    pub fn next_seed(&mut self) -> [u8; 32] {
        self.counter += 1;
        *blake3::keyed_hash(&self.seed, &self.counter.to_le_bytes()).as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake(
        joiner: &Credentials,
        sender: &Credentials,
    ) -> Result<(PairKeys, PairKeys, Vec<u8>), HandshakeError> {
        let mut first = Vec::new();
        let i = Initiator::start(joiner, [1; 32], b"connect", &mut first)?;
        let (r, payload) = Responder::read(sender, [2; 32], &first)?;
        assert_eq!(payload, b"connect");
        let mut answer = Vec::new();
        let sender_keys = r.answer(b"accept", &mut answer)?;
        let (payload, joiner_keys) = i.finish(&answer)?;
        Ok((joiner_keys, sender_keys, payload))
    }

    fn agree(a: &PairKeys, b: &PairKeys) -> bool {
        let mut d = vec![0u8; crate::wire::HEADER_LEN];
        d.extend_from_slice(b"xyz");
        a.joiner_to_sender.seal(&mut d, 0, 9);
        let up = b.joiner_to_sender.open(&mut d.clone(), 9).is_ok();
        let mut d = vec![0u8; crate::wire::HEADER_LEN];
        b.sender_to_joiner.seal(&mut d, 0, 3);
        up && a.sender_to_joiner.open(&mut d, 3).is_ok()
    }

    #[test]
    fn a_shared_key_gives_both_ends_the_same_fresh_keys() {
        let psk = Credentials::with_psk([7; 32]);
        let (j, s, payload) = handshake(&psk, &psk).unwrap();
        assert_eq!(payload, b"accept");
        assert!(agree(&j, &s));
        let wrong = Credentials::with_psk([8; 32]);
        assert_eq!(
            handshake(&wrong, &psk).err(),
            Some(HandshakeError::Unauthenticated)
        );
    }

    #[test]
    fn long_term_keys_pin_the_sender_and_allow_listed_joiners_only() {
        let (sender_key, joiner_key, stranger_key) = ([11; 32], [12; 32], [13; 32]);
        let sender = Credentials::default()
            .identity(sender_key)
            .allow(public_key(&joiner_key));
        let joiner = Credentials::default()
            .identity(joiner_key)
            .sender_key(public_key(&sender_key));
        let (j, s, _) = handshake(&joiner, &sender).unwrap();
        assert!(agree(&j, &s));
        let stranger = Credentials::default()
            .identity(stranger_key)
            .sender_key(public_key(&sender_key));
        assert_eq!(
            handshake(&stranger, &sender).err(),
            Some(HandshakeError::NotAllowed)
        );
        // A joiner pinning another sender's key cannot complete.
        let misled = Credentials::default()
            .identity(joiner_key)
            .sender_key(public_key(&stranger_key));
        assert!(handshake(&misled, &sender).is_err());
        // Keys and a shared key together: both are needed.
        let (both_s, both_j) = (sender.clone().psk([5; 32]), joiner.clone().psk([5; 32]));
        assert!(handshake(&both_j, &both_s).is_ok());
        assert!(handshake(&joiner.psk([6; 32]), &both_s).is_err());
    }

    #[test]
    fn a_mutated_first_message_or_answer_is_refused() {
        let psk = Credentials::with_psk([7; 32]);
        let mut first = Vec::new();
        let i = Initiator::start(&psk, [1; 32], b"connect", &mut first).unwrap();
        for at in 0..first.len() {
            let mut bad = first.clone();
            bad[at] ^= 1;
            assert!(Responder::read(&psk, [2; 32], &bad).is_err(), "byte {at}");
        }
        let (r, _) = Responder::read(&psk, [2; 32], &first).unwrap();
        assert_eq!(Some(r.ephemeral()), first_ephemeral(&first));
        let mut answer = Vec::new();
        r.answer(b"accept", &mut answer).unwrap();
        answer[40] ^= 1;
        assert_eq!(
            i.finish(&answer).err(),
            Some(HandshakeError::Unauthenticated)
        );
    }

    #[test]
    fn credentials_that_would_admit_anyone_are_refused() {
        assert!(Credentials::default().check_sender().is_err());
        assert!(Credentials::default()
            .identity([1; 32])
            .check_sender()
            .is_err());
        assert!(Credentials::default()
            .identity([1; 32])
            .check_joiner()
            .is_err());
        assert!(Credentials::with_psk([1; 32]).check_sender().is_ok());
        assert!(Credentials::with_psk([1; 32]).check_joiner().is_ok());
    }
}
