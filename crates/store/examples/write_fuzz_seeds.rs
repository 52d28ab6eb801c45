//! Writes the curated seed corpus of the `store` fuzz targets into `fuzz/corpus/<target>/`:
//! `cargo run -p store --example write_fuzz_seeds`. The seeds are deterministic, so re-running it
//! leaves the checked-in corpus unchanged; `tests/fuzz_corpus.rs` replays them in every
//! `cargo test`. Inputs the fuzzer finds go to `fuzz/scratch/` (see `fuzz/run.sh`), not here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use hist::Histogram;
use store::internals::index::INDEX_HEADER_SIZE_BYTES;
use store::internals::wal::{self, Group};
use store::internals::{numeric, packed_hist, rice_hist, text};
use store::key::StreamKey;
use store::{Kind, SeriesId, SeriesIndex, Value};

/// WAL records of every value tag, an empty record, a truncated one and garbage.
fn wal_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut h = Histogram::new();
    h.insert_n(0.25, 3);
    h.insert(1e9);
    let groups = vec![
        Group {
            id: SeriesId(0),
            samples: vec![
                (60_000, Value::Numeric(1.5)),
                (50_000, Value::Numeric(f64::NAN)),
            ],
        },
        Group {
            id: SeriesId(1),
            samples: vec![
                (-7, Value::Text("up".into())),
                (i64::MAX, Value::Text(String::new())),
            ],
        },
        Group {
            id: SeriesId(2),
            samples: vec![(1_000, Value::Histogram(h.clone()))],
        },
        Group {
            id: SeriesId(2),
            samples: vec![(
                2_000,
                Value::CumulativeHistogram(hist::convert::Cumulative::Bins(h)),
            )],
        },
    ];
    let encoded = |groups: &[Group]| {
        let mut out = Vec::new();
        let record = wal::Record {
            origin: None,
            groups: groups.to_vec(),
        };
        wal::encode(&record, &mut out);
        out
    };
    let all = encoded(&groups);
    vec![
        ("every_tag", all.clone()),
        ("numeric", encoded(&groups[..1])),
        ("empty", encoded(&[])),
        ("torn", all[..all.len() - 2].to_vec()),
        ("garbage", b"\x01\x02\xff\xff\xff\xff\x05\x01\x00".to_vec()),
    ]
}

fn write(corpus: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = corpus.join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// Index files: three series (one of each kind) written by `SeriesIndex` itself, then torn, with
/// a zero-filled tail, with a damaged record checksum, and without the header.
fn index_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("series.idx");
    let index = SeriesIndex::open(&path).unwrap();
    let keys = ["cpu|ST[host:a]", "lat|ST[b\"eCx5\":v]", "m"];
    for (k, kind) in keys.iter().zip(Kind::ALL) {
        index
            .get_or_create(&StreamKey::parse(k).unwrap(), kind)
            .unwrap();
    }
    index.sync().unwrap();
    drop(index);
    let file = std::fs::read(&path).unwrap();
    let mut bad_crc = file.clone();
    // Inside the first record's payload, so its checksum no longer matches.
    bad_crc[INDEX_HEADER_SIZE_BYTES + 12] ^= 1;
    let mut zeros = file.clone();
    zeros.extend_from_slice(&[0; 32]);
    vec![
        ("three_series", file.clone()),
        ("torn", file[..file.len() - 3].to_vec()),
        ("zero_tail", zeros),
        ("bad_crc_mid", bad_crc),
        ("records_only", file[INDEX_HEADER_SIZE_BYTES..].to_vec()),
    ]
}

fn main() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let corpus = corpus.as_path();

    let ints: Vec<(i64, f64)> = (0..50).map(|i| (i * 10_000, (i % 7) as f64)).collect();
    let floats: Vec<(i64, f64)> = (0..50)
        .map(|i| (i * 10_000 + i % 3, (i as f64).sin()))
        .collect();
    let specials = [
        (1, f64::NAN),
        (2, -0.0),
        (3, f64::INFINITY),
        (9, f64::NEG_INFINITY),
    ];
    let numeric_seeds = [
        ("ints", numeric::encode(&ints).unwrap()),
        ("floats", numeric::encode(&floats).unwrap()),
        ("specials", numeric::encode(&specials).unwrap()),
        ("one", numeric::encode(&[(-5, 1e300)]).unwrap()),
        (
            "garbage",
            b"\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
        ),
    ];
    for (name, bytes) in &numeric_seeds {
        write(corpus, "numeric_chunk", name, bytes);
    }

    let texts = [(1, "up"), (5, "down"), (7, ""), (100, "up \u{1F600}")];
    let text_seeds = [
        ("changes", text::encode(&texts).unwrap()),
        ("one", text::encode(&[(0, "x")]).unwrap()),
        (
            "regular",
            text::encode(&[(0, "a"), (10, "b"), (20, "a")]).unwrap(),
        ),
        ("empty_string", text::encode(&[(3, "")]).unwrap()),
        (
            "garbage",
            b"\x01\x02\x05\x00\x00\xff\x00\x00\x00\x00".to_vec(),
        ),
    ];
    for (name, bytes) in &text_seeds {
        write(corpus, "text_chunk", name, bytes);
    }

    let h = |values: &[f64]| {
        let mut h = Histogram::new();
        values.iter().for_each(|&v| h.insert(v));
        h
    };
    let periods = vec![
        (0, h(&[0.1, 0.12, 0.5, 3.0])),
        (60_000, h(&[0.1, 0.5, 3.0, 3.1, 250.0])),
        (120_000, Histogram::new()),
        (180_000, h(&[f64::NAN, 0.0, -1.0, 1e-100])),
    ];
    let repeated: Vec<(i64, Histogram)> =
        (0..6).map(|i| (i * 60_000, h(&[1.0, 2.0, 3.0]))).collect();
    let rice = |periods: &[(i64, Histogram)]| {
        rice_hist::encode(periods, &mut rice_hist::EncodeScratch::default()).unwrap()
    };
    let rice_seeds = [
        ("periods", rice(&periods)),
        ("one", rice(&periods[..1])),
        ("repeated", rice(&repeated)),
        ("empty_period", rice(&[(7, Histogram::new())])),
        (
            "garbage",
            b"\x02\x06\x02\x00\xff\xff\xff\xff\xff\xff".to_vec(),
        ),
    ];
    for (name, bytes) in &rice_seeds {
        write(corpus, "rice_histogram_chunk", name, bytes);
    }
    let packed_seeds = [
        ("periods", packed_hist::encode(&periods).unwrap()),
        ("one", packed_hist::encode(&periods[..1]).unwrap()),
        ("repeated", packed_hist::encode(&repeated).unwrap()),
        (
            "empty_period",
            packed_hist::encode(&[(7, Histogram::new())]).unwrap(),
        ),
        (
            "garbage",
            b"\x02\x05\x02\x00\xff\xff\xff\xff\xff\xff".to_vec(),
        ),
    ];
    for (name, bytes) in &packed_seeds {
        write(corpus, "packed_histogram_chunk", name, bytes);
    }

    for (name, bytes) in index_seeds() {
        write(corpus, "index_replay", name, &bytes);
    }

    let queries = [
        "cpu|ST[host:a,dc:b\"eCx5\"]",
        "m",
        "m|ST[a:b:c=d]",
        "and(a:b,or(c*:d*,not(/x/:/y\\/z/)))",
        "and(__name:cpu,__type:numeric,__activity:0-100)",
        "or(b\"YQ==\":*)",
    ];
    for (i, t) in queries.iter().enumerate() {
        write(corpus, "key_and_query", &format!("seed{i}"), t.as_bytes());
    }
    for (name, bytes) in wal_seeds() {
        write(corpus, "wal_record", name, &bytes);
    }
    store_file_seeds(corpus);
    println!("wrote seeds under {}", corpus.display());
}

/// Real blocks, manifests and cumulative state from a small store of every kind.
fn store_file_seeds(corpus: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = || store::StoreOptions {
        base_period_ms: 1_000,
        partition_ms: 10_000,
        background_flush: false,
        ..store::StoreOptions::default()
    };
    let db = store::Store::open(tmp.path(), opts()).unwrap();
    let mut b = store::WriteBatch::new();
    let key = |t: &str| StreamKey::parse(t).unwrap();
    for t in 0..30i64 {
        b.numeric(&key("n"), t * 700, (t % 5) as f64).unwrap();
        b.text(&key("t"), t * 700, ["a", "b"][(t % 3 == 0) as usize])
            .unwrap();
        let mut h = Histogram::new();
        h.insert(t as f64 * 0.37);
        b.histogram(&key("h"), t * 700, &h).unwrap();
        b.cumulative_histogram(&key("c"), t * 700, &h).unwrap();
    }
    db.write(&b).unwrap();
    db.close().unwrap();
    let mut blocks: Vec<_> = std::fs::read_dir(tmp.path().join("blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    blocks.sort();
    for (i, path) in blocks.iter().take(3).enumerate() {
        write(
            corpus,
            "block_file",
            &format!("block{i}"),
            &std::fs::read(path).unwrap(),
        );
    }
    let empty = b"STRATABK\x01\x00\x00\x00".to_vec();
    write(corpus, "block_file", "garbage", &empty);
    write(corpus, "block_file", "empty", b"");
    let manifest = std::fs::read(tmp.path().join("MANIFEST")).unwrap();
    write(corpus, "manifest_file", "manifest", &manifest);
    let fresh = store::internals::manifest::Manifest::new(60_000, 7_200_000).encode();
    write(corpus, "manifest_file", "fresh", &fresh);
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("cumulative-") {
            write(
                corpus,
                "manifest_file",
                "cumulative",
                &std::fs::read(&path).unwrap(),
            );
        }
    }
    write(
        corpus,
        "manifest_file",
        "garbage",
        b"STRATAMF\xff\xff\xff\xff",
    );
    write(corpus, "manifest_file", "short", b"STRATA");
}
