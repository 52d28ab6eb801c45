//! http, https and tcp checks against real servers started here: hyper over TCP and over
//! rustls with a test CA, and plain TCP listeners that send a banner.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls::{self, pki_types::PrivateKeyDer};

const BODY: &str = "hello from strata";

/// An httptrap document: a number, text, a histogram, a cumulative histogram, a nested object
/// and a stream-tagged name.
const TRAP: &str = r#"{
  "requests": 12,
  "version": "1.2.3",
  "latency": { "_type": "h", "_value": ["H[1.2e-01]=40", "H[3.0e-01]=2"] },
  "served": { "_type": "H", "_value": ["H[1.0e+00]=5"] },
  "db": { "queries": 3 },
  "errors|ST[dc:east]": 1,
  "empty": null
}"#;

async fn route(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let mut res = Response::builder();
    let body = match path.as_str() {
        "/ok" => BODY.to_owned(),
        "/redirect" => {
            res = res.status(302).header("location", "/ok");
            String::new()
        }
        "/fail" => {
            res = res.status(500);
            "broken".to_owned()
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            BODY.to_owned()
        }
        "/trap" => TRAP.to_owned(),
        "/echo" => format!(
            "{} {}",
            req.method(),
            req.headers()
                .get("x-probe")
                .map_or("", |v| v.to_str().unwrap())
        ),
        _ => {
            res = res.status(404);
            String::new()
        }
    };
    Ok(res.body(Full::new(Bytes::from(body))).unwrap())
}

/// Serves `route` on a loopback port, over TLS when `tls` is given.
async fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(route);
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(acceptor) => {
                        if let Ok(s) = acceptor.accept(tcp).await {
                            let _ = http.serve_connection(TokioIo::new(s), service).await;
                        }
                    }
                    None => {
                        let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                    }
                }
            });
        }
    });
    addr
}

fn acceptor(pki: &TestPki) -> tokio_rustls::TlsAcceptor {
    let certs = rustls_pemfile::certs(&mut pki.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key: PrivateKeyDer = rustls_pemfile::private_key(&mut pki.key_pem.as_bytes())
        .unwrap()
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test]
async fn http_ok_measures_every_phase() {
    let addr = serve(None).await;
    let spec = spec(
        "http",
        &format!("http://{addr}/ok"),
        json!({"body_regex": "from str"}),
    );
    checks::validate(&spec).unwrap();
    let ms = run_ok(&spec).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(numeric(&ms, "up"), 1.0);
    assert_eq!(numeric(&ms, "code"), 200.0);
    assert_eq!(numeric(&ms, "bytes"), BODY.len() as f64);
    assert_eq!(numeric(&ms, "body_match"), 1.0);
    for phase in ["connect_time", "first_byte_time", "total_time"] {
        assert_eq!(samples(&ms, phase), 1, "{phase}");
    }
    // An IP target needs no lookup and TLS is off: neither phase is recorded.
    assert!(!has(&ms, "dns_time") && !has(&ms, "tls_time"));
    assert_spec_tags(&ms);
}

#[tokio::test]
async fn http_name_target_times_the_lookup_and_sends_method_and_headers() {
    let addr = serve(None).await;
    let target = format!("http://localhost:{}/echo", addr.port());
    let config = json!({"method": "POST", "headers": {"X-Probe": "p1"}, "body": "x",
        "body_regex": "^POST p1$"});
    let ms = run_ok(&spec("http", &target, config)).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(samples(&ms, "dns_time"), 1);
}

#[tokio::test]
async fn http_connect_refused_is_measured_not_an_error() {
    let port = free_port();
    let ms = run_ok(&spec(
        "http",
        &format!("http://127.0.0.1:{port}/"),
        json!({}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "connect refused");
    assert_eq!(numeric(&ms, "up"), 0.0);
    assert!(!has(&ms, "connect_time"));
}

#[tokio::test]
async fn http_unexpected_status_and_body_mismatch_fail() {
    let addr = serve(None).await;
    let ms = run_ok(&spec("http", &format!("http://{addr}/fail"), json!({}))).await;
    assert_eq!(numeric(&ms, "code"), 500.0);
    assert_eq!(text(&ms, "status"), "unexpected status 500");
    let ms = run_ok(&spec(
        "http",
        &format!("http://{addr}/fail"),
        json!({"expected_status": [500]}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "ok");
    let ms = run_ok(&spec(
        "http",
        &format!("http://{addr}/ok"),
        json!({"body_regex": "^nope"}),
    ))
    .await;
    assert_eq!(numeric(&ms, "body_match"), 0.0);
    assert_eq!(text(&ms, "status"), "body does not match body_regex");
}

#[tokio::test]
async fn http_redirects_followed_within_the_bound() {
    let addr = serve(None).await;
    let url = format!("http://{addr}/redirect");
    let ms = run_ok(&spec("http", &url, json!({}))).await;
    assert_eq!(numeric(&ms, "code"), 302.0);
    let ms = run_ok(&spec("http", &url, json!({"follow_redirects": 2}))).await;
    assert_eq!(numeric(&ms, "code"), 200.0);
    assert_eq!(numeric(&ms, "redirects"), 1.0);
    // Each hop's connect is a sample of the same histogram.
    assert_eq!(samples(&ms, "connect_time"), 2);
    assert_eq!(samples(&ms, "total_time"), 1);
}

#[tokio::test]
async fn http_timeout_keeps_the_phases_that_happened() {
    let addr = serve(None).await;
    let mut s = spec("http", &format!("http://{addr}/slow"), json!({}));
    s.timeout_ms = 400;
    let started = Instant::now();
    let ms = run_ok(&s).await;
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(text(&ms, "status"), "timeout");
    assert_eq!(numeric(&ms, "up"), 0.0);
    assert_eq!(samples(&ms, "connect_time"), 1);
}

#[tokio::test]
async fn https_with_a_test_ca_measures_tls_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let addr = serve(Some(acceptor(&pki))).await;
    let url = format!("https://localhost:{}/ok", addr.port());
    let ms = run_ok(&spec("https", &url, json!({"ca_file": pki.ca_file}))).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(numeric(&ms, "code"), 200.0);
    assert_eq!(samples(&ms, "tls_time"), 1);
    let days = numeric(&ms, "cert_expiry_days");
    assert!((days - days_to_not_after()).abs() < 0.01, "{days}");
    // By IP address too (the certificate names 127.0.0.1).
    let ms = run_ok(&spec(
        "https",
        &format!("https://{addr}/ok"),
        json!({"ca_file": pki.ca_file}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "ok");
}

#[tokio::test]
async fn https_unknown_ca_fails_unless_verification_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let addr = serve(Some(acceptor(&pki))).await;
    let url = format!("https://{addr}/ok");
    let ms = run_ok(&spec("https", &url, json!({}))).await;
    let status = text(&ms, "status");
    assert!(status.contains("unknown authority"), "{status}");
    assert_eq!(numeric(&ms, "up"), 0.0);
    assert_eq!(samples(&ms, "connect_time"), 1);
    let ms = run_ok(&spec("https", &url, json!({"tls_verify": false}))).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert!(has(&ms, "cert_expiry_days"));
}

#[tokio::test]
async fn https_missing_ca_file_is_an_error_naming_it() {
    let s = spec(
        "https",
        "https://127.0.0.1:1/",
        json!({"ca_file": "/nonexistent/ca.pem"}),
    );
    let e = checks::run(&s).await.unwrap_err().to_string();
    assert!(
        e.contains("config.ca_file") && e.contains("/nonexistent/ca.pem"),
        "{e}"
    );
}

/// A TCP server that sends `banner` to each connection, over TLS when given.
async fn banner_server(banner: &'static str, tls: Option<tokio_rustls::TlsAcceptor>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    Some(a) => {
                        if let Ok(mut s) = a.accept(tcp).await {
                            let _ = s.write_all(banner.as_bytes()).await;
                            let _ = s.flush().await;
                            let mut sink = [0u8; 64];
                            let _ = s.read(&mut sink).await;
                        }
                    }
                    None => {
                        let _ = tcp.write_all(banner.as_bytes()).await;
                        let mut sink = [0u8; 64];
                        let _ = tcp.read(&mut sink).await;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn tcp_connect_and_banner() {
    let addr = banner_server("220 strata ready\r\nmore\r\n", None).await;
    let ms = run_ok(&spec("tcp", &addr.to_string(), json!({}))).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(samples(&ms, "connect_time"), 1);
    let ms = run_ok(&spec(
        "tcp",
        &addr.to_string(),
        json!({"banner_regex": "^220 "}),
    ))
    .await;
    assert_eq!(text(&ms, "banner"), "220 strata ready");
    assert_eq!(numeric(&ms, "banner_match"), 1.0);
    assert_eq!(samples(&ms, "banner_time"), 1);
    let ms = run_ok(&spec(
        "tcp",
        &addr.to_string(),
        json!({"banner_regex": "^500"}),
    ))
    .await;
    assert_eq!(numeric(&ms, "banner_match"), 0.0);
    assert_eq!(numeric(&ms, "up"), 0.0);
    let ms = run_ok(&spec(
        "tcp",
        &format!("127.0.0.1:{}", free_port()),
        json!({}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "connect refused");
}

#[tokio::test]
async fn tcp_with_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let addr = banner_server("+OK tls\r\n", Some(acceptor(&pki))).await;
    let config = json!({"tls": true, "ca_file": pki.ca_file, "banner_regex": "^\\+OK"});
    let ms = run_ok(&spec("tcp", &addr.to_string(), config)).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(text(&ms, "banner"), "+OK tls");
    assert_eq!(samples(&ms, "tls_time"), 1);
    assert!((numeric(&ms, "cert_expiry_days") - days_to_not_after()).abs() < 0.01);
}

#[tokio::test]
async fn json_reads_an_httptrap_document_with_the_ingest_parser() {
    let addr = serve(None).await;
    let ms = run_ok(&spec("json", &format!("http://{addr}/trap"), json!({}))).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(numeric(&ms, "requests"), 12.0);
    assert_eq!(text(&ms, "version"), "1.2.3");
    assert_eq!(samples(&ms, "latency"), 42);
    match &find(&ms, "served", &[]).unwrap().value {
        checks::Value::Cumulative(hist::convert::Cumulative::Bins(h)) => {
            assert_eq!(h.sample_count(), 5)
        }
        other => panic!("served: {other:?}"),
    }
    assert_eq!(numeric(&ms, "db`queries"), 3.0);
    assert_eq!(numeric_tagged(&ms, "errors", &[("dc", "east")]), 1.0);
    assert_eq!(numeric(&ms, "metrics"), 6.0);
    assert_eq!(numeric(&ms, "rejected"), 0.0);
    assert!(!has(&ms, "empty"));
    assert_spec_tags(&ms);
    let ms = run_ok(&spec("json", &format!("http://{addr}/ok"), json!({}))).await;
    let status = text(&ms, "status");
    assert!(status.starts_with("not httptrap JSON: "), "{status}");
}
