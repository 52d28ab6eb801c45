#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `kill -9` of an engine that evaluates and notifies, at random points of evaluation, journal
//! appends and deliveries, at least 100 times: every notification an uninterrupted run makes
//! arrives at least once, nothing else arrives, and a notification that arrives more than once
//! carries the same idempotency key each time.
//!
//! The child is this test binary re-executed with `NOTIFY_CHILD` set (`harness = false`). It
//! opens the store (written by the parent) and the engine on a virtual clock, with one webhook
//! receiver pointing at the parent's HTTP receiver, prints `ready`, evaluates every period of
//! the data while a worker delivers, and prints `done` once the worker has read the whole
//! journal. The parent's receiver answers 503 to one request in seven (retries) and takes a
//! few milliseconds per request (so that kills land mid-delivery).
//!
//! Every other run routes through a timed group (`group_wait`, `group_interval`: the group's
//! timers live in the worker's saved state): a pending group notification is neither lost nor
//! sent at another record (it would carry another key, or other content) across the kills.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use common::*;
use serde_json::Value;

const CHILD_ENV: &str = "NOTIFY_CHILD";
const MINUTES: i64 = 90;
const STREAMS: i64 = 8;
const KILLS_MIN: usize = 100;
/// Kills one run may take before its resumed child must finish alone: each restart goes on from
/// the saved state, so a run that needs more is stuck (a resumed worker waiting for nothing).
const KILLS_PER_RUN_MAX: usize = 40;
/// The shortest range a kill's delay is drawn from (ms after the child is ready).
const KILL_RANGE_MS_MIN: u64 = 20;

const RULES: &str = r#"
[[ruleset]]
name = "wave"
expr = 'find:max("x")'
annotations = { summary = "x is {{ value }}" }
[[ruleset.severity]]
level = 2
when = "> 1"
"#;

/// Stream k is over the threshold for k + 3 minutes, then under for as long, and so on.
fn write_data(dir: &Path) {
    let s = store(&dir.join("store"), MIN);
    for m in 0..MINUTES {
        for k in 0..STREAMS {
            let on = ((m + k) / (k + 3)) % 2 == 0;
            write_num(
                &s,
                &format!("x|ST[s:{k}]"),
                m * MIN + 1_000,
                if on { 5.0 } else { 0.0 },
            );
        }
    }
}

fn child_main() {
    let dir = std::path::PathBuf::from(std::env::var("NOTIFY_DIR").unwrap());
    let url = std::env::var("NOTIFY_URL").unwrap();
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
    let route = if std::env::var("NOTIFY_TIMED").is_ok() {
        "group_by = [\"alertname\"]\ngroup_wait = \"2m\"\ngroup_interval = \"3m\"\n"
    } else {
        "group_by = [\"...\"]\n"
    };
    let config = format!(
        "[route]\nreceiver = \"hook\"\n{route}\
         [[receiver]]\nname = \"hook\"\nwebhook = \"{url}\"\nretry_initial = \"5ms\"\nretry_max = \"20ms\"\n"
    );
    o.notify = Some(Arc::new(alert::notify::Config::parse(&config).unwrap()));
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
    let worker = {
        let e = e.clone();
        std::thread::spawn(move || {
            let n = e.notifier().unwrap().clone();
            let mut w = n.worker(&*e, "hook").unwrap();
            loop {
                let read = n.run_once(&*e, &mut w).unwrap();
                if read == 0 {
                    if e.stopping() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        })
    };
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
    // Done once the worker has read everything the journal holds.
    let end = e.journal().committed_offset();
    loop {
        let subs = e.journal().subscribers().unwrap();
        let at = subs
            .iter()
            .find(|s| s.name == "notify.hook")
            .unwrap()
            .offset;
        if at >= end {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    e.stop();
    worker.join().unwrap();
    println!("done");
}

/// Runs one child; kills it `delay_ms` after it is ready (never when None). Returns whether it
/// finished alone, and how long it ran after it was ready (ms).
fn run_child(dir: &Path, url: &str, timed: bool, delay_ms: Option<u64>) -> (bool, u64) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if timed {
        command.env("NOTIFY_TIMED", "1");
    }
    let mut child = command
        .env(CHILD_ENV, "1")
        .env("NOTIFY_DIR", dir)
        .env("NOTIFY_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "child did not start");
    let ready = std::time::Instant::now();
    if let Some(d) = delay_ms {
        std::thread::sleep(Duration::from_millis(d));
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    line.clear();
    let _ = out.read_line(&mut line);
    let done = line.trim() == "done";
    if std::env::var("NOTIFY_DEBUG").is_ok() {
        eprintln!("child {delay_ms:?}: {status} {line:?}");
    }
    assert!(done || !status.success(), "child failed: {status}");
    (done, ready.elapsed().as_millis() as u64)
}

#[derive(Default)]
struct Inbox {
    /// path → (content, key) in arrival order.
    got: Mutex<BTreeMap<String, Vec<(String, String)>>>,
    requests: AtomicUsize,
}

async fn take(State(inbox): State<Arc<Inbox>>, uri: Uri, h: HeaderMap, b: Bytes) -> StatusCode {
    tokio::time::sleep(Duration::from_millis(2)).await;
    if inbox.requests.fetch_add(1, Ordering::SeqCst) % 7 == 3 {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let v: Value = serde_json::from_slice(&b).unwrap();
    let content: Vec<String> = v["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            format!(
                "{} {} {} {} {}",
                a["status"], a["labels"]["s"], a["startsAt"], a["endsAt"], a["annotations"]
            )
        })
        .collect();
    let key = h["idempotency-key"].to_str().unwrap().to_string();
    inbox
        .got
        .lock()
        .unwrap()
        .entry(uri.path().to_string())
        .or_default()
        .push((content.join(" | "), key));
    StatusCode::OK
}

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let inbox = Arc::new(Inbox::default());
    let app = axum::Router::new()
        .fallback(axum::routing::post(take))
        .with_state(inbox.clone());
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });

    let mut kills = 0;
    let mut runs = 0;
    let mut duplicates = 0;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    while kills < KILLS_MIN {
        let tmp = tempfile::tempdir().unwrap();
        let (reference, crashed) = (tmp.path().join("ref"), tmp.path().join("crash"));
        for d in [&reference, &crashed] {
            write_data(d);
            rules_dir(d, RULES);
        }
        let (ref_path, crash_path) = (format!("/ref{runs}"), format!("/crash{runs}"));
        let timed = runs % 2 == 1;
        let (done, reference_ms) = run_child(&reference, &format!("{base}{ref_path}"), timed, None);
        assert!(done, "the reference run finished");
        // Kills land anywhere within a run as long as the uninterrupted one took, however fast
        // the machine (a fixed range would mostly miss a fast run and the test would crawl).
        let kill_range_ms = reference_ms.max(KILL_RANGE_MS_MIN);
        for kill in 0.. {
            assert!(
                kill < KILLS_PER_RUN_MAX,
                "run {runs}: the child never finished alone after {kill} kills"
            );
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let crash = Some(seed % kill_range_ms);
            if run_child(&crashed, &format!("{base}{crash_path}"), timed, crash).0 {
                break;
            }
            kills += 1;
        }
        let got = inbox.got.lock().unwrap().clone();
        let want = &got[&ref_path];
        let have = &got[&crash_path];
        assert!(
            want.len() >= if timed { 10 } else { 20 },
            "the reference run notified: {want:?}"
        );
        let planned: BTreeMap<&String, &String> = want.iter().map(|(c, k)| (c, k)).collect();
        assert_eq!(planned.len(), want.len(), "the reference sent each once");
        for (c, k) in want {
            assert!(
                have.iter().any(|(hc, hk)| hc == c && hk == k),
                "planned notification lost across kills: {c} (key {k})"
            );
        }
        for (c, k) in have {
            assert_eq!(
                planned.get(c).copied(),
                Some(k),
                "arrived but not planned, or under another key: {c}"
            );
        }
        duplicates += have.len() - want.len();
        runs += 1;
    }
    println!(
        "notify_crash: {runs} runs, {kills} kills, every planned notification delivered, \
         {duplicates} duplicates all with their key"
    );
}
