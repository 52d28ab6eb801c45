//! Replays the checked-in fuzz corpus (`fuzz/corpus/parse/`) through the fuzz target's own check,
//! on stable, in every `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuzz_checks;

use std::path::Path;

/// The corpus must hold at least this many inputs for the replay to mean something.
const CORPUS_MIN: usize = 20;

#[test]
fn parse_corpus_replays_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| fuzz_checks::parse(&data));
        assert!(outcome.is_ok(), "corpus input {path:?} failed");
        n += 1;
    }
    assert!(n >= CORPUS_MIN, "only {n} corpus inputs in {dir:?}");
}
