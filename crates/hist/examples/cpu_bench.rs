//! CPU-time benchmark for `hist` beside `hdrhistogram` and `sketches-ddsketch`, robust to a shared,
//! noisy machine: each figure is the median over many batches of *thread CPU time* per operation
//! (time the thread was not running does not count), all peers measured in the same run.
//!
//! Workload: 1,000,000 lognormal latencies, μ = −3, σ = 1.5 seconds (≈488 bins).
//! Run: `cargo run --release -p hist --example cpu_bench` (pin: `taskset -c 1 …`).
//! Prints a markdown table; `bench/RESULTS.md` records it with the anchors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use hist::{Histogram, QuantileType, Recorder};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, LogNormal};

const SAMPLES: usize = 1_000_000;
const BATCHES: usize = 31;
const QUANTILES: [f64; 7] = [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

/// Median CPU nanoseconds per operation: `run` performs `ops` operations per call.
fn measure(ops: usize, mut run: impl FnMut()) -> f64 {
    run(); // warm up
    let mut per_op: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let start = clock::thread_cpu_ns();
            run();
            (clock::thread_cpu_ns() - start) as f64 / ops as f64
        })
        .collect();
    per_op.sort_by(f64::total_cmp);
    per_op[BATCHES / 2]
}

fn latencies(n: usize, seed: u64) -> Vec<f64> {
    let dist = LogNormal::new(-3.0, 1.5).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| dist.sample(&mut rng)).collect()
}

fn hdr(values: &[f64]) -> hdrhistogram::Histogram<u64> {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    values
        .iter()
        .for_each(|&v| h.saturating_record(((v * 1e9) as u64).max(1)));
    h
}

fn dd(values: &[f64]) -> sketches_ddsketch::DDSketch {
    let mut s = sketches_ddsketch::DDSketch::new(sketches_ddsketch::Config::defaults());
    values.iter().for_each(|&v| s.add(v));
    s
}

struct Row {
    op: &'static str,
    ours: f64,
    target: &'static str,
    anchor: &'static str,
    peers: Vec<(&'static str, f64)>,
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.2} ns")
    }
}

fn main() {
    let values = latencies(SAMPLES, 1);
    let ns: Vec<i64> = values.iter().map(|v| (v * 1e9) as i64).collect();
    let small_values = latencies(1_500, 2);
    let big = {
        let mut r = Recorder::new();
        values.iter().for_each(|&v| r.insert(v));
        r.to_histogram()
    };
    let small = Histogram::from_bins({
        let mut r = Recorder::new();
        small_values.iter().for_each(|&v| r.insert(v));
        r.to_histogram().bins().collect::<Vec<_>>()
    });
    let mut rows = Vec::new();

    let mut r = Recorder::new();
    let ours = measure(SAMPLES, || {
        values.iter().for_each(|&v| r.insert(black_box(v)))
    });
    let mut r2 = Recorder::new();
    let ours_ns = measure(SAMPLES, || {
        ns.iter()
            .for_each(|&v| r2.insert_intscale(black_box(v), -9))
    });
    let mut h = hdr(&[]);
    let hdr_rec = measure(SAMPLES, || {
        ns.iter()
            .for_each(|&v| h.saturating_record(black_box(v.max(1) as u64)))
    });
    let mut s = dd(&[]);
    let dd_add = measure(SAMPLES, || values.iter().for_each(|&v| s.add(black_box(v))));
    let mut sorted = Histogram::new();
    let sorted_ins = measure(SAMPLES, || {
        values.iter().for_each(|&v| sorted.insert(black_box(v)))
    });
    rows.push(Row {
        op: "insert f64 (Recorder)",
        ours,
        target: "≤ 10 ns",
        anchor: "C 179–223 ns sorted, 58–66 ns fast",
        peers: vec![("hdrhistogram record", hdr_rec), ("ddsketch add", dd_add)],
    });
    rows.push(Row {
        op: "insert integer ns (Recorder, intscale −9)",
        ours: ours_ns,
        target: "≤ 5 ns",
        anchor: "C 24–32 ns (fast)",
        peers: vec![("hdrhistogram record", hdr_rec)],
    });
    rows.push(Row {
        op: "insert f64 (sorted Histogram)",
        ours: sorted_ins,
        target: "—",
        anchor: "C 179–223 ns (sorted array)",
        peers: vec![],
    });

    // Repeated merges into one target (the steady state of aggregating periods), so the working
    // set stays in cache for every contender alike.
    const MERGES: usize = 1_000;
    let mut target = big.clone();
    let ours = measure(MERGES, || {
        for _ in 0..MERGES {
            target.merge(black_box(&small));
        }
    });
    let (hdr_big, hdr_small) = (hdr(&values), hdr(&small_values));
    let mut hdr_target = hdr_big.clone();
    let hdr_merge = measure(MERGES, || {
        for _ in 0..MERGES {
            hdr_target.add(black_box(&hdr_small)).unwrap();
        }
    });
    let (dd_big, dd_small) = (dd(&values), dd(&small_values));
    let mut dd_target = dd_big.clone();
    let dd_merge = measure(MERGES, || {
        for _ in 0..MERGES {
            dd_target.merge(black_box(&dd_small)).unwrap();
        }
    });
    rows.push(Row {
        op: "merge ~240–290 bins into 488 bins",
        ours,
        target: "≤ 1 µs",
        anchor: "C 10.5 µs",
        peers: vec![
            ("hdrhistogram add", hdr_merge),
            ("ddsketch merge", dd_merge),
        ],
    });

    const QUERIES: usize = 2_000;
    let mut out = [0.0; 7];
    let q1 = measure(QUERIES, || {
        for _ in 0..QUERIES {
            big.quantiles_into(black_box(&QUANTILES), QuantileType::Type1, &mut out)
                .unwrap();
        }
    });
    let q7 = measure(QUERIES, || {
        for _ in 0..QUERIES {
            big.quantiles_into(black_box(&QUANTILES), QuantileType::Type7, &mut out)
                .unwrap();
        }
    });
    rows.push(Row {
        op: "7 quantiles, type 1, 488 bins",
        ours: q1,
        target: "≤ 1 µs",
        anchor: "C 3.3 µs",
        peers: vec![],
    });
    rows.push(Row {
        op: "7 quantiles, type 7, 488 bins",
        ours: q7,
        target: "≤ 1 µs",
        anchor: "C 3.3 µs",
        peers: vec![],
    });

    let b64 = big.to_base64();
    let enc = measure(QUERIES, || {
        for _ in 0..QUERIES {
            black_box(black_box(&big).to_base64());
        }
    });
    let dec = measure(QUERIES, || {
        for _ in 0..QUERIES {
            black_box(Histogram::from_base64(black_box(&b64)).unwrap());
        }
    });
    rows.push(Row {
        op: "base64 encode, 488 bins",
        ours: enc,
        target: "≤ 1 µs",
        anchor: "C 5.0 µs",
        peers: vec![],
    });
    rows.push(Row {
        op: "base64 decode, 488 bins",
        ours: dec,
        target: "≤ 2 µs",
        anchor: "C 12.8 µs",
        peers: vec![],
    });

    println!("| operation | strata (median thread-CPU per op) | target | anchor | peers, same run (ratio peer/strata) |");
    println!("|---|---|---|---|---|");
    for row in &rows {
        let peers: Vec<String> = row
            .peers
            .iter()
            .map(|(name, t)| format!("{name} {} ({:.2}×)", fmt_ns(*t), t / row.ours))
            .collect();
        println!(
            "| {} | {} | {} | {} | {} |",
            row.op,
            fmt_ns(row.ours),
            row.target,
            row.anchor,
            peers.join("; ")
        );
    }
    println!(
        "\nbins: big {} (encoded {} bytes), small {}",
        big.bin_count(),
        big.encoded_len(),
        small.bin_count()
    );
}
