//! The clock's parameters, published by one writer and read by every thread without any write.
//!
//! Two slots and a generation counter form a double-buffered seqlock. Generation `2k` means
//! record `k` is complete in slot `k % 2`; `2k + 1` means record `k + 1` is being written into
//! the other slot. A reader loads the generation, the record, and the generation again, and
//! uses the record only if the generation still names it. So a reader never waits for the
//! writer (the slot it reads is never the one being written), never writes shared memory, and
//! never uses a mix of two records.
//!
//! An ordered TSC reading (`now`, `wall`) samples the TSC first and loads the record after it,
//! so that the fence before the sample waits for nothing but the caller's own work; see
//! `Published::tsc_read` for why that is still exact.

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

/// A reader retries when a record was published during its loads (at most once per
/// recalibration interval, 5 s), or when its TSC sample predates the record it loaded (it was
/// descheduled between the two for about an interval). A second retry in a row needs another
/// such delay. The bound keeps the loop finite in any case: after it, the caller reads under the
/// lock that serialises publications (see `Published::exclusive`).
const READ_ATTEMPTS_MAX: u32 = 8;

/// One record: how to turn a reading into nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Params {
    pub mode: u64,
    /// TSC readings from here on use `new`, earlier ones `old`; the two agree exactly here.
    pub switch_ticks: u64,
    pub old: Line,
    pub new: Line,
    /// Where `old` took over (the previous record's switch point; 0 for the first record): the
    /// record describes the clock only for TSC readings from here on.
    pub old_from_ticks: u64,
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

/// One record. The first cache line holds everything the common readings load; the second,
/// only what readings between a publication and its switch point need.
#[derive(Default)]
#[repr(C, align(64))]
struct Slot {
    mode: AtomicU64,
    switch_ticks: AtomicU64,
    new_mult: AtomicU64,
    new_intercept_ns: AtomicU64,
    real_offset_ns: AtomicU64,
    os_offset_ns: AtomicU64,
    old_mult: AtomicU64,
    old_intercept_ns: AtomicU64,
    old_from_ticks: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            mode: AtomicU64::new(MODE_UNINIT),
            switch_ticks: AtomicU64::new(0),
            new_mult: AtomicU64::new(0),
            new_intercept_ns: AtomicU64::new(0),
            real_offset_ns: AtomicU64::new(0),
            os_offset_ns: AtomicU64::new(0),
            old_mult: AtomicU64::new(0),
            old_intercept_ns: AtomicU64::new(0),
            old_from_ticks: AtomicU64::new(0),
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
    fn real_offset_ns(&self) -> i64 {
        self.real_offset_ns.load(Ordering::Relaxed) as i64
    }

    #[inline(always)]
    fn load(&self) -> Params {
        Params {
            mode: self.mode.load(Ordering::Relaxed),
            switch_ticks: self.switch_ticks.load(Ordering::Relaxed),
            old: self.old(),
            new: self.new_line(),
            old_from_ticks: self.old_from_ticks.load(Ordering::Relaxed),
            os_offset_ns: self.os_offset_ns.load(Ordering::Relaxed),
            real_offset_ns: self.real_offset_ns(),
        }
    }

    fn store(&self, params: &Params) {
        self.mode.store(params.mode, Ordering::Relaxed);
        self.switch_ticks
            .store(params.switch_ticks, Ordering::Relaxed);
        self.new_mult.store(params.new.mult, Ordering::Relaxed);
        self.new_intercept_ns
            .store(params.new.intercept_ns, Ordering::Relaxed);
        self.real_offset_ns
            .store(params.real_offset_ns as u64, Ordering::Relaxed);
        self.os_offset_ns
            .store(params.os_offset_ns, Ordering::Relaxed);
        self.old_mult.store(params.old.mult, Ordering::Relaxed);
        self.old_intercept_ns
            .store(params.old.intercept_ns, Ordering::Relaxed);
        self.old_from_ticks
            .store(params.old_from_ticks, Ordering::Relaxed);
    }

    /// Nanoseconds of an ordered TSC reading by this record, loaded before the sample: for
    /// readers that hold the publication lock (so this record is current throughout) or whose
    /// record was validated after the sample (the OS-mode path, in case it meets an older
    /// record). The record's loads complete before the TSC is sampled (LFENCE), so the sample
    /// is later than the record's publication and before the next record's switch point.
    #[inline(always)]
    fn tsc_now_ns(&self) -> u64 {
        let params = self.load();
        params.tsc_ns(arch::ticks_ordered())
    }

    /// Ordered nanoseconds by this record (see `tsc_now_ns`); `None` if it is not a record yet.
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

    /// Wall-clock nanoseconds by this record (see `tsc_now_ns`); `None` if it is not a record
    /// yet.
    #[inline(always)]
    fn wall_ns(&self) -> Option<u64> {
        match self.mode.load(Ordering::Relaxed) {
            MODE_TSC => Some(self.tsc_now_ns().wrapping_add_signed(self.real_offset_ns())),
            MODE_OS => Some(os::realtime_ns()),
            _ => None,
        }
    }
}

/// The published parameters of one clock.
pub(crate) struct Published {
    generation: AtomicU64,
    /// The latest record's mode, stored once that record is complete. It only ever goes from
    /// uninitialised to TSC or OS, and from TSC to OS: one load picks a reading's path before
    /// the TSC is sampled (the record itself decides, loaded after).
    mode: AtomicU64,
    /// The latest TSC record's slope, for `delta_ns`: one word, never torn, and any record's
    /// slope is a valid slope.
    interval_mult: AtomicU64,
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
            mode: AtomicU64::new(MODE_UNINIT),
            interval_mult: AtomicU64::new(0),
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
            if self.generation.load(Ordering::Relaxed) >> 1 == generation >> 1 {
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

    /// An ordered TSC reading in nanoseconds, with `extra` loaded from the same record; `None`
    /// if the record is not a TSC record (any more) or every attempt failed (then the caller
    /// reads under the publication lock).
    ///
    /// The TSC is sampled first (`LFENCE; RDTSC`: after every earlier load completed, so after
    /// anything that happened-before this call) and the record is loaded after. Why the result
    /// is exact anyway: the writer (calibrate.rs) keeps three rules. Record `r + 1`'s old line
    /// is record `r`'s new line, from record `r`'s switch point on (`old_from_ticks`); record
    /// `r + 1` is computed from a sample taken at or after that point; and it is published at
    /// least `READER_SLACK_NS` before its own switch point (else the clock falls back to the
    /// OS). So all records together describe one continuous non-decreasing function G of the
    /// TSC (line `k` from switch point `k` to switch point `k + 1`), and record `r` agrees with
    /// G from its `old_from_ticks` to the switch point of record `r + 1`. A sample T evaluated
    /// with record `r`:
    /// - is below record `r + 1`'s switch point: the record's loads execute after the LFENCE
    ///   and at most the core's reorder window before T is taken (an interrupt squashes loads
    ///   in flight; a load whose line changes before it retires is replayed), so record `r` was
    ///   still current then, and record `r + 1` appears at least `READER_SLACK_NS` — far more
    ///   than any reorder window — before its switch point;
    /// - is checked against `old_from_ticks` (only below the switch point, off the common path):
    ///   a reader descheduled for about a recalibration interval between its sample and its
    ///   loads may find a record computed after its sample; it samples again.
    ///
    /// So every ordered reading is G(T) of its own sample T, G never decreases, and a reading
    /// that happened-after another has the later sample: `now()` never steps back.
    #[inline(always)]
    fn tsc_read<X>(&self, extra: impl Fn(&Slot) -> X) -> Option<(u64, X)> {
        let ticks = arch::ticks_ordered();
        // The common case straight-line: no publication overlapped, the sample is past the
        // switch point. Everything else (retries included) is out of line.
        let generation = self.generation.load(Ordering::Acquire);
        let slot = &self.slots[slot_index(generation)];
        let mode = slot.mode.load(Ordering::Relaxed);
        let switch_ticks = slot.switch_ticks.load(Ordering::Relaxed);
        let new = slot.new_line();
        let extra_value = extra(slot);
        // As in `consistent`.
        fence(Ordering::Acquire);
        let unchanged = self.generation.load(Ordering::Relaxed) == generation;
        if unchanged && mode == MODE_TSC && ticks >= switch_ticks {
            return Some((new.eval(ticks), extra_value));
        }
        self.tsc_read_slow(ticks, extra)
    }

    /// `tsc_read` when the first attempt did not settle it: a publication overlapped, the record
    /// is not a TSC record, or the sample is before the record's switch point.
    #[cold]
    #[inline(never)]
    fn tsc_read_slow<X>(&self, mut ticks: u64, extra: impl Fn(&Slot) -> X) -> Option<(u64, X)> {
        for _ in 0..READ_ATTEMPTS_MAX {
            let generation = self.generation.load(Ordering::Acquire);
            let slot = &self.slots[slot_index(generation)];
            let mode = slot.mode.load(Ordering::Relaxed);
            let switch_ticks = slot.switch_ticks.load(Ordering::Relaxed);
            let new = slot.new_line();
            let old = slot.old();
            let old_from_ticks = slot.old_from_ticks.load(Ordering::Relaxed);
            let extra = extra(slot);
            // As in `consistent`. A newer record found on the retry is still good for this
            // sample: the argument above holds for any record loaded after it.
            fence(Ordering::Acquire);
            if self.generation.load(Ordering::Relaxed) >> 1 != generation >> 1 {
                continue;
            }
            if mode != MODE_TSC {
                return None;
            }
            if ticks >= switch_ticks {
                return Some((new.eval(ticks), extra));
            }
            if ticks >= old_from_ticks {
                return Some((old.eval(ticks), extra));
            }
            // The sample predates the record: sample again.
            ticks = arch::ticks_ordered();
        }
        None
    }

    /// Ordered nanoseconds; `None` before the first record or if every attempt failed (then read
    /// under the publication lock with `now_exclusive`).
    #[inline(always)]
    pub(crate) fn now(&self) -> Option<u64> {
        match self.mode.load(Ordering::Acquire) {
            MODE_TSC => self.tsc_read(|_| ()).map(|(ns, ())| ns),
            MODE_OS => self.consistent(Slot::now_ns),
            _ => None,
        }
    }

    pub(crate) fn now_exclusive(&self) -> Option<u64> {
        self.exclusive(Slot::now_ns)
    }

    /// Wall-clock nanoseconds since the epoch; `None` as for `now`.
    #[inline(always)]
    pub(crate) fn wall(&self) -> Option<u64> {
        match self.mode.load(Ordering::Acquire) {
            MODE_TSC => self
                .tsc_read(Slot::real_offset_ns)
                .map(|(ns, real_offset_ns)| ns.wrapping_add_signed(real_offset_ns)),
            MODE_OS => self.consistent(Slot::wall_ns),
            _ => None,
        }
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

    /// The cheapest reading: TSC ticks, or OS nanoseconds tagged with `RAW_OS_TAG`. One load of
    /// the mode word (a predicted branch; the TSC read does not wait for it), `RDTSC`, and the
    /// mask that keeps the tag bit clear.
    #[inline(always)]
    pub(crate) fn raw(&self) -> Option<u64> {
        let mode = self.mode.load(Ordering::Acquire);
        // One compare and a fall-through into `RDTSC`; the OS clock is a call anyway.
        if mode == MODE_TSC {
            return Some(arch::ticks() & !RAW_OS_TAG);
        }
        Self::raw_not_tsc(mode)
    }

    #[cold]
    #[inline(never)]
    fn raw_not_tsc(mode: u64) -> Option<u64> {
        (mode == MODE_OS).then(|| os::monotonic_ns() | RAW_OS_TAG)
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
        // Two TSC readings: `raw()` saw the TSC mode, stored after `interval_mult`.
        Line {
            mult: self.interval_mult.load(Ordering::Relaxed),
            intercept_ns: 0,
        }
        .interval_ns(end - start)
    }

    /// Publishes `params` as the next record. Callers must serialise publications (the clock
    /// does so with a mutex that readers never touch).
    pub(crate) fn publish(&self, params: &Params) {
        assert!(params.mode == MODE_OS || params.mode == MODE_TSC);
        let mode_before = self.mode.load(Ordering::Relaxed);
        assert!(
            mode_before != MODE_OS || params.mode == MODE_OS,
            "the OS clock is for good"
        );
        if params.mode == MODE_TSC {
            // Both pieces must be increasing and meet at the switch point, and the old one must
            // start before it.
            assert!(params.old.mult >= MULT_MIN && params.new.mult >= MULT_MIN);
            assert_eq!(
                params.old.eval(params.switch_ticks),
                params.new.eval(params.switch_ticks)
            );
            assert!(params.old_from_ticks <= params.switch_ticks);
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
        if params.mode == MODE_TSC {
            self.interval_mult.store(params.new.mult, Ordering::Relaxed);
        }
        // After the record and the slope: a reader that sees this mode sees both.
        self.mode.store(params.mode, Ordering::Release);
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
            old_from_ticks: 0,
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
            old_from_ticks: k.wrapping_mul(17),
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

    /// A TSC record on the real TSC: `old` anchored at (0, 0) with slope 1/2 ns per tick, and
    /// `new` continuing it from `switch_ticks` with slope 1/4, so the two differ everywhere
    /// but the switch point.
    fn record_around(switch_ticks: u64, old_from_ticks: u64) -> Params {
        let old = Line::through(0, 0, MULT_HALF);
        let new = Line::through(switch_ticks, old.eval(switch_ticks), MULT_HALF / 2);
        Params {
            mode: MODE_TSC,
            switch_ticks,
            old,
            new,
            old_from_ticks,
            ..Params::default()
        }
    }

    #[test]
    fn ordered_reads_use_the_line_their_sample_falls_on() {
        if !arch::TSC_ARCH {
            return;
        }
        let published = Published::new();
        let far_ticks = 1 << 60;
        // The switch point far ahead: every sample is on the old line.
        let params = record_around(far_ticks, 0);
        published.publish(&params);
        let before = arch::ticks_ordered();
        let ns = published.now().unwrap_or(0);
        let after = arch::ticks_ordered();
        assert!((params.old.eval(before)..=params.old.eval(after)).contains(&ns));
        // The switch point passed: the new line.
        let params = record_around(arch::ticks_ordered(), 0);
        published.publish(&params);
        let before = arch::ticks_ordered();
        let ns = published.now().unwrap_or(0);
        let after = arch::ticks_ordered();
        assert!((params.new.eval(before)..=params.new.eval(after)).contains(&ns));
        assert!(params.old.eval(before) > params.new.eval(before));
    }

    #[test]
    fn a_sample_older_than_the_record_is_never_evaluated_with_it() {
        if !arch::TSC_ARCH {
            return;
        }
        let published = Published::new();
        // A record whose old line takes over only in the far future: as if this reader had
        // been descheduled between its sample and its loads while the writer published. Every
        // attempt samples again and finds the same; the caller then reads under the lock.
        let far_ticks = 1 << 60;
        published.publish(&record_around(far_ticks + 1, far_ticks));
        assert_eq!(published.now(), None);
        assert_eq!(published.wall(), None);
        // The same record read by a holder of the publication lock is evaluated as is.
        assert!(published.now_exclusive().is_some());
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
