//! Every command in the top-level `README.md`, run as written and checked, so the README cannot
//! drift from what Strata does.
//!
//! The README's `sh` blocks are read from the file (not copied here): a block with `$ ` lines is
//! a transcript (each `$ ` line a command, the lines after it its expected output), any other
//! block is one command per line. Continuation lines (`\`) are joined; a trailing `  # comment`
//! is dropped. Expected output is compared line by line, where `…` stands for any text within a
//! line and a line holding only `…` for any number of lines; lines starting with a space continue
//! the line above (wrapped for reading).
//!
//! How commands run: `./scripts/run` with `STRATA_BIN` (this build's binary, so no second release
//! build) and `STRATA_BIN_DIR` in a temporary directory, every listener on port 0 through the
//! `STRATA_*` variables; later commands find `strata` through that link on their PATH and reach
//! that server, the README's `127.0.0.1:8112`, `:8125` and `:2003` replaced by the ports it bound.
//! A block that starts servers of its own (`strata serve …`) runs in a directory beside it, each
//! server on port 0, stopped once it printed its start line. Data sent by a command must arrive
//! (found by name through the read API) before the server is stopped, which happens just before
//! the first operator tool (`strata journal`, `strata store`) runs on its data directory.
//! `./scripts/test` is the one command not run: it is CI itself and runs this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serve_common::{client, eventually, Server, BIN};

/// Commands not run here, with the reason.
const NOT_RUN: [(&str, &str); 6] = [
    (
        "./scripts/test",
        "CI itself (`.ci/run` runs it), and it runs this test",
    ),
    (
        "./scripts/kafka-cluster start 3 kafka-data",
        "starts three Kafka JVMs; tests/cluster_faults.rs runs the cluster",
    ),
    (
        "strata serve --cluster cluster.toml --node a1 --data-dir a1 --statsd off --graphite off &",
        "needs the Kafka cluster; tests/cluster_faults.rs runs the cluster",
    ),
    (
        "strata serve --cluster cluster.toml --node b1 --data-dir b1 --statsd off --graphite off &",
        "needs the Kafka cluster; tests/cluster_faults.rs runs the cluster",
    ),
    (
        "strata cluster status --cluster cluster.toml",
        "needs the cluster; tests/cluster_faults.rs asks it",
    ),
    (
        "./scripts/kafka-cluster stop kafka-data",
        "stops the Kafka cluster above",
    ),
];

/// What a command that sends data must leave in the store: `(part of the command, stream name)`.
const ARRIVALS: [(&str, &str); 5] = [
    ("Strata-Sequence", "jobs_done"),
    ("/module/httptrap/", "login"),
    ("/dev/udp/", "deploys"),
    ("/dev/tcp/", "servers.web1.cpu"),
    ("/api/v2/write", "cpu_usage"),
];

/// Parts of a command that mean it sends data (each must have an `ARRIVALS` entry).
const SENDS: [&str; 5] = [
    "/dev/udp/",
    "/dev/tcp/",
    "/write",
    "/httptrap/",
    "/v1/metrics",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Step {
    /// The block's index, in README order.
    block: usize,
    /// The README line the command starts on (1-based), for messages.
    line: usize,
    cmd: String,
    /// The transcript's output, when the README shows one.
    expected: Option<String>,
}

fn strip_comment(line: &str) -> &str {
    match line.find("  #") {
        Some(at) => line[..at].trim_end(),
        None => line.trim_end(),
    }
}

/// The commands of every `sh` block, in order.
fn steps(readme: &str) -> Vec<Step> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut block = 0;
    while i < lines.len() {
        if lines[i].trim() != "```sh" {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && lines[end].trim() != "```" {
            end += 1;
        }
        let body = &lines[start..end];
        let transcript = body.iter().any(|l| l.starts_with("$ "));
        let mut k = 0;
        while k < body.len() {
            let first = k;
            let raw = body[k];
            k += 1;
            let text = if transcript {
                match raw.strip_prefix("$ ") {
                    Some(c) => c,
                    None => panic!(
                        "README.md line {}: output with no `$ ` command above it",
                        start + first + 1
                    ),
                }
            } else {
                raw
            };
            if text.trim().is_empty() {
                continue;
            }
            let mut cmd = String::new();
            let mut part = strip_comment(text).to_owned();
            while let Some(head) = part.strip_suffix('\\') {
                cmd.push_str(head);
                part = strip_comment(body.get(k).copied().unwrap_or("")).to_owned();
                k += 1;
            }
            cmd.push_str(&part);
            let mut expected = None;
            if transcript {
                let mut output = Vec::new();
                while k < body.len() && !body[k].starts_with("$ ") {
                    output.push(body[k]);
                    k += 1;
                }
                if !output.is_empty() {
                    expected = Some(output.join("\n"));
                }
            }
            out.push(Step {
                block,
                line: start + first + 1,
                cmd,
                expected,
            });
        }
        block += 1;
        i = end + 1;
    }
    out
}

/// `pattern` against one line, `…` matching any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

fn lines_match(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "…" => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => {
            !actual.is_empty() && line_matches(first, actual[0]) && lines_match(rest, &actual[1..])
        }
    }
}

/// The expected output with wrapped lines (starting with a space) joined to the line above.
fn unwrap_lines(expected: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in expected.lines() {
        match (l.strip_prefix(' '), out.last_mut()) {
            (Some(cont), Some(prev)) => prev.push_str(cont),
            _ => out.push(l.to_owned()),
        }
    }
    out
}

fn output_matches(expected: &str, actual: &str) -> bool {
    let actual: Vec<&str> = actual.trim_end_matches(['\n', '\r']).lines().collect();
    lines_match(&unwrap_lines(expected), &actual)
}

/// `ip/port` of an `ip:port` address, as bash's `/dev/udp/…` and `/dev/tcp/…` paths want it.
fn dev_path(addr: &str) -> String {
    addr.replacen(':', "/", 1)
}

/// The README's addresses replaced by the running server's.
fn localise(cmd: &str, server: &Server) -> String {
    let mut out = cmd.to_owned();
    if let Some(http) = &server.http {
        out = out.replace("127.0.0.1:8112", http);
    }
    if let Some(statsd) = &server.statsd {
        out = out.replace("127.0.0.1/8125", &dev_path(statsd));
    }
    if let Some(graphite) = &server.graphite {
        out = out.replace("127.0.0.1/2003", &dev_path(graphite));
    }
    out
}

fn path_with(bin_dir: &Path) -> String {
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A command with no `STRATA_*` or `RUST_LOG` from the test run's environment.
fn clean(mut cmd: Command) -> Command {
    for (key, _) in std::env::vars() {
        if key.starts_with("STRATA_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// Every listener on port 0 unless the command's flags say otherwise (flags beat these).
fn port_zero(cmd: &mut Command) {
    for var in ["STRATA_HTTP", "STRATA_STATSD", "STRATA_GRAPHITE"] {
        cmd.env(var, "127.0.0.1:0");
    }
}

/// Waits until a stream named `name` can be found, through the read API.
fn arrived(server: &Server, name: &str) {
    let url = server.url(&format!(
        "/api/strata/v1/find?query={}",
        serve_common::urlencode(&format!("and(__name:{name})"))
    ));
    eventually(&format!("the stream `{name}` sent by the README"), || {
        let found: serde_json::Value = client().get(&url).send().ok()?.json().ok()?;
        found
            .as_array()
            .filter(|a| a.iter().any(|s| s["name"] == name))
            .map(|_| ())
    });
}

#[test]
fn every_readme_command_runs_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let steps = steps(&readme);
    assert!(
        steps.len() >= 10,
        "README.md: only {} commands found",
        steps.len()
    );
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let bin_dir = tmp.path().join("bin");
    std::fs::create_dir_all(&home).unwrap();
    // Blocks that start servers of their own run in a directory of their own.
    let serving: Vec<usize> = steps
        .iter()
        .filter(|s| s.cmd.starts_with("strata serve"))
        .map(|s| s.block)
        .collect();
    let beside = tmp.path().join("beside");
    std::fs::create_dir_all(&beside).unwrap();

    let mut server: Option<Server> = None;
    let mut to_arrive: Vec<&str> = Vec::new();
    for step in &steps {
        let at = format!("README.md line {}: `{}`", step.line, step.cmd);
        if let Some((_, why)) = NOT_RUN.iter().find(|(c, _)| step.cmd == *c) {
            eprintln!("not run: {} ({why})", step.cmd);
            continue;
        }
        let dir = if serving.contains(&step.block) {
            &beside
        } else {
            &home
        };
        if step.cmd.starts_with("./scripts/run") {
            assert!(server.is_none(), "{at}: a second ./scripts/run");
            let mut cmd = clean(Command::new("bash"));
            cmd.arg("-c")
                .arg(format!("exec {}/{}", repo().display(), &step.cmd[2..]))
                .current_dir(dir)
                .env("STRATA_BIN", BIN)
                .env("STRATA_BIN_DIR", &bin_dir)
                .stderr(Stdio::inherit());
            port_zero(&mut cmd);
            let started = Server::spawn(cmd, &dir.join("strata-data"));
            let link = std::fs::canonicalize(bin_dir.join("strata")).unwrap();
            assert_eq!(link, std::fs::canonicalize(BIN).unwrap(), "{at}: the link");
            eprintln!("ok: {} → {}", step.cmd, started.line.trim());
            server = Some(started);
            continue;
        }
        if step.cmd.starts_with("strata serve") {
            let mut cmd = clean(Command::new("bash"));
            cmd.arg("-c")
                .arg(format!("exec {}", step.cmd.replace(":8112", ":0")))
                .current_dir(dir)
                .env("PATH", path_with(&bin_dir))
                .stderr(Stdio::inherit());
            port_zero(&mut cmd);
            let started = Server::spawn(cmd, &dir.join("strata-data"));
            if step.cmd.contains("--statsd off") {
                assert!(
                    started.line.contains("statsd=off"),
                    "{at}: {}",
                    started.line
                );
            }
            let line = started.line.clone();
            assert!(started.stop().success(), "{at}: exit after SIGTERM");
            eprintln!("ok: {} → {}", step.cmd, line.trim());
            continue;
        }
        let operator =
            step.cmd.starts_with("strata journal") || step.cmd.starts_with("strata store");
        if operator {
            if let Some(running) = server.take() {
                for name in to_arrive.drain(..) {
                    arrived(&running, name);
                }
                assert!(running.stop().success(), "{at}: the server's exit");
            }
        }
        if SENDS.iter().any(|s| step.cmd.contains(s)) {
            let Some((_, name)) = ARRIVALS.iter().find(|(part, _)| step.cmd.contains(part)) else {
                panic!("{at}: sends data this test does not know to look for (add it to ARRIVALS)");
            };
            to_arrive.push(name);
        }
        let text = match &server {
            Some(s) => localise(&step.cmd, s),
            None => step.cmd.clone(),
        };
        let mut cmd = clean(Command::new("bash"));
        cmd.arg("-c")
            .arg(&text)
            .current_dir(dir)
            .env("PATH", path_with(&bin_dir))
            .stdin(Stdio::null());
        if let Some(http) = server.as_ref().and_then(|s| s.http.as_ref()) {
            cmd.env("STRATA_SERVER", format!("http://{http}"));
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{at}: {}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        if let Some(expected) = &step.expected {
            assert!(
                output_matches(expected, &stdout),
                "{at}: the output is not what the README shows\nREADME:\n{expected}\nactual:\n{stdout}"
            );
        }
        eprintln!("ok: {}", step.cmd);
    }
    if let Some(running) = server.take() {
        for name in to_arrive.drain(..) {
            arrived(&running, name);
        }
        assert!(running.stop().success(), "the server's exit");
    }
    assert!(
        to_arrive.is_empty(),
        "data sent with no server running: {to_arrive:?}"
    );
}

#[test]
fn output_patterns() {
    assert!(output_matches("a…c", "abbbc\n"));
    assert!(!output_matches("a…c", "abbb\n"));
    assert!(output_matches(
        "x\n…\n…\t3\n…",
        "x\n1\tnull\n2\t3\n3\tnull\n"
    ));
    assert!(!output_matches("x\n…\n…\t3\n…", "x\n1\tnull\n2\t4\n"));
    assert!(output_matches(
        "{\"a\":1,\n \"b\":2}",
        "{\"a\":1,\"b\":2}\n"
    ));
    assert!(!output_matches("exact", "exact but longer"));
}
