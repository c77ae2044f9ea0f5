//! Re-produces a prefix `[0, end)` of a session's stream for a late
//! joiner's catch-up (or `[from, end)` for one resuming a transfer whose
//! first bytes it holds): a file's stream (manifest, file bytes, BLAKE3
//! trailer — [`crate::manifest`]) from the file's bytes, or any stream read
//! back from a copy of it (a relay's spool). The stream is deterministic,
//! so the missed prefix can be served again at any time without the
//! sender keeping it in memory. Where the bytes come from (a file on disk,
//! synthetic bytes) is the caller's [`PrefixSource`].

use crate::manifest::{Manifest, TRAILER_LEN};
use crate::StreamSink;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;

/// Bytes read from the file per step.
const CHUNK_BYTES: usize = 256 << 10;

/// Where a catch-up server gets the prefix of its session's stream.
pub trait PrefixSource {
    /// A producer of stream bytes `range` (of the session's stream).
    fn open(&self, range: Range<u64>) -> io::Result<Box<dyn PrefixStream>>;
}

/// Stream bytes `[from, end)` on their way into a catch-up transfer.
pub trait PrefixStream {
    /// Writes what `s` takes now; finishes the stream at `end`.
    fn feed(&mut self, s: &mut dyn StreamSink);
    /// Bytes written into the transfer so far.
    fn written(&self) -> u64;
    /// True if the prefix could not be produced (the stream was aborted).
    fn failed(&self) -> bool;
}

/// A stream whose every byte is the same (the simulator's bulk streams).
#[derive(Debug, Clone, Copy)]
pub struct RepeatedByte(pub u8);

impl PrefixSource for RepeatedByte {
    fn open(&self, range: Range<u64>) -> io::Result<Box<dyn PrefixStream>> {
        Ok(Box::new(RawPrefix::new(io::repeat(self.0), range)))
    }
}

/// A file's session stream, the file held in memory.
#[derive(Debug, Clone)]
pub struct FileInMemory {
    /// The manifest the session sent.
    pub manifest: Manifest,
    /// The file's bytes.
    pub bytes: std::sync::Arc<[u8]>,
}

impl PrefixSource for FileInMemory {
    fn open(&self, range: Range<u64>) -> io::Result<Box<dyn PrefixStream>> {
        let reader = io::Cursor::new(self.bytes.clone());
        Ok(Box::new(PrefixFeed::new(reader, &self.manifest, range)?))
    }
}

impl<R: Read + Seek> PrefixStream for PrefixFeed<R> {
    fn feed(&mut self, s: &mut dyn StreamSink) {
        PrefixFeed::feed(self, s)
    }
    fn written(&self) -> u64 {
        self.pos - self.start
    }
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// A prefix of any stream, read back from a reader that holds the stream's
/// bytes (a relay's spool: every byte below the session's send position
/// was spooled before it was sent, so `[0, end)` is there when a joiner
/// asks for it).
pub struct RawPrefix<R> {
    reader: R,
    chunk: Vec<u8>,
    start: u64,
    pos: u64,
    end: u64,
    finished: bool,
    failed: bool,
}

impl<R: Read> RawPrefix<R> {
    /// Serves `range` of the stream whose bytes from `range.start` on
    /// `reader` reads.
    pub fn new(reader: R, range: Range<u64>) -> Self {
        RawPrefix {
            reader,
            chunk: vec![0u8; CHUNK_BYTES],
            start: range.start,
            pos: range.start,
            end: range.end,
            finished: false,
            failed: false,
        }
    }
}

impl<R: Read> PrefixStream for RawPrefix<R> {
    fn feed(&mut self, s: &mut dyn StreamSink) {
        if self.finished || self.failed {
            return;
        }
        while self.pos < self.end && s.writable() > 0 {
            let want = (s.writable() as u64)
                .min(self.end - self.pos)
                .min(self.chunk.len() as u64) as usize;
            match self.reader.read(&mut self.chunk[..want]) {
                Ok(n) if n > 0 => {
                    let taken = s.write(&self.chunk[..n]);
                    debug_assert_eq!(taken, n, "writable() promised room");
                    self.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(_) | Err(_) => {
                    tracing::warn!(pos = self.pos, end = self.end, "prefix read failed");
                    s.abort("sender cannot read the stream back");
                    self.failed = true;
                    return;
                }
            }
        }
        if self.pos == self.end {
            s.finish();
            self.finished = true;
        }
    }
    fn written(&self) -> u64 {
        self.pos - self.start
    }
    fn failed(&self) -> bool {
        self.failed
    }
}

/// Stream bytes `[from, end)` of one file's (or tree's) session stream,
/// on their way into a catch-up transfer.
pub struct PrefixFeed<R> {
    reader: R,
    header: Vec<u8>,
    size: u64,
    /// The body's hash so far; `None` when serving began inside the body
    /// (the trailer is then hashed from the whole body when needed).
    hasher: Option<blake3::Hasher>,
    chunk: Vec<u8>,
    /// Stream offset the transfer starts at.
    start: u64,
    /// Next stream offset to write.
    pos: u64,
    /// Stream offset the prefix ends at (exclusive).
    end: u64,
    trailer: Option<[u8; TRAILER_LEN]>,
    finished: bool,
    error: Option<io::Error>,
}

impl<R: Read + Seek> PrefixFeed<R> {
    /// Serves stream offsets `range` of the body `reader` reads (from its
    /// start: it is sought to where `range` begins); `manifest` must be the
    /// one the session sent (the header bytes are re-encoded from it).
    pub fn new(mut reader: R, manifest: &Manifest, range: Range<u64>) -> io::Result<Self> {
        let header = manifest.encode();
        let hlen = header.len() as u64;
        let stream_len = hlen + manifest.size + TRAILER_LEN as u64;
        if range.end > stream_len || range.start > range.end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("prefix {range:?} beyond the stream's {stream_len} bytes"),
            ));
        }
        let inside_body = range.start > hlen;
        if inside_body {
            let body_at = (range.start - hlen).min(manifest.size);
            reader.seek(SeekFrom::Start(body_at))?;
        }
        Ok(PrefixFeed {
            reader,
            header,
            size: manifest.size,
            hasher: (!inside_body).then(blake3::Hasher::new),
            chunk: vec![0u8; CHUNK_BYTES],
            start: range.start,
            pos: range.start,
            end: range.end,
            trailer: None,
            finished: false,
            error: None,
        })
    }

    /// Writes what `s` takes now; finishes the stream at `end`.
    pub fn feed(&mut self, s: &mut dyn StreamSink) {
        if self.error.is_some() || self.finished {
            return;
        }
        let hlen = self.header.len() as u64;
        let body_end = hlen + self.size;
        while self.pos < self.end && s.writable() > 0 {
            let room = (s.writable() as u64).min(self.end - self.pos);
            let taken = if self.pos < hlen {
                let part = &self.header[self.pos as usize..hlen.min(self.pos + room) as usize];
                s.write(part)
            } else if self.pos < body_end {
                let want = (room.min(body_end - self.pos) as usize).min(self.chunk.len());
                match self.reader.read(&mut self.chunk[..want]) {
                    Ok(0) => {
                        let e = io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the file shrank while being served",
                        );
                        self.fail(s, e);
                        return;
                    }
                    Ok(n) => {
                        if let Some(h) = &mut self.hasher {
                            h.update(&self.chunk[..n]);
                        }
                        let taken = s.write(&self.chunk[..n]);
                        debug_assert_eq!(taken, n, "writable() promised room");
                        taken
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                    Err(e) => {
                        self.fail(s, e);
                        return;
                    }
                }
            } else {
                if self.trailer.is_none() {
                    match self.body_hash() {
                        Ok(h) => self.trailer = Some(h),
                        Err(e) => {
                            self.fail(s, e);
                            return;
                        }
                    }
                }
                let t = self.trailer.as_ref().expect("set above");
                let at = (self.pos - body_end) as usize;
                let stop = (at as u64 + room).min(TRAILER_LEN as u64) as usize;
                s.write(&t[at..stop])
            };
            if taken == 0 {
                break;
            }
            self.pos += taken as u64;
        }
        if self.pos == self.end {
            s.finish();
            self.finished = true;
        }
    }

    /// The body's BLAKE3: as read, or (serving began inside the body) read
    /// again from the start.
    fn body_hash(&mut self) -> io::Result<[u8; TRAILER_LEN]> {
        if let Some(h) = &self.hasher {
            return Ok(*h.finalize().as_bytes());
        }
        self.reader.seek(SeekFrom::Start(0))?;
        let mut h = blake3::Hasher::new();
        let copied = io::copy(&mut (&mut self.reader).take(self.size), &mut h)?;
        if copied != self.size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while being served",
            ));
        }
        Ok(*h.finalize().as_bytes())
    }

    fn fail(&mut self, s: &mut dyn StreamSink, e: io::Error) {
        s.abort("sender cannot re-read the file");
        self.error = Some(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileFeed, MemorySink};

    #[test]
    fn every_prefix_equals_the_session_stream() {
        let mut data = vec![0u8; 700_001];
        fanout_core::Rng::new(3).fill(&mut data);
        let m = Manifest::file("p.bin", data.len() as u64);
        // The whole stream, as the session's FileFeed produces it.
        let mut full = MemorySink {
            got: Vec::new(),
            room: usize::MAX,
            finished: false,
        };
        let mut feed = FileFeed::new(&data[..], m.clone());
        feed.feed(&mut full);
        assert!(full.finished);
        let len = full.got.len() as u64;
        let ends = [1, 17, 30, 4096, 700_000, len - 33, len - 5, len];
        let starts = [0, 5, 20, 4095, 333_333, len - 34, len - 6];
        for (start, end) in starts.iter().flat_map(|&a| ends.map(|b| (a, b))) {
            if start >= end {
                continue;
            }
            let mut s = MemorySink {
                got: Vec::new(),
                room: 65_537,
                finished: false,
            };
            let reader = io::Cursor::new(&data[..]);
            let mut p = PrefixFeed::new(reader, &m, start..end).unwrap();
            while !s.finished {
                p.feed(&mut s);
            }
            assert_eq!(p.pos, end);
            assert_eq!(p.written(), end - start);
            let want = &full.got[start as usize..end as usize];
            assert!(s.got == want, "prefix {start}..{end}");
        }
        assert!(PrefixFeed::new(io::Cursor::new(&data[..]), &m, 0..len + 1).is_err());
        // A file shorter than its manifest says aborts the prefix.
        let mut s = MemorySink {
            got: Vec::new(),
            room: 1 << 20,
            finished: false,
        };
        let mut short = PrefixFeed::new(io::Cursor::new(&data[..1000]), &m, 0..len).unwrap();
        short.feed(&mut s);
        assert!(short.failed() && !s.finished);
    }

    #[test]
    fn a_raw_prefix_is_the_spooled_stream() {
        let spool: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut s = MemorySink {
            got: Vec::new(),
            room: 7_000,
            finished: false,
        };
        let mut p = RawPrefix::new(&spool[..], 0..54_321);
        while !s.finished {
            p.feed(&mut s);
        }
        assert_eq!(s.got, &spool[..54_321]);
        // The spool ends early: the prefix fails, the transfer is aborted.
        let mut s = MemorySink {
            got: Vec::new(),
            room: 1 << 20,
            finished: false,
        };
        let mut p = RawPrefix::new(&spool[..10], 0..100);
        p.feed(&mut s);
        assert!(p.failed() && !s.finished);
    }
}
