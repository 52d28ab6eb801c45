#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A real full disk: the store on a 3 MiB tmpfs, written until the file system refuses, then
//! grown and reopened. Every batch `write` acknowledged must be there, and the refused ones must
//! not be partly there. Twice: with many samples of small keys (the WAL meets the full disk
//! first) and with few samples of large, incompressible keys (the series index does).
//!
//! No fault injection: the tmpfs is mounted in a private user + mount namespace (`unshare
//! --user --map-root-user --mount`, util-linux), so it needs no root and leaves nothing mounted
//! behind. The test binary re-executes itself inside that namespace (`ENOSPC_CHILD` set; own
//! `main`, `harness = false`), and the child prints `ok <batches>` at the end.

use std::path::Path;
use std::process::Command;

use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

const CHILD_ENV: &str = "ENOSPC_CHILD";
/// Small enough to fill in well under a second, big enough for the store's fixed files.
const TMPFS_SIZE: &str = "3m";
const BATCHES_MAX: u64 = 100_000;
const SERIES_PER_BATCH: u64 = 8;
const SAMPLES_PER_SERIES: i64 = 20;

fn main() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mount_point = tmp.path().join("fs");
    std::fs::create_dir(&mount_point).unwrap();
    let exe = std::env::current_exe().unwrap();
    std::fs::create_dir(mount_point.join("wal")).unwrap();
    std::fs::create_dir(mount_point.join("index")).unwrap();
    let script = format!(
        "mount -t tmpfs -o size={TMPFS_SIZE} strata-enospc {mp}/wal && \
         mount -t tmpfs -o size={TMPFS_SIZE} strata-enospc {mp}/index && exec {exe}",
        mp = mount_point.display(),
        exe = exe.display()
    );
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
        .env(CHILD_ENV, &mount_point)
        .output()
        .expect("running unshare (util-linux) for a private tmpfs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let oks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(oks.len(), 2, "child said {stdout:?} {stderr:?}");
    for line in oks {
        println!("enospc: {line}");
    }
}

/// What fills the disk first.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Many samples per series, short keys: the WAL.
    Samples,
    /// One sample per series, 2 KB keys LZ4 cannot shrink: the series index.
    Keys,
}

impl Shape {
    fn samples_per_series(self) -> i64 {
        match self {
            Shape::Samples => SAMPLES_PER_SERIES,
            Shape::Keys => 1,
        }
    }
}

fn key(shape: Shape, batch: u64, series: u64) -> StreamKey {
    let pad = match shape {
        Shape::Samples => "p".repeat(40),
        Shape::Keys => {
            // xorshift from (batch, series): different in every key, no repeats for LZ4.
            let mut x = (batch << 8 | series) ^ 0x9E37_79B9_7F4A_7C15;
            (0..128)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    format!("{x:016x}")
                })
                .collect()
        }
    };
    // The WAL shape keeps its series from batch to batch, so only the WAL (and the blocks of
    // its flushes) grow; new series every batch would race the index to the full disk.
    let batch = match shape {
        Shape::Samples => 0,
        Shape::Keys => batch,
    };
    StreamKey::parse(&format!(
        "disk_full|ST[batch:{batch},series:{series},pad:{pad}]"
    ))
    .unwrap()
}

/// The times batch `b`'s samples are written at: `[start, end)`.
fn batch_range(shape: Shape, b: u64) -> (i64, i64) {
    let n = shape.samples_per_series();
    (1_000 * b as i64 * n, 1_000 * (b as i64 + 1) * n)
}

fn batch_of(shape: Shape, b: u64) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for s in 0..SERIES_PER_BATCH {
        let k = key(shape, b, s);
        for i in 0..shape.samples_per_series() {
            let ts_ms = 1_000 * (b as i64 * shape.samples_per_series() + i);
            batch.numeric(&k, ts_ms, (b * 1_000 + s) as f64).unwrap();
        }
    }
    batch
}

fn options() -> StoreOptions {
    StoreOptions {
        wal_segment_size_bytes: 256 << 10,
        // Flushes too, so blocks and the manifest also meet the full disk.
        head_samples_max: 4_000,
        background_maintenance: false,
        ..StoreOptions::default()
    }
}

fn child(dir: &Path) {
    run(&dir.join("wal"), Shape::Samples, "Journal(NoSpace)");
    run(&dir.join("index"), Shape::Keys, "Index(Io");
}

/// Fills the file system at `dir` with `shape` until a write fails with an error whose debug
/// text holds `expected`, then grows it and checks the store.
fn run(dir: &Path, shape: Shape, expected: &str) {
    let data = dir.join("store");
    let mut acknowledged = Vec::new();
    let mut failed_at = None;
    let mut error_text = String::new();
    {
        let store = Store::open(&data, options()).unwrap();
        for b in 0..BATCHES_MAX {
            match store.write(&batch_of(shape, b)) {
                Ok(_) => acknowledged.push(b),
                Err(e) => {
                    let text = format!("{e:?} {e}");
                    assert!(
                        text.contains("No space left") || text.contains("NoSpace"),
                        "batch {b}: expected a full-disk error, got {text}"
                    );
                    assert!(text.contains(expected), "{shape:?}: {text}");
                    failed_at = Some(b);
                    error_text = e.to_string();
                    break;
                }
            }
        }
        let failed = failed_at.expect("the 3 MiB file system never filled up");
        assert!(acknowledged.len() > 10, "filled after {failed} batches");
        // Still full: later writes fail too, and nothing panics.
        assert!(store.write(&batch_of(shape, failed + 1)).is_err());
        // Dropped while full: whatever close does must not lose acknowledged data.
    }
    let grown = Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(grown.success(), "remounting the tmpfs bigger");
    let store = Store::open(&data, options()).unwrap();
    let view = store.view().unwrap();
    let index = store.index();
    for &b in &acknowledged {
        for s in 0..SERIES_PER_BATCH {
            let (id, _) = index
                .lookup(&key(shape, b, s))
                .unwrap()
                .unwrap_or_else(|| panic!("acknowledged batch {b}: series {s} missing"));
            let (start, end) = batch_range(shape, b);
            let got = view.raw_numeric(id, start, end).unwrap();
            assert_eq!(
                got.len(),
                shape.samples_per_series() as usize,
                "acknowledged batch {b} series {s}"
            );
            assert!(got.iter().all(|&(_, v)| v == (b * 1_000 + s) as f64));
        }
    }
    // A refused batch is all there or not there at all (it may have reached the WAL before the
    // error), never in part.
    let failed = failed_at.unwrap_or_default();
    for b in [failed, failed + 1] {
        let counts: Vec<usize> = (0..SERIES_PER_BATCH)
            .map(|s| match index.lookup(&key(shape, b, s)).unwrap() {
                Some((id, _)) => {
                    let (start, end) = batch_range(shape, b);
                    view.raw_numeric(id, start, end).unwrap().len()
                }
                None => 0,
            })
            .collect();
        let total: usize = counts.iter().sum();
        assert!(
            total == 0 || total == SERIES_PER_BATCH as usize * shape.samples_per_series() as usize,
            "refused batch {b} partly present: {counts:?}"
        );
    }
    drop(view);
    // And with room again, writing goes on.
    store.write(&batch_of(shape, BATCHES_MAX + 1)).unwrap();
    store.close().unwrap();
    println!(
        "ok {shape:?}: {} batches acknowledged before the disk filled ({error_text})",
        acknowledged.len()
    );
}
