//! The head's numeric points, compressed as they come: an appendable bit stream per stretch of
//! a series (Prometheus keeps its head chunks the same way), so a million series × two hours
//! fit in memory — 24 bytes a point uncompressed, about one here.
//!
//! In memory only (never written to disk, so no format version): a flush decodes the streams
//! and writes the block's numeric chunks (`numeric`, documented in `FORMAT.md`).
//!
//! A stream holds points in strictly increasing time, all in one value mode chosen from its
//! first value: **decimal(d)** (every value `m / 10^d` exactly, `decimal.rs`; integers are
//! `d = 0`) or **XOR** (anything). After the first point, each point is:
//! - its timestamp as a delta-of-delta against the previous interval (the first interval
//!   against 0): `0`; `10` + 7 bits; `110` + 12; `1110` + 20; `1111` + 64 (two's complement);
//! - decimal: zigzag(`m − previous m`) as Rice(k), `k` adapting to the recent residuals
//!   (`AdaptiveK`, starting at the stream's `k0`), escaped as `bits.rs` escapes Rice codes;
//!   XOR: the Gorilla code of the chunk format (`numeric.rs`, value mode 0).
//!
//! A value the stream's mode cannot hold ends the stream (`Append::Full`); the series starts
//! another. The stream's bytes grow by small steps, so they hold little unused capacity.

use super::bits::{unzigzag, zigzag, RICE_ESCAPE_LEN_BITS, RICE_ESCAPE_Q};
use super::decimal::{self, AdaptiveK};

/// The XOR mode's marker in `NumericStream::mode` (decimal modes are `0..=DECIMALS_MAX`).
pub const MODE_XOR: u8 = u8::MAX;
/// Most points in one stream: a read of a few minutes decodes at most this many per series.
pub const STREAM_POINTS_MAX: u32 = 512;
/// The XOR code's leading-zero field is 5 bits.
const XOR_LEADING_MAX: u32 = 31;
/// Least growth of a stream's bytes.
const GROW_BYTES_MIN: usize = 16;
/// Delta-of-delta buckets: prefix, prefix bits, payload bits.
const DOD_BUCKETS: [(u64, u32, u32); 3] = [(0b10, 2, 7), (0b110, 3, 12), (0b1110, 4, 20)];

/// One stream: its first point in the fields, the rest in the bits.
#[derive(Debug, Clone)]
pub struct NumericStream {
    first_ts: i64,
    last_ts: i64,
    first_bits: u64,
    bytes: Vec<u8>,
    bit_len: u32,
    count: u32,
    /// Decimals `0..=DECIMALS_MAX`, or `MODE_XOR`.
    mode: u8,
    /// The adaptive Rice parameter's start (decimal mode).
    k0: u8,
}

/// What appending the last stream needs besides its bits: the previous point's interval and
/// value, and the coders' state. One per series, for its last stream.
#[derive(Debug, Clone, Copy)]
pub struct Appender {
    prev_delta: u64,
    /// The previous value: its mantissa (decimal mode, as i64 bits) or its f64 bits.
    prev: u64,
    k: AdaptiveK,
    /// The XOR window (leading, trailing zeros), when one was set.
    window: Option<(u8, u8)>,
}

/// Why a point was not appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Append {
    Done,
    /// The stream is full or its mode cannot hold the value: start another.
    Full,
}

impl NumericStream {
    /// A stream of one point, in the mode with the fewest decimals `≥ decimals_min` that holds
    /// it (XOR when none does, or when `decimals_min` is `MODE_XOR`); `k0` starts the adaptive
    /// parameter (the previous stream's last, so a series keeps its pace across streams).
    pub fn start(ts_ms: i64, value: f64, decimals_min: u8, k0: u32) -> (NumericStream, Appender) {
        let (mode, prev) = match decimal::decimals_of(value, decimals_min) {
            Some((d, m)) if decimals_min != MODE_XOR => (d, m as u64),
            _ => (MODE_XOR, value.to_bits()),
        };
        let k = AdaptiveK::starting_at(k0);
        let stream = NumericStream {
            first_ts: ts_ms,
            last_ts: ts_ms,
            first_bits: value.to_bits(),
            bytes: Vec::new(),
            bit_len: 0,
            count: 1,
            mode,
            k0: k.k() as u8,
        };
        let appender = Appender {
            prev_delta: 0,
            prev,
            k,
            window: None,
        };
        (stream, appender)
    }

    pub fn first_ts(&self) -> i64 {
        self.first_ts
    }

    pub fn last_ts(&self) -> i64 {
        self.last_ts
    }

    /// Points in the stream.
    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn mode(&self) -> u8 {
        self.mode
    }

    /// Heap and inline bytes this stream takes.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<NumericStream>() + self.bytes.capacity()
    }

    /// Drops unused capacity (a stream that will not grow again).
    pub fn seal(&mut self) {
        self.bytes.shrink_to_fit();
    }

    /// Appends a point after the last one (`ts_ms` > `last_ts`, asserted).
    pub fn append(&mut self, a: &mut Appender, ts_ms: i64, value: f64) -> Append {
        assert!(ts_ms > self.last_ts, "stream points strictly increase");
        if self.count >= STREAM_POINTS_MAX {
            return Append::Full;
        }
        let residual = if self.mode == MODE_XOR {
            None
        } else {
            match decimal::mantissa(value, self.mode) {
                Some(m) => Some(m),
                None => return Append::Full,
            }
        };
        let delta = (ts_ms as u64).wrapping_sub(self.last_ts as u64);
        self.put_dod(delta.wrapping_sub(a.prev_delta) as i64);
        a.prev_delta = delta;
        match residual {
            Some(m) => {
                let r = zigzag(m.wrapping_sub(a.prev as i64));
                self.put_rice(r, a.k.k());
                a.k.update(r);
                a.prev = m as u64;
            }
            None => self.put_xor(a, value.to_bits()),
        }
        self.last_ts = ts_ms;
        self.count += 1;
        Append::Done
    }

    /// The adaptive parameter a following stream of the series starts with.
    pub fn next_k0(a: &Appender) -> u32 {
        a.k.k()
    }

    fn put_dod(&mut self, dod: i64) {
        if dod == 0 {
            self.put(0, 1);
            return;
        }
        for (prefix, prefix_bits, bits) in DOD_BUCKETS {
            let half = 1i64 << (bits - 1);
            if (-half..half).contains(&dod) {
                self.put(prefix, prefix_bits);
                self.put(dod as u64 & ((1u64 << bits) - 1), bits);
                return;
            }
        }
        self.put(0b1111, 4);
        self.put(dod as u64, 64);
    }

    fn put_rice(&mut self, value: u64, k: u32) {
        let q = value >> k;
        if q < RICE_ESCAPE_Q {
            self.put((1u64 << (q + 1)) - 2, q as u32 + 1);
            if k > 0 {
                self.put(value & low_mask(k), k);
            }
        } else {
            let len = 64 - value.leading_zeros();
            self.put((1u64 << RICE_ESCAPE_Q) - 1, RICE_ESCAPE_Q as u32);
            self.put(u64::from(len - 1), RICE_ESCAPE_LEN_BITS);
            self.put(value & low_mask(len - 1), len - 1);
        }
    }

    fn put_xor(&mut self, a: &mut Appender, bits: u64) {
        let x = bits ^ a.prev;
        a.prev = bits;
        if x == 0 {
            self.put(0, 1);
            return;
        }
        let lead = x.leading_zeros().min(XOR_LEADING_MAX);
        let trail = x.trailing_zeros();
        match a.window {
            Some((wl, wt)) if lead >= u32::from(wl) && trail >= u32::from(wt) => {
                let (wl, wt) = (u32::from(wl), u32::from(wt));
                self.put(0b10, 2);
                self.put(x >> wt, 64 - wl - wt);
            }
            _ => {
                let len = 64 - lead - trail;
                self.put(0b11, 2);
                self.put(u64::from(lead), 5);
                self.put(u64::from(len - 1), 6);
                self.put(x >> trail, len);
                a.window = Some((lead as u8, trail as u8));
            }
        }
    }

    /// Appends the low `n` bits of `value` (`n` ≤ 64), most significant first.
    fn put(&mut self, value: u64, n: u32) {
        let mut left = n;
        while left > 0 {
            let used = self.bit_len % 8;
            if used == 0 {
                if self.bytes.len() == self.bytes.capacity() {
                    self.bytes
                        .reserve_exact(GROW_BYTES_MIN.max(self.bytes.len() / 8));
                }
                self.bytes.push(0);
            }
            let free = 8 - used;
            let take = free.min(left);
            let chunk = (value >> (left - take)) & low_mask(take);
            if let Some(last) = self.bytes.last_mut() {
                *last |= (chunk << (free - take)) as u8;
            }
            self.bit_len += take;
            left -= take;
        }
    }

    /// Calls `each` with every point, in time order.
    pub fn for_each(&self, mut each: impl FnMut(i64, f64)) {
        let mut r = Reader {
            bytes: &self.bytes,
            pos: 0,
        };
        let (mut ts, mut delta) = (self.first_ts, 0u64);
        each(ts, f64::from_bits(self.first_bits));
        if self.mode == MODE_XOR {
            let (mut prev, mut window) = (self.first_bits, (0u32, 0u32));
            for _ in 1..self.count {
                delta = delta.wrapping_add(r.dod() as u64);
                ts = (ts as u64).wrapping_add(delta) as i64;
                prev ^= r.xor(&mut window);
                each(ts, f64::from_bits(prev));
            }
        } else {
            let mut m = decimal::mantissa(f64::from_bits(self.first_bits), self.mode).unwrap_or(0);
            let mut k = AdaptiveK::starting_at(u32::from(self.k0));
            for _ in 1..self.count {
                delta = delta.wrapping_add(r.dod() as u64);
                ts = (ts as u64).wrapping_add(delta) as i64;
                let residual = r.rice(k.k());
                k.update(residual);
                m = m.wrapping_add(unzigzag(residual));
                each(ts, decimal::value_of(m, self.mode));
            }
        }
        debug_assert_eq!(ts, self.last_ts);
        debug_assert_eq!(r.pos, u64::from(self.bit_len));
    }
}

fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Reads a stream's own bits (trusted: written by `NumericStream`); past the end it reads
/// zeros, which a stream never asks for.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: u64,
}

impl Reader<'_> {
    /// The next 57 or more bits, most significant first.
    #[inline]
    fn peek(&self) -> u64 {
        let at = (self.pos / 8) as usize;
        // Eight whole bytes but near the end: a fixed-size load, where a copy of however many
        // bytes are left was a call to `memmove` for every field of every point.
        let word = match self.bytes.get(at..at + 8) {
            Some(eight) => {
                let mut word = [0u8; 8];
                word.copy_from_slice(eight);
                word
            }
            None => self.tail_word(at),
        };
        u64::from_be_bytes(word) << (self.pos % 8)
    }

    #[cold]
    fn tail_word(&self, at: usize) -> [u8; 8] {
        let mut word = [0u8; 8];
        if let Some(rest) = self.bytes.get(at..) {
            let n = rest.len().min(8);
            word[..n].copy_from_slice(&rest[..n]);
        }
        word
    }

    #[inline]
    fn read(&mut self, n: u32) -> u64 {
        if n == 0 {
            return 0;
        }
        if n > 56 {
            let high = self.read(n - 32);
            return (high << 32) | self.read(32);
        }
        let v = self.peek() >> (64 - n);
        self.pos += u64::from(n);
        v
    }

    /// Leading one bits, up to `max`, and the zero after them when fewer.
    #[inline]
    fn ones(&mut self, max: u32) -> u32 {
        let ones = (!self.peek()).leading_zeros().min(max);
        self.pos += u64::from(ones) + u64::from(ones < max);
        ones
    }

    #[inline]
    fn dod(&mut self) -> i64 {
        match self.ones(4) {
            0 => 0,
            n @ 1..=3 => {
                let bits = DOD_BUCKETS[n as usize - 1].2;
                let shift = 64 - bits;
                ((self.read(bits) << shift) as i64) >> shift
            }
            _ => self.read(64) as i64,
        }
    }

    #[inline]
    fn rice(&mut self, k: u32) -> u64 {
        let q = self.ones(RICE_ESCAPE_Q as u32);
        if u64::from(q) == RICE_ESCAPE_Q {
            let len = self.read(RICE_ESCAPE_LEN_BITS) as u32 + 1;
            return (1u64 << (len - 1)) | self.read(len - 1);
        }
        (u64::from(q) << k) | self.read(k)
    }

    fn xor(&mut self, window: &mut (u32, u32)) -> u64 {
        if self.read(1) == 0 {
            return 0;
        }
        if self.read(1) == 0 {
            let (lead, trail) = *window;
            return self.read(64 - lead - trail) << trail;
        }
        let lead = self.read(5) as u32;
        let len = self.read(6) as u32 + 1;
        let trail = 64 - lead - len;
        *window = (lead, trail);
        self.read(len) << trail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Appends points into streams as a series does, starting another when one is full.
    fn streams_of(points: &[(i64, f64)]) -> Vec<NumericStream> {
        let mut out: Vec<NumericStream> = Vec::new();
        let mut appender = None;
        for &(ts, v) in points {
            if let (Some(s), Some(a)) = (out.last_mut(), appender.as_mut()) {
                if s.append(a, ts, v) == Append::Done {
                    continue;
                }
            }
            let (mode, k0) = match (out.last(), appender.as_ref()) {
                (Some(s), Some(a)) => (s.mode(), NumericStream::next_k0(a)),
                _ => (0, 0),
            };
            let (s, a) = NumericStream::start(ts, v, mode, k0);
            out.push(s);
            appender = Some(a);
        }
        out
    }

    fn decoded(streams: &[NumericStream]) -> Vec<(i64, u64)> {
        let mut out = Vec::new();
        for s in streams {
            s.for_each(|t, v| out.push((t, v.to_bits())));
        }
        out
    }

    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            (-1000i64..1000).prop_map(|v| v as f64),
            (-100_000i64..100_000, 0u8..4).prop_map(|(m, d)| decimal::value_of(m, d)),
            Just(f64::NAN),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(i64::MAX as f64),
        ]
    }

    proptest! {
        /// Every point comes back bit for bit, whatever mixes of modes and intervals.
        #[test]
        fn streams_round_trip(
            ts in proptest::collection::btree_set(any::<i64>(), 1..700),
            values in proptest::collection::vec(value(), 700),
        ) {
            let points: Vec<(i64, f64)> = ts.iter().zip(&values).map(|(&t, &v)| (t, v)).collect();
            let streams = streams_of(&points);
            let want: Vec<(i64, u64)> = points.iter().map(|&(t, v)| (t, v.to_bits())).collect();
            prop_assert_eq!(decoded(&streams), want);
            for s in &streams {
                prop_assert!(s.count() <= STREAM_POINTS_MAX);
            }
        }
    }

    /// A gauge with noise in its second decimal, every 10 s: a couple of bytes a point at most.
    #[test]
    fn decimal_gauges_are_small() {
        let mut v: i64 = 5_000;
        let mut x: u64 = 7;
        let points: Vec<(i64, f64)> = (0..720)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v += (x % 41) as i64 - 20;
                (1_700_000_000_000 + i * 10_000, v as f64 / 100.0)
            })
            .collect();
        let streams = streams_of(&points);
        let bytes: usize = streams.iter().map(|s| s.bytes.len()).sum();
        assert!(streams.iter().all(|s| s.mode() == 2));
        assert!(bytes < 720, "{bytes} bytes for 720 points");
        assert_eq!(
            decoded(&streams),
            points
                .iter()
                .map(|&(t, v)| (t, v.to_bits()))
                .collect::<Vec<_>>()
        );
    }
}
