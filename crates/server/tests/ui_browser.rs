//! The web UI in a real browser: starts `strata serve` on port 0 with a temporary data
//! directory, writes histogram, numeric and text streams through httptrap (among them a smooth
//! log-normal histogram, one with empty slices, 10^5 heatmap cells, and login latencies that a
//! ruleset fires on; notifications go to a file (alerts labelled team=db to another), a rules
//! file is read-only), and runs
//! `ui/tests/browser.mjs` (playwright-core driving Debian's headless Chromium) against it.
//! Screenshots, the render benchmark and per-test results are saved under
//! `<target dir>/ui-artifacts/`. Installs what is missing (the npm packages; Chromium with
//! apt-get when running as root) or fails saying what to install. Prints a closing
//! `N passed, N failed` line. `harness = false`: one process, its own output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use serde_json::json;
use serve_common::{client, Server, BIN};

/// One-minute slices written (the server's default base period is 60 s).
const SLICES: i64 = 60;
/// Samples per histogram slice.
const SAMPLES_PER_SLICE: u64 = 200;

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui")
}

/// `<target dir>/ui-artifacts`, next to the `debug`/`release` directory holding the binary.
fn artifacts_dir() -> PathBuf {
    let bin = Path::new(BIN);
    let target = bin
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    target.join("ui-artifacts")
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn chromium_path() -> PathBuf {
    PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()))
}

/// Makes sure node, the npm packages and Chromium are there; the error says what is missing.
fn prepare() -> Result<(), String> {
    if !have("node", "--version") || !have("npm", "--version") {
        return Err("the browser tests need Node.js 20+ and npm on PATH".into());
    }
    let ui = ui_dir();
    if !ui
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        let ok = Command::new("npm")
            .args(["install", "--no-save", "--no-audit", "--no-fund"])
            .current_dir(&ui)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!("`npm install` in {} failed", ui.display()));
        }
    }
    let chromium = chromium_path();
    if !chromium.exists() {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        if root && have("apt-get", "--version") {
            eprintln!(
                "installing Debian chromium with apt-get (not found at {})",
                chromium.display()
            );
            let _ = Command::new("apt-get").arg("update").status();
            let _ = Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "chromium"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status();
        }
        if !chromium.exists() {
            return Err(format!(
                "no Chromium at {} (set CHROMIUM, or `apt-get install chromium` as root)",
                chromium.display()
            ));
        }
    }
    Ok(())
}

/// A deterministic latency-like sample: log-normal-ish values from a small LCG, so the
/// histograms span a few decades and move with time.
fn samples(slice: i64, n: u64) -> Vec<f64> {
    let mut state = (slice as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((state >> 11) as f64) / ((1u64 << 53) as f64);
            let centre = -2.5 + 0.6 * ((slice as f64) / 7.0).sin();
            (centre + 3.0 * (u - 0.5)).exp()
        })
        .collect()
}

/// The bins of `smooth`: a power law, smooth in log-log, from 10^-3 to 10^1 — the density per
/// decade of value is `SMOOTH_PER_DECADE` × 10^(-x/2) at value 10^x (100 times less at the top
/// than at the bottom), and each bin holds that density times its width in decades. Its density
/// heatmap must change colour smoothly through a power of ten, while its count per bin drops
/// about tenfold there (llhist bins are ten times wider just above a power of ten than just below).
const SMOOTH_PER_DECADE: f64 = 1e4;

fn smooth_bins() -> Vec<String> {
    let mut out = Vec::new();
    for exp in -3..=0 {
        for val in 10..=99 {
            let lo = f64::from(val) / 10.0 * 10f64.powi(exp);
            let hi = f64::from(val + 1) / 10.0 * 10f64.powi(exp);
            let mid = (lo.log10() + hi.log10()) / 2.0;
            let count = (SMOOTH_PER_DECADE * 10f64.powf(-mid / 2.0) * (hi / lo).log10()).round();
            let centre = (f64::from(val) + 0.5) / 10.0 * 10f64.powi(exp);
            out.push(format!("H[{centre:e}]={count}"));
        }
    }
    out
}

fn write_data(server: &Server) {
    let now_ms = serve_common::now_s() * 1000;
    let base_ms = now_ms - now_ms % 60_000;
    let http = client();
    for i in 0..SLICES {
        // Inside the slice, so it is read back at the slice's start.
        let ts = base_ms - (SLICES - 1 - i) * 60_000 + 1_000;
        let mut body = json!({
            "lat|ST[svc:api]": { "_type": "h", "_ts": ts, "_value": samples(i, SAMPLES_PER_SLICE) },
            "reqs": { "_type": "n", "_ts": ts, "_value": 100 + i },
            "ver": { "_type": "s", "_ts": ts, "_value": format!("v{}", i / 20) },
            "smooth": { "_type": "h", "_ts": ts, "_value": smooth_bins() },
            "tiny": { "_type": "n", "_ts": ts, "_value": 1e-4 * (1.0 + i as f64 / 100.0) },
        });
        // Every third slice only: the others are empty.
        if i % 3 == 0 {
            body["gappy"] = json!({ "_type": "h", "_ts": ts, "_value": samples(i, 50) });
        }
        if i >= SLICES - 10 {
            body["checkout_latency|ST[env:prod,svc:checkout]"] =
                json!({ "_type": "h", "_ts": ts, "_value": samples(i + 7, 100) });
        }
        let response = http
            .put(server.url("/module/httptrap/web/secret"))
            .json(&body)
            .send()
            .unwrap();
        assert!(
            response.status().is_success(),
            "httptrap write: {}",
            response.status()
        );
    }
}

/// Slices of the `big` histogram stream: with `BIG_BINS` bins each, 10^5 heatmap cells.
const BIG_SLICES: i64 = 1000;
const BIG_BINS: i64 = 100;
/// Threads writing the `big` stream (one httptrap request per slice: one `_ts` per stream).
const BIG_WRITERS: i64 = 4;

/// `big`: `BIG_SLICES` one-minute slices, each with samples in `BIG_BINS` distinct bins
/// (90 bins of [0.01, 0.1) and 10 of [0.1, 0.2)), for the 10^5-cell heatmap.
fn write_big(server: &Server) {
    let now_ms = serve_common::now_s() * 1000;
    let base_ms = now_ms - now_ms % 60_000;
    std::thread::scope(|scope| {
        for w in 0..BIG_WRITERS {
            scope.spawn(move || {
                let http = client();
                let mut i = w;
                while i < BIG_SLICES {
                    let ts = base_ms - (BIG_SLICES - 1 - i) * 60_000 + 2_000;
                    let values: Vec<String> = (0..BIG_BINS)
                        .map(|k| {
                            let (val, exp): (i64, i32) =
                                if k < 90 { (10 + k, -2) } else { (k - 80, -1) };
                            let v = (val as f64 + 0.5) / 10.0 * 10f64.powi(exp);
                            format!("H[{v:e}]={}", 1 + (i * 31 + k * 17) % 50)
                        })
                        .collect();
                    let body = json!({ "big": { "_type": "h", "_ts": ts, "_value": values } });
                    let response = http
                        .put(server.url("/module/httptrap/web/secret"))
                        .json(&body)
                        .send()
                        .unwrap();
                    assert!(
                        response.status().is_success(),
                        "big write: {}",
                        response.status()
                    );
                    i += BIG_WRITERS;
                }
            });
        }
    });
}

/// The alerting setup: a read-only rules file, notifications to a JSON-lines file, and the
/// server's configuration naming both. Returns the `--config` path.
fn alerting_config(dir: &Path) -> PathBuf {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("provisioned.toml"),
        "[[ruleset]]\nname = \"lat-p99\"\nexpr = 'find:histogram(\"lat\")'\n\
         window = \"rolling:merge(5m)\"\n[[ruleset.severity]]\nlevel = 2\n\
         when = \"percentile(99) > 1000\"\n",
    )
    .unwrap();
    let notify = dir.join("notify.toml");
    std::fs::write(
        &notify,
        // Two receivers, so the routing tree page has a child route to show and test.
        format!(
            "[route]\nreceiver = \"oncall\"\ngroup_by = [\"alertname\"]\n\
             [[route.routes]]\nmatchers = ['team=\"db\"']\nreceiver = \"dba\"\n\
             [[receiver]]\nname = \"oncall\"\nfile = \"{}\"\n\
             [[receiver]]\nname = \"dba\"\nfile = \"{}\"\n",
            dir.join("notifications.jsonl").display(),
            dir.join("dba.jsonl").display()
        ),
    )
    .unwrap();
    let config = dir.join("strata.toml");
    std::fs::write(
        &config,
        format!(
            "[alerts]\nrules_dir = \"{}\"\nnotify = \"{}\"\n",
            rules.display(),
            notify.display()
        ),
    )
    .unwrap();
    config
}

/// Minutes of login latencies written for the alerts page, and the slow logins (≥ 1.5 s) per
/// minute from minute `LOGIN_SLOW_FROM` on (3 before).
const LOGIN_MINUTES: i64 = 20;
const LOGIN_SLOW_FROM: i64 = 5;
const LOGIN_SLOW_PER_MINUTE: i64 = 150;

/// Login latencies through httptrap starting at `base_ms` (a minute boundary), then the
/// `login-slow` ruleset through the API, evaluated over the past first (`backfill`): with a
/// one-hour window it fires at `base + 6 min` (severity 3: 165 slow logins), is severity 1
/// from `base + 9 min` (615) and keeps firing for the whole browser run.
fn write_logins_and_rule(server: &Server, base_ms: i64) {
    let http = client();
    for m in 0..LOGIN_MINUTES {
        let slow = if m >= LOGIN_SLOW_FROM {
            LOGIN_SLOW_PER_MINUTE
        } else {
            3
        };
        let body = json!({ "login|ST[app:web]": {
            "_type": "h",
            "_value": ["H[1.2e-01]=4000", format!("H[1.6e+00]={slow}")],
            "_ts": base_ms + m * 60_000 + 5_000,
        }});
        let r = http
            .put(server.url("/module/httptrap/login/secret"))
            .json(&body)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "login write: {}", r.status());
    }
    let rule = r#"[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login")'
window = "rolling:merge(1h)"
annotations = { summary = "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }}) waited more than 1.5 s to log in on {{ tag.app }}" }
[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 500"
clear = "count_above(1.5) < 400"
[[ruleset.severity]]
level = 3
when = "count_above(1.0) >= 100"
"#;
    let r = http
        .put(server.url("/api/strata/v1/rules/login-slow?backfill=30m"))
        .body(rule)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().unwrap());
}

/// A port free on 127.0.0.1 now (for the pages of other origins, named in a server's
/// configuration before they are served).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The token both servers of the safety tests are given (the second does not check it).
const SECURITY_TOKEN: &str = "browser-test-token";

/// `ui/tests/security.mjs`: the sign-in page of a tokened server, and pages of other origins
/// (one configured in `http.cors_origins`, one not, one reaching the server by a rebound name)
/// against a server without a token. Its (passed, failed) counts.
fn security(artifacts: &Path) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (friend_port, evil_port) = (free_port(), free_port());
    let cors = format!("[http]\ncors_origins = [\"http://localhost:{friend_port}\"]\n");
    let tokened_config = dir.path().join("tokened.toml");
    std::fs::write(
        &tokened_config,
        format!("[auth]\ntoken = \"{SECURITY_TOKEN}\"\n{cors}"),
    )
    .unwrap();
    let open_config = dir.path().join("open.toml");
    std::fs::write(&open_config, &cors).unwrap();
    let tokened = Server::start(
        &dir.path().join("tokened"),
        &["--config", tokened_config.to_str().unwrap()],
    );
    let open = Server::start(
        &dir.path().join("open"),
        &["--config", open_config.to_str().unwrap()],
    );
    let output = Command::new("node")
        .arg("tests/security.mjs")
        .current_dir(ui_dir())
        .env("STRATA_TOKEN_URL", tokened.url(""))
        .env("STRATA_TOKEN", SECURITY_TOKEN)
        .env("STRATA_OPEN_URL", open.url(""))
        .env("FRIEND_PORT", friend_port.to_string())
        .env("EVIL_PORT", evil_port.to_string())
        .env("ARTIFACTS", artifacts)
        .env("CHROMIUM", chromium_path())
        .stderr(Stdio::inherit())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    let stopped = tokened.stop().success() && open.stop().success();
    let last = stdout.lines().last().unwrap_or("");
    let counts: Vec<u64> = last
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    match counts[..] {
        [passed, failed] if last.ends_with("failed") && stopped => (passed, failed),
        _ => {
            println!("security.mjs did not finish (last line {last:?})");
            (0, 1)
        }
    }
}

fn main() -> ExitCode {
    if let Err(e) = prepare() {
        eprintln!("ui_browser: {e}");
        println!("0 passed, 1 failed");
        return ExitCode::FAILURE;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = alerting_config(dir.path());
    // Every listener on port 0: the landing page's statsd and Graphite examples are run too.
    let server = Server::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    write_data(&server);
    let started = std::time::Instant::now();
    write_big(&server);
    eprintln!(
        "wrote {BIG_SLICES} histogram slices in {:?}",
        started.elapsed()
    );
    // The UI is served at `/` by the binary itself.
    let index = client().get(server.url("/")).send().unwrap();
    assert!(
        index.status().is_success(),
        "GET / answered {}",
        index.status()
    );
    let now_ms = serve_common::now_s() * 1000;
    let login_base_ms = now_ms - now_ms % 60_000 - LOGIN_MINUTES * 60_000;
    write_logins_and_rule(&server, login_base_ms);
    let artifacts = artifacts_dir();
    std::fs::create_dir_all(&artifacts).unwrap();
    let output = Command::new("node")
        .arg("tests/browser.mjs")
        .current_dir(ui_dir())
        .env("STRATA_URL", server.url(""))
        .env("ARTIFACTS", &artifacts)
        .env("CHROMIUM", chromium_path())
        .env("STRATA_LINE", server.line.trim())
        .env("LOGIN_BASE_MS", login_base_ms.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    let status = server.stop();
    let (security_passed, security_failed) = security(&artifacts);
    let last = stdout.lines().last().unwrap_or("");
    let counts: Vec<u64> = last
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    eprintln!(
        "artifacts (screenshots, render-bench.json, results.json): {}",
        artifacts.display()
    );
    match counts[..] {
        [passed, failed] if last.ends_with("failed") => {
            let (passed, failed) = (passed + security_passed, failed + security_failed);
            println!("ui_browser: {passed} passed, {failed} failed");
            if failed == 0 && passed > 0 && output.status.success() && status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        _ => {
            println!("ui_browser: the browser tests did not finish (last line {last:?})");
            println!("0 passed, 1 failed");
            ExitCode::FAILURE
        }
    }
}
