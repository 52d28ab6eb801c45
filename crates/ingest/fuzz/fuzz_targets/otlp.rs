//! Fuzz target `otlp`: any bytes through the OTLP metrics parsers (protobuf or JSON, chosen by
//! the first byte); the checks (no panic, every batch within the crate's bounds) live in
//! `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::otlp(data));
