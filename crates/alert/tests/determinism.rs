//! The same data always gives the same transitions: a live run (data arriving period by period,
//! the engine ticking on a virtual clock, records through the journal), `strata rules test` (a
//! test file in series notation) and a backtest (all data first) make identical records, for
//! random rulesets and random histogram or numeric data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fmt::Write as _;
use std::sync::Arc;

use alert::record::Record;
use alert::rule::{self, Source};
use alert::testfile::{self, TestFile};
use common::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Case {
    histograms: bool,
    /// Per stream, per minute: (fast, slow) counts or a number; `None` missing.
    data: Vec<Vec<Option<(u64, u64)>>>,
    window: i64,
    for_m: i64,
    keep_m: i64,
    high: u64,
    low: u64,
    clear: bool,
    min_coverage: f64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        1usize..=3,
        8usize..=22,
        1i64..=4,
        0i64..=2,
        0i64..=2,
        (5u64..40, 1u64..20),
        any::<bool>(),
        prop_oneof![Just(0.0), Just(0.5)],
    )
        .prop_flat_map(
            |(h, streams, minutes, window, for_m, keep_m, (high, low), clear, cov)| {
                let point = prop::option::weighted(0.85, (0u64..50, 0u64..40));
                let stream = prop::collection::vec(point, minutes);
                prop::collection::vec(stream, streams).prop_map(move |data| Case {
                    histograms: h,
                    data,
                    window,
                    for_m,
                    keep_m,
                    high: high + low,
                    low,
                    clear,
                    min_coverage: cov,
                })
            },
        )
}

fn ruleset_toml(c: &Case) -> String {
    let (expr, lhs) = if c.histograms {
        ("find:histogram(\"lat\")", "count_above(1.5)")
    } else {
        ("find:max(\"lat\")", "value")
    };
    let win = if c.histograms { "merge" } else { "sum" };
    let mut t = format!(
        "[[ruleset]]\nname = \"r\"\nexpr = '{expr}'\nwindow = \"rolling:{win}({}m)\"\nfor = \"{}m\"\nkeep_firing_for = \"{}m\"\nmin_coverage = {}\nannotations = {{ summary = \"{{{{ value }}}} at {{{{ tag.s }}}}\" }}\n",
        c.window, c.for_m, c.keep_m, c.min_coverage
    );
    write!(
        t,
        "[[ruleset.severity]]\nlevel = 1\nwhen = \"{lhs} >= {}\"\n",
        c.high
    )
    .unwrap();
    if c.clear {
        writeln!(t, "clear = \"{lhs} < {}\"", c.low).unwrap();
    }
    write!(
        t,
        "[[ruleset.severity]]\nlevel = 4\nwhen = \"{lhs} >= {}\"\n",
        c.low
    )
    .unwrap();
    t
}

fn key_of(i: usize) -> String {
    format!("lat|ST[s:{i}]")
}

fn write_minute(s: &store::Store, c: &Case, m: usize) {
    for (i, stream) in c.data.iter().enumerate() {
        let Some((fast, slow)) = stream[m] else {
            continue;
        };
        let ts = m as i64 * MIN;
        if c.histograms {
            write_hist(s, &key_of(i), ts, &[(0.12, fast), (1.6, slow)]);
        } else {
            write_num(s, &key_of(i), ts, slow as f64);
        }
    }
}

fn minutes(c: &Case) -> usize {
    c.data[0].len()
}

/// What a record says, without when it was written or how (late, eager).
fn normal(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Eval(e) => Some(format!("{} {} {:?}", e.t_ms, e.ruleset, e.updates)),
            _ => None,
        })
        .collect()
}

fn backtest_run(c: &Case) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    for m in 0..minutes(c) {
        write_minute(&s, c, m);
    }
    let rs = rule::parse_file_text(&ruleset_toml(c))
        .unwrap()
        .into_iter()
        .map(|x| Arc::new(rule::compile(x, Source::Api, MIN).unwrap()))
        .collect();
    let recs = alert::backtest::backtest(&s, rs, 0, minutes(c) as i64 * MIN).unwrap();
    normal(&recs)
}

fn live_run(c: &Case) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), &ruleset_toml(c));
    let clock = VClock::default();
    let e = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    for m in 0..minutes(c) {
        write_minute(&s, c, m);
        clock.set((m as i64 + 1) * MIN + 5_000);
        e.tick().unwrap();
    }
    let recs: Vec<Record> = journal_records(&e).into_iter().map(|r| r.1).collect();
    normal(&recs)
}

fn notation(c: &Case, stream: &[Option<(u64, u64)>]) -> String {
    stream
        .iter()
        .map(|p| match p {
            None => "_".to_string(),
            Some((fast, slow)) if c.histograms => {
                let mut parts = Vec::new();
                if *fast > 0 {
                    parts.push(format!("H[0.12]={fast}"));
                }
                if *slow > 0 {
                    parts.push(format!("H[1.6]={slow}"));
                }
                if parts.is_empty() {
                    // An empty histogram is no value at all, as when written.
                    "_".to_string()
                } else {
                    format!("{{{}}}", parts.join(","))
                }
            }
            Some((_, slow)) => format!("{slow}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn test_file_run(c: &Case) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("evaluation_interval = \"1m\"\n");
    text.push_str(&ruleset_toml(c));
    for (i, stream) in c.data.iter().enumerate() {
        write!(
            text,
            "[[input_series]]\nseries = '{}'\nvalues = '{}'\n",
            key_of(i),
            notation(c, stream)
        )
        .unwrap();
    }
    write!(
        text,
        "[[alert_rule_test]]\neval_time = \"{}m\"\nalertname = \"r\"\n",
        minutes(c)
    )
    .unwrap();
    let t: TestFile = toml::from_str(&text).unwrap();
    let report = testfile::run(&t, dir.path(), &dir.path().join("store")).unwrap();
    normal(&report.records)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn live_equals_rules_test_equals_backtest(c in case()) {
        let back = backtest_run(&c);
        let live = live_run(&c);
        let file = test_file_run(&c);
        prop_assert_eq!(&live, &back);
        prop_assert_eq!(&file, &back);
    }
}

#[test]
fn the_fixed_case_makes_transitions() {
    // Guards the property against comparing empty lists only.
    let c = Case {
        histograms: true,
        data: vec![(0..12)
            .map(|m| Some((10, if m > 3 { 30 } else { 0 })))
            .collect()],
        window: 2,
        for_m: 1,
        keep_m: 1,
        high: 50,
        low: 10,
        clear: true,
        min_coverage: 0.0,
    };
    let back = backtest_run(&c);
    assert!(back.len() >= 2, "{back:?}");
    assert_eq!(live_run(&c), back);
    assert_eq!(test_file_run(&c), back);
}
