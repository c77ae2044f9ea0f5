//! The APP parts (RFC 3550 §6.7) fanout's media rate control speaks, named
//! `ASMP` (ASMP §3.1, §3.6):
//!
//! - subtype 0, [`RateReport`] (receiver → sender): the TCP-friendly rate
//!   the receiver computed, with the loss rate and round trip it used;
//! - subtype 1, [`RoundTrips`] (sender → receivers, beside its SR): the
//!   round trip the sender measured to each receiver from its last report
//!   (A − LSR − DLSR), by SSRC, with which receivers calibrate their
//!   one-way delays.
//!
//! All fields are big-endian; the data is a multiple of 4 bytes, as APP
//! data must be. Decoding is bounds-checked and never trusts a count.

use thiserror::Error;

/// The APP name of fanout's rate control parts.
pub const NAME: [u8; 4] = *b"ASMP";
/// Subtype of a [`RateReport`].
pub const SUBTYPE_RATE: u8 = 0;
/// Subtype of [`RoundTrips`].
pub const SUBTYPE_ROUND_TRIPS: u8 = 1;
/// Most round trips one APP part carries (8 bytes each).
pub const MAX_ROUND_TRIPS: usize = 64;
/// Bytes of a [`RateReport`]'s data.
const RATE_REPORT_LEN: usize = 16;

/// An APP part fanout cannot take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AppError {
    /// Another application's APP part.
    #[error("APP part named {0:?}, not ASMP")]
    OtherName([u8; 4]),
    /// An ASMP subtype this build does not know.
    #[error("unknown ASMP subtype {0}")]
    UnknownSubtype(u8),
    /// Data of the wrong length for its subtype.
    #[error("ASMP subtype {subtype} with {len} bytes of data")]
    BadLength {
        /// The subtype.
        subtype: u8,
        /// Its data's length, bytes.
        len: usize,
    },
}

/// A receiver's report of the rate it computed (ASMP §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateReport {
    /// The TCP-friendly rate, bytes per second.
    pub rate: u64,
    /// The loss rate it used, millionths.
    pub loss_ppm: u32,
    /// The round trip it used, µs.
    pub rtt_us: u32,
}

/// The sender's measured round trips to receivers, by SSRC (ASMP §3.5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoundTrips {
    /// `(receiver SSRC, round trip in µs)`, at most [`MAX_ROUND_TRIPS`].
    pub entries: Vec<(u32, u32)>,
}

/// One of fanout's APP parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsmpApp {
    /// Subtype 0.
    Rate(RateReport),
    /// Subtype 1.
    RoundTrips(RoundTrips),
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl AsmpApp {
    /// Reads an APP part named `name` of subtype `subtype` with `data`.
    pub fn decode(name: [u8; 4], subtype: u8, data: &[u8]) -> Result<Self, AppError> {
        if name != NAME {
            return Err(AppError::OtherName(name));
        }
        let bad = || AppError::BadLength {
            subtype,
            len: data.len(),
        };
        match subtype {
            SUBTYPE_RATE => {
                if data.len() != RATE_REPORT_LEN {
                    return Err(bad());
                }
                Ok(AsmpApp::Rate(RateReport {
                    rate: (u64::from(be32(&data[0..4])) << 32) | u64::from(be32(&data[4..8])),
                    loss_ppm: be32(&data[8..12]),
                    rtt_us: be32(&data[12..16]),
                }))
            }
            SUBTYPE_ROUND_TRIPS => {
                if !data.len().is_multiple_of(8) || data.len() / 8 > MAX_ROUND_TRIPS {
                    return Err(bad());
                }
                let entries = data
                    .chunks_exact(8)
                    .map(|e| (be32(&e[0..4]), be32(&e[4..8])))
                    .collect();
                Ok(AsmpApp::RoundTrips(RoundTrips { entries }))
            }
            other => Err(AppError::UnknownSubtype(other)),
        }
    }

    /// Its subtype and data (round trips beyond [`MAX_ROUND_TRIPS`] are
    /// left out).
    pub fn encode(&self) -> (u8, Vec<u8>) {
        match self {
            AsmpApp::Rate(r) => {
                let mut d = Vec::with_capacity(RATE_REPORT_LEN);
                d.extend_from_slice(&r.rate.to_be_bytes());
                d.extend_from_slice(&r.loss_ppm.to_be_bytes());
                d.extend_from_slice(&r.rtt_us.to_be_bytes());
                (SUBTYPE_RATE, d)
            }
            AsmpApp::RoundTrips(t) => {
                let mut d = Vec::with_capacity(8 * t.entries.len().min(MAX_ROUND_TRIPS));
                for (ssrc, rtt) in t.entries.iter().take(MAX_ROUND_TRIPS) {
                    d.extend_from_slice(&ssrc.to_be_bytes());
                    d.extend_from_slice(&rtt.to_be_bytes());
                }
                (SUBTYPE_ROUND_TRIPS, d)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_parts_round_trip_and_hostile_ones_are_refused() {
        let rate = AsmpApp::Rate(RateReport {
            rate: 5_000_000_000,
            loss_ppm: 20_000,
            rtt_us: 41_000,
        });
        let (sub, data) = rate.encode();
        assert_eq!(data.len() % 4, 0);
        assert_eq!(AsmpApp::decode(NAME, sub, &data), Ok(rate));
        let trips = AsmpApp::RoundTrips(RoundTrips {
            entries: vec![(7, 20_000), (9, 31_000)],
        });
        let (sub, data) = trips.encode();
        assert_eq!(AsmpApp::decode(NAME, sub, &data), Ok(trips));
        assert_eq!(
            AsmpApp::decode(*b"TFRC", 0, &[0; 16]),
            Err(AppError::OtherName(*b"TFRC"))
        );
        assert!(AsmpApp::decode(NAME, 0, &[0; 12]).is_err());
        assert!(AsmpApp::decode(NAME, 1, &[0; 12]).is_err());
        assert!(AsmpApp::decode(NAME, 1, &vec![0; 8 * (MAX_ROUND_TRIPS + 1)]).is_err());
        assert_eq!(
            AsmpApp::decode(NAME, 9, &[]),
            Err(AppError::UnknownSubtype(9))
        );
        // Too many to carry: the first MAX_ROUND_TRIPS go.
        let many = AsmpApp::RoundTrips(RoundTrips {
            entries: (0..100).map(|i| (i, i)).collect(),
        });
        let (sub, data) = many.encode();
        let Ok(AsmpApp::RoundTrips(t)) = AsmpApp::decode(NAME, sub, &data) else {
            panic!("decodes");
        };
        assert_eq!(t.entries.len(), MAX_ROUND_TRIPS);
    }
}
