//! Staleness end to end: a target scraped every 15 s disappears (Prometheus remote-writes a
//! stale marker for its series) and comes back three minutes later, while another target goes
//! on. Through a real server, PromQL answers as Prometheus does — the series is gone right
//! after the marker (not five minutes later), `absent` says so, `count` drops and recovers, and
//! it is back with its first new sample — and the native fetch counts only real samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use ingest::remote_write::proto::{Label, Sample, TimeSeries, WriteRequest};
use prost::Message;
use serde_json::Value;
use serve_common::{client, fetch, get_json, now_s, urlencode, Server};

/// Prometheus's stale marker.
const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;
const SCRAPE_MS: i64 = 15_000;

fn series(instance: &str, samples: Vec<Sample>) -> TimeSeries {
    let label = |name: &str, value: &str| Label {
        name: name.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    };
    TimeSeries {
        labels: vec![
            label("__name__", "up"),
            label("instance", instance),
            label("job", "node"),
        ],
        samples,
        ..TimeSeries::default()
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

/// An instant query's vector as (instance label or "", value) pairs, sorted.
fn instant(server: &Server, query: &str, t_ms: i64) -> Vec<(String, f64)> {
    let url = server.url(&format!(
        "/api/v1/query?query={}&time={}.{:03}",
        urlencode(query),
        t_ms / 1000,
        t_ms % 1000
    ));
    let doc = get_json(&url);
    assert_eq!(doc["status"], "success", "{query}: {doc}");
    let mut out: Vec<(String, f64)> = doc["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let instance = r["metric"]["instance"].as_str().unwrap_or("").to_owned();
            let value: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            (instance, value)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn a_target_that_disappears_is_gone_at_its_stale_marker_and_back_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now = now_s();
    let t0 = (now - now.rem_euclid(60) - 1200) * 1000;
    // `x`: up from t0 to t0 + 2 min, its stale marker one scrape later, back at t0 + 5 min
    // until t0 + 7 min. `y`: up all along.
    let up = |from: i64, to: i64| -> Vec<Sample> {
        (from..=to)
            .step_by(SCRAPE_MS as usize)
            .map(|timestamp| Sample {
                value: 1.0,
                timestamp,
            })
            .collect()
    };
    let gone_ms = t0 + 120_000 + SCRAPE_MS;
    let back_ms = t0 + 300_000;
    let mut x = up(t0, t0 + 120_000);
    x.push(Sample {
        value: f64::from_bits(STALE_NAN_BITS),
        timestamp: gone_ms,
    });
    x.extend(up(back_ms, back_ms + 120_000));
    let x_real = x.len() - 1;
    remote_write(
        &server,
        vec![series("x", x), series("y", up(t0, t0 + 420_000))],
    );

    let both = vec![("x".to_owned(), 1.0), ("y".to_owned(), 1.0)];
    let y_only = vec![("y".to_owned(), 1.0)];
    assert_eq!(instant(&server, "up", gone_ms - 1), both);
    // Right at the marker and until the target is back: gone (without the marker, the 5-minute
    // lookback would keep it until t0 + 7 min).
    for t in [gone_ms, gone_ms + 1_000, back_ms - 1] {
        assert_eq!(instant(&server, "up", t), y_only, "at t0 + {} ms", t - t0);
        assert_eq!(instant(&server, "count(up)", t), [(String::new(), 1.0)]);
        let absent = instant(&server, r#"absent(up{instance="x"})"#, t);
        assert_eq!(absent.len(), 1, "absent at t0 + {} ms", t - t0);
    }
    assert_eq!(instant(&server, "up", back_ms), both);
    assert_eq!(
        instant(&server, "count(up)", back_ms),
        [(String::new(), 2.0)]
    );
    assert_eq!(instant(&server, r#"absent(up{instance="x"})"#, back_ms), []);
    // Range functions skip the marker: 9 real samples before it in the 3-minute window.
    let counted = instant(
        &server,
        r#"count_over_time(up{instance="x"}[3m])"#,
        gone_ms + 30_000,
    );
    assert_eq!(counted, [("x".to_owned(), 9.0)]);

    // The native fetch: the marker is not a sample (count), nor a value (no NaN anywhere).
    let fetched = fetch(&server, "and(__name:up,instance:x)", now, "");
    let data = fetched["series"][0]["data"].as_array().unwrap();
    let count: f64 = data.iter().filter_map(|d| d["count"].as_f64()).sum();
    assert_eq!(count, x_real as f64, "{fetched}");
    for d in data {
        for field in ["sum", "min", "max", "last"] {
            let v = &d[field];
            assert!(v.is_null() || v.as_f64().is_some_and(f64::is_finite), "{d}");
        }
    }
    let marker_minute = gone_ms - gone_ms.rem_euclid(60_000);
    let slice: Vec<&Value> = data
        .iter()
        .filter(|d| d["ts_ms"].as_i64() == Some(marker_minute))
        .collect();
    assert_eq!(slice.len(), 1, "{fetched}");
    assert_eq!(slice[0]["count"].as_f64(), Some(1.0), "{fetched}");
}
