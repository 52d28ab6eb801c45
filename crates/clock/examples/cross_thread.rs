//! Backward steps across threads swapping CPUs, for Strata's `now()` and the clocks users would
//! pick instead: `cargo run --release -p clock --example cross_thread [reads]`. Each reading is
//! checked against the last one published by either thread (which happened-before it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use clock::check::{cross_thread, CrossThread};

fn report(name: &str, result: &CrossThread) {
    println!(
        "{name:24} reads {:>10}  backwards {:>6}  max back {:>6} ns  cpus {:?}",
        result.reads, result.backwards, result.backwards_ns_max, result.cpus
    );
}

fn main() {
    let reads: u64 = std::env::args()
        .nth(1)
        .map_or(10_000_000, |text| text.parse().unwrap());
    let bounce_every = (reads / 100).max(1);
    let quanta_clock = quanta::Clock::new();
    let quanta_start = quanta_clock.now();
    let minstant_start = minstant::Instant::now();
    let global = clock::Clock::global();
    println!("strata clock: {:?}, {}", global.source(), global.reason());
    report(
        "strata now()",
        &cross_thread(clock::now, reads, bounce_every),
    );
    let quanta_ns = || quanta_clock.now().duration_since(quanta_start).as_nanos() as u64;
    report(
        "quanta Clock::now()",
        &cross_thread(quanta_ns, reads, bounce_every),
    );
    let minstant_ns = || minstant_start.elapsed().as_nanos() as u64;
    report(
        "minstant Instant::now()",
        &cross_thread(minstant_ns, reads, bounce_every),
    );
    let os_clock = clock::Clock::new(clock::Config {
        source: clock::Choice::Os,
    });
    report(
        "clock_gettime (os)",
        &cross_thread(|| os_clock.now(), reads, bounce_every),
    );
}
