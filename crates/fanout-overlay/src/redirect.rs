//! Joins that follow the plan: a source that planned the tree (the
//! widest-path tree, ROMA §VI-C) tells a child that joined it but was
//! planned under another host where that host listens. The child treats
//! it as a suggestion: it keeps its parent until the suggested one serves
//! it the same object, then moves, keeping every symbol it holds (ROMA
//! §IV: any symbols count, whoever sent them).
//!
//! A redirect travels as a frame of the hop's usual length, so the
//! child's reader needs no other framing:
//!
//! ```text
//! object id (8) | SBN 0xFF, ESI 0 (4) | family (1: 4 or 6) | IP (4 or 16) | port (u16) | zeros | tag (32)
//! ```
//!
//! No object has a block 255 ([`crate::fountain::MAX_BLOCKS`] is 255, so
//! SBNs run 0..=254), so the reserved SBN never names a symbol. The tag is
//! the symbols' keyed BLAKE3 ([`crate::symbol`]): only a holder of the key
//! can redirect, a forged or mutated redirect is dropped and counted as a
//! refused symbol. A redirect is written to one child alone
//! ([`crate::Children::push_to`]); a node never relays one and never gives
//! one to its decoder. The object id binds it to the object; nothing binds
//! it to the connection, so a redirect replayed on another child's stream
//! sends that child to the same parent (a detour, no loss).

use crate::children::Greeting;
use crate::fountain::MAX_BLOCKS;
use crate::symbol::{open, seal, SymbolError, SymbolKey, HEADER_LEN};
use raptorq::PayloadId;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// The source block number reserved for redirects: no object's.
pub const REDIRECT_SBN: u8 = 0xFF;
const _: () = assert!(
    MAX_BLOCKS <= REDIRECT_SBN as u64,
    "SBN 0xFF is never a block"
);

/// Whether `frame` is a redirect by its header (its tag not checked).
pub fn is_redirect(frame: &[u8]) -> bool {
    frame.len() > HEADER_LEN && frame[8] == REDIRECT_SBN
}

/// The address's bytes in a redirect's symbol.
fn encode(to: SocketAddr) -> Vec<u8> {
    let mut b = Vec::with_capacity(19);
    match to.ip() {
        IpAddr::V4(ip) => {
            b.push(4);
            b.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            b.push(6);
            b.extend_from_slice(&ip.octets());
        }
    }
    b.extend_from_slice(&to.port().to_be_bytes());
    b
}

/// A redirect to `to` for object `object` with symbols of `symbol_size`
/// bytes, sealed with `key`: `None` when the address does not fit in a
/// symbol (7 bytes for IPv4, 19 for IPv6).
pub fn seal_redirect(
    key: &SymbolKey,
    object: u64,
    symbol_size: u16,
    to: SocketAddr,
) -> Option<Vec<u8>> {
    let mut data = encode(to);
    if data.len() > usize::from(symbol_size) {
        return None;
    }
    data.resize(usize::from(symbol_size), 0);
    Some(seal(key, object, &PayloadId::new(REDIRECT_SBN, 0), &data))
}

/// Why a redirect was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RedirectError {
    /// Its frame does not check (length, object or tag).
    #[error(transparent)]
    Frame(#[from] SymbolError),
    /// Authentic, but not a redirect or not a well-formed one.
    #[error("not a well-formed redirect")]
    Malformed,
}

/// The address a redirect names, once its length, object and tag check.
pub fn open_redirect(
    key: &SymbolKey,
    object: u64,
    symbol_size: u16,
    frame: &[u8],
) -> Result<SocketAddr, RedirectError> {
    let s = open(key, object, symbol_size, frame)?;
    if s.payload_id.source_block_number() != REDIRECT_SBN || s.payload_id.encoding_symbol_id() != 0
    {
        return Err(RedirectError::Malformed);
    }
    let d = &s.data;
    let (ip, rest): (IpAddr, &[u8]) = match d.first() {
        Some(4) if d.len() >= 7 => {
            let o: [u8; 4] = d[1..5].try_into().expect("4 bytes");
            (o.into(), &d[5..])
        }
        Some(6) if d.len() >= 19 => {
            let o: [u8; 16] = d[1..17].try_into().expect("16 bytes");
            (o.into(), &d[17..])
        }
        _ => return Err(RedirectError::Malformed),
    };
    let port = u16::from_be_bytes([rest[0], rest[1]]);
    if rest[2..].iter().any(|&b| b != 0) || port == 0 || ip.is_unspecified() {
        return Err(RedirectError::Malformed);
    }
    Ok(SocketAddr::new(ip, port))
}

/// Where a source sends the children it did not plan as its own: by the
/// name in a child's hello, else by its peer's IP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redirects {
    by_name: BTreeMap<String, SocketAddr>,
    by_ip: BTreeMap<IpAddr, SocketAddr>,
}

impl Redirects {
    /// No redirects.
    pub fn new() -> Self {
        Self::default()
    }

    /// A child that says it is `name` goes to `to`.
    pub fn name(&mut self, name: &str, to: SocketAddr) {
        self.by_name.insert(name.to_owned(), to);
    }

    /// A child connecting from `ip` (one host's address, no other's) goes
    /// to `to`.
    pub fn ip(&mut self, ip: IpAddr, to: SocketAddr) {
        self.by_ip.insert(ip, to);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty() && self.by_ip.is_empty()
    }

    /// Where a child that greeted so goes: its name decides when it gave
    /// one the plan knows; else its peer's IP.
    pub fn lookup(&self, g: &Greeting) -> Option<SocketAddr> {
        if let Some(to) = g.name.as_ref().and_then(|n| self.by_name.get(n)) {
            return Some(*to);
        }
        self.by_ip.get(&g.peer?).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fountain::FountainSink;
    use crate::fountain::Layout;
    use crate::symbol::frame_len;

    #[test]
    fn a_redirect_opens_and_a_forged_or_mutated_one_is_refused() {
        let key = SymbolKey::new([3; 32]);
        for to in ["10.0.0.2:7100", "[2001:db8::7]:9000"] {
            let to: SocketAddr = to.parse().unwrap();
            let frame = seal_redirect(&key, 9, 64, to).unwrap();
            assert_eq!(frame.len(), frame_len(64));
            assert!(is_redirect(&frame));
            assert_eq!(open_redirect(&key, 9, 64, &frame), Ok(to));
            for i in 0..frame.len() {
                let mut bad = frame.clone();
                bad[i] ^= 0x40;
                assert_eq!(
                    open_redirect(&key, 9, 64, &bad),
                    Err(RedirectError::Frame(SymbolError::BadTag)),
                    "byte {i}"
                );
            }
            assert!(open_redirect(&SymbolKey::new([4; 32]), 9, 64, &frame).is_err());
            assert!(open_redirect(&key, 10, 64, &frame).is_err());
            assert!(open_redirect(&key, 9, 64, &frame[..10]).is_err());
        }
        // Too small a symbol for an IPv6 address; IPv4 fits in 8 bytes.
        assert!(seal_redirect(&key, 9, 8, "[::1]:1".parse().unwrap()).is_none());
        assert!(seal_redirect(&key, 9, 8, "127.0.0.1:1".parse().unwrap()).is_some());
        // A symbol is no redirect, and an authentic junk one is malformed.
        let symbol = seal(&key, 9, &PayloadId::new(0, 0), &[0; 64]);
        assert!(!is_redirect(&symbol));
        let junk = seal(&key, 9, &PayloadId::new(REDIRECT_SBN, 0), &[9; 64]);
        assert_eq!(
            open_redirect(&key, 9, 64, &junk),
            Err(RedirectError::Malformed)
        );
    }

    #[test]
    fn a_decoder_never_takes_a_redirect_as_a_symbol() {
        let key = SymbolKey::new([3; 32]);
        let layout = Layout::new(1000, 64, 1 << 20).unwrap();
        let mut sink = FountainSink::new(layout, 9, key.clone(), blake3::hash(b""));
        let frame = seal_redirect(&key, 9, 64, "10.0.0.2:7100".parse().unwrap()).unwrap();
        assert!(sink.on_frame(&frame).is_err());
        assert_eq!(sink.counts().accepted, 0);
    }

    #[test]
    fn lookup_by_name_then_by_ip() {
        let a: SocketAddr = "10.0.0.2:7100".parse().unwrap();
        let b: SocketAddr = "10.0.0.3:7100".parse().unwrap();
        let mut r = Redirects::new();
        assert!(r.is_empty());
        r.name("c", a);
        r.ip("10.0.0.9".parse().unwrap(), b);
        let g = |name: Option<&str>, peer: Option<&str>| Greeting {
            name: name.map(str::to_owned),
            peer: peer.map(|p| p.parse().unwrap()),
        };
        assert_eq!(r.lookup(&g(Some("c"), Some("10.0.0.9"))), Some(a));
        assert_eq!(r.lookup(&g(Some("x"), Some("10.0.0.9"))), Some(b));
        assert_eq!(r.lookup(&g(None, Some("10.0.0.9"))), Some(b));
        assert_eq!(r.lookup(&g(None, Some("10.0.0.8"))), None);
        assert_eq!(r.lookup(&g(None, None)), None);
    }

    /// Everything `src` writes to `c` in `writes` calls of its writable.
    fn drain(src: &mut crate::OverlaySource, c: crate::ChildId, writes: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..writes {
            let Some(b) = src.writable(c) else { break };
            let b = b.to_vec();
            src.children().wrote(c, b.len());
            out.extend(b);
        }
        out
    }

    #[test]
    fn the_source_redirects_a_planned_child_once_and_a_node_keeps_it_to_itself() {
        use crate::hop::{hello, HELLO};
        use crate::{OverlayNode, OverlaySource};
        let key = SymbolKey::new([5; 32]);
        let to: SocketAddr = "10.0.0.2:7100".parse().unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 31) as u8).collect();
        let layout = Layout::new(data.len() as u64, 64, 1 << 20).unwrap();
        let mut r = Redirects::new();
        r.name("b", to);
        let mut src = OverlaySource::new(data, "f", 7, (layout, 1 << 20), key.clone(), 1 << 16)
            .with_redirects(r);
        let (named, anon) = (src.children().add(), src.children().add());
        src.children()
            .on_bytes(named, &hello("b").unwrap())
            .unwrap();
        src.children().on_bytes(anon, &HELLO).unwrap();
        // Manifest, redirect, 40 symbols; the anonymous child: no redirect.
        let stream = drain(&mut src, named, 42);
        let record = src.manifest().seal(&key).len();
        let frame_len = layout.frame_len();
        assert_eq!(stream.len(), record + 41 * frame_len);
        assert!(is_redirect(&stream[record..record + frame_len]));
        let other = drain(&mut src, anon, 3);
        assert!(!is_redirect(&other[record..record + frame_len]));
        assert_eq!(src.redirected(), 1);

        let mut node = OverlayNode::new(key.clone(), 1 << 16);
        let below = node.children().add();
        node.children().on_bytes(below, &HELLO).unwrap();
        node.on_upstream(&stream).unwrap();
        assert_eq!(node.take_redirect(), Some(to));
        assert_eq!(node.take_redirect(), None);
        let c = node.counts();
        assert_eq!((c.accepted, c.refused), (40, 0), "{c:?}");
        // Its own child gets the manifest and the 40 symbols, no redirect.
        let mut relayed = Vec::new();
        while let Some(b) = node.writable(below) {
            let b = b.to_vec();
            node.children().wrote(below, b.len());
            relayed.extend(b);
        }
        assert_eq!(relayed.len(), record + 40 * frame_len);
        assert!(relayed[record..].chunks(frame_len).all(|f| !is_redirect(f)));
        // A mutated redirect: refused and counted, nothing suggested.
        let mut forged = seal_redirect(&key, 7, 64, "10.0.0.66:1".parse().unwrap()).unwrap();
        forged[20] ^= 1;
        node.on_upstream(&forged).unwrap();
        assert_eq!(node.take_redirect(), None);
        assert_eq!(node.counts().refused, 1);
        // A relay-only node drops a redirect too, and relays none.
        let mut relay = OverlayNode::relay_only(key, 1 << 16);
        let below = relay.children().add();
        relay.children().on_bytes(below, &HELLO).unwrap();
        relay.on_upstream(&stream).unwrap();
        assert_eq!(relay.take_redirect(), Some(to));
        let mut relayed = Vec::new();
        while let Some(b) = relay.writable(below) {
            let b = b.to_vec();
            relay.children().wrote(below, b.len());
            relayed.extend(b);
        }
        assert_eq!(relayed.len(), record + 40 * frame_len);
    }
}
