//! The journal record: one batch of samples, each with its own timestamp (`FORMAT.md`,
//! "Record"). Written by the broker for every run batch and push body, read by the core before
//! it writes the samples into its store. The decoder never panics and never allocates beyond a
//! small multiple of its input: every length is checked against the bytes left first.

use std::fmt;

use hist::convert::Cumulative;
use hist::Histogram;

/// First bytes of every record, and its version.
pub const MAGIC: [u8; 4] = *b"SBR1";
/// Longest metric name, tag category or value, and text value (ingest's bounds).
pub const NAME_BYTES_MAX: usize = ingest::NAME_BYTES_MAX;
pub const TAG_BYTES_MAX: usize = ingest::TAG_BYTES_MAX;
pub const TAGS_PER_SAMPLE_MAX: usize = ingest::TAGS_PER_SAMPLE_MAX;
pub const TEXT_BYTES_MAX: usize = 1 << 20;
/// Samples one record may hold (ingest's bound per body).
pub const SAMPLES_MAX: usize = ingest::SAMPLES_PER_BATCH_MAX;

/// Where a record's samples came from (health counts by it; nothing else depends on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Origin {
    Checks = 1,
    Httptrap = 2,
    Statsd = 3,
    RemoteWrite = 4,
    Otlp = 5,
    Collectd = 6,
    Health = 7,
}

impl Origin {
    fn from_byte(b: u8) -> Option<Origin> {
        Some(match b {
            1 => Origin::Checks,
            2 => Origin::Httptrap,
            3 => Origin::Statsd,
            4 => Origin::RemoteWrite,
            5 => Origin::Otlp,
            6 => Origin::Collectd,
            7 => Origin::Health,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Origin::Checks => "checks",
            Origin::Httptrap => "httptrap",
            Origin::Statsd => "statsd",
            Origin::RemoteWrite => "remote_write",
            Origin::Otlp => "otlp",
            Origin::Collectd => "collectd",
            Origin::Health => "health",
        }
    }
}

/// How a numeric sample combines with others of its stream and timestamp in the same record
/// (`ingest::Mode`; the core combines as `strata serve` does within one body).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Accumulate,
    Average,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Numeric(f64),
    Text(String),
    Histogram(Histogram),
    Cumulative(Cumulative),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub tags: Vec<(String, String)>,
    pub ts_ms: i64,
    pub value: Value,
    pub mode: Mode,
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub origin: Origin,
    /// When the broker made it (wall clock, ms): the core's lag is measured from it.
    pub made_ms: i64,
    pub samples: Vec<Sample>,
}

/// Why a record cannot be read: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub what: &'static str,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "broker record: {} at byte {}", self.what, self.offset)
    }
}

impl std::error::Error for DecodeError {}

const KIND_NULL: u8 = 0;
const KIND_NUMERIC: u8 = 1;
const KIND_TEXT: u8 = 2;
const KIND_HISTOGRAM: u8 = 3;
const KIND_CUMULATIVE: u8 = 4;
const MODE_SHIFT: u8 = 4;
/// A tag count of this means "the previous sample's tags" (runs repeat a check's tags).
const TAGS_SAME: u64 = 0;

/// Builds one record's bytes sample by sample, so a caller never holds the samples twice.
pub struct Encoder {
    out: Vec<u8>,
    count: usize,
    count_at: usize,
    last_tags: Option<Vec<(String, String)>>,
}

impl Encoder {
    pub fn new(origin: Origin, made_ms: i64) -> Encoder {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&MAGIC);
        out.push(origin as u8);
        out.extend_from_slice(&made_ms.to_le_bytes());
        let count_at = out.len();
        // The sample count, patched by `finish` (fixed width so it can be).
        out.extend_from_slice(&[0; 4]);
        Encoder {
            out,
            count: 0,
            count_at,
            last_tags: None,
        }
    }

    pub fn len(&self) -> usize {
        self.out.len()
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends one sample lent in parts (the name, its tags, time, value).
    pub fn push(
        &mut self,
        name: &str,
        tags: &[(String, String)],
        ts_ms: i64,
        value: &Value,
        mode: Mode,
    ) {
        put_bytes(&mut self.out, name.as_bytes());
        if self.last_tags.as_deref() == Some(tags) {
            put_varint(&mut self.out, TAGS_SAME);
        } else {
            put_varint(&mut self.out, tags.len() as u64 + 1);
            for (c, v) in tags {
                put_bytes(&mut self.out, c.as_bytes());
                put_bytes(&mut self.out, v.as_bytes());
            }
            self.last_tags = Some(tags.to_vec());
        }
        put_varint(&mut self.out, zigzag(ts_ms));
        let mode_bits = match mode {
            Mode::Set => 0,
            Mode::Accumulate => 1,
            Mode::Average => 2,
        } << MODE_SHIFT;
        match value {
            Value::Null => self.out.push(KIND_NULL | mode_bits),
            Value::Numeric(v) => {
                self.out.push(KIND_NUMERIC | mode_bits);
                self.out.extend_from_slice(&v.to_le_bytes());
            }
            Value::Text(t) => {
                self.out.push(KIND_TEXT | mode_bits);
                put_bytes(&mut self.out, t.as_bytes());
            }
            Value::Histogram(h) => {
                self.out.push(KIND_HISTOGRAM | mode_bits);
                h.encode_into(&mut self.out);
            }
            Value::Cumulative(c) => {
                self.out.push(KIND_CUMULATIVE | mode_bits);
                c.encode_into(&mut self.out);
            }
        }
        self.count += 1;
    }

    pub fn push_sample(&mut self, s: &Sample) {
        self.push(&s.name, &s.tags, s.ts_ms, &s.value, s.mode);
    }

    /// The record's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        let n = u32::try_from(self.count).unwrap_or(u32::MAX);
        self.out[self.count_at..self.count_at + 4].copy_from_slice(&n.to_le_bytes());
        self.out
    }
}

/// Encodes whole samples as one record.
pub fn encode(origin: Origin, made_ms: i64, samples: &[Sample]) -> Vec<u8> {
    let mut e = Encoder::new(origin, made_ms);
    for s in samples {
        e.push_sample(s);
    }
    e.finish()
}

/// First bytes of a relayed record: a batch an agent in reverse mode delivered to this broker,
/// kept as it came (`FORMAT.md`, "Relayed record").
pub const RELAY_MAGIC: [u8; 4] = *b"SBRR";
/// Longest relayed body: the broker's push bound.
pub const RELAY_BODY_BYTES_MAX: usize = BODY_BYTES_MAX;
/// Longest body a broker takes from a sender (a push or an agent's batch), after gzip.
pub const BODY_BYTES_MAX: usize = 16 << 20;

/// A batch relayed for a sender that delivered it to this broker with its own exactly-once
/// origin: forwarded to the core as it came, under that origin (source prefixed with the
/// broker's id), so the core applies it once however often the sender and the broker resend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relay {
    /// The sender's id (its `Strata-Source` and httptrap check name).
    pub sender: String,
    pub epoch: u64,
    pub sequence: u64,
    /// When the sender made the batch (ms since the epoch).
    pub made_ms: i64,
    /// Whether the body holds running totals (the core differences them in arrival order).
    pub totals: bool,
    /// An httptrap flatbuffer metric list.
    pub body: Vec<u8>,
}

impl Relay {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 64);
        out.extend_from_slice(&RELAY_MAGIC);
        put_bytes(&mut out, self.sender.as_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.sequence.to_le_bytes());
        out.extend_from_slice(&self.made_ms.to_le_bytes());
        out.push(u8::from(self.totals));
        put_bytes(&mut out, &self.body);
        out
    }

    /// `None` when `bytes` is not a relayed record at all (another kind of record).
    pub fn decode(bytes: &[u8]) -> Option<Result<Relay, DecodeError>> {
        if bytes.get(..4) != Some(&RELAY_MAGIC[..]) {
            return None;
        }
        let mut r = Cursor { bytes, pos: 4 };
        Some(Relay::fields(&mut r))
    }

    fn fields(r: &mut Cursor<'_>) -> Result<Relay, DecodeError> {
        let sender = r.text(store::SOURCE_ID_BYTES_MAX, "relayed sender")?;
        if sender.is_empty() {
            return Err(r.error("empty relayed sender"));
        }
        let epoch = u64::from_le_bytes(r.array("relayed epoch")?);
        let sequence = u64::from_le_bytes(r.array("relayed sequence")?);
        let made_ms = i64::from_le_bytes(r.array("relayed time made")?);
        let totals = match r.byte("relayed flags")? {
            0 => false,
            1 => true,
            _ => return Err(r.error("unknown relayed flags")),
        };
        let n = r.varint("relayed body length")?;
        if n > RELAY_BODY_BYTES_MAX as u64 {
            return Err(r.error("relayed body longer than the push bound"));
        }
        let body = r.take(n as usize, "relayed body")?.to_vec();
        if r.left() != 0 {
            return Err(r.error("bytes after the relayed body"));
        }
        Ok(Relay {
            sender,
            epoch,
            sequence,
            made_ms,
            totals,
            body,
        })
    }
}

/// Reads a record's header only: origin and time made.
pub fn peek(bytes: &[u8]) -> Result<(Origin, i64), DecodeError> {
    let mut r = Cursor { bytes, pos: 0 };
    header(&mut r)
}

fn header(r: &mut Cursor<'_>) -> Result<(Origin, i64), DecodeError> {
    if r.take(4, "record magic")? != MAGIC {
        return Err(r.error("not a broker record (magic)"));
    }
    let origin = Origin::from_byte(r.byte("origin")?).ok_or(r.error("unknown origin"))?;
    let made_ms = i64::from_le_bytes(r.array("time made")?);
    Ok((origin, made_ms))
}

/// Reads a whole record.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Cursor { bytes, pos: 0 };
    let (origin, made_ms) = header(&mut r)?;
    let count = u32::from_le_bytes(r.array("sample count")?) as usize;
    // Every sample takes at least 4 bytes (name length, tag count, time, kind).
    if count > SAMPLES_MAX || count > r.left() / 4 {
        return Err(r.error("sample count larger than the record"));
    }
    let mut samples = Vec::with_capacity(count);
    let mut last_tags: Vec<(String, String)> = Vec::new();
    for _ in 0..count {
        samples.push(sample(&mut r, &mut last_tags)?);
    }
    if r.left() != 0 {
        return Err(r.error("bytes after the last sample"));
    }
    Ok(Record {
        origin,
        made_ms,
        samples,
    })
}

fn sample(
    r: &mut Cursor<'_>,
    last_tags: &mut Vec<(String, String)>,
) -> Result<Sample, DecodeError> {
    let name = r.text(NAME_BYTES_MAX, "name")?;
    if name.is_empty() {
        return Err(r.error("empty name"));
    }
    let tag_count = r.varint("tag count")?;
    if tag_count != TAGS_SAME {
        let n = (tag_count - 1) as usize;
        if n > TAGS_PER_SAMPLE_MAX {
            return Err(r.error("too many tags"));
        }
        last_tags.clear();
        for _ in 0..n {
            let c = r.text(TAG_BYTES_MAX, "tag category")?;
            let v = r.text(TAG_BYTES_MAX, "tag value")?;
            last_tags.push((c, v));
        }
    }
    let ts_ms = unzigzag(r.varint("timestamp")?);
    let kind = r.byte("value kind")?;
    let mode = match kind >> MODE_SHIFT {
        0 => Mode::Set,
        1 => Mode::Accumulate,
        2 => Mode::Average,
        _ => return Err(r.error("unknown mode")),
    };
    let value = match kind & 0x0f {
        KIND_NULL => Value::Null,
        KIND_NUMERIC => Value::Numeric(f64::from_le_bytes(r.array("numeric value")?)),
        KIND_TEXT => Value::Text(r.text(TEXT_BYTES_MAX, "text value")?),
        KIND_HISTOGRAM => {
            let (h, used) =
                Histogram::decode_prefix(r.rest()).map_err(|_| r.error("histogram value"))?;
            r.pos += used;
            Value::Histogram(h)
        }
        KIND_CUMULATIVE => {
            let (c, used) = Cumulative::decode_prefix(r.rest()).map_err(|e| DecodeError {
                offset: r.pos + e.offset,
                what: e.what,
            })?;
            r.pos += used;
            Value::Cumulative(c)
        }
        _ => return Err(r.error("unknown value kind")),
    };
    Ok(Sample {
        name,
        tags: last_tags.clone(),
        ts_ms,
        value,
        mode,
    })
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn error(&self, what: &'static str) -> DecodeError {
        DecodeError {
            offset: self.pos,
            what,
        }
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.left() {
            return Err(self.error(what));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte(what)?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.error(what))
    }

    fn text(&mut self, max: usize, what: &'static str) -> Result<String, DecodeError> {
        let n = self.varint(what)?;
        if n > max as u64 {
            return Err(self.error(what));
        }
        let b = self.take(n as usize, what)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| self.error("text that is not UTF-8"))
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// From a parsed push sample (`None` timestamps become `now_ms`).
pub fn from_ingest(s: &ingest::Sample, now_ms: i64) -> Sample {
    Sample {
        name: s.name.clone(),
        tags: s.tags.to_vec(),
        ts_ms: s.ts_ms.unwrap_or(now_ms),
        value: match &s.value {
            ingest::Value::Null => Value::Null,
            ingest::Value::Numeric(v) => Value::Numeric(*v),
            ingest::Value::Text(t) => Value::Text(t.clone()),
            ingest::Value::Histogram(h) => Value::Histogram(h.clone()),
            ingest::Value::CumulativeHistogram(h) => Value::Cumulative(Cumulative::Bins(h.clone())),
            ingest::Value::Cumulative(c) => Value::Cumulative(c.clone()),
        },
        mode: match s.mode {
            ingest::Mode::Set => Mode::Set,
            ingest::Mode::Accumulate => Mode::Accumulate,
            ingest::Mode::Average => Mode::Average,
        },
    }
}

/// From a check's measurement, stamped with its run's scheduled time.
pub fn from_measurement(m: &checks::Measurement, ts_ms: i64) -> Sample {
    Sample {
        name: m.name.clone(),
        tags: m.tags.clone(),
        ts_ms,
        value: match &m.value {
            checks::Value::Numeric(v) => Value::Numeric(*v),
            checks::Value::Text(t) => Value::Text(t.clone()),
            checks::Value::Histogram(h) => Value::Histogram(h.clone()),
            checks::Value::Cumulative(c) => Value::Cumulative(c.clone()),
        },
        mode: Mode::Set,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Sample> {
        let mut h = Histogram::new();
        h.insert(0.0012);
        h.insert(3.5);
        let tags = vec![("check".to_owned(), "web".to_owned())];
        vec![
            Sample {
                name: "total_time".into(),
                tags: tags.clone(),
                ts_ms: 1_795_305_600_000,
                value: Value::Histogram(h.clone()),
                mode: Mode::Set,
            },
            Sample {
                name: "status".into(),
                tags: tags.clone(),
                ts_ms: 1_795_305_600_000,
                value: Value::Text("ok".into()),
                mode: Mode::Set,
            },
            Sample {
                name: "c".into(),
                tags: vec![],
                ts_ms: -5,
                value: Value::Numeric(2.5),
                mode: Mode::Accumulate,
            },
            Sample {
                name: "n".into(),
                tags,
                ts_ms: 7,
                value: Value::Null,
                mode: Mode::Average,
            },
            Sample {
                name: "cum".into(),
                tags: vec![("a".into(), "b".into())],
                ts_ms: 8,
                value: Value::Cumulative(Cumulative::Bins(h)),
                mode: Mode::Set,
            },
        ]
    }

    #[test]
    fn round_trip() {
        let s = samples();
        let bytes = encode(Origin::Checks, 42, &s);
        let r = decode(&bytes).unwrap();
        assert_eq!(r.origin, Origin::Checks);
        assert_eq!(r.made_ms, 42);
        assert_eq!(r.samples, s);
        assert_eq!(peek(&bytes).unwrap(), (Origin::Checks, 42));
    }

    #[test]
    fn every_cut_is_an_error() {
        let bytes = encode(Origin::Httptrap, 1, &samples());
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }

    #[test]
    fn relayed_records_round_trip_and_every_cut_is_an_error() {
        let relay = Relay {
            sender: "agent-web-1".to_owned(),
            epoch: 7,
            sequence: 1234,
            made_ms: 1_700_000_000_123,
            totals: true,
            body: vec![1, 2, 3, 250],
        };
        let bytes = relay.encode();
        assert_eq!(Relay::decode(&bytes), Some(Ok(relay.clone())));
        assert_eq!(Relay::decode(&encode(Origin::Checks, 1, &samples())), None);
        assert!(
            decode(&bytes).is_err(),
            "a relayed record is no sample record"
        );
        for n in 4..bytes.len() {
            assert!(
                matches!(Relay::decode(&bytes[..n]), Some(Err(_))),
                "cut at {n}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(Relay::decode(&longer), Some(Err(_))));
        let empty = Relay {
            sender: String::new(),
            ..relay
        };
        assert!(matches!(Relay::decode(&empty.encode()), Some(Err(_))));
    }
}
