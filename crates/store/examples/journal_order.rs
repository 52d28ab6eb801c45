//! The cost of steps that reach the journal out of order: what concurrent writers of whole
//! steps do to the head.
//!
//! An Influx body is one step of many series; with several connections, bodies are parsed at
//! once and their records reach the journal in whatever order their parsing ends, so a step
//! can be written after the next few. This writes `SERIES` series × `STEPS` steps (a gauge
//! with two decimals, 10 s apart, a whole step per batch, by id) with one writer in four
//! orders — in time order, and with the steps shuffled within blocks of 2, 4 and 16 (a step at
//! most 1, 3 or 15 places from its own) — alternated over `ROUNDS` rounds, each on a fresh
//! store, and prints per order the median write CPU per sample, the head's own count of its
//! bytes per sample, and the flush's CPU per sample.
//!
//! Run: `taskset -c 1 cargo run --release -p store --example journal_order -- [SERIES] [STEPS]
//! [ROUNDS]` (default 10,000 series × 360 steps × 3 rounds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use store::key::StreamKey;
use store::{Kind, SeriesId, Store, StoreOptions, Value, WriteBatch};

const INTERVAL_MS: i64 = 10_000;
/// Shuffle block lengths measured (1: time order).
const BLOCKS: [usize; 4] = [1, 2, 4, 16];

fn key(i: usize) -> StreamKey {
    StreamKey::parse(&format!(
        "cpu_usage_{}|ST[hostname:host_{},region:r{}]",
        i % 10,
        i / 10,
        i % 7
    ))
    .unwrap()
}

/// Steps in time order, then shuffled within consecutive blocks of `block`.
fn order(steps: usize, block: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut out: Vec<usize> = (0..steps).collect();
    for chunk in out.chunks_mut(block) {
        chunk.shuffle(rng);
    }
    out
}

struct Figures {
    write_ns: f64,
    head_bytes: f64,
    flush_ns: f64,
}

fn one(series: usize, values: &[Vec<f64>], steps: &[usize]) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        background_flush: false,
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), opts).unwrap();
    let keys: Vec<StreamKey> = (0..series).map(key).collect();
    let with_kind: Vec<(&StreamKey, Kind)> = keys.iter().map(|k| (k, Kind::Numeric)).collect();
    let ids: Vec<SeriesId> = store.resolve_all(&with_kind).unwrap();
    let t0 = 1_700_000_000_000i64;
    let mut batch = WriteBatch::new();
    let cpu0 = clock::process_cpu_ns();
    for &step in steps {
        batch.clear();
        let ts_ms = t0 + step as i64 * INTERVAL_MS;
        for (id, v) in ids.iter().zip(&values[step]) {
            batch.push_id(*id, ts_ms, Value::Numeric(*v)).unwrap();
        }
        store.write(&batch).unwrap();
    }
    let samples = (series * steps.len()) as f64;
    let write_ns = (clock::process_cpu_ns() - cpu0) as f64 / samples;
    let stats = store.stats().unwrap();
    assert_eq!(stats.head_samples, samples as u64);
    let cpu1 = clock::process_cpu_ns();
    store.flush().unwrap();
    Figures {
        write_ns,
        head_bytes: stats.head_points_bytes as f64 / samples,
        flush_ns: (clock::process_cpu_ns() - cpu1) as f64 / samples,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let series: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let steps: usize = args.next().map_or(360, |a| a.parse().unwrap());
    let rounds: usize = args.next().map_or(3, |a| a.parse().unwrap());
    let mut rng = StdRng::seed_from_u64(1);
    // values[step][series]: a walk in hundredths, steps ≈ N(0, 0.3).
    let mut walk: Vec<i64> = (0..series).map(|_| rng.random_range(0..=10_000)).collect();
    let values: Vec<Vec<f64>> = (0..steps)
        .map(|_| {
            walk.iter_mut()
                .map(|v| {
                    let noise: f64 = rng.sample(StandardNormal);
                    *v = (*v + (noise * 30.0).round() as i64).clamp(0, 10_000);
                    *v as f64 / 100.0
                })
                .collect()
        })
        .collect();
    let mut figures: Vec<Vec<Figures>> = BLOCKS.iter().map(|_| Vec::new()).collect();
    for r in 0..rounds {
        for k in 0..BLOCKS.len() {
            let i = (k + r) % BLOCKS.len();
            let steps = order(steps, BLOCKS[i], &mut rng);
            figures[i].push(one(series, &values, &steps));
        }
        eprintln!("round {} of {rounds} done", r + 1);
    }
    println!("{series} series x {steps} steps, a step per batch; medians of {rounds} rounds");
    println!(
        "| steps shuffled within | write CPU ns/sample | head bytes/sample | flush CPU ns/sample |"
    );
    println!("|---|---|---|---|");
    for (block, f) in BLOCKS.iter().zip(&figures) {
        let name = if *block == 1 {
            "— (time order)".to_owned()
        } else {
            format!("blocks of {block}")
        };
        println!(
            "| {name} | {:.0} | {:.2} | {:.0} |",
            median(f.iter().map(|x| x.write_ns).collect()),
            median(f.iter().map(|x| x.head_bytes).collect()),
            median(f.iter().map(|x| x.flush_ns).collect()),
        );
    }
}
