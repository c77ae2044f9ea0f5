//! PGMCC's fields on RTP (Rizzo, "pgmcc: a TCP-friendly single-rate
//! multicast congestion control scheme", SIGCOMM 2000, §3), as fanout
//! carries them:
//!
//! - [`DataInfo`], in every RTP packet's header extension (RFC 3550
//!   §5.3.1, profile-defined identifier [`EXTENSION_ID`]): the packet's
//!   32-bit number (RTP's 16-bit sequence number wraps too soon for a
//!   window), the sender's clock and the acker's SSRC. Receivers that do
//!   not know the extension (ffmpeg, VLC) skip it.
//! - [`Feedback`], an APP part named [`NAME`] (receiver → sender): an ACK
//!   (subtype [`SUBTYPE_ACK`], from the acker, one per data packet) or a
//!   NAK (subtype [`SUBTYPE_NAK`], from any receiver that finds a hole),
//!   each with the highest packet number received, which of the 32 up to
//!   it came, the receiver's loss rate and the echo of the sender's clock
//!   the sender measures the round trip by.
//!
//! All fields are big-endian; decoding is bounds-checked.

use crate::app::AppError;

/// The RTP header extension's profile-defined identifier (`PG`).
pub const EXTENSION_ID: u16 = 0x5047;
/// The APP name of PGMCC's feedback.
pub const NAME: [u8; 4] = *b"PGCC";
/// Subtype of an ACK.
pub const SUBTYPE_ACK: u8 = 0;
/// Subtype of a NAK.
pub const SUBTYPE_NAK: u8 = 1;
/// Bytes of [`DataInfo`] (a multiple of 4, as extension data must be).
pub const DATA_INFO_LEN: usize = 12;
/// Bytes of an ACK's data.
const ACK_LEN: usize = 20;
/// Bytes of a NAK's data: an ACK's and the hole.
const NAK_LEN: usize = 28;

/// What a PGMCC sender puts in each data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataInfo {
    /// The packet's number: the sender's count of data packets, wrapping.
    pub number: u32,
    /// The sender's clock when it sent the packet, µs (wraps).
    pub timestamp_us: u32,
    /// The acker: the receiver that is to ACK this packet (its SSRC; 0
    /// with none).
    pub acker: u32,
}

/// What a receiver tells the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Feedback {
    /// `Some((first, count))` in a NAK: the hole it found, `count`
    /// packets from number `first`; `None` in an ACK.
    pub hole: Option<(u32, u32)>,
    /// The highest packet number received.
    pub rx_max: u32,
    /// Bit `i` set: packet `rx_max − i` was received (bit 0 always).
    pub bitmap: u32,
    /// The receiver's loss rate, millionths.
    pub loss_ppm: u32,
    /// The sender's timestamp in packet `rx_max`, echoed, µs.
    pub echo_timestamp_us: u32,
    /// How long after packet `rx_max` came this was sent, µs.
    pub echo_delay_us: u32,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl DataInfo {
    /// The extension data.
    pub fn encode(&self) -> [u8; DATA_INFO_LEN] {
        let mut d = [0u8; DATA_INFO_LEN];
        d[0..4].copy_from_slice(&self.number.to_be_bytes());
        d[4..8].copy_from_slice(&self.timestamp_us.to_be_bytes());
        d[8..12].copy_from_slice(&self.acker.to_be_bytes());
        d
    }

    /// Reads an RTP header extension: `None` unless it is PGMCC's, whole.
    pub fn decode(id: u16, data: &[u8]) -> Option<Self> {
        if id != EXTENSION_ID || data.len() != DATA_INFO_LEN {
            return None;
        }
        Some(DataInfo {
            number: be32(data, 0),
            timestamp_us: be32(data, 4),
            acker: be32(data, 8),
        })
    }
}

impl Feedback {
    /// Its subtype and data.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut d = Vec::with_capacity(NAK_LEN);
        for v in [
            self.rx_max,
            self.bitmap,
            self.loss_ppm,
            self.echo_timestamp_us,
            self.echo_delay_us,
        ] {
            d.extend_from_slice(&v.to_be_bytes());
        }
        match self.hole {
            None => (SUBTYPE_ACK, d),
            Some((first, count)) => {
                d.extend_from_slice(&first.to_be_bytes());
                d.extend_from_slice(&count.to_be_bytes());
                (SUBTYPE_NAK, d)
            }
        }
    }

    /// Reads an APP part named `name` of `subtype` with `data`.
    pub fn decode(name: [u8; 4], subtype: u8, data: &[u8]) -> Result<Self, AppError> {
        if name != NAME {
            return Err(AppError::OtherName(name));
        }
        let want = match subtype {
            SUBTYPE_ACK => ACK_LEN,
            SUBTYPE_NAK => NAK_LEN,
            _ => return Err(AppError::UnknownSubtype(subtype)),
        };
        if data.len() != want {
            return Err(AppError::BadLength {
                subtype,
                len: data.len(),
            });
        }
        Ok(Feedback {
            hole: (subtype == SUBTYPE_NAK).then(|| (be32(data, 20), be32(data, 24))),
            rx_max: be32(data, 0),
            bitmap: be32(data, 4),
            loss_ppm: be32(data, 8),
            echo_timestamp_us: be32(data, 12),
            echo_delay_us: be32(data, 16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_foreign_or_short_ones_are_refused() {
        let info = DataInfo {
            number: 0xffff_fffe,
            timestamp_us: 2,
            acker: 0xdead_beef,
        };
        assert_eq!(DataInfo::decode(EXTENSION_ID, &info.encode()), Some(info));
        assert_eq!(DataInfo::decode(0x5446, &info.encode()), None);
        assert_eq!(DataInfo::decode(EXTENSION_ID, &info.encode()[..8]), None);
        let ack = Feedback {
            hole: None,
            rx_max: 10,
            bitmap: 0b1011,
            loss_ppm: 10_000,
            echo_timestamp_us: 5,
            echo_delay_us: 6,
        };
        let nak = Feedback {
            hole: Some((8, 2)),
            ..ack
        };
        for fb in [ack, nak] {
            let (sub, data) = fb.encode();
            assert_eq!(Feedback::decode(NAME, sub, &data), Ok(fb));
            assert!(Feedback::decode(*b"TFMC", sub, &data).is_err());
            assert_eq!(
                Feedback::decode(NAME, sub, &data[..data.len() - 4]),
                Err(AppError::BadLength {
                    subtype: sub,
                    len: data.len() - 4
                })
            );
        }
        assert_eq!(
            Feedback::decode(NAME, 2, &[0; 20]),
            Err(AppError::UnknownSubtype(2))
        );
    }
}
