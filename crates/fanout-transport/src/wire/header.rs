//! The datagram header: magic, version, flags, session id, packet number.

use fanout_core::codec::{DecodeError, Reader, Writer};
use fanout_core::stats::DropReason;

/// First two bytes of every fanout datagram ("FO").
pub const MAGIC: [u8; 2] = *b"FO";
/// The wire version this build speaks.
pub const VERSION: u8 = 6;
/// Encoded header size in bytes.
pub const HEADER_LEN: usize = 16;

/// Header flag bits. Unknown bits are rejected so they can be given meaning
/// later without being silently misread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderFlags(u8);

impl HeaderFlags {
    /// The frames after the header are sealed with an AEAD and end in a
    /// 16-byte tag (`docs/wire.md` §4.12; an unprotected endpoint drops
    /// such datagrams as unauthenticated).
    pub const SEALED: u8 = 0x01;
    /// The datagram was sent to a multicast group rather than to one peer.
    pub const MULTICAST: u8 = 0x02;
    /// A sealed multicast datagram's group key: the low bit of its epoch
    /// (`docs/wire.md` §4.12, key update), so the old and the new key
    /// both open while a new one takes over.
    pub const KEY_PHASE: u8 = 0x04;
    /// The frames are one DATA frame named by a signed segment list,
    /// encrypted under the group's listed-data key without a tag
    /// (`docs/wire.md` §4.12, listed data); set with `MULTICAST`, never
    /// with `SEALED`.
    pub const LISTED: u8 = 0x08;
    const KNOWN: u8 = Self::SEALED | Self::MULTICAST | Self::KEY_PHASE | Self::LISTED;

    /// Flags from raw bits; `None` if an unknown bit is set.
    pub fn from_bits(bits: u8) -> Option<Self> {
        (bits & !Self::KNOWN == 0).then_some(HeaderFlags(bits))
    }

    /// Raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// True if `flag` is set.
    pub fn contains(self, flag: u8) -> bool {
        self.0 & flag == flag
    }

    /// With `flag` set.
    pub fn with(self, flag: u8) -> Self {
        HeaderFlags(self.0 | (flag & Self::KNOWN))
    }
}

/// A decoded header. `packet_number` is the 32-bit wire value; the
/// connection expands it to 64 bits (`fanout_core::codec::expand_pn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Flag bits.
    pub flags: HeaderFlags,
    /// Session the datagram belongs to; chosen at random by the initiator.
    pub session_id: u64,
    /// Low 32 bits of the sender's packet number.
    pub packet_number: u32,
}

impl Header {
    /// Decodes the header and returns it with the rest of the datagram.
    #[inline]
    pub fn decode(datagram: &[u8]) -> Result<(Header, &[u8]), DecodeError> {
        // Fast path (every datagram but truncated ones): the fields at their
        // fixed offsets, checked in the same order with the same errors.
        if let Some((h, rest)) = datagram.split_first_chunk::<HEADER_LEN>() {
            if h[..2] != MAGIC {
                return Err(DecodeError::Invalid("magic"));
            }
            if h[2] != VERSION {
                return Err(DecodeError::Invalid("version"));
            }
            let flags = HeaderFlags::from_bits(h[3]).ok_or(DecodeError::Invalid("flags"))?;
            let (mut id, mut pn) = ([0u8; 8], [0u8; 4]);
            id.copy_from_slice(&h[4..12]);
            pn.copy_from_slice(&h[12..]);
            let header = Header {
                flags,
                session_id: u64::from_be_bytes(id),
                packet_number: u32::from_be_bytes(pn),
            };
            return Ok((header, rest));
        }
        let mut r = Reader::new(datagram);
        if r.array::<2>()? != MAGIC {
            return Err(DecodeError::Invalid("magic"));
        }
        if r.u8()? != VERSION {
            return Err(DecodeError::Invalid("version"));
        }
        let flags = HeaderFlags::from_bits(r.u8()?).ok_or(DecodeError::Invalid("flags"))?;
        let session_id = r.u64()?;
        let packet_number = r.u32()?;
        Ok((
            Header {
                flags,
                session_id,
                packet_number,
            },
            r.peek_rest(),
        ))
    }

    /// Appends the encoded header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_bytes(&MAGIC);
        out.put_u8(VERSION);
        out.put_u8(self.flags.bits());
        out.put_u64(self.session_id);
        out.put_u32(self.packet_number);
    }
}

/// Decodes the header of an incoming datagram, sealed or not, classifying a
/// refusal by [`DropReason`]: garbage, or another version.
pub fn read_header(datagram: &[u8]) -> Result<Header, DropReason> {
    match Header::decode(datagram) {
        Ok((h, _)) => Ok(h),
        Err(_) if is_other_version(datagram) => Err(DropReason::UnsupportedVersion),
        Err(_) => Err(DropReason::Malformed),
    }
}

/// Decodes the header of an incoming datagram of an unprotected session,
/// classifying a refusal by [`DropReason`]: garbage, another version, or a
/// sealed payload it has no keys for.
pub fn accept_header(datagram: &[u8]) -> Result<(Header, &[u8]), DropReason> {
    let h = read_header(datagram)?;
    if h.flags.contains(HeaderFlags::SEALED) || h.flags.contains(HeaderFlags::LISTED) {
        return Err(DropReason::Unauthenticated);
    }
    Ok((h, &datagram[HEADER_LEN..]))
}

/// True if `datagram` carries fanout's magic but another version — lets an
/// endpoint count `UnsupportedVersion` separately from garbage.
pub fn is_other_version(datagram: &[u8]) -> bool {
    datagram.len() >= 3 && datagram[..2] == MAGIC && datagram[2] != VERSION
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(flags in 0u8..16, session_id: u64, packet_number: u32, tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let h = Header { flags: HeaderFlags::from_bits(flags).unwrap(), session_id, packet_number };
            let mut out = Vec::new();
            h.encode(&mut out);
            prop_assert_eq!(out.len(), HEADER_LEN);
            out.extend_from_slice(&tail);
            let (d, rest) = Header::decode(&out).unwrap();
            prop_assert_eq!(d, h);
            prop_assert_eq!(rest, &tail[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Header::decode(&bytes);
        }
    }

    #[test]
    fn rejects_unknown_flags_and_versions() {
        let mut out = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id: 1,
            packet_number: 2,
        }
        .encode(&mut out);
        out[3] = 0x80;
        assert_eq!(Header::decode(&out), Err(DecodeError::Invalid("flags")));
        out[3] = 0;
        out[2] = 9;
        assert_eq!(Header::decode(&out), Err(DecodeError::Invalid("version")));
        assert!(is_other_version(&out));
        assert!(Header::decode(&out[..10]).is_err());
    }
}
