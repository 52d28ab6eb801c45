#![no_main]
//! Any bytes through `store::fuzzing::key_and_query`: rejected or accepted consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::key_and_query(data);
});
