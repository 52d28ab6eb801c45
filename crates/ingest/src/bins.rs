//! Histogram bins as storage-order keys (`hist::Bin::key`), for the parsers' per-bin loops.

use hist::Histogram;

/// `hist::Bin::new(val, exp).map(Bin::key)`, written out so that per-bin loops have no call in
/// them (`Bin::new` is not inlined across crates); a test compares the two for every
/// pair.
#[inline(always)]
pub(crate) fn bin_key(val: i8, exp: i8) -> Option<u16> {
    const DECADE_SHIFT: i32 = 7;
    /// `Bin::ZERO.key()` and `Bin::NAN.key()`.
    const KEY_ZERO: u16 = 255 << 7 | 127;
    const KEY_NAN: u16 = 0;
    let (v, e) = (i32::from(val), i32::from(exp));
    let key = match v {
        10..=99 => ((384 + e) << DECADE_SHIFT | (v - 9)) as u16,
        -99..=-10 => ((127 - e) << DECADE_SHIFT | (100 + v)) as u16,
        0 => KEY_ZERO,
        -1 if e == 0 => KEY_NAN,
        _ => return None,
    };
    Some(key)
}

/// Keys and counts of one histogram being collected, reused between histograms.
#[derive(Default)]
pub(crate) struct KeyedBins {
    pub keys: Vec<u16>,
    pub counts: Vec<u64>,
    /// Scratch for the sort when the bins did not come in order.
    pairs: Vec<(u16, u64)>,
}

impl KeyedBins {
    pub fn clear(&mut self) {
        self.keys.clear();
        self.counts.clear();
    }

    #[inline]
    pub fn push(&mut self, key: u16, count: u64) {
        self.keys.push(key);
        self.counts.push(count);
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The histogram of the collected bins (repeats add up, zero counts vanish); leaves them
    /// empty. Uploads list bins in storage order (what `Histogram::to_text` and Circonus'
    /// libraries print), so when the keys are strictly ascending with non-zero counts they are
    /// copied as they are: no sort, no intermediate vector.
    pub fn take_histogram(&mut self) -> Histogram {
        let in_order =
            self.counts.iter().all(|&c| c != 0) && self.keys.windows(2).all(|w| w[0] < w[1]);
        if !in_order {
            let pairs = &mut self.pairs;
            pairs.clear();
            pairs.extend(
                self.keys
                    .iter()
                    .copied()
                    .zip(self.counts.iter().copied())
                    .filter(|&(_, c)| c != 0),
            );
            pairs.sort_unstable_by_key(|&(key, _)| key);
            self.keys.clear();
            self.counts.clear();
            for &(key, count) in pairs.iter() {
                match (self.keys.last(), self.counts.last_mut()) {
                    (Some(&last), Some(total)) if last == key => {
                        *total = total.saturating_add(count);
                    }
                    _ => {
                        self.keys.push(key);
                        self.counts.push(count);
                    }
                }
            }
        }
        let histogram = Histogram::from_sorted_keys(&self.keys, &self.counts);
        self.clear();
        histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hist::Bin;

    #[test]
    fn bin_key_is_hist_key_for_every_pair() {
        for val in i8::MIN..=i8::MAX {
            for exp in i8::MIN..=i8::MAX {
                let expected = Bin::new(val, exp).map(Bin::key);
                assert_eq!(bin_key(val, exp), expected, "({val}, {exp})");
            }
        }
    }

    #[test]
    fn unordered_bins_merge_like_from_bins() {
        let pairs = [
            (50, 2, 3),
            (12, -3, 5),
            (50, 2, 4),
            (0, 7, 2),
            (-25, 1, 0),
            (-1, 0, 1),
        ];
        let mut bins = KeyedBins::default();
        for &(val, exp, count) in &pairs {
            bins.push(bin_key(val, exp).unwrap(), count);
        }
        let expected = Histogram::from_bins(
            pairs
                .iter()
                .map(|&(val, exp, count)| (Bin::new(val, exp).unwrap(), count)),
        );
        assert_eq!(bins.take_histogram(), expected);
        assert!(bins.is_empty());
        assert_eq!(expected.count_of(Bin::new(50, 2).unwrap()), 7);
        assert_eq!(expected.bin_count(), 4);
    }
}
