//! What the benchmark measures besides CPU time: memory (Linux `/proc/self`), bytes on disk,
//! and a one-line JSON writer for the results.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Directory entries visited when sizing a store, so a runaway tree cannot loop forever.
pub const DISK_ENTRIES_MAX: usize = 1_000_000;
/// Clock ticks per second of `/proc/self/stat` times (Linux `USER_HZ`, 100 on every ABI Rust
/// supports).
const USER_HZ: f64 = 100.0;

/// A `kB` field of `/proc/self/status` in bytes: `VmRSS` (resident now), `VmHWM` (peak).
pub fn status_bytes(field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    let line = status
        .lines()
        .find(|l| {
            l.strip_prefix(field)
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .ok_or_else(|| format!("/proc/self/status has no {field} line"))?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("/proc/self/status: unreadable {field} line {line:?}"))?;
    Ok(kb * 1024)
}

/// Process user and system CPU seconds (all threads) from `/proc/self/stat` (10 ms ticks).
pub fn user_sys_s() -> Result<(f64, f64), String> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|e| format!("reading /proc/self/stat: {e}"))?;
    // The command name may hold spaces and parentheses; fields after it are plain numbers.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| "/proc/self/stat has no ')'".to_string())?;
    // After the name: state is field 3, utime field 14, stime field 15 (1-based, `man proc`).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|t| t as f64 / USER_HZ)
            .ok_or_else(|| format!("/proc/self/stat: field {} unreadable", i + 3))
    };
    Ok((tick(11)?, tick(12)?))
}

/// Bytes of one top-level entry of a store directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirBytes {
    pub name: String,
    /// Sum of file lengths.
    pub apparent: u64,
    /// Blocks the file system allocated (`du`); preallocated WAL segments count whole.
    pub allocated: u64,
    /// What the store's data occupies: for `wal`, the segment headers plus the frames written
    /// (not the preallocated zeros after them) plus the other files; elsewhere, `apparent`.
    pub used: u64,
}

/// Per top-level entry of `dir` (a file directly in `dir` is its own entry), sorted by name.
pub fn disk_usage(dir: &Path) -> Result<Vec<DirBytes>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("listing {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut bytes = DirBytes {
            name,
            ..DirBytes::default()
        };
        let mut visited = 0usize;
        add_tree(&entry.path(), &mut bytes, &mut visited)?;
        bytes.used = bytes.apparent;
        if bytes.name == "wal" && entry.path().is_dir() {
            bytes.used = wal_used_bytes(&entry.path(), bytes.apparent)?;
        }
        out.push(bytes);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn add_tree(path: &Path, bytes: &mut DirBytes, visited: &mut usize) -> Result<(), String> {
    *visited += 1;
    if *visited > DISK_ENTRIES_MAX {
        return Err(format!(
            "more than {DISK_ENTRIES_MAX} entries under {}",
            path.display()
        ));
    }
    let meta =
        std::fs::symlink_metadata(path).map_err(|e| format!("stat {}: {e}", path.display()))?;
    if meta.is_dir() {
        let entries =
            std::fs::read_dir(path).map_err(|e| format!("listing {}: {e}", path.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("listing {}: {e}", path.display()))?;
            add_tree(&entry.path(), bytes, visited)?;
        }
    } else {
        bytes.apparent += meta.len();
        bytes.allocated += meta.blocks() * 512;
    }
    Ok(())
}

/// The WAL's bytes without the unwritten preallocated tails of its segments: the journal's own
/// CRC walk says how many bytes of each segment hold frames.
fn wal_used_bytes(wal: &Path, apparent: u64) -> Result<u64, String> {
    let inspection = journal::tools::inspect(&journal::vfs::RealFs, wal)
        .map_err(|e| format!("inspecting the WAL in {}: {e}", wal.display()))?;
    let mut unused = 0u64;
    for segment in &inspection.segments {
        let written = journal::format::SEGMENT_HEADER_SIZE_BYTES + segment.used_bytes;
        unused += segment.size_bytes.saturating_sub(written);
    }
    Ok(apparent.saturating_sub(unused))
}

/// A JSON object written field by field (numbers and plain strings only: the benchmark's keys
/// and values never need escaping beyond quotes and backslashes).
#[derive(Default)]
pub struct JsonObject {
    text: String,
}

impl JsonObject {
    pub fn new() -> JsonObject {
        JsonObject::default()
    }

    fn key(&mut self, key: &str) {
        self.text.push(if self.text.is_empty() { '{' } else { ',' });
        push_string(&mut self.text, key);
        self.text.push(':');
    }

    pub fn str(mut self, key: &str, value: &str) -> JsonObject {
        self.key(key);
        push_string(&mut self.text, value);
        self
    }

    pub fn int(mut self, key: &str, value: u64) -> JsonObject {
        self.key(key);
        let _ = write!(self.text, "{value}");
        self
    }

    /// A float with `digits` decimals; non-finite values become `null`.
    pub fn num(mut self, key: &str, value: f64, digits: usize) -> JsonObject {
        self.key(key);
        if value.is_finite() {
            let _ = write!(self.text, "{value:.digits$}");
        } else {
            self.text.push_str("null");
        }
        self
    }

    pub fn obj(mut self, key: &str, value: JsonObject) -> JsonObject {
        self.key(key);
        self.text.push_str(&value.finish());
        self
    }

    pub fn finish(mut self) -> String {
        if self.text.is_empty() {
            self.text.push('{');
        }
        self.text.push('}');
        self.text
    }
}

fn push_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
