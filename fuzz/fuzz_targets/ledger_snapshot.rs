#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idem_fuzz::decoders::ledger_snapshot(data));
