//! Fuzz target `manifest` as a proptest: valid trees' manifests with
//! random bytes overwritten, and arbitrary bytes behind the magic.

use fanout_app::{Entry, EntryKind, Manifest};
use fanout_props::manifest::check_manifest;
use proptest::prelude::*;

fn valid_tree() -> Vec<u8> {
    let e = |p: &str, kind| Entry {
        path: p.into(),
        kind,
        mode: 0o644,
    };
    Manifest::tree(
        "t",
        vec![
            e("a", EntryKind::File(7)),
            e("d", EntryKind::Dir),
            e("d/b", EntryKind::File(0)),
            e("d/e", EntryKind::Dir),
            e("d/e/c", EntryKind::File(1 << 40)),
        ],
    )
    .unwrap()
    .encode()
}

proptest! {
    #[test]
    fn mutated_trees_decode_safely(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = valid_tree();
        for (at, v) in edits {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        bytes.extend_from_slice(&tail);
        check_manifest(&bytes);
    }

    #[test]
    fn arbitrary_bytes_behind_the_magic_decode_safely(
        version in 0u8..4,
        rest in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut bytes = b"FOFILE".to_vec();
        bytes.push(version);
        bytes.extend_from_slice(&rest);
        check_manifest(&bytes);
    }
}
