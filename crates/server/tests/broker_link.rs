//! The broker↔core TLS link with the real binary: `strata serve --link-listen`, brokers made
//! with `strata broker init` and registered with `strata broker register`, one broker dialling
//! the core through a real HTTP CONNECT proxy (Debian's tinyproxy) and one the core dials.
//! Histogram bodies pushed to each broker arrive at the core exactly once (every body's count
//! in a bin of its own) through a proxy kill (a link cut), a `kill -9` of each broker and of
//! the core. A broker whose certificate is not registered is refused with a clear log line; a
//! broker that stops answering (SIGSTOP) is seen as down; an agent in reverse mode delivers
//! over the same link.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod roles_common;
mod serve_common;
use roles_common::{free_port, fresh_dir, Proc};

/// Bound on any wait for data, a state, or a process.
const WAIT_MS_MAX: u64 = 60_000;

fn strata(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "strata {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn core(data: &Path, http: u16, link: u16) -> Proc {
    let config = data.with_extension("toml");
    std::fs::write(&config, "").unwrap();
    let args: Vec<String> = [
        "serve",
        "--http",
        &format!("127.0.0.1:{http}"),
        "--statsd",
        "off",
        "--graphite",
        "off",
        "--link-listen",
        &format!("127.0.0.1:{link}"),
        "--data-dir",
        &data.display().to_string(),
        "--config",
        &config.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Proc::start(
        "strata serve",
        &args,
        &data.with_extension("log"),
        "listening",
    )
}

/// `strata broker init`: the broker's certificate SHA-256.
fn init(dir: &Path, id: &str) -> String {
    let out = strata(&[
        "broker",
        "init",
        "--dir",
        &dir.display().to_string(),
        "--id",
        id,
    ]);
    out.lines()
        .find_map(|l| l.strip_prefix("certificate sha256: "))
        .expect("init prints the fingerprint")
        .trim()
        .to_owned()
}

/// `strata broker register`: the core's certificate SHA-256 it prints.
fn register(http: u16, id: &str, fp: &str, extra: &[&str]) -> String {
    let core = format!("http://127.0.0.1:{http}");
    let mut args = vec![
        "broker", "register", "--core", &core, "--id", id, "--sha256", fp,
    ];
    args.extend_from_slice(extra);
    let out = strata(&args);
    out.lines()
        .find_map(|l| l.strip_prefix("core sha256: "))
        .and_then(|l| l.split_whitespace().next())
        .expect("register prints the core's fingerprint")
        .to_owned()
}

fn broker(data: &Path, id: &str, push: u16, link_args: &[String]) -> Proc {
    let mut args: Vec<String> = vec![
        "broker".into(),
        "--id".into(),
        id.into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--push-http".into(),
        format!("127.0.0.1:{push}"),
    ];
    args.extend_from_slice(link_args);
    Proc::start("strata broker", &args, &data.with_extension("log"), "ready")
}

/// Debian's tinyproxy in the foreground, allowing CONNECT to `port` only.
fn proxy(dir: &Path, listen: u16, port: u16) -> Child {
    if Command::new("tinyproxy").arg("-v").output().is_err() {
        serve_common::apt_install(&["tinyproxy"]);
    }
    let conf = dir.join("tinyproxy.conf");
    // Its log, kept across restarts and writable by the user it drops to.
    let log = dir.join("tinyproxy.log");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    let everyone = std::os::unix::fs::PermissionsExt::from_mode(0o666);
    std::fs::set_permissions(&log, everyone).unwrap();
    std::fs::write(
        &conf,
        format!(
            "User nobody\nGroup nogroup\nPort {listen}\nListen 127.0.0.1\nTimeout 600\n\
             Allow 127.0.0.1\nConnectPort {port}\nMaxClients 20\nLogLevel Connect\n\
             LogFile \"{}\"\n",
            log.display()
        ),
    )
    .unwrap();
    let child = Command::new("tinyproxy")
        .args(["-d", "-c", &conf.display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
        assert!(Instant::now() < deadline, "tinyproxy did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn brokers(http: u16) -> serde_json::Value {
    client()
        .get(format!("http://127.0.0.1:{http}/api/strata/v1/brokers"))
        .send()
        .and_then(|r| r.json())
        .unwrap_or_default()
}

fn broker_state(http: u16, id: &str) -> serde_json::Value {
    let all = brokers(http);
    all["brokers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["id"] == id)
        .cloned()
        .unwrap_or_default()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_millis(WAIT_MS_MAX),
            "{what}: not within {WAIT_MS_MAX} ms"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A timestamp a minute into the current hour (or the previous one): every body in one slice.
fn slice_ts_ms() -> i64 {
    let now = now_ms();
    let ts = (now / 3_600_000) * 3_600_000 + 60_000;
    if ts > now {
        ts - 3_600_000
    } else {
        ts
    }
}

/// Body `i`'s bin (val, exp): its own, so the merged histogram tells every body apart.
fn bin(i: usize) -> (i64, i64) {
    ((10 + i % 90) as i64, (i / 90 + 1) as i64)
}

fn count(i: usize) -> u64 {
    1 + (i % 7) as u64
}

fn body(name: &str, i: usize, ts_ms: i64) -> String {
    let (val, exp) = bin(i);
    format!(
        r#"{{"{name}":{{"_type":"h","_value":["H[{val}e{}]={}"],"_ts":{ts_ms}}}}}"#,
        exp - 1,
        count(i)
    )
}

/// The core's merged histogram of `name` around `ts_ms`: (val, exp) → count.
fn core_bins(http: u16, name: &str, ts_ms: i64) -> BTreeMap<(i64, i64), u64> {
    let start = ts_ms / 1000 - 60;
    let url = format!(
        "http://127.0.0.1:{http}/api/strata/v1/fetch?query=and(__name:{name})&start={start}\
         &end={}&period=3600s",
        start + 120
    );
    let doc: serde_json::Value = match client().get(url).send().and_then(|r| r.json()) {
        Ok(d) => d,
        Err(_) => return BTreeMap::new(),
    };
    let mut out = BTreeMap::new();
    for series in doc["series"].as_array().into_iter().flatten() {
        for slice in series["data"].as_array().into_iter().flatten() {
            for b in slice["value"]["bins"].as_array().into_iter().flatten() {
                let key = (b[0].as_i64().unwrap(), b[1].as_i64().unwrap());
                *out.entry(key).or_insert(0) += b[2].as_u64().unwrap();
            }
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    Unsent,
    Acked,
    /// Sent, and no 2xx came back (the receiver was down or died answering).
    Unknown,
}

/// Pushes `n` bodies of `name` to `url`, one every `every_ms`, recording each body's fate.
struct Pusher {
    fates: Arc<Mutex<Vec<Fate>>>,
    sent: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Pusher {
    fn start(url: String, name: &'static str, n: usize, every_ms: u64, ts_ms: i64) -> Pusher {
        let fates = Arc::new(Mutex::new(vec![Fate::Unsent; n]));
        let sent = Arc::new(AtomicUsize::new(0));
        let (f, s) = (fates.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            let client = client();
            for i in 0..n {
                let ok = client
                    .post(&url)
                    .body(body(name, i, ts_ms))
                    .send()
                    .is_ok_and(|r| r.status().is_success());
                f.lock().unwrap()[i] = if ok { Fate::Acked } else { Fate::Unknown };
                s.store(i + 1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(every_ms));
            }
        });
        Pusher {
            fates,
            sent,
            thread,
        }
    }

    fn wait_sent(&self, n: usize) {
        wait_until("the pusher's progress", || {
            self.sent.load(Ordering::Relaxed) >= n
        });
    }

    /// Waits for the pusher, then for every acknowledged body at the core; asserts each body
    /// is there exactly as often as its fate allows (acknowledged: once; unanswered: once or
    /// not at all; never twice).
    fn assert_exactly_once(self, http: u16, name: &str, ts_ms: i64) {
        self.thread.join().unwrap();
        let fates = self.fates.lock().unwrap().clone();
        let acked: Vec<usize> = (0..fates.len())
            .filter(|i| fates[*i] == Fate::Acked)
            .collect();
        assert!(
            acked.len() > fates.len() / 2,
            "{name}: most bodies acknowledged"
        );
        wait_until(
            &format!("{name}: every acknowledged body at the core"),
            || {
                let bins = core_bins(http, name, ts_ms);
                acked.iter().all(|i| bins.contains_key(&bin(*i)))
            },
        );
        // Anything resent late would show as a doubled count.
        std::thread::sleep(Duration::from_millis(3_000));
        let bins = core_bins(http, name, ts_ms);
        let mut wrong = Vec::new();
        for (i, fate) in fates.iter().enumerate() {
            let got = bins.get(&bin(i)).copied().unwrap_or(0);
            let ok = match fate {
                Fate::Acked => got == count(i),
                Fate::Unknown => got == 0 || got == count(i),
                Fate::Unsent => got == 0,
            };
            if !ok {
                wrong.push((i, *fate, got, count(i)));
            }
        }
        let unknown = fates.iter().filter(|f| **f == Fate::Unknown).count();
        println!("{name}: {} acknowledged, {unknown} unanswered", acked.len());
        assert!(
            wrong.is_empty(),
            "{name}: bodies at the core a wrong number of times (index, fate, count, \
             expected): {wrong:?}"
        );
    }
}

struct Setup {
    dir: PathBuf,
    http: u16,
    link: u16,
    core_data: PathBuf,
}

impl Setup {
    fn new(name: &str) -> (Setup, Proc) {
        let dir = fresh_dir(name);
        let (http, link) = (free_port(), free_port());
        let core_data = dir.join("core");
        let the_core = core(&core_data, http, link);
        (
            Setup {
                dir,
                http,
                link,
                core_data,
            },
            the_core,
        )
    }

    fn restart_core(&self) -> Proc {
        core(&self.core_data, self.http, self.link)
    }
}

#[test]
fn both_dial_directions_deliver_exactly_once_through_a_proxy_cut_and_kill9s() {
    const BODIES: usize = 240;
    const EVERY_MS: u64 = 40;
    let (s, the_core) = Setup::new("broker-link-both");
    let mut the_core = Some(the_core);
    let ts_ms = slice_ts_ms();
    let (out_data, in_data) = (s.dir.join("edge-out"), s.dir.join("edge-in"));
    let out_fp = init(&out_data, "edge-out");
    let in_fp = init(&in_data, "edge-in");
    let in_link = free_port();
    let core_fp = register(s.http, "edge-out", &out_fp, &[]);
    let in_address = format!("127.0.0.1:{in_link}");
    let again = register(
        s.http,
        "edge-in",
        &in_fp,
        &["--dial", "core", "--address", &in_address],
    );
    assert_eq!(core_fp, again, "one core, one certificate");

    let proxy_port = free_port();
    let mut the_proxy = proxy(&s.dir, proxy_port, s.link);
    let out_args: Vec<String> = vec![
        "--core-link".into(),
        format!("127.0.0.1:{}", s.link),
        "--proxy".into(),
        format!("http://127.0.0.1:{proxy_port}"),
        "--core-sha256".into(),
        core_fp.clone(),
    ];
    let in_args: Vec<String> = vec![
        "--link-listen".into(),
        in_address.clone(),
        "--core-sha256".into(),
        core_fp.clone(),
    ];
    let (out_push, in_push) = (free_port(), free_port());
    let mut edge_out = Some(broker(&out_data, "edge-out", out_push, &out_args));
    let mut edge_in = Some(broker(&in_data, "edge-in", in_push, &in_args));
    let took = wait_until("both links up", || {
        ["edge-out", "edge-in"]
            .iter()
            .all(|id| broker_state(s.http, id)["connected"] == true)
    });
    println!(
        "both links up {:.1} s after the brokers started",
        took.as_secs_f64()
    );

    let url = |port: u16| format!("http://127.0.0.1:{port}/write/push");
    let out_pusher = Pusher::start(url(out_push), "link_out_lat", BODIES, EVERY_MS, ts_ms);
    let in_pusher = Pusher::start(url(in_push), "link_in_lat", BODIES, EVERY_MS, ts_ms);

    // A link cut: the proxy dies and comes back.
    out_pusher.wait_sent(BODIES / 5);
    the_proxy.kill().unwrap();
    the_proxy.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    the_proxy = proxy(&s.dir, proxy_port, s.link);
    // Each broker killed with SIGKILL while it forwards, and started again.
    out_pusher.wait_sent(2 * BODIES / 5);
    edge_out.take().unwrap().kill9();
    edge_out = Some(broker(&out_data, "edge-out", out_push, &out_args));
    in_pusher.wait_sent(3 * BODIES / 5);
    edge_in.take().unwrap().kill9();
    edge_in = Some(broker(&in_data, "edge-in", in_push, &in_args));
    // The core killed with SIGKILL while it receives from both, and started again.
    in_pusher.wait_sent(4 * BODIES / 5);
    the_core.take().unwrap().kill9();
    std::thread::sleep(Duration::from_millis(1_000));
    the_core = Some(s.restart_core());

    out_pusher.assert_exactly_once(s.http, "link_out_lat", ts_ms);
    in_pusher.assert_exactly_once(s.http, "link_in_lat", ts_ms);

    // The core's view: both up, the backlog drained, in the API, the CLI and /metrics.
    wait_until("both links up with no backlog", || {
        ["edge-out", "edge-in"].iter().all(|id| {
            let b = broker_state(s.http, id);
            b["connected"] == true && b["backlog_records"] == 0 && b["last_contact_ms"] != 0
        })
    });
    let listed = strata(&[
        "broker",
        "list",
        "--core",
        &format!("http://127.0.0.1:{}", s.http),
    ]);
    println!("{listed}");
    assert!(listed.contains(&core_fp), "{listed}");
    for (id, dial) in [("edge-out", "broker"), ("edge-in", "core")] {
        let line = listed.lines().find(|l| l.starts_with(id)).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[1..3], [dial, "up"], "{line}");
    }
    let metrics = client()
        .get(format!("http://127.0.0.1:{}/metrics", s.http))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for id in ["edge-out", "edge-in"] {
        assert!(
            metrics.contains(&format!("strata_broker_connected{{broker=\"{id}\"}} 1")),
            "{id} connected in /metrics"
        );
        assert!(metrics.contains(&format!("strata_broker_backlog_records{{broker=\"{id}\"}}")));
        assert!(metrics.contains(&format!("strata_broker_lag_seconds{{broker=\"{id}\"}}")));
    }
    let proxied = std::fs::read_to_string(s.dir.join("tinyproxy.log")).unwrap_or_default();
    let tunnel = "Request (file descriptor";
    let connect = format!("CONNECT 127.0.0.1:{} HTTP/1.1", s.link);
    let tunnels = proxied
        .lines()
        .filter(|l| l.contains(tunnel) && l.contains(&connect))
        .count();
    println!("tunnels through the proxy to the core's link listener: {tunnels}");
    assert!(
        tunnels >= 2,
        "the broker dialled through the proxy, before and after its kill"
    );
    drop((edge_out, edge_in, the_core));
    let _ = the_proxy.kill();
    let _ = the_proxy.wait();
}

#[test]
fn a_certificate_not_registered_is_refused_with_a_clear_line() {
    let (s, the_core) = Setup::new("broker-link-refused");
    let core_fp = brokers(s.http)["core_sha256"].as_str().unwrap().to_owned();
    // A broker nobody registered, and one that shows another broker's id with its own key.
    let rogue = s.dir.join("rogue");
    let rogue_fp = init(&rogue, "rogue");
    let other_fp = init(&s.dir.join("other"), "edge-a");
    register(s.http, "edge-a", &other_fp, &[]);
    let link_args: Vec<String> = vec![
        "--core-link".into(),
        format!("127.0.0.1:{}", s.link),
        "--core-sha256".into(),
        core_fp.clone(),
    ];
    let _rogue = broker(&rogue, "edge-a", free_port(), &link_args);
    let log = s.core_data.with_extension("log");
    let line = format!("its certificate (sha256 {rogue_fp}) is not registered here");
    wait_until("the refusal logged", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains(&line))
    });
    assert_eq!(broker_state(s.http, "edge-a")["connected"], false);
    // A broker pinning a certificate that is not the core's refuses the core.
    let pinned_wrong = s.dir.join("pinned-wrong");
    let fp = init(&pinned_wrong, "edge-b");
    register(s.http, "edge-b", &fp, &[]);
    let wrong: Vec<String> = vec![
        "--core-link".into(),
        format!("127.0.0.1:{}", s.link),
        "--core-sha256".into(),
        "00".repeat(32),
    ];
    let _b = broker(&pinned_wrong, "edge-b", free_port(), &wrong);
    let blog = pinned_wrong.with_extension("log");
    wait_until("the broker refusing the core", || {
        std::fs::read_to_string(&blog).is_ok_and(|t| t.contains("is --core-sha256 the core's?"))
    });
    assert_eq!(broker_state(s.http, "edge-b")["connected"], false);
    drop(the_core);
}

#[test]
fn a_broker_that_stops_answering_is_seen_down() {
    let (s, the_core) = Setup::new("broker-link-dead-peer");
    let data = s.dir.join("edge");
    let fp = init(&data, "edge-1");
    let core_fp = register(s.http, "edge-1", &fp, &[]);
    let link_args: Vec<String> = vec![
        "--core-link".into(),
        format!("127.0.0.1:{}", s.link),
        "--core-sha256".into(),
        core_fp,
    ];
    let edge = broker(&data, "edge-1", free_port(), &link_args);
    wait_until("the link up", || {
        broker_state(s.http, "edge-1")["connected"] == true
    });
    let pid = edge.pid().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    // The keepalive bound is 30 s; the wait's bound (60 s) is the assertion's, not a timing.
    let took = wait_until("the stopped broker seen down", || {
        broker_state(s.http, "edge-1")["connected"] == false
    });
    println!(
        "a stopped broker seen down after {:.1} s",
        took.as_secs_f64()
    );
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    wait_until("the link up again", || {
        broker_state(s.http, "edge-1")["connected"] == true
    });
    drop((edge, the_core));
}

/// How many series the core holds tagged `__check:<check>`.
fn check_series(http: u16, check: &str) -> usize {
    let url = format!("http://127.0.0.1:{http}/api/strata/v1/find?query=and(__check:{check})");
    let found: serde_json::Value = client().get(url).send().unwrap().json().unwrap();
    found.as_array().map_or(0, Vec::len)
}

/// An agent config in reverse mode dialling `target` (a core's or a broker's link listener),
/// pinning `pin`; its `strata agent` arguments.
fn reverse_agent(dir: &Path, host: &str, http: u16, target: u16, pin: &str) -> Vec<String> {
    let config = dir.join(format!("agent-{host}.toml"));
    std::fs::write(
        &config,
        format!(
            "host_id = \"{host}\"\nstate_dir = \"{}\"\nmode = \"reverse\"\n\
             listen = \"127.0.0.1:{http}\"\nstatsd = \"\"\n\
             [reverse]\nbroker = \"127.0.0.1:{target}\"\ncore_sha256 = \"{pin}\"\n",
            dir.join(format!("agent-{host}-state")).display(),
        ),
    )
    .unwrap();
    [
        "agent",
        "--config",
        &config.display().to_string(),
        "--period-s",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn an_agent_in_reverse_mode_dials_out_and_delivers_exactly_once() {
    const BODIES: usize = 120;
    let (s, the_core) = Setup::new("agent-reverse");
    let ts_ms = slice_ts_ms();
    let fp = init(&s.dir.join("agent-h1-state"), "agent-h1");
    let core_fp = register(s.http, "agent-h1", &fp, &[]);
    let agent_port = free_port();
    let args = reverse_agent(&s.dir, "h1", agent_port, s.link, &core_fp);
    let log = s.dir.join("agent.log");
    let mut agent = Some(Proc::start(
        "strata agent",
        &args,
        &log,
        "ready: mode reverse",
    ));
    wait_until("the agent's link up", || {
        broker_state(s.http, "agent-h1")["connected"] == true
    });
    let url = format!("http://127.0.0.1:{agent_port}/write");
    let pusher = Pusher::start(url, "agent_rev_lat", BODIES, 40, ts_ms);
    pusher.wait_sent(BODIES / 2);
    agent.take().unwrap().kill9();
    agent = Some(Proc::start(
        "strata agent",
        &args,
        &log,
        "ready: mode reverse",
    ));
    pusher.assert_exactly_once(s.http, "agent_rev_lat", ts_ms);
    // The agent's own series arrived too, tagged with its link id.
    assert!(
        check_series(s.http, "agent-h1") > 1,
        "the agent's host series at the core"
    );
    drop((agent, the_core));
}

/// An agent in reverse mode dials a broker (`--agent-listen`), registered on the broker's
/// registry as on a core's; the broker relays each batch with the agent's own origin over its
/// link to the core. Bodies written to the agent arrive once through a `kill -9` of the agent
/// and one of the broker, tagged with the agent's check as if it had dialled the core. The
/// registry refuses an id the core could not name, and wants the agents token when one is set.
#[test]
fn an_agent_in_reverse_mode_dials_a_broker_and_its_batches_reach_the_core_once() {
    const BODIES: usize = 150;
    let (s, the_core) = Setup::new("agent-via-broker");
    let ts_ms = slice_ts_ms();
    let edge = s.dir.join("edge-r");
    let edge_fp = init(&edge, "edge-r");
    let core_fp = register(s.http, "edge-r", &edge_fp, &[]);
    let (edge_push, edge_agents) = (free_port(), free_port());
    let edge_args: Vec<String> = vec![
        "--core-link".into(),
        format!("127.0.0.1:{}", s.link),
        "--core-sha256".into(),
        core_fp,
        "--agent-listen".into(),
        format!("127.0.0.1:{edge_agents}"),
    ];
    let mut the_edge = Some(broker(&edge, "edge-r", edge_push, &edge_args));
    // The agent registered on the broker, pinning the broker's agent-link certificate.
    let agent_fp = init(&s.dir.join("agent-h2-state"), "agent-h2");
    let edge_pin = register(edge_push, "agent-h2", &agent_fp, &[]);
    assert_eq!(
        brokers(edge_push)["core_sha256"].as_str(),
        Some(edge_pin.as_str()),
        "the broker's registry names its own agent-link certificate"
    );
    let agent_port = free_port();
    let args = reverse_agent(&s.dir, "h2", agent_port, edge_agents, &edge_pin);
    let log = s.dir.join("agent-h2.log");
    let ready = "ready: mode reverse";
    let mut agent = Some(Proc::start("strata agent", &args, &log, ready));
    wait_until("the agent's link to the broker up", || {
        broker_state(edge_push, "agent-h2")["connected"] == true
    });
    let url = format!("http://127.0.0.1:{agent_port}/write");
    let pusher = Pusher::start(url, "agent_via_broker", BODIES, 40, ts_ms);
    pusher.wait_sent(BODIES / 3);
    agent.take().unwrap().kill9();
    agent = Some(Proc::start("strata agent", &args, &log, ready));
    pusher.wait_sent(2 * BODIES / 3);
    the_edge.take().unwrap().kill9();
    the_edge = Some(broker(&edge, "edge-r", edge_push, &edge_args));
    pusher.assert_exactly_once(s.http, "agent_via_broker", ts_ms);
    assert!(
        check_series(s.http, "agent-h2") > 1,
        "the agent's host series at the core, under its own check"
    );
    // A registration the core could not name (`edge-r/<id>` past 64 bytes) is refused.
    let long = "a".repeat(60);
    let refused = client()
        .post(format!("http://127.0.0.1:{edge_push}/api/strata/v1/brokers"))
        .json(&serde_json::json!({"id": long, "certificate_sha256": "ab".repeat(32), "dial": "broker"}))
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let why: serde_json::Value = refused.json().unwrap();
    assert!(why["error"].as_str().unwrap().contains("`id`"), "{why}");
    // With an agents token, the registry wants it from everyone (loopback included).
    let guarded = s.dir.join("edge-t");
    let token = s.dir.join("agents-token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let guarded_push = free_port();
    let guarded_args: Vec<String> = vec![
        "--agent-listen".into(),
        "127.0.0.1:0".into(),
        "--agents-token-file".into(),
        token.display().to_string(),
    ];
    let _guarded = broker(&guarded, "edge-t", guarded_push, &guarded_args);
    let registry = format!("http://127.0.0.1:{guarded_push}/api/strata/v1/brokers");
    let without = client().get(&registry).send().unwrap();
    assert_eq!(without.status().as_u16(), 401);
    let with = client()
        .get(&registry)
        .bearer_auth("s3cret")
        .send()
        .unwrap();
    assert_eq!(with.status().as_u16(), 200);
    drop((agent, the_edge, the_core));
}
