#![no_main]
//! Any bytes as a segment's frame area: the decoder must reject or decode them, never panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    journal::fuzzing::frame_decoder(data);
});
