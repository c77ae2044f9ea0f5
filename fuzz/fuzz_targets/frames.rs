#![no_main]
//! See `fanout_props::unicast::check_frames`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::unicast::check_frames(data));
