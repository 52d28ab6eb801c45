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
use crate::num_head::NumericSeries;
use crate::points::{Point, Points};
use crate::series::SeriesId;

#[derive(Debug)]
pub(crate) enum SeriesHead {
    Numeric(NumericSeries),
    Text(Points<String>),
    /// Boxed: a histogram series' state is several times a numeric one's, and every slot of
    /// the head's series vector is the size of the largest kind.
    Histogram(Box<HistSeries>),
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

/// Where a sample was written in the journal (`seq`, the record's offset: the duplicate rule's
/// order), and a bound below which every record is applied to the head (`settled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offsets {
    pub seq: u64,
    pub settled: u64,
}

impl Offsets {
    /// A record applied in journal order (replay): every earlier one is in the head.
    pub fn in_order(seq: u64) -> Offsets {
        Offsets {
            seq,
            settled: u64::MAX,
        }
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

    /// Bytes the numeric and text series hold (their slots and what they point to; histogram
    /// series are not counted): what the head's memory budget (`STATUS.md`) is checked by.
    pub fn points_size_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(SeriesId, SeriesHead)>() + std::mem::size_of::<u32>();
        (&self.series)
            .into_iter()
            .map(|(_, s)| {
                slot + match s {
                    SeriesHead::Numeric(n) => n.size_bytes(),
                    SeriesHead::Text(t) => t.size_bytes(),
                    SeriesHead::Histogram(_) => std::mem::size_of::<HistSeries>(),
                }
            })
            .sum()
    }

    pub fn period_start_ms(&self, ts_ms: i64) -> i64 {
        ts_ms - ts_ms.rem_euclid(self.base_period_ms)
    }

    /// Applies one sample written at journal offset `seq`. `settled`: every record below it is
    /// applied to the head already (the write path's watermark, `u64::MAX` in replay), which
    /// lets numeric points at or below it be compressed without their offsets (`num_head`).
    /// Cumulative histograms must already be turned into differences. Returns `false` (and
    /// changes nothing) if the value's kind is not the series'.
    #[must_use]
    pub fn insert(&mut self, id: SeriesId, at: Offsets, ts_ms: i64, value: Value) -> bool {
        self.insert_value(id, at, ts_ms, Incoming::Owned(value))
    }

    /// [`Head::insert`] from the write path: the value is borrowed from the batch, and a
    /// histogram's bins are taken already packed from the WAL record (`packed`, ignored for
    /// other kinds).
    #[must_use]
    pub fn insert_encoded(
        &mut self,
        id: SeriesId,
        at: Offsets,
        ts_ms: i64,
        value: &Value,
        packed: &[u8],
    ) -> bool {
        self.insert_value(id, at, ts_ms, Incoming::Encoded(value, packed))
    }

    fn insert_value(&mut self, id: SeriesId, at: Offsets, ts_ms: i64, value: Incoming<'_>) -> bool {
        let seq = at.seq;
        let period_start_ms = self.period_start_ms(ts_ms);
        let carried_windows = &mut self.carried_windows;
        let entry = self.series.get_or_insert_with(id, || match value.get() {
            Value::Numeric(_) => SeriesHead::Numeric(NumericSeries::default()),
            Value::Text(_) => SeriesHead::Text(Points::default()),
            _ => SeriesHead::Histogram(Box::new(match carried_windows.remove(&id) {
                Some(carried) => HistSeries::carried(carried),
                None => HistSeries::default(),
            })),
        });
        match (entry, value) {
            (SeriesHead::Numeric(series), value) => {
                let Value::Numeric(value) = *value.get() else {
                    return false;
                };
                series.insert(Point { ts_ms, seq, value }, at.settled);
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

    /// A slot is an id and the largest kind inline — a numeric series with its newest four
    /// points (`num_head`) — and a million series pay it each.
    #[test]
    fn slots_stay_small() {
        let slot = std::mem::size_of::<(SeriesId, SeriesHead)>();
        assert!(slot <= 184, "{slot} bytes a slot");
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
            assert!(head.insert(
                hist_id,
                Offsets::in_order(step as u64),
                step * 10_000,
                Value::Histogram(h)
            ));
            assert!(head.insert(
                numeric_id,
                Offsets::in_order(step as u64),
                step * 10_000,
                Value::Numeric(1.0)
            ));
        }
        let mut next = head.successor();
        assert_eq!(
            next.carried_windows.keys().collect::<Vec<_>>(),
            vec![&hist_id]
        );
        let h = crate::test_util::histogram_of(&[(2.0, 1)]);
        assert!(next.insert(
            hist_id,
            Offsets::in_order(0),
            700_000,
            Value::Histogram(h.clone())
        ));
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
