//! The cargo-fuzz targets `session_input`, `merger_input` and
//! `catch_up_input` as proptests,
//! so the same properties run on stable in `cargo test --workspace`:
//! bounded scripts (at most 96 steps of at most 24 bytes).

use fanout_props::{drive_catch_up, drive_merger, drive_session};
use proptest::prelude::*;

/// A configuration byte and up to 96 steps (`ctl len body`).
fn script() -> impl Strategy<Value = Vec<u8>> {
    let step = (any::<u8>(), prop::collection::vec(any::<u8>(), 0..24));
    (any::<u8>(), prop::collection::vec(step, 0..96)).prop_map(|(first, steps)| {
        let mut v = vec![first];
        for (ctl, body) in steps {
            v.push(ctl);
            v.push(body.len() as u8);
            v.extend(body);
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// `fanout_props::drive_session`.
    #[test]
    fn session_input(data in script()) {
        drive_session(&data);
    }

    /// `fanout_props::drive_merger`.
    #[test]
    fn merger_input(data in script()) {
        drive_merger(&data);
    }

    /// `fanout_props::drive_catch_up`.
    #[test]
    fn catch_up_input(data in script()) {
        drive_catch_up(&data);
    }
}

/// Found by `merger_input`: coded repair, and a receiver that joins the
/// merger late, inside a block whose start it never held. The sender sees
/// only the merger; symbols of that block cannot help the receiver, so its
/// losses reported again there must be repaired by copies, or the merger
/// evicts it as stalled.
#[test]
fn a_late_joiner_behind_a_merger_inside_a_coded_block_completes() {
    drive_merger(&[
        9, 108, 2, 0, 56, 120, 0, 144, 0, 11, 11, 0, 136, 0, 0, 0, 0, 0, 9, 0, 0, 1, 64, 0, 12, 2,
        0, 95, 64, 0, 79, 0,
    ]);
}
