//! `strata hist` run as a real process, as scripts use it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use hist::{Histogram, QuantileType};
use serde_json::Value;

fn strata(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str], stdin: &str) -> String {
    let out = strata(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn bad(args: &[&str], stdin: &str) -> String {
    let out = strata(args, stdin);
    assert_eq!(out.status.code(), Some(2), "{args:?} must exit 2");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn encode_then_stats_agrees_with_the_library() {
    let input = "0.1\n0.1\n# a comment\n\n1.5 3\n2.3\nNaN\n";
    let b64 = ok(&["hist", "encode"], input);
    let mut h = Histogram::new();
    for (v, n) in [(0.1, 2), (1.5, 3), (2.3, 1), (f64::NAN, 1)] {
        h.insert_n(v, n);
    }
    assert_eq!(b64, h.to_base64());

    let args = [
        "hist",
        "stats",
        &b64,
        "--quantiles",
        "0,0.5,1",
        "--type",
        "7",
    ];
    let stats: Value = serde_json::from_str(&ok(&args, "")).unwrap();
    let keys: Vec<&str> = stats
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let want = [
        "count",
        "mean",
        "sum",
        "stddev",
        "quantiles",
        "inverse_quantiles",
        "counts",
        "bins",
    ];
    assert_eq!(keys, want);
    assert_eq!(stats["count"], 7);
    let q = h.quantiles(&[0.0, 0.5, 1.0], QuantileType::Type7).unwrap();
    let got: Vec<f64> = stats["quantiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(
        got, q,
        "shortest round-trip floats parse back to the same bits"
    );
    assert_eq!(stats["mean"].as_f64().unwrap(), h.mean());
    assert_eq!(
        stats["bins"][0],
        serde_json::json!([-1, 0, 1]),
        "NaN bin first"
    );
}

#[test]
fn inverse_quantiles_and_counts() {
    let b64 = ok(&["hist", "encode"], "1.0 3\n2.0 1\n");
    let args = [
        "hist",
        "stats",
        &b64,
        "--inverse",
        "1.05,5",
        "--counts-at",
        "1.0",
    ];
    let stats: Value = serde_json::from_str(&ok(&args, "")).unwrap();
    assert_eq!(stats["inverse_quantiles"], serde_json::json!([0.375, 1.0]));
    let c = &stats["counts"];
    assert_eq!(
        (
            c["below_inclusive"].as_u64(),
            c["below_exclusive"].as_u64(),
            c["nearby"].as_u64()
        ),
        (Some(3), Some(0), Some(3))
    );
    assert_eq!(
        (c["above_inclusive"].as_u64(), c["above_exclusive"].as_u64()),
        (Some(4), Some(1))
    );
}

#[test]
fn empty_histogram_prints_non_finite_floats_as_strings() {
    let stats: Value = serde_json::from_str(&ok(&["hist", "stats", "AAA="], "")).unwrap();
    assert_eq!(stats["mean"], "NaN");
    assert_eq!(stats["stddev"], "NaN");
    assert!(stats["quantiles"]
        .as_array()
        .unwrap()
        .iter()
        .all(|q| q == "NaN"));
}

#[test]
fn intscale_merge_and_decode() {
    let a = ok(&["hist", "encode", "--intscale"], "1234 -3\n7 -9 2\n");
    let b = ok(&["hist", "encode"], "1.2\n");
    let merged = ok(&["hist", "merge", &a, &b], "");
    let decoded: Value = serde_json::from_str(&ok(&["hist", "decode", &merged], "")).unwrap();
    assert_eq!(
        decoded["bins"],
        serde_json::json!([[70, -9, 2], [12, 0, 2]])
    );
    assert_eq!(
        decoded["text"],
        serde_json::json!(["H[7.0e-09]=2", "H[1.2e+00]=2"])
    );
    // Unpadded input is accepted.
    let unpadded = merged.trim_end_matches('=');
    assert_eq!(ok(&["hist", "merge", unpadded], ""), merged);
}

#[test]
fn bad_input_names_what_and_where() {
    assert!(bad(&["hist", "stats", "AA*A"], "").contains("invalid base64 at character 2"));
    assert!(bad(&["hist", "decode", "AAEKAA"], "").contains("truncated"));
    assert!(bad(&["hist", "encode"], "1\nabc\n").contains("line 2"));
    assert!(bad(&["hist", "encode", "--intscale"], "1.5 3\n").contains("mantissa"));
    assert!(bad(&["hist", "encode"], "1 2 3\n").contains("line 1"));
    let b64 = ok(&["hist", "encode"], "1\n");
    assert!(bad(&["hist", "stats", &b64, "--quantiles", "0.5,0.1"], "").contains("sorted"));
    assert!(bad(&["hist", "stats", &b64, "--quantiles", "1.5"], "").contains("outside"));
    assert!(bad(&["hist", "merge", &b64, "@@"], "").contains("histogram 2"));
}
