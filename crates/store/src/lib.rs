//! `store`: the time-series engine.
//!
//! This crate holds the journal-independent layers: stream keys ([`key`]), the series index
//! ([`index`]), the tag query language ([`tagquery`]) and the per-series chunk encoders
//! ([`encode`]). The write path, head, blocks and read API build on these. `FORMAT.md` documents
//! every byte written; `STATUS.md` says what is done. No `unsafe`, no wire-protocol parsing.
#![forbid(unsafe_code)]

pub mod encode;
pub mod fuzzing;
pub mod index;
pub mod key;
pub mod tagquery;
