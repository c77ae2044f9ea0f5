//! Feeds a file into a stream in fanout's file protocol (manifest message,
//! bytes, BLAKE3 trailer message), never blocking: each call writes what
//! the stream takes now.

use crate::file_proto::{sanitize_name, Manifest};
use anyhow::{bail, Context, Result};
use fanout_transport::session::SessionSender;
use fanout_transport::Sender;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// What a file can be fed into: a unicast or a one-to-many sender.
pub trait StreamSink {
    /// Queues one whole message, or nothing (false) if it does not fit now.
    fn write_message(&mut self, msg: &[u8]) -> bool;
    /// Queues what fits of `data`; returns the count.
    fn write(&mut self, data: &[u8]) -> usize;
    /// Bytes `write` would take now.
    fn writable(&self) -> usize;
    /// Ends the stream.
    fn finish(&mut self);
    /// Aborts, telling the peer(s) why.
    fn abort(&mut self, reason: &str);
}

impl StreamSink for Sender {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        Sender::write_message(self, msg)
    }
    fn write(&mut self, data: &[u8]) -> usize {
        Sender::write(self, data)
    }
    fn writable(&self) -> usize {
        Sender::writable(self)
    }
    fn finish(&mut self) {
        Sender::finish(self)
    }
    fn abort(&mut self, reason: &str) {
        self.reset(2, reason)
    }
}

impl StreamSink for SessionSender {
    fn write_message(&mut self, msg: &[u8]) -> bool {
        SessionSender::write_message(self, msg)
    }
    fn write(&mut self, data: &[u8]) -> usize {
        SessionSender::write(self, data)
    }
    fn writable(&self) -> usize {
        SessionSender::writable(self)
    }
    fn finish(&mut self) {
        SessionSender::finish(self)
    }
    fn abort(&mut self, reason: &str) {
        SessionSender::abort(self, reason)
    }
}

/// A file on its way into a stream.
pub struct FileFeed {
    path: PathBuf,
    file: File,
    manifest: Manifest,
    header: Vec<u8>,
    hasher: blake3::Hasher,
    chunk: Vec<u8>,
    done: u64,
    trailer: Option<Vec<u8>>,
    error: Option<anyhow::Error>,
}

impl FileFeed {
    /// Opens `path` (a regular file with a UTF-8 name).
    pub fn open(path: &Path) -> Result<FileFeed> {
        let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let meta = file
            .metadata()
            .with_context(|| format!("cannot stat {}", path.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("the file name is not valid UTF-8")?;
        let manifest = Manifest {
            size: meta.len(),
            name: sanitize_name(name)?,
        };
        Ok(FileFeed {
            path: path.to_path_buf(),
            file,
            header: manifest.encode(),
            manifest,
            hasher: blake3::Hasher::new(),
            chunk: vec![0u8; 256 << 10],
            done: 0,
            trailer: None,
            error: None,
        })
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
        while self.done < size && s.writable() > 0 {
            let want = self
                .chunk
                .len()
                .min(s.writable())
                .min((size - self.done) as usize);
            match self.file.read(&mut self.chunk[..want]) {
                Ok(0) => {
                    self.error = Some(anyhow::anyhow!(
                        "{} shrank while being sent",
                        self.path.display()
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
                Err(e) => {
                    self.error = Some(anyhow::Error::new(e).context("read error"));
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

    /// The read error that aborted the stream, if any.
    pub fn take_error(&mut self) -> Option<anyhow::Error> {
        self.error.take()
    }

    /// BLAKE3 of the file, hex (valid once all of it was read).
    pub fn blake3_hex(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }
}
