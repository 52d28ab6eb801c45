#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Crashes in the middle of building rollups, compacting and applying retention: a child
//! process (this binary re-executed) writes late data, flushes, and is stopped at every step of
//! a rollup build and a compaction (`STRATA_STORE_FAILPOINT`), then `kill -9`ed at random points
//! of a write/flush/build/compact loop. After each crash the store reopens with no double count
//! and no loss: every per-slice read at every level equals a naive model of what was
//! acknowledged, no file outside the manifest is left, and a full build afterwards reads the
//! same.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use store::internals::manifest::Manifest;
use store::internals::rollup::{FAILPOINT_ENV, FAILPOINT_EXIT_CODE};
use store::{Store, StoreError};
use support::*;

const CHILD_ENV: &str = "ROLLUP_CRASH_CHILD";
const INITIAL_SAMPLES: usize = 1_000;
const LATE_SAMPLES: usize = 60;
/// Late data lands in the first coarse partition (so half the rollups are rebuilt each time).
const LATE_END_MS: i64 = 17_280_000;
const KILL_ITERATIONS: u64 = 6;
const STEPS: [&str; 8] = [
    "rollup-first-file",
    "rollup-files-written",
    "rollup-dir-synced",
    "rollup-committed",
    "rollup-cleaned",
    "compact-written",
    "compact-committed",
    "rollup-committed",
];

fn open_retry(dir: &Path) -> Store {
    for _ in 0..500 {
        match Store::open(dir, opts()) {
            Err(StoreError::Journal(journal::Error::Locked)) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other.unwrap(),
        }
    }
    panic!("store stayed locked");
}

/// The delete a child makes in iteration `k` (of `NUMERIC`).
fn delete_range(k: u64) -> (i64, i64) {
    let start = 1_000_000 + k as i64 * 700_000;
    (start, start + 450_123)
}

fn child_main() {
    let dir = std::env::var("STORE_DIR").unwrap();
    let k: u64 = std::env::var("STORE_ITER").unwrap().parse().unwrap();
    let mode = std::env::var("STORE_MODE").unwrap();
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        std::process::exit(3);
    });
    let store = open_retry(Path::new(&dir));
    if mode == "step" {
        Model::write(
            &store,
            &Model::generate(100 + k, LATE_SAMPLES, 0, LATE_END_MS),
        );
        store.flush().unwrap();
        let step = std::env::var(FAILPOINT_ENV).unwrap();
        if step.starts_with("compact") {
            let (a, b) = delete_range(k);
            store.delete(&[id(&store, NUMERIC)], a, b).unwrap();
            store.compact(SPAN_MS).unwrap();
        } else {
            store.build_rollups(SPAN_MS).unwrap();
        }
        // The failpoint was not reached.
        std::process::exit(0);
    }
    // Kill mode: announce each batch before and after it is acknowledged.
    for j in 0.. {
        let seed = 1_000 * (k + 1) + j;
        println!("writing {seed}");
        Model::write(&store, &Model::generate(seed, LATE_SAMPLES, 0, LATE_END_MS));
        println!("wrote {seed}");
        store.flush().unwrap();
        store.build_rollups(SPAN_MS).unwrap();
        if j % 3 == 2 {
            store.compact(SPAN_MS).unwrap();
        }
    }
}

fn child(dir: &Path, k: u64, mode: &str, failpoint: Option<&str>) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env(CHILD_ENV, "1")
        .env("STORE_DIR", dir)
        .env("STORE_ITER", k.to_string())
        .env("STORE_MODE", mode)
        .env_remove(FAILPOINT_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(f) = failpoint {
        c.env(FAILPOINT_ENV, f);
    }
    c
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// After a crash: the files on disk are exactly the manifest's, every read equals the model,
/// and a full build reads the same from rollups.
fn verify(dir: &Path, model: &Model, what: &str) {
    let store = open_retry(dir);
    let m = Manifest::load(&journal::vfs::RealFs, dir).unwrap().unwrap();
    let listed: BTreeSet<String> = m.blocks.iter().map(|r| r.id.file_name()).collect();
    assert!(
        names(&dir.join("blocks")) == listed,
        "{what}: blocks/ holds unlisted files"
    );
    for l in &m.levels {
        let listed: BTreeSet<String> = l.rollups.iter().map(|r| r.id.file_name()).collect();
        let on_disk = names(&store::internals::rollup::level_dir(dir, l.period_ms));
        assert!(
            on_disk == listed,
            "{what}: level {} holds unlisted files",
            l.period_ms
        );
    }
    check_all(&store, model, &format!("{what}, reopened"));
    store.build_rollups(SPAN_MS).unwrap();
    let used = check_all(&store, model, &format!("{what}, rebuilt"));
    assert!(
        used[1..].iter().all(|&u| u > 0),
        "{what}: rollups unused: {used:?}"
    );
    store.close().unwrap();
}

fn main() {
    if std::env::var(CHILD_ENV).is_ok() {
        child_main();
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut model = Model::default();
    {
        let store = Store::open(dir, opts()).unwrap();
        model.write_random(&store, 1, INITIAL_SAMPLES, 0, SPAN_MS);
        store.flush().unwrap();
        store.build_rollups(SPAN_MS).unwrap();
        store.close().unwrap();
    }
    // Every step of a build (first a rebuild of stale rollups) and of a compaction.
    for (k, step) in STEPS.iter().enumerate() {
        let k = k as u64;
        let status = child(dir, k, "step", Some(step)).status().unwrap();
        assert_eq!(
            status.code(),
            Some(FAILPOINT_EXIT_CODE),
            "the child did not stop at {step}"
        );
        model.add(&Model::generate(100 + k, LATE_SAMPLES, 0, LATE_END_MS));
        if step.starts_with("compact") {
            let (a, b) = delete_range(k);
            model.delete(NUMERIC, a, b);
        }
        verify(dir, &model, &format!("stopped at {step}"));
        println!("failpoint {step}: ok");
    }
    // kill -9 at random points of write / flush / build / compact.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for k in 0..KILL_ITERATIONS {
        let mut c = child(dir, k, "kill", None).spawn().unwrap();
        let stdout = c.stdout.take().unwrap();
        let lines = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(300..4_000)));
        c.kill().unwrap();
        c.wait().unwrap();
        let lines = lines.join().unwrap();
        let mut maybe: Option<u64> = None;
        for line in &lines {
            if let Some(seed) = line.strip_prefix("writing ") {
                maybe = Some(seed.parse().unwrap());
            } else if let Some(seed) = line.strip_prefix("wrote ") {
                let seed: u64 = seed.parse().unwrap();
                model.add(&Model::generate(seed, LATE_SAMPLES, 0, LATE_END_MS));
                maybe = None;
            }
        }
        // A batch written but not seen acknowledged may or may not be there (it is one record).
        if let Some(seed) = maybe {
            let mut with = model.clone();
            with.add(&Model::generate(seed, LATE_SAMPLES, 0, LATE_END_MS));
            let store = open_retry(dir);
            let n = store
                .view()
                .unwrap()
                .raw_numeric(id(&store, NUMERIC), i64::MIN, i64::MAX)
                .unwrap()
                .len();
            store.close().unwrap();
            if n == with.numeric.len() && n != model.numeric.len() {
                model = with;
            }
        }
        verify(
            dir,
            &model,
            &format!("kill {k} after {} lines", lines.len()),
        );
        println!("kill -9 #{k} ({} lines of output): ok", lines.len());
    }
}
