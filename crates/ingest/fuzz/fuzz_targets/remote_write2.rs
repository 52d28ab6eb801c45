//! Fuzz target `remote_write2`: any bytes through the remote write 2.0 parser (snappy body or
//! the protobuf behind it, chosen by the first byte); the checks live in
//! `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::remote_write2(data));
