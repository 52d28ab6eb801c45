//! Shared by the `e2e_*` tests: a Python venv with the pinned real clients
//! (`tests/e2e/requirements.txt`), a `strata serve` child process on port 0 with a temp data
//! dir, and running the client scripts (`tests/e2e/*.py`), which print `ok <check>` /
//! `FAIL <check>: <why>` lines.
//!
//! Included by each e2e test file with `#[path = "e2e/support.rs"] mod support;`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long `strata serve` may take to print its start-up line (a debug build on a busy
/// 2-core machine opening a store).
const STARTUP_TIMEOUT_MS: u64 = 120_000;
/// How long graceful shutdown may take before the harness kills the server.
const SHUTDOWN_TIMEOUT_MS: u64 = 60_000;
/// Output lines of one script kept for the report.
const SCRIPT_OUTPUT_LINES_MAX: usize = 2_000;

pub fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("e2e")
}

/// A fresh directory under the cargo target dir's tmp (kept after the test for inspection;
/// the next run of the same test removes it).
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The venv's python, created under the target dir on first use and reused while
/// requirements.txt is unchanged.
pub fn venv_python() -> PathBuf {
    let target_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = target_tmp.parent().unwrap_or(target_tmp).join("e2e-venv");
    let python = venv.join("bin").join("python");
    let requirements = e2e_dir().join("requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).unwrap();
    let stamp = venv.join("strata-requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return python;
    }
    let python3 = Command::new("python3").arg("--version").output();
    if !python3.as_ref().is_ok_and(|o| o.status.success()) {
        panic!("the e2e tests need python3 (3.9 or newer) on PATH: apt-get install -y python3");
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).unwrap();
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    if !made.status.success() {
        panic!(
            "`python3 -m venv {}` failed — the venv module (with ensurepip) is missing. Install it: \
             `apt-get update && apt-get install -y python3-venv`. Output:\n{}{}",
            venv.display(),
            String::from_utf8_lossy(&made.stdout),
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "-r",
        ])
        .arg(&requirements)
        .output()
        .unwrap();
    if !pip.status.success() {
        panic!(
            "pip install -r {} failed (the e2e tests need PyPI): {}{}",
            requirements.display(),
            String::from_utf8_lossy(&pip.stdout),
            String::from_utf8_lossy(&pip.stderr)
        );
    }
    std::fs::write(&stamp, wanted).unwrap();
    python
}

/// A running `strata serve`.
pub struct Server {
    child: Option<Child>,
    pub http: String,
    pub statsd: String,
    pub graphite: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

/// Reads `name=value` out of the start-up line
/// `strata serve: listening http=… statsd=… graphite=… tls=… data_dir=…`.
fn field(line: &str, name: &str) -> Option<String> {
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .map(str::to_owned)
}

impl Server {
    /// Starts `strata serve` on port 0 for every listener, with `config_toml` as its config
    /// file (written next to the data dir).
    pub fn start(data_dir: &Path, config_toml: &str) -> Server {
        let config = data_dir.with_extension("toml");
        std::fs::write(&config, config_toml).unwrap();
        let log = data_dir.with_extension("log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["serve", "--http", "127.0.0.1:0", "--statsd", "127.0.0.1:0"])
            .args(["--graphite", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .arg("--config")
            .arg(&config)
            .env_remove("STRATA_HTTP")
            .env_remove("STRATA_STATSD")
            .env_remove("STRATA_GRAPHITE")
            .env_remove("STRATA_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // stderr (the tracing log) goes to a file for post-mortems, drained so the server
        // never blocks on a full pipe.
        let stderr = child.stderr.take().unwrap();
        let log_path = log.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .unwrap();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = writeln!(file, "{line}");
            }
        });
        let deadline = Instant::now() + Duration::from_millis(STARTUP_TIMEOUT_MS);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("listening") => {
                    let get =
                        |n: &str| field(&line, n).unwrap_or_else(|| panic!("no {n}= in `{line}`"));
                    // Keep draining stdout.
                    std::thread::spawn(move || while rx.recv().is_ok() {});
                    return Server {
                        child: Some(child),
                        http: get("http"),
                        statsd: get("statsd"),
                        graphite: get("graphite"),
                        data_dir: data_dir.to_owned(),
                        log,
                    };
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!(
                        "strata serve printed no start-up line within {STARTUP_TIMEOUT_MS} ms \
                         ({status:?}); log:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// SIGKILL: no flush, no shutdown code runs.
    pub fn kill9(mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM and wait; returns whether it exited 0.
    pub fn stop(mut self) -> bool {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_millis(SHUTDOWN_TIMEOUT_MS);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// Environment for the client scripts.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("STRATA_E2E_HTTP".into(), self.http.clone()),
            ("STRATA_E2E_STATSD".into(), self.statsd.clone()),
            ("STRATA_E2E_GRAPHITE".into(), self.graphite.clone()),
        ]
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Check counts over all scripts run.
#[derive(Default)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub failures: Vec<String>,
}

impl Tally {
    /// Runs `tests/e2e/<script>` with the venv python and counts its `ok` / `FAIL` lines; a
    /// script that exits non-zero without a FAIL line (a crash) counts as one failure.
    pub fn run_script(
        &mut self,
        python: &Path,
        script: &str,
        args: &[&str],
        env: &[(String, String)],
    ) {
        let out = Command::new(python)
            .arg(e2e_dir().join(script))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(e2e_dir())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut failed_here = 0;
        for line in stdout.lines().take(SCRIPT_OUTPUT_LINES_MAX) {
            println!("[{script}] {line}");
            if line.starts_with("ok ") {
                self.passed += 1;
            } else if line.starts_with("FAIL ") {
                self.failed += 1;
                failed_here += 1;
                self.failures.push(format!("{script}: {line}"));
            }
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && failed_here == 0 {
            self.failed += 1;
            self.failures.push(format!(
                "{script}: exited {} without a FAIL line",
                out.status
            ));
        }
        if !out.status.success() {
            for line in stderr
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                println!("[{script} stderr] {line}");
            }
        }
    }

    /// Prints the closing `N passed, N failed` line and fails the test if anything failed.
    pub fn finish(&self, what: &str) {
        for f in &self.failures {
            println!("{f}");
        }
        println!("{what}: {} passed, {} failed", self.passed, self.failed);
        assert!(self.passed > 0, "{what}: no check ran");
        assert_eq!(
            self.failed,
            0,
            "{what}: failures:\n{}",
            self.failures.join("\n")
        );
    }
}

#[test]
fn startup_line_fields_parse() {
    let line = "strata serve: listening http=127.0.0.1:4 statsd=off graphite=127.0.0.1:5 tls=off \
                data_dir=/x";
    assert_eq!(field(line, "http").as_deref(), Some("127.0.0.1:4"));
    assert_eq!(field(line, "statsd").as_deref(), Some("off"));
    assert_eq!(field(line, "graphite").as_deref(), Some("127.0.0.1:5"));
    assert_eq!(field(line, "tls").as_deref(), Some("off"));
}
