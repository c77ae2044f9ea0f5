#![no_main]
//! See `fanout_props::manifest::check_manifest`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::manifest::check_manifest(data));
