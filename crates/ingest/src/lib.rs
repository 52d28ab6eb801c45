//! Parsers for every wire format Strata accepts, each from bytes to one [`Batch`]: accepted
//! samples plus a rejection (place and reason) for everything else. Parsing never touches
//! storage, never panics on any input, and allocates in proportion to the input only.
//! What each protocol accepts and how it maps: `FORMAT.md`.
#![forbid(unsafe_code)]

pub mod batch;
pub mod graphite;
pub mod httptrap;
pub mod influx;
mod json;
mod lines;
pub mod statsd;
mod tags;

pub use batch::{
    Batch, Mode, Options, Reason, Rejection, Sample, Tags, Value, JSON_DEPTH_MAX, NAME_BYTES_MAX,
    REJECTIONS_LISTED_MAX, SAMPLES_PER_BATCH_MAX, TAGS_PER_SAMPLE_MAX, TAG_BYTES_MAX,
};
