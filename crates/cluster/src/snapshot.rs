//! A partition's copy from one storage node to another (`FORMAT.md`, "Partition snapshot").
//!
//! The sender pauses the partition's consumer, flushes the store and records its Kafka offset,
//! then reads every file of the partition's directory into one checksummed stream: what the
//! directory holds then is exactly the state of the log below that offset. The receiver checks
//! the whole stream (every file's CRC32C, the count, the trailer) into a staging directory,
//! syncs it, and only then renames it into place, so a partition directory is either a
//! complete copy or absent. The receiver then consumes Kafka from the copied offset.

use std::path::{Component, Path, PathBuf};

use crate::storage::Partition;

/// The first bytes of a snapshot stream.
const MAGIC: &[u8; 8] = b"STRSNAP1";
/// The largest snapshot one partition may have, in bytes (it is built and read in memory).
pub const SNAPSHOT_BYTES_MAX: u64 = 1 << 30;
/// Files one snapshot may hold.
const SNAPSHOT_FILES_MAX: u32 = 100_000;
/// Longest relative path of a file in a snapshot, in bytes.
const PATH_BYTES_MAX: usize = 1024;
/// Directory depth walked below the partition directory.
const DEPTH_MAX: usize = 8;
/// The suffix of a partition directory being received.
const INCOMING_SUFFIX: &str = ".incoming";

/// A snapshot that cannot be built or installed, said plainly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError(pub String);

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err(m: String) -> SnapshotError {
    SnapshotError(m)
}

/// Flushes `partition`, records its offset and encodes its directory, with its consumer
/// paused throughout so that the files and the offset describe the same point of the log.
pub fn build(partition: &Partition) -> Result<(i64, Vec<u8>), SnapshotError> {
    if let Some(why) = partition.failure() {
        return Err(err(format!("partition {} is stopped: {why}", partition.id)));
    }
    let _paused = partition.pause();
    let offset = partition
        .checkpoint_paused()
        .map_err(|e| err(format!("flushing partition {}: {e}", partition.id)))?;
    let dir = partition.store.dir().to_path_buf();
    let mut files = Vec::new();
    walk(&dir, &dir, 0, &mut files)?;
    files.sort();
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&partition.id.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    let count = u32::try_from(files.len()).unwrap_or(u32::MAX);
    if count > SNAPSHOT_FILES_MAX {
        return Err(err(format!(
            "partition {}: {count} files, at most {SNAPSHOT_FILES_MAX}",
            partition.id
        )));
    }
    for rel in &files {
        let bytes = std::fs::read(dir.join(rel))
            .map_err(|e| err(format!("{}: {e}", dir.join(rel).display())))?;
        let name = rel.to_string_lossy();
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&bytes);
        out.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        if out.len() as u64 > SNAPSHOT_BYTES_MAX {
            return Err(err(format!(
                "partition {}: snapshot past {SNAPSHOT_BYTES_MAX} bytes",
                partition.id
            )));
        }
    }
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok((offset, out))
}

/// Every file below `dir` as a path relative to `root` (the offset file's temporary excepted).
fn walk(
    root: &Path,
    dir: &Path,
    depth: usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), SnapshotError> {
    if depth > DEPTH_MAX {
        return Err(err(format!("{}: deeper than {DEPTH_MAX}", dir.display())));
    }
    let entries = std::fs::read_dir(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| err(format!("{}: {e}", dir.display())))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| err(format!("{}: {e}", path.display())))?;
        if kind.is_dir() {
            walk(root, &path, depth + 1, out)?;
        } else if kind.is_file() && !path.to_string_lossy().ends_with(".tmp") {
            let rel = path.strip_prefix(root).map_err(|e| err(e.to_string()))?;
            out.push(rel.to_path_buf());
        }
        if out.len() > SNAPSHOT_FILES_MAX as usize {
            return Err(err(format!(
                "{}: more than {SNAPSHOT_FILES_MAX} files",
                root.display()
            )));
        }
    }
    Ok(())
}

/// Reads a snapshot's fields in order, each read checked against the end of the bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(err(format!(
                "snapshot truncated at byte {} ({what})",
                self.at
            )));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], SnapshotError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
}

/// A relative path of a snapshot, refused when it could leave the partition directory.
fn safe_path(name: &str) -> Result<PathBuf, SnapshotError> {
    let path = PathBuf::from(name);
    let normal = path.components().all(|c| matches!(c, Component::Normal(_)));
    if name.is_empty() || !normal {
        return Err(err(format!(
            "snapshot file `{name}`: not a plain relative path"
        )));
    }
    Ok(path)
}

/// Checks `bytes` as a snapshot of `partition` and writes it as the directory `dir` (which
/// must not exist): into `dir.incoming` first, synced, then renamed. Returns the offset the
/// copy holds everything below.
pub fn install(bytes: &[u8], partition: u32, dir: &Path) -> Result<i64, SnapshotError> {
    if bytes.len() < 4 {
        return Err(err("snapshot shorter than its checksum".into()));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let mut want = [0u8; 4];
    want.copy_from_slice(crc);
    if crc32c::crc32c(body) != u32::from_le_bytes(want) {
        return Err(err("snapshot checksum mismatch".into()));
    }
    let mut r = Reader { bytes: body, at: 0 };
    if &r.array::<8>("magic")? != MAGIC {
        return Err(err("not a partition snapshot (magic)".into()));
    }
    let id = u32::from_le_bytes(r.array("partition")?);
    if id != partition {
        return Err(err(format!(
            "snapshot of partition {id}, wanted {partition}"
        )));
    }
    let offset = i64::from_le_bytes(r.array("offset")?);
    if offset < 0 {
        return Err(err(format!("snapshot offset {offset} is negative")));
    }
    let staging = PathBuf::from(format!("{}{INCOMING_SUFFIX}", dir.display()));
    let _ = std::fs::remove_dir_all(&staging);
    let written = write_files(&mut r, &staging);
    let written = written.and_then(|count| {
        let trailer = u32::from_le_bytes(r.array("file count")?);
        if trailer != count || r.at != body.len() {
            return Err(err(format!(
                "snapshot holds {count} files, its trailer says {trailer}"
            )));
        }
        Ok(())
    });
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    let io = |e: std::io::Error| err(format!("{}: {e}", dir.display()));
    std::fs::rename(&staging, dir).map_err(io)?;
    if let Some(parent) = dir.parent() {
        std::fs::File::open(parent)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
    }
    Ok(offset)
}

/// Writes each file of the stream below `staging` (synced); returns how many.
fn write_files(r: &mut Reader<'_>, staging: &Path) -> Result<u32, SnapshotError> {
    let mut count = 0u32;
    loop {
        let len = u16::from_le_bytes(r.array("path length")?) as usize;
        if len == 0 {
            return Ok(count);
        }
        if len > PATH_BYTES_MAX || count >= SNAPSHOT_FILES_MAX {
            return Err(err(format!(
                "snapshot file {count}: path or count out of bounds"
            )));
        }
        let name = std::str::from_utf8(r.take(len, "path")?)
            .map_err(|_| err(format!("snapshot file {count}: path is not UTF-8")))?;
        let rel = safe_path(name)?;
        let size = u64::from_le_bytes(r.array("file length")?);
        let size = usize::try_from(size).map_err(|_| err(format!("{name}: too long")))?;
        let data = r.take(size, name)?;
        let crc = u32::from_le_bytes(r.array("file checksum")?);
        if crc32c::crc32c(data) != crc {
            return Err(err(format!("snapshot file {name}: checksum mismatch")));
        }
        let path = staging.join(&rel);
        let io = |e: std::io::Error| err(format!("{}: {e}", path.display()));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        write_synced(&path, data).map_err(io)?;
        count += 1;
    }
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// True when `dir` holds nothing of a partition yet (no store, whose manifest records the
/// offset): a directory a copy may be installed as.
pub fn is_fresh(dir: &Path) -> bool {
    !dir.join("MANIFEST").exists()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_path_that_leaves_the_directory_is_refused() {
        assert!(safe_path("blocks/0001.blk").is_ok());
        assert!(safe_path("../x").is_err());
        assert!(safe_path("/etc/passwd").is_err());
        assert!(safe_path("").is_err());
    }
}
