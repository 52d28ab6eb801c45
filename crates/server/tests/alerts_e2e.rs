//! Alerting end to end against the real `strata serve`: the people example written through
//! httptrap fires at the right minute with the right count (API, CLI, after SIGTERM and after
//! kill -9), a statsd sender that stops is noticed by the built-in push-source rule, and
//! `strata rules check | test` on files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{client, get_json, now_s, strata, Server};

const MIN_MS: i64 = 60_000;

const LOGIN_RULE: &str = r#"
expr = 'find:histogram("login")'
window = "rolling:merge(5m)"
annotations = { summary = "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }}) waited more than 1.5 s to log in on {{ tag.app }}" }
[[severity]]
level = 1
when = "count_above(1.5) >= 500"
"#;

fn testdata(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../alert/testdata")
        .join(name)
}

/// Twenty minutes of logins through httptrap, 150 slow ones a minute from minute 5 on.
fn write_logins(server: &Server, base_ms: i64) {
    for m in 0..20 {
        let slow = if m >= 5 { 150 } else { 3 };
        let body = json!({"login|ST[app:web]": {
            "_type": "h",
            "_value": ["H[1.2e-01]=4000", format!("H[1.6e+00]={slow}")],
            "_ts": base_ms + m * MIN_MS + 5_000,
        }});
        let r = client()
            .put(server.url("/module/httptrap/login/secret"))
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().unwrap());
    }
}

fn alerts(server: &Server, query: &str) -> Vec<Value> {
    get_json(&server.url(&format!("/api/strata/v1/alerts{query}")))["alerts"]
        .as_array()
        .unwrap()
        .clone()
}

/// Waits (bounded) until the alerts answer for `query` satisfies `ok`.
fn wait_for(server: &Server, query: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = alerts(server, query);
        if ok(&a) {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "alerts{query} never matched: {a:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn firing_login(server: &Server) -> Value {
    wait_for(server, "?rule=login-slow&state=firing", |a| a.len() == 1)[0].clone()
}

#[test]
fn the_people_example_fires_at_the_right_minute() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let base = (now_s() * 1000).div_euclid(MIN_MS) * MIN_MS - 20 * MIN_MS;
    write_logins(&server, base);
    // A new ruleset evaluated over the last 25 minutes first, then live.
    let r = client()
        .put(server.url("/api/strata/v1/rules/login-slow?backfill=25m"))
        .body(LOGIN_RULE)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().unwrap());
    let a = firing_login(&server);
    assert_eq!(a["stream"], "login|ST[__check:login,app:web]");
    assert_eq!(a["severity"], 1);
    // Minutes 5–8 held 150 slow logins each and minute 4 three: 603 at the end of minute 8.
    assert_eq!(a["fired"], base + 9 * MIN_MS);
    let h = get_json(&server.url("/api/strata/v1/alerts/history?rule=login-slow"));
    let fired = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["state"] == "firing" && t["from"] == "ok")
        .unwrap()
        .clone();
    assert_eq!(fired["t"], base + 9 * MIN_MS);
    assert_eq!(fired["backfill"], true);
    assert_eq!(
        fired["annotations"]["summary"],
        "603 people (2.927%) waited more than 1.5 s to log in on web"
    );
    cli_sees_it(&server, base);
    prometheus_api_sees_it(&server, base);
    // SIGTERM: a clean stop (snapshot); the alert is firing again from the same start.
    server.stop();
    let server = Server::start(&data, &[]);
    assert_eq!(firing_login(&server)["fired"], base + 9 * MIN_MS);
    // kill -9: the journal alone restores it.
    drop(server);
    let server = Server::start(&data, &[]);
    assert_eq!(firing_login(&server)["fired"], base + 9 * MIN_MS);
    let h = get_json(&server.url("/api/strata/v1/alerts/history?rule=login-slow"));
    let fires = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["state"] == "firing" && t["from"] != "firing")
        .count();
    assert_eq!(fires, 1, "fired once across both restarts: {h}");
    prometheus_api_sees_it(&server, base);
}

/// Grafana's view: `/api/v1/alerts` and `/api/v1/rules` in Prometheus's shapes.
fn prometheus_api_sees_it(server: &Server, base: i64) {
    let a = get_json(&server.url("/api/v1/alerts"));
    assert_eq!(a["status"], "success", "{a}");
    let list = a["data"]["alerts"].as_array().unwrap();
    let login: Vec<&Value> = list
        .iter()
        .filter(|x| x["labels"]["alertname"] == "login-slow")
        .collect();
    assert_eq!(login.len(), 1, "{a}");
    assert_eq!(login[0]["state"], "firing");
    assert_eq!(login[0]["labels"]["severity"], "1");
    // The annotation shows the latest period's numbers, as the Strata API does.
    assert_eq!(
        login[0]["annotations"]["summary"],
        firing_login(server)["annotations"]["summary"]
    );
    // `for` is 0: active from the minute it fired.
    let active = alert::util::rfc3339(base + 9 * MIN_MS);
    assert_eq!(login[0]["activeAt"], active.as_str());
    let r = get_json(&server.url("/api/v1/rules"));
    assert_eq!(r["status"], "success", "{r}");
    let rule = r["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .find(|x| x["name"] == "login-slow")
        .unwrap()
        .clone();
    assert_eq!(rule["type"], "alerting");
    assert_eq!(rule["state"], "firing");
    assert_eq!(rule["query"], "find:histogram(\"login\")");
    assert_eq!(rule["alerts"].as_array().unwrap().len(), 1);
    assert_eq!(rule["alerts"][0]["activeAt"], active.as_str());
}

fn cli_sees_it(server: &Server, base: i64) {
    let url = server.url("");
    let out = strata()
        .args(["alerts", "list", "--state", "firing", "--server", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("login-slow") && text.contains("firing"),
        "{text}"
    );
    let file = server.data_dir.join("login.toml");
    std::fs::write(
        &file,
        format!(
            "[[ruleset]]\nname = \"login-slow\"\n{}",
            LOGIN_RULE.replace("[[severity]]", "[[ruleset.severity]]")
        ),
    )
    .unwrap();
    let out = strata()
        .args([
            "rules",
            "backtest",
            file.to_str().unwrap(),
            "--server",
            &url,
        ])
        .args([
            "--start",
            &format!("{}", base / 1000),
            "--end",
            &format!("{}", base / 1000 + 1200),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("603 people"), "{text}");
}

#[test]
fn a_statsd_sender_that_stops_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(
        &config,
        "[store]\nbase_period_s = 1\n[statsd]\nflush_interval_ms = 1000\n[alerts]\ngrace_ms = 300\n",
    )
    .unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = server.statsd.clone().unwrap();
    let send_for = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until {
            udp.send_to(b"logins:1|c|#host:web-1\n", &target).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    send_for(Duration::from_secs(6));
    let q = "?rule=builtin:push-sources&state=firing";
    assert!(
        alerts(&server, q).is_empty(),
        "a sender still sending is not silent"
    );
    let stopped = Instant::now();
    let a = wait_for(&server, q, |a| {
        a.iter().any(|x| x["stream"] == "host:web-1")
    });
    // Silent for more than 3 × its 1 s interval, seen at the next period end + grace (and up
    // to a statsd flush of lag).
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let summary = a[0]["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("push source host:web-1 has sent nothing for"),
        "{summary}"
    );
    // It comes back: resolved.
    send_for(Duration::from_secs(3));
    wait_for(&server, "?rule=builtin:push-sources&state=resolved", |a| {
        a.iter().any(|x| x["stream"] == "host:web-1")
    });
}

#[test]
fn rules_check_and_test_on_files() {
    let run = |args: &[&str]| {
        let out = strata().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let rules = testdata("login.toml");
    let (code, text) = run(&["rules", "check", rules.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("1 rulesets ok"), "{text}");
    let (code, text) = run(&[
        "rules",
        "test",
        testdata("login_test.toml").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("7 checks passed"), "{text}");
    // A wrong expectation fails with both sides shown.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&rules, dir.path().join("login.toml")).unwrap();
    let bad = std::fs::read_to_string(testdata("login_test.toml"))
        .unwrap()
        .replace("603 people", "604 people");
    let bad_path = dir.path().join("bad_test.toml");
    std::fs::write(&bad_path, bad).unwrap();
    let (code, text) = run(&["rules", "test", bad_path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAILED") && text.contains("604 people") && text.contains("603 people"),
        "{text}"
    );
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[[ruleset]]\nname = \"x\"\nexpr = 'find('\n").unwrap();
    let (code, text) = run(&["rules", "check", broken.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("expr"), "{text}");
}

/// Lines of a JSON-lines file (none while it does not exist).
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_people_alert_is_notified_once_across_kill_9_and_can_be_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = dir.path().join("notifications.jsonl");
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[route]\nreceiver = \"oncall\"\ngroup_by = [\"alertname\"]\n\
             [[receiver]]\nname = \"oncall\"\nfile = \"{}\"\nreminders = [\"4h\"]\n",
            out.display()
        ),
    )
    .unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(
        &config,
        format!("[alerts]\nnotify = \"{}\"\n", notify.display()),
    )
    .unwrap();
    let args = ["--config", config.to_str().unwrap()];
    let server = Server::start(&data, &args);
    let base = (now_s() * 1000).div_euclid(MIN_MS) * MIN_MS - 20 * MIN_MS;
    write_logins(&server, base);
    let r = client()
        .put(server.url("/api/strata/v1/rules/login-slow?backfill=25m"))
        .body(LOGIN_RULE)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    while lines(&out).is_empty() {
        assert!(Instant::now() < deadline, "no notification arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = lines(&out);
    assert_eq!(sent.len(), 1, "{sent:?}");
    let n = &sent[0];
    assert_eq!(n["status"], "firing");
    assert_eq!(n["receiver"], "oncall");
    assert_eq!(n["alerts"][0]["labels"]["alertname"], "login-slow");
    assert_eq!(
        n["alerts"][0]["startsAt"],
        alert::util::rfc3339(base + 9 * MIN_MS).as_str()
    );
    let fp = firing_login(&server)["fp"].as_str().unwrap().to_string();
    assert_eq!(n["alerts"][0]["fingerprint"], fp.as_str());
    // Acknowledge it through the API; a bad body is a 400 naming the field.
    let bad = client()
        .post(server.url(&format!("/api/strata/v1/alerts/{fp}/ack")))
        .body(r#"{"until": "tomorrow"}"#)
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    assert!(bad.text().unwrap().contains("until"));
    let ok = client()
        .post(server.url(&format!("/api/strata/v1/alerts/{fp}/ack")))
        .body(r#"{"note": "rolling back the deploy", "by": "ana"}"#)
        .send()
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200, "{}", ok.text().unwrap());
    let h = get_json(&server.url(&format!("/api/strata/v1/notifications?fp={fp}")));
    assert_eq!(h["acks"][0]["note"], "rolling back the deploy", "{h}");
    assert_eq!(h["deliveries"][0]["outcome"], "delivered", "{h}");
    // kill -9, restart: the notification was accepted and committed, so it is not sent
    // again, and the acknowledgement is still there.
    std::thread::sleep(Duration::from_millis(500));
    drop(server);
    let server = Server::start(&data, &args);
    assert_eq!(firing_login(&server)["fp"], fp.as_str());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(lines(&out).len(), 1, "{:?}", lines(&out));
    let h = get_json(&server.url(&format!("/api/strata/v1/notifications?fp={fp}")));
    assert_eq!(h["acks"][0]["by"], "ana", "{h}");
    // A test notification from the CLI: delivered (a second line in the file), or the
    // core's answer in one plain line.
    let url = server.url("");
    let ok = strata()
        .args(["rules", "receivers", "test", "oncall", "--core", &url])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout).trim(),
        "receiver 'oncall': test notification delivered"
    );
    let sent = lines(&out);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(
        sent[1]["alerts"][0]["labels"]["alertname"],
        "StrataTestNotification"
    );
    let missing = strata()
        .args(["rules", "receivers", "test", "nobody", "--core", &url])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        "strata rules: no receiver 'nobody'"
    );
}
