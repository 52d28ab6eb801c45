//! The hot-path recorder: dense counters per (sign, decimal exponent), allocated on first use.
//!
//! Inserting a value is a handful of arithmetic instructions and one increment; there is no
//! search and no shifting of a sorted array. `to_histogram` turns it into the sorted form in one
//! pass, and `clear` keeps every allocated decade so a recorder reused period after period stops
//! allocating once it has seen its value range.

use crate::bin::{fast_parts, intscale_parts, Bin, IntScale, Parts, DECADE_SHIFT, KEY_ZERO};
use crate::histogram::Histogram;

/// Decades per sign (exponents -128..=127) and in total.
const DECADES_PER_SIGN: usize = 256;
const DECADES: usize = 2 * DECADES_PER_SIGN;
const BINS_PER_DECADE: usize = 90;

/// A histogram optimised for inserting: see the module docs.
#[derive(Clone)]
pub struct Recorder {
    /// Decade index (storage order: negative decades 0..256 from −1e128 toward zero, positive
    /// decades 256..512) → offset of its 90 counters in `counts`; `NO_DECADE` = not allocated.
    slots: Box<[u32; DECADES]>,
    /// Every allocated decade's counters, 90 each, in allocation order.
    counts: Vec<u64>,
    zero: u64,
    nan: u64,
}

const NO_DECADE: u32 = u32::MAX;

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Recorder")
            .field(&self.to_histogram())
            .finish()
    }
}

/// Where a bin's counter lives: (decade index, offset within the decade), in storage order.
#[inline(always)]
fn locate(p: Parts) -> (usize, usize) {
    let val = p.val_abs as usize;
    if p.negative {
        ((127 - p.exp) as usize, 99 - val)
    } else {
        ((384 + p.exp) as usize, val - 10)
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            slots: Box::new([NO_DECADE; DECADES]),
            counts: Vec::new(),
            zero: 0,
            nan: 0,
        }
    }

    /// Records one sample of `value`.
    #[inline]
    pub fn insert(&mut self, value: f64) {
        self.insert_n(value, 1);
    }

    /// Records `count` samples of `value`.
    #[inline]
    pub fn insert_n(&mut self, value: f64, count: u64) {
        match fast_parts(value) {
            Some(p) => self.add(p, count),
            None => self.insert_bin(Bin::from_f64_reference(value), count),
        }
    }

    /// Records one sample of `value · 10^scale` (e.g. nanoseconds: `insert_intscale(ns, -9)`).
    #[inline]
    pub fn insert_intscale(&mut self, value: i64, scale: i32) {
        self.insert_intscale_n(value, scale, 1);
    }

    #[inline]
    pub fn insert_intscale_n(&mut self, value: i64, scale: i32, count: u64) {
        match intscale_parts(value, scale) {
            IntScale::Parts(p) => self.add(p, count),
            IntScale::Zero => self.zero = self.zero.saturating_add(count),
            IntScale::Nan => self.nan = self.nan.saturating_add(count),
        }
    }

    /// Adds `count` to `bin`.
    pub fn insert_bin(&mut self, bin: Bin, count: u64) {
        if bin.is_nan() {
            self.nan = self.nan.saturating_add(count);
        } else if bin.is_zero() {
            self.zero = self.zero.saturating_add(count);
        } else {
            let val = i32::from(bin.val());
            let parts = Parts {
                negative: val < 0,
                exp: i32::from(bin.exp()),
                val_abs: val.unsigned_abs(),
            };
            self.add(parts, count);
        }
    }

    #[inline(always)]
    fn add(&mut self, p: Parts, count: u64) {
        let (decade, offset) = locate(p);
        self.add_at(decade, offset, count);
    }

    #[inline(always)]
    fn add_at(&mut self, decade: usize, offset: usize, count: u64) {
        let mut base = self.slots[decade];
        if base == NO_DECADE {
            base = self.allocate(decade);
        }
        let counter = &mut self.counts[base as usize + offset];
        *counter = counter.saturating_add(count);
    }

    #[cold]
    fn allocate(&mut self, decade: usize) -> u32 {
        let base = self.counts.len();
        assert!(
            base < DECADES * BINS_PER_DECADE,
            "at most one allocation per decade"
        );
        self.counts.resize(base + BINS_PER_DECADE, 0);
        self.slots[decade] = base as u32;
        base as u32
    }

    /// The counters of an allocated decade.
    fn decade(&self, decade: usize) -> Option<&[u64]> {
        let base = self.slots[decade];
        (base != NO_DECADE).then(|| &self.counts[base as usize..base as usize + BINS_PER_DECADE])
    }

    /// Adds every bin of a sorted histogram.
    pub fn merge_histogram(&mut self, h: &Histogram) {
        for (&key, &count) in h.keys.iter().zip(&h.counts) {
            if key == 0 {
                self.nan = self.nan.saturating_add(count);
            } else if key == KEY_ZERO {
                self.zero = self.zero.saturating_add(count);
            } else {
                let decade = usize::from(key >> DECADE_SHIFT);
                let offset = usize::from(key & 127) - 1;
                self.add_at(decade, offset, count);
            }
        }
    }

    /// Adds every counter of another recorder.
    pub fn merge_recorder(&mut self, other: &Recorder) {
        self.nan = self.nan.saturating_add(other.nan);
        self.zero = self.zero.saturating_add(other.zero);
        for decade in 0..DECADES {
            let Some(from) = other.decade(decade) else {
                continue;
            };
            for (offset, &add) in from.iter().enumerate() {
                if add != 0 {
                    self.add_at(decade, offset, add);
                }
            }
        }
    }

    /// Zeroes every counter, keeping the allocated decades for reuse.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.zero = 0;
        self.nan = 0;
    }

    /// Total samples recorded, saturating.
    pub fn sample_count(&self) -> u64 {
        let decades = self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c));
        decades.saturating_add(self.zero).saturating_add(self.nan)
    }

    /// The sorted form.
    pub fn to_histogram(&self) -> Histogram {
        let mut h = Histogram::new();
        self.write_into(&mut h);
        h
    }

    /// Writes the sorted form into `out`, reusing its allocation.
    pub fn write_into(&self, out: &mut Histogram) {
        let cap = self.counts.len() + 3;
        out.keys.clear();
        out.counts.clear();
        out.keys.resize(cap, 0);
        out.counts.resize(cap, 0);
        let mut n = 0;
        push_if(out, &mut n, 0, self.nan);
        for decade in 0..DECADES {
            if decade == DECADES_PER_SIGN {
                push_if(out, &mut n, KEY_ZERO, self.zero);
            }
            let Some(counts) = self.decade(decade) else {
                continue;
            };
            let base = decade << DECADE_SHIFT | 1;
            for (offset, &count) in counts.iter().enumerate() {
                // Unconditional write, conditional advance: no data-dependent branch.
                out.keys[n] = (base + offset) as u16;
                out.counts[n] = count;
                n += usize::from(count != 0);
            }
        }
        out.keys.truncate(n);
        out.counts.truncate(n);
        if cfg!(debug_assertions) {
            out.assert_invariants();
        }
    }

    /// A recorder holding the bins of `h`.
    pub fn from_histogram(h: &Histogram) -> Recorder {
        let mut r = Recorder::new();
        r.merge_histogram(h);
        r
    }
}

fn push_if(out: &mut Histogram, n: &mut usize, key: u16, count: u64) {
    out.keys[*n] = key;
    out.counts[*n] = count;
    *n += usize::from(count != 0);
}
