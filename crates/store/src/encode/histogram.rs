//! Histogram chunks: one series' (period start ms, histogram) pairs, strictly increasing in time.
//!
//! Consecutive periods of one stream draw from much the same distribution. The encoder picks the
//! chunk's *window* — the bins populated in at least a quarter of its periods — with a context class
//! per window bin (its mean count over the chunk, on a log scale), and codes for every period
//! each window bin's count (0 for empty) as one symbol in its class's context; the bins outside
//! the window (tails, rare values) come first as a short list. Symbols are coded with a static
//! rANS coder whose frequencies per context the encoder counts over the chunk and stores in it
//! (`range.rs`): one table lookup per bin to decode, no per-period model to update, no merge of
//! sorted lists — the adaptive binary coder this replaced spent most of its time there.
//! Integer arithmetic only.

use hist::{Accumulator, Bin, Histogram, BIN_COUNT_MAX};

use super::bits::{get_varint, put_varint, unzigzag, zigzag, BitReader, BitWriter};
use super::range::{self, raw_bits_of, symbol_of, value_of, RansDecoder, Tables, ALPHABET};
use super::range::{LITERALS, SYMBOL_OF_LEN};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_finish, frame_start};
use super::{ChunkKind, DecodeError, EncodeError};

/// Most periods in one histogram chunk; bounds what a decoder allocates for any input.
pub const HIST_CHUNK_PERIODS_MAX: usize = 1 << 16;
/// Most bin slots (window width × periods, plus the bins outside the window) in one chunk;
/// bounds decoder work and memory on any input. Writers split longer runs into more chunks.
pub const HIST_CHUNK_SLOTS_MAX: u64 = 1 << 22;
/// A bin populated in at least 1 / this of a chunk's periods is in its window (measured: 2, 4
/// and 8 give 15.3, 15.1 and 15.0 B per sample at 60 s periods and 38.9, 38.2, 37.1 at 10 s;
/// 4 decodes fastest).
const WINDOW_OCCUPANCY_DIV: u64 = 4;
/// Counts above this add no more to a window bin's mean (keeps the sum far from overflow).
pub(super) const MEAN_COUNT_MAX: u64 = 1 << 20;
/// Context classes of window bins: the bit length of 16 × the bin's mean count over the chunk,
/// capped.
const CLASSES: usize = 26;
/// Contexts: one per class, then the four of the extra bins.
const CTX_EXTRA_COUNT: usize = CLASSES;
const CTX_EXTRA_FIRST: usize = CTX_EXTRA_COUNT + 1;
const CTX_EXTRA_GAP: usize = CTX_EXTRA_COUNT + 2;
const CTX_EXTRA_VALUE: usize = CTX_EXTRA_COUNT + 3;
const CONTEXTS: usize = CTX_EXTRA_COUNT + 4;

/// Storage-order key of the zero bin (see `hist/FORMAT.md`).
const KEY_ZERO: u16 = 255 << 7 | 127;
/// Bins per decade: key slots 1..=90 of each decade are regular bins.
const DECADE_SLOTS_MAX: u16 = 90;
/// Ordinal of the zero bin: after the NaN bin and the 256 negative decades.
const ORDINAL_ZERO: u16 = 1 + 256 * DECADE_SLOTS_MAX;

/// The bin's ordinal in storage order with the unused key slots squeezed out (0 = NaN,
/// 1..=23040 negative bins, 23041 zero, 23042..=46081 positive bins), so that neighbouring bins
/// across a decade boundary are one apart.
pub fn ordinal_of_key(key: u16) -> u16 {
    debug_assert!(bin_of_key(key).is_some());
    let (decade, slot) = (key >> 7, key & 127);
    if key == 0 {
        0
    } else if key == KEY_ZERO {
        ORDINAL_ZERO
    } else if decade < 256 {
        1 + decade * DECADE_SLOTS_MAX + slot - 1
    } else {
        ORDINAL_ZERO + 1 + (decade - 256) * DECADE_SLOTS_MAX + slot - 1
    }
}

/// The window's occupancy bar (both chunk kinds): the keys populated in at least this many of
/// the chunk's `n_periods` periods are its window bins — at first `1 / WINDOW_OCCUPANCY_DIV`
/// of them, raised until the chunk's slots (window × periods + the bins outside) fit
/// `HIST_CHUNK_SLOTS_MAX`. Returns the bar and the bins outside the window, given each key's
/// number of periods.
pub(super) fn window_threshold(
    occupancy: impl Iterator<Item = u64> + Clone,
    n_periods: u64,
) -> Result<(u64, u64), EncodeError> {
    window_threshold_width(occupancy, n_periods).map(|(threshold, extras, _)| (threshold, extras))
}

/// The window's first bar ([`window_threshold`]): the one it keeps wherever the chunk's slots
/// fit under it.
pub(super) fn window_first_threshold(n_periods: u64) -> u64 {
    n_periods.div_ceil(WINDOW_OCCUPANCY_DIV).max(1)
}

/// [`window_threshold`], also returning the window's width (the keys at or above the bar),
/// counted in the same pass.
pub(super) fn window_threshold_width(
    occupancy: impl Iterator<Item = u64> + Clone,
    n_periods: u64,
) -> Result<(u64, u64, u64), EncodeError> {
    let mut threshold = window_first_threshold(n_periods);
    // Doubling the threshold past `periods` empties the window: at most 18 rounds.
    loop {
        let (mut width, mut extras) = (0u64, 0u64);
        for n in occupancy.clone() {
            if n >= threshold {
                width += 1;
            } else {
                extras += n;
            }
        }
        let slots = width * n_periods + extras;
        if slots <= HIST_CHUNK_SLOTS_MAX {
            return Ok((threshold, extras, width));
        }
        if width == 0 {
            return Err(EncodeError::TooManySlots { slots });
        }
        threshold = (threshold * 2).min(n_periods + 1);
    }
}

/// The storage-order key of an ordinal, or `None` past the last bin.
#[inline]
pub fn key_of_ordinal(ordinal: u16) -> Option<u16> {
    let regular = |e: u16, base_decade: u16| {
        (base_decade + e / DECADE_SLOTS_MAX) << 7 | (e % DECADE_SLOTS_MAX + 1)
    };
    match ordinal {
        0 => Some(0),
        o if o < ORDINAL_ZERO => Some(regular(o - 1, 0)),
        ORDINAL_ZERO => Some(KEY_ZERO),
        o if (o as usize) < BIN_COUNT_MAX => Some(regular(o - ORDINAL_ZERO - 1, 256)),
        _ => None,
    }
}

/// The bin of a valid ordinal (below `BIN_COUNT_MAX`), computed directly rather than through
/// its key (the tests check the two agree; decoding works on keys).
#[cfg(test)]
fn bin_of_ordinal(ordinal: u16) -> Option<Bin> {
    let regular = |e: u16| {
        (
            i32::from(e / DECADE_SLOTS_MAX),
            i32::from(e % DECADE_SLOTS_MAX) + 1,
        )
    };
    let (val, exp) = match ordinal {
        0 => return Some(Bin::NAN),
        o if o < ORDINAL_ZERO => {
            let (decade, slot) = regular(o - 1);
            (slot - 100, 127 - decade)
        }
        ORDINAL_ZERO => return Some(Bin::ZERO),
        o if (o as usize) < BIN_COUNT_MAX => {
            let (decade, slot) = regular(o - ORDINAL_ZERO - 1);
            (slot + 9, decade - 128)
        }
        _ => return None,
    };
    Bin::new(i8::try_from(val).ok()?, i8::try_from(exp).ok()?)
}

/// The bin at a storage-order key (`hist/FORMAT.md`), or `None` for a key no bin has.
pub fn bin_of_key(key: u16) -> Option<Bin> {
    if key == 0 {
        return Some(Bin::NAN);
    }
    if key == KEY_ZERO {
        return Some(Bin::ZERO);
    }
    let decade = i32::from(key >> 7);
    let slot = key & 127;
    if !(1..=DECADE_SLOTS_MAX).contains(&slot) {
        return None;
    }
    let slot = i32::from(slot);
    let (val, exp) = if decade < 256 {
        (slot - 100, 127 - decade)
    } else {
        (slot + 9, decade - 384)
    };
    let bin = Bin::new(i8::try_from(val).ok()?, i8::try_from(exp).ok()?)?;
    (bin.key() == key).then_some(bin)
}

const _: () = assert!(BIN_COUNT_MAX < u16::MAX as usize);

/// The class of a window bin whose counts over `periods` periods sum to `sum` (each count
/// capped at `MEAN_COUNT_MAX`).
fn class_of(sum: u64, periods: u64) -> u8 {
    let mean16 = sum.saturating_mul(16) / periods.max(1);
    ((64 - mean16.leading_zeros()) as usize).min(CLASSES - 1) as u8
}

/// Symbols of one chunk, gathered by the encoder's forward pass before the (backward) rANS pass,
/// and their counts per context (for the coder's tables).
struct Symbols {
    /// `ctx * ALPHABET + symbol`, in decoding order.
    coded: Vec<u16>,
    raw: BitWriter,
    /// Per `ctx * ALPHABET + symbol`, and a last context for the bins outside the window, whose
    /// counts are dropped; `COUNT_TABLES` counters each (`s * COUNT_TABLES + i`), summed at the
    /// end.
    counts: Vec<u32>,
}

impl Symbols {
    #[inline(always)]
    fn put(&mut self, ctx: usize, value: u64) {
        let (symbol, bits) = symbol_of(value);
        if bits > 0 {
            self.put_raw(value, bits);
        }
        let s = ctx * ALPHABET + usize::from(symbol);
        self.coded.push(s as u16);
        self.counts[s * COUNT_TABLES] += 1;
    }

    #[cold]
    fn put_raw(&mut self, value: u64, bits: u32) {
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        self.raw.write(value & mask, bits);
    }
}

/// Symbol count entries of one table: the contexts and the spare one of the bins outside the
/// window.
const COUNT_STRIDE: usize = (CONTEXTS + 1) * ALPHABET;
/// Counters per symbol, which the scatter takes in turn: neighbouring bins often have the same
/// symbol, and incrementing one counter back to back waits for the previous increment's store.
/// (Side by side in one cache line: measured faster than as separate tables.)
const COUNT_TABLES: usize = 4;

/// The symbol of a count (`symbol_of` without the raw bit count, branch-free).
#[inline(always)]
fn count_symbol(count: u64) -> u16 {
    let len = 64 - count.leading_zeros();
    if count < LITERALS {
        count as u16
    } else {
        (len + SYMBOL_OF_LEN) as u16
    }
}

/// One period's window symbols into `row` (holding each position's symbol of count 0 on entry),
/// counted in `counts`; the indexes of the bins outside the window into `outside` (at least as
/// long as the period's bins) and the window counts of 16 or more into `large` (rare), in key order;
/// returns how many bins are outside. Every bin is stored, outside ones to the spare last slot of
/// `row` (their symbols counted in the spare context), so the loop has no branch on the data but
/// the rare large count. Out of line, so that the loop has the registers to itself.
#[inline(never)]
fn scatter(
    h: &Histogram,
    window: &Window,
    row: &mut [u16],
    counts: &mut [u32],
    outside: &mut [u32],
    large: &mut Vec<u64>,
) -> usize {
    let width = window.keys.len();
    assert!(row.len() == width + 1 && outside.len() >= h.bin_count());
    let mut n_outside = 0;
    for (i, (&k, &c)) in h.keys().iter().zip(h.counts()).enumerate() {
        let (p, base) = window.slot(k);
        let s = usize::from(base + count_symbol(c));
        row[p] = s as u16;
        counts[s * COUNT_TABLES + i % COUNT_TABLES] += 1;
        outside[n_outside] = i as u32;
        n_outside += usize::from(p == width);
        if c >= LITERALS && p < width {
            push_cold(large, c);
        }
    }
    n_outside
}

#[cold]
fn push_cold(v: &mut Vec<u64>, x: u64) {
    v.push(x);
}

/// Encodes one chunk of per-period histograms. Period starts must strictly increase.
pub fn encode(periods: &[(i64, Histogram)]) -> Result<Vec<u8>, EncodeError> {
    let mut out = start_chunk(ChunkKind::Histogram, periods)?;
    let count = periods.len();

    // The window and the coding work on storage-order keys (same order as ordinals); ordinals
    // are only written.
    let window = Window::choose(periods)?;
    let width = window.keys.len();
    put_varint(&mut out, width as u64);
    let mut next = 0;
    for (&k, &class) in window.keys.iter().zip(&window.classes) {
        let o = ordinal_of_key(k);
        put_varint(&mut out, u64::from(o - next));
        out.push(class);
        next = o + 1;
    }
    // Each window position's context, as the offset of its symbols (= its symbol of count 0),
    // and a last one for the bins outside the window: a context past the coded ones.
    let bases: Vec<u16> = window
        .classes
        .iter()
        .map(|&c| u16::from(c) * ALPHABET as u16)
        .chain([(CONTEXTS * ALPHABET) as u16])
        .collect();

    let mut symbols = Symbols {
        coded: Vec::with_capacity(width * count + count + 3 * window.extras as usize),
        raw: BitWriter::new(),
        counts: vec![0u32; COUNT_TABLES * COUNT_STRIDE],
    };
    // A window bin's count is 0 (its symbol 0) in every period it is not populated in; the
    // scatter below counts only the populated ones.
    for (&k, &base) in window.keys.iter().zip(&bases) {
        let occupancy = window.occupancy[usize::from(k - window.first)];
        symbols.counts[usize::from(base) * COUNT_TABLES] += count as u32 - occupancy;
    }
    // One period's symbols: one per window position, and a last slot where bins outside the
    // window land.
    let mut row = vec![0u16; width + 1];
    // The bins outside the window, and the window counts of 16 or more, of one period.
    let bins_max = periods
        .iter()
        .map(|(_, h)| h.bin_count())
        .max()
        .unwrap_or(0);
    let mut outside = vec![0u32; bins_max];
    let mut large = Vec::new();
    let mut prev_first_extra = 0u16;
    for (_, h) in periods {
        row.copy_from_slice(&bases);
        large.clear();
        let n_outside = scatter(
            h,
            &window,
            &mut row,
            &mut symbols.counts,
            &mut outside,
            &mut large,
        );
        // The period's extras first, so the decoder knows where they go among the window's.
        symbols.put(CTX_EXTRA_COUNT, n_outside as u64);
        let mut prev: Option<u16> = None;
        let (keys, counts) = (h.keys(), h.counts());
        for &i in &outside[..n_outside] {
            let (k, c) = (keys[i as usize], counts[i as usize]);
            let o = ordinal_of_key(k);
            match prev {
                None => symbols.put(
                    CTX_EXTRA_FIRST,
                    zigzag(i64::from(o) - i64::from(prev_first_extra)),
                ),
                Some(p) => symbols.put(CTX_EXTRA_GAP, u64::from(o - p - 1)),
            }
            symbols.put(CTX_EXTRA_VALUE, c - 1);
            prev = Some(o);
        }
        if n_outside > 0 {
            prev_first_extra = ordinal_of_key(keys[outside[0] as usize]);
        }
        symbols.coded.extend_from_slice(&row[..width]);
        // The raw bits of the large window counts follow in position order.
        for &c in &large {
            symbols.put_raw(c, 63 - c.leading_zeros());
        }
    }
    let counts: Vec<u32> = symbols.counts[..CONTEXTS * ALPHABET * COUNT_TABLES]
        .chunks_exact(COUNT_TABLES)
        .map(|c| c.iter().sum())
        .collect();
    let tables = Tables::from_counts(&counts, CONTEXTS);
    tables.write(&mut out);
    let raw = symbols.raw.finish();
    put_varint(&mut out, raw.len() as u64);
    out.extend_from_slice(&raw);
    range::encode_into(&tables, &symbols.coded, &mut out);
    Ok(frame_finish(out))
}

/// A `Window::slots` entry for a key outside a window of `width` bins.
fn spare_slot(width: usize) -> u32 {
    width as u32 | ((CONTEXTS * ALPHABET) as u32) << 16
}

/// The encoder's window: the keys (ascending) coded at every period.
struct Window {
    keys: Vec<u16>,
    /// Each window key's context class.
    classes: Vec<u8>,
    /// By `key − first`: the window position (low 16 bits) and the offset of its context's
    /// symbols (high 16); for keys outside the window, its width and the spare context past
    /// the coded ones.
    slots: Vec<u32>,
    /// Periods each key is populated in, by `key − first`.
    occupancy: Vec<u32>,
    /// The smallest key of the chunk.
    first: u16,
    /// Bins outside the window, over the chunk.
    extras: u64,
}

impl Window {
    /// The keys populated in at least `1 / WINDOW_OCCUPANCY_DIV` of the periods are coded at every
    /// period (an empty one costs a fraction of a bit, and a window bin's one symbol decodes
    /// several times faster than an extra's two symbols and position); the rest are coded as
    /// extras. Raises the bar until the chunk's slots fit `HIST_CHUNK_SLOTS_MAX`.
    fn choose(periods: &[(i64, Histogram)]) -> Result<Window, EncodeError> {
        // First a light pass over every key and count: vectorized, it keeps many cache misses in
        // flight and brings the chunk's bins into cache for the passes below, whose per-bin
        // stores leave few misses in flight (on cold bins they ran at a third of this pass's
        // speed). It finds the smallest and largest key and whether any count needs capping.
        let (mut lo, mut hi, mut count_bits) = (u16::MAX, 0u16, 0u64);
        for (_, h) in periods {
            lo = h.keys().iter().fold(lo, |m, &k| m.min(k));
            hi = h.keys().iter().fold(hi, |m, &k| m.max(k));
            count_bits = h.counts().iter().fold(count_bits, |m, &c| m | c);
        }
        let span = usize::from(hi.saturating_sub(lo)) + 1;
        let mut occupancy = vec![0u32; span];
        let mut sums = vec![0u64; span];
        let cap = if count_bits > MEAN_COUNT_MAX {
            MEAN_COUNT_MAX
        } else {
            u64::MAX
        };
        for (_, h) in periods {
            for (&k, &c) in h.keys().iter().zip(h.counts()) {
                occupancy[usize::from(k - lo)] += 1;
                sums[usize::from(k - lo)] += c.min(cap);
            }
        }
        let n_periods = periods.len() as u64;
        let (threshold, extras) =
            window_threshold(occupancy.iter().map(|&n| u64::from(n)), n_periods)?;
        let mut window = Window {
            keys: Vec::new(),
            classes: Vec::new(),
            slots: Vec::new(),
            occupancy: Vec::new(),
            first: lo,
            extras,
        };
        for (i, (&n, &sum)) in occupancy.iter().zip(&sums).enumerate() {
            if u64::from(n) >= threshold {
                window.keys.push(lo + i as u16);
                window.classes.push(class_of(sum, n_periods));
            }
        }
        let width = window.keys.len() as u16;
        window.slots = vec![spare_slot(width.into()); span];
        for (p, (&k, &class)) in window.keys.iter().zip(&window.classes).enumerate() {
            window.slots[usize::from(k - lo)] =
                p as u32 | (u32::from(class) * ALPHABET as u32) << 16;
        }
        window.occupancy = occupancy;
        Ok(window)
    }

    /// The window position of a key of the chunk and the offset of its context's symbols; the
    /// window's width and the spare context for a key outside it.
    #[inline(always)]
    fn slot(&self, key: u16) -> (usize, u16) {
        let slot = self.slots.get(usize::from(key.wrapping_sub(self.first)));
        debug_assert!(slot.is_some(), "key {key} of the chunk");
        let slot = slot.copied().unwrap_or(spare_slot(self.keys.len()));
        ((slot & 0xffff) as usize, (slot >> 16) as u16)
    }
}

/// Decodes one chunk; never panics; work and memory bounded by `HIST_CHUNK_PERIODS_MAX` and
/// `HIST_CHUNK_SLOTS_MAX` whatever the input.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    collect_periods(|each| decode_with(bytes, each))
}

/// The periods a window decoder (`walk`: kind 3's or kind 6's `decode_with`) gives, as
/// histograms.
pub(super) fn collect_periods(
    walk: impl FnOnce(&mut dyn FnMut(&Period<'_>)) -> Result<ChunkSummary, DecodeError>,
) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    let mut out = Vec::new();
    let (mut keys, mut counts) = (Vec::new(), Vec::new());
    walk(&mut |p| {
        p.sorted_bins(&mut keys, &mut counts);
        out.push((p.ts_ms, Histogram::from_sorted_keys(&keys, &counts)));
    })?;
    Ok(out)
}

/// The periods a window decoder gives, each added to `out[slot_of(start)]` (see
/// [`decode_into`]).
pub(super) fn accumulate_periods(
    walk: impl FnOnce(&mut dyn FnMut(&Period<'_>)) -> Result<ChunkSummary, DecodeError>,
    mut slot_of: impl FnMut(i64) -> Option<usize>,
    out: &mut [Accumulator],
) -> Result<ChunkSummary, DecodeError> {
    walk(&mut |p| {
        if let Some(acc) = slot_of(p.ts_ms).and_then(|i| out.get_mut(i)) {
            p.add_to(acc);
        }
    })
}

/// The values of a period's extras, as a window decoder reads them.
#[derive(Clone, Copy)]
pub(super) enum ExtraValue {
    /// The first extra's ordinal as zigzag(ordinal − the previous period's first).
    First,
    /// A later extra's ordinal − the previous ordinal − 1.
    Gap,
    /// An extra's count − 1.
    CountLess1,
}

/// A window decoder's source of extras' values, and its errors.
pub(super) trait ExtraSource {
    fn value(&mut self, which: ExtraValue) -> Result<u64, DecodeError>;
    fn invalid(&self, what: &'static str) -> DecodeError;
}

/// Reads a period's `n` extras into `extras` (cleared first) as `(key, count, the window
/// position each precedes)`, checking each is a bin, ascending and outside the window;
/// `prev_first` is the previous period's first extra ordinal, updated.
pub(super) fn read_extras(
    source: &mut impl ExtraSource,
    n: u64,
    window_ordinals: &[u16],
    prev_first: &mut u16,
    extras: &mut Vec<(u16, u64, usize)>,
) -> Result<(), DecodeError> {
    extras.clear();
    let mut prev: Option<i64> = None;
    // Bounded: callers check `n` against the chunk's slots first.
    for _ in 0..n {
        let o = match prev {
            None => i64::from(*prev_first).wrapping_add(unzigzag(source.value(ExtraValue::First)?)),
            Some(p) => p
                .wrapping_add(1)
                .wrapping_add(source.value(ExtraValue::Gap)? as i64),
        };
        if !(0..BIN_COUNT_MAX as i64).contains(&o) || prev.is_some_and(|p| o <= p) {
            return Err(source.invalid("extra bin out of range or order"));
        }
        let o = o as u16;
        let at = window_ordinals.partition_point(|&w| w < o);
        if window_ordinals.get(at) == Some(&o) {
            return Err(source.invalid("extra bin in the window"));
        }
        let c = source
            .value(ExtraValue::CountLess1)?
            .checked_add(1)
            .ok_or_else(|| source.invalid("bin count above 2^64 - 1"))?;
        extras.push((o, c, at));
        prev = Some(i64::from(o));
    }
    if let Some(&(o, _, _)) = extras.first() {
        *prev_first = o;
    }
    for e in extras.iter_mut() {
        e.0 = extra_key(e.0);
    }
    Ok(())
}

/// One decoded period: every window bin's count (0 where empty) and the bins outside the
/// window, each with the window position it precedes.
pub(super) struct Period<'a> {
    pub(super) ts_ms: i64,
    pub(super) window_keys: &'a [u16],
    pub(super) window_counts: &'a [u64],
    /// `(key, count, window position)`, ascending.
    pub(super) extras: &'a [(u16, u64, usize)],
}

impl Period<'_> {
    /// Adds the period's bins to `acc`. Order does not matter to an accumulator, nor do the
    /// window's zero counts: the window is added as decoded, the extras after it.
    pub(super) fn add_to(&self, acc: &mut Accumulator) {
        acc.add_keys(self.window_keys, self.window_counts);
        for &(k, c, _) in self.extras {
            acc.add_key(k, c);
        }
    }

    /// The period's bins in storage order (window bins with a count and extras interleaved),
    /// into the caller's buffers.
    pub(super) fn sorted_bins(&self, keys: &mut Vec<u16>, counts: &mut Vec<u64>) {
        let slots = self.window_keys.len() + self.extras.len();
        keys.resize(slots, 0);
        counts.resize(slots, 0);
        let mut len = 0;
        let mut from = 0;
        // Every slot written, the populated ones kept (branch-free). Window keys and extras
        // come out in storage order: no sort.
        for segment in 0..=self.extras.len() {
            let to = self
                .extras
                .get(segment)
                .map_or(self.window_keys.len(), |e| e.2);
            for (&k, &c) in self.window_keys[from..to]
                .iter()
                .zip(&self.window_counts[from..to])
            {
                keys[len] = k;
                counts[len] = c;
                len += usize::from(c != 0);
            }
            if let Some(&(k, c, _)) = self.extras.get(segment) {
                keys[len] = k;
                counts[len] = c;
                len += 1;
            }
            from = to;
        }
        keys.truncate(len);
        counts.truncate(len);
    }
}

/// What a chunk held: its period count and first and last period starts (to check against a
/// block's directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSummary {
    pub periods: usize,
    pub first_ts_ms: i64,
    pub last_ts_ms: i64,
}

/// Decodes one chunk straight into accumulators, building no histogram: each period whose
/// start `slot_of` maps to `Some(i)` is added to `out[i]` (`None`, or an index past `out`:
/// the period is skipped). Periods are added as they are decoded, so after an error some may
/// have been added. Same bounds as `decode`.
pub fn decode_into(
    bytes: &[u8],
    slot_of: impl FnMut(i64) -> Option<usize>,
    out: &mut [Accumulator],
) -> Result<ChunkSummary, DecodeError> {
    accumulate_periods(|each| decode_with(bytes, each), slot_of, out)
}

/// A histogram chunk (either layout) up to its periods: the frame start, the period count and
/// the period starts (`read_period_starts` reads them back). Period starts must strictly
/// increase; at most `HIST_CHUNK_PERIODS_MAX`.
pub(super) fn start_chunk(
    kind: ChunkKind,
    periods: &[(i64, Histogram)],
) -> Result<Vec<u8>, EncodeError> {
    let ts_ms: Vec<i64> = periods.iter().map(|p| p.0).collect();
    start_chunk_ts(kind, &ts_ms)
}

/// [`start_chunk`] from the period starts alone.
pub(super) fn start_chunk_ts(kind: ChunkKind, ts_ms: &[i64]) -> Result<Vec<u8>, EncodeError> {
    let count = check_timestamps(ts_ms.iter().copied())?;
    if count > HIST_CHUNK_PERIODS_MAX {
        return Err(EncodeError::TooManySamples { count });
    }
    let mut out = frame_start(kind);
    put_varint(&mut out, count as u64);
    let header = timestamps::write_header(&mut out, ts_ms);
    let mut w = BitWriter::new();
    timestamps::write_bits(&mut w, ts_ms, header);
    let ts_bits = w.finish();
    put_varint(&mut out, ts_bits.len() as u64);
    out.extend_from_slice(&ts_bits);
    Ok(out)
}

/// A window-coded chunk (kind 3 or 6) up to its periods: the frame checked, then the period
/// starts. Returns the body, the offset after the starts, and the starts.
pub(super) fn open_window_chunk(
    bytes: &[u8],
    kind: ChunkKind,
) -> Result<(&[u8], usize, Vec<i64>), DecodeError> {
    let body = frame_body(bytes, kind)?;
    let mut pos = 0;
    let ts_ms = read_period_starts(body, &mut pos, HIST_CHUNK_PERIODS_MAX as u64)?;
    Ok((body, pos, ts_ms))
}

/// The start of both histogram chunk layouts (range-coded and packed): the period count (1 ..=
/// `count_max`), the timestamp header and the timestamps' bit stream with its byte length.
/// Returns the period starts and leaves `pos` after them.
pub(super) fn read_period_starts(
    body: &[u8],
    pos: &mut usize,
    count_max: u64,
) -> Result<Vec<i64>, DecodeError> {
    let count = get_varint(body, pos)?;
    if count == 0 || count > count_max {
        return Err(DecodeError::TooManySamples { count });
    }
    let count = count as usize;
    let header = timestamps::read_header(body, pos, count)?;
    let ts_len = get_varint(body, pos)?;
    if ts_len > (body.len() - *pos) as u64 {
        return Err(DecodeError::Truncated {
            bit_offset: body.len() as u64 * 8,
        });
    }
    let ts_end = *pos + ts_len as usize;
    let mut r = BitReader::new(&body[*pos..ts_end]);
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    r.finish()?;
    *pos = ts_end;
    Ok(ts_ms)
}

/// The decoder: calls `period` with each decoded period, in time order.
fn decode_with(
    bytes: &[u8],
    mut period: impl FnMut(&Period<'_>),
) -> Result<ChunkSummary, DecodeError> {
    let (body, mut pos, ts_ms) = open_window_chunk(bytes, ChunkKind::Histogram)?;
    let count = ts_ms.len();
    let invalid = |pos: usize, what| DecodeError::Invalid {
        bit_offset: pos as u64 * 8,
        what,
    };

    let width = get_varint(body, &mut pos)?;
    if width > BIN_COUNT_MAX as u64 || width * count as u64 > HIST_CHUNK_SLOTS_MAX {
        return Err(invalid(
            pos,
            "window wider than the bins or the chunk's slots",
        ));
    }
    let width = width as usize;
    let mut slots_left = HIST_CHUNK_SLOTS_MAX - (width * count) as u64;
    let mut window_keys: Vec<u16> = Vec::with_capacity(width);
    let mut window_ordinals = Vec::with_capacity(width);
    let mut window_classes = Vec::with_capacity(width);
    let mut next = 0u64;
    for _ in 0..width {
        let o = next.saturating_add(get_varint(body, &mut pos)?);
        // Every ordinal below `BIN_COUNT_MAX` is a bin (see `every_key_maps_back`).
        let Some(key) = u16::try_from(o).ok().and_then(key_of_ordinal) else {
            return Err(invalid(pos, "window ordinal out of range"));
        };
        let class = body.get(pos).copied().unwrap_or(u8::MAX);
        if usize::from(class) >= CLASSES {
            return Err(invalid(pos, "window class out of range or missing"));
        }
        pos += 1;
        window_keys.push(key);
        window_ordinals.push(o as u16);
        window_classes.push(usize::from(class));
        next = o + 1;
    }
    let tables = Tables::read(body, &mut pos, CONTEXTS)?;
    let raw_len = get_varint(body, &mut pos)?;
    if raw_len > (body.len() - pos) as u64 {
        return Err(DecodeError::Truncated {
            bit_offset: body.len() as u64 * 8,
        });
    }
    let raw_end = pos + raw_len as usize;
    let mut raw = BitReader::new(&body[pos..raw_end]);
    let mut d = RansDecoder::new(&tables, &body[raw_end..])?;

    // The period's extras: ordinal (then key), count, and the window position they precede.
    let mut extras: Vec<(u16, u64, usize)> = Vec::new();
    let mut prev_first_extra = 0u16;
    let mut window_counts: Vec<u64> = vec![0; width];
    let summary = ChunkSummary {
        periods: count,
        first_ts_ms: ts_ms.first().copied().unwrap_or(0),
        last_ts_ms: ts_ms.last().copied().unwrap_or(0),
    };
    for ts in ts_ms {
        let n = read_value(&mut d, &mut raw, CTX_EXTRA_COUNT);
        slots_left = slots_left
            .checked_sub(n)
            .ok_or_else(|| d.invalid("more bin slots than HIST_CHUNK_SLOTS_MAX"))?;
        let mut source = RangeExtras {
            d: &mut d,
            raw: &mut raw,
        };
        read_extras(
            &mut source,
            n,
            &window_ordinals,
            &mut prev_first_extra,
            &mut extras,
        )?;
        // The window's counts follow the extras in the stream, in one run (extras only say
        // where they go among them).
        let mut raw_failed = false;
        d.symbols(&window_classes, |i, symbol| {
            window_counts[i] = value_of_symbol(&mut raw, symbol, &mut raw_failed);
        });
        if raw_failed {
            d.fail();
        }
        d.check()?;
        period(&Period {
            ts_ms: ts,
            window_keys: &window_keys,
            window_counts: &window_counts,
            extras: &extras,
        });
    }
    raw.finish()?;
    d.finish()?;
    Ok(summary)
}

/// Kind 3's extras: values in their contexts (errors kept in the decoder until its check).
struct RangeExtras<'d, 'a, 'b> {
    d: &'d mut RansDecoder<'a>,
    raw: &'d mut BitReader<'b>,
}

impl ExtraSource for RangeExtras<'_, '_, '_> {
    fn value(&mut self, which: ExtraValue) -> Result<u64, DecodeError> {
        let ctx = match which {
            ExtraValue::First => CTX_EXTRA_FIRST,
            ExtraValue::Gap => CTX_EXTRA_GAP,
            ExtraValue::CountLess1 => CTX_EXTRA_VALUE,
        };
        Ok(read_value(self.d, self.raw, ctx))
    }

    fn invalid(&self, what: &'static str) -> DecodeError {
        self.d.invalid(what)
    }
}

/// The next value in context `ctx`: its symbol, and raw bits for a large one. Errors are kept in
/// the decoder (`RansDecoder::check`) so this hot path returns a plain value.
#[inline(always)]
fn read_value(d: &mut RansDecoder<'_>, raw: &mut BitReader<'_>, ctx: usize) -> u64 {
    let symbol = d.symbol(ctx);
    let mut failed = false;
    let value = value_of_symbol(raw, symbol, &mut failed);
    if failed {
        d.fail();
    }
    value
}

/// The value `symbol` stands for: itself below `LITERALS`, else with its raw bits; 0 and
/// `failed` set for a symbol past the alphabet (the decoder's mark for an unused context) or
/// raw bits missing. Raw bits are read inline while 8 bytes of raw stream remain: large counts
/// are the rule in coarse rollups (an hour's bins hold hundreds).
#[inline(always)]
fn value_of_symbol(raw: &mut BitReader<'_>, symbol: u8, failed: &mut bool) -> u64 {
    if u64::from(symbol) < LITERALS {
        return u64::from(symbol);
    }
    if usize::from(symbol) < ALPHABET {
        if let Some(bits) = raw.read_within_window(raw_bits_of(symbol)) {
            return value_of(symbol, bits);
        }
    }
    read_raw_slow(raw, symbol, failed)
}

#[cold]
fn read_raw_slow(raw: &mut BitReader<'_>, symbol: u8, failed: &mut bool) -> u64 {
    let value = (usize::from(symbol) < ALPHABET)
        .then(|| raw.read(raw_bits_of(symbol)).ok())
        .flatten();
    *failed |= value.is_none();
    value.map_or(0, |bits| value_of(symbol, bits))
}

/// The storage-order key of an extra's ordinal, checked below `BIN_COUNT_MAX` when decoded.
#[inline]
fn extra_key(ordinal: u16) -> u16 {
    let key = key_of_ordinal(ordinal);
    debug_assert!(key.is_some());
    key.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::repair_frame;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_distr::Distribution;

    fn assert_round_trip(periods: &[(i64, Histogram)]) -> Vec<u8> {
        let bytes = encode(periods).unwrap();
        let back = decode(&bytes).unwrap();
        assert_eq!(back, periods);
        bytes
    }

    #[test]
    fn every_key_maps_back() {
        let mut bins = 0;
        for key in 0..=u16::MAX {
            if let Some(bin) = bin_of_key(key) {
                assert_eq!(bin.key(), key);
                bins += 1;
            }
        }
        assert_eq!(bins, BIN_COUNT_MAX);
        let mut prev = None;
        for ordinal in 0..BIN_COUNT_MAX as u16 {
            let key = key_of_ordinal(ordinal).unwrap();
            assert!(bin_of_key(key).is_some());
            assert_eq!(ordinal_of_key(key), ordinal);
            assert_eq!(bin_of_ordinal(ordinal), bin_of_key(key));
            assert!(prev < Some(key));
            prev = Some(key);
        }
        assert_eq!(key_of_ordinal(BIN_COUNT_MAX as u16), None);
        assert_eq!(bin_of_ordinal(BIN_COUNT_MAX as u16), None);
    }

    #[test]
    fn edge_cases_round_trip() {
        let extremes = Histogram::from_bins([
            (Bin::NAN, u64::MAX),
            (Bin::ZERO, 1),
            (Bin::new(-99, 127).unwrap(), 7),
            (Bin::new(10, -128).unwrap(), 1 << 40),
            (Bin::new(99, 127).unwrap(), 2),
        ]);
        let periods = vec![
            (-60_000, Histogram::new()),
            (0, extremes.clone()),
            (60_000, Histogram::new()),
            (120_000, extremes.clone()),
            (180_000, Histogram::from_bins([(Bin::NAN, 1)])),
            (i64::MAX, extremes),
        ];
        assert_round_trip(&periods);
    }

    /// NaN, zero and latency bins far apart, repeating: cheap to code and no scan of the gap.
    #[test]
    fn repeating_far_apart_bins_are_cheap() {
        let h = Histogram::from_bins([
            (Bin::NAN, 3),
            (Bin::ZERO, 5),
            (Bin::from_f64(0.0012), 7),
            (Bin::from_f64(0.5), 1),
            (Bin::from_f64(1e100), 2),
        ]);
        let periods: Vec<(i64, Histogram)> = (0..1000).map(|i| (i * 60_000, h.clone())).collect();
        let bytes = assert_round_trip(&periods);
        // Five bins with small counts: about a byte per period, mostly the counts' low bits.
        assert!(bytes.len() < 1500, "{} bytes for 1000 periods", bytes.len());
    }

    /// A steady core with rare bins far from it (NaN, zero, huge values, a lone neighbour) in
    /// some periods: the rare ones are coded outside the window, before, between and after its
    /// bins, and every period comes back exactly.
    #[test]
    fn bins_outside_the_window_round_trip() {
        let core: Vec<Bin> = (0..30)
            .map(|i| Bin::from_f64(0.010 + 0.001 * f64::from(i)))
            .collect();
        let rare = [
            Bin::NAN,
            Bin::new(-50, 3).unwrap(),
            Bin::ZERO,
            Bin::from_f64(0.0255),
            Bin::from_f64(1e100),
        ];
        let periods: Vec<(i64, Histogram)> = (0..200u64)
            .map(|p| {
                let mut bins: Vec<(Bin, u64)> = core
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| !(p + i as u64).is_multiple_of(3))
                    .map(|(i, &b)| (b, 1 + (p * 7 + i as u64) % 40))
                    .collect();
                for (j, &b) in rare.iter().enumerate() {
                    if (p + j as u64).is_multiple_of(11) {
                        bins.push((b, 1 + p * (j as u64 + 1)));
                    }
                }
                (p as i64 * 60_000, Histogram::from_bins(bins))
            })
            .collect();
        assert_round_trip(&periods);
    }

    /// A chunk of one small period costs little beyond its frame, header and the coder's final
    /// 8 bytes of state: the tables of unused contexts take one bit each.
    #[test]
    fn small_chunks_are_small() {
        let one = [(0, Histogram::from_bins([(Bin::from_f64(0.25), 3)]))];
        let bytes = assert_round_trip(&one);
        assert!(bytes.len() <= 32, "{} bytes", bytes.len());
        let empty = [(0, Histogram::new())];
        let bytes = assert_round_trip(&empty);
        assert!(bytes.len() <= 26, "{} bytes", bytes.len());
    }

    /// A window class past the last context is rejected, never used as an index; a class of an
    /// unused context fails the decode.
    #[test]
    fn window_class_out_of_range_is_rejected() {
        let periods = [(0, Histogram::from_bins([(Bin::ZERO, 5)]))];
        let bytes = assert_round_trip(&periods);
        // version, kind, count, first timestamp, ts_size, width, ordinal 23,041 (3 varint
        // bytes), class.
        let class_at = 9;
        assert!(usize::from(bytes[class_at]) < CLASSES);
        let mut bad = bytes.clone();
        bad[class_at] = CLASSES as u8;
        let err = decode(&repair_frame(bad, ChunkKind::Histogram)).unwrap_err();
        assert!(
            matches!(err, DecodeError::Invalid { what, .. } if what.contains("class")),
            "{err:?}"
        );
        // A valid class whose context has no table: the decoder fails, never indexes past it
        // (found by cargo-fuzz).
        for class in 0..CLASSES as u8 {
            let mut other = bytes.clone();
            other[class_at] = class;
            if class != bytes[class_at] {
                assert!(decode(&repair_frame(other, ChunkKind::Histogram)).is_err());
            }
        }
    }

    fn lognormal_periods(
        rng: &mut rand::rngs::StdRng,
        periods: usize,
        steps_per_period: usize,
    ) -> Vec<(i64, Histogram)> {
        // σ = 1.6 gives ≈75 populated bins for 100 observations (checked below).
        let dist = rand_distr::LogNormal::new(-3.0, 1.6).unwrap();
        (0..periods)
            .map(|p| {
                let mut h = Histogram::new();
                for _ in 0..100 * steps_per_period {
                    h.insert(dist.sample(rng));
                }
                (
                    1_700_000_000_000 + (p * steps_per_period) as i64 * 10_000,
                    h,
                )
            })
            .collect()
    }

    /// The histogram shape: 100 lognormal observations per 10 s step (≈75 bins), 4-hour
    /// chunks. Bounds bytes per submitted histogram sample at a 10 s period (every sample its own
    /// period) and at the default 60 s period (six samples merged per period).
    #[test]
    fn bytes_per_histogram_sample_lognormal() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let series = 4;
        let (mut bytes_10s, mut bytes_60s, mut bins) = (0, 0, 0);
        for _ in 0..series {
            let p10 = lognormal_periods(&mut rng, 1440, 1);
            bins += p10.iter().map(|(_, h)| h.bin_count()).sum::<usize>();
            bytes_10s += assert_round_trip(&p10).len();
            bytes_60s += assert_round_trip(&lognormal_periods(&mut rng, 240, 6)).len();
        }
        let samples = (series * 1440) as f64;
        let bins_mean = bins as f64 / samples;
        let (per_10s, per_60s) = (bytes_10s as f64 / samples, bytes_60s as f64 / samples);
        let raw = 2.0 + 4.0 * bins_mean;
        println!("lognormal: {bins_mean:.1} bins/sample; {per_10s:.2} B/sample at 10 s periods, {per_60s:.2} B/sample at 60 s periods (raw llhist ≈ {raw:.0} B)");
        assert!((65.0..=85.0).contains(&bins_mean), "{bins_mean}");
        assert!(per_10s <= 50.0, "{per_10s}");
        assert!(per_60s <= 25.0, "{per_60s}");
    }

    fn histogram() -> impl Strategy<Value = Histogram> {
        let bin = prop_oneof![
            (any::<i8>(), any::<i8>()).prop_filter_map("valid bin", |(v, e)| Bin::new(v, e)),
            (10i8..14, -2i8..0).prop_map(|(v, e)| Bin::new(v, e).unwrap()),
        ];
        let count = prop_oneof![1u64..4, any::<u64>()];
        proptest::collection::vec((bin, count), 0..20).prop_map(Histogram::from_bins)
    }

    proptest! {
        #[test]
        fn arbitrary_periods_round_trip(
            ts in proptest::collection::btree_set(any::<i64>(), 1..20),
            hs in proptest::collection::vec(histogram(), 20),
        ) {
            let periods: Vec<(i64, Histogram)> = ts.into_iter().zip(hs).collect();
            assert_round_trip(&periods);
        }

        #[test]
        fn decode_into_equals_merging_decoded_periods(
            ts in proptest::collection::btree_set(-50i64..50, 1..20),
            hs in proptest::collection::vec(histogram(), 20),
            slots in 1usize..4,
        ) {
            let periods: Vec<(i64, Histogram)> = ts.into_iter().zip(hs).collect();
            let bytes = encode(&periods).unwrap();
            // Naive model: negative starts skipped, the rest merged into start mod `slots`.
            let slot_of = |t: i64| (t >= 0).then_some(t as usize % slots);
            let mut want = vec![Histogram::new(); slots];
            for (t, h) in &periods {
                if let Some(i) = slot_of(*t) {
                    want[i].merge(h);
                }
            }
            let mut acc = vec![Accumulator::new(); slots];
            let summary = decode_into(&bytes, slot_of, &mut acc).unwrap();
            let got: Vec<Histogram> = acc.iter().map(Accumulator::to_histogram).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(summary.periods, periods.len());
            prop_assert_eq!(summary.first_ts_ms, periods[0].0);
            prop_assert_eq!(summary.last_ts_ms, periods[periods.len() - 1].0);
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
            if let Ok(periods) = decode(&repair_frame(bytes, ChunkKind::Histogram)) {
                for (_, h) in &periods {
                    h.assert_invariants();
                }
            }
        }

        #[test]
        fn decode_mutated_chunk_never_panics(hs in proptest::collection::vec(histogram(), 1..6), flip in any::<usize>(), bit in 0u8..8) {
            let periods: Vec<(i64, Histogram)> = hs.into_iter().enumerate().map(|(i, h)| (i as i64 * 60_000, h)).collect();
            let mut bytes = encode(&periods).unwrap();
            let at = flip % (bytes.len() - 4);
            bytes[at] ^= 1 << bit;
            let _ = decode(&repair_frame(bytes, ChunkKind::Histogram));
        }
    }
}
