//! Rulesets evaluated over a real store (backtests: every period on time): the people example,
//! every state transition, hysteresis, severity ladders, text and absence rules, dependencies,
//! coverage and flapping.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use alert::backtest::{backtest, Backtest};
use alert::record::Record;
use alert::rule::{self, Ruleset, Source};
use alert::state::State;
use common::*;

fn rulesets(text: &str, base: i64) -> Vec<Arc<Ruleset>> {
    rule::parse_file_text(text)
        .unwrap()
        .into_iter()
        .map(|s| Arc::new(rule::compile(s, Source::Api, base).unwrap()))
        .collect()
}

fn updates(records: &[Record]) -> Vec<(i64, String, String, u8)> {
    transitions(records)
        .into_iter()
        .map(|(t, _, from, to, sev)| (t / MIN, from, to, sev))
        .collect()
}

fn tr(m: i64, from: &str, to: &str, sev: u8) -> (i64, String, String, u8) {
    (m, from.to_string(), to.to_string(), sev)
}

const PEOPLE: &str = r#"
[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login", "app:web")'
window = "rolling:merge(5m)"
annotations = { summary = "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }}) waited more than 1.5 s on {{ tag.app }}" }
[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 500"
"#;

#[test]
fn people_fire_at_the_right_minute_with_the_right_count() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    // 3 slow logins a minute, then 150 a minute from minute 5 to 12.
    for m in 0..20 {
        let slow = if (5..=12).contains(&m) { 150 } else { 3 };
        write_hist(
            &s,
            "login|ST[app:web]",
            m * MIN + 7_000,
            &[(0.12, 4000), (1.6, slow)],
        );
    }
    let recs = backtest(&s, rulesets(PEOPLE, MIN), 0, 20 * MIN).unwrap();
    // At minute 9 the window holds minutes 4–8: 3 + 4 × 150 = 603 people.
    assert_eq!(
        updates(&recs),
        [tr(9, "ok", "firing", 1), tr(15, "firing", "resolved", 0)]
    );
    let Record::Eval(e) = &recs.iter().find(|r| matches!(r, Record::Eval(_))).unwrap() else {
        unreachable!()
    };
    let i = &e.updates[0].instance;
    let summary = &i.annotations[0].1;
    // 603 of 20,603 logins: 2.927 %.
    assert_eq!(summary, "603 people (2.927%) waited more than 1.5 s on web");
    assert_eq!(i.value, 603.0);
    assert!(i.labels.contains(&("app".into(), "web".into())));
    assert!(i.labels.contains(&("severity".into(), "1".into())));
}

const TIMED: &str = r#"
[[ruleset]]
name = "cpu"
expr = 'find:max("cpu")'
for = "2m"
keep_firing_for = "2m"
[[ruleset.severity]]
level = 2
when = "> 90"
"#;

#[test]
fn every_transition_of_the_state_machine() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    // Minute:  0   1   2   3   4   5   6   7   8   9  10  11  12 …
    let values = [50, 95, 95, 95, 95, 50, 95, 50, 50, 50, 50, 95, 50];
    for (m, v) in values.iter().enumerate() {
        write_num(&s, "cpu", m as i64 * MIN + 1_000, f64::from(*v));
    }
    let recs = backtest(&s, rulesets(TIMED, MIN), 0, 20 * MIN).unwrap();
    assert_eq!(
        updates(&recs),
        [
            tr(2, "ok", "pending", 2),        // minute 1's 95, seen at its period end
            tr(4, "pending", "firing", 2),    // 2 minutes later
            tr(6, "firing", "recovering", 0), // minute 5's 50
            tr(7, "recovering", "firing", 2), // minute 6's 95: the same episode
            tr(8, "firing", "recovering", 0),
            tr(10, "recovering", "resolved", 0), // keep_firing_for 2 minutes
            tr(12, "resolved", "pending", 2),    // minute 11's 95: a new episode
            tr(13, "pending", "ok", 0),          // cleared before `for`
            // The stream has no data after minute 12: nodata from minute 14.
            tr(14, "ok", "nodata", 0),
        ]
    );
    let fired: Vec<i64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::Eval(e) => Some(
                e.updates
                    .iter()
                    .map(|u| u.instance.fired_ms)
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(fired[1], 4 * MIN);
    assert_eq!(
        fired[3],
        4 * MIN,
        "back to firing keeps the episode's start"
    );
}

#[test]
fn hysteresis_holds_a_level_until_its_clear_holds() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    let rules = r#"
[[ruleset]]
name = "q"
expr = 'find:max("queue")'
[[ruleset.severity]]
level = 1
when = "> 100"
clear = "< 60"
[[ruleset.severity]]
level = 3
when = "> 10"
clear = "< 5"
"#;
    // Minute:  0    1   2   3   4  5  6  7
    let values = [120, 80, 70, 50, 8, 6, 4, 200];
    for (m, v) in values.iter().enumerate() {
        write_num(&s, "queue", m as i64 * MIN, f64::from(*v));
    }
    let recs = backtest(&s, rulesets(rules, MIN), 0, 8 * MIN).unwrap();
    assert_eq!(
        updates(&recs),
        [
            tr(1, "ok", "firing", 1),
            // 80 and 70 are under 100 but not under 60: still severity 1.
            tr(4, "firing", "firing", 3), // 50 clears level 1; level 3 holds (> 10)
            // 8 and 6: level 3's `when` fails but its `clear` (< 5) does not hold.
            tr(7, "firing", "resolved", 0), // 4 clears it
            tr(8, "resolved", "firing", 1), // a worse level escalates at once
        ]
    );
}

#[test]
fn text_rules_match_and_notice_changes() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    let rules = r#"
[[ruleset]]
name = "build"
text = "build_status"
annotations = { summary = "build is {{ text }}" }
[[ruleset.severity]]
level = 2
when = 'matches "^fail"'
[[ruleset]]
name = "deploys"
text = "version"
[[ruleset.severity]]
level = 5
when = "changed"
"#;
    for (m, v) in ["ok", "ok", "failed: tests", "failed: tests", "ok"]
        .iter()
        .enumerate()
    {
        write_text(&s, "build_status|ST[repo:a]", m as i64 * MIN + 500, v);
    }
    write_text(&s, "version", 500, "1.0");
    write_text(&s, "version", 3 * MIN + 500, "1.1");
    let recs = backtest(&s, rulesets(rules, MIN), 0, 6 * MIN).unwrap();
    let got: Vec<(i64, String, String, String)> = transitions(&recs)
        .into_iter()
        .map(|(t, stream, from, to, _)| (t / MIN, stream, from, to))
        .collect();
    let want = [
        (3, "build_status|ST[repo:a]", "ok", "firing"),
        (4, "version", "ok", "firing"),
        (5, "build_status|ST[repo:a]", "firing", "resolved"),
        (5, "version", "firing", "resolved"),
    ];
    let want: Vec<(i64, String, String, String)> = want
        .iter()
        .map(|(m, s, f, t)| (*m, s.to_string(), f.to_string(), t.to_string()))
        .collect();
    assert_eq!(got, want);
    let fired = recs.iter().find_map(|r| match r {
        Record::Eval(e) if e.ruleset == "build" => Some(e.updates[0].instance.annotations.clone()),
        _ => None,
    });
    assert_eq!(fired.unwrap()[0].1, "build is failed: tests");
}

#[test]
fn absence_fires_for_a_stream_gone_silent_and_for_an_expected_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    let rules = r#"
[[ruleset]]
name = "silent"
absent = "heartbeat"
silent_for = "3m"
expect = ["heartbeat|ST[host:never]"]
annotations = { summary = "{{ tag.host }} silent for {{ silent }}" }
"#;
    for m in 0..10 {
        write_num(&s, "heartbeat|ST[host:a]", m * MIN + 100, 1.0);
        if m < 4 {
            write_num(&s, "heartbeat|ST[host:b]", m * MIN + 100, 1.0);
        }
    }
    let recs = backtest(&s, rulesets(rules, MIN), 0, 10 * MIN).unwrap();
    let got: Vec<(i64, String, String)> = transitions(&recs)
        .into_iter()
        .map(|(t, stream, _, to, _)| (t / MIN, stream, to))
        .collect();
    // host:b's last sample is at 3m 0.1s: silent for more than 3 minutes from minute 7.
    assert_eq!(
        got,
        [
            (
                1,
                "heartbeat|ST[host:never]".to_string(),
                "firing".to_string()
            ),
            (7, "heartbeat|ST[host:b]".to_string(), "firing".to_string()),
        ]
    );
    let b = recs.iter().rev().find_map(|r| match r {
        Record::Eval(e) => Some(e.updates[0].instance.annotations[0].1.clone()),
        _ => None,
    });
    assert_eq!(b.unwrap(), "b silent for 3m 59s");
}

#[test]
fn a_child_is_silent_while_its_parent_fires_at_severity_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    let rules = r#"
[[ruleset]]
name = "host-down"
expr = 'find:max("down")'
[[ruleset.severity]]
level = 1
when = "> 0"
[[ruleset]]
name = "slow"
expr = 'find:max("latency")'
depends_on = "host-down"
depends_on_match = ["host"]
[[ruleset.severity]]
level = 2
when = "> 1"
"#;
    for m in 0..6 {
        let down = if (2..4).contains(&m) { 1.0 } else { 0.0 };
        write_num(&s, "down|ST[host:a]", m * MIN, down);
        write_num(&s, "latency|ST[host:a]", m * MIN, 5.0);
        write_num(&s, "latency|ST[host:b]", m * MIN, 5.0);
    }
    let recs = backtest(&s, rulesets(rules, MIN), 0, 6 * MIN).unwrap();
    let mut suppressed: Vec<(i64, String, bool)> = Vec::new();
    for r in &recs {
        if let Record::Eval(e) = r {
            if e.ruleset == "slow" {
                for u in &e.updates {
                    suppressed.push((
                        e.t_ms / MIN,
                        u.instance.stream.clone(),
                        u.instance.suppressed,
                    ));
                }
            }
        }
    }
    assert_eq!(
        suppressed,
        [
            (1, "latency|ST[host:a]".to_string(), false),
            (1, "latency|ST[host:b]".to_string(), false),
            (3, "latency|ST[host:a]".to_string(), true), // host a is down: silent
            (5, "latency|ST[host:a]".to_string(), false),
        ]
    );
}

#[test]
fn too_little_data_is_nodata() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    let rules = r#"
[[ruleset]]
name = "cov"
expr = 'find:histogram("lat")'
window = "5m"
min_coverage = 0.6
[[ruleset.severity]]
level = 3
when = "count > 10"
"#;
    for m in [0, 1, 2, 3, 4, 9] {
        write_hist(&s, "lat", m * MIN, &[(1.0, 20)]);
    }
    let recs = backtest(&s, rulesets(rules, MIN), 0, 12 * MIN).unwrap();
    assert_eq!(
        updates(&recs),
        [
            // One period of five (20 %): too little to judge.
            tr(1, "ok", "nodata", 0),
            tr(3, "nodata", "firing", 3), // three of five: 60 %
            // Minutes 3–7 hold two of five: nodata, the firing episode kept.
            tr(8, "firing", "nodata", 3),
        ]
    );
}

#[test]
fn an_alternating_condition_is_marked_flapping() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    let rules = "[[ruleset]]\nname = \"f\"\nexpr = 'find:max(\"x\")'\n[[ruleset.severity]]\nlevel = 3\nwhen = \"> 1\"\n";
    for m in 0..30 {
        write_num(&s, "x", m * MIN, if m % 2 == 0 { 2.0 } else { 0.0 });
    }
    let mut b = Backtest::new(&s, rulesets(rules, MIN), 0).unwrap();
    let recs = b.run_until(30 * MIN);
    let first_flap = recs.iter().find_map(|r| match r {
        Record::Eval(e) if e.updates.iter().any(|u| u.instance.flapping) => Some(e.t_ms / MIN),
        _ => None,
    });
    // Changes at every evaluation: codes 3,0,3,0… The fourth change (minute 5) makes
    // 1.25 + 1.2237 + 1.1974 + 1.1711 = 4.84 × 5 = 24.2 % ≥ 20 %.
    assert_eq!(first_flap, Some(5));
    let i = b.instances()[0];
    assert!(i.flapping, "still alternating at minute 30");
    assert!(matches!(i.state, State::Firing | State::Resolved));
}

#[test]
fn the_example_test_file_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/login_test.toml");
    let report = alert::testfile::run_file(&path, dir.path()).unwrap();
    assert_eq!(report.checks, 7);
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
}

#[test]
fn the_direct_histogram_read_equals_caql() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), MIN);
    for m in 0..10 {
        for (i, host) in ["a", "b", "c"].iter().enumerate() {
            if (m + i as i64) % 3 != 0 {
                write_hist(
                    &s,
                    &format!("lat|ST[host:{host}]"),
                    m * MIN + 5,
                    &[(0.2, 10), (1.7, m as u64)],
                );
            }
        }
    }
    for (window, cov) in [("3m", 0.0), ("3m", 0.6), ("rolling:last(2m)", 0.0)] {
        let text = format!(
            "[[ruleset]]\nname = \"d\"\nexpr = 'find:histogram(\"lat\", \"host:*\")'\nwindow = \"{window}\"\nmin_coverage = {cov}\n[[ruleset.severity]]\nlevel = 1\nwhen = \"count > 1\"\n"
        );
        let rs = rulesets(&text, MIN);
        let mut cache = alert::observe::Cache::default();
        for t in 1..=10 {
            let direct =
                alert::observe::observe_with(&s, &rs[0], t * MIN, &mut cache, true).unwrap();
            let caql =
                alert::observe::observe_with(&s, &rs[0], t * MIN, &mut cache, false).unwrap();
            assert_eq!(direct, caql, "window {window}, coverage {cov}, minute {t}");
        }
    }
}
