//! Small files kept beside a journal: each written whole to a temporary file, synced, renamed
//! over the old one and the directory synced, so a crash leaves the old or the new, never a mix.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Longest state file read (a checks list of `CHECKS_MAX` specs fits).
pub const STATE_FILE_BYTES_MAX: u64 = 256 << 20;

/// Writes `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
    }
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

/// Writes a value as pretty JSON, atomically.
pub fn save_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(path, &bytes)
}

/// Reads a JSON file; `Ok(None)` when it does not exist.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, String> {
    let bytes = match read_bounded(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    let len = fs::metadata(path)?.len();
    if len > STATE_FILE_BYTES_MAX {
        return Err(io::Error::other(format!(
            "{len} bytes, more than the {STATE_FILE_BYTES_MAX} allowed"
        )));
    }
    fs::read(path)
}

/// The journal's life: a new epoch whenever the journal holds no segment (made or wiped), so
/// that its record numbers, which start again at 0, never repeat an (epoch, sequence) the core
/// has applied. Written before the journal takes any record.
pub fn epoch(data_dir: &Path, journal_dir: &Path, now_ms: u64) -> Result<u64, String> {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Epoch {
        epoch: u64,
    }
    let path = data_dir.join("epoch");
    let previous: Option<Epoch> = load_json(&path)?;
    let has_segments = fs::read_dir(journal_dir)
        .map(|entries| {
            entries.flatten().any(|e| {
                journal::format::parse_segment_file_name(&e.file_name().to_string_lossy()).is_some()
            })
        })
        .unwrap_or(false);
    if let (Some(p), true) = (&previous, has_segments) {
        return Ok(p.epoch);
    }
    let epoch = now_ms.max(previous.map_or(0, |p| p.epoch + 1)).max(1);
    save_json(&path, &Epoch { epoch }).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_is_kept_while_the_journal_is_and_grows_when_it_is_wiped() {
        let dir = tempfile::tempdir().unwrap();
        let j = dir.path().join("journal");
        let e1 = epoch(dir.path(), &j, 1000).unwrap();
        assert_eq!(e1, 1000);
        // No segment yet: a new life.
        let e2 = epoch(dir.path(), &j, 5).unwrap();
        assert_eq!(e2, 1001);
        fs::create_dir_all(&j).unwrap();
        fs::write(j.join(journal::format::segment_file_name(0)), b"x").unwrap();
        assert_eq!(epoch(dir.path(), &j, 99_999).unwrap(), 1001);
        fs::remove_dir_all(&j).unwrap();
        assert_eq!(epoch(dir.path(), &j, 2000).unwrap(), 2000);
    }
}
