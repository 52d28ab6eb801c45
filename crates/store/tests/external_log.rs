#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A store on an external log (`WalBackend::External`, a cluster partition's store on its Kafka
//! partition) killed with SIGKILL between flushes.
//!
//! The "log" is a fixed list of batches by position, with producer retries in it (a batch sent
//! twice at two positions). A child process — this test binary re-executed with `STORE_CHILD`
//! set — opens the store, applies positions `0..FLUSH_AT`, flushes and prints the checkpoint
//! the flush committed, applies on to `KILL_AT` without flushing, says so, and is killed with
//! SIGKILL. Reopened, the store must have written no WAL, replay nothing, report that
//! checkpoint, and hold exactly the batches below it; the log replayed from the checkpoint to
//! its end (retries included) must leave every batch in the store exactly once.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hist::Histogram;
use store::key::StreamKey;
use store::{Origin, SourceId, Store, StoreError, StoreOptions, WalBackend, WriteBatch, Written};

const CHILD_ENV: &str = "STORE_CHILD";
/// Positions in the log.
const LOG_LEN: u64 = 240;
/// The child flushes after applying the positions below this…
const FLUSH_AT: u64 = 100;
/// …and is killed after applying the positions below this.
const KILL_AT: u64 = 170;

fn key(text: &str) -> StreamKey {
    StreamKey::parse(text).unwrap()
}

/// The sender's sequence number of the batch at `position`: every seventh position is a
/// producer retry of the batch before it.
fn seq_at(position: u64) -> u64 {
    let retries_before = position / 7;
    if position % 7 == 6 {
        position - retries_before - 1
    } else {
        position - retries_before
    }
}

/// Batch `seq`: `seq % 5 + 1` observations of `seq % 40`, and the numeric value `seq`.
fn batch(seq: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    let ts_ms = 1_700_000_000_000 + (seq as i64) * 250;
    let mut h = Histogram::new();
    h.insert_n((seq % 40) as f64, seq % 5 + 1);
    b.histogram(&key("latency|ST[app:x]"), ts_ms, &h).unwrap();
    b.numeric(&key("requests"), ts_ms, seq as f64).unwrap();
    b.set_origin(Some(Origin {
        source: SourceId::new("front-1").unwrap(),
        epoch: 1,
        seq,
        received_ms: ts_ms,
    }));
    b
}

fn options() -> StoreOptions {
    StoreOptions {
        wal: WalBackend::External,
        background_flush: false,
        ..StoreOptions::default()
    }
}

fn apply(store: &Store, positions: std::ops::Range<u64>) -> (u64, u64) {
    let (mut applied, mut duplicates) = (0, 0);
    for p in positions {
        match store
            .write_logged(&batch(seq_at(p)), p, "")
            .unwrap()
            .written
        {
            Written::Applied => applied += 1,
            Written::Duplicate => duplicates += 1,
        }
    }
    (applied, duplicates)
}

fn child_main() {
    let dir = std::env::var("STORE_DIR").unwrap();
    let store = Store::open(&dir, options()).unwrap();
    apply(&store, 0..FLUSH_AT);
    let report = store.flush().unwrap();
    println!("checkpoint {}", report.checkpoint);
    apply(&store, FLUSH_AT..KILL_AT);
    println!("applied");
    std::thread::sleep(Duration::from_secs(120));
}

/// What the store holds: histogram counts and the numeric samples' values, sorted.
fn contents(store: &Store) -> (Histogram, Vec<f64>) {
    let view = store.view().unwrap();
    let id = |k: &str| store.index().lookup(&key(k)).unwrap().unwrap().0;
    let mut total = Histogram::new();
    for (_, h) in view
        .raw_histograms(id("latency|ST[app:x]"), i64::MIN, i64::MAX)
        .unwrap()
    {
        total.merge(&h);
    }
    let mut values: Vec<f64> = view
        .raw_numeric(id("requests"), i64::MIN, i64::MAX)
        .unwrap()
        .iter()
        .map(|(_, v)| *v)
        .collect();
    values.sort_by(f64::total_cmp);
    (total, values)
}

/// What the distinct batches of positions `0..end` add up to.
fn expected(end: u64) -> (Histogram, Vec<f64>) {
    let seqs: std::collections::BTreeSet<u64> = (0..end).map(seq_at).collect();
    let mut h = Histogram::new();
    for &seq in &seqs {
        h.insert_n((seq % 40) as f64, seq % 5 + 1);
    }
    (h, seqs.iter().map(|&s| s as f64).collect())
}

/// Runs the child until it applied past its flush, kills it, returns the flush's checkpoint.
fn run_and_kill(dir: &Path) -> u64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "1")
        .env("STORE_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let checkpoint: u64 = first.strip_prefix("checkpoint ").unwrap().parse().unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "applied");
    child.kill().unwrap();
    child.wait().unwrap();
    checkpoint
}

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let checkpoint = run_and_kill(tmp.path());
    // The checkpoint is the position after the last one applied before the flush (a retry
    // applies nothing).
    let last_applied = (0..FLUSH_AT).rev().find(|p| p % 7 != 6).unwrap();
    assert_eq!(checkpoint, last_applied + 1);
    assert!(
        !tmp.path().join("wal").exists(),
        "a store on an external log wrote a WAL"
    );

    let store = Store::open(tmp.path(), options()).unwrap();
    assert_eq!(
        store.replay_report().records,
        0,
        "nothing local is replayed"
    );
    assert_eq!(store.stats().unwrap().checkpoint, checkpoint);
    assert_eq!(
        contents(&store),
        expected(checkpoint),
        "exactly the last flush"
    );
    // A write without a log position, or below what was applied, is refused.
    assert!(matches!(
        store.write(&batch(0)),
        Err(StoreError::InvalidOptions(_))
    ));

    // The caller's replay: from the checkpoint to the log's end, retries included.
    let (applied, duplicates) = apply(&store, checkpoint..LOG_LEN);
    assert!(matches!(
        store.write_logged(&batch(1_000), checkpoint, ""),
        Err(StoreError::LogPositionBehind { .. })
    ));
    let distinct = |r: std::ops::Range<u64>| {
        r.map(seq_at)
            .collect::<std::collections::BTreeSet<_>>()
            .len() as u64
    };
    assert_eq!(applied, distinct(0..LOG_LEN) - distinct(0..checkpoint));
    assert_eq!(applied + duplicates, LOG_LEN - checkpoint);
    assert_eq!(contents(&store), expected(LOG_LEN), "each record once");

    // Closed cleanly (a flush) and reopened: everything is in the blocks, the checkpoint at
    // the log's end, and a record delivered again is still a duplicate.
    store.close().unwrap();
    let store = Store::open(tmp.path(), options()).unwrap();
    assert_eq!(store.stats().unwrap().checkpoint, LOG_LEN);
    assert_eq!(contents(&store), expected(LOG_LEN));
    let again = store
        .write_logged(&batch(seq_at(LOG_LEN - 1)), LOG_LEN, "")
        .unwrap();
    assert_eq!(again.written, Written::Duplicate);
    println!(
        "external_log: ok (checkpoint {checkpoint}, {applied} replayed, {duplicates} duplicates)"
    );
}
