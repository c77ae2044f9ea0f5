//! MPEG-TS over RTP (RFC 2250 §2): each RTP payload is a whole number of
//! 188-byte transport stream packets (7 fill a 1500-byte path), payload
//! type 33, timestamps of a 90 kHz clock. [`TsChunker`] cuts the byte
//! stream an encoder writes (ffmpeg's `-f mpegts` on a pipe or UDP) into
//! such payloads, finding the packets' sync bytes again after garbage;
//! [`ts_packets`] checks a received payload.

use thiserror::Error;

/// A transport stream packet, bytes.
pub const TS_PACKET: usize = 188;
/// Every TS packet's first byte.
pub const SYNC_BYTE: u8 = 0x47;
/// RTP payload type of MPEG-TS (RFC 3551 §6: MP2T).
pub const PAYLOAD_TYPE: u8 = 33;
/// RTP clock rate of MPEG-TS, Hz.
pub const CLOCK_RATE: u32 = 90_000;
/// Bytes of a plain RTP header (no CSRC, no extension).
pub const RTP_HEADER: usize = 12;

/// TS packets per RTP payload in datagrams of `max_datagram` bytes (at
/// least one).
pub fn packets_per_payload(max_datagram: usize) -> usize {
    (max_datagram.saturating_sub(RTP_HEADER) / TS_PACKET).max(1)
}

/// A payload that is not whole TS packets.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Mp2tError {
    /// Not a multiple of 188 bytes.
    #[error("an MPEG-TS payload of {0} bytes is not whole 188-byte packets")]
    Length(usize),
    /// A packet not starting with 0x47.
    #[error("TS packet {0} of the payload has no sync byte")]
    Sync(usize),
}

/// The TS packets of a received RTP payload.
pub fn ts_packets(payload: &[u8]) -> Result<std::slice::ChunksExact<'_, u8>, Mp2tError> {
    if payload.is_empty() || !payload.len().is_multiple_of(TS_PACKET) {
        return Err(Mp2tError::Length(payload.len()));
    }
    if let Some(i) = payload
        .chunks_exact(TS_PACKET)
        .position(|p| p[0] != SYNC_BYTE)
    {
        return Err(Mp2tError::Sync(i));
    }
    Ok(payload.chunks_exact(TS_PACKET))
}

/// Cuts a TS byte stream into RTP payloads of whole packets.
#[derive(Debug, Clone, Default)]
pub struct TsChunker {
    /// Bytes not yet cut, starting at a sync byte (or empty).
    pending: Vec<u8>,
    /// Bytes dropped while looking for sync.
    skipped: u64,
}

impl TsChunker {
    /// Most bytes held while waiting for the caller to take payloads (the
    /// oldest whole packets go beyond it).
    const MAX_PENDING: usize = 1 << 20;

    /// Takes bytes of the stream (any amount); take the payloads with
    /// [`TsChunker::next_payload`].
    pub fn push(&mut self, mut bytes: &[u8]) {
        if self.pending.is_empty() {
            // Look for sync: a 0x47 (and, when the bytes show it, another
            // one packet later).
            let start = (0..bytes.len()).find(|&i| {
                bytes[i] == SYNC_BYTE && bytes.get(i + TS_PACKET).is_none_or(|&b| b == SYNC_BYTE)
            });
            let Some(start) = start else {
                self.skipped += bytes.len() as u64;
                return;
            };
            self.skipped += start as u64;
            bytes = &bytes[start..];
        }
        let from = self.pending.len() / TS_PACKET;
        self.pending.extend_from_slice(bytes);
        self.resync(from);
        if self.pending.len() > Self::MAX_PENDING {
            let excess = (self.pending.len() - Self::MAX_PENDING).div_ceil(TS_PACKET) * TS_PACKET;
            self.pending.drain(..excess.min(self.pending.len()));
            self.skipped += excess as u64;
        }
    }

    /// Drops each held packet from the `from`-th on whose sync byte is
    /// missing (the stream lost its alignment), and what follows it up to
    /// the next sync byte.
    fn resync(&mut self, from: usize) {
        let mut i = from;
        while (i + 1) * TS_PACKET <= self.pending.len() {
            let at = i * TS_PACKET;
            if self.pending[at] == SYNC_BYTE {
                i += 1;
                continue;
            }
            let next = self.pending[at..]
                .iter()
                .position(|&b| b == SYNC_BYTE)
                .map_or(self.pending.len(), |p| at + p);
            self.skipped += (next - at) as u64;
            self.pending.drain(at..next);
        }
    }

    /// The next payload of up to `max_packets` whole TS packets, once
    /// that many are held (or, with `flush`, whatever whole packets are).
    pub fn next_payload(&mut self, max_packets: usize, flush: bool) -> Option<Vec<u8>> {
        let max_packets = max_packets.max(1);
        let whole = self.pending.len() / TS_PACKET;
        if whole == 0 || (whole < max_packets && !flush) {
            return None;
        }
        let n = whole.min(max_packets) * TS_PACKET;
        Some(self.pending.drain(..n).collect())
    }

    /// Bytes dropped so far while looking for sync (or when not taken).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                let mut p = vec![i as u8; TS_PACKET];
                p[0] = SYNC_BYTE;
                p
            })
            .collect()
    }

    #[test]
    fn a_stream_is_cut_into_payloads_of_whole_packets() {
        assert_eq!(packets_per_payload(1500 - 28), 7);
        assert_eq!(packets_per_payload(1232), 6);
        assert_eq!(packets_per_payload(100), 1);
        let stream = ts(20);
        let mut c = TsChunker::default();
        let mut out = Vec::new();
        // Fed in odd pieces, as a pipe delivers.
        for piece in stream.chunks(333) {
            c.push(piece);
            while let Some(p) = c.next_payload(7, false) {
                out.push(p);
            }
        }
        assert_eq!(out.len(), 2, "two of 7; 6 wait");
        out.push(c.next_payload(7, true).unwrap());
        assert_eq!(out.concat(), stream);
        for p in &out {
            assert!(ts_packets(p).is_ok());
        }
        assert_eq!(c.skipped(), 0);
    }

    #[test]
    fn a_large_read_is_taken_whole() {
        let stream = ts(400);
        let mut c = TsChunker::default();
        c.push(&stream);
        let mut got = Vec::new();
        while let Some(p) = c.next_payload(7, true) {
            got.extend(p);
        }
        assert!(got == stream);
        assert_eq!(c.skipped(), 0);
    }

    #[test]
    fn garbage_before_and_between_packets_is_skipped() {
        let mut stream = vec![1, 2, 3];
        stream.extend(ts(2));
        stream.extend([9; 50]);
        stream.extend(ts(3));
        let mut c = TsChunker::default();
        c.push(&stream);
        let mut got = Vec::new();
        while let Some(p) = c.next_payload(7, true) {
            got.extend(p);
        }
        assert_eq!(got.len() % TS_PACKET, 0);
        assert_eq!(got.len() / TS_PACKET, 5);
        assert!(ts_packets(&got).is_ok());
        assert_eq!(c.skipped(), 3 + 50);
    }

    #[test]
    fn received_payloads_are_checked() {
        assert_eq!(ts_packets(&[]).unwrap_err(), Mp2tError::Length(0));
        assert_eq!(
            ts_packets(&[SYNC_BYTE; 200]).unwrap_err(),
            Mp2tError::Length(200)
        );
        let mut two = ts(2);
        two[TS_PACKET] = 0;
        assert_eq!(ts_packets(&two).unwrap_err(), Mp2tError::Sync(1));
    }
}
