//! Criterion benchmarks for `hist` on the target workload: 1,000,000 lognormal latencies
//! (μ = −3, σ = 1.5, in seconds; ≈488 bins), beside the Rust peers `hdrhistogram` and
//! `sketches-ddsketch` measured in the same run. Results and anchors: `bench/RESULTS.md`.
//!
//! Run: `cargo bench -p hist --bench hist` (pin with `taskset -c 1` for stable figures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use hist::{Histogram, QuantileType, Recorder};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, LogNormal};

const SAMPLES: usize = 1_000_000;
const QUANTILES: [f64; 7] = [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

fn latencies(n: usize, seed: u64) -> Vec<f64> {
    let dist = LogNormal::new(-3.0, 1.5).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| dist.sample(&mut rng)).collect()
}

fn nanos(values: &[f64]) -> Vec<i64> {
    values.iter().map(|v| (v * 1e9) as i64).collect()
}

fn big_and_small() -> (Histogram, Histogram) {
    let mut big = Recorder::new();
    latencies(SAMPLES, 1).iter().for_each(|&v| big.insert(v));
    let mut small = Recorder::new();
    latencies(1_500, 2).iter().for_each(|&v| small.insert(v));
    (big.to_histogram(), small.to_histogram())
}

fn insert(c: &mut Criterion) {
    let values = latencies(SAMPLES, 1);
    let ns = nanos(&values);
    let mut g = c.benchmark_group("insert");
    g.throughput(Throughput::Elements(SAMPLES as u64));
    g.bench_function("strata_recorder_f64", |b| {
        let mut r = Recorder::new();
        b.iter(|| {
            for &v in &values {
                r.insert(black_box(v));
            }
        });
        black_box(r.sample_count());
    });
    g.bench_function("strata_recorder_intscale_ns", |b| {
        let mut r = Recorder::new();
        b.iter(|| {
            for &v in &ns {
                r.insert_intscale(black_box(v), -9);
            }
        });
        black_box(r.sample_count());
    });
    g.bench_function("strata_sorted_f64", |b| {
        let mut h = Histogram::new();
        b.iter(|| {
            for &v in &values {
                h.insert(black_box(v));
            }
        });
        black_box(h.sample_count());
    });
    g.bench_function("hdrhistogram_ns_3sig", |b| {
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        b.iter(|| {
            for &v in &ns {
                h.saturating_record(black_box(v.max(1) as u64));
            }
        });
        black_box(h.len());
    });
    g.bench_function("ddsketch_f64", |b| {
        let mut s = sketches_ddsketch::DDSketch::new(sketches_ddsketch::Config::defaults());
        b.iter(|| {
            for &v in &values {
                s.add(black_box(v));
            }
        });
        black_box(s.count());
    });
    g.finish();
}

fn merge(c: &mut Criterion) {
    let (big, small) = big_and_small();
    assert!(
        (450..=520).contains(&big.bin_count()),
        "{} bins",
        big.bin_count()
    );
    assert!(
        (200..=300).contains(&small.bin_count()),
        "{} bins",
        small.bin_count()
    );
    let mut g = c.benchmark_group("merge");
    g.bench_function("strata_sorted_small_into_big", |b| {
        b.iter_batched_ref(
            || big.clone(),
            |t| t.merge(black_box(&small)),
            BatchSize::SmallInput,
        )
    });
    let small_rec = Recorder::from_histogram(&small);
    g.bench_function("strata_recorder_merge_histogram", |b| {
        let mut t = Recorder::from_histogram(&big);
        b.iter(|| t.merge_histogram(black_box(&small)))
    });
    g.bench_function("strata_recorder_merge_recorder", |b| {
        let mut t = Recorder::from_histogram(&big);
        b.iter(|| t.merge_recorder(black_box(&small_rec)))
    });
    let values = latencies(SAMPLES, 1);
    let small_values = latencies(2_000, 2);
    let hdr = |v: &[f64]| {
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        v.iter()
            .for_each(|&x| h.saturating_record(((x * 1e9) as u64).max(1)));
        h
    };
    let (hdr_big, hdr_small) = (hdr(&values), hdr(&small_values));
    g.bench_function("hdrhistogram_add", |b| {
        b.iter_batched_ref(
            || hdr_big.clone(),
            |t| t.add(black_box(&hdr_small)).unwrap(),
            BatchSize::SmallInput,
        )
    });
    let dd = |v: &[f64]| {
        let mut s = sketches_ddsketch::DDSketch::new(sketches_ddsketch::Config::defaults());
        v.iter().for_each(|&x| s.add(x));
        s
    };
    let (dd_big, dd_small) = (dd(&values), dd(&small_values));
    g.bench_function("ddsketch_merge", |b| {
        b.iter_batched_ref(
            || dd_big.clone(),
            |t| t.merge(black_box(&dd_small)).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn query(c: &mut Criterion) {
    let (big, _) = big_and_small();
    let mut g = c.benchmark_group("query");
    let mut out = [0.0; 7];
    g.bench_function("strata_7_quantiles_type1", |b| {
        b.iter(|| big.quantiles_into(black_box(&QUANTILES), QuantileType::Type1, &mut out))
    });
    g.bench_function("strata_7_quantiles_type7", |b| {
        b.iter(|| big.quantiles_into(black_box(&QUANTILES), QuantileType::Type7, &mut out))
    });
    g.bench_function("strata_inverse_quantile", |b| {
        b.iter(|| big.inverse_quantiles(black_box(&[0.1, 1.5])))
    });
    g.finish();
}

fn codec(c: &mut Criterion) {
    let (big, _) = big_and_small();
    let b64 = big.to_base64();
    let bytes = big.to_bytes();
    let mut g = c.benchmark_group("codec");
    g.bench_function("strata_base64_encode", |b| {
        b.iter(|| black_box(&big).to_base64())
    });
    g.bench_function("strata_base64_decode", |b| {
        b.iter(|| Histogram::from_base64(black_box(&b64)).unwrap())
    });
    g.bench_function("base64_simd_only_encode", |b| {
        b.iter(|| base64_simd::STANDARD.encode_to_string(black_box(&bytes)))
    });
    g.bench_function("base64_simd_only_decode", |b| {
        b.iter(|| {
            base64_simd::STANDARD
                .decode_to_vec(black_box(&b64))
                .unwrap()
        })
    });
    let mut buf = Vec::with_capacity(bytes.len() * 2);
    g.bench_function("strata_binary_encode", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&big).encode_into(&mut buf)
        })
    });
    g.bench_function("strata_binary_decode", |b| {
        b.iter(|| Histogram::decode(black_box(&bytes)).unwrap())
    });
    g.bench_function("strata_to_histogram_from_recorder", |b| {
        let r = Recorder::from_histogram(&big);
        let mut out = Histogram::new();
        b.iter(|| black_box(&r).write_into(&mut out))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = insert, merge, query, codec
}
criterion_main!(benches);
