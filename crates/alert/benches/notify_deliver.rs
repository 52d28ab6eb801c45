//! Notification delivery throughput (`cargo bench -p alert --bench notify_deliver`): 10,000
//! alert instances fire in one evaluation, each its own group (`group_by = ["..."]`), and one
//! receiver's worker delivers them to a local webhook receiver (axum on 127.0.0.1, another
//! thread) — webhook JSON built, POSTed with keep-alive, accepted, state saved and the
//! subscriber committed. Prints deliveries per second of wall time.
//!
//! Results go into `crates/alert/README.md`'s table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use alert::engine::{Engine, EngineOptions};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIN: i64 = 60_000;
const INSTANCES: usize = 10_000;

const RULES: &str = r#"
[[ruleset]]
name = "hot"
expr = 'find:max("x")'
annotations = { summary = "x is {{ value }} on {{ tag.host }}" }
[[ruleset.severity]]
level = 2
when = "> 1"
"#;

fn main() {
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
            c.fetch_add(1, Ordering::Relaxed);
            "ok"
        }
    }));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });

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
    let delivered = got.load(Ordering::Relaxed);
    assert_eq!(delivered, INSTANCES, "every notification arrived");
    println!(
        "notify_deliver: {delivered} webhook deliveries in {took:.3} s: {:.0} per second (one worker, keep-alive, local receiver)",
        delivered as f64 / took
    );
}
