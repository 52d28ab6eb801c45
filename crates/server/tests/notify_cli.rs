//! The notification CLI against real files and a real `strata serve`: `strata rules
//! import-alertmanager` and `rules routes test` on an alertmanager.yml (read as it is through
//! `alertmanager_yml`, and converted), `strata alerts ack | unack` and `strata maintenance add |
//! list | rm` against a running core.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::time::{Duration, Instant};

use serve_common::{client, get_json, now_s, strata, Server};

const MIN_MS: i64 = 60_000;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = strata().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const AM: &str = r#"
global:
  resolve_timeout: 5m
route:
  receiver: team
  group_by: [alertname, cluster]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  routes:
    - matchers: ['severity="critical"']
      receiver: pager
      continue: true
      group_wait: 10s
    - match:
        team: db
      receiver: db
inhibit_rules:
  - source_matchers: [severity="critical"]
    target_matchers: [severity="warning"]
    equal: [cluster]
receivers:
  - name: team
    webhook_configs:
      - url: http://127.0.0.1:5001/team
  - name: pager
    webhook_configs:
      - url: http://127.0.0.1:5001/pager
  - name: db
    slack_configs:
      - channel: '#db'
"#;

#[test]
fn an_alertmanager_yml_is_read_as_it_is_or_converted_and_routes_test_shows_where_alerts_go() {
    let dir = tempfile::tempdir().unwrap();
    let am = dir.path().join("alertmanager.yml");
    std::fs::write(&am, AM).unwrap();
    // Read as it is; the receiver it has no webhook for is defined in TOML.
    let db = "[[receiver]]\nname = \"db\"\nfile = \"/tmp/strata-db.jsonl\"\n";
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!("alertmanager_yml = \"alertmanager.yml\"\n{db}"),
    )
    .unwrap();
    let labels = [
        "alertname=disk",
        "severity=critical",
        "team=db",
        "cluster=eu",
    ];
    let routes = |config: &std::path::Path| {
        let mut args = vec![
            "rules",
            "routes",
            "test",
            "--config",
            config.to_str().unwrap(),
        ];
        args.extend(labels);
        let (code, out, err) = run(&args);
        assert_eq!(code, Some(0), "{err}");
        out
    };
    let out = routes(&notify);
    assert!(out.contains("routing tree:"), "{out}");
    assert!(
        out.contains("0.0 receiver=pager matchers=[severity=\"critical\"]"),
        "{out}"
    );
    assert!(
        out.contains(
            "pager via route 0.0, group key pager/0.0:{alertname=\"disk\",cluster=\"eu\"} \
             (group_wait 10s, group_interval 5m, repeat_interval 4h)"
        ),
        "{out}"
    );
    // continue: the db route too, with the top's timers inherited.
    assert!(
        out.contains(
            "db via route 0.1, group key db/0.1:{alertname=\"disk\",cluster=\"eu\"} \
             (group_wait 30s, group_interval 5m, repeat_interval 4h)"
        ),
        "{out}"
    );
    // Converted to TOML: the same tree.
    let (code, toml_text, err) = run(&["rules", "import-alertmanager", am.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        toml_text.contains("# not converted: receiver 'db' slack_configs"),
        "{toml_text}"
    );
    let converted = dir.path().join("converted.toml");
    std::fs::write(&converted, format!("{toml_text}\n{db}")).unwrap();
    let again = routes(&converted);
    assert_eq!(
        again.split("alert {").nth(1),
        out.split("alert {").nth(1),
        "same destinations"
    );
    // A broken file: one plain line naming the file and what is wrong.
    std::fs::write(&am, "route: [").unwrap();
    let (code, _, err) = run(&["rules", "import-alertmanager", am.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("strata rules: ") && err.contains("not YAML"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

const LOGIN_RULE: &str = r#"
expr = 'find:histogram("login")'
window = "rolling:merge(5m)"
annotations = { summary = "{{ count_above(1.5) }} people waited" }
[[severity]]
level = 1
when = "count_above(1.5) >= 500"
"#;

#[test]
fn acknowledgements_and_maintenance_windows_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let notify = dir.path().join("notify.toml");
    std::fs::write(
        &notify,
        format!(
            "[route]\nreceiver = \"oncall\"\n[[receiver]]\nname = \"oncall\"\nfile = \"{}\"\n",
            dir.path().join("sent.jsonl").display()
        ),
    )
    .unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(
        &config,
        format!("[alerts]\nnotify = \"{}\"\n", notify.display()),
    )
    .unwrap();
    let server = Server::start(&data, &["--config", config.to_str().unwrap()]);
    let url = server.url("");
    // A firing alert: 600 slow logins a minute over the last minutes, backfilled.
    let base = (now_s() * 1000).div_euclid(MIN_MS) * MIN_MS - 10 * MIN_MS;
    for m in 0..10 {
        let body = serde_json::json!({"login|ST[app:web]": {
            "_type": "h",
            "_value": ["H[1.6e+00]=600"],
            "_ts": base + m * MIN_MS + 5_000,
        }});
        let r = client()
            .put(server.url("/module/httptrap/login/secret"))
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().unwrap());
    }
    let r = client()
        .put(server.url("/api/strata/v1/rules/login-slow?backfill=15m"))
        .body(LOGIN_RULE)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", r.text().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let fp = loop {
        let v = get_json(&server.url("/api/strata/v1/alerts?state=firing"));
        if let Some(fp) = v["alerts"][0]["fp"].as_str() {
            break fp.to_string();
        }
        assert!(Instant::now() < deadline, "never fired: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let (code, out, err) = run(&[
        "alerts",
        "ack",
        &fp,
        "--note",
        "rolling back",
        "--until",
        "2h",
        "--by",
        "ana",
        "--server",
        &url,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with(&format!("acknowledged {fp} until ")),
        "{out}"
    );
    let h = get_json(&server.url(&format!("/api/strata/v1/notifications?fp={fp}")));
    assert_eq!(h["acks"][0]["note"], "rolling back", "{h}");
    assert_eq!(h["acks"][0]["by"], "ana", "{h}");
    assert!(
        h["acks"][0]["until"].as_i64().unwrap() > now_s() * 1000 + 3_500_000,
        "{h}"
    );
    let (code, _, err) = run(&["alerts", "unack", &fp, "--server", &url]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(&["alerts", "unack", &fp, "--server", &url]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not acknowledged"), "{err}");
    let (code, _, err) = run(&["alerts", "ack", "xyz", "--server", &url]);
    assert_eq!(
        (code, err.trim()),
        (
            Some(2),
            "strata alerts: 'xyz' is not a fingerprint (16 hex digits)"
        )
    );

    // Maintenance windows: weekly in a time zone, then listed, refused when open-ended.
    let (code, out, err) = run(&[
        "maintenance",
        "add",
        "db nights",
        "--at",
        "02:30",
        "--days",
        "mon,tue",
        "--duration",
        "1h",
        "--timezone",
        "Europe/Berlin",
        "--matcher",
        "team=\"db\"",
        "--server",
        &url,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "maintenance window 'db nights' added");
    let (code, out, err) = run(&[
        "maintenance",
        "add",
        "deploy",
        "--duration",
        "30m",
        "--ruleset",
        "login-slow",
        "--server",
        &url,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "maintenance window 'deploy' added");
    let (code, out, err) = run(&["maintenance", "list", "--server", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("db nights\tapi\tno\t")
            && out.contains("mon,tue at 02:30 for 1h (Europe/Berlin)")
            && out.contains("matchers=team=\"db\""),
        "{out}"
    );
    assert!(out.contains("deploy\tapi\tyes\t"), "{out}");
    let (code, _, err) = run(&[
        "maintenance",
        "add",
        "forever",
        "--at",
        "02:30",
        "--server",
        &url,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.trim(),
        "strata maintenance: HTTP 400: maintenance 'forever': needs a duration (open-ended windows are refused)"
    );
    // Durable: after kill -9 the windows are still there.
    drop(server);
    let server = Server::start(&data, &["--config", config.to_str().unwrap()]);
    let url = server.url("");
    let (code, out, _) = run(&["maintenance", "list", "--json", "--server", &url]);
    assert_eq!(code, Some(0));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["windows"].as_array().unwrap().len(), 2, "{v}");
    let (code, out, err) = run(&["maintenance", "rm", "db nights", "--server", &url]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "maintenance window 'db nights' removed");
    let (code, _, err) = run(&["maintenance", "rm", "db nights", "--server", &url]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("HTTP 404: no maintenance window 'db nights'"),
        "{err}"
    );
}
