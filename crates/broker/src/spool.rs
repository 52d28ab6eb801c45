//! The broker's journal: every run batch and push body as one record, one named subscriber per
//! core, reads for the link, acknowledgements that move a core's checkpoint, and the disk
//! budget that drops the oldest segments — counted, never silently.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use journal::{Batch, Journal, Options, Start};
use tokio::sync::watch;

use crate::state;

/// Default disk budget: 8 GiB or 7 days, whichever is reached first.
pub const DISK_BYTES_MAX_DEFAULT: u64 = 8 << 30;
pub const DISK_AGE_MS_MAX_DEFAULT: u64 = 7 * 24 * 3600 * 1000;
/// Default segment size (a budget is kept to within one segment).
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
/// Cores (subscribers) one broker keeps a checkpoint for.
pub const SUBSCRIBERS_MAX: usize = 64;

#[derive(Clone, Debug)]
pub struct SpoolOptions {
    pub segment_bytes: u64,
    pub disk_bytes_max: u64,
    pub disk_age_ms_max: u64,
}

impl Default for SpoolOptions {
    fn default() -> Self {
        SpoolOptions {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            disk_bytes_max: DISK_BYTES_MAX_DEFAULT,
            disk_age_ms_max: DISK_AGE_MS_MAX_DEFAULT,
        }
    }
}

/// Counters a person reads (health, the link's status).
#[derive(Default)]
pub struct SpoolCounters {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    /// Records dropped by the disk budget (summed over cores that had not read them).
    pub dropped_records: AtomicU64,
    pub dropped_segments: AtomicU64,
    /// Records that could not be appended at all (the journal refused them).
    pub lost_records: AtomicU64,
}

pub struct Spool {
    journal: Journal,
    dir: PathBuf,
    epoch: u64,
    opts: SpoolOptions,
    committed_tx: watch::Sender<u64>,
    /// Each subscriber's checkpoint as last committed (mirrors the files).
    checkpoints: Mutex<HashMap<String, u64>>,
    pub counters: SpoolCounters,
}

/// What a read returns: records from `first` on (`first` is past the asked offset when the
/// budget dropped what was asked for).
pub struct Read {
    pub first: u64,
    pub records: Vec<(u64, Vec<u8>)>,
}

fn now_ms() -> u64 {
    clock::wall() / 1_000_000
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Spool {
    /// Opens (or makes) the journal in `<data_dir>/journal`, its epoch, and a subscriber per
    /// core name (added at the journal's start, so nothing appended before a core's first
    /// contact is missed).
    pub fn open(data_dir: &Path, cores: &[String], opts: SpoolOptions) -> Result<Spool, String> {
        let dir = data_dir.join("journal");
        let epoch = state::epoch(data_dir, &dir, now_ms())?;
        let jopts = Options {
            segment_size_bytes: opts.segment_bytes,
            ..Options::default()
        };
        let journal =
            Journal::open(&dir, jopts).map_err(|e| format!("journal {}: {e}", dir.display()))?;
        let mut checkpoints = HashMap::new();
        for s in journal.subscribers().map_err(err)? {
            checkpoints.insert(s.name, s.offset);
        }
        let (committed_tx, _) = watch::channel(journal.committed_offset());
        let spool = Spool {
            journal,
            dir,
            epoch,
            opts,
            committed_tx,
            checkpoints: Mutex::new(checkpoints),
            counters: SpoolCounters::default(),
        };
        for core in cores {
            spool.ensure_subscriber(core)?;
        }
        Ok(spool)
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn committed(&self) -> u64 {
        self.journal.committed_offset()
    }

    pub fn earliest(&self) -> u64 {
        self.journal.earliest_offset().unwrap_or(0)
    }

    /// Notified with the committed offset after every append.
    pub fn watch_committed(&self) -> watch::Receiver<u64> {
        self.committed_tx.subscribe()
    }

    /// The subscriber name of a core.
    pub fn subscriber_name(core: &str) -> String {
        format!("core-{core}")
    }

    /// Makes sure a core has a checkpoint (a new core starts at the earliest retained record).
    pub fn ensure_subscriber(&self, core: &str) -> Result<u64, String> {
        let name = Spool::subscriber_name(core);
        let mut cps = self.checkpoints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = cps.get(&name) {
            return Ok(*o);
        }
        if cps.len() >= SUBSCRIBERS_MAX {
            return Err(format!("at most {SUBSCRIBERS_MAX} cores per broker"));
        }
        let offset = self
            .journal
            .add_subscriber(&name, Start::Begin)
            .map_err(|e| format!("core name `{core}`: {e}"))?;
        cps.insert(name, offset);
        Ok(offset)
    }

    pub fn checkpoint(&self, core: &str) -> Option<u64> {
        let cps = self.checkpoints.lock().unwrap_or_else(|e| e.into_inner());
        cps.get(&Spool::subscriber_name(core)).copied()
    }

    /// Appends one record and returns its offset once it is durable. A full disk drops the
    /// oldest segment and tries once more; a record that still cannot be written is counted.
    pub async fn append(self: &Arc<Self>, record: Vec<u8>) -> Result<u64, String> {
        let len = record.len() as u64;
        let mut tried_room = false;
        let record = Arc::new(record);
        loop {
            let me = self.clone();
            let r = record.clone();
            let ticket = tokio::task::spawn_blocking(move || me.journal.submit(&[&r[..]]))
                .await
                .map_err(err)?;
            let result = match ticket {
                Ok(t) => t.await,
                Err(e) => Err(e),
            };
            match result {
                Ok(range) => {
                    self.counters.records.fetch_add(1, Ordering::Relaxed);
                    self.counters.bytes.fetch_add(len, Ordering::Relaxed);
                    self.committed_tx.send_replace(self.committed());
                    return Ok(range.start);
                }
                Err(journal::Error::NoSpace) if !tried_room => {
                    tried_room = true;
                    tracing::warn!("disk full: dropping the oldest journal segment");
                    let me = self.clone();
                    let _ = tokio::task::spawn_blocking(move || me.drop_oldest()).await;
                }
                Err(e) => {
                    self.counters.lost_records.fetch_add(1, Ordering::Relaxed);
                    return Err(format!("journal append: {e}"));
                }
            }
        }
    }

    /// Committed records from `from` on, up to about `bytes_max` (at least one).
    pub fn read(&self, from: u64, bytes_max: usize) -> Result<Read, String> {
        let earliest = self.earliest();
        let first = from.max(earliest).min(self.committed());
        let mut reader = self.journal.reader(first).map_err(err)?;
        let mut batch = Batch::new();
        let mut records = Vec::new();
        let mut bytes = 0usize;
        while bytes < bytes_max {
            if reader.next_batch(&mut batch).map_err(err)? == 0 {
                break;
            }
            for (offset, payload) in batch.iter() {
                if bytes >= bytes_max && !records.is_empty() {
                    break;
                }
                bytes += payload.len();
                records.push((offset, payload.to_vec()));
            }
        }
        let first = records.first().map_or(first, |r| r.0);
        Ok(Read { first, records })
    }

    /// A reader positioned at `from`, or at the earliest retained record when the disk budget
    /// dropped `from` (the offset it starts at is returned beside it).
    pub fn reader(&self, from: u64) -> Result<(u64, journal::Reader), String> {
        let first = from.max(self.earliest()).min(self.committed());
        let reader = self.journal.reader(first).map_err(err)?;
        Ok((first, reader))
    }

    /// A core has every record below `through`: its checkpoint moves there (never back), and
    /// segments every core has passed are deleted.
    pub fn ack(&self, core: &str, through: u64) -> Result<u64, String> {
        let name = Spool::subscriber_name(core);
        let mut cps = self.checkpoints.lock().unwrap_or_else(|e| e.into_inner());
        let current = *cps
            .get(&name)
            .ok_or_else(|| format!("no core named `{core}`"))?;
        let through = through.min(self.committed());
        if through <= current {
            return Ok(current);
        }
        self.journal
            .rewind_subscriber(&name, through)
            .map_err(err)?;
        cps.insert(name, through);
        drop(cps);
        self.journal.purge().map_err(err)?;
        Ok(through)
    }

    /// Segment files, oldest first: (base offset, path).
    fn segments(&self) -> Vec<(u64, PathBuf)> {
        let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| {
                        let name = e.file_name();
                        journal::format::parse_segment_file_name(&name.to_string_lossy())
                            .map(|b| (b, e.path()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Disk bytes the journal's segments take, and the age of the oldest one's newest write.
    pub fn disk(&self) -> (u64, u64) {
        let segments = self.segments();
        let bytes = segments.len() as u64 * self.opts.segment_bytes;
        let age = segments
            .first()
            .and_then(|(_, p)| std::fs::metadata(p).ok())
            .and_then(|m| m.modified().ok())
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .map_or(0, |d| d.as_millis() as u64);
        (bytes, age)
    }

    /// Bytes of the segments a core still needs (from the one holding its checkpoint on).
    pub fn backlog_bytes(&self, core: &str) -> u64 {
        let Some(cp) = self.checkpoint(core) else {
            return 0;
        };
        if cp >= self.committed() {
            return 0;
        }
        let segments = self.segments();
        let from = segments.iter().rposition(|(b, _)| *b <= cp).unwrap_or(0);
        (segments.len() - from) as u64 * self.opts.segment_bytes
    }

    /// Drops the oldest segments while the journal is over its budget. Returns records dropped.
    pub fn enforce_budget(&self) -> u64 {
        let mut dropped = 0;
        loop {
            let (bytes, age) = self.disk();
            if bytes <= self.opts.disk_bytes_max && age <= self.opts.disk_age_ms_max {
                return dropped;
            }
            match self.drop_oldest() {
                Some(n) => dropped += n,
                None => return dropped,
            }
        }
    }

    /// Moves every core's checkpoint past the oldest segment and deletes it. `None` when only
    /// one segment is left (the one being written).
    fn drop_oldest(&self) -> Option<u64> {
        let segments = self.segments();
        let (first, next) = match segments.as_slice() {
            [(first, _), (next, _), ..] => (*first, *next),
            _ => return None,
        };
        let mut dropped = 0;
        let mut cps = self.checkpoints.lock().unwrap_or_else(|e| e.into_inner());
        for (name, offset) in cps.iter_mut() {
            if *offset < next && self.journal.rewind_subscriber(name, next).is_ok() {
                dropped += next - (*offset).max(first);
                *offset = next;
            }
        }
        drop(cps);
        if let Err(e) = self.journal.purge() {
            tracing::warn!(error = %e, "purging the journal after a drop");
        }
        self.counters
            .dropped_records
            .fetch_add(dropped, Ordering::Relaxed);
        self.counters
            .dropped_segments
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            records = dropped,
            segment = first,
            "disk budget: dropped the oldest journal segment"
        );
        Some(dropped)
    }

    /// Runs the budget every `every` until the spool is dropped.
    pub async fn budget_loop(self: Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(&self);
        drop(self);
        loop {
            tokio::time::sleep(every).await;
            let Some(me) = weak.upgrade() else { return };
            let _ = tokio::task::spawn_blocking(move || me.enforce_budget()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn append_read_ack_and_budget() {
        let dir = tempfile::tempdir().unwrap();
        let opts = SpoolOptions {
            segment_bytes: 64 << 10,
            disk_bytes_max: 4 * (64 << 10),
            disk_age_ms_max: DISK_AGE_MS_MAX_DEFAULT,
        };
        let spool = Arc::new(Spool::open(dir.path(), &["a".into()], opts).unwrap());
        rt().block_on(async {
            for i in 0..400u32 {
                let off = spool.append(vec![i as u8; 1000]).await.unwrap();
                assert_eq!(off, u64::from(i));
            }
        });
        let read = spool.read(0, 10_000).unwrap();
        assert_eq!(read.first, 0);
        assert!(read.records.len() >= 10);
        assert_eq!(spool.ack("a", 5).unwrap(), 5);
        assert_eq!(spool.ack("a", 3).unwrap(), 5, "never back");
        let dropped = spool.enforce_budget();
        assert!(dropped > 0);
        assert!(spool.disk().0 <= 4 * (64 << 10));
        let cp = spool.checkpoint("a").unwrap();
        assert_eq!(dropped, cp - 5);
        assert_eq!(spool.read(0, 1).unwrap().first, cp);
        assert_eq!(
            spool.counters.dropped_records.load(Ordering::Relaxed),
            dropped
        );
    }
}
