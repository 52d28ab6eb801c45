//! The syncer: one fdatasync per group of written batches, then acknowledgement.

use super::*;

/// Written data waiting for its fdatasync.
#[derive(Default)]
pub(super) struct SyncQueue {
    /// End of the data handed over (written to `file`, or to segments a roll already synced).
    pub(super) written_offset: u64,
    pub(super) file: Option<Arc<dyn VFile>>,
    pub(super) tickets: VecDeque<(u64, Arc<TicketCell>)>,
    /// (end offset, bytes) of each hand-off, to bound unsynced bytes.
    pub(super) handoffs: VecDeque<(u64, usize)>,
    pub(super) unsynced_bytes: usize,
    pub(super) synced_offset: u64,
    pub(super) shutdown: bool,
}

impl SyncQueue {
    pub(super) fn starting_at(offset: u64) -> SyncQueue {
        SyncQueue {
            written_offset: offset,
            synced_offset: offset,
            ..SyncQueue::default()
        }
    }
}

/// Gives a written batch to the syncer. Waits (bounded by the syncer's progress) while too much
/// written data is unsynced, so the writer cannot run unboundedly ahead of the disk.
pub(super) fn hand_off(
    inner: &Inner,
    mut p: Pending,
    end: u64,
    file: Arc<dyn VFile>,
    bytes: usize,
) {
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
/// If the syncer dies (a failed assertion), its waiters get an error instead of hanging.
struct SyncerGuard<'a>(&'a Inner);

impl Drop for SyncerGuard<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.poisoned.store(true, Ordering::Release);
            fail_sync_queue(&mut relock(self.0.sync.lock()));
        }
    }
}

pub(super) fn syncer_main(inner: &Arc<Inner>) {
    let _guard = SyncerGuard(inner);
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
        let result = synced.and_then(|()| inner.publish(target));
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
