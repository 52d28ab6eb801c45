//! Histogram chunk encode and decode on realistic chunks: storebench's histogram shape (100
//! lognormal observations, μ = −3, σ = 1.6 s, per 10 s step, ≈75 bins), six steps merged per
//! 60 s period, 120 periods (a 2-hour block) per chunk.
//!
//! Two parts: first thread CPU time (`CLOCK_THREAD_CPUTIME_ID`, so time spent waiting for the
//! shared CPU is not counted) per period for encode, decode and decode_into, the median of
//! `ROUNDS` rounds over every chunk, with the bytes per period, for the Rice-coded chunk (kind
//! 6, what a flush writes; also encoded from packed periods, as a flush does) and the packed one
//! (kind 5, the finest rollups'); then the same operations under criterion (wall
//! time). `cargo bench -p store --bench hist_chunk -- --cpu-only` skips the criterion part;
//! `-- --encode-loop` only encodes, for a profiler.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use hist::{Accumulator, Histogram};
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};
use store::internals::{packed_hist, rice_hist};

/// Chunks (series) measured; each is `PERIODS` periods.
const CHUNKS: usize = 100;
const PERIODS: usize = 120;
const STEPS_PER_PERIOD: usize = 6;
const OBSERVATIONS_PER_STEP: usize = 100;
/// Rounds of the CPU-time part; the median is reported.
const ROUNDS: usize = 9;

fn chunks() -> Vec<Vec<(i64, Histogram)>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let dist = LogNormal::new(-3.0, 1.6).unwrap();
    (0..CHUNKS)
        .map(|_| {
            (0..PERIODS)
                .map(|p| {
                    let mut h = Histogram::new();
                    for _ in 0..STEPS_PER_PERIOD * OBSERVATIONS_PER_STEP {
                        h.insert(dist.sample(&mut rng));
                    }
                    (1_700_000_000_000 + p as i64 * 60_000, h)
                })
                .collect()
        })
        .collect()
}

/// Median thread CPU ns per period of `f` run over all chunks, `ROUNDS` times.
fn cpu_ns_per_period(chunks_total: usize, mut f: impl FnMut()) -> f64 {
    let mut ns: Vec<u64> = (0..ROUNDS)
        .map(|_| {
            let start = clock::thread_cpu_ns();
            f();
            clock::thread_cpu_ns() - start
        })
        .collect();
    ns.sort_unstable();
    ns[ROUNDS / 2] as f64 / (chunks_total * PERIODS) as f64
}

thread_local! {
    static RICE_SCRATCH: std::cell::RefCell<rice_hist::EncodeScratch> =
        std::cell::RefCell::new(rice_hist::EncodeScratch::default());
}

/// One chunk kind's coder, as the benchmark drives it.
struct Coder {
    name: &'static str,
    encode: fn(&[(i64, Histogram)]) -> Vec<u8>,
    decode: fn(&[u8]) -> Vec<(i64, Histogram)>,
    decode_into: fn(&[u8], &mut [Accumulator]),
}

/// The Rice-coded chunk (kind 6, what base blocks hold) and the packed one (kind 5, what the
/// finest rollups hold), measured side by side in one run.
const CODERS: [Coder; 2] = [
    Coder {
        name: "rice (kind 6)",
        // One scratch kept across chunks, as a block writer keeps it.
        encode: |c| RICE_SCRATCH.with_borrow_mut(|s| rice_hist::encode(c, s).unwrap()),
        decode: |b| rice_hist::decode(b).unwrap(),
        decode_into: |b, acc| {
            rice_hist::decode_into(b, |_| Some(0), acc).unwrap();
        },
    },
    Coder {
        name: "packed (kind 5)",
        encode: |c| packed_hist::encode(c).unwrap(),
        decode: |b| packed_hist::decode(b).unwrap(),
        decode_into: |b, acc| {
            packed_hist::decode_into(b, |_| Some(0), acc).unwrap();
        },
    },
];

fn cpu_report(chunks: &[Vec<(i64, Histogram)>]) {
    // The floor any encoder pays: reading every key and count once.
    let scan = cpu_ns_per_period(chunks.len(), || {
        for c in chunks {
            for (_, h) in c {
                let keys: u64 = h.keys().iter().map(|&k| u64::from(k)).sum();
                black_box(keys + h.counts().iter().sum::<u64>());
            }
        }
    });
    let bins: usize = chunks.iter().flatten().map(|(_, h)| h.bin_count()).sum();
    println!(
        "hist_chunk cpu (median of {ROUNDS}): {:.1} bins/period, scan {scan:.0} ns/period",
        bins as f64 / (chunks.len() * PERIODS) as f64,
    );
    for coder in &CODERS {
        coder_report(chunks, coder);
    }
    // The Rice coder as a flush drives it: from the head's packed periods, one scratch.
    let packed: Vec<Vec<(i64, Vec<u8>)>> = chunks
        .iter()
        .map(|c| {
            c.iter()
                .map(|(t, h)| {
                    let mut b = Vec::new();
                    hist::packed::pack_histogram(h, &mut b);
                    (*t, b)
                })
                .collect()
        })
        .collect();
    let mut scratch = rice_hist::EncodeScratch::default();
    let from_packed = cpu_ns_per_period(chunks.len(), || {
        for c in &packed {
            let periods = rice_hist::PackedPeriods(c.as_slice());
            black_box(rice_hist::encode(black_box(&periods), &mut scratch).unwrap());
        }
    });
    println!("  rice (kind 6) from packed periods: encode {from_packed:.0} ns/period");
}

fn coder_report(chunks: &[Vec<(i64, Histogram)>], coder: &Coder) {
    let encoded: Vec<Vec<u8>> = chunks.iter().map(|c| (coder.encode)(c)).collect();
    for (c, b) in chunks.iter().zip(&encoded) {
        assert_eq!(&(coder.decode)(b), c, "round trip");
    }
    let bytes: usize = encoded.iter().map(Vec::len).sum();
    let encode = cpu_ns_per_period(chunks.len(), || {
        for c in chunks {
            black_box((coder.encode)(black_box(c)));
        }
    });
    let decode = cpu_ns_per_period(chunks.len(), || {
        for b in &encoded {
            black_box((coder.decode)(black_box(b)));
        }
    });
    let mut acc = vec![Accumulator::new(); 1];
    let decode_into = cpu_ns_per_period(chunks.len(), || {
        for b in &encoded {
            (coder.decode_into)(black_box(b), &mut acc);
        }
    });
    let periods = (chunks.len() * PERIODS) as f64;
    // FNV-1a of every chunk's bytes: tells whether a change to the encoder changed its output.
    let digest = encoded
        .iter()
        .flatten()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    println!(
        "  {}: encode {encode:.0} ns/period, decode {decode:.0} ns/period, decode_into \
         {decode_into:.0} ns/period, {:.2} bytes/period ({:.2} bytes/sample at \
         {STEPS_PER_PERIOD} samples/period), bytes digest {digest:016x}",
        coder.name,
        bytes as f64 / periods,
        bytes as f64 / periods / STEPS_PER_PERIOD as f64,
    );
}

fn main() {
    let chunks = chunks();
    if std::env::args().any(|a| a == "--encode-loop") {
        // For a profiler: encode only, over and over (`HC2_PACKED` picks the packed coder,
        // `HC2_WARM` one chunk only, so its bins stay in cache).
        let coder = &CODERS[usize::from(std::env::var_os("HC2_PACKED").is_some())];
        let warm = std::env::var_os("HC2_WARM").is_some();
        let start = clock::thread_cpu_ns();
        for _ in 0..ROUNDS * 10 {
            for c in &chunks {
                let c = if warm { &chunks[0] } else { c };
                black_box((coder.encode)(black_box(c)));
            }
        }
        let ns = (clock::thread_cpu_ns() - start) as f64 / (ROUNDS * 10 * CHUNKS * PERIODS) as f64;
        println!("{}: encode {ns:.0} ns/period (warm: {warm})", coder.name);
        return;
    }
    cpu_report(&chunks);
    if std::env::args().any(|a| a == "--cpu-only") {
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    let mut g = criterion.benchmark_group("hist_chunk");
    g.throughput(Throughput::Elements((CHUNKS * PERIODS) as u64));
    for coder in &CODERS {
        let encoded: Vec<Vec<u8>> = chunks.iter().map(|c| (coder.encode)(c)).collect();
        g.bench_function(format!("encode {}", coder.name), |b| {
            b.iter(|| {
                for c in &chunks {
                    black_box((coder.encode)(black_box(c)));
                }
            })
        });
        g.bench_function(format!("decode {}", coder.name), |b| {
            b.iter(|| {
                for e in &encoded {
                    black_box((coder.decode)(black_box(e)));
                }
            })
        });
    }
    g.finish();
    criterion.final_summary();
}
