//! Fuzz target `collectd`: any bytes through the collectd parser; the checks (no panic, every batch within
//! the crate's bounds) live in `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::collectd(data));
