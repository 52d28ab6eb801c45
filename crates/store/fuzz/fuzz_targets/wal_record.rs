#![no_main]
//! Any bytes through `store::fuzzing::wal_record`: rejected or accepted consistently, never a panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    store::fuzzing::wal_record(data);
});
