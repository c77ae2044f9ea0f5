//! The file every tool sends (incompressible, reproducible bytes) and the
//! BLAKE3 check of what the receivers wrote.

use crate::error::LabError;
use std::io::{Read, Write};
use std::path::Path;

/// Bytes per read or write.
const CHUNK: usize = 1 << 20;

/// Writes `size` bytes of BLAKE3 extendable output (keyed by `seed`) to
/// `path` and returns their hash: the same file for every tool and run.
pub fn generate(path: &Path, size: u64, seed: u64) -> Result<blake3::Hash, LabError> {
    let io = |e| LabError::io(format!("writing {}", path.display()), e);
    let mut xof = blake3::Hasher::new_derive_key("fanout lab bench payload v1")
        .update(&seed.to_le_bytes())
        .finalize_xof();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = size;
    while left > 0 {
        let n = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        xof.fill(&mut buf[..n]);
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n]).map_err(io)?;
        left -= n as u64;
    }
    file.flush().map_err(io)?;
    Ok(hasher.finalize())
}

/// Size and BLAKE3 hash of the file at `path`.
pub fn hash_file(path: &Path) -> std::io::Result<(u64, blake3::Hash)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, hasher.finalize()))
}

/// Whether `path` holds exactly the source (`size` bytes hashing to
/// `hash`); the reason when not.
pub fn verify(path: &Path, size: u64, hash: &blake3::Hash) -> Result<(), String> {
    match hash_file(path) {
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok((n, _)) if n != size => Err(format!("{} bytes, want {size}", n)),
        Ok((_, h)) if h != *hash => Err("content differs from the source".into()),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_file_verifies_and_a_changed_one_does_not() {
        let dir = std::env::temp_dir().join(format!("fanout-payload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.bin");
        let size = (3 << 20) + 17;
        let h = generate(&p, size, 5).unwrap();
        assert_eq!(hash_file(&p).unwrap(), (size, h));
        assert!(verify(&p, size, &h).is_ok());
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[1 << 20] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        assert!(verify(&p, size, &h).is_err());
        assert!(verify(&p, size + 1, &h).unwrap_err().contains("bytes"));
        assert_ne!(generate(&dir.join("y.bin"), size, 6).unwrap(), h);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
