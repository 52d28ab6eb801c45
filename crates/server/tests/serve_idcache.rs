//! The ingest paths' series id caches (Influx, remote write), through real servers: a cached id
//! always names the series the bytes name (also when two servers number their series
//! differently), a kind clash is refused the same way whether the series is cached or not, and
//! series far beyond the cache bound all land. Read back through `/api/strata/v1/fetch`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::collections::HashMap;

use ingest::remote_write::proto::{self, Label, TimeSeries, WriteRequest};
use prost::Message;
use serde_json::Value;
use serve_common::{client, fetch, now_s, numeric_slices, series, Server};

/// The environment variable that lowers the servers' cache bound (entries per cache).
const ENTRIES_MAX_ENV: &str = "STRATA_SERIES_CACHE_ENTRIES_MAX";

fn post(url: &str, body: impl Into<reqwest::blocking::Body>) -> (u16, String) {
    let response = client().post(url).body(body).send().unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

fn influx(server: &Server, body: &str) -> (u16, String) {
    post(&server.url("/api/v2/write?precision=ms"), body.to_owned())
}

fn remote_write(server: &Server, timeseries: Vec<TimeSeries>) -> (u16, String) {
    let raw = WriteRequest { timeseries }.encode_to_vec();
    let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    let response = client()
        .post(server.url("/api/v1/write"))
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .body(body)
        .send()
        .unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

fn float_series(labels: Vec<Label>, value: f64, ts_ms: i64) -> TimeSeries {
    TimeSeries {
        labels,
        samples: vec![proto::Sample {
            value,
            timestamp: ts_ms,
        }],
        ..TimeSeries::default()
    }
}

/// A minute boundary plus 10 s, some minutes ago, and the `i`th second after it.
fn base_ms() -> i64 {
    let s = now_s() - 600;
    (s - s.rem_euclid(60) + 10) * 1000
}

/// Every series of a fetch result: canonical key → (count, last) of its one slice.
fn lasts(result: &Value) -> HashMap<String, (u64, f64)> {
    result["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let slices = numeric_slices(s);
            assert_eq!(slices.len(), 1, "{s}");
            (
                s["key"].as_str().unwrap().to_owned(),
                (
                    slices[0]["count"].as_u64().unwrap(),
                    slices[0]["last"].as_f64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn cached_ids_name_the_series_the_bytes_name_on_each_server() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start(dir_a.path(), &[]);
    let b = Server::start(dir_b.path(), &[]);
    let ts = base_ms();
    // B numbers its series differently: other series first, created in another order.
    let pad = format!("pad,suite=ids z=1,y=2,x=3 {ts}\n");
    assert_eq!(influx(&b, &pad).0, 204);
    let hosts = ["h0", "h1", "h2", "h3"];
    // Round 0 creates the series (misses); rounds 1 and 2 find them cached, in another order
    // of lines and fields, with values that tell series, server and round apart.
    for round in 0..3i64 {
        for (server, offset) in [(&a, 1000.0), (&b, 2000.0)] {
            let mut lines = String::new();
            let mut rw = Vec::new();
            let order: Vec<usize> = if round == 1 {
                vec![3, 1, 0, 2]
            } else {
                vec![0, 1, 2, 3]
            };
            for &h in &order {
                let v = offset + (h as f64) * 10.0 + round as f64;
                let t = ts + round * 1000;
                if round == 1 {
                    lines.push_str(&format!(
                        "cpu,suite=ids,host={} sys={},user={} {t}\n",
                        hosts[h],
                        v + 0.5,
                        v
                    ));
                } else {
                    lines.push_str(&format!(
                        "cpu,suite=ids,host={} user={},sys={} {t}\n",
                        hosts[h],
                        v,
                        v + 0.5
                    ));
                }
                rw.push(float_series(
                    vec![
                        label("__name__", "rw"),
                        label("suite", "ids"),
                        label("host", hosts[h]),
                    ],
                    v,
                    t,
                ));
            }
            let (status, text) = influx(server, &lines);
            assert_eq!(status, 204, "{text}");
            let (status, text) = remote_write(server, rw);
            assert_eq!(status, 204, "{text}");
        }
    }
    for (server, offset) in [(&a, 1000.0), (&b, 2000.0)] {
        let got = lasts(&fetch(server, "and(suite:ids)", ts / 1000, ""));
        for (h, host) in hosts.iter().enumerate() {
            let v = offset + (h as f64) * 10.0 + 2.0;
            let user = got[&format!("cpu_user|ST[host:{host},suite:ids]")];
            assert_eq!(user, (3, v), "{host} {got:?}");
            let sys = got[&format!("cpu_sys|ST[host:{host},suite:ids]")];
            assert_eq!(sys, (3, v + 0.5), "{host} {got:?}");
            let rw = got[&format!("rw|ST[host:{host},suite:ids]")];
            assert_eq!(rw, (3, v), "{host} {got:?}");
        }
    }
    let pads = lasts(&fetch(&b, "and(suite:ids)", ts / 1000, ""));
    assert_eq!(pads["pad_z|ST[suite:ids]"], (1, 1.0));
    assert!(!lasts(&fetch(&a, "and(suite:ids)", ts / 1000, "")).contains_key("pad_z|ST[suite:ids]"));
}

/// A native histogram sample (gauge: one observation of 1).
fn native_series(labels: Vec<Label>, ts_ms: i64) -> TimeSeries {
    TimeSeries {
        labels,
        histograms: vec![proto::Histogram {
            count: Some(proto::Count::CountInt(1)),
            sum: 1.0,
            schema: 0,
            zero_count: Some(proto::ZeroCount::ZeroCountInt(0)),
            positive_spans: vec![proto::BucketSpan {
                offset: 1,
                length: 1,
            }],
            positive_deltas: vec![1],
            reset_hint: 3,
            timestamp: ts_ms,
            ..proto::Histogram::default()
        }],
        ..TimeSeries::default()
    }
}

#[test]
fn a_kind_clash_is_refused_the_same_whether_the_series_is_cached_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts = base_ms();
    // Histograms first: over httptrap for the Influx series, over remote write for its own.
    let (status, text) = post(
        &server.url("/module/httptrap/c/s"),
        format!(
            r#"{{"lat_v|ST[host:a]": {{"_type": "h", "_value": ["H[1.0e+00]=1"], "_ts": {ts}}}}}"#
        ),
    );
    assert_eq!(status, 200, "{text}");
    let labels = || vec![label("__name__", "rw_lat"), label("host", "a")];
    let (status, text) = remote_write(&server, vec![native_series(labels(), ts)]);
    assert_eq!(status, 204, "{text}");

    // The same numeric write three times: first by key (not cached yet), then by id.
    let line = format!("lat,__check=c,host=a v=1 {ts}\nok,host=a v=5 {ts}\n");
    let replies: Vec<_> = (0..3).map(|_| influx(&server, &line)).collect();
    for reply in &replies {
        assert_eq!(reply, &replies[0]);
    }
    let (status, text) = &replies[0];
    assert_eq!(*status, 400, "{text}");
    assert!(
        text.contains("partial write: metric `lat_v|ST[__check:c,host:a]`: is histogram and cannot take a numeric value"),
        "{text}"
    );
    let replies: Vec<_> = (0..3)
        .map(|i| {
            remote_write(
                &server,
                vec![
                    float_series(labels(), 1.0, ts + i),
                    float_series(
                        vec![label("__name__", "rw_ok"), label("host", "a")],
                        2.0,
                        ts,
                    ),
                ],
            )
        })
        .collect();
    for reply in &replies {
        assert_eq!(reply, &replies[0]);
    }
    let (status, text) = &replies[0];
    assert_eq!(*status, 400, "{text}");
    assert!(
        text.contains("metric `rw_lat|ST[host:a]`: is histogram and cannot take a numeric value"),
        "{text}"
    );
    // The good series of those requests are stored; the histogram series kept its kind.
    let got = lasts(&fetch(&server, "and(__name:ok_v)", ts / 1000, ""));
    assert_eq!(got["ok_v|ST[host:a]"], (1, 5.0));
    let got = lasts(&fetch(&server, "and(__name:rw_ok)", ts / 1000, ""));
    assert_eq!(got["rw_ok|ST[host:a]"], (1, 2.0));
    let hist = fetch(&server, "and(__name:rw_lat)", ts / 1000, "");
    assert_eq!(
        series(&hist, "rw_lat|ST[host:a]")["kind"],
        "histogram",
        "{hist}"
    );
}

#[test]
fn series_far_beyond_the_cache_bound_all_land() {
    let dir = tempfile::tempdir().unwrap();
    // 64 entries per cache (one per shard): nearly every series is evicted before it is seen
    // again, and shards are emptied all the time.
    let server = Server::start_with(dir.path(), &[], &[(ENTRIES_MAX_ENV, "64")]);
    let ts = base_ms();
    let (hosts, fields) = (200usize, 5usize);
    for round in 0..3i64 {
        let mut lines = String::new();
        let mut rw = Vec::new();
        for h in 0..hosts {
            lines.push_str(&format!("m,suite=cap,host=h{h} "));
            for f in 0..fields {
                let sep = if f == 0 { "" } else { "," };
                lines.push_str(&format!("{sep}f{f}={}", h * 100 + f * 10 + round as usize));
            }
            lines.push_str(&format!(" {}\n", ts + round * 1000));
            rw.push(float_series(
                vec![
                    label("__name__", "rw_cap"),
                    label("suite", "cap"),
                    label("host", &format!("h{h}")),
                ],
                (h * 100) as f64 + round as f64,
                ts + round * 1000,
            ));
        }
        let (status, text) = influx(&server, &lines);
        assert_eq!(status, 204, "{text}");
        let (status, text) = remote_write(&server, rw);
        assert_eq!(status, 204, "{text}");
    }
    let got = lasts(&fetch(&server, "and(suite:cap)", ts / 1000, ""));
    assert_eq!(got.len(), hosts * fields + hosts);
    for h in 0..hosts {
        for f in 0..fields {
            let key = format!("m_f{f}|ST[host:h{h},suite:cap]");
            assert_eq!(got[&key], (3, (h * 100 + f * 10 + 2) as f64), "{key}");
        }
        let key = format!("rw_cap|ST[host:h{h},suite:cap]");
        assert_eq!(got[&key], (3, (h * 100 + 2) as f64), "{key}");
    }
}
