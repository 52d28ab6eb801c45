//! Parsers for every wire format Strata accepts, each from bytes into one [`Sink`]: accepted
//! samples lent from the body, plus a rejection (place and reason) for everything else. Each
//! protocol's `parse_into` feeds any sink; its `parse` feeds the owned [`Batch`]. Parsing never
//! touches storage, never panics on any input, and allocates in proportion to the input only.
//! What each protocol accepts and how it maps: `FORMAT.md`.
//!
//! ```
//! use ingest::{httptrap, Options, Value};
//!
//! let now_ms = 1_795_305_600_000; // the receipt time, from the server's clock
//! let body = br#"{"requests": 5, "db|ST[db:orders]": {"_type": "h", "_value": ["H[1.2e-03]=5"]},
//!                 "bad": {"_type": "x", "_value": 1}}"#;
//! let batch = httptrap::parse(body, &Options::at(now_ms));
//! assert_eq!(batch.samples.len(), 2);
//! assert_eq!(batch.samples[0].value, Value::Numeric(5.0));
//! assert_eq!(&*batch.samples[1].tags, [("db".to_owned(), "orders".to_owned())]);
//! // httptrap answers {"stats": 2, "filtered": 1, "error": "document 1, key `bad`: …"}.
//! assert_eq!(batch.rejected_total, 1);
//! assert_eq!(batch.rejected[0].location, "document 1, key `bad`");
//! assert!(!batch.stopped(), "no syntax error: a 200 with partial acceptance");
//! ```
// `deny`, not `forbid`: flatc's generated reader (`flat/httptrap_generated.rs`) needs `unsafe`
// and is the one module allowed it.
#![deny(unsafe_code)]

pub mod batch;
mod bins;
pub mod collectd;
mod feed;
pub mod flat;
pub mod graphite;
pub mod httptrap;
pub mod influx;
mod json;
mod lines;
pub mod otlp;
pub mod remote_write;
pub mod remote_write2;
pub mod sink;
pub mod statsd;
mod tags;
mod wire;

pub use batch::{
    Batch, ExemplarOwned, MetadataOwned, MetricType, Mode, Options, Reason, Rejection, Sample,
    Tags, Value, EXEMPLARS_PER_BATCH_MAX, JSON_DEPTH_MAX, NAME_BYTES_MAX, REJECTIONS_LISTED_MAX,
    SAMPLES_PER_BATCH_MAX, TAGS_PER_SAMPLE_MAX, TAG_BYTES_MAX,
};
pub use sink::{
    Exemplar, HistogramRef, Known, Lookup, Metadata, Name, Point, PointAt, RawSeries, Scope,
    Series, Sink, TagsRef, ValueRef, EXEMPLAR_LABEL_CHARS_MAX,
};
