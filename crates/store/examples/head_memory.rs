//! Resident memory per series of a store holding fresh numeric data: the figure the head's
//! memory budget (`STATUS.md`) is stated in.
//!
//! Creates `SERIES` TSBS-like series (10 metrics per host, 10 host tags each) in a store on a
//! temporary directory, then writes `STEPS` samples to each at a 10 s interval — a gauge with
//! noise in its second decimal (a walk in hundredths, steps ≈ N(0, 0.3)), in batches of
//! 10,000 samples, with no flush — and prints the process's resident growth per series after
//! the series are created (index) and after the samples (index + head), the head's own count
//! of its numeric bytes (`StoreStats::head_points_bytes`), and the write path's CPU per sample;
//! then flushes the head and prints the blocks' bytes per sample.
//!
//! Run: `cargo run --release -p store --example head_memory -- [SERIES] [STEPS]` (default
//! 1,000,000 series × 60 steps; 180 steps are 30 minutes of data).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use store::key::StreamKey;
use store::{Kind, Store, StoreOptions, Value, WriteBatch};

/// Series created per `resolve_all` call (keys are made per chunk, so they are not resident).
const RESOLVE_CHUNK: usize = 10_000;
/// Samples per written batch.
const BATCH_SAMPLES: usize = 10_000;
/// Sample interval.
const INTERVAL_MS: i64 = 10_000;

/// Resident set size of the process (Linux `/proc/self/status`).
fn rss_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024.0
}

fn key(i: usize) -> StreamKey {
    let host = i / 10;
    let text = format!(
        "cpu_usage_{}|ST[arch:x64,datacenter:us-east-1{},hostname:host_{host},\
         os:Ubuntu16.10,rack:{},region:us-east-1,service:{},\
         service_environment:production,service_version:{},team:SF]",
        i % 10,
        host % 6,
        host % 100,
        host % 20,
        host % 2
    );
    StreamKey::parse(&text).unwrap()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let series: usize = args.next().map_or(1_000_000, |a| a.parse().unwrap());
    let steps: usize = args.next().map_or(60, |a| a.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        background_flush: false,
        ..StoreOptions::default()
    };
    let rss0 = rss_bytes();
    let store = Store::open(dir.path(), opts).unwrap();
    let mut ids = Vec::with_capacity(series);
    let cpu0 = clock::process_cpu_ns();
    for start in (0..series).step_by(RESOLVE_CHUNK) {
        let keys: Vec<StreamKey> = (start..(start + RESOLVE_CHUNK).min(series))
            .map(key)
            .collect();
        let with_kind: Vec<(&StreamKey, Kind)> = keys.iter().map(|k| (k, Kind::Numeric)).collect();
        ids.extend(store.resolve_all(&with_kind).unwrap());
    }
    let index_cpu_s = (clock::process_cpu_ns() - cpu0) as f64 / 1e9;
    eprintln!("{series} series created in {index_cpu_s:.1} CPU-s");
    // The ids vector is the writer's, not the store's: counted out below.
    let ids_bytes = (ids.capacity() * std::mem::size_of_val(&ids[0])) as f64;
    let rss_index = rss_bytes() - rss0 - ids_bytes;

    let mut rng = StdRng::seed_from_u64(1);
    let mut hundredths: Vec<i64> = (0..series).map(|_| rng.random_range(0..=10_000)).collect();
    let walk_bytes = (hundredths.capacity() * 8) as f64;
    let t0 = 1_700_000_000_000i64;
    let cpu1 = clock::process_cpu_ns();
    let mut batch = WriteBatch::new();
    for step in 0..steps {
        if step % 10 == 0 {
            eprintln!("step {step} of {steps}");
        }
        let ts_ms = t0 + step as i64 * INTERVAL_MS;
        for (id, v) in ids.iter().zip(hundredths.iter_mut()) {
            let noise: f64 = rng.sample(StandardNormal);
            *v = (*v + (noise * 30.0).round() as i64).clamp(0, 10_000);
            batch
                .push_id(*id, ts_ms, Value::Numeric(*v as f64 / 100.0))
                .unwrap();
            if batch.sample_count() == BATCH_SAMPLES {
                store.write(&batch).unwrap();
                batch.clear();
            }
        }
    }
    if !batch.is_empty() {
        store.write(&batch).unwrap();
    }
    let write_cpu_s = (clock::process_cpu_ns() - cpu1) as f64 / 1e9;
    let rss_all = rss_bytes() - rss0 - ids_bytes - walk_bytes;
    let stats = store.stats().unwrap();
    let n = series as f64;
    let samples = (series * steps) as f64;
    println!(
        "{series} series x {steps} steps ({:.0} M samples, gauge with 2 decimals, 10 s)",
        samples / 1e6
    );
    println!(
        "index: {:.0} B resident per series ({:.0} k new series/CPU-s)",
        rss_index / n,
        n / index_cpu_s / 1e3
    );
    println!(
        "index + head: {:.0} B resident per series; head alone {:.0} B per series, {:.2} B per \
         sample ({:.2} by its own count: {:.0} B per series)",
        rss_all / n,
        (rss_all - rss_index) / n,
        (rss_all - rss_index) / samples,
        stats.head_points_bytes as f64 / samples,
        stats.head_points_bytes as f64 / n
    );
    println!(
        "write path: {:.2} M samples/CPU-s ({:.0} ns a sample, process CPU incl. the journal)",
        samples / write_cpu_s / 1e6,
        write_cpu_s * 1e9 / samples
    );
    assert_eq!(stats.head_samples, samples as u64);
    let cpu2 = clock::process_cpu_ns();
    let report = store.flush().unwrap();
    println!(
        "flush: {:.3} B per sample in {} blocks ({:.0} ns a sample)",
        report.bytes as f64 / samples,
        report.blocks,
        (clock::process_cpu_ns() - cpu2) as f64 / samples
    );
}
