#![no_main]
//! See `fanout_props::protected::check_merger_protected_input`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::protected::check_merger_protected_input(data));
