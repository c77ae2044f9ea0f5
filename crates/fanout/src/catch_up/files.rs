//! Where the sender's catch-ups read their prefixes: the file a session
//! streams, or the spool a relay keeps of the stream it forwards.

use anyhow::{Context, Result};
use fanout_app::catch_up::{PrefixFeed, PrefixSource, PrefixStream, RawPrefix};
use fanout_app::FileFeed;
use fanout_io::{SourceTree, TreeReader};
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::ops::Range;
use std::path::PathBuf;

/// Scans `paths` (one file, or several files and directories) and opens
/// their bytes to be fed into a session in the file protocol; names what
/// was skipped (symbolic links, special files) unless `quiet`.
pub fn open_file_feed(
    paths: &[PathBuf],
    quiet: bool,
) -> Result<(FileFeed<TreeReader>, SourceTree)> {
    let tree = SourceTree::scan(paths)?;
    // Every file must be readable now, not half-way through the session.
    for path in &tree.sources {
        File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    }
    if !quiet {
        for what in &tree.skipped {
            eprintln!("fanout: skipped {what}");
        }
    }
    Ok((FileFeed::new(tree.reader(), tree.manifest.clone()), tree))
}

/// A file session's prefix, re-produced from the files.
pub struct FilePrefix {
    /// The files the session streams.
    pub tree: SourceTree,
}

impl PrefixSource for FilePrefix {
    fn open(&self, range: Range<u64>) -> io::Result<Box<dyn PrefixStream>> {
        Ok(Box::new(PrefixFeed::new(
            self.tree.reader(),
            &self.tree.manifest,
            range,
        )?))
    }
}

/// A prefix of any stream, read back from a spool file that holds the
/// stream's bytes from offset 0 (a relay's `--spool`).
pub struct SpoolPrefix {
    /// The spool file.
    pub path: PathBuf,
}

impl PrefixSource for SpoolPrefix {
    fn open(&self, range: Range<u64>) -> io::Result<Box<dyn PrefixStream>> {
        let mut spool = File::open(&self.path)?;
        spool.seek(SeekFrom::Start(range.start))?;
        Ok(Box::new(RawPrefix::new(spool, range)))
    }
}
