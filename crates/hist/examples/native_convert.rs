//! Converts native histograms (schema 3, a lognormal's buckets) in a loop, for callgrind or
//! timing: `cargo run --release -p hist --example native_convert -- [ROUNDS]`. Prints thread CPU
//! per histogram and per bucket.

use hist::convert::{from_native, NativeCounts, NativeHistogram, Span};

fn histogram(seed: u64) -> NativeHistogram {
    // Counts of a lognormal's latencies over 40 consecutive schema-3 buckets around 10 ms.
    let mut x = seed | 1;
    let mut deltas = Vec::new();
    let mut prev = 0i64;
    for i in 0..40i64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let shape = 400 - (i - 20) * (i - 20);
        let count = shape.max(1) + (x % 17) as i64;
        deltas.push(count - prev);
        prev = count;
    }
    let total: i64 = deltas
        .iter()
        .scan(0, |c, d| {
            *c += d;
            Some(*c)
        })
        .sum();
    NativeHistogram {
        schema: 3,
        positive_spans: vec![Span {
            offset: -60,
            length: 40,
        }],
        counts: NativeCounts::Integer {
            count: total as u64,
            zero_count: 0,
            positive_deltas: deltas,
            negative_deltas: Vec::new(),
        },
        ..NativeHistogram::default()
    }
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let inputs: Vec<NativeHistogram> = (0..64).map(histogram).collect();
    let start = clock::thread_cpu_ns();
    let mut bins = 0usize;
    for r in 0..rounds {
        let converted = from_native(&inputs[r % inputs.len()]);
        bins += converted.map(|c| c.histogram.bin_count()).unwrap_or(0);
    }
    let ns = (clock::thread_cpu_ns() - start) as f64;
    println!(
        "{:.0} ns a histogram, {:.1} ns a bucket ({} bins out)",
        ns / rounds as f64,
        ns / (rounds * 40) as f64,
        bins / rounds
    );
}
