//! Fuzz target `remote_write`: any bytes through the remote write parser (snappy body or the
//! protobuf behind it, chosen by the first byte); the checks (no panic, every batch within the
//! crate's bounds) live in `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::remote_write(data));
