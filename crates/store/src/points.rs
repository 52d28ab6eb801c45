//! A series' points kept as they came — timestamp, journal offset, value — sorted and unique
//! by timestamp in runs: the head's text series, and the numeric points not yet compressed
//! (`num_head`: those not settled yet, and late ones).

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
pub(crate) const RUN_POINTS_MAX: usize = 512;

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
    pub fn insert(&mut self, point: Point<T>) {
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

    /// Bytes the runs take beyond the struct itself.
    pub fn size_bytes(&self) -> usize {
        let point = std::mem::size_of::<Point<T>>();
        let older: usize = self.older.iter().map(|r| r.capacity() * point).sum();
        older
            + self.older.capacity() * std::mem::size_of::<Vec<Point<T>>>()
            + self.tail.capacity() * point
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

/// The points of a sorted run in `[start_ms, end_ms)`.
pub(crate) fn in_range<T>(points: &[Point<T>], start_ms: i64, end_ms: i64) -> &[Point<T>] {
    let from = points.partition_point(|p| p.ts_ms < start_ms);
    let to = points.partition_point(|p| p.ts_ms < end_ms);
    &points[from..to.max(from)]
}

/// A growable run of points: a vector, or a series' inline points (`num_head`).
pub(crate) trait PointBuf<T>: std::ops::DerefMut<Target = [Point<T>]> {
    fn push(&mut self, point: Point<T>);
    fn insert(&mut self, i: usize, point: Point<T>);
}

impl<T> PointBuf<T> for Vec<Point<T>> {
    fn push(&mut self, point: Point<T>) {
        Vec::push(self, point);
    }
    fn insert(&mut self, i: usize, point: Point<T>) {
        Vec::insert(self, i, point);
    }
}

impl<A: smallvec::Array<Item = Point<T>>, T> PointBuf<T> for smallvec::SmallVec<A> {
    fn push(&mut self, point: Point<T>) {
        smallvec::SmallVec::push(self, point);
    }
    fn insert(&mut self, i: usize, point: Point<T>) {
        smallvec::SmallVec::insert(self, i, point);
    }
}

/// Inserts keeping `points` sorted by timestamp, applying the duplicate rule.
pub(crate) fn insert_point<T>(points: &mut impl PointBuf<T>, point: Point<T>) {
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
}
