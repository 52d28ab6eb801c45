#![no_main]
//! Any bytes through `store::fuzzing::text_chunk`: rejected or accepted consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::text_chunk(data);
});
