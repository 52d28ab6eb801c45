//! Shared by the `serve_*` tests: the real `strata` binary started on port 0 with a temporary
//! data directory, its printed addresses, and a blocking HTTP client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// How long a test waits for the server to print its start line or exit.
const START_WAIT_S_MAX: u64 = 60;

pub struct Server {
    pub child: Option<Child>,
    pub http: Option<String>,
    pub statsd: Option<String>,
    pub graphite: Option<String>,
    pub data_dir: PathBuf,
    pub line: String,
}

/// A `strata` command with no `STRATA_*` or `RUST_LOG` from the environment of the test run.
pub fn strata() -> Command {
    let mut cmd = Command::new(BIN);
    for (key, _) in std::env::vars() {
        if key.starts_with("STRATA_") && key != "STRATA_CLOCK" || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn field(line: &str, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
        .filter(|v| *v != "off")
        .map(str::to_owned)
}

impl Server {
    /// Starts `strata serve` with `extra` arguments, on port 0 for every listener `extra` does
    /// not name.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Server::start_with(data_dir, extra, &[])
    }

    pub fn start_with(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = strata();
        cmd.arg("serve");
        // Port 0 for every listener neither `extra` nor `env` sets.
        for (flag, var) in [
            ("--http", "STRATA_HTTP"),
            ("--statsd", "STRATA_STATSD"),
            ("--graphite", "STRATA_GRAPHITE"),
        ] {
            if !extra.contains(&flag) && !env.iter().any(|(k, _)| *k == var) {
                cmd.arg(flag).arg("127.0.0.1:0");
            }
        }
        cmd.arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Server::spawn(cmd, data_dir)
    }

    /// Spawns `cmd` (a `strata serve`, or a script that execs one) and waits for its start line.
    pub fn spawn(mut cmd: Command, data_dir: &Path) -> Server {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn strata serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so the server never blocks on a full pipe.
            let mut sink = String::new();
            while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                sink.clear();
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(START_WAIT_S_MAX))
            .expect("strata serve printed no start line");
        assert!(
            line.starts_with("strata serve: listening"),
            "unexpected start line: {line:?}"
        );
        Server {
            http: field(&line, "http"),
            statsd: field(&line, "statsd"),
            graphite: field(&line, "graphite"),
            child: Some(child),
            data_dir: data_dir.to_path_buf(),
            line,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.http.as_deref().expect("http listener")
        )
    }

    /// SIGTERM, then the exit status.
    pub fn stop(self) -> ExitStatus {
        let child = self.child.as_ref().unwrap();
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        self.stop_waiting()
    }

    /// The exit status of a server already sent SIGTERM.
    pub fn stop_waiting(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        for _ in 0..(START_WAIT_S_MAX * 10) {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        panic!("strata serve did not exit after SIGTERM");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The server's `/metrics` text.
pub fn metrics_text(server: &Server) -> String {
    client()
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap()
}

/// GET a JSON document, asserting 200.
pub fn get_json(url: &str) -> Value {
    let response = client().get(url).send().unwrap();
    let status = response.status();
    let text = response.text().unwrap();
    assert_eq!(status.as_u16(), 200, "GET {url}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The fetch result for a query over the hour around `ts_s`, one-minute slices.
pub fn fetch(server: &Server, query: &str, ts_s: i64, extra: &str) -> Value {
    let start = ts_s - ts_s.rem_euclid(60) - 1800;
    let end = start + 3600;
    let url = server.url(&format!(
        "/api/strata/v1/fetch?query={}&start={start}&end={end}&period=60{extra}",
        urlencode(query)
    ));
    get_json(&url)
}

pub fn urlencode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The series of a fetch result with this canonical key.
pub fn series<'a>(result: &'a Value, key: &str) -> &'a Value {
    result["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == key)
        .unwrap_or_else(|| panic!("no series {key} in {result}"))
}

/// The non-empty numeric slices of a series: (ts_ms, aggregate object).
pub fn numeric_slices(series: &Value) -> Vec<&Value> {
    series["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d.get("count").is_some())
        .collect()
}

/// Unix seconds now.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Polls until `f` returns `Some` (data written by an asynchronous listener), bounded.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..600 {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: not seen within 60 s");
}

/// Installs Debian packages the way a fresh machine needs it: `apt-get update` first (a new
/// machine's package lists are empty), then `apt-get install -y`. Needs root.
pub fn apt_install(packages: &[&str]) {
    let update = Command::new("apt-get").arg("update").status();
    assert!(
        update.is_ok_and(|s| s.success()),
        "apt-get update failed (installing {packages:?})"
    );
    let install = Command::new("apt-get")
        .args(["install", "-y"])
        .args(packages)
        .status();
    assert!(
        install.is_ok_and(|s| s.success()),
        "apt-get install -y {packages:?} failed"
    );
}

/// `strata broker --id <id> --data-dir <data> --core-url <core> <args>`, forwarding to `core`:
/// the child and its ready line (read within 60 s; later lines drained so it never blocks).
#[allow(dead_code)]
pub fn forwarding_broker(id: &str, data: &Path, core: &Server, args: &[&str]) -> (Child, String) {
    let mut child = strata()
        .args(["broker", "--id", id])
        .arg("--data-dir")
        .arg(data)
        .arg("--core-url")
        .arg(core.url(""))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line: String = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("strata broker printed no ready line");
    std::thread::spawn(move || while rx.recv().is_ok() {});
    (child, line)
}

/// The address after `<field> ` in a broker's ready line.
#[allow(dead_code)]
pub fn ready_address(line: &str, field: &str) -> String {
    line.split(&format!(" {field} "))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {field} address in {line:?}"))
        .to_owned()
}
