//! Measures query evaluation over a day of data: 250 numeric counters (360,000 samples) and
//! 25 histogram streams (36,000 one-minute periods of ≈ 35 bins), base period 60 s.
//! `cargo run --release -p promql --example query_bench` prints the median thread CPU time of
//! each query over 5 runs (evaluation runs on the calling thread).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::Histogram;
use promql::eval::{self, Limits};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

const SERIES: usize = 250;
const HIST_SERIES: usize = 25;
const MINUTES: i64 = 1_440;
const RUNS: usize = 5;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let counters: Vec<StreamKey> = (0..SERIES)
        .map(|i| {
            let host = format!("h{i:04}");
            let dc = format!("dc{}", i % 4);
            StreamKey::from_labels([("__name__", "req_total"), ("host", &host), ("dc", &dc)])
                .unwrap()
        })
        .collect();
    let hists: Vec<StreamKey> = (0..HIST_SERIES)
        .map(|i| {
            let host = format!("h{i:04}");
            StreamKey::from_labels([("__name__", "lat"), ("host", &host)]).unwrap()
        })
        .collect();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut values = vec![0.0f64; SERIES];
    for chunk in (0..MINUTES).collect::<Vec<_>>().chunks(60) {
        let mut batch = WriteBatch::new();
        for &m in chunk {
            let ts = m * 60_000;
            for (k, v) in counters.iter().zip(values.iter_mut()) {
                *v += (next() % 100) as f64;
                batch.numeric(k, ts, *v).unwrap();
            }
            for k in &hists {
                let mut h = Histogram::new();
                for _ in 0..50 {
                    // Log-uniform latencies over 1 ms … 10 s.
                    let u = (next() % 1_000_000) as f64 / 1_000_000.0;
                    h.insert(10f64.powf(-3.0 + 4.0 * u));
                }
                batch.histogram(k, ts, &h).unwrap();
            }
        }
        store.write(&batch).unwrap();
    }
    eprintln!("loaded");
    let end = (MINUTES - 1) * 60_000;
    let queries: [(&str, i64); 5] = [
        ("sum by (dc) (rate(req_total[5m]))", 60_000),
        ("histogram_quantile(0.99, sum(rate(lat[5m])))", 60_000),
        ("histogram_quantile(0.99, sum(rate(lat[5m])))", 300_000),
        ("histogram_quantile(0.99, sum(rate(lat[5m])))", 90_000),
        ("sum(rate(req_total[5m]))", 0),
    ];
    println!("query | step | median thread CPU ms over {RUNS} runs | result series");
    for (q, step) in queries {
        let mut times = Vec::new();
        let mut n = 0;
        for _ in 0..RUNS {
            let cpu0 = clock::thread_cpu_ns();
            let out = if step == 0 {
                eval::instant(&store, q, end, Limits::default()).unwrap()
            } else {
                eval::range(&store, q, 0, end, step, Limits::default()).unwrap()
            };
            times.push((clock::thread_cpu_ns() - cpu0) as f64 / 1e6);
            n = match out {
                eval::Output::Matrix(m) => m.len(),
                eval::Output::Vector { samples, .. } => samples.len(),
                _ => 1,
            };
        }
        times.sort_by(f64::total_cmp);
        let label = if step == 0 {
            "instant".to_string()
        } else {
            format!("{} s", step / 1000)
        };
        println!("`{q}` | {label} | {:.1} | {n}", times[RUNS / 2]);
    }
}
