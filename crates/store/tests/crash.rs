#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `kill -9` of a child process writing at full speed, many times over one store: every batch
//! the child saw acknowledged is present after reopen, and nothing it did not write appears.
//!
//! The child is this test binary re-executed with `STORE_CHILD` set, so the binary has its own
//! `main` (`harness = false`). The child runs `THREADS` writer threads; thread `t` writes batch
//! ids `base + i * THREADS + t` and prints each id once `write` has returned. A batch with id `b`
//! holds the numeric sample `(b, b as f64)` in `crash|ST[t:<t>]`, the same in a series created
//! every `NEW_SERIES_EVERY` batches (so new series are acknowledged all the time), and one
//! histogram observation in `crash_h` — one WAL record, so all three appear or none does.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hist::Histogram;
use store::key::StreamKey;
use store::{Store, StoreError, StoreOptions, WriteBatch};

const CHILD_ENV: &str = "STORE_CHILD";
const THREADS: u64 = 2;
const NEW_SERIES_EVERY: u64 = 16;
const ITERATIONS: u64 = 12;
/// Batch ids of iteration `k` start at `k * ITERATION_IDS`.
const ITERATION_IDS: u64 = 1 << 32;

fn key(text: &str) -> StreamKey {
    StreamKey::parse(text).unwrap()
}

fn group_key(t: u64, b: u64) -> StreamKey {
    key(&format!(
        "crash_new|ST[g:{},t:{t}]",
        b / (NEW_SERIES_EVERY * THREADS)
    ))
}

/// Opens the store, waiting out the journal lock of a child that is still being reaped.
fn open_retry(dir: &Path) -> Store {
    for _ in 0..500 {
        match Store::open(dir, StoreOptions::default()) {
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
    let base: u64 = std::env::var("STORE_BASE").unwrap().parse().unwrap();
    // A child must never outlive a broken parent for long.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        std::process::exit(3);
    });
    let store = std::sync::Arc::new(open_retry(Path::new(&dir)));
    // Flushes all the time, so kills land in every step of a flush too (freeze, block writes,
    // manifest replacement, checkpoint advance, purge).
    {
        let store = store.clone();
        std::thread::spawn(move || loop {
            store.flush().unwrap();
            std::thread::sleep(Duration::from_millis(3));
        });
    }
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let series = key(&format!("crash|ST[t:{t}]"));
                let h = key("crash_h");
                for i in 0.. {
                    let b = base + i * THREADS + t;
                    let mut batch = WriteBatch::new();
                    batch.numeric(&series, b as i64, b as f64).unwrap();
                    batch.numeric(&group_key(t, b), b as i64, b as f64).unwrap();
                    let mut one = Histogram::new();
                    one.insert(1.0);
                    batch.histogram(&h, b as i64, &one).unwrap();
                    store.write(&batch).unwrap();
                    println!("{b}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
}

/// Runs one child until it has acknowledged `acks_min` batches, kills it, returns every id it
/// printed as a whole line.
fn run_child(dir: &Path, base: u64, acks_min: usize) -> Vec<u64> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "writer")
        .env("STORE_DIR", dir)
        .env("STORE_BASE", base.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut acked = Vec::new();
    let mut line = Vec::new();
    let mut killed = false;
    loop {
        line.clear();
        if out.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        // A line cut by the kill has no newline: it was not printed, so not counted.
        if line.last() == Some(&b'\n') {
            acked.push(std::str::from_utf8(&line).unwrap().trim().parse().unwrap());
        }
        if !killed && acked.len() >= acks_min {
            child.kill().unwrap(); // SIGKILL
            killed = true;
        }
    }
    let status = child.wait().unwrap();
    assert!(killed, "child ended by itself: {status:?}");
    acked
}

/// Every acknowledged batch is present; everything present was written by some child (value =
/// timestamp, id in a range a child wrote, at most one unacknowledged batch per thread beyond).
fn verify(store: &Store, acked: &BTreeSet<u64>, bounds: &[(u64, u64)]) {
    let view = store.view().unwrap();
    let id = |k: &StreamKey| store.index().lookup(k).unwrap().map(|(id, _)| id);
    let mut present = BTreeSet::new();
    for t in 0..THREADS {
        let sid = id(&key(&format!("crash|ST[t:{t}]")));
        for (ts, v) in sid
            .map(|s| view.raw_numeric(s, i64::MIN, i64::MAX).unwrap())
            .unwrap_or_default()
        {
            assert_eq!(ts as f64, v, "invented value");
            let b = ts as u64;
            assert_eq!(b % THREADS, t, "sample in the wrong series");
            let ok = bounds
                .iter()
                .any(|&(lo, hi)| (lo..=hi + THREADS).contains(&b));
            assert!(ok, "batch {b} was never written");
            present.insert(b);
        }
    }
    for &b in acked {
        assert!(present.contains(&b), "acknowledged batch {b} lost");
        let sid = id(&group_key(b % THREADS, b)).expect("acknowledged new series lost");
        assert_eq!(
            view.raw_numeric(sid, b as i64, b as i64 + 1).unwrap(),
            vec![(b as i64, b as f64)]
        );
    }
    let h = id(&key("crash_h")).unwrap();
    let total: u64 = view
        .raw_histograms(h, i64::MIN, i64::MAX)
        .unwrap()
        .iter()
        .map(|(_, h)| h.sample_count())
        .sum();
    assert_eq!(
        total,
        present.len() as u64,
        "histogram and numeric samples disagree"
    );
}

fn kill9_writer_many_iterations() {
    let tmp = tempfile::tempdir().unwrap();
    let mut acked = BTreeSet::new();
    let mut bounds = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    // Reopens that replayed the WAL from a flushed checkpoint on top of blocks.
    let mut checkpointed = 0;
    for k in 0..ITERATIONS {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let acks_min = 10 + (seed >> 33) as usize % 120;
        let base = k * ITERATION_IDS;
        let got = run_child(tmp.path(), base, acks_min);
        assert!(got.len() >= acks_min);
        bounds.push((base, got.iter().copied().max().unwrap()));
        acked.extend(got);
        let store = open_retry(tmp.path());
        let report = store.replay_report();
        if report.from_offset > 0 && report.blocks > 0 && report.records > 0 {
            checkpointed += 1;
        }
        verify(&store, &acked, &bounds);
        // Half the time the next child starts from a closed (flushed) store, half the time
        // from one that must replay again.
        if k % 2 == 0 {
            store.close().unwrap();
        }
    }
    assert!(
        checkpointed >= ITERATIONS / 2,
        "only {checkpointed} reopens replayed from a flushed checkpoint"
    );
}

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
        return;
    }
    let tests: [(&str, fn()); 1] = [("kill9_writer_many_iterations", kill9_writer_many_iterations)];
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected = tests.iter().filter(|(name, _)| {
        filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
    });
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in selected {
        let ok = std::panic::catch_unwind(test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored");
    if failed > 0 {
        std::process::exit(101);
    }
}
