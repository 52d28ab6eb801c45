//! Read-only inspection and verification of a store directory, for `strata store inspect` and
//! `strata store verify`. Nothing here writes: both may run beside a live server.

use std::path::Path;

use journal::vfs::RealFs;

use crate::block::{self, Block};
use crate::blockset::{level_dir, BLOCKS_DIR, QUARANTINE_DIR, ROLLUPS_DIR};
use crate::flush::{block_info, BlockInfo};
use crate::index::{Cardinality, SeriesIndex};
use crate::manifest::{self, Manifest};
use crate::StoreError;

/// What `inspect` reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inspection {
    pub base_period_ms: i64,
    pub partition_ms: i64,
    pub checkpoint: u64,
    pub series: Cardinality,
    pub index_bytes: u64,
    /// Bytes at the index file's end that are a torn (unacknowledged) record.
    pub index_torn_tail_bytes: u64,
    pub blocks: Vec<BlockInfo>,
    /// Blocks listed but unreadable now (name, why).
    pub unreadable_blocks: Vec<(String, String)>,
    pub quarantined: Vec<String>,
    /// Earliest and latest sample time in blocks.
    pub time_range_ms: Option<(i64, i64)>,
    pub wal_bytes: u64,
    pub wal_records_after_checkpoint: Option<u64>,
    pub wal_end_offset: u64,
    /// Block chunk bytes by kind: numeric, text, histogram.
    pub chunk_bytes_by_kind: [u64; 3],
    pub disk_bytes_total: u64,
    /// Rollup levels, finest first.
    pub levels: Vec<LevelInfo>,
    /// Tombstones (deletes not compacted away yet).
    pub tombstones: u64,
    /// Retentions of the default options (the running server's may differ: they are options,
    /// not stored): base blocks, raw numeric samples.
    pub base_retention_ms_default: i64,
    pub raw_numeric_retention_ms_default: i64,
}

/// One rollup level as `inspect` reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LevelInfo {
    pub period_ms: i64,
    pub partition_ms: i64,
    pub rollups: u64,
    pub size_bytes: u64,
    /// First and last slice start held.
    pub time_range_ms: Option<(i64, i64)>,
    /// The default options' retention for a level of this period (`None`: not a default level).
    pub retention_ms_default: Option<i64>,
    pub unreadable: Vec<(String, String)>,
}

fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

const NOT_A_STORE: StoreError = StoreError::InvalidOptions(
    "no MANIFEST: not a store directory (or never opened by this version)",
);

fn load_manifest(dir: &Path) -> Result<Manifest, StoreError> {
    Manifest::load(&RealFs, dir)?.ok_or(NOT_A_STORE)
}

pub fn inspect(dir: &Path) -> Result<Inspection, StoreError> {
    let m = load_manifest(dir)?;
    let (index, torn) = SeriesIndex::open_read_only(&dir.join("index"))?;
    let mut out = Inspection {
        base_period_ms: m.base_period_ms,
        partition_ms: m.partition_ms,
        checkpoint: m.checkpoint,
        series: index.snapshot()?.cardinality(),
        index_bytes: std::fs::metadata(dir.join("index")).map_or(0, |md| md.len()),
        index_torn_tail_bytes: torn,
        quarantined: m.quarantined.iter().map(|r| r.id.file_name()).collect(),
        wal_bytes: dir_bytes(&dir.join("wal")),
        disk_bytes_total: dir_bytes(dir),
        ..Inspection::default()
    };
    for r in &m.blocks {
        let path = dir.join(BLOCKS_DIR).join(r.id.file_name());
        match Block::open(&RealFs, &path) {
            Ok(b) => {
                let info = block_info(&b);
                for (i, bytes) in info.chunk_bytes_by_kind.iter().enumerate() {
                    out.chunk_bytes_by_kind[i] += bytes;
                }
                let first = b.entries().iter().map(|e| e.first_ts_ms).min();
                let last = b.entries().iter().map(|e| e.last_ts_ms).max();
                if let (Some(f), Some(l)) = (first, last) {
                    out.time_range_ms = Some(match out.time_range_ms {
                        Some((a, z)) => (a.min(f), z.max(l)),
                        None => (f, l),
                    });
                }
                out.blocks.push(info);
            }
            Err(e) => out
                .unreadable_blocks
                .push((r.id.file_name(), format!("{e}"))),
        }
    }
    let defaults = crate::StoreOptions::default();
    out.base_retention_ms_default = defaults.base_retention_ms;
    out.raw_numeric_retention_ms_default = defaults.raw_numeric_retention_ms;
    out.tombstones = m.tombstones.len() as u64;
    for l in &m.levels {
        let mut info = LevelInfo {
            period_ms: l.period_ms,
            partition_ms: l.partition_ms,
            rollups: l.rollups.len() as u64,
            retention_ms_default: defaults
                .levels
                .iter()
                .find(|d| d.period_ms == l.period_ms)
                .map(|d| d.retention_ms),
            ..LevelInfo::default()
        };
        let ldir = level_dir(dir, l.period_ms);
        for r in &l.rollups {
            info.size_bytes += r.size_bytes;
            match Block::open(&RealFs, &ldir.join(r.id.file_name())) {
                Ok(b) => {
                    let first = b.entries().iter().map(|e| e.first_ts_ms).min();
                    let last = b.entries().iter().map(|e| e.last_ts_ms).max();
                    if let (Some(f), Some(z)) = (first, last) {
                        info.time_range_ms = Some(match info.time_range_ms {
                            Some((a, y)) => (a.min(f), y.max(z)),
                            None => (f, z),
                        });
                    }
                }
                Err(e) => info.unreadable.push((r.id.file_name(), format!("{e}"))),
            }
        }
        out.levels.push(info);
    }
    if let Ok(j) = journal::tools::inspect(&RealFs, &dir.join("wal")) {
        out.wal_end_offset = j.end_offset;
        out.wal_records_after_checkpoint = Some(j.end_offset.saturating_sub(m.checkpoint));
    }
    Ok(out)
}

/// One problem `verify` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file (relative to the store directory).
    pub file: String,
    pub what: String,
}

/// Checks every checksum: the manifest, the cumulative state, every record of the index,
/// every block's structure and every chunk in it, and every WAL frame. Returns the problems
/// found (empty = healthy) and how many blocks and chunks were checked.
pub fn verify(dir: &Path) -> Result<(Vec<Problem>, u64, u64), StoreError> {
    let mut problems = Vec::new();
    let problem = |file: &str, what: String| Problem {
        file: file.to_string(),
        what,
    };
    let m = match Manifest::load(&RealFs, dir) {
        Ok(Some(m)) => m,
        Ok(None) => return Err(NOT_A_STORE),
        Err(e) => {
            problems.push(problem(manifest::MANIFEST_FILE, format!("{e}")));
            return Ok((problems, 0, 0));
        }
    };
    if m.state_generation != 0 {
        if let Err(e) = manifest::load_state(&RealFs, dir, m.state_generation) {
            let name = manifest::state_file_name(m.state_generation);
            problems.push(problem(&name, e.to_string()));
        }
    }
    match SeriesIndex::open_read_only(&dir.join("index")) {
        Ok((_, 0)) => {}
        Ok((_, torn)) => problems.push(problem(
            "index",
            format!("torn tail of {torn} bytes (an unacknowledged series; cut on next open)"),
        )),
        Err(e) => problems.push(problem("index", format!("{e}"))),
    }
    let (mut blocks, mut chunks) = (0u64, 0u64);
    for r in &m.blocks {
        let name = format!("{BLOCKS_DIR}/{}", r.id.file_name());
        blocks += 1;
        match block::verify(&RealFs, &dir.join(&name)) {
            Ok(stats) => chunks += stats.chunks,
            Err(errors) => {
                for e in errors {
                    problems.push(problem(&name, format!("{e}")));
                }
            }
        }
    }
    for l in &m.levels {
        for r in &l.rollups {
            let name = format!("{}/{}/{}", ROLLUPS_DIR, l.period_ms, r.id.file_name());
            blocks += 1;
            match block::verify(&RealFs, &dir.join(&name)) {
                Ok(stats) => chunks += stats.chunks,
                Err(errors) => {
                    for e in errors {
                        problems.push(problem(&name, format!("{e}")));
                    }
                }
            }
        }
    }
    for r in &m.quarantined {
        let name = format!("{QUARANTINE_DIR}/{}", r.id.file_name());
        problems.push(problem(
            &name,
            "quarantined block (damaged, not served)".into(),
        ));
    }
    let wal_dir = dir.join("wal");
    // A store on an external log (a cluster partition) has no WAL of its own.
    let wal = (wal_dir.exists()).then(|| journal::tools::inspect(&RealFs, &wal_dir));
    match wal {
        None => {}
        Some(Ok(j)) => {
            for d in j.damage.iter().filter(|d| !d.torn_tail) {
                problems.push(problem(
                    "wal",
                    format!("segment {} byte {}: {}", d.segment, d.byte_offset, d.reason),
                ));
            }
        }
        Some(Err(e)) => problems.push(problem("wal", format!("{e}"))),
    }
    Ok((problems, blocks, chunks))
}
