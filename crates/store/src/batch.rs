//! The write batch: samples of any kind for any number of series, in the order they were added.
//!
//! A sample names its series by key (kept as canonical text in one buffer per batch, so adding
//! a sample allocates nothing once the batch's buffers have grown) or by a [`SeriesId`] the
//! caller got from [`crate::Store::resolve`]. Consecutive samples of one key share one entry,
//! so the write path resolves each key once per run of samples, not once per sample.

use std::borrow::Cow;

use hist::convert::Cumulative;
use hist::Histogram;

use crate::key::StreamKey;
use crate::series::{Kind, SeriesId};
use crate::sources::Origin;
use crate::StoreError;

/// Samples in one batch, bounded so one batch fits one journal record comfortably.
pub const BATCH_SAMPLES_MAX: usize = 1 << 20;
/// Longest text value, in bytes.
pub const TEXT_BYTES_MAX: usize = 64 << 10;
/// Canonical key text held by one batch, in bytes (a batch of `BATCH_SAMPLES_MAX` samples of
/// distinct keys of ~60 bytes fits).
pub const BATCH_KEY_BYTES_MAX: usize = 64 << 20;

/// One submitted value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Numeric(f64),
    Text(String),
    /// Observations made at this sample's time; merged into the sample's base period.
    Histogram(Histogram),
    /// A running total since the source started, in the source's own buckets: the store keeps
    /// the increase since the series' previous cumulative submission, taken in those buckets
    /// and then converted (or the whole value after a counter reset).
    CumulativeHistogram(Cumulative),
}

impl Value {
    pub fn kind(&self) -> Kind {
        match self {
            Value::Numeric(_) => Kind::Numeric,
            Value::Text(_) => Kind::Text,
            Value::Histogram(_) | Value::CumulativeHistogram(_) => Kind::Histogram,
        }
    }
}

/// A value's kind as the WAL record names it (`FORMAT.md`, "WAL record"): the batch decides its
/// samples' runs by it, the WAL writes and reads it.
pub(crate) const TAG_NUMERIC: u8 = 1;
pub(crate) const TAG_TEXT: u8 = 2;
pub(crate) const TAG_HISTOGRAM: u8 = 3;
pub(crate) const TAG_CUMULATIVE: u8 = 4;

pub(crate) fn tag_of(value: &Value) -> u8 {
    match value {
        Value::Numeric(_) => TAG_NUMERIC,
        Value::Text(_) => TAG_TEXT,
        Value::Histogram(_) => TAG_HISTOGRAM,
        Value::CumulativeHistogram(_) => TAG_CUMULATIVE,
    }
}

/// How a batch entry names its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRef<'a> {
    /// Canonical key text (`StreamKey::canonical`); created in the index if new.
    Text(&'a str),
    /// A series the index already has.
    Id(SeriesId),
}

#[derive(Clone, Copy, Debug)]
enum Target {
    /// `key_text[start..end]`.
    Text {
        start: u32,
        end: u32,
    },
    Id(SeriesId),
}

/// A run of the batch's samples naming one series.
#[derive(Clone, Copy, Debug)]
struct Entry {
    target: Target,
    kind: Kind,
}

/// One sample of a batch: 32 bytes, so that a batch's samples stay in cache between the
/// passes the write path makes over them (the WAL record, the head). A `Value` in each took
/// 88, and a batch of 10,000 histograms then spilled the L2 cache on every pass.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchSample {
    pub(crate) ts_ms: i64,
    pub(crate) value: SampleValue,
    /// Index into `WriteBatch::entries`.
    pub(crate) entry: u32,
}

const _: () = assert!(std::mem::size_of::<BatchSample>() == 32);

/// A sample's value as the batch keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SampleValue {
    Numeric(f64),
    /// A plain histogram (added as bins or as a `Histogram`): its bins, packed in
    /// `WriteBatch::packed`.
    Packed(PackedBins),
    /// Text or a cumulative histogram: `WriteBatch::others[i]`.
    Other(u32),
}

/// Where a batch's values are: its packed bins and its other values.
#[derive(Clone, Copy)]
pub(crate) struct BatchValues<'a> {
    pub(crate) packed: &'a [u8],
    pub(crate) others: &'a [Value],
}

impl<'a> BatchValues<'a> {
    /// The value of `sample`, unpacked from the packed bytes for a plain histogram.
    pub(crate) fn value(self, sample: &BatchSample) -> Cow<'a, Value> {
        match sample.value {
            SampleValue::Numeric(v) => Cow::Owned(Value::Numeric(v)),
            SampleValue::Packed(p) => {
                Cow::Owned(Value::Histogram(hist::packed::unpack_trusted(self.bins(p))))
            }
            SampleValue::Other(i) => Cow::Borrowed(&self.others[i as usize]),
        }
    }

    /// The bytes of packed bins `p`.
    pub(crate) fn bins(self, p: PackedBins) -> &'a [u8] {
        &self.packed[p.start as usize..p.end as usize]
    }

    /// The value kind's WAL tag.
    pub(crate) fn tag(self, sample: &BatchSample) -> u8 {
        match sample.value {
            SampleValue::Numeric(_) => TAG_NUMERIC,
            SampleValue::Packed(_) => TAG_HISTOGRAM,
            SampleValue::Other(i) => tag_of(&self.others[i as usize]),
        }
    }
}

/// A histogram sample's bins, packed (`packed.rs`) into `WriteBatch::packed` when added.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PackedBins {
    pub(crate) bins: u32,
    pub(crate) start: u32,
    pub(crate) end: u32,
}

/// Most bytes of packed bins one batch holds (a batch of `BATCH_SAMPLES_MAX` histograms of a
/// few hundred bins at two bytes each is well below it).
pub const BATCH_PACKED_BYTES_MAX: usize = 1 << 30;

/// A sample's value as added: owned, or a histogram's sorted bins lent by the caller.
enum Incoming<'a> {
    Value(Value),
    Bins {
        keys: &'a [u16],
        counts: &'a [u64],
    },
    /// Bins already packed, and checked as they were (`hist::packed::PackedList`).
    Packed(hist::packed::PackedRef<'a>),
}

impl Incoming<'_> {
    fn kind(&self) -> Kind {
        match self {
            Incoming::Value(v) => v.kind(),
            Incoming::Bins { .. } | Incoming::Packed(_) => Kind::Histogram,
        }
    }
}

/// A batch of samples for [`crate::Store::write`].
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    /// The canonical text of every `Target::Text` entry, back to back.
    key_text: String,
    entries: Vec<Entry>,
    samples: Vec<BatchSample>,
    /// Packed bins of the plain histograms, back to back.
    packed: Vec<u8>,
    /// Values that are neither numbers nor plain histograms (`SampleValue::Other`).
    others: Vec<Value>,
    has_cumulative: bool,
    /// About the WAL record's size, so the write path allocates it once.
    record_size_hint_bytes: usize,
    /// Who sent the batch and which of its batches it is, when the sender said: the store
    /// applies a batch of one origin once (`sources.rs`).
    origin: Option<Origin>,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn numeric(&mut self, key: &StreamKey, ts_ms: i64, value: f64) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::Numeric(value))
    }

    pub fn text(&mut self, key: &StreamKey, ts_ms: i64, value: &str) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::Text(value.to_owned()))
    }

    pub fn histogram(
        &mut self,
        key: &StreamKey,
        ts_ms: i64,
        value: &Histogram,
    ) -> Result<(), StoreError> {
        self.push(key, ts_ms, Value::Histogram(value.clone()))
    }

    /// A running total kept as llhist bins (httptrap `_type: "H"`).
    pub fn cumulative_histogram(
        &mut self,
        key: &StreamKey,
        ts_ms: i64,
        value: &Histogram,
    ) -> Result<(), StoreError> {
        let value = Value::CumulativeHistogram(Cumulative::Bins(value.clone()));
        self.push(key, ts_ms, value)
    }

    /// Adds one sample. A key keeps one kind (for life, in the index).
    pub fn push(&mut self, key: &StreamKey, ts_ms: i64, value: Value) -> Result<(), StoreError> {
        self.push_slot(key, ts_ms, value).map(|_| ())
    }

    /// [`WriteBatch::push`], returning the key's slot for [`WriteBatch::push_at`].
    pub fn push_slot(
        &mut self,
        key: &StreamKey,
        ts_ms: i64,
        value: Value,
    ) -> Result<usize, StoreError> {
        self.push_key_with(
            |out| key.write_canonical(out),
            ts_ms,
            Incoming::Value(value),
        )
    }

    /// Adds one sample of the series whose canonical key text is `key_text` (as
    /// `StreamKey::canonical` prints it). Text that is not canonical is refused by
    /// [`crate::Store::write`] if the series is new, and never matches an existing series.
    pub fn push_canonical(
        &mut self,
        key_text: &str,
        ts_ms: i64,
        value: Value,
    ) -> Result<usize, StoreError> {
        self.push_key_with(|out| out.push_str(key_text), ts_ms, Incoming::Value(value))
    }

    /// [`WriteBatch::push_canonical`] for a histogram given as its bins: storage-order keys,
    /// strictly ascending and valid, and their counts, all above zero (what
    /// `hist::Histogram::keys` and `counts` hold). They are packed into the batch as they come,
    /// so adding a histogram allocates nothing once the batch's buffers have grown, and the
    /// write path copies the packed bins into the WAL record instead of packing them there.
    pub fn push_canonical_bins(
        &mut self,
        key_text: &str,
        ts_ms: i64,
        keys: &[u16],
        counts: &[u64],
    ) -> Result<usize, StoreError> {
        let bins = Incoming::Bins { keys, counts };
        self.push_key_with(|out| out.push_str(key_text), ts_ms, bins)
    }

    /// [`WriteBatch::push_canonical_bins`] for bins a parser packed as it read them: they are
    /// copied as they are, the checks done when they were packed.
    pub fn push_canonical_packed(
        &mut self,
        key_text: &str,
        ts_ms: i64,
        bins: hist::packed::PackedRef<'_>,
    ) -> Result<usize, StoreError> {
        self.push_key_with(|out| out.push_str(key_text), ts_ms, Incoming::Packed(bins))
    }

    /// [`WriteBatch::push_at`] for a histogram given as its bins (see
    /// [`WriteBatch::push_canonical_bins`]).
    pub fn push_at_bins(
        &mut self,
        slot: usize,
        ts_ms: i64,
        keys: &[u16],
        counts: &[u64],
    ) -> Result<(), StoreError> {
        self.push_at_incoming(slot, ts_ms, Incoming::Bins { keys, counts })
    }

    /// Adds one sample of series `id` (from [`crate::Store::resolve`] on the store this batch
    /// is written to), skipping the key lookup.
    pub fn push_id(&mut self, id: SeriesId, ts_ms: i64, value: Value) -> Result<usize, StoreError> {
        self.push_id_incoming(id, ts_ms, Incoming::Value(value))
    }

    /// [`WriteBatch::push_id`] for a histogram given as its bins (see
    /// [`WriteBatch::push_canonical_bins`]): an in-process writer keeps its histograms, the
    /// batch holds them packed.
    pub fn push_id_bins(
        &mut self,
        id: SeriesId,
        ts_ms: i64,
        keys: &[u16],
        counts: &[u64],
    ) -> Result<usize, StoreError> {
        self.push_id_incoming(id, ts_ms, Incoming::Bins { keys, counts })
    }

    /// [`WriteBatch::push_id`] for bins a parser packed as it read them (see
    /// [`WriteBatch::push_canonical_packed`]).
    pub fn push_id_packed(
        &mut self,
        id: SeriesId,
        ts_ms: i64,
        bins: hist::packed::PackedRef<'_>,
    ) -> Result<usize, StoreError> {
        self.push_id_incoming(id, ts_ms, Incoming::Packed(bins))
    }

    fn push_id_incoming(
        &mut self,
        id: SeriesId,
        ts_ms: i64,
        value: Incoming<'_>,
    ) -> Result<usize, StoreError> {
        check(self.samples.len(), self.packed.len(), &value)?;
        let kind = value.kind();
        let (slot, created) = match self.entries.last() {
            Some(Entry {
                target: Target::Id(last),
                kind: last_kind,
            }) if *last == id && *last_kind == kind => (self.entries.len() - 1, false),
            _ => (self.new_entry(Target::Id(id), kind)?, true),
        };
        if let Err(e) = self.push_sample(slot, ts_ms, value) {
            if created {
                self.entries.pop();
            }
            return Err(e);
        }
        Ok(slot)
    }

    /// Adds one sample to the series in `slot` (from a `push_*` on this batch since it was last
    /// cleared) without looking its key up again. Panics if the slot is not one of this batch's.
    pub fn push_at(&mut self, slot: usize, ts_ms: i64, value: Value) -> Result<(), StoreError> {
        self.push_at_incoming(slot, ts_ms, Incoming::Value(value))
    }

    fn push_at_incoming(
        &mut self,
        slot: usize,
        ts_ms: i64,
        value: Incoming<'_>,
    ) -> Result<(), StoreError> {
        check(self.samples.len(), self.packed.len(), &value)?;
        self.push_at_checked(slot, ts_ms, value)
    }

    /// [`WriteBatch::push_at_incoming`] for a value `check` already passed.
    fn push_at_checked(
        &mut self,
        slot: usize,
        ts_ms: i64,
        value: Incoming<'_>,
    ) -> Result<(), StoreError> {
        assert!(
            slot < self.entries.len(),
            "slot {slot} is not in this batch"
        );
        if self.entries[slot].kind != value.kind() {
            return Err(StoreError::KindMismatchInBatch {
                key: self.describe(slot),
            });
        }
        self.push_sample(slot, ts_ms, value)
    }

    fn push_key_with(
        &mut self,
        write_key: impl FnOnce(&mut String),
        ts_ms: i64,
        value: Incoming<'_>,
    ) -> Result<usize, StoreError> {
        check(self.samples.len(), self.packed.len(), &value)?;
        let kind = value.kind();
        let start = self.key_text.len();
        write_key(&mut self.key_text);
        let end = self.key_text.len();
        // The common case — a series' samples one after another — reuses the previous entry.
        if let Some(last) = self.entries.len().checked_sub(1) {
            if let Target::Text { start: s, end: e } = self.entries[last].target {
                if self.key_text[s as usize..e as usize] == self.key_text[start..end] {
                    self.key_text.truncate(start);
                    // Checked above: lent bins are not walked twice.
                    self.push_at_checked(last, ts_ms, value)?;
                    return Ok(last);
                }
            }
        }
        if end > BATCH_KEY_BYTES_MAX {
            self.key_text.truncate(start);
            return Err(StoreError::BatchTooLarge);
        }
        let target = Target::Text {
            start: start as u32,
            end: end as u32,
        };
        let slot = match self.new_entry(target, kind) {
            Ok(slot) => slot,
            Err(e) => {
                self.key_text.truncate(start);
                return Err(e);
            }
        };
        if let Err(e) = self.push_sample(slot, ts_ms, value) {
            self.entries.pop();
            self.key_text.truncate(start);
            return Err(e);
        }
        Ok(slot)
    }

    fn new_entry(&mut self, target: Target, kind: Kind) -> Result<usize, StoreError> {
        // Entries ≤ samples ≤ BATCH_SAMPLES_MAX, so the index fits a u32.
        assert!(self.entries.len() < BATCH_SAMPLES_MAX);
        self.entries.push(Entry { target, kind });
        Ok(self.entries.len() - 1)
    }

    /// Adds a sample `check` passed. Lent bins' keys and counts are checked as they are packed;
    /// bins that do not fit leave the batch as it was (the caller takes back an entry it made
    /// for it).
    fn push_sample(
        &mut self,
        slot: usize,
        ts_ms: i64,
        value: Incoming<'_>,
    ) -> Result<(), StoreError> {
        debug_assert_eq!(self.entries[slot].kind, value.kind());
        // Plain histograms are packed as they come, so the write path copies their bins into
        // the WAL record and the head takes them from here (`BatchValues::value` unpacks).
        let start = self.packed.len();
        // Group header, timestamp and value, generously: a histogram bin takes at most 10 bytes.
        let (value, value_bytes) = match value {
            Incoming::Bins { keys, counts } => {
                if !hist::packed::pack(keys, counts, &mut self.packed) {
                    debug_assert_eq!(self.packed.len(), start, "pack takes its bytes back");
                    let refused = bins_error(keys, counts);
                    debug_assert!(refused.is_err(), "pack refuses only bins that do not fit");
                    return refused;
                }
                self.packed_sample(start, keys.len())
            }
            Incoming::Packed(bins) => {
                self.packed.extend_from_slice(bins.bytes());
                self.packed_sample(start, bins.bins())
            }
            Incoming::Value(Value::Histogram(h)) => {
                hist::packed::pack_histogram(&h, &mut self.packed);
                self.packed_sample(start, h.bin_count())
            }
            Incoming::Value(Value::Numeric(v)) => (SampleValue::Numeric(v), 8),
            Incoming::Value(other) => {
                let bytes = match &other {
                    Value::Text(t) => t.len(),
                    Value::Histogram(h) => 4 + 10 * h.bin_count(),
                    Value::CumulativeHistogram(c) => 64 + cumulative_size_hint(c),
                    Value::Numeric(_) => 8,
                };
                self.has_cumulative |= matches!(other, Value::CumulativeHistogram(_));
                // Bounded by the batch's samples (`BATCH_SAMPLES_MAX` < 2³²).
                self.others.push(other);
                (SampleValue::Other((self.others.len() - 1) as u32), bytes)
            }
        };
        self.record_size_hint_bytes += 16 + value_bytes;
        self.samples.push(BatchSample {
            ts_ms,
            value,
            entry: slot as u32,
        });
        Ok(())
    }

    /// A plain histogram's value, its `bins` packed from `start` to the end of `packed`, and
    /// the bytes its WAL record takes at most.
    fn packed_sample(&self, start: usize, bins: usize) -> (SampleValue, usize) {
        let end = self.packed.len();
        let p = PackedBins {
            bins: bins as u32,
            start: start as u32,
            end: end as u32,
        };
        (SampleValue::Packed(p), 4 + end - start)
    }

    /// The key of entry `slot`, for messages.
    fn describe(&self, slot: usize) -> String {
        match self.key_ref(slot) {
            KeyRef::Text(text) => text.to_owned(),
            KeyRef::Id(id) => format!("series {}", id.0),
        }
    }

    fn key_ref(&self, slot: usize) -> KeyRef<'_> {
        match self.entries[slot].target {
            Target::Text { start, end } => {
                KeyRef::Text(&self.key_text[start as usize..end as usize])
            }
            Target::Id(id) => KeyRef::Id(id),
        }
    }

    /// Every entry's key and kind, in slot order (what the write path resolves).
    pub(crate) fn entry_keys(&self) -> impl ExactSizeIterator<Item = (KeyRef<'_>, Kind)> + '_ {
        (0..self.entries.len()).map(|slot| (self.key_ref(slot), self.entries[slot].kind))
    }

    pub(crate) fn batch_samples(&self) -> &[BatchSample] {
        &self.samples
    }

    /// Where the samples' values are.
    pub(crate) fn values(&self) -> BatchValues<'_> {
        BatchValues {
            packed: &self.packed,
            others: &self.others,
        }
    }

    /// Every sample in the order added, with the key it names (a histogram added as bins
    /// unpacked into a `Value`).
    pub fn samples(&self) -> impl Iterator<Item = (KeyRef<'_>, i64, Cow<'_, Value>)> + '_ {
        let values = self.values();
        self.samples
            .iter()
            .map(move |s| (self.key_ref(s.entry as usize), s.ts_ms, values.value(s)))
    }

    /// About the size of the batch's WAL record, in bytes.
    pub(crate) fn record_size_hint_bytes(&self) -> usize {
        self.record_size_hint_bytes
    }

    /// Whether any sample is a cumulative histogram.
    pub fn has_cumulative(&self) -> bool {
        self.has_cumulative
    }

    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Empties the batch, keeping its buffers for the next one.
    pub fn clear(&mut self) {
        self.key_text.clear();
        self.entries.clear();
        self.samples.clear();
        self.packed.clear();
        self.others.clear();
        self.has_cumulative = false;
        self.record_size_hint_bytes = 0;
        self.origin = None;
    }

    /// Names the batch's sender and sequence: a batch of an origin the store applied before is
    /// acknowledged again without being applied ([`crate::Written::Duplicate`]).
    pub fn set_origin(&mut self, origin: Option<Origin>) {
        self.origin = origin;
    }

    pub fn origin(&self) -> Option<&Origin> {
        self.origin.as_ref()
    }
}

/// About the bytes of a cumulative value's binary form.
fn cumulative_size_hint(c: &Cumulative) -> usize {
    match c {
        Cumulative::Bins(h) => 10 * h.bin_count(),
        Cumulative::Exponential(e) => 12 * (e.positive.len() + e.negative.len()),
        Cumulative::Bounded(b) => 18 * b.counts.len(),
    }
}

/// The per-sample bounds: batch size, text length, and that bins lent as a histogram are one
/// (keys valid and strictly ascending, counts above zero, one count per key).
fn check(sample_count: usize, packed_bytes: usize, value: &Incoming<'_>) -> Result<(), StoreError> {
    /// Most bytes `packed::pack` writes for one bin.
    const PACKED_BIN_BYTES_MAX: usize = 20;
    if sample_count >= BATCH_SAMPLES_MAX {
        return Err(StoreError::BatchTooLarge);
    }
    let bytes_max = match value {
        Incoming::Bins { keys, .. } => keys.len() * PACKED_BIN_BYTES_MAX,
        Incoming::Packed(bins) => bins.bytes().len(),
        Incoming::Value(Value::Histogram(h)) => h.bin_count() * PACKED_BIN_BYTES_MAX,
        Incoming::Value(_) => 0,
    };
    if packed_bytes + bytes_max > BATCH_PACKED_BYTES_MAX {
        return Err(StoreError::BatchTooLarge);
    }
    match value {
        Incoming::Value(Value::Text(text)) if text.len() > TEXT_BYTES_MAX => {
            Err(StoreError::TextTooLong {
                len_bytes: text.len(),
                max_bytes: TEXT_BYTES_MAX,
            })
        }
        Incoming::Bins { keys, counts } => check_bins(keys, counts),
        Incoming::Packed(_) | Incoming::Value(_) => Ok(()),
    }
}

/// The checks of lent bins that come before packing them; their keys and counts are checked
/// as they are packed (`packed::pack`, one pass instead of two).
fn check_bins(keys: &[u16], counts: &[u64]) -> Result<(), StoreError> {
    if keys.len() == counts.len() && keys.len() <= hist::BIN_COUNT_MAX {
        return Ok(());
    }
    bins_error(keys, counts)
}

/// Why bins do not fit, naming the first check they fail.
#[cold]
fn bins_error(keys: &[u16], counts: &[u64]) -> Result<(), StoreError> {
    let why = if keys.len() != counts.len() {
        Some("as many counts as keys")
    } else if keys.len() > hist::BIN_COUNT_MAX {
        Some("at most hist::BIN_COUNT_MAX bins")
    } else if !keys.windows(2).all(|w| w[0] < w[1]) {
        Some("strictly ascending keys")
    } else if !keys.iter().all(|&k| hist::key_is_valid(k)) {
        Some("valid bin keys")
    } else if counts.contains(&0) {
        Some("counts above zero")
    } else {
        None
    };
    match why {
        Some(expected) => Err(StoreError::InvalidBins { expected }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::key::Tag;

    fn key(host: &str) -> StreamKey {
        StreamKey::new("m", [Tag::new("host", host).unwrap()]).unwrap()
    }

    fn keys(batch: &WriteBatch) -> Vec<(String, i64)> {
        batch
            .samples()
            .map(|(k, ts, _)| match k {
                KeyRef::Text(t) => (t.to_owned(), ts),
                KeyRef::Id(id) => (format!("#{}", id.0), ts),
            })
            .collect()
    }

    proptest::proptest! {
        /// Lent bins are accepted exactly when they pass each check in turn (the keys before
        /// packing, the counts as they are packed), refused naming the first check they fail,
        /// and a refused sample leaves the batch as it was, by id or by key.
        #[test]
        fn bins_check_is_each_check_in_turn(
            keys in proptest::collection::vec(
                proptest::prop_oneof![0u16..300, 32_700u16..33_000, proptest::num::u16::ANY],
                0..40,
            ),
            counts in proptest::collection::vec(0u64..4, 0..40),
            sorted in proptest::bool::ANY,
            by_key in proptest::bool::ANY,
        ) {
            let mut keys = keys;
            if sorted {
                keys.sort_unstable();
            }
            let counts = &counts[..counts.len().min(keys.len() + usize::from(keys.len() % 3 == 0))];
            let model = match bins_error(&keys, counts) {
                Ok(()) => None,
                Err(StoreError::InvalidBins { expected }) => Some(expected),
                Err(other) => panic!("{other:?}"),
            };
            let fits = keys.len() == counts.len()
                && keys.windows(2).all(|w| w[0] < w[1])
                && keys.iter().all(|&k| hist::key_is_valid(k))
                && !counts.contains(&0);
            let mut batch = WriteBatch::new();
            // Key 129: decade 1, slot 1, a valid bin.
            batch.push_id_bins(SeriesId(1), 0, &[129], &[3]).unwrap();
            batch.push_canonical_bins("m|ST[a:b]", 0, &[129], &[3]).unwrap();
            let before = batch.clone();
            let got = match by_key {
                true => batch.push_canonical_bins("n|ST[c:d]", 1, &keys, counts),
                false => batch.push_id_bins(SeriesId(2), 1, &keys, counts),
            };
            match got {
                Ok(_) => {
                    proptest::prop_assert!(fits && model.is_none());
                    let last = batch.samples.last().unwrap();
                    let value = batch.values().value(last).into_owned();
                    let Value::Histogram(h) = value else {
                        panic!("{value:?}");
                    };
                    proptest::prop_assert_eq!(h.keys(), &keys[..]);
                    proptest::prop_assert_eq!(h.counts(), counts);
                }
                Err(StoreError::InvalidBins { expected }) => {
                    proptest::prop_assert!(!fits);
                    proptest::prop_assert_eq!(Some(expected), model);
                    proptest::prop_assert_eq!(&batch.key_text, &before.key_text);
                    proptest::prop_assert_eq!(&batch.packed, &before.packed);
                    proptest::prop_assert_eq!(batch.entries.len(), before.entries.len());
                    proptest::prop_assert_eq!(batch.samples.len(), before.samples.len());
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn consecutive_samples_of_a_key_share_an_entry_and_slots_skip_the_key() {
        let mut batch = WriteBatch::new();
        let a = batch.push_slot(&key("a"), 1, Value::Numeric(1.0)).unwrap();
        // A separately built equal key right after finds the same entry.
        assert_eq!(
            batch.push_slot(&key("a"), 2, Value::Numeric(3.0)).unwrap(),
            a
        );
        let b = batch.push_slot(&key("b"), 1, Value::Numeric(2.0)).unwrap();
        assert_ne!(a, b);
        batch.push_at(a, 5, Value::Numeric(4.0)).unwrap();
        let err = batch.push_at(a, 6, Value::Text("x".into())).unwrap_err();
        assert!(
            matches!(err, StoreError::KindMismatchInBatch { .. }),
            "{err:?}"
        );
        // The same key right after with another kind is refused and leaves no text behind.
        let err = batch
            .push(&key("b"), 7, Value::Text("x".into()))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::KindMismatchInBatch { .. }),
            "{err:?}"
        );
        let id = batch.push_id(SeriesId(7), 8, Value::Numeric(0.5)).unwrap();
        assert_eq!(
            batch.push_id(SeriesId(7), 9, Value::Numeric(0.5)).unwrap(),
            id
        );
        assert_eq!(batch.entry_keys().len(), 3);
        assert_eq!(batch.sample_count(), 6);
        assert_eq!(
            keys(&batch),
            vec![
                ("m|ST[host:a]".to_owned(), 1),
                ("m|ST[host:a]".to_owned(), 2),
                ("m|ST[host:b]".to_owned(), 1),
                ("m|ST[host:a]".to_owned(), 5),
                ("#7".to_owned(), 8),
                ("#7".to_owned(), 9),
            ]
        );
        assert_eq!(batch.key_text.len(), "m|ST[host:a]m|ST[host:b]".len());
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(
            batch.push_slot(&key("b"), 1, Value::Numeric(0.0)).unwrap(),
            0
        );
        assert_eq!(
            batch
                .push_canonical("m|ST[host:b]", 2, Value::Numeric(0.0))
                .unwrap(),
            0
        );
    }

    #[test]
    fn too_long_text_adds_no_series() {
        let mut batch = WriteBatch::new();
        let long = "x".repeat(TEXT_BYTES_MAX + 1);
        let err = batch.text(&key("a"), 1, &long).unwrap_err();
        assert!(matches!(err, StoreError::TextTooLong { .. }), "{err:?}");
        assert!(batch.is_empty() && batch.key_text.is_empty());
    }
}
