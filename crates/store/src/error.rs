//! The store's typed errors: [`StoreError`], and the errors of the series index and of tag
//! queries it wraps, kept here (below the index and the query evaluator) so that every layer
//! can name them.

use std::fmt;
use std::path::PathBuf;

use crate::key::KeyError;
use crate::series::{Kind, SeriesId};

#[derive(Debug)]
pub enum IndexError {
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file does not start with a valid index header.
    BadHeader {
        path: PathBuf,
    },
    /// A record before the file's tail is damaged: not a torn write, so not truncated.
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
    /// The key exists with another kind.
    KindMismatch {
        id: SeriesId,
        existing: Kind,
        requested: Kind,
    },
    Full,
    /// A new series' key text is not in canonical form (`StreamKey::canonical`).
    NotCanonical {
        text: String,
    },
    /// A batch names a series id the index does not have.
    UnknownSeries {
        id: SeriesId,
    },
    /// A writer panicked while holding the lock, or an earlier append failed and could not be
    /// undone; the index refuses further work.
    Failed,
    Key(KeyError),
}

impl std::fmt::Display for IndexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "series index: {self:?}")
    }
}

impl std::error::Error for IndexError {}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// At byte `position`, `expected` was expected.
    Syntax {
        position: usize,
        expected: &'static str,
    },
    Base64 {
        position: usize,
    },
    Regex {
        position: usize,
        message: String,
    },
    TooLong {
        size_bytes: usize,
    },
    TooDeep {
        position: usize,
    },
    TooManyNodes {
        position: usize,
    },
    /// Evaluation needed more than `work_max` units of work.
    WorkLimit {
        work_max: u64,
    },
    /// The index refused the read.
    Index {
        message: String,
    },
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Syntax { position, expected } => {
                write!(f, "tag query: expected {expected} at byte {position}")
            }
            QueryError::WorkLimit { work_max } => write!(
                f,
                "tag query: needs more than {work_max} units of work; narrow it with exact terms"
            ),
            other => write!(f, "tag query: {other:?}"),
        }
    }
}

impl std::error::Error for QueryError {}

impl From<IndexError> for QueryError {
    fn from(e: IndexError) -> QueryError {
        QueryError::Index {
            message: e.to_string(),
        }
    }
}

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
    /// A batch of an epoch older than the newest its source used: refused, never applied.
    StaleEpoch {
        source: String,
        epoch: u64,
        newest: u64,
    },
    /// The store keeps the applied batches of at most `max` sources, none idle long enough to
    /// be forgotten.
    TooManySources {
        max: usize,
    },
    /// Another request kept writing the same batch (same source and sequence) for too long.
    SameBatchBusy {
        source: String,
        seq: u64,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "store: {self:?}")
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
