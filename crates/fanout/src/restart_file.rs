//! A session sender's restart file (`send --restart-file FILE`): the
//! session's id, its manifest and how far every receiver acknowledged,
//! rewritten about every second while it runs and removed once the
//! session met `--require`. A sender started again with the same file
//! and the same files resumes that session: the same id (so receivers
//! find their resume records, `crate::resume`), its stream started where
//! every receiver had acknowledged — they fetch the gap to what their
//! `.part` files hold by catch-up, and receivers new to it the whole
//! prefix.

use anyhow::{Context, Result};
use fanout_app::Manifest;
use fanout_core::time::Instant;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Least time between two saves while the session runs.
const SAVE_EVERY: Duration = Duration::from_secs(1);
/// The file format's version.
const VERSION: u32 = 1;

/// The file as stored (JSON).
#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    session: String,
    manifest: String,
    acked: u64,
}

/// A session sender's restart file, kept up to date.
pub struct RestartFile {
    path: PathBuf,
    /// The session's id.
    pub session: u64,
    manifest: String,
    acked: u64,
    next_save: Option<Instant>,
}

impl RestartFile {
    /// Opens `path` for a session of `manifest`: if it names this manifest
    /// and its receivers acknowledged part of the body, the session to
    /// resume and the stream offset to resume at; otherwise a new session
    /// (id `fresh`), recorded in the file at once.
    pub fn open(
        path: &Path,
        manifest: &Manifest,
        fresh: u64,
    ) -> Result<(RestartFile, Option<u64>)> {
        let hex = hex::encode(manifest.encode());
        let found = match std::fs::read(path) {
            Ok(bytes) => Some(
                serde_json::from_slice::<Stored>(&bytes)
                    .ok()
                    .filter(|s| s.version == VERSION)
                    .with_context(|| format!("{} is not a fanout restart file", path.display()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let header = manifest.encode().len() as u64;
        let resume = match found {
            Some(s) if s.manifest == hex => {
                let session = u64::from_str_radix(&s.session, 16)
                    .with_context(|| format!("{}: bad session id", path.display()))?;
                let body_end = header + manifest.size;
                let at = (s.acked > header).then_some(s.acked.min(body_end));
                Some((session, at))
            }
            Some(_) => anyhow::bail!(
                "{} belongs to a session of other files (or files that changed); \
                 remove it to start a new session",
                path.display()
            ),
            None => None,
        };
        let (session, at) = resume.unwrap_or((fresh, None));
        let file = RestartFile {
            path: path.to_path_buf(),
            session,
            manifest: hex,
            acked: at.unwrap_or(0),
            next_save: None,
        };
        file.write()?;
        Ok((file, at))
    }

    /// Records that every receiver acknowledged `acked` stream bytes
    /// (saved about every second).
    pub fn update(&mut self, now: Instant, acked: u64) {
        if acked <= self.acked || self.next_save.is_some_and(|t| now < t) {
            return;
        }
        self.acked = acked;
        self.next_save = Some(now + SAVE_EVERY);
        if let Err(e) = self.write() {
            tracing::warn!("{e:#}");
        }
    }

    fn write(&self) -> Result<()> {
        let stored = Stored {
            version: VERSION,
            session: format!("{:016x}", self.session),
            manifest: self.manifest.clone(),
            acked: self.acked,
        };
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&stored)?)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Removes the file: the session is done.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_file_resumes_its_own_session_only() {
        let dir = std::env::temp_dir().join(format!("fanout-restart-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("send.restart");
        let m = Manifest::file("a.bin", 10_000);
        let (mut f, at) = RestartFile::open(&path, &m, 7).unwrap();
        assert_eq!((f.session, at), (7, None), "new");
        // Nothing past the manifest acknowledged: a new start, same id.
        let (_, at) = RestartFile::open(&path, &m, 8).unwrap();
        assert_eq!(at, None);
        f.update(Instant::ZERO, 4_000);
        let (g, at) = RestartFile::open(&path, &m, 9).unwrap();
        assert_eq!((g.session, at), (7, Some(4_000)));
        // Other files: refused, the file kept.
        let other = Manifest::file("a.bin", 10_001);
        assert!(RestartFile::open(&path, &other, 9).is_err());
        g.remove();
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
