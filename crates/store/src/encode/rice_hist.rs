//! Rice-coded histogram chunks (kind 6): what a flush and a compaction write for histogram
//! series.
//!
//! A window (`histogram.rs`): the bins populated in at least a quarter of the chunk's periods
//! are coded at every period, the others as a short list of extras. Each window bin gets a Rice
//! parameter from its mean count over the chunk, and every period writes each window bin's
//! count (0 where empty) as one Rice code with it: no symbol tables, no entropy coder state, no
//! per-bin lookup but the parameter. An empty window bin is `k + 1` zero bits, so the encoder
//! writes the run of empty bins before a populated one as one run of zeros.
//!
//! Why Rice codes and not an entropy coder: a static rANS coder over the same window saved
//! ≈ 7 % of the bytes (lognormal 100-observation samples, six per 60 s period: ≈ 15.6 against
//! 16.7 bytes per sample; the target is 25) but spent ≈ 11 ns per bin (2.4 µs per 211-bin
//! period), a third of a histogram sample's whole budget at the store's target rate.
//!
//! Layout (`FORMAT.md`, "Histogram, Rice-coded"): the period count and starts, the window
//! width as a varint, then one bit stream to the end of the body: the window (per bin,
//! its ordinal gap and the change of its Rice parameter), then per period the window counts
//! and the extras. Integer arithmetic only.

use hist::{Accumulator, Histogram, BIN_COUNT_MAX};

use super::bits::{get_varint, put_varint, unzigzag, zigzag, BitReader, BitWriter, Packer};
use super::bits::{RICE_CODE_BITS_MAX, RICE_K_MAX, RUN_K_SMALL_MAX};
use super::histogram::window_first_threshold;
use super::histogram::{accumulate_periods, collect_periods, read_extras, window_threshold_width};
use super::histogram::{key_of_ordinal, open_window_chunk, ordinal_of_key, start_chunk_ts};
use super::histogram::{ChunkSummary, ExtraSource, ExtraValue, Period};
use super::histogram::{HIST_CHUNK_PERIODS_MAX, HIST_CHUNK_SLOTS_MAX, MEAN_COUNT_MAX};
use super::{frame_finish, ChunkKind, DecodeError, EncodeError};
use hist::packed::{self, DenseCounts, DENSE_KEYS};

/// Rice parameter of the first window bin's ordinal (positive latencies sit near 2^15).
const K_WINDOW_FIRST: u32 = 14;
/// Rice parameter of each later window bin's ordinal gap, and of the zigzagged change of the
/// window bins' parameters (neighbouring bins: mostly 0).
const K_WINDOW_STEP: u32 = 0;
/// Rice parameters of a period's extras: their number, the first one's ordinal as a change
/// from the previous period's first, each later one's ordinal gap, and each count less one.
const K_EXTRAS: u32 = 2;
const K_EXTRA_FIRST: u32 = 4;
const K_EXTRA_GAP: u32 = 2;
const K_EXTRA_COUNT: u32 = 0;

/// A window bin's stats in the encoder's dense array: periods populated, in the high bits...
const OCCUPANCY_SHIFT: u32 = 40;
/// ... and the sum of its counts (each capped at `MEAN_COUNT_MAX`) in the low bits: at most
/// 2^16 periods × 2^20 < 2^40.
const SUM_MASK: u64 = (1 << OCCUPANCY_SHIFT) - 1;
const _: () = assert!((HIST_CHUNK_PERIODS_MAX as u64) * MEAN_COUNT_MAX <= SUM_MASK);

/// A window slot entry (`Window::slots`): for a window bin, its Rice parameter in the high
/// bits and the bits of all-empty window bins before it (Σ (k + 1), below 2^22: at most
/// `BIN_COUNT_MAX` bins of parameter ≤ `K_MAX`) in the low bits; one entry, so a bin costs the
/// encoder one lookup. A key outside the window has `OUTSIDE`.
const SLOT_K_SHIFT: u32 = 24;
const SLOT_ZEROS_MASK: u32 = (1 << SLOT_K_SHIFT) - 1;
const OUTSIDE: u32 = u32::MAX;
/// Largest Rice parameter the encoder gives a window bin (means are capped at
/// `MEAN_COUNT_MAX` = 2^20, so ≤ 20); the decoder takes up to `RICE_K_MAX`.
const K_MAX: u8 = 40;
const _: () = assert!((BIN_COUNT_MAX as u64) * (K_MAX as u64 + 1) <= SLOT_ZEROS_MASK as u64);
const _: () = assert!((K_MAX as u32) < (OUTSIDE >> SLOT_K_SHIFT));
// Nor does a window of every dense key, whatever its keys (`window_from_stats`).
const _: () = assert!((DENSE_KEYS as u64) * (K_MAX as u64 + 1) <= SLOT_ZEROS_MASK as u64);

/// A chunk's periods as the encoder reads them: each one's start and its bins.
pub trait Periods {
    fn count(&self) -> usize;
    fn start_ms(&self, i: usize) -> i64;
    /// At least the number of bins of period `i`.
    fn bins_max(&self, i: usize) -> usize;
    /// Calls `f(key, count)` for every bin of period `i`, keys ascending, counts above zero.
    /// Called twice per period with the same bins.
    fn for_each_bin(&self, i: usize, f: impl FnMut(u16, u64));
}

impl std::fmt::Debug for EncodeScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodeScratch")
            .field("bins_kept", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl Periods for [(i64, Histogram)] {
    fn count(&self) -> usize {
        self.len()
    }

    fn start_ms(&self, i: usize) -> i64 {
        self[i].0
    }

    fn bins_max(&self, i: usize) -> usize {
        self[i].1.bin_count()
    }

    #[inline]
    fn for_each_bin(&self, i: usize, mut f: impl FnMut(u16, u64)) {
        let h = &self[i].1;
        for (&k, &c) in h.keys().iter().zip(h.counts()) {
            f(k, c);
        }
    }
}

/// Periods whose bins the store packed itself (`hist::packed`): the head's, at a flush, read
/// without unpacking them first.
pub struct PackedPeriods<'a, B>(pub &'a [(i64, B)]);

impl<B: AsRef<[u8]>> Periods for PackedPeriods<'_, B> {
    fn count(&self) -> usize {
        self.0.len()
    }

    fn start_ms(&self, i: usize) -> i64 {
        self.0[i].0
    }

    fn bins_max(&self, i: usize) -> usize {
        // Every packed bin takes at least two bytes.
        self.0[i].1.as_ref().len() / 2
    }

    #[inline]
    fn for_each_bin(&self, i: usize, f: impl FnMut(u16, u64)) {
        packed::for_each_bin_trusted(self.0[i].1.as_ref(), f);
    }
}

/// The encoder's memory kept between chunks: a dense stats entry per key, all zero between
/// chunks (an encode zeroes what it touched). One per writer; made on first use.
#[derive(Default)]
pub struct EncodeScratch {
    stats: Option<Box<DenseCounts>>,
    /// The chunk's bins as the window pass read them (every period's keys and counts, one
    /// after another; period `i` ends at `ends[i]`), so the writing pass reads plain arrays
    /// instead of walking the periods' packed bytes again.
    keys: Vec<u16>,
    counts: Vec<u64>,
    ends: Vec<usize>,
    /// A chunk's bits ([`encode_with_window`]), kept so a flush of many series' chunks grows
    /// (and zero-fills) its buffer once: a writer made per chunk and grown by each period's
    /// worst-case reservation was a fifth of that encoder's instructions.
    bits: BitWriter,
    /// A coded period's extras, unpacked.
    extras: Vec<(u16, u64)>,
    /// A window choice's.
    window: WindowScratch,
}

/// The window of one chunk; also kept by a head series to code its later periods as they
/// close (`hist_head.rs`), so a flush only joins their bits.
#[derive(Debug)]
pub(crate) struct Window {
    /// Smallest key `slots` covers.
    lo: usize,
    /// By `key − lo`: the slot entry (see `SLOT_K_SHIFT`), or `OUTSIDE`.
    slots: Vec<u32>,
    keys: Vec<u16>,
    /// Each window bin's Rice parameter.
    ks: Vec<u8>,
    /// Bits of a period whose window bins are all empty: Σ (k + 1).
    all_empty_bits: u64,
    /// The largest of `ks` (0 for no bins).
    k_max: u8,
}

impl Window {
    /// A window of no bins, its slot table `slots_len` keys from `lo`, all outside.
    fn empty(lo: usize, slots_len: usize) -> Window {
        Window {
            lo,
            slots: vec![OUTSIDE; slots_len],
            keys: Vec::new(),
            ks: Vec::new(),
            all_empty_bits: 0,
            k_max: 0,
        }
    }

    /// The largest Rice parameter of its bins.
    #[cfg(test)]
    pub(crate) fn k_max(&self) -> u8 {
        self.k_max
    }

    #[inline(always)]
    fn slot(&self, key: u16) -> u32 {
        let slot = self.slots.get(usize::from(key).wrapping_sub(self.lo));
        slot.copied().unwrap_or(OUTSIDE)
    }

    /// The window a series' later periods are coded with: chosen from `periods` (its first
    /// ones, packed) as a chunk of them would choose it (a head keeps one per series). `None`
    /// where no bin qualifies or the periods' slots pass `HIST_CHUNK_SLOTS_MAX`.
    pub(crate) fn choose<'a>(
        periods: impl ExactSizeIterator<Item = &'a [u8]>,
        scratch: &mut EncodeScratch,
    ) -> Option<Window> {
        let window = choose_packed_window(periods, scratch).ok()?;
        let &first = window.keys.first()?;
        assert_eq!(window.slot(first) >> SLOT_K_SHIFT, u32::from(window.ks[0]));
        Some(window)
    }

    /// Window bins.
    pub(crate) fn width(&self) -> usize {
        self.keys.len()
    }
}

/// The Rice parameter of a window bin whose counts over `periods` periods sum to `sum`:
/// ⌊log2(mean × 2^0.3)⌋ (simulated on the lognormal shape: within 0.1 % of the best parameter
/// per bin; plain ⌊log2 mean⌋ costs 0.5 % more bits).
fn rice_k(sum: u64, periods: u64) -> u8 {
    rice_k_by(sum, rice_divisor(periods))
}

/// [`rice_k`]'s divisor for `periods` periods, for [`rice_k_by`]: worked out once a window.
fn rice_divisor(periods: u64) -> u64 {
    256 * periods.max(1)
}

#[inline(always)]
fn rice_k_by(sum: u64, divisor: u64) -> u8 {
    let scaled = sum.saturating_mul(315) / divisor;
    ((63 - scaled.max(1).leading_zeros()) as u8).min(K_MAX)
}

/// Encodes one chunk. Period starts must strictly increase; at most `HIST_CHUNK_PERIODS_MAX`
/// periods, and `TooManySlots` where the window times the periods would pass
/// `HIST_CHUNK_SLOTS_MAX` (split the periods then).
pub fn encode<P: Periods + ?Sized>(
    periods: &P,
    scratch: &mut EncodeScratch,
) -> Result<Vec<u8>, EncodeError> {
    let count = periods.count();
    let ts_ms: Vec<i64> = (0..count).map(|i| periods.start_ms(i)).collect();
    let mut out = start_chunk_ts(ChunkKind::RiceHistogram, &ts_ms)?;
    let window = choose_window(periods, scratch)?;
    let width = window.keys.len();
    put_varint(&mut out, width as u64);

    let mut w = BitWriter::with_capacity(width * count / 2 + 64);
    write_window_header(&mut w, &window);

    let mut extras: Vec<(u16, u64)> = Vec::new();
    let mut prev_first_extra = 0u16;
    let mut from = 0;
    for &to in &scratch.ends {
        let (keys, counts) = (&scratch.keys[from..to], &scratch.counts[from..to]);
        from = to;
        // Every bin, window or extra, takes at most two codes; the empty window bins' zeros
        // are counted apart.
        let bits_max = window.all_empty_bits + RICE_CODE_BITS_MAX * (2 * keys.len() as u64 + 1);
        w.packer(bits_max, |p| {
            extras.clear();
            write_period(p, &window, keys, counts, &mut extras, &mut prev_first_extra);
        });
    }
    out.extend_from_slice(&w.finish());
    if scratch.keys.len() > SCRATCH_BINS_KEPT_MAX {
        // An outsized chunk's copy is not kept for the next one.
        (scratch.keys, scratch.counts) = (Vec::new(), Vec::new());
    }
    Ok(frame_finish(out))
}

/// Most bins the encoder's scratch keeps between chunks (10 bytes each): a 2-hour chunk of
/// 60 s periods with 200 bins each is 24 k.
const SCRATCH_BINS_KEPT_MAX: usize = 1 << 20;

/// One period: each window bin's count (a run of empty ones as one run of zeros, merged into
/// the next code), then the extras. The bins come from plain arrays (the window pass's copy)
/// and the codes go through one loop over locals: inside a walk's closure the writer's state
/// stayed in memory, ≈ 3× slower.
#[inline(always)]
fn write_period(
    p: &mut Packer<'_>,
    window: &Window,
    keys: &[u16],
    counts: &[u64],
    extras: &mut Vec<(u16, u64)>,
    prev_first_extra: &mut u16,
) {
    write_window_counts(p, window, keys, counts, extras);
    write_extras(p, extras, prev_first_extra);
}

/// A period's window bin counts; its bins outside the window go to `extras`, in key order.
#[inline(always)]
fn write_window_counts(
    p: &mut Packer<'_>,
    window: &Window,
    keys: &[u16],
    counts: &[u64],
    extras: &mut Vec<(u16, u64)>,
) {
    let window_bins = keys.iter().zip(counts).filter_map(|(&key, &c)| {
        let slot = window.slot(key);
        if slot == OUTSIDE {
            extras.push((key, c));
            return None;
        }
        Some((u64::from(slot & SLOT_ZEROS_MASK), slot >> SLOT_K_SHIFT, c))
    });
    p.write_sparse_rice_run(window_bins, window.all_empty_bits);
}

/// A period's extras: their number, then each one's ordinal and count. The first ordinal is
/// coded from the previous period's first (`prev_first_extra`, updated).
#[inline(always)]
fn write_extras(p: &mut Packer<'_>, extras: &[(u16, u64)], prev_first_extra: &mut u16) {
    p.write_rice(extras.len() as u64, K_EXTRAS);
    let mut prev: Option<u16> = None;
    for &(key, c) in extras.iter() {
        let ordinal = ordinal_of_key(key);
        match prev {
            None => p.write_rice(
                zigzag(i64::from(ordinal) - i64::from(*prev_first_extra)),
                K_EXTRA_FIRST,
            ),
            Some(before) => p.write_rice(u64::from(ordinal - before - 1), K_EXTRA_GAP),
        }
        p.write_rice(c - 1, K_EXTRA_COUNT);
        prev = Some(ordinal);
    }
    if let Some(&(key, _)) = extras.first() {
        *prev_first_extra = ordinal_of_key(key);
    }
}

/// A period coded ahead by the head with a series' [`Window`]: its window bin counts, exactly
/// as a chunk with that window holds them, and its extras apart (packed, `hist::packed`),
/// because their first ordinal is coded from the chunk's previous period.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CodedPeriod<'a> {
    /// The window counts' bits, zero-padded to whole bytes.
    pub bits: &'a [u8],
    pub bit_len: u32,
    pub extras: &'a [u8],
}

/// One period of a chunk written with a series' window: packed bins, or coded ahead.
#[derive(Clone, Debug)]
pub(crate) enum WindowedPeriod<'a> {
    Packed(std::borrow::Cow<'a, [u8]>),
    Coded(CodedPeriod<'a>),
}

/// The bits one period's window counts take at most, given its bins.
fn window_bits_max(window: &Window, bins: usize) -> u64 {
    window.all_empty_bits + RICE_CODE_BITS_MAX * (bins as u64 + 1)
}

/// Codes a period merged in a dense array (keys `range`, which it leaves zero) with `window`:
/// its window counts into the scratch's `bits`, its other bins (the extras), packed, into its
/// `extras`. What a head series stores for a period once it has a window: a flush then copies
/// the bits. The window's keys are walked in order, each one's count taken from the array, then
/// the range is scanned for what is left: no mark per bin when merging, and no slot lookup per
/// bin here (a series' window is nearly its periods' bins).
pub(crate) fn code_dense_period(
    window: &Window,
    dense: &mut DenseCounts,
    range: (usize, usize),
    scratch: &mut CodeScratch,
) {
    assert!(window.width() > 0, "a head window has bins");
    let CodeScratch {
        bits,
        extras,
        extra_pairs,
    } = scratch;
    bits.clear();
    // Every window bin's code written, an empty one's `k + 1` zeros too: one store each and no
    // branch on the count (a third of a window's bins are empty at random, and skipping them
    // mispredicted).
    let counts = window.keys.iter().zip(&window.ks).map(|(&key, &k)| {
        let c = std::mem::take(&mut dense[usize::from(key) % DENSE_KEYS]);
        (c, u32::from(k))
    });
    // Nearly every window's parameters are small (a bin's mean count below 2^15): its codes
    // then need no length check.
    let k_small = u32::from(window.k_max) <= RUN_K_SMALL_MAX;
    bits.packer(window_bits_max(window, window.width()), |p| match k_small {
        true => p.write_rice_run::<true>(counts),
        false => p.write_rice_run::<false>(counts),
    });
    assert!(
        bits.bit_len() >= window.width() as u64,
        "each window bin takes a bit"
    );
    extra_pairs.clear();
    packed::take_nonzero(dense, range, extra_pairs);
    extras.clear();
    packed::pack_pairs(extra_pairs, extras);
}

/// What [`code_dense_period`] codes into, kept between periods so coding allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct CodeScratch {
    /// The period's window counts.
    pub bits: BitWriter,
    /// The period's extras, packed.
    pub extras: Vec<u8>,
    extra_pairs: Vec<(u16, u64)>,
}

impl CodeScratch {
    /// Bins of the period just coded outside the window.
    pub fn extras_bins(&self) -> usize {
        self.extra_pairs.len()
    }
}

/// Calls `f(key, count)` for every bin of a period coded with `window` (`code_dense_period`): the
/// window bins in key order, then the extras.
pub(crate) fn for_each_coded_bin(
    window: &Window,
    period: CodedPeriod<'_>,
    mut f: impl FnMut(u16, u64),
) -> Result<(), DecodeError> {
    let ks: Vec<u32> = window.ks.iter().map(|&k| u32::from(k)).collect();
    let mut counts = vec![0u64; ks.len()];
    let mut r = BitReader::new(period.bits);
    r.read_rice_each(&ks, &mut counts)?;
    if r.remaining_bits() + u64::from(period.bit_len) != period.bits.len() as u64 * 8 {
        return Err(r.invalid("a coded period's bits end where its length says"));
    }
    for (&key, &c) in window.keys.iter().zip(&counts) {
        if c > 0 {
            f(key, c);
        }
    }
    packed::for_each_bin_trusted(period.extras, f);
    Ok(())
}

/// Encodes one chunk with a window chosen before (a head series'), from periods packed or
/// coded ahead with it: the coded ones' window bits are copied, not coded again. Decodes as
/// [`encode`]'s chunks do. `TooManySlots` where the window times the periods, plus the
/// extras, would pass `HIST_CHUNK_SLOTS_MAX` (split the periods then).
pub(crate) fn encode_with_window(
    window: &Window,
    periods: &[(i64, WindowedPeriod<'_>)],
    scratch: &mut EncodeScratch,
) -> Result<Vec<u8>, EncodeError> {
    let ts_ms: Vec<i64> = periods.iter().map(|p| p.0).collect();
    let mut out = start_chunk_ts(ChunkKind::RiceHistogram, &ts_ms)?;
    let width = window.width();
    let mut slots = (width * periods.len()) as u64;
    if slots > HIST_CHUNK_SLOTS_MAX {
        return Err(EncodeError::TooManySlots { slots });
    }
    put_varint(&mut out, width as u64);
    let EncodeScratch {
        keys,
        counts,
        bits: w,
        extras,
        ..
    } = scratch;
    w.clear();
    write_window_header(w, window);
    let mut prev_first_extra = 0u16;
    for (_, period) in periods {
        extras.clear();
        match period {
            WindowedPeriod::Coded(coded) => {
                packed::for_each_bin_trusted(coded.extras, |k, c| extras.push((k, c)));
                let bits_max =
                    u64::from(coded.bit_len) + RICE_CODE_BITS_MAX * (2 * extras.len() as u64 + 1);
                w.packer(bits_max, |p| {
                    p.append_bits(coded.bits, coded.bit_len);
                    write_extras(p, extras, &mut prev_first_extra);
                });
            }
            WindowedPeriod::Packed(bytes) => {
                keys.clear();
                counts.clear();
                packed::for_each_bin_trusted(bytes, |k, c| {
                    keys.push(k);
                    counts.push(c);
                });
                let bits_max = window_bits_max(window, keys.len())
                    + RICE_CODE_BITS_MAX * (2 * keys.len() as u64 + 1);
                w.packer(bits_max, |p| {
                    write_period(p, window, keys, counts, extras, &mut prev_first_extra);
                });
            }
        }
        slots += extras.len() as u64;
    }
    if slots > HIST_CHUNK_SLOTS_MAX {
        return Err(EncodeError::TooManySlots { slots });
    }
    out.extend_from_slice(w.as_bytes());
    Ok(frame_finish(out))
}

/// The window's bins: each one's ordinal gap and Rice parameter change.
fn write_window_header(w: &mut BitWriter, window: &Window) {
    let (mut next_ordinal, mut prev_k) = (0u16, 0u8);
    // Two codes a bin.
    let bits_max = 2 * RICE_CODE_BITS_MAX * window.width() as u64;
    w.packer(bits_max, |p| {
        for (i, (&key, &k)) in window.keys.iter().zip(&window.ks).enumerate() {
            let ordinal = ordinal_of_key(key);
            let k_ordinal = if i == 0 {
                K_WINDOW_FIRST
            } else {
                K_WINDOW_STEP
            };
            p.write_rice(u64::from(ordinal - next_ordinal), k_ordinal);
            p.write_rice(zigzag(i64::from(k) - i64::from(prev_k)), K_WINDOW_STEP);
            (next_ordinal, prev_k) = (ordinal + 1, k);
        }
    });
}

/// The chunk's window: every key's periods and count sum gathered in one pass (which also
/// copies the chunk's bins into the scratch for the writing pass), then the keys over the bar
/// of `histogram::window_threshold`, each with its Rice parameter.
fn choose_window<P: Periods + ?Sized>(
    periods: &P,
    scratch: &mut EncodeScratch,
) -> Result<Window, EncodeError> {
    let stats = &mut **scratch.stats.get_or_insert_with(packed::zeroed_dense);
    let (keys, counts, ends) = (&mut scratch.keys, &mut scratch.counts, &mut scratch.ends);
    let window_scratch = &mut scratch.window;
    ends.clear();
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    let mut n = 0usize;
    for i in 0..periods.count() {
        // Written by index into arrays sized ahead: a push per bin (capacity check, length
        // kept in memory) cost more than walking the packed bytes a second time.
        let bins_max = periods.bins_max(i);
        if keys.len() < n + bins_max {
            keys.resize(n + bins_max, 0);
            counts.resize(n + bins_max, 0);
        }
        let (k_out, c_out) = (&mut keys[n..n + bins_max], &mut counts[n..n + bins_max]);
        let mut at = 0;
        periods.for_each_bin(i, |key, c| {
            let k = usize::from(key);
            stats[k % DENSE_KEYS] += (1 << OCCUPANCY_SHIFT) + c.min(MEAN_COUNT_MAX);
            lo = lo.min(k);
            hi = hi.max(k);
            k_out[at] = key;
            c_out[at] = c;
            at += 1;
        });
        n += at;
        ends.push(n);
    }
    window_from_stats(stats, (lo, hi), periods.count() as u64, window_scratch)
}

/// The window of `n_periods` periods whose keys' stats (`OCCUPANCY_SHIFT`) are in `stats`,
/// keys `lo ..= hi` (none where `lo > hi`), which it leaves zero. Its slot table covers the
/// window's own keys only.
fn window_from_stats(
    stats: &mut DenseCounts,
    (lo, hi): (usize, usize),
    n_periods: u64,
    scratch: &mut WindowScratch,
) -> Result<Window, EncodeError> {
    if lo > hi {
        // No bins at all: an empty window.
        return Ok(Window::empty(0, 0));
    }
    // Under the first bar every key takes at most `n_periods` slots (its window bin's, or
    // fewer extras), so where the range's keys times the periods fit, so does the chunk and
    // the bar stays (`window_threshold`): a head series' four periods always.
    let keys_n = (hi - lo + 1) as u64;
    if keys_n.saturating_mul(n_periods) <= HIST_CHUNK_SLOTS_MAX {
        return Ok(window_under_bar(stats, (lo, hi), n_periods, scratch));
    }
    window_from_stats_any_bar(stats, (lo, hi), n_periods)
}

/// Scratch for [`window_under_bar`]: the window's keys and stats, kept between choices.
#[derive(Debug, Default)]
struct WindowScratch {
    bins: Vec<(u16, u64)>,
}

/// [`window_from_stats`] where the first bar is known to be the bar: one scan of the range,
/// eight keys a step (most of a range's keys are empty), takes the stats and keeps the
/// window's, then one pass over those makes their Rice parameters and slots. The passes for
/// the bar, the window's ends and its bins over the whole range, with a push per bin, were most
/// of a head series' window choice.
fn window_under_bar(
    stats: &mut DenseCounts,
    range: (usize, usize),
    n_periods: u64,
    scratch: &mut WindowScratch,
) -> Window {
    let threshold = window_first_threshold(n_periods) << OCCUPANCY_SHIFT;
    let bins = &mut scratch.bins;
    bins.clear();
    packed::take_each_nonzero(stats, range, |key, stat| {
        if stat >= threshold {
            bins.push((key as u16, stat));
        }
    });
    let (Some(&(first, _)), Some(&(last, _))) = (bins.first(), bins.last()) else {
        // Bins, none over the bar: a window of no bins whose slot table still covers `lo`.
        return Window::empty(range.0, 1);
    };
    let key_lo = usize::from(first);
    let mut slots = vec![OUTSIDE; usize::from(last) + 1 - key_lo];
    let mut ks = Vec::with_capacity(bins.len());
    let divisor = rice_divisor(n_periods);
    let mut all_empty_bits = 0u64;
    for &(key, stat) in bins.iter() {
        let k = rice_k_by(stat & SUM_MASK, divisor);
        ks.push(k);
        slots[usize::from(key) - key_lo] = u32::from(k) << SLOT_K_SHIFT | all_empty_bits as u32;
        all_empty_bits += u64::from(k) + 1;
    }
    // One check for every bin's: the sum only grows, and cannot pass the mask (see
    // `SLOT_ZEROS_MASK`'s assertions).
    assert!(all_empty_bits <= u64::from(SLOT_ZEROS_MASK));
    Window {
        lo: key_lo,
        slots,
        keys: bins.iter().map(|&(key, _)| key).collect(),
        k_max: ks.iter().copied().max().unwrap_or(0),
        ks,
        all_empty_bits,
    }
}

/// The window before the one-pass build, for any bar: the bar found over the whole range, its
/// ends, then its bins. Where the first bar may not fit ([`window_from_stats`]); the tests'
/// reference for the other.
fn window_from_stats_any_bar(
    stats: &mut DenseCounts,
    (lo, hi): (usize, usize),
    n_periods: u64,
) -> Result<Window, EncodeError> {
    if lo > hi {
        // No bins at all: an empty window.
        return Ok(Window::empty(0, 0));
    }
    let span = &mut stats[lo..=hi];
    let chosen = window_threshold_width(span.iter().map(|&s| s >> OCCUPANCY_SHIFT), n_periods);
    // On an error too the stats are zeroed below, for the next chunk.
    let threshold = chosen
        .as_ref()
        .map_or(u64::MAX, |&(threshold, _, _)| threshold);
    let in_window = |s: &u64| *s >> OCCUPANCY_SHIFT >= threshold;
    let (first, last) = match (
        span.iter().position(in_window),
        span.iter().rposition(in_window),
    ) {
        (Some(first), Some(last)) => (first, last),
        _ => (0, 0),
    };
    // The width was counted with the bar, in the same pass.
    let (span_keys, width) = match chosen {
        Ok((_, _, width)) => (last + 1 - first, width as usize),
        Err(_) => (0, 0),
    };
    debug_assert!(chosen.is_err() || width == span.iter().filter(|s| in_window(s)).count());
    // Sized once: a head keeps one window per series.
    let mut window = Window {
        lo: lo + first,
        slots: vec![OUTSIDE; span_keys],
        keys: Vec::with_capacity(width),
        ks: Vec::with_capacity(width),
        all_empty_bits: 0,
        k_max: 0,
    };
    for (i, s) in span.iter_mut().enumerate() {
        let stat = std::mem::take(s);
        if in_window(&stat) {
            let k = rice_k(stat & SUM_MASK, n_periods);
            assert!(window.all_empty_bits <= u64::from(SLOT_ZEROS_MASK));
            if let Some(slot) = window.slots.get_mut(i - first) {
                *slot = u32::from(k) << SLOT_K_SHIFT | window.all_empty_bits as u32;
            }
            window.keys.push((lo + i) as u16);
            window.ks.push(k);
            window.k_max = window.k_max.max(k);
            window.all_empty_bits += u64::from(k) + 1;
        }
    }
    chosen.map(|_| window)
}

/// The window of packed periods (the head's), chosen as [`choose_window`] does, without
/// keeping their bins for a writing pass.
fn choose_packed_window<'a>(
    periods: impl ExactSizeIterator<Item = &'a [u8]>,
    scratch: &mut EncodeScratch,
) -> Result<Window, EncodeError> {
    let stats = &mut **scratch.stats.get_or_insert_with(packed::zeroed_dense);
    let (mut lo, mut hi) = (usize::MAX, 0usize);
    let n_periods = periods.len() as u64;
    for bytes in periods {
        // The range widened once per group of eight bins, not per bin.
        packed::fold_into_dense(bytes, stats, (&mut lo, &mut hi), |stat, c| {
            stat + (1 << OCCUPANCY_SHIFT) + c.min(MEAN_COUNT_MAX)
        });
    }
    window_from_stats(stats, (lo, hi), n_periods, &mut scratch.window)
}

/// Decodes one chunk; never panics; work and memory bounded by `HIST_CHUNK_PERIODS_MAX`,
/// `HIST_CHUNK_SLOTS_MAX` and the chunk's bytes whatever the input.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    collect_periods(|each| decode_with(bytes, each))
}

/// Decodes one chunk straight into accumulators (`histogram::accumulate_periods`):
/// each period whose start `slot_of` maps to `Some(i)` is added to `out[i]` (`None`, or an
/// index past `out`: skipped). After an error some periods may have been added.
pub fn decode_into(
    bytes: &[u8],
    slot_of: impl FnMut(i64) -> Option<usize>,
    out: &mut [Accumulator],
) -> Result<ChunkSummary, DecodeError> {
    accumulate_periods(|each| decode_with(bytes, each), slot_of, out)
}

/// The decoder: calls `period` with each decoded period, in time order.
fn decode_with(
    bytes: &[u8],
    mut period: impl FnMut(&Period<'_>),
) -> Result<ChunkSummary, DecodeError> {
    let (body, mut pos, ts_ms) = open_window_chunk(bytes, ChunkKind::RiceHistogram)?;
    let count = ts_ms.len();
    let width = get_varint(body, &mut pos)?;
    let mut r = BitReader::new(&body[pos..]);
    // Each window bin takes at least two bits of the header.
    if width > BIN_COUNT_MAX as u64
        || width * count as u64 > HIST_CHUNK_SLOTS_MAX
        || width * 2 > r.remaining_bits()
    {
        return Err(r.invalid("window wider than the bins, the chunk's slots or its bytes"));
    }
    let width = width as usize;
    let mut slots_left = HIST_CHUNK_SLOTS_MAX - (width * count) as u64;
    let (window_keys, window_ordinals, ks) = read_window(&mut r, width)?;

    let mut extras: Vec<(u16, u64, usize)> = Vec::new();
    let mut prev_first_extra = 0u16;
    let mut window_counts: Vec<u64> = vec![0; width];
    for &ts in &ts_ms {
        r.read_rice_each(&ks, &mut window_counts)?;
        let n = r.read_rice(K_EXTRAS)?;
        slots_left = slots_left
            .checked_sub(n)
            .ok_or_else(|| r.invalid("more bin slots than HIST_CHUNK_SLOTS_MAX"))?;
        read_extras(
            &mut RiceExtras(&mut r),
            n,
            &window_ordinals,
            &mut prev_first_extra,
            &mut extras,
        )?;
        period(&Period {
            ts_ms: ts,
            window_keys: &window_keys,
            window_counts: &window_counts,
            extras: &extras,
        });
    }
    r.finish()?;
    Ok(ChunkSummary {
        periods: count,
        first_ts_ms: ts_ms.first().copied().unwrap_or(0),
        last_ts_ms: ts_ms.last().copied().unwrap_or(0),
    })
}

/// Kind 6's extras: Rice codes of fixed parameters.
struct RiceExtras<'r, 'a>(&'r mut BitReader<'a>);

impl ExtraSource for RiceExtras<'_, '_> {
    fn value(&mut self, which: ExtraValue) -> Result<u64, DecodeError> {
        self.0.read_rice(match which {
            ExtraValue::First => K_EXTRA_FIRST,
            ExtraValue::Gap => K_EXTRA_GAP,
            ExtraValue::CountLess1 => K_EXTRA_COUNT,
        })
    }

    fn invalid(&self, what: &'static str) -> DecodeError {
        self.0.invalid(what)
    }
}

/// The window's keys, ordinals and Rice parameters.
type WindowBins = (Vec<u16>, Vec<u16>, Vec<u32>);

fn read_window(r: &mut BitReader<'_>, width: usize) -> Result<WindowBins, DecodeError> {
    let (mut keys, mut ordinals, mut ks) = (
        Vec::with_capacity(width),
        Vec::with_capacity(width),
        Vec::with_capacity(width),
    );
    let (mut next, mut k) = (0u64, 0i64);
    for p in 0..width {
        let k_ordinal = if p == 0 {
            K_WINDOW_FIRST
        } else {
            K_WINDOW_STEP
        };
        let o = next.saturating_add(r.read_rice(k_ordinal)?);
        // Every ordinal below `BIN_COUNT_MAX` is a bin (see `histogram`'s tests).
        let Some(key) = u16::try_from(o).ok().and_then(key_of_ordinal) else {
            return Err(r.invalid("window ordinal out of range"));
        };
        k = k.saturating_add(unzigzag(r.read_rice(K_WINDOW_STEP)?));
        if !(0..=i64::from(RICE_K_MAX)).contains(&k) {
            return Err(r.invalid("window Rice parameter out of range"));
        }
        keys.push(key);
        ordinals.push(o as u16);
        ks.push(k as u32);
        next = o + 1;
    }
    Ok((keys, ordinals, ks))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::encode::repair_frame;
    use crate::test_util::histogram_of;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_distr::Distribution;
    use std::borrow::Cow;

    fn encode_histograms(periods: &[(i64, Histogram)]) -> Result<Vec<u8>, EncodeError> {
        encode(periods, &mut EncodeScratch::default())
    }

    fn assert_round_trip(periods: &[(i64, Histogram)]) -> Vec<u8> {
        let bytes = encode_histograms(periods).unwrap();
        assert_eq!(decode(&bytes).unwrap(), periods);
        // The same periods packed, as a flush gives them, encode to the same bytes.
        let packed: Vec<(i64, Vec<u8>)> = periods
            .iter()
            .map(|(t, h)| {
                let mut b = Vec::new();
                packed::pack_histogram(h, &mut b);
                (*t, b)
            })
            .collect();
        let from_packed = encode(&PackedPeriods(&packed), &mut EncodeScratch::default()).unwrap();
        assert_eq!(from_packed, bytes);
        bytes
    }

    #[test]
    fn edge_cases_round_trip() {
        let huge = histogram_of(&[(1.0, u64::MAX), (-2.5, 1), (0.0, 7), (f64::NAN, 3)]);
        assert_round_trip(&[(0, Histogram::new())]);
        assert_round_trip(&[(i64::MIN, huge.clone()), (i64::MAX, Histogram::new())]);
        assert_round_trip(&[(-60_000, huge.clone()), (0, huge.clone()), (60_000, huge)]);
        // Every bin there is, in one period.
        let keys: Vec<u16> = (0..=u16::MAX).filter(|&k| hist::key_is_valid(k)).collect();
        let all = Histogram::from_sorted_keys(&keys, &vec![1; keys.len()]);
        assert_eq!(all.bin_count(), BIN_COUNT_MAX);
        assert_round_trip(&[(5, all.clone()), (6, all)]);
    }

    #[test]
    fn bins_outside_the_window_round_trip() {
        // One bin in every period (the window), others in one period each (extras), on both
        // sides of the window and between its bins.
        let periods: Vec<(i64, Histogram)> = (0..40)
            .map(|i| {
                let mut values = vec![(1.0, 5), (1.2, 2)];
                values.push((1e-3 * f64::from(i + 1), u64::from(i as u32) + 1));
                values.push((1.1, 1 + u64::from((i as u32).is_multiple_of(3)) * 1000));
                values.push((1e6 + f64::from(i), 2));
                (i64::from(i) * 1_000, histogram_of(&values))
            })
            .collect();
        assert_round_trip(&periods);
    }

    #[test]
    fn one_encoder_scratch_serves_many_chunks() {
        let mut scratch = EncodeScratch::default();
        let a = vec![(0, histogram_of(&[(1.0, 3), (2.0, 4)]))];
        let b = vec![
            (0, histogram_of(&[(1.5, 9)])),
            (1, histogram_of(&[(7.0, 1)])),
        ];
        for periods in [&a, &b, &a] {
            let bytes = encode(periods.as_slice(), &mut scratch).unwrap();
            assert_eq!(&decode(&bytes).unwrap(), periods);
            assert_eq!(bytes, encode_histograms(periods).unwrap());
        }
    }

    #[test]
    fn too_many_slots_asks_for_a_split() {
        // 20,000 distinct bins in each of 300 periods: no window fits 2^22 slots.
        let wide = Histogram::from_sorted_keys(
            &(0u16..=u16::MAX)
                .filter(|&k| hist::key_is_valid(k))
                .take(20_000)
                .collect::<Vec<_>>(),
            &[1; 20_000],
        );
        let periods: Vec<(i64, Histogram)> = (0..300).map(|i| (i, wide.clone())).collect();
        assert!(matches!(
            encode_histograms(&periods),
            Err(EncodeError::TooManySlots { .. })
        ));
        assert_round_trip(&periods[..100]);
        // A window chosen before (a head series') asks for the split as well, and its halves
        // encode.
        let mut scratch = EncodeScratch::default();
        let mut packed_wide = Vec::new();
        packed::pack_histogram(&wide, &mut packed_wide);
        let window = Window::choose([&packed_wide[..]].into_iter(), &mut scratch).unwrap();
        assert_eq!(window.width(), 20_000);
        let windowed: Vec<(i64, WindowedPeriod<'_>)> = (0..300)
            .map(|i| (i, WindowedPeriod::Packed(Cow::Borrowed(&packed_wide[..]))))
            .collect();
        assert!(matches!(
            encode_with_window(&window, &windowed, &mut scratch),
            Err(EncodeError::TooManySlots { .. })
        ));
        let bytes = encode_with_window(&window, &windowed[..100], &mut scratch).unwrap();
        assert_eq!(decode(&bytes).unwrap(), periods[..100].to_vec());
    }

    #[test]
    fn a_chunk_of_another_kind_is_not_read_as_rice() {
        let bytes = assert_round_trip(&[(0, histogram_of(&[(1.0, 1)]))]);
        let bytes = crate::encode::repair_frame(bytes, ChunkKind::PackedHistogram);
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::Kind { kind: 5, .. })
        ));
    }

    /// `chunks` chunks of storebench's shape: 100 lognormal observations per 10 s step, six
    /// steps per 60 s period, 120 periods (a 2-hour block).
    fn lognormal_chunks(chunks: usize) -> Vec<Vec<(i64, Histogram)>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let dist = rand_distr::LogNormal::new(-3.0, 1.6).unwrap();
        (0..chunks)
            .map(|_| {
                (0..120)
                    .map(|p| {
                        let mut h = Histogram::new();
                        for _ in 0..600 {
                            h.insert(dist.sample(&mut rng));
                        }
                        (p * 60_000, h)
                    })
                    .collect()
            })
            .collect()
    }

    /// The bytes this coder spends on the benchmark's shape (run with `--nocapture` to see
    /// them): far below the 25-byte target.
    #[test]
    fn bytes_per_histogram_sample_lognormal() {
        let chunks = lognormal_chunks(8);
        let mut rice = 0usize;
        for c in &chunks {
            rice += assert_round_trip(c).len();
        }
        let rice = rice as f64 / (chunks.len() * 120 * 6) as f64;
        println!("bytes per sample: rice {rice:.2}");
        assert!(rice < 20.0, "rice {rice}");
    }

    /// The window [`window_from_stats_any_bar`] chooses from `periods`' bins, its stats
    /// gathered from the plain histograms.
    fn reference_window(periods: &[Histogram]) -> Result<Window, EncodeError> {
        let mut stats = packed::zeroed_dense::<DENSE_KEYS>();
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for h in periods {
            for (&key, &c) in h.keys().iter().zip(h.counts()) {
                let key = usize::from(key);
                stats[key] += (1 << OCCUPANCY_SHIFT) + c.min(MEAN_COUNT_MAX);
                (lo, hi) = (lo.min(key), hi.max(key));
            }
        }
        let window = window_from_stats_any_bar(&mut stats, (lo, hi), periods.len() as u64);
        assert!(stats.iter().all(|&s| s == 0), "the stats left zero");
        window
    }

    /// Every way of choosing a window gives the reference's, field for field, and leaves the
    /// scratch's stats zero. Returns the window's width (`Err` where none fits).
    fn assert_windows_match_reference(
        periods: &[Histogram],
        scratch: &mut EncodeScratch,
    ) -> Result<usize, EncodeError> {
        let reference = reference_window(periods);
        let want = format!("{reference:?}");
        let timed: Vec<(i64, Histogram)> = periods
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, h)| (i as i64, h))
            .collect();
        let from_histograms = choose_window(timed.as_slice(), scratch);
        assert_eq!(format!("{from_histograms:?}"), want);
        let packed_periods: Vec<Vec<u8>> = periods
            .iter()
            .map(|h| {
                let mut bytes = Vec::new();
                packed::pack_histogram(h, &mut bytes);
                bytes
            })
            .collect();
        let from_packed = choose_packed_window(packed_periods.iter().map(Vec::as_slice), scratch);
        assert_eq!(format!("{from_packed:?}"), want);
        let stats = scratch.stats.as_deref().unwrap();
        assert!(stats.iter().all(|&s| s == 0), "the stats left zero");
        reference.map(|w| w.width())
    }

    /// Periods of `keys_n` keys (all valid, spread over the bins) where key `i` is in the
    /// periods `p` with `p % (i % 7 + 1) == 0`: occupancies from all the periods to a
    /// seventh of them.
    fn periods_of_occupancies(periods_n: usize, keys_n: usize, count: u64) -> Vec<Histogram> {
        let keys: Vec<u16> = (0..=u16::MAX)
            .filter(|&k| hist::key_is_valid(k))
            .take(keys_n)
            .collect();
        assert_eq!(keys.len(), keys_n);
        (0..periods_n)
            .map(|p| {
                let mine: Vec<u16> = keys
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| p % (i % 7 + 1) == 0)
                    .map(|(_, &k)| k)
                    .collect();
                Histogram::from_sorted_keys(&mine, &vec![count; mine.len()])
            })
            .collect()
    }

    #[test]
    fn windows_past_the_first_bar_match_the_reference() {
        let mut scratch = EncodeScratch::default();
        let mut matches =
            |periods: &[Histogram]| assert_windows_match_reference(periods, &mut scratch);
        // The first bar's window passes the slots, the doubled one fits: its bins are the keys
        // in every period or every other one (`i % 7` of 0 or 1).
        assert_eq!(
            matches(&periods_of_occupancies(400, 20_000, 3)),
            Ok(2_858 + 2_857)
        );
        // No bar fits: an error, the stats zeroed all the same.
        assert!(matches(&periods_of_occupancies(600, 40_000, 1)).is_err());
        // Bins, none over the bar; none at all; one period of one bin; huge counts (9
        // periods: a bar of 3, met by `i % 7` below 4).
        let one = |x: f64| histogram_of(&[(x, 1)]);
        let scattered: Vec<Histogram> = (0..8).map(|i| one(f64::from(i) + 1.5)).collect();
        assert_eq!(matches(&scattered), Ok(0));
        assert_eq!(matches(&[Histogram::new(), Histogram::new()]), Ok(0));
        assert_eq!(matches(&[one(2.0)]), Ok(1));
        assert_eq!(
            matches(&periods_of_occupancies(9, 300, u64::MAX)),
            Ok(4 * 43)
        );
        // A chunk's 120 periods, their range's slots under the cap: the one-pass build with a
        // bar of 30, met by `i % 7` below 4.
        assert_eq!(matches(&periods_of_occupancies(120, 2_000, 5)), Ok(4 * 286));
    }

    /// Periods whose keys come from a few (so occupancies vary), with counts small and huge.
    fn pooled_periods() -> impl Strategy<Value = Vec<Histogram>> {
        let pool = proptest::collection::btree_set(any::<u16>(), 1..80).prop_map(|keys| {
            keys.into_iter()
                .filter(|&k| hist::key_is_valid(k))
                .collect::<Vec<u16>>()
        });
        let count = prop_oneof![4 => 1u64..300, 1 => 1u64..u64::MAX];
        let picks = proptest::collection::vec((any::<prop::sample::Index>(), count), 0..60);
        (pool, proptest::collection::vec(picks, 1..14)).prop_map(|(pool, periods)| {
            periods
                .into_iter()
                .map(|picks| {
                    let mut bins = std::collections::BTreeMap::new();
                    for (index, c) in picks {
                        if !pool.is_empty() {
                            bins.insert(pool[index.index(pool.len())], c);
                        }
                    }
                    let keys: Vec<u16> = bins.keys().copied().collect();
                    let counts: Vec<u64> = bins.values().copied().collect();
                    Histogram::from_sorted_keys(&keys, &counts)
                })
                .collect()
        })
    }

    fn histogram() -> impl Strategy<Value = Histogram> {
        proptest::collection::vec((-1e12f64..1e12, 1u64..1000), 0..60).prop_map(|v| {
            let mut h = Histogram::new();
            for (x, n) in v {
                h.insert_n(x, n);
            }
            h
        })
    }

    proptest! {
        #[test]
        fn arbitrary_periods_round_trip(
            hs in proptest::collection::vec(histogram(), 1..30),
            big in proptest::collection::vec((0usize..30, any::<u64>()), 0..4),
        ) {
            let mut periods: Vec<(i64, Histogram)> =
                hs.into_iter().enumerate().map(|(i, h)| (i as i64 * 60_000 - 7, h)).collect();
            for (i, n) in big {
                if let Some((_, h)) = periods.get_mut(i) {
                    h.insert_n(3.0, n.max(1));
                }
            }
            assert_round_trip(&periods);
        }

        #[test]
        fn windows_match_the_reference(periods in pooled_periods()) {
            let _width = assert_windows_match_reference(&periods, &mut EncodeScratch::default());
        }

        #[test]
        fn decode_into_equals_merging_decoded_periods(
            hs in proptest::collection::vec(histogram(), 1..12),
        ) {
            let periods: Vec<(i64, Histogram)> =
                hs.into_iter().enumerate().map(|(i, h)| (i as i64, h)).collect();
            let bytes = encode_histograms(&periods).unwrap();
            let mut acc = vec![Accumulator::new(); 2];
            let summary = decode_into(&bytes, |t| Some((t % 2) as usize), &mut acc).unwrap();
            prop_assert_eq!(summary.periods, periods.len());
            for (slot, acc) in acc.iter().enumerate() {
                let mut want = Histogram::new();
                for (t, h) in &periods {
                    if (t % 2) as usize == slot {
                        want.merge(h);
                    }
                }
                prop_assert_eq!(acc.to_histogram(), want);
            }
        }

        #[test]
        fn decode_arbitrary_bodies_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let framed = repair_frame(bytes, ChunkKind::RiceHistogram);
            if let Ok(periods) = decode(&framed) {
                for (_, h) in &periods {
                    h.assert_invariants();
                }
            }
            let mut acc = vec![Accumulator::new(); 1];
            let _ = decode_into(&framed, |_| Some(0), &mut acc);
        }

        #[test]
        fn decode_mutated_chunk_never_panics(
            hs in proptest::collection::vec(histogram(), 1..6),
            flip in any::<usize>(),
            bit in 0u8..8,
        ) {
            let periods: Vec<(i64, Histogram)> =
                hs.into_iter().enumerate().map(|(i, h)| (i as i64, h)).collect();
            let mut bytes = encode_histograms(&periods).unwrap();
            let at = flip % bytes.len();
            bytes[at] ^= 1 << bit;
            // Under a valid checksum the body's damage must be an error or valid periods.
            let bytes = repair_frame(bytes, ChunkKind::RiceHistogram);
            if let Ok(back) = decode(&bytes) {
                for (_, h) in &back {
                    h.assert_invariants();
                }
            }
        }
    }
}
