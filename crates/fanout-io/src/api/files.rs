//! Files in fanout's file protocol (`fanout_app::manifest`: a manifest,
//! the bytes, a BLAKE3 trailer), interoperable with `fanout send` and
//! `fanout recv`: [`SessionListener::send_file`] feeds one through
//! `fanout_app`'s [`FileFeed`], [`Connection::receive_file`] takes it apart
//! with its [`FileIntake`] and keeps it only if the hash matched.

use super::listener::{SessionListener, SessionSummary};
use super::subscriber::Connection;
use crate::{Existing, OutputTree};
use fanout_app::{FileFeed, FileIntake, IntakeError, Manifest, Piece};
use std::io::{self, ErrorKind, Read};
use std::path::{Path, PathBuf};

/// A file received whole and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedFile {
    /// Where it is (in the directory asked for, under the sender's name).
    pub path: PathBuf,
    /// Its size, bytes.
    pub size: u64,
    /// Its BLAKE3 hash, checked against the sender's.
    pub blake3: [u8; 32],
}

impl SessionListener {
    /// Sends `manifest.size` bytes of `reader` as one file (the manifest
    /// names it; its name is cut to a plain base name), then ends the
    /// stream and waits for the receivers as [`SessionListener::finish`]
    /// does. Fails if the reader fails or holds fewer bytes than announced
    /// (the receivers get a RESET), or as `finish` fails.
    ///
    /// A whole file to two receivers over loopback:
    ///
    /// ```
    /// use fanout_app::Manifest;
    /// use fanout_io::api::{SessionListener, SessionOptions, Subscriber};
    /// use fanout_io::Existing;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// let dir = std::env::temp_dir().join(format!("fanout-doc-files-{}", std::process::id()));
    /// let options = SessionOptions::unicast().wait_for(2);
    /// let mut session = SessionListener::bind("127.0.0.1:0".parse().unwrap(), options)?;
    /// let at = session.local_addr();
    /// let receivers: Vec<_> = (0..2)
    ///     .map(|i| {
    ///         let out = dir.join(format!("r{i}"));
    ///         std::thread::spawn(move || {
    ///             std::fs::create_dir_all(&out)?;
    ///             let sub = Subscriber::subscribe(None, "127.0.0.1:0".parse().unwrap())?;
    ///             sub.connect(at)?.receive_file(&out, Existing::Refuse)
    ///         })
    ///     })
    ///     .collect();
    /// let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    /// let manifest = Manifest::file("data.bin", bytes.len() as u64);
    /// let summary = session.send_file(&bytes[..], manifest)?;
    /// assert_eq!(summary.completed(), 2);
    /// for r in receivers {
    ///     let got = r.join().unwrap()?;
    ///     assert_eq!(std::fs::read(&got.path)?, bytes);
    ///     assert_eq!(got.size, bytes.len() as u64);
    /// }
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub fn send_file(
        &mut self,
        reader: impl Read,
        manifest: Manifest,
    ) -> io::Result<SessionSummary> {
        let size = manifest.size;
        let mut feed = FileFeed::new(reader, manifest);
        loop {
            let progress = self.feed_with(|s| {
                feed.feed(s);
                feed.is_done() || feed.failed()
            })?;
            if progress {
                break;
            }
        }
        if let Some(e) = feed.take_error() {
            return Err(e);
        }
        self.add_written(size);
        self.finish()
    }
}

impl Connection {
    /// Receives one file (or a tree of them) of fanout's file protocol
    /// into directory `dir`: writes `NAME.part` there and renames it to
    /// `NAME` only once every byte arrived and the BLAKE3 trailer matched;
    /// otherwise removes it and fails. An existing `NAME` fails the
    /// transfer before any byte is written unless `existing` is
    /// [`Existing::Replace`]; so does a body larger than the free space
    /// ([`OutputTree`]). For a tree, [`ReceivedFile::path`] is `dir`.
    pub fn receive_file(mut self, dir: &Path, existing: Existing) -> io::Result<ReceivedFile> {
        let mut intake = FileIntake::new();
        let mut target: Option<OutputTree> = None;
        let mut buf = vec![0u8; 256 << 10];
        let result = loop {
            let n = match self.read(&mut buf) {
                Ok(0) => break intake.finish().map_err(invalid),
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            let mut at = intake.body_done();
            let taken = intake.consume(&buf[..n], &mut |piece| match piece {
                Piece::Manifest(m) => {
                    target = Some(OutputTree::create(dir, m, existing)?);
                    Ok(())
                }
                Piece::Body(b) => {
                    let r = target.as_mut().map_or(Ok(()), |t| t.write_at(at, b));
                    at += b.len() as u64;
                    r
                }
            });
            if let Err(e) = taken {
                break Err(invalid(e));
            }
        };
        match (result, target) {
            (Ok(blake3), Some(mut tree)) => {
                tree.commit()?;
                let size = intake.manifest().map_or(0, |m| m.size);
                Ok(ReceivedFile {
                    path: tree.path().to_path_buf(),
                    size,
                    blake3,
                })
            }
            (Err(e), target) => {
                if let Some(mut tree) = target {
                    tree.discard();
                }
                Err(e)
            }
            (Ok(_), None) => Err(invalid(IntakeError::NoManifest)),
        }
    }
}

fn invalid(e: IntakeError) -> io::Error {
    match e {
        IntakeError::Output(e) => e,
        other => io::Error::new(ErrorKind::InvalidData, other),
    }
}
