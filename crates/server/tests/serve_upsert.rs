//! The core APIs `strata install agent` builds on, through a real `strata serve`: create-or-
//! replace at a client-chosen id for worksheets, dashboards, checks and rules; an unchanged body
//! writes nothing (same timestamp, same file, `x-strata-unchanged: true`); `owner` labels and
//! deletion by owner; checks listed per broker and kept across a restart; `/health` naming what
//! the core supports; `/install.sh` and `/download/strata` (with its SHA-256) served without a
//! token on a server that requires one for everything else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::os::unix::fs::MetadataExt;

use serde_json::{json, Value};
use serve_common::{client, Server};

const TOKEN: &str = "upsert-t0ken";

fn send(server: &Server, method: &str, path: &str, body: Option<String>) -> (u16, Value, bool) {
    let http = client();
    let url = server.url(path);
    let request = match method {
        "PUT" => http.put(url),
        "DELETE" => http.delete(url),
        _ => http.get(url),
    }
    .bearer_auth(TOKEN);
    let request = match body {
        Some(b) => request.body(b),
        None => request,
    };
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let unchanged = response.headers().get("x-strata-unchanged").is_some();
    let text = response.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        unchanged,
    )
}

fn start(dir: &std::path::Path) -> Server {
    let config = dir.join("strata.toml");
    std::fs::write(&config, format!("[auth]\ntoken = \"{TOKEN}\"\n")).unwrap();
    Server::start(
        &dir.join("data"),
        &["--config", config.to_str().unwrap(), "--statsd", "off"],
    )
}

fn check_body(owner: &str) -> Value {
    json!({
        "name": format!("tcp of {owner}"),
        "owner": owner,
        "spec": {"kind": "tcp", "target": "127.0.0.1:1", "period_ms": 10000, "timeout_ms": 1000},
    })
}

#[test]
fn documents_upsert_unchanged_and_delete_by_owner() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    for (collection, body) in [
        (
            "worksheets",
            json!({"name": "host a", "owner": "host:a", "graphs": []}),
        ),
        (
            "dashboards",
            json!({"name": "host a", "owner": "host:a", "panels": []}),
        ),
        ("checks", check_body("host:a")),
    ] {
        let path = format!("/api/strata/v1/{collection}/host-a");
        let (s, first, _) = send(&server, "PUT", &path, Some(body.to_string()));
        assert_eq!(s, 201, "{collection}: {first}");
        let file = dir.path().join(format!("data/{collection}/host-a.json"));
        let inode = std::fs::metadata(&file).unwrap().ino();
        let (s, again, unchanged) = send(&server, "PUT", &path, Some(body.to_string()));
        assert_eq!((s, unchanged), (200, true), "{collection}: {again}");
        assert_eq!(again["updated_ms"], first["updated_ms"], "{collection}");
        assert_eq!(
            std::fs::metadata(&file).unwrap().ino(),
            inode,
            "{collection}: an unchanged body rewrites nothing"
        );
        // Another owner's object, to show deletion by owner leaves it.
        let mut other = body.clone();
        other["owner"] = json!("host:b");
        other["name"] = json!(format!("{} b", body["name"].as_str().unwrap()));
        let (s, _, _) = send(
            &server,
            "PUT",
            &format!("/api/strata/v1/{collection}/host-b"),
            Some(other.to_string()),
        );
        assert_eq!(s, 201);
        let (_, owned, _) = send(
            &server,
            "GET",
            &format!("/api/strata/v1/{collection}?owner=host%3Aa"),
            None,
        );
        assert_eq!(owned.as_array().unwrap().len(), 1, "{collection}: {owned}");
        assert_eq!(owned[0]["owner"], "host:a");
        let (s, e, _) = send(
            &server,
            "DELETE",
            &format!("/api/strata/v1/{collection}"),
            None,
        );
        assert_eq!(s, 400);
        assert!(e["error"].as_str().unwrap().contains("?owner="), "{e}");
        let (s, gone, _) = send(
            &server,
            "DELETE",
            &format!("/api/strata/v1/{collection}?owner=host%3Aa"),
            None,
        );
        assert_eq!(s, 200);
        assert_eq!(gone["deleted"], json!(["host-a"]), "{collection}");
        assert!(!file.exists());
        let (_, all, _) = send(
            &server,
            "GET",
            &format!("/api/strata/v1/{collection}"),
            None,
        );
        let ids: Vec<&str> = all
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["host-b"], "{collection}");
    }
}

#[test]
fn checks_are_validated_assigned_to_brokers_and_durable() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut bad = check_body("host:a");
    bad["spec"]["kind"] = json!("telnet");
    let (s, e, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/checks/c1",
        Some(bad.to_string()),
    );
    assert_eq!(s, 400);
    assert!(e["error"].as_str().unwrap().contains("`spec`"), "{e}");
    let (s, e, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/checks/c1",
        Some(json!({"name": "x"}).to_string()),
    );
    assert_eq!(s, 400);
    assert!(e["error"].as_str().unwrap().contains("`spec`"), "{e}");
    let (s, c1, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/checks/c1",
        Some(check_body("host:a").to_string()),
    );
    assert_eq!(s, 201);
    assert_eq!(c1["broker"], "default", "a check names its broker");
    let mut edge = check_body("host:b");
    edge["broker"] = json!("edge-1");
    let (s, _, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/checks/c2",
        Some(edge.to_string()),
    );
    assert_eq!(s, 201);
    let (_, mine, _) = send(&server, "GET", "/api/strata/v1/checks?broker=edge-1", None);
    let mine = mine.as_array().unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["id"], "c2");
    assert_eq!(mine[0]["spec"]["kind"], "tcp", "a broker gets whole checks");
    drop(server);
    let server = start(dir.path());
    let (s, c1_again, _) = send(&server, "GET", "/api/strata/v1/checks/c1", None);
    assert_eq!(s, 200);
    assert_eq!(c1_again, c1, "kept across a restart");
    let (_, list, _) = send(&server, "GET", "/api/strata/v1/checks", None);
    assert_eq!(list.as_array().unwrap().len(), 2);
}

#[test]
fn rules_upsert_unchanged_and_delete_by_owner() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let rule = |owner: &str, limit: u32| {
        format!(
            "owner = \"{owner}\"\nexpr = 'find(\"load1\", \"and(host:a)\")'\n\
             [[severity]]\nlevel = 2\nwhen = \"> {limit}\"\n"
        )
    };
    let (s, v, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/rules/host-a-load",
        Some(rule("host:a", 8)),
    );
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["owner"], "host:a");
    let file = dir.path().join("data/alerts/rules/host-a-load.toml");
    let inode = std::fs::metadata(&file).unwrap().ino();
    let (s, _, unchanged) = send(
        &server,
        "PUT",
        "/api/strata/v1/rules/host-a-load",
        Some(rule("host:a", 8)),
    );
    assert_eq!((s, unchanged), (200, true));
    assert_eq!(
        std::fs::metadata(&file).unwrap().ino(),
        inode,
        "not rewritten"
    );
    let (s, _, unchanged) = send(
        &server,
        "PUT",
        "/api/strata/v1/rules/host-a-load",
        Some(rule("host:a", 9)),
    );
    assert_eq!((s, unchanged), (200, false));
    let (s, _, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/rules/host-b-load",
        Some(rule("host:b", 8)),
    );
    assert_eq!(s, 201);
    let (_, owned, _) = send(&server, "GET", "/api/strata/v1/rules?owner=host%3Aa", None);
    assert_eq!(owned["rules"].as_array().unwrap().len(), 1, "{owned}");
    let (s, e, _) = send(&server, "DELETE", "/api/strata/v1/rules", None);
    assert_eq!(s, 400, "{e}");
    let (s, gone, _) = send(
        &server,
        "DELETE",
        "/api/strata/v1/rules?owner=host%3Aa",
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(gone["deleted"], json!(["host-a-load"]));
    assert!(!file.exists());
    let (s, _, _) = send(&server, "GET", "/api/strata/v1/rules/host-b-load", None);
    assert_eq!(s, 200, "another owner's ruleset stays");
}

#[test]
fn install_script_and_binary_are_served_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let http = client();
    let health: Value = http
        .get(server.url("/health"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
    for f in ["checks", "owner", "unchanged", "download"] {
        assert!(
            health["supports"].as_array().unwrap().contains(&json!(f)),
            "{health}"
        );
    }
    let script = http.get(server.url("/install.sh")).send().unwrap();
    assert_eq!(script.status().as_u16(), 200);
    assert!(script.text().unwrap().starts_with("#!/bin/sh"));
    let binary = http.get(server.url("/download/strata")).send().unwrap();
    assert_eq!(binary.status().as_u16(), 200);
    let header = binary.headers()["x-strata-sha256"]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = binary.bytes().unwrap();
    assert_eq!(
        bytes.as_ref(),
        std::fs::read(serve_common::BIN).unwrap().as_slice(),
        "the binary the core runs"
    );
    let path = dir.path().join("downloaded");
    std::fs::write(&path, &bytes).unwrap();
    let out = std::process::Command::new("sha256sum")
        .arg(&path)
        .output()
        .unwrap();
    let sum = String::from_utf8(out.stdout).unwrap();
    assert_eq!(sum.split(' ').next().unwrap(), header);
    let published = http
        .get(server.url("/download/strata.sha256"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(published, format!("{header}  strata\n"));
    let refused = http
        .get(server.url("/api/strata/v1/checks"))
        .send()
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        401,
        "the APIs still need the token"
    );
}
