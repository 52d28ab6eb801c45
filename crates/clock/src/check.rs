//! The self-test behind `strata clock check`: what a clock chose, what its readings cost, and
//! whether `now()` ever stepped backwards across threads on different CPUs.

use std::hint::black_box;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use crate::line::Line;
use crate::published::MODE_TSC;
use crate::{os, Clock, Source};

/// Cost measurement: the median of this many batches of `COST_BATCH_READS` reads.
const COST_BATCHES: usize = 31;
const COST_BATCH_READS: u64 = 10_000;

/// Attempts to bracket a reading between two readings of the OS clock it should match.
const ERROR_ATTEMPTS_MAX: u32 = 64;

/// What `strata clock check` reports.
#[derive(Clone, Debug)]
pub struct Report {
    pub source: Source,
    pub reason: String,
    /// Cost per read, median of batches, nanoseconds.
    pub now_ns: f64,
    pub raw_ns: f64,
    pub wall_ns: f64,
    /// `clock_gettime(CLOCK_MONOTONIC)` measured the same way.
    pub os_ns: f64,
    /// `now()` readings that were lower than one that happened-before them.
    pub backwards: u64,
    pub backwards_ns_max: u64,
    /// Reads in the cross-thread test, and the CPUs its threads were pinned to in turn.
    pub reads: u64,
    pub cpus: Vec<usize>,
    /// `wall() − CLOCK_REALTIME` (middle of a bracketing pair of reads).
    pub wall_error_ns: i64,
    /// `now() − CLOCK_MONOTONIC`, measured the same way.
    pub now_error_ns: i64,
    /// The TSC frequency as calibrated, when the source is the TSC.
    pub tsc_hz: Option<u64>,
}

/// Runs every check on `clock`, with `reads_total` reads in the cross-thread test.
pub fn run(clock: Clock, reads_total: u64) -> Report {
    let status = clock.state.status();
    let cross = cross_thread(|| clock.now(), reads_total, reads_total / 64);
    let params = clock.state.params();
    let tsc_hz = (params.mode == MODE_TSC).then(|| tsc_hz(params.new));
    Report {
        source: status.source,
        reason: status.reason.to_string(),
        now_ns: cost_ns(|| clock.now()),
        raw_ns: cost_ns(|| clock.raw()),
        wall_ns: cost_ns(|| clock.wall()),
        os_ns: cost_ns(os::monotonic_ns),
        backwards: cross.backwards,
        backwards_ns_max: cross.backwards_ns_max,
        reads: cross.reads,
        cpus: cross.cpus,
        wall_error_ns: error_ns(|| clock.wall(), os::realtime_ns),
        now_error_ns: error_ns(|| clock.now(), os::monotonic_ns),
        tsc_hz,
    }
}

fn tsc_hz(line: Line) -> u64 {
    let hz = (1_000_000_000u128 << 64) / u128::from(line.mult.max(1));
    u64::try_from(hz).unwrap_or(u64::MAX)
}

/// Nanoseconds per call of `read`: the median over batches, each timed by `CLOCK_MONOTONIC`.
pub fn cost_ns(mut read: impl FnMut() -> u64) -> f64 {
    let mut batch_ns: Vec<u64> = (0..COST_BATCHES)
        .map(|_| {
            let start_ns = os::monotonic_ns();
            let mut sum = 0u64;
            for _ in 0..COST_BATCH_READS {
                sum = sum.wrapping_add(read());
            }
            black_box(sum);
            os::monotonic_ns().saturating_sub(start_ns)
        })
        .collect();
    batch_ns.sort_unstable();
    batch_ns[COST_BATCHES / 2] as f64 / COST_BATCH_READS as f64
}

/// `read() − reference()`, from the attempt where two reference reads bracket `read()` most
/// tightly.
pub fn error_ns(read: impl Fn() -> u64, reference: impl Fn() -> u64) -> i64 {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..ERROR_ATTEMPTS_MAX {
        let before_ns = reference();
        let read_ns = read();
        let after_ns = reference();
        let bracket_ns = after_ns.saturating_sub(before_ns);
        let middle_ns = before_ns / 2 + after_ns / 2;
        let error_ns = i64::try_from(i128::from(read_ns) - i128::from(middle_ns));
        let error_ns = error_ns.unwrap_or(i64::MAX);
        if best.is_none_or(|(best_bracket_ns, _)| bracket_ns < best_bracket_ns) {
            best = Some((bracket_ns, error_ns));
        }
    }
    best.map_or(0, |(_, error_ns)| error_ns)
}

/// The outcome of [`cross_thread`].
#[derive(Clone, Debug, Default)]
pub struct CrossThread {
    pub reads: u64,
    pub backwards: u64,
    pub backwards_ns_max: u64,
    /// The CPUs the threads were pinned to (empty if pinning was impossible).
    pub cpus: Vec<usize>,
    /// Successful re-pinnings, over both threads.
    pub bounces: u64,
}

/// Two threads call `read` `reads_total` times in all, each publishing its last reading and
/// checking that its next reading is not lower than the last one published by either thread
/// (which happened-before it). Every `bounce_every` reads each thread moves to the next allowed
/// CPU, so the threads swap CPUs; 0 = never move.
pub fn cross_thread<F>(read: F, reads_total: u64, bounce_every: u64) -> CrossThread
where
    F: Fn() -> u64 + Sync,
{
    let cpus = allowed_cpus().unwrap_or_default();
    let published = AtomicU64::new(0);
    let reads_per_thread = reads_total / 2;
    let mut total = CrossThread {
        cpus: cpus.clone(),
        ..CrossThread::default()
    };
    thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|index| {
                let (read, cpus, published) = (&read, &cpus, &published);
                scope.spawn(move || {
                    worker(index, read, cpus, published, reads_per_thread, bounce_every)
                })
            })
            .collect();
        for worker in workers {
            match worker.join() {
                Ok(part) => {
                    total.reads += part.reads;
                    total.backwards += part.backwards;
                    total.backwards_ns_max = total.backwards_ns_max.max(part.backwards_ns_max);
                    total.bounces += part.bounces;
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    if total.bounces == 0 {
        total.cpus.clear();
    }
    total
}

fn worker(
    index: usize,
    read: &(impl Fn() -> u64 + Sync),
    cpus: &[usize],
    published: &AtomicU64,
    reads: u64,
    bounce_every: u64,
) -> CrossThread {
    let mut part = CrossThread::default();
    let mut until_bounce = 0;
    let mut bounce = 0;
    for _ in 0..reads {
        if until_bounce == 0 && bounce_every > 0 && cpus.len() >= 2 {
            // Thread 0 starts on the first CPU and thread 1 on the second; each step swaps.
            let cpu = cpus[(index + bounce) % cpus.len()];
            if pin_current_thread(cpu).is_ok() {
                part.bounces += 1;
            }
            bounce += 1;
            until_bounce = bounce_every;
        }
        until_bounce = until_bounce.saturating_sub(1);
        let seen = published.load(Ordering::Acquire);
        let reading = read();
        if reading < seen {
            part.backwards += 1;
            part.backwards_ns_max = part.backwards_ns_max.max(seen - reading);
        }
        published.store(reading, Ordering::Release);
        part.reads += 1;
    }
    part
}

/// The CPUs this thread may run on.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid, writable cpu_set_t of `size` bytes; pid 0 is this thread.
    let rc = unsafe { libc::sched_getaffinity(0, size, &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let cpu_count_max = 8 * size;
    // SAFETY: every index is below the set's capacity in bits.
    Ok((0..cpu_count_max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if cpu >= 8 * size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cpu index out of range",
        ));
    }
    // SAFETY: as in `allowed_cpus`: all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked to be below the set's capacity in bits.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes; pid 0 is this thread.
    let rc = unsafe { libc::sched_setaffinity(0, size, &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity needs Linux",
    ))
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpu: usize) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity needs Linux",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_thread_catches_a_clock_that_runs_backwards() {
        // A "clock" that counts down: every reading after the first is behind.
        let counter = AtomicU64::new(u64::MAX / 2);
        let result = cross_thread(|| counter.fetch_sub(1, Ordering::Relaxed), 10_000, 1_000);
        assert_eq!(result.reads, 10_000);
        assert!(result.backwards > 9_000, "{result:?}");
    }

    #[test]
    fn cross_thread_accepts_a_shared_counter() {
        let counter = AtomicU64::new(0);
        let result = cross_thread(|| counter.fetch_add(1, Ordering::SeqCst), 10_000, 1_000);
        assert_eq!(result.backwards, 0, "{result:?}");
    }

    #[test]
    fn cost_is_positive_and_finite() {
        let ns = cost_ns(os::monotonic_ns);
        assert!(ns > 0.0 && ns.is_finite());
    }
}
