#![no_main]
//! See `fanout_fuzz::check_header`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_fuzz::check_header(data));
