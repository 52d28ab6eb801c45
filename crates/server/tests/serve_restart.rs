//! Graceful shutdown: SIGTERM flushes the statsd and Graphite buffers, closes the store and
//! exits 0; a restart on the same data directory serves everything acknowledged before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::io::Write;

use serde_json::{json, Value};
use serve_common::{client, eventually, fetch, now_s, numeric_slices, series, Server};

fn accepted(server: &Server, endpoint: &str) -> u64 {
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let prefix = format!("strata_ingest_samples_accepted_total{{endpoint=\"{endpoint}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|n| n.parse().unwrap())
        .unwrap_or(0)
}

/// Everything the test wrote, read back.
fn check_all(server: &Server, ts_s: i64) {
    let r = fetch(server, "and(t:r)", ts_s, "");
    assert_eq!(
        numeric_slices(series(&r, "trap|ST[__check:c,t:r]"))[0]["last"],
        7.0
    );
    assert_eq!(numeric_slices(series(&r, "m_v|ST[t:r]"))[0]["last"], 3.0);
    let counter: f64 = numeric_slices(series(&r, "cnt|ST[t:r]"))
        .iter()
        .map(|s| s["sum"].as_f64().unwrap())
        .sum();
    assert_eq!(counter, 6.0);
    let g = fetch(server, "and(__name:g.path)", ts_s, "");
    assert_eq!(numeric_slices(series(&g, "g.path|ST[t:r]"))[0]["last"], 9.0);
}

#[test]
fn sigterm_flushes_buffers_and_a_restart_keeps_everything_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strata.toml");
    // Long flush intervals: the statsd and Graphite samples are still buffered at SIGTERM.
    std::fs::write(
        &config,
        "[statsd]\nflush_interval_ms = 600000\n[graphite]\nflush_interval_ms = 600000\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let args = ["--config", config.to_str().unwrap()];
    let server = Server::start(&data, &args);
    let ts_s = now_s() - now_s().rem_euclid(60) + 5;
    let ts_ms = ts_s * 1000;

    let body = json!({"trap|ST[t:r]": {"_type": "n", "_value": 7, "_ts": ts_ms}});
    let response = client()
        .post(server.url("/module/httptrap/c/s"))
        .body(body.to_string())
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let response = client()
        .post(server.url("/api/v2/write?precision=s"))
        .body(format!("m,t=r v=3 {ts_s}\n"))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);

    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let statsd = server.statsd.clone().unwrap();
    socket
        .send_to(format!("cnt:2|c|#t:r|T{ts_s}\n").as_bytes(), &statsd)
        .unwrap();
    socket
        .send_to(format!("cnt:4|c|#t:r|T{ts_s}\n").as_bytes(), &statsd)
        .unwrap();
    eventually("statsd datagrams received", || {
        (accepted(&server, "statsd") == 2).then_some(())
    });

    let mut graphite = std::net::TcpStream::connect(server.graphite.clone().unwrap()).unwrap();
    graphite
        .write_all(format!("g.path;t=r 9 {ts_s}\n").as_bytes())
        .unwrap();
    graphite.flush().unwrap();

    // Nothing of statsd is in the store yet (one flush per 10 minutes).
    let r = fetch(&server, "and(__name:cnt)", ts_s, "");
    assert!(r["series"].as_array().unwrap().is_empty(), "{r}");

    let status = server.stop();
    assert!(status.success(), "exit status {status:?}");
    drop(graphite);

    let server = Server::start(&data, &args);
    check_all(&server, ts_s);
    // Self-monitoring was written at shutdown as histogram streams tagged strata:self.
    let found: Value = serve_common::get_json(&server.url(&format!(
        "/api/strata/v1/find?query={}",
        serve_common::urlencode("and(strata:self,endpoint:influx)")
    )));
    let keys: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"strata.http.request_latency|ST[endpoint:influx,strata:self]"),
        "{keys:?}"
    );
    // And a second clean cycle changes nothing.
    assert!(server.stop().success());
    let server = Server::start(&data, &args);
    check_all(&server, ts_s);
}
