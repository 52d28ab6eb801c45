//! Running totals pushed to a broker reach the core counted exactly: a real `strata broker`
//! takes Prometheus native histograms (remote write) and OTel cumulative explicit histograms
//! (OTLP), journals them in their sender's own buckets and forwards them so to a real `strata
//! serve`, which differences them there. Converted to llhist bins on the way (as forwarding did
//! before), a bucket that grew could read as a reset and the whole total was added again: one
//! bucket at 1, 2, 3, 4 counted 10, not 4. The broker is killed with SIGKILL half-way and
//! restarted, so records the core had already applied are sent again: they must not be
//! differenced twice. Totals read back with `transform=count` equal the true increases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use ingest::remote_write::proto::{self, Label, TimeSeries, WriteRequest};
use prost::Message;
use serve_common::{client, fetch, now_s, urlencode, Server};

/// Buckets of the random native histogram (schema 3, narrower than llhist's bins, so a
/// conversion before differencing rounds).
const BUCKETS: usize = 17;
/// Submissions of each random sequence.
const STEPS: usize = 120;
/// Bound on waiting for the broker's start line and for forwarded data.
const WAIT_S_MAX: u64 = 60;

/// `strata broker` forwarding to `core`, pushes on a port of its own.
struct Broker {
    child: Child,
    push: String,
}

impl Broker {
    fn start(data: &Path, core: &Server) -> Broker {
        let (child, line) = serve_common::forwarding_broker(
            "edge-totals",
            data,
            core,
            &["--push-http", "127.0.0.1:0"],
        );
        let push = serve_common::ready_address(&line, "push_http");
        Broker { child, push }
    }

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn post(&self, path: &str, content_type: &str, encoding: Option<&str>, body: Vec<u8>) {
        let mut request = client()
            .post(format!("http://{}{path}", self.push))
            .header("Content-Type", content_type)
            .body(body);
        if let Some(encoding) = encoding {
            request = request.header("Content-Encoding", encoding);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        assert_eq!(status, 204, "{path}: {}", response.text().unwrap());
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small deterministic generator (xorshift64*): the sequences are the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
    }
}

/// Per-bucket running totals over `STEPS` submissions with resets (the sender restarted), and
/// the true total of samples observed: each step adds 0..=4 to every bucket (at least one to the
/// first); a reset (never within 3 steps of the last) starts over at 0..=2 per bucket, which is
/// below the first bucket's old total, so Prometheus reads it as a reset too.
fn random_totals(seed: u64) -> (Vec<Vec<u64>>, u64) {
    let mut rng = Rng(seed);
    let mut now = vec![0u64; BUCKETS];
    let mut out = Vec::new();
    let mut observed = 0u64;
    let mut since_reset = 0;
    for _ in 0..STEPS {
        since_reset += 1;
        if since_reset > 3 && rng.below(10) == 0 {
            now = (0..BUCKETS).map(|_| rng.below(3)).collect();
            observed += now.iter().sum::<u64>();
            since_reset = 0;
        } else {
            for (b, count) in now.iter_mut().enumerate() {
                let add = rng.below(5) + u64::from(b == 0 && since_reset > 0);
                *count += add;
                observed += add;
            }
        }
        out.push(now.clone());
    }
    assert!(out.len() == STEPS && observed > 0);
    (out, observed)
}

fn native(buckets: &[u64], ts_ms: i64) -> proto::Histogram {
    let mut deltas = Vec::new();
    let mut previous = 0i64;
    for &count in buckets {
        deltas.push(count as i64 - previous);
        previous = count as i64;
    }
    let total: u64 = buckets.iter().sum();
    proto::Histogram {
        count: Some(proto::Count::CountInt(total)),
        sum: total as f64 * 0.25,
        schema: 3,
        zero_count: Some(proto::ZeroCount::ZeroCountInt(0)),
        positive_spans: vec![proto::BucketSpan {
            offset: 1,
            length: buckets.len() as u32,
        }],
        positive_deltas: deltas,
        timestamp: ts_ms,
        ..proto::Histogram::default()
    }
}

fn remote_write(broker: &Broker, name: &str, buckets: &[u64], ts_ms: i64) {
    let labels = vec![
        Label {
            name: b"__name__".to_vec(),
            value: name.as_bytes().to_vec(),
        },
        Label {
            name: b"job".to_vec(),
            value: b"api".to_vec(),
        },
    ];
    let series = TimeSeries {
        labels,
        histograms: vec![native(buckets, ts_ms)],
        ..TimeSeries::default()
    };
    let raw = WriteRequest {
        timeseries: vec![series],
    }
    .encode_to_vec();
    let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    broker.post(
        "/api/v1/write",
        "application/x-protobuf",
        Some("snappy"),
        body,
    );
}

/// An OTLP/JSON cumulative explicit histogram point: bounds 0.001 · 2^k, `BUCKETS` + 1 counts.
fn otlp(broker: &Broker, buckets: &[u64], ts_ms: i64) {
    let bounds: Vec<String> = (0..buckets.len() - 1)
        .map(|k| format!("{}", 0.001 * f64::powi(2.0, k as i32)))
        .collect();
    let counts: Vec<String> = buckets.iter().map(|c| format!("\"{c}\"")).collect();
    let total: u64 = buckets.iter().sum();
    let body = format!(
        r#"{{"resourceMetrics": [{{"resource": {{"attributes": []}}, "scopeMetrics": [{{
            "metrics": [{{"name": "otel_seconds", "histogram": {{"aggregationTemporality": 2,
            "dataPoints": [{{"timeUnixNano": "{}", "count": "{total}", "sum": {},
            "bucketCounts": [{}], "explicitBounds": [{}]}}]}}}}]}}]}}]}}"#,
        ts_ms * 1_000_000,
        total as f64 * 0.25,
        counts.join(","),
        bounds.join(",")
    );
    broker.post("/v1/metrics", "application/json", None, body.into_bytes());
}

/// The samples counted at the core for the series named `name`, over the hour around `ts_s`.
fn counted(core: &Server, name: &str, ts_s: i64) -> f64 {
    let result = fetch(
        core,
        &format!("and(__name:{name})"),
        ts_s,
        &format!("&transform={}", urlencode("count")),
    );
    let Some(series) = result["series"].as_array() else {
        return 0.0;
    };
    assert!(series.len() <= 1, "one series for {name}: {result}");
    series
        .iter()
        .flat_map(|s| s["data"].as_array().into_iter().flatten())
        .filter_map(|d| d["value"].as_f64())
        .sum()
}

/// Waits until the core's count for `name` is `expected`, then reads it once more a second
/// later (a resend differenced again would show then); the last reading if it never is. The
/// broker sends records holding running totals one at a time in journal order, so the last
/// total counted means every earlier record was answered.
fn settled(core: &Server, name: &str, ts_s: i64, expected: f64) -> f64 {
    let mut last = counted(core, name, ts_s);
    for _ in 0..(WAIT_S_MAX * 5) {
        if last == expected {
            std::thread::sleep(Duration::from_secs(1));
            return counted(core, name, ts_s);
        }
        std::thread::sleep(Duration::from_millis(200));
        last = counted(core, name, ts_s);
    }
    last
}

#[test]
fn running_totals_pushed_to_a_broker_are_counted_exactly_at_the_core() {
    let dir = tempfile::tempdir().unwrap();
    let core = Server::start(&dir.path().join("core"), &[]);
    let broker_dir = dir.path().join("broker");
    let mut broker = Broker::start(&broker_dir, &core);
    let now = now_s();
    let t0_ms = (now - 1200) * 1000;

    // The minimal case: one bucket at 1, 2, 3, 4 is four samples.
    for (i, total) in [1u64, 2, 3, 4].iter().enumerate() {
        remote_write(&broker, "one_bucket", &[*total], t0_ms + i as i64 * 1000);
    }
    // Long sequences with resets, half before the broker is killed and half after.
    let (native_totals, native_observed) = random_totals(0x5eed_0001);
    let (otel_totals, otel_observed) = random_totals(0x5eed_0002);
    for step in 0..STEPS {
        if step == STEPS / 2 {
            broker.kill9();
            broker = Broker::start(&broker_dir, &core);
        }
        let ts_ms = t0_ms + 10_000 + step as i64 * 5_000;
        remote_write(&broker, "rpc_seconds", &native_totals[step], ts_ms);
        otlp(&broker, &otel_totals[step], ts_ms);
    }

    assert_eq!(settled(&core, "one_bucket", now, 4.0), 4.0);
    let native_count = settled(&core, "rpc_seconds", now, native_observed as f64);
    assert_eq!(native_count, native_observed as f64);
    let otel_count = settled(&core, "otel_seconds", now, otel_observed as f64);
    assert_eq!(otel_count, otel_observed as f64);
    drop(broker);
}
