//! Files written only when their content (or mode) changes, and always atomically: a temporary
//! file beside the target, synced, renamed over it, the directory synced. A crash leaves the old
//! file or the new one, never a torn one, so a re-run after a kill converges.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::report::Outcome;

/// Chunk in which files are compared and copied, in bytes.
const CHUNK_BYTES: usize = 256 * 1024;
/// Largest file compared or copied (the `strata` binary is far below it), in bytes.
pub const FILE_BYTES_MAX: u64 = 1 << 30;

fn tmp_path(path: &Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.strata-tmp"))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// The mode bits of `path` (permission bits only), or `None` when it does not exist.
fn mode_of(path: &Path) -> std::io::Result<Option<u32>> {
    match fs::metadata(path) {
        Ok(m) => Ok(Some(m.permissions().mode() & 0o7777)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether two readers yield the same bytes (read in bounded chunks).
fn same_stream(mut a: impl Read, mut b: impl Read) -> std::io::Result<bool> {
    let mut ba = vec![0u8; CHUNK_BYTES];
    let mut bb = vec![0u8; CHUNK_BYTES];
    let mut total: u64 = 0;
    loop {
        let na = read_full(&mut a, &mut ba)?;
        let nb = read_full(&mut b, &mut bb)?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
        total += na as u64;
        if total > FILE_BYTES_MAX {
            return Err(std::io::Error::other(format!(
                "larger than {FILE_BYTES_MAX} bytes"
            )));
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// What writing `bytes` at `path` with `mode` would do, without doing it.
pub fn plan_bytes(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<Outcome> {
    let Some(old_mode) = mode_of(path)? else {
        return Ok(Outcome::Created);
    };
    let same = fs::metadata(path)?.len() == bytes.len() as u64
        && same_stream(fs::File::open(path)?, bytes)?;
    Ok(if same && old_mode == mode {
        Outcome::Unchanged
    } else {
        Outcome::Updated
    })
}

/// Writes `bytes` at `path` with `mode`, unless it already holds them with that mode.
pub fn write_bytes(path: &Path, bytes: &[u8], mode: u32, dry_run: bool) -> Result<Outcome, String> {
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let outcome = plan_bytes(path, bytes, mode).map_err(at)?;
    if dry_run || outcome == Outcome::Unchanged {
        return Ok(outcome);
    }
    replace_with(path, mode, |f| f.write_all(bytes)).map_err(at)?;
    Ok(outcome)
}

/// Copies the file `from` to `path` with `mode`, unless `path` already holds its bytes.
pub fn copy_file(from: &Path, path: &Path, mode: u32, dry_run: bool) -> Result<Outcome, String> {
    let at = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let len = fs::metadata(from).map_err(|e| at(from, e))?.len();
    if len > FILE_BYTES_MAX {
        return Err(format!(
            "{}: {len} bytes, more than {FILE_BYTES_MAX}",
            from.display()
        ));
    }
    let outcome = match mode_of(path).map_err(|e| at(path, e))? {
        None => Outcome::Created,
        Some(old_mode) => {
            let same = fs::metadata(path).map_err(|e| at(path, e))?.len() == len
                && same_stream(
                    fs::File::open(path).map_err(|e| at(path, e))?,
                    fs::File::open(from).map_err(|e| at(from, e))?,
                )
                .map_err(|e| at(path, e))?;
            if same && old_mode == mode {
                Outcome::Unchanged
            } else {
                Outcome::Updated
            }
        }
    };
    if dry_run || outcome == Outcome::Unchanged {
        return Ok(outcome);
    }
    let mut src = fs::File::open(from).map_err(|e| at(from, e))?;
    replace_with(path, mode, |f| {
        std::io::copy(&mut (&mut src).take(FILE_BYTES_MAX), f).map(|_| ())
    })
    .map_err(|e| at(path, e))?;
    Ok(outcome)
}

/// Writes a temporary file with `fill`, gives it `mode` before any content can be read through
/// a looser one, syncs it and renames it over `path`.
fn replace_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir)?;
    let tmp = tmp_path(path);
    let _ = fs::remove_file(&tmp);
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        fill(&mut f)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// Makes `path` a directory with `mode`.
pub fn ensure_dir(path: &Path, mode: u32, dry_run: bool) -> Result<Outcome, String> {
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    let outcome = match mode_of(path).map_err(at)? {
        None => Outcome::Created,
        Some(_) if !path.is_dir() => {
            return Err(format!("{}: exists and is not a directory", path.display()))
        }
        Some(m) if m == mode => Outcome::Unchanged,
        Some(_) => Outcome::Updated,
    };
    if dry_run || outcome == Outcome::Unchanged {
        return Ok(outcome);
    }
    fs::create_dir_all(path).map_err(at)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(at)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent).map_err(at)?;
    }
    Ok(outcome)
}

/// Removes a file (or, with `tree`, a directory and everything in it).
pub fn remove(path: &Path, tree: bool, dry_run: bool) -> Result<Outcome, String> {
    let at = |e: std::io::Error| format!("{}: {e}", path.display());
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Outcome::Absent),
        Err(e) => return Err(at(e)),
        Ok(_) if dry_run => return Ok(Outcome::Removed),
        Ok(m) if m.is_dir() && tree => fs::remove_dir_all(path).map_err(at)?,
        Ok(m) if m.is_dir() => fs::remove_dir(path).map_err(at)?,
        Ok(_) => fs::remove_file(path).map_err(at)?,
    }
    Ok(Outcome::Removed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn writes_only_when_content_or_mode_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etc/strata/token");
        assert_eq!(
            write_bytes(&path, b"s3cret", 0o600, false).unwrap(),
            Outcome::Created
        );
        let inode = fs::metadata(&path).unwrap().ino();
        assert_eq!(
            write_bytes(&path, b"s3cret", 0o600, false).unwrap(),
            Outcome::Unchanged
        );
        // Not rewritten: the same inode.
        assert_eq!(fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(
            write_bytes(&path, b"s3cret", 0o640, true).unwrap(),
            Outcome::Updated
        );
        assert_eq!(mode_of(&path).unwrap(), Some(0o600));
        assert_eq!(
            write_bytes(&path, b"other", 0o600, false).unwrap(),
            Outcome::Updated
        );
        assert_eq!(fs::read(&path).unwrap(), b"other");
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn copies_compare_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let big: Vec<u8> = (0..CHUNK_BYTES * 2 + 7).map(|i| (i % 251) as u8).collect();
        fs::write(&src, &big).unwrap();
        let dst = dir.path().join("bin/strata");
        assert_eq!(
            copy_file(&src, &dst, 0o755, false).unwrap(),
            Outcome::Created
        );
        assert_eq!(
            copy_file(&src, &dst, 0o755, false).unwrap(),
            Outcome::Unchanged
        );
        let mut changed = big.clone();
        changed[CHUNK_BYTES + 3] ^= 1;
        fs::write(&src, &changed).unwrap();
        assert_eq!(
            copy_file(&src, &dst, 0o755, false).unwrap(),
            Outcome::Updated
        );
        assert_eq!(fs::read(&dst).unwrap(), changed);
    }

    #[test]
    fn directories_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("var/lib/strata/agent");
        assert_eq!(ensure_dir(&d, 0o700, false).unwrap(), Outcome::Created);
        assert_eq!(ensure_dir(&d, 0o700, false).unwrap(), Outcome::Unchanged);
        fs::write(d.join("journal"), b"x").unwrap();
        assert_eq!(remove(&d, true, false).unwrap(), Outcome::Removed);
        assert_eq!(remove(&d, true, false).unwrap(), Outcome::Absent);
    }
}
