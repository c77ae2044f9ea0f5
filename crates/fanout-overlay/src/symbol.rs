//! A symbol as it travels an overlay hop: a fixed-size frame on the hop's
//! byte stream, so a relay that writes frames whole never splits one and
//! a receiver finds them by counting bytes.
//!
//! ```text
//! object id (8) | payload id (4: RFC 6330 §3.2 SBN, ESI) | symbol (T) | tag (32)
//! ```
//!
//! The tag is BLAKE3 in keyed mode (a MAC) over everything before it,
//! under the object's key, which the source and its receivers share; a
//! frame whose tag does not match is dropped before any decoder sees it.
//! A relay needs no key: it forwards frames as they are. (A member holding
//! the key can forge symbols for the others; signatures over every symbol
//! would stop that at a cost per symbol the overlay's rates do not allow.)

use raptorq::PayloadId;

/// Bytes of a frame before the symbol: the object id and the payload id.
pub const HEADER_LEN: usize = 8 + 4;
/// Bytes of the tag after the symbol.
pub const TAG_LEN: usize = 32;

/// The frame length for symbols of `symbol_size` bytes.
pub fn frame_len(symbol_size: u16) -> usize {
    HEADER_LEN + usize::from(symbol_size) + TAG_LEN
}

/// The key an object's symbols are authenticated with (32 bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct SymbolKey([u8; 32]);

impl SymbolKey {
    /// A key from its 32 bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        SymbolKey(bytes)
    }

    /// The overlay's key derived from a pre-shared key (BLAKE3's key
    /// derivation, its own context), so the overlay's tags never collide
    /// with another use of the same secret.
    pub fn derive(psk: &[u8; 32]) -> Self {
        SymbolKey(blake3::derive_key("fanout overlay symbols v1", psk))
    }

    /// The tag of `bytes` under this key.
    pub fn tag(&self, bytes: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.0, bytes)
    }
}

impl std::fmt::Debug for SymbolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SymbolKey(..)")
    }
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SymbolError {
    /// Not the length of a frame of this object's symbols.
    #[error("a frame of {got} bytes where {want} were expected")]
    Length {
        /// Bytes given.
        got: usize,
        /// A frame's length.
        want: usize,
    },
    /// A frame of another object.
    #[error("a symbol of object {0:#x}, not this one")]
    OtherObject(u64),
    /// The tag does not match: forged or corrupted.
    #[error("the symbol's tag does not match (forged or corrupted)")]
    BadTag,
}

/// One authenticated symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Which symbol of the code (source block, encoding symbol id).
    pub payload_id: PayloadId,
    /// Its bytes (the object's symbol size).
    pub data: Vec<u8>,
}

/// Seals `data` as symbol `payload_id` of object `object`: the frame.
pub fn seal(key: &SymbolKey, object: u64, payload_id: &PayloadId, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_LEN + data.len() + TAG_LEN);
    frame.extend_from_slice(&object.to_be_bytes());
    frame.extend_from_slice(&payload_id.serialize());
    frame.extend_from_slice(data);
    let tag = key.tag(&frame);
    frame.extend_from_slice(tag.as_bytes());
    frame
}

/// Checks `frame` as [`open`] does (length, tag, object) without copying
/// its symbol: its payload id. For a relay that forwards without decoding.
pub fn check(
    key: &SymbolKey,
    object: u64,
    symbol_size: u16,
    frame: &[u8],
) -> Result<PayloadId, SymbolError> {
    let want = frame_len(symbol_size);
    if frame.len() != want {
        return Err(SymbolError::Length {
            got: frame.len(),
            want,
        });
    }
    let (body, tag) = frame.split_at(want - TAG_LEN);
    let tag: [u8; TAG_LEN] = tag.try_into().expect("TAG_LEN bytes");
    // blake3::Hash compares in constant time.
    if key.tag(body) != blake3::Hash::from(tag) {
        return Err(SymbolError::BadTag);
    }
    let id = u64::from_be_bytes(body[..8].try_into().expect("8 bytes"));
    if id != object {
        return Err(SymbolError::OtherObject(id));
    }
    Ok(PayloadId::deserialize(
        body[8..HEADER_LEN].try_into().expect("4 bytes"),
    ))
}

/// Opens a frame of object `object` with symbols of `symbol_size` bytes:
/// the symbol, once its length, object and tag are right.
pub fn open(
    key: &SymbolKey,
    object: u64,
    symbol_size: u16,
    frame: &[u8],
) -> Result<Symbol, SymbolError> {
    let payload_id = check(key, object, symbol_size, frame)?;
    Ok(Symbol {
        payload_id,
        data: frame[HEADER_LEN..frame.len() - TAG_LEN].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_symbol_opens_and_any_change_is_refused() {
        let key = SymbolKey::new([7; 32]);
        let id = PayloadId::new(2, 70_000);
        let data: Vec<u8> = (0..64).collect();
        let frame = seal(&key, 0xfeed, &id, &data);
        assert_eq!(frame.len(), frame_len(64));
        let s = open(&key, 0xfeed, 64, &frame).unwrap();
        assert_eq!(s.payload_id, id);
        assert_eq!(s.data, data);
        // Every single bit flipped anywhere is caught.
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 1 << (i % 8);
            assert_eq!(
                open(&key, 0xfeed, 64, &bad),
                Err(SymbolError::BadTag),
                "byte {i}"
            );
        }
        // Another key, another object, another length.
        assert_eq!(
            open(&SymbolKey::new([8; 32]), 0xfeed, 64, &frame),
            Err(SymbolError::BadTag)
        );
        assert_eq!(
            open(&key, 0xbeef, 64, &frame),
            Err(SymbolError::OtherObject(0xfeed))
        );
        assert_eq!(
            open(&key, 0xfeed, 63, &frame),
            Err(SymbolError::Length {
                got: frame.len(),
                want: frame_len(63)
            })
        );
        assert!(open(&key, 0xfeed, 64, &[]).is_err());
        assert_eq!(format!("{key:?}"), "SymbolKey(..)");
    }
}
