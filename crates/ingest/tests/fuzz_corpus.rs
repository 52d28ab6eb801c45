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
        let path = entry.unwrap().path();
        check(&std::fs::read(&path).unwrap());
        inputs += 1;
    }
    assert!(
        inputs >= 20,
        "{target}: only {inputs} corpus inputs in {}",
        dir.display()
    );
}

#[test]
fn httptrap_corpus() {
    replay("httptrap", fuzz_checks::httptrap);
}

#[test]
fn statsd_corpus() {
    replay("statsd", fuzz_checks::statsd);
}

#[test]
fn collectd_corpus() {
    replay("collectd", fuzz_checks::collectd);
}

#[test]
fn graphite_corpus() {
    replay("graphite", fuzz_checks::graphite);
}

#[test]
fn influx_corpus() {
    replay("influx", fuzz_checks::influx);
}

#[test]
fn remote_write_corpus() {
    replay("remote_write", fuzz_checks::remote_write);
}

#[test]
fn remote_write2_corpus() {
    replay("remote_write2", fuzz_checks::remote_write2);
}

#[test]
fn otlp_corpus() {
    replay("otlp", fuzz_checks::otlp);
}

#[test]
fn flat_corpus() {
    replay("flat", fuzz_checks::flat);
}
