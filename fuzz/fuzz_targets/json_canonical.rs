#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::json::canonical(data));
