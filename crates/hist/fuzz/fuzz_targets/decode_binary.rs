//! Fuzz target `decode_binary`.
//!
//! Bytes → `Histogram::decode` and `Histogram::decode_prefix`, checked against a
//! model of the binary form; every decoded histogram must round-trip through every form.
//! The check lives in `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::decode_binary(data));
