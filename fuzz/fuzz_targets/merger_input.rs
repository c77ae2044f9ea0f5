#![no_main]
//! See `fanout_props::drive_merger` and `fanout_fuzz::AVOID`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::drive_merger_avoiding(data, fanout_fuzz::AVOID));
