#![no_main]
//! Any bytes through `store::fuzzing::index_replay`: rejected or accepted consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::index_replay(data);
});
