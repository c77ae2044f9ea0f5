//! The one place where datagrams are assembled, for every engine (session
//! sender, receiver, merger, catch-up request): the header with the
//! engine's next packet number, the frames, optional padding, and
//! [`PacketBuilder::finish`]; then, in a protected session, [`seal`] — the
//! AEAD over the frames with the header authenticated (the header's
//! `SEALED` flag, `docs/wire.md` §4.12).

use crate::protection::PacketKey;
use crate::wire::{encode_data_header, Frame, Header, HeaderFlags, WireTimestamp};
use fanout_core::codec::truncate_pn;

/// An engine's packet-number space: 0, 1, 2, … one per datagram it sends
/// (`docs/wire.md` §2; truncated to 32 bits on the wire).
#[derive(Debug, Default, Clone)]
pub struct PacketNumbers {
    next: u64,
}

impl PacketNumbers {
    /// The number the next datagram gets (= datagrams assembled so far).
    pub fn next(&self) -> u64 {
        self.next
    }

    /// The number of the datagram assembled last (0 before any).
    pub fn last(&self) -> u64 {
        self.next.saturating_sub(1)
    }
}

/// Seals the datagram just assembled at `out[start..]` (the last one
/// `numbers` numbered) with `key` (`docs/wire.md` §4.12): every engine seals
/// here, after its packet builder and its address-budget check.
pub fn seal(out: &mut Vec<u8>, start: usize, numbers: &PacketNumbers, key: &PacketKey) {
    key.seal(out, start, numbers.last());
}

/// Seals the datagram just assembled at `out[start..]` with `key`, unless
/// it travels in the clear ([`travels_in_clear`]); false if it may not go
/// (it must be sealed and there is no key for its destination yet).
pub fn seal_unless_clear(
    out: &mut Vec<u8>,
    start: usize,
    numbers: &PacketNumbers,
    key: Option<&PacketKey>,
) -> bool {
    if travels_in_clear(&out[start + crate::wire::HEADER_LEN..]) {
        return true;
    }
    match key {
        Some(key) => {
            seal(out, start, numbers, key);
            true
        }
        None => false,
    }
}

/// Whether the datagram whose frames are `frames` travels unsealed in a
/// protected session: a handshake message (it protects itself) or an
/// OFFER (it asks for a handshake and carries nothing to trust).
pub fn travels_in_clear(frames: &[u8]) -> bool {
    matches!(
        crate::wire::decode_frames(frames).next(),
        Some(Ok(Frame::Handshake(_) | Frame::Offer(_)))
    )
}

/// One datagram being assembled into the caller's buffer.
#[derive(Debug)]
pub struct PacketBuilder<'a> {
    out: &'a mut Vec<u8>,
    /// Where the header starts in `out` (frames follow it).
    start: usize,
}

impl<'a> PacketBuilder<'a> {
    /// Starts a datagram of session `session_id` in `out`: writes the
    /// header with the next number of `numbers`.
    pub fn new(
        out: &'a mut Vec<u8>,
        numbers: &mut PacketNumbers,
        session_id: u64,
        multicast: bool,
    ) -> Self {
        let start = out.len();
        let flags = if multicast {
            HeaderFlags::default().with(HeaderFlags::MULTICAST)
        } else {
            HeaderFlags::default()
        };
        Header {
            flags,
            session_id,
            packet_number: truncate_pn(numbers.next),
        }
        .encode(out);
        numbers.next += 1;
        PacketBuilder { out, start }
    }

    /// Appends one frame.
    pub fn frame(&mut self, frame: &Frame<'_>) -> &mut Self {
        frame.encode(self.out);
        self
    }

    /// Appends a DATA frame whose `len` payload bytes `payload` writes
    /// (straight from a send buffer, without an intermediate copy).
    pub fn data(
        &mut self,
        offset: u64,
        timestamp: WireTimestamp,
        fin: bool,
        message_end: bool,
        len: usize,
        payload: impl FnOnce(&mut Vec<u8>),
    ) -> &mut Self {
        encode_data_header(self.out, offset, timestamp, fin, message_end, len);
        let before = self.out.len();
        payload(self.out);
        debug_assert_eq!(self.out.len() - before, len, "DATA payload length");
        self
    }

    /// Appends frames whose encoding `write` produces (a codec of its own,
    /// such as an upstream stream's frame).
    pub fn frames_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        write(self.out);
        self
    }

    /// Pads the datagram with PADDING frames to `len` bytes in all (no-op
    /// if it is already that long).
    pub fn pad_to(&mut self, len: usize) -> &mut Self {
        let have = self.out.len() - self.start;
        if have < len {
            self.out.resize(self.start + len, 0);
        }
        self
    }

    /// Completes the datagram; returns its length in bytes (before any
    /// seal: `packet::seal` follows once the engine knows the datagram goes
    /// out).
    pub fn finish(self) -> usize {
        self.out.len() - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{accept_header, decode_frames, HEADER_LEN};

    #[test]
    fn numbers_each_datagram_and_pads_with_padding_frames() {
        let mut numbers = PacketNumbers::default();
        let mut out = Vec::new();
        let mut p = PacketBuilder::new(&mut out, &mut numbers, 9, true);
        p.frame(&Frame::Ping).pad_to(40);
        assert_eq!(p.finish(), 40);
        let (h, body) = accept_header(&out).unwrap();
        assert_eq!((h.session_id, h.packet_number), (9, 0));
        assert!(h.flags.contains(HeaderFlags::MULTICAST));
        let frames: Vec<_> = decode_frames(body).map(Result::unwrap).collect();
        assert_eq!(frames[0], Frame::Ping);
        assert_eq!(frames.len(), 40 - HEADER_LEN);
        assert!(frames[1..].iter().all(|f| *f == Frame::Padding));
        let mut next = Vec::new();
        let mut p = PacketBuilder::new(&mut next, &mut numbers, 9, false);
        p.data(100, WireTimestamp(5), true, false, 3, |o| {
            o.extend_from_slice(b"abc")
        });
        p.finish();
        let (h, body) = accept_header(&next).unwrap();
        assert_eq!(h.packet_number, 1);
        assert!(!h.flags.contains(HeaderFlags::MULTICAST));
        match decode_frames(body).next() {
            Some(Ok(Frame::Data(d))) => {
                assert_eq!((d.offset, d.payload, d.fin), (100, &b"abc"[..], true))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(numbers.next(), 2);
    }
}
