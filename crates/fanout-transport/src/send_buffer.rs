//! The sender's stream buffer: bytes written by the application, addressed
//! by 64-bit stream offset, held until every receiver that counts has
//! acknowledged them (TCP-SMO §II.B: the master block owns the one send
//! buffer).

use std::collections::{BTreeSet, VecDeque};
use std::ops::Range;

/// Application bytes from `base` (oldest unreleased offset) to `end`.
#[derive(Debug)]
pub struct SendBuffer {
    bytes: VecDeque<u8>,
    /// Stream offset of `bytes[0]`.
    base: u64,
    capacity: usize,
    /// Offsets at which an application message ends (segments never cross
    /// them: TCP-CM application framing).
    message_ends: BTreeSet<u64>,
    fin: Option<u64>,
}

impl SendBuffer {
    /// An empty buffer holding at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        SendBuffer {
            bytes: VecDeque::new(),
            base: 0,
            capacity: capacity.max(1),
            message_ends: BTreeSet::new(),
            fin: None,
        }
    }

    /// Offset one past the last written byte.
    pub fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// Oldest offset still held.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes that can be written now without blocking.
    pub fn free(&self) -> usize {
        if self.fin.is_some() {
            0
        } else {
            self.capacity - self.bytes.len()
        }
    }

    /// Bytes it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held (written, not yet released).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Appends as much of `data` as fits; returns the count taken.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        self.bytes.extend(&data[..n]);
        n
    }

    /// Appends `msg` whole as one message, or nothing if it does not fit.
    pub fn write_message(&mut self, msg: &[u8]) -> bool {
        if msg.is_empty() || msg.len() > self.free() {
            return false;
        }
        self.bytes.extend(msg);
        self.message_ends.insert(self.end());
        true
    }

    /// Makes an empty buffer start at stream offset `offset` (a stream
    /// whose first bytes were delivered before, by other means). False,
    /// and nothing changed, if it holds or released bytes already.
    pub fn start_at(&mut self, offset: u64) -> bool {
        if !self.bytes.is_empty() || self.base != 0 || self.fin.is_some() {
            return false;
        }
        self.base = offset;
        true
    }

    /// Marks the end of the stream at the current end.
    pub fn finish(&mut self) {
        self.fin.get_or_insert(self.end());
    }

    /// The final stream length, once known.
    pub fn fin(&self) -> Option<u64> {
        self.fin
    }

    /// The next segment starting at `from`: at most `max_len` bytes, ending
    /// early at a message end. Returns the range and whether a message ends
    /// at its end.
    pub fn next_segment(&self, from: u64, max_len: u64) -> (Range<u64>, bool) {
        let mut end = self.end().min(from.saturating_add(max_len));
        let mut msg_end = false;
        if let Some(&m) = self.message_ends.range(from + 1..).next() {
            if m <= end {
                end = m;
                msg_end = true;
            }
        }
        (from..end.max(from), msg_end)
    }

    /// True if a message ends exactly at `offset`.
    pub fn is_message_end(&self, offset: u64) -> bool {
        self.message_ends.contains(&offset)
    }

    /// Copies the bytes of `range` (which must be held) to `out`.
    pub fn copy_to(&self, range: Range<u64>, out: &mut Vec<u8>) {
        let (a, b) = self.slices(range);
        out.extend_from_slice(a);
        out.extend_from_slice(b);
    }

    /// The bytes of `range` (which must be held), in place: the ring's two
    /// pieces (the second empty unless the range wraps).
    pub fn slices(&self, range: Range<u64>) -> (&[u8], &[u8]) {
        debug_assert!(range.start >= self.base && range.end <= self.end());
        let s = (range.start.saturating_sub(self.base)) as usize;
        let e = ((range.end.min(self.end())).saturating_sub(self.base)) as usize;
        let (a, b) = self.bytes.as_slices();
        let first = if s < a.len() {
            &a[s..e.min(a.len())]
        } else {
            &[][..]
        };
        let second = if e > a.len() {
            &b[s.saturating_sub(a.len())..e - a.len()]
        } else {
            &[][..]
        };
        (first, second)
    }

    /// Frees every byte below `offset`.
    pub fn release(&mut self, offset: u64) {
        let n = offset
            .saturating_sub(self.base)
            .min(self.bytes.len() as u64);
        if n == 0 {
            // Nothing new (the session calls this on every ACK that
            // progresses): `split_off` would rebuild the message ends.
            return;
        }
        self.bytes.drain(..n as usize);
        self.base += n;
        self.message_ends = self.message_ends.split_off(&(self.base + 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_segment_release() {
        let mut b = SendBuffer::new(10);
        assert_eq!(b.write(b"hello world"), 10);
        assert_eq!(b.free(), 0);
        let (r, m) = b.next_segment(0, 4);
        assert_eq!((r.clone(), m), (0..4, false));
        let mut out = Vec::new();
        b.copy_to(r, &mut out);
        assert_eq!(out, b"hell");
        b.release(6);
        assert_eq!(b.base(), 6);
        assert_eq!(b.free(), 6);
        assert!(b.write_message(b"abc"));
        assert_eq!(b.next_segment(6, 100), (6..13, true));
        assert_eq!(b.next_segment(6, 2), (6..8, false));
        let mut out = Vec::new();
        b.copy_to(8..13, &mut out);
        assert_eq!(out, b"rlabc");
        assert!(!b.write_message(b"too long for it"));
        b.finish();
        assert_eq!(b.fin(), Some(13));
        assert_eq!(b.free(), 0);
    }
}
