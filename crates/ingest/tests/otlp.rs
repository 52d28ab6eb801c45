#![allow(clippy::unwrap_used, clippy::expect_used)]

// The shared fuzz checks; this file uses only its own format's.
#[allow(dead_code)]
#[path = "fuzz_checks/mod.rs"]
mod fuzz_checks;

use hist::convert::ConvertError;
use hist::QuantileType;
use ingest::otlp::{self, proto};
use ingest::{Batch, Mode, Options, Reason, Value};
use proptest::prelude::*;
use prost::Message;

/// 2026-11-22T00:00:00Z.
const NOW_MS: i64 = 1_795_305_600_000;
const TS_MS: i64 = NOW_MS - 10_000;
const TS_NS: u64 = TS_MS as u64 * 1_000_000;

fn kv(key: &str, value: &str) -> proto::KeyValue {
    proto::KeyValue {
        key: key.to_owned(),
        value: Some(proto::AnyValue {
            value: Some(proto::any_value::Value::StringValue(value.to_owned())),
        }),
    }
}

fn number(
    value: proto::number_data_point::Value,
    attrs: &[(&str, &str)],
) -> proto::NumberDataPoint {
    proto::NumberDataPoint {
        attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
        time_unix_nano: TS_NS,
        value: Some(value),
        ..Default::default()
    }
}

fn metric(name: &str, data: proto::metric::Data) -> proto::Metric {
    proto::Metric {
        name: name.to_owned(),
        data: Some(data),
        ..Default::default()
    }
}

fn request(metrics: Vec<proto::Metric>) -> proto::ExportMetricsServiceRequest {
    proto::ExportMetricsServiceRequest {
        resource_metrics: vec![proto::ResourceMetrics {
            resource: Some(proto::Resource {
                attributes: vec![kv("service.name", "checkout"), kv("host.name", "h1")],
            }),
            scope_metrics: vec![proto::ScopeMetrics { metrics }],
        }],
    }
}

fn parse(r: &proto::ExportMetricsServiceRequest) -> Batch {
    otlp::parse_protobuf(&r.encode_to_vec(), &Options::at(NOW_MS))
}

fn parse_json(text: &str) -> Batch {
    otlp::parse_json(text.as_bytes(), &Options::at(NOW_MS))
}

fn tags(batch: &Batch, i: usize) -> Vec<(&str, &str)> {
    batch.samples[i]
        .tags
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The histogram a sample holds; a running total in its sender's buckets as llhist.
fn histogram_of(batch: &Batch, index: usize) -> hist::Histogram {
    match &batch.samples[index].value {
        Value::Histogram(h) | Value::CumulativeHistogram(h) => h.clone(),
        Value::Cumulative(c) => c.to_histogram(),
        other => panic!("not a histogram: {other:?}"),
    }
}

fn quantile(h: &hist::Histogram, q: f64) -> f64 {
    h.quantiles(&[q], QuantileType::Type1).unwrap()[0]
}

fn gauge_and_sums() -> proto::ExportMetricsServiceRequest {
    use proto::number_data_point::Value::{AsDouble, AsInt};
    let gauge = proto::Gauge {
        data_points: vec![
            number(AsDouble(0.75), &[("cpu", "0")]),
            number(AsInt(-3), &[("host.name", "h2")]),
        ],
    };
    let delta = proto::Sum {
        data_points: vec![number(AsInt(5), &[])],
        aggregation_temporality: 1,
        is_monotonic: true,
    };
    let cumulative = proto::Sum {
        data_points: vec![number(AsDouble(1234.5), &[])],
        aggregation_temporality: 2,
        is_monotonic: true,
    };
    request(vec![
        metric("cpu.utilization", proto::metric::Data::Gauge(gauge)),
        metric("requests", proto::metric::Data::Sum(delta)),
        metric("bytes.total", proto::metric::Data::Sum(cumulative)),
    ])
}

fn check_gauge_and_sums(batch: &Batch) {
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples.len(), 5);
    let s = &batch.samples;
    assert_eq!(s[0].name, "cpu.utilization");
    assert_eq!(s[0].value, Value::Numeric(0.75));
    assert_eq!(s[0].ts_ms, Some(TS_MS));
    // `service.name` is the job; the other resource attribute only on `target_info`.
    assert_eq!(tags(batch, 0), [("job", "checkout"), ("cpu", "0")]);
    assert_eq!(tags(batch, 1), [("job", "checkout"), ("host.name", "h2")]);
    assert_eq!(s[4].name, "target_info");
    assert_eq!(
        (&s[4].value, s[4].ts_ms),
        (&Value::Numeric(1.0), Some(TS_MS))
    );
    assert_eq!(tags(batch, 4), [("job", "checkout"), ("host.name", "h1")]);
    assert_eq!(s[1].value, Value::Numeric(-3.0));
    assert_eq!(s[0].mode, Mode::Set);
    assert_eq!(
        (&s[2].value, s[2].mode),
        (&Value::Numeric(5.0), Mode::Accumulate)
    );
    assert_eq!(
        (&s[3].value, s[3].mode),
        (&Value::Numeric(1234.5), Mode::Set)
    );
}

#[test]
fn gauges_and_sums_from_protobuf() {
    check_gauge_and_sums(&parse(&gauge_and_sums()));
}

const RESOURCE_JSON: &str = r#""resource": {"attributes": [
    {"key": "service.name", "value": {"stringValue": "checkout"}},
    {"key": "host.name", "value": {"stringValue": "h1"}}]}"#;

fn json_request(metrics: &str) -> String {
    format!(
        r#"{{"resourceMetrics": [{{{RESOURCE_JSON}, "scopeMetrics": [{{"scope": {{"name": "x"}}, "metrics": [{metrics}]}}]}}]}}"#
    )
}

#[test]
fn gauges_and_sums_from_json() {
    let body = json_request(
        r#"{"name": "cpu.utilization", "unit": "1", "gauge": {"dataPoints": [
              {"attributes": [{"key": "cpu", "value": {"stringValue": "0"}}],
               "timeUnixNano": "1795305590000000000", "asDouble": 0.75},
              {"attributes": [{"key": "host.name", "value": {"stringValue": "h2"}}],
               "timeUnixNano": 1795305590000000000, "asInt": "-3"}]}},
           {"name": "requests", "sum": {"aggregationTemporality": 1, "isMonotonic": true,
              "dataPoints": [{"timeUnixNano": "1795305590000000000", "asInt": 5}]}},
           {"name": "bytes.total", "sum": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_CUMULATIVE",
              "dataPoints": [{"timeUnixNano": "1795305590000000000", "asDouble": 1234.5}]}}"#,
    );
    check_gauge_and_sums(&parse_json(&body));
}

fn explicit_point() -> proto::HistogramDataPoint {
    // (−inf, 1]: 0, (1, 10]: 90, (10, 100]: 10, (100, +inf): 0.
    proto::HistogramDataPoint {
        time_unix_nano: TS_NS,
        count: 100,
        sum: Some(900.0),
        bucket_counts: vec![0, 90, 10, 0],
        explicit_bounds: vec![1.0, 10.0, 100.0],
        min: Some(1.5),
        max: Some(80.0),
        ..Default::default()
    }
}

fn check_explicit(batch: &Batch, cumulative: bool) {
    assert_eq!(batch.rejected, []);
    assert_eq!(
        matches!(batch.samples[0].value, Value::Cumulative(_)),
        cumulative
    );
    let h = histogram_of(batch, 0);
    h.assert_invariants();
    assert_eq!(h.sample_count(), 100);
    let median = quantile(&h, 0.5);
    assert!((1.0..=11.0).contains(&median), "median {median}");
    let p95 = quantile(&h, 0.95);
    assert!((10.0..=110.0).contains(&p95), "p95 {p95}");
}

#[test]
fn explicit_histograms_protobuf_and_json() {
    let h = proto::Histogram {
        data_points: vec![explicit_point()],
        aggregation_temporality: 2,
    };
    check_explicit(
        &parse(&request(vec![metric(
            "latency",
            proto::metric::Data::Histogram(h),
        )])),
        true,
    );
    let body = json_request(
        r#"{"name": "latency", "unit": "s", "histogram": {"aggregationTemporality": 1,
             "dataPoints": [{"timeUnixNano": "1795305590000000000", "count": "100", "sum": 900,
             "bucketCounts": ["0", "90", "10", "0"], "explicitBounds": [1, 10, 100],
             "min": 1.5, "max": 80}]}}"#,
    );
    check_explicit(&parse_json(&body), false);
}

fn exponential_point() -> proto::ExponentialHistogramDataPoint {
    // Scale 0: bucket i covers (2^i, 2^(i+1)]; 3 in (1,2], 5 in (2,4], 2 in (4,8], 1 at zero,
    // 1 in [−2, −1).
    proto::ExponentialHistogramDataPoint {
        time_unix_nano: TS_NS,
        count: 12,
        sum: Some(30.0),
        scale: 0,
        zero_count: 1,
        positive: Some(proto::Buckets {
            offset: 0,
            bucket_counts: vec![3, 5, 2],
        }),
        negative: Some(proto::Buckets {
            offset: 0,
            bucket_counts: vec![1],
        }),
        ..Default::default()
    }
}

fn check_exponential(batch: &Batch) {
    assert_eq!(batch.rejected, []);
    let h = histogram_of(batch, 0);
    h.assert_invariants();
    assert_eq!(h.sample_count(), 12);
    let lowest = quantile(&h, 0.0);
    assert!((-2.2..=-1.0).contains(&lowest), "lowest {lowest}");
    let median = quantile(&h, 0.5);
    assert!((2.0..=4.4).contains(&median), "median {median}");
    let top = quantile(&h, 1.0);
    assert!((4.0..=8.8).contains(&top), "top {top}");
}

#[test]
fn exponential_histograms_protobuf_and_json() {
    let h = proto::ExponentialHistogram {
        data_points: vec![exponential_point()],
        aggregation_temporality: 1,
    };
    let batch = parse(&request(vec![metric(
        "rpc.duration",
        proto::metric::Data::ExponentialHistogram(h),
    )]));
    check_exponential(&batch);
    assert!(matches!(batch.samples[0].value, Value::Histogram(_)));
    let body = json_request(
        r#"{"name": "rpc.duration", "exponentialHistogram": {"aggregationTemporality": 2,
             "dataPoints": [{"timeUnixNano": "1795305590000000000", "count": "12", "sum": 30,
             "scale": 0, "zeroCount": "1", "positive": {"offset": 0, "bucketCounts": ["3", "5", 2]},
             "negative": {"bucketCounts": ["1"]}}]}}"#,
    );
    let batch = parse_json(&body);
    check_exponential(&batch);
    assert!(matches!(batch.samples[0].value, Value::Cumulative(_)));
}

#[test]
fn attribute_values_of_every_type_become_tag_text() {
    let body = json_request(
        r#"{"name": "g", "gauge": {"dataPoints": [{"asDouble": 1, "attributes": [
             {"key": "b", "value": {"boolValue": true}},
             {"key": "i", "value": {"intValue": "42"}},
             {"key": "d", "value": {"doubleValue": 0.5}},
             {"key": "y", "value": {"bytesValue": "AQI="}},
             {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": 1}]}}}]}]}}"#,
    );
    let batch = parse_json(&body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples[0].ts_ms, None, "no time: at receipt");
    // After the resource's `job`.
    assert_eq!(
        &tags(&batch, 0)[1..],
        [
            ("b", "true"),
            ("i", "42"),
            ("d", "0.5"),
            ("y", "AQI="),
            ("a", "[x,1]")
        ]
    );
}

#[test]
fn bad_points_and_metrics_are_rejected_alone_and_counted() {
    use proto::number_data_point::Value::AsDouble;
    let unspecified = proto::Sum {
        data_points: vec![number(AsDouble(1.0), &[])],
        aggregation_temporality: 0,
        is_monotonic: false,
    };
    let mut bad_hist = explicit_point();
    bad_hist.bucket_counts.pop();
    let mut old = number(AsDouble(2.0), &[]);
    old.time_unix_nano = 1_000_000_000;
    let gauge = proto::Gauge {
        data_points: vec![
            number(AsDouble(f64::NAN), &[]),
            old,
            number(AsDouble(3.0), &[]),
        ],
    };
    let batch = parse(&request(vec![
        metric("s", proto::metric::Data::Sum(unspecified)),
        metric(
            "h",
            proto::metric::Data::Histogram(proto::Histogram {
                data_points: vec![bad_hist],
                aggregation_temporality: 2,
            }),
        ),
        metric("q", proto::metric::Data::Summary(proto::Summary {})),
        metric("g", proto::metric::Data::Gauge(gauge)),
    ]));
    assert!(!batch.stopped());
    // The good point, and its resource's `target_info`.
    assert_eq!(batch.samples.len(), 2);
    assert_eq!(batch.samples[0].value, Value::Numeric(3.0));
    assert_eq!(batch.samples[1].name, "target_info");
    let got: Vec<(&str, &Reason)> = batch
        .rejected
        .iter()
        .map(|r| (r.location.as_str(), &r.reason))
        .collect();
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(got[0].0, "resource 0, scope 0, metric 0 (`s`)");
    assert!(matches!(got[0].1, Reason::BadValue { .. }));
    assert_eq!(got[1].0, "resource 0, scope 0, metric 1 (`h`), point 0");
    assert_eq!(
        got[1].1,
        &Reason::Histogram(ConvertError::BucketCountMismatch {
            bounds: 3,
            counts: 3
        })
    );
    assert!(matches!(got[2].1, Reason::Unsupported { .. }));
    assert_eq!(got[3].0, "resource 0, scope 0, metric 3 (`g`), point 0");
    assert!(matches!(got[4].1, Reason::Timestamp { .. }));
    assert_eq!(batch.rejected_total, 5);
}

#[test]
fn undecodable_bodies_are_rejected_whole() {
    let raw = gauge_and_sums().encode_to_vec();
    let truncated = otlp::parse_protobuf(&raw[..raw.len() - 2], &Options::at(NOW_MS));
    assert!(truncated.stopped());
    assert!(truncated.samples.is_empty());
    assert!(matches!(
        truncated.rejected[0].reason,
        Reason::Decode { .. }
    ));
    // Field 1 as a varint where a message is expected.
    let wrong_type = otlp::parse_protobuf(b"\x08\x01", &Options::at(NOW_MS));
    assert!(wrong_type.stopped());
    for body in [
        "",
        "{",
        r#"{"resourceMetrics": 3}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": 5}]}]}]}"#,
        r#"{"resourceMetrics": [{"resource": {"attributes": [{"key": 1}]}}]}"#,
    ] {
        let batch = parse_json(body);
        assert!(batch.stopped(), "{body}");
        assert_eq!(batch.rejected[0].location, "body");
        assert!(
            matches!(&batch.rejected[0].reason, Reason::Decode { what, .. } if what.contains("JSON")),
            "{body}: {:?}",
            batch.rejected
        );
    }
}

/// serde reads a oneof member as an optional flattened field: a member of the wrong type is
/// "no value", which rejects that point (or metric) alone rather than the body.
#[test]
fn wrong_json_types_in_a_oneof_reject_the_point() {
    let batch = parse_json(
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "g",
            "gauge": {"dataPoints": [{"asDouble": "x"}, {"asDouble": 2}]}}, {"name": "n", "gauge": 3}]}]}]}"#,
    );
    assert!(!batch.stopped());
    assert_eq!(batch.samples.len(), 1);
    assert_eq!(batch.rejected_total, 2);
    assert_eq!(
        batch.rejected[0].location,
        "resource 0, scope 0, metric 0 (`g`), point 0"
    );
    assert!(matches!(batch.rejected[0].reason, Reason::BadValue { .. }));
    assert_eq!(
        batch.rejected[1].location,
        "resource 0, scope 0, metric 1 (`n`)"
    );
}

/// A length-delimited field 1 around `payload`.
fn field_1(payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x0a];
    let mut len = payload.len();
    while len >= 0x80 {
        out.push((len as u8) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(payload);
    out
}

/// Empty messages are 2 bytes on the wire but a struct each once decoded: their counts are
/// checked before decoding.
#[test]
fn message_and_attribute_counts_are_bounded_before_decoding() {
    let options = Options::at(NOW_MS);
    let resources = b"\x0a\x00".repeat(otlp::METRIC_MESSAGES_PER_REQUEST_MAX + 1);
    let batch = otlp::parse_protobuf(&resources, &options);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "resource, scope and metric messages in the request",
            size: otlp::METRIC_MESSAGES_PER_REQUEST_MAX + 1,
            max: otlp::METRIC_MESSAGES_PER_REQUEST_MAX
        }
    );
    let attributes = b"\x0a\x00".repeat(otlp::ATTRIBUTES_PER_REQUEST_MAX + 1);
    let body = field_1(&field_1(&attributes));
    let batch = otlp::parse_protobuf(&body, &options);
    assert!(matches!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "attributes in the request",
            ..
        }
    ));
    // Within the bounds the same shapes decode: 1,000 empty resources are an empty batch.
    let fine = b"\x0a\x00".repeat(1000);
    assert_eq!(otlp::parse_protobuf(&fine, &options), Batch::default());
}

/// A length-delimited field: `key` (field number << 3 | 2), the varint length, `payload`.
fn delimited(key: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = field_1(payload);
    out[0] = key;
    out
}

/// Values nested in attribute values (array elements, key-value-list entries) are counted as
/// attributes, their nesting is bounded, and exponential bucket counts (packed varints, 1 byte
/// each on the wire, 8 decoded) are counted, all before decoding.
#[test]
fn nested_attribute_values_and_exponential_buckets_are_bounded_before_decoding() {
    let options = Options::at(NOW_MS);
    let over = otlp::ATTRIBUTES_PER_REQUEST_MAX + 1;
    // Resource attribute (KeyValue) → value (2, AnyValue) → array_value (5) → values (1) × over.
    let array = b"\x0a\x00".repeat(over);
    let key_value = delimited(0x12, &delimited(0x2a, &array));
    let resource = field_1(&key_value);
    let body = field_1(&field_1(&resource));
    let batch = otlp::parse_protobuf(&body, &options);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "attributes in the request",
            size: over + 1,
            max: otlp::ATTRIBUTES_PER_REQUEST_MAX
        },
        "the attribute and every element of its array value"
    );

    // A key-value-list value nested 40 deep.
    let mut any_value = Vec::new();
    for _ in 0..40 {
        // AnyValue.kvlist_value (6) → KeyValueList.values (1) → KeyValue.value (2).
        any_value = delimited(0x32, &field_1(&delimited(0x12, &any_value)));
    }
    let resource = field_1(&delimited(0x12, &any_value));
    let batch = otlp::parse_protobuf(&field_1(&field_1(&resource)), &options);
    assert!(matches!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "nesting of attribute values",
            ..
        }
    ));

    // ResourceMetrics → ScopeMetrics (2) → Metric (2) → exponential_histogram (10) →
    // data point (1) → positive (8) → bucket_counts (2), packed zeros.
    let over = otlp::BUCKETS_PER_REQUEST_MAX + 1;
    let buckets = delimited(0x12, &vec![0; over]);
    let point = field_1(&delimited(0x42, &buckets));
    let metric = delimited(0x52, &point);
    let body = field_1(&delimited(0x12, &delimited(0x12, &metric)));
    let batch = otlp::parse_protobuf(&body, &options);
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "exponential histogram bucket counts in the request",
            size: over,
            max: otlp::BUCKETS_PER_REQUEST_MAX
        }
    );
}

/// OTLP JSON: objects and array values are counted in one pass before serde allocates for
/// them; braces, brackets and commas inside strings do not count.
#[test]
fn json_objects_and_array_values_are_bounded_before_decoding() {
    let options = Options::at(NOW_MS);
    let objects = vec!["{}"; otlp::JSON_OBJECTS_PER_REQUEST_MAX + 1].join(",");
    let body = format!("{{\"resourceMetrics\":[{objects}]}}");
    let batch = otlp::parse_json(body.as_bytes(), &options);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "JSON objects in the request",
            size: otlp::JSON_OBJECTS_PER_REQUEST_MAX + 2,
            max: otlp::JSON_OBJECTS_PER_REQUEST_MAX
        },
        "every `{{}}` and the request object"
    );

    let over = otlp::JSON_ARRAY_VALUES_PER_REQUEST_MAX + 1;
    let counts = vec!["0"; over - 1].join(",");
    let body = format!(
        "{{\"resourceMetrics\":[{{\"scopeMetrics\":[{{\"metrics\":[{{\"name\":\"h\",\
         \"exponentialHistogram\":{{\"dataPoints\":[{{\"positive\":{{\"bucketCounts\":[{counts}]}}}}]}}}}]}}]}}]}}"
    );
    let batch = otlp::parse_json(body.as_bytes(), &options);
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "values in JSON arrays in the request",
            size: over + 3,
            max: otlp::JSON_ARRAY_VALUES_PER_REQUEST_MAX
        },
        "the bucket counts plus the one element of each of the four arrays around them"
    );

    // Braces and commas inside a string (escaped quotes included) are not counted.
    let text = format!(
        "\\\"{}",
        "{[,".repeat(otlp::JSON_OBJECTS_PER_REQUEST_MAX + 1)
    );
    let body = format!(
        "{{\"resourceMetrics\":[{{\"resource\":{{\"attributes\":[{{\"key\":\"k\",\
         \"value\":{{\"stringValue\":\"{text}\"}}}}]}}}}]}}"
    );
    let batch = otlp::parse_json(body.as_bytes(), &options);
    assert!(!batch.stopped(), "{:?}", batch.rejected);
}

#[test]
fn empty_requests_are_empty_batches() {
    assert_eq!(parse_json("{}"), Batch::default());
    assert_eq!(
        otlp::parse_protobuf(b"", &Options::at(NOW_MS)),
        Batch::default()
    );
}

/// The requests the seed corpus is made of.
fn seed_requests() -> Vec<proto::ExportMetricsServiceRequest> {
    let explicit = proto::Histogram {
        data_points: vec![explicit_point()],
        aggregation_temporality: 2,
    };
    let exponential = proto::ExponentialHistogram {
        data_points: vec![exponential_point()],
        aggregation_temporality: 1,
    };
    vec![
        gauge_and_sums(),
        request(vec![metric(
            "latency",
            proto::metric::Data::Histogram(explicit),
        )]),
        request(vec![metric(
            "rpc.duration",
            proto::metric::Data::ExponentialHistogram(exponential),
        )]),
        request(vec![metric(
            "q",
            proto::metric::Data::Summary(proto::Summary {}),
        )]),
        proto::ExportMetricsServiceRequest::default(),
    ]
}

/// Every seed request for `fuzz/corpus/otlp/` passes the checks the fuzz target makes; with
/// `STRATA_WRITE_SEEDS=1` the test also writes them there (after changing the seeds).
#[test]
fn seed_corpus_passes_the_fuzz_checks() {
    // With STRATA_WRITE_SEEDS set, the seeds are also written out as the fuzzer's starting corpus.
    let write = std::env::var_os("STRATA_WRITE_SEEDS").is_some();
    let mut seeds = 0;
    let mut put = |path: std::path::PathBuf, bytes: Vec<u8>| {
        fuzz_checks::otlp(&bytes);
        seeds += 1;
        if write {
            std::fs::write(path, bytes).unwrap();
        }
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/otlp");
    if write {
        std::fs::create_dir_all(&dir).unwrap();
    }
    for (i, request) in seed_requests().iter().enumerate() {
        let raw = request.encode_to_vec();
        put(
            dir.join(format!("seed-{i:02}-protobuf")),
            [&[0u8][..], &raw].concat(),
        );
    }
    let json = [
        "{}",
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "g", "gauge": {"dataPoints": [{"asDouble": 1, "timeUnixNano": "1795305590000000000"}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "s", "sum": {"aggregationTemporality": 1, "dataPoints": [{"asInt": "7"}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "h", "histogram": {"aggregationTemporality": 2, "dataPoints": [{"count": "3", "bucketCounts": ["1", "2"], "explicitBounds": [0.5]}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "e", "exponentialHistogram": {"aggregationTemporality": 1, "dataPoints": [{"count": "4", "scale": 3, "zeroCount": "1", "positive": {"offset": -2, "bucketCounts": ["1", "2"]}}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"resource": {"attributes": [{"key": "a", "value": {"arrayValue": {"values": [{"kvlistValue": {"values": [{"key": "k", "value": {"bytesValue": "AQI="}}]}}]}}}]}, "scopeMetrics": [{"metrics": [{"name": "g", "gauge": {"dataPoints": [{"asInt": 1, "attributes": [{"key": "b", "value": {"boolValue": false}}]}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "q", "summary": {"dataPoints": [{"count": "1", "sum": 2}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "h", "histogram": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_DELTA", "dataPoints": [{"count": "1", "sum": "NaN", "min": "-Infinity", "bucketCounts": [1], "explicitBounds": []}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "g", "gauge": {"dataPoints": [{"asDouble": "x"}]}}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": 5}]}]}]}"#,
        r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "e", "exponentialHistogram": {"aggregationTemporality": 2, "dataPoints": [{"count": "2", "scale": -53, "negative": {"offset": 3, "bucketCounts": ["2"]}}]}}]}]}]}"#,
    ];
    for (i, text) in json.iter().enumerate() {
        let path = dir.join(format!("seed-{i:02}-json"));
        put(path, [&[1u8][..], text.as_bytes()].concat());
    }
    // Real bodies, as both encodings of the same request, for more structure to mutate.
    for (i, request) in seed_requests().iter().enumerate() {
        let raw = request.encode_to_vec();
        let mut flipped = [&[2u8][..], &raw].concat();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x55;
        put(dir.join(format!("seed-{i:02}-mutated")), flipped);
    }
    assert!(seeds > 10, "only {seeds} seeds");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let options = Options::at(NOW_MS);
        let batch = otlp::parse_protobuf(&bytes, &options);
        prop_assert!(batch.samples.len() <= bytes.len());
        let batch = otlp::parse_json(&bytes, &options);
        prop_assert!(batch.samples.len() <= bytes.len());
    }

    #[test]
    fn mutated_valid_bodies_never_panic(flip in 0usize..2000, byte in any::<u8>()) {
        for request in seed_requests() {
            let mut raw = request.encode_to_vec();
            if raw.is_empty() {
                continue;
            }
            let at = flip % raw.len();
            raw[at] = byte;
            let _ = otlp::parse_protobuf(&raw, &Options::at(NOW_MS));
        }
    }
}

/// The OpenTelemetry–Prometheus compatibility mapping: `service.namespace` + `service.name` is
/// the job, `service.instance.id` the instance, promoted attributes go on every series, and
/// the rest only on `target_info` (one per resource, at its newest point). A resource with no
/// attributes beyond its identity has no `target_info`.
#[test]
fn resource_attributes_map_to_job_instance_promoted_tags_and_target_info() {
    use proto::number_data_point::Value::AsDouble;
    let gauge = |ns: u64| {
        let mut point = number(AsDouble(1.0), &[("route", "/a")]);
        point.time_unix_nano = ns;
        metric(
            "up.time",
            proto::metric::Data::Gauge(proto::Gauge {
                data_points: vec![point],
            }),
        )
    };
    let newest_ns = TS_MS as u64 * 1_000_000;
    let request = proto::ExportMetricsServiceRequest {
        resource_metrics: vec![
            proto::ResourceMetrics {
                resource: Some(proto::Resource {
                    attributes: vec![
                        kv("service.instance.id", "4f1c"),
                        kv("service.name", "cart"),
                        kv("service.namespace", "shop"),
                        kv("k8s.pod.name", "cart-7"),
                        kv("telemetry.sdk.name", "opentelemetry"),
                    ],
                }),
                scope_metrics: vec![proto::ScopeMetrics {
                    metrics: vec![gauge(newest_ns - 5_000_000_000), gauge(newest_ns)],
                }],
            },
            proto::ResourceMetrics {
                resource: Some(proto::Resource {
                    attributes: vec![kv("service.name", "solo")],
                }),
                scope_metrics: vec![proto::ScopeMetrics {
                    metrics: vec![gauge(newest_ns)],
                }],
            },
        ],
    };
    let translation = otlp::Translation {
        promote: vec!["k8s.pod.name".to_owned()],
        strategy: otlp::Strategy::NoTranslation,
    };
    let mut batch = Batch::default();
    let body = request.encode_to_vec();
    otlp::parse_protobuf_with(&body, &Options::at(NOW_MS), &translation, &mut batch);
    assert_eq!(batch.rejected, []);
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["up.time", "up.time", "target_info", "up.time"]);
    let series = [
        ("job", "shop/cart"),
        ("instance", "4f1c"),
        ("k8s.pod.name", "cart-7"),
        ("route", "/a"),
    ];
    assert_eq!(tags(&batch, 0), series);
    assert_eq!(tags(&batch, 1), series);
    assert_eq!(
        tags(&batch, 2),
        [
            ("job", "shop/cart"),
            ("instance", "4f1c"),
            ("k8s.pod.name", "cart-7"),
            ("telemetry.sdk.name", "opentelemetry"),
        ]
    );
    assert_eq!(batch.samples[2].ts_ms, Some(TS_MS));
    assert_eq!(tags(&batch, 3), [("job", "solo"), ("route", "/a")]);
    // Each metric's type (and `target_info`'s) for `/api/v1/metadata`.
    let described: Vec<(&str, ingest::MetricType)> = batch
        .metadata
        .iter()
        .map(|m| (m.family.as_str(), m.kind))
        .collect();
    assert!(described.contains(&("up.time", ingest::MetricType::Gauge)));
    assert!(described.contains(&("target_info", ingest::MetricType::Gauge)));
    // Without promotion the pod name is on `target_info` only.
    let plain = otlp::parse_protobuf(&body, &Options::at(NOW_MS));
    assert_eq!(
        tags(&plain, 0),
        [("job", "shop/cart"), ("instance", "4f1c"), ("route", "/a")]
    );
}

/// Prometheus's default names: unit and type suffixes, `_` for other characters, attribute keys
/// escaped (promoted ones and `target_info`'s too); exemplars on sums and histograms come with
/// their series, `trace_id` and `span_id` in hex. With `NoTranslation` all is as sent.
#[test]
fn names_follow_the_translation_strategy_and_exemplars_come_along() {
    use proto::number_data_point::Value::{AsDouble, AsInt};
    let exemplar = proto::Exemplar {
        filtered_attributes: vec![kv("user.id", "u7")],
        time_unix_nano: TS_NS,
        value: Some(proto::exemplar::Value::AsDouble(0.25)),
        span_id: vec![0xab, 0x01],
        trace_id: vec![0x4b, 0xf9, 0x00, 0xff],
    };
    let mut sum_point = number(AsInt(7), &[("http.method", "GET")]);
    sum_point.exemplars = vec![exemplar.clone()];
    let mut requests = metric(
        "http.requests",
        proto::metric::Data::Sum(proto::Sum {
            data_points: vec![sum_point],
            aggregation_temporality: 2,
            is_monotonic: true,
        }),
    );
    requests.unit = "{request}".to_owned();
    let mut cpu = metric(
        "cpu.utilization",
        proto::metric::Data::Gauge(proto::Gauge {
            data_points: vec![number(AsDouble(0.5), &[])],
        }),
    );
    cpu.unit = "1".to_owned();
    let mut latency = metric(
        "rpc.duration",
        proto::metric::Data::Histogram(proto::Histogram {
            data_points: vec![proto::HistogramDataPoint {
                time_unix_nano: TS_NS,
                count: 3,
                sum: Some(2.0),
                bucket_counts: vec![1, 2],
                explicit_bounds: vec![0.5],
                exemplars: vec![exemplar],
                ..Default::default()
            }],
            aggregation_temporality: 1,
        }),
    );
    latency.unit = "ms".to_owned();
    let body = request(vec![requests, cpu, latency]).encode_to_vec();
    let parse_with = |strategy| {
        let translation = otlp::Translation {
            promote: vec!["host.name".to_owned()],
            strategy,
        };
        let mut batch = Batch::default();
        otlp::parse_protobuf_with(&body, &Options::at(NOW_MS), &translation, &mut batch);
        assert_eq!(batch.rejected, []);
        batch
    };
    let batch = parse_with(otlp::Strategy::default());
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "http_requests_total",
            "cpu_utilization_ratio",
            "rpc_duration_milliseconds",
            "target_info"
        ]
    );
    assert_eq!(
        tags(&batch, 0),
        [
            ("job", "checkout"),
            ("host_name", "h1"),
            ("http_method", "GET")
        ]
    );
    assert_eq!(tags(&batch, 3), [("job", "checkout"), ("host_name", "h1")]);
    assert_eq!(batch.metadata[0].family, "http_requests_total");
    assert_eq!(batch.metadata[0].unit, "{request}");
    assert_eq!(batch.exemplars.len(), 2);
    let e = &batch.exemplars[0];
    assert_eq!(
        e.series,
        [
            ("__name__".to_owned(), "http_requests_total".to_owned()),
            ("job".to_owned(), "checkout".to_owned()),
            ("host_name".to_owned(), "h1".to_owned()),
            ("http_method".to_owned(), "GET".to_owned()),
        ]
    );
    assert_eq!(
        e.labels,
        [
            ("trace_id".to_owned(), "4bf900ff".to_owned()),
            ("span_id".to_owned(), "ab01".to_owned()),
            ("user_id".to_owned(), "u7".to_owned()),
        ]
    );
    assert_eq!((e.value, e.ts_ms), (0.25, TS_MS));
    assert_eq!(batch.exemplars[1].series[0].1, "rpc_duration_milliseconds");

    let utf8 = parse_with(otlp::Strategy::NoUtf8EscapingWithSuffixes);
    assert_eq!(utf8.samples[0].name, "http.requests_total");
    assert_eq!(tags(&utf8, 0)[2], ("http.method", "GET"));
    let kept = parse_with(otlp::Strategy::NoTranslation);
    assert_eq!(kept.samples[0].name, "http.requests");
    assert_eq!(kept.samples[2].name, "rpc.duration");
}

/// OTLP JSON carries trace and span ids as hex text.
#[test]
fn json_exemplar_ids_are_hex() {
    let body = r#"{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "g",
        "gauge": {"dataPoints": [{"asDouble": 1, "timeUnixNano": "1795305590000000000",
        "exemplars": [{"asInt": "3", "timeUnixNano": "1795305590000000000",
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"}]}]}}]}]}]}"#;
    let batch = parse_json(body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.exemplars.len(), 1);
    assert_eq!(
        batch.exemplars[0].labels,
        [
            (
                "trace_id".to_owned(),
                "5b8efff798038103d269b633813fc60c".to_owned()
            ),
            ("span_id".to_owned(), "eee19b7ec3c1b174".to_owned()),
        ]
    );
    assert_eq!(batch.exemplars[0].value, 3.0);
    // Not hex: the metric does not read (as any member of the wrong type), rejected.
    let bad = parse_json(&body.replace("eee19b7ec3c1b174", "xyz"));
    assert_eq!(bad.rejected_total, 1, "{bad:?}");
    assert!(
        bad.samples.is_empty() && bad.exemplars.is_empty(),
        "{bad:?}"
    );
}

#[test]
fn point_attributes_that_translate_to_one_label_are_joined_in_key_order() {
    // `http.method` and `http_method` both become `http_method`; `host.name` on the point
    // replaces the resource's.
    let gauge = proto::metric::Data::Gauge(proto::Gauge {
        data_points: vec![number(
            proto::number_data_point::Value::AsDouble(1.0),
            &[
                ("http_method", "b"),
                ("http.method", "a"),
                ("host.name", "h2"),
            ],
        )],
    });
    let body = request(vec![metric("g", gauge)]).encode_to_vec();
    let translation = otlp::Translation {
        promote: vec!["host.name".to_owned()],
        strategy: otlp::Strategy::default(),
    };
    let mut batch = Batch::default();
    otlp::parse_protobuf_with(&body, &Options::at(NOW_MS), &translation, &mut batch);
    let i = batch.samples.iter().position(|s| s.name == "g").unwrap();
    let t = tags(&batch, i);
    assert!(t.contains(&("http_method", "a;b")), "{t:?}");
    assert!(t.contains(&("host_name", "h2")), "{t:?}");
    assert_eq!(
        t.iter().filter(|(k, _)| *k == "host_name").count(),
        1,
        "{t:?}"
    );
}
