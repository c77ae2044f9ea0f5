#![no_main]
//! See `fanout_props::overlay::check_overlay_input`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::overlay::check_overlay_input(data));
