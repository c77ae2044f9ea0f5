//! Member tokens (`docs/wire.md` §4.10): the ACCEPT gives each member an
//! unpredictable 64-bit token, which the member then puts in the header of
//! every datagram it sends to the sender, in place of the session id. The
//! session id is public (every multicast datagram carries it); a token
//! travels only in the unicast ACCEPT to the member's address, so a host
//! that cannot receive at that address cannot speak for the member: forge
//! its ACKs, reset it, or answer for a join it spoofed (RFC 9000 §8.1 in
//! spirit). Without packet protection, an on-path host that sees the
//! ACCEPT still can.
//!
//! A token is a keyed BLAKE3 hash of the session id, member id and address
//! under a per-session secret key ([`TokenKey`], injected by the runtime),
//! computed once at admission.

use super::MemberId;
use std::fmt;
use std::net::SocketAddr;

/// The per-session secret member tokens derive from.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenKey([u8; 32]);

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// A key of these bytes. Engines take randomness as input
    /// (`docs/architecture.md`): the runtime draws them from the operating
    /// system (`fanout_io::random_token_key`).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        TokenKey(bytes)
    }

    /// A key derived from `seed`, for reproducible runs (the simulator,
    /// tests). Predictable: never for a session on a real network.
    pub fn from_seed(seed: u64) -> Self {
        TokenKey(*blake3::hash(&seed.to_be_bytes()).as_bytes())
    }

    /// A key for a related session (a catch-up transfer), as secret as
    /// this one and distinct per `context`.
    pub fn derive(&self, context: u64) -> TokenKey {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(b"fanout derived token key");
        h.update(&context.to_be_bytes());
        TokenKey(*h.finalize().as_bytes())
    }

    /// The token of member `id` at `addr` in session `session_id`: never 0
    /// and never the session id itself.
    pub fn token(&self, session_id: u64, id: MemberId, addr: SocketAddr) -> u64 {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(&session_id.to_be_bytes());
        h.update(&id.0.to_be_bytes());
        h.update(addr.to_string().as_bytes());
        let b = h.finalize();
        let mut t = u64::from_be_bytes(b.as_bytes()[..8].try_into().expect("8 bytes"));
        while t == 0 || t == session_id {
            t = t.wrapping_add(1);
        }
        t
    }

    /// The token of a RETRY to `addr` in time window `window` (a stateless
    /// retry, `docs/wire.md` §4.11): never 0 nor the session id, and apart
    /// from member tokens by a label of its own.
    pub fn token_for_retry(&self, session_id: u64, window: u64, addr: SocketAddr) -> u64 {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(b"retry");
        h.update(&session_id.to_be_bytes());
        h.update(&window.to_be_bytes());
        h.update(addr.to_string().as_bytes());
        let b = h.finalize();
        let mut t = u64::from_be_bytes(b.as_bytes()[..8].try_into().expect("8 bytes"));
        while t == 0 || t == session_id {
            t = t.wrapping_add(1);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_by_member_address_and_key() {
        let (k, a, b) = (
            TokenKey::from_seed(1),
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:1".parse().unwrap(),
        );
        let t = k.token(7, MemberId(1), a);
        assert_eq!(t, k.token(7, MemberId(1), a), "stable");
        assert_ne!(t, k.token(7, MemberId(2), a));
        assert_ne!(t, k.token(7, MemberId(1), b));
        assert_ne!(t, k.token(8, MemberId(1), a));
        assert_ne!(t, TokenKey::from_seed(2).token(7, MemberId(1), a));
        assert_ne!(k.derive(1), k.derive(2));
        assert_ne!(k.derive(1), TokenKey::from_seed(2).derive(1));
        assert_ne!(t, 0);
        assert_ne!(t, 7);
    }
}
