//! Histogram chunks: one series' (period start ms, histogram) pairs, strictly increasing in time.
//!
//! Consecutive periods of one stream draw from much the same distribution, so the coder keeps a
//! model of it — a decaying density per bin seen recently (the "known" bins) — and codes each
//! period with an adaptive binary range coder: one occupancy bit per known bin (context: the
//! bin's density level and whether the known bin before it is populated), then the bins that
//! are new as a count and gaps, and every count as an adaptive Elias-gamma code (context: the
//! density level). A bin that has been busy costs little to say is busy again; bins never seen
//! cost nothing until they appear (a NaN or zero bin far from the others adds no scan). Integer
//! arithmetic only, so encoder and decoder evolve the same model.

use hist::{Bin, Histogram, BIN_COUNT_MAX};

use super::bits::{get_varint, put_varint, unzigzag, zigzag, BitReader, BitWriter};
use super::range::{GammaModel, Prob, RangeDecoder, RangeEncoder};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_finish, frame_start};
use super::{ChunkKind, DecodeError, EncodeError};

/// Most periods in one histogram chunk; bounds what a decoder allocates for any input.
pub const HIST_CHUNK_PERIODS_MAX: usize = 1 << 16;
/// Most bin slots (sum over periods of known bins visited plus new bins) in one chunk; bounds
/// decoder work and memory on any input. Writers split longer runs into more chunks.
pub const HIST_CHUNK_SLOTS_MAX: u64 = 1 << 22;
/// Density levels used as coding contexts.
const DENSITY_LEVELS: usize = 16;
/// The density halves every this many periods.
const DENSITY_HALF_LIFE_PERIODS: u32 = 4;
/// One observation adds this much density (fixed point).
const DENSITY_UNIT: u64 = 16;
/// Counts above this add no more density (keeps the fixed point far from overflow).
const DENSITY_COUNT_MAX: u64 = 1 << 20;
/// Contexts per gamma model (positions of the unary length prefix).
const GAMMA_CONTEXTS: usize = 24;

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

/// The bin of a valid ordinal (below `BIN_COUNT_MAX`), computed directly rather than through
/// its key: decoding does this for every bin of every period.
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

/// One period's bins as parallel vectors of bin ordinals ("keys" below) and counts (ordinals
/// ascending, counts > 0).
#[derive(Default, Clone, Debug)]
struct Bins {
    keys: Vec<u16>,
    counts: Vec<u64>,
}

impl Bins {
    /// Refills `self` with the bins of `h`, reusing its allocations (one `Bins` serves every
    /// period of a chunk, so encoding allocates nothing per period).
    fn fill(&mut self, h: &Histogram) {
        self.keys.clear();
        self.counts.clear();
        self.keys.reserve(h.bin_count());
        self.counts.reserve(h.bin_count());
        for (b, c) in h.bins() {
            self.keys.push(ordinal_of_key(b.key()));
            self.counts.push(c);
        }
        assert!(
            self.keys.windows(2).all(|w| w[0] < w[1]),
            "bins in storage order"
        );
        assert!(self.counts.iter().all(|&c| c > 0), "no empty bins");
        debug_assert!(self
            .keys
            .iter()
            .all(|&k| key_of_ordinal(k).and_then(bin_of_key).is_some()));
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.counts.clear();
    }

    fn push(&mut self, ordinal: u16, count: u64) {
        self.keys.push(ordinal);
        self.counts.push(count);
    }

    /// The histogram of decoded bins (ordinals ascending and valid by construction).
    fn histogram(&self) -> Histogram {
        // Collected into an exactly sized vector first: `from_bins` then reuses it in place
        // instead of growing its own through a size-hint-less filter.
        let bins: Vec<(Bin, u64)> = self
            .keys
            .iter()
            .zip(&self.counts)
            .map(|(&o, &c)| {
                // Every ordinal below `BIN_COUNT_MAX` names a bin (`every_key_maps_back`), and
                // decoded ordinals are checked against it; NaN is never substituted.
                let bin = bin_of_ordinal(o);
                debug_assert!(bin.is_some() && bin == key_of_ordinal(o).and_then(bin_of_key));
                (bin.unwrap_or(Bin::NAN), c)
            })
            .collect();
        let h = Histogram::from_bins(bins);
        debug_assert_eq!(h.bin_count(), self.keys.len());
        if cfg!(debug_assertions) {
            h.assert_invariants();
        }
        h
    }
}

/// The coder's state, advanced identically by the encoder and the decoder.
struct Model {
    empty: Prob,
    /// Number of new bins (not in the known set) in a period.
    new_count: GammaModel,
    /// First new bin relative to the previous period's first bin; then gaps between new bins.
    new_first: GammaModel,
    new_gap: GammaModel,
    occupied: [[Prob; 2]; DENSITY_LEVELS],
    counts: Vec<GammaModel>,
    /// The known bins, ascending, with their density at the current epoch and their context
    /// level (1 + log2 of the density, capped). Bins whose density decays to zero are dropped.
    known: Vec<Known>,
    /// The next period's `known`, built by merging (kept to reuse its allocation).
    scratch: Vec<Known>,
    /// The encoder's new bins of the period being coded (kept to reuse its allocation).
    new: Vec<(u16, u64)>,
    prev_first: u16,
    period: u32,
}

#[derive(Clone, Copy, Debug)]
struct Known {
    ordinal: u16,
    level: u8,
    density: u64,
}

impl Known {
    fn new(ordinal: u16, density: u64) -> Known {
        debug_assert!(density > 0);
        let level = (1 + density.ilog2() as usize).min(DENSITY_LEVELS - 1);
        Known {
            ordinal,
            level: level as u8,
            density,
        }
    }
}

impl Model {
    fn new() -> Model {
        Model {
            empty: Prob::default(),
            new_count: GammaModel::new(GAMMA_CONTEXTS),
            new_first: GammaModel::new(GAMMA_CONTEXTS),
            new_gap: GammaModel::new(GAMMA_CONTEXTS),
            occupied: [[Prob::default(); 2]; DENSITY_LEVELS],
            counts: vec![GammaModel::new(GAMMA_CONTEXTS); DENSITY_LEVELS],
            known: Vec::new(),
            scratch: Vec::new(),
            new: Vec::new(),
            prev_first: 0,
            period: 0,
        }
    }

    /// Folds a coded period into the model (both sides call this after each period): adds each
    /// populated bin's count to its density, then halves every density when the epoch
    /// (`period / DENSITY_HALF_LIFE_PERIODS`) advances, dropping bins that reach zero. One
    /// merge of two ascending lists; halving step by step equals the shift by the epochs passed.
    fn update(&mut self, bins: &Bins) {
        let epoch = self.period / DENSITY_HALF_LIFE_PERIODS;
        self.period += 1;
        let shift = self.period / DENSITY_HALF_LIFE_PERIODS - epoch;
        let add = |count: u64| count.min(DENSITY_COUNT_MAX) * DENSITY_UNIT;
        let mut next = std::mem::take(&mut self.scratch);
        next.clear();
        next.reserve(self.known.len() + bins.keys.len());
        let mut push = |ordinal: u16, density: u64| {
            let density = density >> shift;
            if density > 0 {
                next.push(Known::new(ordinal, density));
            }
        };
        let known = &self.known;
        let (mut k, mut b) = (0, 0);
        // Both lists non-empty: the three-way merge; then whichever tail is left.
        while k < known.len() && b < bins.keys.len() {
            let (x, bin) = (known[k], bins.keys[b]);
            if x.ordinal < bin {
                push(x.ordinal, x.density);
                k += 1;
            } else if bin < x.ordinal {
                push(bin, add(bins.counts[b]));
                b += 1;
            } else {
                push(bin, x.density + add(bins.counts[b]));
                k += 1;
                b += 1;
            }
        }
        for x in &known[k..] {
            push(x.ordinal, x.density);
        }
        for (&bin, &count) in bins.keys[b..].iter().zip(&bins.counts[b..]) {
            push(bin, add(count));
        }
        self.scratch = std::mem::replace(&mut self.known, next);
        debug_assert!(self.known.windows(2).all(|w| w[0].ordinal < w[1].ordinal));
        if let Some(&first) = bins.keys.first() {
            self.prev_first = first;
        }
    }
}

/// Encodes one chunk of per-period histograms. Period starts must strictly increase.
pub fn encode(periods: &[(i64, Histogram)]) -> Result<Vec<u8>, EncodeError> {
    let count = check_timestamps(periods.iter().map(|p| p.0))?;
    if count > HIST_CHUNK_PERIODS_MAX {
        return Err(EncodeError::TooManySamples { count });
    }
    let ts_ms: Vec<i64> = periods.iter().map(|p| p.0).collect();
    let mut out = frame_start(ChunkKind::Histogram);
    put_varint(&mut out, count as u64);
    let header = timestamps::write_header(&mut out, &ts_ms);
    let mut w = BitWriter::new();
    timestamps::write_bits(&mut w, &ts_ms, header);
    let ts_bits = w.finish();
    put_varint(&mut out, ts_bits.len() as u64);
    out.extend_from_slice(&ts_bits);
    let mut e = RangeEncoder::new();
    let mut model = Model::new();
    let mut slots = 0u64;
    let mut bins = Bins::default();
    for (_, h) in periods {
        bins.fill(h);
        slots += write_period(&mut e, &mut model, &bins);
        if slots > HIST_CHUNK_SLOTS_MAX {
            return Err(EncodeError::TooManySlots { slots });
        }
        model.update(&bins);
    }
    out.extend_from_slice(&e.finish());
    Ok(frame_finish(out))
}

/// Codes one period; returns the slots it used (known bins visited plus new bins).
fn write_period(e: &mut RangeEncoder, model: &mut Model, bins: &Bins) -> u64 {
    if bins.keys.is_empty() {
        e.bit(&mut model.empty, true);
        return 0;
    }
    e.bit(&mut model.empty, false);
    let mut i = 0;
    let mut new = std::mem::take(&mut model.new);
    new.clear();
    let mut prev_occupied = false;
    for k in 0..model.known.len() {
        let Known { ordinal, level, .. } = model.known[k];
        let level = usize::from(level);
        while i < bins.keys.len() && bins.keys[i] < ordinal {
            new.push((bins.keys[i], bins.counts[i]));
            i += 1;
        }
        let occupied = bins.keys.get(i) == Some(&ordinal);
        e.bit(
            &mut model.occupied[level][usize::from(prev_occupied)],
            occupied,
        );
        if occupied {
            e.gamma(&mut model.counts[level], bins.counts[i] - 1);
            i += 1;
        }
        prev_occupied = occupied;
    }
    new.extend(
        bins.keys[i..]
            .iter()
            .copied()
            .zip(bins.counts[i..].iter().copied()),
    );
    e.gamma(&mut model.new_count, new.len() as u64);
    let mut prev: Option<u16> = None;
    for &(ordinal, count) in &new {
        match prev {
            None => e.gamma(
                &mut model.new_first,
                zigzag(i64::from(ordinal) - i64::from(model.prev_first)),
            ),
            Some(p) => e.gamma(&mut model.new_gap, u64::from(ordinal - p - 1)),
        }
        e.gamma(&mut model.counts[0], count - 1);
        prev = Some(ordinal);
    }
    let slots = (model.known.len() + new.len()) as u64;
    model.new = new;
    slots
}

/// Decodes one chunk; never panics; work and memory bounded by `HIST_CHUNK_PERIODS_MAX` and
/// `HIST_CHUNK_SLOTS_MAX` whatever the input.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    let body = frame_body(bytes, ChunkKind::Histogram)?;
    let mut pos = 0;
    let count = get_varint(body, &mut pos)?;
    if count == 0 || count > HIST_CHUNK_PERIODS_MAX as u64 {
        return Err(DecodeError::TooManySamples { count });
    }
    let count = count as usize;
    let header = timestamps::read_header(body, &mut pos, count)?;
    let ts_len = get_varint(body, &mut pos)?;
    if ts_len > (body.len() - pos) as u64 {
        return Err(DecodeError::Truncated {
            bit_offset: body.len() as u64 * 8,
        });
    }
    let ts_end = pos + ts_len as usize;
    let mut r = BitReader::new(&body[pos..ts_end]);
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    r.finish()?;
    let mut d = RangeDecoder::new(&body[ts_end..])?;
    let mut model = Model::new();
    let mut slots_left = HIST_CHUNK_SLOTS_MAX;
    let mut out = Vec::with_capacity(count);
    // Reused for every period: the period's bins, its new bins, and the merge of the two.
    let (mut bins, mut new, mut merged) = (Bins::default(), Bins::default(), Bins::default());
    for ts in ts_ms {
        read_period(&mut d, &mut model, &mut slots_left, &mut bins, &mut new)?;
        if !new.keys.is_empty() {
            merge_bins(&bins, &new, &mut merged)
                .ok_or_else(|| d.invalid("new bin repeats a known bin"))?;
            std::mem::swap(&mut bins, &mut merged);
        }
        model.update(&bins);
        out.push((ts, bins.histogram()));
    }
    d.finish()?;
    Ok(out)
}

/// Reads one period: its known populated bins into `kept`, its new bins into `new` (both
/// cleared first; the caller merges them).
fn read_period(
    d: &mut RangeDecoder<'_>,
    model: &mut Model,
    slots_left: &mut u64,
    kept: &mut Bins,
    new: &mut Bins,
) -> Result<(), DecodeError> {
    kept.clear();
    new.clear();
    if d.bit(&mut model.empty)? {
        return Ok(());
    }
    take_slots(d, slots_left, model.known.len() as u64)?;
    let mut prev_occupied = false;
    for k in 0..model.known.len() {
        let Known { ordinal, level, .. } = model.known[k];
        let level = usize::from(level);
        let occupied = d.bit(&mut model.occupied[level][usize::from(prev_occupied)])?;
        if occupied {
            let count = read_count(d, &mut model.counts[level])?;
            kept.push(ordinal, count);
        }
        prev_occupied = occupied;
    }
    let new_count = d.gamma(&mut model.new_count)?;
    take_slots(d, slots_left, new_count)?;
    let mut prev: Option<i64> = None;
    for _ in 0..new_count {
        let ordinal = match prev {
            None => {
                i64::from(model.prev_first).wrapping_add(unzigzag(d.gamma(&mut model.new_first)?))
            }
            Some(p) => p
                .wrapping_add(1)
                .wrapping_add(d.gamma(&mut model.new_gap)? as i64),
        };
        if !(0..BIN_COUNT_MAX as i64).contains(&ordinal) || prev.is_some_and(|p| ordinal <= p) {
            return Err(d.invalid("new bin out of range or order"));
        }
        let count = read_count(d, &mut model.counts[0])?;
        new.push(ordinal as u16, count);
        prev = Some(ordinal);
    }
    Ok(())
}

fn take_slots(d: &RangeDecoder<'_>, slots_left: &mut u64, slots: u64) -> Result<(), DecodeError> {
    *slots_left = slots_left
        .checked_sub(slots)
        .ok_or_else(|| d.invalid("more bin slots than HIST_CHUNK_SLOTS_MAX"))?;
    Ok(())
}

fn read_count(d: &mut RangeDecoder<'_>, model: &mut GammaModel) -> Result<u64, DecodeError> {
    d.gamma(model)?
        .checked_add(1)
        .ok_or_else(|| d.invalid("bin count above 2^64 - 1"))
}

/// Two ascending bin lists as one in `out` (cleared first), or `None` if they share a bin.
fn merge_bins(a: &Bins, b: &Bins, out: &mut Bins) -> Option<()> {
    out.clear();
    out.keys.reserve(a.keys.len() + b.keys.len());
    out.counts.reserve(a.keys.len() + b.keys.len());
    let (mut i, mut j) = (0, 0);
    while i < a.keys.len() && j < b.keys.len() {
        let (ka, kb) = (a.keys[i], b.keys[j]);
        if ka < kb {
            out.push(ka, a.counts[i]);
            i += 1;
        } else if kb < ka {
            out.push(kb, b.counts[j]);
            j += 1;
        } else {
            return None;
        }
    }
    out.keys.extend_from_slice(&a.keys[i..]);
    out.counts.extend_from_slice(&a.counts[i..]);
    out.keys.extend_from_slice(&b.keys[j..]);
    out.counts.extend_from_slice(&b.counts[j..]);
    Some(())
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
