//! `strata check test`: a tcp check run once against a real listener prints `up` 1 and one
//! connect-time sample; against a closed port `up` 0; a bad spec exits 2 naming the field.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::process::Command;

fn run(spec: &str, name: &str) -> (i32, Vec<serde_json::Value>, String) {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("check-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, spec).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["check", "test"])
        .arg(&path)
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code().unwrap(),
        lines,
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn find<'a>(lines: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    &lines
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no `{name}` in {lines:?}"))["value"]
}

#[test]
fn check_test_runs_a_spec_once_and_prints_its_measurements() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let spec = format!(
        "id = \"web\"\nkind = \"tcp\"\ntarget = \"{addr}\"\nperiod_ms = 10000\ntimeout_ms = 2000\n"
    );
    let (code, lines, err) = run(&spec, "up.toml");
    assert_eq!(code, 0, "{err}");
    assert_eq!(find(&lines, "up"), &serde_json::json!(1.0));
    assert_eq!(find(&lines, "connect_time")["count"], 1);
    assert!(lines.iter().all(|l| l["tags"][0] == "check:web"));

    // The same as JSON, against a port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let spec = format!(
        r#"{{"id": "gone", "kind": "tcp", "target": "{closed}", "period_ms": 10000, "timeout_ms": 2000}}"#
    );
    let (code, lines, err) = run(&spec, "down.json");
    assert_eq!(code, 0, "{err}");
    assert_eq!(find(&lines, "up"), &serde_json::json!(0.0));

    // A timeout longer than the period is refused, naming the field.
    let spec = format!(
        "id = \"bad\"\nkind = \"tcp\"\ntarget = \"{addr}\"\nperiod_ms = 1000\ntimeout_ms = 5000\n"
    );
    let (code, lines, err) = run(&spec, "bad.toml");
    assert_eq!(code, 2);
    assert!(lines.is_empty());
    assert!(err.contains("timeout"), "{err}");
}
