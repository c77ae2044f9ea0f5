//! Resuming a receiver's transfer after it was stopped or killed: while
//! it writes, a receiver keeps a small record next to its output — the
//! session, the manifest and how many body bytes its `.part` files hold
//! from the start. A receiver that joins the same session again (a
//! restarted `fanout recv` or service) finds the record, takes the
//! `.part` files over and fetches only the bytes it lacks: the live part
//! from the session, the gap by catch-up from where its files end
//! (`fanout_app::catch_up`). The final BLAKE3 check covers the resumed
//! bytes as any others.
//!
//! The record lags what is on disk by at most [`SAVE_EVERY`] of data plus
//! one coalesced write ([`fanout_io::OutputTree`]); it is written whole
//! and renamed into place, so a kill never leaves half a record.
//!
//! The sender would wait for the old member until its stall timeout
//! evicts it, holding the whole session back. So the record also keeps
//! the old member's local port and token (unprotected sessions, members
//! of the sender itself): the new process sends, from that port if it is
//! free (the old process is gone), the RESET the old one would have sent
//! ([`retire_old_member`]), and the sender lets it go at once.

use anyhow::{Context, Result};
use fanout_app::Manifest;
use fanout_core::time::Instant;
use fanout_io::OutputTree;
use fanout_transport::wire::{CloseFrame, Frame};
use fanout_transport::{PacketBuilder, PacketNumbers, Receiver};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Least time between two saves of the record while bytes arrive.
pub const SAVE_EVERY: Duration = Duration::from_millis(100);
/// The record format's version.
const VERSION: u32 = 1;

/// What a receiver leaves behind to resume a session's transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRecord {
    /// The session's id.
    pub session: u64,
    /// The manifest it sent.
    pub manifest: Manifest,
    /// Body bytes `[0, held)` in the `.part` files.
    pub held: u64,
    /// Directories the transfer created.
    pub created: Vec<PathBuf>,
    /// The member that wrote it: its local port and token.
    pub member: Option<(u16, u64)>,
}

/// What a record says that never changes during a transfer (JSON, written
/// once: a tree's manifest may be megabytes).
#[derive(Serialize, Deserialize)]
struct Fixed {
    version: u32,
    session: String,
    manifest: String,
    created: Vec<PathBuf>,
    member: Option<(u16, String)>,
}

/// What a record says that grows (JSON, rewritten as the output grows),
/// and the BLAKE3 of the fixed part's file it goes with.
#[derive(Serialize, Deserialize)]
struct Progress {
    version: u32,
    session: String,
    held: u64,
    fixed: String,
}

/// Where the record of `session` for output path `output` is: in the
/// output directory (a file path's directory), hidden.
pub fn record_path(output: &Path, session: u64) -> PathBuf {
    let dir = if output.is_dir() {
        output.to_path_buf()
    } else {
        match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    };
    dir.join(format!(".fanout-resume-{session:016x}.json"))
}

/// Where the fixed part of that record is: next to it.
fn fixed_path(output: &Path, session: u64) -> PathBuf {
    record_path(output, session).with_extension("fixed.json")
}

/// Writes `bytes` to `path` whole, then renames it into place.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .with_context(|| format!("cannot write {}", path.display()))
}

impl ResumeRecord {
    /// The record of `session` at `output`, if one is there and sound (a
    /// damaged one is ignored, with a warning).
    pub fn load(output: &Path, session: u64) -> Option<ResumeRecord> {
        let path = record_path(output, session);
        let text = std::fs::read(&path).ok()?;
        let parsed = (|| -> Result<ResumeRecord> {
            let p: Progress = serde_json::from_slice(&text)?;
            anyhow::ensure!(p.version == VERSION, "version {}", p.version);
            let fixed_bytes = std::fs::read(fixed_path(output, session))?;
            anyhow::ensure!(
                blake3::hash(&fixed_bytes).to_hex().as_str() == p.fixed,
                "its two parts do not match"
            );
            let f: Fixed = serde_json::from_slice(&fixed_bytes)?;
            anyhow::ensure!(f.session == p.session, "its two parts name two sessions");
            let bytes = hex::decode(&f.manifest)?;
            let (manifest, used) = Manifest::decode(&bytes)?.context("manifest cut short")?;
            anyhow::ensure!(used == bytes.len(), "bytes after the manifest");
            anyhow::ensure!(p.held <= manifest.size, "holds more than the body");
            let member = match f.member {
                Some((port, token)) => Some((port, u64::from_str_radix(&token, 16)?)),
                None => None,
            };
            Ok(ResumeRecord {
                session: u64::from_str_radix(&p.session, 16)?,
                manifest,
                held: p.held,
                created: f.created,
                member,
            })
        })();
        match parsed {
            Ok(r) if r.session == session => Some(r),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring a damaged resume record: {e}");
                None
            }
        }
    }

    /// Writes the record for `output`, both parts (each whole, then
    /// renamed into place); returns the fixed part's hash, for
    /// [`ResumeRecord::save_progress`].
    pub fn save(&self, output: &Path) -> Result<String> {
        let fixed = Fixed {
            version: VERSION,
            session: format!("{:016x}", self.session),
            manifest: hex::encode(self.manifest.encode()),
            created: self.created.clone(),
            member: self
                .member
                .map(|(port, token)| (port, format!("{token:016x}"))),
        };
        let bytes = serde_json::to_vec(&fixed)?;
        write_whole(&fixed_path(output, self.session), &bytes)?;
        let hash = blake3::hash(&bytes).to_hex().to_string();
        self.save_progress(output, &hash)?;
        Ok(hash)
    }

    /// Writes only how much the output holds, the fixed part (of hash
    /// `fixed`) being written already.
    pub fn save_progress(&self, output: &Path, fixed: &str) -> Result<()> {
        let progress = Progress {
            version: VERSION,
            session: format!("{:016x}", self.session),
            held: self.held,
            fixed: fixed.to_owned(),
        };
        let path = record_path(output, self.session);
        write_whole(&path, &serde_json::to_vec(&progress)?)
    }

    /// Removes the record of `session` at `output`, if any.
    pub fn remove(output: &Path, session: u64) {
        let _ = std::fs::remove_file(record_path(output, session));
        let _ = std::fs::remove_file(fixed_path(output, session));
    }
}

/// Keeps a transfer's record up to date as its output grows.
pub struct RecordKeeper {
    output: PathBuf,
    session: Option<u64>,
    member: Option<(u16, u64)>,
    saved_held: Option<u64>,
    /// The hash of the fixed part, once written.
    fixed: Option<String>,
    next_save: Option<Instant>,
}

impl RecordKeeper {
    /// A keeper for the output at `output` of `session` (if known; the
    /// record is kept only for a session with an id).
    pub fn new(output: &Path, session: Option<u64>) -> Self {
        RecordKeeper {
            output: output.to_path_buf(),
            session,
            member: None,
            saved_held: None,
            fixed: None,
            next_save: None,
        }
    }

    /// Names the member writing: `receiver`, on local port `port`, if it
    /// can be retired by a restarted process (a member of the sender
    /// itself, in an unprotected session).
    pub fn set_member(&mut self, receiver: &Receiver, port: u16, unprotected: bool) {
        let direct = receiver.catch_up_credential() == Some(receiver.token());
        self.member = (unprotected && direct).then(|| (port, receiver.token()));
    }

    /// True if a record is kept (the transfer is a session's, which a
    /// receiver can join again).
    pub fn is_kept(&self) -> bool {
        self.session.is_some()
    }

    /// Saves the record if the output grew and [`SAVE_EVERY`] passed.
    pub fn update(&mut self, now: Instant, manifest: &Manifest, tree: &OutputTree) {
        if self.next_save.is_some_and(|t| now < t) {
            return;
        }
        self.next_save = Some(now + SAVE_EVERY);
        self.save(manifest, tree);
    }

    /// Saves the record now if the output grew since the last save.
    pub fn save(&mut self, manifest: &Manifest, tree: &OutputTree) {
        let Some(session) = self.session else {
            return;
        };
        let held = tree.contiguous();
        if self.saved_held == Some(held) {
            return;
        }
        let record = ResumeRecord {
            session,
            manifest: manifest.clone(),
            held,
            created: tree.created(),
            member: self.member,
        };
        let saved = match &self.fixed {
            Some(fixed) => record.save_progress(&self.output, fixed),
            None => record
                .save(&self.output)
                .map(|hash| self.fixed = Some(hash)),
        };
        match saved {
            Ok(()) => self.saved_held = Some(held),
            // Without a record the transfer still completes; a restart
            // then starts over.
            Err(e) => tracing::warn!("{e:#}"),
        }
    }

    /// Removes the record (the transfer completed, or what it wrote was
    /// discarded).
    pub fn remove(&self) {
        if let Some(session) = self.session {
            ResumeRecord::remove(&self.output, session);
        }
    }
}

/// Sends, from local port `port` (on `interface`, else any address of
/// the sender's family), the RESET with which the member whose token is
/// `token` would have left: "restarted". Does nothing if the port is in
/// use (the old process may still run) or the datagram cannot go.
pub fn retire_old_member(
    sender: SocketAddr,
    interface: Option<Ipv4Addr>,
    (port, token): (u16, u64),
) {
    let ip: IpAddr = match (sender, interface) {
        (SocketAddr::V4(_), Some(ip)) => ip.into(),
        (SocketAddr::V4(_), None) => Ipv4Addr::UNSPECIFIED.into(),
        (SocketAddr::V6(_), _) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let Ok(socket) = UdpSocket::bind((ip, port)) else {
        return;
    };
    let mut datagram = Vec::new();
    let mut p = PacketBuilder::new(&mut datagram, &mut PacketNumbers::default(), token, false);
    p.frame(&Frame::Reset(CloseFrame {
        code: crate::outcome::reset_code::RESTARTED,
        reason: "restarted; resuming as a new member",
    }));
    p.finish();
    // Twice: one loss should not leave the session waiting for it.
    for _ in 0..2 {
        let _ = socket.send_to(&datagram, sender);
    }
    tracing::info!(%sender, port, "told the sender the old member restarted");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_damaged_one_is_ignored() {
        let dir = std::env::temp_dir().join(format!("fanout-resume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let r = ResumeRecord {
            session: 0xdead_beef_0000_0001,
            manifest: Manifest::file("a.bin", 1000),
            held: 400,
            created: vec![dir.join("d")],
            member: Some((40_000, u64::MAX - 1)),
        };
        r.save(&dir).unwrap();
        assert_eq!(ResumeRecord::load(&dir, r.session), Some(r.clone()));
        assert_eq!(ResumeRecord::load(&dir, 7), None, "another session");
        // A file output path keeps its record in its directory.
        assert_eq!(
            ResumeRecord::load(&dir.join("a.bin"), r.session),
            Some(r.clone())
        );
        // Progress written again: still the same record, with the new figure.
        let more = ResumeRecord {
            held: 900,
            ..r.clone()
        };
        more.save_progress(&dir, &r.save(&dir).unwrap()).unwrap();
        assert_eq!(ResumeRecord::load(&dir, r.session), Some(more));
        // A fixed part that is not the one the progress names, or damage.
        let other = ResumeRecord {
            created: vec![],
            ..r.clone()
        };
        let hash = r.save(&dir).unwrap();
        other.save(&dir).unwrap();
        r.save_progress(&dir, &hash).unwrap();
        assert_eq!(ResumeRecord::load(&dir, r.session), None);
        std::fs::write(record_path(&dir, r.session), b"{\"version\": 1}").unwrap();
        assert_eq!(ResumeRecord::load(&dir, r.session), None);
        ResumeRecord::remove(&dir, r.session);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "both parts removed"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
