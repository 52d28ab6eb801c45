//! A histogram series in the head: its merged base periods, packed or Rice-coded, and the
//! newest period's samples (and those of one older period, for late data) kept as they came
//! until merged.
//!
//! Merging every sample into its period's sorted bin list as it arrives cost about 1 µs per
//! 75-bin sample (a merge of two sorted lists is a chain of dependent compares, and a period
//! of six 10 s samples merges six times), and a period's `Histogram` took ≈ 10 bytes per bin
//! in two allocations. Here a sample of the open period is appended, packed (`hist::packed`,
//! ≈ 2 bytes per bin), to the open buffer; when the period closes — the series' first sample
//! of a later period, or the buffer's bound — all of its samples are added at once into a
//! dense array indexed by bin key (one add per bin, no compares) and the merged period is
//! packed off a scan of the keys they spanned (eight a step: a period's bins sit close
//! together) into the series' arena. Samples for an older period (late data) are buffered
//! the same way, one late period at a time, and merge into that period when a sample for
//! another late period comes (a flush reads the buffered samples as they are); its new packing
//! is appended to the arena (the old bytes are garbage until the arena is compacted). A broker
//! forwarding what it stored during an outage sends each series' old samples in time order, so
//! a late period is rewritten once rather than once per sample (in `storebench --order
//! backfill`, late data had cost ≈ 1.6× the write path's CPU, and 75 % more peak memory in
//! garbage).
//!
//! Once a series has merged `WINDOW_FROM_PERIODS` periods, it chooses from them the window a
//! Rice-coded chunk (`rice_hist`, kind 6) would, and every period it merges from then on is
//! stored coded with it: the window bins' counts as the chunk's bits, the few bins outside as
//! packed extras. A flush writes a chunk with that window by copying each period's bits; it no
//! longer reads every period twice to choose a window and then codes it (in `storebench`
//! that had been a quarter of a histogram sample's CPU time, and is now ≈ 6 %). A coded period
//! takes ≈ a quarter of a packed one's bytes, so the head holds half the memory. The cost: the
//! window fits the series' first periods, not each chunk's (18.0 against 16.9 bytes a
//! sample), and a read or a late merge of a coded period decodes it.
//!
//! The head after a flush starts each series with the window it ended this one with
//! (`Head::successor`, [`HistSeries::window_to_carry`]), so the series codes its periods from
//! the first instead of packing four, reading them again to choose a window and coding them
//! at the flush (−9 % of a histogram sample's store instructions with a flush every 15
//! minutes). A window is carried while nearly every bin falls inside it, for at most
//! `WINDOW_HEADS_MAX` heads; it costs ≈ 3 % more bytes, as a head's first periods are no longer
//! coded with a window fit to exactly them.
//!
//! The arena is a list of segments, each allocated once at its final size and never grown: a
//! single buffer doubling as it grew copied everything it held at each step and touched twice
//! the memory it kept (≈ 8 % of a histogram sample's write in `storebench`, in `memcpy` and
//! page faults). A segment is at least as large as everything before it (up to
//! `SEGMENT_BYTES_MAX`), so a series' segments stay few, and a period never straddles two.
//! Reads add packed bins into their accumulators directly. The result is the same as merging each sample into its period
//! as it comes: merging is commutative and counts saturate the same way.

use std::borrow::Cow;
use std::sync::Arc;

use hist::{Accumulator, Histogram};

use crate::encode::rice_hist::Window;
use crate::encode::rice_hist::WindowedPeriod;
use crate::encode::rice_hist::{self, CodeScratch, CodedPeriod, EncodeScratch};
use hist::packed;

/// Most packed bytes buffered for the open period before they are merged: bounds a series'
/// buffer however many samples a period gets.
pub(crate) const OPEN_BYTES_MAX: usize = 16 << 10;
/// Smallest and largest new arena segment, in bytes (a period larger than the largest gets a
/// segment of its own size). Small, so a series with one short period holds little more than
/// its bytes (many histogram series see only a few samples before a flush).
const SEGMENT_BYTES_MIN: usize = 256;
const SEGMENT_BYTES_MAX: usize = 64 << 10;
/// Most segments in one series' arena (indexes are `u32`); a head flushes long before.
const SEGMENTS_MAX: usize = u32::MAX as usize;
/// Merged periods a series keeps packed before it chooses, from them, the window its later
/// periods are coded with as they close.
pub(crate) const WINDOW_FROM_PERIODS: usize = 4;
/// Most heads one window codes a series' periods in, its first included: a head after a flush
/// starts with the window the series ended the last one with (see [`HistSeries::carried`]), and
/// a series chooses afresh at least this often, so a distribution that narrowed (leaving many
/// window bins empty, each a bit or more a period) is coded with a window fit to it within an
/// hour at the default 15-minute flush.
pub(crate) const WINDOW_HEADS_MAX: u32 = 4;
/// A window is carried to the next head only if at most one bin in this many of the coded
/// periods' window bins fell outside it (extras cost ≈ 2 bytes each, a window bin ≈ 4 bits).
pub(crate) const CARRY_WINDOW_BINS_PER_EXTRA_MIN: u64 = 16;

/// One merged period: its start and where its bins are in the arena.
#[derive(Clone, Copy, Debug)]
struct Period {
    start_ms: i64,
    segment: u32,
    at: u32,
    len: u32,
    /// 0: the bytes are packed bins. Otherwise the period is coded with the series' window
    /// (`rice_hist::code_dense_period`): its bytes are this many bits of window counts, zero-padded
    /// to whole bytes, then the extras, packed. (Coded window counts take at least a bit per
    /// window bin, and a window has bins.)
    coded_bits: u32,
}

/// A period's bins as the arena holds them.
#[derive(Clone, Copy, Debug)]
enum Stored<'a> {
    Packed(&'a [u8]),
    Coded(CodedPeriod<'a>),
}

/// The window a series codes its periods with once it has `WINDOW_FROM_PERIODS` of them.
#[derive(Debug, Default)]
enum SeriesWindow {
    #[default]
    NotYet,
    Chosen(Arc<Window>),
    /// None qualified (its first periods had no bins, or too many): the periods stay packed.
    Unavailable,
}

/// A histogram series in the head.
#[derive(Debug, Default)]
pub(crate) struct HistSeries {
    /// Merged periods, ascending by start; the open period's buffered samples are not in them.
    periods: Vec<Period>,
    arena: Arena,
    /// Bytes of `arena` no period refers to (late data rewrote them).
    garbage_bytes: usize,
    open: Open,
    /// Samples for one period older than the open one (late data), buffered like the open
    /// period's: a broker forwarding what it stored during an outage sends a series' old
    /// samples in time order, so a period's late samples merge once instead of once each.
    /// Never the open period's start.
    late: Open,
    /// Once chosen, every period merged is stored coded with it: a fold codes the period from
    /// the dense array it merged in (instead of packing it), and a flush copies the bits
    /// (instead of reading every period twice to choose a window and then coding it). In
    /// `storebench` the flush was a quarter of a histogram sample's CPU time.
    window: SeriesWindow,
    /// Heads the window coded periods in before this one (0: chosen in this head).
    window_heads_before: u32,
    /// Periods coded with the window in this head, and the bins outside it among them: whether
    /// the window still fits the series, for the next head.
    coded_periods: u64,
    coded_extras: u64,
}

/// A window a head's series ended with, for its next head (see [`HistSeries::window_to_carry`]).
#[derive(Clone, Debug)]
pub(crate) struct CarriedWindow {
    window: Arc<Window>,
    heads_before: u32,
}

/// Packed periods, appended, in segments that never grow past the capacity they were made
/// with (so nothing is ever copied to make room).
#[derive(Debug, Default)]
struct Arena {
    segments: Vec<Vec<u8>>,
    /// Bytes in all segments.
    len_bytes: usize,
}

impl Arena {
    /// Appends `bytes` and returns where they are (segment, offset).
    fn push(&mut self, bytes: &[u8]) -> (u32, u32) {
        let index = self.reserve(bytes.len());
        let segment = &mut self.segments[index];
        let at = segment.len();
        let capacity = segment.capacity();
        segment.extend_from_slice(bytes);
        debug_assert_eq!(segment.capacity(), capacity, "a segment never grows");
        assert!(
            at + bytes.len() <= u32::MAX as usize,
            "segments are bounded"
        );
        self.len_bytes += bytes.len();
        (index as u32, at as u32)
    }

    /// Appends a coded period's window bits and extras, one after the other, and returns where
    /// they are (segment, offset, length).
    fn push_coded(&mut self, bits: &[u8], extras: &[u8]) -> (u32, u32, u32) {
        let len = bits.len() + extras.len();
        let index = self.reserve(len);
        let segment = &mut self.segments[index];
        let at = segment.len();
        let capacity = segment.capacity();
        segment.extend_from_slice(bits);
        segment.extend_from_slice(extras);
        debug_assert_eq!(segment.capacity(), capacity, "a segment never grows");
        assert!(at + len <= u32::MAX as usize, "segments are bounded");
        self.len_bytes += len;
        (index as u32, at as u32, len as u32)
    }

    /// The index of a segment (the last) with room for `bytes` more.
    fn reserve(&mut self, bytes: usize) -> usize {
        let fits = self
            .segments
            .last()
            .is_some_and(|s| s.capacity() - s.len() >= bytes);
        if !fits {
            let capacity = self
                .len_bytes
                .clamp(SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX)
                .max(bytes);
            assert!(
                self.segments.len() < SEGMENTS_MAX,
                "a series' arena is bounded"
            );
            self.segments.push(Vec::with_capacity(capacity));
        }
        self.segments.len() - 1
    }

    fn bytes(&self, p: &Period) -> &[u8] {
        let (at, len) = (p.at as usize, p.len as usize);
        self.segments
            .get(p.segment as usize)
            .and_then(|s| s.get(at..at + len))
            .unwrap_or_else(|| unreachable!("a period's bytes are in the arena: {p:?}"))
    }
}

/// The open period's samples, unmerged, each packed, one after another.
#[derive(Debug, Default)]
struct Open {
    start_ms: i64,
    bytes: Vec<u8>,
    /// Where each sample ends in `bytes`; empty when nothing is buffered.
    ends: Vec<u32>,
}

impl Open {
    fn samples(&self) -> impl Iterator<Item = &[u8]> + Clone {
        let mut from = 0;
        self.ends.iter().map(move |&end| {
            let (a, b) = (from, end as usize);
            from = b;
            &self.bytes[a..b]
        })
    }

    fn buffered(&self) -> bool {
        !self.ends.is_empty()
    }

    /// Appends a sample for period `start_ms`; `true` when the buffer is past its bound and
    /// should be merged.
    fn append(&mut self, start_ms: i64, bins: &[u8]) -> bool {
        self.start_ms = start_ms;
        self.bytes.extend_from_slice(bins);
        self.ends.push(self.bytes.len() as u32);
        self.bytes.len() > OPEN_BYTES_MAX
    }
}

/// Buffers reused by every fold of one head, so a fold allocates nothing once they have grown.
#[derive(Debug, Default)]
pub(crate) struct MergeScratch {
    /// Counts by key, all zero between folds (a fold zeroes what it touched); made on first
    /// use.
    dense: Option<Box<packed::DenseCounts>>,
    /// One sample packed, for a late sample's merge.
    packed: Vec<u8>,
    /// A fold's merged bins, packed, before they go into the arena.
    merged: Vec<u8>,
    /// Choosing a series' window.
    encode: EncodeScratch,
    /// A period being coded.
    code: CodeScratch,
}

impl HistSeries {
    /// A series starting a head with the window it ended the last one with: its periods are
    /// coded from the first, where a new series packs its first `WINDOW_FROM_PERIODS` and then
    /// chooses a window from them (≈ a tenth of a histogram sample's store CPU in
    /// `storebench`, with a choice in every 15-minute head).
    pub fn carried(carried: CarriedWindow) -> HistSeries {
        assert!(carried.heads_before < WINDOW_HEADS_MAX);
        HistSeries {
            window: SeriesWindow::Chosen(carried.window),
            window_heads_before: carried.heads_before,
            ..HistSeries::default()
        }
    }

    /// The window the series' next head should start with: this head's, while it has coded
    /// fewer than `WINDOW_HEADS_MAX` heads and nearly every bin fell inside it. `None`: the next
    /// head chooses again.
    pub fn window_to_carry(&self) -> Option<CarriedWindow> {
        let SeriesWindow::Chosen(window) = &self.window else {
            return None;
        };
        let heads_before = self.window_heads_before + 1;
        let window_bins = self.coded_periods.saturating_mul(window.width() as u64);
        let fits = self.coded_periods > 0
            && self
                .coded_extras
                .saturating_mul(CARRY_WINDOW_BINS_PER_EXTRA_MIN)
                <= window_bins;
        (heads_before < WINDOW_HEADS_MAX && fits).then(|| CarriedWindow {
            window: Arc::clone(window),
            heads_before,
        })
    }

    /// Adds a sample to period `period_start_ms`.
    pub fn insert(&mut self, period_start_ms: i64, h: &Histogram, scratch: &mut MergeScratch) {
        let mut sample = std::mem::take(&mut scratch.packed);
        sample.clear();
        packed::pack_histogram(h, &mut sample);
        self.insert_packed(period_start_ms, &sample, scratch);
        scratch.packed = sample;
    }

    /// Adds a sample, given as packed bins, to period `period_start_ms`.
    pub fn insert_packed(&mut self, period_start_ms: i64, bins: &[u8], scratch: &mut MergeScratch) {
        if self.late.buffered() && self.late.start_ms == period_start_ms && !bins.is_empty() {
            if self.late.append(period_start_ms, bins) {
                self.fold_late(scratch);
            }
            return;
        }
        if self.open.buffered() && self.open.start_ms != period_start_ms {
            if period_start_ms < self.open.start_ms {
                // Late data for a period already closed.
                if bins.is_empty() {
                    self.merge_packed(period_start_ms, std::iter::once(bins), scratch);
                    return;
                }
                self.fold_late(scratch);
                if self.late.append(period_start_ms, bins) {
                    self.fold_late(scratch);
                }
                return;
            }
            self.fold_open(scratch);
        }
        if bins.is_empty() {
            // Rare: an empty sample still marks its period.
            self.fold(scratch);
            self.merge_packed(period_start_ms, std::iter::once(bins), scratch);
            return;
        }
        debug_assert!(!self.late.buffered() || self.late.start_ms != period_start_ms);
        if self.open.append(period_start_ms, bins) {
            self.fold_open(scratch);
        }
    }

    fn find(&self, start_ms: i64) -> Result<usize, usize> {
        // The common lookups are of the newest period.
        match self.periods.last() {
            Some(p) if p.start_ms < start_ms => Err(self.periods.len()),
            _ => self.periods.binary_search_by_key(&start_ms, |p| p.start_ms),
        }
    }

    /// A period's bins as stored.
    fn stored(&self, p: &Period) -> Stored<'_> {
        let bytes = self.arena.bytes(p);
        if p.coded_bits == 0 {
            return Stored::Packed(bytes);
        }
        let (bits, extras) = bytes.split_at((p.coded_bits as usize).div_ceil(8).min(bytes.len()));
        Stored::Coded(CodedPeriod {
            bits,
            bit_len: p.coded_bits,
            extras,
        })
    }

    fn for_each_coded_bin(&self, coded: CodedPeriod<'_>, f: impl FnMut(u16, u64)) {
        let SeriesWindow::Chosen(window) = &self.window else {
            unreachable!("a coded period's series has a window");
        };
        if let Err(e) = rice_hist::for_each_coded_bin(window, coded, f) {
            unreachable!("the head decodes what it coded: {e}");
        }
    }

    /// Adds a period's stored bins (if any) and packed samples into the scratch's dense array
    /// without marking keys (a windowed series' fold: `rice_hist::code_dense_period` reads it)
    /// and returns the range of keys added, `None` if there were no bins.
    fn add_unmarked<'a>(
        &self,
        existing: Option<&Period>,
        samples: impl Iterator<Item = &'a [u8]>,
        scratch: &mut MergeScratch,
    ) -> Option<(usize, usize)> {
        let dense = &mut **scratch.dense.get_or_insert_with(packed::zeroed_dense);
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        match existing.map(|p| self.stored(p)) {
            Some(Stored::Packed(bytes)) => {
                packed::add_to_dense_unmarked(bytes, dense, (&mut lo, &mut hi));
            }
            Some(Stored::Coded(coded)) => self.for_each_coded_bin(coded, |key, c| {
                let k = usize::from(key);
                dense[k] = dense[k].saturating_add(c);
                (lo, hi) = (lo.min(k), hi.max(k));
            }),
            None => {}
        }
        for sample in samples {
            packed::add_to_dense_unmarked(sample, dense, (&mut lo, &mut hi));
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// Chooses the series' window from its first periods once it has enough of them.
    fn choose_window(&mut self, scratch: &mut MergeScratch) {
        if !matches!(self.window, SeriesWindow::NotYet) || self.periods.len() < WINDOW_FROM_PERIODS
        {
            return;
        }
        // Borrowed as they are walked: no vector of them allocated per choice.
        let periods = self.periods.iter().map(|p| match self.stored(p) {
            Stored::Packed(bytes) => bytes,
            Stored::Coded(_) => unreachable!("no period is coded before the window"),
        });
        let chosen = Window::choose(periods, &mut scratch.encode);
        self.window = match chosen {
            Some(window) => SeriesWindow::Chosen(Arc::new(window)),
            None => SeriesWindow::Unavailable,
        };
    }

    /// Merges packed samples (with what period `start_ms` already holds) and stores the result
    /// as that period.
    fn merge_packed<'a>(
        &mut self,
        start_ms: i64,
        samples: impl Iterator<Item = &'a [u8]> + Clone,
        scratch: &mut MergeScratch,
    ) {
        self.choose_window(scratch);
        let found = self.find(start_ms);
        let existing = found.ok().map(|i| self.periods[i]);
        let windowed = matches!(self.window, SeriesWindow::Chosen(_));
        let only = match (existing, samples.clone().count(), samples.clone().next()) {
            // One sample and nothing merged yet: its packing is the period's.
            (None, 1, Some(only)) if !windowed => Some(only),
            _ => None,
        };
        let ((segment, at, len), coded_bits) = match only {
            Some(only) => {
                let (segment, at) = self.arena.push(only);
                ((segment, at, only.len() as u32), 0)
            }
            None if windowed => {
                let range = self.add_unmarked(existing.as_ref(), samples, scratch);
                self.garbage_bytes += existing.map_or(0, |p| p.len as usize);
                match (range, &self.window) {
                    (Some(range), SeriesWindow::Chosen(window)) => {
                        let dense = &mut **scratch.dense.get_or_insert_with(packed::zeroed_dense);
                        rice_hist::code_dense_period(window, dense, range, &mut scratch.code);
                        let code = &scratch.code;
                        self.coded_periods += 1;
                        self.coded_extras += code.extras_bins() as u64;
                        let bit_len = code.bits.bit_len();
                        assert!(bit_len > 0 && bit_len <= u64::from(u32::MAX));
                        let place = self.arena.push_coded(code.bits.as_bytes(), &code.extras);
                        (place, bit_len as u32)
                    }
                    _ => {
                        // No bins at all: an empty period.
                        let (segment, at) = self.arena.push(&[]);
                        ((segment, at, 0), 0)
                    }
                }
            }
            None => {
                // Added unmarked and packed off a scan of their range, as a windowed series'
                // fold finds its extras: marking every bin as it was added cost more than the
                // scan of a period's few hundred keys.
                let range = self.add_unmarked(existing.as_ref(), samples, scratch);
                self.garbage_bytes += existing.map_or(0, |p| p.len as usize);
                let mut merged = std::mem::take(&mut scratch.merged);
                merged.clear();
                if let Some(range) = range {
                    let dense = &mut **scratch.dense.get_or_insert_with(packed::zeroed_dense);
                    packed::pack_nonzero(dense, range, &mut merged);
                }
                // No bins at all: an empty period.
                let (segment, at) = self.arena.push(&merged);
                let len = merged.len() as u32;
                scratch.merged = merged;
                ((segment, at, len), 0)
            }
        };
        let period = Period {
            start_ms,
            segment,
            at,
            len,
            coded_bits,
        };
        match found {
            Ok(i) => self.periods[i] = period,
            Err(i) => self.periods.insert(i, period),
        }
        if self.garbage_bytes > self.arena.len_bytes / 2 {
            self.compact_arena();
        }
    }

    /// Rewrites the arena without the garbage.
    #[cold]
    fn compact_arena(&mut self) {
        let old = std::mem::take(&mut self.arena);
        for p in &mut self.periods {
            let (segment, at) = self.arena.push(old.bytes(p));
            (p.segment, p.at) = (segment, at);
        }
        self.garbage_bytes = 0;
    }

    /// Merges every buffered sample (the open period's and the late ones) into its period.
    pub fn fold(&mut self, scratch: &mut MergeScratch) {
        self.fold_late(scratch);
        self.fold_open(scratch);
    }

    /// Merges the open period's buffered samples into its merged period.
    fn fold_open(&mut self, scratch: &mut MergeScratch) {
        let open = std::mem::take(&mut self.open);
        self.open = self.merge_buffer(open, scratch);
    }

    /// Merges the late samples into their merged period.
    fn fold_late(&mut self, scratch: &mut MergeScratch) {
        let late = std::mem::take(&mut self.late);
        self.late = self.merge_buffer(late, scratch);
    }

    /// Merges a buffer's samples into their period; returns the buffer emptied (its
    /// allocations kept for the next period).
    fn merge_buffer(&mut self, mut buffer: Open, scratch: &mut MergeScratch) -> Open {
        if buffer.buffered() {
            self.merge_packed(buffer.start_ms, buffer.samples(), scratch);
        }
        buffer.start_ms = 0;
        buffer.bytes.clear();
        buffer.ends.clear();
        buffer
    }

    /// The buffers holding samples, the late one first.
    fn buffers(&self) -> impl Iterator<Item = &Open> {
        [&self.late, &self.open]
            .into_iter()
            .filter(|b| b.buffered())
    }

    /// The newest period with data.
    pub fn last_start_ms(&self) -> Option<i64> {
        let merged = self.periods.last().map(|p| p.start_ms);
        let buffered = self.buffers().map(|b| b.start_ms).max();
        merged.max(buffered)
    }

    /// Every period with data, ascending, each once.
    pub fn starts(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self.periods.iter().map(|p| p.start_ms).collect();
        for b in self.buffers() {
            if let Err(i) = out.binary_search(&b.start_ms) {
                out.insert(i, b.start_ms);
            }
        }
        out
    }

    fn periods_between(&self, start_ms: i64, end_ms: i64) -> &[Period] {
        let from = self.periods.partition_point(|p| p.start_ms < start_ms);
        let to = self.periods.partition_point(|p| p.start_ms < end_ms);
        &self.periods[from..to.max(from)]
    }

    /// Adds every period in `[start_ms, end_ms)` into `out[slot(period_start)]`.
    pub fn accumulate_into(
        &self,
        start_ms: i64,
        end_ms: i64,
        out: &mut [Accumulator],
        slot: impl Fn(i64) -> usize,
    ) {
        for p in self.periods_between(start_ms, end_ms) {
            let acc = &mut out[slot(p.start_ms)];
            match self.stored(p) {
                Stored::Packed(bytes) => packed::add_to(bytes, acc),
                Stored::Coded(coded) => self.for_each_coded_bin(coded, |k, c| acc.add_key(k, c)),
            }
        }
        for b in self.buffers() {
            if (start_ms..end_ms).contains(&b.start_ms) {
                let acc = &mut out[slot(b.start_ms)];
                for sample in b.samples() {
                    packed::add_to(sample, acc);
                }
            }
        }
    }

    /// Every period in `[start_ms, end_ms)`, ascending, as packed bins (coded ones repacked).
    #[cfg(test)]
    pub fn packed_periods_in(
        &self,
        start_ms: i64,
        end_ms: i64,
        scratch: &mut MergeScratch,
    ) -> Vec<(i64, Cow<'_, [u8]>)> {
        let (_, periods) = self.windowed_periods_in(start_ms, end_ms, scratch);
        let repack = |coded| {
            let mut bins = Vec::new();
            self.for_each_coded_bin(coded, |k, c| bins.push((k, c)));
            bins.sort_unstable();
            let mut bytes = Vec::new();
            packed::pack_pairs(&bins, &mut bytes);
            Cow::Owned(bytes)
        };
        periods
            .into_iter()
            .map(|(t, p)| match p {
                WindowedPeriod::Packed(bytes) => (t, bytes),
                WindowedPeriod::Coded(coded) => (t, repack(coded)),
            })
            .collect()
    }

    /// What a flush writes for `[start_ms, end_ms)`: the series' window, if it has one, and
    /// every period in the range, ascending — coded periods as their bits, packed ones
    /// borrowed, the buffered periods folded (with their merged parts) into packed bytes of
    /// their own. Without a window every period is packed.
    pub fn windowed_periods_in(
        &self,
        start_ms: i64,
        end_ms: i64,
        scratch: &mut MergeScratch,
    ) -> (Option<&Window>, Vec<(i64, WindowedPeriod<'_>)>) {
        let window = match &self.window {
            SeriesWindow::Chosen(window) => Some(&**window),
            _ => None,
        };
        let mut out: Vec<(i64, WindowedPeriod<'_>)> = self
            .periods_between(start_ms, end_ms)
            .iter()
            .map(|p| {
                let period = match self.stored(p) {
                    Stored::Packed(bytes) => WindowedPeriod::Packed(Cow::Borrowed(bytes)),
                    Stored::Coded(coded) => WindowedPeriod::Coded(coded),
                };
                (p.start_ms, period)
            })
            .collect();
        for b in self.buffers() {
            if !(start_ms..end_ms).contains(&b.start_ms) {
                continue;
            }
            let found = out.binary_search_by_key(&b.start_ms, |p| p.0);
            let existing = self.periods_between(b.start_ms, b.start_ms + 1).first();
            debug_assert_eq!(existing.map(|p| p.start_ms), found.ok().map(|i| out[i].0));
            // The merge a fold would make, read off the range (`add_unmarked` takes coded
            // periods too), packed.
            let mut folded = Vec::new();
            if let Some(range) = self.add_unmarked(existing, b.samples(), scratch) {
                let dense = &mut **scratch.dense.get_or_insert_with(packed::zeroed_dense);
                let mut bins = Vec::new();
                packed::take_nonzero(dense, range, &mut bins);
                packed::pack_pairs(&bins, &mut folded);
            }
            let period = WindowedPeriod::Packed(Cow::Owned(folded));
            match found {
                Ok(i) => out[i].1 = period,
                Err(i) => out.insert(i, (b.start_ms, period)),
            }
        }
        (window, out)
    }

    /// The merged histogram of every period in `[start_ms, end_ms)`, ascending (the buffered
    /// periods merged on the fly).
    pub fn periods_in(&self, start_ms: i64, end_ms: i64) -> Vec<(i64, Histogram)> {
        let mut out: Vec<(i64, Histogram)> = self
            .periods_between(start_ms, end_ms)
            .iter()
            .map(|p| {
                let h = match self.stored(p) {
                    Stored::Packed(bytes) => unpack_own(bytes),
                    Stored::Coded(coded) => {
                        let mut acc = Accumulator::new();
                        self.for_each_coded_bin(coded, |k, c| acc.add_key(k, c));
                        acc.to_histogram()
                    }
                };
                (p.start_ms, h)
            })
            .collect();
        for b in self.buffers() {
            if !(start_ms..end_ms).contains(&b.start_ms) {
                continue;
            }
            let mut acc = Accumulator::new();
            for sample in b.samples() {
                packed::add_to(sample, &mut acc);
            }
            match out.binary_search_by_key(&b.start_ms, |p| p.0) {
                Ok(i) => {
                    acc.add(&out[i].1);
                    out[i].1 = acc.to_histogram();
                }
                Err(i) => out.insert(i, (b.start_ms, acc.to_histogram())),
            }
        }
        out
    }
}

/// Unpacks bins the store packed itself (checked in debug builds: damage would be a bug).
fn unpack_own(bytes: &[u8]) -> Histogram {
    packed::unpack_trusted(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeMap;

    use rand::SeedableRng;
    use rand_distr::Distribution;

    use super::*;
    use crate::encode::rice_hist::PackedPeriods;
    use crate::test_util::histogram_of;

    /// A run of late samples for one period (a broker forwarding what it stored) is merged
    /// into that period once, not once per sample: the period's old packing is rewritten once.
    #[test]
    fn late_samples_for_one_period_merge_once() {
        let mut series = HistSeries::default();
        let mut scratch = MergeScratch::default();
        let mut model: BTreeMap<i64, Histogram> = BTreeMap::new();
        let add = |series: &mut HistSeries,
                   model: &mut BTreeMap<i64, Histogram>,
                   scratch: &mut MergeScratch,
                   period: i64,
                   v: f64| {
            let h = histogram_of(&[(v, 1), (v * 2.0, 3)]);
            series.insert(period * 60_000, &h, scratch);
            model.entry(period * 60_000).or_default().merge(&h);
        };
        for period in 0..4 {
            add(
                &mut series,
                &mut model,
                &mut scratch,
                period,
                1.0 + period as f64,
            );
        }
        add(&mut series, &mut model, &mut scratch, 9, 5.0);
        let period_1_bytes = series.periods[1].len as usize;
        for i in 0..5 {
            add(&mut series, &mut model, &mut scratch, 1, 0.5 + f64::from(i));
        }
        // Still buffered: read through the buffer.
        assert_eq!(series.garbage_bytes, 0);
        let want: Vec<(i64, Histogram)> = model.clone().into_iter().collect();
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
        assert_eq!(
            series.starts(),
            want.iter().map(|p| p.0).collect::<Vec<_>>()
        );
        // The next late period folds the run: one rewrite of period 1.
        add(&mut series, &mut model, &mut scratch, 2, 7.0);
        assert_eq!(series.garbage_bytes, period_1_bytes);
        let want: Vec<(i64, Histogram)> = model.into_iter().collect();
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
        series.fold(&mut scratch);
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
    }

    /// What a flush writes for the series (`windowed_periods_in`, then the block writer's
    /// encode), decoded.
    fn flushed_chunk(series: &HistSeries, scratch: &mut MergeScratch) -> Vec<(i64, Histogram)> {
        let (window, periods) = series.windowed_periods_in(i64::MIN, i64::MAX, scratch);
        if periods.is_empty() {
            return Vec::new();
        }
        let mut encode_scratch = EncodeScratch::default();
        let bytes = match window {
            Some(window) => {
                rice_hist::encode_with_window(window, &periods, &mut encode_scratch).unwrap()
            }
            None => {
                let packed: Vec<(i64, Vec<u8>)> = periods
                    .into_iter()
                    .map(|(t, p)| match p {
                        WindowedPeriod::Packed(bytes) => (t, bytes.into_owned()),
                        WindowedPeriod::Coded(_) => panic!("coded period without a window"),
                    })
                    .collect();
                rice_hist::encode(&PackedPeriods(&packed), &mut encode_scratch).unwrap()
            }
        };
        rice_hist::decode(&bytes).unwrap()
    }

    /// Once a series has `WINDOW_FROM_PERIODS` merged periods, each later one is stored coded
    /// with the window they chose — smaller than packed — and reads, late data and the flush
    /// see the same histograms as before.
    #[test]
    fn later_periods_are_coded_with_the_first_ones_window() {
        let mut series = HistSeries::default();
        let mut scratch = MergeScratch::default();
        let mut model: BTreeMap<i64, Histogram> = BTreeMap::new();
        add_lognormal_periods(&mut series, &mut model, (0, 12), -4.0, 11);
        assert!(matches!(series.window, SeriesWindow::Chosen(_)));
        let coded: Vec<bool> = series.periods.iter().map(|p| p.coded_bits > 0).collect();
        let first = WINDOW_FROM_PERIODS;
        assert!(coded[..first].iter().all(|&c| !c), "{coded:?}");
        assert!(coded[first..].iter().all(|&c| c), "{coded:?}");
        let bytes = |p: &[Period]| p.iter().map(|p| p.len as usize).sum::<usize>() / p.len();
        let (packed_bytes, coded_bytes) = (
            bytes(&series.periods[..first]),
            bytes(&series.periods[first..]),
        );
        assert!(
            coded_bytes * 3 < packed_bytes,
            "{coded_bytes} vs {packed_bytes} bytes a period"
        );
        let want: Vec<(i64, Histogram)> = model.clone().into_iter().collect();
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
        assert_eq!(flushed_chunk(&series, &mut scratch), want);
        // Late data into a coded period: merged, and coded again.
        let late = histogram_of(&[(1e-3, 4), (50.0, 1)]);
        series.insert(7 * 60_000, &late, &mut scratch);
        series.insert(8 * 60_000, &late, &mut scratch);
        series.fold(&mut scratch);
        for t in [7, 8] {
            model.entry(t * 60_000).or_default().merge(&late);
        }
        assert!(series.periods[7].coded_bits > 0 && series.periods[8].coded_bits > 0);
        let want: Vec<(i64, Histogram)> = model.into_iter().collect();
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
        assert_eq!(flushed_chunk(&series, &mut scratch), want);
    }

    /// Samples of 100 lognormal observations, six a period, for periods `from..to`, into the
    /// series and the model.
    fn add_lognormal_periods(
        series: &mut HistSeries,
        model: &mut BTreeMap<i64, Histogram>,
        (from, to): (i64, i64),
        mu: f64,
        seed: u64,
    ) {
        let mut scratch = MergeScratch::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let lognormal = rand_distr::LogNormal::new(mu, 1.0).unwrap();
        for step in from * 6..to * 6 {
            let values: Vec<(f64, u64)> =
                (0..100).map(|_| (lognormal.sample(&mut rng), 1)).collect();
            let h = histogram_of(&values);
            let start = step / 6 * 60_000;
            series.insert(start, &h, &mut scratch);
            model.entry(start).or_default().merge(&h);
        }
        series.fold(&mut scratch);
    }

    /// Counts in the millions give the window Rice parameters past `RUN_K_SMALL_MAX`: those
    /// periods are coded on the run coder's checked path, and read back and flush exactly.
    #[test]
    fn periods_with_huge_counts_code_and_read_back() {
        let mut series = HistSeries::default();
        let mut scratch = MergeScratch::default();
        let mut model: BTreeMap<i64, Histogram> = BTreeMap::new();
        for step in 0..60i64 {
            let n = 3_000_000 + (step as u64 % 7) * 1_000_003;
            let h = histogram_of(&[(1e-3, n), (2e-3, n / 3), (5e-3, 17), (0.1, n * 5)]);
            let start = step / 6 * 60_000;
            series.insert(start, &h, &mut scratch);
            model.entry(start).or_default().merge(&h);
        }
        series.fold(&mut scratch);
        let SeriesWindow::Chosen(window) = &series.window else {
            panic!("a window is chosen");
        };
        assert!(u32::from(window.k_max()) > crate::encode::bits::RUN_K_SMALL_MAX);
        assert!(series
            .periods
            .iter()
            .skip(WINDOW_FROM_PERIODS)
            .all(|p| p.coded_bits > 0));
        let want: Vec<(i64, Histogram)> = model.into_iter().collect();
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
        assert_eq!(flushed_chunk(&series, &mut scratch), want);
    }

    /// A series that starts a head with the window it ended the last one with codes every
    /// period from the first, and reads and flushes them exactly; the window is carried at
    /// most `WINDOW_HEADS_MAX` heads in all.
    #[test]
    fn a_carried_window_codes_the_next_heads_periods_from_the_first() {
        let mut first = HistSeries::default();
        add_lognormal_periods(&mut first, &mut BTreeMap::new(), (0, 8), -4.0, 3);
        let mut carried = first
            .window_to_carry()
            .expect("a window that fits is carried");
        assert_eq!(carried.heads_before, 1);
        for head in 1..WINDOW_HEADS_MAX {
            let mut series = HistSeries::carried(carried.clone());
            let mut model = BTreeMap::new();
            let periods = (i64::from(head) * 10, i64::from(head) * 10 + 5);
            add_lognormal_periods(&mut series, &mut model, periods, -4.0, u64::from(head));
            let coded: Vec<bool> = series.periods.iter().map(|p| p.coded_bits > 0).collect();
            assert!(coded.iter().all(|&c| c), "head {head}: {coded:?}");
            let want: Vec<(i64, Histogram)> = model.into_iter().collect();
            assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
            assert_eq!(flushed_chunk(&series, &mut MergeScratch::default()), want);
            match series.window_to_carry() {
                Some(next) => {
                    assert_eq!(next.heads_before, head + 1);
                    assert!(Arc::ptr_eq(&next.window, &carried.window));
                    carried = next;
                }
                None => assert_eq!(head + 1, WINDOW_HEADS_MAX, "carried too few heads"),
            }
        }
    }

    /// A window is not carried once the series' bins have moved out of it: the next head
    /// chooses one that fits.
    #[test]
    fn a_window_the_series_left_is_not_carried() {
        let mut first = HistSeries::default();
        add_lognormal_periods(&mut first, &mut BTreeMap::new(), (0, 8), -4.0, 5);
        let mut series = HistSeries::carried(first.window_to_carry().unwrap());
        let mut model = BTreeMap::new();
        // A thousand times slower: nearly every bin falls outside the old window.
        add_lognormal_periods(&mut series, &mut model, (10, 14), 3.0, 6);
        assert!(series.coded_extras * CARRY_WINDOW_BINS_PER_EXTRA_MIN > series.coded_periods);
        let want: Vec<(i64, Histogram)> = model.into_iter().collect();
        assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
        assert_eq!(flushed_chunk(&series, &mut MergeScratch::default()), want);
        assert!(series.window_to_carry().is_none());
        // Nor is a series' without a window yet.
        let mut young = HistSeries::default();
        add_lognormal_periods(&mut young, &mut BTreeMap::new(), (0, 2), -4.0, 7);
        assert!(young.window_to_carry().is_none());
    }

    proptest::proptest! {
        /// Any sequence of samples over a few periods, in any order, with any sizes (empty,
        /// huge counts, more bins than the buffer holds), before and after the series codes
        /// its periods with a window: every read, and the chunk a flush writes, equals merging
        /// each period's samples with `Histogram::merge`.
        #[test]
        fn series_equals_per_period_merge(
            samples in proptest::collection::vec(
                (0i64..10, proptest::collection::vec((-1e3f64..1e3, 1u64..50), 0..40), 0u8..20),
                1..60,
            ),
            fold_at in proptest::collection::vec(0usize..40, 0..3),
        ) {
            let mut series = HistSeries::default();
            let mut model: BTreeMap<i64, Histogram> = BTreeMap::new();
            let mut scratch = MergeScratch::default();
            for (i, (period, values, shape)) in samples.iter().enumerate() {
                let mut h = histogram_of(values);
                match shape {
                    0 => h.insert_n(7.0, u64::from(u32::MAX) + 5),
                    1 => {
                        // More bytes than one buffer holds.
                        for k in 0..(OPEN_BYTES_MAX as i32 / 2 + 10) {
                            h.insert_n(1.0 + f64::from(k) * 1e-3, 1);
                        }
                    }
                    _ => {}
                }
                let start = period * 60_000;
                series.insert(start, &h, &mut scratch);
                model.entry(start).or_default().merge(&h);
                if fold_at.contains(&i) {
                    series.fold(&mut scratch);
                }
            }
            let got = series.periods_in(i64::MIN, i64::MAX);
            let want: Vec<(i64, Histogram)> = model.into_iter().collect();
            proptest::prop_assert_eq!(&got, &want);
            let starts = series.starts();
            let want_starts: Vec<i64> = want.iter().map(|p| p.0).collect();
            proptest::prop_assert_eq!(starts, want_starts.clone());
            proptest::prop_assert_eq!(series.last_start_ms(), want_starts.last().copied());
            let mut acc = vec![Accumulator::new(); 10];
            series.accumulate_into(0, 600_000, &mut acc, |t| (t / 60_000) as usize);
            for (t, h) in &want {
                proptest::prop_assert_eq!(&acc[(*t / 60_000) as usize].to_histogram(), h);
            }
            // The packed periods a flush encodes are the same periods.
            let packed: Vec<(i64, Histogram)> = series
                .packed_periods_in(i64::MIN, i64::MAX, &mut scratch)
                .into_iter()
                .map(|(t, bytes)| (t, packed::unpack_trusted(&bytes)))
                .collect();
            proptest::prop_assert_eq!(&packed, &want);
            proptest::prop_assert_eq!(flushed_chunk(&series, &mut scratch), want.clone());
            series.fold(&mut scratch);
            proptest::prop_assert_eq!(series.periods_in(i64::MIN, i64::MAX), want);
            // A fold leaves the dense array zeroed.
            proptest::prop_assert!(scratch.dense.iter().flat_map(|d| d.iter()).all(|&c| c == 0));
        }
    }
}
