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
    // (name, samples, bytes, median samples per CPU-second), for the comparisons below.
    let mut measured = Vec::new();
    for case in payloads::cases()
        .into_iter()
        .filter(|c| c.name.contains(&only))
    {
        let samples = (case.parse)(&case.body).samples.len() as f64;
        let median = median_rate(rounds, cpu_seconds, samples, &|| {
            black_box((case.parse)(black_box(&case.body)));
        });
        println!(
            "{} | {samples} | {} | {:.3} M | {}",
            case.name,
            case.body.len(),
            median.0 / 1e6,
            median.1
        );
        measured.push((case.name, samples, case.body.len(), median.0));
    }
    flat_vs_json(&measured, rounds, cpu_seconds);
}

/// Samples per CPU-second of `parse` (median of `rounds`), and every round as text.
fn median_rate(rounds: usize, cpu_seconds: f64, samples: f64, parse: &dyn Fn()) -> (f64, String) {
    let mut rates: Vec<f64> = (0..rounds)
        .map(|_| {
            let (start, mut parses) = (clock::thread_cpu_ns(), 0u64);
            let budget_ns = (cpu_seconds * 1e9) as u64;
            while clock::thread_cpu_ns() - start < budget_ns {
                parse();
                parses += 1;
            }
            samples * parses as f64 / ((clock::thread_cpu_ns() - start) as f64 / 1e9)
        })
        .collect();
    let all: Vec<String> = rates.iter().map(|r| format!("{:.2} M", r / 1e6)).collect();
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() / 2], all.join(", "))
}

/// Issue 6's row "the flatbuffers encoding vs the JSON httptrap encoding of the same metrics":
/// per pair of payloads holding the same metrics, decode ns per metric both ways, bytes, and the
/// ratios — for `flat::parse` (bytes to the same `Batch` as the JSON path) and for reading the
/// flatbuffer in place without building samples.
fn flat_vs_json(measured: &[(&str, f64, usize, f64)], rounds: usize, cpu_seconds: f64) {
    let find = |name: &str| measured.iter().find(|m| m.0 == name);
    let cases = payloads::cases();
    println!();
    println!(
        "JSON payload → flatbuffers payload | metrics | JSON ns/metric | flat::parse ns/metric \
         | speedup | in-place read ns/metric | speedup | JSON bytes | flat bytes | fewer bytes"
    );
    for (json_name, flat_name) in payloads::FLAT_VS_JSON {
        let (Some(json), Some(flat)) = (find(json_name), find(flat_name)) else {
            continue;
        };
        assert_eq!(
            json.1, flat.1,
            "{json_name} and {flat_name} hold the same metrics"
        );
        let body = &cases.iter().find(|c| c.name == flat_name).unwrap().body;
        let read = median_rate(rounds, cpu_seconds, flat.1, &|| {
            black_box(payloads::flat_read_in_place(black_box(body)));
        });
        let (json_ns, flat_ns, read_ns) = (1e9 / json.3, 1e9 / flat.3, 1e9 / read.0);
        println!(
            "{json_name} → {flat_name} | {} | {json_ns:.1} | {flat_ns:.1} | {:.1}× | {read_ns:.1} \
             | {:.1}× | {} | {} | {:.1} %",
            json.1,
            json_ns / flat_ns,
            json_ns / read_ns,
            json.2,
            flat.2,
            100.0 * (1.0 - flat.2 as f64 / json.2 as f64)
        );
    }
}
