//! The Kafka record of one partition's share of a write (`FORMAT.md`, "Partition record"): the
//! sender identity, then runs of samples per canonical key, then a CRC32C of everything before.

use hist::convert::Cumulative;
use hist::Histogram;
use store::{Origin, SourceId, Value, WriteBatch};

const VERSION: u8 = 1;
/// Largest record the front produces: one write's share of one partition is one record, so
/// that it carries the write's identity once (the brokers' `message.max.bytes` must allow it;
/// `scripts/kafka-cluster` sets 16 MiB). A larger share is refused.
pub const RECORD_BYTES_MAX: usize = 8 << 20;
/// Samples one record may hold.
const RECORD_SAMPLES_MAX: u32 = 1 << 20;
/// Longest canonical key, in bytes (its length is a u16).
const KEY_BYTES_MAX: usize = u16::MAX as usize;

const TAG_NUMERIC: u8 = 1;
const TAG_TEXT: u8 = 2;
const TAG_HISTOGRAM: u8 = 3;
const TAG_CUMULATIVE: u8 = 4;

/// The partition of a stream: CRC32C of its canonical key text, modulo the partition count.
pub fn partition_of(key_text: &str, partitions: u32) -> u32 {
    assert!(partitions > 0);
    crc32c::crc32c(key_text.as_bytes()) % partitions
}

/// Why a record was not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub String);

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One record being written: its header is written first, its sample count patched at the end.
struct Building {
    bytes: Vec<u8>,
    samples: u32,
    /// Where the current run's sample count is, and its key.
    run_at: usize,
    run_key: String,
}

/// Splits one write into one record per partition it touches; the front then prepends the
/// write's identity to each ([`with_origin`]).
pub struct Splitter {
    partitions: u32,
    building: Vec<Option<Building>>,
}

impl Splitter {
    pub fn new(partitions: u32) -> Splitter {
        assert!(partitions > 0 && partitions <= crate::topology::PARTITIONS_MAX);
        Splitter {
            partitions,
            building: (0..partitions).map(|_| None).collect(),
        }
    }

    /// Adds one sample to its partition's record.
    pub fn add(&mut self, key: &str, ts_ms: i64, value: &Value) -> Result<(), RecordError> {
        if key.len() > KEY_BYTES_MAX {
            return Err(RecordError(format!(
                "key of {} bytes, at most {KEY_BYTES_MAX}",
                key.len()
            )));
        }
        let p = partition_of(key, self.partitions);
        let slot = &mut self.building[p as usize];
        let full = slot.as_ref().is_some_and(|b| {
            b.bytes.len() + key.len() + value_size_hint(value) > RECORD_BYTES_MAX
                || b.samples >= RECORD_SAMPLES_MAX
        });
        if full {
            return Err(RecordError(format!(
                "the write's share of partition {p} is over {RECORD_BYTES_MAX} bytes \
                 ({RECORD_SAMPLES_MAX} samples); send smaller requests"
            )));
        }
        let b = slot.get_or_insert_with(|| Building {
            bytes: vec![VERSION, 0, 0, 0, 0],
            samples: 0,
            run_at: 0,
            run_key: String::new(),
        });
        if b.run_at == 0 || b.run_key != key {
            b.bytes.extend_from_slice(&(key.len() as u16).to_le_bytes());
            b.bytes.extend_from_slice(key.as_bytes());
            b.run_at = b.bytes.len();
            b.bytes.extend_from_slice(&0u32.to_le_bytes());
            b.run_key.clear();
            b.run_key.push_str(key);
        }
        let run = u32::from_le_bytes(read4(&b.bytes, b.run_at)) + 1;
        b.bytes[b.run_at..b.run_at + 4].copy_from_slice(&run.to_le_bytes());
        b.bytes.extend_from_slice(&ts_ms.to_le_bytes());
        encode_value(&mut b.bytes, value);
        b.samples += 1;
        Ok(())
    }

    /// The finished records, `(partition, body without identity)`, in partition order; the
    /// identity is prepended by [`with_origin`].
    pub fn finish(self) -> Vec<(u32, Vec<u8>)> {
        let built = self.building.into_iter().enumerate();
        built
            .filter_map(|(p, slot)| slot.map(|b| (p as u32, finish(b))))
            .collect()
    }
}

fn read4(bytes: &[u8], at: usize) -> [u8; 4] {
    let mut out = [0u8; 4];
    out.copy_from_slice(&bytes[at..at + 4]);
    out
}

fn finish(mut b: Building) -> Vec<u8> {
    b.bytes[1..5].copy_from_slice(&b.samples.to_le_bytes());
    b.bytes
}

fn value_size_hint(value: &Value) -> usize {
    match value {
        Value::Numeric(_) => 9,
        Value::Text(t) => 5 + t.len(),
        Value::Histogram(h) => 5 + 10 * h.bin_count(),
        Value::CumulativeHistogram(_) => 4096,
    }
}

fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Numeric(v) => {
            out.push(TAG_NUMERIC);
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        Value::Text(t) => {
            out.push(TAG_TEXT);
            out.extend_from_slice(&(t.len() as u32).to_le_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        Value::Histogram(h) => {
            out.push(TAG_HISTOGRAM);
            h.encode_into(out);
        }
        Value::CumulativeHistogram(c) => {
            out.push(TAG_CUMULATIVE);
            c.encode_into(out);
        }
    }
}

/// The whole record: the identity, the body the splitter made, a CRC32C of both.
pub fn with_origin(origin: &Origin, body: &[u8]) -> Vec<u8> {
    let source = origin.source.as_str().as_bytes();
    let mut out = Vec::with_capacity(body.len() + source.len() + 32);
    out.push(source.len() as u8);
    out.extend_from_slice(source);
    out.extend_from_slice(&origin.epoch.to_le_bytes());
    out.extend_from_slice(&origin.seq.to_le_bytes());
    out.extend_from_slice(&origin.received_ms.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A reader over a record's bytes that fails with the offset it stopped at.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.at..end];
                self.at = end;
                Ok(out)
            }
            None => Err(RecordError(format!("record ends at byte {}", self.at))),
        }
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(read4(self.take(4)?, 0)))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self, n: usize) -> Result<&'a str, RecordError> {
        let at = self.at;
        std::str::from_utf8(self.take(n)?)
            .map_err(|_| RecordError(format!("text at byte {at} is not UTF-8")))
    }
}

/// A record back into the batch the storage node writes, with its origin set.
pub fn decode(bytes: &[u8]) -> Result<WriteBatch, RecordError> {
    if bytes.len() < 4 {
        return Err(RecordError("record shorter than its checksum".into()));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(read4(crc, 0)) {
        return Err(RecordError("record checksum does not match".into()));
    }
    let mut r = Reader { bytes: body, at: 0 };
    let source_len = usize::from(r.u8()?);
    let source = SourceId::new(r.str(source_len)?)
        .map_err(|e| RecordError(format!("record source: {e}")))?;
    let origin = Origin {
        source,
        epoch: r.u64()?,
        seq: r.u64()?,
        received_ms: r.u64()? as i64,
    };
    if r.u8()? != VERSION {
        return Err(RecordError("record version is not 1".into()));
    }
    let samples = r.u32()?;
    if samples > RECORD_SAMPLES_MAX {
        return Err(RecordError(format!(
            "{samples} samples, at most {RECORD_SAMPLES_MAX}"
        )));
    }
    let mut batch = WriteBatch::new();
    let mut read = 0u32;
    while read < samples {
        let key_len = usize::from(r.u16()?);
        let key = r.str(key_len)?;
        let run = r.u32()?;
        if run == 0 || run > samples - read {
            return Err(RecordError(format!(
                "run of {run} samples at byte {}",
                r.at
            )));
        }
        for _ in 0..run {
            let ts_ms = r.u64()? as i64;
            let value = decode_value(&mut r)?;
            batch
                .push_canonical(key, ts_ms, value)
                .map_err(|e| RecordError(format!("sample of `{key}`: {e}")))?;
        }
        read += run;
    }
    if r.at != body.len() {
        return Err(RecordError(format!(
            "{} bytes after the samples",
            body.len() - r.at
        )));
    }
    batch.set_origin(Some(origin));
    Ok(batch)
}

fn decode_value(r: &mut Reader<'_>) -> Result<Value, RecordError> {
    let at = r.at;
    match r.u8()? {
        TAG_NUMERIC => Ok(Value::Numeric(f64::from_bits(r.u64()?))),
        TAG_TEXT => {
            let len = r.u32()? as usize;
            Ok(Value::Text(r.str(len)?.to_owned()))
        }
        TAG_HISTOGRAM => {
            let (h, used) = Histogram::decode_prefix(&r.bytes[r.at..])
                .map_err(|e| RecordError(format!("histogram at byte {at}: {e}")))?;
            r.at += used;
            Ok(Value::Histogram(h))
        }
        TAG_CUMULATIVE => {
            let (c, used) = Cumulative::decode_prefix(&r.bytes[r.at..]).map_err(|_| {
                RecordError(format!("cumulative histogram at byte {at} is damaged"))
            })?;
            r.at += used;
            Ok(Value::CumulativeHistogram(c))
        }
        tag => Err(RecordError(format!("value tag {tag} at byte {at}"))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_split_write_decodes_to_the_same_samples() {
        let mut s = Splitter::new(4);
        let mut h = Histogram::new();
        h.insert_n(0.1, 2);
        h.insert(2.5);
        for i in 0..5 {
            let key = |kind: &str| format!("{kind}|ST[x:{i}]");
            s.add(&key("n"), 1000 + i, &Value::Numeric(i as f64))
                .unwrap();
            s.add(&key("n"), 1001 + i, &Value::Numeric(i as f64))
                .unwrap();
            s.add(&key("h"), 2000, &Value::Histogram(h.clone()))
                .unwrap();
            s.add(&key("t"), 3000, &Value::Text("up".into())).unwrap();
        }
        let origin = Origin {
            source: SourceId::new("front-a1").unwrap(),
            epoch: 3,
            seq: 9,
            received_ms: 77,
        };
        let mut seen = 0;
        for (p, body) in s.finish() {
            let record = with_origin(&origin, &body);
            let batch = decode(&record).unwrap();
            assert_eq!(batch.origin(), Some(&origin));
            for (key, _, value) in batch.samples() {
                let store::KeyRef::Text(key) = key else {
                    panic!()
                };
                assert_eq!(partition_of(key, 4), p);
                if let Value::Histogram(got) = &*value {
                    assert_eq!(got, &h);
                }
                seen += 1;
            }
            let mut bad = record.clone();
            bad[3] ^= 1;
            assert!(decode(&bad).unwrap_err().0.contains("checksum"));
        }
        assert_eq!(seen, 20);
    }
}
