//! Fuzz target `decode_base64`.
//!
//! UTF-8 text → `Histogram::from_base64`, checked against a model of base64;
//! every decoded histogram must round-trip through every form.
//! The check lives in `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::decode_base64(data));
