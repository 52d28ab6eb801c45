//! The numeric read targets: a scan counting every sample of the numeric workload, and the bytes
//! on disk per stream-day of a numeric rollup level.
//!
//! `cargo run --release -p store --example numeric_bench [-- --hosts N --hours H --runs R
//! --dir PATH]`
//!
//! Workload (the TSBS `cpu-only` integer shape of `bench/storebench`): `--hosts` (default 1,000)
//! × 10 metrics, one sample every 10 s for `--hours` (default 4): 14.4 M samples; each series a
//! random walk with N(0, 1) steps clamped to 0–100, submitted truncated to an integer. Written
//! through `Store::write` and flushed to blocks; then rollups are built as of a year later with
//! the levels 1 m, 5 m, 1 h, 1 d (a 1 m level added to the defaults, so the "1-min
//! rollup" target has a level of its own; the base period is 10 s so that a 1 m level is allowed). With `--dir`, a later run with the same arguments reads
//! the data written there before.
//!
//! Reads, each the median of `--runs` (default 7) of thread CPU time on a fresh `View`:
//! 1. scan: the count of all samples from raw data (`View::exact`, one slice of the whole range
//!    per series: every sample decoded and aggregated);
//! 2. the same count from the rollups (the coarsest level dividing the range);
//! 3. every raw sample decoded (`View::raw_numeric`), without aggregating.
//!
//! Then each level's rollup files: bytes on disk per stream-day (files' bytes / series / days
//! covered).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Instant;

use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use store::key::StreamKey;
use store::{
    LevelOptions, SeriesId, Slicing, Store, StoreOptions, WriteBatch, DAY_MS, HOUR_MS, MINUTE_MS,
};

const STEP_MS: i64 = 10_000;
const METRICS: [&str; 10] = [
    "cpu_usage_user",
    "cpu_usage_system",
    "cpu_usage_idle",
    "cpu_usage_nice",
    "cpu_usage_iowait",
    "cpu_usage_irq",
    "cpu_usage_softirq",
    "cpu_usage_steal",
    "cpu_usage_guest",
    "cpu_usage_guest_nice",
];
/// 1 d: a multiple of every level's partition below a day, so partitions align with the data.
const ALIGN_MS: i64 = DAY_MS;
const START_MS: i64 = 1_700_000_040_000 / ALIGN_MS * ALIGN_MS + ALIGN_MS;

fn arg(name: &str, default: i64) -> i64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median thread-CPU milliseconds of `runs` calls, and the last result.
fn measure<T>(runs: i64, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut cpu = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let c = clock::thread_cpu_ns();
        last = Some(f());
        cpu.push((clock::thread_cpu_ns() - c) as f64 / 1e6);
    }
    (median(cpu), last.expect("runs ≥ 1"))
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let hosts = arg("--hosts", 1_000);
    let hours = arg("--hours", 4);
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
    let mut levels = vec![LevelOptions {
        period_ms: MINUTE_MS,
        retention_ms: 30 * DAY_MS,
    }];
    levels.extend(store::default_levels());
    let opts = StoreOptions {
        background_flush: false,
        background_maintenance: false,
        durability: store::Durability::Buffered,
        levels,
        // A level's period must exceed the base period: 10 s (the sample interval) allows the
        // 1 m level. The base period only changes how histograms merge; numeric samples are raw.
        base_period_ms: STEP_MS,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir, opts).unwrap();
    let end_ms = START_MS + hours * HOUR_MS;
    let keys: Vec<StreamKey> = (0..hosts)
        .flat_map(|h| {
            METRICS.iter().map(move |m| {
                StreamKey::parse(&format!(
                    "{m}|ST[hostname:host_{h},region:eu-west-{},datacenter:eu-west-{}a]",
                    h % 3,
                    h % 3
                ))
                .unwrap()
            })
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let mut walk: Vec<f64> = (0..keys.len()).map(|i| (i * 37 % 101) as f64).collect();
    let t0 = Instant::now();
    let mut samples = 0u64;
    let mut t = if reuse { end_ms } else { START_MS };
    while t < end_ms {
        let mut batch = WriteBatch::new();
        for (k, v) in keys.iter().zip(walk.iter_mut()) {
            let step: f64 = StandardNormal.sample(&mut rng);
            *v = (*v + step).clamp(0.0, 100.0);
            batch.numeric(k, t, v.trunc()).unwrap();
        }
        store.write(&batch).unwrap();
        samples += keys.len() as u64;
        t += STEP_MS;
        if (t - START_MS) % (2 * HOUR_MS) == 0 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    let written_s = t0.elapsed().as_secs_f64();
    if !reuse {
        let t0 = Instant::now();
        let report = store.build_rollups(end_ms + 365 * DAY_MS).unwrap();
        println!(
            "data: {samples} samples of {} series written in {written_s:.1} s; rollups built in \
             {:.1} s: {} partitions, {:.1} MB",
            keys.len(),
            t0.elapsed().as_secs_f64(),
            report.partitions,
            report.bytes as f64 / 1e6
        );
    }
    let ids: Vec<SeriesId> = keys
        .iter()
        .map(|k| store.index().lookup(k).unwrap().unwrap().0)
        .collect();
    let whole = Slicing {
        start_ms: START_MS,
        end_ms,
        period_ms: end_ms - START_MS,
    };
    for exact in [true, false] {
        let label = if exact { "raw data" } else { "rollups" };
        let (cpu, (count, level)) = measure(runs, || {
            let view = store.view().unwrap();
            let view = if exact { view.exact() } else { view };
            let mut count = 0u64;
            for &id in &ids {
                for a in view.numeric_aggregates(id, whole).unwrap().iter().flatten() {
                    count += a.count;
                }
            }
            let level = view.level_for(whole.period_ms).map(|l| view.levels()[l].0);
            (count, level)
        });
        println!(
            "[{label}] count of all samples: {count} in {cpu:.2} ms CPU (median of {runs}): \
             {:.1} M samples per CPU-second; level period {level:?} ms",
            count as f64 / cpu / 1e3
        );
    }
    // Decoding alone: every raw sample materialised, no aggregation.
    let (cpu, count) = measure(runs, || {
        let view = store.view().unwrap();
        ids.iter()
            .map(|&id| view.raw_numeric(id, START_MS, end_ms).unwrap().len() as u64)
            .sum::<u64>()
    });
    println!(
        "[raw samples] every sample decoded (View::raw_numeric): {count} in {cpu:.2} ms CPU \
         (median of {runs}): {:.1} M samples per CPU-second",
        count as f64 / cpu / 1e3
    );
    let days = (end_ms - START_MS) as f64 / DAY_MS as f64;
    let view = store.view().unwrap();
    for (period_ms, partition_ms, files) in view.levels() {
        let bytes = dir_bytes(&store::internals::rollup::level_dir(&dir, period_ms));
        // A level's partition may extend past the data: count the days its files cover.
        let covered_days = days.max(0.0);
        println!(
            "level {} s (partition {} h, {files} files): {bytes} bytes, {:.0} B per stream-day \
             ({} series over {covered_days:.3} days)",
            period_ms / 1000,
            partition_ms / HOUR_MS,
            bytes as f64 / keys.len() as f64 / covered_days,
            keys.len()
        );
    }
    drop(view);
    store.close().unwrap();
}
