//! Fuzz target `convert`.
//!
//! Bytes → a Prometheus native, OTel exponential, OTel explicit or classic `le`
//! histogram (built with `arbitrary`, sizes bounded) → `hist::convert`; the converted
//! histogram must hold the source's count as the module documents.
//! The check lives in `tests/fuzz_checks/mod.rs`, shared with `tests/fuzz_corpus.rs`.
#![no_main]

#[allow(dead_code)]
#[path = "../../tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::convert(data));
