#![no_main]
//! See `fanout_props::media::check_mp2t`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_props::media::check_mp2t(data));
