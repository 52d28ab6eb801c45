//! `strata observe` end to end into a running `strata serve`: a capture of HTTP traffic with
//! known latencies is read (`--read`), paired, and its per-period histograms sent to the core,
//! where the query API must return exactly the requests and latencies the capture holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use serde_json::Value;
use serve_common::{fetch, now_s, strata, urlencode, Server};

use observe::synth::{Capture, Conn};

const LOGINS: u64 = 300;
const USERS: u64 = 120;
const LOGIN_LATENCY_NS: u64 = 2_000_000;
const USER_LATENCY_NS: u64 = 7_000_000;

/// Three keep-alive connections to port 8080: `GET /login` answered 200 after 2 ms (the
/// request's and response's one segment each 1 µs long, so the observed latency is 2.001 ms)
/// and `POST /users/<n>` answered 500 after 7 ms; the capture ends a minute ago.
fn capture(start_ns: u64) -> Vec<u8> {
    let mut cap = Capture::new(start_ns);
    let mut conns: Vec<Conn> = (0..3).map(|k| Conn::new(41_000 + k, 8080)).collect();
    for c in conns.iter_mut() {
        cap.open(c);
    }
    for i in 0..LOGINS + USERS {
        let c = &mut conns[(i % 3) as usize];
        if i < LOGINS {
            cap.request(
                c,
                format!("GET /login?OBSID{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes(),
            );
            cap.wait(LOGIN_LATENCY_NS);
            cap.response(c, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        } else {
            let req =
                format!("POST /users/{i} HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc");
            cap.request(c, req.as_bytes());
            cap.wait(USER_LATENCY_NS);
            cap.response(c, b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n");
        }
        cap.wait(50_000);
    }
    for c in conns.iter_mut() {
        cap.close(c);
    }
    cap.pcap()
}

/// The non-null values of a fetch result's first series.
fn values(result: &Value) -> Vec<Value> {
    result["series"][0]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no series in {result}"))
        .iter()
        .map(|d| d["value"].clone())
        .filter(|v| !v.is_null() && v != &serde_json::json!(0))
        .collect()
}

/// The sum of the per-slice counts of the histograms `query` selects.
fn count(server: &Server, query: &str, ts_s: i64) -> u64 {
    let r = fetch(
        server,
        query,
        ts_s,
        &format!("&transform={}", urlencode("count")),
    );
    assert_eq!(r["series"].as_array().unwrap().len(), 1, "{query}: {r}");
    values(&r).iter().map(|v| v.as_f64().unwrap() as u64).sum()
}

#[test]
fn read_capture_send_to_serve_and_query_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let ts_s = now_s() - 120;
    let pcap = dir.path().join("http.pcap");
    std::fs::write(&pcap, capture(ts_s as u64 * 1_000_000_000)).unwrap();

    let out = strata()
        .arg("observe")
        .arg("--read")
        .arg(&pcap)
        .args(["--wire", "http:8080", "--period", "10"])
        .args(["--route", "login=/login", "--route", "user=/users/:id"])
        .args(["--core", &server.url("")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "strata observe: {stderr}");
    assert!(
        stderr.contains(&format!("{} requests paired, 0 unpaired", LOGINS + USERS)),
        "{stderr}"
    );
    assert!(stderr.contains("refused 0, dropped 0"), "{stderr}");

    let login =
        "and(__name:observe.latency,proto:http,port:8080,method:GET,route:login,status:2xx)";
    let user = "and(__name:observe.latency,proto:http,method:POST,route:user,status:5xx)";
    assert_eq!(count(&server, login, ts_s), LOGINS);
    assert_eq!(count(&server, user, ts_s), USERS);

    // Every login took 2.001 ms on the wire, every user request 7.001 ms: all in one log-linear
    // bin, [2.0, 2.1) ms and [7.0, 7.1) ms, which the quantiles interpolate within.
    for (query, lo_s, hi_s) in [(login, 0.0020, 0.0021), (user, 0.0070, 0.0071)] {
        let r = fetch(
            &server,
            query,
            ts_s,
            &format!("&transform={}", urlencode("quantile:0,1")),
        );
        for q in values(&r) {
            for v in q.as_array().unwrap() {
                let v = v.as_f64().unwrap();
                assert!((lo_s..=hi_s).contains(&v), "{query}: {v}");
            }
        }
    }

    // Request and response sizes, and the pair counter.
    assert_eq!(
        count(
            &server,
            "and(__name:observe.request_bytes,route:login)",
            ts_s
        ),
        LOGINS
    );
    let pairs = fetch(&server, "and(__name:observe.pairs)", ts_s, "");
    let total: f64 = pairs["series"][0]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no observe.pairs in {pairs}"))
        .iter()
        .filter_map(|d| d.get("sum").and_then(Value::as_f64))
        .sum();
    assert_eq!(total as u64, LOGINS + USERS, "{pairs}");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// Live on `lo`: `strata observe --iface lo` watches one `strata serve` (the observed HTTP
/// server) answer 200 requests and sends what it saw to another (the core), where the count of
/// `GET /metrics` requests must be exactly 200. Capturing needs root: without it, says so.
#[test]
fn live_capture_on_lo_sent_to_serve() {
    if !is_root() {
        eprintln!("live_capture_on_lo_sent_to_serve: skipped, capturing needs root (CAP_NET_RAW)");
        return;
    }
    const REQUESTS: u64 = 200;
    let (core_dir, web_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let core = Server::start(core_dir.path(), &[]);
    let web = Server::start(web_dir.path(), &[]);
    let web_port = web
        .http
        .as_deref()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let ts_s = now_s();
    let mut observer = strata()
        .arg("observe")
        .args(["--iface", "lo", "--wire", &format!("http:{web_port}")])
        .args(["--period", "1", "--duration", "60", "--core", &core.url("")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The ring is up well within this, even on a loaded machine; a request before it would be
    // missed, and the count below would say so.
    std::thread::sleep(std::time::Duration::from_secs(4));
    let client = serve_common::client();
    for _ in 0..REQUESTS {
        let r = client.get(web.url("/metrics")).send().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        r.bytes().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &observer.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = observer.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(observer.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "strata observe: {stderr}");
    assert!(stderr.contains(" 0 kernel drops"), "{stderr}");
    assert!(stderr.contains("refused 0, dropped 0"), "{stderr}");
    let query = format!("and(__name:observe.latency,port:{web_port},method:GET,route:metrics)");
    assert_eq!(count(&core, &query, ts_s), REQUESTS, "{stderr}");
}
