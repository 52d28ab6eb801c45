//! Scheduler fire lateness: `CHECKS` no-op checks of period `PERIOD_MS` (2,000 runs/s by
//! default) placed by `phases` and fired by the real scheduler thread (`sched.rs`) for
//! `SECONDS`; lateness = the wall time the fire callback runs − the check's scheduled time.
//! Prints p50 / p99 / p99.9 / max, the fire rate, skipped turns and the load average.
//!
//!   cargo bench -j 1 -p broker --bench sched_lateness -- [SECONDS] [CHECKS] [PERIOD_MS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker::phases;
use broker::sched::Scheduler;
use checks::CheckSpec;

/// Fires ignored at the start: the plan's first turns are computed from the moment it is set.
const WARM_UP_MS: u64 = 2_000;

fn arg(args: &[u64], i: usize, default: u64) -> u64 {
    args.get(i).copied().unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i] as f64 / 1e6
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .filter_map(|a| a.parse().ok())
        .collect();
    let seconds = arg(&args, 0, 60);
    let checks = arg(&args, 1, 2_000) as usize;
    let period_ms = arg(&args, 2, 1_000);
    let rate = checks as u64 * 1000 / period_ms;
    let specs: Vec<CheckSpec> = (0..checks)
        .map(|i| CheckSpec {
            id: format!("noop-{i}"),
            kind: "tcp".into(),
            target: "127.0.0.1:1".into(),
            period_ms,
            timeout_ms: 100,
            config: serde_json::Value::Null,
            tags: vec![],
        })
        .collect();
    let wanted: Vec<(String, u64)> = specs.iter().map(|s| (s.id.clone(), period_ms)).collect();
    let mut placed = HashMap::new();
    phases::place_all(&wanted, &mut placed);
    let plan = specs
        .into_iter()
        .map(|s| {
            let phase = placed[&s.id].1;
            (Arc::new(s), phase)
        })
        .collect();

    // Bounded: room for every expected fire and a margin; more are dropped (counted).
    let capacity = (rate * (seconds + 2)) as usize + 1024;
    let late_ns = Arc::new(Mutex::new(Vec::<u64>::with_capacity(capacity)));
    let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start_ms = clock::wall() / 1_000_000;
    let measure_from_ms = start_ms + WARM_UP_MS;
    let (record, over) = (late_ns.clone(), dropped.clone());
    let sched = Scheduler::start(Box::new(move |entry, due_ms| {
        let now_ns = clock::wall();
        entry.running.store(false, Ordering::Release);
        if due_ms < measure_from_ms {
            return true;
        }
        let mut v = record.lock().unwrap();
        if v.len() < capacity {
            v.push(now_ns.saturating_sub(due_ms * 1_000_000));
        } else {
            over.fetch_add(1, Ordering::Relaxed);
        }
        true
    }))
    .expect("scheduler");
    let load_before = load_average();
    sched.set(plan);
    std::thread::sleep(Duration::from_millis(WARM_UP_MS + seconds * 1000));
    let stats = sched.stats();
    drop(sched);
    let mut late = std::mem::take(&mut *late_ns.lock().unwrap());
    late.sort_unstable();
    assert!(!late.is_empty(), "nothing fired");
    println!(
        "checks {checks} period {period_ms} ms ({rate} runs/s) for {seconds} s: fired {} \
         ({:.0}/s), lateness p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms max {:.3} ms; \
         skipped {} late(>=1 s) {} dropped {}; {} priority; load average {} -> {}",
        late.len(),
        late.len() as f64 / seconds as f64,
        percentile(&late, 0.50),
        percentile(&late, 0.99),
        percentile(&late, 0.999),
        percentile(&late, 1.0),
        stats.skipped.load(Ordering::Relaxed),
        stats.late.load(Ordering::Relaxed),
        dropped.load(Ordering::Relaxed),
        if stats.realtime.load(Ordering::Relaxed) {
            "real-time"
        } else {
            "ordinary"
        },
        load_before,
        load_average(),
    );
}
