//! What the clock chose, and why.

use std::fmt;

/// Where readings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The CPU's time-stamp counter, scaled to nanoseconds.
    Tsc,
    /// The operating system (`clock_gettime`, through the vDSO on Linux).
    Os,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Tsc => "tsc",
            Source::Os => "os",
        }
    }
}

/// Why the clock uses its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// TSC: the CPU reports an invariant TSC and the kernel's clocksource is `tsc`.
    TscSafe,
    /// TSC: configured (`tsc`), the CPU reports an invariant TSC; the kernel's clocksource (shown)
    /// was not consulted.
    TscForced { kernel_clocksource: String },
    /// OS: configured (`os`).
    OsForced,
    /// OS: `STRATA_CLOCK` held something else than `os`, `tsc` or `auto`.
    InvalidConfig { value: String },
    /// OS: not an x86_64 build.
    NotX86_64,
    /// OS: CPUID does not report an invariant TSC.
    NoInvariantTsc,
    /// OS: the kernel does not trust the TSC (its clocksource is another one).
    KernelClocksource { name: String },
    /// OS: the kernel's clocksource could not be read.
    ClocksourceUnreadable { error: String },
    /// OS: the TSC could not be calibrated against `CLOCK_MONOTONIC`.
    CalibrationFailed,
    /// OS: the recalibration thread could not be started.
    NoRecalibrationThread { error: String },
    /// OS: the TSC was in use and then failed a check.
    Fault(Fault),
}

/// A check the TSC failed while in use; the clock then falls back to the OS for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The TSC read lower than a previous reading on the recalibration thread.
    TicksBackwards { ticks_back: u64 },
    /// The TSC clock and `CLOCK_MONOTONIC` drifted apart by more than the tracking bound.
    Drift { error_ns: i64 },
    /// The kernel stopped using the TSC as its clocksource.
    ClocksourceChanged { name: String },
    /// Publishing new parameters took so long that readers could have outrun them.
    PublishLate { late_ns: u64 },
    /// A recalibration sample could not be taken or gave an implausible slope.
    Sample,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::TscSafe => write!(f, "invariant TSC (CPUID) and kernel clocksource tsc"),
            Reason::TscForced { kernel_clocksource } => write!(
                f,
                "forced tsc: invariant TSC (CPUID); kernel clocksource ({kernel_clocksource}) \
                 not consulted"
            ),
            Reason::OsForced => write!(f, "forced os"),
            Reason::InvalidConfig { value } => {
                write!(f, "{}={value:?} is not os, tsc or auto", crate::ENV_VAR)
            }
            Reason::NotX86_64 => write!(f, "no TSC on this architecture"),
            Reason::NoInvariantTsc => write!(f, "CPUID reports no invariant TSC"),
            Reason::KernelClocksource { name } => {
                write!(f, "kernel clocksource is {name}, not tsc")
            }
            Reason::ClocksourceUnreadable { error } => {
                write!(f, "kernel clocksource unreadable: {error}")
            }
            Reason::CalibrationFailed => write!(f, "TSC calibration failed"),
            Reason::NoRecalibrationThread { error } => {
                write!(f, "recalibration thread could not start: {error}")
            }
            Reason::Fault(fault) => write!(f, "TSC fault, fell back to os: {fault}"),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::TicksBackwards { ticks_back } => {
                write!(f, "TSC stepped back by {ticks_back} ticks")
            }
            Fault::Drift { error_ns } => {
                write!(f, "drifted {error_ns} ns from CLOCK_MONOTONIC")
            }
            Fault::ClocksourceChanged { name } => {
                write!(f, "kernel clocksource changed to {name}")
            }
            Fault::PublishLate { late_ns } => {
                write!(f, "recalibration published {late_ns} ns late")
            }
            Fault::Sample => write!(f, "recalibration sample failed"),
        }
    }
}
