//! Fuzz target `overlay_input` as a proptest: a hostile child's bytes
//! (after nothing, a genuine hello, or a genuine hello and a have header
//! of the object's length; a have header with a random length among them)
//! and a hostile parent's stream after a genuine manifest.

use fanout_props::overlay::check_overlay_input;
use proptest::prelude::*;

proptest! {
    #[test]
    fn an_overlay_host_survives_hostile_children_and_parents(
        cfg in any::<u8>(),
        have_len in any::<u32>(),
        tail in proptest::collection::vec(any::<u8>(), 0..4096),
    ) {
        // A genuine hello, then a have header with an arbitrary body
        // length, and arbitrary bytes.
        let mut data = vec![cfg & 0x3f | 0x40];
        data.extend_from_slice(b"FOVH");
        data.extend_from_slice(&have_len.to_be_bytes());
        data.extend_from_slice(&tail);
        check_overlay_input(&data);
        // And arbitrary bytes alone.
        let mut raw = vec![cfg];
        raw.extend_from_slice(&tail);
        check_overlay_input(&raw);
    }
}
