//! The store's typed errors: [`StoreError`], and the errors of the series index and of tag
//! queries it wraps, kept here (below the index and the query evaluator) so that every layer
//! can name them.

use std::fmt;
use std::path::PathBuf;

use crate::key::KeyError;
use crate::series::{Kind, SeriesId};

// A tag query's bounds live with its errors, which name them; `tagquery` checks against them.
/// Longest query text, in bytes.
pub const QUERY_SIZE_MAX: usize = 16 * 1024;
/// Deepest nesting of `and`/`or`/`not`.
pub const QUERY_DEPTH_MAX: usize = 32;
/// Most terms and operators in one query.
pub const QUERY_NODES_MAX: usize = 512;

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
        f.write_str("series index: ")?;
        match self {
            IndexError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            IndexError::BadHeader { path } => write!(
                f,
                "{} does not start with a valid index header",
                path.display()
            ),
            IndexError::Corrupt { path, offset, what } => write!(
                f,
                "{} is damaged at byte {offset} (before its tail, so not truncated): {what}",
                path.display()
            ),
            IndexError::KindMismatch {
                id,
                existing,
                requested,
            } => write!(
                f,
                "series {} is {} and cannot take a {} value",
                id.0,
                existing.name(),
                requested.name()
            ),
            IndexError::Full => write!(f, "full: no series id is left"),
            IndexError::NotCanonical { text } => {
                write!(f, "the key `{text}` is not in canonical form")
            }
            IndexError::UnknownSeries { id } => write!(f, "no series has the id {}", id.0),
            IndexError::Failed => write!(
                f,
                "refused after an earlier failure (a writer panicked, or an append could not \
                 be undone); reopen the store"
            ),
            IndexError::Key(e) => write!(f, "{e}"),
        }
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
            QueryError::Base64 { position } => {
                write!(f, "tag query: invalid base64 literal at byte {position}")
            }
            QueryError::Regex { position, message } => {
                write!(f, "tag query: bad regex at byte {position}: {message}")
            }
            QueryError::TooLong { size_bytes } => write!(
                f,
                "tag query: {size_bytes} bytes, over the max {QUERY_SIZE_MAX}"
            ),
            QueryError::TooDeep { position } => write!(
                f,
                "tag query: nested deeper than {QUERY_DEPTH_MAX} at byte {position}"
            ),
            QueryError::TooManyNodes { position } => write!(
                f,
                "tag query: more than {QUERY_NODES_MAX} terms and operators, at byte {position}"
            ),
            QueryError::Index { message } => write!(f, "tag query: {message}"),
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
        max_bytes: usize,
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
    /// A store on an external log was given a position below one it has applied: the caller
    /// must apply its log in order.
    LogPositionBehind {
        position: u64,
        end: u64,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
                "batch too large: more samples, key bytes or histogram bytes than one batch \
                 takes; send it in parts"
            ),
            StoreError::TextTooLong {
                len_bytes,
                max_bytes,
            } => write!(
                f,
                "text value is {len_bytes} bytes, over the max {max_bytes}"
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
            StoreError::StaleEpoch {
                source,
                epoch,
                newest,
            } => write!(
                f,
                "source `{source}` sent epoch {epoch}, but epoch {newest} has been seen: a \
                 newer incarnation of this sender exists"
            ),
            StoreError::TooManySources { max } => write!(
                f,
                "too many senders: the store remembers at most {max} sources and none has been \
                 idle long enough to forget; retry later"
            ),
            StoreError::SameBatchBusy { source, seq } => write!(
                f,
                "batch {seq} of source `{source}` is being written by another request; retry \
                 later"
            ),
            StoreError::WalGap {
                checkpoint,
                earliest,
            } => write!(
                f,
                "write-ahead log gap: the manifest's checkpoint is at offset {checkpoint}, the \
                 log starts at {earliest}"
            ),
            StoreError::LogPositionBehind { position, end } => write!(
                f,
                "log position {position} is below {end}, the end of what the store applied: \
                 the log must be applied in order"
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
