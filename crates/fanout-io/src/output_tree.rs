//! Where a session's files land: one file ([`OutputFile`]) or a tree of
//! them under the output directory, each written into its `.part` and
//! moved into place only once the whole body is verified.
//!
//! The body's bytes are written at their offsets (in order for a plain
//! receiver; in two parts for a late joiner), coalesced into writes of up
//! to [`WRITE_BYTES`]. A tree's directories are created as the manifest
//! lists them, never through a symbolic link; its files keep their
//! permission bits (never set-id). At most [`OPEN_FILES`] files are open
//! at once, whatever the tree's size.

use crate::output_file::free_bytes;
use crate::{Existing, OutputFile};
use fanout_app::Manifest;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Largest coalesced write, bytes.
pub const WRITE_BYTES: usize = 1 << 20;
/// Most `.part` files held open at once.
pub const OPEN_FILES: usize = 8;

/// One file of the body.
#[derive(Debug)]
struct Slot {
    target: OutputFile,
    /// Its first byte's body offset.
    start: u64,
    size: u64,
    mode: Option<u16>,
}

/// A session's output, being written.
#[derive(Debug)]
pub struct OutputTree {
    /// The output path asked for (a file path or a directory).
    output: PathBuf,
    /// Several files or directories (manifest version 2).
    is_tree: bool,
    slots: Vec<Slot>,
    /// Directories this transfer created, parents first, with the modes
    /// to give them at the end.
    created: Vec<(PathBuf, Option<u16>)>,
    /// Open `.part` files by slot, most recently used last.
    open: Vec<(usize, File)>,
    pending: Vec<u8>,
    pending_at: u64,
    /// Body bytes `[0, contiguous)` written to the files (not only buffered).
    contiguous: u64,
}

impl OutputTree {
    /// Prepares the output of `manifest` at `output` (a file path or a
    /// directory for a single file; a directory for a tree) and creates
    /// every `.part`. Fails, leaving nothing behind, if a target exists
    /// (unless [`Existing::Replace`]), a directory of the tree is in the
    /// way or a symbolic link, or the file system has less room than the
    /// body.
    pub fn create(output: &Path, manifest: &Manifest, existing: Existing) -> io::Result<Self> {
        let mut tree = OutputTree {
            output: output.to_path_buf(),
            is_tree: manifest.is_tree(),
            slots: Vec::new(),
            created: Vec::new(),
            open: Vec::new(),
            pending: Vec::new(),
            pending_at: 0,
            contiguous: 0,
        };
        if let Err(e) = tree.prepare(manifest, existing) {
            tree.discard();
            return Err(e);
        }
        Ok(tree)
    }

    /// Takes over the output an earlier attempt at `manifest` left at
    /// `output`: its `.part` files hold body bytes `[0, held)`; `created`
    /// are the directories that attempt created. Files past `held` get a
    /// new `.part`. Fails as [`OutputFile::resume`] does, or if a directory
    /// of the tree is not there.
    pub fn resume(
        output: &Path,
        manifest: &Manifest,
        existing: Existing,
        held: u64,
        created: Vec<PathBuf>,
    ) -> io::Result<Self> {
        let is_tree = manifest.is_tree();
        if is_tree {
            for e in manifest.entries.iter().filter(|e| is_dir(e)) {
                let path = output.join(&e.path);
                if !path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("cannot resume: {} is not a directory", path.display()),
                    ));
                }
            }
        }
        let modes: Vec<(PathBuf, Option<u16>)> = manifest
            .entries
            .iter()
            .filter(|e| is_dir(e))
            .map(|e| (output.join(&e.path), Some(e.mode)))
            .filter(|(p, _)| created.contains(p))
            .collect();
        let mut slots = Vec::new();
        for f in manifest.files() {
            let (dir, name) = match (is_tree, f.path.rsplit_once('/')) {
                (true, Some((dir, name))) => (output.join(dir), name),
                (_, _) => (output.to_path_buf(), f.path),
            };
            let target = if f.start < held || (f.start == held && f.size == 0) {
                OutputFile::resume(&dir, name, (held - f.start).min(f.size), existing)?
            } else {
                OutputFile::create(&dir, name, f.size, existing)?.0
            };
            slots.push(Slot {
                target,
                start: f.start,
                size: f.size,
                mode: f.mode,
            });
        }
        Ok(OutputTree {
            output: output.to_path_buf(),
            is_tree,
            slots,
            created: modes,
            open: Vec::new(),
            pending: Vec::new(),
            pending_at: 0,
            contiguous: held,
        })
    }

    fn prepare(&mut self, manifest: &Manifest, existing: Existing) -> io::Result<()> {
        if !manifest.is_tree() {
            let (target, file) =
                OutputFile::create(&self.output, &manifest.name, manifest.size, existing)?;
            self.slots.push(Slot {
                target,
                start: 0,
                size: manifest.size,
                mode: None,
            });
            self.open.push((0, file));
            return Ok(());
        }
        if !self.output.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the sender sends {} ({}); the output {} must be a directory",
                    manifest.name,
                    files_label(manifest),
                    self.output.display()
                ),
            ));
        }
        let free = free_bytes(&self.output)?;
        if manifest.size > free {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "{} needs {} bytes; {} has {free} free",
                    manifest.name,
                    manifest.size,
                    self.output.display()
                ),
            ));
        }
        for e in manifest.entries.iter().filter(|e| is_dir(e)) {
            self.make_dir(&e.path, e.mode)?;
        }
        for f in manifest.files() {
            let (dir, name) = match f.path.rsplit_once('/') {
                Some((dir, name)) => (self.output.join(dir), name),
                None => (self.output.clone(), f.path),
            };
            let (target, _) = OutputFile::create(&dir, name, f.size, existing)?;
            self.slots.push(Slot {
                target,
                start: f.start,
                size: f.size,
                mode: f.mode,
            });
        }
        Ok(())
    }

    /// Creates the tree's directory `rel` (its parent exists already: the
    /// manifest lists parents first), or accepts a real directory there.
    fn make_dir(&mut self, rel: &str, mode: u16) -> io::Result<()> {
        let path = self.output.join(rel);
        match path.symlink_metadata() {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is in the way (not a directory)", path.display()),
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&path)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
                self.created.push((path, Some(mode)));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Where the output is: the file, or the directory holding the tree.
    pub fn path(&self) -> &Path {
        match &self.slots[..] {
            [one] if !self.is_tree => one.target.path(),
            _ => &self.output,
        }
    }

    /// Every file's final path, in body order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.slots
            .iter()
            .map(|s| s.target.path().to_path_buf())
            .collect()
    }

    /// Body bytes `[0, n)` written to the files, as one contiguous run.
    pub fn contiguous(&self) -> u64 {
        self.contiguous
    }

    /// The directories this transfer (or the one it resumes) created.
    pub fn created(&self) -> Vec<PathBuf> {
        self.created.iter().map(|(p, _)| p.clone()).collect()
    }

    /// Writes what is held and closes the files, keeping every `.part`
    /// (and directory) for a later attempt to resume.
    pub fn keep(&mut self) -> io::Result<()> {
        let r = self.flush();
        self.open.clear();
        r
    }

    /// Writes body bytes at body offset `off` (coalesced; [`Self::flush`]
    /// writes what is held).
    pub fn write_at(&mut self, off: u64, data: &[u8]) -> io::Result<()> {
        let end = self.pending_at + self.pending.len() as u64;
        if off == end && self.pending.len() + data.len() <= WRITE_BYTES {
            if self.pending.is_empty() {
                self.pending_at = off;
            }
            self.pending.extend_from_slice(data);
            return Ok(());
        }
        self.flush()?;
        if data.len() >= WRITE_BYTES {
            return self.write_through(off, data);
        }
        self.pending_at = off;
        self.pending.extend_from_slice(data);
        Ok(())
    }

    /// Writes what [`Self::write_at`] holds.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.pending);
        let r = self.write_through(self.pending_at, &data);
        self.pending = data;
        self.pending.clear();
        r
    }

    fn write_through(&mut self, off: u64, data: &[u8]) -> io::Result<()> {
        let end = off + data.len() as u64;
        let mut at = off;
        let mut i = self.slots.partition_point(|s| s.start + s.size <= at);
        while at < end {
            let slot = self.slots.get(i).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "bytes beyond the body")
            })?;
            let (start, size) = (slot.start, slot.size);
            let n = (end.min(start + size) - at) as usize;
            if n > 0 {
                let from = (at - off) as usize;
                self.file(i)?
                    .write_all_at(&data[from..from + n], at - start)?;
                at += n as u64;
            }
            i += 1;
        }
        if off <= self.contiguous {
            self.contiguous = self.contiguous.max(end);
        }
        Ok(())
    }

    /// Slot `i`'s `.part`, opened (never through a link) if it is not.
    fn file(&mut self, i: usize) -> io::Result<&File> {
        if let Some(k) = self.open.iter().position(|(j, _)| *j == i) {
            let entry = self.open.remove(k);
            self.open.push(entry);
        } else {
            let part = self.slots[i].target.part();
            let file = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(part)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", part.display())))?;
            if self.open.len() >= OPEN_FILES {
                self.open.remove(0);
            }
            self.open.push((i, file));
        }
        Ok(&self.open.last().expect("pushed above").1)
    }

    /// Flushes and syncs every file to disk.
    pub fn sync_all(&mut self) -> io::Result<()> {
        self.flush()?;
        self.open.clear();
        for s in &self.slots {
            File::open(s.target.part())?.sync_all()?;
        }
        Ok(())
    }

    /// BLAKE3 of the body, read back from the `.part` files.
    pub fn hash_parts(&mut self) -> io::Result<blake3::Hash> {
        self.flush()?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; WRITE_BYTES];
        for s in &self.slots {
            let part = s.target.part();
            let f = File::open(part)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", part.display())))?;
            let mut r = f.take(s.size);
            loop {
                let n = r.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        Ok(hasher.finalize())
    }

    /// Moves every verified `.part` into place with its mode; then gives
    /// the directories created their modes.
    pub fn commit(&mut self) -> io::Result<()> {
        self.sync_all()?;
        for s in &self.slots {
            if let Some(mode) = s.mode {
                std::fs::set_permissions(
                    s.target.part(),
                    std::fs::Permissions::from_mode(u32::from(mode)),
                )?;
            }
            s.target.commit()?;
        }
        for (dir, mode) in self.created.iter().rev() {
            if let Some(mode) = mode {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(u32::from(*mode)))?;
            }
        }
        Ok(())
    }

    /// Removes every `.part` and the directories this transfer created
    /// (if empty).
    pub fn discard(&mut self) {
        self.pending.clear();
        self.open.clear();
        for s in &self.slots {
            s.target.discard();
        }
        for (dir, _) in self.created.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn is_dir(e: &fanout_app::Entry) -> bool {
    e.kind == fanout_app::EntryKind::Dir
}

/// "N files, M directories" of a tree.
pub fn files_label(m: &Manifest) -> String {
    let files = m.files().len();
    let dirs = m.entries.iter().filter(|e| is_dir(e)).count();
    match (files, dirs) {
        (1, 0) => "1 file".into(),
        (f, 0) => format!("{f} files"),
        (f, d) => format!("{f} files in {d} directories"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fanout_app::{Entry, EntryKind};

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fanout-tree-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn manifest() -> Manifest {
        let e = |p: &str, kind, mode| Entry {
            path: p.into(),
            kind,
            mode,
        };
        Manifest::tree(
            "t",
            vec![
                e("a", EntryKind::File(3), 0o755),
                e("d", EntryKind::Dir, 0o750),
                e("d/empty", EntryKind::File(0), 0o600),
                e("d/b", EntryKind::File(5), 0o644),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_tree_is_written_across_its_files_and_appears_only_on_commit() {
        let d = dir("commit");
        let m = manifest();
        let mut t = OutputTree::create(&d, &m, Existing::Refuse).unwrap();
        assert!(!d.join("a").exists() && d.join("a.part").exists());
        // Out of order, straddling files, coalesced and not.
        t.write_at(5, b"xyz").unwrap();
        t.write_at(0, b"ab").unwrap();
        t.write_at(2, b"c01").unwrap();
        t.write_at(8, b"").unwrap();
        assert_eq!(t.hash_parts().unwrap(), blake3::hash(b"abc01xyz"));
        t.commit().unwrap();
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"abc");
        assert_eq!(std::fs::read(d.join("d/b")).unwrap(), b"01xyz");
        assert_eq!(std::fs::read(d.join("d/empty")).unwrap(), b"");
        let mode = |p: &str| std::fs::metadata(d.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode("a"), mode("d"), mode("d/b")), (0o755, 0o750, 0o644));
        // A second time: the files are there.
        let e = OutputTree::create(&d, &m, Existing::Refuse).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert!(!d.join("a.part").exists(), "nothing left behind");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_tree_never_writes_through_a_link_nor_into_a_file_path() {
        let d = dir("link");
        let elsewhere = dir("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, d.join("d")).unwrap();
        let e = OutputTree::create(&d, &manifest(), Existing::Replace).unwrap_err();
        assert!(e.to_string().contains("in the way"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        assert!(!d.join("a.part").exists());
        let e = OutputTree::create(&d.join("file"), &manifest(), Existing::Refuse).unwrap_err();
        assert!(e.to_string().contains("must be a directory"), "{e}");
        // Discarding removes what it created.
        std::fs::remove_file(d.join("d")).unwrap();
        let mut t = OutputTree::create(&d, &manifest(), Existing::Refuse).unwrap();
        t.write_at(0, b"abc").unwrap();
        t.discard();
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }
}
