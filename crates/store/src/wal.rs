//! The WAL record: one write batch, with series already resolved to ids, as one journal record.
//! `FORMAT.md` ("WAL record") describes every byte; the journal adds the CRC and framing.

use hist::convert::Cumulative;
#[cfg(test)]
use hist::Histogram;

use crate::batch::{
    tag_of, BatchSample, BatchValues, SampleValue, Value, BATCH_SAMPLES_MAX, TAG_CUMULATIVE,
    TAG_HISTOGRAM, TAG_NUMERIC, TAG_TEXT, TEXT_BYTES_MAX,
};
use crate::series::SeriesId;
use crate::sources::{Origin, SourceId};

/// Marks a batch entry left out of the write (its key has another kind): never a real id, as
/// ids stay below `index::SERIES_MAX`.
pub(crate) const REJECTED: SeriesId = SeriesId(u32::MAX);

/// WAL record format version, the only one written or read: the origin header, then histograms
/// as packed bins (`hist::packed`: bin count, then ≈ 2 bytes per bin).
pub const WAL_VERSION: u8 = 3;
/// Header flag: the record names its sender (`Origin`).
const FLAG_ORIGIN: u8 = 1;

/// The samples of one series with one value tag, in submission order.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub id: SeriesId,
    pub samples: Vec<(i64, Value)>,
}

/// One decoded record: who sent it (if it said) and its groups.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub origin: Option<Origin>,
    pub groups: Vec<Group>,
}

/// Why a WAL record could not be decoded (`offset` is the byte position in the record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalDecodeError {
    pub offset: usize,
    pub what: &'static str,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The record header: version, flags, and the origin when there is one.
fn encode_header(origin: Option<&Origin>, out: &mut Vec<u8>) {
    out.push(WAL_VERSION);
    match origin {
        None => out.push(0),
        Some(o) => {
            out.push(FLAG_ORIGIN);
            let id = o.source.as_str().as_bytes();
            out.push(id.len() as u8);
            out.extend_from_slice(id);
            put_varint(out, o.epoch);
            put_varint(out, o.seq);
            put_varint(out, zigzag(o.received_ms));
        }
    }
}

/// Encodes a record into `out`. Every sample of a group must carry the same value tag; a
/// series whose batch mixes plain and cumulative histograms is split into two groups by the
/// caller.
pub fn encode(record: &Record, out: &mut Vec<u8>) {
    let groups = &record.groups;
    encode_header(record.origin.as_ref(), out);
    put_varint(out, groups.len() as u64);
    for group in groups {
        encode_group(group.id, &group.samples, out);
    }
}

/// Encodes a batch's samples, in the order they were added, into exactly the bytes [`encode`]
/// gives for [`batch_groups`] — without building those groups, which would copy every value.
/// `ids` holds the series id of each batch entry. Appends to `out` (the journal's buffer).
pub(crate) fn encode_batch(
    origin: Option<&Origin>,
    samples: &[BatchSample],
    values: BatchValues<'_>,
    ids: &[SeriesId],
    out: &mut Vec<u8>,
) {
    let record_at = out.len();
    encode_header(origin, out);
    put_varint(out, batch_runs(samples, values, ids).count() as u64);
    for run in batch_runs(samples, values, ids) {
        let id = ids[run[0].entry as usize];
        let tag = values.tag(&run[0]);
        out.extend_from_slice(&id.0.to_le_bytes());
        out.push(tag);
        put_varint(out, run.len() as u64);
        let mut prev_ts_ms = 0i64;
        for s in run {
            debug_assert_eq!(values.tag(s), tag);
            put_varint(out, zigzag(s.ts_ms.wrapping_sub(prev_ts_ms)));
            prev_ts_ms = s.ts_ms;
            match s.value {
                SampleValue::Numeric(v) => encode_value(&Value::Numeric(v), out),
                SampleValue::Packed(p) => {
                    // Bins the batch packed when they were added: copied, not packed again.
                    put_varint(out, u64::from(p.bins));
                    out.extend_from_slice(values.bins(p));
                }
                SampleValue::Other(i) => encode_value(&values.others[i as usize], out),
            }
        }
    }
    assert!(
        out.len() - record_at <= u32::MAX as usize,
        "a WAL record is bounded"
    );
}

fn same_run(values: BatchValues<'_>, a: &BatchSample, b: &BatchSample) -> bool {
    a.entry == b.entry && values.tag(a) == values.tag(b)
}

/// The batch as WAL groups: maximal runs of samples of one entry with one value tag, in order.
pub(crate) fn batch_groups(
    samples: &[BatchSample],
    values: BatchValues<'_>,
    ids: &[SeriesId],
) -> Vec<Group> {
    batch_runs(samples, values, ids)
        .map(|run| Group {
            id: ids[run[0].entry as usize],
            samples: run
                .iter()
                .map(|s| (s.ts_ms, values.value(s).into_owned()))
                .collect(),
        })
        .collect()
}

/// Runs of samples of one entry with one value tag, without those of `REJECTED` entries.
fn batch_runs<'a>(
    samples: &'a [BatchSample],
    values: BatchValues<'a>,
    ids: &'a [SeriesId],
) -> impl Iterator<Item = &'a [BatchSample]> + 'a {
    samples
        .chunk_by(move |a, b| same_run(values, a, b))
        .filter(|run| ids[run[0].entry as usize] != REJECTED)
}

fn encode_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Numeric(v) => out.extend_from_slice(&v.to_bits().to_le_bytes()),
        Value::Text(t) => {
            put_varint(out, t.len() as u64);
            out.extend_from_slice(t.as_bytes());
        }
        Value::Histogram(h) => {
            put_varint(out, h.bin_count() as u64);
            hist::packed::pack_histogram(h, out);
        }
        Value::CumulativeHistogram(c) => c.encode_into(out),
    }
}

fn encode_group(id: SeriesId, samples: &[(i64, Value)], out: &mut Vec<u8>) {
    assert!(!samples.is_empty(), "empty WAL group");
    let tag = tag_of(&samples[0].1);
    out.extend_from_slice(&id.0.to_le_bytes());
    out.push(tag);
    put_varint(out, samples.len() as u64);
    let mut prev_ts_ms = 0i64;
    for (ts_ms, value) in samples {
        assert_eq!(tag_of(value), tag, "mixed value tags in a WAL group");
        put_varint(out, zigzag(ts_ms.wrapping_sub(prev_ts_ms)));
        prev_ts_ms = *ts_ms;
        encode_value(value, out);
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn fail(&self, what: &'static str) -> WalDecodeError {
        WalDecodeError {
            offset: self.pos,
            what,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], WalDecodeError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.fail(what))?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| self.fail(what))?;
        self.pos = end;
        Ok(slice)
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, WalDecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, WalDecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte(what)?;
            if i == 9 && b > 1 {
                return Err(self.fail(what));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.fail(what))
    }

    fn count(&mut self, max: usize, what: &'static str) -> Result<usize, WalDecodeError> {
        let v = self.varint(what)?;
        // Bounded by the constant and by the bytes left (every item takes at least one byte),
        // so a damaged count cannot make the decoder allocate more than the record's size.
        let left = (self.bytes.len() - self.pos) as u64;
        if v > max as u64 || v > left {
            return Err(self.fail(what));
        }
        Ok(v as usize)
    }
}

fn decode_origin(c: &mut Cursor<'_>) -> Result<Option<Origin>, WalDecodeError> {
    let flags = c.byte("flags")?;
    if flags & !FLAG_ORIGIN != 0 {
        return Err(c.fail("unknown flags"));
    }
    if flags & FLAG_ORIGIN == 0 {
        return Ok(None);
    }
    let len = c.byte("source id length")? as usize;
    let id = c.take(len, "source id")?;
    let source = std::str::from_utf8(id)
        .ok()
        .and_then(|text| SourceId::new(text).ok())
        .ok_or_else(|| c.fail("source id"))?;
    Ok(Some(Origin {
        source,
        epoch: c.varint("epoch")?,
        seq: c.varint("sequence")?,
        received_ms: unzigzag(c.varint("receipt time")?),
    }))
}

/// Decodes one record. Never panics on arbitrary bytes.
pub fn decode(bytes: &[u8]) -> Result<Record, WalDecodeError> {
    let mut c = Cursor { bytes, pos: 0 };
    let version = c.byte("version")?;
    if version != WAL_VERSION {
        return Err(WalDecodeError {
            offset: 0,
            what: "unknown version",
        });
    }
    let origin = decode_origin(&mut c)?;
    let group_count = c.count(BATCH_SAMPLES_MAX, "group count")?;
    let mut groups = Vec::with_capacity(group_count);
    for _ in 0..group_count {
        let id_bytes = c.take(4, "series id")?;
        let id = SeriesId(u32::from_le_bytes([
            id_bytes[0],
            id_bytes[1],
            id_bytes[2],
            id_bytes[3],
        ]));
        let tag = c.byte("value tag")?;
        if !(TAG_NUMERIC..=TAG_CUMULATIVE).contains(&tag) {
            return Err(c.fail("value tag"));
        }
        let sample_count = c.count(BATCH_SAMPLES_MAX, "sample count")?;
        if sample_count == 0 {
            return Err(c.fail("sample count"));
        }
        let mut samples = Vec::with_capacity(sample_count);
        let mut prev_ts_ms = 0i64;
        for _ in 0..sample_count {
            let ts_ms = prev_ts_ms.wrapping_add(unzigzag(c.varint("timestamp")?));
            prev_ts_ms = ts_ms;
            samples.push((ts_ms, decode_value(&mut c, tag)?));
        }
        groups.push(Group { id, samples });
    }
    if c.pos != bytes.len() {
        return Err(c.fail("trailing bytes"));
    }
    Ok(Record { origin, groups })
}

fn decode_value(c: &mut Cursor<'_>, tag: u8) -> Result<Value, WalDecodeError> {
    match tag {
        TAG_NUMERIC => {
            let b = c.take(8, "numeric value")?;
            let mut raw = [0u8; 8];
            raw.copy_from_slice(b);
            Ok(Value::Numeric(f64::from_bits(u64::from_le_bytes(raw))))
        }
        TAG_TEXT => {
            let len = c.count(TEXT_BYTES_MAX, "text length")?;
            let at = c.pos;
            let b = c.take(len, "text")?;
            let text = std::str::from_utf8(b).map_err(|_| WalDecodeError {
                offset: at,
                what: "text is not UTF-8",
            })?;
            Ok(Value::Text(text.to_owned()))
        }
        TAG_HISTOGRAM => {
            let bins = c.count(hist::BIN_COUNT_MAX, "histogram bin count")?;
            let rest = c.bytes.get(c.pos..).unwrap_or_default();
            let (h, used) =
                hist::packed::unpack_prefix(rest, bins).map_err(|e| WalDecodeError {
                    offset: c.pos + e.offset,
                    what: e.what,
                })?;
            c.pos += used;
            Ok(Value::Histogram(h))
        }
        _ => {
            let rest = c.bytes.get(c.pos..).unwrap_or_default();
            let (value, used) = Cumulative::decode_prefix(rest).map_err(|e| WalDecodeError {
                offset: c.pos + e.offset,
                what: e.what,
            })?;
            c.pos += used;
            Ok(Value::CumulativeHistogram(value))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn sample_groups() -> Vec<Group> {
        let mut h = Histogram::new();
        h.insert(1.5);
        h.insert_n(300.0, 7);
        vec![
            Group {
                id: SeriesId(3),
                samples: vec![
                    (1_000, Value::Numeric(f64::NAN)),
                    (-5, Value::Numeric(-0.0)),
                    (i64::MAX, Value::Numeric(f64::INFINITY)),
                    (i64::MIN, Value::Numeric(2.5)),
                ],
            },
            Group {
                id: SeriesId(u32::MAX),
                samples: vec![
                    (7, Value::Text("héllo".into())),
                    (8, Value::Text(String::new())),
                ],
            },
            Group {
                id: SeriesId(0),
                samples: vec![(60_000, Value::Histogram(h.clone()))],
            },
            Group {
                id: SeriesId(0),
                samples: vec![(60_001, Value::CumulativeHistogram(Cumulative::Bins(h)))],
            },
        ]
    }

    fn bits_equal(a: &[Group], b: &[Group]) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    fn record(groups: Vec<Group>, origin: Option<Origin>) -> Record {
        Record { origin, groups }
    }

    fn an_origin() -> Origin {
        Origin {
            source: SourceId::new("broker-7").unwrap(),
            epoch: 3,
            seq: 1 << 40,
            received_ms: -12,
        }
    }

    #[test]
    fn round_trip() {
        for origin in [None, Some(an_origin())] {
            let r = record(sample_groups(), origin);
            let mut out = Vec::new();
            encode(&r, &mut out);
            let back = decode(&out).unwrap();
            assert_eq!(back.origin, r.origin);
            assert!(bits_equal(&r.groups, &back.groups));
            if let Value::Numeric(v) = back.groups[0].samples[1].1 {
                assert_eq!(v.to_bits(), (-0.0f64).to_bits());
            }
        }
        // A packed histogram that claims more bins than it holds is named.
        let mut h = Histogram::new();
        h.insert(1.5);
        h.insert_n(300.0, 7);
        let mut short = vec![WAL_VERSION, 0, 1, 9, 0, 0, 0, TAG_HISTOGRAM, 1, 0, 3];
        hist::packed::pack_histogram(&h, &mut short);
        let err = decode(&short).unwrap_err();
        assert_eq!(err.what, "fewer bins than their count");
        // Unknown versions and flags are refused.
        let mut out = Vec::new();
        encode(&record(sample_groups(), None), &mut out);
        out[0] = 2;
        assert_eq!(decode(&out).unwrap_err().what, "unknown version");
        out[0] = WAL_VERSION;
        out[1] = 2;
        assert_eq!(decode(&out).unwrap_err().what, "unknown flags");
    }

    #[test]
    fn batches_encode_as_their_runs_of_one_entry_and_tag() {
        // Groups 2 and 3 are one series, a plain then a cumulative histogram: two runs.
        let mut groups = sample_groups();
        // u32::MAX marks a rejected entry in a batch; the largest real id is below it.
        groups[1].id = SeriesId(u32::MAX - 2);
        // As a batch holds them: numbers inline, plain histograms packed, the rest aside.
        let (mut samples, mut ids, mut packed, mut others) = (vec![], vec![], vec![], vec![]);
        for (entry, g) in groups.iter().enumerate() {
            ids.push(g.id);
            for (ts_ms, value) in &g.samples {
                let value = match value {
                    Value::Numeric(v) => SampleValue::Numeric(*v),
                    Value::Histogram(h) => {
                        let start = packed.len() as u32;
                        hist::packed::pack_histogram(h, &mut packed);
                        SampleValue::Packed(crate::batch::PackedBins {
                            bins: h.bin_count() as u32,
                            start,
                            end: packed.len() as u32,
                        })
                    }
                    other => {
                        others.push(other.clone());
                        SampleValue::Other(others.len() as u32 - 1)
                    }
                };
                samples.push(BatchSample {
                    entry: entry as u32,
                    ts_ms: *ts_ms,
                    value,
                });
            }
        }
        let values = BatchValues {
            packed: &packed,
            others: &others,
        };
        for kind in [TAG_NUMERIC, TAG_HISTOGRAM, TAG_CUMULATIVE] {
            assert!(
                samples.iter().any(|s| values.tag(s) == kind),
                "a sample of tag {kind}"
            );
        }
        // Entries 2 and 3 as one entry: the value tag alone splits them.
        for s in &mut samples {
            if s.entry == 3 {
                s.entry = 2;
            }
        }
        let origin = an_origin();
        let mut from_batch = Vec::new();
        encode_batch(Some(&origin), &samples, values, &ids, &mut from_batch);
        let mut from_groups = Vec::new();
        encode(&record(groups.clone(), Some(origin)), &mut from_groups);
        assert_eq!(from_batch, from_groups);
        assert!(bits_equal(&decode(&from_batch).unwrap().groups, &groups));
        assert!(bits_equal(&batch_groups(&samples, values, &ids), &groups));
        // A rejected entry's samples are left out of the record.
        ids[0] = REJECTED;
        let mut without = Vec::new();
        encode_batch(None, &samples, values, &ids, &mut without);
        assert!(bits_equal(&decode(&without).unwrap().groups, &groups[1..]));
        // Appended after what the buffer held.
        let mut after = vec![7u8; 3];
        encode_batch(None, &samples, values, &ids, &mut after);
        assert_eq!(after[..3], [7, 7, 7]);
        assert_eq!(after[3..], without[..]);
    }

    #[test]
    fn every_truncation_and_flip_is_an_error_or_decodes() {
        let mut out = Vec::new();
        encode(&record(sample_groups(), Some(an_origin())), &mut out);
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err(), "cut {cut}");
        }
        for i in 0..out.len() {
            for bit in 0..8 {
                let mut damaged = out.clone();
                damaged[i] ^= 1 << bit;
                let _ = decode(&damaged);
            }
        }
    }
}
