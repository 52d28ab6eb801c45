//! Histogram chunks: one series' (period start ms, histogram) pairs, strictly increasing in time.
//!
//! Consecutive periods of one stream populate mostly the same bins, so each period's bin set is
//! coded either as gaps between its bin keys or as a keep/drop bitmap over the previous period's
//! bins plus the gaps of the new ones, whichever is shorter; counts are Rice-coded either as
//! `count − 1` or as the difference from the same bin's count in the previous period, again
//! whichever is shorter, with the Rice parameter chosen per period.

use hist::{Bin, Histogram, BIN_COUNT_MAX};

use super::bits::{best_rice_k, put_varint, rice_bits, unzigzag, zigzag, BitReader, BitWriter};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_finish, frame_start, read_count};
use super::{ChunkKind, DecodeError, EncodeError};

/// Rice parameter of the change in bin count from one period to the next.
const BIN_COUNT_DELTA_K: u32 = 3;
/// Rice parameter of a key list's first key, relative to an anchor key.
const FIRST_KEY_K: u32 = 4;
/// Width of the per-list gap Rice parameter field.
const GAP_K_BITS: u32 = 4;
/// Width of the per-period count Rice parameter field.
const COUNT_K_BITS: u32 = 6;
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

/// The storage-order key of an ordinal, or `None` past the last bin.
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

/// One period's bins as parallel vectors of bin ordinals ("keys" below) and counts (ordinals
/// ascending, counts > 0).
#[derive(Default, Clone, Debug)]
struct Bins {
    keys: Vec<u16>,
    counts: Vec<u64>,
}

impl Bins {
    fn of(h: &Histogram) -> Bins {
        let (keys, counts): (Vec<u16>, Vec<u64>) =
            h.bins().map(|(b, c)| (ordinal_of_key(b.key()), c)).unzip();
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "bins in storage order"
        );
        assert!(counts.iter().all(|&c| c > 0), "no empty bins");
        debug_assert!(keys
            .iter()
            .all(|&k| key_of_ordinal(k).and_then(bin_of_key).is_some()));
        Bins { keys, counts }
    }

    fn first_key(&self) -> u16 {
        self.keys.first().copied().unwrap_or(0)
    }
}

/// Encodes one chunk of per-period histograms. Period starts must strictly increase.
pub fn encode(periods: &[(i64, Histogram)]) -> Result<Vec<u8>, EncodeError> {
    let count = check_timestamps(periods.iter().map(|p| p.0))?;
    let ts_ms: Vec<i64> = periods.iter().map(|p| p.0).collect();
    let mut out = frame_start(ChunkKind::Histogram);
    put_varint(&mut out, count as u64);
    let header = timestamps::write_header(&mut out, &ts_ms);
    let mut w = BitWriter::new();
    timestamps::write_bits(&mut w, &ts_ms, header);
    let mut prev = Bins::default();
    for (_, h) in periods {
        let bins = Bins::of(h);
        write_period(&mut w, &bins, &prev);
        prev = bins;
    }
    out.extend_from_slice(&w.finish());
    Ok(frame_finish(out))
}

fn write_period(w: &mut BitWriter, bins: &Bins, prev: &Bins) {
    let n_delta = (bins.keys.len() as i64).wrapping_sub(prev.keys.len() as i64);
    w.write_rice(zigzag(n_delta), BIN_COUNT_DELTA_K);
    if bins.keys.is_empty() {
        return;
    }
    let gaps = key_list_bits(&bins.keys, prev.first_key());
    let diff = key_diff_bits(&bins.keys, prev);
    if diff.bit_len() < gaps.bit_len() {
        w.write_bit(true);
        w.append(&diff);
    } else {
        w.write_bit(false);
        w.append(&gaps);
    }
    write_counts(w, bins, prev);
}

/// A sorted key list: the first relative to `anchor`, then each gap minus one, Rice-coded.
fn key_list_bits(keys: &[u16], anchor: u16) -> BitWriter {
    let mut w = BitWriter::new();
    let Some(&first) = keys.first() else {
        return w;
    };
    w.write_rice(zigzag(i64::from(first) - i64::from(anchor)), FIRST_KEY_K);
    let gaps: Vec<u64> = keys
        .windows(2)
        .map(|p| u64::from(p[1] - p[0] - 1))
        .collect();
    let (k, _) = best_rice_k(&gaps, (1 << GAP_K_BITS) - 1);
    w.write(u64::from(k), GAP_K_BITS);
    for &gap in &gaps {
        w.write_rice(gap, k);
    }
    w
}

/// The bin set as one keep bit per previous bin plus the key list of the bins that are new.
fn key_diff_bits(keys: &[u16], prev: &Bins) -> BitWriter {
    let mut w = BitWriter::new();
    let mut added = Vec::new();
    let mut i = 0;
    for &key in keys {
        while i < prev.keys.len() && prev.keys[i] < key {
            w.write_bit(false);
            i += 1;
        }
        if i < prev.keys.len() && prev.keys[i] == key {
            w.write_bit(true);
            i += 1;
        } else {
            added.push(key);
        }
    }
    for _ in i..prev.keys.len() {
        w.write_bit(false);
    }
    w.append(&key_list_bits(&added, prev.first_key()));
    w
}

/// Each count as `count − 1`, or (mode bit set) as the zigzag difference from the previous
/// period's count of the same bin where there was one.
fn write_counts(w: &mut BitWriter, bins: &Bins, prev: &Bins) {
    let k_max = (1 << COUNT_K_BITS) - 1;
    let plain: Vec<u64> = bins.counts.iter().map(|&c| c - 1).collect();
    let delta = count_deltas(bins, prev);
    let (plain_k, plain_bits) = best_rice_k(&plain, k_max);
    let (delta_k, delta_bits) = best_rice_k(&delta, k_max);
    let (mode, k, values) = if delta_bits < plain_bits {
        (true, delta_k, &delta)
    } else {
        (false, plain_k, &plain)
    };
    w.write_bit(mode);
    w.write(u64::from(k), COUNT_K_BITS);
    for &v in values {
        w.write_rice(v, k);
    }
    debug_assert_eq!(
        values.iter().map(|&v| rice_bits(v, k)).sum::<u64>(),
        plain_bits.min(delta_bits)
    );
}

fn count_deltas(bins: &Bins, prev: &Bins) -> Vec<u64> {
    let mut out = Vec::with_capacity(bins.keys.len());
    let mut i = 0;
    for (&key, &count) in bins.keys.iter().zip(&bins.counts) {
        while i < prev.keys.len() && prev.keys[i] < key {
            i += 1;
        }
        match prev.keys.get(i) {
            Some(&k) if k == key => out.push(zigzag(count.wrapping_sub(prev.counts[i]) as i64)),
            _ => out.push(count - 1),
        }
    }
    out
}

/// Decodes one chunk; never panics, allocation bounded by the input length.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    let body = frame_body(bytes, ChunkKind::Histogram)?;
    let mut pos = 0;
    // Every period costs at least the 4-bit code of its bin count change.
    let count = read_count(body, &mut pos, BIN_COUNT_DELTA_K as u64 + 1)?;
    let header = timestamps::read_header(body, &mut pos, count)?;
    let mut r = BitReader::new(&body[pos..]);
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    let mut out = Vec::with_capacity(count);
    let mut prev = Bins::default();
    for ts in ts_ms {
        let bins = read_period(&mut r, &prev)?;
        let h = Histogram::from_bins(
            bins.keys
                .iter()
                .zip(&bins.counts)
                .filter_map(|(&k, &c)| Some((bin_of_key(key_of_ordinal(k)?)?, c))),
        );
        if h.bin_count() != bins.keys.len() {
            return Err(r.invalid("invalid bin key"));
        }
        if cfg!(debug_assertions) {
            h.assert_invariants();
        }
        out.push((ts, h));
        prev = bins;
    }
    r.finish()?;
    Ok(out)
}

fn read_period(r: &mut BitReader<'_>, prev: &Bins) -> Result<Bins, DecodeError> {
    let n_delta = unzigzag(r.read_rice(BIN_COUNT_DELTA_K)?);
    let n = (prev.keys.len() as i64).wrapping_add(n_delta);
    // Each bin costs at least one bit (its count), which bounds the allocation.
    if n < 0 || n as u64 > BIN_COUNT_MAX as u64 || n as u64 > r.remaining_bits() {
        return Err(r.invalid("bin count"));
    }
    let n = n as usize;
    if n == 0 {
        return Ok(Bins::default());
    }
    let keys = if r.read_bit()? {
        read_key_diff(r, n, prev)?
    } else {
        read_key_list(r, n, prev.first_key())?
    };
    let counts = read_counts(r, &keys, prev)?;
    Ok(Bins { keys, counts })
}

fn read_key_list(r: &mut BitReader<'_>, n: usize, anchor: u16) -> Result<Vec<u16>, DecodeError> {
    let mut keys = Vec::with_capacity(n);
    if n == 0 {
        return Ok(keys);
    }
    let first = i64::from(anchor).wrapping_add(unzigzag(r.read_rice(FIRST_KEY_K)?));
    let mut key = u16::try_from(first).map_err(|_| r.invalid("bin key out of range"))?;
    keys.push(key);
    let k = r.read(GAP_K_BITS)? as u32;
    for _ in 1..n {
        let gap = r.read_rice(k)?;
        key = u64::from(key)
            .checked_add(gap.saturating_add(1))
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| r.invalid("bin key out of range"))?;
        keys.push(key);
    }
    Ok(keys)
}

fn read_key_diff(r: &mut BitReader<'_>, n: usize, prev: &Bins) -> Result<Vec<u16>, DecodeError> {
    let mut kept = Vec::with_capacity(prev.keys.len().min(n));
    for &key in &prev.keys {
        if r.read_bit()? {
            kept.push(key);
        }
    }
    if kept.len() > n {
        return Err(r.invalid("more kept bins than bins"));
    }
    let added = read_key_list(r, n - kept.len(), prev.first_key())?;
    let mut keys = Vec::with_capacity(n);
    let (mut a, mut b) = (kept.iter().peekable(), added.iter().peekable());
    while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
        if x < y {
            keys.push(x);
            a.next();
        } else {
            keys.push(y);
            b.next();
        }
    }
    keys.extend(a.chain(b));
    if !keys.windows(2).all(|w| w[0] < w[1]) {
        return Err(r.invalid("new bin repeats a kept bin"));
    }
    Ok(keys)
}

fn read_counts(r: &mut BitReader<'_>, keys: &[u16], prev: &Bins) -> Result<Vec<u64>, DecodeError> {
    let delta_mode = r.read_bit()?;
    let k = r.read(COUNT_K_BITS)? as u32;
    let mut counts = Vec::with_capacity(keys.len());
    let mut i = 0;
    for &key in keys {
        let v = r.read_rice(k)?;
        while i < prev.keys.len() && prev.keys[i] < key {
            i += 1;
        }
        let count = match prev.keys.get(i) {
            Some(&pk) if delta_mode && pk == key => prev.counts[i].wrapping_add(unzigzag(v) as u64),
            _ => v.wrapping_add(1),
        };
        if count == 0 {
            return Err(r.invalid("bin count of zero"));
        }
        counts.push(count);
    }
    Ok(counts)
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
            assert!(prev < Some(key));
            prev = Some(key);
        }
        assert_eq!(key_of_ordinal(BIN_COUNT_MAX as u16), None);
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
