//! Time you can afford to read on every operation.
//!
//! Strata records the latency of every operation into histograms, so reading the clock must
//! cost a small fraction of the operation. This crate reads the CPU's time-stamp counter (TSC)
//! where that is safe and the OS clock everywhere else, behind one API:
//!
//! - [`now()`]: monotonic nanoseconds on the `CLOCK_MONOTONIC` scale, **ordered**: never behind
//!   any `now()` that happened-before it, on any thread or CPU.
//! - [`raw()`] + [`delta_ns()`], or a [`Stopwatch`]: the cheapest reading (an unfenced TSC
//!   read), for intervals measured on one thread. Readings are opaque; only their difference
//!   means something.
//! - [`wall()`]: nanoseconds since the Unix epoch, within [`WALL_ERROR_NS_MAX`] of
//!   `CLOCK_REALTIME` (see below). Like `CLOCK_REALTIME` it is not monotonic.
//!
//! The free functions use one process-wide clock, started on first use from `STRATA_CLOCK`
//! (`auto` by default, or `os`, `tsc`) or by [`init`]. [`Clock::new`] builds another one (tests,
//! tools); [`Clock::source`] and [`Clock::reason`] say what a clock chose and why, and
//! [`check::run`] measures it (`strata clock check`).
//!
//! ```
//! // Time an operation on one thread: the cheapest pair of reads.
//! let stopwatch = clock::Stopwatch::start();
//! let total: u64 = (1..=1_000u64).sum();
//! let latency_ns = stopwatch.elapsed_ns();
//! assert!(total > 0 && latency_ns < 1_000_000_000);
//!
//! // The same with the reads spelled out.
//! let start = clock::raw();
//! let latency_ns = clock::delta_ns(start, clock::raw());
//! assert!(latency_ns < 1_000_000_000);
//!
//! // Timestamps compared across threads: ordered.
//! let first_ns = clock::now();
//! let second_ns = std::thread::spawn(clock::now).join().unwrap_or(u64::MAX);
//! assert!(second_ns >= first_ns);
//!
//! // Wall-clock time, e.g. for a sample's timestamp in milliseconds.
//! let timestamp_ms = clock::wall() / 1_000_000;
//! assert!(timestamp_ms > 1_600_000_000_000);
//! ```
//!
//! # Cost
//! On the AMD EPYC test machine (pinned; medians over many short batches and over a dozen runs,
//! `bench/RESULTS.md`): `raw()` 9.8–9.9 ns, the same as a bare `RDTSC` in the same runs;
//! `now()` and `wall()` 17.5–17.8 ns, the same as a bare `LFENCE; RDTSC` plus one multiply-add
//! (`LFENCE; RDTSC` alone is 16.4–16.5 ns, `clock_gettime` 22.6–22.8); a [`Stopwatch`] interval
//! plus one `hist` insert 33.3 ns.
//!
//! # When the TSC is used
//! Only on x86_64 when CPUID reports an invariant TSC (any vendor) **and** the kernel's
//! clocksource is `tsc` (the kernel checked the TSC is synchronised across CPUs and watches it);
//! `STRATA_CLOCK=tsc` skips the kernel check, `os` never uses the TSC. The TSC is calibrated
//! against `CLOCK_MONOTONIC` at start (5 ms, blocking the first read), again 0.5 s later, then
//! every 5 s by a background thread, which steers the slope (by at most 200 ppm) so the clock
//! tracks `CLOCK_MONOTONIC` (to within tens of nanoseconds on the test machine).
//! That thread is the only writer: readers load the published parameters (a double-buffered
//! seqlock) and never write shared memory or wait for the writer (one exception: a read that
//! overlapped a publication, or found its TSC sample older than the record it loaded, 8 times in
//! a row — at one publication per 5 s, only a thread descheduled for tens of seconds in between
//! can — reads again under the writer's lock rather than return a wrong value). A
//! fault seen by the thread — the TSC stepping back, drifting more than [`TRACKING_ERROR_NS_MAX`]
//! from `CLOCK_MONOTONIC`, the kernel leaving the TSC, a publication so late that readers could
//! outrun it — switches the clock to the OS for good within one interval, offset so that `now()`
//! does not step back (it may step forward by up to 10 ms).
//!
//! Limits: the TSC must tick at 1 GHz or more (every invariant-TSC x86_64 CPU does; slower
//! ones get the OS clock). A child created by `fork` without `exec` has no recalibration
//! thread: its TSC clock keeps working but is no longer steered or watched.
//!
//! # Why `now()` never steps backwards
//! - A TSC read is ordered (`LFENCE; RDTSC`): it happens after every earlier load completed, so
//!   a read that follows another thread's read through any synchronisation is not sampled
//!   before it. (An unfenced `RDTSC` can execute early: on this project's AMD EPYC test machine
//!   0.16% of alternating cross-thread reads went backwards, by up to 61 ns, and in this crate's
//!   cross-thread test dozens of 10 M did, by up to ~1.5 µs.) The fence is the first thing a
//!   reading does after one load of the source: the parameters are loaded after the sample, so
//!   the fence waits for nothing but the caller's own earlier work.
//! - Each published record is a piecewise-linear function of the TSC with positive slopes that
//!   meet exactly at the switch point; each record continues the previous one's line from the
//!   previous switch point on, and is published at least 100 µs (in practice ~100 ms) before
//!   its own switch point. So all records together describe one global non-decreasing function
//!   G of the TSC, and every reading is G of its own sample: a sample cannot reach the next
//!   record's switch point before the record it loaded was replaced, and a sample older than
//!   the record it loaded (the reader was descheduled between the two for a whole interval) is
//!   noticed and taken again. (The full argument is on `Published::tsc_read`.)
//! - On a fallback the OS clock is offset above anything the TSC clock can still return.
//!
//! # The `wall()` bound
//! In TSC mode `wall() = now() + offset`, where the offset is `CLOCK_REALTIME − now()` measured
//! at each recalibration. Between two recalibrations the error can grow only by the difference
//! in rate between the TSC clock and `CLOCK_MONOTONIC` (at most 200 ppm of steering plus the
//! kernel's 500 ppm limit on frequency adjustment) over at most 6 s, plus sampling error:
//! **|wall() − CLOCK_REALTIME| ≤ [`WALL_ERROR_NS_MAX`] = 5 ms**, unless the system clock was
//! stepped (e.g. `settimeofday`, an NTP step) in the last 5 s; `wall()` follows such a step at
//! the next recalibration. In practice the error is under a microsecond (`strata clock check`
//! reports it as `wall_error_ns`). In OS mode `wall()` is `CLOCK_REALTIME` itself.

mod arch;
mod calibrate;
pub mod check;
mod config;
mod line;
mod os;
mod published;
mod reason;

use std::fmt;
use std::sync::{Mutex, MutexGuard, Once, PoisonError};
use std::thread;

use calibrate::Calibrator;
pub use calibrate::{RECALIBRATE_INTERVAL_NS, TRACKING_ERROR_NS_MAX};
pub use config::{Choice, Config, ConfigError, ENV_VAR};
pub use os::{process_cpu_ns, thread_cpu_ns};
use published::{Params, Published, MODE_OS, MODE_TSC};
pub use reason::{Fault, Reason, Source};

/// The documented bound on `|wall() − CLOCK_REALTIME|` (see the crate docs for when it holds).
pub const WALL_ERROR_NS_MAX: u64 = 5_000_000;

/// What a clock uses and why; changed only together with a publication.
#[derive(Clone, Debug)]
struct Status {
    source: Source,
    reason: Reason,
}

/// One clock: its published parameters, its start, and its status.
pub(crate) struct State {
    published: Published,
    start: Once,
    /// Serialises publications and records their meaning. Readers of the time never touch it.
    status: Mutex<Option<Status>>,
}

impl State {
    const fn new() -> State {
        State {
            published: Published::new(),
            start: Once::new(),
            status: Mutex::new(None),
        }
    }

    fn lock_status(&self) -> MutexGuard<'_, Option<Status>> {
        // The guarded value is replaced whole; a panic elsewhere cannot leave it half-written.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, params: &Params, reason: Reason) {
        let source = match params.mode {
            MODE_TSC => Source::Tsc,
            _ => Source::Os,
        };
        let mut status = self.lock_status();
        self.published.publish(params);
        *status = Some(Status { source, reason });
    }

    fn status(&self) -> Status {
        self.lock_status().clone().unwrap_or(Status {
            source: Source::Os,
            reason: Reason::OsForced,
        })
    }

    fn reason(&self) -> Reason {
        self.status().reason
    }

    /// The current record, read under the publication lock.
    fn params(&self) -> Params {
        let _publications = self.lock_status();
        self.published.params_exclusive()
    }

    /// Chooses the source, calibrates, publishes the first record and starts the thread.
    fn start(&'static self, config: Result<Config, ConfigError>) {
        let choice = match config {
            Ok(config) => decide(config.source),
            Err(error) => Err(Reason::InvalidConfig { value: error.value }),
        };
        let (reason, check_clocksource) = match choice {
            Ok(tsc) => tsc,
            Err(reason) => return self.start_os(reason),
        };
        let Some(calibrator) = Calibrator::calibrate(self, check_clocksource) else {
            return self.start_os(Reason::CalibrationFailed);
        };
        calibrator.publish_initial(reason);
        let mut backup = calibrator.clone();
        let spawned = thread::Builder::new()
            .name("strata-clock".to_string())
            .spawn(move || calibrator.run());
        if let Err(error) = spawned {
            // Without the thread nothing would watch the TSC: do not use it.
            backup.fall_back(Reason::NoRecalibrationThread {
                error: error.to_string(),
            });
        }
    }

    fn start_os(&self, reason: Reason) {
        self.publish(
            &Params {
                mode: MODE_OS,
                ..Params::default()
            },
            reason,
        );
    }
}

/// `Ok((reason, check the kernel clocksource later))` to use the TSC, `Err(reason)` for the OS.
fn decide(choice: Choice) -> Result<(Reason, bool), Reason> {
    if choice == Choice::Os {
        return Err(Reason::OsForced);
    }
    if !arch::TSC_ARCH {
        return Err(Reason::NotX86_64);
    }
    if !arch::invariant_tsc() {
        return Err(Reason::NoInvariantTsc);
    }
    let clocksource = os::kernel_clocksource();
    if choice == Choice::Tsc {
        let kernel_clocksource = clocksource.unwrap_or_else(|error| error);
        return Ok((Reason::TscForced { kernel_clocksource }, false));
    }
    match clocksource {
        Ok(name) if name == "tsc" => Ok((Reason::TscSafe, true)),
        Ok(name) => Err(Reason::KernelClocksource { name }),
        Err(error) => Err(Reason::ClocksourceUnreadable { error }),
    }
}

/// The process-wide clock behind the free functions.
static GLOBAL: State = State::new();

/// A handle to a clock; cheap to copy. See the crate docs.
#[derive(Clone, Copy)]
pub struct Clock {
    state: &'static State,
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.state.status();
        f.debug_struct("Clock")
            .field("source", &status.source)
            .field("reason", &status.reason)
            .finish()
    }
}

impl Clock {
    /// The process-wide clock (started from `STRATA_CLOCK` if nothing started it yet).
    pub fn global() -> Clock {
        let clock = Clock { state: &GLOBAL };
        clock.ensure_started();
        clock
    }

    /// A new, independent clock with its own parameters and (when it uses the TSC) its own
    /// recalibration thread. Both live as long as the process: build few (the global one is
    /// meant for everything but tests and diagnostics).
    pub fn new(config: Config) -> Clock {
        let state: &'static State = Box::leak(Box::new(State::new()));
        state.start.call_once(|| state.start(Ok(config)));
        Clock { state }
    }

    #[cfg(test)]
    fn from_state(state: &'static State) -> Clock {
        state.start.call_once(|| {});
        Clock { state }
    }

    /// Monotonic nanoseconds, ordered across threads and CPUs (see the crate docs).
    // The readings are inlined whole (their rare paths are out of line): a call and return
    // would add a measurable share to a read of 10–18 ns.
    #[inline(always)]
    pub fn now(self) -> u64 {
        match self.state.published.now() {
            Some(ns) => ns,
            None => self.now_cold(),
        }
    }

    /// The cheapest reading, for intervals on one thread: convert with [`Clock::delta_ns`].
    #[inline(always)]
    pub fn raw(self) -> u64 {
        match self.state.published.raw() {
            Some(raw) => raw,
            None => self.raw_cold(),
        }
    }

    /// Nanoseconds from `start` to `end` (two `raw()` readings); 0 if `end` is not after
    /// `start` or the clock changed source in between.
    #[inline(always)]
    pub fn delta_ns(self, start: u64, end: u64) -> u64 {
        self.state.published.delta_ns(start, end)
    }

    /// Nanoseconds since the Unix epoch, within [`WALL_ERROR_NS_MAX`] of `CLOCK_REALTIME`.
    #[inline(always)]
    pub fn wall(self) -> u64 {
        match self.state.published.wall() {
            Some(ns) => ns,
            None => self.wall_cold(),
        }
    }

    /// Where readings come from now.
    pub fn source(self) -> Source {
        self.ensure_started();
        self.state.status().source
    }

    /// Why: see [`Reason`].
    pub fn reason(self) -> Reason {
        self.ensure_started();
        self.state.reason()
    }

    fn ensure_started(self) {
        // Only the global clock can be unstarted; the others start in `Clock::new`.
        self.state
            .start
            .call_once(|| self.state.start(Config::from_env()));
    }

    /// Before the first record, or when a read overlapped publications `READ_ATTEMPTS_MAX`
    /// times in a row: read while holding the publication lock, so nothing can overlap.
    #[cold]
    fn now_cold(self) -> u64 {
        self.ensure_started();
        let _publications = self.state.lock_status();
        self.state
            .published
            .now_exclusive()
            .unwrap_or_else(os::monotonic_ns)
    }

    #[cold]
    fn raw_cold(self) -> u64 {
        self.ensure_started();
        self.state
            .published
            .raw()
            .unwrap_or_else(|| os::monotonic_ns() | published::RAW_OS_TAG)
    }

    /// As `now_cold`.
    #[cold]
    fn wall_cold(self) -> u64 {
        self.ensure_started();
        let _publications = self.state.lock_status();
        self.state
            .published
            .wall_exclusive()
            .unwrap_or_else(os::realtime_ns)
    }
}

/// [`init`] was called after the process-wide clock had already started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlreadyStarted;

impl fmt::Display for AlreadyStarted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the process-wide clock has already started")
    }
}

impl std::error::Error for AlreadyStarted {}

/// Starts the process-wide clock with `config` instead of `STRATA_CLOCK`; must come before any
/// other use of it.
pub fn init(config: Config) -> Result<(), AlreadyStarted> {
    let mut started = false;
    GLOBAL.start.call_once(|| {
        GLOBAL.start(Ok(config));
        started = true;
    });
    if started {
        Ok(())
    } else {
        Err(AlreadyStarted)
    }
}

/// [`Clock::now`] of the process-wide clock.
#[inline(always)]
pub fn now() -> u64 {
    Clock { state: &GLOBAL }.now()
}

/// [`Clock::raw`] of the process-wide clock.
#[inline(always)]
pub fn raw() -> u64 {
    Clock { state: &GLOBAL }.raw()
}

/// [`Clock::delta_ns`] of the process-wide clock.
#[inline(always)]
pub fn delta_ns(start: u64, end: u64) -> u64 {
    Clock { state: &GLOBAL }.delta_ns(start, end)
}

/// [`Clock::wall`] of the process-wide clock.
#[inline(always)]
pub fn wall() -> u64 {
    Clock { state: &GLOBAL }.wall()
}

/// Times an interval on one thread with the process-wide clock's cheapest reads: Strata's
/// record pattern is `let stopwatch = Stopwatch::start(); …; recorder.insert_intscale(stopwatch
/// .elapsed_ns() as i64, -9)` — two clock reads and one histogram insert.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    start: u64,
}

impl Stopwatch {
    #[inline(always)]
    pub fn start() -> Stopwatch {
        Stopwatch { start: raw() }
    }

    /// Nanoseconds since `start` (0 if the clock changed source in between).
    #[inline(always)]
    pub fn elapsed_ns(self) -> u64 {
        delta_ns(self.start, raw())
    }
}
