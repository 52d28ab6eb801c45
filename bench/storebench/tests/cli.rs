#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `storebench` binary end to end on small workloads in real directories, its errors, the
//! crash-loss run (real child processes killed with SIGKILL), and that the loss count can fail.

use std::process::{Command, Output};

use store::{Store, StoreOptions, WriteBatch};
use storebench::crash;

fn storebench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storebench"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs the benchmark, which must succeed, and returns its JSON line.
fn storebench_json(args: &[&str]) -> String {
    let out = storebench(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The value of a top-level numeric field of the JSON line (the benchmark's own fields only).
fn field(json: &str, name: &str) -> f64 {
    let start = json
        .find(&format!("\"{name}\":"))
        .unwrap_or_else(|| panic!("no {name} in {json}"));
    let rest = &json[start + name.len() + 3..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("{name} is {:?}", &rest[..end]))
}

#[test]
fn each_shape_runs_and_reports_what_it_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    // 0.1 h = 36 steps of 10 s.
    for (shape, series, samples) in [
        ("numeric-int", 200u64, 200 * 36u64),
        ("numeric-float", 200, 200 * 36),
        ("histogram", 30, 30 * 36),
        ("churn", 12_000, 12_000 * 6),
    ] {
        let dir = tmp.path().join(shape);
        let out = storebench(&[
            "--shape",
            shape,
            "--series",
            &series.to_string(),
            "--hours",
            "0.1",
            "--dir",
            dir.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{shape}: {stderr}");
        let json = String::from_utf8(out.stdout).unwrap();
        assert_eq!(json.lines().count(), 1, "{json}");
        assert_eq!(field(&json, "samples") as u64, samples, "{shape}");
        assert_eq!(field(&json, "series_in_index") as u64, series, "{shape}");
        assert!(field(&json, "cpu_s") > 0.0);
        assert!(field(&json, "peak_rss_bytes") > 0.0);
        assert!(field(&json, "bytes_per_sample_excluding_wal") > 0.0);
        // The store directory is there, with blocks written by the flush.
        assert!(dir.join("blocks").is_dir(), "{shape}: no blocks directory");
        if shape != "histogram" {
            assert!(
                json.contains(&format!("\"samples\":{samples}}}")),
                "block samples: {json}"
            );
        }
        if shape == "churn" {
            assert!(field(&json, "new_series_per_cpu_s") > 0.0);
        }
    }
}

#[test]
fn runs_and_batches_are_options() {
    let json = storebench_json(&[
        "--shape",
        "numeric-float",
        "--series",
        "50",
        "--hours",
        "0.1",
        "--run",
        "6",
        "--batch",
        "700",
    ]);
    assert_eq!(field(&json, "run_samples"), 6.0);
    // 50 × 36 samples in batches of at most 700.
    assert_eq!(field(&json, "batches"), (50.0f64 * 36.0 / 700.0).ceil());
    assert_eq!(field(&json, "samples"), 1800.0);
}

/// How many samples the generator makes at a time changes nothing the store is given: the same
/// batches, and chunks of the same bytes.
#[test]
fn the_generator_chunk_leaves_the_batches_alone() {
    let run = |chunk: &str| {
        storebench_json(&[
            "--shape",
            "histogram",
            "--series",
            "20",
            "--hours",
            "0.2",
            "--api",
            "ids",
            "--batch",
            "300",
            "--gen-chunk",
            chunk,
        ])
    };
    let (small, whole) = (run("7"), run("300"));
    assert_eq!(field(&small, "gen_samples"), 7.0);
    assert_eq!(field(&whole, "gen_samples"), 300.0);
    for name in ["samples", "batches", "chunk_bytes_histogram"] {
        assert_eq!(field(&small, name), field(&whole, name), "{name}");
    }
    // 20 series × 72 steps in batches of 300.
    assert_eq!(field(&small, "batches"), (20.0f64 * 72.0 / 300.0).ceil());
    let out = storebench(&["--shape", "histogram", "--gen-chunk", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--gen-chunk"));
}

/// A backfill writes the second half of the range first: the same samples, all kept.
#[test]
fn backfill_order_writes_every_sample() {
    let json = storebench_json(&[
        "--shape",
        "histogram",
        "--series",
        "20",
        "--hours",
        "0.5",
        "--order",
        "backfill",
    ]);
    assert!(json.contains("\"order\":\"backfill\""), "{json}");
    assert!(json.contains("\"check\":\"ok\""), "{json}");
    assert_eq!(field(&json, "samples"), 20.0 * 180.0);
    // 30 minutes of 60 s periods, each period once however the samples came.
    assert_eq!(field(&json, "flush_samples"), 20.0 * 30.0);
    let out = storebench(&["--shape", "churn", "--order", "backfill"]);
    assert_eq!(out.status.code(), Some(2));
    let out = storebench(&["--shape", "histogram", "--order", "sideways"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--order"));
}

#[test]
fn bad_arguments_are_named() {
    let out = storebench(&["--shape", "numeric"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shape \"numeric\""));
    let out = storebench(&["--shape", "churn", "--series", "many"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--series"));
    let out = storebench(&["--shape", "churn", "--hours", "-3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hours"));
    let out = storebench(&["--frobnicate", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--frobnicate"));
    // A directory with something in it would be sized along with the store.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("x"), b"x").unwrap();
    let out = storebench(&["--shape", "churn", "--dir", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
    let out = storebench(&["crash-loss", "--kill-ms-min", "5", "--kill-ms-max", "5"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn crash_loss_kills_writers_and_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let out = storebench(&[
        "crash-loss",
        "--iterations",
        "3",
        "--per-store",
        "2",
        "--kill-ms-min",
        "300",
        "--kill-ms-max",
        "700",
        "--seed",
        "11",
        "--dir",
        tmp.path().to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json = String::from_utf8(out.stdout).unwrap();
    assert_eq!(field(&json, "lost_samples"), 0.0, "{json}");
    assert_eq!(field(&json, "invented_samples"), 0.0, "{json}");
    assert_eq!(field(&json, "iterations"), 3.0);
    assert_eq!(
        stderr.matches("crash-loss iteration").count(),
        3,
        "{stderr}"
    );
}

#[test]
fn the_loss_count_sees_missing_and_foreign_samples() {
    // Recent enough for the store's retention, as `crash-loss` uses.
    let base_ms = (clock::wall() / 1_000_000) as i64 - crash::BASE_AGE_MS;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), StoreOptions::default()).unwrap();
    let fixed = crash::fixed_keys().unwrap();
    let mut batch = WriteBatch::new();
    for b in [0u64, 1, 2] {
        crash::fill_batch(base_ms, b, &fixed, &mut batch).unwrap();
        store.write(&batch).unwrap();
    }
    let found = crash::check(&store, base_ms, &[0, 1, 2], 0).unwrap();
    assert_eq!(found.lost_samples, 0);
    assert_eq!(found.invented_samples, 0);
    // Batch 3 was "acknowledged" but never written: all of it is lost.
    let found = crash::check(&store, base_ms, &[0, 1, 2, 3], 0).unwrap();
    assert_eq!(found.lost_samples, crash::BATCH_SAMPLES);
    // Batch 2 present but not acknowledged.
    let found = crash::check(&store, base_ms, &[0, 1], 0).unwrap();
    assert_eq!(found.unacked_batches_present, 1);
    // A value no child writes at that timestamp.
    batch.clear();
    batch
        .numeric(&crash::fixed_key(5).unwrap(), base_ms + 15, -1.0)
        .unwrap();
    store.write(&batch).unwrap();
    let found = crash::check(&store, base_ms, &[0, 1, 2], 0).unwrap();
    assert_eq!(found.invented_samples, 1);
    assert_eq!(
        found.lost_samples, 1,
        "the overwritten sample of batch 1 is gone"
    );
    store.close().unwrap();
}
