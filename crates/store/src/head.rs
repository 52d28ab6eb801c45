//! The head: every acknowledged sample not yet in a block, in memory.
//!
//! Inserts are commutative up to the duplicate rule, so samples may arrive in any order (late,
//! out of order, replayed) and the head ends up the same:
//! - numeric and text: one sample per series per millisecond; of two with the same timestamp the
//!   one written later wins, "later" meaning the higher journal offset (the WAL order, which
//!   replay reproduces), and within one batch the one added last;
//! - histograms: merged into the histogram of the base period containing the timestamp
//!   (`period_start = ts − ts mod base_period`, euclidean so negative times work), so duplicates
//!   simply add up.
//!
//! Text is kept per sample here, and "stored on change" is applied when read (and will be when
//! blocks are written): dropping an unchanged value at insert time would depend on arrival order.

use std::collections::HashMap;

use hist::convert::{Cumulative, Increase};
use hist::Histogram;

use crate::batch::Value;
use crate::hist_head::{CarriedWindow, HistSeries, MergeScratch};
use crate::series::SeriesId;

/// A sample with the sequence number (journal offset) that orders duplicates.
#[derive(Clone, Debug)]
pub(crate) struct Point<T> {
    pub ts_ms: i64,
    pub seq: u64,
    pub value: T,
}

/// A series' points, sorted by timestamp and unique, in runs (in-order points start a new run
/// after `RUN_POINTS_MAX`; a run a late point makes longer than twice that is split): one
/// vector for a short series, and a late point costs a move of at most one run's tail, where
/// one vector moved the whole series after it — a broker forwarding an hour it stored during an
/// outage, one point per series per batch, moved each series' newer points once per point (10×
/// the in-order cost). A late point between two runs (what such a backfill is) joins the run
/// before, or starts one.
/// The last timestamp is kept beside the runs: the in-order append checks it in the head's map
/// bucket, which the lookup has just loaded, instead of reading the vector's tail — with
/// thousands of series per batch that read was a cache miss on every sample.
#[derive(Debug)]
pub(crate) struct Points<T> {
    /// The runs before the last, in time order.
    older: Vec<Vec<Point<T>>>,
    /// The last run, where in-order points go; empty only when every run is.
    tail: Vec<Point<T>>,
    /// The last point's `ts_ms`, or `i64::MIN` when empty.
    last_ts_ms: i64,
}

/// Points a run holds before the next in-order point starts a new one (24 bytes each for
/// numeric points: a late point moves at most ≈ 12 KB).
const RUN_POINTS_MAX: usize = 512;

impl<T> Default for Points<T> {
    fn default() -> Points<T> {
        Points {
            older: Vec::new(),
            tail: Vec::new(),
            last_ts_ms: i64::MIN,
        }
    }
}

impl<T> Points<T> {
    /// Inserts keeping the points sorted, applying the duplicate rule.
    fn insert(&mut self, point: Point<T>) {
        // The common case: in-order arrival appends without reading the vector.
        if self.tail.is_empty() || self.last_ts_ms < point.ts_ms {
            self.last_ts_ms = point.ts_ms;
            if self.tail.len() >= RUN_POINTS_MAX {
                // A series this long goes on: the next run's full size at once, no regrowth.
                let full = std::mem::replace(&mut self.tail, Vec::with_capacity(RUN_POINTS_MAX));
                self.older.push(full);
            }
            self.tail.push(point);
            return;
        }
        self.insert_late(point);
        debug_assert_eq!(self.last().map(|p| p.ts_ms), Some(self.last_ts_ms));
    }

    /// A point at or before the last one.
    fn insert_late(&mut self, point: Point<T>) {
        let r = self.run_reaching(point.ts_ms);
        assert!(
            r <= self.older.len(),
            "a late point is at or before the last point"
        );
        if self.run(r).first().is_some_and(|p| point.ts_ms < p.ts_ms) {
            // Between run r − 1 and run r: onto the end of r − 1, or a run of its own.
            match r.checked_sub(1) {
                Some(before) if self.run(before).len() < RUN_POINTS_MAX => {
                    self.run_mut(before).push(point);
                }
                _ => self.older.insert(r, vec![point]),
            }
            return;
        }
        let run = self.run_mut(r);
        insert_point(run, point);
        if run.len() > 2 * RUN_POINTS_MAX {
            let second = run.split_off(run.len() / 2);
            if r == self.older.len() {
                let first = std::mem::replace(&mut self.tail, second);
                self.older.push(first);
            } else {
                self.older.insert(r + 1, second);
            }
        }
    }

    /// Run `i` of `1 + older.len()`, the last being `tail` (as is any `i` past it).
    fn run(&self, i: usize) -> &Vec<Point<T>> {
        self.older.get(i).unwrap_or(&self.tail)
    }

    fn run_mut(&mut self, i: usize) -> &mut Vec<Point<T>> {
        match self.older.get_mut(i) {
            Some(run) => run,
            None => &mut self.tail,
        }
    }

    /// The runs, in time order (one empty run for no points).
    fn runs(&self) -> impl Iterator<Item = &[Point<T>]> {
        self.older
            .iter()
            .map(|r| &r[..])
            .chain(std::iter::once(&self.tail[..]))
    }

    pub fn last(&self) -> Option<&Point<T>> {
        self.tail.last()
    }

    /// The points in `[start_ms, end_ms)`, ascending, as non-empty slices (one per run).
    pub fn in_range(&self, start_ms: i64, end_ms: i64) -> impl Iterator<Item = &[Point<T>]> {
        // Found by search: a read of the newest minutes of a long series does not walk its
        // older runs.
        self.runs()
            .skip(self.run_reaching(start_ms))
            .take_while(move |run| run.first().is_some_and(|p| p.ts_ms < end_ms))
            .map(move |run| in_range(run, start_ms, end_ms))
            .filter(|points| !points.is_empty())
    }

    /// `f` of each point in `[start_ms, end_ms)`, ascending, into a vector sized once.
    pub fn map_in_range<U>(
        &self,
        start_ms: i64,
        end_ms: i64,
        f: impl Fn(&Point<T>) -> U,
    ) -> Vec<U> {
        let len = self.in_range(start_ms, end_ms).map(<[Point<T>]>::len).sum();
        let mut out = Vec::with_capacity(len);
        for points in self.in_range(start_ms, end_ms) {
            out.extend(points.iter().map(&f));
        }
        out
    }

    /// The first point's timestamp at or after `ts_ms`.
    pub fn first_at_or_after(&self, ts_ms: i64) -> Option<i64> {
        let run = self.run(self.run_reaching(ts_ms));
        run.get(run.partition_point(|p| p.ts_ms < ts_ms))
            .map(|p| p.ts_ms)
    }

    /// The first run whose last point is at or after `ts_ms`, by search: its index among the
    /// runs (`older`, then `tail`), or `1 + older.len()` when no point is that late.
    fn run_reaching(&self, ts_ms: i64) -> usize {
        let r = self
            .older
            .partition_point(|run| run.last().is_some_and(|p| p.ts_ms < ts_ms));
        let in_tail = self.tail.last().is_some_and(|p| p.ts_ms >= ts_ms);
        r + usize::from(r == self.older.len() && !in_tail)
    }
}

#[derive(Debug)]
pub(crate) enum SeriesHead {
    Numeric(Points<f64>),
    Text(Points<String>),
    Histogram(HistSeries),
}

/// The head's series by id. Ids are dense integers the index assigns from 0, so a slot per id
/// (4 bytes) points into one vector of series kept in first-insert order — usually id order,
/// as clients resend their series in the order they first sent them. A batch's lookups then
/// walk both arrays nearly sequentially, where a hash map cost a cache miss or two per sample
/// (its control bytes and its bucket) with thousands of series per batch.
#[derive(Debug, Default)]
pub(crate) struct SeriesMap {
    /// `slot_of[id]`: 1 + the series' index in `heads`; 0 when it has nothing in the head.
    slot_of: Vec<u32>,
    heads: Vec<(SeriesId, SeriesHead)>,
}

impl SeriesMap {
    pub fn get(&self, id: &SeriesId) -> Option<&SeriesHead> {
        let slot = *self.slot_of.get(id.0 as usize)?;
        let (at, head) = self.heads.get(slot.checked_sub(1)? as usize)?;
        debug_assert_eq!(at, id);
        Some(head)
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    fn get_or_insert_with(
        &mut self,
        id: SeriesId,
        new: impl FnOnce() -> SeriesHead,
    ) -> &mut SeriesHead {
        let i = id.0 as usize;
        if i >= self.slot_of.len() {
            // Ids are dense, so this grows with the series count (doubling, amortised).
            assert!(
                id.0 < crate::index::SERIES_MAX,
                "series ids stay below SERIES_MAX"
            );
            let len = (i + 1).max(self.slot_of.len() * 2);
            self.slot_of.resize(len, 0);
        }
        let slot = match self.slot_of[i] {
            0 => {
                self.heads.push((id, new()));
                let slot = u32::try_from(self.heads.len()).unwrap_or(u32::MAX);
                assert!(slot < u32::MAX, "head series fit a u32 slot");
                self.slot_of[i] = slot;
                slot
            }
            slot => slot,
        };
        let (at, head) = &mut self.heads[slot as usize - 1];
        debug_assert_eq!(*at, id);
        head
    }
}

impl<'a> IntoIterator for &'a SeriesMap {
    type Item = (&'a SeriesId, &'a SeriesHead);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (SeriesId, SeriesHead)>,
        fn(&'a (SeriesId, SeriesHead)) -> (&'a SeriesId, &'a SeriesHead),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.heads.iter().map(|(id, head)| (id, head))
    }
}

#[derive(Debug)]
pub(crate) struct Head {
    pub base_period_ms: i64,
    pub series: SeriesMap,
    /// Samples inserted (duplicates and merged histograms included): what a flush is sized by.
    pub samples: u64,
    /// Reused by every histogram merge into a period.
    merge_scratch: MergeScratch,
    /// The windows histogram series ended the previous head with, taken by each series as it
    /// starts in this one (`HistSeries::carried`); what is left when this head is frozen is
    /// dropped (those series wrote nothing for a whole head).
    carried_windows: HashMap<SeriesId, CarriedWindow>,
}

/// The points of a sorted run in `[start_ms, end_ms)`.
fn in_range<T>(points: &[Point<T>], start_ms: i64, end_ms: i64) -> &[Point<T>] {
    let from = points.partition_point(|p| p.ts_ms < start_ms);
    let to = points.partition_point(|p| p.ts_ms < end_ms);
    &points[from..to.max(from)]
}

/// Inserts keeping `points` sorted by timestamp, applying the duplicate rule.
fn insert_point<T>(points: &mut Vec<Point<T>>, point: Point<T>) {
    // The common case: in-order arrival appends.
    if points.last().is_none_or(|last| last.ts_ms < point.ts_ms) {
        points.push(point);
        return;
    }
    let i = points.partition_point(|p| p.ts_ms < point.ts_ms);
    match points.get_mut(i) {
        Some(existing) if existing.ts_ms == point.ts_ms => {
            if point.seq >= existing.seq {
                *existing = point;
            }
        }
        _ => {
            points.insert(i, point);
            // Sorted and unique: checking the neighbours of the one insert keeps it O(1).
            assert!(i == 0 || points[i - 1].ts_ms < points[i].ts_ms);
            assert!(i + 1 == points.len() || points[i].ts_ms < points[i + 1].ts_ms);
        }
    }
}

impl Head {
    pub fn new(base_period_ms: i64) -> Head {
        assert!(base_period_ms > 0);
        Head {
            base_period_ms,
            series: SeriesMap::default(),
            samples: 0,
            merge_scratch: MergeScratch::default(),
            carried_windows: HashMap::new(),
        }
    }

    /// The empty head that follows this one at a flush: each histogram series starts it with
    /// the window it codes its periods with here, where that window still fits
    /// (`HistSeries::window_to_carry`).
    pub fn successor(&self) -> Head {
        let mut next = Head::new(self.base_period_ms);
        next.carried_windows = (&self.series)
            .into_iter()
            .filter_map(|(id, series)| match series {
                SeriesHead::Histogram(h) => Some((*id, h.window_to_carry()?)),
                _ => None,
            })
            .collect();
        next
    }

    pub fn period_start_ms(&self, ts_ms: i64) -> i64 {
        ts_ms - ts_ms.rem_euclid(self.base_period_ms)
    }

    /// Applies one sample. Cumulative histograms must already be turned into differences.
    /// Returns `false` (and changes nothing) if the value's kind is not the series'.
    #[must_use]
    pub fn insert(&mut self, id: SeriesId, seq: u64, ts_ms: i64, value: Value) -> bool {
        self.insert_value(id, seq, ts_ms, Incoming::Owned(value))
    }

    /// [`Head::insert`] from the write path: the value is borrowed from the batch, and a
    /// histogram's bins are taken already packed from the WAL record (`packed`, ignored for
    /// other kinds).
    #[must_use]
    pub fn insert_encoded(
        &mut self,
        id: SeriesId,
        seq: u64,
        ts_ms: i64,
        value: &Value,
        packed: &[u8],
    ) -> bool {
        self.insert_value(id, seq, ts_ms, Incoming::Encoded(value, packed))
    }

    fn insert_value(&mut self, id: SeriesId, seq: u64, ts_ms: i64, value: Incoming<'_>) -> bool {
        let period_start_ms = self.period_start_ms(ts_ms);
        let carried_windows = &mut self.carried_windows;
        let entry = self.series.get_or_insert_with(id, || match value.get() {
            Value::Numeric(_) => SeriesHead::Numeric(Points::default()),
            Value::Text(_) => SeriesHead::Text(Points::default()),
            _ => SeriesHead::Histogram(match carried_windows.remove(&id) {
                Some(carried) => HistSeries::carried(carried),
                None => HistSeries::default(),
            }),
        });
        match (entry, value) {
            (SeriesHead::Numeric(points), value) => {
                let Value::Numeric(value) = *value.get() else {
                    return false;
                };
                points.insert(Point { ts_ms, seq, value });
            }
            (SeriesHead::Text(points), value) => {
                let value = match value {
                    Incoming::Owned(Value::Text(t)) => t,
                    Incoming::Encoded(Value::Text(t), _) => t.clone(),
                    _ => return false,
                };
                points.insert(Point { ts_ms, seq, value });
            }
            (SeriesHead::Histogram(series), value) => match value {
                Incoming::Encoded(Value::Histogram(_), packed) => {
                    series.insert_packed(period_start_ms, packed, &mut self.merge_scratch);
                }
                Incoming::Owned(Value::Histogram(h)) => {
                    series.insert(period_start_ms, &h, &mut self.merge_scratch);
                }
                _ => return false,
            },
        }
        self.samples += 1;
        true
    }
}

/// A value being inserted, owned (replay, cumulative differences) or borrowed from a batch
/// with its histogram bins packed in the WAL record (the write path).
enum Incoming<'a> {
    Owned(Value),
    Encoded(&'a Value, &'a [u8]),
}

impl Incoming<'_> {
    fn get(&self) -> &Value {
        match self {
            Incoming::Owned(v) => v,
            Incoming::Encoded(v, _) => v,
        }
    }
}

/// Turns cumulative submissions into per-period differences, in WAL order, each against the
/// series' newest cumulative submission by time.
#[derive(Debug, Default)]
pub(crate) struct CumulativeState {
    /// Per series: the newest cumulative submission's time and value, as the sender sent it.
    last: HashMap<SeriesId, (i64, Cumulative)>,
    /// Submissions left out for being older than their series' newest, since the store opened
    /// (replay included).
    left_out: u64,
}

impl CumulativeState {
    pub fn from_entries(entries: Vec<(SeriesId, i64, Cumulative)>) -> CumulativeState {
        CumulativeState {
            last: entries
                .into_iter()
                .map(|(id, ts, h)| (id, (ts, h)))
                .collect(),
            left_out: 0,
        }
    }

    /// Submissions left out for being older than their series' newest, since the store opened
    /// (replay included).
    pub fn left_out(&self) -> u64 {
        self.left_out
    }

    /// Every series' newest cumulative submission (time and value), by series id.
    pub fn entries(&self) -> Vec<(SeriesId, i64, &Cumulative)> {
        let mut out: Vec<(SeriesId, i64, &Cumulative)> =
            self.last.iter().map(|(k, (ts, h))| (*k, *ts, h)).collect();
        out.sort_unstable_by_key(|e| e.0);
        out
    }

    /// The samples `cumulative`, submitted for `ts_ms`, added since the series' newest
    /// cumulative submission, as llhist bins: the increase is taken in the sender's buckets
    /// and then converted, so each bucket's increase lands exactly. After a reset (Prometheus's
    /// rules: `Cumulative::increase_since`) the new total is taken whole, as everything in it
    /// was observed since.
    ///
    /// `None` for a submission older than the newest (a broker forwarding what it stored
    /// during an outage while newer values already came): its counts are in the newer one's
    /// increase already, or were before it, so it adds nothing, and taking it as a reset
    /// (WAL order) would count them twice. The next in-time submission's increase covers its
    /// interval, so totals stay exact; only where in that interval they fell is lost.
    pub fn difference(
        &mut self,
        id: SeriesId,
        ts_ms: i64,
        cumulative: &Cumulative,
    ) -> Option<Histogram> {
        let delta = match self.last.get(&id) {
            Some((last_ms, _)) if ts_ms < *last_ms => {
                self.left_out += 1;
                return None;
            }
            None => cumulative.to_histogram(),
            Some((_, previous)) => match cumulative.increase_since(previous) {
                Increase::Delta(delta) => delta.to_histogram(),
                Increase::Reset => cumulative.to_histogram(),
            },
        };
        self.last.insert(id, (ts_ms, cumulative.clone()));
        Some(delta)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn duplicate_rule_is_order_independent() {
        let samples = [
            (5, 1, 1.0),
            (5, 3, 3.0),
            (5, 2, 2.0),
            (1, 4, 4.0),
            (9, 0, 0.5),
        ];
        let mut reference: Option<Vec<(i64, f64)>> = None;
        for rotation in 0..samples.len() {
            let mut points = Vec::new();
            let mut order = samples.to_vec();
            order.rotate_left(rotation);
            order.reverse();
            for (ts_ms, seq, value) in order {
                insert_point(&mut points, Point { ts_ms, seq, value });
            }
            let got: Vec<(i64, f64)> = points.iter().map(|p| (p.ts_ms, p.value)).collect();
            assert_eq!(got, vec![(1, 4.0), (5, 3.0), (9, 0.5)]);
            if let Some(r) = &reference {
                assert_eq!(r, &got);
            }
            reference = Some(got);
        }
    }

    /// The points as runs (each sorted, each before the next) and as one list.
    fn check_runs<T: Clone>(points: &Points<T>) -> Vec<(i64, T)> {
        let mut prev: Option<i64> = None;
        for run in points.runs() {
            assert!(run.len() <= 2 * RUN_POINTS_MAX);
            for p in run {
                assert!(prev.is_none_or(|t| t < p.ts_ms), "ascending and unique");
                prev = Some(p.ts_ms);
            }
        }
        assert!(points.last().is_none() || points.runs().all(|r| !r.is_empty()));
        assert_eq!(points.last().map(|p| p.ts_ms), prev);
        points
            .runs()
            .flatten()
            .map(|p| (p.ts_ms, p.value.clone()))
            .collect()
    }

    /// A backfill (the older half of a series after its newer half, in time order) lands
    /// between runs: every run stays within its bound and nothing is moved more than once.
    #[test]
    fn backfill_points_join_runs_before_the_newer_ones() {
        let mut points = Points::default();
        let n = 5 * RUN_POINTS_MAX as i64;
        for (seq, ts) in (n..2 * n).chain(0..n).enumerate() {
            let seq = seq as u64;
            points.insert(Point {
                ts_ms: ts,
                seq,
                value: ts as f64,
            });
        }
        let got = check_runs(&points);
        assert_eq!(got.len(), 2 * n as usize);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &(t, v))| t == i as i64 && v == t as f64));
        assert!(points.runs().all(|r| r.len() <= RUN_POINTS_MAX));
        let some: Vec<i64> = points
            .in_range(n - 2, n + 2)
            .flatten()
            .map(|p| p.ts_ms)
            .collect();
        assert_eq!(points.first_at_or_after(n - 2), Some(n - 2));
        assert_eq!(points.first_at_or_after(2 * n), None);
        assert_eq!(some, vec![n - 2, n - 1, n, n + 1]);
    }

    proptest::proptest! {
        /// Any arrival order, with duplicates: the same points as a map applying the
        /// duplicate rule (the higher sequence number wins, a tie the later insert), and every
        /// range read equals the model's.
        #[test]
        fn points_equal_a_sorted_map(
            inserts in proptest::collection::vec((0i64..3_000, 0u64..4), 0..3_000),
            ranges in proptest::collection::vec((0i64..3_100, 0i64..400), 1..5),
        ) {
            let mut points = Points::default();
            let mut model: std::collections::BTreeMap<i64, (u64, usize)> = Default::default();
            for (i, &(ts_ms, seq)) in inserts.iter().enumerate() {
                points.insert(Point { ts_ms, seq, value: i });
                match model.get(&ts_ms) {
                    Some(&(s, _)) if seq < s => {}
                    _ => {
                        model.insert(ts_ms, (seq, i));
                    }
                }
            }
            let want: Vec<(i64, usize)> = model.iter().map(|(&t, &(_, v))| (t, v)).collect();
            proptest::prop_assert_eq!(check_runs(&points), want.clone());
            for (start, len) in ranges {
                let got: Vec<(i64, usize)> = points
                    .in_range(start, start + len)
                    .flatten()
                    .map(|p| (p.ts_ms, p.value))
                    .collect();
                let w: Vec<(i64, usize)> =
                    want.iter().copied().filter(|&(t, _)| start <= t && t < start + len).collect();
                proptest::prop_assert_eq!(got, w);
                proptest::prop_assert_eq!(
                    points.first_at_or_after(start),
                    want.iter().map(|p| p.0).find(|&t| t >= start)
                );
            }
        }
    }

    /// The head after a flush starts each histogram series with the window it had (and no
    /// other kind of series with anything); a series takes its window when it first writes.
    #[test]
    fn the_next_head_carries_histogram_windows() {
        let mut head = Head::new(60_000);
        let (hist_id, numeric_id) = (SeriesId(3), SeriesId(4));
        for step in 0..60i64 {
            let values: Vec<(f64, u64)> = (0..50).map(|i| (1.0 + f64::from(i), 1)).collect();
            let h = crate::test_util::histogram_of(&values);
            assert!(head.insert(hist_id, step as u64, step * 10_000, Value::Histogram(h)));
            assert!(head.insert(numeric_id, step as u64, step * 10_000, Value::Numeric(1.0)));
        }
        let mut next = head.successor();
        assert_eq!(
            next.carried_windows.keys().collect::<Vec<_>>(),
            vec![&hist_id]
        );
        let h = crate::test_util::histogram_of(&[(2.0, 1)]);
        assert!(next.insert(hist_id, 0, 700_000, Value::Histogram(h.clone())));
        assert!(next.carried_windows.is_empty());
        let Some(SeriesHead::Histogram(series)) = next.series.get(&hist_id) else {
            panic!("a histogram series");
        };
        assert_eq!(series.periods_in(0, i64::MAX), vec![(660_000, h)]);
    }

    #[test]
    fn cumulative_reset_takes_new_value_whole() {
        let mut state = CumulativeState::default();
        let mut a = Histogram::new();
        a.insert_n(1.0, 5);
        let mut b = a.clone();
        b.insert_n(2.0, 3);
        let id = SeriesId(1);
        let bins = |h: &Histogram| Cumulative::Bins(h.clone());
        assert_eq!(state.difference(id, 10, &bins(&a)), Some(a.clone()));
        let d = state.difference(id, 20, &bins(&b)).unwrap();
        assert_eq!(d.sample_count(), 3);
        let mut reset = Histogram::new();
        reset.insert_n(1.0, 2);
        assert_eq!(state.difference(id, 30, &bins(&reset)), Some(reset));
    }

    /// A cumulative submission older than the newest (a backfill arriving after newer values)
    /// adds nothing; the next in-time one still differs from the newest, so the total over
    /// every stored difference is the newest cumulative value.
    #[test]
    fn an_older_cumulative_submission_adds_nothing() {
        let mut state = CumulativeState::default();
        let id = SeriesId(7);
        let at = |n: u64| {
            let mut h = Histogram::new();
            h.insert_n(1.0, n);
            h
        };
        let mut total = Histogram::new();
        for (ts, n) in [
            (0, 5),
            (300, 40),
            (100, 12),
            (200, 30),
            (300, 40),
            (400, 41),
        ] {
            if let Some(d) = state.difference(id, ts, &Cumulative::Bins(at(n))) {
                total.merge(&d);
            }
        }
        assert_eq!(total, at(41));
        assert_eq!(state.entries(), vec![(id, 400, &Cumulative::Bins(at(41)))]);
        assert_eq!(state.left_out(), 2);
    }
}
