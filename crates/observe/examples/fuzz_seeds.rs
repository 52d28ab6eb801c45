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
        ("cassandra", Protocol::Cassandra),
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
    kafka_topic_ids(&root.join("kafka"));
    cassandra_v5(&root.join("cassandra"));
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

fn kafka_frame(head: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = ((head.len() + body.len()) as u32).to_be_bytes().to_vec();
    out.extend_from_slice(head);
    out.extend_from_slice(body);
    out
}

/// A Metadata v12 answer naming topic `orders` by id, then Produce v13 and Fetch v16 naming it by
/// that id (the path that learns topic ids).
fn kafka_topic_ids(dir: &Path) {
    let id: [u8; 16] = *b"0123456789abcdef";
    let client = [0, 4, b't', b'e', b's', b't'];
    let req = |key: u8, version: u8, corr: u8, body: &[u8]| {
        kafka_frame(
            &[&[0, key, 0, version, 0, 0, 0, corr][..], &client[..]].concat(),
            body,
        )
    };
    let mut answer = vec![
        0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 2, b'h', 0, 0, 0x23, 0x84, 0, 0,
    ];
    answer.extend_from_slice(&[2, b'c', 0, 0, 0, 1, 2, 0, 0, 7]);
    answer.extend_from_slice(b"orders");
    answer.extend_from_slice(&id);
    answer.extend_from_slice(&[0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    answer.extend_from_slice(&[2, 0, 0, 0, 1, 2, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
    let mut produce = vec![0, 0, 0, 1, 0, 0, 0x75, 0x30, 2];
    produce.extend_from_slice(&id);
    produce.extend_from_slice(&[1, 0]);
    let mut fetch = vec![
        0, 0, 0, 1, 0xf4, 0, 0, 0, 1, 3, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    fetch.push(2);
    fetch.extend_from_slice(&id);
    let messages = [
        (0u8, req(3, 12, 1, &[0, 2, 0, 0, 0, 0])),
        (1, kafka_frame(&[0, 0, 0, 1], &answer)),
        (0, req(0, 13, 2, &produce)),
        (1, kafka_frame(&[0, 0, 0, 2], &[0; 20])),
        (0, req(1, 16, 3, &fetch)),
        (1, kafka_frame(&[0, 0, 0, 3], &[0; 20])),
    ];
    for (seed, chunk_max) in [(0u8, 255usize), (1, 17)] {
        let mut out = vec![seed];
        for (d, bytes) in &messages {
            for chunk in bytes.chunks(chunk_max) {
                out.push(*d);
                out.push(chunk.len() as u8);
                out.extend_from_slice(chunk);
            }
        }
        std::fs::write(dir.join(format!("seed-topic-ids-{seed}")), out).unwrap();
    }
}

fn cql(version: u8, stream: u16, op: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![version, 0];
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(op);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A CQL v5 segment (uncompressed): length and self-contained flag, their CRC24, the payload,
/// a CRC32 (not checked by the observer, so zero here).
fn segment(payload: &[u8], whole: bool) -> Vec<u8> {
    let v = payload.len() as u32 | if whole { 1 << 17 } else { 0 };
    let h = [v as u8, (v >> 8) as u8, (v >> 16) as u8];
    let mut crc: u32 = 0x87_5060;
    for &b in &h {
        crc ^= u32::from(b) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x100_0000 != 0 {
                crc ^= 0x197_4f0b;
            }
        }
    }
    let mut out = h.to_vec();
    out.extend_from_slice(&[crc as u8, (crc >> 8) as u8, (crc >> 16) as u8]);
    out.extend_from_slice(payload);
    out.extend_from_slice(&[0; 4]);
    out
}

/// CQL v5: STARTUP answered READY, then queries and answers in self-contained segments and one
/// answer split over segments that are not.
fn cassandra_v5(dir: &Path) {
    let query = |stream: u16, text: &str| {
        let mut body = (text.len() as u32).to_be_bytes().to_vec();
        body.extend_from_slice(text.as_bytes());
        body.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
        cql(5, stream, 0x07, &body)
    };
    let both = [
        query(1, "SELECT 1 FROM t"),
        query(2, "INSERT INTO t (k) VALUES (2)"),
    ]
    .concat();
    let answers = [
        cql(0x85, 2, 0x08, &[0, 0, 0, 1]),
        cql(0x85, 1, 0x08, &[0, 0, 0, 2]),
    ]
    .concat();
    let mut big = cql(0x85, 3, 0x08, &[0, 0, 0, 2]);
    big.resize(600, 7);
    big[5..9].copy_from_slice(&(600u32 - 9).to_be_bytes());
    let mut messages = vec![
        (0u8, cql(5, 0, 0x01, b"\0\x01\0\x0bCQL_VERSION\0\x053.0.0")),
        (1, cql(0x85, 0, 0x02, b"")),
        (0, segment(&both, true)),
        (1, segment(&answers, true)),
        (0, segment(&query(3, "SELECT v FROM big"), true)),
    ];
    for part in big.chunks(250) {
        messages.push((1, segment(part, false)));
    }
    for (seed, chunk_max) in [(0u8, 255usize), (1, 23)] {
        let mut out = vec![seed];
        for (d, bytes) in &messages {
            for chunk in bytes.chunks(chunk_max) {
                out.push(*d);
                out.push(chunk.len() as u8);
                out.extend_from_slice(chunk);
            }
        }
        std::fs::write(dir.join(format!("seed-v5-{seed}")), out).unwrap();
    }
}
