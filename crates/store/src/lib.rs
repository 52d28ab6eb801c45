//! `store`: the time-series engine.
//!
//! The public API is the short list of re-exports below (`README.md` lists it, one line each),
//! plus stream keys ([`key`]) and the fuzzing entry points ([`fuzzing`]). Inside, bottom-up:
//! the series' names and kinds (`series`), slice aggregates (`aggregate`) and the errors
//! (`error`); the per-series chunk codecs (`encode`); keys, the series index (`index`) and the
//! tag query language (`tagquery`); on the journal the write path (`batch`, the WAL record in
//! `wal`, `db`, exactly-once state in `sources`), the in-memory head (`head`, `hist_head`), the
//! engine's shared state (`engine`) and its open block set (`blockset`), flushing the head to
//! immutable `block`s listed by the `manifest` (`flush`), reads over all of them (`read`, `fetch`), rollup levels
//! and retention (`rollup`), deletion and compaction (`compact`), and the read-only inspection
//! behind `strata store inspect | verify` (`inspect`). Within every module, sibling modules
//! never use each other in a cycle (checked by `tools/modgraph` in `scripts/test`).
//! `FORMAT.md` documents every byte written; `STATUS.md` says what is done. No `unsafe`, no
//! wire-protocol parsing.
#![forbid(unsafe_code)]

mod aggregate;
mod batch;
mod block;
mod blockset;
mod cardinality;
mod compact;
mod db;
mod encode;
mod engine;
mod error;
mod fetch;
mod flush;
pub mod fuzzing;
mod head;
mod hist_head;
mod index;
mod inspect;
mod key_parts;
mod log;
/// Stream keys live in their own crate, which the parsers share; the store keeps its path.
pub use key;
mod manifest;
mod num_head;
mod past;
mod points;
mod read;
mod rollup;
mod series;
mod sources;
mod tagquery;
#[cfg(test)]
mod test_util;
mod wal;

// Open and configure.
pub use db::{Store, Written};
pub use engine::{
    default_levels, BackgroundFailures, LevelOptions, ReplayReport, StoreOptions,
    BASE_PERIOD_MS_DEFAULT, BASE_PERIOD_MS_MIN, DAY_MS, HOUR_MS, MINUTE_MS, PARTITION_MS_DEFAULT,
};
pub use error::{IndexError, QueryError, StoreError};
pub use journal::Durability;
pub use log::WalBackend;
pub use past::{Mark as PastMark, PAST_MS};

// Write.
pub use batch::{KeyRef, Value, WriteBatch};
pub use cardinality::{CardinalityLimit, CardinalityOptions, CardinalityStats};
pub use db::{CardinalityRefusal, KindRejection, LimitedWrite};
pub use series::{Kind, SeriesId};
pub use sources::{
    Origin, SourceId, SourceIdError, IN_FLIGHT_MAX, SEQ_WINDOW, SOURCES_MAX, SOURCE_EVICT_IDLE_MS,
    SOURCE_IDLE_MS, SOURCE_ID_BYTES_MAX,
};

// Read.
pub use aggregate::{counter_step, NumericAggregate, SliceAggregate};
pub use read::{Latest, Slicing, View, SLICES_MAX};

// Fetch: many series by tag query, merged per slice and group.
pub use fetch::{
    counter_rates, group_key, merged_histograms, merged_numeric, GroupKey, HistogramGroup,
    NumericGroup, FETCH_SERIES_MAX,
};

// Maintenance.
pub use compact::CompactReport;
pub use flush::{BlockInfo, FlushReport, StoreStats};
pub use inspect::{inspect, verify, Inspection, LevelInfo, Problem};
pub use rollup::{RetentionReport, RollupReport};

// The series index (`Store::index`).
pub use index::{Cardinality, Resolved, SeriesIndex, SeriesInfo, Snapshot};

// Tag queries.
pub use tagquery::{Pattern, TagQuery, Term, WORK_MAX_DEFAULT};

/// Not the store's API: the on-disk formats and their codecs, for the store's own integration
/// tests, benchmarks, examples and fuzz seeds, which must write and read the bytes a store
/// keeps. Other crates use the re-exports above.
#[doc(hidden)]
pub mod internals {
    pub use crate::encode::{numeric, packed_hist, rice_hist, text};

    pub mod block {
        pub use crate::block::{verify, Block, ChunkData, FOOTER_SIZE_BYTES, HEADER_SIZE_BYTES};
    }

    pub mod index {
        pub use crate::index::INDEX_HEADER_SIZE_BYTES;
    }

    pub mod manifest {
        pub use crate::manifest::Manifest;
    }

    pub mod rollup {
        pub use crate::blockset::level_dir;
        pub use crate::rollup::{FAILPOINT_ENV, FAILPOINT_EXIT_CODE};
    }

    pub mod wal {
        pub use crate::wal::{decode, encode, Group, Record};
    }
}
