//! How a file travels on a fanout stream: a manifest message, the file's
//! bytes, and a trailer with the BLAKE3 hash of those bytes.
//!
//! ```text
//! manifest = "FOFILE" version:u8=1 size:u64 name_len:u16 name[name_len]   (one message)
//! body     = size bytes
//! trailer  = blake3[32]                                                    (one message)
//! ```
//! The receiver writes into `NAME.part` and renames it only once the hash
//! matches, so a partial or corrupt file never looks complete.

use thiserror::Error;

const MAGIC: &[u8; 6] = b"FOFILE";
const VERSION: u8 = 1;
/// Longest file name carried, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
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
}

/// What the sender says about the file before its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// File size in bytes.
    pub size: u64,
    /// Base name (no directories).
    pub name: String,
}

impl Manifest {
    /// Encoded form.
    pub fn encode(&self) -> Vec<u8> {
        let name = &self.name.as_bytes()[..self.name.len().min(MAX_NAME_BYTES)];
        let mut out = Vec::with_capacity(17 + name.len());
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name);
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
        if buf[6] != VERSION {
            return Err(ManifestError::Version(buf[6]));
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
        Ok(Some((
            Manifest {
                size,
                name: sanitize_name(&name)?,
            },
            17 + name_len,
        )))
    }
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
        let m = Manifest {
            size: 1 << 40,
            name: "model.bin".into(),
        };
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

    #[test]
    fn hostile_names_are_cut_to_base_names() {
        assert_eq!(sanitize_name("../../etc/passwd").unwrap(), "passwd");
        assert_eq!(sanitize_name("a\\b\u{7}c").unwrap(), "bc");
        assert!(sanitize_name("..").is_err());
        assert!(sanitize_name("dir/").is_err());
    }
}
