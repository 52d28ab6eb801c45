//! The CPU's time-stamp counter (TSC): detection and the two ways of reading it.
//!
//! Every other module goes through these three functions, so this is the only place with
//! `unsafe` intrinsics. On other architectures the TSC never exists and the clock uses the OS.

#[cfg(target_arch = "x86_64")]
mod imp {
    use core::arch::x86_64::{__cpuid, _mm_lfence, _rdtsc};

    /// CPUID leaf holding the highest supported extended leaf.
    const LEAF_EXTENDED_MAX: u32 = 0x8000_0000;
    /// CPUID leaf "Advanced Power Management Information"; EDX bit 8 = invariant TSC. Intel and
    /// AMD define this bit identically, so no vendor check is needed (or wanted).
    const LEAF_POWER_MANAGEMENT: u32 = 0x8000_0007;
    const EDX_INVARIANT_TSC: u32 = 1 << 8;

    /// Whether the CPU promises a TSC that ticks at a constant rate in every P-, C- and T-state.
    pub fn invariant_tsc() -> bool {
        let leaf_max = __cpuid(LEAF_EXTENDED_MAX).eax;
        if leaf_max < LEAF_POWER_MANAGEMENT {
            return false;
        }
        __cpuid(LEAF_POWER_MANAGEMENT).edx & EDX_INVARIANT_TSC != 0
    }

    /// The TSC with no ordering: it may be sampled before earlier instructions have executed.
    #[inline(always)]
    pub fn ticks() -> u64 {
        // SAFETY: RDTSC exists on every x86_64 CPU; it reads a register and touches no memory.
        // (User-mode RDTSC can be disabled by the kernel via CR4.TSD; Linux does not do that for
        // ordinary processes, and we only reach this after CPUID reported an invariant TSC.)
        unsafe { _rdtsc() }
    }

    /// The TSC sampled only after every earlier instruction, in particular every earlier load,
    /// has completed: LFENCE does not execute until all prior instructions complete locally and
    /// no later instruction starts before it. So if an earlier load observed a store that was
    /// made after another thread's reading, this reading is later than that one. (On AMD, LFENCE
    /// has this dispatch-serialising meaning whenever the kernel sets MSR C001_1029[1], which
    /// Linux does on every CPU that supports it, as its Spectre-v1 mitigation relies on it.)
    #[inline(always)]
    pub fn ticks_ordered() -> u64 {
        // SAFETY: LFENCE is part of SSE2, which every x86_64 CPU has; RDTSC as in `ticks`.
        // Neither touches memory.
        unsafe {
            _mm_lfence();
            _rdtsc()
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    /// No TSC outside x86_64: the clock always chooses the OS.
    pub fn invariant_tsc() -> bool {
        false
    }

    /// Never called: the clock only reads the TSC after `invariant_tsc()` returned true.
    #[inline(always)]
    pub fn ticks() -> u64 {
        0
    }

    /// Never called, as `ticks`.
    #[inline(always)]
    pub fn ticks_ordered() -> u64 {
        0
    }
}

pub(crate) use imp::{invariant_tsc, ticks, ticks_ordered};

/// Whether this build can ever use the TSC.
pub(crate) const TSC_ARCH: bool = cfg!(target_arch = "x86_64");
