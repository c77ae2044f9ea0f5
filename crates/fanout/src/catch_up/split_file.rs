//! A late joiner's output: the session stream arrives in two parts — the
//! missed prefix `[0, start)` from the catch-up transfer and the live part
//! `[start, end)` from the session — and each byte is written at its place
//! in the `.part` files ([`OutputTree`]). Once both parts are complete the
//! body is hashed back from disk (BLAKE3) and moved into place only if it
//! matches the trailer.

use crate::resume::{RecordKeeper, ResumeRecord};
use anyhow::{bail, ensure, Context, Result};
use fanout_app::{Manifest, MAX_MANIFEST_BYTES, TRAILER_LEN};
use fanout_io::{Existing, OutputTree};
use std::path::{Path, PathBuf};

/// The file being assembled from a prefix and a live part.
pub struct SplitFile {
    output: PathBuf,
    /// Where the live part starts (the member's start offset).
    start: u64,
    /// Stream bytes `[0, head.len())` while the manifest is not parsed yet.
    head: Vec<u8>,
    existing: Existing,
    manifest: Option<(Manifest, u64)>,
    target: Option<OutputTree>,
    trailer: [u8; TRAILER_LEN],
    prefix_pos: u64,
    live_pos: u64,
    body_written: u64,
}

impl SplitFile {
    /// Output for a member whose live part starts at `start`; `output` is a
    /// file path or a directory, as for `fanout recv -o`; an existing file
    /// there is handled as `existing` says ([`OutputTree`]).
    pub fn new(output: PathBuf, start: u64, existing: Existing) -> Self {
        SplitFile {
            output,
            start,
            head: Vec::new(),
            existing,
            manifest: None,
            target: None,
            trailer: [0; TRAILER_LEN],
            prefix_pos: 0,
            live_pos: start,
            body_written: 0,
        }
    }

    /// Output for a member whose live part starts at `start`, taking over
    /// what an earlier attempt at this session wrote (`record`): the
    /// manifest is known, and the prefix is wanted only from what the kept
    /// `.part` files hold on ([`SplitFile::prefix_pos`]).
    pub fn resume(
        output: &Path,
        start: u64,
        existing: Existing,
        record: &ResumeRecord,
    ) -> Result<Self> {
        let m = record.manifest.clone();
        let hlen = m.encode().len() as u64;
        let target = OutputTree::resume(output, &m, existing, record.held, record.created.clone())?;
        let mut out = SplitFile::new(output.to_path_buf(), start, existing);
        out.prefix_pos = (hlen + record.held).min(start);
        out.body_written = record.held;
        out.manifest = Some((m, hlen));
        out.target = Some(target);
        Ok(out)
    }

    /// The next prefix byte wanted (0, or where a resumed output's kept
    /// bytes end; at most the live part's start).
    pub fn prefix_pos(&self) -> u64 {
        self.prefix_pos
    }

    /// Keeps the `.part` files for a later attempt, with `keeper`'s record
    /// of how much they hold; discards them if that cannot be.
    pub fn keep(&mut self, keeper: &mut RecordKeeper) {
        let (Some((m, _)), Some(t)) = (&self.manifest, self.target.as_mut()) else {
            return;
        };
        if keeper.is_kept() && t.keep().is_ok() {
            keeper.save(m, t);
        } else {
            self.abandon();
            keeper.remove();
        }
    }

    /// Records how much the output holds, now and then.
    pub fn record(&self, keeper: &mut RecordKeeper, now: fanout_core::time::Instant) {
        if let (Some((m, _)), Some(t)) = (&self.manifest, self.target.as_ref()) {
            keeper.update(now, m, t);
        }
    }

    /// The manifest, once parsed.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref().map(|(m, _)| m)
    }

    /// Where the files go, once the manifest named them.
    pub fn target(&self) -> Option<&OutputTree> {
        self.target.as_ref()
    }

    /// File bytes written so far (both parts).
    pub fn body_written(&self) -> u64 {
        self.body_written
    }

    /// True once the whole prefix `[0, start)` arrived.
    pub fn prefix_complete(&self) -> bool {
        self.prefix_pos == self.start
    }

    /// True when live bytes may be taken: the manifest is known, or the
    /// whole prefix is in and the manifest needs live bytes to complete.
    /// (Until then live bytes stay in the session receiver, whose window
    /// holds them — the prefix's first datagram carries the manifest.)
    pub fn wants_live(&self) -> bool {
        self.manifest.is_some() || self.prefix_pos == self.start
    }

    /// The next prefix bytes (the catch-up stream, in order from 0).
    pub fn put_prefix(&mut self, data: &[u8]) -> Result<()> {
        let off = self.prefix_pos;
        ensure!(
            off + data.len() as u64 <= self.start,
            "the catch-up sent more than the missed prefix"
        );
        self.prefix_pos += data.len() as u64;
        self.put(off, data)
    }

    /// The next live bytes (the session stream, in order from `start`).
    pub fn put_live(&mut self, data: &[u8]) -> Result<()> {
        let off = self.live_pos;
        self.live_pos += data.len() as u64;
        self.put(off, data)
    }

    fn put(&mut self, off: u64, data: &[u8]) -> Result<()> {
        if self.manifest.is_some() {
            return self.place(off, data);
        }
        ensure!(
            off == self.head.len() as u64,
            "stream head out of order (at {off}, have {})",
            self.head.len()
        );
        self.head.extend_from_slice(data);
        let Some((m, used)) = Manifest::decode(&self.head)? else {
            ensure!(self.head.len() < MAX_MANIFEST_BYTES, "manifest too long");
            return Ok(());
        };
        self.target = Some(OutputTree::create(&self.output, &m, self.existing)?);
        self.manifest = Some((m, used as u64));
        let rest = self.head.split_off(used);
        self.head = Vec::new();
        self.place(used as u64, &rest)
    }

    /// Writes stream bytes `[off, off + len)` where they belong.
    fn place(&mut self, off: u64, data: &[u8]) -> Result<()> {
        let Some((m, hlen)) = &self.manifest else {
            bail!("no manifest");
        };
        let body = *hlen..*hlen + m.size;
        let trailer = body.end..body.end + TRAILER_LEN as u64;
        let end = off + data.len() as u64;
        ensure!(
            end <= trailer.end,
            "the sender sent more than the file and its hash"
        );
        let (a, b) = (off.max(body.start), end.min(body.end));
        if a < b {
            let t = self.target.as_mut().context("no output")?;
            t.write_at(
                a - body.start,
                &data[(a - off) as usize..(b - off) as usize],
            )
            .context("write error")?;
            self.body_written += b - a;
        }
        let (a, b) = (off.max(trailer.start), end.min(trailer.end));
        if a < b {
            self.trailer[(a - trailer.start) as usize..(b - trailer.start) as usize]
                .copy_from_slice(&data[(a - off) as usize..(b - off) as usize]);
        }
        Ok(())
    }

    /// Checks that both parts are complete (`stream_len` is the session's
    /// end of stream), hashes the file back from disk and renames it into
    /// place if the hash matches the trailer. Returns the hash, hex.
    pub fn complete(&mut self, stream_len: Option<u64>) -> Result<String> {
        let (m, hlen) = self
            .manifest
            .clone()
            .context("the stream ended before the file's manifest")?;
        let total = hlen + m.size + TRAILER_LEN as u64;
        ensure!(
            self.prefix_pos == self.start,
            "missed prefix incomplete: {} of {} bytes",
            self.prefix_pos,
            self.start
        );
        ensure!(
            stream_len == Some(total) && self.live_pos == total,
            "session stream incomplete or of the wrong length ({} of {total} bytes)",
            self.live_pos
        );
        let target = self.target.as_mut().context("no output")?;
        target.sync_all().context("fsync")?;
        let hash = target.hash_parts().context("cannot read the output back")?;
        if hash.as_bytes()[..] != self.trailer[..] {
            target.discard();
            bail!("BLAKE3 mismatch: {} discarded", target.path().display());
        }
        target
            .commit()
            .context("cannot move the files into place")?;
        Ok(hash.to_hex().to_string())
    }

    /// Removes the `.part` file (after a failure).
    pub fn abandon(&mut self) {
        if let Some(target) = &mut self.target {
            target.discard();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(data: &[u8], name: &str) -> Vec<u8> {
        let mut s = Manifest::file(name, data.len() as u64).encode();
        s.extend_from_slice(data);
        s.extend_from_slice(blake3::hash(data).as_bytes());
        s
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fanout-split-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn interleaved_prefix_and_live_parts_make_the_file() {
        let mut data = vec![0u8; 300_000];
        fanout_core::Rng::new(9).fill(&mut data);
        let s = stream(&data, "f.bin");
        // Starts inside the manifest, in the body, and inside the trailer.
        for start in [5usize, 20, 150_000, s.len() - 10] {
            let d = dir(&format!("ok{start}"));
            let mut out = SplitFile::new(d.clone(), start as u64, Existing::Refuse);
            let (prefix, live) = s.split_at(start);
            let mut p = prefix.chunks(7_777);
            let mut l = live.chunks(10_000);
            loop {
                let mut progressed = false;
                if let Some(c) = p.next() {
                    out.put_prefix(c).unwrap();
                    progressed = true;
                }
                if out.wants_live() {
                    if let Some(c) = l.next() {
                        out.put_live(c).unwrap();
                        progressed = true;
                    }
                }
                if !progressed {
                    break;
                }
            }
            let hex = out.complete(Some(s.len() as u64)).unwrap();
            assert_eq!(hex, blake3::hash(&data).to_hex().to_string());
            assert!(
                std::fs::read(d.join("f.bin")).unwrap() == data,
                "start {start}"
            );
            assert!(!d.join("f.bin.part").exists());
            let _ = std::fs::remove_dir_all(&d);
        }
    }

    #[test]
    fn a_corrupt_or_short_stream_never_looks_complete() {
        let data = vec![7u8; 50_000];
        let mut s = stream(&data, "g.bin");
        let d = dir("bad");
        let mut out = SplitFile::new(d.clone(), 1000, Existing::Refuse);
        out.put_prefix(&s[..1000]).unwrap();
        s[20_000] ^= 1; // corrupt one live byte
        out.put_live(&s[1000..]).unwrap();
        assert!(out.complete(Some(s.len() as u64)).is_err());
        assert!(!d.join("g.bin").exists() && !d.join("g.bin.part").exists());
        let mut out = SplitFile::new(d.clone(), 1000, Existing::Refuse);
        out.put_prefix(&s[..999]).unwrap();
        out.put_live(&s[1000..]).unwrap();
        assert!(out.complete(Some(s.len() as u64)).is_err(), "prefix short");
        out.abandon();
        assert!(!d.join("g.bin.part").exists());
        let mut out = SplitFile::new(d.clone(), 1000, Existing::Refuse);
        assert!(out.put_prefix(&s[..1001]).is_err(), "prefix too long");
        let mut out = SplitFile::new(d.clone(), 1000, Existing::Refuse);
        out.put_prefix(&s[..1000]).unwrap();
        let mut long = s[1000..].to_vec();
        long.push(0);
        assert!(out.put_live(&long).is_err(), "more than file and hash");
        out.abandon();
        let _ = std::fs::remove_dir_all(&d);
    }
}
