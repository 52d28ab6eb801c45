//! `storebench`: the store's workload generator and the in-process store benchmark.
//!
//! - [`workload`]: deterministic, seeded TSBS-like numeric (integer and float gauges), lognormal
//!   histogram and series-churn workloads, streamed in time order.
//! - [`run`]: drives `store::Store::write` with them (batches of 10,000, group commit) and
//!   reports CPU seconds, rates, bytes on disk and memory as one JSON line.
//! - [`crash`]: acknowledged samples lost after `kill -9` of a writer at full speed.
//! - [`measure`]: `/proc/self` memory and CPU fields, store directory sizes, the JSON line.
//!
//! The `storebench` binary is the command line; `README.md` says what every number means.
#![forbid(unsafe_code)]

pub mod crash;
pub mod measure;
pub mod run;
pub mod workload;
