//! The Prometheus protobuf exposition (`io.prometheus.client.MetricFamily`, length-delimited),
//! the only format that carries native histograms. Messages are prost structs written from the
//! published `metrics.proto` field numbers. Before prost decodes a family, its wire form is
//! walked and its series and repeated elements counted against the scrape's bounds: a 2-byte
//! empty message on the wire is a struct of a hundred bytes once decoded.

use prost::Message;

/// Repeated elements (labels, buckets, spans, quantiles, packed counts) in one scrape.
pub const ELEMENTS_MAX: usize = 4_000_000;

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub help: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub r#type: Option<i32>,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
    #[prost(string, optional, tag = "5")]
    pub unit: Option<String>,
}

/// `MetricType` values.
pub const COUNTER: i32 = 0;
pub const GAUGE: i32 = 1;
pub const SUMMARY: i32 = 2;
pub const UNTYPED: i32 = 3;
pub const HISTOGRAM: i32 = 4;
pub const GAUGE_HISTOGRAM: i32 = 5;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Single>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Single>,
    #[prost(message, optional, tag = "4")]
    pub summary: Option<Summary>,
    #[prost(message, optional, tag = "5")]
    pub untyped: Option<Single>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
    #[prost(int64, optional, tag = "6")]
    pub timestamp_ms: Option<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `Gauge`, `Counter` and `Untyped`: the value is field 1 in each (a counter's exemplar and
/// created timestamp are not kept).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Single {
    #[prost(double, optional, tag = "1")]
    pub value: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(uint64, optional, tag = "1")]
    pub sample_count: Option<u64>,
    #[prost(double, optional, tag = "2")]
    pub sample_sum: Option<f64>,
    #[prost(message, repeated, tag = "3")]
    pub quantile: Vec<Quantile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Quantile {
    #[prost(double, optional, tag = "1")]
    pub quantile: Option<f64>,
    #[prost(double, optional, tag = "2")]
    pub value: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(uint64, optional, tag = "1")]
    pub sample_count: Option<u64>,
    #[prost(double, optional, tag = "4")]
    pub sample_count_float: Option<f64>,
    #[prost(double, optional, tag = "2")]
    pub sample_sum: Option<f64>,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, optional, tag = "5")]
    pub schema: Option<i32>,
    #[prost(double, optional, tag = "6")]
    pub zero_threshold: Option<f64>,
    #[prost(uint64, optional, tag = "7")]
    pub zero_count: Option<u64>,
    #[prost(double, optional, tag = "8")]
    pub zero_count_float: Option<f64>,
    #[prost(message, repeated, tag = "9")]
    pub negative_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "10")]
    pub negative_delta: Vec<i64>,
    #[prost(double, repeated, tag = "11")]
    pub negative_count: Vec<f64>,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "13")]
    pub positive_delta: Vec<i64>,
    #[prost(double, repeated, tag = "14")]
    pub positive_count: Vec<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    #[prost(uint64, optional, tag = "1")]
    pub cumulative_count: Option<u64>,
    #[prost(double, optional, tag = "4")]
    pub cumulative_count_float: Option<f64>,
    #[prost(double, optional, tag = "2")]
    pub upper_bound: Option<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, optional, tag = "1")]
    pub offset: Option<i32>,
    #[prost(uint32, optional, tag = "2")]
    pub length: Option<u32>,
}

impl Histogram {
    /// Native, as Prometheus tells them apart: spans (a no-op span marks an empty one), a zero
    /// bucket or a zero threshold.
    pub fn is_native(&self) -> bool {
        !self.positive_span.is_empty()
            || !self.negative_span.is_empty()
            || self.zero_threshold.unwrap_or(0.0) > 0.0
            || self.zero_count.unwrap_or(0) > 0
            || self.zero_count_float.unwrap_or(0.0) > 0.0
    }
}

/// Decodes a delimited body: each family a varint length and the message. `series_max` bounds
/// the metrics of all families together.
pub fn parse(body: &[u8], series_max: usize) -> Result<Vec<MetricFamily>, String> {
    let mut rest = body;
    let mut budget = Budget {
        series_left: series_max,
        series_max,
        elements_left: ELEMENTS_MAX,
    };
    let mut families = Vec::new();
    while !rest.is_empty() {
        let (len, after) = varint(rest).ok_or("a family's length is cut short")?;
        let len = usize::try_from(len).map_err(|_| "a family's length is too large")?;
        let msg = after.get(..len).ok_or("a family is cut short")?;
        budget.family(msg)?;
        let family =
            MetricFamily::decode(msg).map_err(|e| format!("a family does not decode: {e}"))?;
        families.push(family);
        rest = &after[len..];
    }
    Ok(families)
}

/// What a scrape may still decode.
struct Budget {
    series_left: usize,
    series_max: usize,
    elements_left: usize,
}

impl Budget {
    fn family(&mut self, msg: &[u8]) -> Result<(), String> {
        for field in Fields(msg) {
            let (number, payload) = field?;
            if number == 4 {
                self.series_left = self
                    .series_left
                    .checked_sub(1)
                    .ok_or_else(|| format!("more than {} series", self.series_max))?;
                self.metric(payload.bytes())?;
            }
        }
        Ok(())
    }

    fn metric(&mut self, msg: &[u8]) -> Result<(), String> {
        for field in Fields(msg) {
            match field? {
                (1, _) => self.element()?,
                (4, p) => self.repeated(p.bytes(), &[3])?,
                (7, p) => self.repeated(p.bytes(), &[3, 9, 10, 11, 12, 13, 14])?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Counts the elements of the repeated fields `numbers` of a message (packed ones by their
    /// bytes: a packed element is at least one byte).
    fn repeated(&mut self, msg: &[u8], numbers: &[u32]) -> Result<(), String> {
        for field in Fields(msg) {
            let (number, payload) = field?;
            if numbers.contains(&number) {
                match payload {
                    Payload::Bytes(b) if matches!(number, 10 | 11 | 13 | 14) => {
                        for _ in 0..b.len() {
                            self.element()?;
                        }
                    }
                    _ => self.element()?,
                }
            }
        }
        Ok(())
    }

    fn element(&mut self) -> Result<(), String> {
        self.elements_left = self
            .elements_left
            .checked_sub(1)
            .ok_or_else(|| format!("more than {ELEMENTS_MAX} labels, buckets and counts"))?;
        Ok(())
    }
}

/// A field's payload on the wire.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Scalar,
    Bytes(&'a [u8]),
}

impl<'a> Payload<'a> {
    fn bytes(self) -> &'a [u8] {
        match self {
            Payload::Bytes(b) => b,
            Payload::Scalar => &[],
        }
    }
}

/// The top-level fields of one message, in order; an error ends the walk.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Payload<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let item = next_field(self.0);
        match &item {
            Ok((_, _, rest)) => self.0 = rest,
            Err(_) => self.0 = &[],
        }
        Some(item.map(|(n, p, _)| (n, p)))
    }
}

fn next_field(buf: &[u8]) -> Result<(u32, Payload<'_>, &[u8]), String> {
    let cut = || "a message is cut short".to_owned();
    let (key, rest) = varint(buf).ok_or_else(cut)?;
    let number = u32::try_from(key >> 3).map_err(|_| "a field number is too large".to_owned())?;
    let (payload, rest) = match key & 7 {
        0 => (Payload::Scalar, varint(rest).ok_or_else(cut)?.1),
        1 => (Payload::Scalar, rest.get(8..).ok_or_else(cut)?),
        5 => (Payload::Scalar, rest.get(4..).ok_or_else(cut)?),
        2 => {
            let (len, rest) = varint(rest).ok_or_else(cut)?;
            let len = usize::try_from(len).map_err(|_| cut())?;
            let bytes = rest.get(..len).ok_or_else(cut)?;
            (Payload::Bytes(bytes), &rest[len..])
        }
        _ => return Err("a field has an unsupported wire type".to_owned()),
    };
    Ok((number, payload, rest))
}

/// A base-128 varint (at most 10 bytes) and the bytes after it.
fn varint(buf: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, &buf[i + 1..]));
        }
    }
    None
}

/// Encodes families as a delimited body (tests, the benchmark and the fuzz corpus seeds).
pub fn encode(families: &[MetricFamily]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in families {
        // Encoding into a Vec cannot run out of room.
        let _ = f.encode_length_delimited(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let family = MetricFamily {
            name: Some("g".into()),
            r#type: Some(GAUGE),
            metric: vec![
                Metric {
                    gauge: Some(Single { value: Some(2.5) }),
                    ..Default::default()
                };
                3
            ],
            ..Default::default()
        };
        let body = encode(&[family.clone(), family.clone()]);
        assert_eq!(parse(&body, 6).unwrap(), vec![family.clone(), family]);
        assert_eq!(parse(&body, 5).unwrap_err(), "more than 5 series");
        assert!(parse(&body[..body.len() - 1], 6).is_err());
    }
}
