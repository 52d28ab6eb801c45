//! The clock's parameters, published by one writer and read by every thread without any write.
//!
//! Two slots and a generation counter form a double-buffered seqlock. Generation `2k` means
//! record `k` is complete in slot `k % 2`; `2k + 1` means record `k + 1` is being written into
//! the other slot. A reader loads the generation, the record, samples the clock, and accepts the
//! result only if the generation still names record `k` afterwards. So a reader never waits for
//! the writer (the slot it reads is never the one being written), never writes shared memory,
//! and never mixes a record with a sample taken after a newer record was published.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::arch;
use crate::line::{Line, MULT_MIN};
use crate::os;

pub(crate) const MODE_UNINIT: u64 = 0;
pub(crate) const MODE_OS: u64 = 1;
pub(crate) const MODE_TSC: u64 = 2;

/// `raw()` readings of the OS clock carry this bit, so an interval whose ends come from
/// different sources (the clock fell back in between) is recognised instead of misconverted.
/// TSC readings never have it: 2^63 ticks is a century of uptime.
pub(crate) const RAW_OS_TAG: u64 = 1 << 63;

/// A reader retries only when a record was published during its read, which happens at most
/// once per recalibration interval (5 s); a second retry in a row needs the reader to be
/// descheduled for that long. The bound keeps the loop finite in any case: after it, the caller
/// reads under the lock that serialises publications (see `Published::exclusive`).
const READ_ATTEMPTS_MAX: u32 = 8;

/// One record: how to turn a reading into nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Params {
    pub mode: u64,
    /// TSC readings from here on use `new`, earlier ones `old`; the two agree exactly here.
    pub switch_ticks: u64,
    pub old: Line,
    pub new: Line,
    /// `now()` in OS mode is `CLOCK_MONOTONIC + os_offset_ns` (non-zero only after a fallback
    /// from the TSC, so that the fallback does not step backwards).
    pub os_offset_ns: u64,
    /// `wall()` in TSC mode is `now() + real_offset_ns`.
    pub real_offset_ns: i64,
}

impl Params {
    /// The TSC reading `ticks` in nanoseconds: the piecewise-linear, continuous, non-decreasing
    /// function this record describes.
    #[inline(always)]
    pub(crate) fn tsc_ns(&self, ticks: u64) -> u64 {
        let line = if ticks >= self.switch_ticks {
            self.new
        } else {
            self.old
        };
        line.eval(ticks)
    }
}

/// One record in one cache line.
#[derive(Default)]
#[repr(align(64))]
struct Slot {
    mode: AtomicU64,
    switch_ticks: AtomicU64,
    old_mult: AtomicU64,
    old_intercept_ns: AtomicU64,
    new_mult: AtomicU64,
    new_intercept_ns: AtomicU64,
    os_offset_ns: AtomicU64,
    real_offset_ns: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            mode: AtomicU64::new(MODE_UNINIT),
            switch_ticks: AtomicU64::new(0),
            old_mult: AtomicU64::new(0),
            old_intercept_ns: AtomicU64::new(0),
            new_mult: AtomicU64::new(0),
            new_intercept_ns: AtomicU64::new(0),
            os_offset_ns: AtomicU64::new(0),
            real_offset_ns: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    fn old(&self) -> Line {
        Line {
            mult: self.old_mult.load(Ordering::Relaxed),
            intercept_ns: self.old_intercept_ns.load(Ordering::Relaxed),
        }
    }

    #[inline(always)]
    fn new_line(&self) -> Line {
        Line {
            mult: self.new_mult.load(Ordering::Relaxed),
            intercept_ns: self.new_intercept_ns.load(Ordering::Relaxed),
        }
    }

    #[inline(always)]
    fn load(&self) -> Params {
        Params {
            mode: self.mode.load(Ordering::Relaxed),
            switch_ticks: self.switch_ticks.load(Ordering::Relaxed),
            old: self.old(),
            new: self.new_line(),
            os_offset_ns: self.os_offset_ns.load(Ordering::Relaxed),
            real_offset_ns: self.real_offset_ns.load(Ordering::Relaxed) as i64,
        }
    }

    fn store(&self, params: &Params) {
        self.mode.store(params.mode, Ordering::Relaxed);
        self.switch_ticks
            .store(params.switch_ticks, Ordering::Relaxed);
        self.old_mult.store(params.old.mult, Ordering::Relaxed);
        self.old_intercept_ns
            .store(params.old.intercept_ns, Ordering::Relaxed);
        self.new_mult.store(params.new.mult, Ordering::Relaxed);
        self.new_intercept_ns
            .store(params.new.intercept_ns, Ordering::Relaxed);
        self.os_offset_ns
            .store(params.os_offset_ns, Ordering::Relaxed);
        self.real_offset_ns
            .store(params.real_offset_ns as u64, Ordering::Relaxed);
    }

    /// Nanoseconds of an ordered TSC reading taken now. The record loads before the read
    /// complete before the TSC is sampled (LFENCE), so the sample is later than the record's
    /// publication.
    #[inline(always)]
    fn tsc_now_ns(&self) -> u64 {
        let switch_ticks = self.switch_ticks.load(Ordering::Relaxed);
        let new = self.new_line();
        let ticks = arch::ticks_ordered();
        if ticks >= switch_ticks {
            new.eval(ticks)
        } else {
            self.before_switch_ns(ticks)
        }
    }

    /// Ordered nanoseconds by this record; `None` if it is not a record yet.
    #[inline(always)]
    fn now_ns(&self) -> Option<u64> {
        match self.mode.load(Ordering::Relaxed) {
            MODE_TSC => Some(self.tsc_now_ns()),
            MODE_OS => {
                let offset_ns = self.os_offset_ns.load(Ordering::Relaxed);
                Some(os::monotonic_ns().saturating_add(offset_ns))
            }
            _ => None,
        }
    }

    /// Wall-clock nanoseconds by this record; `None` if it is not a record yet.
    #[inline(always)]
    fn wall_ns(&self) -> Option<u64> {
        match self.mode.load(Ordering::Relaxed) {
            MODE_TSC => {
                let real_offset_ns = self.real_offset_ns.load(Ordering::Relaxed) as i64;
                Some(self.tsc_now_ns().wrapping_add_signed(real_offset_ns))
            }
            MODE_OS => Some(os::realtime_ns()),
            _ => None,
        }
    }

    /// Readings between a publication and its switch point (a short window each interval):
    /// kept out of line so the common path stays a predicted branch rather than a select on
    /// the TSC value.
    #[cold]
    #[inline(never)]
    fn before_switch_ns(&self, ticks: u64) -> u64 {
        self.old().eval(ticks)
    }
}

/// The published parameters of one clock.
pub(crate) struct Published {
    generation: AtomicU64,
    slots: [Slot; 2],
}

#[inline(always)]
fn slot_index(generation: u64) -> usize {
    ((generation >> 1) & 1) as usize
}

impl Published {
    pub(crate) const fn new() -> Published {
        Published {
            generation: AtomicU64::new(0),
            slots: [Slot::new(), Slot::new()],
        }
    }

    /// Runs `read` against the current record and returns its result, retrying if a newer
    /// record was published before `read` finished. `None` if `read` returned `None` (no record
    /// yet) or every attempt overlapped a publication. `read` must only load from the record and
    /// read clocks: it may run more than once.
    #[inline(always)]
    fn consistent<R>(&self, read: impl Fn(&Slot) -> Option<R>) -> Option<R> {
        for _ in 0..READ_ATTEMPTS_MAX {
            let generation = self.generation.load(Ordering::Acquire);
            let result = read(&self.slots[slot_index(generation)])?;
            // Orders the record loads in `read` before the check: if any of them saw a store of
            // a later write, this fence synchronises with the writer's release fence and the
            // load below sees at least that write's odd generation.
            fence(Ordering::Acquire);
            let generation_after = self.generation.load(Ordering::Relaxed);
            if generation_after >> 1 == generation >> 1 {
                return Some(result);
            }
        }
        None
    }

    /// Runs `read` once against the current record. Consistent only while the caller holds the
    /// lock that serialises publications, so that no publication can overlap it.
    fn exclusive<R>(&self, read: impl Fn(&Slot) -> Option<R>) -> Option<R> {
        let generation = self.generation.load(Ordering::Acquire);
        read(&self.slots[slot_index(generation)])
    }

    /// Ordered nanoseconds; `None` before the first record or if every attempt overlapped a
    /// publication (then read under the publication lock with `now_exclusive`).
    #[inline(always)]
    pub(crate) fn now(&self) -> Option<u64> {
        self.consistent(Slot::now_ns)
    }

    pub(crate) fn now_exclusive(&self) -> Option<u64> {
        self.exclusive(Slot::now_ns)
    }

    /// Wall-clock nanoseconds since the epoch; `None` as for `now`.
    #[inline(always)]
    pub(crate) fn wall(&self) -> Option<u64> {
        self.consistent(Slot::wall_ns)
    }

    pub(crate) fn wall_exclusive(&self) -> Option<u64> {
        self.exclusive(Slot::wall_ns)
    }

    /// A consistent copy of the current record; `None` as for `now`.
    #[cfg(test)]
    pub(crate) fn params(&self) -> Option<Params> {
        self.consistent(|slot| Some(slot.load()))
    }

    /// A copy of the current record; see `exclusive`.
    pub(crate) fn params_exclusive(&self) -> Params {
        self.exclusive(|slot| Some(slot.load())).unwrap_or_default()
    }

    /// The cheapest reading: TSC ticks, or OS nanoseconds tagged with `RAW_OS_TAG`.
    #[inline(always)]
    pub(crate) fn raw(&self) -> Option<u64> {
        // Only the mode is needed, and a mode from a record being replaced is still a valid
        // mode: no consistency check.
        let generation = self.generation.load(Ordering::Acquire);
        match self.slots[slot_index(generation)]
            .mode
            .load(Ordering::Relaxed)
        {
            MODE_TSC => Some(arch::ticks() & !RAW_OS_TAG),
            MODE_OS => Some(os::monotonic_ns() | RAW_OS_TAG),
            _ => None,
        }
    }

    /// Nanoseconds between two `raw()` readings; 0 if `end` is before `start` or the two come
    /// from different sources.
    #[inline(always)]
    pub(crate) fn delta_ns(&self, start: u64, end: u64) -> u64 {
        if (start ^ end) & RAW_OS_TAG != 0 || end <= start {
            return 0;
        }
        if start & RAW_OS_TAG != 0 {
            return end - start;
        }
        // One load of one word is never torn, and every record's slope is a valid slope.
        let generation = self.generation.load(Ordering::Acquire);
        let mult = self.slots[slot_index(generation)]
            .new_mult
            .load(Ordering::Relaxed);
        Line {
            mult,
            intercept_ns: 0,
        }
        .interval_ns(end - start)
    }

    /// Publishes `params` as the next record. Callers must serialise publications (the clock
    /// does so with a mutex that readers never touch).
    pub(crate) fn publish(&self, params: &Params) {
        assert!(params.mode == MODE_OS || params.mode == MODE_TSC);
        if params.mode == MODE_TSC {
            // Both pieces must be increasing and meet at the switch point.
            assert!(params.old.mult >= MULT_MIN && params.new.mult >= MULT_MIN);
            assert_eq!(
                params.old.eval(params.switch_ticks),
                params.new.eval(params.switch_ticks)
            );
        }
        let generation = self.generation.load(Ordering::Relaxed);
        assert!(generation & 1 == 0, "concurrent publication");
        let generation_next = generation + 2;
        self.generation.store(generation + 1, Ordering::Relaxed);
        // Pairs with the readers' acquire fence: a reader that sees any store below also sees
        // the odd generation above, and retries.
        fence(Ordering::Release);
        self.slots[slot_index(generation_next)].store(params);
        self.generation.store(generation_next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Half a nanosecond per tick.
    const MULT_HALF: u64 = 1 << 63;

    fn tsc_params(base_ns: u64) -> Params {
        let line = Line::through(100, base_ns, MULT_HALF);
        let old = line;
        Params {
            mode: MODE_TSC,
            switch_ticks: 100,
            old,
            new: line,
            os_offset_ns: 0,
            real_offset_ns: 7,
        }
    }

    #[test]
    fn nothing_is_read_before_the_first_record() {
        let published = Published::new();
        assert_eq!(published.now(), None);
        assert_eq!(published.wall(), None);
        assert_eq!(published.raw(), None);
    }

    #[test]
    fn publish_then_read_round_trips_through_both_slots() {
        let published = Published::new();
        for round in 0..5u64 {
            let params = tsc_params(round * 1_000);
            published.publish(&params);
            assert_eq!(published.params(), Some(params));
            assert_eq!(published.params_exclusive(), params);
        }
    }

    #[test]
    fn readers_never_see_a_torn_record_while_the_writer_publishes() {
        let published = Published::new();
        // Every field of record k is derived from k, so a mix of two records is visible.
        let record = |k: u64| Params {
            mode: MODE_OS,
            switch_ticks: k,
            old: Line {
                mult: k.wrapping_mul(3),
                intercept_ns: k.wrapping_mul(5),
            },
            new: Line {
                mult: k.wrapping_mul(7),
                intercept_ns: k.wrapping_mul(11),
            },
            os_offset_ns: k.wrapping_mul(13),
            real_offset_ns: k as i64,
        };
        published.publish(&record(0));
        let records_total = 200_000u64;
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut k_last = 0;
                        loop {
                            // Under this much contention some reads give up (`None`): the clock
                            // then reads under the publication lock.
                            let Some(params) = published.params() else {
                                continue;
                            };
                            let k = params.switch_ticks;
                            assert_eq!(params, record(k), "torn record");
                            assert!(k >= k_last, "records went back from {k_last} to {k}");
                            k_last = k;
                            if k == records_total {
                                return;
                            }
                        }
                    })
                })
                .collect();
            for k in 1..=records_total {
                published.publish(&record(k));
            }
            for reader in readers {
                assert!(reader.join().is_ok());
            }
        });
    }

    #[test]
    fn os_mode_adds_the_offset_and_tags_raw_readings() {
        let published = Published::new();
        let offset_ns = 1_000_000_000_000;
        let params = Params {
            mode: MODE_OS,
            os_offset_ns: offset_ns,
            ..Params::default()
        };
        published.publish(&params);
        let before = os::monotonic_ns();
        let now = published.now().unwrap_or(0);
        assert!(now >= before + offset_ns);
        let start = published.raw().unwrap_or(0);
        let end = published.raw().unwrap_or(0);
        assert_ne!(start & RAW_OS_TAG, 0);
        assert_eq!(published.delta_ns(start, end), end - start);
    }

    #[test]
    fn delta_of_mixed_or_reversed_readings_is_zero() {
        let published = Published::new();
        published.publish(&tsc_params(0));
        assert_eq!(published.delta_ns(10, 5), 0);
        assert_eq!(published.delta_ns(10 | RAW_OS_TAG, 20), 0);
        assert_eq!(published.delta_ns(10, 20 | RAW_OS_TAG), 0);
        assert_eq!(published.delta_ns(10, 30), 10);
    }

    #[test]
    fn tsc_ns_uses_the_old_line_before_the_switch() {
        let old = Line::through(0, 0, u64::MAX);
        let new = Line::through(1_000, old.eval(1_000), MULT_HALF);
        let params = Params {
            mode: MODE_TSC,
            switch_ticks: 1_000,
            old,
            new,
            ..Params::default()
        };
        assert_eq!(params.tsc_ns(999), 998);
        assert_eq!(params.tsc_ns(1_000), 999);
        assert_eq!(params.tsc_ns(1_002), 1_000);
    }
}
