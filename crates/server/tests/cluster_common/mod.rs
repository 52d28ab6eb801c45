//! What the cluster tests share: an N-broker Kafka started by `scripts/kafka-cluster`, a
//! topology written for named nodes on sides, `strata serve --cluster` processes, `strata
//! cluster status`, and a sender that resends a request with the exactly-once headers until a
//! front acknowledges it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve_common::{client, get_json, urlencode, Server, BIN};

/// How long one request is resent before the test fails (a write stall).
pub const RESEND_S_MAX: u64 = 90;
/// A request acknowledged after this long prints what its failed attempts got.
const STALL_TOLD_MS: u64 = 2_000;

/// The Kafka nodes started by the script, killed (-9) when the test ends however it ends.
pub struct Kafka {
    dir: PathBuf,
    brokers: usize,
    pub bootstrap: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-cluster")
}

impl Kafka {
    /// Starts `brokers` nodes (1 to 9) on `base`.. (controllers on `base + 100`..).
    pub fn start(dir: &Path, brokers: usize) -> Kafka {
        Kafka::start_with_env(dir, brokers, &[])
    }

    /// As [`Kafka::start`], with the script's environment (`KAFKA_RACKS`, `KAFKA_MIN_ISR`,
    /// `KAFKA_HEAP`).
    pub fn start_with_env(dir: &Path, brokers: usize, env: &[(&str, &str)]) -> Kafka {
        let base = free_base(brokers);
        let out = Command::new(script())
            .envs(env.iter().copied())
            .arg("start")
            .arg(brokers.to_string())
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
            brokers,
            bootstrap,
        }
    }

    pub fn pid(&self, node: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("node-{node}/pid")))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// `kill -9` of broker `node` (1-based).
    pub fn kill9(&self, node: usize) {
        eprintln!("{} kill -9 of broker {node}", clock());
        let status = Command::new("kill")
            .args(["-9", &self.pid(node)])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn restart(&self, node: usize) {
        eprintln!("{} restarting broker {node}", clock());
        let status = Command::new(script())
            .arg("restart")
            .arg(&self.dir)
            .arg(node.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits until every partition's in-sync set holds all its replicas (a restarted broker
    /// caught up), so the next fault is a single fault. Asks the brokers' metadata directly:
    /// the Rust client does not expose in-sync sets.
    pub fn wait_in_sync(&self) {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(IN_SYNC_WAIT_S_MAX);
        let mut last = String::new();
        while Instant::now() < deadline {
            for addr in self.bootstrap.split(',') {
                match metadata_lagging(addr) {
                    Ok(0) => {
                        eprintln!(
                            "{} in sync after {} ms ({last})",
                            clock(),
                            started.elapsed().as_millis()
                        );
                        return;
                    }
                    Ok(n) => last = format!("{n} partitions under-replicated"),
                    Err(e) => last = format!("{addr}: {e}"),
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("Kafka not in sync after {IN_SYNC_WAIT_S_MAX} s: {last}");
    }
}

/// The UTC time of day, for the tests' timelines.
pub fn clock() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
        % 86_400_000;
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms % 1000
    )
}

/// How long [`Kafka::wait_in_sync`] waits.
const IN_SYNC_WAIT_S_MAX: u64 = 120;
/// Largest metadata answer read.
const METADATA_BYTES_MAX: usize = 1 << 20;

/// The partitions (of every topic) whose in-sync set is smaller than their replica set, from
/// one Metadata request at version 4: a fixed encoding (before tagged fields) that Kafka 4 still
/// serves, naming each partition's replicas and in-sync set.
fn metadata_lagging(addr: &str) -> std::io::Result<usize> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    // Header v1: api key 3 (Metadata), version 4, correlation id, client id; body: all topics
    // (a null array), no auto-creation.
    let mut req = Vec::new();
    req.extend_from_slice(&3i16.to_be_bytes());
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(&7i32.to_be_bytes());
    req.extend_from_slice(&4i16.to_be_bytes());
    req.extend_from_slice(b"test");
    req.extend_from_slice(&(-1i32).to_be_bytes());
    req.push(0);
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    conn.write_all(&frame)?;
    let mut len = [0u8; 4];
    conn.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len) as usize;
    if len > METADATA_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "metadata answer of {len} bytes"
        )));
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body)?;
    lagging_in(&body)
        .ok_or_else(|| std::io::Error::other("metadata answer cut short or naming no partition"))
}

/// Reads a Metadata v4 answer (after its length): counts partitions with fewer in-sync
/// replicas than replicas, and refuses an answer naming no partition at all.
fn lagging_in(body: &[u8]) -> Option<usize> {
    let mut r = Reader(body);
    r.take(4)?; // correlation id
    r.take(4)?; // throttle time
    for _ in 0..r.i32()? {
        r.take(4)?; // node id
        r.string()?; // host
        r.take(4)?; // port
        r.string()?; // rack (nullable)
    }
    r.string()?; // cluster id (nullable)
    r.take(4)?; // controller id
    let (mut lagging, mut partitions) = (0, 0);
    for _ in 0..r.i32()? {
        r.take(2)?; // error code
        r.string()?; // name
        r.take(1)?; // internal
        for _ in 0..r.i32()? {
            r.take(2 + 4 + 4)?; // error code, partition, leader
            let replicas = r.ids()?;
            let in_sync = r.ids()?;
            partitions += 1;
            lagging += usize::from(in_sync < replicas);
        }
    }
    (partitions > 0).then_some(lagging)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    /// A (nullable) string: an i16 length, −1 for null.
    fn string(&mut self) -> Option<()> {
        let len = i16::from_be_bytes(self.take(2)?.try_into().ok()?);
        self.take(usize::try_from(len).unwrap_or(0)).map(|_| ())
    }
    /// An array of i32 node ids, as its length.
    fn ids(&mut self) -> Option<usize> {
        let n = usize::try_from(self.i32()?).ok()?;
        self.take(4 * n).map(|_| n)
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        for node in 1..=self.brokers {
            let _ = Command::new("kill").args(["-9", &self.pid(node)]).status();
        }
    }
}

/// A base port with base..base+n and base+100..base+100+n free.
fn free_base(n: usize) -> u16 {
    let n = n as u16;
    for _ in 0..200 {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        if !(20_000..40_000).contains(&port) {
            continue;
        }
        let free = (0..n)
            .flat_map(|i| [port + i, port + 100 + i])
            .all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return port;
        }
    }
    panic!("no free port range for Kafka");
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One process of the cluster as the topology names it.
pub struct NodeSpec {
    pub name: &'static str,
    pub side: &'static str,
    /// Roles as the topology lists them, e.g. `&["front", "storage"]`.
    pub roles: &'static [&'static str],
}

pub struct Cluster {
    pub topology: PathBuf,
    pub root: PathBuf,
    pub ports: Vec<(&'static str, u16)>,
}

/// The topology file's text for `nodes` on `ports` (one per node, same order).
fn topology_text(
    bootstrap: &str,
    partitions: u32,
    replication: u32,
    nodes: &[NodeSpec],
    ports: &[(&'static str, u16)],
) -> String {
    let bootstrap = bootstrap
        .split(',')
        .map(|b| format!("\"{b}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut text = format!(
        "[kafka]\nbootstrap = [{bootstrap}]\ntopic = \"strata\"\npartitions = {partitions}\n\
         replication = {replication}\n"
    );
    for (node, (_, port)) in nodes.iter().zip(ports) {
        let roles: Vec<String> = node.roles.iter().map(|r| format!("\"{r}\"")).collect();
        text.push_str(&format!(
            "\n[[node]]\nname = \"{}\"\nside = \"{}\"\nhttp = \"127.0.0.1:{port}\"\nroles = [{}]\n",
            node.name,
            node.side,
            roles.join(", ")
        ));
    }
    text
}

impl Cluster {
    /// Writes `root/cluster.toml` for `nodes` (each on a free port) over `kafka`'s brokers.
    pub fn new(
        root: &Path,
        kafka: &Kafka,
        partitions: u32,
        replication: u32,
        nodes: &[NodeSpec],
    ) -> Cluster {
        let ports: Vec<(&'static str, u16)> = nodes.iter().map(|n| (n.name, free_port())).collect();
        let bootstrap = kafka
            .bootstrap
            .split(',')
            .map(|b| format!("\"{b}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut text = format!(
            "[kafka]\nbootstrap = [{bootstrap}]\ntopic = \"strata\"\npartitions = {partitions}\n\
             replication = {replication}\n"
        );
        for (node, (_, port)) in nodes.iter().zip(&ports) {
            let roles: Vec<String> = node.roles.iter().map(|r| format!("\"{r}\"")).collect();
            text.push_str(&format!(
                "\n[[node]]\nname = \"{}\"\nside = \"{}\"\nhttp = \"127.0.0.1:{port}\"\nroles = [{}]\n",
                node.name,
                node.side,
                roles.join(", ")
            ));
        }
        let topology = root.join("cluster.toml");
        std::fs::write(&topology, text).unwrap();
        Cluster {
            topology,
            root: root.to_path_buf(),
            ports,
        }
    }

    /// Rewrites the topology file for `nodes` (an operator's edit): known nodes keep their
    /// ports, new ones get free ports.
    pub fn rewrite(
        &mut self,
        kafka: &Kafka,
        partitions: u32,
        replication: u32,
        nodes: &[NodeSpec],
    ) {
        let ports: Vec<(&'static str, u16)> = nodes
            .iter()
            .map(|n| {
                let known = self.ports.iter().find(|(name, _)| *name == n.name);
                (n.name, known.map_or_else(free_port, |(_, p)| *p))
            })
            .collect();
        let text = topology_text(&kafka.bootstrap, partitions, replication, nodes, &ports);
        let tmp = self.root.join("cluster.toml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.topology).unwrap();
        for (name, port) in ports {
            if !self.ports.iter().any(|(n, _)| *n == name) {
                self.ports.push((name, port));
            }
        }
    }

    /// `strata cluster apply`: every node of the file restarts and takes it; fails the test
    /// unless the command succeeds.
    pub fn apply(&self) -> String {
        let out = Command::new(BIN)
            .args(["cluster", "apply", "--cluster"])
            .arg(&self.topology)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "cluster apply: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// The usual layout: a1 (front and storage) and a2 (storage) on side a, b1 (front and
    /// storage) on side b, replication 3.
    pub fn three_nodes(root: &Path, kafka: &Kafka, partitions: u32) -> Cluster {
        let front_storage: &'static [&'static str] = &["front", "storage"];
        let node = |name, side, roles| NodeSpec { name, side, roles };
        let nodes = [
            node("a1", "a", front_storage),
            node("a2", "a", &["storage"]),
            node("b1", "b", front_storage),
        ];
        Cluster::new(root, kafka, partitions, 3, &nodes)
    }

    /// The smallest two-sided layout, for one broker: a1 (front and storage) on side a, b1
    /// (storage) on side b, replication 1.
    pub fn two_nodes(root: &Path, kafka: &Kafka, partitions: u32) -> Cluster {
        let nodes = [
            NodeSpec {
                name: "a1",
                side: "a",
                roles: &["front", "storage"],
            },
            NodeSpec {
                name: "b1",
                side: "b",
                roles: &["storage"],
            },
        ];
        Cluster::new(root, kafka, partitions, 1, &nodes)
    }

    pub fn http(&self, node: &str) -> String {
        let port = self.ports.iter().find(|(n, _)| *n == node).unwrap().1;
        format!("127.0.0.1:{port}")
    }

    /// Starts `node`'s process with its data in `root/<node>`; dropping it is a `kill -9`.
    pub fn start(&self, node: &str) -> Server {
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

    /// Starts `nodes` at once, as an operator's init system would: a node does not wait on
    /// peers that are starting too.
    pub fn start_together(&self, nodes: &[&str]) -> Vec<Server> {
        std::thread::scope(|scope| {
            let started: Vec<_> = nodes
                .iter()
                .map(|node| scope.spawn(move || self.start(node)))
                .collect();
            started.into_iter().map(|s| s.join().unwrap()).collect()
        })
    }

    /// `strata cluster status --json`: one row per partition and owner.
    pub fn status(&self) -> Vec<Value> {
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
    /// Waits until every owner applied its whole partition. A node's end offset is Kafka's as
    /// of its last fetch, which waits up to 200 ms for more records: "lag 0" counts only when
    /// a second look a second later (after at least one more fetch) finds the same offsets.
    pub fn wait_caught_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut previous = Vec::new();
        loop {
            let rows = self.status();
            let done = rows
                .iter()
                .all(|r| r["health"] == "ok" && r["lag"] == 0 && r["end"].as_i64() > Some(0));
            let applied: Vec<Value> = rows.iter().map(|r| r["applied"].clone()).collect();
            if done && applied == previous {
                return;
            }
            previous = applied;
            assert!(Instant::now() < deadline, "not caught up: {rows:?}");
            std::thread::sleep(Duration::from_millis(1_000));
        }
    }
}

/// Sends request `seq` (source `loadgen`, epoch 1) until a front acknowledges it, trying the
/// fronts in turn; the longest wait seen goes to `stall_ms`.
pub fn send_until_acked(fronts: &[String], seq: u64, path: &str, body: &str, stall_ms: &AtomicU64) {
    let started = Instant::now();
    let mut attempt = 0usize;
    // What each failed attempt got, told when the wait was long (why writes stalled).
    let mut failures = Vec::new();
    loop {
        let front = &fronts[attempt % fronts.len()];
        let request = client()
            .post(format!("http://{front}{path}"))
            .header("Strata-Source", "loadgen")
            .header("Strata-Epoch", "1")
            .header("Strata-Sequence", seq.to_string())
            .timeout(Duration::from_secs(20))
            .body(body.to_owned());
        let at_ms = started.elapsed().as_millis();
        match request.send() {
            Ok(r) if r.status().is_success() => {
                let waited = started.elapsed().as_millis() as u64;
                stall_ms.fetch_max(waited, Ordering::Relaxed);
                if waited >= STALL_TOLD_MS {
                    eprintln!("{} request {seq} waited {waited} ms: {failures:?}", clock());
                }
                return;
            }
            Ok(r) => {
                let status = r.status();
                let text = r.text().unwrap_or_default();
                failures.push(format!("{at_ms} ms {front}: {status} {text:.160}"));
            }
            Err(e) => failures.push(format!("{at_ms} ms {front}: {e}")),
        }
        assert!(
            started.elapsed() < Duration::from_secs(RESEND_S_MAX),
            "request {seq} not acknowledged within {RESEND_S_MAX} s"
        );
        attempt += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Streams of each kind per ingest body of [`bodies`].
pub const STREAMS: usize = 8;
/// Samples in each histogram sample of [`bodies`] (two bins: 2 + 1).
pub const HIST_COUNT: u64 = 3;

/// Round `i`'s two bodies: numerics (`load_v`) and histograms (`lat`), each at its own second.
pub fn bodies(i: usize, base_s: i64) -> [(String, String); 2] {
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

/// Steady ingest of `rounds` rounds of [`bodies`] on another thread, each request resent until
/// acknowledged, while the test makes faults on its own thread as the rounds progress.
pub struct Load {
    rounds: usize,
    phases: usize,
    progress: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The longest wait since the last phase; `longest_ms` over the phases before.
    stall_ms: std::sync::Arc<AtomicU64>,
    longest_ms: AtomicU64,
    sender: std::thread::JoinHandle<()>,
}

impl Load {
    /// Starts sending; [`Load::phase`] counts in `phases` equal shares of the rounds.
    pub fn start(fronts: Vec<String>, rounds: usize, phases: usize, base_s: i64) -> Load {
        let progress = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stall_ms = std::sync::Arc::new(AtomicU64::new(0));
        let (done, longest) = (progress.clone(), stall_ms.clone());
        let sender = std::thread::spawn(move || {
            for i in 0..rounds {
                for (k, (path, body)) in bodies(i, base_s).iter().enumerate() {
                    let seq = (2 * i + k) as u64;
                    send_until_acked(&fronts, seq, path, body, &longest);
                }
                done.store(i + 1, Ordering::Release);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Load {
            rounds,
            phases,
            progress,
            stall_ms,
            longest_ms: AtomicU64::new(0),
            sender,
        }
    }

    /// Waits until the first `n` shares of the rounds were acknowledged.
    pub fn phase(&self, n: usize) {
        self.reach(n * self.rounds / self.phases, &format!("phase {n}"));
    }

    /// Waits until `n` more rounds than now were acknowledged: a fault made just before lasts
    /// at least that long under load (a fixed phase may already be past when a node's start
    /// was slow).
    pub fn advance(&self, n: usize) {
        let target = self.progress.load(Ordering::Acquire) + n;
        assert!(target <= self.rounds, "advance past the last round");
        self.reach(target, &format!("round {target}"));
    }

    /// Waits until `rounds` rounds were acknowledged; prints the longest wait since the last
    /// call, under `label`.
    fn reach(&self, rounds: usize, label: &str) {
        while self.progress.load(Ordering::Acquire) < rounds {
            assert!(!self.sender.is_finished(), "ingest stopped early");
            std::thread::sleep(Duration::from_millis(20));
        }
        let waited_ms = self.stall_ms.swap(0, Ordering::Relaxed);
        self.longest_ms.fetch_max(waited_ms, Ordering::Relaxed);
        eprintln!(
            "{} {label}; the longest wait for an acknowledgement before it: {waited_ms} ms",
            clock()
        );
    }

    /// Waits for the last round; the longest wait for an acknowledgement, in ms (printed).
    pub fn finish(self) -> u64 {
        self.sender.join().unwrap();
        let stall_ms = self.stall_ms.load(Ordering::Relaxed);
        let stall_ms = stall_ms.max(self.longest_ms.load(Ordering::Relaxed));
        eprintln!("longest wait for an acknowledgement: {stall_ms} ms");
        stall_ms
    }
}

/// One partition's answer from one node, without the series' activity ranges (they differ
/// between a replica that wrote live and one that reopened from blocks: `crates/cluster/STATUS.md`).
pub fn partition_answer(http: &str, p: u32, start: i64, end: i64) -> (Value, Value) {
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

/// Both sides' owners of every partition answer the same; returns how many series each
/// partition holds (numerics + histograms).
pub fn assert_sides_identical(topology: &Path, start: i64, end: i64) -> Vec<usize> {
    let topology = cluster::Topology::load(topology).unwrap();
    (0..topology.kafka.partitions)
        .map(|p| {
            let owners = topology.owners(p);
            assert_eq!(owners.len(), 2, "partition {p}: one owner per side");
            let a = partition_answer(&owners[0].http, p, start, end);
            let b = partition_answer(&owners[1].http, p, start, end);
            assert_eq!(
                a, b,
                "partition {p}: {} and {} differ",
                owners[0].name, owners[1].name
            );
            a.0["series"].as_array().unwrap().len() + a.1["series"].as_array().unwrap().len()
        })
        .collect()
}

/// Through each front: every stream of [`bodies`], `rounds` numeric samples and `rounds` ×
/// [`HIST_COUNT`] histogram samples each (none missing, none twice).
pub fn assert_every_sample_once(fronts: &[String], rounds: usize, start: i64, end: i64) {
    for front in fronts {
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
            assert_eq!(count, rounds as u64, "{}", s["key"]);
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
            assert_eq!(count, rounds as u64 * HIST_COUNT, "{}", s["key"]);
        }
    }
}
