//! dns against Debian's dnsmasq on loopback (installed when missing), and ping to 127.0.0.1
//! and ::1 with whichever ICMP socket the machine allows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// dnsmasq answering for `strata.test` only, on a free loopback port, with no upstream.
fn dnsmasq() -> (Service, u16) {
    ensure_packages("/usr/sbin/dnsmasq", &["dnsmasq-base"]);
    let port = free_port();
    let child = Command::new("/usr/sbin/dnsmasq")
        .args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            "--pid-file=",
            "--user=root",
            "--local=/test/",
            "--host-record=strata.test,10.1.2.3,fd00::7",
            "--host-record=www.strata.test,10.1.2.4",
            "--txt-record=strata.test,\"hello strata\"",
            "--mx-host=strata.test,mail.strata.test,10",
        ])
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let service = Service(child);
    wait_for_udp_dns(port);
    (service, port)
}

/// dnsmasq listens on TCP and UDP together; TCP accepting means it is up.
fn wait_for_udp_dns(port: u16) {
    wait_for_port(port, "dnsmasq");
}

#[tokio::test]
async fn dns_answers_from_dnsmasq() {
    let (_dns, port) = dnsmasq();
    let server = format!("127.0.0.1:{port}");
    let ms = run_ok(&spec("dns", "strata.test", json!({"server": server}))).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(text(&ms, "rcode"), "NOERROR");
    assert_eq!(numeric(&ms, "answer_count"), 1.0);
    assert_eq!(text(&ms, "answers"), "A 10.1.2.3");
    assert_eq!(samples(&ms, "query_time"), 1);
    assert_spec_tags(&ms);

    let ms = run_ok(&spec(
        "dns",
        "strata.test",
        json!({"server": server, "type": "AAAA"}),
    ))
    .await;
    assert_eq!(text(&ms, "answers"), "AAAA fd00::7");
    let ms = run_ok(&spec(
        "dns",
        "strata.test",
        json!({"server": server, "type": "txt"}),
    ))
    .await;
    assert_eq!(text(&ms, "answers"), "TXT \"hello strata\"");
    let ms = run_ok(&spec(
        "dns",
        "strata.test",
        json!({"server": server, "type": "MX"}),
    ))
    .await;
    assert_eq!(text(&ms, "answers"), "MX 10 mail.strata.test.");
    let config = json!({"server": server, "tcp": true});
    let ms = run_ok(&spec("dns", "www.strata.test", config)).await;
    assert_eq!(text(&ms, "answers"), "A 10.1.2.4");
}

#[tokio::test]
async fn dns_nxdomain_is_measured_and_can_be_expected() {
    let (_dns, port) = dnsmasq();
    let server = format!("127.0.0.1:{port}");
    let ms = run_ok(&spec(
        "dns",
        "missing.strata.test",
        json!({"server": server}),
    ))
    .await;
    assert_eq!(text(&ms, "rcode"), "NXDOMAIN");
    assert_eq!(numeric(&ms, "up"), 0.0);
    assert_eq!(text(&ms, "status"), "rcode NXDOMAIN (expected NOERROR)");
    assert_eq!(numeric(&ms, "answer_count"), 0.0);
    let config = json!({"server": server, "expected_rcode": "NXDOMAIN"});
    let ms = run_ok(&spec("dns", "missing.strata.test", config)).await;
    assert_eq!(numeric(&ms, "up"), 1.0);
}

#[tokio::test]
async fn dns_spec_errors_name_the_field() {
    let e = checks::validate(&spec("dns", "x.test", json!({"type": "BOGUS"}))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`config.type`: unknown record type \"BOGUS\""
    );
    let e = checks::validate(&spec("dns", "x.test", json!({"server": "nope"}))).unwrap_err();
    assert!(e.to_string().starts_with("`config.server`"), "{e}");
}

/// Pings `target`; `None` (with the reason printed) when the machine allows no ICMP socket.
async fn ping(target: &str) -> Option<Vec<checks::Measurement>> {
    let s = spec("ping", target, json!({"count": 4, "interval_ms": 20}));
    match checks::run(&s).await {
        Ok(ms) => Some(ms),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("ping_group_range") && text.contains("CAP_NET_RAW"),
                "{text}"
            );
            // As root in CI the raw socket must work: no skipping there.
            assert!(
                !(is_root() && in_ci()),
                "ping cannot run as root in CI: {text}"
            );
            println!("SKIPPED ping {target}: {text}");
            None
        }
    }
}

#[tokio::test]
async fn ping_ipv4_loopback() {
    let Some(ms) = ping("127.0.0.1").await else {
        return;
    };
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(samples(&ms, "rtt"), 4);
    assert_eq!(numeric(&ms, "sent"), 4.0);
    assert_eq!(numeric(&ms, "received"), 4.0);
    assert_eq!(numeric(&ms, "loss"), 0.0);
    assert_spec_tags(&ms);
}

#[tokio::test]
async fn ping_ipv6_loopback() {
    let has_v6 = std::net::UdpSocket::bind("[::1]:0").is_ok();
    if !has_v6 {
        assert!(!in_ci(), "no IPv6 loopback in CI");
        println!("SKIPPED ping ::1: this machine has no IPv6 loopback");
        return;
    }
    let Some(ms) = ping("::1").await else { return };
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(samples(&ms, "rtt"), 4);
    assert_eq!(numeric(&ms, "loss"), 0.0);
}

#[tokio::test]
async fn ping_spec_bounds() {
    let e = checks::validate(&spec("ping", "127.0.0.1", json!({"count": 1000}))).unwrap_err();
    assert_eq!(e.to_string(), "`config.count`: must be 1 to 100");
    let mut s = spec(
        "ping",
        "127.0.0.1",
        json!({"count": 10, "interval_ms": 1000}),
    );
    s.timeout_ms = 2000;
    let e = checks::validate(&s).unwrap_err().to_string();
    assert!(e.contains("do not fit in timeout_ms"), "{e}");
}
