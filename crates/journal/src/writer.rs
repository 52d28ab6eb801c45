//! The writer: recovery on open, appends with explicit durability, group commit, segment roll and
//! deletion.
//!
//! Appenders copy records into a bounded pending buffer and get a [`Ticket`]. One flusher thread
//! turns the pending buffer into frames, writes them, syncs when the durability mode asks for it,
//! publishes the committed offset, and only then completes the tickets. So concurrent appenders
//! share one `fdatasync`, and an acknowledgement always means the stated durability was reached.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::format::{
    self, FRAME_HEADER_SIZE_BYTES, RECORD_PREFIX_SIZE_BYTES, SEGMENT_HEADER_SIZE_BYTES,
};
use crate::reader::{CommittedSource, Reader};
use crate::segment::{self, Scanner, Segment};
use crate::subscribers::{self, Start, Subscriber, SubscriberInfo};
use crate::vfs::{self, OpenMode, RealFs, VFile, Vfs};

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After the frame is written to the page cache: survives a process crash, not power loss.
    Buffered,
    /// After `fdatasync` of the frame containing the record. A sync starts when `max_bytes` are
    /// pending, when someone waits for an acknowledgement, or when the oldest pending record has
    /// waited `max_delay`; concurrent appenders share one sync.
    GroupCommit {
        max_bytes: usize,
        max_delay: Duration,
    },
    /// After a sync that covers this append alone (plus whatever was appended concurrently).
    Always,
}

impl Default for Durability {
    fn default() -> Durability {
        Durability::GroupCommit {
            max_bytes: 128 << 10,
            max_delay: Duration::from_millis(2),
        }
    }
}

/// How much history to keep even after every subscriber has read it (so rewinds can go back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep at least this many bytes of segments.
    pub bytes_min: u64,
    /// Keep a segment until its newest record is at least this old.
    pub age_ms_min: u64,
}

/// Journal options.
#[derive(Clone)]
pub struct Options {
    pub durability: Durability,
    /// Size of each preallocated segment file.
    pub segment_size_bytes: u64,
    /// Compress each frame with LZ4 (kept raw when compression does not help).
    pub lz4: bool,
    pub retention: Retention,
    /// Bound on records accepted but not yet written; appenders wait beyond it (back-pressure).
    pub pending_bytes_max: usize,
    /// Bound on one frame's decoded body (a single larger record gets a frame of its own).
    pub frame_raw_bytes_max: usize,
    /// The file layer; `RealFs` unless a test injects faults.
    pub vfs: Arc<dyn Vfs>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            durability: Durability::default(),
            segment_size_bytes: 64 << 20,
            lz4: false,
            retention: Retention::default(),
            pending_bytes_max: 4 << 20,
            frame_raw_bytes_max: 4 << 20,
            vfs: Arc::new(RealFs),
        }
    }
}

/// Buffered mode flushes at this many pending bytes or this age, unless someone waits first.
const BUFFERED_BYTES_TRIGGER: usize = 128 << 10;
const BUFFERED_DELAY: Duration = Duration::from_millis(2);

impl Options {
    fn validate(&self) -> Result<()> {
        let size = self.segment_size_bytes;
        if !(format::SEGMENT_SIZE_BYTES_MIN..=format::SEGMENT_SIZE_BYTES_MAX).contains(&size) {
            return Err(Error::InvalidOptions("segment_size_bytes out of range"));
        }
        if self.pending_bytes_max == 0 || self.frame_raw_bytes_max < RECORD_PREFIX_SIZE_BYTES {
            return Err(Error::InvalidOptions("pending/frame bounds too small"));
        }
        Ok(())
    }

    /// The largest record a segment can hold in a frame of its own.
    pub fn record_size_bytes_max(&self) -> u64 {
        self.segment_size_bytes
            - SEGMENT_HEADER_SIZE_BYTES
            - FRAME_HEADER_SIZE_BYTES as u64
            - RECORD_PREFIX_SIZE_BYTES as u64
    }

    fn trigger(&self) -> (usize, Duration) {
        match self.durability {
            Durability::Buffered => (BUFFERED_BYTES_TRIGGER, BUFFERED_DELAY),
            Durability::GroupCommit {
                max_bytes,
                max_delay,
            } => (max_bytes, max_delay),
            Durability::Always => (0, Duration::ZERO),
        }
    }

    fn syncs(&self) -> bool {
        self.durability != Durability::Buffered
    }
}

/// What recovery found when the journal was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Non-zero bytes after the last valid frame that were discarded (a torn or garbage tail).
    pub truncated_bytes: u64,
    /// Temp files left by an interrupted segment or checkpoint creation.
    pub temp_files_removed: u64,
    /// Subscribers whose checkpoint pointed past the recovered end (possible only after a power
    /// loss in Buffered mode) and were moved back to it.
    pub checkpoints_clamped: u64,
}

/// What a purge deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    pub segments_deleted: u64,
    pub bytes_deleted: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    NoSpace,
    Poisoned,
    Closed,
}

impl Failure {
    fn error(self) -> Error {
        match self {
            Failure::NoSpace => Error::NoSpace,
            Failure::Poisoned => Error::Poisoned,
            Failure::Closed => Error::Closed,
        }
    }
}

#[derive(Default)]
struct TicketState {
    result: Option<std::result::Result<(), Failure>>,
    waker: Option<Waker>,
}

/// A one-shot completion cell shared by a ticket and the flusher.
#[derive(Default)]
struct TicketCell(Mutex<TicketState>);

impl TicketCell {
    fn complete(&self, result: std::result::Result<(), Failure>) {
        let waker = {
            let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if s.result.is_none() {
                s.result = Some(result);
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The acknowledgement of one `submit`: completes when the records reached the durability level.
/// Await it (it is a `Future`, runtime-agnostic) or call [`Ticket::wait`].
#[must_use = "an append is acknowledged only when its ticket completes"]
pub struct Ticket {
    cell: Arc<TicketCell>,
    inner: Arc<Inner>,
    range: Range<u64>,
}

impl Ticket {
    /// The offsets the submitted records got.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// Blocks until the records are durable at the journal's level.
    pub fn wait(mut self) -> Result<Range<u64>> {
        let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(r) = Pin::new(&mut self).poll(&mut cx) {
                return r;
            }
            // Spurious wake-ups are fine: the loop re-polls.
            thread::park_timeout(Duration::from_millis(50));
        }
    }
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

impl Future for Ticket {
    type Output = Result<Range<u64>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        {
            let mut s = self.cell.0.lock().unwrap_or_else(|e| e.into_inner());
            match s.result {
                Some(Ok(())) => return Poll::Ready(Ok(self.range.clone())),
                Some(Err(f)) => return Poll::Ready(Err(f.error())),
                None => s.waker = Some(cx.waker().clone()),
            }
        }
        // Someone is waiting: the flusher should not hold these records back any longer.
        self.inner.demand();
        Poll::Pending
    }
}

/// Records accepted but not yet written.
#[derive(Default)]
struct Pending {
    first_offset: u64,
    record_count: u64,
    /// `len u32 | bytes` per record, exactly the decoded frame body format.
    raw: Vec<u8>,
    tickets: Vec<(u64, Arc<TicketCell>)>,
    since: Option<Instant>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Normally every ticket is completed before this; if a panic unwinds through the flusher
        // the waiters get an error instead of hanging. Completing twice is a no-op.
        for (_, cell) in &self.tickets {
            cell.complete(Err(Failure::Poisoned));
        }
    }
}

struct State {
    next_offset: u64,
    pending: Pending,
    /// Someone waits for an acknowledgement: flush now.
    demand: bool,
    shutdown: bool,
}

/// The flusher's side: the active segment and where the next frame goes.
struct Io {
    active: Segment,
    /// File position of the next frame in the active segment.
    write_pos: u64,
    /// Offset after the last frame written.
    written_offset: u64,
    frames: Vec<u8>,
    scratch: Vec<u8>,
    /// Buffered mode: sealed segments not yet synced (synced at close).
    unsynced_sealed: Vec<Arc<dyn VFile>>,
}

/// Bound on sealed-but-unsynced segments in Buffered mode.
const UNSYNCED_SEALED_MAX: usize = 16;

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) opts: Options,
    state: Mutex<State>,
    /// Wakes the flusher (new data, demand, shutdown).
    flusher_cv: Condvar,
    /// Wakes appenders waiting for pending space.
    space_cv: Condvar,
    io: Mutex<Io>,
    /// Emptied pending buffers kept for reuse (at most `SPARE_BUFFERS_MAX`).
    spare_buffers: Mutex<Vec<Vec<u8>>>,
    /// Written-but-unsynced data and its tickets, handed from the flusher to the syncer.
    sync: Mutex<SyncQueue>,
    /// Wakes the syncer (new data, shutdown) and the flusher (sync progress).
    sync_cv: Condvar,
    /// Serialises publication so the committed offset only grows.
    committed_file: Mutex<Arc<dyn VFile>>,
    /// Offset below which every record is acknowledged and visible to readers.
    pub(crate) committed: AtomicU64,
    poisoned: AtomicBool,
    _lock: Box<dyn std::any::Any + Send + Sync>,
}

fn relock<'a, T>(r: std::sync::LockResult<MutexGuard<'a, T>>) -> MutexGuard<'a, T> {
    // A panic elsewhere must not stop the flusher from failing tickets cleanly.
    r.unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn demand(&self) {
        let mut s = relock(self.state.lock());
        if !s.pending.tickets.is_empty() && !s.demand {
            s.demand = true;
            self.flusher_cv.notify_one();
        }
    }

    fn fs(&self) -> &dyn Vfs {
        &*self.opts.vfs
    }
}

/// The single writer of a journal directory.
pub struct Journal {
    inner: Arc<Inner>,
    flusher: Option<JoinHandle<()>>,
    syncer: Option<JoinHandle<()>>,
    recovery: RecoveryReport,
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir`, takes the writer lock, and recovers:
    /// removes temp files, truncates a torn or zero-filled tail, and clamps checkpoints.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Journal> {
        opts.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let fs = opts.vfs.clone();
        fs.create_dir_all(&dir)?;
        let lock = fs
            .lock_exclusive(&dir.join(format::LOCK_FILE))
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    Error::Locked
                } else {
                    Error::from_io(e)
                }
            })?;
        let mut recovery = RecoveryReport {
            temp_files_removed: remove_temp_files(&*fs, &dir)?,
            ..Default::default()
        };
        let mut bases = segment::list_segments(&*fs, &dir)?;
        if bases.is_empty() {
            segment::create_segment(&*fs, &dir, 0, opts.segment_size_bytes)?;
            bases.push(0);
        }
        for &base in &bases {
            segment::open_segment(&*fs, &dir, base, OpenMode::Read)?;
        }
        let last = *bases.last().ok_or(Error::InvalidOptions("no segment"))?;
        let active = segment::open_segment(&*fs, &dir, last, OpenMode::Write)?;
        let (write_pos, next_offset, truncated) = recover_tail(&*fs, &dir, active.clone())?;
        recovery.truncated_bytes = truncated;
        let committed_file = fs.open(&dir.join(format::COMMITTED_FILE), OpenMode::CreateOrOpen)?;
        vfs::write_all_at(&*committed_file, &format::encode_committed(next_offset), 0)?;
        recovery.checkpoints_clamped = subscribers::clamp_all(&*fs, &dir, next_offset)?;
        let io = Io {
            active,
            write_pos,
            written_offset: next_offset,
            frames: Vec::new(),
            scratch: Vec::new(),
            unsynced_sealed: Vec::new(),
        };
        let inner = Arc::new(Inner {
            dir,
            opts,
            state: Mutex::new(State {
                next_offset,
                pending: {
                    let mut p = Pending::default();
                    p.first_offset = next_offset;
                    p
                },
                demand: false,
                shutdown: false,
            }),
            flusher_cv: Condvar::new(),
            space_cv: Condvar::new(),
            io: Mutex::new(io),
            spare_buffers: Mutex::new(Vec::new()),
            sync: Mutex::new(SyncQueue {
                written_offset: next_offset,
                synced_offset: next_offset,
                ..SyncQueue::default()
            }),
            sync_cv: Condvar::new(),
            committed_file: Mutex::new(committed_file),
            committed: AtomicU64::new(next_offset),
            poisoned: AtomicBool::new(false),
            _lock: lock,
        });
        let flusher_inner = inner.clone();
        let flusher = thread::Builder::new()
            .name("journal-flusher".into())
            .spawn(move || flusher_main(&flusher_inner))?;
        let syncer = if inner.opts.syncs() {
            let syncer_inner = inner.clone();
            Some(
                thread::Builder::new()
                    .name("journal-syncer".into())
                    .spawn(move || syncer_main(&syncer_inner))?,
            )
        } else {
            None
        };
        Ok(Journal {
            inner,
            flusher: Some(flusher),
            syncer,
            recovery,
        })
    }

    /// What recovery did when this journal was opened.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.recovery
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Offset below which records are acknowledged and readable.
    pub fn committed_offset(&self) -> u64 {
        self.inner.committed.load(Ordering::Acquire)
    }

    /// Offset of the oldest retained record.
    pub fn earliest_offset(&self) -> Result<u64> {
        Ok(segment::list_segments(self.inner.fs(), &self.inner.dir)?
            .first()
            .copied()
            .unwrap_or(0))
    }

    pub fn is_poisoned(&self) -> bool {
        self.inner.poisoned.load(Ordering::Acquire)
    }

    /// Accepts records and returns at once with a ticket that completes at the durability level.
    /// All records of one call get consecutive offsets. Waits only when the pending buffer is
    /// full (back-pressure).
    pub fn submit<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<Ticket> {
        let size_max = self.inner.opts.record_size_bytes_max();
        let mut batch_bytes = 0usize;
        for r in records {
            let len = r.as_ref().len() as u64;
            if len > size_max {
                return Err(Error::RecordTooLarge {
                    size_bytes: len,
                    size_bytes_max: size_max,
                });
            }
            batch_bytes += RECORD_PREFIX_SIZE_BYTES + r.as_ref().len();
        }
        let inner = &self.inner;
        let mut s = self.wait_for_room(batch_bytes)?;
        let first = s.next_offset;
        if s.pending.record_count == 0 {
            s.pending.first_offset = first;
            s.pending.since = Some(Instant::now());
        }
        assert_eq!(s.pending.first_offset + s.pending.record_count, first);
        if s.pending.raw.is_empty() {
            // Room for the frame header, so a flush can usually write this buffer as one frame
            // without copying it.
            s.pending.raw.resize(FRAME_HEADER_SIZE_BYTES, 0);
        }
        s.pending.raw.reserve(batch_bytes);
        for r in records {
            let r = r.as_ref();
            s.pending
                .raw
                .extend_from_slice(&(r.len() as u32).to_le_bytes());
            s.pending.raw.extend_from_slice(r);
        }
        let n = records.len() as u64;
        s.next_offset += n;
        s.pending.record_count += n;
        let cell = Arc::new(TicketCell::default());
        if n == 0 {
            cell.complete(Ok(()));
        } else {
            s.pending.tickets.push((first + n, cell.clone()));
        }
        let (trigger_bytes, _) = inner.opts.trigger();
        if s.pending.raw.len() >= trigger_bytes {
            inner.flusher_cv.notify_one();
        }
        drop(s);
        Ok(Ticket {
            cell,
            inner: inner.clone(),
            range: first..first + n,
        })
    }

    fn wait_for_room(&self, batch_bytes: usize) -> Result<MutexGuard<'_, State>> {
        let inner = &self.inner;
        let mut s = relock(inner.state.lock());
        // Bounded in time by the flusher's progress: each flush empties the pending buffer.
        loop {
            if inner.poisoned.load(Ordering::Acquire) {
                return Err(Error::Poisoned);
            }
            if s.shutdown {
                return Err(Error::Closed);
            }
            let used = s.pending.raw.len();
            if used == 0 || used + batch_bytes <= inner.opts.pending_bytes_max {
                return Ok(s);
            }
            s.demand = true;
            inner.flusher_cv.notify_one();
            s = inner
                .space_cv
                .wait_timeout(s, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Appends one record and blocks until it is durable; returns its offset.
    pub fn append(&self, record: &[u8]) -> Result<u64> {
        Ok(self.submit(&[record])?.wait()?.start)
    }

    /// Appends records with consecutive offsets and blocks until they are durable.
    pub fn append_batch<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<Range<u64>> {
        self.submit(records)?.wait()
    }

    /// Writes (and, unless Buffered, syncs) everything accepted so far.
    pub fn flush(&self) -> Result<()> {
        let cell = Arc::new(TicketCell::default());
        let target = {
            let mut s = self.wait_for_room(0)?;
            let target = s.next_offset;
            s.pending.tickets.push((target, cell.clone()));
            target
        };
        let t = Ticket {
            cell,
            inner: self.inner.clone(),
            range: target..target,
        };
        t.wait()?;
        Ok(())
    }

    /// A reader starting at `offset` (in-process; sees exactly the committed records).
    pub fn reader(&self, offset: u64) -> Result<Reader> {
        let source = CommittedSource::Shared(self.inner.clone());
        Reader::open_with(self.inner.opts.vfs.clone(), &self.inner.dir, source, offset)
    }

    /// Adds a named subscriber.
    pub fn add_subscriber(&self, name: &str, start: Start) -> Result<u64> {
        let offset = self.resolve_start(&start)?;
        subscribers::add(self.inner.fs(), &self.inner.dir, name, offset)?;
        Ok(offset)
    }

    fn resolve_start(&self, start: &Start) -> Result<u64> {
        subscribers::resolve(
            self.inner.fs(),
            &self.inner.dir,
            start,
            self.earliest_offset()?,
            self.committed_offset(),
        )
    }

    pub fn remove_subscriber(&self, name: &str) -> Result<()> {
        subscribers::remove(self.inner.fs(), &self.inner.dir, name)
    }

    /// Moves a subscriber's checkpoint to any retained offset (back or forward).
    pub fn rewind_subscriber(&self, name: &str, offset: u64) -> Result<()> {
        let (earliest, committed) = (self.earliest_offset()?, self.committed_offset());
        subscribers::rewind(
            self.inner.fs(),
            &self.inner.dir,
            name,
            offset,
            earliest,
            committed,
        )
    }

    pub fn subscribers(&self) -> Result<Vec<SubscriberInfo>> {
        subscribers::list(self.inner.fs(), &self.inner.dir, self.earliest_offset()?)
    }

    /// Opens a named subscriber for reading in this process.
    pub fn subscriber(&self, name: &str) -> Result<Subscriber> {
        let source = CommittedSource::Shared(self.inner.clone());
        Subscriber::open_with(self.inner.opts.vfs.clone(), &self.inner.dir, name, source)
    }

    /// Deletes segments every subscriber has passed, as far as the retention floor allows.
    pub fn purge(&self) -> Result<PurgeReport> {
        let io = relock(self.inner.io.lock());
        purge_locked(&self.inner, &io)
    }

    /// Flushes, syncs everything (whatever the mode) and stops the flusher.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        {
            let mut s = relock(self.inner.state.lock());
            s.shutdown = true;
            self.inner.flusher_cv.notify_all();
        }
        if let Some(h) = self.flusher.take() {
            if h.join().is_err() {
                return Err(Error::Poisoned);
            }
        }
        {
            let mut q = relock(self.inner.sync.lock());
            q.shutdown = true;
            self.inner.sync_cv.notify_all();
        }
        if let Some(h) = self.syncer.take() {
            if h.join().is_err() {
                return Err(Error::Poisoned);
            }
        }
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let mut io = relock(self.inner.io.lock());
        for f in std::mem::take(&mut io.unsynced_sealed) {
            vfs::sync_data(&*f)?;
        }
        vfs::sync_data(&*io.active.file)?;
        Ok(())
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        // Errors here have no caller to go to; `close` reports them.
        let _ = self.shutdown();
    }
}

fn remove_temp_files(fs: &dyn Vfs, dir: &Path) -> Result<u64> {
    let mut removed = 0u64;
    for name in fs.list(dir)? {
        if name.ends_with(".tmp") {
            fs.remove_file(&dir.join(&name))?;
            removed += 1;
        }
    }
    if removed > 0 {
        fs.sync_dir(dir)?;
    }
    Ok(removed)
}

/// Finds the end of the valid frames of the last segment and zeroes anything after it, so the
/// next append cannot be followed by stale bytes. Returns (write position, next offset,
/// non-zero bytes discarded).
fn recover_tail(fs: &dyn Vfs, dir: &Path, seg: Segment) -> Result<(u64, u64, u64)> {
    let size = seg.header.segment_size_bytes;
    let file = seg.file.clone();
    let mut scanner = Scanner::new(seg);
    scanner.skip_to_end()?;
    let (valid_end, next_offset) = (scanner.pos, scanner.next_offset);
    let mut truncated = 0u64;
    let mut buf = vec![0u8; segment::READ_CHUNK_BYTES_MAX];
    let mut pos = valid_end;
    let chunks_max = size / buf.len() as u64 + 2;
    for _ in 0..chunks_max {
        if pos >= size {
            break;
        }
        let n = vfs::read_full_at(&*file, &mut buf, pos)?;
        if n == 0 {
            break;
        }
        if let Some(last) = buf[..n].iter().rposition(|&b| b != 0) {
            truncated = pos + last as u64 + 1 - valid_end;
        }
        pos += n as u64;
    }
    let short = file.len()? < size;
    if truncated > 0 {
        // Never destroy bytes silently: a torn tail is usually garbage, but keep it for forensics.
        let base = scanner.base();
        // Best effort: a full disk must not stop recovery; the count is reported either way.
        let _ = crate::tools::quarantine(fs, dir, base, valid_end, &*file, truncated);
    }
    if truncated > 0 || short {
        file.set_len(valid_end)?;
        file.set_len(size)?;
        file.allocate(size)?;
        vfs::sync_data(&*file)?;
    }
    Ok((valid_end, next_offset, truncated))
}

/// If the flusher thread dies (a failed assertion), nobody may wait forever: poison and fail
/// everything pending.
struct FlusherGuard<'a>(&'a Inner);

impl Drop for FlusherGuard<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.poisoned.store(true, Ordering::Release);
            let durable = self.0.committed.load(Ordering::Acquire);
            fail_all_pending(self.0, Failure::Poisoned, durable);
        }
    }
}

fn flusher_main(inner: &Arc<Inner>) {
    let _guard = FlusherGuard(inner);
    let (trigger_bytes, delay) = inner.opts.trigger();
    loop {
        let taken = {
            let mut s = relock(inner.state.lock());
            // Waits until a flush is due; each wait is bounded by the delay or 100 ms.
            loop {
                let p = &s.pending;
                let age_due = p.since.is_some_and(|t| t.elapsed() >= delay);
                let due = s.demand || p.raw.len() >= trigger_bytes || age_due || s.shutdown;
                if !p.tickets.is_empty() && due {
                    break;
                }
                if s.shutdown {
                    return;
                }
                let wait = match p.since {
                    Some(t) => delay
                        .saturating_sub(t.elapsed())
                        .max(Duration::from_micros(50)),
                    None => Duration::from_millis(100),
                };
                s = inner
                    .flusher_cv
                    .wait_timeout(s, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            s.demand = false;
            let next_first = s.next_offset;
            let taken = std::mem::take(&mut s.pending);
            s.pending.first_offset = next_first;
            // Reuse a previous batch's buffer: growing a fresh one would copy it repeatedly.
            if let Some(buf) = relock(inner.spare_buffers.lock()).pop() {
                s.pending.raw = buf;
            }
            inner.space_cv.notify_all();
            taken
        };
        flush_pending(inner, taken);
    }
}

/// Writes one pending batch and completes its tickets according to what became durable.
const SPARE_BUFFERS_MAX: usize = 2;

fn recycle(inner: &Inner, p: &mut Pending) {
    let mut buf = std::mem::take(&mut p.raw);
    buf.clear();
    let mut spare = relock(inner.spare_buffers.lock());
    if spare.len() < SPARE_BUFFERS_MAX {
        spare.push(buf);
    }
}

fn flush_pending(inner: &Arc<Inner>, mut p: Pending) {
    let end = p.first_offset + p.record_count;
    let (durable, failure) = if inner.poisoned.load(Ordering::Acquire) {
        (p.first_offset, Some(Failure::Poisoned))
    } else {
        let mut io = relock(inner.io.lock());
        let r = write_frames(inner, &mut io, &mut p);
        if r.is_ok() && inner.opts.syncs() {
            // Written, not yet durable: the syncer acknowledges after its fdatasync, while this
            // thread goes on writing the next batch.
            let file = io.active.file.clone();
            drop(io);
            let bytes = p.raw.len();
            recycle(inner, &mut p);
            hand_off(inner, p, end, file, bytes);
            return;
        }
        // On failure exactly the published prefix is acknowledged.
        let durable = match r {
            Ok(()) => end,
            Err(_) => inner.committed.load(Ordering::Acquire),
        };
        let failure = match r {
            Ok(()) => None,
            Err(Error::NoSpace) => Some(Failure::NoSpace),
            Err(_) => Some(Failure::Poisoned),
        };
        (durable, failure)
    };
    if failure == Some(Failure::Poisoned) {
        inner.poisoned.store(true, Ordering::Release);
    }
    // Roll back before completing any ticket: a caller that sees the failure and appends again
    // must find the log already rewound to the durable end.
    if let Some(f) = failure {
        fail_all_pending(inner, f, durable);
    }
    recycle(inner, &mut p);
    for (ticket_end, cell) in &p.tickets {
        let ok = *ticket_end <= durable;
        cell.complete(if ok {
            Ok(())
        } else {
            Err(failure.unwrap_or(Failure::Closed))
        });
    }
}

/// After a failed flush nothing later can be written in order: fail every pending record and
/// hand their offsets back so the log stays gap-free.
fn fail_all_pending(inner: &Inner, f: Failure, durable: u64) {
    let taken = {
        let mut s = relock(inner.state.lock());
        let taken = std::mem::take(&mut s.pending);
        s.next_offset = durable;
        s.pending.first_offset = durable;
        inner.space_cv.notify_all();
        taken
    };
    for (_, cell) in &taken.tickets {
        cell.complete(Err(f));
    }
    let mut io = relock(inner.io.lock());
    io.written_offset = durable;
}

/// Frames the pending records and writes them; rolls segments when a frame does not fit.
/// On success the committed offset covers all of `p`.
fn write_frames(inner: &Inner, io: &mut Io, p: &mut Pending) -> Result<()> {
    assert_eq!(
        p.first_offset, io.written_offset,
        "pending batch must continue the log"
    );
    let opts = &inner.opts;
    io.frames.clear();
    if p.raw.is_empty() {
        return Ok(());
    }
    if write_in_place(inner, io, p)? {
        return Ok(());
    }
    let mut frames_from = io.write_pos;
    let mut offset = p.first_offset;
    let mut pos = FRAME_HEADER_SIZE_BYTES;
    let frames_max = p.record_count + 1;
    // A frame must fit in an empty segment; a single larger record was refused at submit.
    let capacity =
        opts.segment_size_bytes - SEGMENT_HEADER_SIZE_BYTES - FRAME_HEADER_SIZE_BYTES as u64;
    let frame_raw_max = opts.frame_raw_bytes_max.min(capacity as usize);
    for _ in 0..frames_max {
        if pos == p.raw.len() {
            break;
        }
        let (frame_end, count) = frame_extent(&p.raw, pos, frame_raw_max);
        let at = io.frames.len();
        let mut scratch = std::mem::take(&mut io.scratch);
        format::encode_frame(
            &mut io.frames,
            &p.raw[pos..frame_end],
            count,
            offset,
            opts.lz4,
            &mut scratch,
        );
        io.scratch = scratch;
        let size = io.active.header.segment_size_bytes;
        if frames_from + io.frames.len() as u64 > size {
            let frame = io.frames.split_off(at);
            write_out(inner, io, frames_from, offset)?;
            roll(inner, io, offset)?;
            frames_from = io.write_pos;
            io.frames = frame;
            assert!(frames_from + io.frames.len() as u64 <= io.active.header.segment_size_bytes);
        }
        offset += u64::from(count);
        pos = frame_end;
    }
    assert_eq!(offset, p.first_offset + p.record_count);
    write_out(inner, io, frames_from, offset)?;
    if !opts.syncs() {
        publish(inner, offset)?;
    }
    Ok(())
}

/// Finds how many records from `pos` go into one frame: at least one, at most `raw_max` bytes.
fn frame_extent(raw: &[u8], mut pos: usize, raw_max: usize) -> (usize, u32) {
    let start = pos;
    let mut count = 0u32;
    while pos < raw.len() && count < u32::MAX {
        let mut len = [0u8; 4];
        len.copy_from_slice(&raw[pos..pos + RECORD_PREFIX_SIZE_BYTES]);
        let next = pos + RECORD_PREFIX_SIZE_BYTES + u32::from_le_bytes(len) as usize;
        if count > 0 && next - start > raw_max {
            break;
        }
        pos = next;
        count += 1;
    }
    assert!(count > 0 && pos <= raw.len());
    (pos, count)
}

/// Writes the framed bytes at `at` in the active segment. Write errors poison: the bytes on disk
/// past the last published frame are unknown.
fn write_out(inner: &Inner, io: &mut Io, at: u64, end_offset: u64) -> Result<()> {
    if io.frames.is_empty() {
        return Ok(());
    }
    debug_assert!(at >= SEGMENT_HEADER_SIZE_BYTES);
    vfs::write_all_at(&*io.active.file, &io.frames, at).map_err(|_| Error::Poisoned)?;
    io.write_pos = at + io.frames.len() as u64;
    io.written_offset = end_offset;
    io.frames.clear();
    if !inner.opts.syncs() {
        // Buffered: written is acknowledged.
        publish(inner, end_offset)?;
    }
    Ok(())
}

/// Makes `offset` the committed offset for in-process readers and reader processes.
/// Both the syncer and a rolling flusher publish; the lock keeps the offset monotonic.
fn publish(inner: &Inner, offset: u64) -> Result<()> {
    let file = relock(inner.committed_file.lock());
    if offset <= inner.committed.load(Ordering::Acquire) {
        return Ok(());
    }
    vfs::write_all_at(&**file, &format::encode_committed(offset), 0)
        .map_err(|_| Error::Poisoned)?;
    inner.committed.store(offset, Ordering::Release);
    Ok(())
}

/// Seals the active segment (syncing it, so the segment chain survives power loss in any mode)
/// and starts a new one at `base`. ENOSPC while creating is back-pressure, not poison.
fn roll(inner: &Inner, io: &mut Io, base: u64) -> Result<()> {
    assert_eq!(base, io.written_offset);
    if inner.opts.syncs() {
        vfs::sync_data(&*io.active.file).map_err(|_| Error::Poisoned)?;
        publish(inner, base)?;
    } else {
        // Buffered promises nothing across power loss, and a 64 MiB writeback here would stall
        // appenders: remember the sealed segment and sync it at close (or when the list is full).
        if io.unsynced_sealed.len() >= UNSYNCED_SEALED_MAX {
            let oldest = io.unsynced_sealed.remove(0);
            vfs::sync_data(&*oldest).map_err(|_| Error::Poisoned)?;
        }
        io.unsynced_sealed.push(io.active.file.clone());
    }
    let seg = match segment::create_segment(
        inner.fs(),
        &inner.dir,
        base,
        inner.opts.segment_size_bytes,
    ) {
        Ok(s) => s,
        Err(Error::NoSpace) => return Err(Error::NoSpace),
        Err(_) => return Err(Error::Poisoned),
    };
    io.active = seg;
    io.write_pos = SEGMENT_HEADER_SIZE_BYTES;
    // Deletion is opportunistic at roll time; failure to delete is not a write failure.
    let _ = purge_locked(inner, io);
    Ok(())
}

fn purge_locked(inner: &Inner, io: &Io) -> Result<PurgeReport> {
    let fs = inner.fs();
    let bases = segment::list_segments(fs, &inner.dir)?;
    let active = io.active.header.base_offset;
    let mut report = PurgeReport::default();
    let Some(&earliest) = bases.first() else {
        return Ok(report);
    };
    let subs = subscribers::list(fs, &inner.dir, earliest)?;
    // With no subscribers nobody has declared what they still need: keep everything.
    let Some(min_checkpoint) = subs.iter().map(|s| s.offset).min() else {
        return Ok(report);
    };
    let size = inner.opts.segment_size_bytes;
    let now_ms = crate::now_unix_ms();
    for (i, w) in bases.windows(2).enumerate() {
        let (base, successor) = (w[0], w[1]);
        if base >= active || successor > min_checkpoint {
            break;
        }
        let kept_bytes = (bases.len() - i - 1) as u64 * size;
        if kept_bytes < inner.opts.retention.bytes_min {
            break;
        }
        if inner.opts.retention.age_ms_min > 0 {
            let succ = segment::open_segment(fs, &inner.dir, successor, OpenMode::Read)?;
            if now_ms.saturating_sub(succ.header.created_unix_ms) < inner.opts.retention.age_ms_min
            {
                break;
            }
        }
        fs.remove_file(&segment::segment_path(&inner.dir, base))?;
        report.segments_deleted += 1;
        report.bytes_deleted += size;
    }
    if report.segments_deleted > 0 {
        fs.sync_dir(&inner.dir)?;
    }
    Ok(report)
}

/// Written data waiting for its fdatasync.
#[derive(Default)]
struct SyncQueue {
    /// End of the data handed over (written to `file`, or to segments a roll already synced).
    written_offset: u64,
    file: Option<Arc<dyn VFile>>,
    tickets: VecDeque<(u64, Arc<TicketCell>)>,
    /// (end offset, bytes) of each hand-off, to bound unsynced bytes.
    handoffs: VecDeque<(u64, usize)>,
    unsynced_bytes: usize,
    synced_offset: u64,
    shutdown: bool,
}

/// Gives a written batch to the syncer. Waits (bounded by the syncer's progress) while too much
/// written data is unsynced, so the writer cannot run unboundedly ahead of the disk.
fn hand_off(inner: &Inner, mut p: Pending, end: u64, file: Arc<dyn VFile>, bytes: usize) {
    let unsynced_bytes_max = inner.opts.pending_bytes_max.saturating_mul(2);
    let mut q = relock(inner.sync.lock());
    while q.unsynced_bytes > unsynced_bytes_max && !inner.poisoned.load(Ordering::Acquire) {
        q = wait(&inner.sync_cv, q);
    }
    assert!(end >= q.written_offset, "hand-offs arrive in log order");
    q.written_offset = end;
    q.file = Some(file);
    q.tickets.extend(std::mem::take(&mut p.tickets));
    q.handoffs.push_back((end, bytes));
    q.unsynced_bytes += bytes;
    // A batch with no records (a flush marker) may already be covered by the last sync.
    let synced = q.synced_offset;
    complete_synced(&mut q, synced);
    inner.sync_cv.notify_all();
}

fn wait<'a>(cv: &Condvar, g: MutexGuard<'a, SyncQueue>) -> MutexGuard<'a, SyncQueue> {
    cv.wait_timeout(g, Duration::from_millis(100))
        .unwrap_or_else(|e| e.into_inner())
        .0
}

/// The syncer: one fdatasync covers everything handed over so far; then it publishes the
/// committed offset and completes the tickets. Runs beside the flusher, so the next batch is
/// framed and written while this one syncs.
fn syncer_main(inner: &Arc<Inner>) {
    loop {
        let (target, file) = {
            let mut q = relock(inner.sync.lock());
            // Waits for written-but-unsynced data; each wait is bounded by 100 ms.
            loop {
                if inner.poisoned.load(Ordering::Acquire) {
                    fail_sync_queue(&mut q);
                    inner.sync_cv.notify_all();
                    if q.shutdown {
                        return;
                    }
                } else if q.written_offset > q.synced_offset {
                    break;
                } else if q.shutdown {
                    return;
                }
                q = wait(&inner.sync_cv, q);
            }
            (q.written_offset, q.file.clone())
        };
        let synced = match &file {
            Some(f) => vfs::sync_data(&**f).map_err(|_| Error::Poisoned),
            None => Ok(()),
        };
        let result = synced.and_then(|()| publish(inner, target));
        let mut q = relock(inner.sync.lock());
        if result.is_err() {
            // Linux may have dropped the dirty pages: nothing after this sync can be trusted.
            inner.poisoned.store(true, Ordering::Release);
            fail_sync_queue(&mut q);
        } else {
            complete_synced(&mut q, target);
        }
        inner.sync_cv.notify_all();
    }
}

fn complete_synced(q: &mut SyncQueue, target: u64) {
    q.synced_offset = q.synced_offset.max(target);
    while q.handoffs.front().is_some_and(|&(end, _)| end <= target) {
        if let Some((_, bytes)) = q.handoffs.pop_front() {
            q.unsynced_bytes -= bytes;
        }
    }
    while q.tickets.front().is_some_and(|&(end, _)| end <= target) {
        if let Some((_, cell)) = q.tickets.pop_front() {
            cell.complete(Ok(()));
        }
    }
}

fn fail_sync_queue(q: &mut SyncQueue) {
    for (_, cell) in q.tickets.drain(..) {
        cell.complete(Err(Failure::Poisoned));
    }
    q.handoffs.clear();
    q.unsynced_bytes = 0;
}

/// The common case: the whole pending buffer is one uncompressed frame that fits in the active
/// segment. Its header is filled in the space reserved at submit and the buffer is written as
/// is — no copy. Returns false when the general path must frame it.
fn write_in_place(inner: &Inner, io: &mut Io, p: &mut Pending) -> Result<bool> {
    let body_len = p.raw.len() - FRAME_HEADER_SIZE_BYTES;
    let fits = io.write_pos + p.raw.len() as u64 <= io.active.header.segment_size_bytes;
    let Ok(count) = u32::try_from(p.record_count) else {
        return Ok(false);
    };
    if inner.opts.lz4 || body_len > inner.opts.frame_raw_bytes_max || !fits {
        return Ok(false);
    }
    format::fill_frame_header(&mut p.raw, count, p.first_offset);
    let at = io.write_pos;
    vfs::write_all_at(&*io.active.file, &p.raw, at).map_err(|_| Error::Poisoned)?;
    io.write_pos = at + p.raw.len() as u64;
    io.written_offset = p.first_offset + p.record_count;
    if !inner.opts.syncs() {
        publish(inner, io.written_offset)?;
    }
    Ok(true)
}
