//! The rollup maintenance a running server does over one day: 1,000 histogram series (one
//! 30-observation histogram per minute each) and 1,000 numeric series (one sample per 10 s),
//! written in 15-minute steps as the flusher would see them; after each step's flush, the
//! finest rollup level's partition still filling is brought up to date (`build_rollups`, as the
//! background flusher does right after a flush). Prints the thread CPU of those builds: in total
//! over the day and for the last step, when the partition holds almost the whole day.
//!
//! `cargo run --release -p store --example maintenance_bench`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::Histogram;
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch, DAY_MS};

const SERIES: usize = 1_000;
const STEP_MINUTES: i64 = 15;
/// 2026-11-22T00:00:00Z
const T0_MS: i64 = 1_795_305_600_000;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions {
            background_flush: false,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let hkeys: Vec<StreamKey> = (0..SERIES)
        .map(|i| StreamKey::parse(&format!("req_latency|ST[host:h{i:04}]")).unwrap())
        .collect();
    let nkeys: Vec<StreamKey> = (0..SERIES)
        .map(|i| StreamKey::parse(&format!("cpu_used|ST[host:h{i:04}]")).unwrap())
        .collect();
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut walk = vec![50.0f64; SERIES];
    let steps = DAY_MS / (STEP_MINUTES * 60_000);
    let (mut total_ns, mut last_ns, mut extended, mut built) = (0u64, 0u64, 0u64, 0u64);
    for step in 0..steps {
        let from = T0_MS + step * STEP_MINUTES * 60_000;
        for m in 0..STEP_MINUTES {
            let t = from + m * 60_000;
            let mut batch = WriteBatch::new();
            for k in &hkeys {
                let mut h = Histogram::new();
                for _ in 0..30 {
                    let u = (next() % 1_000_000) as f64 / 1_000_000.0;
                    h.insert(10f64.powf(-3.0 + 3.0 * u));
                }
                batch.histogram(k, t, &h).unwrap();
            }
            store.write(&batch).unwrap();
            for s in 0..6 {
                let mut batch = WriteBatch::new();
                for (k, v) in nkeys.iter().zip(walk.iter_mut()) {
                    *v = (*v + (next() % 3) as f64 - 1.0).clamp(0.0, 100.0);
                    batch.numeric(k, t + s * 10_000, *v).unwrap();
                }
                store.write(&batch).unwrap();
            }
        }
        store.flush().unwrap();
        let now_ms = from + STEP_MINUTES * 60_000;
        let t = clock::thread_cpu_ns();
        let report = store.build_rollups(now_ms).unwrap();
        let ns = clock::thread_cpu_ns() - t;
        total_ns += ns;
        last_ns = ns;
        extended += report.extended;
        built += report.partitions;
    }
    println!(
        "one day, {SERIES} histogram + {SERIES} numeric series, a flush and a build every \
         {STEP_MINUTES} min: builds {:.2} s CPU in total ({built} partitions written, {extended} \
         extended), the last one {:.0} ms",
        total_ns as f64 / 1e9,
        last_ns as f64 / 1e6
    );
}
