//! What pull mode serves: `/` as NAD's JSON from the latest period's samples (the httptrap
//! form: `name|ST[tag:value]` keys, histograms as `H[edge]=count` strings, the period's own
//! samples), and `/metrics` in Prometheus exposition, where histograms are running totals since
//! the agent started: text 0.0.4 with classic buckets at llhist bin edges, or — when the
//! scraper's Accept asks for it — the protobuf format with native histograms (schema 3, each
//! llhist bin counted in the exponential bucket holding its midpoint) beside those buckets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use broker::record::{Sample, Value};
use checks::prometheus::proto;
use serde_json::{json, Map};

/// The httptrap key of a sample; `None` when its name or tags cannot make one (counted by the
/// caller as left out).
fn stream_key(s: &Sample) -> Option<String> {
    let mut out = String::new();
    let tags = s.tags.iter().map(|(c, v)| (c.as_str(), v.as_str()));
    key::write_key_with_tags(&s.name, tags, &mut out).ok()?;
    Some(out)
}

/// `/`: one JSON object, a key per stream.
pub fn nad_json(samples: &[Sample]) -> String {
    let mut doc = Map::new();
    for s in samples {
        let Some(k) = stream_key(s) else { continue };
        let value = match &s.value {
            Value::Null => json!({"_type": "n", "_value": null}),
            Value::Numeric(v) => json!({"_type": "n", "_value": v}),
            Value::Text(t) => json!({"_type": "s", "_value": t}),
            Value::Histogram(h) => json!({"_type": "h", "_value": h.to_text()}),
            Value::Cumulative(c) => json!({"_type": "H", "_value": c.to_histogram().to_text()}),
        };
        doc.insert(k, value);
    }
    serde_json::Value::Object(doc).to_string()
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_name(c: &str) -> String {
    let mut out: String = c
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '_' {
                ch
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with(|ch: char| ch.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

fn labels(tags: &[(String, String)], extra: Option<(&str, &str)>) -> String {
    let mut parts: Vec<String> = tags
        .iter()
        .map(|(c, v)| format!("{}=\"{}\"", label_name(c), escape(v)))
        .collect();
    if let Some((c, v)) = extra {
        parts.push(format!("{c}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn prom_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{v}")
    }
}

/// `/metrics`: Prometheus text exposition 0.0.4, one family per name.
pub fn prometheus_text(samples: &[Sample]) -> String {
    let mut families: BTreeMap<String, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        families.entry(label_name(&s.name)).or_default().push(s);
    }
    let mut out = String::new();
    for (name, members) in families {
        let histogram = members
            .iter()
            .any(|s| matches!(s.value, Value::Histogram(_)));
        let kind = if histogram {
            "histogram"
        } else if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in members {
            match &s.value {
                Value::Numeric(v) if !histogram => {
                    let _ = writeln!(out, "{name}{} {}", labels(&s.tags, None), prom_float(*v));
                }
                Value::Histogram(h) => write_histogram(&mut out, &name, &s.tags, h),
                // Text, nulls and running totals have no place in a family of this type.
                _ => {}
            }
        }
    }
    out
}

fn write_histogram(out: &mut String, name: &str, tags: &[(String, String)], h: &hist::Histogram) {
    let mut edges: Vec<(f64, u64)> = h
        .bins()
        .filter(|(b, _)| !b.is_nan())
        .map(|(b, c)| (if b.is_zero() { 0.0 } else { b.upper() }, c))
        .collect();
    edges.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut cumulative = 0;
    for (le, c) in edges {
        cumulative += c;
        let le = prom_float(le);
        let _ = writeln!(
            out,
            "{name}_bucket{} {cumulative}",
            labels(tags, Some(("le", &le)))
        );
    }
    let count = h.sample_count();
    let _ = writeln!(
        out,
        "{name}_bucket{} {count}",
        labels(tags, Some(("le", "+Inf")))
    );
    let _ = writeln!(
        out,
        "{name}_sum{} {}",
        labels(tags, None),
        prom_float(h.sum())
    );
    let _ = writeln!(out, "{name}_count{} {count}", labels(tags, None));
}

/// The protobuf exposition's content type.
pub const PROTOBUF: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";
/// Native histogram schema: buckets grow by 2^(1/8), about 9 %, near llhist's 10 % bins.
pub const NATIVE_SCHEMA: i32 = 3;

/// The exponential bucket (at `NATIVE_SCHEMA`) holding `v > 0`: bucket i is (b^(i-1), b^i].
fn native_index(v: f64) -> i32 {
    (v.log2() * f64::from(1 << NATIVE_SCHEMA)).ceil() as i32
}

/// Spans and deltas of counts by bucket index, as the protobuf carries them.
fn spans(counts: &BTreeMap<i32, u64>) -> (Vec<proto::BucketSpan>, Vec<i64>) {
    let mut spans: Vec<proto::BucketSpan> = Vec::new();
    let mut deltas = Vec::with_capacity(counts.len());
    let (mut prev_index, mut prev_count): (Option<i32>, i64) = (None, 0);
    for (&i, &c) in counts {
        match prev_index {
            Some(p) if i == p + 1 => {
                if let Some(last) = spans.last_mut() {
                    last.length = Some(last.length.unwrap_or(0) + 1);
                }
            }
            _ => spans.push(proto::BucketSpan {
                offset: Some(prev_index.map_or(i, |p| i - p - 1)),
                length: Some(1),
            }),
        }
        let c = i64::try_from(c).unwrap_or(i64::MAX);
        deltas.push(c - prev_count);
        prev_count = c;
        prev_index = Some(i);
    }
    (spans, deltas)
}

fn native(h: &hist::Histogram) -> proto::Histogram {
    let (mut positive, mut negative) = (BTreeMap::new(), BTreeMap::new());
    let mut zero = 0;
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for (b, c) in h.bins() {
        if b.is_nan() {
            continue;
        }
        if b.is_zero() {
            zero += c;
            buckets.push((0.0, c));
            continue;
        }
        let mid = b.midpoint();
        let side = if mid > 0.0 {
            &mut positive
        } else {
            &mut negative
        };
        *side.entry(native_index(mid.abs())).or_insert(0) += c;
        buckets.push((b.upper(), c));
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut cumulative = 0;
    let bucket = buckets
        .into_iter()
        .map(|(le, c)| {
            cumulative += c;
            proto::Bucket {
                cumulative_count: Some(cumulative),
                upper_bound: Some(le),
                ..Default::default()
            }
        })
        .collect();
    let (positive_span, positive_delta) = spans(&positive);
    let (negative_span, negative_delta) = spans(&negative);
    proto::Histogram {
        sample_count: Some(h.sample_count()),
        sample_sum: Some(h.sum()),
        bucket,
        schema: Some(NATIVE_SCHEMA),
        zero_threshold: Some(0.0),
        zero_count: Some(zero),
        positive_span,
        positive_delta,
        negative_span,
        negative_delta,
        ..Default::default()
    }
}

/// `/metrics` in the protobuf exposition, one family per name.
pub fn prometheus_protobuf(samples: &[Sample]) -> Vec<u8> {
    let mut families: BTreeMap<String, proto::MetricFamily> = BTreeMap::new();
    for s in samples {
        let name = label_name(&s.name);
        let (kind, metric) = match &s.value {
            Value::Numeric(v) => {
                let single = Some(proto::Single { value: Some(*v) });
                if name.ends_with("_total") {
                    let m = proto::Metric {
                        counter: single,
                        ..Default::default()
                    };
                    (proto::COUNTER, m)
                } else {
                    (
                        proto::GAUGE,
                        proto::Metric {
                            gauge: single,
                            ..Default::default()
                        },
                    )
                }
            }
            Value::Histogram(h) => {
                let m = proto::Metric {
                    histogram: Some(native(h)),
                    ..Default::default()
                };
                (proto::HISTOGRAM, m)
            }
            _ => continue,
        };
        let label = s
            .tags
            .iter()
            .map(|(c, v)| proto::LabelPair {
                name: Some(label_name(c)),
                value: Some(v.clone()),
            })
            .collect();
        let family = families
            .entry(name.clone())
            .or_insert_with(|| proto::MetricFamily {
                name: Some(name),
                r#type: Some(kind),
                ..Default::default()
            });
        // One type per family: a name used for both a number and a histogram keeps the first.
        if family.r#type == Some(kind) {
            family.metric.push(proto::Metric { label, ..metric });
        }
    }
    proto::encode(&families.into_values().collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use broker::record::Mode;

    fn sample(name: &str, value: Value) -> Sample {
        Sample {
            name: name.into(),
            tags: vec![
                ("host".into(), "h".into()),
                ("mountpoint".into(), "/a b".into()),
            ],
            ts_ms: 0,
            value,
            mode: Mode::Set,
        }
    }

    #[test]
    fn nad_json_parses_back_as_httptrap() {
        let mut h = hist::Histogram::new();
        h.insert_n(0.5, 3);
        let samples = vec![
            sample("a", Value::Numeric(2.0)),
            sample("lat", Value::Histogram(h)),
        ];
        let text = nad_json(&samples);
        let batch = ingest::httptrap::parse(text.as_bytes(), &ingest::Options::at(0));
        assert_eq!(batch.samples.len(), 2, "{text}");
        assert_eq!(&*batch.samples[0].tags, &samples[0].tags[..]);
    }

    #[test]
    fn native_histograms_round_trip_through_the_prometheus_check_parser() {
        let mut h = hist::Histogram::new();
        h.insert_n(0.5, 3);
        h.insert_n(0.52, 2);
        h.insert_n(8.0, 1);
        h.insert(0.0);
        let body = prometheus_protobuf(&[sample("lat", Value::Histogram(h))]);
        let families = proto::parse(&body, 100).unwrap();
        assert_eq!(families.len(), 1);
        let got = families[0].metric[0].histogram.clone().unwrap();
        assert!(got.is_native());
        assert_eq!(got.sample_count, Some(7));
        assert_eq!(got.zero_count, Some(1));
        let total: i64 = got
            .positive_delta
            .iter()
            .scan(0, |c, d| {
                *c += d;
                Some(*c)
            })
            .sum();
        assert_eq!(total, 6, "every non-zero sample in a positive bucket");
        let lengths: u32 = got.positive_span.iter().map(|s| s.length.unwrap()).sum();
        assert_eq!(lengths as usize, got.positive_delta.len());
    }

    #[test]
    fn prometheus_text_has_buckets() {
        let mut h = hist::Histogram::new();
        h.insert_n(0.5, 3);
        h.insert(0.25);
        let text = prometheus_text(&[
            sample("lat", Value::Histogram(h)),
            sample("x_total", Value::Numeric(1.0)),
        ]);
        assert!(text.contains("# TYPE lat histogram"), "{text}");
        assert!(
            text.contains("lat_bucket{host=\"h\",mountpoint=\"/a b\",le=\"+Inf\"} 4"),
            "{text}"
        );
        assert!(
            text.contains("lat_count{host=\"h\",mountpoint=\"/a b\"} 4"),
            "{text}"
        );
        assert!(text.contains("# TYPE x_total counter"), "{text}");
    }
}
