//! Bins: the `(val, exp)` pairs of the log-linear histogram and the value → bin mapping.
//!
//! A positive bin `(val, exp)` with `10 ≤ val ≤ 99` covers `[val/10·10^exp, (val+1)/10·10^exp)`;
//! negative bins mirror it; `(0, 0)` holds zero and every |x| < 1e-128; `(-1, 0)` holds NaN, ±inf
//! and |x| ≥ 1e128. The mapping from a double must agree bit for bit with libcircllhist, which
//! computes `floor(log10(|d|))` and then `floor(d / 10^exp · 10 + 1e-13)`. `Bin::from_f64` gets the
//! same answer without `log10` whenever the value is not within 1e-10 (relative) of a bin edge, and
//! falls back to the reference computation otherwise, so it is exact and fast.

use crate::pow10::POW10;

/// Number of distinct bins: NaN, zero, and 90 per decade for 256 decades on each side.
pub const BIN_COUNT_MAX: usize = 2 + 2 * 90 * 256;

// Storage-order keys. A regular bin's key is `decade << 7 | (offset + 1)`: decades 0..256 hold the
// negative exponents from 127 down to -128, decades 256..512 the positive ones from -128 up, and
// `offset` (0..90) runs toward +∞ inside a decade. Key 0 is the NaN bin, and the zero bin takes the
// unused slot 127 of decade 255, between the negatives and the positives. Shifts and masks convert
// between keys and bins; no division.
pub(crate) const KEY_NAN: u16 = 0;
/// Storage-order key of the zero bin; negative bins sort below it and positive bins above it.
pub(crate) const KEY_ZERO: u16 = 255 << 7 | 127;
/// The largest storage-order key (the bin `(99, 127)`).
pub(crate) const KEY_MAX: u16 = 511 << 7 | 90;
/// Bins per decade, and the key stride of a decade.
pub(crate) const DECADE_BINS: usize = 90;
pub(crate) const DECADE_SHIFT: u32 = 7;

/// A log-linear bin. Always valid: constructed only through checked paths.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Bin {
    val: i8,
    exp: i8,
}

/// The value/exponent split of a non-zero finite value that maps to a regular bin.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts {
    pub negative: bool,
    /// Decimal exponent, -128..=127.
    pub exp: i32,
    /// Absolute mantissa digit pair, 10..=99.
    pub val_abs: u32,
}

// The fast path accepts binary exponents whose decimal exponent (and the one above it) always lies
// inside the table: |e2| ≤ 420 gives decimal exponents in -127..=126.
const FAST_E2_ABS_MAX: i32 = 420;
// A mantissa this close to an integer may be rounded differently by the reference's three roundings
// and its 1e-13 fudge; such values take the reference path. The fast path's own error is < 3e-14.
const FAST_FRAC_MARGIN: f64 = 1e-9;

impl Bin {
    /// The bin of exact zero and of every |x| < 1e-128.
    pub const ZERO: Bin = Bin { val: 0, exp: 0 };
    /// The bin of NaN, ±infinity and every |x| ≥ 1e128.
    pub const NAN: Bin = Bin { val: -1, exp: 0 };

    /// A bin from its raw parts, or `None` if the pair is not a valid bin.
    /// `(0, e)` is read as the zero bin for any `e`, as the C library treats it.
    pub fn new(val: i8, exp: i8) -> Option<Bin> {
        let val_abs = val.unsigned_abs();
        if (10..=99).contains(&val_abs) {
            return Some(Bin { val, exp });
        }
        if val == 0 {
            return Some(Bin::ZERO);
        }
        if val == -1 && exp == 0 {
            return Some(Bin::NAN);
        }
        None
    }

    /// The mantissa digit pair: ±10..=99, 0 for the zero bin, -1 for the NaN bin.
    pub fn val(self) -> i8 {
        self.val
    }

    /// The decimal exponent.
    pub fn exp(self) -> i8 {
        self.exp
    }

    pub fn is_nan(self) -> bool {
        self == Bin::NAN
    }

    pub fn is_zero(self) -> bool {
        self.val == 0
    }

    pub(crate) fn from_parts(p: Parts) -> Bin {
        debug_assert!((10..=99).contains(&p.val_abs));
        debug_assert!((-128..=127).contains(&p.exp));
        let val = p.val_abs as i8;
        Bin {
            val: if p.negative { -val } else { val },
            exp: p.exp as i8,
        }
    }

    /// The bin holding `d`, bit-exact with libcircllhist's `double_to_hist_bucket`.
    #[inline]
    pub fn from_f64(d: f64) -> Bin {
        match fast_parts(d) {
            Some(p) => Bin::from_parts(p),
            None => Bin::from_f64_reference(d),
        }
    }

    /// The reference algorithm, step for step as the C library computes it (spec §2).
    /// Used for values near a bin edge and outside the fast range; also the oracle in tests.
    pub fn from_f64_reference(d: f64) -> Bin {
        if d.is_nan() || d.is_infinite() {
            return Bin::NAN;
        }
        if d == 0.0 {
            return Bin::ZERO;
        }
        let negative = d < 0.0;
        let a = d.abs();
        let big_exp = a.log10().floor() as i32;
        if !(-128..=127).contains(&big_exp) {
            return if big_exp >= 0 { Bin::NAN } else { Bin::ZERO };
        }
        let mut exp = big_exp;
        let v = a / POW10[(exp + 128) as usize] * 10.0;
        let mut val_abs = (v + 1e-13).floor() as i32;
        if val_abs == 100 {
            if exp >= 127 {
                return Bin::NAN;
            }
            val_abs = 10;
            exp += 1;
        }
        if val_abs == 0 {
            return Bin::ZERO;
        }
        if !(10..=99).contains(&val_abs) {
            return Bin::NAN;
        }
        Bin::from_parts(Parts {
            negative,
            exp,
            val_abs: val_abs as u32,
        })
    }

    /// The bin of `value · 10^scale`, computed in integers (C `int_scale_to_hist_bucket`).
    #[inline]
    pub fn from_intscale(value: i64, scale: i32) -> Bin {
        match intscale_parts(value, scale) {
            IntScale::Zero => Bin::ZERO,
            IntScale::Nan => Bin::NAN,
            IntScale::Parts(p) => Bin::from_parts(p),
        }
    }

    /// The edge nearer zero: `val/10 · 10^exp` (0 for the zero bin, NaN for the NaN bin).
    pub fn edge(self) -> f64 {
        if self.is_nan() {
            return f64::NAN;
        }
        if self.val == 0 {
            return 0.0;
        }
        TENTHS[(i32::from(self.val) + 99) as usize] * pow10(self.exp)
    }

    /// The bin width `10^exp / 10` (0 for the zero bin, NaN for the NaN bin).
    pub fn width(self) -> f64 {
        if self.is_nan() {
            return f64::NAN;
        }
        if self.val == 0 {
            return 0.0;
        }
        WIDTHS[(i32::from(self.exp) + 128) as usize]
    }

    /// The edge nearer −∞.
    pub fn lower(self) -> f64 {
        let edge = self.edge();
        if edge < 0.0 {
            edge - self.width()
        } else {
            edge
        }
    }

    /// The edge nearer +∞.
    pub fn upper(self) -> f64 {
        let edge = self.edge();
        if edge > 0.0 {
            edge + self.width()
        } else {
            edge
        }
    }

    /// The harmonic midpoint `2ab/(a+b)` of the bin's edges, as the C library computes it: it
    /// bounds the relative error of a value estimate by 1/21 (4.76%).
    pub fn midpoint(self) -> f64 {
        if self.is_nan() {
            return f64::NAN;
        }
        if self.val == 0 {
            return 0.0;
        }
        let bottom = self.edge();
        let mut interval = self.width();
        if bottom < 0.0 {
            interval = -interval;
        }
        let top = bottom + interval;
        bottom + interval * bottom / (bottom + top)
    }

    /// The position of this bin in storage order: NaN first, then ascending on the real axis.
    #[inline]
    pub fn key(self) -> u16 {
        let exp = i32::from(self.exp);
        let val = i32::from(self.val);
        let key = if val > 0 {
            (384 + exp) << DECADE_SHIFT | (val - 9)
        } else if val < -1 {
            (127 - exp) << DECADE_SHIFT | (100 + val)
        } else if val == 0 {
            i32::from(KEY_ZERO)
        } else {
            i32::from(KEY_NAN)
        };
        key as u16
    }

    /// The bin at a storage-order key. Keys come only from `Bin::key`, so they are valid.
    #[inline]
    pub(crate) fn from_key(key: u16) -> Bin {
        debug_assert!(key_is_valid(key), "key {key}");
        let decade = i32::from(key >> DECADE_SHIFT);
        let slot = i32::from(key & 127);
        if key == KEY_NAN {
            Bin::NAN
        } else if key == KEY_ZERO {
            Bin::ZERO
        } else if decade < 256 {
            Bin {
                val: (slot - 100) as i8,
                exp: (127 - decade) as i8,
            }
        } else {
            Bin {
                val: (slot + 9) as i8,
                exp: (decade - 384) as i8,
            }
        }
    }
}

/// How a raw `val` byte maps into a key: the slot inside its decade, and how the decade follows
/// from the exponent (`decade = base + sign·exp`). Kinds: regular bins, zero (any exponent), the
/// NaN candidate (valid only with exponent 0), and invalid. A table lookup replaces four range
/// tests on the decode path.
#[derive(Clone, Copy)]
struct ValInfo {
    slot: u16,
    decade_base: i16,
    decade_sign: i16,
    /// 0 invalid, 1 valid with any exponent, 2 valid only with exponent 0.
    validity: u8,
}

const VAL_INFO: [ValInfo; 256] = {
    let invalid = ValInfo {
        slot: 0,
        decade_base: 0,
        decade_sign: 0,
        validity: 0,
    };
    let mut t = [invalid; 256];
    let mut b = 0;
    while b < 256 {
        let v = b as u8 as i8 as i16;
        t[b] = if v >= 10 && v <= 99 {
            ValInfo {
                slot: (v - 9) as u16,
                decade_base: 384,
                decade_sign: 1,
                validity: 1,
            }
        } else if v <= -10 && v >= -99 {
            ValInfo {
                slot: (100 + v) as u16,
                decade_base: 127,
                decade_sign: -1,
                validity: 1,
            }
        } else if v == 0 {
            ValInfo {
                slot: KEY_ZERO & 127,
                decade_base: 255,
                decade_sign: 0,
                validity: 1,
            }
        } else if v == -1 {
            ValInfo {
                slot: KEY_NAN,
                decade_base: 0,
                decade_sign: 0,
                validity: 2,
            }
        } else {
            invalid
        };
        b += 1;
    }
    t
};

/// The key of the raw pair `(val, exp)` and whether the pair is a valid bin (C's reader keeps
/// `(0, e)` as zero and drops every other invalid pair).
#[inline(always)]
pub(crate) fn raw_key(val: i8, exp: i8) -> (u16, bool) {
    let info = VAL_INFO[usize::from(val as u8)];
    let decade = info.decade_base + info.decade_sign * i16::from(exp);
    let key = (decade as u16) << DECADE_SHIFT | info.slot;
    let valid = info.validity == 1 || (info.validity == 2 && exp == 0);
    (key, valid)
}

/// The wire bytes `(val, exp)` of a key, branch-free: the inverse of `raw_key`.
#[inline(always)]
pub(crate) fn key_bytes(key: u16) -> (u8, u8) {
    let decade = usize::from(key >> DECADE_SHIFT);
    let slot = usize::from(key & 127);
    let wire = KEY_WIRE[(decade >> 8) << 7 | slot];
    (wire as u8, EXP_BYTES[decade] & (wire >> 8) as u8)
}

/// Per (sign half, slot): the val byte, and in the high byte a mask that zeroes the exponent for
/// the two special slots (NaN's key 0 and zero's slot in decade 255), whose exponent byte is 0.
const KEY_WIRE: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut slot = 1;
    while slot <= 90 {
        t[slot] = 0xff00 | ((slot as i16 - 100) as u8 as u16);
        t[128 + slot] = 0xff00 | (slot as u16 + 9);
        slot += 1;
    }
    t[0] = 0x00ff; // NaN: val −1, exponent 0
    t[127] = 0x0000; // zero: val 0, exponent 0
    t
};

/// The exponent byte of each decade.
const EXP_BYTES: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut d = 0;
    while d < 512 {
        let exp = if d < 256 {
            127 - d as i32
        } else {
            d as i32 - 384
        };
        t[d] = exp as i8 as u8;
        d += 1;
    }
    t
};

/// Whether `key` is the key of some bin. Non-short-circuit, with no branch, so that loops
/// checking many keys (the store packs lent bins eight at a time) compile to vector code.
#[inline]
pub fn key_is_valid(key: u16) -> bool {
    let slot = key & 127;
    (key == KEY_NAN)
        | (key == KEY_ZERO)
        | ((key <= KEY_MAX) & (slot.wrapping_sub(1) < DECADE_BINS as u16))
}

/// A storage-order bin key known to be valid (what [`Bin::key`] gives, and [`key_is_valid`]
/// holds for): made only here, so that a packer takes it without checking it again. The
/// default is the NaN bin's key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValidKey(u16);

impl ValidKey {
    /// `key`, if it is valid.
    #[inline]
    pub fn new(key: u16) -> Option<ValidKey> {
        key_is_valid(key).then_some(ValidKey(key))
    }

    /// The key of bin `(val, exp)`: `Bin::new(val, exp).map(Bin::key)`, written out so that
    /// the per-bin loops of other crates inline it whole (`Bin::new` is not inlined across
    /// crates); a test compares the two for every pair.
    #[inline(always)]
    pub fn of(val: i8, exp: i8) -> Option<ValidKey> {
        let (v, e) = (i32::from(val), i32::from(exp));
        let key = match v {
            10..=99 => ((384 + e) << DECADE_SHIFT | (v - 9)) as u16,
            -99..=-10 => ((127 - e) << DECADE_SHIFT | (100 + v)) as u16,
            0 => KEY_ZERO,
            -1 if e == 0 => KEY_NAN,
            _ => return None,
        };
        debug_assert!(key_is_valid(key));
        Some(ValidKey(key))
    }

    /// The key.
    #[inline(always)]
    pub fn get(self) -> u16 {
        self.0
    }
}

/// The key of the bin after `key` in storage order, if any.
pub(crate) fn next_key(key: u16) -> Option<u16> {
    debug_assert!(key_is_valid(key));
    let slot = usize::from(key & 127);
    let decade = key >> DECADE_SHIFT;
    Some(match key {
        KEY_NAN => 1,
        KEY_ZERO => 256 << DECADE_SHIFT | 1,
        KEY_MAX => return None,
        _ if slot < DECADE_BINS => key + 1,
        _ if decade == 255 => KEY_ZERO,
        _ => (decade + 1) << DECADE_SHIFT | 1,
    })
}

/// The key of the bin before `key` in storage order, if any.
pub(crate) fn prev_key(key: u16) -> Option<u16> {
    debug_assert!(key_is_valid(key));
    let slot = key & 127;
    let decade = key >> DECADE_SHIFT;
    Some(match key {
        KEY_NAN => return None,
        1 => KEY_NAN,
        KEY_ZERO => 255 << DECADE_SHIFT | 90,
        _ if slot > 1 => key - 1,
        _ if decade == 256 => KEY_ZERO,
        _ => (decade - 1) << DECADE_SHIFT | 90,
    })
}

impl PartialOrd for Bin {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Bins order as they are stored: NaN first, then ascending on the real axis.
impl Ord for Bin {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// `val / 10.0` for val in -99..=99 at index val + 99: the edge is `TENTHS[val] · 10^exp`, computed
/// with exactly the C library's operations, once, at compile time.
const TENTHS: [f64; 199] = {
    let mut t = [0.0; 199];
    let mut i = 0;
    while i < 199 {
        t[i] = (i as f64 - 99.0) / 10.0;
        i += 1;
    }
    t
};

/// `10^exp / 10.0` at index exp + 128: the bin width, as the C library computes it.
const WIDTHS: [f64; 256] = {
    let mut t = [0.0; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = POW10[i] / 10.0;
        i += 1;
    }
    t
};

/// The correctly rounded double nearest `10^exp`.
#[inline]
pub(crate) fn pow10(exp: i8) -> f64 {
    POW10[(i32::from(exp) + 128) as usize]
}

// 10^(1-k) at index k + 128: multiplying by it maps [10^k, 10^(k+1)) onto [10, 100) with a single
// rounding, which the fast path's error margin accounts for.
include!("scale10.rs");

/// The fast, log-free value → bin split. `None` when the value is zero, not finite, outside the
/// fast exponent range, or within `FAST_FRAC_MARGIN` of a bin edge: the caller then uses the
/// reference computation, which is what makes the fast path bit-exact.
#[inline(always)]
pub(crate) fn fast_parts(d: f64) -> Option<Parts> {
    let bits = d.to_bits();
    let e2 = ((bits >> 52) & 0x7ff) as i32 - 1023;
    if (e2 + FAST_E2_ABS_MAX) as u32 > 2 * FAST_E2_ABS_MAX as u32 {
        return None;
    }
    let a = f64::from_bits(bits & !(1u64 << 63));
    // floor(e2 · log10 2), exact for |e2| ≤ 1650; |a| ∈ [2^e2, 2^(e2+1)) so the decimal exponent
    // is this or the next one.
    let mut exp = (e2 * 78_913) >> 18;
    // In range by the e2 bound above; the masks only spare the bounds checks.
    exp += i32::from(a >= POW10[(exp + 129) as usize & 255]);
    let v = a * SCALE10[(exp + 128) as usize & 255];
    let val_abs = v as u32;
    let frac = v - f64::from(val_abs);
    let inside =
        (10..=99).contains(&val_abs) && frac > FAST_FRAC_MARGIN && frac < 1.0 - FAST_FRAC_MARGIN;
    if !inside {
        return None;
    }
    Some(Parts {
        negative: bits >> 63 != 0,
        exp,
        val_abs,
    })
}

pub(crate) enum IntScale {
    Zero,
    Nan,
    Parts(Parts),
}

/// Division of n < 2^63 by 10^i, i ≥ 1, as a multiply and shift (Granlund–Montgomery): with
/// ℓ = ceil(log2 10^i) and M = ceil(2^(63+ℓ) / 10^i) < 2^64, floor(n / 10^i) = (n·M) >> (63+ℓ)
/// exactly for every 63-bit n; since ℓ ≥ 4 that is the high word shifted by ℓ − 1. A hardware
/// u64 division costs more than the whole rest of an insert.
const DIV10: [(u64, u32); 19] = {
    let mut t = [(0u64, 0u32); 19];
    let mut i = 1;
    let mut d: u128 = 10;
    while i < 19 {
        let l = 128 - (d - 1).leading_zeros();
        let m = (1u128 << (63 + l)).div_ceil(d);
        assert!(m < 1u128 << 64);
        t[i] = (m as u64, l - 1);
        d *= 10;
        i += 1;
    }
    t
};

const POW10_U64: [u64; 20] = {
    let mut t = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        t[i] = t[i - 1] * 10;
        i += 1;
    }
    t
};

/// floor(log10(2^(b−1))) for b = bit length 1..=64: the decimal digit count minus one of the
/// smallest number with that bit length; a number of bit length b has that many or one more.
const LOG10_OF_BITS: [u32; 65] = {
    let mut t = [0u32; 65];
    let mut b = 1;
    while b <= 64 {
        let mut k = 0;
        while k + 1 < 20 && POW10_U64[k + 1] <= (1u64 << (b - 1)) {
            k += 1;
        }
        t[b] = k as u32;
        b += 1;
    }
    t
};

/// floor(log10(n)) for n ≥ 1, from the bit length and one comparison.
#[inline(always)]
fn ilog10(n: u64) -> u32 {
    debug_assert!(n > 0);
    let guess = LOG10_OF_BITS[(64 - n.leading_zeros()) as usize];
    guess + u32::from(n >= POW10_U64[(guess + 1) as usize])
}

/// floor(n / 10^i) for n ≤ 2^63 and 1 ≤ i ≤ 18 (n = 2^63 only with i = 17, checked in tests).
#[inline(always)]
fn div_pow10(n: u64, i: u32) -> u64 {
    debug_assert!(n <= 1 << 63 && (1..19).contains(&i));
    let (m, shift) = DIV10[i as usize];
    (((u128::from(n) * u128::from(m)) >> 64) as u64) >> shift
}

/// `value · 10^scale` split into a digit pair and exponent with integer arithmetic only.
#[inline(always)]
pub(crate) fn intscale_parts(value: i64, scale: i32) -> IntScale {
    if value == 0 {
        return IntScale::Zero;
    }
    let negative = value < 0;
    // The C library maps i64::MIN to i64::MAX before the digit loop. |i64::MIN| = 2^63 has the
    // same leading digits (92) and the same digit count, and the division below is exact for it
    // too, so the clamp is not needed.
    let mut m = value.unsigned_abs();
    let mut exp = i64::from(scale) + 1;
    if m < 10 {
        m *= 10;
        exp -= 1;
    }
    let shift = ilog10(m) - 1;
    if shift > 0 {
        m = div_pow10(m, shift);
    }
    exp += i64::from(shift);
    if exp < -128 {
        return IntScale::Zero;
    }
    if exp > 127 {
        return IntScale::Nan;
    }
    debug_assert!((10..=99).contains(&m));
    IntScale::Parts(Parts {
        negative,
        exp: exp as i32,
        val_abs: m as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_keys_are_exactly_the_keys_of_bins() {
        let mut of_bins = vec![false; 1 << 16];
        for val in i8::MIN..=i8::MAX {
            for exp in i8::MIN..=i8::MAX {
                let bin = Bin::new(val, exp);
                // The written-out key of a pair is the bin's.
                let of = ValidKey::of(val, exp).map(ValidKey::get);
                assert_eq!(of, bin.map(Bin::key), "({val}, {exp})");
                if let Some(bin) = bin {
                    of_bins[usize::from(bin.key())] = true;
                }
            }
        }
        for key in 0..=u16::MAX {
            assert_eq!(key_is_valid(key), of_bins[usize::from(key)], "key {key}");
            let valid = ValidKey::new(key).map(ValidKey::get);
            assert_eq!(valid, of_bins[usize::from(key)].then_some(key), "key {key}");
        }
        assert_eq!(ValidKey::default().get(), KEY_NAN);
    }

    #[test]
    fn keys_round_trip_and_order_every_bin() {
        let mut all = Vec::with_capacity(BIN_COUNT_MAX);
        for key in (0..=KEY_MAX).filter(|&k| key_is_valid(k)) {
            let bin = Bin::from_key(key);
            assert_eq!(bin.key(), key);
            assert_eq!(Bin::new(bin.val(), bin.exp()), Some(bin));
            all.push(bin);
        }
        assert_eq!(all.len(), BIN_COUNT_MAX);
        // next_key / prev_key walk exactly this sequence.
        let mut walked = vec![KEY_NAN];
        while let Some(k) = next_key(walked[walked.len() - 1]) {
            walked.push(k);
        }
        assert_eq!(walked, all.iter().map(|b| b.key()).collect::<Vec<_>>());
        let mut back = vec![KEY_MAX];
        while let Some(k) = prev_key(back[back.len() - 1]) {
            back.push(k);
        }
        back.reverse();
        assert_eq!(back, walked);
        // Ascending on the real axis after NaN: compare lower edges.
        for pair in all[1..].windows(2) {
            assert!(
                pair[0].lower() < pair[1].lower(),
                "{:?} !< {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn raw_key_and_key_bytes_agree_with_bin_for_every_byte_pair() {
        for val in i8::MIN..=i8::MAX {
            for exp in i8::MIN..=i8::MAX {
                let (key, valid) = raw_key(val, exp);
                match Bin::new(val, exp) {
                    Some(bin) => {
                        assert!(valid, "({val},{exp})");
                        assert_eq!(key, bin.key(), "({val},{exp})");
                        assert_eq!(key_bytes(key), (bin.val() as u8, bin.exp() as u8));
                    }
                    None => assert!(!valid, "({val},{exp}) must be invalid"),
                }
            }
        }
    }

    #[test]
    fn invalid_pairs_are_rejected() {
        for (val, exp) in [(5i8, 0i8), (-5, 3), (100, 0), (-100, 0), (-1, 7), (1, 0)] {
            assert_eq!(Bin::new(val, exp), None, "({val},{exp})");
        }
        assert_eq!(Bin::new(0, 9), Some(Bin::ZERO));
    }

    #[test]
    fn decimal_exponent_estimate_is_exact_over_the_fast_range() {
        for e2 in -FAST_E2_ABS_MAX..=FAST_E2_ABS_MAX {
            let exact = (f64::from(e2) * std::f64::consts::LOG10_2).floor() as i32;
            assert_eq!((e2 * 78_913) >> 18, exact, "e2 = {e2}");
        }
    }

    #[test]
    fn fast_path_agrees_with_reference_on_every_edge_and_neighbours() {
        for key in (0..=KEY_MAX).filter(|&k| key_is_valid(k)) {
            let bin = Bin::from_key(key);
            if bin.is_nan() || bin.is_zero() {
                continue;
            }
            let mut x = bin.edge();
            for _ in 0..4 {
                x = f64::from_bits(x.to_bits() - 1);
            }
            for _ in 0..8 {
                assert_eq!(Bin::from_f64(x), Bin::from_f64_reference(x), "x = {x:e}");
                x = f64::from_bits(x.to_bits() + 1);
            }
            let m = bin.midpoint();
            assert_eq!(Bin::from_f64(m), bin);
            assert_eq!(Bin::from_f64_reference(m), bin);
        }
    }

    #[test]
    fn division_by_powers_of_ten_is_exact() {
        let mut n: u64 = 1;
        for _ in 0..200_000 {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = n >> 1 >> (n % 60);
            assert_eq!(ilog10(v.max(1)), v.max(1).ilog10());
            for i in 1..19 {
                assert_eq!(div_pow10(v, i), v / 10u64.pow(i), "{v} / 10^{i}");
            }
        }
        for i in 1..19u32 {
            let d = 10u64.pow(i);
            for v in [d - 1, d, d + 1, (i64::MAX as u64) - 1, i64::MAX as u64] {
                assert_eq!(div_pow10(v, i), v / d, "{v} / 10^{i}");
                assert_eq!(ilog10(v), v.ilog10(), "ilog10({v})");
            }
        }
    }

    #[test]
    fn two_to_the_63_divides_exactly() {
        assert_eq!(div_pow10(1 << 63, 17), (1u64 << 63) / 10u64.pow(17));
    }

    #[test]
    fn intscale_examples_from_the_spec() {
        assert_eq!(Bin::from_intscale(1234, -3), Bin::new(12, 0).unwrap());
        assert_eq!(Bin::from_intscale(7, -9), Bin::new(70, -9).unwrap());
        assert_eq!(Bin::from_intscale(100, 126), Bin::NAN);
        assert_eq!(Bin::from_intscale(1, -129), Bin::ZERO);
        assert_eq!(Bin::from_intscale(i64::MIN, 0), Bin::new(-92, 18).unwrap());
        assert_eq!(Bin::from_intscale(0, 50), Bin::ZERO);
    }
}
