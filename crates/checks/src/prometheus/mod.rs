//! `prometheus`: scrapes an exporter — text 0.0.4, OpenMetrics 1.0 text or the protobuf format,
//! negotiated as Prometheus does — and returns its series: counters, gauges and summaries as
//! numerics named as Prometheus writes them with their labels as tags, classic histograms as
//! their bucket numerics plus one cumulative histogram in the exporter's buckets, and native
//! histograms (protobuf only) as cumulative histograms in the exporter's exponential buckets,
//! the same values remote write would carry. The store differences cumulative histograms.

pub mod proto;
pub mod text;

use std::collections::HashMap;

use hist::convert::{self, Cumulative, ExplicitHistogram, NativeCounts, NativeHistogram, Span};
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::Method;
use serde::Deserialize;

use crate::error::CheckError;
use crate::http::{self, Fetch};
use crate::measure::{Measurement, Out, Value};
use crate::spec::{self, CheckSpec};
use crate::tls;

/// Largest scrape body read; a larger one fails the scrape.
pub const BODY_BYTES_MAX: usize = 32 << 20;
/// Most series (samples) one scrape may hold; more fails the scrape, as `sample_limit` does.
pub const SERIES_MAX: usize = 100_000;

const PROTOBUF: &str =
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0";
const TEXT: &str = "text/plain;version=0.0.4";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// Formats to ask for, preferred first: "protobuf", "openmetrics", "text" (default all
    /// three in that order).
    formats: Option<Vec<String>>,
    headers: Option<std::collections::BTreeMap<String, String>>,
    tls_verify: Option<bool>,
    ca_file: Option<std::path::PathBuf>,
    cert_file: Option<std::path::PathBuf>,
    key_file: Option<std::path::PathBuf>,
    server_name: Option<String>,
}

pub(crate) struct Config {
    fetch: Fetch,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let o: Options = spec::options(spec)?;
    let uri = http::url(&spec.target, None)?;
    let tls = tls::Options {
        tls_verify: o.tls_verify,
        ca_file: o.ca_file,
        cert_file: o.cert_file,
        key_file: o.key_file,
        server_name: o.server_name,
    };
    tls.check()?;
    let mut headers = http::headers(o.headers.unwrap_or_default())?;
    headers.push((ACCEPT, accept(o.formats.as_deref())?));
    Ok(Config {
        fetch: Fetch {
            method: Method::GET,
            uri,
            headers,
            body: Default::default(),
            redirects_max: 0,
            body_max: BODY_BYTES_MAX,
            tls,
        },
    })
}

/// The Accept header: the chosen formats with falling quality, then anything, as Prometheus
/// asks so that an exporter without protobuf still answers.
fn accept(formats: Option<&[String]>) -> Result<HeaderValue, CheckError> {
    let default = [
        "protobuf".to_owned(),
        "openmetrics".to_owned(),
        "text".to_owned(),
    ];
    let formats = formats.unwrap_or(&default);
    if formats.is_empty() || formats.len() > 3 {
        return Err(CheckError::field("config.formats", "one to three formats"));
    }
    let mut parts = Vec::new();
    for (i, f) in formats.iter().enumerate() {
        let media = match f.as_str() {
            "protobuf" => PROTOBUF,
            "openmetrics" => OPENMETRICS,
            "text" => TEXT,
            _ => {
                return Err(CheckError::field(
                    "config.formats",
                    format!(
                        "unknown format \"{}\" (protobuf, openmetrics or text)",
                        spec::excerpt(f)
                    ),
                ))
            }
        };
        parts.push(format!("{media};q={}", 0.9 - 0.1 * i as f64));
    }
    parts.push("*/*;q=0.1".to_owned());
    HeaderValue::from_str(&parts.join(","))
        .map_err(|_| CheckError::field("config.formats", "unusable"))
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let Some(response) = http::fetch(&c.fetch, out).await? else {
        return Ok(());
    };
    out.numeric("code", f64::from(response.status));
    out.numeric("bytes", response.body.len() as f64);
    if !(200..300).contains(&response.status) {
        out.fail(format!("unexpected status {}", response.status));
        return Ok(());
    }
    let content_type = response
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let parsed = read_body(&response.body, content_type);
    match parsed {
        Ok((format, measurements)) => {
            out.text("format", format);
            let stats = Stats::of(&measurements);
            for m in measurements.list {
                out.push_owned(m);
            }
            out.numeric("scrape_series", stats.series as f64);
            out.numeric("nonfinite_samples", stats.nonfinite as f64);
            out.numeric("unconverted_histograms", stats.unconverted as f64);
            out.ok();
        }
        Err(reason) => out.fail(format!("scrape failed: {reason}")),
    }
    Ok(())
}

/// Picks the parser by the response's content type and maps what it read.
pub fn read_body(body: &[u8], content_type: &str) -> Result<(&'static str, Mapped), String> {
    let ct = content_type.to_ascii_lowercase();
    if ct.starts_with("application/vnd.google.protobuf") {
        if !ct.contains("io.prometheus.client.metricfamily") || !ct.contains("encoding=delimited") {
            return Err(format!(
                "unsupported protobuf content type \"{}\"",
                spec::excerpt(content_type)
            ));
        }
        let families = proto::parse(body, SERIES_MAX)?;
        return Ok(("protobuf", from_proto(&families)));
    }
    let format = match ct.starts_with("application/openmetrics-text") {
        true => text::Format::OpenMetrics,
        false => text::Format::Text,
    };
    let families = text::parse(body, format, SERIES_MAX).map_err(|e| e.to_string())?;
    let name = match format {
        text::Format::OpenMetrics => "openmetrics",
        text::Format::Text => "text",
    };
    Ok((name, from_text(families)))
}

/// A scrape's measurements and what could not be kept.
#[derive(Default)]
pub struct Mapped {
    pub list: Vec<Measurement>,
    /// NaN and infinite sample values (stale markers among them): a numeric stream holds
    /// finite values only.
    pub nonfinite: usize,
    /// Histograms whose buckets do not form one (counts going down, bad bounds).
    pub unconverted: usize,
}

impl Mapped {
    fn numeric(&mut self, name: &str, labels: &[(String, String)], value: f64) {
        if !value.is_finite() {
            self.nonfinite += 1;
            return;
        }
        self.push(name, labels.to_vec(), Value::Numeric(value));
    }

    fn push(&mut self, name: &str, tags: Vec<(String, String)>, value: Value) {
        self.list.push(Measurement {
            name: name.to_owned(),
            tags,
            value,
        });
    }
}

struct Stats {
    series: usize,
    nonfinite: usize,
    unconverted: usize,
}

impl Stats {
    fn of(m: &Mapped) -> Stats {
        Stats {
            series: m.list.len(),
            nonfinite: m.nonfinite,
            unconverted: m.unconverted,
        }
    }
}

/// Text families: every sample a numeric; classic histograms also as one histogram per label
/// set (cumulative; a gauge histogram as a snapshot).
pub fn from_text(families: Vec<text::Family>) -> Mapped {
    let mut m = Mapped::default();
    for f in families {
        for s in &f.samples {
            m.numeric(&s.name, &normalize_labels(f.kind, &s.labels), s.value);
        }
        let gauge = match f.kind {
            text::Kind::Histogram => false,
            text::Kind::GaugeHistogram => true,
            _ => continue,
        };
        for (labels, classic) in classic_groups(&f) {
            push_classic(&mut m, &f.name, labels, &classic, gauge);
        }
    }
    m
}

/// One label set's classic buckets (`le` taken out of the labels).
#[derive(Default)]
struct Classic {
    buckets: Vec<(f64, f64)>,
    count: Option<f64>,
    sum: Option<f64>,
}

fn classic_groups(f: &text::Family) -> Vec<(Vec<(String, String)>, Classic)> {
    let mut index: HashMap<Vec<(String, String)>, usize> = HashMap::new();
    let mut groups: Vec<(Vec<(String, String)>, Classic)> = Vec::new();
    for s in &f.samples {
        let suffix = &s.name[f.name.len()..];
        let mut le = None;
        let labels: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(k, v)| {
                let is_le = k == "le";
                if is_le {
                    le = Some(v.clone());
                }
                !is_le
            })
            .cloned()
            .collect();
        let at = *index.entry(labels.clone()).or_insert_with(|| {
            groups.push((labels, Classic::default()));
            groups.len() - 1
        });
        let group = &mut groups[at].1;
        match (suffix, le) {
            ("_bucket", Some(le)) => match le.parse::<f64>() {
                Ok(bound) => group.buckets.push((bound, s.value)),
                Err(_) => group.buckets.push((f64::NAN, s.value)),
            },
            ("_count" | "_gcount", _) => group.count = Some(s.value),
            ("_sum" | "_gsum", _) => group.sum = Some(s.value),
            _ => {}
        }
    }
    groups
}

fn push_classic(
    m: &mut Mapped,
    name: &str,
    labels: Vec<(String, String)>,
    c: &Classic,
    gauge: bool,
) {
    let value = match gauge {
        false => explicit(c)
            .and_then(|e| Cumulative::from_explicit(&e).ok())
            .map(Value::Cumulative),
        true => explicit(c)
            .and_then(|e| convert::from_explicit(&e).ok())
            .map(|h| Value::Histogram(h.histogram)),
    };
    match value {
        Some(v) => m.push(name, labels, v),
        None => m.unconverted += 1,
    }
}

/// Cumulative `le` buckets as explicit bounds with per-bucket counts; `None` when they are not
/// a histogram (a bad bound, a count going down, non-finite counts).
fn explicit(c: &Classic) -> Option<ExplicitHistogram> {
    let mut buckets = c.buckets.clone();
    if buckets
        .iter()
        .any(|(le, n)| le.is_nan() || !n.is_finite() || *n < 0.0)
    {
        return None;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let finite: Vec<(f64, u64)> = buckets
        .iter()
        .filter(|(le, _)| le.is_finite())
        .map(|&(le, n)| (le, n.round() as u64))
        .collect();
    let inf = buckets
        .iter()
        .find(|(le, _)| *le == f64::INFINITY)
        .map(|b| b.1);
    let total = c
        .count
        .or(inf)
        .filter(|n| n.is_finite() && *n >= 0.0)?
        .round() as u64;
    let mut counts = Vec::with_capacity(finite.len() + 1);
    let mut before = 0u64;
    for &(_, cumulative) in &finite {
        counts.push(cumulative.checked_sub(before)?);
        before = cumulative;
    }
    counts.push(total.checked_sub(before)?);
    Some(ExplicitHistogram {
        explicit_bounds: finite.iter().map(|b| b.0).collect(),
        bucket_counts: counts,
        count: total,
        sum: c.sum,
        min: None,
        max: None,
    })
}

/// Protobuf families: counters, gauges and untyped as numerics named after the family,
/// summaries as quantile, `_sum` and `_count` numerics, native histograms as cumulative
/// histograms (gauge histograms as snapshots), classic ones as in the text format.
pub fn from_proto(families: &[proto::MetricFamily]) -> Mapped {
    let mut m = Mapped::default();
    for f in families {
        let name = f.name.as_deref().unwrap_or("");
        let kind = f.r#type.unwrap_or(proto::UNTYPED);
        for metric in &f.metric {
            let labels: Vec<(String, String)> = metric
                .label
                .iter()
                .map(|l| {
                    (
                        l.name.clone().unwrap_or_default(),
                        l.value.clone().unwrap_or_default(),
                    )
                })
                .collect();
            proto_metric(&mut m, name, kind, metric, labels);
        }
    }
    m
}

fn proto_metric(
    m: &mut Mapped,
    name: &str,
    kind: i32,
    metric: &proto::Metric,
    labels: Vec<(String, String)>,
) {
    let single = |s: &Option<proto::Single>| s.as_ref().and_then(|s| s.value).unwrap_or(0.0);
    match kind {
        proto::COUNTER => m.numeric(name, &labels, single(&metric.counter)),
        proto::GAUGE => m.numeric(name, &labels, single(&metric.gauge)),
        proto::SUMMARY => {
            let Some(s) = &metric.summary else { return };
            for q in &s.quantile {
                let mut tags = labels.clone();
                tags.push((
                    "quantile".to_owned(),
                    float_label(q.quantile.unwrap_or(0.0)),
                ));
                m.numeric(name, &tags, q.value.unwrap_or(0.0));
            }
            m.numeric(&format!("{name}_sum"), &labels, s.sample_sum.unwrap_or(0.0));
            m.numeric(
                &format!("{name}_count"),
                &labels,
                s.sample_count.unwrap_or(0) as f64,
            );
        }
        proto::HISTOGRAM | proto::GAUGE_HISTOGRAM => {
            let Some(h) = &metric.histogram else { return };
            let gauge = kind == proto::GAUGE_HISTOGRAM;
            match h.is_native() {
                true => push_native(m, name, labels, h, gauge),
                false => push_proto_classic(m, name, labels, h, gauge),
            }
        }
        _ => m.numeric(name, &labels, single(&metric.untyped)),
    }
}

fn push_native(
    m: &mut Mapped,
    name: &str,
    labels: Vec<(String, String)>,
    h: &proto::Histogram,
    gauge: bool,
) {
    let native = native(h);
    let value = match gauge {
        false => Cumulative::from_native(&native).ok().map(Value::Cumulative),
        true => convert::from_native(&native)
            .ok()
            .map(|c| Value::Histogram(c.histogram)),
    };
    match value {
        Some(v) => m.push(name, labels, v),
        None => m.unconverted += 1,
    }
}

/// The protobuf native histogram in the form `hist::convert` takes (remote write's).
fn native(h: &proto::Histogram) -> NativeHistogram {
    let spans = |s: &[proto::BucketSpan]| {
        s.iter()
            .map(|s| Span {
                offset: s.offset.unwrap_or(0),
                length: s.length.unwrap_or(0),
            })
            .collect()
    };
    // Float histograms carry absolute counts; integer ones deltas.
    let float = h.sample_count_float.unwrap_or(0.0) > 0.0
        || !h.positive_count.is_empty()
        || !h.negative_count.is_empty();
    let counts = match float {
        true => NativeCounts::Float {
            count: h.sample_count_float.unwrap_or(0.0),
            zero_count: h.zero_count_float.unwrap_or(0.0),
            positive_counts: h.positive_count.clone(),
            negative_counts: h.negative_count.clone(),
        },
        false => NativeCounts::Integer {
            count: h.sample_count.unwrap_or(0),
            zero_count: h.zero_count.unwrap_or(0),
            positive_deltas: h.positive_delta.clone(),
            negative_deltas: h.negative_delta.clone(),
        },
    };
    NativeHistogram {
        schema: h.schema.unwrap_or(0),
        zero_threshold: h.zero_threshold.unwrap_or(0.0),
        positive_spans: spans(&h.positive_span),
        negative_spans: spans(&h.negative_span),
        counts,
        sum: h.sample_sum.unwrap_or(0.0),
        custom_values: Vec::new(),
    }
}

fn push_proto_classic(
    m: &mut Mapped,
    name: &str,
    labels: Vec<(String, String)>,
    h: &proto::Histogram,
    gauge: bool,
) {
    let count = |n: Option<u64>, f: Option<f64>| match f.filter(|f| *f > 0.0) {
        Some(f) => f,
        None => n.unwrap_or(0) as f64,
    };
    let bucket_name = format!("{name}_bucket");
    let mut classic = Classic::default();
    for b in &h.bucket {
        let le = b.upper_bound.unwrap_or(f64::NAN);
        let n = count(b.cumulative_count, b.cumulative_count_float);
        let mut tags = labels.clone();
        tags.push(("le".to_owned(), float_label(le)));
        m.numeric(&bucket_name, &tags, n);
        classic.buckets.push((le, n));
    }
    let total = count(h.sample_count, h.sample_count_float);
    let sum = h.sample_sum.unwrap_or(0.0);
    // The +Inf bucket is optional in protobuf; the text format always has it.
    if !h
        .bucket
        .iter()
        .any(|b| b.upper_bound == Some(f64::INFINITY))
    {
        let mut tags = labels.clone();
        tags.push(("le".to_owned(), "+Inf".to_owned()));
        m.numeric(&bucket_name, &tags, total);
    }
    m.numeric(&format!("{name}_sum"), &labels, sum);
    m.numeric(&format!("{name}_count"), &labels, total);
    classic.count = Some(total);
    classic.sum = Some(sum);
    push_classic(m, name, labels, &classic, gauge);
}

/// A float as Prometheus 3 writes `le` and `quantile` label values whatever the format, so a
/// series keeps one name when an exporter changes format: Go's shortest `%g`, with `.0` added
/// to integers (`1` → `1.0`, `1e6` → `1e+06`, `+Inf`).
pub fn float_label(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    // Rust's `{:e}` is the shortest round-trip form: the digits and exponent Go's `%g` uses.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
    let plain = format!("{v}");
    match plain.contains('.') {
        true => plain,
        false => format!("{plain}.0"),
    }
}

/// Text `le` (histograms) and `quantile` (summaries) labels in [`float_label`]'s form.
fn normalize_labels(kind: text::Kind, labels: &[(String, String)]) -> Vec<(String, String)> {
    let key = match kind {
        text::Kind::Histogram | text::Kind::GaugeHistogram => "le",
        text::Kind::Summary => "quantile",
        _ => return labels.to_vec(),
    };
    labels
        .iter()
        .map(|(k, v)| match (k == key, v.parse::<f64>()) {
            (true, Ok(f)) => (k.clone(), float_label(f)),
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_labels_as_prometheus_writes_them() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (2.5, "2.5"),
            (100_000.0, "100000.0"),
            (1e6, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (2.5e-7, "2.5e-07"),
            (f64::INFINITY, "+Inf"),
            (0.0, "0.0"),
            (-3.0, "-3.0"),
        ];
        for (v, text) in cases {
            assert_eq!(float_label(v), text, "{v}");
        }
    }
}
