//! Tables that spare the conversion of base-2 buckets its per-bucket transcendental math.
//!
//! Splitting a bucket `(2^la, 2^lb]` computes `2^la` and `2^lb` and, for every llhist bin edge
//! inside it, `log2(edge)`: three to five `exp2`/`log2` calls per bucket were 43 % of the
//! server's time on remote-write native histograms. Both have few distinct inputs:
//! - bin edges are 23,040 values (90 mantissas × 256 decades): their `log2` is computed once,
//!   with the same `f64::log2` on the same `f64`, so every share is the same double as before;
//! - a schema's bucket bounds are `2^(i · 2^−s)`: `2^q · 2^(r / 2^s)` for the integer `q` and the
//!   fraction `r / 2^s`, i.e. a table of `2^s` fractions scaled by an exact power of two. That
//!   this equals `f64::exp2` is not assumed: it is checked, once per schema, for every index
//!   whose bounds lie within llhist's range; a schema where any differs keeps the direct
//!   computation (the results are the same double either way, which the property test
//!   against the direct path checks too).
//!
//! Built on first use (about a millisecond per schema for schema 8, the largest).

use std::sync::OnceLock;

use crate::bin::{Bin, Parts};

/// Bounds whose log2 lies within this are in the tables (llhist's range is ±log2(1e128) ≈
/// ±425.2; beyond it every bin is the zero or NaN bin and the direct path is cheap enough).
pub(super) const LOG2_RANGE: f64 = 440.0;
/// Schemas with tables: Prometheus's exponential schemas (OTel scales in the same range too).
const SCHEMA_MIN: i32 = -4;
const SCHEMA_MAX: i32 = 8;

/// `log2` of each positive regular bin's upper edge, by `(exp + 128) · 90 + val_abs − 10`.
fn edge_log2_table() -> &'static [f64] {
    static TABLE: OnceLock<Vec<f64>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut out = Vec::with_capacity(256 * 90);
        for exp in -128..=127 {
            for val_abs in 10..=99 {
                let bin = Bin::from_parts(Parts {
                    negative: false,
                    exp,
                    val_abs,
                });
                out.push(bin.upper().log2());
            }
        }
        out
    })
}

/// `log2(Bin::from_parts(parts).upper())` for a positive regular bin's parts, the same double.
#[inline]
pub(super) fn edge_log2(parts: Parts) -> f64 {
    let at = (parts.exp + 128) as usize * 90 + parts.val_abs as usize - 10;
    edge_log2_table()[at]
}

/// One schema's bounds: `2^(r / 2^s)` for `r` in `0..2^s` (one entry for schemas ≤ 0).
#[derive(Debug)]
pub(super) struct SchemaBounds {
    schema: i32,
    fractions: Vec<f64>,
}

impl SchemaBounds {
    /// `2^(index · 2^−schema)`, bit-identical to `f64::exp2` of that (checked when built), for
    /// `|index · 2^−schema| ≤ LOG2_RANGE`.
    #[inline]
    pub(super) fn bound(&self, index: i64) -> f64 {
        if self.schema <= 0 {
            return scale2(1.0, index << -self.schema);
        }
        let q = index >> self.schema;
        let r = (index & ((1i64 << self.schema) - 1)) as usize;
        scale2(self.fractions[r], q)
    }

    /// Whether `bound` answers for indexes with `|log2 bound| ≤ range`.
    fn agrees_with_exp2(&self, range: f64) -> bool {
        let step = (-f64::from(self.schema)).exp2();
        let last = (range / step).ceil() as i64;
        (-last..=last).all(|i| self.bound(i).to_bits() == (i as f64 * step).exp2().to_bits())
    }
}

/// `x · 2^q` for `|q| ≤ 1023`-ish exponents that keep the result normal: exact.
#[inline]
fn scale2(x: f64, q: i64) -> f64 {
    // Two factors, each a normal power of two, reach every q in ±2000 without overflow.
    let half = q / 2;
    x * pow2(half) * pow2(q - half)
}

#[inline]
fn pow2(q: i64) -> f64 {
    f64::from_bits(((q + 1023).clamp(1, 2046) as u64) << 52)
}

/// The bounds of `schema`, or `None` where there is no table (outside −4..=8, or a platform
/// whose `exp2` does not agree with the table at some bound).
pub(super) fn schema_bounds(schema: i32) -> Option<&'static SchemaBounds> {
    const N: usize = (SCHEMA_MAX - SCHEMA_MIN + 1) as usize;
    static TABLES: [OnceLock<Option<SchemaBounds>>; N] = [const { OnceLock::new() }; N];
    if !(SCHEMA_MIN..=SCHEMA_MAX).contains(&schema) {
        return None;
    }
    TABLES[(schema - SCHEMA_MIN) as usize]
        .get_or_init(|| {
            let steps = if schema > 0 { 1usize << schema } else { 1 };
            let fractions = (0..steps)
                .map(|r| (r as f64 / steps as f64).exp2())
                .collect();
            let bounds = SchemaBounds { schema, fractions };
            bounds.agrees_with_exp2(LOG2_RANGE).then_some(bounds)
        })
        .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_has_a_table_here() {
        for schema in SCHEMA_MIN..=SCHEMA_MAX {
            assert!(schema_bounds(schema).is_some(), "schema {schema}");
        }
        assert!(schema_bounds(9).is_none());
    }

    #[test]
    fn edges_match_the_bins() {
        for (exp, val_abs) in [(-128, 10), (0, 10), (0, 99), (127, 99), (-3, 47)] {
            let parts = Parts {
                negative: false,
                exp,
                val_abs,
            };
            let want = Bin::from_parts(parts).upper().log2();
            assert_eq!(edge_log2(parts).to_bits(), want.to_bits());
        }
    }
}
