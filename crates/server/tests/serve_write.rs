//! Every write endpoint of `strata serve`, each written to a real server and read back through
//! `/api/strata/v1/fetch`; gzip; the rejection, secret, token and size rules; `/metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::io::Write;

use prost::Message;
use serde_json::{json, Value};
use serve_common::{
    client, eventually, fetch, get_json, metrics_text, now_s, numeric_slices, series, urlencode,
    Server,
};

fn post(url: &str, body: impl Into<reqwest::blocking::Body>) -> (u16, String) {
    let response = client().post(url).body(body).send().unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn config_file(dir: &std::path::Path, text: &str) -> String {
    let path = dir.join("strata.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A timestamp near now (inside the ingest window), at a whole minute plus 10 s.
fn ts_ms() -> i64 {
    let s = now_s();
    (s - s.rem_euclid(60) + 10) * 1000
}

#[test]
fn httptrap_numeric_text_histogram_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts = ts_ms();
    let body = json!({
        "requests": {"_type": "L", "_value": 42, "_ts": ts},
        "version": {"_type": "s", "_value": "1.alpha", "_ts": ts},
        "lat|ST[db:orders]": {"_type": "h", "_value": ["H[1.2e-03]=5", 0.004], "_ts": ts},
        "bytes": {"_type": "L", "_value": 100, "_fl": "+", "_ts": ts},
        "bytes2": {"_type": "n", "_value": [1, 3], "_ts": ts},
        "bad": {"_type": "x", "_value": 1},
    });
    let (status, text) = post(
        &server.url("/module/httptrap/web1/anything"),
        body.to_string(),
    );
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["stats"], 5);
    assert_eq!(reply["filtered"], 1);
    assert!(reply["error"].as_str().unwrap().contains("bad"), "{reply}");

    let result = fetch(&server, "and(__check:web1)", ts / 1000, "");
    let requests = series(&result, "requests|ST[__check:web1]");
    assert_eq!(requests["kind"], "numeric");
    let slices = numeric_slices(requests);
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0]["count"], 1);
    assert_eq!(slices[0]["last"], 42.0);
    assert_eq!(slices[0]["ts_ms"], ts - 10_000);
    let mean = numeric_slices(series(&result, "bytes2|ST[__check:web1]"))[0]["last"].clone();
    assert_eq!(mean, 2.0, "a numeric _value array stores its mean");

    let version = series(&result, "version|ST[__check:web1]");
    assert_eq!(version["data"], json!([{"ts_ms": ts, "value": "1.alpha"}]));

    let lat = series(&result, "lat|ST[__check:web1,db:orders]");
    let filled: Vec<&Value> = lat["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| !d["value"].is_null())
        .collect();
    assert_eq!(filled.len(), 1);
    // H[1.2e-03]=5 is 5 in bin (12, -3); 0.004 is 1 in bin (40, -3).
    assert_eq!(
        filled[0]["value"]["bins"],
        json!([[12, -3, 5], [40, -3, 1]])
    );
    let b64 = filled[0]["value"]["b64"].as_str().unwrap();
    assert_eq!(hist::Histogram::from_base64(b64).unwrap().sample_count(), 6);

    // Transforms answer numbers.
    let counted = fetch(
        &server,
        "and(__name:lat)",
        ts / 1000,
        &format!("&transform={}", urlencode("count")),
    );
    let counts: Vec<Value> = counted["series"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["value"].clone())
        .filter(|v| v != &json!(0))
        .collect();
    assert_eq!(counts, vec![json!(6)]);
    let q = fetch(
        &server,
        "and(__name:lat)",
        ts / 1000,
        &format!("&transform={}", urlencode("quantile:0,1")),
    );
    let qs: Vec<Value> = q["series"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["value"].clone())
        .filter(|v| !v.is_null())
        .collect();
    // The lowest samples are in bin [1.2e-3, 1.3e-3), the highest in [4.0e-3, 4.1e-3).
    let qs = qs[0].as_array().unwrap();
    let (q0, q1) = (qs[0].as_f64().unwrap(), qs[1].as_f64().unwrap());
    assert!((0.0012..0.0013).contains(&q0), "{qs:?}");
    assert!((0.0040..=0.0041).contains(&q1), "{qs:?}");

    // find lists them with kind and activity.
    let found = get_json(&server.url(&format!(
        "/api/strata/v1/find?query={}",
        urlencode("and(__check:web1)")
    )));
    let found = found.as_array().unwrap();
    assert_eq!(found.len(), 5);
    let req = found.iter().find(|s| s["name"] == "requests").unwrap();
    assert_eq!(req["activity_ms"], json!([ts, ts]));
    assert_eq!(req["tags"], json!(["__check:web1"]));
}

#[test]
fn httptrap_stopped_parse_stores_nothing_and_kind_clash_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, text) = post(
        &server.url("/module/httptrap/c/s"),
        r#"{"early": 1, "x": [1, }"#,
    );
    assert_eq!(status, 400, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["stats"], 0);
    assert!(
        reply["error"].as_str().unwrap().contains("line 1"),
        "{reply}"
    );
    let found = get_json(&server.url("/api/strata/v1/find?query=and(__name:early)"));
    assert_eq!(found, json!([]), "nothing of a stopped body is stored");

    let (status, _) = post(&server.url("/module/httptrap/c/s"), r#"{"k": 1}"#);
    assert_eq!(status, 200);
    let (status, text) = post(
        &server.url("/module/httptrap/c/s"),
        r#"{"k": "text", "j": 2}"#,
    );
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["stats"], 1);
    assert_eq!(reply["filtered"], 1);
    assert!(
        reply["error"].as_str().unwrap().contains("k|ST[__check:c]"),
        "{reply}"
    );
}

#[test]
fn httptrap_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(
        dir.path(),
        "[httptrap]\nsecret = \"global\"\n[httptrap.checks]\nc1 = \"s1\"\n",
    );
    let server = Server::start(&dir.path().join("data"), &["--config", &file]);
    let body = r#"{"v": 1}"#;
    assert_eq!(post(&server.url("/module/httptrap/c1/s1"), body).0, 200);
    let (status, text) = post(&server.url("/module/httptrap/c1/global"), body);
    assert_eq!(
        status, 403,
        "a per-check secret replaces the global one: {text}"
    );
    assert!(serde_json::from_str::<Value>(&text).unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("c1"));
    assert_eq!(post(&server.url("/module/httptrap/c2/global"), body).0, 200);
    assert_eq!(post(&server.url("/module/httptrap/c2/nope"), body).0, 403);
    assert_eq!(
        post(&server.url("/write/c2"), body).0,
        403,
        "agent style has no secret"
    );
    drop(server);

    // No secret configured: any secret on loopback (every other test), none elsewhere.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--http", "0.0.0.0:0", "--insecure-open"]);
    let port = server
        .http
        .as_ref()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let url = format!("http://127.0.0.1:{port}/module/httptrap/c/any");
    let (status, text) = post(&url, body);
    assert_eq!(status, 403, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert!(
        reply["error"].as_str().unwrap().contains("loopback"),
        "{reply}"
    );
}

#[test]
fn influx_round_trip_precision_errors_and_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts_s = ts_ms() / 1000;
    let body = format!("cpu,host=a user=1.5,sys=2i {ts_s}\ncpu,host=a user=2.5 {ts_s}\n");
    let (status, text) = post(
        &server.url("/api/v2/write?org=o&bucket=b&precision=s"),
        body,
    );
    assert_eq!(status, 204, "{text}");
    // v1 path, ms precision, gzip.
    let body = format!("mem,host=a used=7 {}\n", ts_s * 1000 + 1);
    let response = client()
        .post(server.url("/write?db=x&precision=ms"))
        .header("Content-Encoding", "gzip")
        .body(gzip(body.as_bytes()))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);

    let result = fetch(&server, "and(host:a)", ts_s, "");
    // Two samples at the same second: the later line wins (one sample per millisecond).
    let user = numeric_slices(series(&result, "cpu_user|ST[host:a]"));
    assert_eq!(
        (user[0]["count"].clone(), user[0]["last"].clone()),
        (json!(1), json!(2.5))
    );
    assert_eq!(
        numeric_slices(series(&result, "cpu_sys|ST[host:a]"))[0]["sum"],
        2.0
    );
    assert_eq!(
        numeric_slices(series(&result, "mem_used|ST[host:a]"))[0]["sum"],
        7.0
    );

    let (status, text) = post(
        &server.url("/api/v2/write?precision=s"),
        format!("ok,host=b v=1 {ts_s}\nok,host=b v= {ts_s}\n"),
    );
    assert_eq!(status, 400);
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["code"], "invalid");
    assert!(
        reply["message"].as_str().unwrap().contains("line 2"),
        "{reply}"
    );
    // The good line of a partial write is stored.
    let result = fetch(&server, "and(host:b)", ts_s, "");
    assert_eq!(
        numeric_slices(series(&result, "ok_v|ST[host:b]"))[0]["sum"],
        1.0
    );

    let (status, text) = post(&server.url("/api/v2/write?precision=weeks"), "a v=1");
    assert_eq!(status, 400);
    assert!(text.contains("precision"), "{text}");
}

#[test]
fn remote_write_round_trip_and_bad_body() {
    use ingest::remote_write::proto::{Label, Sample, TimeSeries, WriteRequest};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts = ts_ms();
    let label = |n: &str, v: &str| Label {
        name: n.as_bytes().to_vec(),
        value: v.as_bytes().to_vec(),
    };
    let request = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![
                label("__name__", "http_requests_total"),
                label("job", "api"),
            ],
            samples: vec![
                Sample {
                    value: 10.0,
                    timestamp: ts,
                },
                Sample {
                    value: 15.0,
                    timestamp: ts + 15_000,
                },
            ],
            ..TimeSeries::default()
        }],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap();
    let response = client()
        .post(server.url("/api/v1/write"))
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .header("X-Prometheus-Remote-Write-Version", "0.1.0")
        .body(body)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
    let result = fetch(&server, "and(job:api)", ts / 1000, "");
    let slices = numeric_slices(series(&result, "http_requests_total|ST[job:api]"));
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0]["count"], 2);
    assert_eq!(slices[0]["first"], 10.0);
    assert_eq!(slices[0]["last"], 15.0);

    // Not snappy: permanently bad, so 400 (Prometheus drops it rather than retrying).
    let (status, text) = post(&server.url("/api/v1/write"), "not snappy");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("snappy"), "{text}");
}

#[test]
fn otlp_protobuf_and_json_with_partial_success() {
    use ingest::otlp::proto::{
        any_value, metric, number_data_point, AnyValue, ExportMetricsServiceRequest, Gauge,
        KeyValue, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts = ts_ms();
    let point = |v: f64| NumberDataPoint {
        attributes: vec![KeyValue {
            key: "host".to_owned(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue("h1".to_owned())),
            }),
        }],
        start_time_unix_nano: 0,
        time_unix_nano: ts as u64 * 1_000_000,
        value: Some(number_data_point::Value::AsDouble(v)),
        exemplars: Vec::new(),
    };
    let request = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: None,
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![
                    Metric {
                        name: "temp".to_owned(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: vec![point(21.5)],
                        })),
                        ..Metric::default()
                    },
                    // Unspecified temporality: rejected, reported in partial_success.
                    Metric {
                        name: "odd".to_owned(),
                        data: Some(metric::Data::Sum(Sum {
                            data_points: vec![point(1.0)],
                            ..Sum::default()
                        })),
                        ..Metric::default()
                    },
                ],
            }],
        }],
    };
    let response = client()
        .post(server.url("/v1/metrics"))
        .header("Content-Type", "application/x-protobuf")
        .header("Content-Encoding", "gzip")
        .body(gzip(&request.encode_to_vec()))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/x-protobuf"
    );
    let bytes = response.bytes().unwrap();
    // ExportMetricsServiceResponse: field 1 (partial_success) { field 1 = 1 rejected, … }.
    assert_eq!(&bytes[..1], &[0x0a]);
    assert_eq!(&bytes[2..4], &[0x08, 0x01], "{bytes:?}");

    let json_body = json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "hum", "gauge": {"dataPoints": [
            {"asDouble": 40.0, "timeUnixNano": (ts as u64 * 1_000_000).to_string(),
             "attributes": [{"key": "host", "value": {"stringValue": "h1"}}]}]}}
    ]}]}]});
    let response = client()
        .post(server.url("/v1/metrics"))
        .header("Content-Type", "application/json")
        .body(json_body.to_string())
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().unwrap(), json!({}));

    let result = fetch(&server, "and(host:h1)", ts / 1000, "");
    assert_eq!(
        numeric_slices(series(&result, "temp|ST[host:h1]"))[0]["last"],
        21.5
    );
    assert_eq!(
        numeric_slices(series(&result, "hum|ST[host:h1]"))[0]["last"],
        40.0
    );

    let response = client()
        .post(server.url("/v1/metrics"))
        .header("Content-Type", "application/json")
        .body("{\"resourceMetrics\": 5}")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let text = response.text().unwrap();
    assert!(text.contains("body"), "{text}");
    let (status, _) = post(&server.url("/v1/metrics"), "x");
    assert_eq!(status, 415, "no Content-Type");
}

/// A broker forwarding cumulative histograms it stored during an outage, after a newer one
/// came: the older adds nothing (its counts are in the newer one's difference), `/metrics`
/// counts it, and the counts read back are the newest cumulative total.
#[test]
fn older_cumulative_histograms_add_nothing_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts = ts_ms();
    for (at, n) in [
        (ts - 240_000, 5),
        (ts - 60_000, 40),
        (ts - 180_000, 12),
        (ts, 41),
    ] {
        let body =
            json!({"logins": {"_type": "H", "_value": [format!("H[1.5e+00]={n}")], "_ts": at}});
        let (status, text) = post(&server.url("/module/httptrap/broker/x"), body.to_string());
        assert_eq!(status, 200, "{text}");
    }
    let counted = fetch(
        &server,
        "and(__name:logins)",
        ts / 1000,
        &format!("&transform={}", urlencode("count")),
    );
    let total: f64 = counted["series"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["value"].as_f64())
        .sum();
    assert_eq!(total, 41.0, "{counted}");
    let metrics = metrics_text(&server);
    assert!(
        metrics.contains("\nstrata_store_cumulative_left_out_total 1\n"),
        "{metrics}"
    );
}

#[test]
fn statsd_aggregates_per_interval_and_graphite_lines_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(
        dir.path(),
        "[statsd]\nflush_interval_ms = 200\n[graphite]\nflush_interval_ms = 100\n",
    );
    let server = Server::start(&dir.path().join("data"), &["--config", &file]);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = server.statsd.clone().unwrap();
    // One datagram: counters and a timer, sent as one so they land in one interval.
    socket
        .send_to(
            b"hits:2|c|#env:t\nhits:3|c|#env:t\nlat:10|ms|#env:t\nlat:20|ms|#env:t\n",
            &target,
        )
        .unwrap();
    let now = now_s();
    let result = eventually("statsd samples", || {
        let r = fetch(&server, "and(env:t)", now, "");
        // The index may list a series a moment before its batch is readable.
        let hist_filled = r["series"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "histogram"
                && s["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|d| !d["value"].is_null())
        });
        let counter_filled = r["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| !numeric_slices(s).is_empty());
        (hist_filled && counter_filled).then_some(r)
    });
    let hits = numeric_slices(series(&result, "hits|ST[env:t]"));
    let total: f64 = hits.iter().map(|s| s["sum"].as_f64().unwrap()).sum();
    assert_eq!(total, 5.0);
    let lat = series(&result, "lat|ST[env:t]");
    assert_eq!(lat["kind"], "histogram");

    let mut stream = std::net::TcpStream::connect(server.graphite.clone().unwrap()).unwrap();
    let ts_s = ts_ms() / 1000;
    write!(
        stream,
        "servers.a.load 1.5 {ts_s}\nservers.a.load;dc=x 2.5 {ts_s}\n"
    )
    .unwrap();
    stream.flush().unwrap();
    let result = eventually("graphite samples", || {
        let r = fetch(&server, "and(__name:servers.a.load)", ts_s, "");
        let filled = r["series"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| !numeric_slices(s).is_empty())
            .count();
        (filled == 2).then_some(r)
    });
    assert_eq!(
        numeric_slices(series(&result, "servers.a.load"))[0]["last"],
        1.5
    );
    assert_eq!(
        numeric_slices(series(&result, "servers.a.load|ST[dc:x]"))[0]["last"],
        2.5
    );
    drop(stream);

    let metrics = metrics_text(&server);
    assert!(
        metrics.contains("strata_ingest_samples_accepted_total{endpoint=\"statsd\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics.contains("strata_http_requests_total{endpoint=\"fetch\",code=\"2xx\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("strata_http_request_duration_seconds_count{endpoint=\"fetch\"}"));
}

#[test]
fn token_size_limit_and_gzip_bomb() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(
        dir.path(),
        "[auth]\ntoken = \"t0ken\"\n[limits]\nbody_size_bytes_max = 1000\n",
    );
    let server = Server::start(&dir.path().join("data"), &["--config", &file]);
    let url = server.url("/module/httptrap/c/s");
    let response = client().post(&url).body("{\"a\":1}").send().unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert!(response.headers().contains_key("www-authenticate"));
    assert!(response.json::<Value>().unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("token"));
    let wrong = client()
        .get(server.url("/api/strata/v1/find?query=and(__name:a)"))
        .bearer_auth("t0ke")
        .send()
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401, "reads need the token too");
    let health = client().get(server.url("/health")).send().unwrap();
    assert_eq!(health.status().as_u16(), 200, "health needs no token");
    let ok = client()
        .post(&url)
        .bearer_auth("t0ken")
        .body("{\"a\":1}")
        .send()
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let influx_style = client()
        .post(server.url("/api/v2/write?precision=s"))
        .header("Authorization", "Token t0ken")
        .body(format!("tok v=1 {}", now_s()))
        .send()
        .unwrap();
    assert_eq!(
        influx_style.status().as_u16(),
        204,
        "InfluxDB clients send `Token`"
    );

    let big = format!("{{\"a\":\"{}\"}}", "x".repeat(2000));
    let response = client()
        .post(&url)
        .bearer_auth("t0ken")
        .body(big)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let reply: Value = response.json().unwrap();
    assert!(reply["error"].as_str().unwrap().contains("1000"), "{reply}");
    // Small on the wire, over the limit once decompressed.
    let bomb = gzip(format!("{{\"a\":\"{}\"}}", "x".repeat(100_000)).as_bytes());
    assert!(bomb.len() < 1000);
    let response = client()
        .post(&url)
        .bearer_auth("t0ken")
        .header("Content-Encoding", "gzip")
        .body(bomb)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let response = client()
        .post(&url)
        .bearer_auth("t0ken")
        .header("Content-Encoding", "br")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 415);
}

#[test]
fn read_api_errors_name_the_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    for (query, param) in [
        ("/api/strata/v1/find", "query"),
        ("/api/strata/v1/find?query=and(", "query"),
        (
            "/api/strata/v1/fetch?query=and(a:b)&start=yesterday",
            "start",
        ),
        ("/api/strata/v1/fetch?query=and(a:b)&end=x", "end"),
        ("/api/strata/v1/fetch?query=and(a:b)&period=90", "period"),
        (
            "/api/strata/v1/fetch?query=and(a:b)&transform=median",
            "transform",
        ),
        ("/api/strata/v1/fetch?query=and(a:b)&limit=0", "limit"),
    ] {
        let response = client().get(server.url(query)).send().unwrap();
        assert_eq!(response.status().as_u16(), 400, "{query}");
        let reply: Value = response.json().unwrap();
        assert!(
            reply["error"]
                .as_str()
                .unwrap()
                .contains(&format!("`{param}`")),
            "{query}: {reply}"
        );
    }
    // POST with a JSON body, RFC 3339 times.
    let response = client()
        .post(server.url("/api/strata/v1/fetch"))
        .body(
            json!({"query": "and(a:b)", "start": "2026-11-22T09:00:00Z",
                   "end": "2026-11-22T10:00:00Z", "period": "5m"})
            .to_string(),
        )
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let reply: Value = response.json().unwrap();
    assert_eq!(reply["period_ms"], 300_000);
    assert_eq!(reply["start_ms"], 1_795_338_000_000i64);
    assert_eq!(reply["end_ms"], 1_795_341_600_000i64);
}

#[test]
fn httptrap_flatbuffer_by_content_type() {
    use ingest::{Mode, Sample, Value as IValue};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts = ts_ms();
    let mut h = hist::Histogram::new();
    h.insert_n(0.25, 3);
    let tags: ingest::Tags = std::sync::Arc::from(vec![("svc".to_owned(), "f".to_owned())]);
    let samples = vec![
        Sample {
            name: "fb_num".to_owned(),
            tags: tags.clone(),
            ts_ms: Some(ts),
            value: IValue::Numeric(12.5),
            mode: Mode::Set,
        },
        Sample {
            name: "fb_hist".to_owned(),
            tags,
            ts_ms: Some(ts),
            value: IValue::Histogram(h),
            mode: Mode::Set,
        },
    ];
    let response = client()
        .post(server.url("/module/httptrap/fc/s"))
        .header("Content-Type", ingest::flat::CONTENT_TYPE)
        .body(ingest::flat::encode(&samples))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let reply: Value = response.json().unwrap();
    assert_eq!(
        (reply["stats"].clone(), reply["filtered"].clone()),
        (json!(2), json!(0))
    );
    let result = fetch(&server, "and(svc:f)", ts / 1000, "");
    assert_eq!(
        numeric_slices(series(&result, "fb_num|ST[__check:fc,svc:f]"))[0]["last"],
        12.5
    );
    let hist = series(&result, "fb_hist|ST[__check:fc,svc:f]");
    let bins: Vec<&Value> = hist["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["value"].get("bins"))
        .collect();
    // 0.25 = 2.5e-1 is bin (25, -1).
    assert_eq!(bins, vec![&json!([[25, -1, 3]])]);

    // A body that is not a flatbuffer: rejected whole, 400.
    let response = client()
        .post(server.url("/module/httptrap/fc/s"))
        .header("Content-Type", ingest::flat::CONTENT_TYPE)
        .body(r#"{"json": 1}"#)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
}

#[test]
fn prometheus_and_analytics_apis_are_routed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts_s = ts_ms() / 1000;
    let (status, _) = post(
        &server.url("/api/v2/write?precision=s"),
        format!("prom,host=p v=4 {ts_s}\n"),
    );
    assert_eq!(status, 204);
    let reply = get_json(&server.url(&format!("/api/v1/query?query=prom_v&time={ts_s}")));
    assert_eq!(reply["status"], "success", "{reply}");
    let result = &reply["data"]["result"][0];
    assert_eq!(result["metric"]["host"], "p", "{reply}");
    assert_eq!(result["value"][1], "4", "{reply}");
    let caql = client()
        .get(server.url("/api/strata/v1/caql?query=x"))
        .send()
        .unwrap();
    assert_ne!(
        caql.status().as_u16(),
        404,
        "the analytics endpoint is routed"
    );
}
