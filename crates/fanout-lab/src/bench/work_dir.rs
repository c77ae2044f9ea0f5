//! Where a bench keeps its payload and the receivers' files.
//!
//! By default in memory (`/dev/shm`, a tmpfs), when it has room: on these
//! VMs the page cache's writeback of the received files (16 × 200 MiB in
//! scenario (e)) to the virtual disk delays the emulator thread, whose
//! p99 release lateness measured 1.1–1.5 ms with the files on disk and
//! 0.46–1.16 ms on tmpfs (docs/lab.md, "Capacity"). The transfer tools write the same files
//! either way; only where the kernel keeps them changes.

use super::suite::Suite;
use std::path::{Path, PathBuf};

/// The in-memory file system tried first.
pub const SHM: &str = "/dev/shm";

/// Bytes the selection keeps at once: the payload and, for the run in
/// progress, every receiver's copy (a run's files are removed when it ends
/// unless kept).
pub fn peak_bytes(suite: &Suite, scenarios: &[String], size: Option<u64>) -> u64 {
    let size = size.unwrap_or(suite.size);
    let receivers = suite
        .scenarios
        .iter()
        .filter(|s| scenarios.is_empty() || scenarios.contains(&s.name))
        .map(|s| s.receivers as u64)
        .max()
        .unwrap_or(0);
    size.saturating_mul(receivers + 1)
}

/// The default scratch directory for a selection and why it was chosen:
/// under [`SHM`] when that is a tmpfs with room for `peak` bytes and a
/// quarter more, and the runs' files are not kept; under the temporary
/// directory otherwise.
pub fn default_work_dir(keep: bool, peak: u64) -> (PathBuf, String) {
    let name = format!("fanout-bench-{}", std::process::id());
    let disk = std::env::temp_dir().join(&name);
    if keep {
        return (disk, "--keep: runs' files kept on disk".into());
    }
    match tmpfs_free(Path::new(SHM)) {
        Some(free) if free >= peak.saturating_add(peak / 4) => (
            Path::new(SHM).join(&name),
            format!(
                "in memory ({SHM}: {} MiB free, {} MiB needed): disk writeback delays the emulator",
                free >> 20,
                peak >> 20
            ),
        ),
        Some(free) => (
            disk,
            format!(
                "on disk: {SHM} has {} MiB free, {} MiB needed",
                free >> 20,
                peak >> 20
            ),
        ),
        None => (disk, format!("on disk: no tmpfs at {SHM}")),
    }
}

/// Free bytes of `path` if it is a tmpfs.
fn tmpfs_free(path: &Path) -> Option<u64> {
    let fs = nix::sys::statfs::statfs(path).ok()?;
    if fs.filesystem_type() != nix::sys::statfs::TMPFS_MAGIC {
        return None;
    }
    let vfs = nix::sys::statvfs::statvfs(path).ok()?;
    Some(vfs.blocks_available().saturating_mul(vfs.fragment_size()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE: &str = r#"
        size = "10MiB"
        [[tool]]
        name = "fanout"
        kind = "fanout"
        rate = "default"
        [[scenario]]
        name = "a"
        title = "four"
        receivers = 4
        sender_rate = "100Mbit"
        receiver_rate = "1Gbit"
        [[scenario]]
        name = "e"
        title = "sixteen"
        receivers = 16
        sender_rate = "1Gbit"
        receiver_rate = "100Mbit"
    "#;

    #[test]
    fn the_peak_is_the_payload_and_the_largest_selected_scenarios_copies() {
        let suite = Suite::parse(SUITE, "test").unwrap();
        assert_eq!(peak_bytes(&suite, &[], None), 17 * (10 << 20));
        assert_eq!(peak_bytes(&suite, &["a".into()], None), 5 * (10 << 20));
        assert_eq!(peak_bytes(&suite, &["a".into()], Some(1000)), 5000);
    }

    #[test]
    fn kept_runs_and_oversized_selections_stay_on_disk() {
        let disk = std::env::temp_dir();
        assert!(default_work_dir(true, 1).0.starts_with(&disk));
        assert!(default_work_dir(false, u64::MAX / 2).0.starts_with(&disk));
    }
}
