//! Instruction sequences an ordered or unordered TSC read could compile to, measured beside
//! Strata's `now()`/`raw()`, the OS clock, quanta and minstant in one run, to find the cheapest
//! read that is still correct (see the "clock" section of bench/RESULTS.md).
//!
//! `taskset -c 1 cargo bench -p clock --bench variants [rounds]`. Every round runs one batch of
//! `BATCH_READS` reads of every case in turn, so all cases see the same machine; a case's figure
//! is the median over rounds of the batch's wall time per read, and of its thread CPU time per
//! read (which leaves out time the thread was descheduled; the VM's steal time stays in).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

const BATCH_READS: u64 = 20_000;
const ROUNDS_DEFAULT: usize = 301;
const ROUNDS_MAX: usize = 100_000;

#[cfg(target_arch = "x86_64")]
mod seq {
    //! Replicas of the read paths, on a record laid out like the clock's (one cache line).
    use super::*;
    use core::arch::x86_64::{__rdtscp, _mm_lfence, _mm_mfence, _rdtsc};

    pub const MODE_TSC: u64 = 2;

    #[repr(align(64))]
    pub struct Slot {
        pub mode: AtomicU64,
        pub switch_ticks: AtomicU64,
        pub old_mult: AtomicU64,
        pub old_intercept_ns: AtomicU64,
        pub mult: AtomicU64,
        pub intercept_ns: AtomicU64,
    }

    pub struct Published {
        pub generation: AtomicU64,
        pub slots: [Slot; 2],
    }

    const fn slot(mult: u64) -> Slot {
        Slot {
            mode: AtomicU64::new(MODE_TSC),
            switch_ticks: AtomicU64::new(0),
            old_mult: AtomicU64::new(mult),
            old_intercept_ns: AtomicU64::new(0),
            mult: AtomicU64::new(mult),
            intercept_ns: AtomicU64::new(12_345),
        }
    }

    /// 1 / 2.6 ns per tick.
    const MULT: u64 = ((1u128 << 64) * 10 / 26) as u64;
    /// The same slope as a 32-bit fraction, for the multiply-shift variant.
    const MULT_32: u64 = ((1u64 << 32) * 10) / 26;

    pub static PUBLISHED: Published = Published {
        generation: AtomicU64::new(2),
        slots: [slot(MULT), slot(MULT)],
    };
    pub static MODE: AtomicU64 = AtomicU64::new(MODE_TSC);
    pub static BASE_TICKS: AtomicU64 = AtomicU64::new(0);

    #[inline(always)]
    fn hi64(a: u64, b: u64) -> u64 {
        ((u128::from(a) * u128::from(b)) >> 64) as u64
    }

    #[inline(always)]
    fn index(generation: u64) -> usize {
        ((generation >> 1) & 1) as usize
    }

    #[inline(always)]
    pub fn rdtsc() -> u64 {
        // SAFETY: RDTSC exists on every x86_64 CPU and touches no memory.
        unsafe { _rdtsc() }
    }

    #[inline(always)]
    pub fn lfence_rdtsc() -> u64 {
        // SAFETY: LFENCE (SSE2) and RDTSC exist on every x86_64 CPU and touch no memory.
        unsafe {
            _mm_lfence();
            _rdtsc()
        }
    }

    #[inline(always)]
    pub fn mfence_lfence_rdtsc() -> u64 {
        // SAFETY: as `lfence_rdtsc`; MFENCE is SSE2 too.
        unsafe {
            _mm_mfence();
            _mm_lfence();
            _rdtsc()
        }
    }

    #[inline(always)]
    pub fn rdtscp() -> u64 {
        let mut aux = 0u32;
        // SAFETY: the CPU reports RDTSCP (checked in main); `aux` is a valid u32.
        unsafe { __rdtscp(&mut aux) }
    }

    #[inline(always)]
    pub fn rdtscp_lfence() -> u64 {
        let ticks = rdtscp();
        // SAFETY: as `lfence_rdtsc`.
        unsafe { _mm_lfence() };
        ticks
    }

    /// Floor: ordered read and one multiply-add with the slope in a static (no record, no check).
    #[inline(always)]
    pub fn lfence_rdtsc_mul() -> u64 {
        let ticks = lfence_rdtsc();
        let slot = &PUBLISHED.slots[0];
        hi64(ticks, slot.mult.load(Ordering::Relaxed))
            .wrapping_add(slot.intercept_ns.load(Ordering::Relaxed))
    }

    /// The clock's read before this work: generation and record loaded, then LFENCE; RDTSC, then
    /// the multiply-add and the generation re-check.
    #[inline(always)]
    pub fn record_then_fence() -> u64 {
        loop {
            let generation = PUBLISHED.generation.load(Ordering::Acquire);
            let slot = &PUBLISHED.slots[index(generation)];
            if slot.mode.load(Ordering::Relaxed) != MODE_TSC {
                return 0;
            }
            let switch_ticks = slot.switch_ticks.load(Ordering::Relaxed);
            let mult = slot.mult.load(Ordering::Relaxed);
            let intercept_ns = slot.intercept_ns.load(Ordering::Relaxed);
            let ticks = lfence_rdtsc();
            let ns = if ticks >= switch_ticks {
                hi64(ticks, mult).wrapping_add(intercept_ns)
            } else {
                cold(slot, ticks)
            };
            fence(Ordering::Acquire);
            if PUBLISHED.generation.load(Ordering::Relaxed) >> 1 == generation >> 1 {
                return ns;
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn cold(slot: &Slot, ticks: u64) -> u64 {
        hi64(ticks, slot.old_mult.load(Ordering::Relaxed))
            .wrapping_add(slot.old_intercept_ns.load(Ordering::Relaxed))
    }

    /// Only the mode is loaded before the fence; the record after the TSC read.
    #[inline(always)]
    pub fn mode_then_fence() -> u64 {
        if MODE.load(Ordering::Relaxed) != MODE_TSC {
            return 0;
        }
        record_after(lfence_rdtsc)
    }

    /// Nothing loaded before the fence: the TSC is read first, the record (mode included) after.
    #[inline(always)]
    pub fn fence_then_record() -> u64 {
        record_after(lfence_rdtsc)
    }

    /// As `fence_then_record` with RDTSCP for the ordered read.
    #[inline(always)]
    pub fn rdtscp_then_record() -> u64 {
        record_after(rdtscp)
    }

    #[inline(always)]
    fn record_after(read: impl Fn() -> u64) -> u64 {
        let mut ticks = read();
        loop {
            let generation = PUBLISHED.generation.load(Ordering::Acquire);
            let slot = &PUBLISHED.slots[index(generation)];
            let mode = slot.mode.load(Ordering::Relaxed);
            let switch_ticks = slot.switch_ticks.load(Ordering::Relaxed);
            let mult = slot.mult.load(Ordering::Relaxed);
            let intercept_ns = slot.intercept_ns.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if PUBLISHED.generation.load(Ordering::Relaxed) >> 1 != generation >> 1 {
                continue;
            }
            if mode != MODE_TSC {
                return 0;
            }
            if ticks >= switch_ticks {
                return hi64(ticks, mult).wrapping_add(intercept_ns);
            }
            ticks = before_switch(slot, ticks);
            if ticks != 0 {
                return ticks;
            }
            ticks = read();
        }
    }

    #[cold]
    #[inline(never)]
    fn before_switch(slot: &Slot, ticks: u64) -> u64 {
        cold(slot, ticks)
    }

    /// `fence_then_record` with a 64-bit multiply of the ticks since a base and a shift instead
    /// of the high half of a 128-bit product.
    #[inline(always)]
    pub fn fence_then_record_imul_shift() -> u64 {
        let ticks = lfence_rdtsc();
        loop {
            let generation = PUBLISHED.generation.load(Ordering::Acquire);
            let slot = &PUBLISHED.slots[index(generation)];
            let base = BASE_TICKS.load(Ordering::Relaxed);
            let intercept_ns = slot.intercept_ns.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if PUBLISHED.generation.load(Ordering::Relaxed) >> 1 != generation >> 1 {
                continue;
            }
            return (ticks.wrapping_sub(base).wrapping_mul(MULT_32) >> 32)
                .wrapping_add(intercept_ns);
        }
    }

    /// The source chosen by swapping a function pointer instead of a branch on the mode.
    pub static NOW_FN: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());
    pub static RAW_FN: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

    #[inline(never)]
    fn now_tsc() -> u64 {
        record_after(lfence_rdtsc)
    }

    #[inline(never)]
    fn raw_tsc() -> u64 {
        rdtsc() & !(1 << 63)
    }

    pub fn install_fn_pointers() {
        NOW_FN.store(now_tsc as fn() -> u64 as *mut (), Ordering::Release);
        RAW_FN.store(raw_tsc as fn() -> u64 as *mut (), Ordering::Release);
    }

    #[inline(always)]
    fn call(pointer: &AtomicPtr<()>) -> u64 {
        let pointer = pointer.load(Ordering::Relaxed);
        assert!(!pointer.is_null());
        // SAFETY: only `install_fn_pointers` stores here, and only `fn() -> u64` pointers.
        let read: fn() -> u64 = unsafe { std::mem::transmute::<*mut (), fn() -> u64>(pointer) };
        read()
    }

    #[inline(always)]
    pub fn now_fn_pointer() -> u64 {
        call(&NOW_FN)
    }

    #[inline(always)]
    pub fn raw_fn_pointer() -> u64 {
        call(&RAW_FN)
    }

    /// The clock's `raw()` before this work: generation, then the mode of that record.
    #[inline(always)]
    pub fn raw_generation_mode() -> u64 {
        let generation = PUBLISHED.generation.load(Ordering::Acquire);
        match PUBLISHED.slots[index(generation)]
            .mode
            .load(Ordering::Relaxed)
        {
            MODE_TSC => rdtsc() & !(1 << 63),
            _ => 0,
        }
    }

    /// One load of a mode word kept outside the records, then RDTSC.
    #[inline(always)]
    pub fn raw_mode() -> u64 {
        match MODE.load(Ordering::Relaxed) {
            MODE_TSC => rdtsc() & !(1 << 63),
            _ => 0,
        }
    }
}

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

/// One batch: (wall ns, thread CPU ns) for `BATCH_READS` reads.
#[inline(always)]
fn batch<T>(read: &mut impl FnMut() -> T) -> (u64, u64) {
    let cpu_start = clock::thread_cpu_ns();
    let wall_start = clock_gettime_monotonic_ns();
    for _ in 0..BATCH_READS {
        black_box(read());
    }
    let wall_end = clock_gettime_monotonic_ns();
    let cpu_end = clock::thread_cpu_ns();
    (wall_end - wall_start, cpu_end - cpu_start)
}

struct Case<'a> {
    name: &'a str,
    run: Box<dyn FnMut() -> (u64, u64) + 'a>,
    wall: Vec<u64>,
    cpu: Vec<u64>,
}

fn case<'a, T>(name: &'a str, mut read: impl FnMut() -> T + 'a) -> Case<'a> {
    Case {
        name,
        run: Box::new(move || batch(&mut read)),
        wall: Vec::new(),
        cpu: Vec::new(),
    }
}

/// (busy, total) jiffies per CPU from /proc/stat; empty where it cannot be read.
fn cpu_jiffies() -> Vec<(u64, u64)> {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    stat.lines()
        .filter(|line| line.starts_with("cpu") && !line.starts_with("cpu "))
        .map(|line| {
            let fields: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|field| field.parse().ok())
                .collect();
            let total: u64 = fields.iter().sum();
            // idle and iowait are the 4th and 5th fields.
            let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
            (total - idle, total)
        })
        .collect()
}

/// What the machine was doing: the other CPUs' busy share during the run matters most, as a
/// busy SMT sibling roughly doubles every TSC read.
fn describe_load(before: &[(u64, u64)], after: &[(u64, u64)]) -> String {
    let busy: Vec<String> = before
        .iter()
        .zip(after)
        .enumerate()
        .map(|(cpu, (&(busy_0, total_0), &(busy_1, total_1)))| {
            let share = (busy_1 - busy_0) as f64 / (total_1 - total_0).max(1) as f64;
            format!("cpu{cpu} {:.0}%", share * 100.0)
        })
        .collect();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loadavg: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    format!(
        "busy during the run: {}; load average {}",
        busy.join(", "),
        loadavg.join(" ")
    )
}

fn median_per_read(values: &mut [u64]) -> f64 {
    values.sort_unstable();
    values[values.len() / 2] as f64 / BATCH_READS as f64
}

fn main() {
    // `cargo bench` passes `--bench`; the first numeric argument is the number of rounds.
    let rounds = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse::<usize>().ok())
        .unwrap_or(ROUNDS_DEFAULT)
        .clamp(1, ROUNDS_MAX);
    let global = clock::Clock::global();
    eprintln!(
        "clock: source {:?}, reason {}",
        global.source(),
        global.reason()
    );
    let quanta_clock = quanta::Clock::new();
    // The fallback: a clock forced to the OS source (what machines without a usable TSC get).
    let os_clock = clock::Clock::new(clock::Config {
        source: clock::Choice::Os,
    });
    let mut cases = vec![
        case("strata raw()", clock::raw),
        case("strata now()", clock::now),
        case("strata wall()", clock::wall),
        case("clock_gettime(MONOTONIC)", clock_gettime_monotonic_ns),
        case("strata now(), OS source", move || os_clock.now()),
        case("strata raw(), OS source", move || os_clock.raw()),
        case("quanta Clock::raw()", || quanta_clock.raw()),
        case("quanta Clock::now()", || quanta_clock.now()),
        case("minstant Instant::now()", minstant::Instant::now),
        case("std Instant::now()", std::time::Instant::now),
    ];
    // Strata's record pattern: two reads and one histogram insert.
    let mut recorder = hist::Recorder::new();
    cases.push(case("record: Stopwatch + insert", move || {
        let stopwatch = clock::Stopwatch::start();
        recorder.insert_intscale(stopwatch.elapsed_ns() as i64, -9);
    }));
    let mut recorder = hist::Recorder::new();
    cases.push(case("record: two now() + insert", move || {
        let start_ns = clock::now();
        let end_ns = clock::now();
        recorder.insert_intscale((end_ns - start_ns) as i64, -9);
    }));
    let mut recorder = hist::Recorder::new();
    cases.push(case("record: two clock_gettime + insert", move || {
        let start_ns = clock_gettime_monotonic_ns();
        let end_ns = clock_gettime_monotonic_ns();
        recorder.insert_intscale((end_ns - start_ns) as i64, -9);
    }));
    let mut recorder = hist::Recorder::new();
    let mut value_ns = 0i64;
    cases.push(case("record: insert only", move || {
        value_ns = (value_ns + 7) & 63;
        recorder.insert_intscale(black_box(value_ns), -9);
    }));
    #[cfg(target_arch = "x86_64")]
    {
        seq::install_fn_pointers();
        cases.extend([
            case("RDTSC", seq::rdtsc),
            case("raw: mode load + RDTSC", seq::raw_mode),
            case("raw: generation, mode + RDTSC", seq::raw_generation_mode),
            case("raw: fn pointer → RDTSC", seq::raw_fn_pointer),
            case("LFENCE;RDTSC", seq::lfence_rdtsc),
            case("RDTSCP", seq::rdtscp),
            case("RDTSCP;LFENCE", seq::rdtscp_lfence),
            case("MFENCE;LFENCE;RDTSC", seq::mfence_lfence_rdtsc),
            case("LFENCE;RDTSC + mul-add", seq::lfence_rdtsc_mul),
            case("now: record, LFENCE;RDTSC, mul", seq::record_then_fence),
            case("now: mode, LFENCE;RDTSC, record", seq::mode_then_fence),
            case("now: LFENCE;RDTSC, record, mul", seq::fence_then_record),
            case("now: RDTSCP, record, mul", seq::rdtscp_then_record),
            case(
                "now: fn pointer → LFENCE;RDTSC, record",
                seq::now_fn_pointer,
            ),
            case(
                "now: LFENCE;RDTSC, imul+shr",
                seq::fence_then_record_imul_shift,
            ),
        ]);
    }
    // Warm up every case (and the clock's first calibration) outside the measurement.
    for case in &mut cases {
        (case.run)();
    }
    let jiffies_before = cpu_jiffies();
    for _ in 0..rounds {
        for case in &mut cases {
            let (wall_ns, cpu_ns) = (case.run)();
            case.wall.push(wall_ns);
            case.cpu.push(cpu_ns);
        }
    }
    println!("{}", describe_load(&jiffies_before, &cpu_jiffies()));
    println!("| case | wall ns/read (median) | thread CPU ns/read (median) |");
    println!("|---|---:|---:|");
    for case in &mut cases {
        let wall = median_per_read(&mut case.wall);
        let cpu = median_per_read(&mut case.cpu);
        println!("| {} | {wall:.2} | {cpu:.2} |", case.name);
    }
}
