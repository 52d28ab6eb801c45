//! The HTTP API on a real socket (127.0.0.1:0) over a real store in a temp dir, called with
//! plain HTTP/1.1 requests over `TcpStream` (GET and POST form, as Grafana sends them), checking
//! the JSON shapes Grafana parses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use hist::Histogram;
use promql::eval::Limits;
use serde_json::{json, Value};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

/// 2026-01-01T00:00:00Z: an hour-aligned base time for the samples.
const T0_S: i64 = 1_767_225_600;

struct Server {
    addr: SocketAddr,
    store: Arc<Store>,
    _rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn key(labels: &[(&str, &str)]) -> StreamKey {
    StreamKey::from_labels(labels.iter().copied()).unwrap()
}

/// `up{job="api",instance="a"}` = 1 and `up{job="db",instance="b"}` = 0 every 60 s over
/// [T0, T0+10m]; `lat{svc="a"}` one histogram per minute at T0 and T0+1m (10.5 × 3, 25.5 × 1,
/// −20.5 × 1, 0 × 1 at T0; 10.5 × 1 at T0+1m); `disk.used|ST[host.name:web-1]` = 7 at T0.
fn server(limits: Limits) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions {
            wal_segment_size_bytes: 1 << 20,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let mut batch = WriteBatch::new();
    let up_a = key(&[("__name__", "up"), ("job", "api"), ("instance", "a")]);
    let up_b = key(&[("__name__", "up"), ("job", "db"), ("instance", "b")]);
    for i in 0..=10 {
        let ts = (T0_S + i * 60) * 1000;
        batch.numeric(&up_a, ts, 1.0).unwrap();
        batch.numeric(&up_b, ts, 0.0).unwrap();
    }
    let lat = key(&[("__name__", "lat"), ("svc", "a")]);
    let mut h = Histogram::new();
    h.insert_n(10.5, 3);
    h.insert_n(25.5, 1);
    h.insert_n(-20.5, 1);
    h.insert_n(0.0, 1);
    batch.histogram(&lat, T0_S * 1000, &h).unwrap();
    let mut h2 = Histogram::new();
    h2.insert_n(10.5, 1);
    batch.histogram(&lat, (T0_S + 60) * 1000, &h2).unwrap();
    let disk = StreamKey::parse("disk.used|ST[host.name:web-1]").unwrap();
    batch.numeric(&disk, T0_S * 1000, 7.0).unwrap();
    store.write(&batch).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(store);
    let router = promql::http::router_with_limits(Arc::clone(&store), limits);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, router).await });
    Server {
        addr,
        store,
        _rt: rt,
        _dir: dir,
    }
}

/// Percent-encodes a query parameter value.
fn enc(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

struct Reply {
    status: u16,
    content_type: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request on a fresh connection.
fn request(addr: SocketAddr, method: &str, target: &str, form: Option<&str>) -> Reply {
    let mut stream = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(body) = form {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    } else {
        req.push_str("\r\n");
    }
    stream.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut content_type = String::new();
    let mut chunked = false;
    for line in lines {
        let (k, v) = line.split_once(':').unwrap();
        match k.to_ascii_lowercase().as_str() {
            "content-type" => content_type = v.trim().to_string(),
            "transfer-encoding" => chunked = v.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        loop {
            let (size, after) = rest.split_once("\r\n").unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            out.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        out
    } else {
        body.to_string()
    };
    Reply {
        status,
        content_type,
        body,
    }
}

fn get(addr: SocketAddr, target: &str) -> Reply {
    request(addr, "GET", target, None)
}

fn post(addr: SocketAddr, path: &str, form: &str) -> Reply {
    request(addr, "POST", path, Some(form))
}

fn t(offset_s: i64) -> i64 {
    T0_S + offset_s
}

#[test]
fn instant_query_get_and_post_give_prometheus_vectors() {
    let s = server(Limits::default());
    let expected = json!({
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"__name__": "up", "instance": "a", "job": "api"}, "value": [t(120), "1"]},
                {"metric": {"__name__": "up", "instance": "b", "job": "db"}, "value": [t(120), "0"]}
            ]
        }
    });
    let r = get(s.addr, &format!("/api/v1/query?query=up&time={}", t(120)));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.json(), expected);
    // The exact bytes: time as a bare number, value as a string.
    assert!(
        r.body.contains(&format!("\"value\":[{},\"1\"]", t(120))),
        "{}",
        r.body
    );

    let r = post(
        s.addr,
        "/api/v1/query",
        &format!("query={}&time={}", enc("up"), t(120)),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), expected);

    // Fractional times keep their milliseconds, written as Prometheus does (three digits);
    // RFC 3339 is accepted too.
    let r = get(
        s.addr,
        &format!("/api/v1/query?query={}&time={}.5", enc("sum(up)"), t(120)),
    );
    assert_eq!(
        r.body,
        format!(
            "{{\"status\":\"success\",\"data\":{{\"resultType\":\"vector\",\"result\":[{{\"metric\":{{}},\"value\":[{}.500,\"1\"]}}]}}}}",
            t(120)
        )
    );
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query?query={}&time={}",
            enc("sum(up)"),
            enc("2026-01-01T00:02:00Z")
        ),
    );
    assert_eq!(r.json()["data"]["result"][0]["value"], json!([t(120), "1"]));
}

#[test]
fn scalar_and_string_results() {
    let s = server(Limits::default());
    let r = get(
        s.addr,
        &format!("/api/v1/query?query={}&time=100", enc("1 / 0")),
    );
    assert_eq!(
        r.body,
        "{\"status\":\"success\",\"data\":{\"resultType\":\"scalar\",\"result\":[100,\"+Inf\"]}}"
    );
    let r = get(
        s.addr,
        &format!("/api/v1/query?query={}&time=100", enc("\"hi\"")),
    );
    assert_eq!(
        r.body,
        "{\"status\":\"success\",\"data\":{\"resultType\":\"string\",\"result\":[100,\"hi\"]}}"
    );
}

#[test]
fn range_query_gives_matrices() {
    let s = server(Limits::default());
    let q = enc("up{job=\"api\"}");
    let expected = json!({
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{
                "metric": {"__name__": "up", "instance": "a", "job": "api"},
                "values": [[t(0), "1"], [t(60), "1"], [t(120), "1"]]
            }]
        }
    });
    for step in ["60", "1m", "60.0"] {
        let r = get(
            s.addr,
            &format!(
                "/api/v1/query_range?query={q}&start={}&end={}&step={step}",
                t(0),
                t(120)
            ),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json(), expected, "step {step}");
    }
    let r = post(
        s.addr,
        "/api/v1/query_range",
        &format!("query={q}&start={}&end={}&step=60", t(0), t(120)),
    );
    assert_eq!(r.json(), expected);
}

/// The native-histogram JSON: count and sum as strings, one bucket per llhist bin:
/// rule 0 for the negative bin [−21, −20], 3 for the zero bin, 1 for [10, 11) and [25, 26).
#[test]
fn histograms_use_the_native_histogram_json() {
    let s = server(Limits::default());
    let tiny = format!("0.{}1", "0".repeat(127));
    let r = get(s.addr, &format!("/api/v1/query?query=lat&time={}", t(60)));
    assert_eq!(r.status, 200, "{}", r.body);
    let mut v = r.json();
    let hist = &mut v["data"]["result"][0]["histogram"];
    assert_eq!(hist[0], json!(t(60)));
    // Σ harmonic midpoints × counts: 3 × 2·10·11/21 + 2·25·26/51 − 2·20·21/41 + 0.
    let sum: f64 = hist[1]["sum"].as_str().unwrap().parse().unwrap();
    let want = 3.0 * 220.0 / 21.0 + 1300.0 / 51.0 - 840.0 / 41.0;
    assert!(
        (sum - want).abs() < 1e-9 * want.abs(),
        "sum {sum} vs {want}"
    );
    hist[1]["sum"] = json!("checked");
    assert_eq!(
        v,
        json!({
            "status": "success",
            "data": {"resultType": "vector", "result": [{
                "metric": {"__name__": "lat", "svc": "a"},
                "histogram": [t(60), {
                    "count": "6",
                    "sum": "checked",
                    "buckets": [
                        [0, "-21", "-20", "1"],
                        [3, format!("-{tiny}"), tiny, "1"],
                        [1, "10", "11", "3"],
                        [1, "25", "26", "1"]
                    ]
                }]
            }]}
        })
    );

    // rate over 2 m of both periods: counts / 120 s, as float strings.
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query_range?query={}&start={}&end={}&step=60",
            enc("rate(lat[2m])"),
            t(120),
            t(120)
        ),
    );
    let v = r.json();
    assert_eq!(v["data"]["resultType"], "matrix");
    let series = &v["data"]["result"][0];
    assert_eq!(series["metric"], json!({"svc": "a"}));
    assert!(series.get("values").is_none(), "{series}");
    let point = &series["histograms"][0];
    assert_eq!(point[0], json!(t(120)));
    let as_f64 = |v: &Value| -> f64 { v.as_str().unwrap().parse().unwrap() };
    assert!((as_f64(&point[1]["count"]) - 7.0 / 120.0).abs() < 1e-15);
    let bucket = &point[1]["buckets"][2];
    assert_eq!(
        (&bucket[0], &bucket[1], &bucket[2]),
        (&json!(1), &json!("10"), &json!("11"))
    );
    assert!((as_f64(&bucket[3]) - 4.0 / 120.0).abs() < 1e-15);

    // histogram_quantile over the merge of both periods (1 × [−21, −20], 1 × zero,
    // 4 × [10, 11), 1 × [25, 26)): type 7, q = 0.5 of 7 samples: rank floor(6 × 0.5 + 1) = 4,
    // the 2nd of the 4 samples in [10, 11) → 10 + 2/5 × 1.
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query?query={}&time={}",
            enc("histogram_quantile(0.5, lat)"),
            t(120)
        ),
    );
    assert_eq!(
        r.json()["data"]["result"],
        json!([{"metric": {"svc": "a"}, "value": [t(120), "10.4"]}])
    );
}

#[test]
fn errors_have_prometheus_shape_and_status() {
    let s = server(Limits::default());
    let r = get(s.addr, &format!("/api/v1/query?query={}", enc("sum(")));
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["status"], "error");
    assert_eq!(v["errorType"], "bad_data");
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains("byte 4") && msg.contains("expected an expression"),
        "{msg}"
    );

    let r = get(s.addr, "/api/v1/query");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("query"));

    let r = get(s.addr, "/api/v1/query?query=up&time=yesterday");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("time"));

    let r = get(
        s.addr,
        &format!(
            "/api/v1/query_range?query=up&start={}&end={}&step=0",
            t(0),
            t(60)
        ),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["errorType"], "bad_data");

    let r = get(
        s.addr,
        &format!("/api/v1/query_range?query=up&start=0&end={}&step=1", t(0)),
    );
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().contains("11000"));

    let r = request(s.addr, "POST", "/api/v1/query", None);
    assert_eq!(r.status, 400, "{}", r.body);

    let r = get(s.addr, "/api/v1/query?query=up&time=1e300");
    assert_eq!(r.status, 400);
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query?query=up&time={}",
            enc("2026-13-01T00:00:00Z")
        ),
    );
    assert_eq!(r.status, 400);

    let limited = server(Limits {
        series_per_selector_max: 1,
        ..Limits::default()
    });
    let r = get(
        limited.addr,
        &format!("/api/v1/query?query=up&time={}", t(60)),
    );
    assert_eq!(r.status, 422);
    let v = r.json();
    assert_eq!(v["errorType"], "execution");
    assert!(v["error"].as_str().unwrap().contains("more than 1 series"));

    let few_samples = server(Limits {
        samples_per_query_max: 5,
        ..Limits::default()
    });
    let r = get(
        few_samples.addr,
        &format!(
            "/api/v1/query?query={}&time={}",
            enc("count_over_time(up[10m])"),
            t(600)
        ),
    );
    assert_eq!(r.status, 422);
    assert!(r.json()["error"]
        .as_str()
        .unwrap()
        .contains("too many samples"));

    let no_time = server(Limits {
        timeout_ms: 0,
        ..Limits::default()
    });
    let r = get(
        no_time.addr,
        &format!("/api/v1/query?query=up&time={}", t(60)),
    );
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["errorType"], "timeout");
}

#[test]
fn series_labels_and_values() {
    let s = server(Limits::default());
    let r = get(
        s.addr,
        &format!(
            "/api/v1/series?match[]={}&start={}&end={}",
            enc("up"),
            t(0),
            t(600)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json(),
        json!({"status": "success", "data": [
            {"__name__": "up", "instance": "a", "job": "api"},
            {"__name__": "up", "instance": "b", "job": "db"}
        ]})
    );
    // POST form with two match[] (Grafana's form), one naming a dotted metric.
    let r = post(
        s.addr,
        "/api/v1/series",
        &format!(
            "match[]={}&match[]={}",
            enc("up{job=\"db\"}"),
            enc("{__name__=\"disk.used\"}")
        ),
    );
    assert_eq!(
        r.json()["data"],
        json!([
            {"host.name": "web-1", "__name__": "disk.used"},
            {"__name__": "up", "instance": "b", "job": "db"}
        ])
    );
    // A limit that cuts the listing comes with Prometheus's warning; one that does not, none.
    let r = get(s.addr, "/api/v1/series?match[]=up&limit=1");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 1);
    assert_eq!(
        r.json()["warnings"],
        json!(["results truncated due to limit"])
    );
    let r = get(s.addr, "/api/v1/series?match[]=up&limit=2");
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 2);
    assert!(r.json().get("warnings").is_none(), "{}", r.body);
    // Series that had no sample in the window are left out.
    let r = get(
        s.addr,
        &format!(
            "/api/v1/series?match[]=lat&start={}&end={}",
            t(3600),
            t(7200)
        ),
    );
    assert_eq!(r.json()["data"], json!([]));
    let r = get(s.addr, "/api/v1/series");
    assert_eq!(r.status, 400);

    let r = get(s.addr, "/api/v1/labels");
    assert_eq!(
        r.json(),
        json!({"status": "success", "data": ["__name__", "host.name", "instance", "job", "svc"]})
    );
    let r = post(s.addr, "/api/v1/labels", &format!("match[]={}", enc("lat")));
    assert_eq!(r.json()["data"], json!(["__name__", "svc"]));

    let r = get(s.addr, "/api/v1/label/__name__/values");
    assert_eq!(r.json()["data"], json!(["disk.used", "lat", "up"]));
    let r = get(s.addr, "/api/v1/label/job/values");
    assert_eq!(r.json()["data"], json!(["api", "db"]));
    let r = get(s.addr, "/api/v1/label/host.name/values");
    assert_eq!(r.json()["data"], json!(["web-1"]));
    // The legacy escape of the name still finds it.
    let r = get(s.addr, "/api/v1/label/U__host_2e_name/values");
    assert_eq!(r.json()["data"], json!(["web-1"]));
    let r = get(
        s.addr,
        &format!(
            "/api/v1/label/instance/values?match[]={}",
            enc("up{job=\"api\"}")
        ),
    );
    assert_eq!(r.json()["data"], json!(["a"]));
    let r = get(s.addr, "/api/v1/label/job/values?limit=1");
    assert_eq!(r.json()["data"], json!(["api"]));
    assert_eq!(
        r.json()["warnings"],
        json!(["results truncated due to limit"])
    );
    let r = get(s.addr, "/api/v1/labels?limit=2");
    assert_eq!(r.json()["data"], json!(["__name__", "host.name"]));
    assert_eq!(
        r.json()["warnings"],
        json!(["results truncated due to limit"])
    );
    let r = post(
        s.addr,
        "/api/v1/label/job/values",
        &format!("match[]={}", enc("up{instance=\"b\"}")),
    );
    assert_eq!(r.json()["data"], json!(["db"]));
    // Any UTF-8 label name is valid in Prometheus 3: no such label, no values.
    let r = get(s.addr, "/api/v1/label/1bad/values");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"], json!([]));

    // The dotted tag is selected, grouped by and returned under its real name (Prometheus 3
    // quoting), and the legacy escape still selects it.
    for query in [
        "{\"disk.used\", \"host.name\"=\"web-1\"}",
        "{__name__=\"disk.used\", U__host_2e_name=\"web-1\"}",
    ] {
        let r = get(
            s.addr,
            &format!("/api/v1/query?query={}&time={}", enc(query), t(60)),
        );
        assert_eq!(
            r.json()["data"]["result"],
            json!([{"metric": {"host.name": "web-1", "__name__": "disk.used"}, "value": [t(60), "7"]}]),
            "{query}"
        );
    }
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query?query={}&time={}",
            enc("sum by (\"host.name\") ({\"disk.used\"})"),
            t(60)
        ),
    );
    assert_eq!(
        r.json()["data"]["result"],
        json!([{"metric": {"host.name": "web-1"}, "value": [t(60), "7"]}])
    );
    // A query's `limit` cuts its result, with the warning.
    let r = get(
        s.addr,
        &format!("/api/v1/query?query=up&time={}&limit=1", t(60)),
    );
    assert_eq!(r.json()["data"]["result"].as_array().unwrap().len(), 1);
    assert_eq!(
        r.json()["warnings"],
        json!(["results truncated due to limit"])
    );
}

#[test]
fn metadata_and_buildinfo() {
    let s = server(Limits::default());
    let r = get(s.addr, "/api/v1/metadata");
    assert_eq!(
        r.json(),
        json!({"status": "success", "data": {
            "disk.used": [{"type": "unknown", "help": "", "unit": ""}],
            "lat": [{"type": "histogram", "help": "", "unit": ""}],
            "up": [{"type": "unknown", "help": "", "unit": ""}]
        }})
    );
    let r = get(s.addr, "/api/v1/metadata?metric=lat");
    assert_eq!(
        r.json()["data"],
        json!({"lat": [{"type": "histogram", "help": "", "unit": ""}]})
    );
    let r = post(s.addr, "/api/v1/query_exemplars", "query=up&start=0&end=1");
    assert_eq!(r.body, "{\"status\":\"success\",\"data\":[]}");
    let r = get(s.addr, "/api/v1/status/buildinfo");
    let v = r.json();
    assert_eq!(v["status"], "success");
    assert_eq!(v["data"]["version"], "3.5.0");
    assert!(v["data"]["revision"]
        .as_str()
        .unwrap()
        .starts_with("strata-"));
}

/// Queries while a writer appends: every answer is a success, the count of samples seen never
/// goes down from one answer to the next, and a query sees whole batches only — within one
/// selector and across two selectors of one query (one store view per query).
#[test]
fn queries_during_writes_see_whole_batches() {
    let s = server(Limits::default());
    let store = Arc::clone(&s.store);
    const BATCHES: i64 = 200;
    let writer = std::thread::spawn(move || {
        let k = key(&[("__name__", "live"), ("n", "1")]);
        let k2 = key(&[("__name__", "live"), ("n", "2")]);
        for i in 0..BATCHES {
            let mut batch = WriteBatch::new();
            batch.numeric(&k, (T0_S + i) * 1000, i as f64).unwrap();
            batch.numeric(&k2, (T0_S + i) * 1000, i as f64).unwrap();
            store.write(&batch).unwrap();
        }
    });
    let q = enc("sum by (n) (count_over_time(live[1h]))");
    let mut last = 0.0;
    let mut answers = 0;
    loop {
        let done = writer.is_finished();
        let r = get(s.addr, &format!("/api/v1/query?query={q}&time={}", t(1800)));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let result = v["data"]["result"].as_array().unwrap().clone();
        let counts: Vec<f64> = result
            .iter()
            .map(|s| s["value"][1].as_str().unwrap().parse().unwrap())
            .collect();
        // Both series are written in one batch: equal counts, or the second not yet created.
        if counts.len() == 2 {
            assert_eq!(counts[0], counts[1], "{}", r.body);
        }
        let diff = enc(
            "sum(count_over_time(live{n=\"1\"}[1h])) - sum(count_over_time(live{n=\"2\"}[1h]))",
        );
        let r = get(
            s.addr,
            &format!("/api/v1/query?query={diff}&time={}", t(1800)),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        for sample in r.json()["data"]["result"].as_array().unwrap() {
            assert_eq!(sample["value"][1], "0", "{}", r.body);
        }
        let now = counts.first().copied().unwrap_or(0.0);
        assert!(now >= last, "count went from {last} to {now}");
        last = now;
        answers += 1;
        if done {
            break;
        }
    }
    writer.join().unwrap();
    assert_eq!(last, BATCHES as f64);
    assert!(answers >= 1);
}

#[test]
fn self_monitoring_streams_stay_out_of_listings() {
    let s = server(Limits::default());
    let own =
        StreamKey::parse("strata.http.request_latency|ST[endpoint:query,strata:self]").unwrap();
    let mut h = Histogram::new();
    h.insert_n(0.001, 2);
    let mut batch = WriteBatch::new();
    batch.histogram(&own, T0_S * 1000, &h).unwrap();
    s.store.write(&batch).unwrap();

    let r = get(s.addr, "/api/v1/labels");
    assert_eq!(
        r.json()["data"],
        json!(["__name__", "host.name", "instance", "job", "svc"])
    );
    let r = get(s.addr, "/api/v1/label/__name__/values");
    assert_eq!(r.json()["data"], json!(["disk.used", "lat", "up"]));
    let r = get(s.addr, "/api/v1/label/strata/values");
    assert_eq!(r.json()["data"], json!([]));
    let r = get(
        s.addr,
        &format!("/api/v1/series?match[]={}", enc("{__name__=~\".+\"}")),
    );
    assert_eq!(r.json()["data"].as_array().unwrap().len(), 4, "{}", r.body);
    let r = get(s.addr, "/api/v1/metadata");
    assert!(r.json()["data"]
        .get("strata.http.request_latency")
        .is_none());

    // Asked for: by the `strata` label, by exact name, or with include_self=true.
    let r = get(
        s.addr,
        &format!("/api/v1/series?match[]={}", enc("{strata=\"self\"}")),
    );
    assert_eq!(
        r.json()["data"],
        json!([{"__name__": "strata.http.request_latency", "endpoint": "query", "strata": "self"}])
    );
    let r = get(
        s.addr,
        &format!(
            "/api/v1/label/endpoint/values?match[]={}",
            enc("{\"strata.http.request_latency\"}")
        ),
    );
    assert_eq!(r.json()["data"], json!(["query"]));
    let r = get(s.addr, "/api/v1/label/__name__/values?include_self=true");
    assert_eq!(
        r.json()["data"],
        json!(["disk.used", "lat", "strata.http.request_latency", "up"])
    );
    let r = get(s.addr, "/api/v1/labels?include_self=true");
    assert_eq!(
        r.json()["data"],
        json!([
            "__name__",
            "endpoint",
            "host.name",
            "instance",
            "job",
            "strata",
            "svc"
        ])
    );
    let r = get(
        s.addr,
        "/api/v1/metadata?metric=strata.http.request_latency",
    );
    assert_eq!(
        r.json()["data"]["strata.http.request_latency"][0]["type"],
        "histogram"
    );
}

#[test]
fn rules_and_alerts_answer_prometheus_empty_lists() {
    let s = server(Limits::default());
    let r = get(s.addr, "/api/v1/rules");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"status": "success", "data": {"groups": []}})
    );
    let r = get(s.addr, "/api/v1/alerts");
    assert_eq!(
        r.json(),
        json!({"status": "success", "data": {"alerts": []}})
    );
}

#[test]
fn warnings_and_infos_come_in_their_arrays() {
    let s = server(Limits::default());
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query?query={}&time={}",
            enc("rate(up[5m])"),
            t(600)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["infos"],
        json!(["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"up\""])
    );
    assert!(r.json().get("warnings").is_none(), "{}", r.body);
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query_range?query={}&start={}&end={}&step=60",
            enc("quantile(2, up)"),
            t(0),
            t(120)
        ),
    );
    assert_eq!(
        r.json()["warnings"],
        json!(["PromQL warning: quantile value should be between 0 and 1, got 2"])
    );
    // An error carries no annotations, only Prometheus's error shape.
    let r = get(
        s.addr,
        &format!(
            "/api/v1/query?query={}&time={}",
            enc("label_replace(label_replace(up, \"job\", \"\", \"\", \"\"), \"instance\", \"\", \"\", \"\")"),
            t(60)
        ),
    );
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json(),
        json!({"status": "error", "errorType": "execution", "error": "vector cannot contain metrics with the same labelset"})
    );
}
