//! Fuzz target `parse`: any bytes → the CAQL parser; accepted queries must print and re-parse
//! to the same tree. The check lives in `tests/fuzz_checks/mod.rs`, shared with
//! `tests/fuzz_corpus.rs`.
#![no_main]

#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::parse(data));
