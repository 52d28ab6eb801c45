//! The flusher: frames pending records, writes them, rolls and deletes segments.

use super::sync::hand_off;
use super::*;

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

pub(super) fn flusher_main(inner: &Arc<Inner>) {
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

/// Bound on emptied pending buffers kept for reuse.
const SPARE_BUFFERS_MAX: usize = 2;

/// Keeps an emptied pending buffer (its capacity) for the next batch.
fn recycle(inner: &Inner, p: &mut Pending) {
    let mut buf = std::mem::take(&mut p.raw);
    buf.clear();
    let mut spare = relock(inner.spare_buffers.lock());
    if spare.len() < SPARE_BUFFERS_MAX {
        spare.push(buf);
    }
}

/// Writes one pending batch. Sync modes hand it to the syncer; otherwise (and on failure) its
/// tickets are completed here according to what became durable.
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
/// On success all of `p` is written (and, in Buffered mode, published).
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
    if opts.lz4 {
        return write_built_frames(inner, io, p);
    }
    if write_in_place(inner, io, p)? {
        return Ok(());
    }
    let mut frames_from = io.write_pos;
    let mut offset = p.first_offset;
    let mut pos = FRAME_HEADER_SIZE_BYTES;
    let frames_max = p.record_count + 1;
    // A frame must fit in an empty segment; a single larger record was refused at submit.
    let frame_raw_max = opts.frame_raw_max();
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
            false,
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
        inner.publish(offset)?;
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

/// LZ4 mode: `p.raw` already holds sealed frames built by the submitters. Writes them in runs
/// that fit the active segment, rolling between runs.
fn write_built_frames(inner: &Inner, io: &mut Io, p: &Pending) -> Result<()> {
    let (mut pos, mut run_start, mut offset) = (0usize, 0usize, p.first_offset);
    let frames_max = p.record_count + 1;
    for _ in 0..frames_max {
        if pos == p.raw.len() {
            break;
        }
        let (size, count) = format::frame_extent_of(&p.raw[pos..]);
        assert!(
            count > 0 && pos + size <= p.raw.len(),
            "self-built frame is whole"
        );
        let run_bytes = (pos + size - run_start) as u64;
        if io.write_pos + run_bytes > io.active.header.segment_size_bytes {
            write_slice(inner, io, &p.raw[run_start..pos], offset)?;
            roll(inner, io, offset)?;
            run_start = pos;
        }
        pos += size;
        offset += u64::from(count);
    }
    assert_eq!(offset, p.first_offset + p.record_count);
    write_slice(inner, io, &p.raw[run_start..pos], offset)
}

/// Writes `bytes` (whole frames ending at `end_offset`) at the active segment's write position.
fn write_slice(inner: &Inner, io: &mut Io, bytes: &[u8], end_offset: u64) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let at = io.write_pos;
    assert!(at + bytes.len() as u64 <= io.active.header.segment_size_bytes);
    vfs::write_all_at(&*io.active.file, bytes, at).map_err(|_| Error::Poisoned)?;
    io.write_pos = at + bytes.len() as u64;
    io.written_offset = end_offset;
    if !inner.opts.syncs() {
        inner.publish(end_offset)?;
    }
    Ok(())
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
        inner.publish(end_offset)?;
    }
    Ok(())
}

/// Seals the active segment (syncing it, so the segment chain survives power loss in any mode)
/// and starts a new one at `base`. ENOSPC while creating is back-pressure, not poison.
fn roll(inner: &Inner, io: &mut Io, base: u64) -> Result<()> {
    assert_eq!(base, io.written_offset);
    if inner.opts.syncs() {
        vfs::sync_data(&*io.active.file).map_err(|_| Error::Poisoned)?;
        inner.publish(base)?;
    } else {
        // Buffered promises nothing across power loss, and a 64 MiB writeback here would stall
        // appenders: start the sealed segment's writeback now and sync it at the next roll (by
        // then it is cheap) or at close. So at most the segment before the active one can have
        // lost its tail after a power loss, which recovery detects and repairs.
        if io.unsynced_sealed.len() >= UNSYNCED_SEALED_MAX {
            let oldest = io.unsynced_sealed.remove(0);
            vfs::sync_data(&*oldest).map_err(|_| Error::Poisoned)?;
        }
        // Advisory: a failure only means the later sync does all the work.
        let _ = io.active.file.start_writeback();
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

pub(super) fn purge_locked(inner: &Inner, io: &Io) -> Result<PurgeReport> {
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
        inner.publish(io.written_offset)?;
    }
    Ok(true)
}
