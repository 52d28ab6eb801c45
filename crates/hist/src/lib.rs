//! `hist`: the log-linear histogram (circllhist / OpenHistogram), exact and fast.
//!
//! Byte-compatible with the C reference library `libcircllhist`: the same bins for every double
//! and integer-scale value, the same binary and base64 forms, the same quantiles, inverse
//! quantiles, counts, means and deviations bit for bit (see `FORMAT.md` for the two places where
//! Strata deliberately differs). No I/O and no `unsafe`.
//!
//! - [`Bin`]: a `(val, exp)` bin and the value → bin mapping.
//! - [`Histogram`]: the sorted form — merge, subtract, quantiles, counts, binary/base64/text.
//! - [`Accumulator`]: the dense form for merging many histograms into one.
//! - [`Recorder`]: the hot-path form for inserting measurements, convertible to a `Histogram`.
//! - [`packed`]: bins as gap and count varints, the store's in-memory and WAL form.
#![forbid(unsafe_code)]

mod accumulate;
mod bin;
mod codec;
pub mod convert;
mod error;
mod histogram;
pub mod packed;
mod pow10;
mod recorder;
mod text;

pub use accumulate::{Accumulator, ACCUMULATOR_SPAN_MAX};
pub use bin::{key_is_valid, Bin, ValidKey, BIN_COUNT_MAX};
pub use error::{DecodeError, QuantileError, TextError};
pub use histogram::{Histogram, QuantileType, ThresholdCounts};
pub use recorder::Recorder;
pub use text::parse_entry;
