//! Notifications end to end on loopback: the engine on a virtual clock, its notifier delivering
//! to a real HTTP receiver (axum on 127.0.0.1) and to a real Alertmanager binary (built from
//! the Go module proxy). Firing and resolved with one idempotency key each, retries while the
//! receiver fails, order kept, fallback on permanent failure, routing with `continue`,
//! maintenance windows, acknowledgement stopping reminders and escalation, flapping, and a
//! restart in the middle of a delivery re-sending it with the same key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use alert::notify::{Ack, Config};
use alert::Engine;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use common::*;
use serde_json::Value;

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    path: String,
    key: String,
    body: Value,
}

#[derive(Default)]
struct Inbox {
    got: Mutex<Vec<Got>>,
    /// Answer 503 to this many requests first.
    fail: AtomicUsize,
    /// Answer 400 to this many requests first (after `fail`).
    reject: AtomicUsize,
    /// The idempotency key of every request, accepted or not.
    tried: Mutex<Vec<String>>,
}

/// A real HTTP receiver on loopback, recording every POST it accepts.
struct Receiver {
    url: String,
    inbox: Arc<Inbox>,
    _rt: tokio::runtime::Runtime,
}

async fn take(State(inbox): State<Arc<Inbox>>, uri: Uri, h: HeaderMap, b: Bytes) -> StatusCode {
    let key = h
        .get("idempotency-key")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    inbox.tried.lock().unwrap().push(key.clone());
    if inbox
        .fail
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    if inbox
        .reject
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
    {
        return StatusCode::BAD_REQUEST;
    }
    inbox.got.lock().unwrap().push(Got {
        path: uri.path().to_string(),
        key,
        body: serde_json::from_slice(&b).unwrap(),
    });
    StatusCode::OK
}

impl Receiver {
    fn start() -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let inbox = Arc::new(Inbox::default());
        let app = axum::Router::new()
            .fallback(axum::routing::post(take))
            .with_state(inbox.clone());
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        rt.spawn(async move { axum::serve(listener, app).await });
        Receiver {
            url,
            inbox,
            _rt: rt,
        }
    }

    fn got(&self) -> Vec<Got> {
        self.inbox.got.lock().unwrap().clone()
    }

    /// (path, status, alertnames…) of every notification so far.
    fn summary(&self) -> Vec<String> {
        self.got()
            .iter()
            .map(|g| {
                let names: Vec<String> = g.body["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| {
                        format!(
                            "{}{}",
                            a["labels"]["stream"].as_str().unwrap_or("?"),
                            if a["annotations"]["flapping"] == "true" {
                                "(flapping)"
                            } else {
                                ""
                            }
                        )
                    })
                    .collect();
                format!(
                    "{} {} {}",
                    g.path,
                    g.body["status"].as_str().unwrap(),
                    names.join(",")
                )
            })
            .collect()
    }
}

/// `x` streams tagged `stream:<name>`: a ruleset firing at severity 2 while the value is > 1.
const RULES: &str = r#"
[[ruleset]]
name = "hot"
expr = 'find:max("x")'
annotations = { summary = "x is {{ value }}" }
[[ruleset.severity]]
level = 2
when = "> 1"
"#;

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    store: Arc<store::Store>,
    clock: VClock,
    engine: Arc<Engine>,
    rules: PathBuf,
    config: Arc<Config>,
}

fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let store = store(&path.join("store"), MIN);
    let rules = rules_dir(&path, RULES);
    let clock = VClock::default();
    let config = Arc::new(Config::parse(config).unwrap());
    let engine = open(&store, &path, &rules, &clock, &config);
    Setup {
        _dir: dir,
        dir: path,
        store,
        clock,
        engine,
        rules,
        config,
    }
}

fn open(
    s: &Arc<store::Store>,
    dir: &Path,
    rules: &Path,
    clock: &VClock,
    config: &Arc<Config>,
) -> Arc<Engine> {
    let mut o = options(&dir.join("alerts"), clock);
    o.rules_dirs = vec![rules.to_path_buf()];
    o.notify = Some(config.clone());
    Engine::open(s.clone(), o).unwrap()
}

impl Setup {
    /// Writes minute `m`'s value of each stream, ends the minute and evaluates it.
    fn minute(&self, m: i64, values: &[(&str, f64)]) {
        for (stream, v) in values {
            write_num(
                &self.store,
                &format!("x|ST[stream:{stream}]"),
                m * MIN + 10_000,
                *v,
            );
        }
        self.clock.set((m + 1) * MIN + 6_000);
        self.engine.tick().unwrap();
    }

    /// Runs receiver `name`'s worker until it has read everything.
    fn notify(&self, name: &str) {
        let n = self.engine.notifier().unwrap();
        let mut w = n.worker(&*self.engine, name).unwrap();
        while n.run_once(&*self.engine, &mut w).unwrap() > 0 {}
    }

    fn fp(&self, stream: &str) -> u64 {
        self.engine
            .core()
            .sorted_instances()
            .iter()
            .find(|i| i.stream.contains(&format!("stream:{stream}")))
            .unwrap()
            .fp
    }
}

fn webhook_config(url: &str, extra: &str) -> String {
    format!(
        r#"
[route]
receiver = "team"
group_by = ["alertname"]
[[receiver]]
name = "team"
webhook = "{url}/team"
retry_initial = "10ms"
retry_max = "40ms"
{extra}
"#
    )
}

#[test]
fn firing_and_resolved_reach_a_real_webhook_each_with_its_own_key() {
    let r = Receiver::start();
    let s = setup(&webhook_config(&r.url, ""));
    s.minute(0, &[("a", 0.0)]);
    s.minute(1, &[("a", 5.0)]);
    s.notify("team");
    s.minute(2, &[("a", 5.0)]);
    s.notify("team");
    // Still firing: no second notification (no reminders configured).
    assert_eq!(r.summary(), ["/team firing a"]);
    s.minute(3, &[("a", 0.0)]);
    s.notify("team");
    assert_eq!(r.summary(), ["/team firing a", "/team resolved a"]);
    let got = r.got();
    let (f, res) = (&got[0].body, &got[1].body);
    // Alertmanager's webhook JSON, version 4.
    assert_eq!(f["version"], "4");
    assert_eq!(f["receiver"], "team");
    assert_eq!(f["groupLabels"]["alertname"], "hot");
    assert_eq!(f["commonLabels"]["severity"], "2");
    assert_eq!(f["alerts"][0]["annotations"]["summary"], "x is 5");
    assert_eq!(f["alerts"][0]["startsAt"], alert::util::rfc3339(2 * MIN));
    assert_eq!(f["alerts"][0]["endsAt"], "0001-01-01T00:00:00Z");
    assert_eq!(res["alerts"][0]["endsAt"], alert::util::rfc3339(4 * MIN));
    assert_eq!(
        f["groupKey"], res["groupKey"],
        "one group from firing to resolve"
    );
    assert_eq!(got[0].key, f["idempotencyKey"].as_str().unwrap());
    assert_ne!(got[0].key, got[1].key);
    assert_eq!(got[0].key.len(), 16);
    let log = s.engine.notifier().unwrap().deliveries(Some(s.fp("a")));
    assert_eq!(log.len(), 2);
    assert!(log
        .iter()
        .all(|d| d.outcome == "delivered" && d.attempts == 1));
}

#[test]
fn a_failing_receiver_gets_every_notification_afterwards_in_order() {
    let r = Receiver::start();
    let s = setup(&webhook_config(&r.url, ""));
    // Stream k starts firing at minute k: ten firing notifications, one per minute.
    let streams: Vec<String> = (0..10).map(|k| format!("s{k}")).collect();
    for m in 0..11 {
        let values: Vec<(&str, f64)> = streams
            .iter()
            .enumerate()
            .map(|(k, n)| (n.as_str(), if (k as i64) < m { 5.0 } else { 0.0 }))
            .collect();
        s.minute(m, &values);
    }
    // The receiver answers 503 to the first 25 requests: the worker retries (backing off) and
    // delivers all ten in order; nothing is skipped and nothing is delivered twice.
    r.inbox.fail.store(25, Ordering::SeqCst);
    s.notify("team");
    let want: Vec<String> = streams
        .iter()
        .map(|n| format!("/team firing {n}"))
        .collect();
    assert_eq!(r.summary(), want);
    let log = s.engine.notifier().unwrap().deliveries(None);
    assert_eq!(
        log.iter().map(|d| d.attempts as usize - 1).sum::<usize>(),
        25
    );
}

#[test]
fn a_permanent_failure_goes_to_the_fallback_file() {
    let r = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fallback.jsonl");
    let extra = format!(
        "fallback = \"file\"\n[[receiver]]\nname = \"file\"\nfile = \"{}\"\n",
        file.display()
    );
    let s = setup(&webhook_config(&r.url, &extra));
    r.inbox.reject.store(1, Ordering::SeqCst);
    s.minute(0, &[("a", 5.0)]);
    s.notify("team");
    assert!(r.got().is_empty(), "400 is not retried");
    let lines = std::fs::read_to_string(&file).unwrap();
    let v: Value = serde_json::from_str(lines.trim()).unwrap();
    assert_eq!(v["status"], "firing");
    assert_eq!(v["receiver"], "team", "the planned receiver is kept");
    let log = s.engine.notifier().unwrap().deliveries(None);
    let outcomes: Vec<(&str, &str)> = log
        .iter()
        .map(|d| (d.receiver.as_str(), d.outcome.as_str()))
        .collect();
    assert_eq!(outcomes, [("team", "fallback"), ("file", "delivered")]);
    assert!(log[0].error.as_deref().unwrap().contains("400"), "{log:?}");
}

#[test]
fn routes_send_to_several_receivers_and_acks_stop_reminders_and_escalation() {
    let r = Receiver::start();
    let url = &r.url;
    let config = format!(
        r#"
[route]
receiver = "team"
group_by = ["alertname"]
[[route.routes]]
matchers = ['stream=~"a|b"']
receiver = "pager"
continue = true
[[route.routes]]
matchers = ['stream="c"']
receiver = "other"
[[route.routes]]
receiver = "team"

[[receiver]]
name = "team"
webhook = "{url}/team"
[[receiver]]
name = "pager"
webhook = "{url}/pager"
reminders = ["2m", "3m"]
escalate = [{{ after = "4m", receiver = "boss" }}]
[[receiver]]
name = "other"
webhook = "{url}/other"
[[receiver]]
name = "boss"
webhook = "{url}/boss"
"#
    );
    let s = setup(&config);
    let on = [("a", 5.0), ("b", 5.0), ("c", 5.0)];
    s.minute(0, &on);
    for n in ["team", "pager", "other", "boss"] {
        s.notify(n);
    }
    let mut first = r.summary();
    first.sort();
    // a and b: the pager, then (continue) the catch-all route; c only `other` (no continue).
    // One notification per group (alertname) per receiver.
    assert_eq!(
        first,
        ["/other firing c", "/pager firing a,b", "/team firing a,b"]
    );
    // Acknowledge a: no reminders nor escalation for it; b goes on.
    let fp_a = s.fp("a");
    let fired = s.engine.core().instances[&fp_a].fired_ms;
    s.engine
        .notifier()
        .unwrap()
        .ack(Ack {
            fp: fp_a,
            fired_ms: fired,
            at_ms: 0,
            until_ms: None,
            by: "ops".into(),
            note: "looking".into(),
        })
        .unwrap();
    for m in 1..8 {
        s.minute(m, &on);
        s.notify("pager");
    }
    let after: Vec<String> = r.summary()[3..].to_vec();
    // Fired at minute 1 (period end): reminders 2 then 3 minutes apart (the last repeats),
    // escalation 4 minutes after firing — b only.
    assert_eq!(
        after,
        [
            "/pager firing b", // t=3m: 2m after the first
            "/boss firing b",  // t=5m: 4m after firing
            "/pager firing b", // t=6m: 3m after the reminder
        ]
    );
    // Resolve: everyone who got the firing one gets the resolve, the escalation too.
    s.minute(8, &[("a", 0.0), ("b", 0.0), ("c", 0.0)]);
    for n in ["team", "pager", "other", "boss"] {
        s.notify(n);
    }
    let mut resolved: Vec<String> = r.summary()[6..].to_vec();
    resolved.sort();
    assert_eq!(
        resolved,
        [
            "/boss resolved b",
            "/other resolved c",
            "/pager resolved a,b",
            "/team resolved a,b"
        ]
    );
}

#[test]
fn maintenance_mutes_notifications_and_a_still_firing_alert_is_notified_when_it_ends() {
    let r = Receiver::start();
    // Minutes 2 to 5 (the period ends 3, 4 are inside; 5 is not).
    let extra = "[[maintenance]]\nname = \"deploy\"\nstart = \"120000\"\nend = \"300000\"\nmatchers = ['stream=~\"a|b\"']\n";
    let s = setup(&webhook_config(&r.url, extra));
    s.minute(0, &[("a", 0.0), ("b", 0.0), ("c", 0.0)]);
    s.minute(1, &[("a", 0.0), ("b", 0.0), ("c", 0.0)]);
    // All three fire at t=3m: a and b inside the window, c outside its scope.
    s.minute(2, &[("a", 5.0), ("b", 5.0), ("c", 5.0)]);
    // b resolves inside the window: never notified at all.
    s.minute(3, &[("a", 5.0), ("b", 0.0), ("c", 5.0)]);
    s.notify("team");
    assert_eq!(r.summary(), ["/team firing c"]);
    // The window ends at 5m with a still firing: notified then.
    s.minute(4, &[("a", 5.0), ("c", 5.0)]);
    s.notify("team");
    assert_eq!(r.summary(), ["/team firing c", "/team firing a"]);
    // Evaluation and history went on inside: a has fired since 3m.
    let i = &s.engine.core().instances[&s.fp("a")];
    assert_eq!(i.fired_ms, 3 * MIN);
}

#[test]
fn a_flapping_alert_is_notified_once_then_quiet() {
    let r = Receiver::start();
    let s = setup(&webhook_config(&r.url, ""));
    for m in 0..16 {
        s.minute(m, &[("a", if m % 2 == 0 { 5.0 } else { 0.0 })]);
    }
    s.notify("team");
    let got = r.summary();
    // Fired, resolved, fired, resolved … until flap detection marks it; then one flapping
    // notice and nothing more while it flaps, resolves included.
    assert_eq!(
        got,
        [
            "/team firing a",
            "/team resolved a",
            "/team firing a",
            "/team resolved a",
            "/team firing a(flapping)",
        ]
    );
    // It stops flapping (steady firing for long enough): the current state is notified.
    let mut m = 16;
    while r.summary().len() == 5 && m < 60 {
        s.minute(m, &[("a", 5.0)]);
        s.notify("team");
        m += 1;
    }
    assert_eq!(r.summary()[5..], ["/team firing a"], "after minute {m}");
    assert!(
        m > 20,
        "flapping ended only after quiet evaluations: minute {m}"
    );
}

#[test]
fn a_delivery_cut_by_a_restart_is_sent_again_with_the_same_key() {
    let r = Receiver::start();
    let s = setup(&webhook_config(&r.url, ""));
    s.minute(0, &[("a", 5.0)]);
    // The receiver is down; the worker retries in its thread until the engine stops.
    r.inbox.fail.store(usize::MAX, Ordering::SeqCst);
    let threads = s.engine.start();
    std::thread::sleep(std::time::Duration::from_millis(300));
    s.engine.close().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let tries = s.engine.notifier().unwrap().deliveries(None);
    assert!(tries.is_empty(), "nothing was accepted: {tries:?}");
    drop(s.engine);
    // Up again; a new process reads from the checkpoint that was never advanced.
    r.inbox.fail.store(0, Ordering::SeqCst);
    let engine = open(&s.store, &s.dir, &s.rules, &s.clock, &s.config);
    let n = engine.notifier().unwrap();
    let mut w = n.worker(&*engine, "team").unwrap();
    while n.run_once(&*engine, &mut w).unwrap() > 0 {}
    assert_eq!(r.summary(), ["/team firing a"]);
    let tried = r.inbox.tried.lock().unwrap().clone();
    assert!(
        tried.len() >= 2,
        "tried before the restart and after: {tried:?}"
    );
    assert!(
        tried.iter().all(|k| *k == r.got()[0].key),
        "one key: {tried:?}"
    );
    // Once accepted and committed, a further restart sends nothing again.
    drop(w);
    drop(engine);
    let engine = open(&s.store, &s.dir, &s.rules, &s.clock, &s.config);
    let n = engine.notifier().unwrap();
    let mut w = n.worker(&*engine, "team").unwrap();
    while n.run_once(&*engine, &mut w).unwrap() > 0 {}
    assert_eq!(r.got().len(), 1);
}

/// The file under `dir` named `name` (the journal keeps checkpoints in its own directory).
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.file_name().is_some_and(|f| f == name) {
            return Some(path);
        }
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        }
    }
    None
}

#[test]
fn a_worker_stopped_between_its_state_and_its_checkpoint_catches_the_checkpoint_up() {
    let r = Receiver::start();
    let s = setup(&webhook_config(&r.url, ""));
    s.minute(0, &[("a", 5.0)]);
    let checkpoint = find_file(&s.dir, "notify.team.ckpt");
    let before = checkpoint.as_ref().map(|c| std::fs::read(c).unwrap());
    s.notify("team");
    assert_eq!(r.summary(), ["/team firing a"]);
    drop(s.engine);
    // A kill after the state file was saved and before the checkpoint followed it.
    let path = find_file(&s.dir, "notify.team.ckpt").unwrap();
    match before {
        Some(bytes) => std::fs::write(&path, bytes).unwrap(),
        None => std::fs::remove_file(&path).unwrap(),
    }
    let engine = open(&s.store, &s.dir, &s.rules, &s.clock, &s.config);
    let n = engine.notifier().unwrap();
    let mut w = n.worker(&*engine, "team").unwrap();
    while n.run_once(&*engine, &mut w).unwrap() > 0 {}
    assert_eq!(r.got().len(), 1, "nothing sent twice");
    let end = engine.journal().committed_offset();
    let subscribers = engine.journal().subscribers().unwrap();
    let at = subscribers
        .iter()
        .find(|s| s.name == "notify.team")
        .unwrap()
        .offset;
    assert_eq!(
        at, end,
        "the checkpoint follows the saved state at once, not at the next record"
    );
}

/// Alertmanager v0.28.1, built from the Go module proxy once and cached.
fn alertmanager_bin() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let dir = home.join(".cache/strata-tests/bin");
    let bin = dir.join("alertmanager-v0.28.1");
    if bin.exists() {
        return bin;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let gobin = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("go")
        .args([
            "install",
            "github.com/prometheus/alertmanager/cmd/alertmanager@v0.28.1",
        ])
        .env("GOBIN", gobin.path())
        .env("GOFLAGS", "-buildvcs=false")
        .status()
        .expect("the go command (this test builds Alertmanager with the Go module proxy)");
    assert!(status.success(), "go install of Alertmanager failed");
    std::fs::copy(gobin.path().join("alertmanager"), &bin).unwrap();
    bin
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_real_alertmanager_receives_firing_and_resolved_alerts() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cluster = free_port();
    let am_config = dir.path().join("alertmanager.yml");
    std::fs::write(
        &am_config,
        "route:\n  receiver: none\nreceivers:\n  - name: none\n",
    )
    .unwrap();
    let _am = Child(
        std::process::Command::new(alertmanager_bin())
            .arg(format!("--config.file={}", am_config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("am").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--cluster.listen-address=127.0.0.1:{cluster}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let am = format!("http://127.0.0.1:{port}");
    let client = reqwest::blocking::Client::new();
    let ready = || {
        client
            .get(format!("{am}/-/ready"))
            .send()
            .is_ok_and(|r| r.status().is_success())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "Alertmanager did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let config = format!(
        "[route]\nreceiver = \"am\"\n[[receiver]]\nname = \"am\"\nalertmanager = \"{am}\"\n"
    );
    let s = setup(&config);
    // Virtual time near now, so that Alertmanager sees the alert as current.
    let base = (alert::util::wall_ms() / MIN - 5) * MIN;
    let at = |m: i64, v: f64| {
        write_num(&s.store, "x|ST[stream:a]", base + m * MIN + 10_000, v);
        s.clock.set(base + (m + 1) * MIN + 6_000);
        s.engine.tick().unwrap();
    };
    at(0, 5.0);
    s.notify("am");
    let alerts = |filter: &str| -> Vec<Value> {
        client
            .get(format!("{am}/api/v2/alerts?{filter}"))
            .send()
            .and_then(|r| r.text())
            .map(|t| serde_json::from_str::<Vec<Value>>(&t).unwrap())
            .unwrap()
    };
    let active = alerts("active=true&inhibited=false&silenced=false");
    assert_eq!(active.len(), 1, "{active:?}");
    assert_eq!(active[0]["labels"]["alertname"], "hot");
    assert_eq!(active[0]["labels"]["stream"], "a");
    assert_eq!(active[0]["annotations"]["summary"], "x is 5");
    assert_eq!(active[0]["status"]["state"], "active");
    at(1, 0.0);
    s.notify("am");
    // Resolved: Alertmanager no longer lists it as active.
    let active = alerts("active=true");
    assert!(active.is_empty(), "{active:?}");
}

#[test]
fn ten_thousand_notifications_wait_in_the_journal_for_a_receiver_that_was_down() {
    let r = Receiver::start();
    let config = format!(
        "[route]\nreceiver = \"team\"\ngroup_by = [\"...\"]\n[[receiver]]\nname = \"team\"\n\
         webhook = \"{}/team\"\nretry_initial = \"10ms\"\nretry_max = \"40ms\"\n",
        r.url
    );
    let s = setup(&config);
    const STREAMS: usize = 5_000;
    let write = |m: i64, v: f64| {
        let mut b = store::WriteBatch::new();
        for k in 0..STREAMS {
            b.numeric(&key(&format!("x|ST[stream:s{k}]")), m * MIN + 10_000, v)
                .unwrap();
        }
        s.store.write(&b).unwrap();
        s.clock.set((m + 1) * MIN + 6_000);
        s.engine.tick().unwrap();
    };
    // Everything fires, then resolves, while the receiver is down: 10,000 notifications
    // planned, all of them waiting in the journal.
    write(0, 5.0);
    write(1, 0.0);
    r.inbox.fail.store(40, Ordering::SeqCst);
    let started = std::time::Instant::now();
    s.notify("team");
    let took = started.elapsed().as_secs_f64();
    eprintln!(
        "{} deliveries after the receiver came back: {took:.1} s, {:.0} per second (this build)",
        2 * STREAMS,
        (2 * STREAMS) as f64 / took
    );
    let got = r.got();
    assert_eq!(got.len(), 2 * STREAMS);
    // In order per group (here each alert is its own group): firing, then resolved, once each.
    let mut seen: std::collections::HashMap<String, Vec<String>> = Default::default();
    for g in &got {
        let a = &g.body["alerts"][0];
        seen.entry(a["labels"]["stream"].as_str().unwrap().to_string())
            .or_default()
            .push(g.body["status"].as_str().unwrap().to_string());
    }
    assert_eq!(seen.len(), STREAMS);
    assert!(seen.values().all(|v| *v == ["firing", "resolved"]));
    let (delivered, dropped) = s.engine.notifier().unwrap().counts();
    assert_eq!((delivered, dropped), (2 * STREAMS as u64, 0));
}

#[test]
fn a_timed_group_waits_then_sends_every_alert_once_across_a_restart() {
    let r = Receiver::start();
    let extra = "";
    let config = webhook_config(&r.url, extra).replace(
        "group_by = [\"alertname\"]",
        "group_by = [\"alertname\"]\ngroup_wait = \"2m\"\ngroup_interval = \"3m\"",
    );
    let s = setup(&config);
    // a fires at 1m, b at 2m: nothing yet (group_wait runs to 3m).
    s.minute(0, &[("a", 5.0), ("b", 0.0)]);
    s.notify("team");
    s.minute(1, &[("a", 5.0), ("b", 5.0)]);
    s.notify("team");
    assert!(r.got().is_empty(), "sent early: {:?}", r.summary());
    // A restart while the group waits: its timer is in the worker's saved state.
    s.engine.close().unwrap();
    drop(s.engine);
    let engine = open(&s.store, &s.dir, &s.rules, &s.clock, &s.config);
    let n = engine.notifier().unwrap();
    let run = |engine: &Arc<Engine>| {
        let mut w = n.worker(&**engine, "team").unwrap();
        while n.run_once(&**engine, &mut w).unwrap() > 0 {}
    };
    run(&engine);
    assert!(r.got().is_empty(), "sent early after the restart");
    write_num(&s.store, "x|ST[stream:a]", 2 * MIN + 10_000, 5.0);
    write_num(&s.store, "x|ST[stream:b]", 2 * MIN + 10_000, 5.0);
    s.clock.set(3 * MIN + 6_000);
    engine.tick().unwrap();
    run(&engine);
    // One notification carrying the whole group (alerts in fingerprint order).
    let summary = r.summary();
    assert!(
        summary == ["/team firing a,b"] || summary == ["/team firing b,a"],
        "{summary:?}"
    );
    let g = &r.got()[0].body;
    assert_eq!(g["groupLabels"]["alertname"], "hot");
    // b resolves at 4m: held for group_interval (3m after 3m), then sent with a still firing.
    for m in 3..6 {
        write_num(&s.store, "x|ST[stream:a]", m * MIN + 10_000, 5.0);
        write_num(&s.store, "x|ST[stream:b]", m * MIN + 10_000, 0.0);
        s.clock.set((m + 1) * MIN + 6_000);
        engine.tick().unwrap();
        run(&engine);
        if m < 5 {
            assert_eq!(r.got().len(), 1, "before group_interval, at {}m", m + 1);
        }
    }
    let last = &r.got()[1].body;
    assert_eq!(last["status"], "firing");
    let statuses: Vec<(String, String)> = last["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["labels"]["stream"].as_str().unwrap().to_string(),
                a["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut statuses = statuses;
    statuses.sort();
    let want: Vec<(String, String)> = vec![
        ("a".into(), "firing".into()),
        ("b".into(), "resolved".into()),
    ];
    assert_eq!(statuses, want);
}

#[test]
fn maintenance_windows_made_through_the_api_are_durable_and_mute() {
    let r = Receiver::start();
    let s = setup(&webhook_config(&r.url, ""));
    let n = s.engine.notifier().unwrap().clone();
    // Open-ended: refused with a clear error.
    let open_ended: alert::notify::window::WindowSpec =
        serde_json::from_str(r#"{"name": "forever", "start": "0"}"#).unwrap();
    assert_eq!(
        n.put_window(open_ended).unwrap_err(),
        "maintenance 'forever': needs an end or a duration (open-ended windows are refused)"
    );
    // Every day 00:02 to 00:05 UTC, alerts of stream a only.
    let daily: alert::notify::window::WindowSpec = serde_json::from_str(
        r#"{"name": "daily", "at": "00:02", "duration": "3m", "timezone": "UTC",
            "matchers": ["stream=\"a\""]}"#,
    )
    .unwrap();
    assert!(!n.put_window(daily.clone()).unwrap(), "created");
    assert!(n.put_window(daily).unwrap(), "replaced");
    // Durable: a new process has it.
    drop(n);
    s.engine.close().unwrap();
    drop(s.engine);
    let engine = open(&s.store, &s.dir, &s.rules, &s.clock, &s.config);
    let n = engine.notifier().unwrap().clone();
    let names: Vec<String> = n
        .windows()
        .iter()
        .map(|(w, _)| w.name().to_string())
        .collect();
    assert_eq!(names, ["daily"]);
    let run = || {
        let mut w = n.worker(&*engine, "team").unwrap();
        while n.run_once(&*engine, &mut w).unwrap() > 0 {}
    };
    for m in 0..5 {
        write_num(
            &s.store,
            "x|ST[stream:a]",
            m * MIN + 10_000,
            if m >= 1 { 5.0 } else { 0.0 },
        );
        write_num(
            &s.store,
            "x|ST[stream:b]",
            m * MIN + 10_000,
            if m >= 2 { 5.0 } else { 0.0 },
        );
        s.clock.set((m + 1) * MIN + 6_000);
        engine.tick().unwrap();
        run();
    }
    // a fired at 2m inside the window (02–05), b at 3m outside its scope; a is notified when
    // the window ends at 5m.
    assert_eq!(r.summary(), ["/team firing b", "/team firing a"]);
    assert!(n.delete_window("daily").unwrap());
    assert!(!n.delete_window("daily").unwrap());
    assert!(n.windows().is_empty());
}

/// One request through the alerting router: (status, JSON body or null).
fn call(
    rt: &tokio::runtime::Runtime,
    r: &axum::Router,
    method: &str,
    uri: &str,
    body: &str,
) -> (u16, Value) {
    use tower::ServiceExt;
    let req = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    rt.block_on(async {
        let resp = r.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    })
}

#[test]
fn the_api_says_which_windows_mute_what_now_and_where_an_alert_goes() {
    let r = Receiver::start();
    let extra = format!(
        "[[receiver]]\nname = \"team-b\"\nwebhook = \"{}/b\"\n\
         [[route.routes]]\nmatchers = ['stream=\"b\"']\nreceiver = \"team-b\"\n",
        r.url
    );
    let s = setup(&webhook_config(&r.url, &extra));
    for m in 0..3 {
        s.minute(m, &[("a", if m >= 1 { 5.0 } else { 0.0 }), ("b", 0.0)]);
    }
    let fp_a = format!("{:016x}", s.fp("a"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = alert::http::router(s.engine.clone(), 1_000);
    // A one-off window over the first ten minutes for stream a; a weekly one on Mondays.
    let once = r#"{"name": "deploy", "start": "0", "end": "600000", "matchers": ["stream=\"a\""]}"#;
    let (st, v) = call(&rt, &api, "PUT", "/api/strata/v1/maintenance/deploy", once);
    assert_eq!(st, 201, "{v}");
    let weekly = r#"{"name": "mondays", "days": ["mon"], "at": "23:00", "duration": "1h", "timezone": "UTC"}"#;
    assert_eq!(
        call(
            &rt,
            &api,
            "PUT",
            "/api/strata/v1/maintenance/mondays",
            weekly
        )
        .0,
        201
    );
    // Refused bodies name their field.
    let (st, v) = call(
        &rt,
        &api,
        "PUT",
        "/api/strata/v1/maintenance/bad",
        r#"{"name": "bad", "cron": "61 * * * *", "duration": "1h"}"#,
    );
    assert_eq!((st, v["field"].as_str()), (400, Some("cron")), "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("maintenance 'bad' cron: '61 * * * *'"),
        "{v}"
    );
    let (st, v) = call(
        &rt,
        &api,
        "PUT",
        "/api/strata/v1/maintenance/bad",
        r#"{"name": "bad", "at": "02:00"}"#,
    );
    assert_eq!((st, v["field"].as_str()), (400, Some("duration")), "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("open-ended windows are refused"),
        "{v}"
    );
    let (st, v) = call(
        &rt,
        &api,
        "PUT",
        "/api/strata/v1/maintenance/bad",
        r#"{"name": "bad", "at": "02:00", "duration": "1h", "timezone": "Mars/Olympus"}"#,
    );
    assert_eq!((st, v["field"].as_str()), (400, Some("timezone")), "{v}");
    // The list: active now (the engine's clock: 3m06s), when each next starts and ends, and the
    // firing alerts muted now.
    let (st, v) = call(&rt, &api, "GET", "/api/strata/v1/maintenance", "");
    assert_eq!(st, 200);
    let ws = v["windows"].as_array().unwrap();
    let deploy = ws.iter().find(|w| w["name"] == "deploy").unwrap();
    assert_eq!(deploy["kind"], "once");
    assert_eq!(deploy["active"], true);
    assert_eq!(
        (
            deploy["next_start_ms"].as_i64(),
            deploy["next_end_ms"].as_i64()
        ),
        (Some(0), Some(600_000))
    );
    let muted: Vec<&str> = deploy["mutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["fp"].as_str().unwrap())
        .collect();
    assert_eq!(muted, [fp_a.as_str()]);
    let mondays = ws.iter().find(|w| w["name"] == "mondays").unwrap();
    assert_eq!(
        (mondays["kind"].as_str(), mondays["active"].as_bool()),
        (Some("weekly"), Some(false))
    );
    // 1970-01-01 was a Thursday: the next Monday 23:00 UTC is 4 days and 23 hours later.
    let monday_ms = (4 * 24 + 23) * 3_600_000;
    assert_eq!(mondays["next_start_ms"].as_i64(), Some(monday_ms));
    assert_eq!(mondays["next_end_ms"].as_i64(), Some(monday_ms + 3_600_000));
    assert_eq!(mondays["next_end"], "1970-01-06T00:00:00Z");
    assert!(mondays["mutes"].as_array().unwrap().is_empty());
    // The alerts list says which windows mute an alert and whether it is acknowledged.
    let alert_of = |v: &Value| {
        v["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["fp"] == fp_a.as_str())
            .unwrap()
            .clone()
    };
    let a = alert_of(&call(&rt, &api, "GET", "/api/strata/v1/alerts", "").1);
    assert_eq!(a["muted_by"], serde_json::json!(["deploy"]));
    assert_eq!(a["acked"], Value::Null);
    let uri = format!("/api/strata/v1/alerts/{fp_a}/ack");
    assert_eq!(
        call(&rt, &api, "POST", &uri, r#"{"note": "on it", "by": "ann"}"#).0,
        200
    );
    let a = alert_of(&call(&rt, &api, "GET", "/api/strata/v1/alerts", "").1);
    assert_eq!(
        (a["acked"]["note"].as_str(), a["acked"]["by"].as_str()),
        (Some("on it"), Some("ann"))
    );
    // The routing tree, and where example alerts go (the function `rules routes test` uses).
    let (st, v) = call(&rt, &api, "GET", "/api/strata/v1/routes", "");
    assert_eq!(st, 200);
    assert_eq!(v["route"]["receiver"], "team");
    assert_eq!(v["route"]["routes"][0]["receiver"], "team-b");
    assert_eq!(
        v["route"]["routes"][0]["matchers"],
        serde_json::json!(["stream=\"b\""])
    );
    assert_eq!(v["receivers"], serde_json::json!(["team", "team-b"]));
    let test = |labels: &str| {
        call(
            &rt,
            &api,
            "POST",
            "/api/strata/v1/routes/test",
            &format!(r#"{{"labels": {labels}}}"#),
        )
    };
    let (st, v) = test(r#"{"alertname": "hot", "stream": "b"}"#);
    assert_eq!(st, 200);
    assert_eq!(v["receivers"][0]["receiver"], "team-b");
    assert_eq!(
        v["receivers"][0]["group_labels"],
        serde_json::json!({"alertname": "hot"})
    );
    assert_eq!(
        v["windows"],
        serde_json::json!([{"name": "mondays", "active": false}])
    );
    let (_, v) = test(r#"{"alertname": "hot", "stream": "a"}"#);
    assert_eq!(v["receivers"][0]["receiver"], "team");
    let mut names: Vec<&str> = v["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["deploy", "mondays"]);
    let (st, v) = call(
        &rt,
        &api,
        "POST",
        "/api/strata/v1/routes/test",
        r#"{"stream": "a"}"#,
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().starts_with("routes test body"),
        "{v}"
    );
    // Deleted: gone from the list and from the alert.
    assert_eq!(
        call(&rt, &api, "DELETE", "/api/strata/v1/maintenance/deploy", "").0,
        204
    );
    let a = alert_of(&call(&rt, &api, "GET", "/api/strata/v1/alerts", "").1);
    assert_eq!(a["muted_by"], serde_json::json!([]));
}
