#![no_main]
//! Any bytes through `store::fuzzing::rice_histogram_chunk`: rejected or accepted
//! consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::rice_histogram_chunk(data);
});
