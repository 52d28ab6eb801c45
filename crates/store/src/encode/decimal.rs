//! Decimal values and the adaptive Rice parameter, shared by the numeric chunk (`numeric`) and
//! the head's appendable numeric streams (`numeric_stream`).
//!
//! Most numbers a monitoring system receives were printed in decimal by their sender (`23.47`,
//! `0.5`, `1200`): each is exactly `m / 10^d` for an integer `m` and a few decimals `d`, i.e.
//! parsing the text gives the f64 nearest to `m · 10^−d`, which is what dividing `m` by the
//! (exact) power of ten gives too. Coding `m` instead of the f64's bits turns a gauge with noise
//! in its second decimal into small integer steps (a few bits), where XOR of the f64 bits costs
//! most of the mantissa. A value qualifies only when the division gives back its exact bits, so
//! the mapping is lossless by construction; anything else (full-precision floats, NaN, ±inf,
//! −0.0) stays with XOR coding.

/// Integers of at most this magnitude are exact in an f64.
pub const INT_EXACT_MAX: i64 = 1 << 53;

/// Most decimals a decimal value may have (10^15 · 2^53 is still below f64's range, and
/// `10^d` is exact in an f64 up to 10^22).
pub const DECIMALS_MAX: u8 = 15;

const POW10: [f64; DECIMALS_MAX as usize + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// The value `m / 10^d`, as a decoder computes it.
#[inline]
pub fn value_of(m: i64, decimals: u8) -> f64 {
    m as f64 / POW10[usize::from(decimals.min(DECIMALS_MAX))]
}

/// `m` with `value_of(m, d)` bit-identical to `v` and `|m| ≤ 2^53`, if there is one.
#[inline]
pub fn mantissa(v: f64, decimals: u8) -> Option<i64> {
    let scale = *POW10.get(usize::from(decimals))?;
    let m = (v * scale).round();
    // ±inf are beyond the bound too.
    if m.is_nan() || m.abs() > INT_EXACT_MAX as f64 {
        return None;
    }
    let m = m as i64;
    // From the integer, as the decoder does: −0.0 comes back as +0.0 and is refused here.
    (value_of(m, decimals).to_bits() == v.to_bits()).then_some(m)
}

/// The fewest decimals `≥ at_least` that write `v` exactly, with its mantissa.
pub fn decimals_of(v: f64, at_least: u8) -> Option<(u8, i64)> {
    if !v.is_finite() {
        return None;
    }
    for d in at_least..=DECIMALS_MAX {
        if let Some(m) = mantissa(v, d) {
            return Some((d, m));
        }
        if (v * POW10[usize::from(d)]).abs() > INT_EXACT_MAX as f64 {
            return None;
        }
    }
    None
}

/// Largest adaptive Rice parameter: residuals of 2^53-bounded integers need no more, and a
/// larger one would cost bits on every later small residual.
pub const ADAPTIVE_K_MAX: u32 = 54;
/// Residuals counted before the sums are halved: the parameter follows the last few dozen.
const ADAPTIVE_WINDOW: u32 = 32;
/// A residual adds at most this to the sum, so one outlier moves `k` by a few steps, not 40.
const ADAPTIVE_SAMPLE_MAX: u64 = 1 << 40;

/// The Rice parameter for the next residual, from the mean of the recent ones (the LOCO-I
/// rule: the least `k` with `n · 2^k ≥ sum`, ≈ log2 of the mean). Encoder and decoder update it
/// identically after every residual, so nothing about it is stored but its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveK {
    sum: u64,
    n: u32,
}

impl AdaptiveK {
    /// A state whose first parameter is `k` (≤ `ADAPTIVE_K_MAX`).
    pub fn starting_at(k: u32) -> AdaptiveK {
        let k = k.min(ADAPTIVE_K_MAX);
        // n · 2^(k−1) < sum ≤ n · 2^k with n = 2.
        AdaptiveK {
            sum: 2u64 << k,
            n: 2,
        }
    }

    #[inline]
    pub fn k(&self) -> u32 {
        // `n << k0` has the bit length of `sum`: it is at least `sum` (k0 is the least such k,
        // as `n << (k0 − 1)` is shorter than `sum`), or the next k is.
        let bits = |x: u64| 64 - x.leading_zeros();
        let k0 = bits(self.sum).saturating_sub(bits(u64::from(self.n)));
        let k = k0 + u32::from((u64::from(self.n) << k0) < self.sum);
        k.min(ADAPTIVE_K_MAX)
    }

    #[inline]
    pub fn update(&mut self, residual: u64) {
        self.sum += residual.min(ADAPTIVE_SAMPLE_MAX);
        self.n += 1;
        if self.n >= ADAPTIVE_WINDOW {
            self.sum >>= 1;
            self.n >>= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimal_text_maps_to_its_digits() {
        assert_eq!(decimals_of(23.47, 0), Some((2, 2347)));
        assert_eq!(decimals_of(-0.5, 0), Some((1, -5)));
        assert_eq!(decimals_of(1200.0, 0), Some((0, 1200)));
        assert_eq!(decimals_of(1200.0, 3), Some((3, 1_200_000)));
        assert_eq!(decimals_of(0.1 + 0.2, 0), None);
        assert_eq!(decimals_of(-0.0, 0), None);
        assert_eq!(decimals_of(f64::NAN, 0), None);
        assert_eq!(decimals_of(f64::INFINITY, 0), None);
        assert_eq!(decimals_of(1e300, 0), None);
        assert_eq!(mantissa(0.1, 0), None);
    }

    #[test]
    fn adaptive_k_follows_the_mean() {
        let mut a = AdaptiveK::starting_at(0);
        for _ in 0..100 {
            a.update(1000);
        }
        assert_eq!(a.k(), 10);
        for _ in 0..200 {
            a.update(3);
        }
        assert_eq!(a.k(), 2);
        assert_eq!(AdaptiveK::starting_at(7).k(), 7);
        assert_eq!(AdaptiveK::starting_at(99).k(), ADAPTIVE_K_MAX);
    }

    proptest! {
        /// The constant-time parameter is the least `k` with `n · 2^k ≥ sum` (capped).
        #[test]
        fn adaptive_k_is_the_least_fitting(residuals in proptest::collection::vec(any::<u64>().prop_map(|v| v >> (v % 64)), 0..100), k0 in 0u32..60) {
            let mut a = AdaptiveK::starting_at(k0);
            for r in residuals {
                let mut k = 0;
                while k < ADAPTIVE_K_MAX && (u64::from(a.n) << k) < a.sum {
                    k += 1;
                }
                prop_assert_eq!(a.k(), k);
                a.update(r);
            }
        }
    }

    proptest! {
        /// Whatever `decimals_of` accepts comes back bit for bit.
        #[test]
        fn decimals_round_trip(bits in any::<u64>(), m in -1_000_000_000i64..1_000_000_000, d in 0u8..=8) {
            for v in [f64::from_bits(bits), value_of(m, d)] {
                if let Some((d2, m2)) = decimals_of(v, 0) {
                    prop_assert_eq!(value_of(m2, d2).to_bits(), v.to_bits());
                }
            }
            let v = value_of(m, d);
            let (d2, _) = decimals_of(v, 0).unwrap();
            prop_assert!(d2 <= d);
        }
    }
}
