//! Prometheus native histograms sent by remote write are counted as Prometheus counts them: a
//! running total is differenced in its own buckets before it becomes llhist bins, so a bucket
//! that grew is never read as a reset (converted first, rounding made bins shrink and every
//! shrink added the whole total again). Through a real server, read back with `transform=count`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use ingest::remote_write::proto::{self, Label, TimeSeries, WriteRequest};
use prost::Message;
use serde_json::Value;
use serve_common::{client, fetch, now_s, urlencode, Server};

/// Buckets of the test histogram (schema 3: each 2^(1/8) ≈ 9% wider than the last, about the
/// factor 1.1 client libraries use; narrower than llhist's bins, so conversion rounds).
const BUCKETS: i64 = 17;

/// Cumulative count of bucket `b` after `step` steps: buckets grow at different rates.
fn bucket_count(b: i64, step: i64) -> i64 {
    step * (b + 1) / 3
}

fn total(step: i64) -> i64 {
    (0..BUCKETS).map(|b| bucket_count(b, step)).sum()
}

fn native(step: i64, ts_ms: i64) -> proto::Histogram {
    let mut deltas = Vec::new();
    let mut previous = 0;
    for b in 0..BUCKETS {
        let count = bucket_count(b, step);
        deltas.push(count - previous);
        previous = count;
    }
    proto::Histogram {
        count: Some(proto::Count::CountInt(total(step) as u64)),
        sum: total(step) as f64 * 1.5,
        schema: 3,
        zero_count: Some(proto::ZeroCount::ZeroCountInt(0)),
        positive_spans: vec![proto::BucketSpan {
            offset: 0,
            length: BUCKETS as u32,
        }],
        positive_deltas: deltas,
        timestamp: ts_ms,
        ..proto::Histogram::default()
    }
}

fn remote_write(server: &Server, timeseries: Vec<TimeSeries>) {
    let raw = WriteRequest { timeseries }.encode_to_vec();
    let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    let response = client()
        .post(server.url("/api/v1/write"))
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .body(body)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    assert_eq!(status, 204, "{}", response.text().unwrap());
}

#[test]
fn a_growing_native_histogram_counts_its_increase_exactly_across_a_reset() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now = now_s();
    let m0_s = now - now.rem_euclid(60) - 600;
    let labels = vec![
        Label {
            name: b"__name__".to_vec(),
            value: b"rpc_seconds".to_vec(),
        },
        Label {
            name: b"job".to_vec(),
            value: b"api".to_vec(),
        },
    ];
    // The first total alone in its minute; then 11 steps up, a restart (the total starts over),
    // and 8 steps up again, one request each, in order.
    let mut points = vec![(m0_s * 1000 + 10_000, 0_i64)];
    for i in 1..=19_i64 {
        let step = if i <= 11 { i } else { i - 11 };
        points.push(((m0_s + 60) * 1000 + (i - 1) * 10_000, step));
    }
    for (ts_ms, step) in &points {
        let series = TimeSeries {
            labels: labels.clone(),
            histograms: vec![native(*step, *ts_ms)],
            ..TimeSeries::default()
        };
        remote_write(&server, vec![series]);
    }

    let counted = fetch(
        &server,
        "and(__name:rpc_seconds)",
        m0_s,
        &format!("&transform={}", urlencode("count")),
    );
    let data = counted["series"][0]["data"].as_array().unwrap();
    let after_first: f64 = data
        .iter()
        .filter(|d| d["ts_ms"].as_i64().unwrap() > m0_s * 1000)
        .filter_map(|d| d["value"].as_f64())
        .sum();
    // Prometheus's reading: the rise to step 11, then the restarted total's whole value.
    let expected = (total(11) - total(0) + total(8)) as f64;
    assert_eq!(after_first, expected, "{counted}");
    let first: Vec<&Value> = data
        .iter()
        .filter(|d| d["ts_ms"].as_i64().unwrap() == m0_s * 1000)
        .collect();
    assert_eq!(first.len(), 1, "{counted}");
}
