//! Feeds a file into a stream in fanout's file protocol (manifest message,
//! bytes, BLAKE3 trailer message), never blocking: each call writes what
//! the stream takes now. The file is any reader of exactly `size` bytes
//! (a [`std::fs::File`] in the CLI, synthetic bytes in the simulator).

use crate::manifest::Manifest;
use crate::StreamSink;
use std::io::{self, Read};

/// Smallest read from the file once streaming (unless less is left), bytes.
const MIN_READ_BYTES: usize = 64 << 10;

/// A file on its way into a stream.
pub struct FileFeed<R> {
    reader: R,
    manifest: Manifest,
    header: Vec<u8>,
    hasher: blake3::Hasher,
    chunk: Vec<u8>,
    /// The most room the sink ever offered, bytes (about its capacity).
    most_room: usize,
    done: u64,
    trailer: Option<Vec<u8>>,
    /// The body's hash, known before its bytes were read (a resumed feed).
    known_hash: Option<[u8; 32]>,
    error: Option<io::Error>,
}

impl<R: Read> FileFeed<R> {
    /// Feeds `manifest.size` bytes of `reader`, announced by `manifest`.
    pub fn new(reader: R, manifest: Manifest) -> Self {
        FileFeed {
            reader,
            header: manifest.encode(),
            manifest,
            hasher: blake3::Hasher::new(),
            chunk: vec![0u8; 256 << 10],
            most_room: 0,
            done: 0,
            trailer: None,
            known_hash: None,
            error: None,
        }
    }

    /// Feeds the stream from stream offset `from` on (a restarted sender
    /// resuming its session): `reader` yields the body from `from` minus
    /// the manifest's length (it was sought there), `body_hash` is the
    /// whole body's BLAKE3 (the trailer). `from` must lie after the
    /// manifest and within the body or at its end.
    pub fn resume_from(
        reader: R,
        manifest: Manifest,
        from: u64,
        body_hash: [u8; 32],
    ) -> io::Result<Self> {
        let header_len = manifest.encode().len() as u64;
        if from < header_len || from > header_len + manifest.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot resume the stream at {from}: outside the body"),
            ));
        }
        let mut feed = FileFeed::new(reader, manifest);
        feed.header.clear();
        feed.done = from - header_len;
        feed.known_hash = Some(body_hash);
        feed.trailer = Some(body_hash.to_vec());
        Ok(feed)
    }

    /// The manifest sent first.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Stream bytes before the file's first byte (the manifest).
    pub fn header_len(&self) -> u64 {
        self.manifest.encode().len() as u64
    }

    /// Writes what `s` takes now: manifest, then bytes, then the trailer.
    pub fn feed(&mut self, s: &mut impl StreamSink) {
        if self.error.is_some() {
            return;
        }
        if !self.header.is_empty() {
            if !s.write_message(&self.header) {
                return;
            }
            self.header.clear();
        }
        let size = self.manifest.size;
        self.most_room = self.most_room.max(s.writable());
        // Wait for room worth a read: as the window slides, each step frees
        // a few segments, and a read (plus a hash update) per step would
        // cost a syscall per few KB. A quarter of the sink's capacity keeps
        // it from running dry meanwhile.
        let min_read = MIN_READ_BYTES.min(self.most_room / 4).max(1);
        while self.done < size && s.writable() >= min_read.min((size - self.done) as usize) {
            let want = self
                .chunk
                .len()
                .min(s.writable())
                .min((size - self.done) as usize);
            match self.reader.read(&mut self.chunk[..want]) {
                Ok(0) => {
                    self.error = Some(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{} shrank while being sent", self.manifest.name),
                    ));
                    s.abort("sender's file changed");
                    return;
                }
                Ok(n) => {
                    self.hasher.update(&self.chunk[..n]);
                    let taken = s.write(&self.chunk[..n]);
                    debug_assert_eq!(taken, n, "writable() promised room");
                    self.done += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(e);
                    s.abort("sender's read error");
                    return;
                }
            }
        }
        if self.done == size {
            let hasher = &self.hasher;
            let t = self
                .trailer
                .get_or_insert_with(|| hasher.finalize().as_bytes().to_vec());
            if !t.is_empty() && s.write_message(t) {
                t.clear();
                s.finish();
            }
        }
    }

    /// True once the whole file and its trailer were written and the
    /// stream finished.
    pub fn is_done(&self) -> bool {
        self.trailer.as_ref().is_some_and(|t| t.is_empty())
    }

    /// True if the stream was aborted ([`FileFeed::take_error`] says why).
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// The read error that aborted the stream, if any.
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// BLAKE3 of the file, hex (valid once all of it was read).
    pub fn blake3_hex(&self) -> String {
        match self.known_hash {
            Some(h) => blake3::Hash::from(h).to_hex().to_string(),
            None => self.hasher.finalize().to_hex().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink with a fixed capacity that the test frees a little at a
    /// time, as ACKs free a send buffer; it records every write's size.
    struct Window {
        capacity: usize,
        held: usize,
        got: Vec<u8>,
        writes: Vec<usize>,
        finished: bool,
    }

    impl Window {
        fn new(capacity: usize) -> Self {
            Window {
                capacity,
                held: 0,
                got: Vec::new(),
                writes: Vec::new(),
                finished: false,
            }
        }
    }

    impl StreamSink for Window {
        fn write_message(&mut self, msg: &[u8]) -> bool {
            if self.writable() < msg.len() {
                return false;
            }
            self.held += msg.len();
            self.got.extend_from_slice(msg);
            true
        }
        fn write(&mut self, data: &[u8]) -> usize {
            let n = data.len().min(self.writable());
            self.held += n;
            self.got.extend_from_slice(&data[..n]);
            self.writes.push(n);
            n
        }
        fn writable(&self) -> usize {
            self.capacity - self.held
        }
        fn finish(&mut self) {
            self.finished = true;
        }
        fn abort(&mut self, _reason: &str) {}
    }

    #[test]
    fn a_resumed_feed_is_the_rest_of_the_whole_stream() {
        let body: Vec<u8> = (0..500_000u32).map(|i| (i * 13 + i / 7) as u8).collect();
        let manifest = Manifest::file("f.bin", body.len() as u64);
        let stream = |mut feed: FileFeed<&[u8]>| {
            let mut w = Window::new(1 << 20);
            for _ in 0..1000 {
                feed.feed(&mut w);
                if w.finished {
                    break;
                }
                w.held = 0;
            }
            assert!(w.finished);
            (w.got, feed.blake3_hex())
        };
        let (whole, hex) = stream(FileFeed::new(&body[..], manifest.clone()));
        let header = manifest.encode().len();
        let hash = *blake3::hash(&body).as_bytes();
        for from in [header, header + 1, header + 300_000, header + body.len()] {
            let rest = &body[from - header..];
            let feed = FileFeed::resume_from(rest, manifest.clone(), from as u64, hash).unwrap();
            let (got, resumed_hex) = stream(feed);
            assert!(got == whole[from..], "from {from}");
            assert_eq!(resumed_hex, hex);
        }
        assert!(FileFeed::resume_from(&body[..], manifest.clone(), 3, hash).is_err());
    }

    #[test]
    fn reads_wait_for_room_worth_a_read_and_the_stream_is_whole() {
        let body: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let manifest = Manifest::file("f.bin", body.len() as u64);
        let mut feed = FileFeed::new(&body[..], manifest);
        let mut w = Window::new(1 << 20);
        // Free 3 KB per step (two segments acknowledged), as a session does.
        for _ in 0..10_000 {
            feed.feed(&mut w);
            if w.finished {
                break;
            }
            w.held = w.held.saturating_sub(3000);
        }
        assert!(w.finished);
        let header = feed.header_len() as usize;
        assert_eq!(&w.got[header..header + body.len()], &body[..]);
        assert_eq!(
            &w.got[header + body.len()..],
            blake3::hash(&body).as_bytes()
        );
        // The first write fills the window; later ones wait for 64 KiB of
        // room, except the file's last bytes. Without the wait, each 3 KB
        // freed would be one read.
        let (last, middle) = w.writes[1..].split_last().unwrap();
        assert!(middle.iter().all(|&n| n >= MIN_READ_BYTES), "{middle:?}");
        assert!(*last <= MIN_READ_BYTES);
        assert!(w.writes.len() < 3_000_000 / MIN_READ_BYTES + 20);
    }
}
