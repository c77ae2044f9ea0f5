//! Re-produces a prefix `[0, end)` of a session's stream for a late
//! joiner's catch-up: a file's stream (manifest, file bytes, BLAKE3
//! trailer — [`crate::manifest`]) from the file's bytes, or any stream read
//! back from a copy of it (a relay's spool). The stream is deterministic,
//! so the missed prefix can be served again at any time without the
//! sender keeping it in memory. Where the bytes come from (a file on disk,
//! synthetic bytes) is the caller's [`PrefixSource`].

use crate::manifest::{Manifest, TRAILER_LEN};
use crate::StreamSink;
use std::io::{self, Read};

/// Bytes read from the file per step.
const CHUNK_BYTES: usize = 256 << 10;

/// Where a catch-up server gets the prefix of its session's stream.
pub trait PrefixSource {
    /// A producer of stream bytes `[0, end)`.
    fn open(&self, end: u64) -> io::Result<Box<dyn PrefixStream>>;
}

/// Stream bytes `[0, end)` on their way into a catch-up transfer.
pub trait PrefixStream {
    /// Writes what `s` takes now; finishes the stream at `end`.
    fn feed(&mut self, s: &mut dyn StreamSink);
    /// Stream bytes written so far.
    fn written(&self) -> u64;
    /// True if the prefix could not be produced (the stream was aborted).
    fn failed(&self) -> bool;
}

/// A stream whose every byte is the same (the simulator's bulk streams).
#[derive(Debug, Clone, Copy)]
pub struct RepeatedByte(pub u8);

impl PrefixSource for RepeatedByte {
    fn open(&self, end: u64) -> io::Result<Box<dyn PrefixStream>> {
        Ok(Box::new(RawPrefix::new(io::repeat(self.0), end)))
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
    fn open(&self, end: u64) -> io::Result<Box<dyn PrefixStream>> {
        let reader = io::Cursor::new(self.bytes.clone());
        Ok(Box::new(PrefixFeed::new(reader, &self.manifest, end)?))
    }
}

impl<R: Read> PrefixStream for PrefixFeed<R> {
    fn feed(&mut self, s: &mut dyn StreamSink) {
        PrefixFeed::feed(self, s)
    }
    fn written(&self) -> u64 {
        self.pos
    }
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// A prefix of any stream, read back from a reader that holds the stream's
/// bytes from offset 0 (a relay's spool: every byte below the session's
/// send position was spooled before it was sent, so `[0, end)` is there
/// when a joiner asks for it).
pub struct RawPrefix<R> {
    reader: R,
    chunk: Vec<u8>,
    pos: u64,
    end: u64,
    finished: bool,
    failed: bool,
}

impl<R: Read> RawPrefix<R> {
    /// Serves `[0, end)` of the stream `reader` holds from offset 0.
    pub fn new(reader: R, end: u64) -> Self {
        RawPrefix {
            reader,
            chunk: vec![0u8; CHUNK_BYTES],
            pos: 0,
            end,
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
        self.pos
    }
    fn failed(&self) -> bool {
        self.failed
    }
}

/// Stream bytes `[0, end)` of one file's session stream, on their way
/// into a catch-up transfer.
pub struct PrefixFeed<R> {
    reader: R,
    header: Vec<u8>,
    size: u64,
    hasher: blake3::Hasher,
    chunk: Vec<u8>,
    /// Next stream offset to write.
    pos: u64,
    /// Stream offset the prefix ends at (exclusive).
    end: u64,
    trailer: Option<[u8; TRAILER_LEN]>,
    finished: bool,
    error: Option<io::Error>,
}

impl<R: Read> PrefixFeed<R> {
    /// Serves stream offsets `[0, end)` of the file `reader` reads from its
    /// start; `manifest` must be the one the session sent (the header bytes
    /// are re-encoded from it).
    pub fn new(reader: R, manifest: &Manifest, end: u64) -> io::Result<Self> {
        let header = manifest.encode();
        let stream_len = header.len() as u64 + manifest.size + TRAILER_LEN as u64;
        if end > stream_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("prefix end {end} beyond the stream's {stream_len} bytes"),
            ));
        }
        Ok(PrefixFeed {
            reader,
            header,
            size: manifest.size,
            hasher: blake3::Hasher::new(),
            chunk: vec![0u8; CHUNK_BYTES],
            pos: 0,
            end,
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
                        self.hasher.update(&self.chunk[..n]);
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
                let hasher = &self.hasher;
                let t = self
                    .trailer
                    .get_or_insert_with(|| *hasher.finalize().as_bytes());
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
        for end in [1, 17, 30, 4096, 700_000, len - 33, len - 5, len] {
            let mut s = MemorySink {
                got: Vec::new(),
                room: 65_537,
                finished: false,
            };
            let mut p = PrefixFeed::new(&data[..], &m, end).unwrap();
            while !s.finished {
                p.feed(&mut s);
            }
            assert_eq!(p.pos, end);
            assert!(s.got == full.got[..end as usize], "prefix {end}");
        }
        assert!(PrefixFeed::new(&data[..], &m, len + 1).is_err());
        // A file shorter than its manifest says aborts the prefix.
        let mut s = MemorySink {
            got: Vec::new(),
            room: 1 << 20,
            finished: false,
        };
        let mut short = PrefixFeed::new(&data[..1000], &m, len).unwrap();
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
        let mut p = RawPrefix::new(&spool[..], 54_321);
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
        let mut p = RawPrefix::new(&spool[..10], 100);
        p.feed(&mut s);
        assert!(p.failed() && !s.finished);
    }
}
