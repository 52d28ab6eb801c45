//! Reads over the head.
//!
//! A [`View`] holds the head's read lock. Writers apply a whole batch under the write lock
//! after it is durable, so a view sees every batch acknowledged before it was taken, no batch
//! partly, and nothing new while it lives: every read through one view is one consistent
//! snapshot, across all the series it asks for. Keep views short; writers wait for them.

use std::sync::RwLockReadGuard;

use hist::Histogram;

use crate::head::{Head, Point, SeriesHead};
use crate::index::SeriesId;
use crate::StoreError;

/// Bound on the slices one read may ask for (per series).
pub const SLICES_MAX: u64 = 1 << 20;

/// Aggregates of the numeric samples in one slice.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NumericAggregate {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
    pub first: f64,
    pub last: f64,
    /// Σ value², for the standard deviation (and rollups, which must combine it).
    pub sum_squares: f64,
}

impl NumericAggregate {
    fn of(value: f64) -> NumericAggregate {
        NumericAggregate {
            count: 1,
            sum: value,
            min: value,
            max: value,
            first: value,
            last: value,
            sum_squares: value * value,
        }
    }

    /// Samples arrive in timestamp order, so `last` is simply the latest added.
    fn add(&mut self, value: f64) {
        self.count += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.last = value;
        self.sum_squares += value * value;
    }

    pub fn mean(&self) -> f64 {
        self.sum / self.count as f64
    }

    /// Population standard deviation of the slice's samples (0 for one sample).
    pub fn stddev(&self) -> f64 {
        let n = self.count as f64;
        let mean = self.sum / n;
        (self.sum_squares / n - mean * mean).max(0.0).sqrt()
    }
}

/// The latest value of a series.
#[derive(Clone, Debug, PartialEq)]
pub enum Latest {
    Numeric {
        ts_ms: i64,
        value: f64,
    },
    Text {
        ts_ms: i64,
        value: String,
    },
    /// The newest base period's merged histogram.
    Histogram {
        period_start_ms: i64,
        value: Histogram,
    },
}

/// Slices `[start_ms, end_ms)` at `period_ms`: both ends multiples of the period, the period a
/// multiple of the base period (so each base period falls in exactly one slice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slicing {
    pub start_ms: i64,
    pub end_ms: i64,
    pub period_ms: i64,
}

impl Slicing {
    fn check(&self, base_period_ms: i64) -> Result<usize, StoreError> {
        let p = self.period_ms;
        if p <= 0 || p % base_period_ms != 0 {
            return Err(StoreError::BadRange(
                "period is not a multiple of the base period",
            ));
        }
        if self.start_ms.rem_euclid(p) != 0 || self.end_ms.rem_euclid(p) != 0 {
            return Err(StoreError::BadRange(
                "start and end must be multiples of the period",
            ));
        }
        if self.end_ms < self.start_ms {
            return Err(StoreError::BadRange("end before start"));
        }
        let slices = (self.end_ms as i128 - self.start_ms as i128) / p as i128;
        if slices > SLICES_MAX as i128 {
            return Err(StoreError::BadRange("more than SLICES_MAX slices"));
        }
        Ok(slices as usize)
    }

    fn slice_of(&self, ts_ms: i64) -> usize {
        ((ts_ms as i128 - self.start_ms as i128) / self.period_ms as i128) as usize
    }
}

pub struct View<'a> {
    head: RwLockReadGuard<'a, Head>,
}

fn in_range<T>(points: &[Point<T>], start_ms: i64, end_ms: i64) -> &[Point<T>] {
    let from = points.partition_point(|p| p.ts_ms < start_ms);
    let to = points.partition_point(|p| p.ts_ms < end_ms);
    &points[from..to.max(from)]
}

impl<'a> View<'a> {
    pub(crate) fn new(head: RwLockReadGuard<'a, Head>) -> View<'a> {
        View { head }
    }

    pub fn base_period_ms(&self) -> i64 {
        self.head.base_period_ms
    }

    fn numeric_points(&self, id: SeriesId) -> &[Point<f64>] {
        match self.head.series.get(&id) {
            Some(SeriesHead::Numeric(points)) => points,
            _ => &[],
        }
    }

    /// Raw numeric samples in `[start_ms, end_ms)`, ascending, one per millisecond.
    pub fn raw_numeric(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(i64, f64)>, StoreError> {
        Ok(in_range(self.numeric_points(id), start_ms, end_ms)
            .iter()
            .map(|p| (p.ts_ms, p.value))
            .collect())
    }

    /// Text changes in `[start_ms, end_ms)`: a sample equal to the one before it is left out.
    /// The first sample in range is always returned (its earlier history may be outside).
    pub fn raw_text(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let Some(SeriesHead::Text(points)) = self.head.series.get(&id) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<(i64, String)> = Vec::new();
        for p in in_range(points, start_ms, end_ms) {
            if out.last().is_none_or(|(_, last)| *last != p.value) {
                out.push((p.ts_ms, p.value.clone()));
            }
        }
        Ok(out)
    }

    /// The merged histogram of each base period in `[start_ms, end_ms)`, by period start.
    pub fn raw_histograms(
        &self,
        id: SeriesId,
        start_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<(i64, Histogram)>, StoreError> {
        let Some(SeriesHead::Histogram(periods)) = self.head.series.get(&id) else {
            return Ok(Vec::new());
        };
        if end_ms <= start_ms {
            return Ok(Vec::new());
        }
        Ok(periods
            .range(start_ms..end_ms)
            .map(|(&start, h)| (start, h.clone()))
            .collect())
    }

    /// Numeric aggregates per slice (`None` for a slice without samples).
    pub fn numeric_aggregates(
        &self,
        id: SeriesId,
        slicing: Slicing,
    ) -> Result<Vec<Option<NumericAggregate>>, StoreError> {
        let slices = slicing.check(self.head.base_period_ms)?;
        let mut out: Vec<Option<NumericAggregate>> = vec![None; slices];
        for p in in_range(self.numeric_points(id), slicing.start_ms, slicing.end_ms) {
            match &mut out[slicing.slice_of(p.ts_ms)] {
                Some(agg) => agg.add(p.value),
                slot @ None => *slot = Some(NumericAggregate::of(p.value)),
            }
        }
        Ok(out)
    }

    /// One merged histogram per slice (empty where nothing was recorded).
    pub fn histograms(&self, id: SeriesId, slicing: Slicing) -> Result<Vec<Histogram>, StoreError> {
        let slices = slicing.check(self.head.base_period_ms)?;
        let mut out = vec![Histogram::new(); slices];
        if let Some(SeriesHead::Histogram(periods)) = self.head.series.get(&id) {
            for (&start, h) in periods.range(slicing.start_ms..slicing.end_ms) {
                out[slicing.slice_of(start)].merge(h);
            }
        }
        Ok(out)
    }

    /// The latest value of a series, if it has any.
    pub fn latest(&self, id: SeriesId) -> Result<Option<Latest>, StoreError> {
        let Some(series) = self.head.series.get(&id) else {
            return Ok(None);
        };
        Ok(match series {
            SeriesHead::Numeric(points) => points.last().map(|p| Latest::Numeric {
                ts_ms: p.ts_ms,
                value: p.value,
            }),
            SeriesHead::Text(points) => points.last().map(|p| Latest::Text {
                ts_ms: p.ts_ms,
                value: p.value.clone(),
            }),
            SeriesHead::Histogram(periods) => {
                periods
                    .last_key_value()
                    .map(|(&start, h)| Latest::Histogram {
                        period_start_ms: start,
                        value: h.clone(),
                    })
            }
        })
    }

    /// Series with data in the head.
    pub fn series_count(&self) -> usize {
        self.head.series.len()
    }
}
