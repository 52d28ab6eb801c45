//! The store's typed errors.

use crate::index::IndexError;
use crate::tagquery::QueryError;

#[derive(Debug)]
pub enum StoreError {
    Journal(journal::Error),
    Index(IndexError),
    Query(QueryError),
    Io(std::io::Error),
    InvalidOptions(&'static str),
    /// A key was given two kinds within one batch.
    KindMismatchInBatch {
        key: String,
    },
    BatchTooLarge,
    TextTooLong {
        len_bytes: usize,
    },
    /// Bins lent as a histogram (`WriteBatch::push_canonical_bins`) are not one: `expected`
    /// says what they must be.
    InvalidBins {
        expected: &'static str,
    },
    /// A WAL record failed to decode although the journal's CRC matched: a bug or a foreign
    /// writer, never served as data.
    WalCorrupt {
        journal_offset: u64,
        byte: usize,
        what: &'static str,
    },
    /// A WAL record names a series the index does not have (or with another kind).
    WalUnknownSeries {
        journal_offset: u64,
        id: u32,
    },
    /// A read's range or period is not usable (`what` says why).
    BadRange(&'static str),
    /// A writer panicked while holding the head's lock.
    Poisoned,
    /// The store was created with another base period or partition length.
    LayoutMismatch {
        stored_base_period_ms: i64,
        stored_partition_ms: i64,
    },
    /// The manifest (or the cumulative state it names) is damaged: the store does not open.
    Manifest(crate::manifest::ManifestError),
    /// A block's structure is damaged (found while writing or verifying it).
    Block {
        block: String,
        error: crate::block::BlockError,
    },
    /// A chunk read for this series and time range is damaged: nothing of it is served.
    BlockDamaged {
        block: String,
        series: u32,
        start_ms: i64,
        end_ms: i64,
        what: String,
    },
    /// The read needs a block that was quarantined as damaged (its whole partition, as the
    /// block's directory could not be trusted).
    Quarantined {
        block: String,
        start_ms: i64,
        end_ms: i64,
    },
    /// The WAL no longer holds the records after the manifest's checkpoint.
    WalGap {
        checkpoint: u64,
        earliest: u64,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::batch::{BATCH_SAMPLES_MAX, TEXT_BYTES_MAX};
        match self {
            // What an operator must act on, first: the data was not taken and can be sent again.
            StoreError::Journal(journal::Error::NoSpace) => write!(
                f,
                "disk full: no space left for the write-ahead log; nothing of this write was \
                 stored (free space, then send it again)"
            ),
            StoreError::Journal(e) => write!(f, "write-ahead log: {e}"),
            StoreError::Index(e) => write!(f, "{e}"),
            StoreError::Query(e) => write!(f, "{e}"),
            StoreError::Io(e) => write!(f, "store I/O error: {e}"),
            StoreError::InvalidOptions(why) => write!(f, "invalid store options: {why}"),
            StoreError::KindMismatchInBatch { key } => {
                write!(f, "`{key}` is given values of two kinds in one batch")
            }
            StoreError::BatchTooLarge => write!(
                f,
                "batch too large: over {BATCH_SAMPLES_MAX} samples, or over its key or \
                 histogram bytes"
            ),
            StoreError::TextTooLong { len_bytes } => write!(
                f,
                "text value is {len_bytes} bytes, over the max {TEXT_BYTES_MAX}"
            ),
            StoreError::InvalidBins { expected } => {
                write!(f, "invalid histogram bins: expected {expected}")
            }
            StoreError::WalCorrupt {
                journal_offset,
                byte,
                what,
            } => write!(
                f,
                "write-ahead log record at offset {journal_offset} is damaged at byte {byte}: \
                 {what}"
            ),
            StoreError::WalUnknownSeries { journal_offset, id } => write!(
                f,
                "write-ahead log record at offset {journal_offset} names series {id}, which the \
                 index does not have with that kind"
            ),
            StoreError::BadRange(what) => write!(f, "bad range: {what}"),
            StoreError::Poisoned => write!(
                f,
                "a writer failed while holding the in-memory data; reopen the store"
            ),
            StoreError::LayoutMismatch {
                stored_base_period_ms,
                stored_partition_ms,
            } => write!(
                f,
                "the store was created with a base period of {stored_base_period_ms} ms and \
                 partitions of {stored_partition_ms} ms; open it with those"
            ),
            StoreError::Manifest(e) => write!(f, "manifest: {e}"),
            StoreError::Block { block, error } => write!(f, "block {block}: {error}"),
            StoreError::BlockDamaged {
                block,
                series,
                start_ms,
                end_ms,
                what,
            } => write!(
                f,
                "block {block}: series {series} from {start_ms} to {end_ms} ms is damaged \
                 ({what}); nothing of it is served"
            ),
            StoreError::Quarantined {
                block,
                start_ms,
                end_ms,
            } => write!(
                f,
                "the read needs block {block} ({start_ms} to {end_ms} ms), quarantined as damaged"
            ),
            StoreError::WalGap {
                checkpoint,
                earliest,
            } => write!(
                f,
                "write-ahead log gap: the manifest's checkpoint is at offset {checkpoint}, the \
                 log starts at {earliest}"
            ),
        }
    }
}

impl std::fmt::Display for crate::manifest::ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            crate::manifest::ManifestError::Io(e) => write!(f, "I/O error: {e}"),
            crate::manifest::ManifestError::Damaged { offset, what } => {
                write!(f, "damaged at byte {offset}: {what}")
            }
        }
    }
}

impl std::fmt::Display for crate::block::BlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            crate::block::BlockError::Io(e) => write!(f, "I/O error: {e}"),
            crate::block::BlockError::Damaged { offset, what } => {
                write!(f, "damaged at byte {offset}: {what}")
            }
            crate::block::BlockError::Chunk {
                series,
                first_ts_ms,
                last_ts_ms,
                what,
            } => write!(
                f,
                "the chunk of series {} from {first_ts_ms} to {last_ts_ms} ms is damaged: {what}",
                series.0
            ),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<journal::Error> for StoreError {
    fn from(e: journal::Error) -> StoreError {
        StoreError::Journal(e)
    }
}

impl From<crate::manifest::ManifestError> for StoreError {
    fn from(e: crate::manifest::ManifestError) -> StoreError {
        StoreError::Manifest(e)
    }
}

impl From<IndexError> for StoreError {
    fn from(e: IndexError) -> StoreError {
        StoreError::Index(e)
    }
}

impl From<QueryError> for StoreError {
    fn from(e: QueryError) -> StoreError {
        StoreError::Query(e)
    }
}
