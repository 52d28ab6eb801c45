//! Graceful shutdown: SIGTERM flushes the statsd and Graphite buffers, closes the store and
//! exits 0; a restart on the same data directory serves everything acknowledged before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::io::Write;

use serde_json::{json, Value};
use serve_common::{
    client, eventually, fetch, metrics_text, now_s, numeric_slices, series, Server,
};

fn accepted(server: &Server, endpoint: &str) -> u64 {
    let text = metrics_text(server);
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

#[test]
fn a_request_in_flight_at_sigterm_is_finished_and_kept() {
    use std::io::Read;
    use std::net::TcpStream;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &[]);
    let http = server.http.clone().unwrap();
    let ts_ms = (now_s() - 60) * 1000;
    let body = format!(r#"{{"inflight": {{"_type": "n", "_value": 11, "_ts": {ts_ms}}}}}"#);
    let (first, rest) = body.split_at(10);
    let mut stream = TcpStream::connect(&http).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    // `Expect: 100-continue`: the server answers `100 Continue` once the handler starts reading
    // the body, so SIGTERM lands while this request is in flight (not while the connection is
    // still in the listen backlog, or idle, which a shutting-down server may close).
    write!(
        stream,
        "POST /module/httptrap/c/s HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.flush().unwrap();
    let interim = read_head(&mut stream);
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    stream.write_all(first.as_bytes()).unwrap();
    stream.flush().unwrap();

    let child = server.child.take().unwrap();
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    // Once new connections are refused the server is shutting down; the old one stays open.
    eventually("listener closed", || {
        TcpStream::connect(&http).is_err().then_some(())
    });
    stream.write_all(rest.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(r#""stats":1"#), "{reply}");
    server.child = Some(child);
    let status = server.stop_waiting();
    assert!(status.success(), "{status:?}");

    let server = Server::start(&data, &[]);
    let r = fetch(&server, "and(__name:inflight)", ts_ms / 1000, "");
    assert_eq!(
        numeric_slices(series(&r, "inflight|ST[__check:c]"))[0]["last"],
        11.0
    );
}

/// The head of one HTTP/1.1 response (up to the blank line) read off the stream.
fn read_head(stream: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    // Bounded: a response head is far shorter than this.
    while !bytes.ends_with(b"\r\n\r\n") && bytes.len() < 64 * 1024 {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "connection closed in headers"
        );
        bytes.push(byte[0]);
    }
    String::from_utf8(bytes).unwrap()
}

/// SIGTERM closes the store itself (WAL and index synced), not only what was acknowledged:
/// nothing the server started (the broker links' hub lives for the whole process) may keep it
/// referenced past the stop.
#[test]
fn sigterm_closes_the_store_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log_path = dir.path().join("stderr.log");
    let mut cmd = serve_common::strata();
    cmd.args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--statsd",
        "off",
        "--graphite",
        "off",
    ])
    .arg("--data-dir")
    .arg(&data)
    .env("RUST_LOG", "info")
    .stderr(std::fs::File::create(&log_path).unwrap());
    let server = Server::spawn(cmd, &data);
    let written = client()
        .post(server.url("/api/v2/write"))
        .body("m v=1\n")
        .send()
        .unwrap();
    assert_eq!(written.status(), 204);
    assert!(server.stop().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("store closed"), "{log}");
    assert!(!log.contains("still referenced"), "{log}");
}
