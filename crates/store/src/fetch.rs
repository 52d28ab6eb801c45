//! Fetching many series at once: by ids or a tag query, per slice, merged across series with
//! group-by on tag categories, and counter rates.
//!
//! Everything here is built on one [`View`], so a fetch is one consistent snapshot. Merging
//! happens slice by slice into one accumulator per group: no per-series intermediate is kept
//! beyond the series being read.

use std::collections::BTreeMap;

use hist::{Accumulator, Histogram};

use crate::aggregate::NumericAggregate;
use crate::index::Snapshot;
use crate::read::{Slicing, View};
use crate::series::SeriesId;
use crate::StoreError;

/// Most series one fetch may read.
pub const FETCH_SERIES_MAX: usize = 100_000;

/// The values of the group-by categories that name a group (`None`: the series lacks it).
pub type GroupKey = Vec<Option<Vec<u8>>>;

/// One group's merged histograms, one per slice.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramGroup {
    pub key: GroupKey,
    pub series: u64,
    pub slices: Vec<Histogram>,
}

/// One group's combined numeric aggregates, one per slice.
#[derive(Clone, Debug, PartialEq)]
pub struct NumericGroup {
    pub key: GroupKey,
    pub series: u64,
    pub slices: Vec<Option<NumericAggregate>>,
}

fn check_count(ids: &[SeriesId]) -> Result<(), StoreError> {
    if ids.len() > FETCH_SERIES_MAX {
        return Err(StoreError::BadRange("more than FETCH_SERIES_MAX series"));
    }
    Ok(())
}

/// The group a series belongs to: its values of `categories`, in order.
pub fn group_key(
    index: &Snapshot<'_>,
    id: SeriesId,
    categories: &[Vec<u8>],
) -> Result<GroupKey, StoreError> {
    if categories.is_empty() {
        return Ok(Vec::new());
    }
    let Some(info) = index.series(id)? else {
        return Ok(vec![None; categories.len()]);
    };
    Ok(categories
        .iter()
        .map(|c| {
            info.key
                .tags()
                .iter()
                .find(|t| t.category() == c.as_slice())
                .map(|t| t.value().to_vec())
        })
        .collect())
}

/// Histograms of `ids` merged per slice, one result per group (all in one group when
/// `group_by` is empty). Series of other kinds contribute nothing.
pub fn merged_histograms(
    view: &View<'_>,
    index: &Snapshot<'_>,
    ids: &[SeriesId],
    slicing: Slicing,
    group_by: &[Vec<u8>],
) -> Result<Vec<HistogramGroup>, StoreError> {
    check_count(ids)?;
    let slices = slicing.check(view.base_period_ms())?;
    // Per group: its series count and one dense accumulator per slice.
    let mut groups: BTreeMap<GroupKey, (u64, Vec<Accumulator>)> = BTreeMap::new();
    for &id in ids {
        let key = group_key(index, id, group_by)?;
        // Each series' periods merge straight into its group's slices: no per-series result.
        let g = groups
            .entry(key)
            .or_insert_with(|| (0, vec![Accumulator::new(); slices]));
        view.accumulate_histograms(id, slicing, &mut g.1)?;
        g.0 += 1;
    }
    Ok(groups
        .into_iter()
        .map(|(key, (series, acc))| HistogramGroup {
            key,
            series,
            slices: acc.iter().map(Accumulator::to_histogram).collect(),
        })
        .collect())
}

/// Numeric aggregates of `ids` combined per slice (count, sum, sum of squares add; min, max
/// over all; first and last are the earliest and latest samples of any series in the slice).
pub fn merged_numeric(
    view: &View<'_>,
    index: &Snapshot<'_>,
    ids: &[SeriesId],
    slicing: Slicing,
    group_by: &[Vec<u8>],
) -> Result<Vec<NumericGroup>, StoreError> {
    check_count(ids)?;
    let mut groups: BTreeMap<GroupKey, NumericGroup> = BTreeMap::new();
    for &id in ids {
        let key = group_key(index, id, group_by)?;
        let slices = view.numeric_aggregates(id, slicing)?;
        match groups.get_mut(&key) {
            Some(g) => {
                for (acc, a) in g.slices.iter_mut().zip(&slices) {
                    *acc = match (*acc, a) {
                        (Some(x), Some(y)) => Some(x.combine(y)),
                        (x, None) => x,
                        (None, y) => *y,
                    };
                }
                g.series += 1;
            }
            None => {
                groups.insert(
                    key.clone(),
                    NumericGroup {
                        key,
                        series: 1,
                        slices,
                    },
                );
            }
        }
    }
    Ok(groups.into_values().collect())
}

/// Per-slice rate of a counter, per second: the increase over the slice divided by its length.
/// The increase sums the differences between consecutive samples whose later sample lies in
/// the slice — including the step from the last sample of the slice before, so slices add up
/// to the whole increase — and a drop is a counter reset: the new value counts whole (the
/// counter restarted from zero). `None` for a slice with no such step.
pub fn counter_rates(
    view: &View<'_>,
    id: SeriesId,
    slicing: Slicing,
) -> Result<Vec<Option<f64>>, StoreError> {
    // The sample before the first slice comes from at most one period earlier.
    let from_ms = slicing.start_ms.saturating_sub(slicing.period_ms);
    let with_before = Slicing {
        start_ms: from_ms,
        ..slicing
    };
    let parts = view.slice_aggregates(id, with_before)?;
    let seconds = slicing.period_ms as f64 / 1000.0;
    let mut out: Vec<Option<f64>> = Vec::with_capacity(parts.len().saturating_sub(1));
    let mut prev_last: Option<f64> = None;
    for (i, part) in parts.iter().enumerate() {
        let rate = part.map(|s| {
            let step_in = prev_last.map_or(0.0, |p| crate::aggregate::counter_step(p, s.agg.first));
            (prev_last, s.increase + step_in)
        });
        if i > 0 {
            // A slice with one sample and nothing before it has no step: no rate.
            out.push(rate.and_then(|(before, increase)| {
                let steps = before.is_some() || part.is_some_and(|s| s.agg.count > 1);
                // Divided once per slice, not per step: fewer roundings.
                steps.then_some(increase / seconds)
            }));
        }
        if let Some(s) = part {
            prev_last = Some(s.agg.last);
        } else if i == 0 {
            prev_last = None;
        }
    }
    Ok(out)
}
