//! The manifest: which blocks make up the store, and where WAL replay starts.
//!
//! One small file, `MANIFEST`, replaced atomically (written to `MANIFEST.tmp`, synced, renamed,
//! directory synced). A block is part of the store exactly when the manifest lists it; the
//! manifest's `checkpoint` is the journal offset from which recovery replays, and everything
//! before it is in the listed blocks. Also here: the store's fixed layout (base period and
//! partition length, so a store is never reopened with different ones) and the cumulative
//! histogram state as of the checkpoint. Layout: `FORMAT.md`.

use std::path::Path;

use hist::convert::Cumulative;
#[cfg(test)]
use hist::Histogram;
use journal::vfs::{write_all_at, OpenMode, Vfs};

use crate::block::BlockId;
use crate::series::SeriesId;
use crate::sources::{SourceId, SourceState};

pub const MANIFEST_MAGIC: &[u8; 8] = b"STRATAMF";
/// The manifest's format version, the only one written or read.
pub const MANIFEST_VERSION: u32 = 2;
pub const MANIFEST_FILE: &str = "MANIFEST";
/// The checkpoint state file: what replay from the checkpoint needs besides the blocks.
pub const STATE_MAGIC: &[u8; 8] = b"STRATAST";
pub const STATE_VERSION: u32 = 1;
/// Bounds what an open reads: blocks and quarantined blocks listed.
pub const MANIFEST_BLOCKS_MAX: u32 = 1 << 22;
/// Most rollup levels a store may have.
pub const LEVELS_MAX: u32 = 16;
/// Most tombstones the manifest may hold (compaction removes them).
pub const TOMBSTONES_MAX: u32 = 1 << 20;
/// Largest manifest or checkpoint-state file an open will read.
pub const STATE_FILE_SIZE_BYTES_MAX: u64 = 1 << 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRef {
    pub id: BlockId,
    pub size_bytes: u64,
    /// The newest flush generation whose data the file holds: its own generation for a flush
    /// block, the newest of its inputs for a compacted one; for a rollup, the newest base
    /// content generation folded in (a base block above it in its range makes it stale).
    pub content_generation: u64,
}

/// One rollup level: its slice period, partition length and the rollup files (at most one per
/// partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelManifest {
    pub period_ms: i64,
    pub partition_ms: i64,
    pub rollups: Vec<BlockRef>,
}

/// Deleted data: samples of `series` in `[start_ms, end_ms)` held by files whose content
/// generation is below `generation` are gone (later writes are not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tombstone {
    pub series: SeriesId,
    pub start_ms: i64,
    pub end_ms: i64,
    pub generation: u64,
}

impl Tombstone {
    /// Whether it hides `series`' data at `ts_ms` in a file of `content_generation`.
    pub fn hides(&self, series: SeriesId, ts_ms: i64, content_generation: u64) -> bool {
        self.series == series
            && content_generation < self.generation
            && (self.start_ms..self.end_ms).contains(&ts_ms)
    }

    /// Whether it hides anything of `series` in `[start_ms, end_ms)` of such a file.
    pub fn overlaps(
        &self,
        series: SeriesId,
        start_ms: i64,
        end_ms: i64,
        content_generation: u64,
    ) -> bool {
        self.series == series
            && content_generation < self.generation
            && self.start_ms < end_ms
            && start_ms < self.end_ms
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub base_period_ms: i64,
    pub partition_ms: i64,
    /// Journal offset where replay starts; every record before it is in `blocks`.
    pub checkpoint: u64,
    /// The generation the next flush or compaction writes.
    pub next_generation: u64,
    /// `state-<n>` holds the cumulative-histogram and sender state as of `checkpoint` (0: none).
    pub state_generation: u64,
    pub blocks: Vec<BlockRef>,
    /// Blocks found damaged: moved to `quarantine/`, never read; reads that need them fail.
    pub quarantined: Vec<BlockRef>,
    /// Rollup levels, finest first.
    pub levels: Vec<LevelManifest>,
    pub tombstones: Vec<Tombstone>,
}

#[derive(Debug)]
pub enum ManifestError {
    Io(std::io::Error),
    Damaged { offset: usize, what: &'static str },
}

impl From<std::io::Error> for ManifestError {
    fn from(e: std::io::Error) -> ManifestError {
        ManifestError::Io(e)
    }
}

fn damaged(offset: usize, what: &'static str) -> ManifestError {
    ManifestError::Damaged { offset, what }
}

/// A cursor over a checked byte slice: every read is bounds-checked.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ManifestError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(damaged(self.pos, "truncated"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, ManifestError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, ManifestError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn i64(&mut self) -> Result<i64, ManifestError> {
        Ok(self.u64()? as i64)
    }
}

/// Reads a file whole, bounded.
fn read_file(vfs: &dyn Vfs, path: &Path) -> Result<Vec<u8>, ManifestError> {
    let file = vfs.open(path, OpenMode::Read)?;
    let len = file.len()?;
    if len > STATE_FILE_SIZE_BYTES_MAX {
        return Err(damaged(0, "file larger than STATE_FILE_SIZE_BYTES_MAX"));
    }
    let mut bytes = vec![0u8; len as usize];
    let mut done = 0;
    while done < bytes.len() {
        let n = file.read_at(&mut bytes[done..], done as u64)?;
        if n == 0 {
            return Err(damaged(done, "file ends early"));
        }
        done += n;
    }
    Ok(bytes)
}

/// Checks `magic | version | … | crc32c` and returns the part between version and checksum.
fn checked_body<'a>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    version: u32,
) -> Result<&'a [u8], ManifestError> {
    if bytes.len() < 16 {
        return Err(damaged(0, "shorter than magic, version and checksum"));
    }
    if &bytes[..8] != magic {
        return Err(damaged(0, "bad magic"));
    }
    let (content, crc) = bytes.split_at(bytes.len() - 4);
    if u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) != crc32c::crc32c(content) {
        return Err(damaged(content.len(), "checksum mismatch"));
    }
    if u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) != version {
        return Err(damaged(8, "unknown version"));
    }
    Ok(&content[12..])
}

fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Writes `bytes` to `dir/name` atomically: temporary file, sync, rename, directory sync.
pub fn write_atomic(vfs: &dyn Vfs, dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    if vfs.exists(&tmp) {
        vfs.remove_file(&tmp)?;
    }
    let file = vfs.open(&tmp, OpenMode::CreateNew)?;
    write_all_at(&*file, bytes, 0)?;
    file.sync_data()?;
    drop(file);
    vfs.rename(&tmp, &dir.join(name))?;
    vfs.sync_dir(dir)
}

fn encode_refs(out: &mut Vec<u8>, refs: &[BlockRef]) {
    out.extend_from_slice(&(refs.len() as u32).to_le_bytes());
    for r in refs {
        out.extend_from_slice(&r.id.partition_start_ms.to_le_bytes());
        out.extend_from_slice(&r.id.generation.to_le_bytes());
        out.extend_from_slice(&r.size_bytes.to_le_bytes());
        out.extend_from_slice(&r.content_generation.to_le_bytes());
    }
}

fn decode_refs(c: &mut Cursor<'_>) -> Result<Vec<BlockRef>, ManifestError> {
    let count = c.u32()?;
    if count > MANIFEST_BLOCKS_MAX || count as usize * 32 > c.bytes.len() - c.pos {
        return Err(damaged(c.pos - 4, "block count beyond the file"));
    }
    let mut refs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let id = BlockId {
            partition_start_ms: c.i64()?,
            generation: c.u64()?,
        };
        refs.push(BlockRef {
            id,
            size_bytes: c.u64()?,
            content_generation: c.u64()?,
        });
    }
    Ok(refs)
}

fn encode_levels(out: &mut Vec<u8>, levels: &[LevelManifest]) {
    out.extend_from_slice(&(levels.len() as u32).to_le_bytes());
    for l in levels {
        out.extend_from_slice(&l.period_ms.to_le_bytes());
        out.extend_from_slice(&l.partition_ms.to_le_bytes());
        encode_refs(out, &l.rollups);
    }
}

fn decode_levels(c: &mut Cursor<'_>) -> Result<Vec<LevelManifest>, ManifestError> {
    let count = c.u32()?;
    if count > LEVELS_MAX {
        return Err(damaged(c.pos - 4, "more levels than LEVELS_MAX"));
    }
    let mut levels = Vec::with_capacity(count as usize);
    for _ in 0..count {
        levels.push(LevelManifest {
            period_ms: c.i64()?,
            partition_ms: c.i64()?,
            rollups: decode_refs(c)?,
        });
    }
    Ok(levels)
}

fn encode_tombstones(out: &mut Vec<u8>, tombstones: &[Tombstone]) {
    out.extend_from_slice(&(tombstones.len() as u32).to_le_bytes());
    for t in tombstones {
        out.extend_from_slice(&t.series.0.to_le_bytes());
        out.extend_from_slice(&t.start_ms.to_le_bytes());
        out.extend_from_slice(&t.end_ms.to_le_bytes());
        out.extend_from_slice(&t.generation.to_le_bytes());
    }
}

fn decode_tombstones(c: &mut Cursor<'_>) -> Result<Vec<Tombstone>, ManifestError> {
    let count = c.u32()?;
    if count > TOMBSTONES_MAX || count as usize * 28 > c.bytes.len() - c.pos {
        return Err(damaged(c.pos - 4, "tombstone count beyond the file"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        out.push(Tombstone {
            series: SeriesId(c.u32()?),
            start_ms: c.i64()?,
            end_ms: c.i64()?,
            generation: c.u64()?,
        });
    }
    Ok(out)
}

impl Manifest {
    pub fn new(base_period_ms: i64, partition_ms: i64) -> Manifest {
        Manifest {
            base_period_ms,
            partition_ms,
            checkpoint: 0,
            next_generation: 1,
            state_generation: 0,
            blocks: Vec::new(),
            quarantined: Vec::new(),
            levels: Vec::new(),
            tombstones: Vec::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        self.assert_invariants();
        let mut out = Vec::with_capacity(64 + 24 * self.blocks.len());
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&self.base_period_ms.to_le_bytes());
        out.extend_from_slice(&self.partition_ms.to_le_bytes());
        out.extend_from_slice(&self.checkpoint.to_le_bytes());
        out.extend_from_slice(&self.next_generation.to_le_bytes());
        out.extend_from_slice(&self.state_generation.to_le_bytes());
        encode_refs(&mut out, &self.blocks);
        encode_refs(&mut out, &self.quarantined);
        encode_levels(&mut out, &self.levels);
        encode_tombstones(&mut out, &self.tombstones);
        seal(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let body = checked_body(bytes, MANIFEST_MAGIC, MANIFEST_VERSION)?;
        let mut c = Cursor {
            bytes: body,
            pos: 0,
        };
        let m = Manifest {
            base_period_ms: c.i64()?,
            partition_ms: c.i64()?,
            checkpoint: c.u64()?,
            next_generation: c.u64()?,
            state_generation: c.u64()?,
            blocks: decode_refs(&mut c)?,
            quarantined: decode_refs(&mut c)?,
            levels: decode_levels(&mut c)?,
            tombstones: decode_tombstones(&mut c)?,
        };
        if c.pos != body.len() {
            return Err(damaged(12 + c.pos, "bytes after the last field"));
        }
        if let Some(what) = m.violation() {
            return Err(damaged(12, what));
        }
        Ok(m)
    }

    fn violation(&self) -> Option<&'static str> {
        if self.base_period_ms <= 0 || self.partition_ms <= 0 {
            return Some("base period or partition length not positive");
        }
        if self.partition_ms % self.base_period_ms != 0 {
            return Some("partition length not a multiple of the base period");
        }
        let all = self.blocks.iter().chain(&self.quarantined);
        if all.clone().any(|b| b.id.generation >= self.next_generation) {
            return Some("a block's generation is not below next_generation");
        }
        if all
            .clone()
            .any(|b| b.id.partition_start_ms.rem_euclid(self.partition_ms) != 0)
        {
            return Some("a block does not start on a partition boundary");
        }
        if self.state_generation >= self.next_generation {
            return Some("state generation not below next_generation");
        }
        if all.clone().any(|b| b.content_generation > b.id.generation) {
            return Some("a block's content generation is above its generation");
        }
        let (mut finer_period, mut finer_partition) = (self.base_period_ms, self.partition_ms);
        for l in &self.levels {
            if l.period_ms <= finer_period
                || l.period_ms % finer_period != 0
                || l.partition_ms <= 0
                || l.partition_ms % finer_partition != 0
                || l.partition_ms % l.period_ms != 0
            {
                return Some("a level's period or partition is not a multiple of the finer one's");
            }
            let mut starts = std::collections::BTreeSet::new();
            for r in &l.rollups {
                if r.id.generation >= self.next_generation
                    || r.content_generation >= r.id.generation
                    || r.id.partition_start_ms.rem_euclid(l.partition_ms) != 0
                    || !starts.insert(r.id.partition_start_ms)
                {
                    return Some("a rollup's generation or partition is invalid or repeated");
                }
            }
            (finer_period, finer_partition) = (l.period_ms, l.partition_ms);
        }
        if self
            .tombstones
            .iter()
            .any(|t| t.start_ms >= t.end_ms || t.generation > self.next_generation)
        {
            return Some("a tombstone's range is empty or its generation is in the future");
        }
        None
    }

    pub fn assert_invariants(&self) {
        assert_eq!(self.violation(), None, "manifest invariant");
    }

    /// Reads `dir/MANIFEST`; `None` when there is none (a new store, or one from before blocks).
    pub fn load(vfs: &dyn Vfs, dir: &Path) -> Result<Option<Manifest>, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        if !vfs.exists(&path) {
            return Ok(None);
        }
        Manifest::decode(&read_file(vfs, &path)?).map(Some)
    }

    pub fn store(&self, vfs: &dyn Vfs, dir: &Path) -> std::io::Result<()> {
        write_atomic(vfs, dir, MANIFEST_FILE, &self.encode())
    }
}

pub fn state_file_name(generation: u64) -> String {
    format!("state-{generation}")
}

/// Every series' newest cumulative submission: id, time, value as sent.
pub type CumulativeEntries = Vec<(SeriesId, i64, Cumulative)>;

/// What the state file holds: the cumulative-histogram state and every sender's applied
/// batches, as of the manifest's checkpoint.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CheckpointState {
    pub cumulative: CumulativeEntries,
    pub sources: Vec<(SourceId, SourceState)>,
}

/// The state file: `magic | version | cumulative section | sources section | crc32c`; the
/// cumulative section is `count u32 | (series u32, ts i64, size u32, cumulative value)*`.
pub(crate) fn encode_state(
    cumulative: &[(SeriesId, i64, &Cumulative)],
    sources: &[(SourceId, SourceState)],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(STATE_MAGIC);
    out.extend_from_slice(&STATE_VERSION.to_le_bytes());
    out.extend_from_slice(&(cumulative.len() as u32).to_le_bytes());
    for (id, ts_ms, h) in cumulative {
        out.extend_from_slice(&id.0.to_le_bytes());
        out.extend_from_slice(&ts_ms.to_le_bytes());
        let size_at = out.len();
        out.extend_from_slice(&[0; 4]);
        h.encode_into(&mut out);
        let size = (out.len() - size_at - 4) as u32;
        out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    }
    crate::sources::encode(sources, &mut out);
    seal(out)
}

pub(crate) fn decode_state(bytes: &[u8]) -> Result<CheckpointState, ManifestError> {
    let body = checked_body(bytes, STATE_MAGIC, STATE_VERSION)?;
    let mut c = Cursor {
        bytes: body,
        pos: 0,
    };
    let count = c.u32()?;
    if count as usize > body.len() / 8 {
        return Err(damaged(12, "entry count beyond the file"));
    }
    let mut cumulative = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let id = SeriesId(c.u32()?);
        let ts_ms = c.i64()?;
        let size = c.u32()? as usize;
        let at = c.pos;
        let bytes = c.take(size)?;
        let h = match Cumulative::decode_prefix(bytes) {
            Ok((h, used)) if used == size => h,
            _ => return Err(damaged(12 + at, "bad cumulative histogram")),
        };
        cumulative.push((id, ts_ms, h));
    }
    let mut pos = c.pos;
    let sources = crate::sources::decode(body, &mut pos).map_err(|what| damaged(12 + pos, what))?;
    if pos != body.len() {
        return Err(damaged(12 + pos, "bytes after the last entry"));
    }
    Ok(CheckpointState {
        cumulative,
        sources,
    })
}

pub(crate) fn load_state(
    vfs: &dyn Vfs,
    dir: &Path,
    generation: u64,
) -> Result<CheckpointState, ManifestError> {
    decode_state(&read_file(vfs, &dir.join(state_file_name(generation)))?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn histogram(n: u64) -> Histogram {
        crate::test_util::histogram_of(&[(2.5, n)])
    }

    #[test]
    fn checkpoint_state_round_trips_with_each_series_time() {
        let (a, b) = (histogram(3), histogram(70));
        let mut sources = crate::sources::Sources::default();
        let origin = crate::sources::Origin {
            source: SourceId::new("agent-1").unwrap(),
            epoch: 2,
            seq: 40,
            received_ms: 9,
        };
        sources.record(&origin);
        let (a, b) = (Cumulative::Bins(a), Cumulative::Bins(b));
        let bytes = encode_state(
            &[(SeriesId(1), -5, &a), (SeriesId(9), i64::MAX, &b)],
            &sources.entries(),
        );
        let back = decode_state(&bytes).unwrap();
        assert_eq!(
            back.cumulative,
            vec![(SeriesId(1), -5, a), (SeriesId(9), i64::MAX, b)]
        );
        assert_eq!(back.sources, sources.entries());
        let mut damaged = bytes.clone();
        damaged[14] ^= 1;
        assert!(decode_state(&damaged).is_err());
        for cut in 0..bytes.len() {
            assert!(decode_state(&bytes[..cut]).is_err());
        }
    }
}
