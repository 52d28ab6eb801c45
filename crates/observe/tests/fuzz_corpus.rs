//! Replays every checked-in fuzz corpus file (`fuzz/corpus/<target>/`) through the same checks
//! the libFuzzer targets run, on stable, in every `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuzz_checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        check(&std::fs::read(entry.unwrap().path()).unwrap());
        inputs += 1;
    }
    assert!(
        inputs >= 20,
        "{target}: only {inputs} corpus inputs in {}",
        dir.display()
    );
}

#[test]
fn http_corpus() {
    replay("http", fuzz_checks::http);
}

#[test]
fn postgres_corpus() {
    replay("postgres", fuzz_checks::postgres);
}

#[test]
fn redis_corpus() {
    replay("redis", fuzz_checks::redis);
}

#[test]
fn mysql_corpus() {
    replay("mysql", fuzz_checks::mysql);
}

#[test]
fn kafka_corpus() {
    replay("kafka", fuzz_checks::kafka);
}

#[test]
fn cassandra_corpus() {
    replay("cassandra", fuzz_checks::cassandra);
}

#[test]
fn reasm_corpus() {
    replay("reasm", fuzz_checks::reasm);
}
