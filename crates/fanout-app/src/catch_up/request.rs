//! The catch-up request: how a late joiner asks the session sender for the
//! prefix `[0, start)` it missed (or `[from, start)`, resuming a transfer
//! whose first bytes it holds).
//!
//! It is an ordinary wire datagram (`docs/wire.md`) sent from the joiner's
//! catch-up socket to the session sender's address: the header carries the
//! requester's credential (its member token, or the session id when it
//! reports through a merger: `Receiver::catch_up_credential`) and the one
//! frame is a CATCH_UP
//! naming the member id the ACCEPT gave the joiner and the end of the
//! prefix wanted (its start offset). The sender then OFFERs a transfer of
//! the prefix to the requesting address, where a listening
//! [`fanout_transport::Receiver`] joins it — so no byte of the prefix goes
//! to an address that did not answer.

use fanout_transport::wire::{accept_header, decode_frames, CatchUpFrame, Frame};
use fanout_transport::{PacketBuilder, PacketNumbers};
use std::ops::Range;

/// What a request says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The requester's member token, or the session id behind a merger.
    pub credential: u64,
    /// The requester's member id in that session (never 0).
    pub member_id: u64,
    /// Stream bytes wanted: up to the member's start offset, from 0 or
    /// from what a resuming member holds. Never empty.
    pub range: Range<u64>,
}

/// Appends the request datagram (numbered from `numbers`) to `out`.
pub fn encode_request(r: &Request, numbers: &mut PacketNumbers, out: &mut Vec<u8>) {
    let mut p = PacketBuilder::new(out, numbers, r.credential, false);
    p.frame(&Frame::CatchUp(CatchUpFrame {
        member_id: r.member_id,
        end: r.range.end,
        from: r.range.start,
    }));
    p.finish();
}

/// The request if `datagram` is one; `None` for anything else (including
/// malformed input).
pub fn parse_request(datagram: &[u8]) -> Option<Request> {
    let (header, body) = accept_header(datagram).ok()?;
    match decode_frames(body).next()? {
        Ok(Frame::CatchUp(c)) => Some(Request {
            credential: header.session_id,
            member_id: c.member_id,
            range: c.from..c.end,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_transport::wire::{ConnectFrame, Header, HeaderFlags, WireTimestamp};

    #[test]
    fn requests_roundtrip_and_joins_are_not_requests() {
        for range in [0..123_456, 70_000..123_456] {
            let r = Request {
                credential: 9,
                member_id: 4,
                range,
            };
            let mut d = Vec::new();
            encode_request(&r, &mut PacketNumbers::default(), &mut d);
            assert_eq!(parse_request(&d), Some(r));
        }
        // An empty range is malformed.
        let mut d = Vec::new();
        let r = Request {
            credential: 9,
            member_id: 4,
            range: 5..5,
        };
        encode_request(&r, &mut PacketNumbers::default(), &mut d);
        assert_eq!(parse_request(&d), None);
        let mut j = Vec::new();
        Header {
            flags: HeaderFlags::default(),
            session_id: 9,
            packet_number: 0,
        }
        .encode(&mut j);
        Frame::Connect(ConnectFrame {
            max_payload: 1400,
            window: 1 << 20,
            timestamp: WireTimestamp(0),
            resume_from: 0,
        })
        .encode(&mut j);
        assert_eq!(parse_request(&j), None, "a join is not a request");
        let mut d = Vec::new();
        let r = Request {
            credential: 9,
            member_id: 4,
            range: 0..1200,
        };
        encode_request(&r, &mut PacketNumbers::default(), &mut d);
        for cut in 0..d.len() {
            assert_eq!(parse_request(&d[..cut]), None, "cut {cut}");
        }
    }
}
