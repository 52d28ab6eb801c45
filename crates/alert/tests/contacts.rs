//! Contacts end to end on loopback: the engine on a virtual clock, its notifier delivering to a
//! real SMTP server (Python's aiosmtpd, STARTTLS / implicit TLS / plain, AUTH) and to a real
//! HTTP server standing in for Slack, PagerDuty, VictorOps and a templated webhook, which
//! records every request so the payloads are checked as those services read them. The alert
//! API is served on a real listener for the test-notification action and the inbound
//! acknowledgements from PagerDuty (v3 webhook) and Slack (interactive callback), sent signed
//! correctly and wrongly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alert::notify::Config;
use alert::Engine;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use common::*;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// One request the recording server got.
#[derive(Clone, Debug)]
struct Got {
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

type Inbox = Arc<Mutex<Vec<Got>>>;

async fn take(
    State(inbox): State<Inbox>,
    uri: Uri,
    h: HeaderMap,
    b: Bytes,
) -> (StatusCode, String) {
    let body = String::from_utf8_lossy(&b).to_string();
    let headers = h
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    inbox.lock().unwrap().push(Got {
        path: uri.path().to_string(),
        headers,
        body: body.clone(),
    });
    if uri.path().starts_with("/reject") {
        // A service that echoes what it got in its error (as some do): the echo holds the
        // routing key, which must not reach our error text.
        return (StatusCode::BAD_REQUEST, format!("invalid event: {body}"));
    }
    (StatusCode::ACCEPTED, r#"{"status":"success"}"#.into())
}

/// A real HTTP server on loopback recording every POST; also serves `router` when given.
struct Server {
    url: String,
    inbox: Inbox,
    rt: tokio::runtime::Runtime,
}

impl Server {
    fn start() -> Server {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let inbox: Inbox = Arc::default();
        let app = axum::Router::new()
            .fallback(axum::routing::post(take))
            .with_state(inbox.clone());
        let url = serve(&rt, app);
        Server { url, inbox, rt }
    }

    fn got(&self, prefix: &str) -> Vec<Got> {
        self.inbox
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.path.starts_with(prefix))
            .cloned()
            .collect()
    }
}

fn serve(rt: &tokio::runtime::Runtime, app: axum::Router) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });
    url
}

const RULES: &str = r#"
[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login")'
annotations = { summary = "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }}) waited more than 1.5 s to log in" }
[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 500"
"#;

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    store: Arc<store::Store>,
    clock: VClock,
    engine: Arc<Engine>,
}

fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let store = store(&path.join("store"), MIN);
    let rules = rules_dir(&path, RULES);
    let clock = VClock::default();
    let config = Arc::new(Config::parse(config).unwrap());
    let mut o = options(&path.join("alerts"), &clock);
    o.rules_dirs = vec![rules];
    o.notify = Some(config);
    let engine = Engine::open(store.clone(), o).unwrap();
    Setup {
        _dir: dir,
        dir: path,
        store,
        clock,
        engine,
    }
}

impl Setup {
    /// Minute `m`: `slow` of 4,184 logins took more than 1.5 s.
    fn minute(&self, m: i64, slow: u64) {
        write_hist(
            &self.store,
            "login|ST[app:web]",
            m * MIN + 10_000,
            &[(0.5, 4184 - slow), (2.0, slow)],
        );
        self.clock.set((m + 1) * MIN + 6_000);
        self.engine.tick().unwrap();
    }

    fn notify(&self, name: &str) {
        let n = self.engine.notifier().unwrap();
        let mut w = n.worker(&*self.engine, name).unwrap();
        while n.run_once(&*self.engine, &mut w).unwrap() > 0 {}
    }

    fn fp(&self) -> u64 {
        self.engine.core().sorted_instances()[0].fp
    }
}

// ---- email ----

fn venv_python() -> PathBuf {
    let home = std::env::var("HOME").unwrap();
    let venv = Path::new(&home).join(".cache/strata-tests/venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv {}", venv.display());
    }
    let has = Command::new(&python)
        .args(["-c", "import aiosmtpd"])
        .status()
        .unwrap();
    if !has.success() {
        let pip = Command::new(&python)
            .args(["-m", "pip", "install", "-q", "aiosmtpd==1.4.6"])
            .status()
            .unwrap();
        assert!(pip.success(), "pip install aiosmtpd");
    }
    python
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// aiosmtpd in `mode` on a free port; messages land in `<dir>/<mode>.jsonl`.
struct Smtp {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Smtp {
    fn start(dir: &Path, mode: &str, cert: &Path, key: &Path) -> Smtp {
        let port = free_port();
        let out = dir.join(format!("{mode}.jsonl"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/smtp_server.py");
        let mut child = Command::new(venv_python())
            .arg(script)
            .arg(mode)
            .arg(port.to_string())
            .arg(&out)
            .arg(cert)
            .arg(key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the SMTP server started");
        Smtp { child, port, out }
    }

    fn messages(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn email_receiver(name: &str, port: u16, tls: &str, ca: &Path, password_file: &Path) -> String {
    format!(
        r#"
[[receiver]]
name = "{name}"
retry_initial = "10ms"
retry_max = "20ms"
[receiver.email]
smtp = "127.0.0.1:{port}"
tls = "{tls}"
from = "Strata <strata@example.org>"
to = ["oncall@example.org", "db-team@example.org"]
username = "strata"
password_file = "{}"
ca_file = "{}"
alert_url = "https://strata.example.org/alerts?fp={{fp}}"
"#,
        password_file.display(),
        ca.display()
    )
}

#[test]
fn email_reaches_a_real_smtp_server_over_starttls_tls_and_plain_with_auth() {
    let tmp = tempfile::tempdir().unwrap();
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".into()])
            .unwrap();
    let (cert, key) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let password = tmp.path().join("smtp-password");
    std::fs::write(&password, "s3cret\n").unwrap();
    let wrong = tmp.path().join("wrong-password");
    std::fs::write(&wrong, "hunter2-wrong\n").unwrap();

    let starttls = Smtp::start(tmp.path(), "starttls", &cert, &key);
    let implicit = Smtp::start(tmp.path(), "tls", &cert, &key);
    let plain = Smtp::start(tmp.path(), "plain", &cert, &key);
    let config = format!(
        "[route]\nreceiver = \"mail\"\ngroup_by = [\"alertname\"]\n{}{}{}{}",
        email_receiver("mail", starttls.port, "starttls", &cert, &password),
        email_receiver("smtps", implicit.port, "tls", &cert, &password),
        email_receiver("relay", plain.port, "none", &cert, &password),
        email_receiver("badauth", starttls.port, "starttls", &cert, &wrong),
    );
    let s = setup(&config);
    s.minute(0, 10);
    s.minute(1, 523);
    s.notify("mail");
    let got = starttls.messages();
    assert_eq!(got.len(), 1, "{got:?}");
    let m = &got[0];
    assert_eq!(m["tls"], true, "STARTTLS was used");
    assert_eq!(m["login"], "strata", "AUTH with the configured user");
    assert_eq!(m["from"], "strata@example.org");
    assert_eq!(
        m["to"],
        json!(["oncall@example.org", "db-team@example.org"])
    );
    assert_eq!(m["content_type"], "multipart/alternative");
    let subject = m["subject"].as_str().unwrap();
    assert!(
        subject.starts_with("[FIRING:1] login-slow (severity 1) — 523 people ("),
        "{subject}"
    );
    let text = m["text"].as_str().unwrap();
    let html = m["html"].as_str().unwrap();
    let fp = format!("{:016x}", s.fp());
    for body in [text, html] {
        assert!(body.contains("login-slow"), "{body}");
        assert!(body.contains("severity 1"), "{body}");
        assert!(
            body.contains("523 people (") && body.contains("waited more than 1.5 s to log in"),
            "{body}"
        );
        assert!(
            body.contains(&format!("https://strata.example.org/alerts?fp={fp}")),
            "{body}"
        );
    }
    assert!(html.contains("<a href=\"https://strata.example.org/alerts?fp="));
    let key = s.engine.notifier().unwrap().deliveries(None)[0].key.clone();
    assert!(
        m["message_id"].as_str().unwrap().contains(&key),
        "the Message-ID carries the idempotency key"
    );

    // Resolved: a second message.
    s.minute(2, 5);
    s.notify("mail");
    let got = starttls.messages();
    assert_eq!(got.len(), 2);
    assert!(got[1]["subject"]
        .as_str()
        .unwrap()
        .starts_with("[RESOLVED:1] login-slow"));

    // Implicit TLS and plain, through the test-notification action.
    let n = s.engine.notifier().unwrap();
    n.test_receiver("smtps").unwrap();
    n.test_receiver("relay").unwrap();
    assert_eq!(implicit.messages().len(), 1);
    assert_eq!(implicit.messages()[0]["tls"], true);
    assert_eq!(implicit.messages()[0]["login"], "strata");
    assert_eq!(plain.messages()[0]["tls"], false);
    assert!(plain.messages()[0]["subject"]
        .as_str()
        .unwrap()
        .contains("StrataTestNotification"));
    // A wrong password: the server's refusal in words, the password nowhere.
    let e = n.test_receiver("badauth").unwrap_err();
    assert!(
        e.contains("535") || e.to_lowercase().contains("auth"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
    assert_eq!(starttls.messages().len(), 2, "nothing sent without AUTH");
}

// ---- Slack, PagerDuty, VictorOps, templated webhook ----

const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const PD_SECRET: &str = "pd-webhook-secret-0123";
const ROUTING_KEY: &str = "R0UTINGKEY0000000000000000000042";

fn services_config(url: &str, dir: &Path) -> String {
    let key_file = dir.join("routing-key");
    std::fs::write(&key_file, format!("{ROUTING_KEY}\n")).unwrap();
    format!(
        r##"
[route]
receiver = "slack"
group_by = ["alertname"]
[[route.routes]]
matchers = ['alertname=~".+"']
receiver = "slack"
continue = true
[[route.routes]]
matchers = ['alertname=~".+"']
receiver = "pd"
continue = true
[[route.routes]]
matchers = ['alertname=~".+"']
receiver = "vo"
continue = true
[[route.routes]]
matchers = ['alertname=~".+"']
receiver = "hook"
continue = true

[[receiver]]
name = "slack"
[receiver.slack]
url = "{url}/slack/T000/B000/XXXX"
channel = "#oncall"
signing_secret = "{SLACK_SECRET}"
alert_url = "https://strata.example.org/alerts?fp={{fp}}"

[[receiver]]
name = "pd"
[receiver.pagerduty]
url = "{url}/pagerduty/v2/enqueue"
routing_key_file = "{}"
webhook_secret = "{PD_SECRET}"

[[receiver]]
name = "vo"
[receiver.victorops]
url = "{url}/victorops"
api_key_env = "STRATA_TEST_VICTOROPS_KEY"
routing_key = "db team"

[[receiver]]
name = "hook"
webhook = "{url}/hook"
content_type = "text/plain"
template = "{{{{ status }}}} {{{{ alertname }}}} sev {{{{ severity }}}}: {{{{ summary }}}} ({{{{ count }}}} alert, key {{{{ key }}}})"

[[receiver]]
name = "rejecting"
[receiver.pagerduty]
url = "{url}/reject"
routing_key = "{ROUTING_KEY}"
"##,
        key_file.display()
    )
}

fn sign_slack(secret: &str, ts: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    hex(&mac.finalize().into_bytes())
}

fn sign_pd(secret: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    format!("v1={}", hex(&mac.finalize().into_bytes()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let client = reqwest::blocking::Client::new();
    let mut r = client.post(url).body(body.to_string());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.send().unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn slack_form(key: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": { "id": "U123", "username": "ada" },
        "actions": [{ "action_id": "strata_ack", "value": key, "type": "button" }],
    });
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

#[test]
fn slack_pagerduty_victorops_and_templates_get_their_own_payloads_and_acks_come_back_signed() {
    std::env::set_var("STRATA_TEST_VICTOROPS_KEY", "vo-api-key-777");
    let http = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(&services_config(&http.url, tmp.path()));
    let api = serve(&http.rt, alert::http::router(s.engine.clone(), 1_000));
    s.minute(0, 10);
    s.minute(1, 523);
    for r in ["slack", "pd", "vo", "hook"] {
        s.notify(r);
    }
    let fp = format!("{:016x}", s.fp());
    let deliveries = s.engine.notifier().unwrap().deliveries(None);
    let key_of = |r: &str| {
        deliveries
            .iter()
            .find(|d| d.receiver == r)
            .unwrap()
            .key
            .clone()
    };

    // Slack: blocks in an attachment coloured by severity, an Acknowledge button.
    let slack = http.got("/slack/T000/B000/XXXX");
    assert_eq!(slack.len(), 1);
    let m = slack[0].json();
    assert_eq!(m["channel"], "#oncall");
    assert_eq!(m["text"], "[FIRING:1] login-slow (severity 1)");
    let att = &m["attachments"][0];
    assert_eq!(att["color"], "#d40e0d", "severity 1 is red");
    assert_eq!(att["blocks"][0]["type"], "header");
    let section = &att["blocks"][1];
    let text = section["text"]["text"].as_str().unwrap();
    assert!(text.contains("523 people ("), "{text}");
    assert!(text.contains(&format!(
        "<https://strata.example.org/alerts?fp={fp}|Open in Strata>"
    )));
    assert_eq!(section["accessory"]["action_id"], "strata_ack");
    let button_key = section["accessory"]["value"].as_str().unwrap().to_string();
    assert!(button_key.starts_with(&format!("strata-{fp}-")));

    // PagerDuty Events v2: trigger, dedup key naming the alert episode, severity mapped.
    let pd = http.got("/pagerduty/v2/enqueue");
    assert_eq!(pd.len(), 1);
    let ev = pd[0].json();
    assert_eq!(ev["routing_key"], ROUTING_KEY, "read from routing_key_file");
    assert_eq!(ev["event_action"], "trigger");
    assert_eq!(ev["dedup_key"], button_key.as_str());
    assert_eq!(ev["payload"]["severity"], "critical");
    assert_eq!(ev["payload"]["source"], "app=web");
    assert!(ev["payload"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("login-slow: 523 people ("));
    assert_eq!(
        ev["payload"]["custom_details"]["idempotency_key"],
        key_of("pd").as_str()
    );
    assert_eq!(ev["payload"]["custom_details"]["labels"]["severity"], "1");
    assert_eq!(pd[0].headers["idempotency-key"], key_of("pd"));

    // VictorOps: REST endpoint with the API key and routing key in the path.
    let vo = http.got("/victorops");
    assert_eq!(vo.len(), 1);
    assert_eq!(vo[0].path, "/victorops/vo-api-key-777/db%20team");
    let ev = vo[0].json();
    assert_eq!(ev["message_type"], "CRITICAL");
    assert_eq!(ev["entity_id"], button_key.as_str());
    assert_eq!(ev["monitoring_tool"], "Strata");

    // The templated webhook: the user's text, its content type.
    let hook = http.got("/hook");
    assert_eq!(hook.len(), 1);
    assert_eq!(hook[0].headers["content-type"], "text/plain");
    assert!(hook[0]
        .body
        .starts_with("firing login-slow sev 1: 523 people ("));
    assert!(hook[0]
        .body
        .ends_with(&format!("(1 alert, key {})", key_of("hook"))));

    // Inbound: a Slack click with a bad signature, a stale one, then a good one.
    let slack_url = format!("{api}/api/strata/v1/receivers/slack/slack");
    let body = slack_form(&button_key);
    let now = (alert::util::wall_ms() / 1000).to_string();
    let stale = (alert::util::wall_ms() / 1000 - 600).to_string();
    let bad = sign_slack("not-the-secret", &now, &body);
    let (code, v) = post(
        &slack_url,
        &[
            ("X-Slack-Request-Timestamp", &now),
            ("X-Slack-Signature", &format!("v0={bad}")),
        ],
        &body,
    );
    assert_eq!(code, 401);
    assert!(v["error"].as_str().unwrap().contains("X-Slack-Signature"));
    let old = sign_slack(SLACK_SECRET, &stale, &body);
    let (code, v) = post(
        &slack_url,
        &[
            ("X-Slack-Request-Timestamp", &stale),
            ("X-Slack-Signature", &format!("v0={old}")),
        ],
        &body,
    );
    assert_eq!(code, 401, "{v}");
    assert!(v["error"].as_str().unwrap().contains("5 minutes"));
    assert!(s.engine.notifier().unwrap().acks().is_empty());
    let good = sign_slack(SLACK_SECRET, &now, &body);
    let (code, v) = post(
        &slack_url,
        &[
            ("X-Slack-Request-Timestamp", &now),
            ("X-Slack-Signature", &format!("v0={good}")),
        ],
        &body,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["by"], "ada");
    assert_eq!(v["fp"], fp.as_str());
    let acks = s.engine.notifier().unwrap().acks();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].note, "acknowledged in Slack");

    // The acknowledgement goes out to PagerDuty and VictorOps at the next cycle.
    s.minute(2, 523);
    s.notify("pd");
    s.notify("vo");
    let pd = http.got("/pagerduty/v2/enqueue");
    assert_eq!(pd.len(), 2);
    assert_eq!(pd[1].json()["event_action"], "acknowledge");
    assert_eq!(pd[1].json()["dedup_key"], button_key.as_str());
    let vo = http.got("/victorops");
    assert_eq!(vo[1].json()["message_type"], "ACKNOWLEDGEMENT");

    // PagerDuty's v3 webhook: unsigned, wrongly signed, then signed.
    assert!(s.engine.notifier().unwrap().unack(s.fp()).unwrap());
    let pd_url = format!("{api}/api/strata/v1/receivers/pd/pagerduty");
    let hook_body = json!({
        "event": {
            "id": "01DEN4HPBQAAAG05V5QQYBRZMF",
            "event_type": "incident.acknowledged",
            "resource_type": "incident",
            "occurred_at": "2026-11-28T22:03:00.000Z",
            "agent": { "id": "PLH1HKV", "type": "user_reference", "summary": "Grace Hopper" },
            "data": {
                "id": "PGR0VU2",
                "type": "incident",
                "html_url": "https://acme.pagerduty.com/incidents/PGR0VU2",
                "status": "acknowledged",
                "incident_key": button_key,
                "title": "login-slow: 523 people",
            },
        },
    })
    .to_string();
    let (code, _) = post(&pd_url, &[], &hook_body);
    assert_eq!(code, 401);
    let (code, v) = post(
        &pd_url,
        &[("X-PagerDuty-Signature", &sign_pd("wrong", &hook_body))],
        &hook_body,
    );
    assert_eq!(code, 401);
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("X-PagerDuty-Signature"));
    assert!(s.engine.notifier().unwrap().acks().is_empty());
    // Two signatures (a secret being rotated): one matching is enough.
    let sigs = format!(
        "{},{}",
        sign_pd("old", &hook_body),
        sign_pd(PD_SECRET, &hook_body)
    );
    let (code, v) = post(&pd_url, &[("X-PagerDuty-Signature", &sigs)], &hook_body);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["by"], "Grace Hopper");
    assert!(v["note"].as_str().unwrap().contains("PGR0VU2"));
    assert_eq!(s.engine.notifier().unwrap().acks().len(), 1);

    // Resolved: PagerDuty resolves the same incident, VictorOps recovers, Slack turns green.
    s.minute(3, 5);
    for r in ["slack", "pd", "vo", "hook"] {
        s.notify(r);
    }
    let pd = http.got("/pagerduty/v2/enqueue");
    assert_eq!(pd.last().unwrap().json()["event_action"], "resolve");
    assert_eq!(pd.last().unwrap().json()["dedup_key"], button_key.as_str());
    let vo = http.got("/victorops");
    assert_eq!(vo.last().unwrap().json()["message_type"], "RECOVERY");
    assert_eq!(vo.last().unwrap().json()["entity_id"], button_key.as_str());
    let slack = http.got("/slack/T000/B000/XXXX");
    let last = slack.last().unwrap().json();
    assert_eq!(last["attachments"][0]["color"], "#2eb67d");
    assert!(
        last["attachments"][0]["blocks"][1]
            .get("accessory")
            .is_none(),
        "no button on a resolved alert"
    );
    // An acknowledgement of an episode that is over is refused.
    let (code, v) = post(
        &pd_url,
        &[("X-PagerDuty-Signature", &sign_pd(PD_SECRET, &hook_body))],
        &hook_body,
    );
    assert_eq!(code, 409, "{v}");

    // The test-notification action over HTTP: delivered, or the receiver's error in words
    // without the routing key the rejecting service echoed.
    let (code, v) = post(&format!("{api}/api/strata/v1/receivers/pd/test"), &[], "");
    assert_eq!((code, &v["delivered"]), (200, &json!(true)), "{v}");
    let pd = http.got("/pagerduty/v2/enqueue");
    let (trigger, resolve) = (pd[pd.len() - 2].json(), pd[pd.len() - 1].json());
    assert_eq!(trigger["payload"]["class"], "StrataTestNotification");
    assert_eq!(
        (&resolve["event_action"], &resolve["dedup_key"]),
        (&json!("resolve"), &trigger["dedup_key"]),
        "the test incident is resolved again"
    );
    let (code, v) = post(
        &format!("{api}/api/strata/v1/receivers/rejecting/test"),
        &[],
        "",
    );
    assert_eq!(code, 502, "{v}");
    assert_eq!(v["delivered"], false);
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("receiver 'rejecting' did not accept the test notification"),
        "{e}"
    );
    assert!(e.contains("400"), "{e}");
    assert!(
        !e.contains(ROUTING_KEY),
        "the routing key stays secret: {e}"
    );
    assert_eq!(http.got("/reject").len(), 1, "the service was really asked");
    let (code, v) = post(
        &format!("{api}/api/strata/v1/receivers/nobody/test"),
        &[],
        "",
    );
    assert_eq!(code, 404);
    assert_eq!(v["error"], "no receiver 'nobody'");
    let _ = s.dir.exists();
}

#[test]
fn contact_mistakes_are_named_in_the_configuration() {
    let base = "[route]\nreceiver = \"x\"\n[[receiver]]\nname = \"x\"\n";
    let cases = [
        (
            "[receiver.pagerduty]\nrouting_key = \"k\"\nrouting_key_env = \"K\"\n",
            "receiver 'x' pagerduty: give one of routing_key, routing_key_file or routing_key_env",
        ),
        (
            "[receiver.pagerduty]\n",
            "receiver 'x' pagerduty: give routing_key, routing_key_file or routing_key_env",
        ),
        (
            "[receiver.slack]\nurl = \"hooks.slack.com/services/SECRET\"\n",
            "receiver 'x' slack: url is not an http:// or https:// URL",
        ),
        (
            "[receiver.email]\nsmtp = \"mail:25\"\nfrom = \"a@b.c\"\nto = [\"not an address\"]\n",
            "receiver 'x' email: 'not an address' is not an email address",
        ),
        (
            "webhook = \"http://h/\"\ntemplate = \"{{ nope }}\"\n",
            "receiver 'x' template: unknown field 'nope'",
        ),
        (
            "webhook = \"http://h/\"\n[receiver.victorops]\napi_key = \"k\"\nrouting_key = \"r\"\n",
            "receiver 'x': give exactly one of webhook, alertmanager, file, email, slack",
        ),
    ];
    for (extra, want) in cases {
        let e = Config::parse(&format!("{base}{extra}")).unwrap_err();
        assert!(e.contains(want), "{e}\nshould say: {want}");
        assert!(!e.contains("SECRET"), "{e}");
    }
    let _ = Duration::ZERO;
    let _ = Instant::now();
    let _ = std::io::stdout().flush();
}
