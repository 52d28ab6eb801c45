//! Writes the fuzz targets' seed corpora (`fuzz/corpus/<target>/seed-NN`) from made-up
//! exchanges; the fuzzer grows them from there and `tests/fuzz_corpus.rs` replays them.
//! `cargo run -p observe --example fuzz_seeds`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

fn main() {
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
            out.extend_from_slice(&[
                (rng.draw() % 256) as u8 & 0x9f | 0x10,
                0,
                (rng.draw() % 200) as u8,
                len,
            ]);
            out.extend(std::iter::repeat_n(b'G', usize::from(len)));
        }
        std::fs::write(dir.join(format!("seed-{seed:02}")), out).unwrap();
    }
}
