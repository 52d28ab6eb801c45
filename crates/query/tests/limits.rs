//! Bounds and cancellation: every limit gives a clear error naming it, and a set cancel flag
//! stops the evaluation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::AtomicBool;

use query::eval::{EvalError, Limits};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

fn store(series: usize) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..series {
        let key = StreamKey::parse(&format!("m|ST[i:{i}]")).unwrap();
        batch.numeric(&key, 0, i as f64).unwrap();
    }
    store.write(&batch).unwrap();
    (dir, store)
}

fn run(
    store: &Store,
    q: &str,
    end_s: i64,
    limits: Limits,
    cancel: bool,
) -> Result<query::Output, EvalError> {
    let flag = AtomicBool::new(cancel);
    query::run(store, q, 0, end_s * 1000, 60_000, limits, &flag)
}

#[test]
fn every_limit_is_named() {
    let (_dir, store) = store(20);
    let ok = run(&store, r#"find("m")"#, 600, Limits::default(), false).unwrap();
    assert_eq!(ok.streams.len(), 20);

    let e = run(
        &store,
        r#"find("m")"#,
        600,
        Limits {
            streams_max: 10,
            ..Limits::default()
        },
        false,
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::Limit(_)), "{e}");
    assert!(
        e.to_string().contains("streams_max 10") && e.to_string().contains("limit="),
        "{e}"
    );
    let limited = run(
        &store,
        r#"find("m", limit=5)"#,
        600,
        Limits {
            streams_max: 10,
            ..Limits::default()
        },
        false,
    )
    .unwrap();
    assert_eq!(limited.streams.len(), 5);

    // 20 streams × 10 slices = 200 points.
    let e = run(
        &store,
        r#"find("m")"#,
        600,
        Limits {
            points_max: 199,
            ..Limits::default()
        },
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("points_max 199"), "{e}");

    let e = run(
        &store,
        "1",
        600,
        Limits {
            slices_max: 9,
            ..Limits::default()
        },
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("slices_max 9"), "{e}");
    // Looking back widens the range: the widened range is bounded too.
    let e = run(
        &store,
        r#"find("m") | rolling:sum(1h)"#,
        600,
        Limits {
            slices_max: 20,
            ..Limits::default()
        },
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("slices_max 20"), "{e}");

    let e = run(
        &store,
        r#"find("m")"#,
        600,
        Limits {
            time_max_ms: 0,
            ..Limits::default()
        },
        false,
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::Timeout { time_max_ms: 0 }), "{e}");
}

#[test]
fn a_set_cancel_flag_stops_evaluation() {
    let (_dir, store) = store(3);
    let e = run(
        &store,
        r#"stats:sum{find("m")}"#,
        600,
        Limits::default(),
        true,
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::Cancelled), "{e}");
}

#[test]
fn ranges_and_periods_are_checked() {
    let (_dir, store) = store(1);
    let flag = AtomicBool::new(false);
    let e = query::run(&store, "1", 600_000, 0, 60_000, Limits::default(), &flag).unwrap_err();
    assert!(e.to_string().contains("end is before start"), "{e}");
    // Periods round up to the store's base period (60 s).
    let out = query::run(&store, "1", 0, 600_000, 1_000, Limits::default(), &flag).unwrap();
    assert_eq!(out.range.period_ms, 60_000);
    let e = query::run(
        &store,
        "#min_period=0\n1",
        0,
        600_000,
        60_000,
        Limits::default(),
        &flag,
    )
    .unwrap_err();
    assert!(e.to_string().contains("min_period"), "{e}");
    let e = query::run(
        &store,
        "#colour=1\n1",
        0,
        600_000,
        60_000,
        Limits::default(),
        &flag,
    )
    .unwrap_err();
    assert!(e.to_string().contains("unknown directive #colour"), "{e}");
}
