//! The broker's outage test, end to end with the real binary: `strata serve` (the core) and
//! `strata broker` forwarding to it. A pusher sends histogram bodies to the broker at a steady
//! rate while the broker runs tcp checks every second; the core is killed with SIGKILL while it
//! receives and stays down for `OUTAGE_MS`; once it is back the broker is killed with SIGKILL while
//! it forwards the backlog, and restarted. Afterwards every body the broker acknowledged is in the
//! core exactly once (histogram counts exact, per body): a body whose answer was lost is there
//! once or not at all, never twice. Every one of the 1,000 checks' data reached the core, and
//! the backlog the broker reports (its own health series, at the core) is drained.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod roles_common;
use roles_common::{free_port, fresh_dir, Proc};

/// How long the core stays down.
const OUTAGE_MS: u64 = 60_000;
/// Push bodies in all, one every `PUSH_EVERY_MS`.
const BODIES: usize = 1_800;
const PUSH_EVERY_MS: u64 = 50;
/// Checks run by the broker, every second.
const CHECKS: usize = 1_000;
/// Bound on any wait for a process or for the data to arrive.
const WAIT_MS_MAX: u64 = 180_000;

fn core(data: &Path, port: u16) -> Proc {
    let config = data.with_extension("toml");
    std::fs::write(&config, "").unwrap();
    let args: Vec<String> = vec![
        "serve".into(),
        "--http".into(),
        format!("127.0.0.1:{port}"),
        "--statsd".into(),
        "127.0.0.1:0".into(),
        "--graphite".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--config".into(),
        config.display().to_string(),
    ];
    Proc::start(
        "strata serve",
        &args,
        &data.with_extension("log"),
        "listening",
    )
}

fn broker(data: &Path, core_port: u16, push_port: u16, checks: &Path) -> Proc {
    let args: Vec<String> = vec![
        "broker".into(),
        "--id".into(),
        "edge-1".into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--core-url".into(),
        format!("http://127.0.0.1:{core_port}"),
        "--push-http".into(),
        format!("127.0.0.1:{push_port}"),
        "--checks".into(),
        checks.display().to_string(),
    ];
    Proc::start("strata broker", &args, &data.with_extension("log"), "ready")
}

/// Body `i`'s histogram: `count(i)` samples in a bin of its own, so the core's merged histogram
/// tells every body's count apart. Bin (val, exp) = (10 + i % 90, i / 90 + 1).
fn bin(i: usize) -> (i64, i64) {
    ((10 + i % 90) as i64, (i / 90 + 1) as i64)
}

fn count(i: usize) -> u64 {
    1 + (i % 7) as u64
}

fn body(i: usize, ts_ms: i64) -> String {
    let (val, exp) = bin(i);
    format!(
        r#"{{"outage_lat":{{"_type":"h","_value":["H[{val}e{}]={}"],"_ts":{ts_ms}}}}}"#,
        exp - 1,
        count(i)
    )
}

/// The core's merged histogram of `outage_lat` over the slice holding `ts_ms`: (val, exp) → count.
fn core_bins(port: u16, ts_ms: i64) -> Option<BTreeMap<(i64, i64), u64>> {
    let client = reqwest::blocking::Client::new();
    let start = ts_ms / 1000 - 60;
    let url = format!(
        "http://127.0.0.1:{port}/api/strata/v1/fetch?query=and(__name:outage_lat)&start={start}\
         &end={}&period=3600s",
        start + 120
    );
    let doc: serde_json::Value = client.get(url).send().ok()?.json().ok()?;
    let mut out = BTreeMap::new();
    for series in doc["series"].as_array()? {
        for slice in series["data"].as_array()? {
            for b in slice["value"]["bins"].as_array().into_iter().flatten() {
                let key = (b[0].as_i64()?, b[1].as_i64()?);
                *out.entry(key).or_insert(0) += b[2].as_u64()?;
            }
        }
    }
    Some(out)
}

/// Checks with data at the core: distinct `check:tcp-…` tags among the broker's series.
fn core_checks_seen(port: u16) -> usize {
    let client = reqwest::blocking::Client::new();
    let url = format!("http://127.0.0.1:{port}/api/strata/v1/find?query=and(__check:edge-1)");
    let doc: Option<serde_json::Value> = client.get(url).send().ok().and_then(|r| r.json().ok());
    let mut seen = std::collections::BTreeSet::new();
    for series in doc.iter().filter_map(|d| d.as_array()).flatten() {
        for tag in series["tags"].as_array().into_iter().flatten() {
            if let Some(check) = tag.as_str().and_then(|t| t.strip_prefix("check:tcp-")) {
                seen.insert(check.to_owned());
            }
        }
    }
    seen.len()
}

/// Whether the core keeps the exactly-once contract on httptrap: it refuses a request that
/// names only some of the `Strata-*` headers (400) instead of applying it.
/// A drained backlog: the records of a few seconds of runs and pushes, not of the outage.
const BACKLOG_DRAINED_RECORDS_MAX: f64 = 200.0;

/// The newest value of a numeric series at the core (PromQL instant query), if any.
fn newest_value(port: u16, name: &str) -> Option<f64> {
    let doc: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{port}/api/v1/query"))
        .query(&[("query", name)])
        .send()
        .ok()?
        .json()
        .ok()?;
    doc["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

fn core_dedupes(port: u16) -> bool {
    let client = reqwest::blocking::Client::new();
    client
        .post(format!("http://127.0.0.1:{port}/write/probe"))
        .header("Strata-Source", "probe")
        .body("{}")
        .send()
        .is_ok_and(|r| r.status() == reqwest::StatusCode::BAD_REQUEST)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    Unsent,
    Acked,
    /// Sent, and no 2xx came back (the broker was down or died answering).
    Unknown,
}

#[test]
fn outage_kill9_core_and_broker_loses_nothing_and_counts_nothing_twice() {
    let dir = fresh_dir("broker-outage");
    let core_port = free_port();
    let push_port = free_port();
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let target_addr = target.local_addr().unwrap();
    // The checks' target accepts and drops connections.
    std::thread::spawn(move || for _ in target.incoming() {});
    let checks = dir.join("checks.toml");
    let mut text = String::new();
    for n in 0..CHECKS {
        text.push_str(&format!(
            "[[check]]\nid = \"tcp-{n}\"\nkind = \"tcp\"\ntarget = \"{target_addr}\"\n\
             period_ms = 1000\ntimeout_ms = 900\n\n"
        ));
    }
    std::fs::write(&checks, text).unwrap();

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // Every body in one hour slice of its own, a minute in the past.
    let ts_ms = (now_ms / 3_600_000) * 3_600_000 + 60_000;
    let ts_ms = if ts_ms > now_ms {
        ts_ms - 3_600_000
    } else {
        ts_ms
    };

    let core_data = dir.join("core");
    let broker_data = dir.join("broker");
    let mut the_core = Some(core(&core_data, core_port));
    let mut the_broker = Some(broker(&broker_data, core_port, push_port, &checks));

    let fates = Arc::new(Mutex::new(vec![Fate::Unsent; BODIES]));
    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pusher = {
        let (fates, sent, stop) = (fates.clone(), sent.clone(), stop.clone());
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let url = format!("http://127.0.0.1:{push_port}/write/push");
            for i in 0..BODIES {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let ok = client
                    .post(&url)
                    .body(body(i, ts_ms))
                    .send()
                    .is_ok_and(|r| r.status().is_success());
                fates.lock().unwrap()[i] = if ok { Fate::Acked } else { Fate::Unknown };
                sent.store(i + 1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(PUSH_EVERY_MS));
            }
        })
    };
    let wait_sent = |n: usize| {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        while sent.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "the pusher stalled");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    // Some data flows; then the core dies while it receives, and stays down.
    wait_sent(100);
    the_core.take().unwrap().kill9();
    println!("core killed at body {}", sent.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(OUTAGE_MS));
    the_core = Some(core(&core_data, core_port));
    println!("core back at body {}", sent.load(Ordering::Relaxed));
    // The broker drains its backlog; kill it while it forwards.
    std::thread::sleep(Duration::from_millis(1_500));
    the_broker.take().unwrap().kill9();
    println!("broker killed at body {}", sent.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(500));
    the_broker = Some(broker(&broker_data, core_port, push_port, &checks));
    let restarted = Instant::now();
    pusher.join().unwrap();
    stop.store(true, Ordering::Relaxed);

    // Wait until every acknowledged body is at the core, then a little longer for any double.
    let fates = fates.lock().unwrap().clone();
    let acked: Vec<usize> = (0..BODIES).filter(|i| fates[*i] == Fate::Acked).collect();
    let unknown = (0..BODIES).filter(|i| fates[*i] == Fate::Unknown).count();
    println!("bodies acknowledged {}, unanswered {unknown}", acked.len());
    assert!(acked.len() > BODIES / 2, "most bodies are acknowledged");
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    let mut bins;
    loop {
        bins = core_bins(core_port, ts_ms).unwrap_or_default();
        if acked.iter().all(|i| bins.contains_key(&bin(*i))) {
            break;
        }
        let missing = acked
            .iter()
            .filter(|i| !bins.contains_key(&bin(**i)))
            .count();
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged bodies never reached the core"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    println!(
        "every acknowledged body at the core {:.1} s after the broker's restart",
        restarted.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_millis(5_000));
    let bins = core_bins(core_port, ts_ms).unwrap();
    let dedupes = core_dedupes(core_port);
    let mut doubled = Vec::new();
    for (i, fate) in fates.iter().enumerate() {
        let got = bins.get(&bin(i)).copied().unwrap_or(0);
        let ok = match fate {
            Fate::Acked => got == count(i),
            Fate::Unknown => got == 0 || got == count(i),
            Fate::Unsent => got == 0,
        };
        if !ok {
            doubled.push((i, *fate, got, count(i)));
        }
        if *fate == Fate::Acked {
            assert!(
                got >= count(i),
                "body {i} lost at the core ({got} of {})",
                count(i)
            );
        }
    }
    assert!(
        dedupes,
        "the core keeps the exactly-once contract on httptrap"
    );
    assert!(
        doubled.is_empty(),
        "bodies at the core a wrong number of times (index, fate, count, expected): {doubled:?}"
    );
    // The checks ran through the outage and their data reached the core.
    let seen = core_checks_seen(core_port);
    println!("checks with data at the core: {seen} of {CHECKS}");
    assert_eq!(seen, CHECKS, "every check has data at the core");
    // The backlog drains: the broker's newest health sample at the core reports no more than
    // the records of a few seconds of runs still in flight.
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let backlog = newest_value(core_port, "broker_backlog_records");
        println!("the broker's backlog at the core: {backlog:?} records");
        if backlog.is_some_and(|b| b <= BACKLOG_DRAINED_RECORDS_MAX) {
            break;
        }
        assert!(Instant::now() < deadline, "the backlog never drained");
        std::thread::sleep(Duration::from_millis(1_000));
    }
    drop(the_broker);
    drop(the_core);
}
