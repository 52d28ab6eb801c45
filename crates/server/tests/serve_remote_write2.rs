//! Remote write 2.0 on `/api/v1/write`, chosen by Content-Type: a sender built from Prometheus's
//! own remote-write library (client_golang's `exp/api/remote`, from the Go module proxy) sends
//! samples, an exponential and a custom-bucket native histogram, an exemplar, metadata and a
//! created timestamp; it reads the written counts from the response headers and the data reads
//! back. A `proto=` Strata does not speak is a 415, and nothing of it is stored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use serve_common::{client, get_json, now_s, urlencode, Server};

/// Builds `tests/rw2_sender` with the Go module proxy, caching the binary and Go's caches under
/// ~/.cache/strata-tests, keyed by the sources' hash.
fn sender() -> PathBuf {
    use std::hash::{Hash, Hasher};
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rw2_sender");
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in ["main.go", "go.mod", "go.sum"] {
        std::fs::read(src.join(file)).unwrap().hash(&mut hasher);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let cache = home.join(".cache/strata-tests");
    std::fs::create_dir_all(&cache).unwrap();
    let bin = cache.join(format!("rw2_sender-{:016x}", hasher.finish()));
    if bin.exists() {
        return bin;
    }
    let status = Command::new("go")
        .args(["build", "-mod=readonly", "-p", "1", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOCACHE", cache.join("gocache"))
        .env("GOFLAGS", "-buildvcs=false")
        .status()
        .expect("the go command (this test builds its sender with the Go module proxy)");
    assert!(status.success(), "go build of tests/rw2_sender failed");
    bin
}

fn query(server: &Server, promql: &str, at_s: i64) -> Value {
    get_json(&server.url(&format!(
        "/api/v1/query?query={}&time={at_s}",
        urlencode(promql)
    )))
}

fn value_of(result: &Value) -> f64 {
    let text = result["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap_or_else(|| panic!("no value in {result}"));
    text.parse().unwrap()
}

#[test]
fn prometheus_library_sends_remote_write_2_and_reads_the_written_counts() {
    let sender = sender();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now_ms = now_s() * 1000 - 30_000;
    let output = Command::new(&sender)
        .arg(server.url("/api/v1/write"))
        .arg(now_ms.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "sender failed: {stderr}");
    let stats: Value = serde_json::from_slice(&output.stdout).unwrap();
    // 2 + 1 float samples, 2 histograms, 1 exemplar.
    assert_eq!(
        stats,
        serde_json::json!({"samples": 3, "histograms": 2, "exemplars": 1}),
        "{stderr}"
    );

    let at_s = now_ms / 1000 + 1;
    assert_eq!(value_of(&query(&server, "rw2_requests_total", at_s)), 8.0);
    assert_eq!(
        value_of(&query(
            &server,
            "rw2_temperature_celsius{job=\"rw2\"}",
            at_s
        )),
        21.5
    );
    let series = get_json(&server.url(&format!(
        "/api/v1/series?match[]={}",
        urlencode("{job=\"rw2\"}")
    )));
    let mut names: Vec<&str> = series["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["__name__"].as_str().unwrap())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names,
        [
            "rw2_latency_seconds",
            "rw2_nhcb_seconds",
            "rw2_requests_total",
            "rw2_temperature_celsius"
        ],
        "{series}"
    );

    // What the sender described, as Prometheus lists it, kept across a restart.
    let expected = serde_json::json!({
        "rw2_latency_seconds": [{"type": "histogram", "help": "Request latency.", "unit": "seconds"}],
        "rw2_nhcb_seconds": [{"type": "histogram", "help": "Queue wait.", "unit": "seconds"}],
        "rw2_requests_total": [{"type": "counter", "help": "Requests served.", "unit": ""}],
        "rw2_temperature_celsius": [{"type": "gauge", "help": "Room temperature.", "unit": "celsius"}],
    });
    let metadata = get_json(&server.url("/api/v1/metadata"));
    assert_eq!(metadata["data"], expected, "{metadata}");
    let one = get_json(&server.url("/api/v1/metadata?metric=rw2_requests_total"));
    assert_eq!(
        one["data"],
        serde_json::json!({"rw2_requests_total": expected["rw2_requests_total"]})
    );
    let limited = get_json(&server.url("/api/v1/metadata?limit=1"));
    assert_eq!(limited["data"].as_object().unwrap().len(), 1, "{limited}");
    // The exemplar, as Prometheus's query_exemplars gives it.
    let exemplars = serde_json::json!([{
        "seriesLabels": {"__name__": "rw2_requests_total", "job": "rw2", "path": "/a"},
        "exemplars": [{
            "labels": {"trace_id": "4bf92f3577b34da6"},
            "value": "1",
            // Whole seconds: Prometheus writes them without a fraction.
            "timestamp": now_ms / 1000,
        }],
    }]);
    let exemplars_url = server.url(&format!(
        "/api/v1/query_exemplars?query={}&start={}&end={}",
        urlencode("rate(rw2_requests_total[5m])"),
        now_ms / 1000 - 60,
        now_ms / 1000 + 60
    ));
    assert_eq!(get_json(&exemplars_url)["data"], exemplars);
    // SIGKILL, then both are read back.
    drop(server);
    let server = Server::start(dir.path(), &[]);
    let metadata = get_json(&server.url("/api/v1/metadata"));
    assert_eq!(metadata["data"], expected, "after a restart: {metadata}");
    let exemplars_url =
        exemplars_url.replace(exemplars_url.split("/api").next().unwrap(), &server.url(""));
    assert_eq!(get_json(&exemplars_url)["data"], exemplars);
}

#[test]
fn a_remote_write_version_not_spoken_is_refused_and_not_stored() {
    use ingest::remote_write2::proto::{Request, Sample, TimeSeries};
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now_ms = now_s() * 1000 - 30_000;
    let request = Request {
        symbols: ["", "__name__", "rw3_only"].map(str::to_owned).to_vec(),
        timeseries: vec![TimeSeries {
            labels_refs: vec![1, 2],
            samples: vec![Sample {
                value: 1.0,
                timestamp: now_ms,
            }],
            ..TimeSeries::default()
        }],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&request.encode_to_vec())
        .unwrap();
    let send = |content_type: &str| {
        client()
            .post(server.url("/api/v1/write"))
            .header("Content-Encoding", "snappy")
            .header("Content-Type", content_type)
            .body(body.clone())
            .send()
            .unwrap()
    };
    let refused = send("application/x-protobuf;proto=io.prometheus.write.v3.Request");
    assert_eq!(refused.status().as_u16(), 415);
    let text = refused.text().unwrap();
    assert!(text.contains("io.prometheus.write.v3.Request"), "{text}");
    let at_s = now_ms / 1000 + 1;
    let empty = query(&server, "rw3_only", at_s);
    assert_eq!(empty["data"]["result"], serde_json::json!([]), "{empty}");

    // The same body as 2.0 is stored, with the written counts.
    let accepted = send("application/x-protobuf;proto=io.prometheus.write.v2.Request");
    assert_eq!(accepted.status().as_u16(), 204);
    let header = |name: &str| accepted.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header("X-Prometheus-Remote-Write-Samples-Written"), "1");
    assert_eq!(header("X-Prometheus-Remote-Write-Histograms-Written"), "0");
    assert_eq!(header("X-Prometheus-Remote-Write-Exemplars-Written"), "0");
    assert_eq!(value_of(&query(&server, "rw3_only", at_s)), 1.0);

    // A 2.0 body sent as 1.0 stores nothing the sender would not know about: 1.0 reads it as
    // an empty request. A 1.0 body sent as 2.0 is refused, named.
    let v1 = ingest::remote_write::proto::WriteRequest {
        timeseries: vec![ingest::remote_write::proto::TimeSeries::default()],
    };
    let v1_body = snap::raw::Encoder::new()
        .compress_vec(&v1.encode_to_vec())
        .unwrap();
    let mislabelled = client()
        .post(server.url("/api/v1/write"))
        .header(
            "Content-Type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        )
        .body(v1_body)
        .send()
        .unwrap();
    assert_eq!(mislabelled.status().as_u16(), 400);
    assert_eq!(
        mislabelled.headers()["X-Prometheus-Remote-Write-Samples-Written"],
        "0"
    );
    let text = mislabelled.text().unwrap();
    assert!(text.contains("prometheus.WriteRequest"), "{text}");
}
