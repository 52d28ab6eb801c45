//! The operating system's clocks, read through the vDSO by `clock_gettime`.

use std::fs;

/// Where Linux says which clocksource backs `CLOCK_MONOTONIC`.
pub(crate) const CLOCKSOURCE_PATH: &str =
    "/sys/devices/system/clocksource/clocksource0/current_clocksource";

/// `CLOCK_MONOTONIC` in nanoseconds (since boot, not counting suspend).
#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch.
#[inline]
pub(crate) fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time consumed by the calling thread, in nanoseconds: work measured this way does not count
/// time the thread spent waiting for a shared CPU, which is what benchmarks on busy machines need.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time consumed by all threads of this process, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

#[inline]
fn clock_ns(clock_id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that lives across the call, and `clock_id` is
    // one of the clocks every Linux (and POSIX) system provides: monotonic, realtime, and the
    // calling thread's and process's CPU-time clocks.
    let rc = unsafe { libc::clock_gettime(clock_id, &mut ts) };
    // clock_gettime fails only for an invalid clock id or pointer (EINVAL/EFAULT), neither of
    // which can happen here: a failure would mean the C library is broken.
    assert_eq!(rc, 0, "clock_gettime failed");
    assert!(ts.tv_sec >= 0 && (0..1_000_000_000).contains(&ts.tv_nsec));
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// The kernel's current clocksource (`tsc`, `kvm-clock`, `hpet`, …).
pub(crate) fn kernel_clocksource() -> Result<String, String> {
    match fs::read_to_string(CLOCKSOURCE_PATH) {
        Ok(text) => Ok(text.trim().to_string()),
        Err(error) => Err(format!("{CLOCKSOURCE_PATH}: {error}")),
    }
}
