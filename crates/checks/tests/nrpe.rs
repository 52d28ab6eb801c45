//! nrpe against Debian's NRPE daemon with the basic monitoring plugins (installed when
//! missing), started on free loopback ports from a config written here: TLS with a test
//! certificate (rustls cannot do NRPE's default anonymous DH), client certificates, plain TCP,
//! packet versions, and check_load's performance data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

const PLUGINS: &str = "/usr/lib/nagios/plugins";

/// How the daemon does TLS.
enum Tls<'a> {
    Certificate(&'a TestPki),
    ClientCertificates(&'a TestPki),
    /// NRPE's default: no certificate, anonymous DH only.
    Anonymous,
    Off,
}

fn nrpe(dir: &Path, tls: Tls) -> (Service, u16) {
    ensure_packages(
        "/usr/sbin/nrpe",
        &["nagios-nrpe-server", "monitoring-plugins-basic"],
    );
    let port = free_port();
    let mut cfg = format!(
        "pid_file={dir}/nrpe-{port}.pid\nserver_port={port}\nserver_address=127.0.0.1\n\
         allowed_hosts=127.0.0.1\ndont_blame_nrpe=1\ncommand_timeout=10\nconnection_timeout=30\n\
         ssl_version=TLSv1.2+\n\
         command[check_load]={PLUGINS}/check_load -w 15,10,5 -c 30,25,20\n\
         command[check_state0]={PLUGINS}/check_dummy 0 state-0\n\
         command[check_state1]={PLUGINS}/check_dummy 1 state-1\n\
         command[check_state2]={PLUGINS}/check_dummy 2 state-2\n\
         command[check_state3]={PLUGINS}/check_dummy 3 state-3\n",
        dir = dir.display()
    );
    if is_root() {
        cfg.push_str("nrpe_user=nagios\nnrpe_group=nagios\n");
    }
    let mut args = vec!["-f".to_owned()];
    match tls {
        Tls::Certificate(pki) | Tls::ClientCertificates(pki) => {
            cfg.push_str(&format!(
                "ssl_use_adh=0\nssl_cert_file={}\nssl_privatekey_file={}\nssl_cacert_file={}\n",
                pki.cert_file.display(),
                pki.key_file.display(),
                pki.ca_file.display()
            ));
            if matches!(tls, Tls::ClientCertificates(_)) {
                cfg.push_str("ssl_client_certs=2\n");
            }
        }
        Tls::Anonymous => {}
        Tls::Off => args.push("-n".to_owned()),
    }
    let path = dir.join(format!("nrpe-{port}.cfg"));
    std::fs::write(&path, cfg).unwrap();
    let child = Command::new("/usr/sbin/nrpe")
        .arg("-c")
        .arg(&path)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let service = Service(child);
    wait_for_port(port, "nrpe");
    (service, port)
}

/// A temp dir the daemon's unprivileged user can read, with the test PKI in it.
fn setup() -> (tempfile::TempDir, TestPki) {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir.path())
        .status()
        .unwrap();
    (dir, pki)
}

fn target(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[tokio::test]
async fn nrpe_check_load_over_tls_with_a_certificate() {
    let (dir, pki) = setup();
    let (_daemon, port) = nrpe(dir.path(), Tls::Certificate(&pki));
    let config =
        json!({"command": "check_load", "ca_file": pki.ca_file, "server_name": "localhost"});
    let ms = run_ok(&spec("nrpe", &target(port), config)).await;
    assert_eq!(text(&ms, "status"), "ok");
    let state = numeric(&ms, "state");
    let names = ["OK", "WARNING", "CRITICAL", "UNKNOWN"];
    assert_eq!(text(&ms, "state_text"), names[state as usize]);
    assert!(
        text(&ms, "output").contains("load average"),
        "{}",
        text(&ms, "output")
    );
    // The thresholds from the daemon's command line, and the load the kernel reports.
    for (label, warn, crit) in [
        ("load1", 15.0, 30.0),
        ("load5", 10.0, 25.0),
        ("load15", 5.0, 20.0),
    ] {
        assert_eq!(numeric(&ms, &format!("{label}_warn")), warn);
        assert_eq!(numeric(&ms, &format!("{label}_crit")), crit);
        assert_eq!(numeric(&ms, &format!("{label}_min")), 0.0);
    }
    let loadavg: f64 = std::fs::read_to_string("/proc/loadavg")
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (numeric(&ms, "load1") - loadavg).abs() < 2.0,
        "{} vs {loadavg}",
        numeric(&ms, "load1")
    );
    assert_eq!(numeric(&ms, "packet_version"), 4.0);
    assert_eq!(samples(&ms, "tls_time"), 1);
    assert_eq!(samples(&ms, "response_time"), 1);
    assert!((numeric(&ms, "cert_expiry_days") - days_to_not_after()).abs() < 0.01);
    assert_spec_tags(&ms);
}

#[tokio::test]
async fn nrpe_states_arguments_and_packet_versions() {
    let (dir, pki) = setup();
    let (_daemon, port) = nrpe(dir.path(), Tls::Certificate(&pki));
    let base =
        json!({"ca_file": pki.ca_file, "server_name": "localhost", "command": "check_state0"});
    for (code, text_state) in [(0, "OK"), (1, "WARNING"), (2, "CRITICAL"), (3, "UNKNOWN")] {
        let mut config = base.clone();
        config["command"] = json!(format!("check_state{code}"));
        let ms = run_ok(&spec("nrpe", &target(port), config)).await;
        assert_eq!(text(&ms, "status"), "ok");
        assert_eq!(numeric(&ms, "state"), f64::from(code));
        assert_eq!(text(&ms, "state_text"), text_state);
        assert!(
            text(&ms, "output").ends_with(&format!("state-{code}")),
            "{}",
            text(&ms, "output")
        );
        // A plugin reporting CRITICAL is a successful check of a critical service.
        assert_eq!(numeric(&ms, "up"), 1.0);
    }
    let mut config = base.clone();
    config["packet_version"] = json!(2);
    let ms = run_ok(&spec("nrpe", &target(port), config)).await;
    assert_eq!(numeric(&ms, "packet_version"), 2.0);
    assert_eq!(numeric(&ms, "state"), 0.0);
    // NRPE 4 takes versions 2 and 4 only: a version 3 query is closed without an answer.
    let mut config = base.clone();
    config["packet_version"] = json!(3);
    let ms = run_ok(&spec("nrpe", &target(port), config)).await;
    assert!(text(&ms, "status").starts_with("the daemon closed the connection without answering"));
    // Debian builds NRPE without argument support: a query with arguments is dropped too.
    let mut config = base.clone();
    config["args"] = json!(["x"]);
    let ms = run_ok(&spec("nrpe", &target(port), config)).await;
    assert!(text(&ms, "status").starts_with("the daemon closed the connection without answering"));
    let mut config = base;
    config["command"] = json!("check_missing");
    let ms = run_ok(&spec("nrpe", &target(port), config)).await;
    assert_eq!(text(&ms, "state_text"), "UNKNOWN");
}

#[tokio::test]
async fn nrpe_client_certificates() {
    let (dir, pki) = setup();
    let (_daemon, port) = nrpe(dir.path(), Tls::ClientCertificates(&pki));
    let without =
        json!({"command": "check_load", "ca_file": pki.ca_file, "server_name": "localhost"});
    let ms = run_ok(&spec("nrpe", &target(port), without.clone())).await;
    assert_eq!(numeric(&ms, "up"), 0.0);
    let mut with = without;
    with["cert_file"] = json!(pki.client_cert_file);
    with["key_file"] = json!(pki.client_key_file);
    let ms = run_ok(&spec("nrpe", &target(port), with)).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert!(has(&ms, "load1"));
}

#[tokio::test]
async fn nrpe_plain_tcp_and_the_anonymous_dh_default() {
    let (dir, _pki) = setup();
    let (_plain, plain_port) = nrpe(dir.path(), Tls::Off);
    let ms = run_ok(&spec(
        "nrpe",
        &target(plain_port),
        json!({"command": "check_load", "tls": false}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "ok");
    assert!(has(&ms, "load5"));
    let (_adh, adh_port) = nrpe(dir.path(), Tls::Anonymous);
    let ms = run_ok(&spec(
        "nrpe",
        &target(adh_port),
        json!({"command": "check_load", "tls_verify": false}),
    ))
    .await;
    assert_eq!(numeric(&ms, "up"), 0.0);
    let status = text(&ms, "status");
    assert!(
        status.contains("anonymous-DH") && status.contains("ssl_cert_file"),
        "{status}"
    );
}

#[tokio::test]
async fn nrpe_spec_errors() {
    let e = checks::validate(&spec("nrpe", "127.0.0.1", json!({})))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("`config.command`: required"), "{e}");
    let e = checks::validate(&spec("nrpe", "h", json!({"command": "a", "args": ["x!y"]})));
    assert!(e.unwrap_err().to_string().starts_with("`config.args`"));
    let e = checks::validate(&spec(
        "nrpe",
        "h",
        json!({"command": "a", "packet_version": 1}),
    ));
    assert_eq!(
        e.unwrap_err().to_string(),
        "`config.packet_version`: 2, 3 or 4"
    );
}
