//! `strata store inspect` and `strata store verify` as a user runs them, on a real store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap()
}

fn make_store(dir: &Path) {
    let opts = StoreOptions {
        base_period_ms: 1_000,
        partition_ms: 60_000,
        background_flush: false,
        ..StoreOptions::default()
    };
    let store = Store::open(dir, opts).unwrap();
    let mut b = WriteBatch::new();
    for host in 0..3 {
        let n = StreamKey::parse(&format!("cpu|ST[host:h{host}]")).unwrap();
        for t in 0..90i64 {
            b.numeric(&n, t * 1000, t as f64).unwrap();
        }
    }
    let state = StreamKey::parse("state").unwrap();
    b.text(&state, 5_000, "up").unwrap();
    let lat = StreamKey::parse("latency|ST[host:h0]").unwrap();
    let mut h = hist::Histogram::new();
    h.insert(0.25);
    b.histogram(&lat, 1_000, &h).unwrap();
    store.write(&b).unwrap();
    store.close().unwrap();
}

#[test]
fn inspect_reports_series_blocks_and_disk_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let dir = tmp.path().to_str().unwrap();
    let out = strata(&["store", "inspect", dir, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["series"]["numeric"], 3);
    assert_eq!(doc["series"]["text"], 1);
    assert_eq!(doc["series"]["histogram"], 1);
    // 90 s of data in 60 s partitions: two blocks.
    assert_eq!(doc["blocks"].as_array().unwrap().len(), 2);
    assert_eq!(doc["time_range_ms"], serde_json::json!([0, 89_000]));
    let samples: u64 = doc["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["samples"].as_u64().unwrap())
        .sum();
    assert_eq!(samples, 3 * 90 + 1 + 1);
    assert!(doc["disk_bytes"]["numeric"].as_u64().unwrap() > 0);
    assert!(doc["disk_bytes"]["total"].as_u64().unwrap() > 0);
    let text = strata(&["store", "inspect", dir]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("series: 5 (numeric 3, text 1, histogram 1)"),
        "{text}"
    );
}

#[test]
fn verify_passes_a_healthy_store_and_names_a_damaged_block() {
    let tmp = tempfile::tempdir().unwrap();
    make_store(tmp.path());
    let dir = tmp.path().to_str().unwrap();
    let ok = strata(&["store", "verify", dir]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("ok: 2 blocks"));

    let mut blocks: Vec<_> = std::fs::read_dir(tmp.path().join("blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    blocks.sort();
    let victim = &blocks[0];
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[20] ^= 0x40;
    std::fs::write(victim, &bytes).unwrap();
    let bad = strata(&["store", "verify", dir, "--json"]);
    assert_eq!(bad.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    let name = victim.file_name().unwrap().to_str().unwrap();
    let problems = doc["problems"].as_array().unwrap();
    assert!(!problems.is_empty());
    assert!(problems
        .iter()
        .all(|p| p["file"].as_str().unwrap().ends_with(name)));
}

#[test]
fn a_directory_that_is_not_a_store_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = strata(&["store", "inspect", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a store's data directory (no MANIFEST)"),
        "{err}"
    );
    assert!(err.contains("./strata-data"), "{err}");
    // No Rust Debug text in what the user reads.
    assert!(!err.contains("InvalidOptions"), "{err}");
    let missing = tmp.path().join("nope");
    let out = strata(&["store", "verify", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such directory"));
}

#[test]
fn the_wal_or_a_directory_holding_one_store_means_that_store() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("strata-data");
    make_store(&data);
    let inspect = |dir: &Path| {
        let out = strata(&["store", "inspect", dir.to_str().unwrap(), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (report, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (direct, quiet) = inspect(&data);
    assert!(quiet.is_empty(), "{quiet}");
    let (from_wal, said) = inspect(&data.join("wal"));
    assert_eq!(from_wal, direct);
    assert!(
        said.contains("is a store's write-ahead log; using the store"),
        "{said}"
    );
    let (from_parent, said) = inspect(tmp.path());
    assert_eq!(from_parent, direct);
    assert!(said.contains("holds one store; using the store"), "{said}");
    let out = strata(&["store", "verify", tmp.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two stores side by side: which one is meant is not guessed.
    make_store(&tmp.path().join("other-data"));
    let out = strata(&["store", "inspect", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stores inside it:") && err.contains("other-data"),
        "{err}"
    );
}
