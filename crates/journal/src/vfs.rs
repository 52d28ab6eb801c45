//! The file layer the engine writes through. `RealFs` is the operating system; `sim::SimFs` is an
//! in-memory file system that injects faults and simulates power loss, so the crash and fault
//! matrix can run in-process and deterministically.

use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist. Readers use only this mode.
    Read,
    /// Read and write; the file must exist.
    Write,
    /// Read and write; the file must not exist.
    CreateNew,
    /// Read and write; created when missing.
    CreateOrOpen,
}

/// An open file. Positional I/O only, so one handle can be shared between threads.
#[allow(clippy::len_without_is_empty)]
pub trait VFile: Send + Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    fn sync_data(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len_bytes: u64) -> io::Result<()>;
    /// Reserves blocks up to `len_bytes` so later writes inside it need no allocation.
    fn allocate(&self, len_bytes: u64) -> io::Result<()>;
    /// Starts writing dirty pages back without waiting (advisory), so a later sync is cheap.
    fn start_writeback(&self) -> io::Result<()> {
        Ok(())
    }
    /// The whole file mapped read-only, for files nothing writes to or truncates any more
    /// (the store's blocks): reads then cost no system call and no copy. `None` where the file
    /// system cannot map (then read with `read_at`). The caller promises immutability: a file
    /// truncated under a mapping faults the reader (SIGBUS).
    fn map_immutable(&self) -> Option<Mapped> {
        None
    }
}

/// A read-only mapping of a whole file.
pub type Mapped = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A directory tree of files.
pub trait Vfs: Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VFile>>;
    /// File names (not paths) directly inside `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Makes creates, renames and deletes inside `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock, released when the returned guard is dropped or the process dies.
    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>>;
    fn exists(&self, path: &Path) -> bool;
}

/// Bound on consecutive EINTR retries before giving up (a signal storm is a failure, not a spin).
pub const EINTR_RETRIES_MAX: u32 = 1000;

/// Writes all of `buf` at `offset`: short writes advance, EINTR retries (bounded), a zero-byte
/// write is an error. Never retries the same bytes after a real error such as ENOSPC.
pub fn write_all_at(file: &dyn VFile, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0usize;
    let mut interrupts = 0u32;
    // Each successful iteration writes at least one byte, so buf.len() + interrupts bounds it.
    let iterations_max = buf.len() as u64 + u64::from(EINTR_RETRIES_MAX) + 1;
    for _ in 0..iterations_max {
        if done == buf.len() {
            return Ok(());
        }
        match file.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                assert!(n <= buf.len() - done);
                done += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                interrupts += 1;
                if interrupts > EINTR_RETRIES_MAX {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    if done == buf.len() {
        return Ok(());
    }
    Err(io::Error::other("write_all_at: iteration bound reached"))
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns the bytes read.
pub fn read_full_at(file: &dyn VFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0usize;
    let mut interrupts = 0u32;
    let iterations_max = buf.len() as u64 + u64::from(EINTR_RETRIES_MAX) + 1;
    for _ in 0..iterations_max {
        if done == buf.len() {
            break;
        }
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                interrupts += 1;
                if interrupts > EINTR_RETRIES_MAX {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Syncs, retrying EINTR a bounded number of times. Any other error is final.
pub fn sync_data(file: &dyn VFile) -> io::Result<()> {
    let mut interrupts = 0u32;
    loop {
        match file.sync_data() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted && interrupts < EINTR_RETRIES_MAX => {
                interrupts += 1;
            }
            other => return other,
        }
    }
}

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

struct RealFile(File);

impl VFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.0.set_len(len_bytes)
    }
    fn map_immutable(&self) -> Option<Mapped> {
        if self.len().ok()? == 0 {
            return None;
        }
        // SAFETY: the mapping is read-only and `map_immutable`'s callers only map files that
        // are never written or truncated again (see the trait); the bytes are plain `u8`s, valid
        // whatever they hold.
        let map = unsafe { memmap2::Mmap::map(&self.0) }.ok()?;
        Some(Arc::new(map))
    }
    fn allocate(&self, len_bytes: u64) -> io::Result<()> {
        let len = libc::off_t::try_from(len_bytes).map_err(io::Error::other)?;
        // SAFETY: posix_fallocate on an open descriptor owned by self; no memory is passed.
        let rc = unsafe { libc::posix_fallocate(self.0.as_raw_fd(), 0, len) };
        match rc {
            0 => Ok(()),
            // File systems without fallocate: fall back to a sparse length (still correct, only
            // the sync cost of the first write to each block is higher).
            libc::EOPNOTSUPP | libc::EINVAL => self.0.set_len(len_bytes.max(self.len()?)),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
    fn start_writeback(&self) -> io::Result<()> {
        // SAFETY: sync_file_range on an open descriptor owned by self; no memory is passed.
        let rc =
            unsafe { libc::sync_file_range(self.0.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

struct RealLock(#[allow(dead_code)] File);

impl Vfs for RealFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VFile>> {
        let mut o = OpenOptions::new();
        match mode {
            OpenMode::Read => o.read(true),
            OpenMode::Write => o.read(true).write(true),
            OpenMode::CreateNew => o.read(true).write(true).create_new(true),
            OpenMode::CreateOrOpen => o.read(true).write(true).create(true),
        };
        Ok(Arc::new(RealFile(o.open(path)?)))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(n) = entry?.file_name().to_str() {
                names.push(n.to_string());
            }
        }
        names.sort();
        Ok(names)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        // SAFETY: flock on an open descriptor owned by `f`; no memory is passed.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Box::new(RealLock(f)))
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}
