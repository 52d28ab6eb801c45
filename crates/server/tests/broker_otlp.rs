//! A broker's OTLP intake names series as the core's does: a real `strata broker` takes OTLP
//! pushes and forwards them to a real `strata serve`, translating metric and attribute names
//! as Prometheus's OTLP receiver does by default (`--otlp-translation-strategy`) and putting
//! the resource attributes named in `--otlp-promote-resource-attributes` on every series. A
//! second broker with `NoTranslation` keeps names as sent; an unknown strategy is refused in
//! one line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::path::Path;
use std::process::Child;

use ingest::otlp::proto::{
    any_value, metric, number_data_point, AnyValue, ExportMetricsServiceRequest, Gauge, KeyValue,
    Metric, NumberDataPoint, Resource, ResourceMetrics, ScopeMetrics, Sum,
};
use prost::Message;
use serde_json::Value;
use serve_common::{client, eventually, get_json, now_s, strata, urlencode, Server};

struct Broker {
    child: Child,
    push: String,
}

impl Broker {
    fn start(data: &Path, core: &Server, extra: &[&str]) -> Broker {
        let mut args = vec!["--push-http", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let (child, line) = serve_common::forwarding_broker("edge-otlp", data, core, &args);
        let push = serve_common::ready_address(&line, "push_http");
        Broker { child, push }
    }

    fn push_otlp(&self, request: &ExportMetricsServiceRequest) {
        let response = client()
            .post(format!("http://{}/v1/metrics", self.push))
            .header("Content-Type", "application/x-protobuf")
            .body(request.encode_to_vec())
            .send()
            .unwrap();
        let status = response.status().as_u16();
        assert_eq!(status, 204, "{}", response.text().unwrap());
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
    }
}

fn point(value: f64, ts_ms: i64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        time_unix_nano: ts_ms as u64 * 1_000_000,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..NumberDataPoint::default()
    }
}

/// A monotonic sum `http.requests` and a gauge `mem.used` in bytes, from service `cart`.
fn request(ts_ms: i64, requests: &str, memory: &str) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "cart"),
                    kv("deployment.environment", "prod"),
                    kv("host.name", "h1"),
                ],
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![
                    Metric {
                        name: requests.to_owned(),
                        data: Some(metric::Data::Sum(Sum {
                            data_points: vec![point(3.0, ts_ms, vec![kv("http.method", "GET")])],
                            aggregation_temporality: 2,
                            is_monotonic: true,
                        })),
                        ..Metric::default()
                    },
                    Metric {
                        name: memory.to_owned(),
                        unit: "By".to_owned(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: vec![point(512.0, ts_ms, vec![])],
                        })),
                        ..Metric::default()
                    },
                ],
            }],
        }],
    }
}

/// The series the core's Prometheus API lists for `selector`, once there are any.
fn series(core: &Server, selector: &str) -> Vec<Value> {
    let url = core.url(&format!("/api/v1/series?match[]={}", urlencode(selector)));
    eventually(&format!("series {selector} at the core"), || {
        let found = get_json(&url)["data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (!found.is_empty()).then_some(found)
    })
}

#[test]
fn broker_otlp_names_and_promotion_follow_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    let core = Server::start(&dir.path().join("core"), &[]);
    let ts_ms = (now_s() - 30) * 1000;

    let broker = Broker::start(
        &dir.path().join("broker"),
        &core,
        &[
            "--otlp-promote-resource-attributes",
            "deployment.environment",
        ],
    );
    broker.push_otlp(&request(ts_ms, "http.requests", "mem.used"));
    let requests = series(&core, "http_requests_total");
    assert_eq!(
        requests,
        [serde_json::json!({
            "__name__": "http_requests_total",
            // The broker's own tag: the check it took the push for.
            "check": "edge-otlp",
            "deployment_environment": "prod",
            "http_method": "GET",
            "job": "cart",
        })]
    );
    let memory = series(&core, "mem_used_bytes");
    assert_eq!(memory[0]["deployment_environment"], "prod", "{memory:?}");
    let info = series(&core, "target_info");
    assert_eq!(info[0]["host_name"], "h1", "{info:?}");
    drop(broker);

    let kept = Broker::start(
        &dir.path().join("broker-kept"),
        &core,
        &["--otlp-translation-strategy", "NoTranslation"],
    );
    kept.push_otlp(&request(ts_ms, "disk.reads", "disk.free"));
    let reads = series(&core, "{\"disk.reads\"}");
    assert_eq!(reads[0]["http.method"], "GET", "{reads:?}");
    assert!(
        reads[0].get("deployment.environment").is_none(),
        "{reads:?}"
    );
    series(&core, "{\"disk.free\"}");
    drop(kept);

    let refused = strata()
        .arg("broker")
        .args(["--id", "edge-bad", "--otlp-translation-strategy", "Utf8"])
        .arg("--data-dir")
        .arg(dir.path().join("broker-bad"))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--otlp-translation-strategy") && stderr.lines().count() == 1,
        "{stderr}"
    );
}
