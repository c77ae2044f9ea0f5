//! Path probes on a session's announcements (`docs/wire.md` §4.13): each
//! announcement to the group (an OFFER) is followed by copies padded with
//! PADDING frames to the session's datagram size and to the sizes that fit
//! common smaller paths. A member that keeps hearing the small OFFER but
//! never a datagram as large as the session's data learns that a link on
//! the path from the sender takes less — a tunnel, a smaller MTU behind a
//! switch or router that sends no "packet too big" for multicast — and
//! which size does arrive ([`PathProbe`]), instead of waiting in silence
//! to be evicted.

use super::{decode_frames, Frame, HEADER_LEN};

/// Probe sizes below the session's own, bytes of UDP payload: paths of a
/// 1400-byte MTU (many tunnels) and of 1280 (the IPv6 minimum), each less
/// 48 bytes of IP and UDP headers (the larger IPv6 ones).
pub const SMALLER_PATHS: [usize; 2] = [1352, SMALLEST_PATH];

/// The smallest probe, bytes of UDP payload: a path of 1280 bytes, the
/// least an IPv6 link carries (RFC 8200 §5). A session makes its
/// datagrams smaller for a member's path down to this size, never below.
pub const SMALLEST_PATH: usize = 1232;

/// Unpadded announcements a member hears, with nothing from the sender
/// as large as its data, before it concludes that the path takes less.
pub const ANNOUNCEMENTS_BEFORE_VERDICT: u32 = 4;

/// The padded sizes to send after an announcement for a session of
/// `max_datagram`-byte datagrams, smallest last (sent first: popped).
pub fn rungs(max_datagram: usize) -> Vec<usize> {
    let mut sizes = vec![max_datagram];
    sizes.extend(SMALLER_PATHS.iter().filter(|&&s| s < max_datagram));
    sizes
}

/// Pads the datagram that starts at `start` in `buf` to `len` bytes with
/// PADDING frames (each one zero byte).
pub fn pad(buf: &mut Vec<u8>, start: usize, len: usize) {
    if buf.len() < start + len {
        buf.resize(start + len, 0);
    }
}

/// Whether the frames `body` of a datagram are an announcement, and if so
/// whether it is a padded probe.
pub fn announcement(body: &[u8]) -> Option<bool> {
    // Most datagrams are DATA: one byte tells them apart, no decoding.
    if body.first() != Some(&super::frame::T_OFFER) {
        return None;
    }
    let mut frames = decode_frames(body);
    match frames.next() {
        Some(Ok(Frame::Offer(_))) => Some(matches!(frames.next(), Some(Ok(Frame::Padding)))),
        _ => None,
    }
}

/// What a member has heard from its sender, to tell whether the path
/// carries the session's datagrams.
#[derive(Debug, Default, Clone)]
pub struct PathProbe {
    /// Unpadded announcements heard since it joined.
    announcements: u32,
    /// Largest datagram heard from the sender, bytes.
    largest: usize,
    /// Largest padded announcement heard, bytes.
    largest_probe: usize,
    /// The verdict was given (once).
    given: bool,
}

impl PathProbe {
    /// A datagram of `len` bytes from the sender, whose frames are `body`.
    pub fn heard(&mut self, len: usize, body: &[u8]) {
        self.largest = self.largest.max(len);
        match announcement(body) {
            Some(false) => self.announcements = self.announcements.saturating_add(1),
            Some(true) => self.largest_probe = self.largest_probe.max(len),
            None => {}
        }
    }

    /// Once, if the path does not carry datagrams of the session's
    /// payloads of `max_payload` bytes: the largest probe that arrived (0
    /// if none did).
    pub fn too_small(&mut self, max_payload: u64) -> Option<usize> {
        let data = HEADER_LEN + usize::try_from(max_payload).unwrap_or(usize::MAX);
        if self.given || self.announcements < ANNOUNCEMENTS_BEFORE_VERDICT || self.largest >= data {
            return None;
        }
        self.given = true;
        Some(self.largest_probe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{OfferFrame, WireTimestamp};
    use crate::{PacketBuilder, PacketNumbers};

    fn offer(padded_to: Option<usize>) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut p = PacketBuilder::new(&mut buf, &mut PacketNumbers::default(), 7, true);
        p.frame(&Frame::Offer(OfferFrame {
            max_payload: 1400,
            timestamp: WireTimestamp(0),
        }));
        p.finish();
        if let Some(len) = padded_to {
            pad(&mut buf, 0, len);
        }
        buf
    }

    #[test]
    fn a_path_that_drops_large_datagrams_is_found_once_and_one_that_carries_them_never() {
        assert_eq!(rungs(1452), [1452, 1352, 1232]);
        assert_eq!(rungs(1300), [1300, 1232]);
        let small = offer(None);
        let (mid, full) = (offer(Some(1232)), offer(Some(1452)));
        assert_eq!(full.len(), 1452);
        assert_eq!(announcement(&small[HEADER_LEN..]), Some(false));
        assert_eq!(announcement(&full[HEADER_LEN..]), Some(true));
        // Only small and 1232-byte ones arrive.
        let mut p = PathProbe::default();
        for _ in 0..ANNOUNCEMENTS_BEFORE_VERDICT {
            assert_eq!(p.too_small(1400), None);
            p.heard(small.len(), &small[HEADER_LEN..]);
            p.heard(mid.len(), &mid[HEADER_LEN..]);
        }
        assert_eq!(p.too_small(1400), Some(1232));
        assert_eq!(p.too_small(1400), None, "once");
        // The full ones arrive (or data as large): never a verdict.
        let mut p = PathProbe::default();
        for _ in 0..10 {
            p.heard(small.len(), &small[HEADER_LEN..]);
        }
        p.heard(full.len(), &full[HEADER_LEN..]);
        assert_eq!(p.too_small(1400), None);
    }
}
