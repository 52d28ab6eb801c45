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
fn nrpe_packet_corpus() {
    replay("nrpe_packet", fuzz_checks::nrpe_packet);
}

#[test]
fn perfdata_corpus() {
    replay("perfdata", fuzz_checks::perfdata);
}

#[test]
fn prom_text_corpus() {
    replay("prom_text", fuzz_checks::prom_text);
}

#[test]
fn prom_proto_corpus() {
    replay("prom_proto", fuzz_checks::prom_proto);
}

#[test]
fn resp_corpus() {
    replay("resp", fuzz_checks::resp);
}
