//! Numeric aggregates of a slice of time: what reads return per slice ([`NumericAggregate`])
//! and what rollups keep (`SliceAggregate`, with the counter increase), with the rules for
//! adding samples and combining slices. A leaf: the chunk codec for rollups (`encode::aggregate`),
//! blocks, reads and rollups all build on it.

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
    /// Timestamps of `first` and `last`.
    pub first_ts_ms: i64,
    pub last_ts_ms: i64,
}

impl NumericAggregate {
    pub(crate) fn of(ts_ms: i64, value: f64) -> NumericAggregate {
        NumericAggregate {
            first_ts_ms: ts_ms,
            last_ts_ms: ts_ms,
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
    pub(crate) fn add(&mut self, ts_ms: i64, value: f64) {
        self.add_but_extremes(ts_ms, value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// `add` without the least and greatest value (a caller keeping them itself).
    pub(crate) fn add_but_extremes(&mut self, ts_ms: i64, value: f64) {
        self.last_ts_ms = ts_ms;
        self.count += 1;
        self.sum += value;
        self.last = value;
        self.sum_squares += value * value;
    }

    /// Both slices' samples together (another series', or another source's): `first` and
    /// `last` are the earliest and latest of either (on a tie, `self`'s first and `other`'s last).
    pub fn combine(self, other: &NumericAggregate) -> NumericAggregate {
        let (first, first_ts_ms) = if other.first_ts_ms < self.first_ts_ms {
            (other.first, other.first_ts_ms)
        } else {
            (self.first, self.first_ts_ms)
        };
        let (last, last_ts_ms) = if other.last_ts_ms >= self.last_ts_ms {
            (other.last, other.last_ts_ms)
        } else {
            (self.last, self.last_ts_ms)
        };
        NumericAggregate {
            count: self.count + other.count,
            sum: self.sum + other.sum,
            min: self.min.min(other.min),
            max: self.max.max(other.max),
            first,
            last,
            sum_squares: self.sum_squares + other.sum_squares,
            first_ts_ms,
            last_ts_ms,
        }
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

/// A numeric rollup slice: the slice's aggregates plus the counter increase inside it (the sum
/// of its steps between consecutive samples, a drop counting the new value: a reset).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SliceAggregate {
    pub agg: NumericAggregate,
    pub increase: f64,
}

/// The step a counter made from `a` to `b` (a drop is a reset: the new value counts whole).
pub fn counter_step(a: f64, b: f64) -> f64 {
    if b >= a {
        b - a
    } else {
        b
    }
}

/// Prometheus's stale marker (a NaN with this payload, sent by remote write when a series
/// disappears): kept bit for bit for PromQL, but the end of a series, not a sample, so no
/// aggregate counts it.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

impl SliceAggregate {
    /// The aggregate of samples in ascending time order, stale markers left out (`None` when
    /// no sample is left).
    pub fn of_samples(samples: &[(i64, f64)]) -> Option<SliceAggregate> {
        if samples.iter().any(|(_, v)| v.to_bits() == STALE_NAN_BITS) {
            let real: Vec<(i64, f64)> = samples
                .iter()
                .copied()
                .filter(|(_, v)| v.to_bits() != STALE_NAN_BITS)
                .collect();
            return SliceAggregate::of_real_samples(&real);
        }
        SliceAggregate::of_real_samples(samples)
    }

    fn of_real_samples(samples: &[(i64, f64)]) -> Option<SliceAggregate> {
        let (&(t0, v0), rest) = samples.split_first()?;
        let mut agg = NumericAggregate::of(t0, v0);
        let mut increase = 0.0;
        let mut prev = v0;
        // The sums run in sample order (their rounding is the model's); the least and greatest
        // run as two interleaved chains, joined at the end (as slices combine), so each
        // sample's compare does not wait on the previous one's.
        let (mut min_odd, mut max_odd) = (v0, v0);
        for pair in rest.chunks(2) {
            let (t, v) = pair[0];
            agg.add(t, v);
            increase += counter_step(prev, v);
            prev = v;
            if let Some(&(t, v)) = pair.get(1) {
                agg.add_but_extremes(t, v);
                min_odd = min_odd.min(v);
                max_odd = max_odd.max(v);
                increase += counter_step(prev, v);
                prev = v;
            }
        }
        agg.min = agg.min.min(min_odd);
        agg.max = agg.max.max(max_odd);
        Some(SliceAggregate { agg, increase })
    }

    /// `self` followed in time by `next` (a later, non-overlapping stretch of the same series):
    /// the increases add, plus the step from `self`'s last sample to `next`'s first.
    pub fn then(self, next: &SliceAggregate) -> SliceAggregate {
        debug_assert!(self.agg.last_ts_ms < next.agg.first_ts_ms);
        SliceAggregate {
            agg: self.agg.combine(&next.agg),
            increase: self.increase + counter_step(self.agg.last, next.agg.first) + next.increase,
        }
    }
}

#[cfg(test)]
mod stale_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A stale marker is neither counted nor summed, nor the last value; a slice holding only
    /// one has no aggregate.
    #[test]
    fn stale_markers_are_not_samples() {
        let stale = f64::from_bits(STALE_NAN_BITS);
        let s = SliceAggregate::of_samples(&[(1, 2.0), (2, stale), (3, 5.0), (4, stale)]).unwrap();
        assert_eq!((s.agg.count, s.agg.sum, s.agg.last), (2, 7.0, 5.0));
        assert_eq!(s.increase, 3.0);
        assert!(SliceAggregate::of_samples(&[(2, stale)]).is_none());
        // Any other NaN stays a value.
        let s = SliceAggregate::of_samples(&[(1, f64::NAN)]).unwrap();
        assert_eq!(s.agg.count, 1);
    }
}
