//! Numeric reads without Prometheus stale markers. Remote write stores them (the NaN with bits
//! `0x7ff0000000000002`, "this series ended") as numeric samples, and the store's per-slice
//! aggregates and rollups count them like any value, which would make a slice's sum, mean and
//! last NaN. A marker is not a value: every slice whose aggregate holds a NaN is computed again
//! here from its raw samples, markers left out. Only such slices are re-read, so the cost is
//! one raw read per slice where a series ended (or a real NaN was written). A slice older than
//! the raw retention keeps the rollup's aggregate.

use store::SeriesId;
use store::{SliceAggregate, Slicing, StoreError, View};

/// Prometheus's stale marker.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

fn holds_nan(s: &SliceAggregate) -> bool {
    s.agg.sum.is_nan() || s.agg.first.is_nan() || s.agg.last.is_nan() || s.increase.is_nan()
}

/// `View::slice_aggregates` with stale markers left out of every slice.
pub fn slice_aggregates(
    view: &View<'_>,
    id: SeriesId,
    slicing: Slicing,
) -> Result<Vec<Option<SliceAggregate>>, StoreError> {
    let mut parts = view.slice_aggregates(id, slicing)?;
    for (j, part) in parts.iter_mut().enumerate() {
        if !part.as_ref().is_some_and(holds_nan) {
            continue;
        }
        let from = slicing.start_ms + j as i64 * slicing.period_ms;
        let raw = view.raw_numeric(id, from, from + slicing.period_ms)?;
        if raw.is_empty() {
            continue;
        }
        let kept: Vec<(i64, f64)> = raw.into_iter().filter(|&(_, v)| !is_stale(v)).collect();
        *part = SliceAggregate::of_samples(&kept);
    }
    Ok(parts)
}

/// `View::numeric_aggregates` with stale markers left out.
pub fn numeric_aggregates(
    view: &View<'_>,
    id: SeriesId,
    slicing: Slicing,
) -> Result<Vec<Option<store::NumericAggregate>>, StoreError> {
    Ok(slice_aggregates(view, id, slicing)?
        .into_iter()
        .map(|s| s.map(|s| s.agg))
        .collect())
}

/// `store::fetch::counter_rates` over the slices without stale markers: per slice, the
/// increase (the steps between consecutive samples whose later one lies in the slice, a drop
/// counting the new value: a reset) divided by the slice's seconds.
pub fn counter_rates(
    view: &View<'_>,
    id: SeriesId,
    slicing: Slicing,
) -> Result<Vec<Option<f64>>, StoreError> {
    // The sample before the first slice comes from at most one period earlier.
    let with_before = Slicing {
        start_ms: slicing.start_ms.saturating_sub(slicing.period_ms),
        ..slicing
    };
    let parts = slice_aggregates(view, id, with_before)?;
    let seconds = slicing.period_ms as f64 / 1000.0;
    let mut out: Vec<Option<f64>> = Vec::with_capacity(parts.len().saturating_sub(1));
    let mut prev_last: Option<f64> = None;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(part.and_then(|s| {
                let step_in = prev_last.map_or(0.0, |p| store::counter_step(p, s.agg.first));
                // A slice with one sample and nothing before it has no step: no rate.
                let steps = prev_last.is_some() || s.agg.count > 1;
                steps.then_some((s.increase + step_in) / seconds)
            }));
        }
        match part {
            Some(s) => prev_last = Some(s.agg.last),
            None if i == 0 => prev_last = None,
            None => {}
        }
    }
    Ok(out)
}
