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
