//! How files travel on a fanout stream: a manifest message, the files'
//! bytes one after the other, and a trailer with the BLAKE3 hash of those
//! bytes.
//!
//! ```text
//! manifest v1 = "FOFILE" 1 size:u64 name_len:u16 name                  (one file)
//! manifest v2 = "FOFILE" 2 size:u64 name_len:u16 name tree_len:u32 tree  (a tree)
//! tree        = count:u32 entry[count]                         (tree_len bytes)
//! entry       = kind:u8 mode:u16 size:u64 path_len:u16 path
//! body        = size bytes (v2: every file entry's bytes, in entry order)
//! trailer     = blake3(body)[32]                                         (one message)
//! ```
//! A v2 entry is a file (kind 0) or a directory (kind 1), at a relative
//! path of `/`-separated components, each a usable base name
//! ([`sanitize_name`] would keep it unchanged). The receiver writes each
//! file into `PATH.part` and renames them only once the hash matches, so a
//! partial or corrupt file never looks complete.

use thiserror::Error;

const MAGIC: &[u8; 6] = b"FOFILE";
/// The version of a single file's manifest.
const VERSION_FILE: u8 = 1;
/// The version of a tree's manifest.
const VERSION_TREE: u8 = 2;
/// Longest file name carried, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest relative path of a tree's entry, bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Most entries (files and directories) in one tree.
pub const MAX_ENTRIES: usize = 100_000;
/// Longest encoded manifest, bytes (the receiver holds at most this much
/// of a stream's head while its manifest is incomplete).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Permission bits a tree's entries carry (no set-id or sticky bits).
pub const MODE_BITS: u16 = 0o777;
/// Encoded trailer length.
pub const TRAILER_LEN: usize = 32;

/// Why a manifest was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ManifestError {
    /// The stream does not start with the file protocol's magic.
    #[error("the sender does not speak fanout's file protocol")]
    NotFileProtocol,
    /// Another version of the file protocol.
    #[error("file protocol version {0} is not supported")]
    Version(u8),
    /// The name length field exceeds [`MAX_NAME_BYTES`].
    #[error("file name too long ({0} bytes)")]
    NameTooLong(usize),
    /// The name is not UTF-8.
    #[error("file name is not UTF-8")]
    NameNotUtf8,
    /// The name has no usable base name.
    #[error("the sender's file name {0:?} is not a usable base name")]
    BadName(String),
    /// A tree's entry path is absolute, empty, has an unusable component
    /// (`.`, `..`, a control character, a backslash), or is too long.
    #[error("the sender's path {0:?} is not a usable relative path")]
    BadPath(String),
    /// A tree's entries are more than [`MAX_ENTRIES`], or its manifest
    /// longer than [`MAX_MANIFEST_BYTES`].
    #[error("the sender's tree has too many entries ({0})")]
    TooManyEntries(usize),
    /// Two entries at one path, an entry inside a file, or one whose
    /// directory is not an earlier entry.
    #[error("the sender's tree is inconsistent at {0:?}")]
    Inconsistent(String),
    /// The files' sizes do not add up to the announced size.
    #[error("the sender's tree announces {announced} bytes but its files hold {files}")]
    SizeMismatch {
        /// The manifest's `size`.
        announced: u64,
        /// The sum of its files' sizes.
        files: u64,
    },
    /// An unknown entry kind.
    #[error("unknown tree entry kind {0}")]
    EntryKind(u8),
}

/// What a tree's entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file of this many bytes.
    File(u64),
    /// A directory.
    Dir,
}

/// One file or directory of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative path, `/`-separated components, each a usable base name.
    pub path: String,
    /// File (with its size) or directory.
    pub kind: EntryKind,
    /// Permission bits (within [`MODE_BITS`]).
    pub mode: u16,
}

/// A file of a session and where its bytes lie in the stream's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpan<'a> {
    /// Its relative path (a single file's: its name).
    pub path: &'a str,
    /// Its first byte's offset in the body.
    pub start: u64,
    /// Its size, bytes.
    pub size: u64,
    /// Permission bits, if the sender gave them.
    pub mode: Option<u16>,
}

/// What the sender says about the files before their bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Body size in bytes (a single file's size; a tree's files' sum).
    pub size: u64,
    /// A single file's base name (no directories); a tree's label.
    pub name: String,
    /// A tree's entries, parents before children; empty for a single file.
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// A single file's manifest.
    pub fn file(name: impl Into<String>, size: u64) -> Self {
        Manifest {
            size,
            name: name.into(),
            entries: Vec::new(),
        }
    }

    /// A tree's manifest, labelled `name`; its size is its files' sum.
    /// Fails as the receiver would refuse it ([`Manifest::check_tree`]).
    pub fn tree(name: impl Into<String>, entries: Vec<Entry>) -> Result<Self, ManifestError> {
        let size = entries.iter().map(Entry::size).sum();
        let m = Manifest {
            size,
            name: name.into(),
            entries,
        };
        m.check_tree()?;
        if m.encode().len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooManyEntries(m.entries.len()));
        }
        Ok(m)
    }

    /// True for a tree (several files, or directories).
    pub fn is_tree(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The files, in body order, with their offsets.
    pub fn files(&self) -> Vec<FileSpan<'_>> {
        if !self.is_tree() {
            return vec![FileSpan {
                path: &self.name,
                start: 0,
                size: self.size,
                mode: None,
            }];
        }
        let mut start = 0;
        let mut out = Vec::new();
        for e in &self.entries {
            if let EntryKind::File(size) = e.kind {
                out.push(FileSpan {
                    path: &e.path,
                    start,
                    size,
                    mode: Some(e.mode),
                });
                start += size;
            }
        }
        out
    }

    /// Checks a tree's entries: usable relative paths, each directory an
    /// earlier entry, no path twice, sizes adding up to `size`.
    pub fn check_tree(&self) -> Result<(), ManifestError> {
        if self.entries.len() > MAX_ENTRIES {
            return Err(ManifestError::TooManyEntries(self.entries.len()));
        }
        let mut seen: std::collections::BTreeMap<&str, EntryKind> = Default::default();
        let mut files: u64 = 0;
        for e in &self.entries {
            check_relative_path(&e.path)?;
            if let Some((parent, _)) = e.path.rsplit_once('/') {
                if seen.get(parent) != Some(&EntryKind::Dir) {
                    return Err(ManifestError::Inconsistent(e.path.clone()));
                }
            }
            if seen.insert(&e.path, e.kind).is_some() {
                return Err(ManifestError::Inconsistent(e.path.clone()));
            }
            files = files
                .checked_add(e.size())
                .ok_or_else(|| ManifestError::Inconsistent(e.path.clone()))?;
        }
        if files != self.size {
            return Err(ManifestError::SizeMismatch {
                announced: self.size,
                files,
            });
        }
        Ok(())
    }

    /// Encoded form.
    pub fn encode(&self) -> Vec<u8> {
        let name = &self.name.as_bytes()[..self.name.len().min(MAX_NAME_BYTES)];
        let mut out = Vec::with_capacity(17 + name.len());
        out.extend_from_slice(MAGIC);
        out.push(if self.is_tree() {
            VERSION_TREE
        } else {
            VERSION_FILE
        });
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name);
        if self.is_tree() {
            let tree_len: usize = 4 + self
                .entries
                .iter()
                .map(|e| 13 + e.path.len())
                .sum::<usize>();
            out.extend_from_slice(&(tree_len as u32).to_be_bytes());
            out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
            for e in &self.entries {
                let (kind, size) = match e.kind {
                    EntryKind::File(size) => (0u8, size),
                    EntryKind::Dir => (1u8, 0),
                };
                out.push(kind);
                out.extend_from_slice(&(e.mode & MODE_BITS).to_be_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&(e.path.len() as u16).to_be_bytes());
                out.extend_from_slice(e.path.as_bytes());
            }
        }
        out
    }

    /// Parses a manifest from the front of `buf`; `Ok(None)` if more bytes
    /// are needed. Returns the manifest and its encoded length.
    pub fn decode(buf: &[u8]) -> Result<Option<(Manifest, usize)>, ManifestError> {
        if buf.len() < 17 {
            if !MAGIC.starts_with(&buf[..buf.len().min(6)]) {
                return Err(ManifestError::NotFileProtocol);
            }
            return Ok(None);
        }
        if &buf[..6] != MAGIC {
            return Err(ManifestError::NotFileProtocol);
        }
        let version = buf[6];
        if version != VERSION_FILE && version != VERSION_TREE {
            return Err(ManifestError::Version(version));
        }
        let size = u64::from_be_bytes(buf[7..15].try_into().expect("8 bytes"));
        let name_len = u16::from_be_bytes([buf[15], buf[16]]) as usize;
        if name_len > MAX_NAME_BYTES {
            return Err(ManifestError::NameTooLong(name_len));
        }
        if buf.len() < 17 + name_len {
            return Ok(None);
        }
        let name = std::str::from_utf8(&buf[17..17 + name_len])
            .map_err(|_| ManifestError::NameNotUtf8)?
            .to_owned();
        let name = sanitize_name(&name)?;
        if version == VERSION_FILE {
            return Ok(Some((Manifest::file(name, size), 17 + name_len)));
        }
        let tree = &buf[17 + name_len..];
        let Some(tree_len) = tree.get(..4) else {
            return Ok(None);
        };
        let tree_len = u32::from_be_bytes(tree_len.try_into().expect("4 bytes")) as usize;
        if tree_len > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooManyEntries(tree_len / 13));
        }
        // The whole tree first: parsing it again for every few bytes
        // arriving would cost quadratic time.
        let Some(tree) = tree.get(4..4 + tree_len) else {
            return Ok(None);
        };
        let entries = decode_entries(tree)?;
        let used = 4 + tree_len;
        let m = Manifest {
            size,
            name,
            entries,
        };
        m.check_tree()?;
        Ok(Some((m, 17 + name_len + used)))
    }
}

impl Entry {
    /// A file's size; 0 for a directory.
    pub fn size(&self) -> u64 {
        match self.kind {
            EntryKind::File(size) => size,
            EntryKind::Dir => 0,
        }
    }
}

/// A tree's entries from `buf`, exactly its encoded tree.
fn decode_entries(buf: &[u8]) -> Result<Vec<Entry>, ManifestError> {
    let short = || ManifestError::Inconsistent("(truncated tree)".into());
    let count = buf.get(..4).ok_or_else(short)?;
    let count = u32::from_be_bytes(count.try_into().expect("4 bytes")) as usize;
    if count > MAX_ENTRIES {
        return Err(ManifestError::TooManyEntries(count));
    }
    let mut at = 4;
    let mut entries = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let head = buf.get(at..at + 13).ok_or_else(short)?;
        let mode = u16::from_be_bytes([head[1], head[2]]) & MODE_BITS;
        let size = u64::from_be_bytes(head[3..11].try_into().expect("8 bytes"));
        let path_len = u16::from_be_bytes([head[11], head[12]]) as usize;
        if path_len > MAX_PATH_BYTES {
            return Err(ManifestError::BadPath(format!("({path_len} bytes)")));
        }
        let kind = match head[0] {
            0 => EntryKind::File(size),
            1 => EntryKind::Dir,
            k => return Err(ManifestError::EntryKind(k)),
        };
        let path = buf.get(at + 13..at + 13 + path_len).ok_or_else(short)?;
        let path = std::str::from_utf8(path)
            .map_err(|_| ManifestError::NameNotUtf8)?
            .to_owned();
        entries.push(Entry { path, kind, mode });
        at += 13 + path_len;
    }
    if at != buf.len() {
        return Err(short());
    }
    Ok(entries)
}

/// Checks that `path` is a usable relative path: `/`-separated components,
/// none empty, `.` or `..`, none with a control character or a backslash,
/// at most [`MAX_PATH_BYTES`] long. Refused rather than cut, so two
/// entries can never end up at one place.
pub fn check_relative_path(path: &str) -> Result<(), ManifestError> {
    let usable = |c: &str| {
        !c.is_empty()
            && c != "."
            && c != ".."
            && c.len() <= MAX_NAME_BYTES
            && !c.chars().any(|ch| ch.is_control() || ch == '\\')
    };
    if path.len() > MAX_PATH_BYTES || !path.split('/').all(usable) {
        return Err(ManifestError::BadPath(path.to_owned()));
    }
    Ok(())
}

/// Keeps only a plain base name: no path separators, no `..`, no control
/// characters — a hostile sender cannot write outside the target directory.
pub fn sanitize_name(name: &str) -> Result<String, ManifestError> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    if clean.is_empty() || clean == "." || clean == ".." {
        return Err(ManifestError::BadName(name.to_owned()));
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_roundtrip_and_partial() {
        let m = Manifest::file("model.bin", 1 << 40);
        let enc = m.encode();
        assert_eq!(Manifest::decode(&enc).unwrap(), Some((m, enc.len())));
        for cut in 0..enc.len() {
            assert_eq!(Manifest::decode(&enc[..cut]).unwrap(), None, "cut {cut}");
        }
        assert_eq!(
            Manifest::decode(b"GARBAGE-GARBAGE-GARBAGE"),
            Err(ManifestError::NotFileProtocol)
        );
    }

    fn tree() -> Manifest {
        let dir = |p: &str| Entry {
            path: p.into(),
            kind: EntryKind::Dir,
            mode: 0o755,
        };
        let file = |p: &str, n| Entry {
            path: p.into(),
            kind: EntryKind::File(n),
            mode: 0o644,
        };
        Manifest::tree(
            "3 files, 2 directories",
            vec![
                file("a.bin", 10),
                dir("d"),
                file("d/b.txt", 0),
                dir("d/e"),
                file("d/e/c", 5),
            ],
        )
        .unwrap()
    }

    #[test]
    fn tree_roundtrip_partial_and_offsets() {
        let m = tree();
        assert_eq!(m.size, 15);
        let enc = m.encode();
        assert_eq!(
            Manifest::decode(&enc).unwrap(),
            Some((m.clone(), enc.len()))
        );
        for cut in 0..enc.len() {
            assert_eq!(Manifest::decode(&enc[..cut]).unwrap(), None, "cut {cut}");
        }
        let spans: Vec<_> = m
            .files()
            .iter()
            .map(|f| (f.path, f.start, f.size))
            .collect();
        assert_eq!(
            spans,
            [("a.bin", 0, 10), ("d/b.txt", 10, 0), ("d/e/c", 10, 5)]
        );
    }

    #[test]
    fn hostile_trees_are_refused() {
        let bad = |edit: &dyn Fn(&mut Manifest)| {
            let mut m = tree();
            edit(&mut m);
            Manifest::decode(&m.encode()).unwrap_err()
        };
        for path in [
            "../x",
            "/etc/passwd",
            "d//x",
            "d/./x",
            "d/x\\y",
            "d/\u{7}",
            "",
        ] {
            let e = bad(&|m| m.entries[2].path = path.into());
            assert!(matches!(e, ManifestError::BadPath(_)), "{path:?}: {e}");
        }
        // A child before its directory, a path twice, a file as a directory.
        assert!(matches!(
            bad(&|m| m.entries.swap(1, 2)),
            ManifestError::Inconsistent(_)
        ));
        assert!(matches!(
            bad(&|m| m.entries[4].path = "d/b.txt".into()),
            ManifestError::Inconsistent(_)
        ));
        assert!(matches!(
            bad(&|m| m.entries[4].path = "a.bin/c".into()),
            ManifestError::Inconsistent(_)
        ));
        assert!(matches!(
            bad(&|m| m.size += 1),
            ManifestError::SizeMismatch { .. }
        ));
        // Sizes that overflow when added.
        assert!(matches!(
            bad(&|m| {
                m.entries[0].kind = EntryKind::File(u64::MAX);
                m.size = u64::MAX;
            }),
            ManifestError::Inconsistent(_)
        ));
        // Counts and lengths that lie.
        let enc = tree().encode();
        let tree_at = 17 + tree().name.len();
        let with = |at: usize, v: u32| {
            let mut e = enc.clone();
            e[at..at + 4].copy_from_slice(&v.to_be_bytes());
            Manifest::decode(&e)
        };
        assert!(matches!(
            with(tree_at, u32::MAX),
            Err(ManifestError::TooManyEntries(_))
        ));
        assert!(matches!(
            with(tree_at + 4, u32::MAX),
            Err(ManifestError::TooManyEntries(_))
        ));
        assert!(matches!(
            with(tree_at + 4, 4),
            Err(ManifestError::Inconsistent(_))
        ));
        assert!(matches!(
            with(tree_at + 4, 6),
            Err(ManifestError::Inconsistent(_))
        ));
    }

    #[test]
    fn hostile_names_are_cut_to_base_names() {
        assert_eq!(sanitize_name("../../etc/passwd").unwrap(), "passwd");
        assert_eq!(sanitize_name("a\\b\u{7}c").unwrap(), "bc");
        assert!(sanitize_name("..").is_err());
        assert!(sanitize_name("dir/").is_err());
    }
}
