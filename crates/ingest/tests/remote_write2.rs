//! Remote write 2.0 bodies made by prost from the upstream message definitions
//! (`remote_write2::proto`), and remote write 1.0's metadata.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingest::remote_write2::{self, proto, Written};
use ingest::{remote_write, Batch, MetadataOwned, MetricType, Options, Value};
use prost::Message;

/// 2026-11-22T00:00:00Z.
const NOW_MS: i64 = 1_795_305_600_000;

const SYMBOLS: [&str; 12] = [
    "",
    "__name__",
    "http_requests_total",
    "job",
    "api",
    "Requests served.",
    "rpc_seconds_bucket",
    "le",
    "0.5",
    "seconds",
    "trace_id",
    "abc",
];

fn request(timeseries: Vec<proto::TimeSeries>) -> Vec<u8> {
    let request = proto::Request {
        symbols: SYMBOLS.map(str::to_owned).to_vec(),
        timeseries,
    };
    snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap()
}

fn parse(body: &[u8]) -> (Batch, Written) {
    let mut batch = Batch::default();
    let written = remote_write2::parse_into(body, &Options::at(NOW_MS), &mut batch);
    (batch, written)
}

fn sample(value: f64) -> proto::Sample {
    proto::Sample {
        value,
        timestamp: NOW_MS - 1000,
    }
}

#[test]
fn samples_histograms_metadata_and_exemplars() {
    let counter = proto::TimeSeries {
        labels_refs: vec![1, 2, 3, 4],
        samples: vec![sample(5.0), sample(8.0)],
        exemplars: vec![proto::Exemplar {
            labels_refs: vec![10, 11],
            value: 1.0,
            timestamp: NOW_MS - 1000,
        }],
        metadata: Some(proto::Metadata {
            r#type: 1,
            help_ref: 5,
            unit_ref: 0,
        }),
        created_timestamp: NOW_MS - 60_000,
        ..proto::TimeSeries::default()
    };
    let bucket = proto::TimeSeries {
        labels_refs: vec![1, 6, 7, 8],
        samples: vec![sample(3.0)],
        metadata: Some(proto::Metadata {
            r#type: 3,
            help_ref: 0,
            unit_ref: 9,
        }),
        ..proto::TimeSeries::default()
    };
    let native = proto::TimeSeries {
        labels_refs: vec![1, 2],
        histograms: vec![proto::Histogram {
            count: Some(proto::Count::CountInt(3)),
            sum: 2.0,
            schema: -53,
            positive_spans: vec![proto::BucketSpan {
                offset: 0,
                length: 2,
            }],
            positive_deltas: vec![1, 1],
            custom_values: vec![0.5],
            timestamp: NOW_MS - 1000,
            ..proto::Histogram::default()
        }],
        ..proto::TimeSeries::default()
    };
    let (batch, written) = parse(&request(vec![counter, bucket, native]));
    assert!(batch.rejected.is_empty(), "{:?}", batch.rejected);
    assert_eq!(
        written,
        Written {
            samples: 3,
            histograms: 1,
            exemplars: 1
        }
    );
    // The exemplar, with its series' labels as sent.
    assert_eq!(batch.exemplars.len(), 1);
    let e = &batch.exemplars[0];
    assert_eq!(
        e.series,
        [
            ("__name__".to_owned(), "http_requests_total".to_owned()),
            ("job".to_owned(), "api".to_owned())
        ]
    );
    assert_eq!((e.value, e.ts_ms), (1.0, NOW_MS - 1000));
    assert_eq!(e.labels.len(), 1);
    assert_eq!(batch.samples.len(), 4);
    assert_eq!(batch.samples[0].name, "http_requests_total");
    assert_eq!(
        &*batch.samples[0].tags,
        [("job".to_owned(), "api".to_owned())]
    );
    assert_eq!(batch.samples[1].value, Value::Numeric(8.0));
    assert_eq!(batch.samples[2].name, "rpc_seconds_bucket");
    assert!(matches!(batch.samples[3].value, Value::Cumulative(_)));
    assert_eq!(
        batch.metadata,
        [
            MetadataOwned {
                family: "http_requests_total".to_owned(),
                kind: MetricType::Counter,
                help: "Requests served.".to_owned(),
                unit: String::new(),
            },
            // A classic histogram's bucket series names its family without `_bucket`.
            MetadataOwned {
                family: "rpc_seconds".to_owned(),
                kind: MetricType::Histogram,
                help: String::new(),
                unit: "seconds".to_owned(),
            },
        ]
    );
}

#[test]
fn bad_references_reject_their_series_alone() {
    let good = proto::TimeSeries {
        labels_refs: vec![1, 2],
        samples: vec![sample(1.0)],
        ..proto::TimeSeries::default()
    };
    let past = proto::TimeSeries {
        labels_refs: vec![1, 2, 3, 99],
        samples: vec![sample(1.0)],
        ..proto::TimeSeries::default()
    };
    let odd = proto::TimeSeries {
        labels_refs: vec![1, 2, 3],
        samples: vec![sample(1.0)],
        ..proto::TimeSeries::default()
    };
    let (batch, written) = parse(&request(vec![good, past, odd]));
    assert_eq!(written.samples, 1);
    assert_eq!(batch.samples.len(), 1);
    let messages: Vec<String> = batch
        .rejected
        .iter()
        .map(|r| format!("{}: {}", r.location, r.reason))
        .collect();
    assert_eq!(
        messages,
        [
            "series 1: expected a reference within the symbols table, got `99 (the table has 12 symbols)`",
            "series 2: expected label references in name-value pairs, got `3 references`",
        ]
    );
}

#[test]
fn a_1_0_body_is_not_read_as_an_empty_2_0_request() {
    let v1 = remote_write::proto::WriteRequest {
        timeseries: vec![remote_write::proto::TimeSeries::default()],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&v1.encode_to_vec())
        .unwrap();
    let (batch, written) = parse(&body);
    assert_eq!(written, Written::default());
    assert!(batch.stopped());
    let message = batch.rejected[0].reason.to_string();
    assert!(message.contains("prometheus.WriteRequest"), "{message}");
}

/// `MetricMetadata { type = 1; metric_family_name = 2; help = 4; unit = 5; }`, hand-encoded
/// (1.0's prost structs carry no metadata).
fn v1_metadata(kind: u8, family: &str, help: &str, unit: &str) -> Vec<u8> {
    let mut out = vec![0x08, kind];
    for (field, text) in [(2u8, family), (4, help), (5, unit)] {
        out.push(field << 3 | 2);
        out.push(text.len() as u8);
        out.extend_from_slice(text.as_bytes());
    }
    out
}

#[test]
fn remote_write_1_metadata_reaches_the_sink() {
    let mut raw = remote_write::proto::WriteRequest::default().encode_to_vec();
    for entry in [
        v1_metadata(2, "temperature", "Room temperature.", "celsius"),
        v1_metadata(3, "rpc_seconds", "RPC latency.", "seconds"),
        v1_metadata(1, "", "no family", ""),
    ] {
        raw.push(3 << 3 | 2);
        raw.push(entry.len() as u8);
        raw.extend_from_slice(&entry);
    }
    let batch = remote_write::parse_decompressed(&raw, &Options::at(NOW_MS));
    assert!(batch.rejected.is_empty(), "{:?}", batch.rejected);
    let got: Vec<(&str, MetricType, &str, &str)> = batch
        .metadata
        .iter()
        .map(|m| (&*m.family, m.kind, &*m.help, &*m.unit))
        .collect();
    assert_eq!(
        got,
        [
            (
                "temperature",
                MetricType::Gauge,
                "Room temperature.",
                "celsius"
            ),
            (
                "rpc_seconds",
                MetricType::Histogram,
                "RPC latency.",
                "seconds"
            ),
        ]
    );
}
