//! Every ingest body's path, whatever its protocol: pick the parser, parse into the
//! insert sink (crate `insert`), hand the batch to the one function that writes to the store
//! (`App::store_inserted`), and report what the body became.

use std::cell::RefCell;
use std::sync::Arc;

use ingest::httptrap::Scratch;
use ingest::influx::Precision;
use ingest::Options;
use insert::{Buffers, Inserted, Setup};
use store::key::Tag;
use store::{Origin, Written};

use super::kept::Kept;
use super::metadata::Described;
use super::reply::{Outcome, ServeError};
use super::{now_ms, App, Endpoint};

/// The two encodings of an httptrap body, chosen by `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Flat,
}

/// Which parser reads a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Httptrap(Encoding),
    Influx(Precision),
    RemoteWrite,
    /// Remote write 2.0 (`io.prometheus.write.v2.Request`), on the same endpoint.
    RemoteWrite2,
    Otlp {
        json: bool,
    },
    Graphite,
    /// One collectd binary-protocol datagram.
    Collectd,
}

impl Protocol {
    fn endpoint(self) -> Endpoint {
        match self {
            Protocol::Httptrap(_) => Endpoint::Httptrap,
            Protocol::Influx(_) => Endpoint::Influx,
            Protocol::RemoteWrite | Protocol::RemoteWrite2 => Endpoint::RemoteWrite,
            Protocol::Otlp { .. } => Endpoint::Otlp,
            Protocol::Graphite => Endpoint::Graphite,
            Protocol::Collectd => Endpoint::Collectd,
        }
    }

    /// The protocol's namespace in the series id cache, for those whose parsers lend the bytes
    /// a client sent for a series. httptrap JSON and flatbuffers share one: a metric's name and
    /// its own `|ST[…]` text determine its key the same way in both.
    fn cache_name(self) -> Option<&'static str> {
        match self {
            Protocol::Httptrap(_) => Some("httptrap"),
            Protocol::Influx(_) => Some("influx"),
            Protocol::RemoteWrite => Some("remote_write"),
            // 2.0's label references index a per-request table: its bytes name no series.
            Protocol::RemoteWrite2
            | Protocol::Otlp { .. }
            | Protocol::Graphite
            | Protocol::Collectd => None,
        }
    }
}

/// Parses and writes one body (decompressed already, within the body budget) on the blocking pool; what it
/// became. `extra_tags` go on every key (httptrap's `__check`). A body whose parse stopped is
/// not written at all. A body with an `origin` already applied is acknowledged again without
/// being applied (`Outcome::duplicate`).
pub async fn write_body(
    app: &Arc<App>,
    protocol: Protocol,
    body: impl AsRef<[u8]> + Send + 'static,
    extra_tags: Vec<Tag>,
    origin: Option<Origin>,
    sender: String,
) -> Result<Outcome, ServeError> {
    app.write_blocking(move |app| {
        let body = Body {
            protocol,
            bytes: body.as_ref(),
            extra_tags: &extra_tags,
            sender: &sender,
        };
        read_and_write(app, body, origin)
    })
    .await
}

/// One body to read and write, and who sent it (the cardinality limits' source when the body
/// names no exactly-once origin).
struct Body<'a> {
    protocol: Protocol,
    bytes: &'a [u8],
    extra_tags: &'a [Tag],
    sender: &'a str,
}

/// Bytes of reading buffers kept for a next body (larger ones are dropped after use, so one huge
/// body does not pin its memory; the batch's bound is `Inserted::take_buffers`').
const RETAINED_SCRATCH_BYTES_MAX: usize = 32 << 20;
/// Bytes of a decompressed remote write body kept for the next.
const RETAINED_RAW_BYTES_MAX: usize = 8 << 20;

thread_local! {
    /// A blocking-pool thread's batch buffers and decompression buffer, kept between bodies: a
    /// steady stream of requests then does not fault in fresh pages for each.
    static BUFFERS: RefCell<(Buffers, Vec<u8>)> = RefCell::new(Default::default());
}

/// The httptrap JSON reading buffers (bin vectors, tape, remembered bin prefixes and key
/// splits), taken only while a body is read.
static SCRATCH: Kept<Scratch> = Kept::new();

fn read_and_write(
    app: &App,
    body: Body<'_>,
    origin: Option<Origin>,
) -> Result<Outcome, ServeError> {
    let Body {
        protocol,
        bytes: body,
        extra_tags,
        sender,
    } = body;
    let now_ms = now_ms();
    let cache = &app.series_ids;
    let setup = Setup {
        now_ms,
        extra_tags,
        cache: protocol
            .cache_name()
            .and_then(|name| cache.namespace(name, extra_tags))
            .map(|namespace| (cache, namespace)),
        names: Some(&app.store),
    };
    let (buffers, mut raw) = BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
    let mut written = None;
    let mut described = Vec::new();
    let mut exemplars = Vec::new();
    let options = Options {
        ts_min_ms: accepted_oldest_ms(app.store.options(), now_ms),
        ..Options::at(now_ms)
    };
    let mut inserted = read(
        protocol,
        body,
        &options,
        &setup,
        buffers,
        &mut raw,
        &mut written,
        &mut described,
        &mut exemplars,
        &app.otlp,
    );
    inserted.batch.set_origin(origin);
    let result = app.store_inserted(Some(protocol.endpoint()), &mut inserted, sender);
    let mut exemplars_kept = 0;
    if result.is_ok() && !inserted.stopped {
        app.metadata.record(&described);
        exemplars_kept = app.exemplars.record(&exemplars);
    }
    let outcome = Outcome {
        written: written.map(|w| ingest::remote_write2::Written {
            exemplars: exemplars_kept,
            ..stored_share(w, &inserted)
        }),
        duplicate: matches!(result, Ok(Written::Duplicate)),
        accepted: inserted.accepted,
        rejected_total: inserted.rejected_total,
        error: inserted.error_text(),
        stopped: inserted.stopped,
        too_large: inserted.stopped_too_large,
        limited: inserted
            .limited
            .as_ref()
            .map(|(limit, key)| (format!("cardinality.{}", limit.name()), key.clone())),
    };
    if raw.capacity() > RETAINED_RAW_BYTES_MAX {
        raw = Vec::new();
    }
    let buffers = inserted.take_buffers();
    BUFFERS.with(|b| *b.borrow_mut() = (buffers, raw));
    result.map(|_| outcome)
}

/// A day: the margin kept below the longest retention, so a sample accepted is never in a
/// partition retention drops at its next pass (a level's partitions are at most a day long).
const RETENTION_MARGIN_MS: i64 = store::DAY_MS;

/// The oldest timestamp a write may carry: what the store keeps longest (its coarsest rollup
/// level's retention, 5 years by default) less a day, and never before 1990. An older sample
/// would be acknowledged and dropped by the next retention pass; it is refused instead (400
/// naming it, the rest of the body stored).
pub fn accepted_oldest_ms(options: &store::StoreOptions, now_ms: i64) -> i64 {
    let kept_ms = options
        .levels
        .iter()
        .map(|l| l.retention_ms)
        .chain([options.base_retention_ms, options.raw_numeric_retention_ms])
        .max()
        .unwrap_or(options.base_retention_ms);
    let oldest_ms = now_ms
        .saturating_sub(kept_ms)
        .saturating_add(RETENTION_MARGIN_MS);
    oldest_ms.max(Options::at(now_ms).ts_min_ms)
}

/// What of a remote write 2.0 body was stored: nothing when its parse stopped; when the store
/// refused some points at write time (a kind clash), the refused are taken from the samples
/// first (the store does not say which kind it refused).
fn stored_share(
    mut written: ingest::remote_write2::Written,
    inserted: &Inserted,
) -> ingest::remote_write2::Written {
    if inserted.stopped {
        return ingest::remote_write2::Written::default();
    }
    let handed = written.samples + written.histograms;
    let mut lost = handed.saturating_sub(inserted.accepted);
    let from_samples = lost.min(written.samples);
    written.samples -= from_samples;
    lost -= from_samples;
    written.histograms = written.histograms.saturating_sub(lost);
    written
}

/// One body through its protocol's parser into the insert sink; a remote write 2.0 body's
/// written counts into `written`, the metric metadata a remote write body describes into
/// `described`, the exemplars it carries into `exemplars`.
// The body's inputs and its three outputs: a struct for them would only rename the arguments.
#[allow(clippy::too_many_arguments)]
fn read(
    protocol: Protocol,
    body: &[u8],
    options: &Options,
    setup: &Setup<'_>,
    buffers: Buffers,
    raw: &mut Vec<u8>,
    written: &mut Option<ingest::remote_write2::Written>,
    described: &mut Vec<ingest::MetadataOwned>,
    exemplars: &mut Vec<ingest::ExemplarOwned>,
    otlp: &ingest::otlp::Translation,
) -> Inserted {
    let options = *options;
    match protocol {
        Protocol::Httptrap(Encoding::Json) => {
            let mut scratch = SCRATCH.take();
            let inserted = insert::insert(setup, buffers, |sink| {
                ingest::httptrap::parse_into_with(body, &options, sink, &mut scratch)
            });
            if scratch.capacity_bytes() <= RETAINED_SCRATCH_BYTES_MAX {
                SCRATCH.give(scratch);
            }
            inserted
        }
        Protocol::Httptrap(Encoding::Flat) => insert::insert(setup, buffers, |sink| {
            ingest::flat::parse_into(body, &options, sink)
        }),
        Protocol::Influx(precision) => insert::insert(setup, buffers, |sink| {
            ingest::influx::parse_into(body, &options, precision, sink)
        }),
        Protocol::RemoteWrite => {
            // Snappy into a kept buffer; a body that does not decompress is rejected whole.
            let decompressed = ingest::remote_write::decompress_into(body, raw);
            insert::insert(setup, buffers, |sink| {
                described.clear();
                exemplars.clear();
                let mut sink = Described {
                    inner: sink,
                    metadata: described,
                    exemplars,
                };
                match &decompressed {
                    Ok(()) => {
                        ingest::remote_write::parse_decompressed_into(raw, &options, &mut sink)
                    }
                    Err(reason) => ingest::remote_write::reject_body(&mut sink, reason.clone()),
                }
            })
        }
        Protocol::RemoteWrite2 => {
            let decompressed = ingest::remote_write::decompress_into(body, raw);
            insert::insert(setup, buffers, |sink| {
                described.clear();
                exemplars.clear();
                let mut sink = Described {
                    inner: sink,
                    metadata: described,
                    exemplars,
                };
                *written = Some(match &decompressed {
                    Ok(()) => {
                        ingest::remote_write2::parse_decompressed_into(raw, &options, &mut sink)
                    }
                    Err(reason) => {
                        ingest::remote_write::reject_body(&mut sink, reason.clone());
                        ingest::remote_write2::Written::default()
                    }
                });
            })
        }
        Protocol::Otlp { json } => insert::insert(setup, buffers, |sink| {
            described.clear();
            exemplars.clear();
            let mut sink = Described {
                inner: sink,
                metadata: described,
                exemplars,
            };
            if json {
                ingest::otlp::parse_json_with(body, &options, otlp, &mut sink)
            } else {
                ingest::otlp::parse_protobuf_with(body, &options, otlp, &mut sink)
            }
        }),
        Protocol::Graphite => insert::insert(setup, buffers, |sink| {
            ingest::graphite::parse_into(body, &options, sink)
        }),
        Protocol::Collectd => insert::insert(setup, buffers, |sink| {
            ingest::collectd::parse_into(body, &options, sink)
        }),
    }
}
