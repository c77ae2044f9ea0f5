#![no_main]
//! See `fanout_props::drive_catch_up`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::drive_catch_up(data));
