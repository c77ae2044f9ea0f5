//! TFMCC's fields on RTP (RFC 4654 §2.1, §4.5), as fanout carries them:
//!
//! - [`DataInfo`], in every RTP packet's header extension (RFC 3550
//!   §5.3.1, profile-defined identifier [`EXTENSION_ID`]): the sender's
//!   timestamp, the receiver whose feedback it echoes (the current
//!   limiting receiver's, or another's to give it a round trip), that
//!   feedback's timestamp and how long the sender held it, the feedback
//!   round, the suppression rate, the largest round trip, the rate and the
//!   current limiting receiver. Receivers
//!   that do not know the extension (ffmpeg, VLC) skip it.
//! - [`Feedback`], an APP part named [`NAME`] (receiver → sender): the
//!   rate the receiver computed, its loss event rate and round trip, and
//!   the echo of the data packet it answers.
//!
//! All fields are big-endian; decoding is bounds-checked.

use crate::app::AppError;

/// The RTP header extension's profile-defined identifier (`TF`).
pub const EXTENSION_ID: u16 = 0x5446;
/// The APP name of TFMCC's feedback.
pub const NAME: [u8; 4] = *b"TFMC";
/// Subtype of [`Feedback`].
pub const SUBTYPE_FEEDBACK: u8 = 0;
/// Bytes of [`DataInfo`] (a multiple of 4, as extension data must be).
pub const DATA_INFO_LEN: usize = 36;
/// Bytes of [`Feedback`]'s data.
const FEEDBACK_LEN: usize = 36;

/// [`DataInfo::flags`]: the sender is in slowstart.
pub const FLAG_SLOWSTART: u8 = 2;
/// [`DataInfo::flags`]: `echo_receiver` and its fields are set.
pub const FLAG_ECHO: u8 = 4;

/// What a TFMCC sender puts in each data packet (RFC 4654 §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataInfo {
    /// The sender's clock when it sent the packet, µs (wraps).
    pub timestamp_us: u32,
    /// The receiver whose feedback is echoed (its SSRC).
    pub echo_receiver: u32,
    /// That feedback's timestamp, on the receiver's clock, µs.
    pub echo_timestamp_us: u32,
    /// How long the sender held that feedback before this packet, µs.
    pub echo_delay_us: u32,
    /// The feedback round in progress.
    pub round: u16,
    /// [`FLAG_SLOWSTART`], [`FLAG_ECHO`].
    pub flags: u8,
    /// The suppression rate: the least rate reported this round, bytes
    /// per second (`u32::MAX`: none yet).
    pub suppression_rate: u32,
    /// The largest round trip to any receiver, µs.
    pub max_rtt_us: u32,
    /// The sending rate, bytes per second.
    pub rate: u32,
    /// The current limiting receiver (its SSRC; 0 with none).
    pub clr: u32,
}

/// A receiver's feedback (RFC 4654 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Feedback {
    /// The receiver's clock when it sent this, µs (wraps).
    pub timestamp_us: u32,
    /// The timestamp of the last data packet it received, echoed, µs.
    pub echo_timestamp_us: u32,
    /// How long after that packet it sent this, µs.
    pub echo_delay_us: u32,
    /// The feedback round this answers.
    pub round: u16,
    /// [`FEEDBACK_HAVE_RTT`], [`FEEDBACK_HAVE_LOSS`], [`FEEDBACK_LEAVING`].
    pub flags: u8,
    /// The rate it computed (or, before any loss, twice what it received),
    /// bytes per second.
    pub rate: u32,
    /// What it received over the last round trips, bytes per second.
    pub receive_rate: u32,
    /// Its loss event rate, billionths.
    pub loss_event_ppb: u32,
    /// Its round trip, µs.
    pub rtt_us: u32,
    /// Packets it received since it joined (for the sender's statistics).
    pub received: u32,
}

/// [`Feedback::flags`]: the receiver measured its round trip.
pub const FEEDBACK_HAVE_RTT: u8 = 1;
/// [`Feedback::flags`]: the receiver saw a loss event.
pub const FEEDBACK_HAVE_LOSS: u8 = 2;
/// [`Feedback::flags`]: the receiver is leaving.
pub const FEEDBACK_LEAVING: u8 = 4;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl DataInfo {
    /// The extension data.
    pub fn encode(&self) -> [u8; DATA_INFO_LEN] {
        let mut d = [0u8; DATA_INFO_LEN];
        d[0..4].copy_from_slice(&self.timestamp_us.to_be_bytes());
        d[4..8].copy_from_slice(&self.echo_receiver.to_be_bytes());
        d[8..12].copy_from_slice(&self.echo_timestamp_us.to_be_bytes());
        d[12..16].copy_from_slice(&self.echo_delay_us.to_be_bytes());
        d[16..18].copy_from_slice(&self.round.to_be_bytes());
        d[18] = self.flags;
        d[20..24].copy_from_slice(&self.suppression_rate.to_be_bytes());
        d[24..28].copy_from_slice(&self.max_rtt_us.to_be_bytes());
        d[28..32].copy_from_slice(&self.rate.to_be_bytes());
        d[32..36].copy_from_slice(&self.clr.to_be_bytes());
        d
    }

    /// Reads an RTP header extension: `None` unless it is TFMCC's, whole.
    pub fn decode(id: u16, data: &[u8]) -> Option<Self> {
        if id != EXTENSION_ID || data.len() != DATA_INFO_LEN {
            return None;
        }
        Some(DataInfo {
            timestamp_us: be32(data, 0),
            echo_receiver: be32(data, 4),
            echo_timestamp_us: be32(data, 8),
            echo_delay_us: be32(data, 12),
            round: u16::from_be_bytes([data[16], data[17]]),
            flags: data[18],
            suppression_rate: be32(data, 20),
            max_rtt_us: be32(data, 24),
            rate: be32(data, 28),
            clr: be32(data, 32),
        })
    }
}

impl Feedback {
    /// Its subtype and data.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut d = Vec::with_capacity(FEEDBACK_LEN);
        d.extend_from_slice(&self.timestamp_us.to_be_bytes());
        d.extend_from_slice(&self.echo_timestamp_us.to_be_bytes());
        d.extend_from_slice(&self.echo_delay_us.to_be_bytes());
        d.extend_from_slice(&self.round.to_be_bytes());
        d.push(self.flags);
        d.push(0);
        d.extend_from_slice(&self.rate.to_be_bytes());
        d.extend_from_slice(&self.receive_rate.to_be_bytes());
        d.extend_from_slice(&self.loss_event_ppb.to_be_bytes());
        d.extend_from_slice(&self.rtt_us.to_be_bytes());
        d.extend_from_slice(&self.received.to_be_bytes());
        (SUBTYPE_FEEDBACK, d)
    }

    /// Reads an APP part named `name` of `subtype` with `data`.
    pub fn decode(name: [u8; 4], subtype: u8, data: &[u8]) -> Result<Self, AppError> {
        if name != NAME {
            return Err(AppError::OtherName(name));
        }
        if subtype != SUBTYPE_FEEDBACK {
            return Err(AppError::UnknownSubtype(subtype));
        }
        if data.len() != FEEDBACK_LEN {
            return Err(AppError::BadLength {
                subtype,
                len: data.len(),
            });
        }
        Ok(Feedback {
            timestamp_us: be32(data, 0),
            echo_timestamp_us: be32(data, 4),
            echo_delay_us: be32(data, 8),
            round: u16::from_be_bytes([data[12], data[13]]),
            flags: data[14],
            rate: be32(data, 16),
            receive_rate: be32(data, 20),
            loss_event_ppb: be32(data, 24),
            rtt_us: be32(data, 28),
            received: be32(data, 32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_foreign_or_short_ones_are_refused() {
        let info = DataInfo {
            timestamp_us: 1,
            echo_receiver: 0xdead_beef,
            echo_timestamp_us: 3,
            echo_delay_us: 4,
            round: 5,
            flags: FLAG_SLOWSTART | FLAG_ECHO,
            suppression_rate: 6,
            max_rtt_us: 7,
            rate: 8,
            clr: 9,
        };
        assert_eq!(DataInfo::decode(EXTENSION_ID, &info.encode()), Some(info));
        assert_eq!(DataInfo::decode(0xBEDE, &info.encode()), None);
        assert_eq!(DataInfo::decode(EXTENSION_ID, &info.encode()[..32]), None);
        let fb = Feedback {
            timestamp_us: 9,
            echo_timestamp_us: 10,
            echo_delay_us: 11,
            round: 12,
            flags: FEEDBACK_HAVE_RTT | FEEDBACK_HAVE_LOSS,
            rate: 13,
            receive_rate: 14,
            loss_event_ppb: 15,
            rtt_us: 16,
            received: 17,
        };
        let (sub, data) = fb.encode();
        assert_eq!(data.len() % 4, 0);
        assert_eq!(Feedback::decode(NAME, sub, &data), Ok(fb));
        assert!(Feedback::decode(*b"ASMP", sub, &data).is_err());
        assert!(Feedback::decode(NAME, 1, &data).is_err());
        assert!(Feedback::decode(NAME, sub, &data[..32]).is_err());
    }
}
