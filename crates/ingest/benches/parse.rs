//! Criterion benchmarks for the text parsers on realistic payloads (`payloads`), reported as
//! samples per second of wall time (criterion's elements/s). `parse_cpu` reports the same
//! payloads per CPU-second. Results: `bench/RESULTS.md` under `## ingest parsers`.
//!
//! Run: `taskset -c 1 cargo bench -p ingest --bench parse`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod payloads;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

fn parsers(c: &mut Criterion) {
    for case in payloads::cases() {
        let batch = (case.parse)(&case.body);
        assert_eq!(
            batch.rejected,
            [],
            "{}: the payload must parse cleanly",
            case.name
        );
        let mut group = c.benchmark_group("parse");
        group.throughput(Throughput::Elements(batch.samples.len() as u64));
        group.bench_function(case.name, |b| {
            b.iter(|| (case.parse)(black_box(&case.body)))
        });
        group.finish();
        eprintln!(
            "{}: {} samples, {} bytes",
            case.name,
            batch.samples.len(),
            case.body.len()
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = parsers
}
criterion_main!(benches);
