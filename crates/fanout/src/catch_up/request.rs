//! The catch-up request: how a late joiner asks the session sender for the
//! prefix `[0, start)` it missed.
//!
//! It is an ordinary wire-v1 datagram (`docs/wire.md`) sent from the
//! joiner's catch-up socket to the session sender's address: the header
//! names the session (`session_id` from the ACCEPT) and the one frame is a
//! CONNECT with `sends_data = 0`, `member_id` = the id the ACCEPT gave the
//! joiner (a session join always carries 0) and `start_offset` = the
//! joiner's start offset, i.e. the end of the prefix wanted. The sender then
//! connects a unicast [`fanout_transport::Sender`] back to the requesting
//! address, whose [`fanout_transport::Receiver`] listens there.

use fanout_core::codec::truncate_pn;
use fanout_transport::wire::{
    accept_header, decode_frames, ConnectFrame, Frame, Header, HeaderFlags,
};

/// What a request says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The session it is about.
    pub session_id: u64,
    /// The requester's member id in that session (never 0).
    pub member_id: u64,
    /// End of the prefix wanted: the member's start offset.
    pub end: u64,
    /// Largest DATA payload the requester accepts, bytes.
    pub max_payload: u64,
    /// Receive window the requester offers, bytes.
    pub window: u64,
    /// Requester's clock, microseconds (low 32 bits).
    pub timestamp: u32,
}

/// Appends the request datagram (packet number `pn`) to `out`.
pub fn encode_request(r: &Request, pn: u64, out: &mut Vec<u8>) {
    Header {
        flags: HeaderFlags::default(),
        session_id: r.session_id,
        packet_number: truncate_pn(pn),
    }
    .encode(out);
    Frame::Connect(ConnectFrame {
        sends_data: false,
        max_payload: r.max_payload,
        window: r.window,
        timestamp: r.timestamp,
        member_id: r.member_id,
        start_offset: r.end,
    })
    .encode(out);
}

/// `(member_id, end)` if `datagram` is a catch-up request for session
/// `session_id`; `None` for anything else (including malformed input).
pub fn parse_request(datagram: &[u8], session_id: u64) -> Option<(u64, u64)> {
    let (header, body) = accept_header(datagram).ok()?;
    if header.session_id != session_id {
        return None;
    }
    match decode_frames(body).next()? {
        Ok(Frame::Connect(c)) if !c.sends_data && c.member_id != 0 => {
            Some((c.member_id, c.start_offset))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_roundtrip_and_joins_are_not_requests() {
        let r = Request {
            session_id: 9,
            member_id: 4,
            end: 123_456,
            max_payload: 1400,
            window: 1 << 20,
            timestamp: 7,
        };
        let mut d = Vec::new();
        encode_request(&r, 3, &mut d);
        assert_eq!(parse_request(&d, 9), Some((4, 123_456)));
        assert_eq!(parse_request(&d, 8), None, "another session");
        let join = Request { member_id: 0, ..r };
        let mut j = Vec::new();
        encode_request(&join, 0, &mut j);
        assert_eq!(parse_request(&j, 9), None, "a join is not a request");
        for cut in 0..d.len() {
            assert_eq!(parse_request(&d[..cut], 9), None, "cut {cut}");
        }
    }
}
