#![no_main]
//! Any bytes through `store::fuzzing::block_file`: rejected or accepted consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::block_file(data);
});
