//! Cardinality limits: how many series may be created per minute and how many may be active,
//! each for all writers together and for one source (the sender a write names). The index asks
//! the [`Limiter`] only when a write has a series to create: under its read lock whether the
//! source is refused any new series now (then the write's new keys are refused without the
//! write lock, one hash lookup each), else under its write lock as it creates each one. A write
//! whose series all exist never reaches it, so the hot path costs nothing.
//!
//! "Now" is the caller's: the wall clock on a single node, the record's receipt time on a store
//! applying an external log, so that two stores applying the same log decide the same.
//!
//! "Active" means a sample timestamped within `active_window_ms` of now, or created since the
//! last count. Counting scans the index's activity ranges; it runs at most once a minute, when
//! a new series is asked for, so between counts the active figures only grow (each creation adds
//! one). A series counts against the source that created it for as long as it is active.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The limits, each `u64::MAX` for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardinalityOptions {
    /// New series per minute, all sources together.
    pub series_new_per_minute_max: u64,
    /// Active series, all sources together.
    pub series_active_max: u64,
    /// New series per minute created by one source.
    pub source_series_new_per_minute_max: u64,
    /// Active series one source created.
    pub source_series_active_max: u64,
    /// A series with a sample timestamped this recently is active.
    pub active_window_ms: i64,
}

impl CardinalityOptions {
    /// No limits (tools, tests, the store's own default).
    pub const UNLIMITED: CardinalityOptions = CardinalityOptions {
        series_new_per_minute_max: u64::MAX,
        series_active_max: u64::MAX,
        source_series_new_per_minute_max: u64::MAX,
        source_series_active_max: u64::MAX,
        active_window_ms: 3_600_000,
    };
}

impl Default for CardinalityOptions {
    fn default() -> CardinalityOptions {
        CardinalityOptions::UNLIMITED
    }
}

/// Which limit refused a new series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CardinalityLimit {
    NewPerMinute,
    Active,
    SourceNewPerMinute,
    SourceActive,
}

impl CardinalityLimit {
    pub const ALL: [CardinalityLimit; 4] = [
        CardinalityLimit::NewPerMinute,
        CardinalityLimit::Active,
        CardinalityLimit::SourceNewPerMinute,
        CardinalityLimit::SourceActive,
    ];

    /// The option's name, as configuration files and error messages spell it.
    pub fn name(self) -> &'static str {
        match self {
            CardinalityLimit::NewPerMinute => "series_new_per_minute_max",
            CardinalityLimit::Active => "series_active_max",
            CardinalityLimit::SourceNewPerMinute => "source_series_new_per_minute_max",
            CardinalityLimit::SourceActive => "source_series_active_max",
        }
    }

    /// The bound it holds to in `opts`.
    pub fn max(self, opts: &CardinalityOptions) -> u64 {
        match self {
            CardinalityLimit::NewPerMinute => opts.series_new_per_minute_max,
            CardinalityLimit::Active => opts.series_active_max,
            CardinalityLimit::SourceNewPerMinute => opts.source_series_new_per_minute_max,
            CardinalityLimit::SourceActive => opts.source_series_active_max,
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// The counts `/metrics` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CardinalityStats {
    /// Active series as of the last count, plus those created since.
    pub active: u64,
    /// Series created in the current minute.
    pub new_this_minute: u64,
    /// Sources tracked.
    pub sources: u64,
    /// New series refused, by limit (`CardinalityLimit::ALL` order).
    pub refused_total: [u64; 4],
}

/// Sources tracked at once; past it a new source is held to the global limits only, until a
/// count frees the slot of a source with nothing active.
pub const SOURCES_TRACKED_MAX: usize = 4096;
/// Longest source name kept (longer ones are cut: they are only told apart by their start).
const SOURCE_BYTES_MAX: usize = 256;
/// How often the active series are counted again (at most; only when a series is asked for).
const COUNT_INTERVAL_MS: i64 = 60_000;
/// The minute window new series are counted in.
const MINUTE_MS: i64 = 60_000;
/// The creator slot of a series no tracked source created (created before the store opened, or
/// by a write that named no source, or with the table full).
const NO_SOURCE: u32 = u32::MAX;

#[derive(Clone, Copy, Default)]
struct SourceCounts {
    new_this_minute: u64,
    active: u64,
    in_use: bool,
}

/// The limiter's state, kept inside the index's lock.
pub(crate) struct Limiter {
    opts: CardinalityOptions,
    /// Where the current minute window began, in the caller's clock (ms).
    minute_start_ms: i64,
    new_this_minute: u64,
    active: u64,
    counted_at_ms: Option<i64>,
    slots_by_source: HashMap<Box<str>, u32, foldhash::quality::RandomState>,
    slots: Vec<SourceCounts>,
    free_slots: Vec<u32>,
    /// Series id → slot of the source that created it (`NO_SOURCE` for none).
    creator: Vec<u32>,
    /// Atomic: refusals are counted under the index's read lock too (`refuses_now`).
    refused_total: [AtomicU64; 4],
}

/// What the index tells the limiter about its series when they are counted.
pub(crate) trait Activity {
    fn series_count(&self) -> usize;
    /// The newest sample time of series `id`, if it has any.
    fn last_ts_ms(&self, id: usize) -> Option<i64>;
}

impl Limiter {
    pub(crate) fn new(opts: CardinalityOptions) -> Limiter {
        Limiter {
            opts,
            minute_start_ms: i64::MIN,
            new_this_minute: 0,
            active: 0,
            counted_at_ms: None,
            slots_by_source: HashMap::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            creator: Vec::new(),
            refused_total: Default::default(),
        }
    }

    pub(crate) fn options(&self) -> &CardinalityOptions {
        &self.opts
    }

    /// Rolls the minute over and recounts active series when due, as of `now_ms`. Call before
    /// `admit`s. A clock that goes back (records of several fronts) only delays the next roll.
    pub(crate) fn prepare(&mut self, activity: &dyn Activity, now_ms: i64) {
        if now_ms.saturating_sub(self.minute_start_ms) >= MINUTE_MS {
            self.minute_start_ms = now_ms;
            self.new_this_minute = 0;
            for s in &mut self.slots {
                s.new_this_minute = 0;
            }
        }
        let due = self
            .counted_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) >= COUNT_INTERVAL_MS);
        if due {
            self.count(activity, now_ms);
            self.counted_at_ms = Some(now_ms);
        }
    }

    /// The slot of `source`, tracked from now on if there is room.
    pub(crate) fn slot_of(&mut self, source: &str) -> u32 {
        let source = cut(source);
        if let Some(&slot) = self.slots_by_source.get(source) {
            return slot;
        }
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None if self.slots.len() < SOURCES_TRACKED_MAX => {
                self.slots.push(SourceCounts::default());
                (self.slots.len() - 1) as u32
            }
            None => return NO_SOURCE,
        };
        self.slots[slot as usize] = SourceCounts {
            in_use: true,
            ..SourceCounts::default()
        };
        self.slots_by_source.insert(source.into(), slot);
        slot
    }

    /// The limit that refuses a new series for the source in `slot`, if any (counted as a
    /// refusal); `None` means [`Limiter::created`] may follow.
    pub(crate) fn refuses(&mut self, slot: u32) -> Option<CardinalityLimit> {
        let limit = self.refusal(slot)?;
        self.count_refused(limit, 1);
        Some(limit)
    }

    /// The limit that refuses any new series of `source` now, decided without changing
    /// anything (the index's read lock is enough): `None` when one may be created, or when
    /// the minute or a count is due (`prepare` runs first, under the write lock), or when the
    /// source is not tracked yet and no global limit refuses.
    pub(crate) fn refuses_now(&self, source: &str, now_ms: i64) -> Option<CardinalityLimit> {
        let counted = self
            .counted_at_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < COUNT_INTERVAL_MS);
        if !counted || now_ms.saturating_sub(self.minute_start_ms) >= MINUTE_MS {
            return None;
        }
        let slot = self
            .slots_by_source
            .get(cut(source))
            .copied()
            .unwrap_or(NO_SOURCE);
        self.refusal(slot)
    }

    /// Counts `n` new series `limit` refused.
    pub(crate) fn count_refused(&self, limit: CardinalityLimit, n: u64) {
        self.refused_total[limit.slot()].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts series `id`, created for the source in `slot`.
    pub(crate) fn created(&mut self, id: u32, slot: u32) {
        self.new_this_minute += 1;
        self.active += 1;
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.new_this_minute += 1;
            s.active += 1;
        }
        let at = id as usize;
        if self.creator.len() <= at {
            self.creator.resize(at + 1, NO_SOURCE);
        }
        self.creator[at] = slot;
    }

    /// Whether series `id` may be created for the source in `slot`; if so it is counted.
    #[cfg(test)]
    fn admit(&mut self, id: u32, slot: u32) -> Result<(), CardinalityLimit> {
        match self.refuses(slot) {
            Some(limit) => Err(limit),
            None => {
                self.created(id, slot);
                Ok(())
            }
        }
    }

    fn refusal(&self, slot: u32) -> Option<CardinalityLimit> {
        let o = &self.opts;
        if self.new_this_minute >= o.series_new_per_minute_max {
            return Some(CardinalityLimit::NewPerMinute);
        }
        if self.active >= o.series_active_max {
            return Some(CardinalityLimit::Active);
        }
        let s = self.slots.get(slot as usize)?;
        if s.new_this_minute >= o.source_series_new_per_minute_max {
            return Some(CardinalityLimit::SourceNewPerMinute);
        }
        if s.active >= o.source_series_active_max {
            return Some(CardinalityLimit::SourceActive);
        }
        None
    }

    /// Counts active series again, globally and per source, and frees the slots of sources
    /// with nothing active and nothing new this minute.
    fn count(&mut self, activity: &dyn Activity, now_ms: i64) {
        let since_ms = now_ms.saturating_sub(self.opts.active_window_ms);
        let series = activity.series_count();
        for s in &mut self.slots {
            s.active = 0;
        }
        let mut active = 0u64;
        for id in 0..series {
            let creator = self.creator.get(id).copied().unwrap_or(NO_SOURCE);
            let is_active = match activity.last_ts_ms(id) {
                Some(last) => last >= since_ms,
                // Created and not yet written (its batch is on its way).
                None => creator != NO_SOURCE,
            };
            if !is_active {
                continue;
            }
            active += 1;
            if let Some(s) = self.slots.get_mut(creator as usize) {
                s.active += 1;
            }
        }
        self.active = active;
        self.free_idle_slots();
    }

    fn free_idle_slots(&mut self) {
        let idle = |s: &SourceCounts| s.in_use && s.active == 0 && s.new_this_minute == 0;
        if !self.slots.iter().any(idle) {
            return;
        }
        let mut freed = vec![false; self.slots.len()];
        for (slot, s) in self.slots.iter_mut().enumerate() {
            if idle(s) {
                s.in_use = false;
                freed[slot] = true;
                self.free_slots.push(slot as u32);
            }
        }
        self.slots_by_source
            .retain(|_, slot| !freed[*slot as usize]);
        // Their series are inactive: whoever writes them again is not charged for them.
        for c in &mut self.creator {
            if *c != NO_SOURCE && freed[*c as usize] {
                *c = NO_SOURCE;
            }
        }
        assert_eq!(
            self.slots_by_source.len() + self.free_slots.len(),
            self.slots.len()
        );
    }

    pub(crate) fn stats(&self) -> CardinalityStats {
        CardinalityStats {
            active: self.active,
            new_this_minute: self.new_this_minute,
            sources: self.slots_by_source.len() as u64,
            refused_total: self
                .refused_total
                .each_ref()
                .map(|n| n.load(Ordering::Relaxed)),
        }
    }
}

/// At most `SOURCE_BYTES_MAX` bytes of `source`, cut at a character boundary.
fn cut(source: &str) -> &str {
    if source.len() <= SOURCE_BYTES_MAX {
        return source;
    }
    let mut end = SOURCE_BYTES_MAX;
    while !source.is_char_boundary(end) {
        end -= 1;
    }
    &source[..end]
}

/// The wall clock in ms since the epoch: "now" for a store on its own journal.
pub(crate) fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    struct Series(Vec<Option<i64>>);

    impl Activity for Series {
        fn series_count(&self) -> usize {
            self.0.len()
        }
        fn last_ts_ms(&self, id: usize) -> Option<i64> {
            self.0[id]
        }
    }

    #[test]
    fn per_source_and_global_limits_refuse_only_new_series() {
        let mut l = Limiter::new(CardinalityOptions {
            series_new_per_minute_max: 5,
            series_active_max: 100,
            source_series_new_per_minute_max: 3,
            source_series_active_max: 100,
            active_window_ms: 3_600_000,
        });
        l.prepare(&Series(vec![]), wall_ms());
        let a = l.slot_of("a");
        let b = l.slot_of("b");
        assert_ne!(a, b);
        for id in 0..3 {
            l.admit(id, a).unwrap();
        }
        assert_eq!(l.admit(3, a), Err(CardinalityLimit::SourceNewPerMinute));
        l.admit(3, b).unwrap();
        l.admit(4, b).unwrap();
        assert_eq!(l.admit(5, b), Err(CardinalityLimit::NewPerMinute));
        let stats = l.stats();
        assert_eq!(stats.new_this_minute, 5);
        assert_eq!(stats.active, 5);
        assert_eq!(stats.refused_total, [1, 0, 1, 0]);
    }

    #[test]
    fn active_series_are_counted_from_activity_and_idle_sources_freed() {
        let now = wall_ms();
        let mut l = Limiter::new(CardinalityOptions {
            source_series_active_max: 2,
            ..CardinalityOptions::UNLIMITED
        });
        l.prepare(&Series(vec![]), now);
        let a = l.slot_of("a");
        l.admit(0, a).unwrap();
        l.admit(1, a).unwrap();
        assert_eq!(l.admit(2, a), Err(CardinalityLimit::SourceActive));
        // One of a's series went quiet two hours ago: a may create one more.
        l.count(&Series(vec![Some(now - 7_200_000), Some(now)]), now);
        assert_eq!(l.stats().active, 1);
        l.admit(2, a).unwrap();
        // Nothing of b's is active: its slot is freed and its series no longer charged.
        let b = l.slot_of("b");
        l.admit(3, b).unwrap();
        l.new_this_minute = 0;
        l.slots[b as usize].new_this_minute = 0;
        l.count(&Series(vec![None, Some(now), Some(now), Some(0)]), now);
        assert_eq!(l.stats().sources, 1);
        assert_eq!(l.creator[3], NO_SOURCE);
    }

    #[test]
    fn a_full_source_table_holds_newcomers_to_the_global_limits() {
        let mut l = Limiter::new(CardinalityOptions::UNLIMITED);
        for i in 0..SOURCES_TRACKED_MAX {
            assert_ne!(l.slot_of(&format!("s{i}")), NO_SOURCE);
        }
        assert_eq!(l.slot_of("late"), NO_SOURCE);
        l.admit(0, NO_SOURCE).unwrap();
        assert_eq!(cut(&"é".repeat(200)).len(), SOURCE_BYTES_MAX);
    }
}
