//! Cost per read of every clock Strata could use, and of "two reads + one histogram insert",
//! all in one run. Run pinned: `taskset -c 1 cargo bench -p clock --bench clock`; the figures in
//! bench/RESULTS.md are criterion's medians.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

fn clock_gettime_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn reads(c: &mut Criterion) {
    // Start the clock (and see what it chose) outside the measurement.
    let clock = clock::Clock::global();
    eprintln!(
        "clock: source {:?}, reason {}",
        clock.source(),
        clock.reason()
    );

    let mut group = c.benchmark_group("read");
    group.sampling_mode(SamplingMode::Flat);
    group.bench_function("strata_raw", |b| b.iter(clock::raw));
    group.bench_function("strata_now", |b| b.iter(clock::now));
    group.bench_function("strata_wall", |b| b.iter(clock::wall));
    group.bench_function("clock_gettime_monotonic", |b| {
        b.iter(clock_gettime_monotonic_ns)
    });
    group.bench_function("std_instant_now", |b| b.iter(std::time::Instant::now));
    let quanta_clock = quanta::Clock::new();
    group.bench_function("quanta_now", |b| b.iter(|| quanta_clock.now()));
    group.bench_function("quanta_raw", |b| b.iter(|| quanta_clock.raw()));
    group.bench_function("minstant_now", |b| b.iter(minstant::Instant::now));
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_lfence, _rdtsc};
        // SAFETY: RDTSC and LFENCE exist on every x86_64 CPU and touch no memory.
        group.bench_function("rdtsc", |b| b.iter(|| unsafe { _rdtsc() }));
        // SAFETY: as above.
        group.bench_function("lfence_rdtsc", |b| {
            b.iter(|| unsafe {
                _mm_lfence();
                _rdtsc()
            })
        });
    }
    group.finish();
}

fn record(c: &mut Criterion) {
    let _ = clock::Clock::global();
    let mut group = c.benchmark_group("record");
    group.sampling_mode(SamplingMode::Flat);
    let mut recorder = hist::Recorder::new();
    group.bench_function("two_raw_reads_plus_insert", |b| {
        b.iter(|| {
            let start = clock::raw();
            let end = clock::raw();
            recorder.insert_intscale(clock::delta_ns(start, end) as i64, -9);
        })
    });
    let mut recorder = hist::Recorder::new();
    group.bench_function("stopwatch_plus_insert", |b| {
        b.iter(|| {
            let stopwatch = clock::Stopwatch::start();
            recorder.insert_intscale(stopwatch.elapsed_ns() as i64, -9);
        })
    });
    let mut recorder = hist::Recorder::new();
    group.bench_function("two_now_reads_plus_insert", |b| {
        b.iter(|| {
            let start_ns = clock::now();
            let end_ns = clock::now();
            recorder.insert_intscale((end_ns - start_ns) as i64, -9);
        })
    });
    let mut recorder = hist::Recorder::new();
    group.bench_function("two_clock_gettime_plus_insert", |b| {
        b.iter(|| {
            let start_ns = clock_gettime_monotonic_ns();
            let end_ns = clock_gettime_monotonic_ns();
            recorder.insert_intscale((end_ns - start_ns) as i64, -9);
        })
    });
    let mut recorder = hist::Recorder::new();
    let mut value_ns = 0i64;
    group.bench_function("insert_only", |b| {
        b.iter(|| {
            value_ns = (value_ns + 7) & 63;
            recorder.insert_intscale(black_box(value_ns), -9);
        })
    });
    group.finish();
}

/// Many short samples of equal size (2,000 in 1 s: 0.5 ms each, shorter than a scheduler time
/// slice): on a shared CPU most samples run undisturbed, and the ones that were descheduled are
/// outliers the median ignores. (With 200 samples of 7.5 ms each, nearly every sample on a busy
/// CPU included other threads' time slices, and the medians doubled.)
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1000))
        .sample_size(2000)
        .nresamples(10_000)
}

criterion_group! { name = benches; config = config(); targets = reads, record }
criterion_main!(benches);
