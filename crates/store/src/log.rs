//! The write-ahead log behind a small trait, with two back-ends (`FORMAT.md`, "Write-ahead log
//! back-ends"):
//!
//! - [`JournalLog`], the local journal (`dir/wal`): the store encodes every batch as a WAL record
//!   (`wal.rs`), a write is acknowledged once the record is durable at the configured level, and
//!   open replays the records from the manifest's checkpoint.
//! - [`ExternalLog`]: a log the caller owns and has made durable already (a Kafka partition). The
//!   store writes nothing for a batch; the caller names the batch's position in its log, the
//!   manifest's checkpoint becomes "every position below it is in the blocks", and open replays
//!   nothing: the caller replays its own log from that checkpoint.
//!
//! Positions are what the head orders duplicate samples by and what a flush's checkpoint counts;
//! both back-ends hand them out increasing, in submission order.

use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};

use journal::vfs::Vfs;
use journal::{Journal, Start, Ticket};

use crate::StoreError;

/// The journal subscriber that marks what the blocks hold: advanced to the manifest's
/// checkpoint after each flush, so the journal can purge what is in blocks.
pub(crate) const HEAD_SUBSCRIBER: &str = "head";

/// Which write-ahead log a store writes (`StoreOptions::wal`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalBackend {
    /// The store's own journal in `dir/wal`: the single-node default.
    #[default]
    Journal,
    /// The caller's log (a Kafka partition): written with `Store::write_logged` only.
    External,
}

/// A record submitted to the log: its positions, and (journal) the wait for its durability.
pub(crate) enum LogTicket {
    Journal(Ticket),
    External(Range<u64>),
}

impl LogTicket {
    pub fn range(&self) -> Range<u64> {
        match self {
            LogTicket::Journal(t) => t.range(),
            LogTicket::External(r) => r.clone(),
        }
    }

    /// Returns once the record is durable as the back-end defines it (the external log's
    /// records were durable before they reached the store).
    pub fn wait(self) -> Result<(), StoreError> {
        match self {
            LogTicket::Journal(t) => t.wait().map(drop).map_err(StoreError::from),
            LogTicket::External(_) => Ok(()),
        }
    }
}

/// What replay does with one record: `(position, record bytes)`.
pub(crate) type ReplayRecord<'a> = dyn FnMut(u64, &[u8]) -> Result<(), StoreError> + 'a;

/// What the store needs of a write-ahead log.
pub(crate) trait WriteAheadLog: Send + Sync {
    /// Appends one record, encoded by `encode` into the log's buffer if the log keeps bytes;
    /// `at` is the position the caller's log gave the batch (external logs need it).
    fn submit(
        &self,
        size_bytes_hint: usize,
        at: Option<u64>,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<LogTicket, StoreError>;

    /// Calls `each(position, record)` for every record from `from` on, in order; returns the
    /// position after the last one (`from` when there is none).
    fn replay(&self, from: u64, each: &mut ReplayRecord<'_>) -> Result<u64, StoreError>;

    /// A flush committed every record below `checkpoint` to blocks: what the log may drop.
    fn flushed(&self, checkpoint: u64) -> Result<(), StoreError>;

    /// Makes everything submitted durable and releases the log.
    fn close(self: Box<Self>) -> Result<(), StoreError>;
}

/// The journal's settings (`StoreOptions`).
pub(crate) struct JournalSettings {
    pub durability: journal::Durability,
    pub segment_size_bytes: u64,
    pub vfs: Arc<dyn Vfs>,
}

/// Opens the back-end `backend` for the store in `dir` whose manifest's checkpoint is
/// `checkpoint`.
pub(crate) fn open(
    dir: &Path,
    backend: WalBackend,
    settings: JournalSettings,
    checkpoint: u64,
) -> Result<Box<dyn WriteAheadLog>, StoreError> {
    let vfs = &settings.vfs;
    match backend {
        WalBackend::Journal => Ok(Box::new(JournalLog::open(dir, settings)?)),
        WalBackend::External => {
            // A store that wrote its own WAL counts journal offsets in its checkpoint, not
            // positions of the caller's log: taking one for the other would skip or repeat data.
            if vfs.exists(&dir.join("wal")) {
                return Err(StoreError::InvalidOptions(
                    "this store was written with its own WAL and cannot be opened on an external log",
                ));
            }
            Ok(Box::new(ExternalLog {
                end: Mutex::new(checkpoint),
            }))
        }
    }
}

pub(crate) struct JournalLog {
    journal: Journal,
}

impl JournalLog {
    fn open(dir: &Path, settings: JournalSettings) -> Result<JournalLog, StoreError> {
        let journal = Journal::open(
            dir.join("wal"),
            journal::Options {
                durability: settings.durability,
                segment_size_bytes: settings.segment_size_bytes,
                vfs: settings.vfs,
                ..journal::Options::default()
            },
        )?;
        if !journal
            .subscribers()?
            .iter()
            .any(|s| s.name == HEAD_SUBSCRIBER)
        {
            journal.add_subscriber(HEAD_SUBSCRIBER, Start::Begin)?;
        }
        Ok(JournalLog { journal })
    }
}

impl WriteAheadLog for JournalLog {
    fn submit(
        &self,
        size_bytes_hint: usize,
        _at: Option<u64>,
        encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<LogTicket, StoreError> {
        let ticket = self.journal.submit_encoded(size_bytes_hint, encode)?;
        Ok(LogTicket::Journal(ticket))
    }

    fn replay(&self, from: u64, each: &mut ReplayRecord<'_>) -> Result<u64, StoreError> {
        let earliest = self.journal.earliest_offset()?;
        if from < earliest {
            return Err(StoreError::WalGap {
                checkpoint: from,
                earliest,
            });
        }
        // The subscriber may lag the manifest (a crash between the two updates).
        let subscribed = self
            .journal
            .subscribers()?
            .iter()
            .find(|s| s.name == HEAD_SUBSCRIBER)
            .map(|s| s.offset);
        if subscribed.is_some_and(|o| o < from) {
            self.journal.rewind_subscriber(HEAD_SUBSCRIBER, from)?;
        }
        let mut reader = self.journal.reader(from)?;
        let mut batch = journal::Batch::new();
        while reader.next_batch(&mut batch)? > 0 {
            for (offset, payload) in batch.iter() {
                each(offset, payload)?;
            }
        }
        Ok(reader.position().max(from))
    }

    fn flushed(&self, checkpoint: u64) -> Result<(), StoreError> {
        self.journal
            .rewind_subscriber(HEAD_SUBSCRIBER, checkpoint)?;
        self.journal.purge()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<(), StoreError> {
        Ok(self.journal.close()?)
    }
}

/// The caller's log: positions come from it, nothing is written or replayed here.
pub(crate) struct ExternalLog {
    /// The position after the newest record submitted: positions only grow.
    end: Mutex<u64>,
}

impl WriteAheadLog for ExternalLog {
    fn submit(
        &self,
        _size_bytes_hint: usize,
        at: Option<u64>,
        _encode: &mut dyn FnMut(&mut Vec<u8>),
    ) -> Result<LogTicket, StoreError> {
        let Some(at) = at else {
            return Err(StoreError::InvalidOptions(
                "a store on an external log is written with write_logged (a log position)",
            ));
        };
        let mut end = self.end.lock().map_err(|_| StoreError::Poisoned)?;
        if at < *end || at == u64::MAX {
            // The checkpoint would cover a record applied after it: a caller bug.
            return Err(StoreError::LogPositionBehind {
                position: at,
                end: *end,
            });
        }
        *end = at + 1;
        Ok(LogTicket::External(at..at + 1))
    }

    fn replay(&self, from: u64, _each: &mut ReplayRecord<'_>) -> Result<u64, StoreError> {
        Ok(from)
    }

    fn flushed(&self, _checkpoint: u64) -> Result<(), StoreError> {
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<(), StoreError> {
        Ok(())
    }
}
