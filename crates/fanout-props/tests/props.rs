//! The cargo-fuzz targets `session_input` and `merger_input` as proptests,
//! so the same properties run on stable in `cargo test --workspace`:
//! bounded scripts (at most 96 steps of at most 24 bytes), the attackers
//! avoiding the known findings ([`Avoid::KNOWN_FINDINGS`]; each is pinned
//! by an ignored test in `findings.rs`).

use fanout_props::{drive_merger_avoiding, drive_session_avoiding, Avoid};
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
        drive_session_avoiding(&data, Avoid::KNOWN_FINDINGS);
    }

    /// `fanout_props::drive_merger`.
    #[test]
    fn merger_input(data in script()) {
        drive_merger_avoiding(&data, Avoid::KNOWN_FINDINGS);
    }
}
