//! Alerting benchmarks (`cargo bench -p alert --bench alert_eval -- [eval|latency|all]`):
//!
//! - `eval`: 1,000 rulesets × 100 histogram streams (100,000 instances), a 5-minute rolling
//!   window on 1-minute periods: process CPU per evaluation cycle through the live engine
//!   (journal included), with 1 % of the streams over their threshold.
//! - `latency`: detection latency from an acknowledged write to the state change, live (real
//!   clock, the engine's own threads): 1-second periods with 500 ms grace, and eager.
//!
//! Results go into `crates/alert/README.md`'s table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alert::engine::{Engine, EngineOptions};
use alert::state::State;
use hist::Histogram;
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

/// As `strata serve`: the benchmark measures the engine the server runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MIN: i64 = 60_000;
const RULESETS: usize = 1_000;
const STREAMS: usize = 100;

fn open_store(dir: &std::path::Path, base: i64) -> Arc<Store> {
    Arc::new(
        Store::open(
            dir,
            StoreOptions {
                base_period_ms: base,
                partition_ms: base * 120,
                background_flush: false,
                background_maintenance: false,
                ..StoreOptions::default()
            },
        )
        .expect("store"),
    )
}

/// A login-latency-like histogram: `n` fast samples spread over 8 bins, `slow` over 1.5 s.
fn latency(n: u64, slow: u64) -> Histogram {
    let mut h = Histogram::new();
    for (i, v) in [0.05, 0.07, 0.09, 0.12, 0.15, 0.2, 0.3, 0.5]
        .iter()
        .enumerate()
    {
        h.insert_n(*v, n / 8 + i as u64);
    }
    if slow > 0 {
        h.insert_n(1.6, slow);
        h.insert_n(2.5, slow / 2);
    }
    h
}

fn keys() -> Vec<Vec<StreamKey>> {
    (0..RULESETS)
        .map(|r| {
            (0..STREAMS)
                .map(|s| StreamKey::parse(&format!("lat_{r}|ST[host:h{s}]")).expect("key"))
                .collect()
        })
        .collect()
}

/// One minute of data for every stream; streams `s % 100 == 0` are slow from minute 3 on.
fn write_minute(store: &Store, keys: &[Vec<StreamKey>], m: i64) {
    for (r, ks) in keys.iter().enumerate() {
        let mut b = WriteBatch::new();
        for (s, k) in ks.iter().enumerate() {
            let bad = (r * STREAMS + s).is_multiple_of(100) && m >= 3;
            let h = latency(400, if bad { 200 } else { 1 });
            b.histogram(k, m * MIN + 1_000, &h).expect("sample");
        }
        store.write(&b).expect("write");
    }
}

fn rules_text() -> String {
    let mut t = String::new();
    for r in 0..RULESETS {
        t.push_str(&format!(
            "[[ruleset]]\nname = \"slow-{r}\"\nexpr = 'find:histogram(\"lat_{r}\")'\nwindow = \"rolling:merge(5m)\"\nannotations = {{ summary = \"{{{{ count_above(1.5) }}}} people ({{{{ ratio_above(1.5) | percent }}}}) on {{{{ tag.host }}}}\" }}\n[[ruleset.severity]]\nlevel = 1\nwhen = \"count_above(1.5) >= 500\"\n[[ruleset.severity]]\nlevel = 3\nwhen = \"count_above(1.5) >= 100\"\n"
        ));
    }
    t
}

fn eval_bench() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&dir.path().join("store"), MIN);
    let keys = keys();
    let started = Instant::now();
    for m in 0..12 {
        write_minute(&store, &keys, m);
    }
    eprintln!(
        "eval: wrote {} histograms in {:.1} s",
        12 * RULESETS * STREAMS,
        started.elapsed().as_secs_f64()
    );
    let rules = dir.path().join("rules.d");
    std::fs::create_dir_all(&rules).expect("rules dir");
    std::fs::write(rules.join("bench.toml"), rules_text()).expect("rules");
    let now = Arc::new(AtomicI64::new(0));
    let mut o = EngineOptions::new(dir.path().join("alerts"));
    o.rules_dirs = vec![rules];
    o.push_sources = None;
    let c = now.clone();
    o.clock = Arc::new(move || c.load(Ordering::SeqCst));
    let engine = Engine::open(store.clone(), o).expect("engine");
    let mut cpu = Vec::new();
    for m in 1..=12 {
        now.store(m * MIN + 6_000, Ordering::SeqCst);
        let before = clock::process_cpu_ns();
        let wall = Instant::now();
        engine.tick().expect("tick");
        let used = clock::process_cpu_ns() - before;
        let core = engine.core();
        eprintln!(
            "eval: minute {m}: {:.3} CPU-s, {:.3} s wall, {} instances kept, {} active",
            used as f64 / 1e9,
            wall.elapsed().as_secs_f64(),
            core.instances.len(),
            core.active_count()
        );
        if m >= 6 {
            cpu.push(used);
        }
    }
    cpu.sort_unstable();
    let median = cpu[cpu.len() / 2] as f64 / 1e9;
    let max = cpu[cpu.len() - 1] as f64 / 1e9;
    println!(
        "eval: {} instances ({RULESETS} rulesets x {STREAMS} histogram streams, 5m window, 1m periods): median {median:.3} CPU-s per cycle, max {max:.3} (full windows, minutes 6-12)",
        RULESETS * STREAMS
    );
}

/// Streams written once each at a random moment; the time from the write's acknowledgement
/// to the engine showing the instance firing.
fn latency_run(eager: bool, samples: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(&dir.path().join("store"), 1_000);
    let rules = dir.path().join("rules.d");
    std::fs::create_dir_all(&rules).expect("rules dir");
    let eager_line = if eager { "eager = true\n" } else { "" };
    std::fs::write(
        rules.join("r.toml"),
        format!("[[ruleset]]\nname = \"lat\"\nexpr = 'find:histogram(\"lat\")'\n{eager_line}[[ruleset.severity]]\nlevel = 1\nwhen = \"count_above(1.5) >= 1\"\n"),
    )
    .expect("rules");
    let mut o = EngineOptions::new(dir.path().join("alerts"));
    o.rules_dirs = vec![rules];
    o.push_sources = None;
    o.grace_ms = 500;
    let engine = Engine::open(store.clone(), o).expect("engine");
    let threads = engine.start();
    let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::new();
    for i in 0..samples {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(300 + rng % 700));
        let key = StreamKey::parse(&format!("lat|ST[s:{i}]")).expect("key");
        let fp = alert::core::fingerprint("lat", key.canonical_str());
        let mut b = WriteBatch::new();
        b.histogram(&key, alert::util::wall_ms(), &latency(10, 5))
            .expect("sample");
        store.write(&b).expect("write");
        let acked = Instant::now();
        loop {
            let firing = engine
                .core()
                .instances
                .get(&fp)
                .is_some_and(|x| x.state == State::Firing);
            if firing {
                out.push(acked.elapsed());
                break;
            }
            if acked.elapsed() > Duration::from_secs(30) {
                eprintln!("latency: sample {i} never fired");
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    engine.stop();
    for t in threads {
        let _ = t.join();
    }
    out
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn latency_bench() {
    for eager in [false, true] {
        let mut v = latency_run(eager, 100);
        let (p50, p99) = (percentile(&mut v, 0.5), percentile(&mut v, 0.99));
        println!(
            "latency: {} (1 s periods, 500 ms grace{}): p50 {:.3} s, p99 {:.3} s, max {:.3} s over {} writes",
            if eager { "eager" } else { "closed periods" },
            if eager { ", 250 ms eager looks" } else { "" },
            p50.as_secs_f64(),
            p99.as_secs_f64(),
            v[v.len() - 1].as_secs_f64(),
            v.len()
        );
    }
}

fn main() {
    let what = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "all".into());
    if what == "eval" || what == "all" {
        eval_bench();
    }
    if what == "latency" || what == "all" {
        latency_bench();
    }
}
