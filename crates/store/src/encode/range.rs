//! A binary adaptive range coder (the LZMA construction): each bit is coded with an 11-bit
//! probability that adapts by 1/32 of the distance after every bit, so well-predicted bits cost
//! a small fraction of a bit. Integer arithmetic only: encoder and decoder stay in lockstep.

use super::DecodeError;

/// Probabilities are of a zero bit, out of `1 << PROB_BITS`.
const PROB_BITS: u32 = 11;
const PROB_ONE: u16 = 1 << PROB_BITS;
/// Adaptation speed: a probability moves 1/32 of the way to the observed bit.
const ADAPT_SHIFT: u32 = 5;
const RANGE_TOP: u32 = 1 << 24;
/// The decoder may read this many bytes past the end (zeros) before calling the input short:
/// the encoder's flush writes 5 bytes, so a valid stream never needs more than 4.
const OVERRUN_BYTES_MAX: usize = 4;
/// Most one bits in a gamma code's length prefix (a u64 has at most 64 significant bits).
const GAMMA_LEN_MAX: u32 = 64;

/// An adaptive probability; starts at one half.
#[derive(Clone, Copy, Debug)]
pub struct Prob(u16);

impl Default for Prob {
    fn default() -> Prob {
        Prob(PROB_ONE / 2)
    }
}

impl Prob {
    /// Written as a select rather than a branch: the bit is data, and a mispredicted branch per
    /// coded bit would cost more than computing both sides.
    #[inline(always)]
    fn update(&mut self, bit: bool) {
        let p = self.0;
        self.0 = if bit {
            p - (p >> ADAPT_SHIFT)
        } else {
            p + ((PROB_ONE - p) >> ADAPT_SHIFT)
        };
        debug_assert!(self.0 > 0 && self.0 < PROB_ONE);
    }
}

/// Contexts of an adaptive Elias-gamma code: one probability per position of the unary
/// length prefix (positions past the last share it).
#[derive(Clone, Debug)]
pub struct GammaModel {
    len: Vec<Prob>,
}

impl GammaModel {
    pub fn new(contexts: usize) -> GammaModel {
        // At most one context per possible length, so the fast paths of `gamma` never see a
        // length of 64 before the shared last context.
        assert!(contexts > 0 && contexts <= GAMMA_LEN_MAX as usize);
        GammaModel {
            len: vec![Prob::default(); contexts],
        }
    }

    #[inline(always)]
    fn prob(&mut self, i: u32) -> &mut Prob {
        let last = self.len.len() - 1;
        &mut self.len[(i as usize).min(last)]
    }
}

#[derive(Debug, Default)]
pub struct RangeEncoder {
    low: u64,
    range: u32,
    cache: u8,
    cache_size: u64,
    out: Vec<u8>,
}

impl RangeEncoder {
    pub fn new() -> RangeEncoder {
        RangeEncoder {
            low: 0,
            range: u32::MAX,
            cache: 0,
            cache_size: 1,
            out: Vec::new(),
        }
    }

    /// Branch-free on the bit (masks and selects) for the reason given at [`Prob::update`].
    #[inline(always)]
    pub fn bit(&mut self, prob: &mut Prob, bit: bool) {
        let bound = (self.range >> PROB_BITS) * u32::from(prob.0);
        let mask = 0u32.wrapping_sub(u32::from(bit));
        self.low += u64::from(bound & mask);
        self.range = if bit { self.range - bound } else { bound };
        prob.update(bit);
        if self.range < RANGE_TOP {
            self.normalize();
        }
    }

    /// The low `bits` bits of `value` at probability one half each, most significant first.
    pub fn direct(&mut self, value: u64, bits: u32) {
        assert!(bits <= 64);
        for i in (0..bits).rev() {
            self.range >>= 1;
            let mask = 0u32.wrapping_sub(((value >> i) & 1) as u32);
            self.low += u64::from(self.range & mask);
            if self.range < RANGE_TOP {
                self.normalize();
            }
        }
    }

    /// Elias gamma of `value`: its bit length `L` in adaptive unary, then its `L − 1` bits
    /// below the leading one, direct.
    #[inline]
    pub fn gamma(&mut self, model: &mut GammaModel, value: u64) {
        let len = 64 - value.leading_zeros();
        let probs = &mut model.len[..];
        if (len as usize) < probs.len() {
            // Short values (nearly all counts and gaps) need no clamping of the context index.
            for p in &mut probs[..len as usize] {
                self.bit(p, true);
            }
            self.bit(&mut probs[len as usize], false);
        } else {
            for i in 0..len {
                self.bit(model.prob(i), true);
            }
            if len < GAMMA_LEN_MAX {
                self.bit(model.prob(len), false);
            }
        }
        if len > 1 {
            self.direct(value & ((1u64 << (len - 1)) - 1), len - 1);
        }
    }

    #[cold]
    fn normalize(&mut self) {
        while self.range < RANGE_TOP {
            self.range <<= 8;
            self.shift_low();
        }
    }

    fn shift_low(&mut self) {
        if self.low < 0xFF00_0000 || self.low >= 1 << 32 {
            let carry = (self.low >> 32) as u8;
            let mut byte = self.cache;
            while self.cache_size > 0 {
                self.out.push(byte.wrapping_add(carry));
                byte = 0xFF;
                self.cache_size -= 1;
            }
            self.cache = (self.low >> 24) as u8;
        }
        self.cache_size += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    pub fn finish(mut self) -> Vec<u8> {
        for _ in 0..5 {
            self.shift_low();
        }
        self.out
    }
}

#[derive(Debug)]
pub struct RangeDecoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> RangeDecoder<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<RangeDecoder<'a>, DecodeError> {
        let mut d = RangeDecoder {
            bytes,
            pos: 0,
            range: u32::MAX,
            code: 0,
        };
        if d.next_byte()? != 0 {
            return Err(DecodeError::Invalid {
                bit_offset: 0,
                what: "range coder stream must start with a zero byte",
            });
        }
        for _ in 0..4 {
            d.code = (d.code << 8) | u32::from(d.next_byte()?);
        }
        Ok(d)
    }

    fn next_byte(&mut self) -> Result<u8, DecodeError> {
        let byte = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        if self.pos > self.bytes.len() + OVERRUN_BYTES_MAX {
            return Err(DecodeError::Truncated {
                bit_offset: self.bytes.len() as u64 * 8,
            });
        }
        Ok(byte)
    }

    /// Branch-free on the bit, like the encoder's.
    #[inline(always)]
    pub fn bit(&mut self, prob: &mut Prob) -> Result<bool, DecodeError> {
        let bound = (self.range >> PROB_BITS) * u32::from(prob.0);
        let bit = self.code >= bound;
        let mask = 0u32.wrapping_sub(u32::from(bit));
        self.code -= bound & mask;
        self.range = if bit { self.range - bound } else { bound };
        prob.update(bit);
        if self.range < RANGE_TOP {
            self.normalize()?;
        }
        Ok(bit)
    }

    pub fn direct(&mut self, bits: u32) -> Result<u64, DecodeError> {
        assert!(bits <= 64);
        let mut value = 0u64;
        for _ in 0..bits {
            self.range >>= 1;
            let bit = self.code >= self.range;
            self.code -= self.range & 0u32.wrapping_sub(u32::from(bit));
            value = (value << 1) | u64::from(bit);
            if self.range < RANGE_TOP {
                self.normalize()?;
            }
        }
        Ok(value)
    }

    #[inline]
    pub fn gamma(&mut self, model: &mut GammaModel) -> Result<u64, DecodeError> {
        let mut len = 0;
        // Contexts below the last one first, without clamping the index; then the shared last.
        let contexts = model.len.len();
        let (head, last) = model.len.split_at_mut(contexts - 1);
        for p in head.iter_mut() {
            if !self.bit(p)? {
                return self.gamma_rest(len);
            }
            len += 1;
        }
        while len < GAMMA_LEN_MAX && self.bit(&mut last[0])? {
            len += 1;
        }
        self.gamma_rest(len)
    }

    /// The value of a gamma code whose bit length `len` has been read.
    fn gamma_rest(&mut self, len: u32) -> Result<u64, DecodeError> {
        if len == 0 {
            return Ok(0);
        }
        let low = self.direct(len - 1)?;
        Ok((1u64 << (len - 1)) | low)
    }

    #[cold]
    fn normalize(&mut self) -> Result<(), DecodeError> {
        while self.range < RANGE_TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(self.next_byte()?);
        }
        Ok(())
    }

    /// Checks that the stream ended where the encoder's flush put its end: every byte used.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.pos < self.bytes.len() {
            return Err(DecodeError::TrailingBits {
                bit_offset: self.pos as u64 * 8,
            });
        }
        Ok(())
    }

    pub fn invalid(&self, what: &'static str) -> DecodeError {
        DecodeError::Invalid {
            bit_offset: self.pos as u64 * 8,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Bit(usize, bool),
        Direct(u64, u32),
        Gamma(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..4, prop::bool::weighted(0.9)).prop_map(|(c, b)| Op::Bit(c, b)),
            1 => (any::<u64>(), 0u32..=64).prop_map(|(v, n)| Op::Direct(if n == 64 { v } else { v & ((1 << n) - 1) }, n)),
            1 => prop_oneof![0u64..10, any::<u64>()].prop_map(Op::Gamma),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(ops in proptest::collection::vec(op(), 0..300)) {
            let mut probs = [Prob::default(); 4];
            let mut gamma = GammaModel::new(8);
            let mut e = RangeEncoder::new();
            for o in &ops {
                match *o {
                    Op::Bit(c, b) => e.bit(&mut probs[c], b),
                    Op::Direct(v, n) => e.direct(v, n),
                    Op::Gamma(v) => e.gamma(&mut gamma, v),
                }
            }
            let bytes = e.finish();
            let mut probs = [Prob::default(); 4];
            let mut gamma = GammaModel::new(8);
            let mut d = RangeDecoder::new(&bytes).unwrap();
            for o in &ops {
                match *o {
                    Op::Bit(c, b) => prop_assert_eq!(d.bit(&mut probs[c]).unwrap(), b),
                    Op::Direct(v, n) => prop_assert_eq!(d.direct(n).unwrap(), v),
                    Op::Gamma(v) => prop_assert_eq!(d.gamma(&mut gamma).unwrap(), v),
                }
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(mut d) = RangeDecoder::new(&bytes) {
                let mut p = Prob::default();
                let mut g = GammaModel::new(4);
                for _ in 0..200 {
                    if d.bit(&mut p).is_err() || d.gamma(&mut g).is_err() {
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn predictable_bits_are_cheap() {
        let mut p = Prob::default();
        let mut e = RangeEncoder::new();
        for _ in 0..10_000 {
            e.bit(&mut p, false);
        }
        assert!(e.finish().len() < 100);
    }
}
