//! Optional TLS: a self-signed certificate (rcgen) in the config makes the HTTP listener speak
//! HTTPS only; writes and reads work through it and a graceful stop still exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::time::Duration;

use serde_json::Value;
use serve_common::Server;

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
