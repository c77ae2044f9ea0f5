//! Bounds-checked encoding and decoding of wire values.
//!
//! Decoding never panics: every read is checked and returns [`DecodeError`].
//! Variable-length integers follow QUIC (RFC 9000 §16): the two high bits of
//! the first byte give the length (1, 2, 4 or 8 bytes), values up to 2^62 − 1.

use thiserror::Error;

/// Largest value a varint can carry (RFC 9000 §16).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Why a datagram or frame could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended before the value did.
    #[error("truncated: needed {needed} more bytes")]
    Truncated {
        /// Bytes missing.
        needed: usize,
    },
    /// A field held a value the format does not allow.
    #[error("invalid value in field `{0}`")]
    Invalid(&'static str),
    /// A count or length exceeded a bound of the format or of the receiver.
    #[error("field `{0}` exceeds its limit")]
    TooLarge(&'static str),
}

/// A cursor over a byte slice; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when everything was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The unread rest, without consuming it.
    #[inline]
    pub fn peek_rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    /// Big-endian u16.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Big-endian u32.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Big-endian u64.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// QUIC variable-length integer (RFC 9000 §16).
    #[inline]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let first = self.u8()?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for b in self.bytes(len - 1)? {
            v = (v << 8) | u64::from(*b);
        }
        Ok(v)
    }

    /// A varint that must fit `usize` and be at most `limit`.
    #[inline]
    pub fn varint_len(&mut self, field: &'static str, limit: usize) -> Result<usize, DecodeError> {
        let v = self.varint()?;
        match usize::try_from(v) {
            Ok(n) if n <= limit => Ok(n),
            _ => Err(DecodeError::TooLarge(field)),
        }
    }
}

/// Appends wire values to a `Vec<u8>`.
pub trait Writer {
    /// One byte.
    fn put_u8(&mut self, v: u8);
    /// Big-endian u16.
    fn put_u16(&mut self, v: u16);
    /// Big-endian u32.
    fn put_u32(&mut self, v: u32);
    /// Big-endian u64.
    fn put_u64(&mut self, v: u64);
    /// Raw bytes.
    fn put_bytes(&mut self, b: &[u8]);
    /// QUIC varint; values above [`VARINT_MAX`] are a caller bug (debug-asserted,
    /// saturated in release).
    fn put_varint(&mut self, v: u64);
}

impl Writer for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v);
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn put_varint(&mut self, v: u64) {
        debug_assert!(v <= VARINT_MAX, "varint overflow: {v}");
        let v = v.min(VARINT_MAX);
        match varint_size(v) {
            1 => self.put_u8(v as u8),
            2 => self.put_u16(v as u16 | 0x4000),
            4 => self.put_u32(v as u32 | 0x8000_0000),
            _ => self.put_u64(v | 0xC000_0000_0000_0000),
        }
    }
}

/// Encoded size of a varint, in bytes.
pub fn varint_size(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// Truncates a 64-bit packet number to its low 32 bits for the wire.
pub fn truncate_pn(pn: u64) -> u32 {
    pn as u32
}

/// Expands a 32-bit wire packet number to the 64-bit value closest to
/// `expected` (the largest number seen so far plus one), after RFC 9000 §A.3.
pub fn expand_pn(expected: u64, truncated: u32) -> u64 {
    const WIN: u64 = 1 << 32;
    const HWIN: u64 = WIN / 2;
    let candidate = (expected & !(WIN - 1)) | u64::from(truncated);
    if candidate.saturating_add(HWIN) <= expected && candidate < u64::MAX - WIN {
        candidate + WIN
    } else if candidate > expected.saturating_add(HWIN) && candidate >= WIN {
        candidate - WIN
    } else {
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varint_vectors_rfc9000_a1() {
        // RFC 9000 §A.1 sample encodings.
        let cases: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (bytes, v) in cases {
            assert_eq!(Reader::new(bytes).varint().unwrap(), v);
            let mut out = Vec::new();
            out.put_varint(v);
            assert_eq!(out, bytes);
        }
    }

    #[test]
    fn truncated_reads_fail() {
        let mut r = Reader::new(&[0x80, 1]);
        assert_eq!(r.varint(), Err(DecodeError::Truncated { needed: 2 }));
        assert!(Reader::new(&[]).u8().is_err());
    }

    #[test]
    fn pn_expansion_rfc9000_a3_style() {
        assert_eq!(expand_pn(0, 0), 0);
        assert_eq!(expand_pn(u64::from(u32::MAX) + 1, 1), (1 << 32) + 1);
        assert_eq!(expand_pn((1 << 32) + 5, u32::MAX), u64::from(u32::MAX));
    }

    proptest! {
        #[test]
        fn varint_roundtrip(v in 0..=VARINT_MAX) {
            let mut out = Vec::new();
            out.put_varint(v);
            prop_assert_eq!(out.len(), varint_size(v));
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.varint().unwrap(), v);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn pn_roundtrip(largest in 0u64..(1 << 60), ahead in 0u64..(1 << 30)) {
            let pn = largest + ahead;
            prop_assert_eq!(expand_pn(largest + 1, truncate_pn(pn)), pn);
        }

        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while r.varint().is_ok() {}
        }
    }
}
