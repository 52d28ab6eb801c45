//! The accumulator: a histogram in dense form, for merging many histograms into one.
//!
//! Merging sorted histograms one by one pays for a merge of two sorted lists (or an index
//! build) every time. A read that merges thousands of stored histograms into one per time slice
//! instead adds each bin's count into a dense array indexed by storage-order key: one add per
//! bin, no branch on the data, no allocation once the array covers the keys seen. The sorted
//! form is built once, at the end.

use crate::bin::{key_is_valid, KEY_MAX};
use crate::histogram::Histogram;

/// The widest key span an accumulator covers: every key (storage-order keys are `u16`, the
/// largest valid one is `KEY_MAX`), 512 KiB of counts at most.
pub const ACCUMULATOR_SPAN_MAX: usize = KEY_MAX as usize + 1;

/// A histogram under construction: counts by storage-order key over the span of keys added so
/// far. Counts saturate at `u64::MAX`, as `Histogram::merge` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accumulator {
    /// Key of `dense[0]`.
    lo: u16,
    /// Counts of keys `lo .. lo + dense.len()`; empty until the first bin.
    dense: Vec<u64>,
}

impl Accumulator {
    pub fn new() -> Accumulator {
        Accumulator::default()
    }

    /// Whether no bin has a count.
    pub fn is_empty(&self) -> bool {
        self.dense.iter().all(|&c| c == 0)
    }

    /// Forgets every count, keeping the covered span and its allocation.
    pub fn clear(&mut self) {
        self.dense.fill(0);
    }

    /// The covered keys, `lo ..= hi` (empty before the first `cover`).
    pub fn span(&self) -> Option<(u16, u16)> {
        let n = self.dense.len();
        (n > 0).then(|| (self.lo, self.lo + (n - 1) as u16))
    }

    /// Widens the covered span to include keys `lo ..= hi` (counts kept).
    #[inline]
    pub fn cover(&mut self, lo: u16, hi: u16) {
        debug_assert!(lo <= hi && hi <= KEY_MAX, "keys {lo}..={hi}");
        let hi = hi.min(KEY_MAX);
        let lo = lo.min(hi);
        match self.span() {
            Some((have_lo, have_hi)) if have_lo <= lo && hi <= have_hi => {}
            None => {
                self.lo = lo;
                self.dense = vec![0; usize::from(hi - lo) + 1];
            }
            Some((have_lo, have_hi)) => {
                // A side that must grow grows by at least the span it has (clamped to the key
                // range): bins added in key order, a group at a time, widened the span once per
                // group and copied it each time.
                let have = have_hi - have_lo + 1;
                let lo = if lo < have_lo {
                    lo.min(have_lo.saturating_sub(have))
                } else {
                    have_lo
                };
                let hi = if hi > have_hi {
                    hi.max(have_hi.saturating_add(have).min(KEY_MAX))
                } else {
                    have_hi
                };
                self.widen(lo, hi)
            }
        }
    }

    #[cold]
    fn widen(&mut self, lo: u16, hi: u16) {
        let mut dense = vec![0; usize::from(hi - lo) + 1];
        let at = usize::from(self.lo - lo);
        dense[at..at + self.dense.len()].copy_from_slice(&self.dense);
        self.lo = lo;
        self.dense = dense;
        assert!(self.dense.len() <= ACCUMULATOR_SPAN_MAX);
    }

    /// Adds every bin of `h`.
    pub fn add(&mut self, h: &Histogram) {
        self.add_keys(h.keys(), h.counts());
    }

    /// Adds bins given as strictly ascending storage-order keys (`Bin::key`) and their counts
    /// (zero counts are allowed and add nothing). Counts may be narrower than `u64` where the
    /// caller keeps them so (a store buffering samples in `u32`s).
    #[inline]
    pub fn add_keys<C: Copy + Into<u64>>(&mut self, keys: &[u16], counts: &[C]) {
        debug_assert_eq!(keys.len(), counts.len(), "one count per key");
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]), "ascending keys");
        let (Some(&first), Some(&last)) = (keys.first(), keys.last()) else {
            return;
        };
        self.cover(first, last);
        let lo = self.lo;
        for (&k, &c) in keys.iter().zip(counts) {
            debug_assert!(key_is_valid(k), "key {k}");
            if let Some(slot) = self.dense.get_mut(usize::from(k.wrapping_sub(lo))) {
                *slot = slot.saturating_add(c.into());
            }
        }
    }

    /// Adds `count` to the bin at storage-order key `key`.
    #[inline]
    pub fn add_key(&mut self, key: u16, count: u64) {
        debug_assert!(key_is_valid(key), "key {key}");
        self.cover(key, key);
        if let Some(slot) = self.dense.get_mut(usize::from(key.wrapping_sub(self.lo))) {
            *slot = slot.saturating_add(count);
        }
    }

    /// Adds `other`'s counts.
    pub fn add_accumulator(&mut self, other: &Accumulator) {
        let Some((lo, hi)) = other.span() else {
            return;
        };
        self.cover(lo, hi);
        let at = usize::from(lo - self.lo);
        for (slot, &c) in self.dense[at..].iter_mut().zip(&other.dense) {
            *slot = slot.saturating_add(c);
        }
    }

    /// The sorted histogram of the counts added so far.
    pub fn to_histogram(&self) -> Histogram {
        let n = self.dense.iter().filter(|&&c| c != 0).count();
        let mut h = Histogram::with_capacity(n);
        for (i, &c) in self.dense.iter().enumerate() {
            if c != 0 {
                h.keys.push(self.lo + i as u16);
                h.counts.push(c);
            }
        }
        if cfg!(debug_assertions) {
            h.assert_invariants();
        }
        h
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::Bin;

    fn hist(values: &[(f64, u64)]) -> Histogram {
        let mut h = Histogram::new();
        for &(v, n) in values {
            h.insert_n(v, n);
        }
        h
    }

    #[test]
    fn accumulating_equals_merging_in_any_order() {
        let parts = [
            hist(&[(1.0, 3), (2.5, 1), (-7.0, 2)]),
            hist(&[(f64::NAN, 4), (1.0, 1), (1e-30, 9)]),
            hist(&[]),
            hist(&[(0.0, 2), (3e40, 1), (-1e-5, 7)]),
            hist(&[(2.5, 5)]),
        ];
        let mut merged = Histogram::new();
        for p in &parts {
            merged.merge(p);
        }
        let mut acc = Accumulator::new();
        assert!(acc.is_empty());
        for p in parts.iter().rev() {
            acc.add(p);
        }
        assert_eq!(acc.to_histogram(), merged);
        let mut two = Accumulator::new();
        two.add_key(Bin::from_f64(2.5).key(), 6);
        let mut rest = Accumulator::new();
        for p in &parts {
            rest.add(p);
        }
        rest.add_accumulator(&two);
        merged.merge(&hist(&[(2.5, 6)]));
        assert_eq!(rest.to_histogram(), merged);
        rest.clear();
        assert!(rest.is_empty());
        assert_eq!(rest.to_histogram(), Histogram::new());
    }

    #[test]
    fn counts_saturate_like_merge() {
        let big = hist(&[(1.0, u64::MAX - 1)]);
        let mut acc = Accumulator::new();
        acc.add(&big);
        acc.add(&big);
        let mut merged = big.clone();
        merged.merge(&big);
        assert_eq!(acc.to_histogram(), merged);
        assert_eq!(merged.sample_count(), u64::MAX);
    }

    #[test]
    fn sorted_constructors_equal_from_bins() {
        let h = hist(&[(f64::NAN, 1), (-3.0, 2), (0.0, 5), (0.25, 1), (9e9, 3)]);
        let bins: Vec<(Bin, u64)> = h.bins().collect();
        assert_eq!(Histogram::from_sorted_bins(bins.iter().copied()), h);
        assert_eq!(Histogram::from_sorted_keys(h.keys(), h.counts()), h);
        assert_eq!(Histogram::from_bins(bins.into_iter().rev()), h);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "strictly ascending")]
    fn from_sorted_bins_rejects_unsorted_input_in_debug() {
        let a = Bin::from_f64(1.0);
        let b = Bin::from_f64(2.0);
        let _ = Histogram::from_sorted_bins([(b, 1), (a, 1)]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "strictly ascending")]
    fn from_sorted_bins_rejects_duplicates_in_debug() {
        let a = Bin::from_f64(1.0);
        let _ = Histogram::from_sorted_bins([(a, 1), (a, 2)]);
    }
}
