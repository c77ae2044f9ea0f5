//! Where the sender's catch-ups read their prefixes: the file a session
//! streams, or the spool a relay keeps of the stream it forwards.

use anyhow::{bail, Context, Result};
use fanout_app::catch_up::{PrefixFeed, PrefixSource, PrefixStream, RawPrefix};
use fanout_app::manifest::sanitize_name;
use fanout_app::{FileFeed, Manifest};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Opens `path` (a regular file with a UTF-8 name) to be fed into a
/// session in the file protocol.
pub fn open_file_feed(path: &Path) -> Result<FileFeed<File>> {
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
    Ok(FileFeed::new(file, manifest))
}

/// A file session's prefix, re-produced from the file.
pub struct FilePrefix {
    /// The file the session streams.
    pub path: PathBuf,
    /// The manifest the session sent.
    pub manifest: Manifest,
}

impl PrefixSource for FilePrefix {
    fn open(&self, end: u64) -> io::Result<Box<dyn PrefixStream>> {
        let file = File::open(&self.path)?;
        Ok(Box::new(PrefixFeed::new(file, &self.manifest, end)?))
    }
}

/// A prefix of any stream, read back from a spool file that holds the
/// stream's bytes from offset 0 (a relay's `--spool`).
pub struct SpoolPrefix {
    /// The spool file.
    pub path: PathBuf,
}

impl PrefixSource for SpoolPrefix {
    fn open(&self, end: u64) -> io::Result<Box<dyn PrefixStream>> {
        Ok(Box::new(RawPrefix::new(File::open(&self.path)?, end)))
    }
}
