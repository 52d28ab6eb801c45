//! `strata install agent` end to end against a real `strata serve` on loopback, installing into
//! a scratch `--root` with a stand-in `systemctl` that records its calls
//! (`crates/install/testdata/systemctl`): the second run rewrites no file, writes nothing to the
//! core and calls nothing that changes state; a wiped state directory keeps the host identity;
//! killed after each step in turn (debug-build failpoints), a re-run converges to the same end
//! state; `uninstall --purge` leaves no file and no object owned by the host; the unit passes
//! `systemd-analyze`; `install.sh` passes `shellcheck` and installs under `dash`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use serde_json::Value;
use serve_common::{client, strata, Server, BIN};

const TOKEN: &str = "install-t0ken";
const MACHINE_ID: &str = "5f1c0e7a9b2d4c6e8f0a1b2c3d4e5f60";
/// Every step of an install (`install::STEPS`).
const STEPS: [&str; 13] = [
    "preflight",
    "host-id",
    "binary",
    "token",
    "config",
    "state-dir",
    "unit",
    "observer",
    "checks",
    "worksheet",
    "rules",
    "service",
    "first-sample",
];

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../install/testdata")
}

struct Env {
    dir: tempfile::TempDir,
    server: Server,
}

impl Env {
    fn start() -> Env {
        Env::start_with(&[])
    }

    /// A core started with more arguments.
    fn start_with(extra: &[&str]) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("strata.toml");
        std::fs::write(&config, format!("[auth]\ntoken = \"{TOKEN}\"\n")).unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        let mut args = vec!["--config", config.to_str().unwrap(), "--statsd", "off"];
        args.extend_from_slice(extra);
        let server = Server::start(&dir.path().join("data"), &args);
        Env { dir, server }
    }

    fn core(&self) -> String {
        self.server.url("")
    }

    fn token_file(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    /// A fresh root with a machine id (so every root is the same host).
    fn root(&self, name: &str) -> PathBuf {
        let root = self.dir.path().join(name);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/machine-id"), format!("{MACHINE_ID}\n")).unwrap();
        root
    }

    fn command(&self, root: &Path, args: &[&str]) -> Command {
        let mut cmd = strata();
        let path = format!(
            "{}:{}",
            testdata().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.args(args)
            .arg("--root")
            .arg(root)
            .env("PATH", path)
            .env("SYSTEMCTL_LOG", root.with_extension("systemctl.log"))
            .env("SYSTEMCTL_STATE", root.with_extension("systemctl.state"))
            .stdin(Stdio::null());
        cmd
    }

    fn install(&self, root: &Path, extra: &[&str]) -> Output {
        self.install_with(root, extra, &[])
    }

    fn install_with(&self, root: &Path, extra: &[&str], vars: &[(&str, &str)]) -> Output {
        let core = self.core();
        let token = self.token_file();
        let mut args = vec![
            "install",
            "agent",
            "--core",
            &core,
            "--token-file",
            token.to_str().unwrap(),
            "--statsd",
            "",
            "--json",
        ];
        if !extra.contains(&"--listen") {
            args.extend_from_slice(&["--listen", "127.0.0.1:1"]);
        }
        if !extra.contains(&"--wait-s") {
            args.extend_from_slice(&["--wait-s", "0"]);
        }
        args.extend_from_slice(extra);
        let mut cmd = self.command(root, &args);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let r = client()
            .get(self.server.url(path))
            .bearer_auth(TOKEN)
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().unwrap_or(Value::Null))
    }
}

fn report(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        panic!(
            "not a JSON report: {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn outcomes(report: &Value) -> BTreeMap<String, String> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn ok(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    report(out)
}

/// Every file under `dir`: relative path → (inode, mtime ns, mode, content with `root` replaced
/// by `ROOT`). The binary's content is represented by its length.
fn snapshot(dir: &Path, root: &Path) -> BTreeMap<String, (u64, i64, u32, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let mode = m.permissions().mode() & 0o7777;
            if m.is_dir() {
                out.insert(format!("{rel}/"), (m.ino(), 0, mode, String::new()));
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let content = match String::from_utf8(bytes) {
                    Ok(t) => t.replace(&root.display().to_string(), "ROOT"),
                    Err(e) => format!("{} bytes", e.into_bytes().len()),
                };
                out.insert(
                    rel,
                    (
                        m.ino(),
                        m.mtime_nsec() + m.mtime() * 1_000_000_000,
                        mode,
                        content,
                    ),
                );
            }
        }
    }
    out
}

/// Contents and modes only (what a converged install must equal).
fn state(snap: &BTreeMap<String, (u64, i64, u32, String)>) -> BTreeMap<String, (u32, String)> {
    snap.iter()
        .map(|(k, (_, _, mode, c))| (k.clone(), (*mode, c.clone())))
        .collect()
}

/// The host's objects on the core, without their timestamps.
fn core_objects(env: &Env, host_id: &str) -> Vec<Value> {
    let owner = format!("host%3A{host_id}");
    let mut all = Vec::new();
    for c in ["checks", "worksheets", "dashboards"] {
        let (_, list) = env.get(&format!("/api/strata/v1/{c}?owner={owner}"));
        for item in list.as_array().unwrap() {
            let (_, mut doc) = env.get(&format!(
                "/api/strata/v1/{c}/{}",
                item["id"].as_str().unwrap()
            ));
            doc.as_object_mut().unwrap().remove("updated_ms");
            all.push(doc);
        }
    }
    let (_, rules) = env.get(&format!("/api/strata/v1/rules?owner={owner}"));
    for r in rules["rules"].as_array().unwrap() {
        all.push(serde_json::json!({"name": r["name"], "definition": r["definition"]}));
    }
    all
}

fn core_files(env: &Env) -> BTreeMap<String, (u64, i64, u32, String)> {
    let data = env.dir.path().join("data");
    let mut all = BTreeMap::new();
    for c in ["checks", "worksheets", "dashboards", "alerts/rules"] {
        for (k, v) in snapshot(&data.join(c), &data) {
            all.insert(format!("{c}/{k}"), v);
        }
    }
    all
}

#[test]
fn second_run_changes_nothing_and_purge_leaves_nothing() {
    let env = Env::start();
    let root = env.root("host");
    let dry = ok(&env.install(&root, &["--dry-run"]));
    assert_eq!(dry["dry_run"], true);
    assert_eq!(outcomes(&dry)["binary"], "created");
    assert!(
        !root.join("usr").exists() && !root.join("etc/strata").exists(),
        "a dry run writes nothing"
    );
    assert_eq!(
        core_files(&env).len(),
        0,
        "a dry run writes nothing to the core"
    );

    let first = ok(&env.install(&root, &[]));
    let o = outcomes(&first);
    for step in [
        "host-id",
        "binary",
        "token",
        "config",
        "state-dir",
        "unit",
        "checks",
        "worksheet",
        "rules",
        "service",
    ] {
        assert_eq!(o[step], "created", "{step}: {first}");
    }
    let host_id = first["host_id"].as_str().unwrap().to_string();
    assert_eq!(host_id.len(), 32);
    assert!(
        !host_id.contains(&MACHINE_ID[..16]),
        "the machine id is not exposed"
    );
    let token = root.join("etc/strata/agent/token");
    assert_eq!(
        std::fs::metadata(&token).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(std::fs::read_to_string(&token).unwrap().trim(), TOKEN);
    assert_eq!(
        std::fs::read(root.join("usr/local/bin/strata")).unwrap(),
        std::fs::read(BIN).unwrap()
    );
    let config = std::fs::read_to_string(root.join("etc/strata/agent.toml")).unwrap();
    assert!(
        config.contains(&format!("host_id = \"{host_id}\"")),
        "{config}"
    );
    assert!(config.contains(&format!("url = \"{}\"", env.core().trim_end_matches('/'))));
    assert!(!config.contains(TOKEN), "the token stays in its 0600 file");
    assert!(first["worksheet_url"]
        .as_str()
        .unwrap()
        .starts_with(env.core().trim_end_matches('/')));
    let objects = core_objects(&env, &host_id);
    assert_eq!(
        objects.len(),
        1 + 1 + 5,
        "agent record, worksheet, 5 rules: {objects:?}"
    );

    let files = snapshot(&root, &root);
    let on_core = core_files(&env);
    let log = root.with_extension("systemctl.log");
    let calls_before = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls_before.contains("enable strata-agent.service"),
        "{calls_before}"
    );
    assert!(
        calls_before.contains("start strata-agent.service"),
        "{calls_before}"
    );

    let t = Instant::now();
    let second = ok(&env.install(&root, &[]));
    let took = t.elapsed();
    println!("second run: {:.3} s", took.as_secs_f64());
    assert_eq!(second["changed"], 0, "{second}");
    for (step, outcome) in outcomes(&second) {
        assert!(
            ["unchanged", "ok", "skipped"].contains(&outcome.as_str()),
            "{step}: {outcome}"
        );
    }
    assert_eq!(
        snapshot(&root, &root),
        files,
        "no file rewritten (same inodes and times)"
    );
    assert_eq!(core_files(&env), on_core, "nothing written on the core");
    let calls_after = std::fs::read_to_string(&log).unwrap();
    let new_calls = &calls_after[calls_before.len()..];
    assert!(
        new_calls.lines().all(|l| l.starts_with("is-")),
        "only questions asked of systemctl: {new_calls}"
    );

    // A wiped state directory: the same host, only the directory comes back.
    std::fs::remove_dir_all(root.join("var/lib/strata/agent")).unwrap();
    let third = ok(&env.install(&root, &[]));
    assert_eq!(third["host_id"], host_id.as_str());
    assert_eq!(third["changed"], 1, "{third}");
    assert_eq!(outcomes(&third)["state-dir"], "created");

    // A changed config is kept unless --force-config.
    let cfg = root.join("etc/strata/agent.toml");
    std::fs::write(&cfg, config.replace("127.0.0.1:1", "127.0.0.1:2")).unwrap();
    assert_eq!(outcomes(&ok(&env.install(&root, &[])))["config"], "kept");
    assert_eq!(
        outcomes(&ok(&env.install(&root, &["--force-config"])))["config"],
        "updated"
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), config);

    let token_file = env.token_file();
    let out = env
        .command(
            &root,
            &[
                "uninstall",
                "agent",
                "--purge",
                "--json",
                "--token-file",
                token_file.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    let purged = ok(&out);
    assert_eq!(outcomes(&purged)["core"], "removed", "{purged}");
    let left: Vec<String> = snapshot(&root, &root)
        .into_keys()
        .filter(|k| !k.ends_with('/') && k != "etc/machine-id")
        .collect();
    assert!(left.is_empty(), "files left after --purge: {left:?}");
    assert!(
        core_objects(&env, &host_id).is_empty(),
        "objects left on the core"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.contains("disable --now strata-agent.service"),
        "{calls}"
    );
}

#[test]
fn killed_after_each_step_a_rerun_converges() {
    let env = Env::start();
    let reference = env.root("reference");
    let first = ok(&env.install(&reference, &[]));
    let host_id = first["host_id"].as_str().unwrap().to_string();
    let want_files = state(&snapshot(&reference, &reference));
    let want_core = core_objects(&env, &host_id);
    for (i, step) in STEPS.iter().enumerate() {
        // Each round starts from nothing: a new root, and the host's objects gone from the core.
        for c in ["checks", "worksheets", "dashboards", "rules"] {
            let r = client()
                .delete(
                    env.server
                        .url(&format!("/api/strata/v1/{c}?owner=host%3A{host_id}")),
                )
                .bearer_auth(TOKEN)
                .send()
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
        }
        let root = env.root(&format!("killed-{i}"));
        let stopped = env.install_with(&root, &[], &[("STRATA_INSTALL_FAILPOINT", step)]);
        assert_eq!(
            stopped.status.code(),
            Some(97),
            "{step}: stopped at its failpoint; stderr: {}",
            String::from_utf8_lossy(&stopped.stderr)
        );
        let rerun = ok(&env.install(&root, &[]));
        assert_eq!(rerun["host_id"], host_id.as_str());
        let got = state(&snapshot(&root, &root));
        assert_eq!(
            got, want_files,
            "after a kill at {step}, the files converge"
        );
        assert_eq!(
            core_objects(&env, &host_id),
            want_core,
            "after a kill at {step}, the core's objects converge"
        );
        let again = ok(&env.install(&root, &[]));
        assert_eq!(again["changed"], 0, "{step}: {again}");
    }
}

#[test]
fn preflight_refuses_a_wrong_token_and_the_first_sample_wait_says_why() {
    let env = Env::start();
    let root = env.root("wrong");
    let bad = env.dir.path().join("bad-token");
    std::fs::write(&bad, "nope\n").unwrap();
    let core = env.core();
    let out = env
        .command(
            &root,
            &[
                "install",
                "agent",
                "--core",
                &core,
                "--token-file",
                bad.to_str().unwrap(),
                "--wait-s",
                "0",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused the token"), "{err}");
    assert_eq!(err.lines().count(), 1, "one plain line: {err}");
    assert!(
        !root.join("etc/strata").exists(),
        "nothing written before preflight passed"
    );

    let out = env
        .command(
            &root,
            &[
                "install",
                "agent",
                "--core",
                "http://127.0.0.1:1",
                "--wait-s",
                "0",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not reachable"));

    // No agent runs here: the wait for the first sample ends with a reason.
    let out = env.install(&root, &["--wait-s", "2"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no sample from host"), "{err}");
    assert!(err.contains("within 2 s"), "{err}");
}

#[test]
fn the_unit_passes_systemd_analyze() {
    let env = Env::start();
    let root = env.root("unit");
    // The http plugin adds the observer's unit beside the agent's.
    ok(&env.install(&root, &["--plugins", "host,http", "--http-port", "8080"]));
    for name in ["strata-agent.service", "strata-observe.service"] {
        let unit = root.join("etc/systemd/system").join(name);
        let verify = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .expect("systemd-analyze (Debian package systemd)");
        let stderr = String::from_utf8_lossy(&verify.stderr);
        assert!(
            verify.status.success() && stderr.is_empty(),
            "verify {name}: {stderr}"
        );
        let security = Command::new("systemd-analyze")
            .args(["security", "--offline=yes"])
            .arg(&unit)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&security.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .unwrap_or_else(|| panic!("no score for {name}: {text}"));
        let score: f64 = line
            .split(':')
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        println!("systemd-analyze security {name}: {score}");
        assert!(score <= 4.5, "{name}: {line}");
    }
}

#[test]
fn install_sh_passes_shellcheck_and_installs_under_dash() {
    if Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_err()
    {
        serve_common::apt_install(&["shellcheck"]);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../install/src/install.sh");
    let check = Command::new("shellcheck").arg(&script).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let env = Env::start();
    let root = env.root("dash");
    let core = env.core();
    let core = core.trim_end_matches('/');
    let served = client()
        .get(format!("{core}/install.sh"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    // `curl … | dash -s -- …`: the script from the core, on stdin.
    let mut child = Command::new("dash")
        .args(["-s", "--", "--core", core, "--token-file"])
        .arg(env.token_file())
        .args(["--root"])
        .arg(&root)
        .args(["--statsd", "", "--wait-s", "0", "--json"])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", testdata().display()))
        .env("SYSTEMCTL_LOG", root.with_extension("systemctl.log"))
        .env("SYSTEMCTL_STATE", root.with_extension("systemctl.state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), served.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = ok(&out);
    assert_eq!(outcomes(&report)["binary"], "created");
    assert_eq!(
        std::fs::read(root.join("usr/local/bin/strata")).unwrap(),
        std::fs::read(BIN).unwrap()
    );
    // Run again through the script: nothing changes.
    let mut child = Command::new("dash")
        .args(["-s", "--", "--core", core, "--token-file"])
        .arg(env.token_file())
        .args(["--root"])
        .arg(&root)
        .args(["--statsd", "", "--wait-s", "0", "--json"])
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", testdata().display()))
        .env("SYSTEMCTL_LOG", root.with_extension("systemctl.log"))
        .env("SYSTEMCTL_STATE", root.with_extension("systemctl.state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), served.as_bytes()).unwrap();
    let again = ok(&child.wait_with_output().unwrap());
    assert_eq!(again["changed"], 0, "{again}");
}

/// Stops the agent the stand-in `systemctl start` ran, however the test ends.
struct AgentGuard(PathBuf);

/// The command the test's systemctl runs for the unit (`SYSTEMCTL_AGENT`), and a guard that
/// kills the agent it started.
fn installed_agent(root: &Path) -> (String, AgentGuard) {
    let agent = format!(
        "{} agent --config {}",
        root.join("usr/local/bin/strata").display(),
        root.join("etc/strata/agent.toml").display()
    );
    let pid = root
        .with_extension("systemctl.state")
        .join("strata-agent.service.pid");
    (agent, AgentGuard(pid))
}

/// Whether a brokers API answer lists `id`.
fn registered(links: &Value, id: &str) -> bool {
    links["brokers"]
        .as_array()
        .is_some_and(|all| all.iter().any(|b| b["id"] == id))
}

/// Waits for the host's CPU histogram at the core.
fn host_histograms_arrive(env: &Env, host_id: &str, what: &str) {
    let query = format!("/api/strata/v1/find?query=and(__name:cpu_busy_ratio,host:{host_id})");
    serve_common::eventually(what, || {
        let (_, found) = env.get(&query);
        (!found.as_array()?.is_empty()).then_some(())
    });
}

/// `strata uninstall agent --purge` against the core, with `extra` arguments.
fn purge(env: &Env, root: &Path, extra: &[&str]) {
    let token_file = env.token_file();
    let core = env.core();
    let mut args = vec![
        "uninstall",
        "agent",
        "--purge",
        "--json",
        "--core",
        core.trim_end_matches('/'),
        "--token-file",
        token_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ok(&env.command(root, &args).output().unwrap());
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").arg("-9").arg(pid.trim()).status();
        }
    }
}

#[test]
fn the_installed_agent_sends_its_first_sample() {
    let env = Env::start();
    let root = env.root("live");
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    // What systemd would run: ExecStart of the installed unit.
    let (agent, _guard) = installed_agent(&root);
    let t = Instant::now();
    let out = env.install_with(
        &root,
        &["--listen", &listen, "--wait-s", "30"],
        &[("SYSTEMCTL_AGENT", &agent)],
    );
    let took = t.elapsed();
    let first = ok(&out);
    println!("first sample at the core after {:.1} s", took.as_secs_f64());
    let steps = outcomes(&first);
    assert_eq!(steps["service"], "created");
    assert_eq!(steps["first-sample"], "ok", "{first}");
    let host_id = first["host_id"].as_str().unwrap().to_string();
    // The streams the worksheet and the rules name are there, tagged with the host.
    let (_, found) = env.get(&format!("/api/strata/v1/find?query=and(host:{host_id})"));
    let names: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"cpu_busy_ratio"), "{names:?}");
    // Running it again with the agent running: nothing changes.
    let again = ok(&env.install_with(
        &root,
        &["--listen", &listen, "--wait-s", "30"],
        &[("SYSTEMCTL_AGENT", &agent)],
    ));
    assert_eq!(again["changed"], 0, "{again}");
    let token_file = env.token_file();
    ok(&env
        .command(
            &root,
            &[
                "uninstall",
                "agent",
                "--purge",
                "--json",
                "--token-file",
                token_file.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap());
}

/// A broker process, killed when dropped.
struct BrokerGuard(std::process::Child);

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_pull_mode_agent_is_scraped_by_the_broker_the_core_assigns() {
    let env = Env::start();
    let root = env.root("pull");
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let (agent, _agent) = installed_agent(&root);
    // The broker named by --broker runs the checks the core assigns it: the agent's record is
    // its scrape of the agent's /metrics.
    let core = env.core();
    let _broker = BrokerGuard(
        strata()
            .args(["broker", "--id", "edge-pull", "--data-dir"])
            .arg(env.dir.path().join("broker"))
            .args([
                "--core-url",
                core.trim_end_matches('/'),
                "--checks-from-core",
            ])
            .arg("--core-token-file")
            .arg(env.token_file())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let args = [
        "--mode",
        "pull",
        "--broker",
        "edge-pull",
        "--listen",
        &listen,
        "--wait-s",
        "60",
    ];
    let first = ok(&env.install_with(&root, &args, &[("SYSTEMCTL_AGENT", &agent)]));
    let steps = outcomes(&first);
    assert_eq!(steps["first-sample"], "ok", "{first}");
    let config = std::fs::read_to_string(root.join("etc/strata/agent.toml")).unwrap();
    assert!(
        config.contains("mode = \"pull\"") && !config.contains("[push]"),
        "{config}"
    );
    let host_id = first["host_id"].as_str().unwrap().to_string();
    let (_, record) = env.get(&format!("/api/strata/v1/checks/host-{host_id}-agent"));
    assert_eq!(record["paused"], false, "{record}");
    assert_eq!(record["broker"], "edge-pull", "{record}");
    // The host's own series arrive through the broker's scrape, tagged with the host (the
    // first sample may be the scrape's own `up`; the agent's histograms follow).
    host_histograms_arrive(
        &env,
        &host_id,
        "the agent's CPU histogram through the broker",
    );
    let again = ok(&env.install_with(&root, &args, &[("SYSTEMCTL_AGENT", &agent)]));
    assert_eq!(again["changed"], 0, "{again}");
}

#[test]
fn a_reverse_mode_agent_dials_the_core_and_its_data_arrives() {
    let env = Env::start_with(&["--link-listen", "127.0.0.1:0"]);
    let root = env.root("reverse");
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let (agent, _agent) = installed_agent(&root);
    // No --broker: the installer asks the core where its link listener is and which
    // certificate to pin, makes the agent's link identity and registers it.
    let args = ["--mode", "reverse", "--listen", &listen, "--wait-s", "30"];
    let first = ok(&env.install_with(&root, &args, &[("SYSTEMCTL_AGENT", &agent)]));
    let steps = outcomes(&first);
    assert_eq!(steps["link"], "created", "{first}");
    assert_eq!(steps["first-sample"], "ok", "{first}");
    let host_id = first["host_id"].as_str().unwrap().to_string();
    let config = std::fs::read_to_string(root.join("etc/strata/agent.toml")).unwrap();
    let (_, links) = env.get("/api/strata/v1/brokers");
    let core_sha256 = links["core_sha256"].as_str().unwrap();
    assert!(
        config.contains(&format!("core_sha256 = \"{core_sha256}\"")),
        "{config}"
    );
    let id = format!("agent-{host_id}");
    assert!(registered(&links, &id), "{links}");
    // The agent's own histograms come over the link it dialled.
    host_histograms_arrive(&env, &host_id, "the agent's CPU histogram over the link");
    let again = ok(&env.install_with(&root, &args, &[("SYSTEMCTL_AGENT", &agent)]));
    assert_eq!(again["changed"], 0, "{again}");
    assert_eq!(outcomes(&again)["link"], "unchanged");
    // A reverse-mode config names no core URL (the agent dials its link): purge is told it.
    purge(&env, &root, &[]);
    let (_, links) = env.get("/api/strata/v1/brokers");
    assert!(!registered(&links, &id), "{links}");
}

fn free_address() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

#[test]
fn a_reverse_mode_agent_dials_a_broker_and_its_data_reaches_the_core() {
    let env = Env::start();
    let root = env.root("reverse-broker");
    let (listen, push, agents) = (free_address(), free_address(), free_address());
    let (agent, _agent) = installed_agent(&root);
    // A broker forwarding to the core's HTTP ingest, taking agents' links.
    let core = env.core();
    let _broker = BrokerGuard(
        strata()
            .args(["broker", "--id", "edge-rev", "--data-dir"])
            .arg(env.dir.path().join("broker"))
            .args(["--core-url", core.trim_end_matches('/')])
            .arg("--core-token-file")
            .arg(env.token_file())
            .args(["--push-http", &push, "--agent-listen", &agents])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    serve_common::eventually("the broker's push listener", || {
        std::net::TcpStream::connect(&push).ok()
    });
    // The installer asks the broker (not the core) where agents dial and what to pin, and
    // registers the agent there.
    let broker_api = format!("http://{push}");
    let args = [
        "--mode",
        "reverse",
        "--broker-api",
        &broker_api,
        "--listen",
        &listen,
        "--wait-s",
        "30",
    ];
    let first = ok(&env.install_with(&root, &args, &[("SYSTEMCTL_AGENT", &agent)]));
    let steps = outcomes(&first);
    assert_eq!(steps["link"], "created", "{first}");
    assert_eq!(steps["first-sample"], "ok", "{first}");
    let host_id = first["host_id"].as_str().unwrap().to_string();
    let registry = || -> Value {
        client()
            .get(format!("{broker_api}/api/strata/v1/brokers"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let links = registry();
    let config = std::fs::read_to_string(root.join("etc/strata/agent.toml")).unwrap();
    let pin = links["core_sha256"].as_str().unwrap();
    assert!(
        config.contains(&format!("broker = \"{agents}\""))
            && config.contains(&format!("core_sha256 = \"{pin}\"")),
        "the agent dials the broker's agent listener and pins its certificate: {config}"
    );
    let id = format!("agent-{host_id}");
    assert!(registered(&links, &id), "{links}");
    // The agent's histograms reach the core through the broker, under the agent's check.
    host_histograms_arrive(
        &env,
        &host_id,
        "the agent's CPU histogram through the broker",
    );
    let (_, found) = env.get(&format!("/api/strata/v1/find?query=and(__check:{id})"));
    assert!(found.as_array().is_some_and(|a| !a.is_empty()), "{found}");
    let again = ok(&env.install_with(&root, &args, &[("SYSTEMCTL_AGENT", &agent)]));
    assert_eq!(again["changed"], 0, "{again}");
    purge(&env, &root, &["--broker-api", &broker_api]);
    assert!(
        !registered(&registry(), &id),
        "purge unregisters the agent at the broker"
    );
}
