//! Where a received file lands, safe against the sender that names it.
//!
//! The sender chooses the file's name (a plain base name, see
//! [`fanout_app::sanitize_name`]) and its size, so the receiving side
//! decides everything else:
//! - an existing file is never replaced unless the user asked for it
//!   ([`Existing::Replace`]), and never by an unverified file;
//! - the bytes go to `NAME.part`, created exclusively (`O_CREAT | O_EXCL`,
//!   which never follows a symbolic link), so a link planted at that name
//!   cannot redirect the write; a stale `NAME.part` of an earlier attempt
//!   (or a link there) is removed first, never opened;
//! - the file system must have room for the announced size before the
//!   transfer starts;
//! - once verified, `NAME.part` becomes `NAME` atomically: by a hard link
//!   that fails if `NAME` appeared meanwhile (or a rename that replaces it,
//!   if asked to).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// What to do when the target file already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Existing {
    /// Refuse the transfer before any byte is written (the default).
    #[default]
    Refuse,
    /// Replace it once the new file is verified.
    Replace,
}

/// A received file's target and its `.part` companion.
#[derive(Debug, Clone)]
pub struct OutputFile {
    path: PathBuf,
    part: PathBuf,
    existing: Existing,
}

/// The target for a file named `name`: inside `output` if it is a
/// directory, else `output` itself; and its `.part` companion.
pub fn target_paths(output: &Path, name: &str) -> (PathBuf, PathBuf) {
    let path = if output.is_dir() {
        output.join(name)
    } else {
        output.to_path_buf()
    };
    let mut part = path.clone().into_os_string();
    part.push(".part");
    (path, part.into())
}

impl OutputFile {
    /// Prepares the target of a file named `name` of `size` bytes under
    /// `output` ([`target_paths`]) and creates its `.part`, opened for
    /// writing. Fails, writing nothing, if the target exists (unless
    /// [`Existing::Replace`]), if the file system has fewer than `size`
    /// bytes free, or if `.part` cannot be created exclusively.
    pub fn create(
        output: &Path,
        name: &str,
        size: u64,
        existing: Existing,
    ) -> io::Result<(OutputFile, File)> {
        let (path, part) = target_paths(output, name);
        if existing == Existing::Refuse && path.symlink_metadata().is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists; refusing to replace it (--overwrite allows it)",
                    path.display()
                ),
            ));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let free = free_bytes(&dir)?;
        if size > free {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "{} needs {size} bytes; {} has {free} free",
                    path.display(),
                    dir.display()
                ),
            ));
        }
        remove_stale(&part)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&part)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot create {}: {e}", part.display()))
            })?;
        Ok((
            OutputFile {
                path,
                part,
                existing,
            },
            file,
        ))
    }

    /// The target of a file named `name` under `output` whose `.part` an
    /// earlier attempt left holding at least `held` bytes, taken over
    /// rather than created. Fails if that `.part` is not a regular file
    /// (a link is never followed) of at least `held` bytes, or if the
    /// target exists (unless [`Existing::Replace`]).
    pub fn resume(
        output: &Path,
        name: &str,
        held: u64,
        existing: Existing,
    ) -> io::Result<OutputFile> {
        let (path, part) = target_paths(output, name);
        if existing == Existing::Refuse && path.symlink_metadata().is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists; refusing to replace it", path.display()),
            ));
        }
        let meta = part.symlink_metadata().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot resume {}: {e}", part.display()))
        })?;
        if !meta.is_file() || meta.len() < held {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "cannot resume {}: not a file of at least {held} bytes",
                    part.display()
                ),
            ));
        }
        Ok(OutputFile {
            path,
            part,
            existing,
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `.part` path being written.
    pub fn part(&self) -> &Path {
        &self.part
    }

    /// Moves the verified `.part` into place. Without
    /// [`Existing::Replace`], fails (keeping `.part`) if the target
    /// appeared since [`OutputFile::create`].
    pub fn commit(&self) -> io::Result<()> {
        let exists = || {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} appeared during the transfer; the file stays in {}",
                    self.path.display(),
                    self.part.display()
                ),
            )
        };
        if self.existing == Existing::Replace {
            return std::fs::rename(&self.part, &self.path);
        }
        match std::fs::hard_link(&self.part, &self.path) {
            Ok(()) => std::fs::remove_file(&self.part),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(exists()),
            // A file system without hard links: check, then rename.
            Err(_) if self.path.symlink_metadata().is_ok() => Err(exists()),
            Err(_) => std::fs::rename(&self.part, &self.path),
        }
    }

    /// Removes `.part` (after a failure).
    pub fn discard(&self) {
        let _ = std::fs::remove_file(&self.part);
    }
}

/// Removes a leftover `.part` (a file or a symbolic link, never followed);
/// refuses anything else found there.
fn remove_stale(part: &Path) -> io::Result<()> {
    match part.symlink_metadata() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_file() || m.file_type().is_symlink() => std::fs::remove_file(part),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a file", part.display()),
        )),
    }
}

/// Bytes an unprivileged writer may still use on `dir`'s file system.
pub(crate) fn free_bytes(dir: &Path) -> io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(|e| {
        io::Error::new(io::Error::from(e).kind(), format!("{}: {e}", dir.display()))
    })?;
    Ok((s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fanout-output-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_existing_file_is_kept_unless_replacing_is_asked() {
        let d = dir("existing");
        std::fs::write(d.join("a.bin"), b"mine").unwrap();
        let e = OutputFile::create(&d, "a.bin", 3, Existing::Refuse).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("--overwrite"), "{e}");
        assert!(!d.join("a.bin.part").exists(), "nothing written");
        let (out, mut f) = OutputFile::create(&d, "a.bin", 3, Existing::Replace).unwrap();
        f.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(d.join("a.bin")).unwrap(), b"new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_appearing_during_the_transfer_is_not_replaced() {
        let d = dir("appeared");
        let (out, mut f) = OutputFile::create(&d, "b.bin", 3, Existing::Refuse).unwrap();
        f.write_all(b"new").unwrap();
        std::fs::write(d.join("b.bin"), b"mine").unwrap();
        assert_eq!(
            out.commit().unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(d.join("b.bin")).unwrap(), b"mine");
        assert_eq!(std::fs::read(d.join("b.bin.part")).unwrap(), b"new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_link_planted_at_the_part_name_is_removed_not_followed() {
        let d = dir("symlink");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("c.bin.part")).unwrap();
        let (out, mut f) = OutputFile::create(&d, "c.bin", 3, Existing::Refuse).unwrap();
        f.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(d.join("c.bin")).unwrap(), b"new");
        // A link at the final name counts as an existing file.
        std::os::unix::fs::symlink(&victim, d.join("d.bin")).unwrap();
        assert!(OutputFile::create(&d, "d.bin", 3, Existing::Refuse).is_err());
        // Replacing replaces the link itself, not its target.
        let (out, mut f) = OutputFile::create(&d, "d.bin", 3, Existing::Replace).unwrap();
        f.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!d
            .join("d.bin")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_larger_than_the_free_space_is_refused_before_it_starts() {
        let d = dir("space");
        let free = free_bytes(&d).unwrap();
        let e = OutputFile::create(&d, "e.bin", free + (1 << 30), Existing::Refuse).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
        assert!(!d.join("e.bin.part").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
