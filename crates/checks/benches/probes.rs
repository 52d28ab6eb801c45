//! The probe and parse benchmark's Rust side, driven by `bench/checks/run.sh`:
//!
//! - `serve HTTP_PORT HTTPS_PORT TCP_PORT DIR`: the targets (hyper over TCP and over rustls
//!   with a test CA written to DIR/ca.pem, and a TCP listener) until killed;
//! - `probe KIND TARGET N CONFIG_JSON`: N checks one after another on one thread, printing the
//!   process CPU they took (`cpu_ns`), the wall time and how many were up;
//! - `blackbox URL N`: N sequential GETs of a blackbox_exporter probe URL over one keep-alive
//!   connection, printing how many reported `probe_success 1` (its CPU is read from /proc by
//!   the script);
//! - `parse FILE N`: the Prometheus text parser over FILE N times, printing CPU per parse.
//!
//! `cargo bench -p checks --bench probes` with no arguments runs a short smoke of `parse`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::rustls;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match args.first().map(String::as_str) {
        Some("serve") => rt.block_on(serve(&args[1..])),
        Some("probe") => rt.block_on(probe(&args[1..])),
        Some("blackbox") => rt.block_on(blackbox(&args[1..])),
        Some("parse") => parse(&args[1], args[2].parse().unwrap()),
        _ => smoke(),
    }
}

async fn probe(args: &[String]) {
    let spec = checks::CheckSpec {
        id: "bench".to_owned(),
        kind: args[0].clone(),
        target: args[1].clone(),
        period_ms: 60_000,
        timeout_ms: 5_000,
        config: serde_json::from_str(&args[3]).unwrap(),
        tags: Vec::new(),
    };
    let n: u64 = args[2].parse().unwrap();
    // One warm-up run: the TLS configuration cache and lazy statics, as a long-lived broker has.
    checks::run(&spec).await.unwrap();
    let cpu = clock::process_cpu_ns();
    let wall = std::time::Instant::now();
    let mut up = 0;
    for _ in 0..n {
        let ms = checks::run(&spec).await.unwrap();
        if ms
            .iter()
            .any(|m| m.name == "up" && m.value == checks::Value::Numeric(1.0))
        {
            up += 1;
        }
    }
    let cpu_ns = clock::process_cpu_ns() - cpu;
    println!(
        "cpu_ns={cpu_ns} wall_ns={} n={n} up={up}",
        wall.elapsed().as_nanos()
    );
}

async fn blackbox(args: &[String]) {
    let uri: hyper::Uri = args[0].parse().unwrap();
    let n: u64 = args[1].parse().unwrap();
    let authority = uri.authority().unwrap().as_str().to_owned();
    let tcp = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut ok = 0;
    for _ in 0..n {
        let req = hyper::Request::get(uri.path_and_query().unwrap().as_str())
            .header("host", &authority)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        if body.windows(16).any(|w| w == b"probe_success 1\n") {
            ok += 1;
        }
    }
    println!("n={n} up={ok}");
}

fn parse(file: &str, n: u64) {
    let body = std::fs::read(file).unwrap();
    let format = checks::prometheus::text::Format::Text;
    let series = checks::prometheus::text::parse(&body, format, usize::MAX).unwrap();
    let samples: usize = series.iter().map(|f| f.samples.len()).sum();
    let cpu = clock::process_cpu_ns();
    for _ in 0..n {
        let families = checks::prometheus::text::parse(&body, format, usize::MAX).unwrap();
        std::hint::black_box(families);
    }
    let cpu_ns = clock::process_cpu_ns() - cpu;
    println!(
        "cpu_ns={cpu_ns} n={n} bytes={} samples={samples}",
        body.len()
    );
}

fn smoke() {
    let dir = std::env::temp_dir().join("checks-bench-smoke.prom");
    let mut body = String::new();
    for i in 0..1000 {
        body.push_str(&format!(
            "http_requests_total{{code=\"200\",path=\"/api/{i}\"}} {i}\n"
        ));
    }
    std::fs::write(&dir, body).unwrap();
    parse(dir.to_str().unwrap(), 100);
}

async fn route(
    _req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    Ok(hyper::Response::new(Full::new(Bytes::from_static(b"ok\n"))))
}

async fn serve(args: &[String]) {
    let (http, https, tcp) = (args[0].clone(), args[1].clone(), args[2].clone());
    let acceptor = tls_acceptor(std::path::Path::new(&args[3]));
    tokio::spawn(http_server(format!("127.0.0.1:{http}"), None));
    tokio::spawn(http_server(format!("127.0.0.1:{https}"), Some(acceptor)));
    let listener = TcpListener::bind(format!("127.0.0.1:{tcp}")).await.unwrap();
    println!("serving");
    loop {
        // Accept and close: a connect probe needs nothing more.
        let _ = listener.accept().await;
    }
}

async fn http_server(addr: String, tls: Option<tokio_rustls::TlsAcceptor>) {
    let listener = TcpListener::bind(addr).await.unwrap();
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let http = hyper::server::conn::http1::Builder::new();
            let service = hyper::service::service_fn(route);
            match tls {
                Some(a) => {
                    if let Ok(s) = a.accept(tcp).await {
                        let _ = http.serve_connection(TokioIo::new(s), service).await;
                    }
                }
                None => {
                    let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                }
            }
        });
    }
}

/// A CA (written to DIR/ca.pem for both probers) and a certificate for 127.0.0.1.
fn tls_acceptor(dir: &std::path::Path) -> tokio_rustls::TlsAcceptor {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], der)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}
