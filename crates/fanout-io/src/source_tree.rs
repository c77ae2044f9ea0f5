//! What a sender sends: one file, or several files and directory trees
//! ([`fanout_app::manifest`], version 2), and the reader that streams
//! their bytes one after the other.
//!
//! `send a.bin dir/` gives the receivers `a.bin` and `dir/...` inside
//! their output directory, as `cp -r` would. Entries are sorted by name
//! (parents before children), symbolic links and special files are
//! skipped and named, so a tree is sent the same way every time.

use fanout_app::manifest::{check_relative_path, sanitize_name, MODE_BITS};
use fanout_app::{Entry, EntryKind, Manifest};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The files a session sends and where they are on disk.
#[derive(Debug, Clone)]
pub struct SourceTree {
    /// What the receivers are told.
    pub manifest: Manifest,
    /// Each file's path on disk, in body order (one per
    /// [`Manifest::files`] entry).
    pub sources: Vec<PathBuf>,
    /// What was left out (symbolic links, special files), with why.
    pub skipped: Vec<String>,
}

impl SourceTree {
    /// Scans `paths`: a single regular file is sent as itself (manifest
    /// version 1); anything else (several paths, a directory) as a tree.
    pub fn scan(paths: &[PathBuf]) -> io::Result<SourceTree> {
        if paths.is_empty() {
            return Err(invalid("no file to send".into()));
        }
        if let [path] = paths {
            let meta = std::fs::metadata(path).map_err(|e| context(path, e))?;
            if meta.is_file() {
                let name = utf8_name(path)?;
                return Ok(SourceTree {
                    manifest: Manifest::file(sanitize_name(&name).map_err(bad)?, meta.len()),
                    sources: vec![path.clone()],
                    skipped: Vec::new(),
                });
            }
        }
        let mut tree = Walk::default();
        for path in paths {
            let name = utf8_name(path)?;
            tree.add(path, name)?;
        }
        let mut label = paths
            .iter()
            .map(|p| utf8_name(p))
            .collect::<io::Result<Vec<_>>>()?
            .join(", ");
        if label.len() > fanout_app::manifest::MAX_NAME_BYTES {
            let cut = (0..=252)
                .rev()
                .find(|&i| label.is_char_boundary(i))
                .unwrap_or(0);
            label.truncate(cut);
            label.push_str("...");
        }
        let manifest = Manifest::tree(label, tree.entries).map_err(bad)?;
        Ok(SourceTree {
            manifest,
            sources: tree.sources,
            skipped: tree.skipped,
        })
    }

    /// A reader of the body (every file's bytes in order) from its start.
    pub fn reader(&self) -> TreeReader {
        let sizes = self.manifest.files().iter().map(|f| f.size).collect();
        TreeReader {
            sources: self.sources.clone(),
            sizes,
            index: 0,
            left: None,
            file: None,
        }
    }
}

/// The entries found so far.
#[derive(Default)]
struct Walk {
    entries: Vec<Entry>,
    sources: Vec<PathBuf>,
    skipped: Vec<String>,
}

impl Walk {
    /// Adds `path` at relative path `rel` (and, for a directory, what it
    /// holds, sorted by name).
    fn add(&mut self, path: &Path, rel: String) -> io::Result<()> {
        check_relative_path(&rel).map_err(bad)?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| context(path, e))?;
        let mode = (meta.permissions().mode() as u16) & MODE_BITS;
        if meta.is_file() {
            self.entries.push(Entry {
                path: rel,
                kind: EntryKind::File(meta.len()),
                mode,
            });
            self.sources.push(path.to_path_buf());
        } else if meta.is_dir() {
            self.entries.push(Entry {
                path: rel.clone(),
                kind: EntryKind::Dir,
                mode,
            });
            let mut children = Vec::new();
            for child in std::fs::read_dir(path).map_err(|e| context(path, e))? {
                let child = child.map_err(|e| context(path, e))?;
                children.push(child.path());
            }
            children.sort();
            for child in children {
                let name = utf8_name(&child)?;
                self.add(&child, format!("{rel}/{name}"))?;
            }
        } else {
            let what = if meta.file_type().is_symlink() {
                "a symbolic link"
            } else {
                "not a regular file or directory"
            };
            self.skipped.push(format!("{} ({what})", path.display()));
        }
        Ok(())
    }
}

/// The body of a [`SourceTree`]: its files' bytes one after the other,
/// exactly the sizes the manifest announced. A file that is shorter now
/// fails the read (the receivers are told); bytes a file gained since the
/// scan are not sent.
pub struct TreeReader {
    sources: Vec<PathBuf>,
    sizes: Vec<u64>,
    /// The file being read.
    index: usize,
    /// Bytes left in it, once opened.
    left: Option<u64>,
    file: Option<File>,
}

impl Read for TreeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(&size) = self.sizes.get(self.index) else {
                return Ok(0);
            };
            let left = match self.left {
                Some(left) => left,
                None => {
                    let path = &self.sources[self.index];
                    self.file = Some(File::open(path).map_err(|e| context(path, e))?);
                    *self.left.insert(size)
                }
            };
            if left == 0 {
                self.index += 1;
                self.left = None;
                self.file = None;
                continue;
            }
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let file = self.file.as_mut().expect("opened above");
            let n = file.read(&mut buf[..want])?;
            if n == 0 && want > 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{} shrank while being sent",
                        self.sources[self.index].display()
                    ),
                ));
            }
            self.left = Some(left - n as u64);
            return Ok(n);
        }
    }
}

impl Seek for TreeReader {
    /// Only `SeekFrom::Start`: moves to a body offset.
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let SeekFrom::Start(mut at) = pos else {
            return Err(invalid("a tree is sought from its start only".into()));
        };
        let target = at;
        self.index = 0;
        self.left = None;
        self.file = None;
        while let Some(&size) = self.sizes.get(self.index) {
            if at < size {
                let path = &self.sources[self.index];
                let mut file = File::open(path).map_err(|e| context(path, e))?;
                file.seek(SeekFrom::Start(at))?;
                self.file = Some(file);
                self.left = Some(size - at);
                return Ok(target);
            }
            at -= size;
            self.index += 1;
        }
        Ok(target - at)
    }
}

/// A path's last component as UTF-8.
fn utf8_name(path: &Path) -> io::Result<String> {
    let name = match path.file_name() {
        Some(n) => n.to_owned(),
        // `dir/.` or `/`: the directory's own name.
        None => std::fs::canonicalize(path)
            .map_err(|e| context(path, e))?
            .file_name()
            .map(|n| n.to_owned())
            .ok_or_else(|| invalid(format!("{} has no name to send it by", path.display())))?,
    };
    name.to_str()
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("the name of {} is not UTF-8", path.display())))
}

fn context(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn bad(e: fanout_app::ManifestError) -> io::Error {
    invalid(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_its_files_in_name_order_and_reads_and_seeks_as_one_body() {
        let d = std::env::temp_dir().join(format!("fanout-source-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("dir/sub")).unwrap();
        std::fs::write(d.join("top.bin"), b"0123").unwrap();
        std::fs::write(d.join("dir/b"), b"bb").unwrap();
        std::fs::write(d.join("dir/a"), b"").unwrap();
        std::fs::write(d.join("dir/sub/c"), b"ccc").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("dir/link")).unwrap();
        let t = SourceTree::scan(&[d.join("top.bin"), d.join("dir")]).unwrap();
        let paths: Vec<_> = t.manifest.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["top.bin", "dir", "dir/a", "dir/b", "dir/sub", "dir/sub/c"]
        );
        assert_eq!(t.manifest.size, 9);
        assert_eq!(t.skipped.len(), 1, "{:?}", t.skipped);
        let mut body = Vec::new();
        t.reader().read_to_end(&mut body).unwrap();
        assert_eq!(body, b"0123bbccc");
        let mut r = t.reader();
        for at in 0..=9u64 {
            r.seek(SeekFrom::Start(at)).unwrap();
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).unwrap();
            assert_eq!(rest, &body[at as usize..], "from {at}");
        }
        // A file that shrank fails the read.
        std::fs::write(d.join("dir/sub/c"), b"c").unwrap();
        let e = t.reader().read_to_end(&mut Vec::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        // One regular file is sent as itself.
        let one = SourceTree::scan(&[d.join("top.bin")]).unwrap();
        assert!(!one.manifest.is_tree());
        assert_eq!(one.manifest.name, "top.bin");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
