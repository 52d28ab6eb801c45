//! The benchmark: a workload through `store::Store::write` in process, in batches, with the
//! store's default (group commit) durability, one writer thread.
//!
//! CPU time is the process's (every thread: the journal's flusher and the fsyncs' kernel time
//! count) over open → writes → flush → close, minus the generator's own thread CPU time, which is
//! measured around each chunk it produces and reported on its own. Building each `WriteBatch`
//! from the generated samples is the store API's cost and counts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use store::{Store, StoreOptions, Value, WriteBatch};

use crate::measure::{self, JsonObject};
use crate::workload::{Config, GenValue, Sample, Shape, Workload, CHUNK_SAMPLES_MAX, INTERVAL_MS};

/// The benchmark's batches: 10,000 samples.
pub const BATCH_SAMPLES_DEFAULT: usize = 10_000;
/// Samples generated at a time (`--gen-chunk`), each chunk pushed into the batch before the next
/// is made: about 75 KB of histograms, so they are still in the L2 cache when the store reads
/// them, as a body's are when the server's parser hands them over one by one. A whole batch
/// generated first (10,000) is 7.5 MB, read back from L3 or memory.
pub const GEN_SAMPLES_DEFAULT: usize = 100;

/// One benchmark run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub config: Config,
    /// Store directory: must be absent or empty; a temporary directory (removed after) if `None`.
    pub dir: Option<PathBuf>,
    pub batch_samples: usize,
    /// Also flush the head to blocks after every this many batches (0: only at the end), as the
    /// store's background flusher would on a longer run; those flushes count as store CPU.
    pub flush_every_batches: u64,
    /// Name series by id (`Store::resolve` once per series, then `WriteBatch::push_id`), as a
    /// client that keeps its series ids does, instead of by key on every sample.
    pub by_id: bool,
    /// Samples the generator makes at a time, pushed into the batch before it makes more (the
    /// batch is still `batch_samples`): each sample is fresh when the store reads it, as a
    /// parser's are in the server. `batch_samples` makes every batch at once, as before.
    pub gen_samples: usize,
    /// Generate every chunk before the timed part (memory: the whole workload at once), so a
    /// profiler attached after generation sees only the store's work.
    pub pregen: bool,
    /// Write the second half of the time range first, then the first half, as a broker
    /// forwarding what it stored during an outage does: every sample of the second part lands
    /// in a period its series has already closed (late data).
    pub backfill: bool,
}

/// Runs the benchmark and returns its one-line JSON report, and whether the reopened store
/// held everything written (the report's `check` field says what is missing if not).
pub fn run(opts: &RunOptions) -> Result<(String, bool), String> {
    if opts.gen_samples == 0 {
        return Err("--gen-chunk must be at least 1".into());
    }
    if opts.batch_samples == 0 || opts.batch_samples > CHUNK_SAMPLES_MAX {
        return Err(format!(
            "--batch must be 1..={CHUNK_SAMPLES_MAX}, got {}",
            opts.batch_samples
        ));
    }
    let scratch;
    let dir: &Path = match &opts.dir {
        Some(dir) => {
            check_empty_dir(dir)?;
            dir
        }
        None => {
            scratch = tempfile::Builder::new()
                .prefix("storebench-")
                .tempdir()
                .map_err(|e| format!("creating a temporary directory: {e}"))?;
            scratch.path()
        }
    };
    let shape = opts.config.shape;
    // Keys (and for numeric shapes the walks' start values) are made here, before timing.
    let gen_start_ns = clock::thread_cpu_ns();
    let mut workload = Workload::new(opts.config)?;
    let gen_setup_cpu_ns = clock::thread_cpu_ns() - gen_start_ns;
    let samples_total = workload.samples_total();
    let mut pregenerated = std::collections::VecDeque::new();
    if opts.pregen {
        loop {
            let mut chunk = Vec::with_capacity(opts.batch_samples);
            if workload.next_chunk(opts.batch_samples, &mut chunk)? == 0 {
                break;
            }
            pregenerated.push_back(chunk);
        }
        eprintln!("storebench: {} chunks generated", pregenerated.len());
    }

    let rss_before = measure::status_bytes("VmRSS")?;
    let (user0, sys0) = measure::user_sys_s()?;
    let cpu0 = clock::process_cpu_ns();
    let wall0 = Instant::now();

    // Ingest only: the rollups a flush makes due (the finest level's partition still filling is
    // rebuilt right after each background flush) are maintenance, measured by the store's
    // rollup_bench, and would land in this run's `close` otherwise.
    let ingest_opts = StoreOptions {
        background_maintenance: false,
        ..StoreOptions::default()
    };
    let store = Store::open(dir, ingest_opts)
        .map_err(|e| format!("opening the store in {}: {e}", dir.display()))?;
    let mut chunk: Vec<Sample> = Vec::with_capacity(opts.batch_samples);
    let mut batch = WriteBatch::new();
    let mut ids: Vec<Option<store::SeriesId>> = Vec::new();
    let (mut gen_cpu_ns, mut gen_wall) = (0u64, Duration::ZERO);
    let mut batches = 0u64;
    if opts.backfill && opts.config.shape == Shape::Churn {
        return Err("--order backfill: churn writes each series' samples once".into());
    }
    let span_ms = i64::try_from(opts.config.steps).unwrap_or(i64::MAX / 4) * INTERVAL_MS;
    let half_ms = span_ms / 2 / INTERVAL_MS * INTERVAL_MS;
    let start_ms = opts.config.start_ms;
    let order = |ts_ms: i64| match opts.backfill {
        false => ts_ms,
        true if ts_ms - start_ms < half_ms => ts_ms + (span_ms - half_ms),
        true => ts_ms - half_ms,
    };
    loop {
        batch.clear();
        let mut in_batch = 0usize;
        // Bounded: every pass adds a chunk to the batch or ends it.
        while in_batch < opts.batch_samples {
            let want = opts.gen_samples.min(opts.batch_samples - in_batch);
            let (g_cpu, g_wall) = (clock::thread_cpu_ns(), Instant::now());
            let n = match opts.pregen {
                true => {
                    chunk = pregenerated.pop_front().unwrap_or_default();
                    chunk.len()
                }
                false => workload.next_chunk(want, &mut chunk)?,
            };
            gen_cpu_ns += clock::thread_cpu_ns() - g_cpu;
            gen_wall += g_wall.elapsed();
            if n == 0 {
                break;
            }
            in_batch += n;
            if opts.by_id {
                resolve_new_series(&store, &workload, &chunk, &mut ids)
                    .map_err(|e| format!("resolving series before batch {batches}: {e}"))?;
            }
            push_chunk(&mut batch, &workload, &chunk, &ids, opts, &order)
                .map_err(|e| format!("building batch {batches}: {e}"))?;
        }
        if in_batch == 0 {
            break;
        }
        store
            .write(&batch)
            .map_err(|e| format!("writing batch {batches}: {e}"))?;
        batches += 1;
        if opts.flush_every_batches > 0 && batches.is_multiple_of(opts.flush_every_batches) {
            store
                .flush()
                .map_err(|e| format!("flushing after batch {batches}: {e}"))?;
        }
    }
    batch.clear();
    assert_eq!(workload.samples_done(), samples_total);
    let cpu_loaded = clock::process_cpu_ns();
    let wall_loaded = wall0.elapsed();
    // Measuring is not the store's work: its CPU time is left out like the generator's.
    let probe_cpu0 = clock::thread_cpu_ns();
    let rss_loaded = measure::status_bytes("VmRSS")?;
    let series_in_index = store
        .index()
        .snapshot()
        .map_err(|e| format!("index snapshot: {e}"))?
        .series_count();
    let probe_cpu_ns = clock::thread_cpu_ns() - probe_cpu0;
    let cpu_before_flush = clock::process_cpu_ns();
    // The head → blocks: part of ingesting, so its CPU time counts (`close` would flush too).
    let flushed = store
        .flush()
        .map_err(|e| format!("flushing the store: {e}"))?;
    let cpu_flushed = clock::process_cpu_ns();
    store
        .close()
        .map_err(|e| format!("closing the store: {e}"))?;
    let cpu1 = clock::process_cpu_ns();
    let wall1 = wall0.elapsed();
    let (user1, sys1) = measure::user_sys_s()?;
    let peak_rss = measure::status_bytes("VmHWM")?;

    let disk = measure::disk_usage(dir)?;
    // Reopening replays the WAL; its sample count checks that every sample landed.
    let reopen_cpu0 = clock::process_cpu_ns();
    let reopened = Store::open(dir, StoreOptions::default())
        .map_err(|e| format!("reopening the store in {}: {e}", dir.display()))?;
    let replay = reopened.replay_report().clone();
    let reopen_cpu_s = (clock::process_cpu_ns() - reopen_cpu0) as f64 / 1e9;
    let stats = reopened
        .stats()
        .map_err(|e| format!("stats of the reopened store: {e}"))?;
    reopened
        .close()
        .map_err(|e| format!("closing the reopened store: {e}"))?;
    // Replay covers only what is past the last flush's checkpoint.
    let mut problems = Vec::new();
    if replay.samples > samples_total || u64::from(series_in_index) != workload.series_total() {
        problems.push(format!(
            "the store holds {series_in_index} series and replayed {} samples; the benchmark \
             wrote {} series, {samples_total} samples",
            replay.samples,
            workload.series_total()
        ));
    }

    let gen_cpu_s = gen_cpu_ns as f64 / 1e9;
    let cpu_s = (cpu1 - cpu0 - probe_cpu_ns) as f64 / 1e9 - gen_cpu_s;
    let load_cpu_s = (cpu_loaded - cpu0) as f64 / 1e9 - gen_cpu_s;
    let wall_s = (wall1 - gen_wall).as_secs_f64();
    let load_wall_s = (wall_loaded - gen_wall).as_secs_f64();
    let samples = samples_total as f64;
    let series = workload.series_total();
    let total_used: u64 = disk.iter().map(|d| d.used).sum();
    let non_wal_used: u64 = disk
        .iter()
        .filter(|d| d.name != "wal")
        .map(|d| d.used)
        .sum();
    let mut disk_json = JsonObject::new()
        .int("used", total_used)
        .int("apparent", disk.iter().map(|d| d.apparent).sum())
        .int("allocated", disk.iter().map(|d| d.allocated).sum());
    for d in &disk {
        disk_json = disk_json.obj(
            &d.name,
            JsonObject::new()
                .int("used", d.used)
                .int("apparent", d.apparent)
                .int("allocated", d.allocated),
        );
    }
    let block_samples: u64 = stats.blocks.iter().map(|b| b.samples).sum();
    // Numeric samples have distinct (series, timestamp) pairs: every one must be in a block.
    // Histograms are merged per base period there, so only the numeric shapes are checked.
    if shape != Shape::Histogram && block_samples + replay.samples != samples_total {
        problems.push(format!(
            "the blocks hold {block_samples} samples and the WAL replayed {}; the benchmark \
             wrote {samples_total}",
            replay.samples
        ));
    }
    let mut chunk_bytes = [0u64; 3];
    for block in &stats.blocks {
        for (sum, kind) in chunk_bytes.iter_mut().zip(block.chunk_bytes_by_kind) {
            *sum += kind;
        }
    }
    let blocks_json = JsonObject::new()
        .int("count", stats.blocks.len() as u64)
        .int("bytes", stats.blocks.iter().map(|b| b.size_bytes).sum())
        .int("chunk_bytes_numeric", chunk_bytes[0])
        .int("chunk_bytes_text", chunk_bytes[1])
        .int("chunk_bytes_histogram", chunk_bytes[2])
        .int("samples", block_samples);
    let rss_growth = rss_loaded.saturating_sub(rss_before);
    let mut json = JsonObject::new()
        .str("shape", shape.name())
        .int("series", series)
        .int("series_in_index", u64::from(series_in_index))
        .int("samples", samples_total)
        .int("batches", batches)
        .int("batch_samples", opts.batch_samples as u64)
        .int("gen_samples", opts.gen_samples as u64)
        .int("flush_every_batches", opts.flush_every_batches)
        .int("seed", opts.config.seed)
        .int("run_samples", opts.config.run_samples)
        .str("durability", "group_commit")
        .str("api", if opts.by_id { "ids" } else { "keys" })
        .str("order", if opts.backfill { "backfill" } else { "time" })
        .num("cpu_s", cpu_s, 3)
        .num("wall_s", wall_s, 3)
        .num("samples_per_cpu_s", samples / cpu_s, 0)
        .num("samples_per_s", samples / wall_s, 0)
        .num("load_cpu_s", load_cpu_s, 3)
        .num("load_wall_s", load_wall_s, 3)
        .num(
            "flush_cpu_s",
            (cpu_flushed - cpu_before_flush) as f64 / 1e9,
            3,
        )
        .num("close_cpu_s", (cpu1 - cpu_flushed) as f64 / 1e9, 3)
        .int("flush_samples", flushed.samples)
        .int("flush_bytes", flushed.bytes)
        .num("process_user_s", user1 - user0, 2)
        .num("process_sys_s", sys1 - sys0, 2)
        .num("generator_cpu_s", gen_cpu_s, 3)
        .num("generator_setup_cpu_s", gen_setup_cpu_ns as f64 / 1e9, 3)
        .num("generator_samples_per_cpu_s", samples / gen_cpu_s, 0)
        .obj("disk_bytes", disk_json)
        .obj("blocks", blocks_json)
        .num("bytes_per_sample", total_used as f64 / samples, 3)
        .num(
            "bytes_per_sample_excluding_wal",
            non_wal_used as f64 / samples,
            3,
        )
        .int("peak_rss_bytes", peak_rss)
        .int("rss_before_open_bytes", rss_before)
        .int("rss_after_load_bytes", rss_loaded)
        .num("rss_per_series_bytes", rss_growth as f64 / series as f64, 1);
    if shape == Shape::Churn {
        json = json.num("new_series_per_cpu_s", series as f64 / cpu_s, 0);
    }
    let ok = problems.is_empty();
    let check = if ok {
        "ok".to_string()
    } else {
        problems.join("; ")
    };
    json = json
        .num("reopen_cpu_s", reopen_cpu_s, 3)
        .int("reopen_replayed_samples", replay.samples)
        .str("check", &check);
    Ok((json.finish(), ok))
}

fn check_empty_dir(dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(format!(
                    "--dir {} is not empty: the benchmark sizes the whole directory",
                    dir.display()
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("--dir {}: {e}", dir.display())),
    }
}

/// Resolves the series first seen in `chunk` together, as a client registering its series
/// would: resolving is the store's work and counts, the cache (`ids`) is the client's.
fn resolve_new_series(
    store: &Store,
    workload: &Workload,
    chunk: &[Sample],
    ids: &mut Vec<Option<store::SeriesId>>,
) -> Result<(), String> {
    let unknown: Vec<u64> = chunk
        .iter()
        .map(|s| s.series)
        .filter(|&s| ids.get(s as usize).copied().flatten().is_none())
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .collect();
    let Some(first) = chunk.first() else {
        return Ok(());
    };
    if unknown.is_empty() {
        return Ok(());
    }
    let kind = match first.value {
        GenValue::Numeric(_) => store::Kind::Numeric,
        GenValue::Histogram(_) => store::Kind::Histogram,
    };
    let keys: Vec<_> = unknown.iter().map(|&s| (workload.key(s), kind)).collect();
    let resolved = store.resolve_all(&keys).map_err(|e| e.to_string())?;
    for (&s, id) in unknown.iter().zip(resolved) {
        if ids.len() <= s as usize {
            ids.resize(s as usize + 1, None);
        }
        ids[s as usize] = Some(id);
    }
    Ok(())
}

/// Adds a chunk's samples to the batch, by id or by key. Histograms are lent as bins, as the
/// server lends a body's: the generator keeps its histograms (and frees them when it makes the
/// next chunk, on its own time). Never inlined: `instructions.sh` counts from here down.
#[inline(never)]
fn push_chunk(
    batch: &mut WriteBatch,
    workload: &Workload,
    chunk: &[Sample],
    ids: &[Option<store::SeriesId>],
    opts: &RunOptions,
    order: &impl Fn(i64) -> i64,
) -> Result<(), String> {
    for sample in chunk {
        let id = ids
            .get(sample.series as usize)
            .copied()
            .flatten()
            .filter(|_| opts.by_id);
        let ts_ms = order(sample.ts_ms);
        let pushed = match (&sample.value, id) {
            (GenValue::Numeric(v), Some(id)) => {
                batch.push_id(id, ts_ms, Value::Numeric(*v)).map(|_| ())
            }
            (GenValue::Numeric(v), None) => {
                batch.push(workload.key(sample.series), ts_ms, Value::Numeric(*v))
            }
            (GenValue::Histogram(h), Some(id)) => batch
                .push_id_bins(id, ts_ms, h.keys(), h.counts())
                .map(|_| ()),
            (GenValue::Histogram(h), None) => batch
                .push_canonical_bins(
                    workload.key(sample.series).canonical_str(),
                    ts_ms,
                    h.keys(),
                    h.counts(),
                )
                .map(|_| ()),
        };
        pushed.map_err(|e| e.to_string())?;
    }
    Ok(())
}
