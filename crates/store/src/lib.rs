//! `store`: the time-series engine.
//!
//! Stream keys ([`key`]), the series index ([`index`]), the tag query language ([`tagquery`]),
//! the per-series chunk encoders ([`encode`]), and on the journal the write path ([`Store`],
//! [`WriteBatch`], the WAL record in [`wal`]), the in-memory head, flushing it to immutable
//! [`block`]s listed by the [`manifest`] ([`flush`]), rollup levels and retention ([`rollup`]),
//! deletion and compaction ([`compact`]), and reads over all of them ([`read`]).
//! `FORMAT.md` documents
//! every byte written; `STATUS.md` says what is done. No `unsafe`, no wire-protocol parsing.
#![forbid(unsafe_code)]

pub mod batch;
pub mod block;
pub mod compact;
mod db;
pub mod encode;
mod error;
pub mod fetch;
pub mod flush;
pub mod fuzzing;
mod head;
mod hist_head;
pub mod index;
pub mod inspect;
/// Stream keys live in their own crate, which the parsers share; the store keeps its path.
pub use key;
pub mod manifest;
/// Packed bins live in `hist` so that parsers can write them; the store keeps its paths.
pub use hist::packed;
pub mod read;
pub mod rollup;
pub mod tagquery;
#[cfg(test)]
mod test_util;
pub mod wal;

pub use batch::{KeyRef, Value, WriteBatch};
pub use db::{
    default_levels, KindRejection, LevelOptions, ReplayReport, Store, StoreOptions,
    BASE_PERIOD_MS_DEFAULT, BASE_PERIOD_MS_MIN, DAY_MS, HOUR_MS, MINUTE_MS, PARTITION_MS_DEFAULT,
};
pub use error::StoreError;
pub use flush::{BlockInfo, FlushReport, StoreStats};
pub use journal::Durability;
pub use read::{Latest, NumericAggregate, SliceAggregate, Slicing, View};
