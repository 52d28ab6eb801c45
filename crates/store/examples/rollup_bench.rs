//! Read benchmarks over rollups, on the histogram workload of `bench/storebench`
//! (lognormal μ = −3, σ = 1.6, 100 observations per series every 10 s) extended to 7 days.
//!
//! `cargo run --release -p store --example rollup_bench [-- --series N --hours H --runs R
//! --dir PATH]`
//!
//! With `--dir`, the data is written there once and later runs with the same `--dir` (and the
//! same `--series` and `--hours`) only read it — for measuring read changes back to back.
//!
//! Data: stream 0 for all 7 days, and all `--series` streams (default 1,000) for the last
//! `--hours` (default 8) — the reads below touch nothing else (a read of one stream touches only
//! its own chunks, whatever the other streams hold). Each base period (60 s) is submitted as
//! one histogram of its 6 × 100 observations (the store merges per base period anyway). Then
//! rollups are built as of 400 days later (every level's partitions complete). Reads, each the
//! median of `--runs` (default 7) of thread CPU time and wall time, on a fresh `View`:
//! 1. one stream, 7 days, 112 columns of 90 min, merged histograms (5 m level: 90 min is not a
//!    multiple of 1 h);
//! 2. p99 (type 7) of all streams merged, 4 h (the first 4 of the last 8), 1 h step (1 h level);
//! 3. share of observations below 0.1 s per stream, all streams, 4 h (inverse quantile);
//!
//! and 1–2 again from base data only (`View::exact`), for comparison.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use hist::{Histogram, QuantileType};
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use store::key::StreamKey;
use store::{
    merged_histograms, SeriesId, Slicing, Store, StoreOptions, WriteBatch, DAY_MS, HOUR_MS,
    MINUTE_MS,
};

const STEP_MS: i64 = 10_000;
const OBSERVATIONS: usize = 100;
/// 12 h: a multiple of 90 min and of 4 h, so every read's columns align.
const ALIGN_MS: i64 = 12 * HOUR_MS;
const START_MS: i64 = 1_700_000_040_000 / ALIGN_MS * ALIGN_MS + ALIGN_MS;

fn arg(name: &str, default: i64) -> i64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn key(i: i64) -> StreamKey {
    StreamKey::parse(&format!("disk_io_latency|ST[host:db{i:04},dev:nvme0]")).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median thread-CPU and wall milliseconds of `runs` calls.
fn measure<T>(runs: i64, mut f: impl FnMut() -> T) -> (f64, f64, T) {
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..runs {
        let (c, w) = (clock::thread_cpu_ns(), Instant::now());
        last = Some(f());
        cpu.push((clock::thread_cpu_ns() - c) as f64 / 1e6);
        wall.push(w.elapsed().as_secs_f64() * 1e3);
    }
    if std::env::var_os("ROLLUP_BENCH_MIN").is_some() {
        // For A/B comparisons on a noisy machine: the least CPU time of the runs.
        let min = cpu.iter().copied().fold(f64::INFINITY, f64::min);
        eprintln!("min {min:.2} ms CPU");
    }
    (median(cpu), median(wall), last.expect("runs ≥ 1"))
}

fn main() {
    let series = arg("--series", 1_000);
    let hours = arg("--hours", 8);
    let runs = arg("--runs", 7).max(5);
    let args: Vec<String> = std::env::args().collect();
    let kept_dir = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    let temp = tempfile::tempdir().unwrap();
    let dir = kept_dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    let reuse = kept_dir.is_some() && dir.join("MANIFEST").exists();
    let opts = StoreOptions {
        background_flush: false,
        // Loading only: the reads measured do not depend on how the data became durable.
        durability: store::Durability::Buffered,
        ..StoreOptions::default()
    };
    let base_ms = opts.base_period_ms;
    let store = Store::open(&dir, opts).unwrap();
    let end_ms = START_MS + 7 * DAY_MS;
    let all_from_ms = end_ms - hours * HOUR_MS;
    let keys: Vec<StreamKey> = (0..series).map(key).collect();
    let lognormal = LogNormal::new(-3.0, 1.6).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(48);
    let t0 = Instant::now();
    let mut periods = 0u64;
    let mut t = if reuse { end_ms } else { START_MS };
    while t < end_ms {
        let mut batch = WriteBatch::new();
        let n = if t >= all_from_ms { series } else { 1 };
        for k in &keys[..n as usize] {
            let mut h = Histogram::with_capacity(200);
            for _ in 0..(base_ms / STEP_MS) as usize * OBSERVATIONS {
                h.insert(lognormal.sample(&mut rng));
            }
            batch.histogram(k, t, &h).unwrap();
        }
        store.write(&batch).unwrap();
        periods += n as u64;
        t += base_ms;
        if (t - START_MS) % (2 * HOUR_MS) == 0 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    let written_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let report = if reuse {
        store::RollupReport::default()
    } else {
        store.build_rollups(end_ms + 400 * DAY_MS).unwrap()
    };
    let build_s = t0.elapsed().as_secs_f64();
    let stats = store.stats().unwrap();
    let base_bytes: u64 = stats.blocks.iter().map(|b| b.size_bytes).sum();
    println!(
        "data: {periods} base-period histograms ({} observations) written in {written_s:.1} s; \
         base blocks {:.1} MB; rollups built in {build_s:.1} s: {} partitions, {:.1} MB",
        periods * (base_ms / STEP_MS) as u64 * OBSERVATIONS as u64,
        base_bytes as f64 / 1e6,
        report.partitions,
        report.bytes as f64 / 1e6
    );
    let ids: Vec<SeriesId> = keys
        .iter()
        .map(|k| store.index().lookup(k).unwrap().unwrap().0)
        .collect();
    let week = Slicing {
        start_ms: START_MS,
        end_ms,
        period_ms: 90 * MINUTE_MS,
    };
    let window = Slicing {
        start_ms: end_ms - 8 * HOUR_MS,
        end_ms: end_ms - 4 * HOUR_MS,
        period_ms: HOUR_MS,
    };
    let whole = Slicing {
        period_ms: 4 * HOUR_MS,
        ..window
    };
    // `--rollups-only 1`: skip the base-data comparison (for profiling the rollup reads).
    let modes: &[bool] = if arg("--rollups-only", 0) != 0 {
        &[false]
    } else {
        &[false, true]
    };
    for &exact in modes {
        let label = if exact { "base data only" } else { "rollups" };
        let view = || {
            let v = store.view().unwrap();
            if exact {
                v.exact()
            } else {
                v
            }
        };
        let (cpu, wall, cols) = measure(runs, || view().histograms(ids[0], week).unwrap());
        let total: u64 = cols.iter().map(Histogram::sample_count).sum();
        println!(
            "[{label}] one stream, 7 days, {} columns of 90 min: {cpu:.2} ms CPU, {wall:.2} ms \
             wall (median of {runs}; {total} observations)",
            cols.len()
        );
        let (cpu, wall, p99) = measure(runs, || {
            let v = view();
            let snap = store.index().snapshot().unwrap();
            let groups = merged_histograms(&v, &snap, &ids, window, &[]).unwrap();
            groups[0]
                .slices
                .iter()
                .map(|h| h.quantiles(&[0.99], QuantileType::Type7).unwrap()[0])
                .collect::<Vec<f64>>()
        });
        println!(
            "[{label}] p99 of {} streams merged, 4 h, 1 h step: {cpu:.2} ms CPU, {wall:.2} ms \
             wall; p99 = {p99:.4?}",
            ids.len()
        );
        if !exact {
            let (cpu, wall, shares) = measure(runs, || {
                let v = view();
                ids.iter()
                    .map(|&id| {
                        let h = &v.histograms(id, whole).unwrap()[0];
                        h.inverse_quantiles(&[0.1]).unwrap()[0]
                    })
                    .collect::<Vec<f64>>()
            });
            let mean = shares.iter().sum::<f64>() / shares.len() as f64;
            println!(
                "[{label}] share below 0.1 s per stream, {} streams, 4 h: {cpu:.2} ms CPU, \
                 {wall:.2} ms wall; mean share {mean:.4}",
                ids.len()
            );
        }
    }
    store.close().unwrap();
}
