#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::decoders::receiver_snapshot(data));
