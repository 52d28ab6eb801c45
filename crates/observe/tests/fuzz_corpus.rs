//! Replays every checked-in fuzz corpus file (`fuzz/corpus/<target>/`) through the same checks
//! the libFuzzer targets run, on stable, in every `cargo test`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fuzz_checks;

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        check(&std::fs::read(entry.unwrap().path()).unwrap());
        inputs += 1;
    }
    assert!(inputs >= 20, "{target}: only {inputs} corpus inputs in {}", dir.display());
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
fn reasm_corpus() {
    replay("reasm", fuzz_checks::reasm);
}

/// Writes the seed corpora from made-up exchanges (run once by hand: `cargo test -p observe
/// --test fuzz_corpus -- --ignored write_seeds`); the fuzzer grows them from there.
#[test]
#[ignore]
fn write_seeds() {
    use observe::Protocol;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let protos = [
        ("http", Protocol::Http),
        ("postgres", Protocol::Postgres),
        ("redis", Protocol::Redis),
        ("mysql", Protocol::Mysql),
        ("kafka", Protocol::Kafka),
    ];
    for (name, p) in protos {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for seed in 0..24u64 {
            let mut out = vec![(seed % 4) as u8];
            for i in 0..(1 + seed % 3) {
                let (req, resp) = observe::synth::exchange(p, seed * 10 + i);
                for (dir, bytes) in [(0u8, req), (1u8, resp)] {
                    for chunk in bytes.chunks(1 + (seed as usize * 7) % 60) {
                        out.push(dir);
                        out.push(chunk.len() as u8);
                        out.extend_from_slice(chunk);
                    }
                }
            }
            std::fs::write(dir.join(format!("seed-{seed:02}")), out).unwrap();
        }
    }
    let dir = root.join("reasm");
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = observe::synth::Rng::new(9);
    for seed in 0..24u64 {
        let mut out = Vec::new();
        for _ in 0..(5 + seed) {
            let len = (rng.draw() % 40) as u8;
            out.extend_from_slice(&[(rng.draw() % 256) as u8 & 0x9f | 0x10, 0, (rng.draw() % 200) as u8, len]);
            out.extend(std::iter::repeat_n(b'G', usize::from(len)));
        }
        std::fs::write(dir.join(format!("seed-{seed:02}")), out).unwrap();
    }
}
