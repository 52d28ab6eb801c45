//! Checks defined on the core reach the broker they are assigned to: `strata check add … --broker
//! edge-1` against a real `strata serve`, a real `strata broker --checks-from-core` fetching its
//! checks from the core's checks API, running them, and forwarding their measurements to the
//! core; a check assigned to another broker is not run; `strata check list|show|rm` see the same
//! checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::process::{Child, Stdio};

use serde_json::Value;
use serve_common::{client, eventually, strata, Server};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn check_tags(server: &Server) -> Vec<String> {
    let found: Value = client()
        .get(server.url("/api/strata/v1/find?query=and(__check:edge-1)"))
        .send()
        .unwrap()
        .json()
        .unwrap_or(Value::Null);
    let mut tags: Vec<String> = found
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["tags"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| {
            t.as_str()
                .and_then(|t| t.strip_prefix("check:"))
                .map(str::to_owned)
        })
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

fn cli(core: &str, args: &[&str]) -> String {
    let out = strata()
        .arg("check")
        .args(args)
        .args(["--core", core])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "strata check {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_broker_runs_the_checks_the_core_assigns_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &["--statsd", "off"]);
    let core = server.url("");
    let core = core.trim_end_matches('/');
    let target = server.http.clone().unwrap();
    let spec = dir.path().join("tcp.toml");
    std::fs::write(
        &spec,
        format!(
            "id = \"ignored\"\nkind = \"tcp\"\ntarget = \"{target}\"\nperiod_ms = 1000\n\
             timeout_ms = 500\n"
        ),
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    assert_eq!(
        cli(core, &["add", "tcp-core", spec, "--broker", "edge-1"]),
        "created check tcp-core\n"
    );
    assert_eq!(
        cli(core, &["add", "tcp-core", spec, "--broker", "edge-1"]),
        "unchanged check tcp-core\n"
    );
    cli(core, &["add", "tcp-elsewhere", spec, "--broker", "edge-2"]);
    let listed = cli(core, &["list"]);
    assert!(
        listed.contains("tcp-core\t") && listed.contains("tcp-elsewhere\t"),
        "{listed}"
    );
    let shown: Value = serde_json::from_str(&cli(core, &["show", "tcp-core"])).unwrap();
    assert_eq!(shown["broker"], "edge-1");
    assert_eq!(shown["spec"]["target"], target.as_str());

    let broker_dir = dir.path().join("broker");
    let _broker = Kill(
        strata()
            .args(["broker", "--id", "edge-1", "--data-dir"])
            .arg(&broker_dir)
            .args(["--core-url", core, "--checks-from-core"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    eventually("the assigned check's measurements at the core", || {
        check_tags(&server)
            .contains(&"tcp-core".to_string())
            .then_some(())
    });
    assert!(
        !check_tags(&server).contains(&"tcp-elsewhere".to_string()),
        "another broker's check is not run here"
    );
    assert_eq!(
        cli(core, &["rm", "tcp-elsewhere"]),
        "deleted check tcp-elsewhere\n"
    );
    let out = strata()
        .args(["check", "show", "tcp-elsewhere", "--core", core])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("404") && err.lines().count() == 1, "{err}");
}
