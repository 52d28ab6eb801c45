//! Which part of the past may read differently than it did: what lets a reader keep answers
//! about the past (a query's result cache) and still never serve one that a write changed.
//!
//! Almost every write carries samples near the wall clock. A write that reaches further back
//! than [`PAST_MS`], and every deletion or retention drop, is a *change of the past*: it is
//! noted here with a generation number after it became visible to reads. A reader takes a
//! [`Mark`] before it reads (generation and the time before which nothing unnoted can land),
//! keeps answers only for times before `mark.settled_before_ms`, and later asks
//! [`PastChanges::earliest_since`] for the earliest time any change since its mark touched.
//!
//! Why that is exact: a write the reader did not see became visible after the reader's view was
//! taken, so it was noted (if it reached back) after the mark was taken, with a larger
//! generation. One that was not noted holds samples at or after `clock − PAST_MS`, where the
//! clock (never going back, see `now_ms`) was at least the mark's: at or after
//! `settled_before_ms`, outside anything kept.

use std::collections::VecDeque;
use std::sync::Mutex;

/// How far behind the clock a write must reach to be a change of the past.
pub const PAST_MS: i64 = 5 * 60 * 1000;
/// Changes kept; past it the two oldest are merged (their earliest time, the newer generation:
/// a reader marked between them sees the merged change too, so nothing is missed).
pub const CHANGES_MAX: usize = 256;

/// A reader's point of reference, taken before it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub generation: u64,
    /// Answers for times before this may be kept.
    pub settled_before_ms: i64,
}

#[derive(Default)]
struct Changes {
    generation: u64,
    /// The wall clock as last seen, never going back.
    clock_ms: i64,
    /// (generation, earliest sample time touched), generations ascending.
    changes: VecDeque<(u64, i64)>,
}

/// The store's record of changes to the past.
pub struct PastChanges {
    clock: fn() -> i64,
    state: Mutex<Changes>,
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Default for PastChanges {
    fn default() -> PastChanges {
        PastChanges::with_clock(wall_ms)
    }
}

impl PastChanges {
    pub(crate) fn with_clock(clock: fn() -> i64) -> PastChanges {
        PastChanges {
            clock,
            state: Mutex::new(Changes::default()),
        }
    }

    fn now_ms(state: &mut Changes, clock: fn() -> i64) -> i64 {
        state.clock_ms = state.clock_ms.max(clock());
        state.clock_ms
    }

    /// A write whose earliest sample is at `earliest_ms` became visible to reads.
    pub(crate) fn wrote(&self, earliest_ms: i64) {
        let Ok(mut s) = self.state.lock() else { return };
        let now = Self::now_ms(&mut s, self.clock);
        if earliest_ms < now.saturating_sub(PAST_MS) {
            Self::push(&mut s, earliest_ms);
        }
    }

    /// Data anywhere may read differently (a deletion, a retention drop).
    pub(crate) fn changed_everywhere(&self) {
        if let Ok(mut s) = self.state.lock() {
            Self::push(&mut s, i64::MIN);
        }
    }

    fn push(s: &mut Changes, earliest_ms: i64) {
        s.generation += 1;
        let generation = s.generation;
        s.changes.push_back((generation, earliest_ms));
        if s.changes.len() > CHANGES_MAX {
            let (_, a) = s.changes.pop_front().unwrap_or((0, i64::MIN));
            if let Some(b) = s.changes.front_mut() {
                b.1 = b.1.min(a);
            }
        }
        assert!(s.changes.len() <= CHANGES_MAX);
    }

    /// Taken before reading: what the reader may keep, and from when to ask about changes.
    pub fn mark(&self) -> Mark {
        match self.state.lock() {
            Ok(mut s) => Mark {
                generation: s.generation,
                settled_before_ms: Self::now_ms(&mut s, self.clock).saturating_sub(PAST_MS),
            },
            // Poisoned (a panic elsewhere): keep nothing.
            Err(_) => Mark {
                generation: u64::MAX,
                settled_before_ms: i64::MIN,
            },
        }
    }

    /// The earliest sample time any change after `mark` touched (`i64::MIN`: anywhere), none
    /// when nothing in the past changed since.
    pub fn earliest_since(&self, mark: &Mark) -> Option<i64> {
        let Ok(s) = self.state.lock() else {
            return Some(i64::MIN);
        };
        s.changes
            .iter()
            .filter(|(g, _)| *g > mark.generation)
            .map(|(_, t)| *t)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    static CLOCK_MS: AtomicI64 = AtomicI64::new(0);
    fn clock() -> i64 {
        CLOCK_MS.load(Ordering::SeqCst)
    }

    #[test]
    fn only_writes_reaching_back_are_changes_and_merging_misses_none() {
        CLOCK_MS.store(10 * PAST_MS, Ordering::SeqCst);
        let p = PastChanges::with_clock(clock);
        let m0 = p.mark();
        assert_eq!(m0.settled_before_ms, 9 * PAST_MS);
        p.wrote(9 * PAST_MS); // at the edge: not a change, and not before what m0 keeps
        assert_eq!(p.earliest_since(&m0), None);
        p.wrote(3 * PAST_MS);
        assert_eq!(p.earliest_since(&m0), Some(3 * PAST_MS));
        let m1 = p.mark();
        assert_eq!(p.earliest_since(&m1), None);
        // The clock going back does not move what a mark keeps back.
        CLOCK_MS.store(0, Ordering::SeqCst);
        assert_eq!(p.mark().settled_before_ms, 9 * PAST_MS);
        // Many changes: the oldest merge, and every mark still sees each change after it.
        let marks: Vec<(Mark, i64)> = (0..3 * CHANGES_MAX as i64)
            .map(|i| {
                let m = p.mark();
                p.wrote(1_000 * i);
                (m, 1_000 * i)
            })
            .collect();
        for (m, t) in &marks {
            let seen = p.earliest_since(m).unwrap();
            assert!(seen <= *t, "a change after the mark was missed");
        }
        p.changed_everywhere();
        assert_eq!(p.earliest_since(&m1), Some(i64::MIN));
    }
}
