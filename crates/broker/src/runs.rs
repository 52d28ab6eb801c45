//! Runs and records: the scheduler's fires become runs on the tokio runtime (at most
//! `runs_max` at once), each run's measurements become samples stamped with the run's scheduled
//! time, and runs finishing close together share one journal record.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use crate::record::{self, Encoder, Origin, Sample, Value};
use crate::sched::Entry;
use crate::spool::Spool;

/// Runs going at once, by default.
pub const RUNS_MAX_DEFAULT: usize = 1000;
/// Fires waiting for a permit; past it a turn is skipped (and counted late).
pub const JOB_QUEUE_MAX: usize = 16_384;
/// Finished runs waiting for the record writer.
pub const RUN_QUEUE_MAX: usize = 8192;
/// A record of runs is closed at this size or after this wait.
pub const RECORD_BYTES_MAX: usize = 1 << 20;
pub const RECORD_DELAY_MS: u64 = 5;

/// One fire, for the runner.
pub struct Job {
    pub entry: Arc<Entry>,
    pub due_ms: u64,
}

/// Per check kind: runs, and runs that failed (down, or could not run).
#[derive(Default)]
pub struct RunStats {
    pub by_kind: Mutex<BTreeMap<String, (u64, u64)>>,
    pub records: AtomicU64,
    pub append_errors: AtomicU64,
}

impl RunStats {
    fn count(&self, kind: &str, failed: bool) {
        let mut m = self.by_kind.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry(kind.to_owned()).or_default();
        e.0 += 1;
        e.1 += u64::from(failed);
    }
}

/// Takes fires and runs them, each bounded by its spec's timeout and all by `permits`.
pub async fn runner(
    mut jobs: mpsc::Receiver<Job>,
    permits: Arc<Semaphore>,
    out: mpsc::Sender<Vec<Sample>>,
    stats: Arc<RunStats>,
) {
    while let Some(job) = jobs.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let out = out.clone();
        let stats = stats.clone();
        tokio::spawn(async move {
            let samples = run_one(&job, &stats).await;
            job.entry.running.store(false, Ordering::Release);
            drop(permit);
            let _ = out.send(samples).await;
        });
    }
}

/// Runs a check once and returns its samples, stamped with the scheduled time and tagged with
/// the check's id. A spec that cannot run still yields `up` 0 and its reason as `status`.
pub async fn run_one(job: &Job, stats: &RunStats) -> Vec<Sample> {
    let spec = &job.entry.spec;
    let ts = job.due_ms as i64;
    let mut tags = vec![("check".to_owned(), spec.id.clone())];
    tags.extend(spec.tags.iter().filter(|t| t.0 != "check").cloned());
    let samples: Vec<Sample> = match checks::run(spec).await {
        Ok(ms) => ms
            .iter()
            .map(|m| {
                let mut s = record::from_measurement(m, ts);
                s.tags.insert(0, ("check".to_owned(), spec.id.clone()));
                dedup_check_tag(&mut s.tags);
                s
            })
            .collect(),
        Err(e) => vec![
            sample("up", &tags, ts, Value::Numeric(0.0)),
            sample("status", &tags, ts, Value::Text(e.to_string())),
        ],
    };
    let up = samples
        .iter()
        .find(|s| s.name == "up")
        .is_some_and(|s| s.value == Value::Numeric(1.0));
    stats.count(&spec.kind, !up);
    samples
}

/// A spec's own `check` tag gives way to the id's.
fn dedup_check_tag(tags: &mut Vec<(String, String)>) {
    let mut seen = false;
    tags.retain(|(c, _)| {
        if c != "check" {
            return true;
        }
        let keep = !seen;
        seen = true;
        keep
    });
}

fn sample(name: &str, tags: &[(String, String)], ts_ms: i64, value: Value) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: tags.to_vec(),
        ts_ms,
        value,
        mode: record::Mode::Set,
    }
}

/// Gathers finished runs into records: a record closes `RECORD_DELAY_MS` after its first run or
/// at `RECORD_BYTES_MAX`, and is appended once the one before is durable (runs finishing meanwhile wait in the queue
/// and share the next).
pub async fn writer(
    mut runs: mpsc::Receiver<Vec<Sample>>,
    spool: Arc<Spool>,
    origin: Origin,
    stats: Arc<RunStats>,
) {
    while let Some(first) = runs.recv().await {
        let mut enc = Encoder::new(origin, now_ms());
        first.iter().for_each(|s| enc.push_sample(s));
        let deadline = tokio::time::Instant::now() + Duration::from_millis(RECORD_DELAY_MS);
        while enc.len() < RECORD_BYTES_MAX {
            match tokio::time::timeout_at(deadline, runs.recv()).await {
                Ok(Some(more)) => more.iter().for_each(|s| enc.push_sample(s)),
                Ok(None) | Err(_) => break,
            }
        }
        // Awaited: the next record gathers whatever finished meanwhile, so appends never pile up.
        match spool.append(enc.finish()).await {
            Ok(_) => stats.records.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!(error = %e, "a record of runs was not journaled");
                stats.append_errors.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

fn now_ms() -> i64 {
    (clock::wall() / 1_000_000) as i64
}
