//! Measures the analytics endpoint end to end over HTTP: 1,000 histogram streams, 4 h of
//! one-minute periods (≈ 20 bins each), merged and asked `histogram:percentile(99)` and
//! `histogram:inverse_percentile(0.1)` at a 1 h period; and the parse time of a 20-stage
//! pipeline. `cargo run --release -p query --example caql_bench` prints medians of 15 requests
//! (wall time, client to client, on 127.0.0.1, and the CPU time of the whole process — server
//! and client — per request), first with the data in the store's head, then after a flush to
//! blocks, then with rollups built (and which rollup level served the merge).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use hist::Histogram;
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

const STREAMS: usize = 1_000;
const MINUTES: i64 = 240;
const SAMPLES_PER_MINUTE: usize = 30;
const RUNS: usize = 15;
/// 2026-11-22T00:00:00Z
const T0_MS: i64 = 1_795_305_600_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    conn.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (
        head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn measure(addr: &str, label: &str) {
    let (start, end) = (T0_MS / 1000, T0_MS / 1000 + MINUTES * 60);
    for q in [
        r#"histogram:percentile(99){histogram:merge{find:histogram("req_latency")}}"#,
        r#"histogram:inverse_percentile(0.1){histogram:merge{find:histogram("req_latency")}}"#,
    ] {
        let path = format!(
            "/api/strata/v1/caql?query={}&start={start}&end={end}&period=1h",
            enc(q)
        );
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        let mut body = String::new();
        for _ in 0..RUNS {
            let t = Instant::now();
            let c = clock::process_cpu_ns();
            let (status, b) = get(addr, &path);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            cpu.push((clock::process_cpu_ns() - c) as f64 / 1e6);
            assert_eq!(status, 200, "{b}");
            body = b;
        }
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let values = &v["series"][0]["values"];
        println!(
            "{label}: {q}\n    wall median {:.2} ms (min {:.2}), process CPU median {:.2} ms, over {RUNS} requests; first value {}",
            median(times.clone()),
            times.iter().copied().fold(f64::INFINITY, f64::min),
            median(cpu),
            values[0][1]
        );
    }
}

/// Which level a 1 h merge of every stream reads: the same fetch the endpoint makes, in process.
fn served_by(store: &Store) {
    let view = store.view().unwrap();
    let snap = store.index().snapshot().unwrap();
    let q = store::TagQuery::parse("__name:req_latency").unwrap();
    let ids = store.find(&q, u64::MAX).unwrap();
    let slicing = store::Slicing {
        start_ms: T0_MS,
        end_ms: T0_MS + MINUTES * 60_000,
        period_ms: store::HOUR_MS,
    };
    let groups = store::merged_histograms(&view, &snap, &ids, slicing, &[]).unwrap();
    // The store's share alone: the same merge in process, thread CPU.
    let mut cpu_ms: Vec<f64> = (0..15)
        .map(|_| {
            let t = clock::thread_cpu_ns();
            store::merged_histograms(&view, &snap, &ids, slicing, &[]).unwrap();
            (clock::thread_cpu_ns() - t) as f64 / 1e6
        })
        .collect();
    cpu_ms.sort_by(f64::total_cmp);
    println!(
        "the merge in process (store only): thread CPU median {:.2} ms (min {:.2})",
        cpu_ms[cpu_ms.len() / 2],
        cpu_ms[0]
    );
    let level = view
        .level_for(slicing.period_ms)
        .map(|l| view.levels()[l].0);
    println!(
        "a 1 h merge of {} streams starts at the level of period {:?} ms and read {} rollup \
         slices ({} observations)",
        ids.len(),
        level,
        view.rollup_slices_read(),
        groups[0]
            .slices
            .iter()
            .map(Histogram::sample_count)
            .sum::<u64>()
    );
}

/// Writes one histogram per stream per minute of `minutes` (30 log-uniform latencies each).
fn load(store: &Store, keys: &[StreamKey], minutes: std::ops::Range<i64>, rng: &mut u64) {
    let mut next = move || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    for m in minutes {
        let mut batch = WriteBatch::new();
        for k in keys {
            let mut h = Histogram::new();
            for _ in 0..SAMPLES_PER_MINUTE {
                // Log-uniform latencies over 1 ms … 1 s.
                let u = (next() % 1_000_000) as f64 / 1_000_000.0;
                h.insert(10f64.powf(-3.0 + 3.0 * u));
            }
            batch.histogram(k, T0_MS + m * 60_000, &h).unwrap();
        }
        store.write(&batch).unwrap();
    }
}

/// Builds the rollups due `after_ms` past the data's end, then measures the queries.
fn build_and_measure(store: &Store, addr: &str, after_ms: i64, label: &str) {
    let t = Instant::now();
    let report = store
        .build_rollups(T0_MS + MINUTES * 60_000 + after_ms)
        .unwrap();
    println!(
        "{label} built in {:.1} s: {} partitions, {:.1} MB",
        t.elapsed().as_secs_f64(),
        report.partitions,
        report.bytes as f64 / 1e6
    );
    served_by(store);
    measure(addr, label);
}

/// A store with the defaults, flushed and rolled up only when the benchmark says so.
fn open_store(dir: &std::path::Path) -> Store {
    let opts = StoreOptions {
        background_flush: false,
        ..StoreOptions::default()
    };
    Store::open(dir, opts).unwrap()
}

/// Serves the analytics endpoint over `store` on 127.0.0.1; returns its address.
fn serve(store: Arc<Store>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, query::http::router(store))
                .await
                .unwrap();
        });
    });
    addr
}

/// The state a running server is in when asked for the last 4 h: everything older than the
/// last flush (at most `flush_interval`, 15 min, ago) in blocks with the finest level's partial
/// rollup rebuilt right after that flush, the newest 15 minutes still in the head.
fn steady_state(keys: &[StreamKey]) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let head_minutes = 15;
    load(&store, keys, 0..MINUTES - head_minutes, &mut rng);
    store.flush().unwrap();
    store
        .build_rollups(T0_MS + (MINUTES - head_minutes) * 60_000)
        .unwrap();
    load(&store, keys, MINUTES - head_minutes..MINUTES, &mut rng);
    let store = Arc::new(store);
    let addr = serve(store.clone());
    served_by(&store);
    measure(
        &addr,
        "steady state (partial 5 m rollup + 15 min in the head)",
    );
    // The next flush makes the partial rollup stale until the build it triggers is done: reads
    // take it with the new flush block added on top.
    store.flush().unwrap();
    served_by(&store);
    measure(
        &addr,
        "just after a flush (stale partial rollup + the new block)",
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let keys: Vec<StreamKey> = (0..STREAMS)
        .map(|i| StreamKey::parse(&format!("req_latency|ST[host:h{i:04},dc:dc{}]", i % 4)).unwrap())
        .collect();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let t = Instant::now();
    load(&store, &keys, 0..MINUTES, &mut rng);
    println!(
        "loaded {STREAMS} streams × {MINUTES} one-minute histograms in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let store = Arc::new(store);
    let addr = serve(store.clone());
    served_by(&store);
    measure(&addr, "head");
    store.flush().unwrap();
    served_by(&store);
    measure(&addr, "blocks");
    // Rollups as the background maintenance builds them 31 minutes after the data ends: only the
    // finest level's (5 m) partition still filling, built from the blocks it has so far.
    build_and_measure(&store, &addr, 31 * 60_000, "recent rollups");
    // Rollups as of a year later: every level's partitions over the data are complete.
    build_and_measure(&store, &addr, 365 * store::DAY_MS, "rollups");
    steady_state(&keys);

    // Parse time of a 20-stage pipeline.
    let stages = [
        "find:histogram(\"req_latency\", \"and(dc:dc1)\")",
        "window:merge(5m)",
        "histogram:percentile(99)",
        "fill:forward",
        "each:mul(1000)",
        "rolling:mean(15m)",
        "math:round",
        "filter:values:gt(0)",
        "delay(1m)",
        "derivative",
        "integrate",
        "forecasting:ewma(0.3)",
        "top(10)",
        "label(\"%n %tv{host}\")",
        "tag:add(\"env\", \"prod\")",
        "each:add(1)",
        "math:abs",
        "window:max(1h)",
        "fill(0)",
        "stats:sum",
    ];
    let text = stages.join(" | ");
    let iterations = 20_000;
    let mut per = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..iterations {
            std::hint::black_box(query::parse(std::hint::black_box(&text)).unwrap());
        }
        per.push(t.elapsed().as_secs_f64() * 1e6 / iterations as f64);
    }
    println!(
        "parse a {}-stage pipeline ({} bytes): median {:.2} µs",
        stages.len(),
        text.len(),
        median(per)
    );
}
