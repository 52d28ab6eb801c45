//! Notification delivery throughput (`cargo bench -p alert --bench notify_deliver`): 10,000
//! alert instances fire in one evaluation, each its own group (`group_by = ["..."]`), and one
//! receiver's worker delivers them to a local webhook receiver (axum on 127.0.0.1, another
//! thread) — webhook JSON built, POSTed with keep-alive (pipelined, several in flight),
//! accepted, state saved and the subscriber committed as the accepted prefix grows. Prints
//! deliveries per second of wall time, the median of its rounds.
//!
//! `-- --alertmanager <binary>`: alternated rounds with Alertmanager delivering the same
//! 10,000 alerts (each its own group, `group_wait: 0s`) to the same receiver, timed from the
//! POST of the alerts to its `/api/v2/alerts` until the receiver has counted them all. Run
//! by `bench/alert/notify_vs_alertmanager.sh`, pinned to one core.
//!
//! Results go into `bench/RESULTS.md` ("alerting").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alert::engine::{Engine, EngineOptions};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIN: i64 = 60_000;
const INSTANCES: usize = 10_000;
const ROUNDS: usize = 3;
/// Alerts per POST to Alertmanager.
const AM_BATCH: usize = 1_000;

const RULES: &str = r#"
[[ruleset]]
name = "hot"
expr = 'find:max("x")'
annotations = { summary = "x is {{ value }} on {{ tag.host }}" }
[[ruleset.severity]]
level = 2
when = "> 1"
"#;

/// Deliveries per second of one Strata round.
fn strata_round(url: &str, got: &AtomicUsize) -> f64 {
    got.store(0, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::open(
            dir.path().join("store"),
            StoreOptions {
                base_period_ms: MIN,
                partition_ms: MIN * 120,
                background_flush: false,
                background_maintenance: false,
                ..StoreOptions::default()
            },
        )
        .unwrap(),
    );
    let mut b = WriteBatch::new();
    for i in 0..INSTANCES {
        let k = StreamKey::parse(&format!("x|ST[host:h{i}]")).unwrap();
        b.numeric(&k, 10_000, 5.0).unwrap();
    }
    store.write(&b).unwrap();
    let rules = dir.path().join("rules.d");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("rules.toml"), RULES).unwrap();
    let clock = Arc::new(AtomicI64::new(MIN + 6_000));
    let c = clock.clone();
    let mut o = EngineOptions::new(dir.path().join("alerts"));
    o.clock = Arc::new(move || c.load(Ordering::SeqCst));
    o.rules_dirs = vec![rules];
    o.push_sources = None;
    let config = format!(
        "[route]\nreceiver = \"hook\"\ngroup_by = [\"...\"]\n[[receiver]]\nname = \"hook\"\nwebhook = \"{url}\"\n"
    );
    o.notify = Some(Arc::new(alert::notify::Config::parse(&config).unwrap()));
    let engine = Engine::open(store, o).unwrap();
    engine.tick().unwrap();
    let n = engine.notifier().unwrap().clone();
    let mut w = n.worker(&*engine, "hook").unwrap();
    let started = Instant::now();
    while n.run_once(&*engine, &mut w).unwrap() > 0 {}
    let took = started.elapsed().as_secs_f64();
    let delivered = got.load(Ordering::SeqCst);
    assert_eq!(delivered, INSTANCES, "every notification arrived");
    delivered as f64 / took
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Deliveries per second of one Alertmanager round.
fn alertmanager_round(bin: &Path, url: &str, got: &AtomicUsize) -> f64 {
    got.store(0, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("am.yml");
    std::fs::write(
        &config,
        format!(
            "route:\n  receiver: hook\n  group_by: ['...']\n  group_wait: 0s\n  group_interval: 1h\n  repeat_interval: 24h\nreceivers:\n- name: hook\n  webhook_configs:\n  - url: '{url}'\n    send_resolved: false\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let am = Killed(
        Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .arg("--log.level=error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .get(format!("{base}/-/ready"))
        .send()
        .map_or(true, |r| !r.status().is_success())
    {
        assert!(Instant::now() < deadline, "Alertmanager did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let bodies: Vec<String> = (0..INSTANCES)
        .collect::<Vec<_>>()
        .chunks(AM_BATCH)
        .map(|chunk| {
            let alerts: Vec<serde_json::Value> = chunk
                .iter()
                .map(|i| {
                    serde_json::json!({
                        "labels": { "alertname": "hot", "host": format!("h{i}"), "severity": "2" },
                        "annotations": { "summary": format!("x is 5 on h{i}") },
                    })
                })
                .collect();
            serde_json::Value::Array(alerts).to_string()
        })
        .collect();
    let started = Instant::now();
    for b in bodies {
        let r = client
            .post(format!("{base}/api/v2/alerts"))
            .header("Content-Type", "application/json")
            .body(b)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while got.load(Ordering::SeqCst) < INSTANCES {
        assert!(
            Instant::now() < deadline,
            "Alertmanager did not deliver them all"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = started.elapsed().as_secs_f64();
    drop(am);
    INSTANCES as f64 / took
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let am_bin = args
        .iter()
        .position(|a| a == "--alertmanager")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let counter = got.clone();
    let app = axum::Router::new().fallback(axum::routing::post(move || {
        let c = counter.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            "ok"
        }
    }));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let s = strata_round(&url, &got);
        println!("round {round}: strata {s:.0}/s");
        ours.push(s);
        if let Some(bin) = &am_bin {
            let a = alertmanager_round(bin, &url, &got);
            println!("round {round}: alertmanager {a:.0}/s");
            theirs.push(a);
        }
    }
    println!(
        "notify_deliver: {INSTANCES} webhook deliveries: {:.0} per second (median of {ROUNDS}; one worker, keep-alive, pipelined, local receiver)",
        median(ours)
    );
    if !theirs.is_empty() {
        println!(
            "notify_deliver: alertmanager, the same {INSTANCES} alerts each its own group: {:.0} per second (median of {ROUNDS})",
            median(theirs)
        );
    }
}
