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
fn numeric_chunk_corpus() {
    replay("numeric_chunk", store::fuzzing::numeric_chunk);
}

#[test]
fn text_chunk_corpus() {
    replay("text_chunk", store::fuzzing::text_chunk);
}

#[test]
fn rice_histogram_chunk_corpus() {
    replay("rice_histogram_chunk", store::fuzzing::rice_histogram_chunk);
}

#[test]
fn packed_histogram_chunk_corpus() {
    replay(
        "packed_histogram_chunk",
        store::fuzzing::packed_histogram_chunk,
    );
}

#[test]
fn index_replay_corpus() {
    replay("index_replay", store::fuzzing::index_replay);
}

#[test]
fn key_and_query_corpus() {
    replay("key_and_query", store::fuzzing::key_and_query);
}

#[test]
fn wal_record_corpus() {
    replay("wal_record", store::fuzzing::wal_record);
}

#[test]
fn block_file_corpus() {
    replay("block_file", store::fuzzing::block_file);
}

#[test]
fn manifest_file_corpus() {
    replay("manifest_file", store::fuzzing::manifest_file);
}
