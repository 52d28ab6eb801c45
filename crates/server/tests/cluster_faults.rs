//! `strata serve --cluster` on a real 3-broker Kafka 4.1 cluster (`scripts/kafka-cluster`) with
//! three storage nodes on two sides and two fronts, under steady ingest of numerics and
//! histograms sent with the exactly-once headers (a request that failed is resent as it was,
//! to either front, until acknowledged): `kill -9` of a broker, of a storage node, of a front,
//! of a broker and a storage node together, each restarted later; then a storage node's disk
//! wiped and rebuilt from Kafka. Afterwards every
//! acknowledged sample is there on both sides, histogram counts are exact (nothing counted
//! twice), and both sides' answers for every partition are byte-identical.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_common::{client, get_json, now_s, urlencode, Server, BIN};

/// Ingest rounds; each sends one Influx body (numerics) and one httptrap body (histograms).
const ROUNDS: usize = 320;
/// Streams of each kind per body.
const STREAMS: usize = 8;
/// Samples in each histogram sample (two bins: 2 + 1).
const HIST_COUNT: u64 = 3;
const PARTITIONS: u32 = 4;
/// How long one request is resent before the test fails (a write stall).
const RESEND_S_MAX: u64 = 90;

/// The Kafka nodes started by the script, killed (-9) when the test ends however it ends.
struct Kafka {
    dir: PathBuf,
    bootstrap: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-cluster")
}

impl Kafka {
    fn start(dir: &Path, base: u16) -> Kafka {
        let out = Command::new(script())
            .args(["start", "3"])
            .arg(dir)
            .arg(base.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kafka-cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let bootstrap = text
            .lines()
            .find_map(|l| l.strip_prefix("bootstrap="))
            .unwrap()
            .to_owned();
        Kafka {
            dir: dir.to_path_buf(),
            bootstrap,
        }
    }

    fn pid(&self, node: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("node-{node}/pid")))
            .unwrap()
            .trim()
            .to_owned()
    }

    fn kill9(&self, node: usize) {
        let status = Command::new("kill")
            .args(["-9", &self.pid(node)])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn restart(&self, node: usize) {
        let status = Command::new(script())
            .arg("restart")
            .arg(&self.dir)
            .arg(node.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        for node in 1..=3 {
            let _ = Command::new("kill").args(["-9", &self.pid(node)]).status();
        }
    }
}

/// A base port with base..base+3 and base+100..base+103 free.
fn free_base() -> u16 {
    for _ in 0..200 {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        if !(20_000..40_000).contains(&port) {
            continue;
        }
        let free = (0..3)
            .flat_map(|i| [port + i, port + 100 + i])
            .all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return port;
        }
    }
    panic!("no free port range for Kafka");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Cluster {
    topology: PathBuf,
    root: PathBuf,
    ports: Vec<(&'static str, u16)>,
}

impl Cluster {
    fn http(&self, node: &str) -> String {
        let port = self.ports.iter().find(|(n, _)| *n == node).unwrap().1;
        format!("127.0.0.1:{port}")
    }

    fn start(&self, node: &str) -> Server {
        let dir = self.root.join(node);
        Server::start(
            &dir,
            &[
                "--cluster",
                self.topology.to_str().unwrap(),
                "--node",
                node,
                "--statsd",
                "off",
                "--graphite",
                "off",
            ],
        )
    }

    fn status(&self) -> Vec<Value> {
        let out = Command::new(BIN)
            .args(["cluster", "status", "--json", "--cluster"])
            .arg(&self.topology)
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Waits until every owner of every partition is healthy and has applied all of Kafka.
    fn wait_caught_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let rows = self.status();
            let done = rows
                .iter()
                .all(|r| r["health"] == "ok" && r["lag"] == 0 && r["end"].as_i64() > Some(0));
            if done {
                return;
            }
            assert!(Instant::now() < deadline, "not caught up: {rows:?}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Round `i`'s two bodies: numerics at their own second, histograms at their own second.
fn bodies(i: usize, base_s: i64) -> [(String, String); 2] {
    let ts_s = base_s + i as i64;
    let lines: Vec<String> = (0..STREAMS)
        .map(|j| format!("load,k=s{j} v={i} {}", ts_s * 1_000_000_000))
        .collect();
    let hists: Vec<String> = (0..STREAMS)
        .map(|j| {
            format!(
                r#""lat|ST[k:s{j}]": {{"_type": "h", "_value": ["H[1.0e-01]=2", "H[2.0e+00]=1"], "_ts": {}}}"#,
                ts_s * 1000
            )
        })
        .collect();
    [
        ("/api/v2/write?precision=ns".to_owned(), lines.join("\n")),
        (
            "/module/httptrap/load/any".to_owned(),
            format!("{{{}}}", hists.join(",")),
        ),
    ]
}

/// Sends request `seq` until a front acknowledges it; the longest wait seen goes to `stall_ms`.
fn send_until_acked(fronts: &[String], seq: u64, path: &str, body: &str, stall_ms: &AtomicU64) {
    let started = Instant::now();
    let mut attempt = 0usize;
    loop {
        let front = &fronts[attempt % fronts.len()];
        let request = client()
            .post(format!("http://{front}{path}"))
            .header("Strata-Source", "loadgen")
            .header("Strata-Epoch", "1")
            .header("Strata-Sequence", seq.to_string())
            .timeout(Duration::from_secs(20))
            .body(body.to_owned());
        if let Ok(r) = request.send() {
            if r.status().is_success() {
                let waited = started.elapsed().as_millis() as u64;
                stall_ms.fetch_max(waited, Ordering::Relaxed);
                return;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(RESEND_S_MAX),
            "request {seq} not acknowledged within {RESEND_S_MAX} s"
        );
        attempt += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One partition's answer from one node: the numeric and histogram streams. Without the
/// series' activity ranges: the store notes a histogram's activity at the sample's time when
/// written and at its base period's start when it reopens from blocks, so a replica that
/// restarted shows another range for the same data (a store gap, `crates/cluster/STATUS.md`).
fn partition_answer(http: &str, p: u32, start: i64, end: i64) -> (Value, Value) {
    let get = |query: &str| {
        let mut answer = get_json(&format!(
            "http://{http}/api/strata/v1/cluster/p/{p}/fetch?query={}&start={start}&end={end}&period=60",
            urlencode(query)
        ));
        for series in answer["series"].as_array_mut().unwrap() {
            series.as_object_mut().unwrap().remove("activity_ms");
        }
        answer
    };
    (get("and(__name:load_v)"), get("and(__name:lat)"))
}

#[test]
fn acknowledged_writes_survive_broker_and_storage_node_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let kafka = Kafka::start(&tmp.path().join("kafka"), free_base());
    let ports = vec![
        ("a1", free_port()),
        ("a2", free_port()),
        ("b1", free_port()),
    ];
    let topology = tmp.path().join("cluster.toml");
    let node = |name: &str, side: &str, port: u16, roles: &str| {
        format!("[[node]]\nname = \"{name}\"\nside = \"{side}\"\nhttp = \"127.0.0.1:{port}\"\nroles = [{roles}]\n")
    };
    std::fs::write(
        &topology,
        format!(
            "[kafka]\nbootstrap = [{}]\ntopic = \"strata\"\npartitions = {PARTITIONS}\nreplication = 3\n\n{}{}{}",
            kafka
                .bootstrap
                .split(',')
                .map(|b| format!("\"{b}\""))
                .collect::<Vec<_>>()
                .join(", "),
            node("a1", "a", ports[0].1, "\"front\", \"storage\""),
            node("a2", "a", ports[1].1, "\"storage\""),
            node("b1", "b", ports[2].1, "\"front\", \"storage\""),
        ),
    )
    .unwrap();
    let cluster = Cluster {
        topology,
        root: tmp.path().to_path_buf(),
        ports,
    };
    let mut a1 = Some(cluster.start("a1"));
    let mut a2 = Some(cluster.start("a2"));
    let mut b1 = Some(cluster.start("b1"));
    let fronts = vec![cluster.http("a1"), cluster.http("b1")];

    // Steady ingest on another thread; faults on this one as it progresses.
    let base_s = now_s() - 600;
    let progress = Arc::new(AtomicUsize::new(0));
    let stall_ms = Arc::new(AtomicU64::new(0));
    let ingest = {
        let (progress, stall_ms, fronts) = (progress.clone(), stall_ms.clone(), fronts.clone());
        std::thread::spawn(move || {
            for i in 0..ROUNDS {
                for (k, (path, body)) in bodies(i, base_s).iter().enumerate() {
                    let seq = (2 * i + k) as u64;
                    send_until_acked(&fronts, seq, path, body, &stall_ms);
                }
                progress.store(i + 1, Ordering::Release);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let phase = |n: usize| {
        while progress.load(Ordering::Acquire) < n * ROUNDS / 8 {
            assert!(!ingest.is_finished(), "ingest stopped early");
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("phase {n}");
    };
    phase(1);
    kafka.kill9(3);
    phase(2);
    drop(a2.take()); // kill -9 of a storage node
    phase(3);
    a2 = Some(cluster.start("a2"));
    kafka.restart(3);
    phase(4);
    drop(b1.take()); // kill -9 of a front (and the other side's only storage node)
    phase(5);
    b1 = Some(cluster.start("b1"));
    phase(6);
    // A broker and a storage node (also a front) together.
    kafka.kill9(1);
    drop(a1.take());
    phase(7);
    kafka.restart(1);
    a1 = Some(cluster.start("a1"));
    // A storage node that lost its disk rebuilds its partitions from Kafka.
    drop(a2.take());
    std::fs::remove_dir_all(cluster.root.join("a2")).unwrap();
    a2 = Some(cluster.start("a2"));
    ingest.join().unwrap();
    eprintln!(
        "longest wait for an acknowledgement: {} ms",
        stall_ms.load(Ordering::Relaxed)
    );

    cluster.wait_caught_up();
    for row in cluster.status() {
        eprintln!("{row}");
    }
    let start = base_s - base_s.rem_euclid(60) - 60;
    let end = base_s + ROUNDS as i64 + 120;
    // Both sides' copies of every partition answer the same, byte for byte.
    let topology = cluster::Topology::load(&cluster.topology).unwrap();
    for p in 0..PARTITIONS {
        let owners = topology.owners(p);
        assert_eq!(owners.len(), 2);
        let a = partition_answer(&owners[0].http, p, start, end);
        let b = partition_answer(&owners[1].http, p, start, end);
        assert_eq!(a, b, "partition {p}: sides differ");
    }
    // Through a front: every stream, every acknowledged sample, nothing twice.
    for front in &fronts {
        let fetch = |query: &str| {
            get_json(&format!(
                "http://{front}/api/strata/v1/fetch?query={}&start={start}&end={end}&period=60",
                urlencode(query)
            ))
        };
        let numerics = fetch("and(__name:load_v)");
        let series = numerics["series"].as_array().unwrap();
        assert_eq!(series.len(), STREAMS, "{numerics}");
        for s in series {
            let count: u64 = s["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|d| d["count"].as_u64())
                .sum();
            assert_eq!(count, ROUNDS as u64, "{}", s["key"]);
        }
        let hists = fetch("and(__name:lat)");
        let series = hists["series"].as_array().unwrap();
        assert_eq!(series.len(), STREAMS, "{hists}");
        for s in series {
            let count: u64 = s["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|d| d["value"]["bins"].as_array())
                .flatten()
                .filter_map(|bin| bin[2].as_u64())
                .sum();
            assert_eq!(count, ROUNDS as u64 * HIST_COUNT, "{}", s["key"]);
        }
    }
    drop((a1, a2, b1));
}
