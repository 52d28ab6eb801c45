//! `strata agent` in push mode, end to end with the real binary: the agent pushes its host
//! collectors every period and forwards what applications `POST /write` to it, through its local
//! journal, to a `strata serve` core that wants a bearer token. The core is killed with SIGKILL
//! and stays down `OUTAGE_MS`; once it is back the agent is killed with SIGKILL while it drains
//! the backlog, and restarted. Afterwards every body the agent acknowledged is at the core once
//! (per-body histogram counts), and the agent's 1 s CPU histograms are at the core with no
//! second counted twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod roles_common;
use roles_common::{free_port, fresh_dir, Proc};

/// How long the core stays down.
const OUTAGE_MS: u64 = 60_000;
/// Bodies pushed to the agent's /write, one every `PUSH_EVERY_MS`.
const BODIES: usize = 900;
const PUSH_EVERY_MS: u64 = 100;
/// The agent's period and the core's base period (s).
const AGENT_PERIOD_S: u64 = 2;
const CORE_PERIOD_S: i64 = 10;
const TOKEN: &str = "agent-test-token";
const HOST: &str = "host-under-test";
/// Bound on any wait for a process or for the data to arrive.
const WAIT_MS_MAX: u64 = 180_000;

fn core(data: &Path, port: u16) -> Proc {
    let config = data.with_extension("toml");
    std::fs::write(
        &config,
        format!("[store]\nbase_period_s = {CORE_PERIOD_S}\n\n[auth]\ntoken = \"{TOKEN}\"\n"),
    )
    .unwrap();
    let args: Vec<String> = [
        "serve",
        "--http",
        &format!("127.0.0.1:{port}"),
        "--statsd",
        "127.0.0.1:0",
        "--graphite",
        "127.0.0.1:0",
        "--data-dir",
        &data.display().to_string(),
        "--config",
        &config.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    Proc::start(
        "strata serve",
        &args,
        &data.with_extension("log"),
        "listening",
    )
}

fn agent(dir: &Path, core_port: u16, http_port: u16) -> Proc {
    let token = dir.join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "host_id = \"{HOST}\"\nstate_dir = \"{}\"\nmode = \"push\"\n\
             listen = \"127.0.0.1:{http_port}\"\nstatsd = \"\"\n\
             plugins_dir = \"{}\"\n[push]\nurl = \"http://127.0.0.1:{core_port}\"\n\
             token_file = \"{}\"\n",
            dir.join("state").display(),
            dir.join("plugins").display(),
            token.display()
        ),
    )
    .unwrap();
    let args: Vec<String> = vec![
        "agent".into(),
        "--config".into(),
        config.display().to_string(),
        "--period-s".into(),
        AGENT_PERIOD_S.to_string(),
    ];
    Proc::start("strata agent", &args, &dir.join("agent.log"), "ready")
}

fn bin(i: usize) -> (i64, i64) {
    ((10 + i % 90) as i64, (i / 90 + 1) as i64)
}

fn count(i: usize) -> u64 {
    1 + (i % 7) as u64
}

fn body(i: usize, ts_ms: i64) -> String {
    let (val, exp) = bin(i);
    format!(
        r#"{{"agent_app_lat":{{"_type":"h","_value":["H[{val}e{}]={}"],"_ts":{ts_ms}}}}}"#,
        exp - 1,
        count(i)
    )
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Slice start (s) → llhist bin (val, exp) → count.
type Slices = BTreeMap<i64, BTreeMap<(i64, i64), u64>>;

/// Slices of a histogram stream at the core: slice start (s) → (val, exp) → count.
fn core_hist(port: u16, query: &str, start_s: i64, end_s: i64, period_s: i64) -> Option<Slices> {
    let url = format!(
        "http://127.0.0.1:{port}/api/strata/v1/fetch?query={query}&start={start_s}&end={end_s}\
         &period={period_s}s"
    );
    let doc: serde_json::Value = client()
        .get(url)
        .bearer_auth(TOKEN)
        .send()
        .ok()?
        .json()
        .ok()?;
    let mut out = Slices::new();
    for series in doc["series"].as_array()? {
        for slice in series["data"].as_array()? {
            let t = slice["ts_ms"].as_i64().unwrap_or(0) / 1000;
            for b in slice["value"]["bins"].as_array().into_iter().flatten() {
                let key = (b[0].as_i64()?, b[1].as_i64()?);
                *out.entry(t).or_default().entry(key).or_insert(0) += b[2].as_u64()?;
            }
        }
    }
    Some(out)
}

fn all_bins(slices: &Slices) -> BTreeMap<(i64, i64), u64> {
    let mut out = BTreeMap::new();
    for bins in slices.values() {
        for (k, c) in bins {
            *out.entry(*k).or_insert(0) += c;
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    Unsent,
    Acked,
    Unknown,
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn push_through_a_60s_core_outage_and_an_agent_kill9_loses_nothing_and_counts_nothing_twice() {
    let dir = fresh_dir("agent-push");
    let core_port = free_port();
    let agent_port = free_port();
    let now_ms = now_s() * 1000;
    let ts_ms = (now_ms / 3_600_000) * 3_600_000 + 60_000;
    let ts_ms = if ts_ms > now_ms {
        ts_ms - 3_600_000
    } else {
        ts_ms
    };
    let core_data = dir.join("core");
    let agent_dir = dir.join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let started_s = now_s();
    let mut the_core = Some(core(&core_data, core_port));
    let mut the_agent = Some(agent(&agent_dir, core_port, agent_port));

    let fates = Arc::new(Mutex::new(vec![Fate::Unsent; BODIES]));
    let sent = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let pusher = {
        let (fates, sent, stop) = (fates.clone(), sent.clone(), stop.clone());
        std::thread::spawn(move || {
            let client = client();
            let url = format!("http://127.0.0.1:{agent_port}/write");
            for i in 0..BODIES {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let ok = client
                    .post(&url)
                    .body(body(i, ts_ms))
                    .send()
                    .is_ok_and(|r| r.status().is_success());
                fates.lock().unwrap()[i] = if ok { Fate::Acked } else { Fate::Unknown };
                sent.store(i + 1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(PUSH_EVERY_MS));
            }
        })
    };
    let wait_sent = |n: usize| {
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        while sent.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "the pusher stalled");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    wait_sent(100);
    the_core.take().unwrap().kill9();
    println!("core killed at body {}", sent.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(OUTAGE_MS));
    // The backlog the agent reports while the core is away.
    let health: serde_json::Value = client()
        .get(format!("http://127.0.0.1:{agent_port}/health"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let backlog = health["backlog_bytes"].as_u64().unwrap();
    println!("agent backlog after the outage: {backlog} bytes");
    assert!(
        backlog > 0,
        "the agent holds what the core has not acknowledged"
    );
    the_core = Some(core(&core_data, core_port));
    println!("core back at body {}", sent.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(1_000));
    the_agent.take().unwrap().kill9();
    println!("agent killed at body {}", sent.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_millis(500));
    the_agent = Some(agent(&agent_dir, core_port, agent_port));
    pusher.join().unwrap();
    stop.store(true, Ordering::Relaxed);

    let fates = fates.lock().unwrap().clone();
    let acked: Vec<usize> = (0..BODIES).filter(|i| fates[*i] == Fate::Acked).collect();
    println!("bodies acknowledged by the agent {}", acked.len());
    assert!(acked.len() > BODIES / 2, "most bodies are acknowledged");
    let (start_s, end_s) = (ts_ms / 1000 - 60, ts_ms / 1000 + 60);
    let query = "and(__name:agent_app_lat)";
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        let bins = all_bins(&core_hist(core_port, query, start_s, end_s, 3600).unwrap_or_default());
        let missing = acked
            .iter()
            .filter(|i| !bins.contains_key(&bin(**i)))
            .count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} acknowledged bodies never reached the core"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_millis(3_000));
    let bins = all_bins(&core_hist(core_port, query, start_s, end_s, 3600).unwrap());
    for (i, fate) in fates.iter().enumerate() {
        let got = bins.get(&bin(i)).copied().unwrap_or(0);
        let ok = match fate {
            Fate::Acked => got == count(i),
            Fate::Unknown => got == 0 || got == count(i),
            Fate::Unsent => got == 0,
        };
        assert!(
            ok,
            "body {i} ({fate:?}) at the core {got} times its count {}",
            count(i)
        );
    }

    // Stop the agent (its last periods had time to reach the core while the bodies did): from
    // here on no second is added, so the count below is of the agent's whole life.
    std::thread::sleep(Duration::from_secs(2 * AGENT_PERIOD_S));
    the_agent.take().unwrap().kill9();
    let ended_s = now_s();
    std::thread::sleep(Duration::from_secs(1));

    // The host's CPU: one sample per second, never two for the same second.
    let query = format!("and(__name:cpu_busy_ratio,cpu:total,host:{HOST})");
    let slices = core_hist(core_port, &query, started_s, ended_s + 10, CORE_PERIOD_S).unwrap();
    let total: u64 = slices.values().flat_map(|b| b.values()).sum();
    let elapsed = (ended_s - started_s) as u64;
    println!(
        "cpu_busy_ratio samples at the core: {total} over {elapsed} s, {} slices",
        slices.len()
    );
    for (t, b) in &slices {
        let n: u64 = b.values().sum();
        assert!(
            n <= CORE_PERIOD_S as u64 + 2,
            "slice {t}: {n} one-second samples in {CORE_PERIOD_S} s"
        );
    }
    assert!(
        total <= elapsed + 2,
        "{total} one-second samples in {elapsed} s: some counted twice"
    );
    // Only the agent's own kill loses seconds (its unfinished period, the restart).
    assert!(
        total + 15 >= elapsed,
        "{total} of {elapsed} seconds reached the core"
    );
    // Every contracted gauge reached the core with the host tag.
    for name in [
        "mem_available_bytes",
        "load1",
        "net_bytes_total",
        "agent_backlog_bytes",
        "fs_size_bytes",
    ] {
        let url = format!("http://127.0.0.1:{core_port}/api/strata/v1/find?query=and(__name:{name},host:{HOST},__check:agent-{HOST})");
        let doc: serde_json::Value = client()
            .get(url)
            .bearer_auth(TOKEN)
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert!(
            doc.as_array().is_some_and(|a| !a.is_empty()),
            "{name} not at the core: {doc}"
        );
    }
    drop(the_core);
}
