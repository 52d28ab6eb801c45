//! What the histogram chunk layouts share: bin ordinals (storage-order keys with the unused
//! slots squeezed out), the frame start and period starts, the window's occupancy bar (bins
//! populated in enough periods are coded at every period, the rest as a short list of extras),
//! the extras' reading, and a decoded period. The Rice-coded layout (`rice_hist.rs`, kind 6)
//! and the packed one (`packed_hist.rs`, kind 5) build on it. Integer arithmetic only.

use hist::{Accumulator, Bin, Histogram, BIN_COUNT_MAX};

use super::bits::{get_varint, put_varint, unzigzag, BitReader, BitWriter};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_start};
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

/// The window's first bar ([`window_threshold_width`]): the one it keeps wherever the chunk's
/// slots fit under it.
pub(super) fn window_first_threshold(n_periods: u64) -> u64 {
    n_periods.div_ceil(WINDOW_OCCUPANCY_DIV).max(1)
}

/// The window's occupancy bar: the keys populated in at least this many of the chunk's
/// `n_periods` periods are its window bins — at first `1 / WINDOW_OCCUPANCY_DIV` of them,
/// raised until the chunk's slots (window × periods + the bins outside) fit
/// `HIST_CHUNK_SLOTS_MAX`. Returns the bar, the bins outside the window and the window's width
/// (the keys at or above the bar), given each key's number of periods.
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
fn bin_of_key(key: u16) -> Option<Bin> {
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

/// The periods a window decoder (`walk`: kind 6's `decode_with`) gives, as histograms.
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

/// The periods a window decoder gives, each added to `out[slot_of(start)]`: each period whose
/// start `slot_of` maps to `Some(i)` is added to `out[i]` (`None`, or an index past `out`: the
/// period is skipped). Periods are added as they are decoded, so after an error some may have
/// been added.
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

/// A window-coded chunk (kind 6) up to its periods: the frame checked, then the period
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

/// The start of both histogram chunk layouts (Rice-coded and packed): the period count (1 ..=
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
}
