#![no_main]
//! Any bytes through `store::fuzzing::numeric_chunk`: rejected or accepted consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::numeric_chunk(data);
});
