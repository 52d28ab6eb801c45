//! `strata store …`: look into a store directory without changing it. Both commands are
//! read-only and safe beside a running server. Given a store's `wal` directory, or a directory
//! holding one store, they use that store and say so. Exit codes: 0 ok, 1 damage found or the
//! store cannot be read, 2 bad usage (a directory that is not a store, with where to look).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use store::Inspection;

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Series counts by kind, blocks with their time ranges and sizes, disk bytes by kind, the
    /// WAL checkpoint. `--json` prints one JSON document.
    Inspect(InspectArgs),
    /// Check every checksum: manifest, cumulative state, index records, every block and every
    /// chunk in it, every WAL frame. Exits 1 if anything is damaged.
    Verify(VerifyArgs),
}

#[derive(Args)]
pub struct InspectArgs {
    /// The store directory (the server's data directory).
    dir: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct VerifyArgs {
    dir: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn run(command: StoreCommand) -> ExitCode {
    match command {
        StoreCommand::Inspect(args) => run_inspect(&args),
        StoreCommand::Verify(args) => run_verify(&args),
    }
}

/// Whether `dir` is a store's data directory (it has the manifest).
fn is_store(dir: &Path) -> bool {
    dir.join("MANIFEST").is_file()
}

/// The store a command means: `dir` itself; or, for the natural near misses, the store next to
/// it, said on stderr: its write-ahead log (`strata-data/wal`) means its parent, and a directory
/// holding exactly one store (`.` beside `./strata-data`) means that one. Anything else is an
/// error that says what a store's data directory looks like.
fn store_dir(dir: &Path) -> Result<PathBuf, String> {
    if !dir.is_dir() {
        return Err(format!("{}: no such directory", dir.display()));
    }
    if is_store(dir) {
        return Ok(dir.to_path_buf());
    }
    let near = |found: &Path, why: &str| {
        eprintln!(
            "strata store: {} {why}; using the store {}",
            dir.display(),
            found.display()
        );
    };
    if dir.file_name().is_some_and(|n| n == "wal") {
        if let Some(parent) = dir.parent().filter(|p| is_store(p)) {
            near(parent, "is a store's write-ahead log");
            return Ok(parent.to_path_buf());
        }
    }
    let mut stores = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        // Bounded: a directory with many entries is not searched through.
        for entry in entries.flatten().take(CHILDREN_LOOKED_AT_MAX) {
            let path = entry.path();
            if path.is_dir() && is_store(&path) {
                stores.push(path);
            }
        }
    }
    if let [only] = stores.as_slice() {
        near(only, "holds one store");
        return Ok(only.clone());
    }
    Err(format!(
        "{} is not a store's data directory (no MANIFEST); a data directory holds MANIFEST, \
         blocks/, index/ and wal/ (strata serve's default is ./strata-data){}",
        dir.display(),
        if stores.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = stores.iter().map(|p| p.display().to_string()).collect();
            format!("; stores inside it: {}", names.join(", "))
        }
    ))
}

/// Entries of a directory looked at for a store inside it.
const CHILDREN_LOOKED_AT_MAX: usize = 1000;

fn resolved(dir: &Path) -> Result<PathBuf, ExitCode> {
    store_dir(dir).map_err(|message| {
        eprintln!("strata store: {message}");
        ExitCode::from(2)
    })
}

fn fail(dir: &std::path::Path, error: &store::StoreError) -> ExitCode {
    eprintln!("strata store: {}: {error}", dir.display());
    ExitCode::from(1)
}

fn run_inspect(args: &InspectArgs) -> ExitCode {
    let dir = match resolved(&args.dir) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let report = match store::inspect(&dir) {
        Ok(r) => r,
        Err(e) => return fail(&dir, &e),
    };
    if args.json {
        println!("{}", inspection_json(&report));
    } else {
        print_inspection(&report);
    }
    ExitCode::SUCCESS
}

fn inspection_json(r: &Inspection) -> serde_json::Value {
    let blocks: Vec<serde_json::Value> = r
        .blocks
        .iter()
        .map(|b| {
            json!({
                "name": b.name,
                "start_ms": b.partition_start_ms,
                "end_ms": b.partition_end_ms,
                "generation": b.generation,
                "bytes": b.size_bytes,
                "chunks": b.chunks,
                "samples": b.samples,
            })
        })
        .collect();
    json!({
        "base_period_ms": r.base_period_ms,
        "partition_ms": r.partition_ms,
        "series": {
            "total": r.series.total,
            "numeric": r.series.numeric,
            "text": r.series.text,
            "histogram": r.series.histogram,
        },
        "time_range_ms": r.time_range_ms.map(|(a, z)| json!([a, z])),
        "blocks": blocks,
        "unreadable_blocks": r.unreadable_blocks.iter()
            .map(|(n, why)| json!({"name": n, "error": why})).collect::<Vec<_>>(),
        "quarantined": r.quarantined,
        "disk_bytes": {
            "total": r.disk_bytes_total,
            "wal": r.wal_bytes,
            "index": r.index_bytes,
            "blocks": r.blocks.iter().map(|b| b.size_bytes).sum::<u64>(),
            "numeric": r.chunk_bytes_by_kind[0],
            "text": r.chunk_bytes_by_kind[1],
            "histogram": r.chunk_bytes_by_kind[2],
        },
        "wal": {
            "checkpoint": r.checkpoint,
            "end_offset": r.wal_end_offset,
            "records_after_checkpoint": r.wal_records_after_checkpoint,
        },
        "index_torn_tail_bytes": r.index_torn_tail_bytes,
        "levels": r.levels.iter().map(|l| json!({
            "period_ms": l.period_ms,
            "partition_ms": l.partition_ms,
            "rollups": l.rollups,
            "bytes": l.size_bytes,
            "time_range_ms": l.time_range_ms.map(|(a, z)| json!([a, z])),
            "retention_ms_default": l.retention_ms_default,
            "unreadable": l.unreadable.iter()
                .map(|(n, why)| json!({"name": n, "error": why})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "retention_ms_default": {
            "base": r.base_retention_ms_default,
            "raw_numeric": r.raw_numeric_retention_ms_default,
        },
        "tombstones": r.tombstones,
    })
}

fn print_inspection(r: &Inspection) {
    println!(
        "series: {} (numeric {}, text {}, histogram {})",
        r.series.total, r.series.numeric, r.series.text, r.series.histogram
    );
    println!(
        "layout: base period {} ms, partitions of {} ms",
        r.base_period_ms, r.partition_ms
    );
    match r.time_range_ms {
        Some((a, z)) => println!("blocks: {} covering {a} ..= {z} ms", r.blocks.len()),
        None => println!("blocks: {}", r.blocks.len()),
    }
    for b in &r.blocks {
        println!(
            "  {:<32} [{}, {}) gen {} {} bytes, {} chunks, {} samples",
            b.name,
            b.partition_start_ms,
            b.partition_end_ms,
            b.generation,
            b.size_bytes,
            b.chunks,
            b.samples
        );
    }
    for (name, why) in &r.unreadable_blocks {
        println!("  UNREADABLE {name}: {why}");
    }
    for name in &r.quarantined {
        println!("  QUARANTINED {name}");
    }
    println!(
        "retention (default options): base {} ms, raw numeric {} ms",
        r.base_retention_ms_default, r.raw_numeric_retention_ms_default
    );
    for l in &r.levels {
        let range = l
            .time_range_ms
            .map_or("empty".to_string(), |(a, z)| format!("{a} ..= {z} ms"));
        let retention = l
            .retention_ms_default
            .map_or("not a default level".to_string(), |ms| format!("{ms} ms"));
        println!(
            "level {} ms (partitions of {} ms): {} rollups, {} bytes, {range}, retention {retention}",
            l.period_ms, l.partition_ms, l.rollups, l.size_bytes
        );
        for (name, why) in &l.unreadable {
            println!("  UNREADABLE {name}: {why}");
        }
    }
    if r.tombstones > 0 {
        println!(
            "tombstones: {} (deleted data not compacted away yet)",
            r.tombstones
        );
    }
    let [n, t, h] = r.chunk_bytes_by_kind;
    println!(
        "disk: {} bytes total — wal {}, index {}, chunks: numeric {n}, text {t}, histogram {h}",
        r.disk_bytes_total, r.wal_bytes, r.index_bytes
    );
    println!(
        "wal: checkpoint {}, end {}, {} bytes of records to replay",
        r.checkpoint,
        r.wal_end_offset,
        r.wal_records_after_checkpoint.unwrap_or(0)
    );
}

fn run_verify(args: &VerifyArgs) -> ExitCode {
    let dir = match resolved(&args.dir) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let (problems, blocks, chunks) = match store::verify(&dir) {
        Ok(r) => r,
        Err(e) => return fail(&dir, &e),
    };
    if args.json {
        let list: Vec<serde_json::Value> = problems
            .iter()
            .map(|p| json!({"file": p.file, "problem": p.what}))
            .collect();
        let doc = json!({"ok": problems.is_empty(), "blocks": blocks, "chunks": chunks,
                         "problems": list});
        println!("{doc}");
    } else {
        for p in &problems {
            println!("DAMAGED {}: {}", p.file, p.what);
        }
        let verdict = if problems.is_empty() { "ok" } else { "DAMAGED" };
        println!(
            "{verdict}: {blocks} blocks, {chunks} chunks checked, {} problems",
            problems.len()
        );
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
