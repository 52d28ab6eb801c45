#![no_main]
//! Any bytes as a checkpoint file: the reader must pick a valid slot or none, never panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    journal::fuzzing::checkpoint_reader(data);
});
