//! Shared by the tests that run several roles of the real binary at once (`strata serve`,
//! `strata broker`, `strata agent`): free ports, fresh directories, and a child process started
//! and waited on until it prints its ready line.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on the wait for a process's ready line.
const START_WAIT_MS_MAX: u64 = 180_000;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A child process whose stdout is waited on for a line, and whose stderr goes to a log file.
pub struct Proc {
    child: Child,
}

impl Proc {
    pub fn start(what: &str, args: &[String], log: &Path, ready: &str) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .unwrap(),
            ))
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_millis(START_WAIT_MS_MAX);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(ready) => break,
                Ok(_) => {}
                Err(e) => panic!("{what} did not start ({e}); see {}", log.display()),
            }
        }
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Proc { child }
    }

    /// The process id (to signal it: SIGSTOP, SIGCONT).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
