//! The subset of upstream `opentelemetry/proto/collector/metrics/v1/metrics_service.proto`,
//! `metrics/v1/metrics.proto`, `resource/v1/resource.proto` and `common/v1/common.proto` Strata
//! reads, as prost derive structs (no build script, no `protoc`) with the upstream field
//! numbers. Fields not listed (flags, schema URLs, scope) are skipped as unknown.
//!
//! The same structs read the OTLP JSON encoding through serde: field names in lowerCamelCase,
//! a oneof's member as a field of the enclosing object, 64-bit integers as strings or numbers,
//! enums as integers, bytes as base64 (kept as text: they only become tag values).

use serde::Deserialize;

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeMetrics { scope = 1; metrics = 2; schema_url = 3; }`: only the metrics are read.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ScopeMetrics {
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

/// `Metric { name = 1; description = 2; unit = 3; oneof data { gauge = 5; sum = 7;
/// histogram = 9; exponential_histogram = 10; summary = 11; } }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "metric::Data", tags = "5, 7, 9, 10, 11")]
    #[serde(flatten)]
    pub data: Option<metric::Data>,
}

pub mod metric {
    use serde::Deserialize;

    #[derive(Clone, PartialEq, prost::Oneof, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Data {
        #[prost(message, tag = "5")]
        Gauge(super::Gauge),
        #[prost(message, tag = "7")]
        Sum(super::Sum),
        #[prost(message, tag = "9")]
        Histogram(super::Histogram),
        #[prost(message, tag = "10")]
        ExponentialHistogram(super::ExponentialHistogram),
        #[prost(message, tag = "11")]
        Summary(super::Summary),
    }
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

/// `Sum { data_points = 1; aggregation_temporality = 2; is_monotonic = 3; }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    /// `AggregationTemporality { UNSPECIFIED = 0; DELTA = 1; CUMULATIVE = 2; }`.
    #[prost(int32, tag = "2")]
    #[serde(deserialize_with = "json::temporality")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    #[prost(int32, tag = "2")]
    #[serde(deserialize_with = "json::temporality")]
    pub aggregation_temporality: i32,
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExponentialHistogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<ExponentialHistogramDataPoint>,
    #[prost(int32, tag = "2")]
    #[serde(deserialize_with = "json::temporality")]
    pub aggregation_temporality: i32,
}

/// Summaries are recognised only to be rejected by name.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Summary {}

/// `NumberDataPoint { attributes = 7; start_time_unix_nano = 2; time_unix_nano = 3;
/// oneof value { double as_double = 4; sfixed64 as_int = 6; } }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct NumberDataPoint {
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    #[serde(deserialize_with = "json::u64")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    #[serde(deserialize_with = "json::u64")]
    pub time_unix_nano: u64,
    #[prost(oneof = "number_data_point::Value", tags = "4, 6")]
    #[serde(flatten)]
    pub value: Option<number_data_point::Value>,
    #[prost(message, repeated, tag = "5")]
    pub exemplars: Vec<Exemplar>,
}

/// `Exemplar { filtered_attributes = 7; time_unix_nano = 2; oneof value { double as_double
/// = 3; sfixed64 as_int = 6; } bytes span_id = 4; bytes trace_id = 5; }` (ids are hex text in
/// JSON).
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Exemplar {
    #[prost(message, repeated, tag = "7")]
    pub filtered_attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    #[serde(deserialize_with = "json::u64")]
    pub time_unix_nano: u64,
    #[prost(oneof = "exemplar::Value", tags = "3, 6")]
    #[serde(flatten)]
    pub value: Option<exemplar::Value>,
    #[prost(bytes = "vec", tag = "4")]
    #[serde(deserialize_with = "json::hex")]
    pub span_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "5")]
    #[serde(deserialize_with = "json::hex")]
    pub trace_id: Vec<u8>,
}

pub mod exemplar {
    use serde::Deserialize;

    #[derive(Clone, Copy, PartialEq, prost::Oneof, Deserialize)]
    pub enum Value {
        #[prost(double, tag = "3")]
        #[serde(rename = "asDouble", deserialize_with = "super::json::f64")]
        AsDouble(f64),
        #[prost(sfixed64, tag = "6")]
        #[serde(rename = "asInt", deserialize_with = "super::json::i64")]
        AsInt(i64),
    }
}

pub mod number_data_point {
    use serde::Deserialize;

    #[derive(Clone, Copy, PartialEq, prost::Oneof, Deserialize)]
    pub enum Value {
        #[prost(double, tag = "4")]
        #[serde(rename = "asDouble", deserialize_with = "super::json::f64")]
        AsDouble(f64),
        #[prost(sfixed64, tag = "6")]
        #[serde(rename = "asInt", deserialize_with = "super::json::i64")]
        AsInt(i64),
    }
}

/// `HistogramDataPoint { attributes = 9; start_time_unix_nano = 2; time_unix_nano = 3;
/// count = 4; optional sum = 5; bucket_counts = 6; explicit_bounds = 7; optional min = 11;
/// optional max = 12; }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HistogramDataPoint {
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    #[serde(deserialize_with = "json::u64")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    #[serde(deserialize_with = "json::u64")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    #[serde(deserialize_with = "json::u64")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub sum: Option<f64>,
    #[prost(fixed64, repeated, tag = "6")]
    #[serde(deserialize_with = "json::vec_u64")]
    pub bucket_counts: Vec<u64>,
    #[prost(double, repeated, tag = "7")]
    pub explicit_bounds: Vec<f64>,
    #[prost(double, optional, tag = "11")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub min: Option<f64>,
    #[prost(double, optional, tag = "12")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub max: Option<f64>,
    #[prost(message, repeated, tag = "8")]
    pub exemplars: Vec<Exemplar>,
}

/// `ExponentialHistogramDataPoint { attributes = 1; start_time_unix_nano = 2;
/// time_unix_nano = 3; count = 4; optional sum = 5; scale = 6; zero_count = 7; positive = 8;
/// negative = 9; optional min = 12; optional max = 13; zero_threshold = 14; }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExponentialHistogramDataPoint {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    #[serde(deserialize_with = "json::u64")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    #[serde(deserialize_with = "json::u64")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    #[serde(deserialize_with = "json::u64")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub sum: Option<f64>,
    #[prost(sint32, tag = "6")]
    pub scale: i32,
    #[prost(fixed64, tag = "7")]
    #[serde(deserialize_with = "json::u64")]
    pub zero_count: u64,
    #[prost(message, optional, tag = "8")]
    pub positive: Option<Buckets>,
    #[prost(message, optional, tag = "9")]
    pub negative: Option<Buckets>,
    #[prost(double, optional, tag = "12")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub min: Option<f64>,
    #[prost(double, optional, tag = "13")]
    #[serde(deserialize_with = "json::opt_f64")]
    pub max: Option<f64>,
    #[prost(double, tag = "14")]
    #[serde(deserialize_with = "json::f64")]
    pub zero_threshold: f64,
    #[prost(message, repeated, tag = "11")]
    pub exemplars: Vec<Exemplar>,
}

/// `Buckets { sint32 offset = 1; repeated uint64 bucket_counts = 2; }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Buckets {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint64, repeated, tag = "2")]
    #[serde(deserialize_with = "json::vec_u64")]
    pub bucket_counts: Vec<u64>,
}

/// `KeyValue { string key = 1; AnyValue value = 2; }`.
#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AnyValue {
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 6, 7")]
    #[serde(flatten)]
    pub value: Option<any_value::Value>,
}

pub mod any_value {
    use serde::Deserialize;

    /// `oneof value { string_value = 1; bool_value = 2; int_value = 3; double_value = 4;
    /// array_value = 5; kvlist_value = 6; bytes_value = 7; }`.
    #[derive(Clone, PartialEq, prost::Oneof, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Value {
        #[prost(string, tag = "1")]
        StringValue(String),
        #[prost(bool, tag = "2")]
        BoolValue(bool),
        #[prost(int64, tag = "3")]
        #[serde(deserialize_with = "super::json::i64")]
        IntValue(i64),
        #[prost(double, tag = "4")]
        #[serde(deserialize_with = "super::json::f64")]
        DoubleValue(f64),
        #[prost(message, tag = "5")]
        ArrayValue(super::ArrayValue),
        #[prost(message, tag = "6")]
        KvlistValue(super::KeyValueList),
        /// JSON carries bytes as base64 text; they are decoded from it.
        #[prost(bytes = "vec", tag = "7")]
        #[serde(deserialize_with = "super::json::base64")]
        BytesValue(Vec<u8>),
    }
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ArrayValue {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KeyValueList {
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<KeyValue>,
}

/// OTLP JSON's number forms: protobuf's JSON mapping writes 64-bit integers as strings (and
/// readers must accept numbers too), doubles as numbers or `"NaN"` / `"Infinity"` strings.
mod json {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Num<'a> {
        Number(serde_json::Number),
        #[serde(borrow)]
        Text(std::borrow::Cow<'a, str>),
    }

    fn parse<'de, D, T>(
        d: D,
        from_number: fn(&serde_json::Number) -> Option<T>,
    ) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: std::str::FromStr,
    {
        match Num::deserialize(d)? {
            Num::Number(n) => {
                from_number(&n).ok_or_else(|| D::Error::custom(format!("number {n} out of range")))
            }
            Num::Text(s) => s
                .parse()
                .map_err(|_| D::Error::custom(format!("`{s}` is not a number"))),
        }
    }

    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        parse(d, serde_json::Number::as_u64)
    }

    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        parse(d, serde_json::Number::as_i64)
    }

    /// Doubles: numbers, or the strings `"NaN"`, `"Infinity"`, `"-Infinity"` and numbers in
    /// quotes (Rust's `f64::from_str` reads all of them).
    pub fn f64<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        parse(d, serde_json::Number::as_f64)
    }

    pub fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        f64(d).map(Some)
    }

    pub fn vec_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        #[derive(Deserialize)]
        struct U(#[serde(deserialize_with = "u64")] u64);
        Ok(Vec::<U>::deserialize(d)?
            .into_iter()
            .map(|U(v)| v)
            .collect())
    }

    pub fn temporality<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum T<'a> {
            Number(i32),
            #[serde(borrow)]
            Name(std::borrow::Cow<'a, str>),
        }
        match T::deserialize(d)? {
            T::Number(n) => Ok(n),
            T::Name(name) => match &*name {
                "AGGREGATION_TEMPORALITY_UNSPECIFIED" => Ok(0),
                "AGGREGATION_TEMPORALITY_DELTA" => Ok(1),
                "AGGREGATION_TEMPORALITY_CUMULATIVE" => Ok(2),
                other => Err(D::Error::custom(format!("unknown temporality `{other}`"))),
            },
        }
    }

    /// A trace or span id: hex text in OTLP JSON.
    pub fn hex<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        if !text.len().is_multiple_of(2) {
            return Err(D::Error::custom("a trace or span id is not hex"));
        }
        text.as_bytes()
            .chunks_exact(2)
            .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| D::Error::custom("a trace or span id is not hex"))
    }

    pub fn base64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        base64_simd::STANDARD
            .decode_to_vec(text.as_bytes())
            .map_err(|_| D::Error::custom("bytesValue is not base64"))
    }
}
