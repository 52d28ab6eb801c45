//! Named subscribers and their checkpoints.
//!
//! A checkpoint file holds two CRC'd slots one page apart; a commit overwrites the older slot in
//! place (no new space needed, so committing works on a full disk) and syncs it. Reading takes
//! the valid slot with the higher sequence; if both are damaged the subscriber falls back to the
//! earliest retained offset — re-reading is safe, skipping is not.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{self, CheckpointSlot, CHECKPOINT_FILE_SIZE_BYTES, SLOT_STRIDE_BYTES};
use crate::reader::{Batch, CommittedSource, Reader};
use crate::segment;
use crate::vfs::{self, OpenMode, VFile, Vfs};

/// Where a new subscriber starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// The earliest retained record.
    Begin,
    /// The committed end: only records appended from now on.
    End,
    /// Wherever another subscriber's checkpoint is.
    CopyOf(String),
    /// A given retained offset.
    At(u64),
}

/// A subscriber as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriberInfo {
    pub name: String,
    /// Next offset it reads (its checkpoint).
    pub offset: u64,
    /// Both slots were damaged and `offset` is the earliest-retained fallback.
    pub fell_back: bool,
}

fn checkpoint_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format::checkpoint_file_name(name))
}

fn check_name(name: &str) -> Result<()> {
    if !format::valid_subscriber_name(name) {
        return Err(Error::InvalidName(name.to_string()));
    }
    Ok(())
}

/// The valid slot with the highest sequence in a checkpoint file, if any.
pub(crate) fn load_slot(file: &dyn VFile) -> Result<Option<(usize, CheckpointSlot)>> {
    let mut b = vec![0u8; CHECKPOINT_FILE_SIZE_BYTES as usize];
    let n = vfs::read_full_at(file, &mut b, 0)?;
    b.truncate(n);
    Ok(CheckpointSlot::newest(&b))
}

/// An open checkpoint file.
pub(crate) struct CheckpointFile {
    file: Arc<dyn VFile>,
    /// Sequence and slot index of the newest valid slot (0 / None if both are damaged).
    sequence: u64,
    slot: Option<usize>,
}

impl CheckpointFile {
    fn open(fs: &dyn Vfs, dir: &Path, name: &str) -> Result<(CheckpointFile, Option<u64>)> {
        check_name(name)?;
        let file = fs
            .open(&checkpoint_path(dir, name), OpenMode::Write)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ENOENT) {
                    Error::NoSuchSubscriber(name.to_string())
                } else {
                    Error::from_io(e)
                }
            })?;
        let newest = load_slot(&*file)?;
        let ckpt = CheckpointFile {
            file,
            sequence: newest.map_or(0, |(_, s)| s.sequence),
            slot: newest.map(|(i, _)| i),
        };
        Ok((ckpt, newest.map(|(_, s)| s.offset)))
    }

    /// Overwrites the older slot with a newer sequence and syncs it. The other slot still holds
    /// the previous checkpoint if this write is torn.
    fn commit(&mut self, offset: u64) -> Result<()> {
        let slot = match self.slot {
            Some(i) => 1 - i,
            None => 0,
        };
        let s = CheckpointSlot {
            sequence: self.sequence + 1,
            offset,
            written_unix_ms: crate::now_unix_ms(),
        };
        vfs::write_all_at(&*self.file, &s.encode(), slot as u64 * SLOT_STRIDE_BYTES)?;
        vfs::sync_data(&*self.file)?;
        self.sequence = s.sequence;
        self.slot = Some(slot);
        Ok(())
    }
}

pub(crate) fn resolve(
    fs: &dyn Vfs,
    dir: &Path,
    start: &Start,
    earliest: u64,
    committed: u64,
) -> Result<u64> {
    let offset = match start {
        Start::Begin => earliest,
        Start::End => committed,
        Start::At(o) => *o,
        Start::CopyOf(other) => read_offset(fs, dir, other, earliest)?.0,
    };
    if offset < earliest || offset > committed {
        return Err(Error::NotRetained {
            offset,
            earliest,
            committed,
        });
    }
    Ok(offset)
}

/// A subscriber's checkpoint, or the earliest retained offset if both slots are damaged.
pub(crate) fn read_offset(
    fs: &dyn Vfs,
    dir: &Path,
    name: &str,
    earliest: u64,
) -> Result<(u64, bool)> {
    let (_, offset) = CheckpointFile::open(fs, dir, name)?;
    Ok(match offset {
        Some(o) => (o, false),
        None => (earliest, true),
    })
}

/// Creates a subscriber's checkpoint file atomically (temp, both slots, sync, rename, dir sync).
pub(crate) fn add(fs: &dyn Vfs, dir: &Path, name: &str, offset: u64) -> Result<()> {
    check_name(name)?;
    let path = checkpoint_path(dir, name);
    if fs.exists(&path) {
        return Err(Error::SubscriberExists(name.to_string()));
    }
    let tmp = dir.join(format!("{}.tmp", format::checkpoint_file_name(name)));
    if fs.exists(&tmp) {
        fs.remove_file(&tmp)?;
    }
    let mut bytes = vec![0u8; CHECKPOINT_FILE_SIZE_BYTES as usize];
    let slot = CheckpointSlot {
        sequence: 1,
        offset,
        written_unix_ms: crate::now_unix_ms(),
    };
    bytes[..format::SLOT_SIZE_BYTES].copy_from_slice(&slot.encode());
    let made = (|| -> std::io::Result<()> {
        let f = fs.open(&tmp, OpenMode::CreateNew)?;
        vfs::write_all_at(&*f, &bytes, 0)?;
        vfs::sync_data(&*f)?;
        fs.rename(&tmp, &path)?;
        fs.sync_dir(dir)
    })();
    if let Err(e) = made {
        let _ = fs.remove_file(&tmp);
        return Err(Error::from_io(e));
    }
    Ok(())
}

pub(crate) fn remove(fs: &dyn Vfs, dir: &Path, name: &str) -> Result<()> {
    check_name(name)?;
    let path = checkpoint_path(dir, name);
    if !fs.exists(&path) {
        return Err(Error::NoSuchSubscriber(name.to_string()));
    }
    fs.remove_file(&path)?;
    fs.sync_dir(dir)?;
    Ok(())
}

pub(crate) fn rewind(
    fs: &dyn Vfs,
    dir: &Path,
    name: &str,
    offset: u64,
    earliest: u64,
    committed: u64,
) -> Result<()> {
    if offset < earliest || offset > committed {
        return Err(Error::NotRetained {
            offset,
            earliest,
            committed,
        });
    }
    let (mut ckpt, _) = CheckpointFile::open(fs, dir, name)?;
    ckpt.commit(offset)
}

pub(crate) fn list(fs: &dyn Vfs, dir: &Path, earliest: u64) -> Result<Vec<SubscriberInfo>> {
    let mut out = Vec::new();
    for file in fs.list(dir)? {
        let Some(name) = format::parse_checkpoint_file_name(&file) else {
            continue;
        };
        let (offset, fell_back) = read_offset(fs, dir, name, earliest)?;
        out.push(SubscriberInfo {
            name: name.to_string(),
            offset,
            fell_back,
        });
    }
    Ok(out)
}

/// Moves checkpoints that point past `end` back to it (after a power loss lost the tail they
/// had read; the offsets will be reused, so keeping them would skip new records).
pub(crate) fn clamp_all(fs: &dyn Vfs, dir: &Path, end: u64) -> Result<u64> {
    let mut clamped = 0u64;
    for file in fs.list(dir)? {
        let Some(name) = format::parse_checkpoint_file_name(&file) else {
            continue;
        };
        let (mut ckpt, offset) = CheckpointFile::open(fs, dir, name)?;
        if offset.is_some_and(|o| o > end) {
            ckpt.commit(end)?;
            clamped += 1;
        }
    }
    Ok(clamped)
}

/// A named subscriber: a reader that starts at the checkpoint, plus the means to commit a new
/// one. Reading does not consume; commit after processing (at-least-once).
pub struct Subscriber {
    name: String,
    reader: Reader,
    ckpt: CheckpointFile,
    checkpoint: u64,
    fell_back: bool,
}

impl Subscriber {
    /// Opens a subscriber from another process (read-only on the log; writes only its own
    /// preallocated checkpoint slots when it commits).
    pub fn open(fs: Arc<dyn Vfs>, dir: impl AsRef<Path>, name: &str) -> Result<Subscriber> {
        let source = CommittedSource::open_file(&*fs, dir.as_ref())?;
        Subscriber::open_with(fs, dir.as_ref(), name, source)
    }

    pub(crate) fn open_with(
        fs: Arc<dyn Vfs>,
        dir: &Path,
        name: &str,
        source: CommittedSource,
    ) -> Result<Subscriber> {
        let (ckpt, offset) = CheckpointFile::open(&*fs, dir, name)?;
        let earliest = segment::list_segments(&*fs, dir)?
            .first()
            .copied()
            .unwrap_or(0);
        let checkpoint = offset.unwrap_or(earliest);
        let reader = Reader::open_with(fs, dir, source, checkpoint)?;
        Ok(Subscriber {
            name: name.to_string(),
            reader,
            ckpt,
            checkpoint,
            fell_back: offset.is_none(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The durable checkpoint: where a restarted subscriber resumes.
    pub fn checkpoint(&self) -> u64 {
        self.checkpoint
    }

    /// True if both checkpoint slots were damaged and reading restarted at the earliest offset.
    pub fn fell_back(&self) -> bool {
        self.fell_back
    }

    /// Next offset `next_batch` delivers.
    pub fn position(&self) -> u64 {
        self.reader.position()
    }

    pub fn next_batch(&mut self, batch: &mut Batch) -> Result<usize> {
        self.reader.next_batch(batch)
    }

    /// Commits everything read so far.
    pub fn commit(&mut self) -> Result<()> {
        self.commit_offset(self.reader.position())
    }

    /// Commits `offset` as processed-up-to. It may not pass what was read (that would skip
    /// unread records).
    pub fn commit_offset(&mut self, offset: u64) -> Result<()> {
        let position = self.reader.position();
        if offset > position {
            return Err(Error::NotRetained {
                offset,
                earliest: self.checkpoint,
                committed: position,
            });
        }
        self.ckpt.commit(offset)?;
        self.checkpoint = offset;
        Ok(())
    }

    /// Moves the read position (not the checkpoint) to any retained offset.
    pub fn seek(&mut self, offset: u64) -> Result<()> {
        self.reader.seek(offset)
    }
}
