//! What one overlay hop carries, parent to child over a reliable byte
//! stream (kernel TCP, or the simulator's): the child's hello, then the
//! parent's manifest and an endless run of symbol frames.
//!
//! ```text
//! child -> parent:  "FOVL" | version (1) | 0 | name length (u16) | name
//!                   [ "FOVH" | body length (u32) | body ]   (what it holds,
//!                   crate::sent: per block, need (u32) | bits held)
//! parent -> child:  "FOVM" | body length (u32) | body | tag (32)
//!                   frame | frame | ...   (symbol::frame_len bytes each)
//! body:             object id (u64) | length (u64) | symbol size (u16) |
//!                   block bytes (u64) | BLAKE3 of the object (32) |
//!                   name length (u16) | name (UTF-8)
//! ```
//!
//! The name is the child's host name in the source's plan (UTF-8, at most
//! [`MAX_HELLO_NAME`] bytes; empty: anonymous, the 8-byte [`HELLO`]), so a
//! source that planned the tree can send the child to its planned parent
//! (see [`crate::redirect`]). A name, not the peer's address, because
//! hosts behind one address (NAT, loopback) cannot be told apart by it; it
//! is a hint, not a credential: a host claiming another's name is only
//! sent where that host would have been.
//!
//! The manifest's tag is BLAKE3 in keyed mode over everything before it,
//! under the same key as the symbols: a host that does not hold it can
//! neither announce an object nor feed one.

use crate::fountain::{Layout, LayoutError};
use crate::symbol::{SymbolKey, TAG_LEN};

/// The anonymous child's hello (a name of 0 bytes).
pub const HELLO: [u8; 8] = *b"FOVL\x01\0\0\0";
/// The longest name a hello carries, bytes.
pub const MAX_HELLO_NAME: usize = 255;

/// The hello of a child named `name` (empty: [`HELLO`]); `None` when the
/// name is longer than [`MAX_HELLO_NAME`] bytes.
pub fn hello(name: &str) -> Option<Vec<u8>> {
    if name.len() > MAX_HELLO_NAME {
        return None;
    }
    let mut h = HELLO[..6].to_vec();
    h.extend_from_slice(&(name.len() as u16).to_be_bytes());
    h.extend_from_slice(name.as_bytes());
    Some(h)
}

/// A hello's whole length from its bytes so far (8 until its header is
/// whole); refused as soon as a byte does not fit.
pub fn hello_len(so_far: &[u8]) -> Result<usize, HopError> {
    let n = so_far.len().min(6);
    if so_far[..n] != HELLO[..n] {
        return Err(HopError::Hello);
    }
    if so_far.len() < HELLO.len() {
        return Ok(HELLO.len());
    }
    let name = usize::from(u16::from_be_bytes([so_far[6], so_far[7]]));
    if name > MAX_HELLO_NAME {
        return Err(HopError::Hello);
    }
    Ok(HELLO.len() + name)
}
/// The largest manifest body, bytes.
pub const MAX_MANIFEST_BODY: usize = 4096;
const MANIFEST_MAGIC: &[u8; 4] = b"FOVM";
const FIXED_BODY: usize = 8 + 8 + 2 + 8 + 32 + 2;

/// Why a hop's bytes were refused (the connection is then closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopError {
    /// Not a fanout overlay hello (or another version).
    #[error("not a fanout overlay hello (another program, or another version)")]
    Hello,
    /// Not a manifest record, or one too long.
    #[error("not a manifest: {0}")]
    Manifest(&'static str),
    /// The manifest's tag does not match: not from a holder of the key.
    #[error("the manifest's tag does not match (another key, or forged)")]
    ManifestTag,
    /// The manifest describes an object that cannot be coded.
    #[error("the manifest's layout: {0}")]
    Layout(#[from] LayoutError),
    /// A child sent more than its hello.
    #[error("a child sent bytes after its hello")]
    ChildBytes,
}

/// An object as its manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Its id, in every symbol.
    pub object: u64,
    /// How it is coded.
    pub layout: Layout,
    /// The largest block asked for, bytes (the layout's input).
    pub block_bytes: u64,
    /// BLAKE3 of its bytes.
    pub hash: blake3::Hash,
    /// Its name (the receiver sanitises it before use).
    pub name: String,
}

impl Manifest {
    /// The manifest record, sealed with `key`.
    pub fn seal(&self, key: &SymbolKey) -> Vec<u8> {
        let name = self.name.as_bytes();
        let name = &name[..name.len().min(MAX_MANIFEST_BODY - FIXED_BODY)];
        let mut body = Vec::with_capacity(FIXED_BODY + name.len());
        body.extend_from_slice(&self.object.to_be_bytes());
        body.extend_from_slice(&self.layout.length().to_be_bytes());
        body.extend_from_slice(&self.layout.symbol_size().to_be_bytes());
        body.extend_from_slice(&self.block_bytes.to_be_bytes());
        body.extend_from_slice(self.hash.as_bytes());
        body.extend_from_slice(&(name.len() as u16).to_be_bytes());
        body.extend_from_slice(name);
        let mut record = Vec::with_capacity(8 + body.len() + TAG_LEN);
        record.extend_from_slice(MANIFEST_MAGIC);
        record.extend_from_slice(&(body.len() as u32).to_be_bytes());
        record.extend_from_slice(&body);
        let tag = key.tag(&record);
        record.extend_from_slice(tag.as_bytes());
        record
    }

    /// Parses a whole record (its length known from its header).
    fn open(key: &SymbolKey, record: &[u8]) -> Result<Manifest, HopError> {
        let (signed, tag) = record.split_at(record.len() - TAG_LEN);
        let tag: [u8; TAG_LEN] = tag.try_into().expect("TAG_LEN bytes");
        if key.tag(signed) != blake3::Hash::from(tag) {
            return Err(HopError::ManifestTag);
        }
        let b = &signed[8..];
        if b.len() < FIXED_BODY {
            return Err(HopError::Manifest("body too short"));
        }
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let object = u64_at(0);
        let length = u64_at(8);
        let symbol_size = u16::from_be_bytes([b[16], b[17]]);
        let block_bytes = u64_at(18);
        let hash: [u8; 32] = b[26..58].try_into().expect("32 bytes");
        let name_len = usize::from(u16::from_be_bytes([b[58], b[59]]));
        if b.len() != FIXED_BODY + name_len {
            return Err(HopError::Manifest("the name's length does not match"));
        }
        let name = std::str::from_utf8(&b[FIXED_BODY..])
            .map_err(|_| HopError::Manifest("the name is not UTF-8"))?
            .to_owned();
        Ok(Manifest {
            object,
            layout: Layout::new(length, symbol_size, block_bytes)?,
            block_bytes,
            hash: blake3::Hash::from(hash),
            name,
        })
    }
}

/// A manifest record's whole length from its 8-byte header.
fn record_len(header: &[u8]) -> Result<usize, HopError> {
    if &header[..4] != MANIFEST_MAGIC {
        return Err(HopError::Manifest("no manifest magic"));
    }
    let body = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    if !(FIXED_BODY..=MAX_MANIFEST_BODY).contains(&body) {
        return Err(HopError::Manifest("body length out of range"));
    }
    Ok(8 + body + TAG_LEN)
}

/// What the child has read from its parent so far.
#[derive(Debug)]
enum Upstream {
    /// The manifest record's bytes so far.
    Manifest(Vec<u8>),
    /// Frames: the current one's bytes so far.
    Frames(Vec<u8>),
}

/// A child's reader of its parent's stream: the manifest, then whole
/// frames. Holds less than a record or a frame at any time.
#[derive(Debug)]
pub struct UpstreamReader {
    key: SymbolKey,
    state: Upstream,
    manifest: Option<Manifest>,
}

/// What a chunk of the parent's stream held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Read {
    /// The manifest, when this chunk completed it.
    pub manifest: Option<Manifest>,
    /// The whole frames it completed.
    pub frames: Vec<Vec<u8>>,
}

impl UpstreamReader {
    /// A reader of a stream sealed with `key`.
    pub fn new(key: SymbolKey) -> Self {
        UpstreamReader {
            key,
            state: Upstream::Manifest(Vec::new()),
            manifest: None,
        }
    }

    /// The manifest, once read.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// More of the parent's stream.
    pub fn on_bytes(&mut self, mut bytes: &[u8]) -> Result<Read, HopError> {
        let mut read = Read::default();
        while !bytes.is_empty() {
            match &mut self.state {
                Upstream::Manifest(buf) => {
                    let want = if buf.len() < 8 { 8 } else { record_len(buf)? };
                    let take = (want - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() == 8 {
                        // The header checked as soon as it is whole.
                        record_len(buf)?;
                    } else if buf.len() == want && want > 8 {
                        let m = Manifest::open(&self.key, buf)?;
                        read.manifest = Some(m.clone());
                        self.manifest = Some(m);
                        self.state = Upstream::Frames(Vec::new());
                    }
                }
                Upstream::Frames(buf) => {
                    let frame_len = self
                        .manifest
                        .as_ref()
                        .expect("frames follow the manifest")
                        .layout
                        .frame_len();
                    let take = (frame_len - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() == frame_len {
                        read.frames
                            .push(std::mem::replace(buf, Vec::with_capacity(frame_len)));
                    }
                }
            }
        }
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbol::seal;
    use raptorq::PayloadId;

    fn manifest() -> Manifest {
        Manifest {
            object: 77,
            layout: Layout::new(5000, 64, 1 << 20).unwrap(),
            block_bytes: 1 << 20,
            hash: blake3::hash(b"x"),
            name: "film.ts".into(),
        }
    }

    #[test]
    fn the_stream_reads_back_in_any_pieces_and_a_bad_manifest_is_refused() {
        let key = SymbolKey::new([1; 32]);
        let m = manifest();
        let mut stream = m.seal(&key);
        let frames: Vec<Vec<u8>> = (0..5)
            .map(|i| seal(&key, 77, &PayloadId::new(0, i), &[i as u8; 64]))
            .collect();
        for f in &frames {
            stream.extend_from_slice(f);
        }
        for piece in [1, 3, 7, 64, 1000] {
            let mut r = UpstreamReader::new(key.clone());
            let mut got = Read::default();
            for chunk in stream.chunks(piece) {
                let read = r.on_bytes(chunk).unwrap();
                got.manifest = got.manifest.or(read.manifest);
                got.frames.extend(read.frames);
            }
            assert_eq!(got.manifest.as_ref(), Some(&m));
            assert_eq!(got.frames, frames, "pieces of {piece}");
        }
        // Another key, a flipped byte, junk: refused.
        let record = m.seal(&key);
        let mut other = UpstreamReader::new(SymbolKey::new([2; 32]));
        assert_eq!(other.on_bytes(&record), Err(HopError::ManifestTag));
        for i in 0..record.len() {
            let mut bad = record.clone();
            bad[i] ^= 0x10;
            // Refused, or (a longer length) still waiting: never a manifest.
            let read = UpstreamReader::new(key.clone()).on_bytes(&bad);
            assert!(read.is_err() || read == Ok(Read::default()), "byte {i}");
        }
        assert!(UpstreamReader::new(key.clone())
            .on_bytes(b"GET / HTTP/1.1\r\n")
            .is_err());
        let mut huge = b"FOVM".to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            UpstreamReader::new(key.clone()).on_bytes(&huge),
            Err(HopError::Manifest("body length out of range"))
        );
        // A sealed manifest of an object RaptorQ cannot code.
        let mut bad_layout = m.seal(&key);
        bad_layout[8 + 16..8 + 18].copy_from_slice(&63u16.to_be_bytes());
        let resealed = {
            let body_end = bad_layout.len() - TAG_LEN;
            let mut r = bad_layout[..body_end].to_vec();
            let tag = key.tag(&r);
            r.extend_from_slice(tag.as_bytes());
            r
        };
        assert!(matches!(
            UpstreamReader::new(key).on_bytes(&resealed),
            Err(HopError::Layout(_))
        ));
    }

    #[test]
    fn a_named_hello_reads_in_any_pieces_and_a_bad_one_is_refused() {
        use crate::Children;
        let h = hello("r1").unwrap();
        assert_eq!(hello("").unwrap(), HELLO);
        assert!(hello(&"x".repeat(MAX_HELLO_NAME + 1)).is_none());
        for piece in [1, 3, 10] {
            let mut c = Children::new(1 << 10);
            let id = c.add();
            c.set_peer(id, "10.0.0.4".parse().unwrap());
            for chunk in h.chunks(piece) {
                assert!(c.take_greeting(id).is_none());
                c.on_bytes(id, chunk).unwrap();
            }
            let g = c.take_greeting(id).unwrap();
            assert_eq!(g.name.as_deref(), Some("r1"));
            assert_eq!(g.peer, Some("10.0.0.4".parse().unwrap()));
            assert!(c.take_greeting(id).is_none(), "once");
            assert_eq!(c.on_bytes(id, b"x"), Err(HopError::ChildBytes));
        }
        let mut c = Children::new(1 << 10);
        let id = c.add();
        c.on_bytes(id, &HELLO).unwrap();
        assert_eq!(c.take_greeting(id).unwrap().name, None);
        let mut long = HELLO.to_vec();
        long[6..8].copy_from_slice(&256u16.to_be_bytes());
        let (x, y) = (c.add(), c.add());
        assert_eq!(c.on_bytes(x, &long), Err(HopError::Hello));
        assert_eq!(c.on_bytes(y, b"FOVX"), Err(HopError::Hello));
    }
}
