//! Acknowledged samples lost after `kill -9` of a writer at full speed (the target: none).
//!
//! The parent re-executes this binary as a child (`storebench crash-child`) that writes batches
//! of 10,000 numeric samples as fast as it can from several threads with the store's default
//! group-commit durability, and prints each batch id on its own line once `write` returned.
//! The parent `kill -9`s it at a random moment, reopens the store and counts the samples of
//! printed (acknowledged) batches that are missing, and any sample whose value no child could
//! have written. Several iterations share one store, so each reopen also replays the torn tails
//! of earlier kills and must still hold the batches acknowledged before them.
//!
//! Batch `b` holds, for each of [`FIXED_SERIES`] series `k` and each `j` in 0..10, the sample
//! `(ts = base_ms + 10·b + j, value = 1024·b + k)`, where `base_ms` is four days before the run
//! started (recent data: the store's retention, 7 days for raw numerics by default, must not
//! delete it while it is checked), plus the same 10 timestamps in a series created by
//! that batch (`crash_new|ST[batch:b]`), so index durability of new series is checked too.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use store::key::StreamKey;
use store::{Store, StoreError, StoreOptions, WriteBatch};

use crate::measure::JsonObject;

/// Existing series every batch writes to (plus one new series per batch).
pub const FIXED_SERIES: u64 = 999;
/// Samples per series per batch: 1,000 series × 10 = 10,000 samples per batch.
pub const SAMPLES_PER_SERIES: u64 = 10;
pub const BATCH_SAMPLES: u64 = (FIXED_SERIES + 1) * SAMPLES_PER_SERIES;
/// Batch ids of iteration `i` start at `i << ITERATION_ID_SHIFT`.
pub const ITERATION_ID_SHIFT: u32 = 16;
/// Batches one child may write (it is killed long before).
pub const CHILD_BATCHES_MAX: u64 = 1 << ITERATION_ID_SHIFT;
/// Iterations per run: batch ids of all iterations span 500 · 2^16 · 10 ms ≈ 3.8 days of
/// timestamps from `base_ms`, which is [`BASE_AGE_MS`] old: all of it within retention.
pub const ITERATIONS_MAX: u64 = 500;
/// How old the first timestamp of a run is.
pub const BASE_AGE_MS: i64 = 4 * 24 * 3600 * 1000;
pub const THREADS_MAX: u64 = 64;
/// A child exits on its own after this long, so a broken parent cannot leave it running.
pub const CHILD_LIFETIME_MAX: Duration = Duration::from_secs(120);
/// Longest wait for a child to open the store and say it is ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for a reopen while the killed child's journal lock is being released.
const OPEN_RETRY_MAX: u32 = 1000;
const CHILD_COMMAND: &str = "crash-child";

#[derive(Clone, Debug)]
pub struct CrashOptions {
    pub iterations: u64,
    /// Parent directory of the stores; a temporary directory if `None`.
    pub dir: Option<PathBuf>,
    pub seed: u64,
    /// The kill comes uniformly in kill_ms_min..kill_ms_max after the child is ready.
    pub kill_ms_min: u64,
    pub kill_ms_max: u64,
    /// Iterations that share one store before a fresh one is started.
    pub iterations_per_store: u64,
    pub threads: u64,
}

pub fn fixed_key(k: u64) -> Result<StreamKey, String> {
    StreamKey::parse(&format!("crash_fixed|ST[host:h{k}]")).map_err(|e| format!("key: {e}"))
}

fn new_key(b: u64) -> Result<StreamKey, String> {
    StreamKey::parse(&format!("crash_new|ST[batch:{b}]")).map_err(|e| format!("key: {e}"))
}

fn ts_of(base_ms: i64, b: u64, j: u64) -> i64 {
    base_ms + (b * SAMPLES_PER_SERIES + j) as i64
}

fn value_of(b: u64, k: u64) -> f64 {
    (b * 1024 + k) as f64
}

/// Opens the store, waiting while a killed child's journal lock is still held.
fn open_retry(dir: &Path) -> Result<Store, String> {
    for _ in 0..OPEN_RETRY_MAX {
        match Store::open(dir, StoreOptions::default()) {
            Err(StoreError::Journal(journal::Error::Locked)) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(format!("opening {}: {e}", dir.display())),
            Ok(store) => return Ok(store),
        }
    }
    Err(format!("{} stayed locked", dir.display()))
}

/// The child: writes batches `base + i·threads + t` from thread `t` until killed.
pub fn child(dir: &Path, base_ms: i64, base: u64, threads: u64) -> Result<(), String> {
    if threads == 0 || threads > THREADS_MAX {
        return Err(format!(
            "--threads must be 1..={THREADS_MAX}, got {threads}"
        ));
    }
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_LIFETIME_MAX);
        std::process::exit(3);
    });
    let store = Arc::new(open_retry(dir)?);
    let fixed: Arc<Vec<StreamKey>> =
        Arc::new((0..FIXED_SERIES).map(fixed_key).collect::<Result<_, _>>()?);
    say("ready")?;
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, fixed) = (Arc::clone(&store), Arc::clone(&fixed));
            std::thread::spawn(move || -> Result<(), String> {
                let mut batch = WriteBatch::new();
                for i in 0..CHILD_BATCHES_MAX / threads {
                    let b = base + i * threads + t;
                    fill_batch(base_ms, b, &fixed, &mut batch)?;
                    store.write(&batch).map_err(|e| format!("write {b}: {e}"))?;
                    say(&b.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker
            .join()
            .map_err(|_| "a writer thread panicked".to_string())??;
    }
    Ok(())
}

/// Replaces `batch` with batch `b`: the fixed series' samples and those of its new series.
pub fn fill_batch(
    base_ms: i64,
    b: u64,
    fixed: &[StreamKey],
    batch: &mut WriteBatch,
) -> Result<(), String> {
    assert_eq!(fixed.len() as u64, FIXED_SERIES);
    batch.clear();
    for (k, key) in fixed.iter().enumerate() {
        for j in 0..SAMPLES_PER_SERIES {
            batch
                .numeric(key, ts_of(base_ms, b, j), value_of(b, k as u64))
                .map_err(|e| e.to_string())?;
        }
    }
    let fresh = new_key(b)?;
    for j in 0..SAMPLES_PER_SERIES {
        batch
            .numeric(&fresh, ts_of(base_ms, b, j), value_of(b, FIXED_SERIES))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The keys of the fixed series.
pub fn fixed_keys() -> Result<Vec<StreamKey>, String> {
    (0..FIXED_SERIES).map(fixed_key).collect()
}

/// One line to stdout, flushed: once it is out, the parent counts the batch as acknowledged.
fn say(line: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// What one reopen found for the batches acknowledged to one store so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Check {
    pub acked_batches: u64,
    pub lost_samples: u64,
    /// Samples present whose value does not match their batch and series.
    pub invented_samples: u64,
    /// Batches present that the child never reported (written, killed before the print).
    pub unacked_batches_present: u64,
}

/// Counts acknowledged samples missing from `store`; batches present but not acknowledged are
/// counted for iteration `iteration` only (earlier ones were counted by earlier checks).
pub fn check(store: &Store, base_ms: i64, acked: &[u64], iteration: u64) -> Result<Check, String> {
    let err = |e: StoreError| e.to_string();
    let view = store.view().map_err(err)?;
    let mut present: HashMap<u64, u64> = HashMap::new();
    let mut result = Check {
        acked_batches: acked.len() as u64,
        ..Check::default()
    };
    for k in 0..FIXED_SERIES {
        let Some((id, _)) = store
            .index()
            .lookup(&fixed_key(k)?)
            .map_err(|e| e.to_string())?
        else {
            continue;
        };
        for (ts, value) in view.raw_numeric(id, i64::MIN, i64::MAX).map_err(err)? {
            let offset = ts - base_ms;
            let b = (offset / SAMPLES_PER_SERIES as i64) as u64;
            if offset < 0 || b >= ITERATIONS_MAX << ITERATION_ID_SHIFT || value != value_of(b, k) {
                result.invented_samples += 1;
            } else {
                *present.entry(b).or_default() += 1;
            }
        }
    }
    for &b in acked {
        let fixed = present.get(&b).copied().unwrap_or(0);
        let mut fresh = 0;
        if let Some((id, _)) = store
            .index()
            .lookup(&new_key(b)?)
            .map_err(|e| e.to_string())?
        {
            for (_, value) in view
                .raw_numeric(
                    id,
                    ts_of(base_ms, b, 0),
                    ts_of(base_ms, b, SAMPLES_PER_SERIES),
                )
                .map_err(err)?
            {
                if value == value_of(b, FIXED_SERIES) {
                    fresh += 1;
                } else {
                    result.invented_samples += 1;
                }
            }
        }
        result.lost_samples += BATCH_SAMPLES.saturating_sub(fixed + fresh);
    }
    let acked_set: std::collections::HashSet<u64> = acked.iter().copied().collect();
    result.unacked_batches_present = present
        .keys()
        .filter(|&&b| b >> ITERATION_ID_SHIFT == iteration && !acked_set.contains(&b))
        .count() as u64;
    Ok(result)
}

/// Reads the child's lines: `ready` is signalled on `ready`, each complete id line collected.
fn read_child(
    child: &mut Child,
    ready: mpsc::Sender<()>,
) -> Result<std::thread::JoinHandle<Vec<u64>>, String> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| "child has no stdout".to_string())?;
    Ok(std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut ids = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line cut by the kill was never fully printed: not counted.
            let Some(text) = line.strip_suffix(b"\n") else {
                break;
            };
            match std::str::from_utf8(text).ok().map(str::trim) {
                Some("ready") => {
                    let _ = ready.send(());
                }
                Some(id) => {
                    if let Ok(id) = id.parse::<u64>() {
                        ids.push(id);
                    }
                }
                None => {}
            }
        }
        ids
    }))
}

/// The parent: `iterations` kills; returns the JSON summary and whether anything was lost.
pub fn run(opts: &CrashOptions) -> Result<(String, bool), String> {
    if opts.iterations == 0 || opts.iterations > ITERATIONS_MAX {
        return Err(format!(
            "--iterations must be 1..={ITERATIONS_MAX}, got {}",
            opts.iterations
        ));
    }
    if opts.kill_ms_min >= opts.kill_ms_max {
        return Err(format!(
            "--kill-ms-min {} must be below --kill-ms-max {}",
            opts.kill_ms_min, opts.kill_ms_max
        ));
    }
    if opts.iterations_per_store == 0 {
        return Err("--per-store must be at least 1".to_string());
    }
    let scratch;
    let root: &Path = match &opts.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            dir
        }
        None => {
            scratch = tempfile::Builder::new()
                .prefix("storebench-crash-")
                .tempdir()
                .map_err(|e| format!("creating a temporary directory: {e}"))?;
            scratch.path()
        }
    };
    let now_ms = i64::try_from(clock::wall() / 1_000_000).unwrap_or(i64::MAX);
    let base_ms = now_ms - BASE_AGE_MS;
    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut total = Check::default();
    let mut acked: Vec<u64> = Vec::new();
    let (mut child_batches, mut child_wall) = (0u64, Duration::ZERO);
    for iteration in 0..opts.iterations {
        let group = iteration / opts.iterations_per_store;
        let store_dir = root.join(format!("store-{group}"));
        if iteration % opts.iterations_per_store == 0 {
            if group > 0 {
                let old = root.join(format!("store-{}", group - 1));
                std::fs::remove_dir_all(&old)
                    .map_err(|e| format!("removing {}: {e}", old.display()))?;
            }
            acked.clear();
        }
        let base = iteration << ITERATION_ID_SHIFT;
        let mut child = Command::new(&exe)
            .arg(CHILD_COMMAND)
            .arg("--dir")
            .arg(&store_dir)
            .arg("--base-ms")
            .arg(base_ms.to_string())
            .arg("--base")
            .arg(base.to_string())
            .arg("--threads")
            .arg(opts.threads.to_string())
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the child: {e}"))?;
        let (ready_tx, ready_rx) = mpsc::channel();
        let reader = read_child(&mut child, ready_tx)?;
        if ready_rx.recv_timeout(READY_TIMEOUT).is_err() {
            let _ = child.kill();
            let status = child.wait().map_err(|e| e.to_string())?;
            return Err(format!(
                "iteration {iteration}: child never became ready ({status})"
            ));
        }
        let kill_ms = rng.random_range(opts.kill_ms_min..opts.kill_ms_max);
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(kill_ms));
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "iteration {iteration}: child exited early ({status})"
            ));
        }
        child.kill().map_err(|e| format!("kill -9: {e}"))?;
        child
            .wait()
            .map_err(|e| format!("reaping the child: {e}"))?;
        child_wall += started.elapsed();
        let ids = reader
            .join()
            .map_err(|_| "the child reader panicked".to_string())?;
        child_batches += ids.len() as u64;
        acked.extend(&ids);
        let store = open_retry(&store_dir)?;
        let found = check(&store, base_ms, &acked, iteration)?;
        store
            .close()
            .map_err(|e| format!("closing {}: {e}", store_dir.display()))?;
        eprintln!(
            "crash-loss iteration {iteration}: killed after {kill_ms} ms, {} batches acknowledged \
             ({} in this store), lost {} samples, invented {}, unacknowledged batches present {}",
            ids.len(),
            found.acked_batches,
            found.lost_samples,
            found.invented_samples,
            found.unacked_batches_present
        );
        total.lost_samples += found.lost_samples;
        total.invented_samples += found.invented_samples;
        total.unacked_batches_present += found.unacked_batches_present;
    }
    total.acked_batches = child_batches;
    let json = JsonObject::new()
        .str("benchmark", "crash-loss")
        .int("iterations", opts.iterations)
        .int("iterations_per_store", opts.iterations_per_store)
        .int("threads", opts.threads)
        .int("seed", opts.seed)
        .int("kill_ms_min", opts.kill_ms_min)
        .int("kill_ms_max", opts.kill_ms_max)
        .int("acknowledged_batches", child_batches)
        .int("acknowledged_samples", child_batches * BATCH_SAMPLES)
        .int("lost_samples", total.lost_samples)
        .int("invented_samples", total.invented_samples)
        .int(
            "unacknowledged_batches_present",
            total.unacked_batches_present,
        )
        .num(
            "child_samples_per_s",
            (child_batches * BATCH_SAMPLES) as f64 / child_wall.as_secs_f64(),
            0,
        )
        .finish();
    Ok((json, total.lost_samples == 0 && total.invented_samples == 0))
}
