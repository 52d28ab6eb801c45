//! Reads through a cluster's fronts answer what one `strata serve` answers for the same
//! writes: a real 3-broker Kafka 4.1 (`scripts/kafka-cluster`), storage nodes on two sides,
//! numerics (Influx) and histograms (httptrap) sent both to the cluster and to a single node,
//! the oracle. PromQL instant and range queries (selectors, `rate`, `sum by`, `count`,
//! `min`/`max`, `*_over_time`, `histogram_quantile` over histograms), the series and label
//! listings, CAQL (sources, histogram merges) and the native fetch agree exactly through both fronts; again while a storage node
//! is `kill -9`ed (the other side serves). A write's `Strata-Read-After` token makes a read at
//! once after it see it, on each front; a malformed token is a 400; a partition no owner can
//! answer is a 503 naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster_common;
mod serve_common;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use cluster_common::{send_until_acked, Cluster, Kafka};
use serde_json::Value;
use serve_common::{client, now_s, urlencode, Server};

const PARTITIONS: u32 = 4;
/// Rounds of writes, one every `STEP_S` of sample time.
const ROUNDS: i64 = 40;
const STEP_S: i64 = 15;
const HOSTS: usize = 6;

/// Round `i`'s bodies: counters per host and code (Influx), a histogram per host (httptrap).
fn bodies(i: i64, base_s: i64) -> [(String, String); 2] {
    let ts_s = base_s + i * STEP_S;
    let mut lines = Vec::new();
    for h in 0..HOSTS {
        for (c, code) in ["200", "500"].iter().enumerate() {
            let v = i * (h as i64 + 1) * (c as i64 * 3 + 1);
            lines.push(format!(
                "req,host=h{h},code={code} v={v} {}",
                ts_s * 1_000_000_000
            ));
        }
    }
    let hists: Vec<String> = (0..HOSTS)
        .map(|h| {
            format!(
                r#""lat|ST[host:h{h}]": {{"_type": "h", "_value": ["H[1.0e-01]={}", "H[2.0e+00]=1", "H[3.0e+01]={}"], "_ts": {}}}"#,
                h + 1,
                i % 3,
                ts_s * 1000
            )
        })
        .collect();
    [
        ("/api/v2/write?precision=ns".to_owned(), lines.join("\n")),
        (
            "/module/httptrap/load/any".to_owned(),
            format!("{{{}}}", hists.join(",")),
        ),
    ]
}

fn get(url: &str, token: Option<&str>) -> (u16, Value) {
    let mut r = client().get(url).timeout(Duration::from_secs(60));
    if let Some(t) = token {
        r = r.header("Strata-Read-After", t);
    }
    let r = r.send().unwrap();
    let status = r.status().as_u16();
    let text = r.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Equal JSON, but numbers written as strings (Prometheus's sample values) need only agree to
/// 1e-12 relative: a float sum of partial sums may round differently in the last place.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::String(x), Value::String(y)) if x != y => {
            match (x.parse::<f64>(), y.parse::<f64>()) {
                (Ok(x), Ok(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        _ => a == b,
    }
}

/// The Prometheus API paths asked of the oracle and of each front.
fn prom_paths(base_s: i64) -> Vec<String> {
    let t = base_s + (ROUNDS - 1) * STEP_S + 1;
    let (start, end) = (base_s + 120, base_s + (ROUNDS - 1) * STEP_S);
    let queries = [
        "req_v",
        r#"req_v{host="h1"}"#,
        "rate(req_v[2m])",
        "sum by (host) (rate(req_v[2m]))",
        "sum(increase(req_v[5m]))",
        "count by (code) (req_v)",
        "max by (code) (req_v)",
        "min(req_v)",
        "max_over_time(req_v[5m])",
        "topk(3, req_v)",
        "lat",
        "sum(rate(lat[5m]))",
        "histogram_quantile(0.9, sum by (host) (rate(lat[5m])))",
        "histogram_quantile(0.5, sum(rate(lat[2m])))",
        "histogram_count(sum by (host) (increase(lat[5m])))",
    ];
    let mut out = Vec::new();
    for q in queries {
        let q = urlencode(q);
        out.push(format!("/api/v1/query?query={q}&time={t}"));
        out.push(format!(
            "/api/v1/query_range?query={q}&start={start}&end={end}&step=30"
        ));
    }
    out.push(format!(
        "/api/v1/series?match[]=req_v&start={start}&end={end}"
    ));
    out.push("/api/v1/series?match[]=lat".into());
    // Listings without a selector of labels only the test's series have (the single node
    // also stores series of its own, alerting's, which a front keeps out of the partitions).
    let ours = urlencode(r#"{__name__=~"req_v|lat"}"#);
    out.push(format!("/api/v1/labels?match[]={ours}"));
    out.push("/api/v1/labels?match[]=lat".into());
    out.push("/api/v1/label/host/values".into());
    out.push(format!("/api/v1/label/__name__/values?match[]={ours}"));
    out.push("/api/v1/label/code/values?limit=1".into());
    out
}

/// Every read through `front` answers as the oracle does; with `both_paths`, also with
/// aggregation push-down off.
fn assert_same_as_oracle(oracle: &Server, front: &str, base_s: i64, both_paths: bool) {
    let mut nonempty = 0;
    for path in prom_paths(base_s) {
        let (want_status, want) = get(&oracle.url(&path), None);
        assert_eq!(want_status, 200, "oracle {path}: {want}");
        // Every aggregation on the front over the partitions' series: exactly the oracle.
        if both_paths {
            let sep = if path.contains('?') { '&' } else { '?' };
            let fallback = format!("http://{front}{path}{sep}pushdown=false");
            let (status, got) = get(&fallback, None);
            assert_eq!(status, 200, "front {front} {path}: {got}");
            assert_eq!(got, want, "front {front} {path} without pushdown");
        }
        // Aggregations pushed down to the partitions: the same answer (a float sum of
        // partials may round differently in the last place).
        let (status, got) = get(&format!("http://{front}{path}"), None);
        assert_eq!(status, 200, "front {front} {path}: {got}");
        assert!(
            same(&got, &want),
            "front {front} {path}\n got {got}\nwant {want}"
        );
        let data = &want["data"];
        let result = data.get("result").unwrap_or(data);
        nonempty += usize::from(result.as_array().is_some_and(|a| !a.is_empty()));
    }
    // The comparisons are of real answers, not of two empty ones.
    assert!(nonempty >= 30, "only {nonempty} non-empty answers");
    // CAQL: sources joined, histogram merges pushed down and merged, the rest on the front.
    let (start, end) = (base_s, base_s + ROUNDS * STEP_S);
    for q in [
        r#"find("req_v")"#,
        r#"find:counter("req_v", "and(code:500)") | stats:sum()"#,
        r#"find:max("req_v") | group_by:sum("code")"#,
        r#"find:histogram("lat")"#,
        r#"find:histogram("lat") | histogram:merge() | histogram:percentile(90)"#,
        r#"find:histogram("lat", "and(host:h1)") | histogram:merge()"#,
        r#"find:histogram("lat") | group_by:merge("host") | histogram:count()"#,
        r#"metric:histogram("load", "lat") | histogram:merge()"#,
    ] {
        let path = format!(
            "/api/strata/v1/caql?query={}&start={start}&end={end}&period=60",
            urlencode(q)
        );
        let (want_status, want) = get(&oracle.url(&path), None);
        let (status, got) = get(&format!("http://{front}{path}"), None);
        assert_eq!(want_status, 200, "oracle {q}: {want}");
        assert_eq!(status, 200, "front {front} {q}: {got}");
        assert_eq!(got, want, "CAQL via {front}: {q}");
        assert!(
            !want["series"].as_array().unwrap().is_empty(),
            "{q}: {want}"
        );
    }
    // The native fetch: the same series and data.
    let (start, end) = (base_s - 60, base_s + ROUNDS * STEP_S + 60);
    for query in ["and(__name:req_v)", "and(__name:lat)"] {
        let path = format!(
            "/api/strata/v1/fetch?query={}&start={start}&end={end}&period=60",
            urlencode(query)
        );
        let (_, want) = get(&oracle.url(&path), None);
        let (status, got) = get(&format!("http://{front}{path}"), None);
        assert_eq!(status, 200, "{got}");
        let series = |v: &Value| {
            let mut s: Vec<Value> = v["series"].as_array().unwrap().clone();
            for x in &mut s {
                x.as_object_mut().unwrap().remove("activity_ms");
                x.as_object_mut().unwrap().remove("id");
            }
            s.sort_by_key(|x| x["key"].to_string());
            s
        };
        assert_eq!(
            series(&got),
            series(&want),
            "native fetch {query} via {front}"
        );
        assert!(!series(&want).is_empty());
    }
}

/// A write through `front` and, at once, reads with its token: each sees it.
fn read_your_write(front: &str, name: &str) {
    let ts_s = now_s();
    let r = client()
        .post(format!("http://{front}/api/v2/write?precision=s"))
        .body(format!("ryw,front={name} v=7 {ts_s}"))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let token = r
        .headers()
        .get("strata-read-after")
        .expect("a token on the write's answer")
        .to_str()
        .unwrap()
        .to_owned();
    let q = urlencode(&format!(r#"ryw_v{{front="{name}"}}"#));
    let (status, got) = get(
        &format!("http://{front}/api/v1/query?query={q}&time={}", ts_s + 1),
        Some(&token),
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"]["result"][0]["value"][1], "7", "{got}");
    let (status, got) = get(
        &format!(
            "http://{front}/api/strata/v1/fetch?query={}&start={}&end={}&period=60&read_after={}",
            urlencode(&format!("and(__name:ryw_v,front:{name})")),
            ts_s - 60,
            ts_s + 60,
            urlencode(&token)
        ),
        None,
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["series"].as_array().unwrap().len(), 1, "{got}");
    let (status, got) = get(
        &format!(
            "http://{front}/api/strata/v1/caql?query={}&start={}&end={}&period=60",
            urlencode(&format!(r#"find:max("ryw_v", "and(front:{name})")"#)),
            ts_s - 60,
            ts_s + 60,
        ),
        Some(&token),
    );
    assert_eq!(status, 200, "{got}");
    let values = got["series"][0]["values"].as_array().unwrap();
    assert!(values.iter().any(|v| v[1] == 7.0), "{got}");
}

#[test]
fn fronts_answer_as_one_node_does() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start(&tmp.path().join("kafka"), 3);
    let cluster = Cluster::three_nodes(tmp.path(), &kafka, PARTITIONS);
    let a1 = cluster.start("a1");
    let a2 = cluster.start("a2");
    let b1 = cluster.start("b1");
    let oracle = Server::start(
        &tmp.path().join("oracle"),
        &["--statsd", "off", "--graphite", "off"],
    );
    let fronts = vec![cluster.http("a1"), cluster.http("b1")];

    let base_s = now_s() - 900;
    let stall_ms = AtomicU64::new(0);
    for i in 0..ROUNDS {
        for (k, (path, body)) in bodies(i, base_s).iter().enumerate() {
            send_until_acked(&fronts, (2 * i + k as i64) as u64, path, body, &stall_ms);
            let r = client()
                .post(oracle.url(path))
                .body(body.clone())
                .send()
                .unwrap();
            assert!(r.status().is_success(), "oracle: {}", r.status());
        }
    }
    cluster.wait_caught_up();
    for front in &fronts {
        assert_same_as_oracle(&oracle, front, base_s, true);
    }

    // A storage node lost: the other side's owner serves its partitions, completely.
    drop(a2);
    for front in &fronts {
        assert_same_as_oracle(&oracle, front, base_s, false);
    }
    for (front, name) in fronts.iter().zip(["a1", "b1"]) {
        read_your_write(front, name);
    }

    // A malformed token is the request's fault, named.
    let (status, got) = get(
        &format!(
            "http://{}/api/v1/query?query=req_v&read_after=zz",
            fronts[0]
        ),
        None,
    );
    assert_eq!(status, 400, "{got}");
    assert!(
        got["error"].as_str().unwrap().contains("read-after token"),
        "{got}"
    );
    let (status, got) = get(
        &format!(
            "http://{}/api/strata/v1/find?query=and(__name:req_v)",
            fronts[0]
        ),
        Some("3:x"),
    );
    assert_eq!(status, 400, "{got}");
    assert!(got["error"].as_str().unwrap().contains("`3:x`"), "{got}");

    // Both owners of a partition gone: an error naming it, never a partial answer.
    drop(b1);
    let (status, got) = get(
        &format!("http://{}/api/v1/query?query=req_v", fronts[0]),
        None,
    );
    assert_eq!(status, 503, "{got}");
    let message = got["error"].as_str().unwrap();
    assert!(
        message.contains("partition 1") || message.contains("partition 3"),
        "{got}"
    );
    drop(a1);
}
