//! Robustness limits: a request whose body never arrives gets a 408 JSON answer, a silent
//! Graphite connection is closed, an over-long Graphite line is skipped without losing its
//! neighbours.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serve_common::{eventually, fetch, now_s, numeric_slices, series, Server};

fn config(dir: &std::path::Path, text: &str) -> String {
    let path = dir.join("strata.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn stalled_body_gets_408_and_idle_graphite_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        dir.path(),
        "[limits]\nrequest_timeout_ms = 500\ngraphite_idle_timeout_ms = 300\nline_bytes_max = 100\n\
         [graphite]\nflush_interval_ms = 100\n",
    );
    let server = Server::start(&dir.path().join("data"), &["--config", &file]);

    // Headers promise 100 bytes; 10 arrive; then nothing.
    let mut http = TcpStream::connect(server.http.clone().unwrap()).unwrap();
    http.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        http,
        "POST /module/httptrap/c/s HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{{\"a\": 1, "
    )
    .unwrap();
    let mut reply = String::new();
    let mut buf = [0u8; 4096];
    while !reply.contains("request_timeout_ms") {
        let n = http.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed without an answer: {reply}");
        reply.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");

    // Graphite: a line over line_bytes_max between two good ones, then silence.
    let mut graphite = TcpStream::connect(server.graphite.clone().unwrap()).unwrap();
    graphite
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let ts = now_s();
    let long = format!("long.{} 1 {ts}", "x".repeat(200));
    write!(graphite, "ok.before 1 {ts}\n{long}\nok.after 2 {ts}\n").unwrap();
    // The server closes the silent connection: read sees EOF (or a reset), not the timeout.
    let read = graphite.read(&mut buf);
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
        "{read:?}"
    );
    let result = eventually("graphite lines", || {
        let r = fetch(&server, "and(__name:ok.*)", ts, "");
        let filled = r["series"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| !numeric_slices(s).is_empty())
            .count();
        (filled == 2).then_some(r)
    });
    assert_eq!(numeric_slices(series(&result, "ok.before"))[0]["last"], 1.0);
    assert_eq!(numeric_slices(series(&result, "ok.after"))[0]["last"], 2.0);
    let long_series = fetch(&server, "and(__name:long.*)", ts, "");
    assert_eq!(long_series["series"].as_array().unwrap().len(), 0);
    assert!(server.stop().success());
}
