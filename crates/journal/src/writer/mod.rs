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
use crate::reader::{Committed, CommittedSource, Reader};
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

    /// Largest decoded body of one frame: the option, capped so a frame fits an empty segment.
    fn frame_raw_max(&self) -> usize {
        let capacity =
            self.segment_size_bytes - SEGMENT_HEADER_SIZE_BYTES - FRAME_HEADER_SIZE_BYTES as u64;
        self.frame_raw_bytes_max.min(capacity as usize)
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
    /// Segments moved to `quarantine/` because the segment before them lost its unsynced tail
    /// (a power loss in Buffered mode): the log ends where that segment's valid frames end.
    pub segments_quarantined: u64,
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

impl Pending {
    fn starting_at(offset: u64) -> Pending {
        let mut p = Pending::default();
        p.first_offset = offset;
        p
    }
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
const UNSYNCED_SEALED_MAX: usize = 1;

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

    /// Makes `offset` the committed offset for in-process readers and reader processes.
    /// Both the syncer and a rolling flusher publish; the lock keeps the offset monotonic.
    fn publish(&self, offset: u64) -> Result<()> {
        let file = relock(self.committed_file.lock());
        if offset <= self.committed.load(Ordering::Acquire) {
            return Ok(());
        }
        vfs::write_all_at(&**file, &format::encode_committed(offset), 0)
            .map_err(|_| Error::Poisoned)?;
        self.committed.store(offset, Ordering::Release);
        Ok(())
    }
}

impl Committed for Inner {
    fn committed_offset(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
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
        let lock = take_lock(&*fs, &dir)?;
        let recovered = recovery::recover(&*fs, &dir, &opts)?;
        let next_offset = recovered.next_offset;
        let inner = Arc::new(Inner {
            dir,
            opts,
            state: Mutex::new(State {
                next_offset,
                pending: Pending::starting_at(next_offset),
                demand: false,
                shutdown: false,
            }),
            flusher_cv: Condvar::new(),
            space_cv: Condvar::new(),
            io: Mutex::new(recovered.io),
            spare_buffers: Mutex::new(Vec::new()),
            sync: Mutex::new(SyncQueue::starting_at(next_offset)),
            sync_cv: Condvar::new(),
            committed_file: Mutex::new(recovered.committed_file),
            committed: AtomicU64::new(next_offset),
            poisoned: AtomicBool::new(false),
            _lock: lock,
        });
        let (flusher, syncer) = start_threads(&inner)?;
        Ok(Journal {
            inner,
            flusher: Some(flusher),
            syncer,
            recovery: recovered.report,
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
        // LZ4: compress and checksum here, outside the lock, in parallel with the flusher.
        let mut framed = inner
            .opts
            .lz4
            .then(|| build_frames(records, inner.opts.frame_raw_max()));
        let room = framed.as_ref().map_or(batch_bytes, |f| f.bytes.len());
        let mut s = self.wait_for_room(room)?;
        let first = start_records(&mut s);
        if let Some(f) = framed.as_mut() {
            f.seal(first);
            s.pending.raw.extend_from_slice(&f.bytes);
        } else {
            raw_frame_room(&mut s.pending.raw);
            s.pending.raw.reserve(batch_bytes);
            for r in records {
                let r = r.as_ref();
                s.pending
                    .raw
                    .extend_from_slice(&(r.len() as u32).to_le_bytes());
                s.pending.raw.extend_from_slice(r);
            }
        }
        Ok(self.accept_records(s, first, records.len() as u64))
    }

    /// [`Journal::submit`] of one record that `encode` writes (appends to the buffer it is
    /// given), about `size_bytes_hint` long: straight into the pending buffer, so a large record
    /// is not built in a buffer of the caller's and then copied (in the store's histogram
    /// writes that copy was a seventh of the L2 misses). `encode` runs under the journal's
    /// lock. A record over the size bound is taken back out and refused (`RecordTooLarge`).
    pub fn submit_encoded(
        &self,
        size_bytes_hint: usize,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Ticket> {
        let inner = &self.inner;
        let size_max = inner.opts.record_size_bytes_max();
        if inner.opts.lz4 {
            // Frames are compressed outside the lock from whole records.
            let mut record = Vec::with_capacity(size_bytes_hint);
            encode(&mut record);
            return self.submit(&[record]);
        }
        let room = RECORD_PREFIX_SIZE_BYTES + (size_bytes_hint as u64).min(size_max) as usize;
        let mut s = self.wait_for_room(room)?;
        let first = start_records(&mut s);
        // Taken back out unless the record is accepted: refused, or `encode` panicked.
        let mut appending = Appending {
            len_before: s.pending.raw.len(),
            raw: &mut s.pending.raw,
            accepted: false,
        };
        let raw = &mut *appending.raw;
        raw_frame_room(raw);
        let prefix_at = raw.len();
        raw.reserve(room);
        raw.extend_from_slice(&[0; RECORD_PREFIX_SIZE_BYTES]);
        encode(raw);
        let len = raw.len() - prefix_at - RECORD_PREFIX_SIZE_BYTES;
        if len as u64 > size_max {
            return Err(Error::RecordTooLarge {
                size_bytes: len as u64,
                size_bytes_max: size_max,
            });
        }
        // `size_max` is below 4 GiB (a record's length is a u32).
        raw[prefix_at..prefix_at + RECORD_PREFIX_SIZE_BYTES]
            .copy_from_slice(&(len as u32).to_le_bytes());
        appending.accepted = true;
        drop(appending);
        Ok(self.accept_records(s, first, 1))
    }

    /// Counts `n` records just appended to the pending buffer from offset `first`, and
    /// returns their ticket (wakes the flusher once the buffer is past its trigger).
    fn accept_records(&self, mut s: MutexGuard<'_, State>, first: u64, n: u64) -> Ticket {
        let inner = &self.inner;
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
        Ticket {
            cell,
            inner: inner.clone(),
            range: first..first + n,
        }
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

/// Complete frames built by a submitting thread (LZ4 mode), waiting only for their offsets.
struct BuiltFrames {
    bytes: Vec<u8>,
    /// (position in `bytes`, record count, body CRC) per frame.
    frames: Vec<(usize, u32, u32)>,
}

impl BuiltFrames {
    /// Writes each frame's first offset and CRC once the batch's first offset is known.
    fn seal(&mut self, first_offset: u64) {
        let mut offset = first_offset;
        for i in 0..self.frames.len() {
            let (at, count, body_crc) = self.frames[i];
            let end = self.frames.get(i + 1).map_or(self.bytes.len(), |f| f.0);
            format::seal_frame(&mut self.bytes[at..end], offset, body_crc);
            offset += u64::from(count);
        }
    }
}

/// The offset the next records get; starts the pending buffer's first offset and age if it is
/// empty.
fn start_records(s: &mut State) -> u64 {
    let first = s.next_offset;
    if s.pending.record_count == 0 {
        s.pending.first_offset = first;
        s.pending.since = Some(Instant::now());
    }
    assert_eq!(s.pending.first_offset + s.pending.record_count, first);
    first
}

/// Room for the frame header at the start of an empty pending buffer of raw records, so a
/// flush can usually write the buffer as one frame without copying it.
fn raw_frame_room(raw: &mut Vec<u8>) {
    if raw.is_empty() {
        raw.resize(FRAME_HEADER_SIZE_BYTES, 0);
    }
}

/// A record being appended to the pending buffer by [`Journal::submit_encoded`]: unless it is
/// accepted, the buffer is cut back to where it was.
struct Appending<'a> {
    raw: &'a mut Vec<u8>,
    len_before: usize,
    accepted: bool,
}

impl Drop for Appending<'_> {
    fn drop(&mut self) {
        if !self.accepted {
            self.raw.truncate(self.len_before);
        }
    }
}

/// Groups records into frames of at most `chunk_raw_max` decoded bytes (at least one record
/// each) and compresses each.
fn build_frames<R: AsRef<[u8]>>(records: &[R], chunk_raw_max: usize) -> BuiltFrames {
    let mut out = BuiltFrames {
        bytes: Vec::new(),
        frames: Vec::new(),
    };
    let (mut raw, mut scratch) = (Vec::new(), Vec::new());
    let mut count = 0u32;
    let mut flush = |raw: &mut Vec<u8>, count: &mut u32, out: &mut BuiltFrames| {
        if *count > 0 {
            let at = out.bytes.len();
            let crc =
                format::encode_unsealed_frame(&mut out.bytes, raw, *count, true, &mut scratch);
            out.frames.push((at, *count, crc));
        }
        raw.clear();
        *count = 0;
    };
    for r in records {
        let r = r.as_ref();
        let grown = raw.len() + RECORD_PREFIX_SIZE_BYTES + r.len();
        if count > 0 && (grown > chunk_raw_max || count == u32::MAX) {
            flush(&mut raw, &mut count, &mut out);
        }
        raw.extend_from_slice(&(r.len() as u32).to_le_bytes());
        raw.extend_from_slice(r);
        count += 1;
    }
    flush(&mut raw, &mut count, &mut out);
    out
}

fn take_lock(fs: &dyn Vfs, dir: &Path) -> Result<Box<dyn std::any::Any + Send + Sync>> {
    fs.lock_exclusive(&dir.join(format::LOCK_FILE))
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                Error::Locked
            } else {
                Error::from_io(e)
            }
        })
}

/// The flusher always; the syncer only when acknowledgements wait for a sync.
fn start_threads(inner: &Arc<Inner>) -> Result<(JoinHandle<()>, Option<JoinHandle<()>>)> {
    let flusher_inner = inner.clone();
    let flusher = thread::Builder::new()
        .name("journal-flusher".into())
        .spawn(move || flusher_main(&flusher_inner))?;
    if !inner.opts.syncs() {
        return Ok((flusher, None));
    }
    let syncer_inner = inner.clone();
    let syncer = thread::Builder::new()
        .name("journal-syncer".into())
        .spawn(move || syncer_main(&syncer_inner))?;
    Ok((flusher, Some(syncer)))
}

impl Drop for Journal {
    fn drop(&mut self) {
        // Errors here have no caller to go to; `close` reports them.
        let _ = self.shutdown();
    }
}

mod flush;
mod recovery;
mod sync;

use flush::{flusher_main, purge_locked};
use sync::{syncer_main, SyncQueue};
