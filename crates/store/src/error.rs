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
