//! Send batching: consecutive datagrams to one destination with equal sizes
//! (the last may be shorter) are packed into one UDP GSO send.

use std::collections::VecDeque;
use std::net::SocketAddr;

/// Most payload bytes in one GSO send: the IPv4 total length is 16 bits
/// (65535 minus 28 bytes of headers), rounded down for margin.
const MAX_GSO_BYTES: usize = 64_000;

/// One send syscall's worth: `segments` datagrams of `segment_size` bytes
/// (the last may be shorter) stored contiguously.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub destination: SocketAddr,
    start: usize,
    pub len: usize,
    pub segment_size: usize,
    pub segments: usize,
    closed: bool,
}

/// Datagrams emitted by the engine but not yet accepted by the kernel.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    bytes: Vec<u8>,
    batches: VecDeque<Batch>,
    max_segments: usize,
    queued: usize,
}

impl Outbox {
    /// An outbox packing at most `max_segments` datagrams per send (1: no GSO).
    pub fn new(max_segments: usize) -> Self {
        Outbox {
            max_segments: max_segments.max(1),
            ..Outbox::default()
        }
    }

    /// Changes the packing limit for datagrams pushed from now on.
    pub fn set_max_segments(&mut self, max_segments: usize) {
        self.max_segments = max_segments.max(1);
    }

    /// The current packing limit (datagrams per send).
    pub fn max_segments(&self) -> usize {
        self.max_segments
    }

    /// Queues one datagram, joining the last batch when GSO allows it.
    pub fn push(&mut self, destination: SocketAddr, datagram: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(datagram);
        self.queued += 1;
        let size = datagram.len();
        let max_segments = self.max_segments;
        if let Some(last) = self.batches.back_mut() {
            let joins = !last.closed
                && last.destination == destination
                && last.segments < max_segments
                && size <= last.segment_size
                && last.len + size <= MAX_GSO_BYTES;
            if joins {
                last.len += size;
                last.segments += 1;
                // Only the final segment may be shorter.
                last.closed = size < last.segment_size;
                return;
            }
        }
        self.batches.push_back(Batch {
            destination,
            start,
            len: size,
            segment_size: size,
            segments: 1,
            closed: size == 0 || size > MAX_GSO_BYTES || max_segments == 1,
        });
    }

    /// The oldest unsent batch and its contents.
    pub fn front(&self) -> Option<(Batch, &[u8])> {
        let b = *self.batches.front()?;
        Some((b, &self.bytes[b.start..b.start + b.len]))
    }

    /// Forgets the oldest batch (sent, or failed and counted).
    pub fn pop_front(&mut self) {
        if let Some(b) = self.batches.pop_front() {
            self.queued -= b.segments;
        }
        if self.batches.is_empty() {
            self.bytes.clear();
        }
    }

    /// Replaces the oldest batch by one batch per datagram (after the kernel
    /// refused the batch as a whole).
    pub fn split_front(&mut self) {
        let Some(b) = self.batches.pop_front() else {
            return;
        };
        let mut offset = b.start + b.len;
        let mut remaining = b.len;
        for i in (0..b.segments).rev() {
            let size = if i + 1 == b.segments {
                b.len - b.segment_size * (b.segments - 1)
            } else {
                b.segment_size
            };
            offset -= size;
            remaining -= size;
            self.batches.push_front(Batch {
                start: offset,
                len: size,
                segment_size: size,
                segments: 1,
                closed: true,
                ..b
            });
        }
        debug_assert_eq!(remaining, 0);
    }

    /// Whether nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Datagrams waiting to be sent.
    pub fn queued(&self) -> usize {
        self.queued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }
    fn b() -> SocketAddr {
        "127.0.0.1:2".parse().unwrap()
    }

    fn shapes(o: &mut Outbox) -> Vec<(u16, usize, usize, usize)> {
        let mut out = Vec::new();
        while let Some((batch, bytes)) = o.front() {
            assert_eq!(bytes.len(), batch.len);
            out.push((
                batch.destination.port(),
                batch.segments,
                batch.segment_size,
                batch.len,
            ));
            o.pop_front();
        }
        out
    }

    #[test]
    fn packs_equal_sizes_to_one_destination() {
        let mut o = Outbox::new(64);
        for _ in 0..3 {
            o.push(a(), &[1; 100]);
        }
        o.push(a(), &[2; 40]); // shorter last segment closes the batch
        o.push(a(), &[3; 100]);
        o.push(b(), &[4; 100]);
        o.push(b(), &[5; 120]); // larger: new batch
        assert_eq!(o.queued(), 7);
        assert_eq!(
            shapes(&mut o),
            [
                (1, 4, 100, 340),
                (1, 1, 100, 100),
                (2, 1, 100, 100),
                (2, 1, 120, 120)
            ]
        );
        assert!(o.is_empty());
        assert_eq!(o.queued(), 0);
    }

    #[test]
    fn respects_segment_and_byte_limits() {
        let mut o = Outbox::new(4);
        for _ in 0..10 {
            o.push(a(), &[0; 10]);
        }
        let s = shapes(&mut o);
        assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), [4, 4, 2]);
        o.set_max_segments(1000);
        for _ in 0..100 {
            o.push(a(), &[0; 1400]);
        }
        let s = shapes(&mut o);
        assert!(s.iter().all(|x| x.3 <= MAX_GSO_BYTES));
        assert_eq!(s.iter().map(|x| x.1).sum::<usize>(), 100);
    }

    #[test]
    fn split_front_unpacks_a_batch() {
        let mut o = Outbox::new(64);
        o.push(a(), b"ab");
        o.push(a(), b"cd");
        o.push(a(), b"e");
        o.push(b(), b"zz");
        o.split_front();
        assert_eq!(o.queued(), 4);
        let mut got = Vec::new();
        while let Some((batch, bytes)) = o.front() {
            got.push((batch.destination.port(), batch.segments, bytes.to_vec()));
            o.pop_front();
        }
        assert_eq!(
            got,
            [
                (1, 1, b"ab".to_vec()),
                (1, 1, b"cd".to_vec()),
                (1, 1, b"e".to_vec()),
                (2, 1, b"zz".to_vec())
            ]
        );
    }

    #[test]
    fn contents_stay_in_order() {
        let mut o = Outbox::new(64);
        o.push(a(), b"ab");
        o.push(a(), b"cd");
        o.push(a(), b"e");
        let (batch, bytes) = o.front().unwrap();
        assert_eq!((batch.segments, bytes), (3, &b"abcde"[..]));
    }
}
