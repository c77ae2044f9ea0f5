//! The receiving side of the file protocol ([`crate::manifest`]): takes the
//! stream's bytes in order, parses the manifest, hands the file's bytes to
//! the caller, and at the end checks the BLAKE3 trailer against the bytes it
//! handed over. Where the bytes go (a `.part` file, memory) is the caller's.

use crate::manifest::{Manifest, ManifestError, MAX_MANIFEST_BYTES, TRAILER_LEN};
use thiserror::Error;

/// Why a file stream was refused.
#[derive(Debug, Error)]
pub enum IntakeError {
    /// The manifest is malformed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// No complete manifest within [`MAX_MANIFEST_BYTES`].
    #[error("no complete manifest within the stream's first {MAX_MANIFEST_BYTES} bytes")]
    ManifestTooLong,
    /// More bytes than the file and its hash.
    #[error("the sender sent more than the file and its hash")]
    TooMuch,
    /// The stream ended before the manifest.
    #[error("the stream ended before the file's manifest")]
    NoManifest,
    /// The stream ended early, or the hash does not match the bytes.
    #[error("BLAKE3 mismatch or missing: the file is corrupt or incomplete")]
    Mismatch,
    /// The caller's output failed.
    #[error(transparent)]
    Output(#[from] std::io::Error),
}

/// What the intake hands the caller.
#[derive(Debug)]
pub enum Piece<'a> {
    /// The manifest, once complete (the caller opens its output).
    Manifest(&'a Manifest),
    /// The file's next bytes, in order.
    Body(&'a [u8]),
}

/// One incoming file stream.
#[derive(Debug, Default)]
pub struct FileIntake {
    /// Bytes not yet parsed: the manifest's, then the trailer's.
    pending: Vec<u8>,
    manifest: Option<Manifest>,
    hasher: blake3::Hasher,
    body_done: u64,
}

impl FileIntake {
    /// A stream that has not started.
    pub fn new() -> Self {
        Self::default()
    }

    /// The manifest, once parsed.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// File bytes handed over so far.
    pub fn body_done(&self) -> u64 {
        self.body_done
    }

    /// Takes the stream's next bytes, handing the manifest (once) and the
    /// file's bytes to `out`.
    pub fn consume(
        &mut self,
        mut data: &[u8],
        out: &mut impl FnMut(Piece<'_>) -> std::io::Result<()>,
    ) -> Result<(), IntakeError> {
        if self.manifest.is_none() {
            self.pending.extend_from_slice(data);
            let Some((m, used)) = Manifest::decode(&self.pending)? else {
                if self.pending.len() >= MAX_MANIFEST_BYTES {
                    return Err(IntakeError::ManifestTooLong);
                }
                return Ok(());
            };
            out(Piece::Manifest(&m))?;
            let rest = self.pending.split_off(used);
            self.pending.clear();
            self.manifest = Some(m);
            return self.consume(&rest, out);
        }
        let size = self.manifest.as_ref().map_or(0, |m| m.size);
        let left = usize::try_from(size - self.body_done).unwrap_or(usize::MAX);
        let body = &data[..data.len().min(left)];
        if !body.is_empty() {
            self.hasher.update(body);
            out(Piece::Body(body))?;
            self.body_done += body.len() as u64;
            data = &data[body.len()..];
        }
        self.pending.extend_from_slice(data);
        if self.pending.len() > TRAILER_LEN {
            return Err(IntakeError::TooMuch);
        }
        Ok(())
    }

    /// At the end of the stream: the file's BLAKE3 hash if every byte and
    /// a matching trailer arrived.
    pub fn finish(&self) -> Result<[u8; 32], IntakeError> {
        let m = self.manifest.as_ref().ok_or(IntakeError::NoManifest)?;
        let hash = *self.hasher.finalize().as_bytes();
        if self.body_done != m.size || self.pending[..] != hash[..] {
            return Err(IntakeError::Mismatch);
        }
        Ok(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileFeed, MemorySink};

    fn stream(body: &[u8]) -> Vec<u8> {
        let m = Manifest::file("x.bin", body.len() as u64);
        let mut sink = MemorySink {
            room: usize::MAX,
            ..MemorySink::default()
        };
        FileFeed::new(body, m).feed(&mut sink);
        assert!(sink.finished);
        sink.got
    }

    fn take(s: &[u8], step: usize) -> (FileIntake, Vec<u8>, Result<[u8; 32], IntakeError>) {
        let mut intake = FileIntake::new();
        let mut got = Vec::new();
        let mut out = |p: Piece<'_>| {
            if let Piece::Body(b) = p {
                got.extend_from_slice(b);
            }
            Ok(())
        };
        for c in s.chunks(step) {
            if let Err(e) = intake.consume(c, &mut out) {
                return (intake, got, Err(e));
            }
        }
        let end = intake.finish();
        (intake, got, end)
    }

    #[test]
    fn a_feed_s_stream_arrives_whole_in_any_pieces() {
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 31) as u8).collect();
        let s = stream(&body);
        for step in [1, 7, 1000, s.len()] {
            let (intake, got, end) = take(&s, step);
            assert_eq!(got, body, "step {step}");
            assert_eq!(end.unwrap(), *blake3::hash(&body).as_bytes());
            assert_eq!(intake.manifest().unwrap().name, "x.bin");
        }
    }

    #[test]
    fn corruption_truncation_and_excess_are_refused() {
        let body = vec![9u8; 5000];
        let mut s = stream(&body);
        let n = s.len();
        s[n - 40] ^= 1; // a body byte
        assert!(matches!(take(&s, 100).2, Err(IntakeError::Mismatch)));
        let s = stream(&body);
        assert!(matches!(
            take(&s[..n - 1], 100).2,
            Err(IntakeError::Mismatch)
        ));
        let mut long = s.clone();
        long.push(0);
        assert!(matches!(take(&long, 100).2, Err(IntakeError::TooMuch)));
        assert!(matches!(take(b"", 1).2, Err(IntakeError::NoManifest)));
        assert!(matches!(
            take(b"GARBAGE-GARBAGE-GARBAGE", 3).2,
            Err(IntakeError::Manifest(ManifestError::NotFileProtocol))
        ));
    }
}
