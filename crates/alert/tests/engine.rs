//! The live engine on a virtual clock: records journaled, state restored after reopening,
//! history written into the store exactly once, catch-up after downtime marked late, eager
//! evaluation of the open period, rules reloaded and changed through the API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::AtomicBool;

use alert::engine::Put;
use alert::record::{Record, FLAG_EAGER, FLAG_LATE};
use alert::state::State;
use common::*;

const PEOPLE: &str = r#"
[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login")'
window = "rolling:merge(5m)"
for = "2m"
annotations = { summary = "{{ count_above(1.5) }} people" }
[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 500"
"#;

/// Writes minute `m`'s logins (150 slow ones from minute 5 on).
fn minute(s: &store::Store, m: i64) {
    let slow = if m >= 5 { 150 } else { 3 };
    write_hist(
        s,
        "login|ST[app:web]",
        m * MIN + 10_000,
        &[(0.12, 400), (1.6, slow)],
    );
}

/// Runs the clock to `m` minutes + grace, writing each minute's data before its period ends.
fn run_to(e: &alert::Engine, s: &store::Store, clock: &VClock, from: i64, to: i64) {
    for m in from..to {
        minute(s, m);
        clock.set((m + 1) * MIN + 6_000);
        e.tick().unwrap();
    }
}

fn firing(e: &alert::Engine) -> Vec<(String, State, i64)> {
    e.core()
        .sorted_instances()
        .iter()
        .map(|i| (i.stream.clone(), i.state, i.fired_ms))
        .collect()
}

#[test]
fn transitions_are_journaled_and_restored_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), PEOPLE);
    let adir = dir.path().join("alerts");
    let clock = VClock::default();
    clock.set(MIN);
    let e = engine(&s, &adir, &rules, &clock);
    run_to(&e, &s, &clock, 0, 12);
    // 3 × 150 + 2 × 3 at minute 8, 4 × 150 + 3 at 9: pending at 9, firing at 11.
    assert_eq!(
        firing(&e),
        [("login|ST[app:web]".into(), State::Firing, 11 * MIN)]
    );
    let before = journal_records(&e);
    assert_eq!(
        transitions(&before.iter().map(|r| r.1.clone()).collect::<Vec<_>>())
            .iter()
            .map(|t| (t.0 / MIN, t.3.clone()))
            .collect::<Vec<_>>(),
        [(9, "pending".to_string()), (11, "firing".to_string())]
    );
    // No clean close: the journal alone restores the state.
    drop(e);
    let e = engine(&s, &adir, &rules, &clock);
    assert_eq!(
        firing(&e),
        [("login|ST[app:web]".into(), State::Firing, 11 * MIN)]
    );
    // Down for 5 minutes: the missed periods are evaluated in order, marked late, and the
    // steady alert neither resolves nor fires again.
    for m in 12..17 {
        minute(&s, m);
    }
    clock.set(17 * MIN + 6_000);
    e.tick().unwrap();
    let after = journal_records(&e);
    let cycles: Vec<(i64, u8)> = after
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Cycle(c) if c.t_ms > 12 * MIN => Some((c.t_ms / MIN, c.flags)),
            _ => None,
        })
        .collect();
    assert_eq!(
        cycles,
        [
            (13, FLAG_LATE),
            (14, FLAG_LATE),
            (15, FLAG_LATE),
            (16, FLAG_LATE),
            (17, 0)
        ]
    );
    assert_eq!(
        after
            .iter()
            .filter(|(_, r)| matches!(r, Record::Eval(_)))
            .count(),
        2
    );
    // A snapshot, then more: restore from snapshot + tail.
    e.snapshot().unwrap();
    run_to(&e, &s, &clock, 17, 19);
    drop(e);
    let e = engine(&s, &adir, &rules, &clock);
    assert_eq!(
        firing(&e),
        [("login|ST[app:web]".into(), State::Firing, 11 * MIN)]
    );
    assert_eq!(e.core().progress["login-slow"], 19 * MIN);
}

#[test]
fn history_is_written_into_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), PEOPLE);
    let adir = dir.path().join("alerts");
    let clock = VClock::default();
    let e = engine(&s, &adir, &rules, &clock);
    run_to(&e, &s, &clock, 0, 13);
    let mut sub = e.journal().subscriber("history").unwrap();
    let mut batch = journal::Batch::new();
    while e.write_history(&mut sub, &mut batch).unwrap() > 0 {}
    // Replaying every record again writes nothing twice (the store's origin check).
    e.journal().rewind_subscriber("history", 0).unwrap();
    let mut sub = e.journal().subscriber("history").unwrap();
    while e.write_history(&mut sub, &mut batch).unwrap() > 0 {}
    let cancel = AtomicBool::new(false);
    let q = |text: &str| {
        query::run(
            &s,
            text,
            0,
            20 * MIN,
            MIN,
            query::Limits::default(),
            &cancel,
        )
        .unwrap()
    };
    let fired =
        q(r#"find:count("strata_alert_transition", "and(alertname:login-slow,to:firing)")"#);
    let total: f64 = match &fired.streams[0].data {
        query::eval::Data::Num(v) => v.iter().flatten().sum(),
        _ => panic!("numeric"),
    };
    assert_eq!(total, 1.0, "fired once, written once");
    let alerts = q(r#"find:count("ALERTS", "alertstate:firing")"#);
    let n: f64 = match &alerts.streams[0].data {
        query::eval::Data::Num(v) => v.iter().flatten().sum(),
        _ => panic!("numeric"),
    };
    assert_eq!(n, 3.0, "ALERTS at minutes 11, 12 and 13");
    let state = q(r#"find:max("strata_alert_state", "alertname:login-slow")"#);
    let Some(query::eval::Data::Num(v)) = state.streams.first().map(|s| &s.data) else {
        panic!("no state stream")
    };
    assert_eq!(v[9], Some(1.0));
    assert_eq!(v[11], Some(2.0));
}

#[test]
fn eager_fires_inside_the_open_period() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(
        dir.path(),
        &PEOPLE
            .replace("for = \"2m\"", "eager = true")
            .replace("rolling:merge(5m)", "rolling:merge(1m)")
            .replace(">= 500", ">= 100"),
    );
    let clock = VClock::default();
    let e = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    for m in 0..3 {
        write_hist(&s, "login|ST[app:web]", m * MIN + 1_000, &[(1.6, 3)]);
        clock.set((m + 1) * MIN + 6_000);
        e.tick().unwrap();
    }
    // 20 s into minute 3, 150 slow logins arrive: the open period already holds them.
    write_hist(&s, "login|ST[app:web]", 3 * MIN + 20_000, &[(1.6, 150)]);
    clock.set(3 * MIN + 20_500);
    e.tick().unwrap();
    let recs = journal_records(&e);
    let eager: Vec<(i64, u8)> = recs
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Eval(ev) => Some((ev.t_ms, ev.flags)),
            _ => None,
        })
        .collect();
    assert_eq!(eager, [(3 * MIN + 20_500, FLAG_EAGER)]);
    assert_eq!(firing(&e)[0].1, State::Firing);
    // The period's own evaluation finds it firing: no second transition (its record only
    // carries the verdict into the flap history).
    clock.set(4 * MIN + 6_000);
    e.tick().unwrap();
    let recs: Vec<Record> = journal_records(&e).into_iter().map(|r| r.1).collect();
    let moves: Vec<(i64, String, String)> = transitions(&recs)
        .into_iter()
        .filter(|t| t.2 != t.3)
        .map(|t| (t.0, t.2, t.3))
        .collect();
    assert_eq!(moves, [(3 * MIN + 20_500, "ok".into(), "firing".into())]);
}

#[test]
fn api_rulesets_are_saved_validated_and_file_rulesets_are_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), PEOPLE);
    let clock = VClock::default();
    clock.set(10 * MIN);
    let e = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    let body = "expr = 'find(\"cpu\")'\n[[severity]]\nlevel = 2\nwhen = \"> 90\"\n";
    assert_eq!(e.put_ruleset("cpu", body, 0), Ok(Put::Created));
    assert_eq!(e.put_ruleset("cpu", body, 0), Ok(Put::Unchanged));
    let changed = body.replace("> 90", "> 95");
    assert_eq!(e.put_ruleset("cpu", &changed, 0), Ok(Put::Replaced));
    let owned = format!("owner = \"host:a\"\n{body}");
    assert_eq!(e.put_ruleset("cpu2", &owned, 0), Ok(Put::Created));
    assert_eq!(e.delete_owned("host:b"), Ok(Vec::new()));
    assert_eq!(e.delete_owned("host:a"), Ok(vec!["cpu2".to_string()]));
    assert!(matches!(
        e.put_ruleset("login-slow", body, 0),
        Err(alert::engine::ChangeError::ReadOnly(_))
    ));
    assert!(matches!(
        e.put_ruleset("bad", "expr = 'find('\n", 0),
        Err(alert::engine::ChangeError::Invalid(_))
    ));
    let names: Vec<String> = e.rule_infos().iter().map(|r| r.name.clone()).collect();
    assert_eq!(names, ["cpu", "login-slow"]);
    // It survives a restart (a file in <alerts>/rules).
    drop(e);
    let e = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    assert!(e.rule_infos().iter().any(|r| r.name == "cpu"));
    assert_eq!(e.delete_ruleset("cpu"), Ok(()));
    assert_eq!(
        e.delete_ruleset("cpu"),
        Err(alert::engine::ChangeError::NotFound)
    );
}

#[test]
fn a_file_edited_keeps_its_instances_and_a_ruleset_removed_forgets_them() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), PEOPLE);
    let clock = VClock::default();
    let e = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    run_to(&e, &s, &clock, 0, 12);
    let fp = e.core().sorted_instances()[0].fp;
    // A new threshold, same name: the same fingerprint, still firing since minute 11.
    std::fs::write(rules.join("rules.toml"), PEOPLE.replace(">= 500", ">= 400")).unwrap();
    clock.set(clock.get() + 10_000);
    e.reload_rules(true);
    run_to(&e, &s, &clock, 12, 13);
    assert_eq!(e.core().sorted_instances()[0].fp, fp);
    assert_eq!(firing(&e)[0].2, 11 * MIN);
    std::fs::remove_file(rules.join("rules.toml")).unwrap();
    clock.set(clock.get() + 10_000);
    e.tick().unwrap();
    assert!(e.core().instances.is_empty());
    assert!(journal_records(&e)
        .iter()
        .any(|(_, r)| matches!(r, Record::Forget(f) if f.fps == [fp])));
}

const HOT: &str = r#"
[[ruleset]]
name = "hot"
expr = 'find("cpu")'
annotations = { summary = "{{ stream }} has been hotter than 90 for the whole window: look at its fans, its neighbours in the rack and what was deployed there last" }
[[ruleset.severity]]
level = 2
when = "> 90"
"#;

/// Ten thousand streams crossing at once: one record of their updates would be larger than the
/// alert journal takes (it refused it, and the cycle was retried every tick without end), so
/// the evaluation is journaled in parts and applied whole. A restart that finds only the first
/// part evaluates the period again, and ends exactly where the uninterrupted engine did.
#[test]
fn an_evaluation_too_large_for_one_record_is_journaled_in_parts() {
    use alert::record::{EVAL_PART_BYTES_MAX, FLAG_PART};
    const STREAMS: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let mut b = store::WriteBatch::new();
    for i in 0..STREAMS {
        let k = format!(
            "cpu|ST[host:host-{i:05}.example.internal,rack:r{},service:payments-{},zone:eu-west-1{}]",
            i % 100,
            i % 7,
            ["a", "b", "c"][i % 3]
        );
        b.numeric(&key(&k), 10_000, 95.0).unwrap();
    }
    s.write(&b).unwrap();
    let rules = rules_dir(dir.path(), HOT);
    let clock = VClock::default();
    clock.set(6_000);
    let whole = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    clock.set(MIN + 6_000);
    assert_eq!(whole.tick().unwrap(), 1);
    let records = journal_records(&whole);
    let parts: Vec<&alert::record::Eval> = records
        .iter()
        .filter_map(|(_, r)| match r {
            Record::Eval(e) => Some(e),
            _ => None,
        })
        .collect();
    let bytes: Vec<usize> = parts
        .iter()
        .map(|e| Record::Eval((*e).clone()).encode().len())
        .collect();
    // More than the journal's 4 MiB record bound in all, in parts under the part bound.
    assert!(bytes.iter().sum::<usize>() > 4 << 20, "{bytes:?}");
    assert!(bytes.iter().all(|&n| n <= EVAL_PART_BYTES_MAX), "{bytes:?}");
    let flags: Vec<bool> = parts.iter().map(|e| e.flags & FLAG_PART != 0).collect();
    assert!(flags.len() >= 5 && flags[..flags.len() - 1].iter().all(|&f| f));
    assert!(!flags[flags.len() - 1]);
    assert_eq!(
        parts.iter().map(|e| e.updates.len()).sum::<usize>(),
        STREAMS
    );
    let firing_whole: Vec<alert::state::Instance> = whole
        .core()
        .sorted_instances()
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(firing_whole.len(), STREAMS);
    assert!(firing_whole.iter().all(|i| i.state == State::Firing));
    assert_eq!(whole.core().progress["hot"], MIN);

    // Another engine whose journal kept only the first part.
    let cut = dir.path().join("cut");
    {
        let j = journal::Journal::open(cut.join("journal"), journal::Options::default()).unwrap();
        let first = Record::Eval(parts[0].clone()).encode();
        j.submit(&[first]).unwrap().wait().unwrap();
    }
    let restarted = engine(&s, &cut, &rules, &clock);
    assert_eq!(
        restarted.core().sorted_instances().len(),
        parts[0].updates.len()
    );
    assert!(!restarted.core().progress.contains_key("hot"));
    assert_eq!(restarted.tick().unwrap(), 1);
    // The period again: only the instances the first part did not hold step.
    let again: usize = journal_records(&restarted)
        .iter()
        .skip(1)
        .map(|(_, r)| match r {
            Record::Eval(e) => e.updates.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(again, STREAMS - parts[0].updates.len());
    let firing_again: Vec<alert::state::Instance> = restarted
        .core()
        .sorted_instances()
        .into_iter()
        .cloned()
        .collect();
    assert!(
        firing_again == firing_whole,
        "the restarted engine ended elsewhere"
    );
    assert_eq!(restarted.core().progress["hot"], MIN);
}

/// The built-in rule on data replayed from the past, on a metric that names no sender and on a
/// sender that stops: history is not a sender gone silent, a quiet metric is not a sender, and a
/// sender seen live that stops is noticed, even when it stopped while the engine was down.
#[test]
fn the_builtin_rule_judges_only_senders_seen_live() {
    const SEC: i64 = 1_000;
    const HOUR: i64 = 60 * MIN;
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), PEOPLE);
    let adir = dir.path().join("alerts");
    let open = |clock: &VClock| {
        let mut o = options(&adir, clock);
        o.rules_dirs = vec![rules.clone()];
        o.push_sources = Some((3.0, 3));
        alert::Engine::open(s.clone(), o).unwrap()
    };
    let silent = |e: &alert::Engine| -> Vec<(String, State)> {
        e.core()
            .sorted_instances()
            .iter()
            .filter(|i| i.ruleset == alert::rule::PUSH_SOURCES_NAME)
            .map(|i| (i.stream.clone(), i.state))
            .collect()
    };
    // An hour of a host imported from the past, every 10 s.
    for t in (7 * HOUR..8 * HOUR).step_by(10_000) {
        write_num(&s, "cpu|ST[host:old]", t, 1.0);
    }
    let clock = VClock::default();
    let start = 10 * HOUR;
    clock.set(start);
    let e = open(&clock);
    let live_minute = |m: i64| {
        for k in 0..6 {
            write_num(&s, "cpu|ST[host:live]", start + m * MIN + k * 10 * SEC, 2.0);
        }
    };
    for m in 0..10 {
        live_minute(m);
        if m < 3 {
            // Sent while something happens, then quiet: no sender is named.
            for k in 0..6 {
                write_num(&s, "errors", start + m * MIN + k * 10 * SEC, 1.0);
            }
        }
        clock.set(start + (m + 1) * MIN + 6 * SEC);
        e.tick().unwrap();
    }
    assert_eq!(
        silent(&e),
        [],
        "nothing is silent: one is history, one is live, one is no sender"
    );
    // The live host stops while the engine is down; the engine is back ten minutes later.
    drop(e);
    clock.set(start + 20 * MIN + 6 * SEC);
    let e = open(&clock);
    e.tick().unwrap();
    assert_eq!(silent(&e), [("host:live".to_string(), State::Firing)]);
    // And it comes back.
    live_minute(20);
    clock.set(start + 21 * MIN + 6 * SEC);
    e.tick().unwrap();
    assert_eq!(silent(&e), [("host:live".to_string(), State::Resolved)]);
}
