//! Forward-when-feasible (ROMA §IV): a relay keeps the frames that arrive
//! in a small circular buffer and gives each downstream connection the
//! next frame it has not had whenever that connection can take bytes; a
//! connection too slow to keep up finds the frames it missed overwritten
//! and skips them. So no downstream connection ever slows the upstream
//! one or its siblings, and memory stays at the buffer plus one partly
//! written frame per connection (ROMA's one-symbol overflow buffer, which
//! keeps frames whole on every stream). With a fountain code nothing
//! skipped is lost: any enough symbols decode.
//!
//! Sans IO: the runtime asks [`Relay::writable`] for the bytes to write
//! on a connection, writes what the socket takes without blocking, and
//! tells [`Relay::wrote`] how many it took.

use std::collections::VecDeque;

/// A relay's default buffer (ROMA's 1 MB), bytes.
pub const BUFFER_BYTES: usize = 1 << 20;

/// A downstream connection's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Downstream(usize);

/// What a downstream connection got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DownstreamCounts {
    /// Frames written whole (the last byte of each taken).
    pub frames: u64,
    /// Frames overwritten before it could take them.
    pub skipped: u64,
}

#[derive(Debug)]
struct Cursor {
    /// The sequence number of the next frame to give it.
    next: u64,
    /// A frame partly written: its bytes and how many went.
    overflow: Option<(Vec<u8>, usize)>,
    counts: DownstreamCounts,
}

/// A relay's frames and its downstream connections.
#[derive(Debug)]
pub struct Relay {
    frame_len: usize,
    capacity: usize,
    /// The newest frames, oldest first; `first` is the front's sequence
    /// number.
    ring: VecDeque<Vec<u8>>,
    first: u64,
    downstream: Vec<Option<Cursor>>,
}

impl Relay {
    /// A relay of frames of `frame_len` bytes keeping at most
    /// `buffer_bytes` of them (at least one frame).
    pub fn new(frame_len: usize, buffer_bytes: usize) -> Self {
        assert!(frame_len > 0, "frames have bytes");
        Relay {
            frame_len,
            capacity: (buffer_bytes / frame_len).max(1),
            ring: VecDeque::new(),
            first: 0,
            downstream: Vec::new(),
        }
    }

    /// A frame's length, bytes.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Frames the buffer holds at most.
    pub fn capacity_frames(&self) -> usize {
        self.capacity
    }

    /// A frame arrived (of the relay's frame length): it overwrites the
    /// oldest when the buffer is full.
    pub fn push(&mut self, frame: Vec<u8>) {
        assert_eq!(frame.len(), self.frame_len, "whole frames only");
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
            self.first += 1;
        }
        self.ring.push_back(frame);
    }

    /// The sequence number the next pushed frame gets.
    fn end(&self) -> u64 {
        self.first + self.ring.len() as u64
    }

    /// A new downstream connection: it gets the frames that arrive from
    /// now on (any symbol is as good as any other, and a host that joins
    /// again after losing its parent may hold the older ones already).
    pub fn add_downstream(&mut self) -> Downstream {
        let cursor = Cursor {
            next: self.end(),
            overflow: None,
            counts: DownstreamCounts::default(),
        };
        Downstream(crate::slots::insert(&mut self.downstream, cursor))
    }

    /// A downstream connection closed: its counts.
    pub fn remove_downstream(&mut self, d: Downstream) -> Option<DownstreamCounts> {
        self.downstream
            .get_mut(d.0)
            .and_then(Option::take)
            .map(|c| c.counts)
    }

    /// What `d` got so far.
    pub fn counts(&self, d: Downstream) -> Option<DownstreamCounts> {
        self.downstream.get(d.0)?.as_ref().map(|c| c.counts)
    }

    /// The bytes to write on `d` next: the rest of a partly written frame,
    /// else the next frame it has not had (skipping any overwritten);
    /// `None` when it has everything the relay holds.
    pub fn writable(&mut self, d: Downstream) -> Option<&[u8]> {
        let first = self.first;
        let end = self.end();
        let c = self.downstream.get_mut(d.0)?.as_mut()?;
        if let Some((frame, at)) = &c.overflow {
            return Some(&frame[*at..]);
        }
        if c.next < first {
            c.counts.skipped += first - c.next;
            c.next = first;
        }
        if c.next >= end {
            return None;
        }
        Some(&self.ring[(c.next - first) as usize])
    }

    /// A frame for `d` alone, written before anything else it gets (for
    /// a connection that has had every frame held; refused, returning
    /// false, while `d` has a frame partly written or does not exist).
    pub fn inject(&mut self, d: Downstream, frame: Vec<u8>) -> bool {
        assert_eq!(frame.len(), self.frame_len, "whole frames only");
        match self.downstream.get_mut(d.0).and_then(Option::as_mut) {
            Some(c) if c.overflow.is_none() => {
                c.overflow = Some((frame, 0));
                true
            }
            _ => false,
        }
    }

    /// `n` bytes of what [`Relay::writable`] gave for `d` were written.
    pub fn wrote(&mut self, d: Downstream, n: usize) {
        if n == 0 {
            return;
        }
        let first = self.first;
        let Some(c) = self.downstream.get_mut(d.0).and_then(Option::as_mut) else {
            return;
        };
        if let Some((frame, at)) = &mut c.overflow {
            *at = (*at + n).min(frame.len());
            if *at == frame.len() {
                c.overflow = None;
                c.counts.frames += 1;
            }
            return;
        }
        let Some(frame) = self.ring.get((c.next.saturating_sub(first)) as usize) else {
            return;
        };
        c.next += 1;
        if n >= frame.len() {
            c.counts.frames += 1;
        } else {
            // The rest waits in the connection's own overflow, safe from
            // the buffer overwriting the frame.
            c.overflow = Some((frame.clone(), n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frame `i` of 10 bytes: its number, then its number's low byte.
    fn frame(i: u64) -> Vec<u8> {
        let mut f = i.to_be_bytes().to_vec();
        f.extend([i as u8; 2]);
        f
    }

    /// Writes to `d` at most `room` bytes, as a socket taking `room`
    /// would; returns the bytes written.
    fn write(relay: &mut Relay, d: Downstream, mut room: usize, out: &mut Vec<u8>) {
        while room > 0 {
            let Some(bytes) = relay.writable(d) else {
                return;
            };
            let n = bytes.len().min(room);
            out.extend_from_slice(&bytes[..n]);
            relay.wrote(d, n);
            room -= n;
        }
    }

    #[test]
    fn a_slow_connection_skips_frames_and_never_slows_a_fast_one() {
        // Room for 8 frames; one fast and one slow downstream.
        let mut relay = Relay::new(10, 85);
        assert_eq!(relay.capacity_frames(), 8);
        let (fast, slow) = (relay.add_downstream(), relay.add_downstream());
        let (mut to_fast, mut to_slow) = (Vec::new(), Vec::new());
        for i in 0..1000 {
            relay.push(frame(i));
            // The fast one takes 25 bytes a frame, the slow one 3.
            write(&mut relay, fast, 25, &mut to_fast);
            write(&mut relay, slow, 3, &mut to_slow);
        }
        let frames = |bytes: &[u8]| -> Vec<u64> {
            bytes
                .chunks(10)
                .filter(|c| c.len() == 10)
                .map(|c| {
                    let i = u64::from_be_bytes(c[..8].try_into().unwrap());
                    assert_eq!(c[8..], [i as u8; 2], "a frame whole");
                    i
                })
                .collect()
        };
        let f = frames(&to_fast);
        assert_eq!(f, (0..1000).collect::<Vec<_>>(), "the fast one has all");
        let s = frames(&to_slow);
        assert!(s.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
        let c = relay.counts(slow).unwrap();
        // 3 bytes a frame: about 300 frames of 1000, the rest skipped.
        assert!((290..=310).contains(&s.len()), "{}", s.len());
        assert_eq!(c.frames as usize, s.len());
        assert!(c.skipped > 600, "{c:?}");
        assert_eq!(relay.counts(fast).unwrap().skipped, 0);
        assert_eq!(relay.remove_downstream(slow), Some(c));
        assert_eq!(relay.writable(slow), None);
        // A newcomer takes the free handle and gets the frames from its
        // joining on.
        let late = relay.add_downstream();
        assert_eq!(late, slow);
        let mut to_late = Vec::new();
        write(&mut relay, late, usize::MAX, &mut to_late);
        assert!(to_late.is_empty());
        relay.push(frame(1000));
        write(&mut relay, late, usize::MAX, &mut to_late);
        assert_eq!(frames(&to_late), vec![1000]);
    }
}
