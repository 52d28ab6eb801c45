//! `strata agent` in pull mode, end to end with the real binary: `--check` on good and bad
//! config files; `/` in NAD's JSON form and `/metrics` in Prometheus text and protobuf (native
//! histograms) carrying the host collectors, a plugin's output, a `/write` body and statsd
//! counters; and the agent pulled by a real `strata broker` (its prometheus check on the
//! agent's `/metrics`) forwarding to a real `strata serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod roles_common;
use roles_common::{free_port, fresh_dir, Proc};

const HOST: &str = "pulled-host";
const WAIT_MS_MAX: u64 = 120_000;

fn config(dir: &Path, http: u16, statsd: u16) -> PathBuf {
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!(
            "host_id = \"{HOST}\"\nstate_dir = \"{}\"\nmode = \"pull\"\n\
             listen = \"127.0.0.1:{http}\"\nstatsd = \"127.0.0.1:{statsd}\"\nplugins_dir = \"{}\"\n",
            dir.join("state").display(),
            dir.join("plugins").display()
        ),
    )
    .unwrap();
    path
}

fn strata(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn check_flag_accepts_a_good_file_and_names_a_bad_key() {
    let dir = fresh_dir("agent-check");
    let good = config(&dir, 2609, 8125);
    let out = strata(&["agent", "--config", good.to_str().unwrap(), "--check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.join("bad.toml");
    let text = std::fs::read_to_string(&good)
        .unwrap()
        .replace("plugins_dir", "plugin_dir");
    std::fs::write(&bad, text).unwrap();
    let out = strata(&["agent", "--config", bad.to_str().unwrap(), "--check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("plugin_dir"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one plain line: {err}");
    let out = strata(&[
        "agent",
        "--config",
        dir.join("missing.toml").to_str().unwrap(),
        "--check",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

fn get(url: &str, accept: Option<&str>) -> (String, Vec<u8>) {
    let mut req = reqwest::blocking::Client::new().get(url);
    if let Some(a) = accept {
        req = req.header("Accept", a);
    }
    let r = req.send().unwrap();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (ct, r.bytes().unwrap().to_vec())
}

/// Polls `f` until it returns `Some`, at most `WAIT_MS_MAX`.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not seen");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn pulled_as_nad_json_and_prometheus_and_through_a_broker_into_a_core() {
    let dir = fresh_dir("agent-pull");
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let plugin = dir.join("plugins").join("app.sh");
    std::fs::write(&plugin, "#!/bin/sh\nprintf 'queue_depth\\tL\\t17\\n'\n").unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (http, statsd) = (free_port(), free_port());
    let cfg = config(&dir, http, statsd);
    let args: Vec<String> = [
        "agent",
        "--config",
        cfg.to_str().unwrap(),
        "--period-s",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let _agent = Proc::start("strata agent", &args, &dir.join("agent.log"), "ready");
    let base = format!("http://127.0.0.1:{http}");

    // Local inputs: an httptrap body and statsd counters.
    let r = reqwest::blocking::Client::new()
        .post(format!("{base}/write"))
        .body(r#"{"app_latency": {"_type": "h", "_value": ["H[2.0e-03]=4"]}}"#)
        .send()
        .unwrap();
    assert!(r.status().is_success());
    let r = reqwest::blocking::Client::new()
        .post(format!("{base}/write"))
        .body("{not json")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: serde_json::Value = r.json().unwrap();
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.send_to(b"app_hits:3|c\napp_hits:3|c", ("127.0.0.1", statsd))
        .unwrap();

    let host_key = |name: &str, tags: &str| format!("{name}|ST[{tags}host:{HOST}]");
    let nad = || -> serde_json::Value {
        let (ct, body) = get(&format!("{base}/"), None);
        assert!(ct.starts_with("application/json"), "{ct}");
        serde_json::from_slice(&body).unwrap()
    };
    // Each input shows in the period it arrived in (and the plugin's in every period).
    let find = |prefix: &str| {
        wait_for(prefix, || {
            let doc = nad();
            let found = doc.as_object()?.iter().find(|(k, _)| k.starts_with(prefix));
            found.map(|(_, v)| v.clone())
        })
    };
    let hits = find("app_hits|");
    assert_eq!(
        hits["_value"], 6.0,
        "statsd counters summed over the period: {hits}"
    );
    let latency = find("app_latency|");
    assert_eq!(latency["_value"][0], "H[2.0e-03]=4");
    let queue = find(&format!("queue_depth|ST[host:{HOST},plugin:app]"));
    assert_eq!(queue["_value"], 17.0);
    let doc = nad();
    let cpu = &doc[host_key("cpu_busy_ratio", "cpu:total,")];
    assert_eq!(cpu["_type"], "h", "{doc}");
    assert!(
        cpu["_value"][0].as_str().unwrap().starts_with("H["),
        "{cpu}"
    );
    assert_eq!(doc[host_key("mem_total_bytes", "")]["_type"], "n");
    // The document parses back as httptrap, every key of it.
    let body = serde_json::to_vec(&doc).unwrap();
    let batch = ingest::httptrap::parse(&body, &ingest::Options::at(0));
    assert_eq!(batch.rejected_total, 0);
    assert_eq!(batch.samples.len(), doc.as_object().unwrap().len());

    let (ct, text) = get(&format!("{base}/metrics"), None);
    assert!(ct.starts_with("text/plain"));
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("# TYPE cpu_busy_ratio histogram"), "{text}");
    assert!(
        text.contains(&format!(
            "cpu_busy_ratio_bucket{{host=\"{HOST}\",cpu=\"total\",le=\"+Inf\"}}"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("mem_total_bytes{{host=\"{HOST}\"}}")));
    assert!(text.contains("# TYPE net_bytes_total counter"));
    let (ct, body) = get(&format!("{base}/metrics"), Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"));
    assert!(ct.starts_with("application/vnd.google.protobuf"), "{ct}");
    let families = checks::prometheus::proto::parse(&body, 1_000_000).unwrap();
    let cpu = families
        .iter()
        .find(|f| f.name.as_deref() == Some("cpu_busy_ratio"))
        .unwrap();
    let h = cpu.metric[0].histogram.as_ref().unwrap();
    assert!(h.is_native(), "native histogram buckets");
    assert!(h.sample_count.unwrap() >= 1);

    // A broker pulls the agent's /metrics with its prometheus check and forwards to a core.
    let core_port = free_port();
    let core_cfg = dir.join("core.toml");
    std::fs::write(&core_cfg, "").unwrap();
    let core_args: Vec<String> = [
        "serve",
        "--http",
        &format!("127.0.0.1:{core_port}"),
        "--statsd",
        "127.0.0.1:0",
        "--graphite",
        "127.0.0.1:0",
        "--data-dir",
        dir.join("core").to_str().unwrap(),
        "--config",
        core_cfg.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let _core = Proc::start(
        "strata serve",
        &core_args,
        &dir.join("core.log"),
        "listening",
    );
    let checks = dir.join("checks.toml");
    std::fs::write(
        &checks,
        format!(
            "[[check]]\nid = \"agent-{HOST}\"\nkind = \"prometheus\"\n\
             target = \"http://127.0.0.1:{http}/metrics\"\nperiod_ms = 1000\ntimeout_ms = 900\n"
        ),
    )
    .unwrap();
    let broker_args: Vec<String> = [
        "broker",
        "--id",
        "edge-pull",
        "--data-dir",
        dir.join("broker").to_str().unwrap(),
        "--core-url",
        &format!("http://127.0.0.1:{core_port}"),
        "--checks",
        checks.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let _broker = Proc::start(
        "strata broker",
        &broker_args,
        &dir.join("broker.log"),
        "ready",
    );
    for name in ["cpu_busy_ratio", "mem_available_bytes", "queue_depth"] {
        let url = format!(
            "http://127.0.0.1:{core_port}/api/strata/v1/find?query=and(__name:{name},host:{HOST})"
        );
        wait_for(&format!("{name} at the core through the broker"), || {
            let doc: serde_json::Value = reqwest::blocking::get(&url).ok()?.json().ok()?;
            doc.as_array().filter(|a| !a.is_empty()).map(|_| ())
        });
    }
}
