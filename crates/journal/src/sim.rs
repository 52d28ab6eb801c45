//! An in-memory file system for tests: it remembers what is durable (synced) separately from what
//! is merely written, so a simulated power cut can drop unsynced writes, keep a random subset of
//! unsynced pages, or tear the last write; and it injects ENOSPC, EIO on sync, short writes and
//! EINTR. All randomness comes from one seed, so every failure replays exactly.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::vfs::{OpenMode, VFile, Vfs};

const PAGE_SIZE_BYTES: usize = 4096;

/// What survives a simulated power cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerLoss {
    /// Only synced data and synced directory entries survive.
    DropUnsynced,
    /// Each unsynced page independently survives or not.
    RandomPages,
    /// Everything written survives except a random suffix of the very last write.
    TearLastWrite,
}

/// Faults to inject; change them at any time with `SimFs::set_faults`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Total bytes the "disk" holds (sum of file sizes); growing past it fails with ENOSPC.
    pub capacity_bytes: Option<u64>,
    /// The n-th next sync (0 = the very next) fails with EIO and forgets the dirty pages, the way
    /// Linux may drop them and report the error only once.
    pub fail_sync_in: Option<u32>,
    /// Writes store a random non-empty prefix and report it (short writes).
    pub short_writes: bool,
    /// Reads, writes and syncs fail with EINTR one time in four before doing anything.
    pub eintr: bool,
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    dirty_pages: BTreeSet<usize>,
    last_write: Option<(usize, usize)>,
}

struct State {
    inodes: BTreeMap<u64, Inode>,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    next_inode: u64,
    generation: u64,
    rng: u64,
    faults: Faults,
}

impl State {
    fn next_random(&mut self) -> u64 {
        // splitmix64: tiny, deterministic, good enough to pick fault points.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn used_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.data.len() as u64).sum()
    }

    fn check_space(&self, grow_bytes: u64) -> io::Result<()> {
        match self.faults.capacity_bytes {
            Some(cap) if self.used_bytes() + grow_bytes > cap => {
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            _ => Ok(()),
        }
    }

    fn maybe_eintr(&mut self) -> io::Result<()> {
        if self.faults.eintr && self.next_random() & 3 == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINTR));
        }
        Ok(())
    }
}

/// The simulated file system. Clones share the same state.
#[derive(Clone)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panicking test thread must not hide the state from the assertions that follow.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_found() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOENT)
}

fn stale() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

impl SimFs {
    pub fn new(seed: u64) -> SimFs {
        let mut dirs = BTreeSet::new();
        dirs.insert(PathBuf::from("/"));
        SimFs {
            state: Arc::new(Mutex::new(State {
                inodes: BTreeMap::new(),
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                dirs,
                locks: BTreeSet::new(),
                next_inode: 1,
                generation: 0,
                rng: seed,
                faults: Faults::default(),
            })),
        }
    }

    pub fn set_faults(&self, faults: Faults) {
        lock(&self.state).faults = faults;
    }

    pub fn faults(&self) -> Faults {
        lock(&self.state).faults
    }

    /// Cuts the power: every open handle and lock dies, and the files become what survives.
    pub fn power_cut(&self, mode: PowerLoss) {
        let mut s = lock(&self.state);
        s.generation += 1;
        s.locks.clear();
        s.names = s.durable_names.clone();
        let live: BTreeSet<u64> = s.names.values().copied().collect();
        s.inodes.retain(|ino, _| live.contains(ino));
        let inos: Vec<u64> = s.inodes.keys().copied().collect();
        for ino in inos {
            let coin: Vec<u64> = (0..64).map(|_| s.next_random()).collect();
            let Some(inode) = s.inodes.get_mut(&ino) else {
                continue;
            };
            let mut survived = inode.durable.clone();
            match mode {
                PowerLoss::DropUnsynced => {}
                PowerLoss::RandomPages => {
                    survived.resize(inode.data.len(), 0);
                    for (i, &p) in inode.dirty_pages.iter().enumerate() {
                        if coin[i % coin.len()] & 1 == 1 {
                            copy_page(&mut survived, &inode.data, p);
                        }
                    }
                }
                PowerLoss::TearLastWrite => {
                    let mut all = inode.data.clone();
                    if let Some((at, len)) = inode.last_write {
                        let keep = (coin[0] % (len as u64 + 1)) as usize;
                        for (i, b) in all.iter_mut().enumerate().take(at + len).skip(at + keep) {
                            *b = survived.get(i).copied().unwrap_or(0);
                        }
                    }
                    survived = all;
                }
            }
            inode.data = survived.clone();
            inode.durable = survived;
            inode.dirty_pages.clear();
            inode.last_write = None;
        }
    }

    /// Flips one bit of a file's current and durable contents (bit rot).
    pub fn flip_bit(&self, path: &Path, byte: usize, bit: u8) -> io::Result<()> {
        let mut s = lock(&self.state);
        let ino = *s.names.get(path).ok_or_else(not_found)?;
        let inode = s.inodes.get_mut(&ino).ok_or_else(not_found)?;
        for buf in [&mut inode.data, &mut inode.durable] {
            if let Some(b) = buf.get_mut(byte) {
                *b ^= 1 << (bit % 8);
            }
        }
        Ok(())
    }

    /// A file's current contents (for assertions and corruption tests).
    pub fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let s = lock(&self.state);
        let ino = s.names.get(path).ok_or_else(not_found)?;
        Ok(s.inodes
            .get(ino)
            .map(|i| i.data.clone())
            .unwrap_or_default())
    }

    /// Replaces a file's contents (durably), for corruption tests.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut s = lock(&self.state);
        let ino = *s.names.get(path).ok_or_else(not_found)?;
        let inode = s.inodes.get_mut(&ino).ok_or_else(not_found)?;
        inode.data = bytes.to_vec();
        inode.durable = bytes.to_vec();
        Ok(())
    }
}

fn copy_page(dst: &mut Vec<u8>, src: &[u8], page: usize) {
    let start = page * PAGE_SIZE_BYTES;
    let end = (start + PAGE_SIZE_BYTES).min(src.len());
    if start >= end {
        return;
    }
    if dst.len() < end {
        dst.resize(end, 0);
    }
    dst[start..end].copy_from_slice(&src[start..end]);
}

struct SimFile {
    fs: SimFs,
    ino: u64,
    generation: u64,
    writable: bool,
}

impl SimFile {
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let s = lock(&self.fs.state);
        if s.generation != self.generation {
            return Err(stale());
        }
        Ok(s)
    }
}

fn mark_dirty(inode: &mut Inode, from: usize, to: usize) {
    if to > from {
        for p in from / PAGE_SIZE_BYTES..=(to - 1) / PAGE_SIZE_BYTES {
            inode.dirty_pages.insert(p);
        }
    }
}

impl VFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut s = self.state()?;
        s.maybe_eintr()?;
        let inode = s.inodes.get(&self.ino).ok_or_else(stale)?;
        let at = usize::try_from(offset).map_err(io::Error::other)?;
        if at >= inode.data.len() {
            return Ok(0);
        }
        let n = buf.len().min(inode.data.len() - at);
        buf[..n].copy_from_slice(&inode.data[at..at + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        if !self.writable {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        let mut s = self.state()?;
        s.maybe_eintr()?;
        let mut n = buf.len();
        if s.faults.short_writes && n > 1 {
            n = 1 + (s.next_random() % n as u64) as usize;
        }
        let at = usize::try_from(offset).map_err(io::Error::other)?;
        let len_now = s.inodes.get(&self.ino).map_or(0, |i| i.data.len());
        let grow = (at + n).saturating_sub(len_now) as u64;
        if grow > 0 {
            if let Some(cap) = s.faults.capacity_bytes {
                let free = cap.saturating_sub(s.used_bytes());
                if free == 0 {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                // Store what fits: the caller sees a short write, then ENOSPC.
                n = n.min((len_now as u64 + free).saturating_sub(at as u64) as usize);
                if n == 0 {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
            }
        }
        let inode = s.inodes.get_mut(&self.ino).ok_or_else(stale)?;
        if inode.data.len() < at + n {
            inode.data.resize(at + n, 0);
        }
        inode.data[at..at + n].copy_from_slice(&buf[..n]);
        mark_dirty(inode, at, at + n);
        inode.last_write = Some((at, n));
        Ok(n)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.state()?;
        s.maybe_eintr()?;
        let fail = match s.faults.fail_sync_in {
            Some(0) => {
                s.faults.fail_sync_in = None;
                true
            }
            Some(n) => {
                s.faults.fail_sync_in = Some(n - 1);
                false
            }
            None => false,
        };
        let inode = s.inodes.get_mut(&self.ino).ok_or_else(stale)?;
        if fail {
            // The kernel may drop the dirty pages and report the error only this once.
            inode.dirty_pages.clear();
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let pages: Vec<usize> = inode.dirty_pages.iter().copied().collect();
        inode.durable.resize(inode.data.len(), 0);
        for p in pages {
            copy_page(&mut inode.durable, &inode.data, p);
        }
        inode.dirty_pages.clear();
        inode.last_write = None;
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.state()?;
        Ok(s.inodes.get(&self.ino).map_or(0, |i| i.data.len() as u64))
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        let mut s = self.state()?;
        let len = usize::try_from(len_bytes).map_err(io::Error::other)?;
        let now = s.inodes.get(&self.ino).map_or(0, |i| i.data.len());
        if len > now {
            s.check_space((len - now) as u64)?;
        }
        let inode = s.inodes.get_mut(&self.ino).ok_or_else(stale)?;
        let old = inode.data.len();
        inode.data.resize(len, 0);
        mark_dirty(inode, old.min(len), old.max(len));
        Ok(())
    }

    fn allocate(&self, len_bytes: u64) -> io::Result<()> {
        let now = self.len()?;
        if len_bytes > now {
            self.set_len(len_bytes)?;
        }
        Ok(())
    }
}

struct SimLock {
    fs: SimFs,
    path: PathBuf,
    generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut s = lock(&self.fs.state);
        if s.generation == self.generation {
            s.locks.remove(&self.path);
        }
    }
}

impl Vfs for SimFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VFile>> {
        let mut s = lock(&self.state);
        let parent = path.parent().ok_or_else(not_found)?;
        if !s.dirs.contains(parent) {
            return Err(not_found());
        }
        let existing = s.names.get(path).copied();
        let ino = match (mode, existing) {
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::from_raw_os_error(libc::EEXIST))
            }
            (OpenMode::Read | OpenMode::Write, None) => return Err(not_found()),
            (_, Some(ino)) => ino,
            (_, None) => {
                let ino = s.next_inode;
                s.next_inode += 1;
                s.inodes.insert(ino, Inode::default());
                s.names.insert(path.to_path_buf(), ino);
                ino
            }
        };
        Ok(Arc::new(SimFile {
            fs: self.clone(),
            ino,
            generation: s.generation,
            writable: mode != OpenMode::Read,
        }))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = lock(&self.state);
        if !s.dirs.contains(dir) {
            return Err(not_found());
        }
        let mut out: Vec<String> = s
            .names
            .keys()
            .chain(s.dirs.iter())
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        s.names.remove(path).ok_or_else(not_found)?;
        // The inode lives on while durable names or handles may still refer to it.
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        let ino = s.names.remove(from).ok_or_else(not_found)?;
        s.names.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        // Directories are made durable at once: the matrix is about files, not mkdir.
        for a in path.ancestors() {
            s.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = lock(&self.state);
        let State {
            names,
            durable_names,
            ..
        } = &mut *s;
        durable_names.retain(|p, _| p.parent() != Some(dir));
        for (p, ino) in names.iter() {
            if p.parent() == Some(dir) {
                durable_names.insert(p.clone(), *ino);
            }
        }
        Ok(())
    }

    fn lock_exclusive(&self, path: &Path) -> io::Result<Box<dyn Any + Send + Sync>> {
        let mut s = lock(&self.state);
        if !s.locks.insert(path.to_path_buf()) {
            return Err(io::Error::from_raw_os_error(libc::EWOULDBLOCK));
        }
        Ok(Box::new(SimLock {
            fs: self.clone(),
            path: path.to_path_buf(),
            generation: s.generation,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let s = lock(&self.state);
        s.names.contains_key(path) || s.dirs.contains(path)
    }
}
