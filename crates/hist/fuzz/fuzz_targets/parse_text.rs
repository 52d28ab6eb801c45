//! Fuzz target `parse_text`.
//!
//! UTF-8 text → `parse_entry` and `Histogram::from_text_entries` line by line,
//! and `Histogram::from_json_map` on the whole; every parsed histogram must re-parse
//! from each text form it emits.
//! The check lives in `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::parse_text(data));
