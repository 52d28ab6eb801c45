//! Optional TLS: a self-signed certificate (rcgen) in the config makes the HTTP listener speak
//! HTTPS only; writes and reads work through it and a graceful stop still exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_common::Server;
use tokio_rustls::rustls;

#[test]
fn https_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, certified.cert.pem()).unwrap();
    std::fs::write(&key_path, certified.key_pair.serialize_pem()).unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            cert_path.to_str().unwrap(),
            key_path.to_str().unwrap()
        ),
    )
    .unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    assert!(server.line.contains("tls=on"), "{}", server.line);
    let port = server
        .http
        .as_ref()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();

    let root = reqwest::Certificate::from_pem(certified.cert.pem().as_bytes()).unwrap();
    let https = reqwest::blocking::Client::builder()
        .add_root_certificate(root)
        .use_rustls_tls()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let base = format!("https://localhost:{port}");
    let response = https
        .post(format!("{base}/module/httptrap/tls/s"))
        .body(r#"{"over_tls": 5}"#)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.json::<Value>().unwrap()["stats"], 1);
    let found: Value = https
        .get(format!(
            "{base}/api/strata/v1/find?query=and(__name:over_tls)"
        ))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(found[0]["key"], "over_tls|ST[__check:tls]");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = serve_common::client()
        .get(format!("http://127.0.0.1:{port}/health"))
        .send();
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    // An untrusting client refuses the self-signed certificate.
    let untrusting = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .build()
        .unwrap();
    assert!(untrusting.get(format!("{base}/health")).send().is_err());

    assert!(server.stop().success());
}

/// A TLS server with short deadlines (1 s header timeout, 2 s request timeout: 3 s idle), its
/// certificate's PEM and its port.
fn tls_server(dir: &std::path::Path) -> (Server, String, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    std::fs::write(&cert_path, certified.cert.pem()).unwrap();
    std::fs::write(&key_path, certified.key_pair.serialize_pem()).unwrap();
    let config = dir.join("strata.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n[limits]\nheader_read_timeout_ms = 1000\n\
             request_timeout_ms = 2000\n",
            cert_path.to_str().unwrap(),
            key_path.to_str().unwrap()
        ),
    )
    .unwrap();
    let server = Server::start(&dir.join("data"), &["--config", config.to_str().unwrap()]);
    let port = server
        .http
        .as_ref()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    (server, certified.cert.pem(), port)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// A finished TLS handshake with the server, offering `alpn`.
fn tls_connect(cert_pem: &str, port: &str, alpn: &[u8]) -> Tls {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut cert_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    assert_eq!(tls.conn.alpn_protocol(), Some(alpn));
    tls
}

/// Reads until the server closes the connection (EOF, reset or a TLS close); `None` when it
/// is still open after `wait`.
fn read_until_closed(stream: &mut impl Read, wait: Duration) -> Option<Vec<u8>> {
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 16 << 10];
    while started.elapsed() < wait {
        match stream.read(&mut buffer) {
            Ok(0) => return Some(seen),
            Ok(n) => seen.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Some(seen),
        }
    }
    None
}

/// An HTTP/2 frame: 24-bit length, type, flags, stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut frame = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Streams the rapid-reset client opens and cancels (the server must end it well before).
const RAPID_RESET_STREAMS: u32 = 20_000;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const H2_HEADERS: u8 = 0x1;
const H2_RST_STREAM: u8 = 0x3;
const H2_SETTINGS: u8 = 0x4;
const H2_GOAWAY: u8 = 0x7;
/// GOAWAY's error code for a peer that generates excessive load.
const H2_ENHANCE_YOUR_CALM: u32 = 0xb;

/// `GET /health` on `stream` as an HPACK block (static table entries; the authority a literal
/// never indexed), ending the stream.
fn h2_get_health(stream: u32) -> Vec<u8> {
    let mut block = vec![0x82, 0x87, 0x04, 7];
    block.extend_from_slice(b"/health");
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    h2_frame(H2_HEADERS, 0x5, stream, &block)
}

/// The error codes of the GOAWAY frames among `bytes` (frames from the server, in order).
fn goaway_codes(bytes: &[u8]) -> Vec<u32> {
    let mut codes = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = (usize::from(bytes[at]) << 16)
            | (usize::from(bytes[at + 1]) << 8)
            | usize::from(bytes[at + 2]);
        let end = at + 9 + len;
        if end > bytes.len() {
            break;
        }
        if bytes[at + 3] == H2_GOAWAY && len >= 8 {
            let code = &bytes[at + 9 + 4..at + 9 + 8];
            codes.push(u32::from_be_bytes(code.try_into().unwrap()));
        }
        at = end;
    }
    codes
}

/// A counter from `/metrics` (`name` with its trailing space).
fn counter(https: &reqwest::blocking::Client, base: &str, name: &str) -> u64 {
    let metrics = https
        .get(format!("{base}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    kib * 1024
}

/// TLS and HTTP/2 connections are bounded like plain ones: a client that never finishes its
/// handshake, one idle after it (HTTP/1.1 or HTTP/2), and a SETTINGS flood are closed within
/// their deadlines; an HTTP/2 connection offers at most 100 streams at once; a rapid-reset
/// flood (streams opened and cancelled at once, CVE-2023-44487) ends with GOAWAY
/// ENHANCE_YOUR_CALM. Meanwhile an HTTPS client's writes are answered and read back, and the
/// server's memory stays small.
#[test]
fn tls_and_http2_connections_have_deadlines_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let (server, cert_pem, port) = tls_server(dir.path());
    let pid = server.child.as_ref().unwrap().id();
    let root = reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap();
    let https = reqwest::blocking::Client::builder()
        .add_root_certificate(root)
        .use_rustls_tls()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let base = format!("https://localhost:{port}");
    let mut acknowledged = 0;
    let mut write = |what: &str| {
        let response = https
            .post(format!("{base}/write?precision=s"))
            .body(format!(
                "tls_good,after={what} v=1 {}\n",
                serve_common::now_s()
            ))
            .send()
            .unwrap_or_else(|e| panic!("a write after {what}: {e}"));
        assert_eq!(response.status().as_u16(), 204, "after {what}");
        acknowledged += 1;
    };
    // Deadlines are 1 s (handshake, first request) and 3 s (idle); closed within 10 s.
    let wait = Duration::from_secs(10);

    // No handshake at all: closed at the header timeout.
    let mut silent = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(
        read_until_closed(&mut silent, wait).is_some(),
        "a silent TLS client left open"
    );
    write("silent");

    // Handshake done, then nothing: closed, over HTTP/1.1 and HTTP/2.
    for (alpn, what) in [(&b"http/1.1"[..], "idle-h1"), (b"h2", "idle-h2")] {
        let mut idle = tls_connect(&cert_pem, &port, alpn);
        idle.sock
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let started = Instant::now();
        assert!(
            read_until_closed(&mut idle, wait).is_some(),
            "an idle {} connection left open",
            String::from_utf8_lossy(alpn)
        );
        eprintln!(
            "idle {} closed after {:?}",
            String::from_utf8_lossy(alpn),
            started.elapsed()
        );
        write(what);
    }

    // HTTP/2: the server's SETTINGS bound the streams a connection may open.
    let mut h2 = tls_connect(&cert_pem, &port, b"h2");
    h2.write_all(H2_PREFACE).unwrap();
    h2.write_all(&h2_frame(H2_SETTINGS, 0, 0, &[])).unwrap();
    let mut header = [0u8; 9];
    h2.read_exact(&mut header).unwrap();
    assert_eq!(header[3], H2_SETTINGS);
    let len = (usize::from(header[1]) << 8) | usize::from(header[2]);
    let mut settings = vec![0u8; len];
    h2.read_exact(&mut settings).unwrap();
    let streams_max = settings.chunks(6).find_map(|s| {
        (u16::from_be_bytes([s[0], s[1]]) == 0x3)
            .then(|| u32::from_be_bytes(s[2..6].try_into().unwrap()))
    });
    assert_eq!(streams_max, Some(100), "SETTINGS_MAX_CONCURRENT_STREAMS");

    // Rapid reset on that connection: streams opened and cancelled at once. What the server
    // answers is read between the writes (once it closes, a reset may discard unread bytes).
    h2.sock
        .set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let mut answered = Vec::new();
    let mut flood = Vec::new();
    let mut sent = 0;
    let mut buffer = [0u8; 16 << 10];
    for n in 0..RAPID_RESET_STREAMS {
        let stream = 2 * n + 1;
        flood.extend_from_slice(&h2_get_health(stream));
        flood.extend_from_slice(&h2_frame(H2_RST_STREAM, 0, stream, &8u32.to_be_bytes()));
        if flood.len() > 4 << 10 {
            if h2.write_all(&flood).is_err() {
                break;
            }
            sent = n + 1;
            flood.clear();
            match h2.read(&mut buffer) {
                Ok(0) => break,
                Ok(got) => answered.extend_from_slice(&buffer[..got]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break,
            }
        }
    }
    h2.sock
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let rest = read_until_closed(&mut h2, wait).expect("a rapid-reset connection left open");
    answered.extend_from_slice(&rest);
    let codes = goaway_codes(&answered);
    eprintln!("rapid reset: {sent} streams sent before the server ended it; GOAWAY {codes:?}");
    assert!(
        codes.contains(&H2_ENHANCE_YOUR_CALM),
        "GOAWAY codes {codes:?}"
    );
    assert!(sent < RAPID_RESET_STREAMS, "all {sent} reset streams taken");
    write("rapid-reset");

    // A SETTINGS flood that never reads the acknowledgements: once the server cannot write
    // them and nothing else moves, the connection is closed at its idle deadline.
    let stalled_before = counter(
        &https,
        &base,
        "strata_http_connections_stalled_closed_total ",
    );
    let mut settings_flood = tls_connect(&cert_pem, &port, b"h2");
    settings_flood.write_all(H2_PREFACE).unwrap();
    let one = h2_frame(H2_SETTINGS, 0, 0, &[0, 0x3, 0, 0, 0, 10]);
    let batch: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * 10_000)
        .collect();
    settings_flood
        .sock
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for _ in 0..100 {
        if settings_flood.write_all(&batch).is_err() {
            break;
        }
    }
    let rss = rss_bytes(pid);
    serve_common::eventually("the SETTINGS flood closed", || {
        let now = counter(
            &https,
            &base,
            "strata_http_connections_stalled_closed_total ",
        );
        (now > stalled_before).then_some(())
    });
    drop(settings_flood);
    write("settings-flood");
    eprintln!("rss after the floods: {} MiB", rss >> 20);
    assert!(rss < 256 << 20, "RSS {} MiB", rss >> 20);

    let found: Value = https
        .get(format!(
            "{base}/api/strata/v1/find?query=and(__name:tls_good_v)"
        ))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(found.as_array().unwrap().len(), acknowledged, "{found}");
    let handshakes = counter(&https, &base, "strata_http_tls_handshakes_timed_out_total ");
    assert!(handshakes >= 1, "{handshakes} handshakes timed out");
    let stalled = counter(
        &https,
        &base,
        "strata_http_connections_stalled_closed_total ",
    );
    assert!(stalled >= 3, "{stalled} stalled connections closed");
    assert!(server.stop().success());
}
