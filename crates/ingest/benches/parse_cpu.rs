//! Samples parsed per CPU-second of the parsing thread, for each payload in `payloads` — the
//! unit of issue 6's targets, and steadier than wall time on a shared machine (time spent
//! waiting for the CPU is not counted). CPU time: `clock::thread_cpu_ns` (CLOCK_THREAD_CPUTIME_ID).
//!
//! Run: `taskset -c 1 cargo bench -p ingest --bench parse_cpu` (`ROUNDS`, `CPU_SECONDS` tune it;
//! `CASE` picks payloads by name).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod payloads;

use std::hint::black_box;

/// Nanoseconds this thread has spent on a CPU.
fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick {
        1
    } else {
        env_or("ROUNDS", 5.0) as usize
    };
    let cpu_seconds = if quick {
        0.01
    } else {
        env_or("CPU_SECONDS", 1.0)
    };
    println!(
        "payload | samples | bytes | samples per CPU-second (median of {rounds}) | all rounds"
    );
    // `CASE=<substring>` runs only the matching payloads (for profiling one of them).
    let only = std::env::var("CASE").unwrap_or_default();
    for case in payloads::cases()
        .into_iter()
        .filter(|c| c.name.contains(&only))
    {
        let samples = (case.parse)(&case.body).samples.len() as f64;
        let mut rates: Vec<f64> = (0..rounds)
            .map(|_| {
                let (start, mut parses) = (clock::thread_cpu_ns(), 0u64);
                let budget_ns = (cpu_seconds * 1e9) as u64;
                while clock::thread_cpu_ns() - start < budget_ns {
                    black_box((case.parse)(black_box(&case.body)));
                    parses += 1;
                }
                samples * parses as f64 / ((clock::thread_cpu_ns() - start) as f64 / 1e9)
            })
            .collect();
        let all: Vec<String> = rates.iter().map(|r| format!("{:.2} M", r / 1e6)).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        println!(
            "{} | {samples} | {} | {:.3} M | {}",
            case.name,
            case.body.len(),
            median / 1e6,
            all.join(", ")
        );
    }
}
