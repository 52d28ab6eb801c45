//! Property: any pipeline built from the function families, with arbitrary arguments, over a
//! store holding numeric, histogram and missing data, either evaluates — every stream then has
//! exactly one value per period — or fails with an error; it never panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::AtomicBool;

use hist::Histogram;
use proptest::prelude::*;
use query::eval::{Data, Limits};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let mut batch = WriteBatch::new();
    for host in ["a", "b"] {
        let n = StreamKey::parse(&format!("n|ST[host:{host}]")).unwrap();
        let h = StreamKey::parse(&format!("h|ST[host:{host}]")).unwrap();
        for m in [0i64, 1, 3, 4, 7] {
            batch.numeric(&n, m * 60_000, (m as f64) - 2.0).unwrap();
            let mut hist = Histogram::new();
            hist.insert_n(0.5 + m as f64, 1 + m as u64);
            hist.insert(-1.0);
            if m == 3 {
                hist.insert(f64::NAN);
            }
            batch.histogram(&h, m * 60_000, &hist).unwrap();
        }
    }
    store.write(&batch).unwrap();
    (dir, store)
}

const SOURCES: &[&str] = &[
    "find(\"n\")",
    "find:histogram(\"h\")",
    "find:counter(\"n\")",
    "find:derivative(\"n\")",
    "histogram:merge{find:histogram(\"h\")}",
    "group_by:merge(\"host\"){find:histogram(\"h\")}",
    "find(\"none\")",
    "3",
    "VIEW_PERIOD",
];

const STAGES: &[&str] = &[
    "histogram:percentile(ARG)",
    "histogram:percentile(50, 90)",
    "histogram:inverse_percentile(ARG)",
    "histogram:count",
    "histogram:count_above(ARG)",
    "histogram:count_below(ARG)",
    "histogram:count_between(0, ARG)",
    "histogram:ratio_above(ARG)",
    "histogram:ratio_between(ARG, 2)",
    "histogram:rate_above(ARG)",
    "histogram:mean",
    "histogram:stddev",
    "histogram:IQR",
    "histogram:merge",
    "histogram:subtract",
    "histogram:create",
    "window:merge(ARG)",
    "rolling:merge(ARG)",
    "window:percentile(ARG, 50)",
    "window:sum(ARG)",
    "rolling:mean(ARG)",
    "rolling:percentile(ARG, 90)",
    "window:count(ARG)",
    "stats:sum",
    "stats:percentile(ARG)",
    "stats:div",
    "op:div",
    "op:not",
    "each:add(ARG)",
    "each:div(ARG)",
    "math:ln",
    "math:pow(ARG)",
    "integrate",
    "derivative",
    "counter",
    "diff",
    "delay(ARG)",
    "fill(ARG)",
    "fill:forward",
    "top(ARG)",
    "bottom(ARG)",
    "group_by:sum(\"host\")",
    "label(\"%n %tv{host}\")",
    "tag:add(\"k\", \"v\")",
    "filter:values:gt(ARG)",
    "filter:mean:lt(ARG)",
    "forecasting:regression(ARG)",
    "forecasting:slope(ARG)",
    "forecasting:ewma(ARG)",
    "forecasting:holt_winters(ARG, 0.1, 0.1, period=ARG)",
    "coalesce",
];

fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        (-5i32..2000).prop_map(|x| x.to_string()),
        Just("0".to_string()),
        Just("0.5".to_string()),
        Just("1m".to_string()),
        Just("3m".to_string()),
        Just("1h".to_string()),
        Just("1e300".to_string()),
        Just("-1".to_string()),
    ]
}

fn pipeline() -> impl Strategy<Value = String> {
    (
        prop::sample::select(SOURCES),
        prop::collection::vec((prop::sample::select(STAGES), arg(), arg()), 0..5),
        prop::option::of((
            prop::sample::select(&["+", "*", "/", ">", "and", "-"][..]),
            prop::sample::select(SOURCES),
        )),
    )
        .prop_map(|(src, stages, infix)| {
            let mut q = src.to_string();
            for (stage, a, b) in stages {
                let stage = stage.replacen("ARG", &a, 1).replacen("ARG", &b, 1);
                q = format!("{q} | {stage}");
            }
            if let Some((op, other)) = infix {
                q = format!("({q}) {op} {other}");
            }
            q
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn pipelines_evaluate_or_fail_cleanly(q in pipeline(), start_m in 0i64..4, len_m in 0i64..12) {
        thread_local! {
            static STORE: (tempfile::TempDir, Store) = store();
        }
        STORE.with(|(_, store)| {
            let cancel = AtomicBool::new(false);
            let limits = Limits { slices_max: 100_000, ..Limits::default() };
            let start = start_m * 60_000;
            let res = query::run(store, &q, start, start + len_m * 60_000, 60_000, limits, &cancel);
            if let Ok(out) = res {
                let n = out.range.slices();
                for s in &out.streams {
                    assert_eq!(s.data.len(), n, "{q}: stream {} has {} values for {n} periods", s.label, s.data.len());
                    if let Data::Num(v) = &s.data {
                        assert!(v.iter().flatten().all(|x| x.is_finite()), "{q}: non-finite value");
                    }
                }
            }
        });
    }
}
