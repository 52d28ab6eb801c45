//! The manifest: which blocks make up the store, and where WAL replay starts.
//!
//! One small file, `MANIFEST`, replaced atomically (written to `MANIFEST.tmp`, synced, renamed,
//! directory synced). A block is part of the store exactly when the manifest lists it; the
//! manifest's `checkpoint` is the journal offset from which recovery replays, and everything
//! before it is in the listed blocks. Also here: the store's fixed layout (base period and
//! partition length, so a store is never reopened with different ones) and the cumulative
//! histogram state as of the checkpoint. Layout: `FORMAT.md`.

use std::path::Path;

use hist::Histogram;
use journal::vfs::{write_all_at, OpenMode, Vfs};

use crate::block::BlockId;
use crate::index::SeriesId;

pub const MANIFEST_MAGIC: &[u8; 8] = b"STRATAMF";
pub const MANIFEST_VERSION: u32 = 1;
pub const MANIFEST_FILE: &str = "MANIFEST";
pub const CUMULATIVE_MAGIC: &[u8; 8] = b"STRATACU";
/// Bounds what an open reads: blocks and quarantined blocks listed.
pub const MANIFEST_BLOCKS_MAX: u32 = 1 << 22;
/// Largest manifest or cumulative-state file an open will read.
pub const STATE_FILE_SIZE_BYTES_MAX: u64 = 1 << 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRef {
    pub id: BlockId,
    pub size_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub base_period_ms: i64,
    pub partition_ms: i64,
    /// Journal offset where replay starts; every record before it is in `blocks`.
    pub checkpoint: u64,
    /// The generation the next flush or compaction writes.
    pub next_generation: u64,
    /// `cumulative-<n>` holds the cumulative state as of `checkpoint` (0: none).
    pub cumulative_generation: u64,
    pub blocks: Vec<BlockRef>,
    /// Blocks found damaged: moved to `quarantine/`, never read; reads that need them fail.
    pub quarantined: Vec<BlockRef>,
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
fn checked_body<'a>(bytes: &'a [u8], magic: &[u8; 8]) -> Result<&'a [u8], ManifestError> {
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
    if u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) != MANIFEST_VERSION {
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
    }
}

fn decode_refs(c: &mut Cursor<'_>) -> Result<Vec<BlockRef>, ManifestError> {
    let count = c.u32()?;
    if count > MANIFEST_BLOCKS_MAX || count as usize * 24 > c.bytes.len() - c.pos {
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
        });
    }
    Ok(refs)
}

impl Manifest {
    pub fn new(base_period_ms: i64, partition_ms: i64) -> Manifest {
        Manifest {
            base_period_ms,
            partition_ms,
            checkpoint: 0,
            next_generation: 1,
            cumulative_generation: 0,
            blocks: Vec::new(),
            quarantined: Vec::new(),
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
        out.extend_from_slice(&self.cumulative_generation.to_le_bytes());
        encode_refs(&mut out, &self.blocks);
        encode_refs(&mut out, &self.quarantined);
        seal(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let body = checked_body(bytes, MANIFEST_MAGIC)?;
        let mut c = Cursor {
            bytes: body,
            pos: 0,
        };
        let m = Manifest {
            base_period_ms: c.i64()?,
            partition_ms: c.i64()?,
            checkpoint: c.u64()?,
            next_generation: c.u64()?,
            cumulative_generation: c.u64()?,
            blocks: decode_refs(&mut c)?,
            quarantined: decode_refs(&mut c)?,
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
        if self.cumulative_generation >= self.next_generation {
            return Some("cumulative generation not below next_generation");
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

pub fn cumulative_file_name(generation: u64) -> String {
    format!("cumulative-{generation}")
}

/// The cumulative state file: `magic | version | count | (series u32, size u32, histogram)* | crc`.
pub fn encode_cumulative(state: &[(SeriesId, &Histogram)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(CUMULATIVE_MAGIC);
    out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
    out.extend_from_slice(&(state.len() as u32).to_le_bytes());
    for (id, h) in state {
        out.extend_from_slice(&id.0.to_le_bytes());
        out.extend_from_slice(&(h.encoded_len() as u32).to_le_bytes());
        h.encode_into(&mut out);
    }
    seal(out)
}

pub fn decode_cumulative(bytes: &[u8]) -> Result<Vec<(SeriesId, Histogram)>, ManifestError> {
    let body = checked_body(bytes, CUMULATIVE_MAGIC)?;
    let mut c = Cursor {
        bytes: body,
        pos: 0,
    };
    let count = c.u32()?;
    if count as usize > body.len() / 8 {
        return Err(damaged(12, "entry count beyond the file"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let id = SeriesId(c.u32()?);
        let size = c.u32()? as usize;
        let at = c.pos;
        let h = Histogram::decode(c.take(size)?).map_err(|_| damaged(12 + at, "bad histogram"))?;
        out.push((id, h));
    }
    if c.pos != body.len() {
        return Err(damaged(12 + c.pos, "bytes after the last entry"));
    }
    Ok(out)
}

pub fn load_cumulative(
    vfs: &dyn Vfs,
    dir: &Path,
    generation: u64,
) -> Result<Vec<(SeriesId, Histogram)>, ManifestError> {
    decode_cumulative(&read_file(
        vfs,
        &dir.join(cumulative_file_name(generation)),
    )?)
}
