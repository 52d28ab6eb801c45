#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Replays the checked-in fuzz corpus (fuzz/corpus/<target>/) through the same entry points the
//! cargo-fuzz targets call, so CI covers every input the fuzzer ever saved.

use std::path::PathBuf;

fn replay(target: &str, f: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        f(&data);
        n += 1;
    }
    assert!(n >= 5, "corpus for {target} has only {n} inputs");
}

#[test]
fn frame_decoder_corpus() {
    replay("frame_decoder", journal::fuzzing::frame_decoder);
}

#[test]
fn checkpoint_reader_corpus() {
    replay("checkpoint_reader", journal::fuzzing::checkpoint_reader);
}
