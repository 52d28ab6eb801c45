//! Exemplars end to end: remote write 1.0 bodies carry them to `strata serve`, which keeps a
//! bounded number per series (the oldest evicted) and serves them on `/api/v1/query_exemplars`
//! in Prometheus's shape, selected by the query's selectors and the time range, and still there
//! after the process is killed with SIGKILL and started again. (Remote write 2.0 exemplars from
//! Prometheus's own library: `serve_remote_write2.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use ingest::remote_write::proto::{Exemplar, Label, Sample, TimeSeries, WriteRequest};
use prost::Message;
use serde_json::{json, Value};
use serve_common::{client, get_json, now_s, urlencode, Server};

/// Exemplars kept per series (the server's `PER_SERIES_MAX`).
const PER_SERIES: usize = 16;

fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.into(),
        value: value.into(),
    }
}

fn series(labels: &[(&str, &str)], ts_ms: i64, exemplars: Vec<Exemplar>) -> TimeSeries {
    TimeSeries {
        labels: labels.iter().map(|(n, v)| label(n, v)).collect(),
        samples: vec![Sample {
            value: 1.0,
            timestamp: ts_ms,
        }],
        exemplars,
        ..TimeSeries::default()
    }
}

fn exemplar(trace: &str, value: f64, ts_ms: i64) -> Exemplar {
    Exemplar {
        labels: vec![label("trace_id", trace)],
        value,
        timestamp: ts_ms,
    }
}

fn post(server: &Server, timeseries: Vec<TimeSeries>) {
    let body = snap::raw::Encoder::new()
        .compress_vec(&WriteRequest { timeseries }.encode_to_vec())
        .unwrap();
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

fn exemplars(server: &Server, query: &str, start_ms: i64, end_ms: i64) -> Value {
    let url = server.url(&format!(
        "/api/v1/query_exemplars?query={}&start={}&end={}",
        urlencode(query),
        start_ms as f64 / 1000.0,
        end_ms as f64 / 1000.0
    ));
    let got = get_json(&url);
    assert_eq!(got["status"], "success", "{got}");
    got["data"].clone()
}

/// Unix seconds as Prometheus writes a time: a whole number when there are no milliseconds.
fn seconds(ms: i64) -> Value {
    if ms % 1000 == 0 {
        json!(ms / 1000)
    } else {
        json!(ms as f64 / 1000.0)
    }
}

fn traces(series: &Value) -> Vec<String> {
    series["exemplars"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["labels"]["trace_id"].as_str().unwrap().to_owned())
        .collect()
}

/// What the queries below answer, before and after a SIGKILL restart.
fn check(server: &Server, base_ms: i64) {
    let (from, to) = (base_ms - 60_000, base_ms + 60_000);
    // The per-series bound kept the newest 16 of the 20 sent, oldest first.
    let a = exemplars(server, "req_total{path=\"/a\"}", from, to);
    assert_eq!(a.as_array().unwrap().len(), 1, "{a}");
    let expected: Vec<String> = (20 - PER_SERIES..20).map(|i| format!("t{i}")).collect();
    assert_eq!(traces(&a[0]), expected, "{a}");
    // Prometheus's shape exactly: sorted series labels, value as a string, time in seconds.
    let b = exemplars(server, "req_total{path=\"/b\"}", from, to);
    assert_eq!(
        b,
        json!([{
            "seriesLabels": {"__name__": "req_total", "job": "api", "path": "/b"},
            "exemplars": [{
                "labels": {"span_id": "s1", "trace_id": "b"},
                "value": "0.25",
                "timestamp": seconds(base_ms + 5_000),
            }],
        }])
    );
    // The time range is inclusive at both ends; series with nothing in it are left out.
    let window = exemplars(server, "req_total", base_ms + 10_000, base_ms + 12_000);
    assert_eq!(window.as_array().unwrap().len(), 1, "{window}");
    assert_eq!(traces(&window[0]), ["t10", "t11", "t12"]);
    // Every selector of an expression selects; regex and negative matchers too.
    let both = exemplars(
        server,
        "rate(req_total{path=~\"/b|/c\"}[5m]) / on() group_left sum(lat_seconds)",
        from,
        to,
    );
    let names: Vec<&str> = both
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["seriesLabels"]["__name__"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lat_seconds", "req_total"], "{both}");
    let not_a = exemplars(server, "{__name__=~\"req_.*\",path!=\"/a\"}", from, to);
    assert_eq!(not_a.as_array().unwrap().len(), 1, "{not_a}");
    assert_eq!(not_a[0]["seriesLabels"]["path"], "/b");
    // A series without exemplars, or an unknown name: nothing.
    assert_eq!(exemplars(server, "plain", from, to), json!([]));
    assert_eq!(exemplars(server, "nope", from, to), json!([]));
}

#[test]
fn exemplars_are_selected_bounded_and_kept_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let base_ms = (now_s() - 120) * 1000;
    let many: Vec<Exemplar> = (0..20)
        .map(|i| exemplar(&format!("t{i}"), i as f64, base_ms + i * 1000))
        .collect();
    let mut b = exemplar("b", 0.25, base_ms + 5_000);
    b.labels.insert(0, label("span_id", "s1"));
    post(
        &server,
        vec![
            series(
                &[("__name__", "req_total"), ("job", "api"), ("path", "/a")],
                base_ms,
                many,
            ),
            series(
                &[("job", "api"), ("path", "/b"), ("__name__", "req_total")],
                base_ms,
                vec![b],
            ),
            series(
                &[("__name__", "lat_seconds"), ("job", "web")],
                base_ms,
                vec![exemplar("c", 0.5, base_ms + 7_000)],
            ),
            series(&[("__name__", "plain")], base_ms, vec![]),
        ],
    );
    // Out of order (older than the series' newest) and duplicate exemplars are not kept.
    post(
        &server,
        vec![series(
            &[("__name__", "req_total"), ("job", "api"), ("path", "/a")],
            base_ms + 1,
            vec![
                exemplar("old", 1.0, base_ms),
                exemplar("t19", 19.0, base_ms + 19_000),
            ],
        )],
    );
    check(&server, base_ms);

    // A query without a selector is refused as Prometheus refuses it.
    let refused = client()
        .get(server.url("/api/v1/query_exemplars?query=1"))
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let body: Value = refused.json().unwrap();
    assert_eq!(body["errorType"], "bad_data", "{body}");

    // SIGKILL: what was acknowledged is read back from the exemplar log.
    drop(server);
    let server = Server::start(dir.path(), &[]);
    check(&server, base_ms);
}
