//! Measurement program for `store`, the figures in `bench/RESULTS.md`: series index cost (new series
//! per CPU-second, resident bytes per series, existing-series lookups) and numeric and histogram
//! chunk encode/decode speed, and the write path end to end. Robust to a shared, noisy machine: each time is *thread CPU time*
//! (time the thread was not running does not count), the median of several runs.
//!
//! Run: `cargo run --release -p store --example store_bench [index|numeric|histogram|write|all]`
//! (default `all`; pin with `taskset -c 1 …`). Prints one line per figure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use hist::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, StandardNormal};
use store::internals::{numeric, rice_hist};
use store::key::StreamKey;
use store::{Kind, SeriesIndex};

/// The write path end to end: batches of 10,000 numeric samples (1,000 series × 10 timestamps,
/// TSBS-like integer walk) through `Store::write` with group commit, one writer thread. Process
/// CPU time, so the journal's flusher thread and the fsyncs' CPU count too.
fn bench_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::Store::open(dir.path(), store::StoreOptions::default()).unwrap();
    let keys: Vec<StreamKey> = (0..1000)
        .map(|i| StreamKey::parse(&format!("cpu_usage|ST[host:host_{i},region:r{}]", i % 7)))
        .collect::<Result<_, _>>()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let mut values = vec![50.0f64; keys.len()];
    let batches = 200usize;
    let (cpu_start, wall_start) = (clock::process_cpu_ns(), std::time::Instant::now());
    for b in 0..batches {
        let mut batch = store::WriteBatch::new();
        for (k, value) in keys.iter().zip(values.iter_mut()) {
            for step in 0..10i64 {
                *value = (*value + f64::from(rng.random_range(-1i8..=1))).clamp(0.0, 100.0);
                batch
                    .numeric(k, (b as i64 * 10 + step) * 10_000, *value)
                    .unwrap();
            }
        }
        store.write(&batch).unwrap();
    }
    let cpu_s = (clock::process_cpu_ns() - cpu_start) as f64 / 1e9;
    let wall_s = wall_start.elapsed().as_secs_f64();
    let samples = (batches * keys.len() * 10) as f64;
    println!(
        "write path, numeric batches of 10,000: {:.2} M samples/CPU-s, {:.2} M samples/s wall",
        samples / cpu_s / 1e6,
        samples / wall_s / 1e6
    );
    store.close().unwrap();
}

/// Median thread-CPU nanoseconds per operation over `runs` runs; `run` performs `ops` operations
/// per call. One untimed call first warms caches and the allocator.
fn median_ns_per_op(runs: usize, ops: usize, mut run: impl FnMut()) -> f64 {
    run();
    let mut per_op: Vec<f64> = (0..runs)
        .map(|_| {
            let start = clock::thread_cpu_ns();
            run();
            (clock::thread_cpu_ns() - start) as f64 / ops as f64
        })
        .collect();
    per_op.sort_by(f64::total_cmp);
    per_op[runs / 2]
}

/// Resident set size of the process (Linux `/proc/self/status`).
fn rss_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024.0
}

/// 200,000 TSBS-like series (10 metrics per host, 10 host tags each) into a file-backed index.
fn bench_index() {
    const SERIES: u32 = 200_000;
    const RUNS: usize = 5;
    let keys: Vec<StreamKey> = (0..SERIES)
        .map(|i| {
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
        })
        .collect();
    let (mut create_ns, mut existing_ns, mut lookup_ns) = (Vec::new(), Vec::new(), Vec::new());
    let mut rss_per_series = 0.0;
    for run in 0..RUNS {
        let dir = tempfile::tempdir().unwrap();
        // Only the first run sees a fresh heap: later runs reuse what the allocator kept from
        // the dropped index, so their resident growth would understate the cost.
        let rss_before = rss_bytes();
        let index = SeriesIndex::open(&dir.path().join("series.idx")).unwrap();
        let start = clock::thread_cpu_ns();
        for k in &keys {
            black_box(index.get_or_create(k, Kind::Numeric).unwrap());
        }
        index.sync().unwrap();
        create_ns.push((clock::thread_cpu_ns() - start) as f64);
        if run == 0 {
            rss_per_series = (rss_bytes() - rss_before) / f64::from(SERIES);
        }
        let start = clock::thread_cpu_ns();
        for k in &keys {
            black_box(index.get_or_create(k, Kind::Numeric).unwrap());
        }
        existing_ns.push((clock::thread_cpu_ns() - start) as f64);
        let start = clock::thread_cpu_ns();
        for k in &keys {
            black_box(index.lookup(k).unwrap());
        }
        lookup_ns.push((clock::thread_cpu_ns() - start) as f64);
        assert_eq!(index.snapshot().unwrap().series_count(), SERIES);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let n = f64::from(SERIES);
    println!(
        "index new series: {:.0} k/CPU-s ({SERIES} TSBS-like series of 10 tags, file-backed, \
         incl. sync; median of {RUNS})",
        n / (median(&mut create_ns) / 1e9) / 1e3
    );
    println!("index resident bytes per series: {rss_per_series:.0} (index only, first run)");
    println!(
        "index get_or_create, existing series: {:.0} ns CPU",
        median(&mut existing_ns) / n
    );
    println!(
        "index lookup, existing series: {:.0} ns CPU",
        median(&mut lookup_ns) / n
    );
}

/// A 4-hour chunk at 10 s: TSBS cpu-only-like integers (N(0, 1) steps clamped to 0–100,
/// truncated) and the same as full-precision floats on slightly irregular timestamps.
fn bench_numeric() {
    const RUNS: usize = 21;
    const ROUNDS: usize = 50;
    let mut rng = StdRng::seed_from_u64(9);
    let mut v = 50.0f64;
    let ints: Vec<(i64, f64)> = (0..1440i64)
        .map(|i| {
            v = (v + rng.sample::<f64, _>(StandardNormal)).clamp(0.0, 100.0);
            (i * 10_000, v.trunc())
        })
        .collect();
    let floats: Vec<(i64, f64)> = ints.iter().map(|&(t, v)| (t + t % 7, v * 1.37)).collect();
    for (name, samples) in [("integer", &ints), ("float", &floats)] {
        let bytes = numeric::encode(samples).unwrap();
        assert_eq!(numeric::decode(&bytes).unwrap().len(), samples.len());
        let ops = ROUNDS * samples.len();
        let encode_ns = median_ns_per_op(RUNS, ops, || {
            for _ in 0..ROUNDS {
                black_box(numeric::encode(black_box(samples)).unwrap());
            }
        });
        let decode_ns = median_ns_per_op(RUNS, ops, || {
            for _ in 0..ROUNDS {
                black_box(numeric::decode(black_box(&bytes)).unwrap());
            }
        });
        let per_sample = bytes.len() as f64 / samples.len() as f64;
        println!(
            "numeric {name} encode: {encode_ns:.1} ns/sample CPU ({} samples, \
             {per_sample:.3} B/sample)",
            samples.len()
        );
        println!("numeric {name} decode: {decode_ns:.1} ns/sample CPU");
    }
}

/// `periods` periods of `steps_per_period` 10 s steps, each step 100 lognormal observations
/// (σ = 1.6: ≈75 bins per step). The same generator as the encoder's size test.
fn lognormal_periods(
    rng: &mut StdRng,
    periods: usize,
    steps_per_period: usize,
) -> Vec<(i64, Histogram)> {
    let dist = LogNormal::new(-3.0, 1.6).unwrap();
    (0..periods)
        .map(|p| {
            let mut h = Histogram::new();
            for _ in 0..100 * steps_per_period {
                h.insert(dist.sample(rng));
            }
            let ts_ms = 1_700_000_000_000 + (p * steps_per_period) as i64 * 10_000;
            (ts_ms, h)
        })
        .collect()
}

/// The target histogram shape (100 lognormal observations per 10 s step): one day of 60 s
/// periods with six steps merged into each (≈211 bins per period), then 4 hours of 10 s periods
/// (one step each, ≈75 bins).
fn bench_histogram() {
    const RUNS: usize = 11;
    let mut rng = StdRng::seed_from_u64(5);
    for (periods_n, steps) in [(1440, 6), (1440, 1)] {
        let periods = lognormal_periods(&mut rng, periods_n, steps);
        let bins: usize = periods.iter().map(|(_, h)| h.bin_count()).sum();
        let mut scratch = rice_hist::EncodeScratch::default();
        let bytes = rice_hist::encode(periods.as_slice(), &mut scratch).unwrap();
        assert_eq!(rice_hist::decode(&bytes).unwrap(), periods);
        let n = periods.len();
        let encode_ns = median_ns_per_op(RUNS, n, || {
            black_box(rice_hist::encode(black_box(periods.as_slice()), &mut scratch).unwrap());
        });
        let decode_ns = median_ns_per_op(RUNS, n, || {
            black_box(rice_hist::decode(black_box(&bytes)).unwrap());
        });
        let bins_per_period = bins as f64 / n as f64;
        let period_s = 10 * steps;
        println!(
            "histogram encode: {:.2} µs/period CPU ({n} periods of {period_s} s, \
             {bins_per_period:.0} bins each)",
            encode_ns / 1e3
        );
        println!("histogram decode: {:.2} µs/period CPU", decode_ns / 1e3);
        println!(
            "histogram decode: {:.1} M bins/CPU-s",
            bins_per_period / decode_ns * 1e3
        );
        println!(
            "histogram size: {:.2} B per submitted sample ({steps} per period)",
            bytes.len() as f64 / (n * steps) as f64
        );
    }
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".to_string());
    match which.as_str() {
        "index" => bench_index(),
        "numeric" => bench_numeric(),
        "histogram" => bench_histogram(),
        "write" => bench_write(),
        "all" => {
            bench_index();
            bench_numeric();
            bench_histogram();
            bench_write();
        }
        other => {
            eprintln!(
                "unknown benchmark {other:?}; usage: store_bench [index|numeric|histogram|write|all]"
            );
            std::process::exit(2);
        }
    }
}
