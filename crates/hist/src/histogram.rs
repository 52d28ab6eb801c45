//! The sorted histogram: (bin, count) pairs in storage order, the form that is stored, merged,
//! serialized and queried.

use crate::bin::{next_key, prev_key, Bin, KEY_MAX, KEY_NAN};

/// Merges whose combined key range is at most this many bins go through a dense scratch array
/// (independent adds, no data-dependent branches); wider ones use a two-pointer merge.
const MERGE_DENSE_SPAN_MAX: usize = 8192;

/// A log-linear histogram in its sorted form.
///
/// Invariants (checked by `assert_invariants`): `keys` strictly ascending storage-order keys,
/// `counts` the same length, every count > 0.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    pub(crate) keys: Vec<u16>,
    pub(crate) counts: Vec<u64>,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.bins().map(|(b, c)| ((b.val(), b.exp()), c)))
            .finish()
    }
}

/// Which quantile definition to use (libcircllhist `hist_approx_quantile` / `..._quantile7`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantileType {
    /// Type 1: target rank `total·q`, rounded up within the bin.
    Type1,
    /// Type 7: target rank `floor((total−1)·q + 1)`.
    Type7,
}

/// The four threshold counts plus the count of the threshold's own bin (spec §7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThresholdCounts {
    pub below_inclusive: u64,
    pub below_exclusive: u64,
    pub above_inclusive: u64,
    pub above_exclusive: u64,
    pub nearby: u64,
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram::default()
    }

    pub fn with_capacity(bins: usize) -> Histogram {
        Histogram {
            keys: Vec::with_capacity(bins),
            counts: Vec::with_capacity(bins),
        }
    }

    /// Builds a histogram from (bin, count) pairs in any order; duplicates add up, zeros vanish.
    pub fn from_bins<I: IntoIterator<Item = (Bin, u64)>>(pairs: I) -> Histogram {
        let mut pairs: Vec<(u16, u64)> = pairs
            .into_iter()
            .filter(|&(_, c)| c > 0)
            .map(|(b, c)| (b.key(), c))
            .collect();
        Histogram::from_unsorted_keys(&mut pairs)
    }

    /// Builds a histogram from (bin, count) pairs already in storage order (strictly ascending
    /// `Bin`, so no duplicates) with every count > 0: no sort, no merge of duplicates. A decoder
    /// producing bins in order uses this; the order is checked in debug builds only (an
    /// unsorted input in a release build gives a histogram whose queries are wrong, never a
    /// panic).
    pub fn from_sorted_bins<I: IntoIterator<Item = (Bin, u64)>>(pairs: I) -> Histogram {
        let pairs = pairs.into_iter();
        let mut h = Histogram::with_capacity(pairs.size_hint().0);
        for (bin, count) in pairs {
            h.keys.push(bin.key());
            h.counts.push(count);
        }
        h.debug_check();
        h
    }

    /// As `from_sorted_bins`, from storage-order keys (`Bin::key`, `Histogram::keys`) and their
    /// counts: strictly ascending valid keys, counts > 0, equal lengths (checked in debug
    /// builds; in release a length mismatch keeps the shorter).
    pub fn from_sorted_keys(keys: &[u16], counts: &[u64]) -> Histogram {
        debug_assert_eq!(keys.len(), counts.len(), "one count per key");
        debug_assert!(
            keys.iter().all(|&k| crate::bin::key_is_valid(k)),
            "valid keys"
        );
        let n = keys.len().min(counts.len());
        let h = Histogram {
            keys: keys[..n].to_vec(),
            counts: counts[..n].to_vec(),
        };
        h.debug_check();
        h
    }

    /// As `from_sorted_keys`, taking the vectors instead of copying them: a caller merging
    /// over and over (a store's per-period merge) hands its buffers over and takes the old
    /// histogram's back with [`Histogram::into_key_vecs`], allocating nothing.
    pub fn from_sorted_key_vecs(mut keys: Vec<u16>, mut counts: Vec<u64>) -> Histogram {
        debug_assert_eq!(keys.len(), counts.len(), "one count per key");
        let n = keys.len().min(counts.len());
        keys.truncate(n);
        counts.truncate(n);
        let h = Histogram { keys, counts };
        h.debug_check();
        h
    }

    /// The key and count vectors (`keys()`, `counts()`), for reuse of their allocations.
    pub fn into_key_vecs(self) -> (Vec<u16>, Vec<u64>) {
        (self.keys, self.counts)
    }

    /// The populated bins' storage-order keys (`Bin::key`), strictly ascending.
    pub fn keys(&self) -> &[u16] {
        &self.keys
    }

    /// The populated bins' counts, in the order of `keys`; all > 0.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub(crate) fn from_unsorted_keys(pairs: &mut [(u16, u64)]) -> Histogram {
        pairs.sort_unstable_by_key(|&(k, _)| k);
        let mut h = Histogram::with_capacity(pairs.len());
        for &(key, count) in pairs.iter() {
            debug_assert!(count > 0);
            match h.keys.last() {
                Some(&last) if last == key => {
                    let c = h.counts.last_mut();
                    if let Some(c) = c {
                        *c = c.saturating_add(count);
                    }
                }
                _ => {
                    h.keys.push(key);
                    h.counts.push(count);
                }
            }
        }
        h.debug_check();
        h
    }

    /// Number of populated bins.
    pub fn bin_count(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Removes every bin, keeping the allocation.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.counts.clear();
    }

    /// The populated bins and their counts, in storage order (NaN first, then ascending).
    pub fn bins(&self) -> impl ExactSizeIterator<Item = (Bin, u64)> + '_ {
        self.keys
            .iter()
            .zip(&self.counts)
            .map(|(&k, &c)| (Bin::from_key(k), c))
    }

    /// Total number of samples including the NaN bin, saturating at `u64::MAX`.
    pub fn sample_count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// Samples outside the NaN bin, saturating.
    pub fn finite_count(&self) -> u64 {
        self.sample_count().saturating_sub(self.nan_count())
    }

    /// Samples in the NaN bin (NaN, ±inf, |x| ≥ 1e128).
    pub fn nan_count(&self) -> u64 {
        match self.keys.first() {
            Some(0) => self.counts[0],
            _ => 0,
        }
    }

    /// The count of one bin (0 if absent).
    pub fn count_of(&self, bin: Bin) -> u64 {
        match self.keys.binary_search(&bin.key()) {
            Ok(i) => self.counts[i],
            Err(_) => 0,
        }
    }

    pub fn insert(&mut self, value: f64) {
        self.insert_bin(Bin::from_f64(value), 1);
    }

    pub fn insert_n(&mut self, value: f64, count: u64) {
        self.insert_bin(Bin::from_f64(value), count);
    }

    /// Inserts `count` samples of `value · 10^scale`, binned with integer arithmetic.
    pub fn insert_intscale(&mut self, value: i64, scale: i32, count: u64) {
        self.insert_bin(Bin::from_intscale(value, scale), count);
    }

    /// Adds `count` to `bin`, saturating at `u64::MAX`.
    pub fn insert_bin(&mut self, bin: Bin, count: u64) {
        if count == 0 {
            return;
        }
        let key = bin.key();
        match self.keys.binary_search(&key) {
            Ok(i) => self.counts[i] = self.counts[i].saturating_add(count),
            Err(i) => {
                self.keys.insert(i, key);
                self.counts.insert(i, count);
            }
        }
    }

    /// Adds every bin of `other` into `self` (saturating).
    pub fn merge(&mut self, other: &Histogram) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            self.keys.extend_from_slice(&other.keys);
            self.counts.extend_from_slice(&other.counts);
            return;
        }
        let self_span = usize::from(self.keys[self.keys.len() - 1] - self.keys[0]) + 1;
        if other.keys.len() <= self.keys.len() && self_span <= MERGE_DENSE_SPAN_MAX {
            self.merge_in_place(other);
            return;
        }
        let lo = self.keys[0].min(other.keys[0]);
        let hi = self.keys[self.keys.len() - 1].max(other.keys[other.keys.len() - 1]);
        let span = usize::from(hi - lo) + 1;
        if span <= MERGE_DENSE_SPAN_MAX {
            let mut dense = vec![0u64; span];
            scatter_add(&mut dense, lo, self);
            scatter_add(&mut dense, lo, other);
            self.compact_from_dense(&dense, lo, self.keys.len() + other.keys.len());
        } else {
            *self = merge_two_pointer(self, other);
        }
        self.debug_check();
    }

    /// Merging a histogram over a similar range (the steady state: one period's samples into a
    /// longer aggregate) adds counts in place through a key → index map; only bins `self` lacks
    /// go through a (short) sorted merge.
    fn merge_in_place(&mut self, other: &Histogram) {
        let lo = self.keys[0];
        let span = usize::from(self.keys[self.keys.len() - 1] - lo) + 1;
        // Bin indexes fit in u16: there are at most 46,082 bins.
        let mut index = vec![u16::MAX; span];
        for (i, &key) in self.keys.iter().enumerate() {
            index[usize::from(key - lo)] = i as u16;
        }
        let mut missing = Histogram::new();
        for (&key, &count) in other.keys.iter().zip(&other.counts) {
            let slot = usize::from(key.wrapping_sub(lo));
            match index.get(slot) {
                Some(&i) if i != u16::MAX => {
                    let c = &mut self.counts[usize::from(i)];
                    *c = c.saturating_add(count);
                }
                _ => {
                    missing.keys.push(key);
                    missing.counts.push(count);
                }
            }
        }
        if !missing.is_empty() {
            *self = merge_two_pointer(self, &missing);
        }
        self.debug_check();
    }

    /// The merge of many histograms, one pass over their bins.
    pub fn merge_many(parts: &[&Histogram]) -> Histogram {
        let nonempty = parts.iter().filter(|h| !h.is_empty());
        let lo = nonempty.clone().map(|h| h.keys[0]).min();
        let hi = nonempty.clone().map(|h| h.keys[h.keys.len() - 1]).max();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Histogram::new();
        };
        let span = usize::from(hi - lo) + 1;
        if span <= MERGE_DENSE_SPAN_MAX {
            let mut dense = vec![0u64; span];
            let mut bins_total = 0;
            for h in nonempty {
                scatter_add(&mut dense, lo, h);
                bins_total += h.keys.len();
            }
            let mut out = Histogram::new();
            out.compact_from_dense(&dense, lo, bins_total.min(span));
            out.debug_check();
            return out;
        }
        let mut out = Histogram::new();
        for h in nonempty {
            out = merge_two_pointer(&out, h);
        }
        out
    }

    /// Rebuilds `self` from a dense count array starting at key `lo`; `bins_max` bounds the
    /// number of non-zero entries.
    fn compact_from_dense(&mut self, dense: &[u64], lo: u16, bins_max: usize) {
        // Write every slot unconditionally and advance only past non-zero ones: no branch on data.
        let cap = bins_max.min(dense.len()) + 1;
        self.keys.clear();
        self.counts.clear();
        self.keys.resize(cap, 0);
        self.counts.resize(cap, 0);
        let mut n = 0usize;
        for (i, &c) in dense.iter().enumerate() {
            self.keys[n] = lo + i as u16;
            self.counts[n] = c;
            n += usize::from(c != 0);
            if n == cap {
                break;
            }
        }
        assert!(
            n < cap,
            "dense merge produced more bins than its inputs had"
        );
        self.keys.truncate(n);
        self.counts.truncate(n);
    }

    /// Subtracts `other` bin by bin, flooring at zero. Returns `false` if any bin would have gone
    /// negative or a bin of `other` is missing from `self` (the C library's error flag).
    pub fn subtract(&mut self, other: &Histogram) -> bool {
        let mut exact = true;
        let mut i = 0;
        for (&key, &count) in other.keys.iter().zip(&other.counts) {
            while i < self.keys.len() && self.keys[i] < key {
                i += 1;
            }
            if i < self.keys.len() && self.keys[i] == key {
                if self.counts[i] < count {
                    exact = false;
                }
                self.counts[i] = self.counts[i].saturating_sub(count);
            } else {
                exact = false;
            }
        }
        self.drop_zero_bins();
        exact
    }

    fn drop_zero_bins(&mut self) {
        let mut n = 0;
        for i in 0..self.keys.len() {
            if self.counts[i] != 0 {
                self.keys[n] = self.keys[i];
                self.counts[n] = self.counts[i];
                n += 1;
            }
        }
        self.keys.truncate(n);
        self.counts.truncate(n);
        self.debug_check();
    }

    /// Index of the first non-NaN bin.
    fn finite_start(&self) -> usize {
        usize::from(self.keys.first() == Some(&0))
    }

    /// Σ count over non-NaN bins, as the C library accumulates it (in doubles, storage order).
    fn finite_total_f64(&self) -> f64 {
        self.counts[self.finite_start()..]
            .iter()
            .fold(0.0, |a, &c| a + c as f64)
    }

    /// Mean of the harmonic midpoints weighted by count; NaN if there are no finite samples.
    pub fn mean(&self) -> f64 {
        let (n, s1, _) = self.moments();
        if n == 0.0 {
            return f64::NAN;
        }
        s1 / n
    }

    /// Σ midpoint·count over finite bins (0 when empty).
    pub fn sum(&self) -> f64 {
        self.moments().1
    }

    /// Population standard deviation of the midpoints; NaN if there are no finite samples.
    pub fn stddev(&self) -> f64 {
        let (n, s1, s2) = self.moments();
        if n == 0.0 {
            return f64::NAN;
        }
        let m = s1 / n;
        (s2 / n - m * m).sqrt()
    }

    fn moments(&self) -> (f64, f64, f64) {
        let start = self.finite_start();
        let (mut n, mut s1, mut s2) = (0.0, 0.0, 0.0);
        for (&key, &count) in self.keys[start..].iter().zip(&self.counts[start..]) {
            let m = Bin::from_key(key).midpoint();
            let c = count as f64;
            n += c;
            s1 += m * c;
            s2 += m * m * c;
        }
        (n, s1, s2)
    }

    /// Quantiles of the finite samples (spec §5). `qs` must be ascending and within [0, 1];
    /// an empty histogram gives NaN for each.
    pub fn quantiles(&self, qs: &[f64], ty: QuantileType) -> Result<Vec<f64>, QuantileError> {
        let mut out = vec![f64::NAN; qs.len()];
        self.quantiles_into(qs, ty, &mut out)?;
        Ok(out)
    }

    /// As `quantiles`, writing into `out` (which must be as long as `qs`).
    pub fn quantiles_into(
        &self,
        qs: &[f64],
        ty: QuantileType,
        out: &mut [f64],
    ) -> Result<(), QuantileError> {
        assert_eq!(qs.len(), out.len(), "one output per quantile");
        check_sorted(qs)?;
        if let Some(index) = qs.iter().position(|q| !(0.0..=1.0).contains(q)) {
            return Err(QuantileError::OutOfRange {
                index,
                value: qs[index],
            });
        }
        let finite = &self.counts[self.finite_start()..];
        let total_exact = finite.iter().fold(0u64, |a, &c| a.saturating_add(c));
        if total_exact == 0 {
            out.fill(f64::NAN);
            return Ok(());
        }
        let keys = &self.keys[self.finite_start()..];
        let last = finite.len() - 1;
        let mut i = 0;
        if total_exact < EXACT_INT_F64_MAX {
            // Below 2^53 the C library's double running sums are exact integers: walk in integers
            // (no int → float conversions in the loop) and convert only where a quantile lands.
            let total = total_exact as f64;
            let (mut lower, mut upper) = (0u64, finite[0]);
            for (&q, slot) in qs.iter().zip(out.iter_mut()) {
                let target = quantile_target(total, q, ty);
                // For an integer u: u < target ⇔ u < ceil(target).
                let need = target.ceil() as u64;
                while i < last && upper < need {
                    i += 1;
                    lower = upper;
                    upper += finite[i];
                }
                *slot = value_in_bin(keys[i], finite[i], target, lower as f64, ty);
            }
            return Ok(());
        }
        let total = self.finite_total_f64();
        let (mut lower, mut upper) = (0.0, finite[0] as f64);
        for (&q, slot) in qs.iter().zip(out.iter_mut()) {
            let target = quantile_target(total, q, ty);
            while i < last && upper < target {
                i += 1;
                lower = upper;
                upper = lower + finite[i] as f64;
            }
            *slot = value_in_bin(keys[i], finite[i], target, lower, ty);
        }
        Ok(())
    }

    /// For each threshold t (ascending), the share of finite samples ≤ t, interpolating
    /// linearly inside the bin that contains t (spec §6). NaN for an empty histogram.
    pub fn inverse_quantiles(&self, thresholds: &[f64]) -> Result<Vec<f64>, QuantileError> {
        check_sorted(thresholds)?;
        let mut out = vec![f64::NAN; thresholds.len()];
        let total = self.finite_total_f64();
        if total == 0.0 {
            return Ok(out);
        }
        let mut start = self.finite_start();
        let mut t_i = 0;
        let mut below = 0.0;
        // Bins two or more below the first threshold's bin end at or below it: only their
        // counts matter, summed as the loop below would (same order, so the same doubles),
        // without their bounds.
        if let Some(t_key) = thresholds.first().copied().and_then(threshold_key) {
            let keys = &self.keys[start..];
            let skip = keys
                .partition_point(|&k| u32::from(k) < t_key)
                .saturating_sub(1);
            below = self.counts[start..start + skip]
                .iter()
                .fold(0.0, |a, &c| a + c as f64);
            start += skip;
        }
        for (&key, &count) in self.keys[start..].iter().zip(&self.counts[start..]) {
            if t_i == thresholds.len() {
                break;
            }
            let bin = Bin::from_key(key);
            let (lo, hi) = if bin.is_zero() {
                (-1e-128, 1e-128)
            } else {
                (bin.lower(), bin.upper())
            };
            let count = count as f64;
            while t_i < thresholds.len() && thresholds[t_i] < lo {
                out[t_i] = below / total;
                t_i += 1;
            }
            while t_i < thresholds.len() && thresholds[t_i] < hi {
                let t = thresholds[t_i];
                out[t_i] = if bin.is_zero() {
                    below / total
                } else {
                    (below + (t - lo) / (hi - lo) * count) / total
                };
                t_i += 1;
            }
            below += count;
        }
        for slot in &mut out[t_i..] {
            *slot = 1.0;
        }
        Ok(out)
    }

    /// Counts of finite samples relative to the bin of `threshold` (spec §7), comparing bins
    /// rather than doubles; `nearby` is `count_nearby`. Unlike the C library, NaN-bin samples are
    /// never counted as "above".
    pub fn threshold_counts(&self, threshold: f64) -> ThresholdCounts {
        let Some(t_key) = threshold_key(threshold) else {
            return ThresholdCounts::default();
        };
        let start = self.finite_start();
        let keys = &self.keys[start..];
        let counts = &self.counts[start..];
        let lt = keys.partition_point(|&k| u32::from(k) < t_key);
        let le = keys.partition_point(|&k| u32::from(k) <= t_key);
        let sum = |s: &[u64]| s.iter().fold(0u64, |a, &c| a.saturating_add(c));
        let below_exclusive = sum(&counts[..lt]);
        let below_inclusive = sum(&counts[..le]);
        let finite = sum(counts);
        ThresholdCounts {
            below_inclusive,
            below_exclusive,
            above_inclusive: finite.saturating_sub(below_exclusive),
            above_exclusive: finite.saturating_sub(below_inclusive),
            nearby: self.count_nearby(threshold),
        }
    }

    /// The count of the bin whose interval, computed in doubles as the C library does, contains
    /// `value` (0 if none: computed edges can leave a gap of a few ulps between adjacent bins).
    pub fn count_nearby(&self, value: f64) -> u64 {
        if value.is_nan() {
            return 0;
        }
        let center = Bin::from_f64(value).key();
        let candidates = [prev_key(center), Some(center), next_key(center)];
        for key in candidates.into_iter().flatten().filter(|&k| k != KEY_NAN) {
            let bin = Bin::from_key(key);
            let inside = if bin.is_zero() {
                -1e-128 < value && value < 1e-128
            } else if bin.edge() < 0.0 {
                bin.lower() < value && value <= bin.upper()
            } else {
                bin.lower() <= value && value < bin.upper()
            };
            if inside {
                return self.count_of(bin);
            }
        }
        0
    }

    /// Asserts the structural invariants; cheap enough for debug builds after every mutation.
    pub fn assert_invariants(&self) {
        assert_eq!(self.keys.len(), self.counts.len());
        assert!(
            self.keys.windows(2).all(|w| w[0] < w[1]),
            "keys must be strictly ascending"
        );
        assert!(self.counts.iter().all(|&c| c > 0), "no empty bins are kept");
        assert!(self.keys.last().is_none_or(|&k| k <= KEY_MAX));
    }

    #[inline]
    fn debug_check(&self) {
        if cfg!(debug_assertions) {
            self.assert_invariants();
        }
    }
}

use crate::error::QuantileError;

/// Integers below this are exact in an f64, and so are their sums while they stay below it.
const EXACT_INT_F64_MAX: u64 = 1 << 53;

/// The target rank of quantile `q` among `total` samples (spec §5).
#[inline]
fn quantile_target(total: f64, q: f64, ty: QuantileType) -> f64 {
    match ty {
        QuantileType::Type1 => total * q,
        QuantileType::Type7 => ((total - 1.0) * q + 1.0).floor(),
    }
}

/// The quantile value inside the bin where the walk stopped: `L + k/(n+1)·w` ("fair
/// resampling": the bin's n samples sit at evenly spaced points of its interval).
#[inline]
fn value_in_bin(key: u16, count: u64, target: f64, lower: f64, ty: QuantileType) -> f64 {
    let bin = Bin::from_key(key);
    if bin.is_zero() {
        return 0.0;
    }
    let k = match ty {
        QuantileType::Type1 => {
            let k = (target - lower).ceil();
            if k == 0.0 {
                1.0
            } else {
                k
            }
        }
        QuantileType::Type7 => target - lower,
    };
    // C computes count + 1 in u64, which wraps to 0 for a saturated bin and yields +inf; we keep
    // C's rounding everywhere else but not that overflow (see FORMAT.md).
    let n_plus_1 = match count.checked_add(1) {
        Some(c) => c as f64,
        None => count as f64 + 1.0,
    };
    bin.lower() + k / n_plus_1 * bin.width()
}

fn check_sorted(values: &[f64]) -> Result<(), QuantileError> {
    match values.windows(2).position(|w| w[0] > w[1]) {
        Some(i) => Err(QuantileError::NotSorted { index: i + 1 }),
        None => Ok(()),
    }
}

/// The threshold's position among finite-bin keys: values beyond ±1e128 sort past every finite
/// bin; `None` for NaN (nothing is below or above NaN).
fn threshold_key(threshold: f64) -> Option<u32> {
    if threshold.is_nan() {
        return None;
    }
    let bin = Bin::from_f64(threshold);
    if bin.is_nan() {
        return Some(if threshold > 0.0 {
            u32::from(KEY_MAX) + 1
        } else {
            0
        });
    }
    Some(u32::from(bin.key()))
}

fn scatter_add(dense: &mut [u64], lo: u16, h: &Histogram) {
    for (&key, &count) in h.keys.iter().zip(&h.counts) {
        let slot = &mut dense[usize::from(key - lo)];
        *slot = slot.saturating_add(count);
    }
}

fn merge_two_pointer(a: &Histogram, b: &Histogram) -> Histogram {
    let mut out = Histogram::with_capacity(a.keys.len() + b.keys.len());
    let (mut i, mut j) = (0, 0);
    while i < a.keys.len() && j < b.keys.len() {
        let (ka, kb) = (a.keys[i], b.keys[j]);
        if ka < kb {
            out.keys.push(ka);
            out.counts.push(a.counts[i]);
            i += 1;
        } else if kb < ka {
            out.keys.push(kb);
            out.counts.push(b.counts[j]);
            j += 1;
        } else {
            out.keys.push(ka);
            out.counts.push(a.counts[i].saturating_add(b.counts[j]));
            i += 1;
            j += 1;
        }
    }
    out.keys.extend_from_slice(&a.keys[i..]);
    out.counts.extend_from_slice(&a.counts[i..]);
    out.keys.extend_from_slice(&b.keys[j..]);
    out.counts.extend_from_slice(&b.counts[j..]);
    out.debug_check();
    out
}
