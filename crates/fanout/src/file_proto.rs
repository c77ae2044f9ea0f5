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

use anyhow::{bail, ensure, Context, Result};

const MAGIC: &[u8; 6] = b"FOFILE";
const VERSION: u8 = 1;
/// Longest file name carried, in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Encoded trailer length.
pub const TRAILER_LEN: usize = 32;

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
    pub fn decode(buf: &[u8]) -> Result<Option<(Manifest, usize)>> {
        if buf.len() < 17 {
            if !MAGIC.starts_with(&buf[..buf.len().min(6)]) {
                bail!("the sender does not speak fanout's file protocol");
            }
            return Ok(None);
        }
        ensure!(
            &buf[..6] == MAGIC,
            "the sender does not speak fanout's file protocol"
        );
        ensure!(
            buf[6] == VERSION,
            "file protocol version {} is not supported",
            buf[6]
        );
        let size = u64::from_be_bytes(buf[7..15].try_into().expect("8 bytes"));
        let name_len = u16::from_be_bytes([buf[15], buf[16]]) as usize;
        ensure!(
            name_len <= MAX_NAME_BYTES,
            "file name too long ({name_len} bytes)"
        );
        if buf.len() < 17 + name_len {
            return Ok(None);
        }
        let name = std::str::from_utf8(&buf[17..17 + name_len])
            .context("file name is not UTF-8")?
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
pub fn sanitize_name(name: &str) -> Result<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    if clean.is_empty() || clean == "." || clean == ".." {
        bail!("the sender's file name {name:?} is not a usable base name");
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
        assert!(Manifest::decode(b"GARBAGE-GARBAGE-GARBAGE").is_err());
    }

    #[test]
    fn hostile_names_are_cut_to_base_names() {
        assert_eq!(sanitize_name("../../etc/passwd").unwrap(), "passwd");
        assert_eq!(sanitize_name("a\\b\u{7}c").unwrap(), "bc");
        assert!(sanitize_name("..").is_err());
        assert!(sanitize_name("dir/").is_err());
    }
}
