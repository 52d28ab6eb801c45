#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Exactly-once effect under resends, reordering, flushes and `kill -9`.
//!
//! The parent is a sender of `BATCHES` numbered batches (one source, one epoch) with at most
//! `IN_FLIGHT_MAX` in flight. It talks to a child process — this test binary re-executed with
//! `STORE_CHILD` set, which owns the store — over its stdin and stdout: `w <seq>` writes batch
//! `seq` on a thread of its own (so writes of one batch race), `f` flushes. The child answers
//! `a <seq> <applied|duplicate>` once `write` returned. The parent sends in a random order inside
//! its window, resends batches in flight and ones already acknowledged, asks for flushes, and
//! kills the child with SIGKILL at random moments, then starts a new one on the same store and
//! resends everything unacknowledged. At the end every batch's histogram counts and counter
//! values must be in the store exactly once.
//!
//! Each seed is one random run; `SEEDS` of them make the property test (a failing seed is
//! printed and can be replayed alone with `EXACTLY_ONCE_SEED`).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hist::Histogram;
use store::key::StreamKey;
use store::{Origin, SourceId, Store, StoreError, StoreOptions, WriteBatch, Written};

const CHILD_ENV: &str = "STORE_CHILD";
const BATCHES: u64 = 300;
const IN_FLIGHT_MAX: u64 = store::IN_FLIGHT_MAX;
const SEEDS: u64 = 4;
const EPOCH: u64 = 7;

fn key(text: &str) -> StreamKey {
    StreamKey::parse(text).unwrap()
}

/// Batch `seq`: `seq % 5 + 1` observations of `seq % 40` in a histogram series, the counter
/// value `seq` at its own millisecond, and a cumulative-free plain numeric total.
fn batch(seq: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    let ts_ms = 1_700_000_000_000 + (seq as i64) * 250;
    let mut h = Histogram::new();
    h.insert_n((seq % 40) as f64, seq % 5 + 1);
    b.histogram(&key("latency|ST[app:x]"), ts_ms, &h).unwrap();
    b.numeric(&key("requests"), ts_ms, seq as f64).unwrap();
    b.set_origin(Some(Origin {
        source: SourceId::new("sender-1").unwrap(),
        epoch: EPOCH,
        seq,
        received_ms: ts_ms,
    }));
    b
}

fn open_retry(dir: &Path) -> Store {
    for _ in 0..500 {
        // Small WAL segments: every child start and flush preallocates less.
        let options = StoreOptions {
            wal_segment_size_bytes: 1 << 20,
            ..StoreOptions::default()
        };
        match Store::open(dir, options) {
            Err(StoreError::Journal(journal::Error::Locked)) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other.unwrap(),
        }
    }
    panic!("store stayed locked");
}

fn child_main() {
    let dir = std::env::var("STORE_DIR").unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        std::process::exit(3);
    });
    let store = std::sync::Arc::new(open_retry(Path::new(&dir)));
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let (store, out) = (store.clone(), out.clone());
        if line == "f" {
            store.flush().unwrap();
            continue;
        }
        let seq: u64 = line.strip_prefix("w ").unwrap().parse().unwrap();
        std::thread::spawn(move || {
            let written = store.write(&batch(seq)).unwrap();
            let word = match written {
                Written::Applied => "applied",
                Written::Duplicate => "duplicate",
            };
            let mut out = out.lock().unwrap();
            writeln!(out, "a {seq} {word}").unwrap();
            out.flush().unwrap();
        });
    }
    // The parent closed stdin: wait for writes in progress by waiting for the kill.
    std::thread::sleep(Duration::from_secs(120));
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A running child: its stdin, and a channel of the acknowledgements it printed.
struct Writer {
    child: Child,
    stdin: ChildStdin,
    acks: mpsc::Receiver<(u64, bool)>,
}

fn start(dir: &Path) -> Writer {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "writer")
        .env("STORE_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, acks) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { return };
            let mut words = line.split(' ');
            assert_eq!(words.next(), Some("a"));
            let seq = words.next().unwrap().parse().unwrap();
            let applied = words.next() == Some("applied");
            if tx.send((seq, applied)).is_err() {
                return;
            }
        }
    });
    Writer { child, stdin, acks }
}

impl Writer {
    fn send(&mut self, line: &str) {
        // A write to a child being killed fails: the batch simply was not delivered.
        let _ = writeln!(self.stdin, "{line}");
        let _ = self.stdin.flush();
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One random run; returns how many times the child was killed.
fn run(seed: u64) -> u64 {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed);
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut applied_acks = 0u64;
    let mut kills = 0u64;
    let mut writer = start(tmp.path());
    // Lines sent to the current child and not answered yet: bounded, so the child (a thread per
    // line) is never flooded faster than its group commits acknowledge.
    let mut unanswered = 0u64;
    // Each child is killed once it acknowledged this many batches (and a few ms more).
    let mut acks_before_kill = 5 + rng.below(60);
    let mut acks_this_child = 0u64;
    let started = std::time::Instant::now();
    while acked.len() < BATCHES as usize {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "seed {seed}: no progress ({} of {BATCHES} acknowledged)",
            acked.len()
        );
        // The window: from the lowest unacknowledged batch, IN_FLIGHT_MAX wide.
        let low = (0..BATCHES).find(|s| !acked.contains(s)).unwrap();
        let high = (low + IN_FLIGHT_MAX).min(BATCHES);
        let busy = unanswered >= 2 * IN_FLIGHT_MAX;
        match rng.below(100) {
            _ if busy => {}
            0..=69 => {
                let seq = low + rng.below(high - low);
                writer.send(&format!("w {seq}"));
                unanswered += 1;
            }
            70..=79 => {
                // A resend of something acknowledged long ago (or of the lowest one).
                let seq = rng.below(low.max(1));
                writer.send(&format!("w {seq}"));
                unanswered += 1;
            }
            80..=82 => writer.send("f"),
            _ if acks_this_child >= acks_before_kill => {
                // Let some acknowledgements arrive, then kill -9.
                std::thread::sleep(Duration::from_millis(rng.below(30)));
                // What it printed before the kill is read below or lost with its pipe.
                while let Ok((seq, applied)) = writer.acks.try_recv() {
                    acked.insert(seq);
                    applied_acks += u64::from(applied);
                }
                writer.kill();
                kills += 1;
                writer = start(tmp.path());
                unanswered = 0;
                acks_this_child = 0;
                acks_before_kill = 5 + rng.below(60);
            }
            _ => {}
        }
        let wait = Duration::from_millis(if busy { 20 } else { 1 });
        if let Ok((seq, applied)) = writer.acks.recv_timeout(wait) {
            acked.insert(seq);
            applied_acks += u64::from(applied);
            unanswered = unanswered.saturating_sub(1);
            acks_this_child += 1;
        }
        while let Ok((seq, applied)) = writer.acks.try_recv() {
            acked.insert(seq);
            applied_acks += u64::from(applied);
            unanswered = unanswered.saturating_sub(1);
            acks_this_child += 1;
        }
    }
    writer.kill();
    assert!(
        applied_acks <= BATCHES,
        "seed {seed}: more applied than batches"
    );
    verify(tmp.path(), seed);
    kills
}

/// Every batch is in the store exactly once: histogram counts per value, counter values.
fn verify(dir: &Path, seed: u64) {
    let store = open_retry(dir);
    let view = store.view().unwrap();
    let id = |k: &str| store.index().lookup(&key(k)).unwrap().unwrap().0;
    let mut total = Histogram::new();
    for (_, h) in view
        .raw_histograms(id("latency|ST[app:x]"), i64::MIN, i64::MAX)
        .unwrap()
    {
        total.merge(&h);
    }
    let mut expected = Histogram::new();
    for seq in 0..BATCHES {
        expected.insert_n((seq % 40) as f64, seq % 5 + 1);
    }
    assert_eq!(total, expected, "seed {seed}: histogram counts");
    let counters = view
        .raw_numeric(id("requests"), i64::MIN, i64::MAX)
        .unwrap();
    assert_eq!(
        counters.len() as u64,
        BATCHES,
        "seed {seed}: counter samples"
    );
    let sum: f64 = counters.iter().map(|(_, v)| v).sum();
    assert_eq!(sum, (BATCHES * (BATCHES - 1) / 2) as f64, "seed {seed}");
    drop(view);
    assert_eq!(store.source_count().unwrap(), 1);
    // Reopened after a clean close (the state file), a resend is still a duplicate.
    store.close().unwrap();
    let store = open_retry(dir);
    for seq in [0, BATCHES / 2, BATCHES - 1] {
        assert_eq!(store.write(&batch(seq)).unwrap(), Written::Duplicate);
    }
}

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
        return;
    }
    let seeds: Vec<u64> = match std::env::var("EXACTLY_ONCE_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (1..=SEEDS).map(|s| s * 0x9e37_79b9).collect(),
    };
    let mut kills = 0;
    for seed in seeds {
        println!("exactly_once: seed {seed}");
        kills += run(seed);
    }
    assert!(kills > 0, "no run killed its writer");
    println!("exactly_once: ok ({kills} kills)");
}
