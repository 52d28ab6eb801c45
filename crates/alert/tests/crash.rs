#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `kill -9` of the engine at random points of evaluation, journal appends and snapshots, many
//! times over one alert directory: after every restart the engine continues where its journal
//! says, and the records of the whole run equal a backtest's over the same data — no
//! transition lost, none twice, and a steady alert fires once and never resolves.
//!
//! The child is this test binary re-executed with `ALERT_CHILD` set (`harness = false`). It
//! opens the store (written beforehand by the parent) and the engine on a virtual clock, prints
//! `ready`, then evaluates period after period as fast as it can, snapshotting every few KiB of
//! journal, until the data ends (`done`). The parent kills it a few milliseconds after `ready`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use alert::record::Record;
use alert::rule::{self, Source};
use common::*;

const CHILD_ENV: &str = "ALERT_CHILD";
const MINUTES: i64 = 240;
const KILLS_MIN: usize = 60;

const RULES: &str = r#"
[[ruleset]]
name = "slow"
expr = 'find:histogram("lat")'
window = "rolling:merge(3m)"
for = "2m"
keep_firing_for = "1m"
annotations = { summary = "{{ count_above(1.5) }} slow on {{ tag.s }}" }
[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 300"
clear = "count_above(1.5) < 200"
[[ruleset.severity]]
level = 3
when = "count_above(1.5) >= 60"
[[ruleset]]
name = "child"
expr = 'find:max("q")'
depends_on = "slow"
[[ruleset.severity]]
level = 2
when = "> 5"
"#;

/// Deterministic data: stream `steady` always over the threshold, `wave` moving through every
/// level (and flapping at times), `q` for the dependent ruleset.
fn write_data(dir: &Path) {
    let s = store(&dir.join("store"), MIN);
    for m in 0..MINUTES {
        let ts = m * MIN + 1_000;
        write_hist(&s, "lat|ST[s:steady]", ts, &[(0.12, 100), (1.6, 200)]);
        let phase = (m / 7) % 5;
        let slow = [0, 30, 120, 30, 0][phase as usize] + (m % 3) * 5;
        write_hist(&s, "lat|ST[s:wave]", ts, &[(0.12, 500), (1.6, slow as u64)]);
        write_num(&s, "q", ts, ((m * 7) % 11) as f64);
    }
    Arc::try_unwrap(s).ok().unwrap().close().unwrap();
}

fn reference(dir: &Path) -> Vec<String> {
    let s = store(&dir.join("store"), MIN);
    let rs = rule::parse_file_text(RULES)
        .unwrap()
        .into_iter()
        .map(|x| Arc::new(rule::compile(x, Source::File("rules.toml".into()), MIN).unwrap()))
        .collect();
    let recs = alert::backtest::backtest(&s, rs, 0, MINUTES * MIN).unwrap();
    Arc::try_unwrap(s).ok().unwrap().close().unwrap();
    normal(&recs)
}

fn normal(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Eval(e) => Some(format!("{} {} {:?}", e.t_ms, e.ruleset, e.updates)),
            _ => None,
        })
        .collect()
}

fn child_main() {
    let dir = std::path::PathBuf::from(std::env::var("ALERT_DIR").unwrap());
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        std::process::exit(3);
    });
    let s = open_store_retry(&dir.join("store"));
    let clock = VClock::default();
    let mut o = options(&dir.join("alerts"), &clock);
    o.rules_dirs = vec![dir.join("rules.d")];
    o.durability = journal::Durability::default();
    o.snapshot_journal_bytes_max = 4 << 10;
    let e = loop {
        match alert::Engine::open(s.clone(), o.clone()) {
            Ok(e) => break e,
            Err(err) if err.0.contains("locked") || err.0.contains("Locked") => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(err) => panic!("engine: {err}"),
        }
    };
    println!("ready");
    loop {
        let next = {
            let core = e.core();
            core.rulesets()
                .iter()
                .map(|r| {
                    core.progress
                        .get(&r.name)
                        .map_or(r.period_ms, |p| p + r.period_ms)
                })
                .min()
                .unwrap()
        };
        if next > MINUTES * MIN {
            break;
        }
        clock.set(next + 5_000);
        e.tick().unwrap();
    }
    println!("done");
}

/// Runs one child; kills it `delay_ms` after it is ready. Returns whether it finished alone.
fn run_child(dir: &Path, delay_ms: u64) -> bool {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "1")
        .env("ALERT_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "child did not start");
    std::thread::sleep(Duration::from_millis(delay_ms));
    let _ = child.kill();
    let status = child.wait().unwrap();
    line.clear();
    let _ = out.read_line(&mut line);
    let done = line.trim() == "done";
    assert!(
        done || !status.success() || status.code() == Some(0),
        "child failed: {status}"
    );
    done
}

fn journal_normal(dir: &Path) -> Vec<String> {
    let j = journal::Journal::open(
        dir.join("alerts").join("journal"),
        journal::Options::default(),
    )
    .unwrap();
    let mut r = j.reader(j.earliest_offset().unwrap()).unwrap();
    assert_eq!(
        j.earliest_offset().unwrap(),
        0,
        "nothing purged: history never read"
    );
    let mut b = journal::Batch::new();
    let mut recs = Vec::new();
    while r.next_batch(&mut b).unwrap() > 0 {
        for (_, p) in b.iter() {
            recs.push(Record::decode(p).unwrap());
        }
    }
    normal(&recs)
}

fn check_steady(records: &[String]) {
    let steady: Vec<&String> = records
        .iter()
        .filter(|r| r.contains("lat|ST[s:steady]"))
        .collect();
    let fires = steady
        .iter()
        .filter(|r| r.contains("state: Firing"))
        .count();
    assert!(fires >= 1, "the steady alert fired");
    assert!(
        steady
            .iter()
            .all(|r| !r.contains("state: Resolved") && !r.contains("state: Recovering")),
        "the steady alert never resolved"
    );
}

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
        return;
    }
    let mut kills = 0;
    let mut runs = 0;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    while kills < KILLS_MIN {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write_data(dir);
        let want = reference(dir);
        rules_dir(dir, RULES);
        loop {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if run_child(dir, seed % 40) {
                break;
            }
            kills += 1;
        }
        let got = journal_normal(dir);
        assert_eq!(got.len(), want.len(), "as many records as the backtest");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w);
        }
        check_steady(&got);
        runs += 1;
    }
    println!("crash: {runs} runs, {kills} kills, every run equal to its backtest: ok");
}
