//! Re-produces a prefix `[0, end)` of a file's session stream (manifest,
//! file bytes, BLAKE3 trailer — `file_proto`) from the file on disk. The
//! stream is deterministic, so a late joiner's missed prefix can be served
//! again at any time without the sender keeping it in memory.

use crate::file_feed::StreamSink;
use crate::file_proto::{Manifest, TRAILER_LEN};
use anyhow::{bail, Context, Result};
use fanout_transport::session::SessionSender;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes read from the file per step.
const CHUNK_BYTES: usize = 256 << 10;

/// Where a catch-up server gets the prefix of its session's stream.
pub trait PrefixSource {
    /// A producer of stream bytes `[0, end)`.
    fn open(&self, end: u64) -> Result<Box<dyn PrefixStream>>;
}

/// Stream bytes `[0, end)` on their way into a catch-up transfer.
pub trait PrefixStream {
    /// Writes what `s` takes now; finishes the stream at `end`.
    fn feed(&mut self, s: &mut SessionSender);
    /// Stream bytes written so far.
    fn written(&self) -> u64;
    /// True if the prefix could not be produced (the stream was aborted).
    fn failed(&self) -> bool;
}

/// A file session's prefix, re-produced from the file (see [`PrefixFeed`]).
pub struct FilePrefix {
    /// The file the session streams.
    pub path: PathBuf,
    /// The manifest the session sent.
    pub manifest: Manifest,
}

impl PrefixSource for FilePrefix {
    fn open(&self, end: u64) -> Result<Box<dyn PrefixStream>> {
        Ok(Box::new(PrefixFeed::open(&self.path, &self.manifest, end)?))
    }
}

impl PrefixStream for PrefixFeed {
    fn feed(&mut self, s: &mut SessionSender) {
        PrefixFeed::feed(self, s)
    }
    fn written(&self) -> u64 {
        self.pos
    }
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// A prefix of any stream, read back from a spool file that holds the
/// stream's bytes from offset 0 (a relay's `--spool`). Every byte below the
/// session's send position was spooled before it was sent, so `[0, end)`
/// is on disk when a joiner asks for it.
pub struct SpoolPrefix {
    /// The spool file.
    pub path: PathBuf,
}

impl PrefixSource for SpoolPrefix {
    fn open(&self, end: u64) -> Result<Box<dyn PrefixStream>> {
        let file = File::open(&self.path)
            .with_context(|| format!("cannot open {}", self.path.display()))?;
        Ok(Box::new(RawPrefix {
            file,
            chunk: vec![0u8; CHUNK_BYTES],
            pos: 0,
            end,
            finished: false,
            failed: false,
        }))
    }
}

struct RawPrefix {
    file: File,
    chunk: Vec<u8>,
    pos: u64,
    end: u64,
    finished: bool,
    failed: bool,
}

impl PrefixStream for RawPrefix {
    fn feed(&mut self, s: &mut SessionSender) {
        if self.finished || self.failed {
            return;
        }
        while self.pos < self.end && s.writable() > 0 {
            let want = (s.writable() as u64)
                .min(self.end - self.pos)
                .min(self.chunk.len() as u64) as usize;
            match self.file.read(&mut self.chunk[..want]) {
                Ok(n) if n > 0 => {
                    let taken = s.write(&self.chunk[..n]);
                    debug_assert_eq!(taken, n, "writable() promised room");
                    self.pos += n as u64;
                }
                Ok(_) | Err(_) => {
                    tracing::warn!(pos = self.pos, end = self.end, "spool read failed");
                    s.abort("sender cannot read its spool");
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

/// Stream bytes `[0, end)` of one file, on their way into a unicast sender.
pub struct PrefixFeed {
    file: File,
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
    error: Option<anyhow::Error>,
}

impl PrefixFeed {
    /// Opens `path` to serve stream offsets `[0, end)`; `manifest` must be
    /// the one the session sent (the header bytes are re-encoded from it).
    pub fn open(path: &Path, manifest: &Manifest, end: u64) -> Result<PrefixFeed> {
        let header = manifest.encode();
        let stream_len = header.len() as u64 + manifest.size + TRAILER_LEN as u64;
        if end > stream_len {
            bail!("prefix end {end} beyond the stream's {stream_len} bytes");
        }
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        Ok(PrefixFeed {
            file,
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
    pub fn feed(&mut self, s: &mut impl StreamSink) {
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
                match self.file.read(&mut self.chunk[..want]) {
                    Ok(0) => {
                        self.fail(s, anyhow::anyhow!("the file shrank while being served"));
                        return;
                    }
                    Ok(n) => {
                        self.hasher.update(&self.chunk[..n]);
                        let taken = s.write(&self.chunk[..n]);
                        debug_assert_eq!(taken, n, "writable() promised room");
                        taken
                    }
                    Err(e) => {
                        self.fail(s, anyhow::Error::new(e).context("read error"));
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

    fn fail(&mut self, s: &mut impl StreamSink, e: anyhow::Error) {
        s.abort("sender cannot re-read the file");
        self.error = Some(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file_feed::FileFeed;
    use crate::test_sink::Sink;

    #[test]
    fn every_prefix_equals_the_session_stream() {
        let dir = std::env::temp_dir().join(format!("fanout-prefix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.bin");
        let mut data = vec![0u8; 700_001];
        fanout_core::Rng::new(3).fill(&mut data);
        std::fs::write(&path, &data).unwrap();
        // The whole stream, as the session's FileFeed produces it.
        let mut full = Sink {
            got: Vec::new(),
            room: usize::MAX,
            finished: false,
        };
        let mut feed = FileFeed::open(&path).unwrap();
        feed.feed(&mut full);
        assert!(full.finished);
        let m = feed.manifest().clone();
        let len = full.got.len() as u64;
        for end in [1, 17, 30, 4096, 700_000, len - 33, len - 5, len] {
            let mut s = Sink {
                got: Vec::new(),
                room: 65_537,
                finished: false,
            };
            let mut p = PrefixFeed::open(&path, &m, end).unwrap();
            while !s.finished {
                p.feed(&mut s);
            }
            assert_eq!(p.pos, end);
            assert!(s.got == full.got[..end as usize], "prefix {end}");
        }
        assert!(PrefixFeed::open(&path, &m, len + 1).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
