//! The file protocol's manifest (`fanout_app::manifest`) on arbitrary
//! bytes: decoding never panics, takes at most the bytes it was given, and
//! what it accepts is safe to write (usable relative paths, parents first,
//! sizes that add up) and re-encodes to a manifest that decodes the same.

use fanout_app::manifest::check_relative_path;
use fanout_app::{FileIntake, Manifest, Piece};

/// Decodes `data` as a manifest, whole and cut at every eighth length,
/// and checks what is accepted; then feeds it to a [`FileIntake`] in
/// pieces.
pub fn check_manifest(data: &[u8]) {
    for cut in (0..=data.len()).step_by(8).chain([data.len()]) {
        if let Ok(Some((m, used))) = Manifest::decode(&data[..cut]) {
            assert!(used <= cut);
            check_accepted(&m);
        }
    }
    let mut intake = FileIntake::new();
    for piece in data.chunks(97) {
        let r = intake.consume(piece, &mut |p| {
            if let Piece::Manifest(m) = p {
                check_accepted(m);
            }
            Ok(())
        });
        if r.is_err() {
            break;
        }
    }
}

fn check_accepted(m: &Manifest) {
    if m.is_tree() {
        m.check_tree().expect("an accepted tree is consistent");
        for e in &m.entries {
            check_relative_path(&e.path).expect("an accepted path is usable");
            assert_eq!(e.mode & !fanout_app::manifest::MODE_BITS, 0);
        }
        let files: u64 = m.files().iter().map(|f| f.size).sum();
        assert_eq!(files, m.size);
    }
    assert!(!m.name.contains(['/', '\\']));
    let again = m.encode();
    let (back, used) = Manifest::decode(&again)
        .expect("re-encoded")
        .expect("complete");
    assert_eq!(used, again.len());
    assert_eq!(&back, m);
}
