//! OTLP/HTTP metrics (`POST /v1/metrics`): an `ExportMetricsServiceRequest` as protobuf
//! (`parse_protobuf`) or in the OTLP JSON encoding (`parse_json`). Decompressing gzip is the
//! server's job. Gauges and sums become numerics, explicit and exponential histograms become
//! llhist histograms through `hist::convert`. Mapping and choices: `FORMAT.md`.
//!
//! A body that does not decode is rejected whole (`rest_of_body`); a bad metric or data point
//! is rejected alone and counted — `Batch::rejected_total` is the response's
//! `partial_success.rejected_data_points`, the first rejection its `error_message`.

use hist::convert::{self, Cumulative, ExplicitHistogram, ExponentialBuckets};
use prost::Message;
use std::borrow::Cow;

use crate::batch::{check_name, check_tag, check_tag_count, Batch, Mode, Options, Reason, Sample};
use crate::batch::{TagList, Value, SAMPLES_PER_BATCH_MAX};
use crate::feed::Feed;
use crate::sink::Sink;
use crate::wire::{varint_elements, walk, walk_fields, Field};

/// Request body size (after any gzip): both decoders allocate in proportion to it.
pub const BODY_BYTES_MAX: usize = 64 << 20;

/// Resource, scope and metric messages together in one protobuf request, and attributes
/// (resource and data point) in it: counted on the wire before decoding, because an empty one
/// is 2 bytes there and a struct of 40–110 bytes once decoded. Data points are bounded by
/// `SAMPLES_PER_BATCH_MAX` the same way.
pub const METRIC_MESSAGES_PER_REQUEST_MAX: usize = 200_000;
pub const ATTRIBUTES_PER_REQUEST_MAX: usize = 2_000_000;
/// Exponential-histogram bucket counts in one protobuf request (packed varints: 1 byte on the
/// wire, 8 once decoded), counted on the wire so they decode to at most 64 MiB.
pub const BUCKETS_PER_REQUEST_MAX: usize = 8_000_000;
/// Nesting of array / key-value-list attribute values counted on the wire; deeper values
/// reject the body (prost's own limit is 100 levels of any message).
pub const ATTRIBUTE_VALUE_NESTING_MAX: usize = 32;
/// JSON objects in one OTLP JSON request, and values inside JSON arrays, counted in one pass
/// before serde decodes: `{}` (2 bytes) becomes a struct of up to a few hundred bytes and `0,`
/// (2 bytes) in `bucketCounts` an 8-byte integer, so 64 MiB of them could otherwise decode to
/// gigabytes. 2 M objects hold e.g. 500 k data points with one attribute each.
pub const JSON_OBJECTS_PER_REQUEST_MAX: usize = 2_000_000;
pub const JSON_ARRAY_VALUES_PER_REQUEST_MAX: usize = 8_000_000;

/// What a protobuf decode error names.
const WHAT: &str = "protobuf ExportMetricsServiceRequest";

/// `AggregationTemporality` values on the wire.
const TEMPORALITY_DELTA: i32 = 1;
const TEMPORALITY_CUMULATIVE: i32 = 2;

/// Nesting of array / key-value-list attribute values rendered into a tag value; deeper parts
/// are cut (a tag value is bounded anyway).
const ANY_VALUE_DEPTH_MAX: usize = 8;

/// Resource attributes that identify the target, as the OpenTelemetry–Prometheus
/// compatibility spec maps them: `service.name` (after `service.namespace` and a `/`) becomes
/// `job`, `service.instance.id` becomes `instance`.
const SERVICE_NAME: &str = "service.name";
const SERVICE_NAMESPACE: &str = "service.namespace";
const SERVICE_INSTANCE_ID: &str = "service.instance.id";
pub const JOB: &str = "job";
pub const INSTANCE: &str = "instance";
/// The series carrying a resource's other attributes (value 1), one per resource and request.
pub const TARGET_INFO: &str = "target_info";
/// Resource attributes promoted onto every series of their resource, at most.
pub const PROMOTE_MAX: usize = 64;

/// How OTLP names and resource attributes become Prometheus names and tags. By default only
/// the identifying attributes (`job`, `instance`) go on every series and the rest on
/// `target_info`; each attribute named in `promote` also goes on every series (the server's
/// `[otlp] promote_resource_attributes`). Metric and attribute names are translated as
/// `strategy` says (`[otlp] translation_strategy`, Prometheus's default when not set).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Translation {
    /// At most [`PROMOTE_MAX`] attribute keys (more are not looked at), as sent.
    pub promote: Vec<String>,
    pub strategy: Strategy,
}

impl Translation {
    /// Names and keys kept exactly as sent (`parse_protobuf`, `parse_json`).
    pub fn as_sent() -> Translation {
        Translation {
            promote: Vec::new(),
            strategy: Strategy::NoTranslation,
        }
    }
}

pub mod names;
pub mod proto;

pub use names::Strategy;

use proto::{metric, number_data_point, AnyValue, KeyValue};

/// Parses a protobuf `ExportMetricsServiceRequest`.
pub fn parse_protobuf(body: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_protobuf_into(body, options, &mut batch);
    batch
}

/// [`parse_protobuf`] into any sink, names as sent ([`Translation::as_sent`]).
pub fn parse_protobuf_into<S: Sink>(body: &[u8], options: &Options, sink: &mut S) {
    parse_protobuf_with(body, options, &Translation::as_sent(), sink)
}

/// [`parse_protobuf_into`] with resource attributes promoted as `translation` says.
pub fn parse_protobuf_with<S: Sink>(
    body: &[u8],
    options: &Options,
    translation: &Translation,
    sink: &mut S,
) {
    let decoded = check_size(body)
        .and_then(|()| check_counts(body))
        .and_then(|()| {
            proto::ExportMetricsServiceRequest::decode(body).map_err(|e| Reason::Decode {
                what: WHAT,
                detail: e.to_string(),
            })
        });
    feed_request(decoded, options, translation, sink)
}

/// Wire counts of one protobuf request (see `METRIC_MESSAGES_PER_REQUEST_MAX`).
#[derive(Default)]
struct Counts {
    messages: usize,
    attributes: usize,
    points: usize,
    buckets: usize,
}

/// Counts messages, attributes and data points on the wire, following the fields the structs
/// decode, and checks them against their bounds before prost allocates anything.
fn check_counts(body: &[u8]) -> Result<(), Reason> {
    let mut c = Counts::default();
    walk(body, WHAT, &mut |field, resource_metrics| {
        if field != 1 {
            return Ok(());
        }
        c.messages += 1;
        walk(resource_metrics, WHAT, &mut |field, part| match field {
            1 => count_attributes(part, 1, &mut c.attributes, 0),
            2 => {
                c.messages += 1;
                walk(part, WHAT, &mut |field, metric| {
                    if field == 2 {
                        c.messages += 1;
                        count_metric(metric, &mut c)?;
                    }
                    Ok(())
                })
            }
            _ => Ok(()),
        })
    })?;
    for (what, size, max) in [
        (
            "resource, scope and metric messages in the request",
            c.messages,
            METRIC_MESSAGES_PER_REQUEST_MAX,
        ),
        (
            "attributes in the request",
            c.attributes,
            ATTRIBUTES_PER_REQUEST_MAX,
        ),
        (
            "data points in the request",
            c.points,
            SAMPLES_PER_BATCH_MAX,
        ),
        (
            "exponential histogram bucket counts in the request",
            c.buckets,
            BUCKETS_PER_REQUEST_MAX,
        ),
    ] {
        if size > max {
            return Err(Reason::Bound { what, size, max });
        }
    }
    Ok(())
}

/// A metric's data points, their attributes (field 7, 9 or 1 by type), exemplars (field 5, 8
/// or 11, each a message with attributes in field 7) and exponential bucket counts. Summaries
/// are not decoded (their struct is empty), so they are not counted.
fn count_metric(metric: &[u8], c: &mut Counts) -> Result<(), Reason> {
    walk(metric, WHAT, &mut |field, data| {
        let (attributes_field, exemplars_field) = match field {
            5 | 7 => (7, 5),
            9 => (9, 8),
            10 => (1, 11),
            _ => return Ok(()),
        };
        let exponential = field == 10;
        walk(data, WHAT, &mut |field, point| {
            if field == 1 {
                c.points += 1;
                count_attributes(point, attributes_field, &mut c.attributes, 0)?;
                if exponential {
                    count_exponential_buckets(point, &mut c.buckets)?;
                }
                walk(point, WHAT, &mut |field, exemplar| {
                    if field == exemplars_field {
                        c.messages += 1;
                        count_attributes(exemplar, 7, &mut c.attributes, 0)?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        })
    })
}

/// Adds the `KeyValue`s in field `field` of `message` to `count`, and every value nested in
/// them (array elements, key-value-list entries): each is a struct once decoded and 2 bytes on
/// the wire when empty.
fn count_attributes(
    message: &[u8],
    field: u64,
    count: &mut usize,
    depth: usize,
) -> Result<(), Reason> {
    walk(message, WHAT, &mut |f, key_value| {
        if f != field {
            return Ok(());
        }
        *count += 1;
        // KeyValue.value (2) is an AnyValue.
        walk(key_value, WHAT, &mut |f, any_value| match f {
            2 => count_any_value(any_value, count, depth + 1),
            _ => Ok(()),
        })
    })
}

/// Values nested in one `AnyValue` at nesting `depth` (1 for an attribute's own value):
/// `array_value` (5, an `ArrayValue` of `AnyValue`s in field 1) and `kvlist_value` (6, a
/// `KeyValueList` of `KeyValue`s in field 1).
fn count_any_value(any_value: &[u8], count: &mut usize, depth: usize) -> Result<(), Reason> {
    if depth > ATTRIBUTE_VALUE_NESTING_MAX {
        return Err(Reason::Bound {
            what: "nesting of attribute values",
            size: depth,
            max: ATTRIBUTE_VALUE_NESTING_MAX,
        });
    }
    walk(any_value, WHAT, &mut |f, nested| match f {
        5 => walk(nested, WHAT, &mut |f, element| {
            if f == 1 {
                *count += 1;
                count_any_value(element, count, depth + 1)?;
            }
            Ok(())
        }),
        6 => count_attributes(nested, 1, count, depth),
        _ => Ok(()),
    })
}

/// An exponential data point's bucket counts: `positive` (8) and `negative` (9) are `Buckets`
/// whose `bucket_counts` (2) are varints, usually packed.
fn count_exponential_buckets(point: &[u8], count: &mut usize) -> Result<(), Reason> {
    walk(point, WHAT, &mut |f, buckets| {
        if f == 8 || f == 9 {
            walk_fields(buckets, WHAT, &mut |f, field: Field<'_>| {
                if f == 2 {
                    *count += varint_elements(field);
                }
                Ok(())
            })?;
        }
        Ok(())
    })
}

/// Parses an `ExportMetricsServiceRequest` in the OTLP JSON encoding (camelCase names, 64-bit
/// integers as strings or numbers, enums as integers).
pub fn parse_json(body: &[u8], options: &Options) -> Batch {
    let mut batch = Batch::default();
    parse_json_into(body, options, &mut batch);
    batch
}

/// [`parse_json`] into any sink, names as sent ([`Translation::as_sent`]).
pub fn parse_json_into<S: Sink>(body: &[u8], options: &Options, sink: &mut S) {
    parse_json_with(body, options, &Translation::as_sent(), sink)
}

/// [`parse_json_into`] with resource attributes promoted as `translation` says.
pub fn parse_json_with<S: Sink>(
    body: &[u8],
    options: &Options,
    translation: &Translation,
    sink: &mut S,
) {
    let decoded = check_size(body)
        .and_then(|()| check_json_counts(body))
        .and_then(|()| {
            serde_json::from_slice::<proto::ExportMetricsServiceRequest>(body).map_err(|e| {
                Reason::Decode {
                    what: "OTLP JSON ExportMetricsServiceRequest",
                    detail: e.to_string(),
                }
            })
        });
    feed_request(decoded, options, translation, sink)
}

/// Counts JSON objects and the values inside arrays in one pass over the bytes (strings
/// skipped), and checks them against `JSON_OBJECTS_PER_REQUEST_MAX` and
/// `JSON_ARRAY_VALUES_PER_REQUEST_MAX` before serde allocates a struct or an integer for each.
/// Malformed JSON is left to serde, which names the place.
fn check_json_counts(body: &[u8]) -> Result<(), Reason> {
    /// Arrays nested deeper than this are not tracked (serde refuses past 128 levels anyway);
    /// a bit per level says whether it is an array.
    const LEVELS_TRACKED_MAX: u32 = 128;
    let (mut objects, mut values) = (0usize, 0usize);
    let mut in_array = [0u64; LEVELS_TRACKED_MAX as usize / 64];
    let mut depth = 0u32;
    // True right after `[`: the next value is the array's first.
    let mut array_start = false;
    let mut bytes = body.iter();
    while let Some(&c) = bytes.next() {
        if c.is_ascii_whitespace() {
            continue;
        }
        // The innermost open container is at level `depth - 1`.
        let level = depth.wrapping_sub(1);
        let in_array_now = depth > 0
            && level < LEVELS_TRACKED_MAX
            && (in_array[(level / 64) as usize] >> (level % 64)) & 1 == 1;
        if array_start && c != b']' {
            values += 1;
        }
        array_start = false;
        match c {
            b'"' => {
                // Skip the string, escapes included.
                while let Some(&c) = bytes.next() {
                    match c {
                        b'\\' => {
                            bytes.next();
                        }
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            b'{' | b'[' => {
                objects += usize::from(c == b'{');
                if depth < LEVELS_TRACKED_MAX {
                    let (word, bit) = ((depth / 64) as usize, depth % 64);
                    in_array[word] &= !(1 << bit);
                    in_array[word] |= u64::from(c == b'[') << bit;
                }
                depth += 1;
                array_start = c == b'[';
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if in_array_now => values += 1,
            _ => {}
        }
    }
    for (what, size, max) in [
        (
            "JSON objects in the request",
            objects,
            JSON_OBJECTS_PER_REQUEST_MAX,
        ),
        (
            "values in JSON arrays in the request",
            values,
            JSON_ARRAY_VALUES_PER_REQUEST_MAX,
        ),
    ] {
        if size > max {
            return Err(Reason::Bound { what, size, max });
        }
    }
    Ok(())
}

fn check_size(body: &[u8]) -> Result<(), Reason> {
    if body.len() > BODY_BYTES_MAX {
        return Err(Reason::Bound {
            what: "body size in bytes",
            size: body.len(),
            max: BODY_BYTES_MAX,
        });
    }
    Ok(())
}

fn feed_request<S: Sink>(
    decoded: Result<proto::ExportMetricsServiceRequest, Reason>,
    o: &Options,
    translation: &Translation,
    sink: &mut S,
) {
    let mut feed = Feed::new(sink);
    match decoded {
        Ok(request) => add_request(&mut feed, &request, o, translation),
        Err(reason) => feed.reject_whole(|| "body".to_owned(), reason),
    }
}

/// Where a data point is: resource, scope and metric indexes and the metric's name.
struct Place<'a> {
    resource: usize,
    scope: usize,
    metric: usize,
    name: &'a str,
}

impl Place<'_> {
    fn metric(&self) -> String {
        format!(
            "resource {}, scope {}, metric {} (`{}`)",
            self.resource, self.scope, self.metric, self.name
        )
    }

    fn point(&self, point: usize) -> String {
        format!("{}, point {point}", self.metric())
    }
}

fn add_request<S: Sink>(
    feed: &mut Feed<'_, S>,
    request: &proto::ExportMetricsServiceRequest,
    o: &Options,
    translation: &Translation,
) {
    for (r, resource_metrics) in request.resource_metrics.iter().enumerate() {
        let attributes = resource_metrics
            .resource
            .as_ref()
            .map_or(&[][..], |res| &res.attributes);
        let target = match Target::of(attributes, translation) {
            Ok(target) => target,
            Err(reason) => {
                feed.reject(|| format!("resource {r}"), reason);
                continue;
            }
        };
        // The newest point time of the resource: when its `target_info` is stamped.
        let mut newest_ns: Option<u64> = None;
        for (s, scope) in resource_metrics.scope_metrics.iter().enumerate() {
            for (m, metric) in scope.metrics.iter().enumerate() {
                let place = Place {
                    resource: r,
                    scope: s,
                    metric: m,
                    name: &metric.name,
                };
                let context = MetricContext {
                    resource: &target.tags,
                    place: &place,
                    strategy: translation.strategy,
                };
                if !add_metric(feed, &context, metric, o, &mut newest_ns) {
                    return;
                }
            }
        }
        if !add_target_info(feed, &target, newest_ns, r, o) {
            return;
        }
    }
}

/// A resource's attributes as tags: `tags` go on every series of the resource (`job`,
/// `instance`, promoted attributes), `info` on its `target_info` series.
struct Target {
    tags: TagList,
    info: TagList,
}

impl Target {
    fn of(attributes: &[KeyValue], translation: &Translation) -> Result<Target, Reason> {
        let text = |key: &str| {
            attributes
                .iter()
                .rev()
                .find(|kv| kv.key == key)
                .map(|kv| any_text(kv.value.as_ref()))
                .filter(|v| !v.is_empty())
        };
        let mut identity = TagList::new();
        if let Some(name) = text(SERVICE_NAME) {
            let job = match text(SERVICE_NAMESPACE) {
                Some(namespace) => format!("{namespace}/{name}"),
                None => name,
            };
            identity.push((JOB.to_owned(), job));
        }
        if let Some(instance) = text(SERVICE_INSTANCE_ID) {
            identity.push((INSTANCE.to_owned(), instance));
        }
        let promote = &translation.promote[..translation.promote.len().min(PROMOTE_MAX)];
        let mut tags = identity.clone();
        let mut info = identity;
        for kv in attributes {
            let identifying =
                [SERVICE_NAME, SERVICE_NAMESPACE, SERVICE_INSTANCE_ID].contains(&kv.key.as_str());
            let value = any_text(kv.value.as_ref());
            let key = names::label_name(&kv.key, translation.strategy);
            check_tag(&key, &value)?;
            if promote.contains(&kv.key) {
                put(&mut tags, &key, value.clone())?;
            }
            if !identifying {
                put(&mut info, &key, value)?;
            }
        }
        Ok(Target { tags, info })
    }
}

/// Sets `key` in `tags` (a later attribute with the same key replaces an earlier one).
fn put(tags: &mut TagList, key: &str, value: String) -> Result<(), Reason> {
    match tags.iter_mut().find(|(k, _)| k == key) {
        Some(existing) => existing.1 = value,
        None => {
            tags.push((key.to_owned(), value));
            check_tag_count(tags.len())?;
        }
    }
    Ok(())
}

/// The resource's `target_info` (value 1, at its newest point): only when the resource has
/// attributes beyond its identity and sent a point. `false` once the batch is full.
fn add_target_info<S: Sink>(
    feed: &mut Feed<'_, S>,
    target: &Target,
    newest_ns: Option<u64>,
    resource: usize,
    o: &Options,
) -> bool {
    let identity = target
        .info
        .iter()
        .filter(|(k, _)| k == JOB || k == INSTANCE)
        .count();
    let Some(newest_ns) = newest_ns.filter(|_| target.info.len() > identity) else {
        return true;
    };
    let location = || format!("resource {resource}, {TARGET_INFO}");
    // What Prometheus's OTLP receiver says of it.
    feed.metadata(&crate::sink::Metadata {
        family: TARGET_INFO,
        kind: crate::MetricType::Gauge,
        help: "Target metadata",
        unit: "",
    });
    match ts_ms(newest_ns, o) {
        Ok(ts_ms) => {
            let sample = Sample {
                name: TARGET_INFO.to_owned(),
                tags: target.info.clone().into(),
                ts_ms,
                value: Value::Numeric(1.0),
                mode: Mode::Set,
            };
            feed.push(sample, location)
        }
        Err(reason) => {
            feed.reject(location, reason);
            true
        }
    }
}

/// What every point of one metric shares: its resource's tags, its place, the name strategy.
struct MetricContext<'a> {
    resource: &'a [(String, String)],
    place: &'a Place<'a>,
    strategy: Strategy,
}

/// One metric's data points, in order; `false` once the batch is full.
fn add_metric<S: Sink>(
    feed: &mut Feed<'_, S>,
    context: &MetricContext<'_>,
    metric: &proto::Metric,
    o: &Options,
    newest_ns: &mut Option<u64>,
) -> bool {
    let MetricContext {
        resource,
        place,
        strategy,
    } = *context;
    let points = match points(metric) {
        Ok(points) => points,
        Err(reason) => {
            feed.reject(|| place.metric(), reason);
            return true;
        }
    };
    let name = names::metric_name(&metric.name, &metric.unit, name_kind(metric), strategy);
    if let Err(reason) = check_name(&name) {
        // Every point of an unnamed metric is rejected: each one counts as rejected_data_points.
        for i in 0..points.len().max(1) {
            feed.reject(|| place.point(i), reason.clone());
        }
        return true;
    }
    feed.metadata(&crate::sink::Metadata {
        family: &name,
        kind: metric_type(metric),
        help: &metric.description,
        unit: &metric.unit,
    });
    // The points of one metric mostly repeat one attribute set (one series, several times):
    // building its tags once and sharing the `Arc` took the numeric bench from 0.59 to 0.90 M
    // points/s (where the rest goes is not profiled yet).
    let mut last: Option<(&[KeyValue], crate::Tags)> = None;
    for (i, point) in points.into_iter().enumerate() {
        let mut exemplars: &[proto::Exemplar] = &[];
        let sample = point.and_then(|(attributes, time_unix_nano, value, mode, kept)| {
            exemplars = kept;
            let tags = match &last {
                Some((seen, tags)) if *seen == attributes => tags.clone(),
                _ => {
                    let tags = tags(resource, attributes, strategy)?;
                    last = Some((attributes, tags.clone()));
                    tags
                }
            };
            let ts_ms = ts_ms(time_unix_nano, o)?;
            *newest_ns = (*newest_ns).max(Some(time_unix_nano));
            Ok(Sample {
                name: name.clone().into_owned(),
                tags,
                ts_ms,
                value,
                mode,
            })
        });
        match sample {
            Ok(s) => {
                let series = (!exemplars.is_empty()).then(|| (s.name.clone(), s.tags.clone()));
                if !feed.push(s, || place.point(i)) {
                    return false;
                }
                if let Some((name, tags)) = series {
                    add_exemplars(feed, &name, &tags, exemplars, strategy);
                }
            }
            Err(reason) => feed.reject(|| place.point(i), reason),
        }
    }
    true
}

/// A point's exemplars, on the point's own series, with Prometheus's labels: `trace_id` and
/// `span_id` in hex, then the filtered attributes. One over 128 characters is dropped.
fn add_exemplars<S: Sink>(
    feed: &mut Feed<'_, S>,
    name: &str,
    tags: &crate::Tags,
    exemplars: &[proto::Exemplar],
    strategy: Strategy,
) {
    let mut series: Vec<(&str, &str)> = vec![("__name__", name)];
    series.extend(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    for e in exemplars {
        let Some(value) = e.value.map(|v| match v {
            proto::exemplar::Value::AsDouble(v) => v,
            proto::exemplar::Value::AsInt(v) => v as f64,
        }) else {
            continue;
        };
        let mut owned: Vec<(String, String)> = Vec::new();
        if !e.trace_id.is_empty() {
            owned.push(("trace_id".to_owned(), hex(&e.trace_id)));
        }
        if !e.span_id.is_empty() {
            owned.push(("span_id".to_owned(), hex(&e.span_id)));
        }
        for kv in &e.filtered_attributes {
            let key = names::label_name(&kv.key, strategy).into_owned();
            owned.push((key, any_text(kv.value.as_ref())));
        }
        let labels: Vec<(&str, &str)> = owned
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if crate::sink::Exemplar::labels_fit(&labels) {
            let ts_ms = i64::try_from(e.time_unix_nano / 1_000_000).unwrap_or(i64::MAX);
            feed.exemplar(&crate::sink::Exemplar {
                series: &series,
                labels: &labels,
                value,
                ts_ms,
            });
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// One data point read from any metric type: its attributes, time, value, mode and exemplars.
type Point<'a> = Result<(&'a [KeyValue], u64, Value, Mode, &'a [proto::Exemplar]), Reason>;

/// The metric's data points as values; `Err` for a metric with no data or an unsupported type.
fn points(metric: &proto::Metric) -> Result<Vec<Point<'_>>, Reason> {
    match &metric.data {
        Some(metric::Data::Gauge(g)) => Ok(g
            .data_points
            .iter()
            .map(|p| {
                number(p).map(|v| {
                    (
                        &p.attributes[..],
                        p.time_unix_nano,
                        v,
                        Mode::Set,
                        &p.exemplars[..],
                    )
                })
            })
            .collect()),
        Some(metric::Data::Sum(s)) => {
            // Delta sums add up within a period; cumulative ones are running totals whose
            // rates are derived at query time (`rate`), so the latest value is kept.
            let mode = match s.aggregation_temporality {
                TEMPORALITY_DELTA => Mode::Accumulate,
                TEMPORALITY_CUMULATIVE => Mode::Set,
                other => return Err(bad_temporality(other)),
            };
            Ok(s.data_points
                .iter()
                .map(|p| {
                    number(p).map(|v| {
                        (
                            &p.attributes[..],
                            p.time_unix_nano,
                            v,
                            mode,
                            &p.exemplars[..],
                        )
                    })
                })
                .collect())
        }
        Some(metric::Data::Histogram(h)) => {
            let cumulative = cumulative(h.aggregation_temporality)?;
            Ok(h.data_points
                .iter()
                .map(|p| {
                    let v = explicit(p, cumulative)?;
                    Ok((
                        &p.attributes[..],
                        p.time_unix_nano,
                        v,
                        Mode::Set,
                        &p.exemplars[..],
                    ))
                })
                .collect())
        }
        Some(metric::Data::ExponentialHistogram(h)) => {
            let cumulative = cumulative(h.aggregation_temporality)?;
            Ok(h.data_points
                .iter()
                .map(|p| {
                    let v = exponential(p, cumulative)?;
                    Ok((
                        &p.attributes[..],
                        p.time_unix_nano,
                        v,
                        Mode::Set,
                        &p.exemplars[..],
                    ))
                })
                .collect())
        }
        Some(metric::Data::Summary(_)) => Err(Reason::Unsupported {
            what: "OTLP summaries (precomputed quantiles cannot be merged)",
        }),
        None => Err(Reason::bad_value(
            "gauge, sum, histogram or exponential histogram",
            "",
        )),
    }
}

/// Prometheus's type for an OTLP metric, as its OTLP receiver gives it: a monotonic sum is a
/// counter, any other sum or gauge a gauge, either histogram a histogram.
fn metric_type(metric: &proto::Metric) -> crate::MetricType {
    match &metric.data {
        Some(metric::Data::Gauge(_)) => crate::MetricType::Gauge,
        Some(metric::Data::Sum(s)) if s.is_monotonic => crate::MetricType::Counter,
        Some(metric::Data::Sum(_)) => crate::MetricType::Gauge,
        Some(metric::Data::Histogram(_) | metric::Data::ExponentialHistogram(_)) => {
            crate::MetricType::Histogram
        }
        Some(metric::Data::Summary(_)) => crate::MetricType::Summary,
        None => crate::MetricType::Unknown,
    }
}

fn bad_temporality(found: i32) -> Reason {
    Reason::bad_value(
        "aggregation temporality 1 (delta) or 2 (cumulative)",
        &found.to_string(),
    )
}

/// Cumulative histograms are running totals (the store keeps per-period differences), delta
/// ones the samples of their interval.
fn cumulative(temporality: i32) -> Result<bool, Reason> {
    match temporality {
        TEMPORALITY_DELTA => Ok(false),
        TEMPORALITY_CUMULATIVE => Ok(true),
        other => Err(bad_temporality(other)),
    }
}

fn number(p: &proto::NumberDataPoint) -> Result<Value, Reason> {
    let v = match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        Some(number_data_point::Value::AsInt(v)) => v as f64,
        None => return Err(Reason::bad_value("asDouble or asInt", "")),
    };
    if !v.is_finite() {
        return Err(Reason::bad_value("a finite number", &v.to_string()));
    }
    Ok(Value::Numeric(v))
}

/// A cumulative point stays in its own buckets until the store has differenced it; a delta
/// point is converted now.
fn explicit(p: &proto::HistogramDataPoint, cumulative: bool) -> Result<Value, Reason> {
    let h = ExplicitHistogram {
        explicit_bounds: p.explicit_bounds.clone(),
        bucket_counts: p.bucket_counts.clone(),
        count: p.count,
        sum: p.sum,
        min: p.min,
        max: p.max,
    };
    let value = if cumulative {
        Cumulative::from_explicit(&h).map(Value::Cumulative)
    } else {
        convert::from_explicit(&h).map(|c| Value::Histogram(c.histogram))
    };
    value.map_err(Reason::Histogram)
}

fn exponential(
    p: &proto::ExponentialHistogramDataPoint,
    cumulative: bool,
) -> Result<Value, Reason> {
    let buckets = |b: &Option<proto::Buckets>| {
        b.as_ref()
            .map_or_else(ExponentialBuckets::default, |b| ExponentialBuckets {
                offset: b.offset,
                bucket_counts: b.bucket_counts.clone(),
            })
    };
    let h = convert::ExponentialHistogram {
        scale: p.scale,
        count: p.count,
        sum: p.sum,
        zero_count: p.zero_count,
        zero_threshold: p.zero_threshold,
        positive: buckets(&p.positive),
        negative: buckets(&p.negative),
        min: p.min,
        max: p.max,
    };
    let value = if cumulative {
        Cumulative::from_exponential(&h).map(Value::Cumulative)
    } else {
        convert::from_exponential(&h).map(|c| Value::Histogram(c.histogram))
    };
    value.map_err(Reason::Histogram)
}

/// `time_unix_nano` in ms (rounded down); 0 (unset) means at receipt.
fn ts_ms(time_unix_nano: u64, o: &Options) -> Result<Option<i64>, Reason> {
    if time_unix_nano == 0 {
        return Ok(None);
    }
    let ms = i64::try_from(time_unix_nano / 1_000_000).unwrap_or(i64::MAX);
    o.check_ts(ms).map(Some)
}

/// A label name and the (original key, value) pairs of the attributes that translate to it.
type LabelGroup<'a> = (Cow<'a, str>, Vec<(&'a str, String)>);

/// The resource's tags (`Target::tags`), then the point's attributes; a point attribute with
/// a resource tag's key replaces it (the more specific wins, and no stream carries one key
/// twice). Point attributes whose keys translate to one label name are joined with `;` in the
/// order of their original keys, as Prometheus's OTLP receiver does.
fn tags(
    resource: &[(String, String)],
    point: &[KeyValue],
    strategy: Strategy,
) -> Result<crate::Tags, Reason> {
    let mut tags = TagList::with_capacity(resource.len() + point.len());
    tags.extend(resource.iter().cloned());
    // Label name → (original key, value) of the point attributes that translate to it, in the
    // order the labels first appear.
    let mut groups: Vec<LabelGroup<'_>> = Vec::with_capacity(point.len());
    for kv in point {
        let key = names::label_name(&kv.key, strategy);
        let value = any_text(kv.value.as_ref());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, parts)) => parts.push((kv.key.as_str(), value)),
            None => groups.push((key, vec![(kv.key.as_str(), value)])),
        }
    }
    for (key, mut parts) in groups {
        parts.sort_by(|a, b| a.0.cmp(b.0));
        let values: Vec<String> = parts.into_iter().map(|(_, v)| v).collect();
        let value = values.join(";");
        check_tag(&key, &value)?;
        put(&mut tags, &key, value)?;
    }
    Ok(tags.into())
}

/// What the name rules need to know of a metric's type.
fn name_kind(metric: &proto::Metric) -> names::Kind {
    match &metric.data {
        Some(metric::Data::Sum(s)) if s.is_monotonic => names::Kind::MonotonicCounter,
        Some(metric::Data::Sum(_)) => names::Kind::NonMonotonicCounter,
        Some(metric::Data::Histogram(_)) => names::Kind::Histogram,
        Some(metric::Data::ExponentialHistogram(_)) => names::Kind::ExponentialHistogram,
        Some(metric::Data::Summary(_)) => names::Kind::Summary,
        Some(metric::Data::Gauge(_)) | None => names::Kind::Gauge,
    }
}

/// An attribute value as tag text: strings as they are, numbers and booleans as JSON writes
/// them, bytes as base64 (as the OTLP JSON encoding carries them), arrays and key-value lists
/// as compact JSON-like text.
fn any_text(value: Option<&AnyValue>) -> String {
    let mut out = String::new();
    write_any(&mut out, value, 0);
    out
}

fn write_any(out: &mut String, value: Option<&AnyValue>, depth: usize) {
    use proto::any_value::Value as V;
    let Some(value) = value.and_then(|v| v.value.as_ref()) else {
        return;
    };
    if depth > ANY_VALUE_DEPTH_MAX {
        out.push('…');
        return;
    }
    match value {
        V::StringValue(s) => out.push_str(s),
        V::BoolValue(b) => out.push_str(if *b { "true" } else { "false" }),
        V::IntValue(i) => out.push_str(&i.to_string()),
        V::DoubleValue(d) => out.push_str(&d.to_string()),
        V::BytesValue(b) => out.push_str(&base64_simd::STANDARD.encode_to_string(b)),
        V::ArrayValue(a) => {
            out.push('[');
            for (i, v) in a.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_any(out, Some(v), depth + 1);
            }
            out.push(']');
        }
        V::KvlistValue(l) => {
            out.push('{');
            for (i, kv) in l.values.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&kv.key);
                out.push(':');
                write_any(out, kv.value.as_ref(), depth + 1);
            }
            out.push('}');
        }
    }
}
