#![no_main]
//! See `fanout_props::drive_session`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::drive_session(data));
