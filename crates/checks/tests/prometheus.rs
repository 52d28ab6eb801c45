//! prometheus against a real client_golang exporter (tests/go-exporter, built with the Go
//! module proxy): every format it negotiates, the native histogram as a cumulative histogram
//! with its exact bucket counts, classic histograms, counters, gauges and summaries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};

use checks::{Measurement, Value};
use common::*;
use hist::convert::Cumulative;
use serde_json::json;

fn exporter() -> (Service, u16) {
    let bin = go_build("go-exporter");
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let service = Service(child);
    wait_for_port(port, "the Go exporter");
    wait_for_metrics(port);
    (service, port)
}

/// Waits until the exporter answers a whole scrape with 200: a listening socket alone was
/// seen to reset the first scrape on a loaded machine.
fn wait_for_metrics(port: u16) {
    use std::io::{Read, Write};
    for _ in 0..300 {
        let answered = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut c| {
            c.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut head = Vec::new();
            c.read_to_end(&mut head)?;
            Ok(head.starts_with(b"HTTP/1.0 200") || head.starts_with(b"HTTP/1.1 200"))
        });
        if answered.unwrap_or(false) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the Go exporter on port {port} did not answer /metrics with 200 within 15 s");
}

async fn scrape(port: u16, formats: &[&str]) -> Vec<Measurement> {
    let config = match formats.is_empty() {
        true => json!({}),
        false => json!({ "formats": formats }),
    };
    let ms = run_ok(&spec(
        "prometheus",
        &format!("http://127.0.0.1:{port}/metrics"),
        config,
    ))
    .await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_spec_tags(&ms);
    ms
}

fn cumulative<'a>(ms: &'a [Measurement], name: &str) -> &'a Cumulative {
    match find(ms, name, &[]).map(|m| &m.value) {
        Some(Value::Cumulative(c)) => c,
        other => panic!("{name}: expected a cumulative histogram, got {other:?}"),
    }
}

/// What every format carries the same way.
fn assert_counters_gauges_summary(ms: &[Measurement]) {
    assert_eq!(
        numeric_tagged(ms, "strata_test_requests_total", &[("code", "200")]),
        7.0
    );
    assert_eq!(
        numeric_tagged(ms, "strata_test_requests_total", &[("code", "500")]),
        2.0
    );
    assert_eq!(numeric(ms, "strata_test_temperature_celsius"), 21.5);
    assert_eq!(
        numeric_tagged(ms, "strata_test_summary_seconds", &[("quantile", "0.5")]),
        2.0
    );
    assert_eq!(numeric(ms, "strata_test_summary_seconds_sum"), 6.0);
    assert_eq!(numeric(ms, "strata_test_summary_seconds_count"), 3.0);
}

/// The classic histogram: its bucket numerics and one cumulative histogram in its own bounds.
fn assert_classic(ms: &[Measurement]) {
    let bucket = "strata_test_classic_seconds_bucket";
    for (le, n) in [("0.1", 1.0), ("0.5", 3.0), ("1.0", 4.0), ("+Inf", 5.0)] {
        assert_eq!(numeric_tagged(ms, bucket, &[("le", le)]), n, "le={le}");
    }
    assert_eq!(numeric(ms, "strata_test_classic_seconds_count"), 5.0);
    assert_eq!(numeric(ms, "strata_test_classic_seconds_sum"), 3.25);
    match cumulative(ms, "strata_test_classic_seconds") {
        Cumulative::Bounded(b) => {
            assert_eq!(b.bounds, vec![0.1, 0.5, 1.0]);
            assert_eq!(b.counts, vec![1, 2, 1, 1]);
            assert_eq!((b.count, b.sum), (5, 3.25));
        }
        other => panic!("classic histogram kept as {other:?}"),
    }
}

#[tokio::test]
async fn protobuf_scrape_carries_the_native_histogram_exactly() {
    let (_exporter, port) = exporter();
    let ms = scrape(port, &[]).await;
    assert_eq!(text(&ms, "format"), "protobuf");
    assert_counters_gauges_summary(&ms);
    assert_classic(&ms);
    let Cumulative::Exponential(e) = cumulative(&ms, "strata_test_native_seconds") else {
        panic!("the native histogram is not exponential");
    };
    // Schema 3 (bucket factor 1.1): bucket i covers (2^((i-1)/8), 2^(i/8)].
    let observed = [0.003, 0.003, 0.042, 0.042, 0.042, 1.7, 12.5];
    let mut expected: Vec<(i32, u64)> = Vec::new();
    for v in observed {
        let index = (f64::log2(v) * 8.0).ceil() as i32;
        match expected.last_mut() {
            Some((i, n)) if *i == index => *n += 1,
            _ => expected.push((index, 1)),
        }
    }
    assert_eq!(e.scale, 3);
    assert_eq!(e.count, 7);
    assert_eq!(e.zero_count, 0);
    assert_eq!(e.positive, expected);
    assert!(e.negative.is_empty());
    assert!((e.sum - observed.iter().sum::<f64>()).abs() < 1e-9);
    // Nothing else carries it: no classic numerics for a native-only histogram.
    assert!(!has(&ms, "strata_test_native_seconds_bucket"));
}

#[tokio::test]
async fn text_scrape_maps_counters_gauges_and_classic_histograms() {
    let (_exporter, port) = exporter();
    let ms = scrape(port, &["text"]).await;
    assert_eq!(text(&ms, "format"), "text");
    assert_counters_gauges_summary(&ms);
    assert_classic(&ms);
    // A native histogram reads in text as its +Inf bucket, count and sum only.
    assert_eq!(numeric(&ms, "strata_test_native_seconds_count"), 7.0);
}

#[tokio::test]
async fn openmetrics_scrape() {
    let (_exporter, port) = exporter();
    let ms = scrape(port, &["openmetrics"]).await;
    assert_eq!(text(&ms, "format"), "openmetrics");
    assert_counters_gauges_summary(&ms);
    assert_classic(&ms);
}

#[tokio::test]
async fn a_scrape_of_something_else_fails_with_the_line() {
    let (_exporter, port) = exporter();
    let s = spec(
        "prometheus",
        &format!("http://127.0.0.1:{port}/nothing"),
        json!({}),
    );
    let ms = run_ok(&s).await;
    assert_eq!(numeric(&ms, "code"), 404.0);
    assert_eq!(text(&ms, "status"), "unexpected status 404");
    let e = checks::validate(&spec(
        "prometheus",
        "http://x/",
        json!({"formats": ["yaml"]}),
    ));
    assert!(e
        .unwrap_err()
        .to_string()
        .starts_with("`config.formats`: unknown format"));
}
