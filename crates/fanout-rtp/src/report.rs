//! Compound RTCP packets (RFC 3550 §6.1) read into owned, bounded values,
//! and written from them, over `rtcp-types`. A compound is valid as RFC
//! 3550 A.2 checks it (version 2, the first part an SR or RR, padding
//! only on the last); at most [`MAX_PARTS`] parts are read and at most 31
//! report blocks per report written (the count field's limit).

use rtcp_types::{
    App, Bye, Compound, Packet, ReceiverReport, ReportBlock, RtcpPacketParserExt, RtcpPacketWriter,
    RtcpPacketWriterExt, Sdes, SdesChunk, SdesItem, SenderReport,
};
use thiserror::Error;

/// Most parts read from one compound packet.
pub const MAX_PARTS: usize = 16;
/// Most report blocks in one SR or RR (5 bits of count).
pub const MAX_BLOCKS: usize = 31;

/// A compound packet fanout does not take.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReportError {
    /// Not well-formed RTCP.
    #[error("malformed RTCP: {0}")]
    Malformed(String),
    /// RFC 3550 A.2: a compound starts with an SR or RR.
    #[error("a compound RTCP packet starts with an SR or RR, not type {0}")]
    NotAReport(u8),
    /// More parts than [`MAX_PARTS`].
    #[error("more than {MAX_PARTS} parts in one compound RTCP packet")]
    TooManyParts,
}

/// A reception report block (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The source reported on.
    pub ssrc: u32,
    /// Fraction lost since the previous report, 1/256ths.
    pub fraction_lost: u8,
    /// Cumulative number lost (signed 24 bits).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub extended_max: u32,
    /// Interarrival jitter, timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the last SR's NTP timestamp (0: none).
    pub lsr: u32,
    /// Delay since that SR, 1/65536 s.
    pub dlsr: u32,
}

/// A sender's information in an SR (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderInfo {
    /// NTP timestamp of the report.
    pub ntp: u64,
    /// The same instant in RTP timestamp units.
    pub rtp_timestamp: u32,
    /// RTP packets sent.
    pub packets: u32,
    /// RTP payload bytes sent.
    pub octets: u32,
}

/// One part of a compound packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// An SR (with `sender`) or an RR.
    Report {
        /// The reporter.
        ssrc: u32,
        /// An SR's sender information.
        sender: Option<SenderInfo>,
        /// Its reception report blocks.
        blocks: Vec<Block>,
    },
    /// The CNAME of each SDES chunk that has one.
    Sdes(Vec<(u32, String)>),
    /// Sources leaving, and why.
    Bye {
        /// The sources.
        ssrcs: Vec<u32>,
        /// The reason, if given (lossily decoded).
        reason: Option<String>,
    },
    /// An application-defined part.
    App {
        /// The source.
        ssrc: u32,
        /// Four ASCII characters.
        name: [u8; 4],
        /// 5 bits.
        subtype: u8,
        /// Its data.
        data: Vec<u8>,
    },
    /// Any other type (feedback, XR), skipped.
    Other(u8),
}

/// Whether a datagram on a port that carries both is RTCP rather than RTP
/// (RFC 5761 §4: its second byte, RTCP's packet type, is 192–223, where
/// an RTP marker bit and payload type never are in fanout's sessions).
pub fn is_rtcp(datagram: &[u8]) -> bool {
    datagram.len() >= 8 && (192..=223).contains(&datagram[1])
}

fn block_of(b: &ReportBlock<'_>) -> Block {
    // The 24-bit field, sign-extended.
    let lost = ((b.cumulative_lost() << 8) as i32) >> 8;
    Block {
        ssrc: b.ssrc(),
        fraction_lost: b.fraction_lost(),
        cumulative_lost: lost,
        extended_max: b.extended_sequence_number(),
        jitter: b.interarrival_jitter(),
        lsr: b.last_sender_report_timestamp(),
        dlsr: b.delay_since_last_sender_report_timestamp(),
    }
}

/// Reads a compound packet.
pub fn parse(data: &[u8]) -> Result<Vec<Part>, ReportError> {
    let malformed = |e: rtcp_types::RtcpParseError| ReportError::Malformed(e.to_string());
    let compound = Compound::parse(data).map_err(malformed)?;
    let mut parts = Vec::new();
    for packet in compound {
        if parts.len() == MAX_PARTS {
            return Err(ReportError::TooManyParts);
        }
        let packet = packet.map_err(malformed)?;
        if parts.is_empty() && !matches!(packet, Packet::Sr(_) | Packet::Rr(_)) {
            return Err(ReportError::NotAReport(packet.type_()));
        }
        parts.push(match packet {
            Packet::Sr(sr) => Part::Report {
                ssrc: sr.ssrc(),
                sender: Some(SenderInfo {
                    ntp: sr.ntp_timestamp(),
                    rtp_timestamp: sr.rtp_timestamp(),
                    packets: sr.packet_count(),
                    octets: sr.octet_count(),
                }),
                blocks: sr.report_blocks().map(|b| block_of(&b)).collect(),
            },
            Packet::Rr(rr) => Part::Report {
                ssrc: rr.ssrc(),
                sender: None,
                blocks: rr.report_blocks().map(|b| block_of(&b)).collect(),
            },
            Packet::Sdes(sdes) => Part::Sdes(
                sdes.chunks()
                    .filter_map(|c| {
                        let cname = c.items().find(|i| i.type_() == SdesItem::CNAME)?;
                        Some((
                            c.ssrc(),
                            String::from_utf8_lossy(cname.value()).into_owned(),
                        ))
                    })
                    .collect(),
            ),
            Packet::Bye(bye) => Part::Bye {
                ssrcs: bye.ssrcs().collect(),
                // An empty reason is no reason (it is written as none).
                reason: bye
                    .reason()
                    .filter(|r| !r.is_empty())
                    .map(|r| String::from_utf8_lossy(r).into_owned()),
            },
            Packet::App(app) => Part::App {
                ssrc: app.ssrc(),
                name: app.name(),
                subtype: app.subtype(),
                data: app.data().to_vec(),
            },
            other => Part::Other(other.type_()),
        });
    }
    Ok(parts)
}

/// Writes `parts` as one compound packet (the first should be a report;
/// [`Part::Other`] is not written). `None` if a part cannot be written: an
/// APP name that is not ASCII, APP data not a multiple of 4 bytes, more
/// than [`MAX_BLOCKS`] blocks, or a CNAME over 255 bytes.
pub fn write(parts: &[Part]) -> Option<Vec<u8>> {
    let names: Vec<String> = parts
        .iter()
        .map(|p| match p {
            Part::App { name, .. } => String::from_utf8_lossy(name).into_owned(),
            _ => String::new(),
        })
        .collect();
    let mut compound = Compound::builder();
    for (part, name) in parts.iter().zip(&names) {
        let block = |b: &Block| {
            ReportBlock::builder(b.ssrc)
                .fraction_lost(b.fraction_lost)
                .cumulative_lost((b.cumulative_lost as u32) & 0x00ff_ffff)
                .extended_sequence_number(b.extended_max)
                .interarrival_jitter(b.jitter)
                .last_sender_report_timestamp(b.lsr)
                .delay_since_last_sender_report_timestamp(b.dlsr)
        };
        compound = match part {
            Part::Report {
                ssrc,
                sender: Some(s),
                blocks,
            } => compound.add_packet(
                blocks.iter().fold(
                    SenderReport::builder(*ssrc)
                        .ntp_timestamp(s.ntp)
                        .rtp_timestamp(s.rtp_timestamp)
                        .packet_count(s.packets)
                        .octet_count(s.octets),
                    |sr, b| sr.add_report_block(block(b)),
                ),
            ),
            Part::Report {
                ssrc,
                sender: None,
                blocks,
            } => {
                compound.add_packet(blocks.iter().fold(ReceiverReport::builder(*ssrc), |rr, b| {
                    rr.add_report_block(block(b))
                }))
            }
            Part::Sdes(cnames) => {
                compound.add_packet(cnames.iter().fold(Sdes::builder(), |sdes, (ssrc, cname)| {
                    sdes.add_chunk(
                        SdesChunk::builder(*ssrc)
                            .add_item(SdesItem::builder(SdesItem::CNAME, cname)),
                    )
                }))
            }
            Part::Bye { ssrcs, reason } => {
                let bye = ssrcs.iter().fold(Bye::builder(), |b, s| b.add_source(*s));
                compound.add_packet(match reason {
                    Some(r) => bye.reason(r.as_str()),
                    None => bye,
                })
            }
            Part::App {
                ssrc,
                subtype,
                data,
                ..
            } => compound.add_packet(App::builder(*ssrc, name).subtype(*subtype).data(data)),
            Part::Other(_) => compound,
        };
    }
    let size = compound.calculate_size().ok()?;
    let mut out = vec![0; size];
    let n = compound.write_into(&mut out).ok()?;
    out.truncate(n);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Part> {
        vec![
            Part::Report {
                ssrc: 0x1234,
                sender: Some(SenderInfo {
                    ntp: 0xe000_0001_8000_0000,
                    rtp_timestamp: 90_000,
                    packets: 1000,
                    octets: 1_316_000,
                }),
                blocks: vec![Block {
                    ssrc: 0x99,
                    fraction_lost: 5,
                    cumulative_lost: -2,
                    extended_max: 70_000,
                    jitter: 12,
                    lsr: 0xb705_2000,
                    dlsr: 0x0005_4000,
                }],
            },
            Part::Sdes(vec![(0x1234, "fanout@10.0.0.1".into())]),
            Part::App {
                ssrc: 0x1234,
                name: crate::app::NAME,
                subtype: 1,
                data: vec![0, 0, 0, 7, 0, 0, 0x4e, 0x20],
            },
            Part::Bye {
                ssrcs: vec![0x1234],
                reason: Some("done".into()),
            },
        ]
    }

    #[test]
    fn compounds_round_trip_through_the_wire() {
        let parts = sample();
        let bytes = write(&parts).expect("writable");
        assert_eq!(parse(&bytes), Ok(parts));
        // An RR alone.
        let rr = vec![Part::Report {
            ssrc: 5,
            sender: None,
            blocks: vec![],
        }];
        assert_eq!(parse(&write(&rr).unwrap()), Ok(rr));
        // A BYE whose reason is empty: no reason, written back the same.
        let bye = [0x80, 201, 0, 1, 0, 0, 0, 5, 0x80, 203, 0, 1, 0, 0, 0, 0];
        let parts = parse(&bye).expect("a compound");
        assert_eq!(
            parts[1],
            Part::Bye {
                ssrcs: vec![],
                reason: None
            }
        );
        assert_eq!(parse(&write(&parts).unwrap()), Ok(parts));
    }

    #[test]
    fn invalid_compounds_are_refused() {
        let bytes = write(&sample()).unwrap();
        assert!(is_rtcp(&bytes));
        let rtp = [0x80, 33, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
        assert!(!is_rtcp(&rtp), "RTP of payload type 33");
        // Starting with SDES (the SR cut off): not a valid compound.
        let sr_len = 4 * (usize::from(u16::from_be_bytes([bytes[2], bytes[3]])) + 1);
        assert_eq!(parse(&bytes[sr_len..]), Err(ReportError::NotAReport(202)));
        // Truncated, and version 1.
        assert!(matches!(
            parse(&bytes[..bytes.len() - 3]),
            Err(ReportError::Malformed(_))
        ));
        let mut v1 = bytes.clone();
        v1[0] = (v1[0] & 0x3f) | 0x40;
        assert!(matches!(parse(&v1), Err(ReportError::Malformed(_))));
        assert!(parse(&[]).is_err());
        // Too many parts.
        let mut many = vec![Part::Report {
            ssrc: 1,
            sender: None,
            blocks: vec![],
        }];
        many.extend((0..MAX_PARTS).map(|_| Part::Sdes(vec![])));
        assert_eq!(
            parse(&write(&many).unwrap()),
            Err(ReportError::TooManyParts)
        );
        // Unwritable: APP data not a multiple of 4.
        let bad_app = vec![Part::App {
            ssrc: 1,
            name: *b"ASMP",
            subtype: 0,
            data: vec![1, 2, 3],
        }];
        assert_eq!(write(&bad_app), None);
    }
}
