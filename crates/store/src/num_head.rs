//! A numeric series in the head, compressed as it comes.
//!
//! Points kept as they came cost 24 bytes each (timestamp, journal offset, value) plus the
//! vector's slack: a head of a million series could hold only a few minutes. Here the points
//! that are **settled** are appended to compressed streams (`encode::numeric_stream`, about a
//! byte a point for gauges with a few decimals), and only the others keep their offset:
//!
//! - **Settled** means every WAL record below the point's journal offset has been applied to
//!   the head (the write path's watermark, `settled` below). Any sample that comes later for
//!   the same millisecond then has a higher offset, so it wins by the duplicate rule: a stream
//!   needs no offsets, a later point simply replaces. Replay applies records in offset order,
//!   so there every point is settled at once.
//! - `open`: points after the streams' last one, not settled yet — with several writers, the
//!   records of the last few milliseconds — and the newest few settled ones (a reorder window,
//!   `OPEN_REORDER_POINTS`). They move to the streams, oldest first, at the series' next insert
//!   once settled and out of the window (or stay, readable, until the flush).
//! - `late`: points at or before the streams' last one (late or out-of-order data, a broker's
//!   backfill), kept with their offsets in runs (`Points`). They never share a millisecond with
//!   a point that entered the streams after them (those come from `open`, all newer), and one
//!   that shares a millisecond with an older stream point was written after it: reads let
//!   `late` win there.
//!
//! So the series reads exactly as the sorted map the duplicate rule defines, under any arrival
//! order (property test below, against that map).

use smallvec::SmallVec;

use crate::encode::numeric_stream::{Append, Appender, NumericStream};
use crate::points::{Point, Points};

/// Points a series keeps in `open` after they are settled: a reorder window. Concurrent
/// requests that carry consecutive steps of one series (an Influx body is one step of many
/// series) reach the journal in whatever order their parsing ends, so a step's record can come
/// after the next step's is applied; had that newer point entered the streams, the older one
/// would be late: kept apart with its offset, a box per series, merged at every read and flush.
/// Three points is the journal order a few writers scramble; with the point just inserted they
/// are what `open` keeps inside the slot (`OPEN_INLINE_POINTS`).
const OPEN_REORDER_POINTS: usize = 3;

/// Points `open` holds inside the series before it moves them to the heap: the reorder window
/// and the point just inserted, which is what an in-order series holds. Inline, they cost the
/// slot 104 bytes where a vector cost 24 and an allocation of 112 (96 bytes and the
/// allocator's header and rounding), in every series of a million.
const OPEN_INLINE_POINTS: usize = OPEN_REORDER_POINTS + 1;

type OpenPoints = SmallVec<[Point<f64>; OPEN_INLINE_POINTS]>;

#[derive(Debug, Default)]
pub(crate) struct NumericSeries {
    /// Ascending and disjoint in time; the last one is appended to.
    streams: Vec<NumericStream>,
    /// The last stream's appending state (meaningful while there is one).
    appender: Option<Appender>,
    /// Sorted and unique; every one after the streams' last point.
    open: OpenPoints,
    /// Sorted and unique; every one at or before the streams' last point when it came.
    late: Option<Box<Points<f64>>>,
}

impl NumericSeries {
    /// Inserts a point (the duplicate rule: of two at one millisecond the higher offset wins,
    /// a tie the later insert), then moves the settled points of `open` — offsets at or below
    /// `settled`, a bound below which every record is applied — into the streams.
    pub fn insert(&mut self, point: Point<f64>, settled: u64) {
        match self.streams.last() {
            Some(s) if point.ts_ms <= s.last_ts() => {
                self.late.get_or_insert_default().insert(point);
            }
            _ => crate::points::insert_point(&mut self.open, point),
        }
        self.settle(settled);
    }

    /// Moves the leading points of `open` with offsets at or below `settled` into the streams,
    /// all but the newest `OPEN_REORDER_POINTS`.
    pub fn settle(&mut self, settled: u64) {
        let movable = self.open.len().saturating_sub(OPEN_REORDER_POINTS);
        let n = self.open[..movable]
            .iter()
            .take_while(|p| p.seq <= settled)
            .count();
        if n == 0 {
            return;
        }
        for i in 0..n {
            let (ts_ms, value) = (self.open[i].ts_ms, self.open[i].value);
            self.append(ts_ms, value);
        }
        self.open.drain(..n);
        if self.open.spilled() && self.open.len() <= OPEN_INLINE_POINTS {
            // Back inside the slot: a burst of unsettled points keeps no allocation.
            self.open.shrink_to_fit();
        }
    }

    fn append(&mut self, ts_ms: i64, value: f64) {
        if let (Some(s), Some(a)) = (self.streams.last_mut(), self.appender.as_mut()) {
            if s.append(a, ts_ms, value) == Append::Done {
                return;
            }
            s.seal();
        }
        // A new stream keeps the decimals of the one before (a gauge whose value happened to
        // be whole, then had two decimals, does not start a stream at every change).
        let (decimals_min, k0) = match (self.streams.last(), self.appender.as_ref()) {
            (Some(s), Some(a)) => (s.mode(), NumericStream::next_k0(a)),
            _ => (0, 0),
        };
        let (stream, appender) = NumericStream::start(ts_ms, value, decimals_min, k0);
        // Exact growth: a series holds a stream or two for a head's two hours, and the
        // vector's first doubling step would hold four (192 bytes unused a series).
        self.streams.reserve_exact(1);
        self.streams.push(stream);
        self.appender = Some(appender);
    }

    /// The newest point's timestamp.
    pub fn last_ts(&self) -> Option<i64> {
        // `late` holds nothing after the streams, `open` only points after them.
        self.open
            .last()
            .map(|p| p.ts_ms)
            .or_else(|| self.streams.last().map(NumericStream::last_ts))
    }

    /// The points in `[start_ms, end_ms)`, ascending, one per millisecond.
    pub fn in_range(&self, start_ms: i64, end_ms: i64) -> Vec<(i64, f64)> {
        if start_ms >= end_ms {
            return Vec::new();
        }
        // Sized once: growing by doubling was an eighth of a range query's time (memmove).
        let streamed: usize = self
            .streams_over(start_ms, end_ms)
            .map(|s| s.count() as usize)
            .sum();
        let mut out = Vec::with_capacity(streamed + self.open.len());
        for s in self.streams_over(start_ms, end_ms) {
            s.for_each(|t, v| {
                if start_ms <= t && t < end_ms {
                    out.push((t, v));
                }
            });
        }
        let open = crate::points::in_range(&self.open, start_ms, end_ms);
        out.extend(open.iter().map(|p| (p.ts_ms, p.value)));
        match &self.late {
            Some(late) => overlay(
                out,
                late.map_in_range(start_ms, end_ms, |p| (p.ts_ms, p.value)),
            ),
            None => out,
        }
    }

    /// Whether a point lies in `[start_ms, end_ms)`.
    pub fn has_in_range(&self, start_ms: i64, end_ms: i64) -> bool {
        if start_ms >= end_ms {
            return false;
        }
        let in_range = |t: i64| start_ms <= t && t < end_ms;
        let streams = self.streams_over(start_ms, end_ms).any(|s| {
            // A stream's ends are points; one spanning the range is decoded.
            in_range(s.first_ts()) || in_range(s.last_ts()) || {
                let mut any = false;
                s.for_each(|t, _| any |= in_range(t));
                any
            }
        });
        streams
            || !crate::points::in_range(&self.open, start_ms, end_ms).is_empty()
            || self
                .late
                .as_ref()
                .is_some_and(|l| l.in_range(start_ms, end_ms).next().is_some())
    }

    /// The first point's timestamp at or after `ts_ms`.
    pub fn first_at_or_after(&self, ts_ms: i64) -> Option<i64> {
        let stream = self.streams.iter().find(|s| s.last_ts() >= ts_ms).map(|s| {
            if s.first_ts() >= ts_ms {
                return s.first_ts();
            }
            let mut first = s.last_ts();
            s.for_each(|t, _| {
                if t >= ts_ms && t < first {
                    first = t;
                }
            });
            first
        });
        let open = self.open.iter().find(|p| p.ts_ms >= ts_ms).map(|p| p.ts_ms);
        let late = self.late.as_ref().and_then(|l| l.first_at_or_after(ts_ms));
        [stream, open, late].into_iter().flatten().min()
    }

    /// Bytes this series holds beyond its slot in the head (streams, open and late points).
    pub fn size_bytes(&self) -> usize {
        let unused = self.streams.capacity() - self.streams.len();
        let streams: usize = self
            .streams
            .iter()
            .map(NumericStream::size_bytes)
            .sum::<usize>()
            + unused * std::mem::size_of::<NumericStream>();
        // Inline points are part of the slot.
        let open = match self.open.spilled() {
            true => self.open.capacity() * std::mem::size_of::<Point<f64>>(),
            false => 0,
        };
        let late = self.late.as_ref().map_or(0, |l| l.size_bytes());
        streams + open + late
    }

    /// Points held compressed, and in all (duplicates resolved).
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let streamed = self.streams.iter().map(|s| s.count() as usize).sum();
        (streamed, self.in_range(i64::MIN, i64::MAX).len())
    }

    fn streams_over(&self, start_ms: i64, end_ms: i64) -> impl Iterator<Item = &NumericStream> {
        let from = self.streams.partition_point(|s| s.last_ts() < start_ms);
        self.streams[from..]
            .iter()
            .take_while(move |s| s.first_ts() < end_ms)
    }

    /// Whether the series is in XOR mode (its values are not all short decimals).
    #[cfg(test)]
    fn xor_mode(&self) -> bool {
        use crate::encode::numeric_stream::MODE_XOR;
        self.streams.last().is_some_and(|s| s.mode() == MODE_XOR)
    }
}

/// `base` with `over`'s points added, `over` winning a shared millisecond; both ascending and
/// unique.
fn overlay(base: Vec<(i64, f64)>, over: Vec<(i64, f64)>) -> Vec<(i64, f64)> {
    if over.is_empty() {
        return base;
    }
    let mut out = Vec::with_capacity(base.len() + over.len());
    let (mut a, mut b) = (base.into_iter().peekable(), over.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 < y.0 => out.extend(a.next()),
            (Some(x), Some(y)) if x.0 == y.0 => {
                a.next();
                out.extend(b.next());
            }
            (_, Some(_)) => out.extend(b.next()),
            (Some(_), None) => out.extend(a.next()),
            (None, None) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// One insert: its time, its record's offset, its value, and the watermark the writer saw.
    fn inserts() -> impl Strategy<Value = Vec<(i64, u64, f64, u64)>> {
        proptest::collection::vec(
            (
                0i64..400,
                0u64..60,
                prop_oneof![
                    (-50i64..50).prop_map(|v| v as f64),
                    (-5000i64..5000).prop_map(|v| v as f64 / 100.0),
                    any::<u64>().prop_map(f64::from_bits),
                ],
                0u64..70,
            ),
            0..600,
        )
    }

    proptest! {
        /// Any arrival order, any watermarks a writer could see: reads equal the sorted map of
        /// the duplicate rule, bit for bit.
        ///
        /// The watermark a writer sees never passes an offset still to come, so the model
        /// only draws schedules where that holds: an insert's offset is at least every
        /// watermark seen before it. (Within that, offsets come in any order.)
        #[test]
        fn reads_equal_the_duplicate_rule_model(
            raw in inserts(),
            ranges in proptest::collection::vec((0i64..420, 0i64..200), 1..6),
        ) {
            let mut series = NumericSeries::default();
            let mut model: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
            let mut floor = 0u64;
            for (ts_ms, seq, value, seen) in raw {
                let seq = seq.max(floor);
                // The writer's own record is not applied yet: it sees at most its own offset.
                let settled = seen.min(seq);
                floor = floor.max(settled);
                series.insert(Point { ts_ms, seq, value }, settled);
                match model.get(&ts_ms) {
                    Some(&(s, _)) if seq < s => {}
                    _ => {
                        model.insert(ts_ms, (seq, value.to_bits()));
                    }
                }
            }
            let want: Vec<(i64, u64)> = model.iter().map(|(&t, &(_, v))| (t, v)).collect();
            let got: Vec<(i64, u64)> = series
                .in_range(i64::MIN, i64::MAX)
                .into_iter()
                .map(|(t, v)| (t, v.to_bits()))
                .collect();
            prop_assert_eq!(&got, &want);
            for (start, len) in ranges {
                let end = start + len;
                let w: Vec<(i64, u64)> =
                    want.iter().copied().filter(|&(t, _)| start <= t && t < end).collect();
                let g: Vec<(i64, u64)> = series
                    .in_range(start, end)
                    .into_iter()
                    .map(|(t, v)| (t, v.to_bits()))
                    .collect();
                prop_assert_eq!(series.has_in_range(start, end), !w.is_empty());
                prop_assert_eq!(g, w);
                prop_assert_eq!(
                    series.first_at_or_after(start),
                    want.iter().map(|p| p.0).find(|&t| t >= start)
                );
            }
            prop_assert_eq!(series.last_ts(), want.last().map(|p| p.0));
        }
    }

    /// Steps whose records reached the journal up to three places out of order (each record
    /// applied, so settled, as it came): none is late, all but the reorder window compressed.
    #[test]
    fn steps_a_few_places_out_of_journal_order_are_not_late() {
        let mut series = NumericSeries::default();
        let order = [1u64, 0, 3, 2, 5, 6, 4, 9, 7, 8, 10, 11, 14, 13, 12, 15];
        for (seq, &step) in order.iter().enumerate() {
            let point = Point {
                ts_ms: 1_700_000_000_000 + step as i64 * 10_000,
                seq: seq as u64,
                value: step as f64,
            };
            series.insert(point, seq as u64);
        }
        assert!(series.late.is_none());
        assert_eq!(
            series.counts(),
            (order.len() - OPEN_REORDER_POINTS, order.len())
        );
        let read: Vec<f64> = series
            .in_range(i64::MIN, i64::MAX)
            .iter()
            .map(|p| p.1)
            .collect();
        assert_eq!(read, (0..16).map(|s| s as f64).collect::<Vec<_>>());
    }

    /// A series holds exactly the streams it has: the vector's first doubling step would hold
    /// four (192 bytes unused in every series of a million).
    #[test]
    fn streams_hold_no_unused_capacity() {
        let mut series = NumericSeries::default();
        for i in 0..2_000u64 {
            let point = Point {
                ts_ms: i as i64 * 10_000,
                seq: i,
                value: (i % 7) as f64,
            };
            series.insert(point, i);
            assert_eq!(series.streams.capacity(), series.streams.len());
        }
        assert_eq!(series.streams.len(), 4);
    }

    /// An in-order series keeps its open points inside its slot; a burst of unsettled points
    /// (many writers) moves them to the heap, and they come back once settled.
    #[test]
    fn open_points_stay_in_the_slot() {
        let mut series = NumericSeries::default();
        let point = |i: u64| Point {
            ts_ms: i as i64 * 10_000,
            seq: i,
            value: i as f64,
        };
        for i in 0..100 {
            series.insert(point(i), i);
            assert!(!series.open.spilled());
        }
        for i in 100..110 {
            series.insert(point(i), 99);
        }
        assert!(series.open.spilled());
        assert!(series.size_bytes() > 10 * std::mem::size_of::<Point<f64>>());
        series.settle(110);
        assert!(!series.open.spilled());
        assert_eq!(series.counts(), (110 - OPEN_REORDER_POINTS, 110));
    }

    /// In order, each point settled when written: every point but the reorder window goes into
    /// the streams, a two-decimal gauge at about a byte a point.
    #[test]
    fn in_order_points_are_all_compressed() {
        let mut series = NumericSeries::default();
        let mut v = 2_000i64;
        for i in 0..720u64 {
            v += (i * 7919 % 41) as i64 - 20;
            let point = Point {
                ts_ms: 1_700_000_000_000 + i as i64 * 10_000,
                seq: i,
                value: v as f64 / 100.0,
            };
            series.insert(point, i);
        }
        assert_eq!(series.counts(), (720 - OPEN_REORDER_POINTS, 720));
        assert!(!series.xor_mode());
        assert!(
            series.size_bytes() < 720 + 2 * 128,
            "{}",
            series.size_bytes()
        );
    }
}
