//! End-to-end crash test: a client writes Influx batches at full speed over two connections,
//! the server is killed with SIGKILL mid-stream, restarted on the same data dir, and every
//! batch the client saw acknowledged (2xx) must be readable, whole.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/support.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Batches acknowledged before the kill (so the kill lands mid-stream, not before it).
const ACKED_BEFORE_KILL_MIN: usize = 300;
/// Bound on waiting for them.
const WAIT_MS_MAX: u64 = 300_000;
/// Base period 10 s = one writer batch per fetch slice.
const CONFIG: &str = "[store]\nbase_period_s = 10\n";

fn acked(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn e2e_kill9_restart_keeps_every_acknowledged_sample() {
    let python = support::venv_python();
    let dir = support::fresh_dir("e2e-restart");
    let data = dir.join("data");
    let ack = dir.join("acked.txt");
    // One day ago, on a slice boundary.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base_ms = (now_ms - 86_400_000) / 10_000 * 10_000;
    let base = base_ms.to_string();

    let server = support::Server::start(&data, CONFIG);
    let mut writer = Command::new(&python)
        .arg(support::e2e_dir().join("restart_writer.py"))
        .arg(&ack)
        .arg(&base)
        .envs(server.env())
        .current_dir(support::e2e_dir())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while acked(&ack) < ACKED_BEFORE_KILL_MIN && Instant::now() < deadline {
        assert!(
            writer.try_wait().unwrap().is_none(),
            "the writer stopped before the kill"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = acked(&ack);
    assert!(
        before >= ACKED_BEFORE_KILL_MIN,
        "only {before} batches acknowledged in time"
    );
    server.kill9();
    let out = writer.wait_with_output().unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let total = acked(&ack);
    println!("acknowledged: {before} when killed, {total} in all");

    let restarted = support::Server::start(&data, CONFIG);
    let mut tally = support::Tally::default();
    tally.run_script(
        &python,
        "restart_check.py",
        &[ack.to_str().unwrap(), &base],
        &restarted.env(),
    );
    if restarted.stop() {
        tally.passed += 1;
    } else {
        tally.failed += 1;
        tally
            .failures
            .push("restarted server did not exit 0 on SIGTERM".to_owned());
    }
    tally.finish("e2e restart");
}
