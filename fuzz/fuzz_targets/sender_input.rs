#![no_main]
//! See `fanout_fuzz::drive_sender`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fanout_fuzz::drive_sender(data));
