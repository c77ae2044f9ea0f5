#![no_main]
//! See `fanout_props::drive_session` and `fanout_fuzz::AVOID`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::drive_session_avoiding(data, fanout_fuzz::AVOID));
