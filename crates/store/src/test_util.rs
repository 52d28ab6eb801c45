//! Helpers for the crate's unit tests.

use hist::Histogram;

/// A histogram of `(value, count)` pairs.
pub(crate) fn histogram_of(values: &[(f64, u64)]) -> Histogram {
    let mut h = Histogram::new();
    for &(v, n) in values {
        h.insert_n(v, n);
    }
    h
}
