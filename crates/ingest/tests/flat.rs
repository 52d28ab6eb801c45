//! The flatbuffer metric list (`ingest::flat`): every value form, the same samples as the JSON
//! form, per-metric and whole-body rejections, the size bounds, and generated metric lists
//! encoded both ways.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The shared fuzz checks; this file uses only its own format's.
#[allow(dead_code)]
#[path = "fuzz_checks/mod.rs"]
mod fuzz_checks;

use flatbuffers::{FlatBufferBuilder, WIPOffset};
use hist::{Bin, Histogram};
use ingest::flat::{self, schema, HistogramForm};
use ingest::{httptrap, Batch, Mode, Options, Reason, Sample, Value, SAMPLES_PER_BATCH_MAX};
use proptest::prelude::*;

/// 2026-11-22T00:00:00Z, the receipt time of every test.
const NOW_MS: i64 = 1_795_305_600_000;

fn parse(body: &[u8]) -> Batch {
    flat::parse(body, &Options::at(NOW_MS))
}

fn json(body: &str) -> Batch {
    let batch = httptrap::parse(body.as_bytes(), &Options::at(NOW_MS));
    assert_eq!(batch.rejected, [], "{body}");
    batch
}

/// What a test metric holds, built with the generated builder (so every schema form, not only
/// what `flat::encode` writes, is exercised).
#[derive(Default)]
struct Metric<'a> {
    name: &'a str,
    tags: &'a [&'a str],
    ts_ms: Option<i64>,
    mode: schema::Mode,
    value: Option<V<'a>>,
}

enum V<'a> {
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F64(f64),
    Text(&'a str),
    Hist {
        bins: &'a [(i8, i8, u16)],
        samples: &'a [f64],
        llhist: Option<Vec<u8>>,
        cumulative: bool,
    },
}

fn build(metrics: &[Metric<'_>]) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let mut offsets = Vec::new();
    for m in metrics {
        let name = b.create_string(m.name);
        let tags: Vec<_> = m.tags.iter().map(|t| b.create_string(t)).collect();
        let tags = (!m.tags.is_empty()).then(|| b.create_vector(&tags));
        let (value_type, value) = match &m.value {
            None => (schema::Value::NONE, None),
            Some(V::I32(value)) => {
                let t = schema::Int32::create(&mut b, &schema::Int32Args { value: *value });
                (schema::Value::Int32, Some(t.as_union_value()))
            }
            Some(V::U32(value)) => {
                let t = schema::UInt32::create(&mut b, &schema::UInt32Args { value: *value });
                (schema::Value::UInt32, Some(t.as_union_value()))
            }
            Some(V::I64(value)) => {
                let t = schema::Int64::create(&mut b, &schema::Int64Args { value: *value });
                (schema::Value::Int64, Some(t.as_union_value()))
            }
            Some(V::U64(value)) => {
                let t = schema::UInt64::create(&mut b, &schema::UInt64Args { value: *value });
                (schema::Value::UInt64, Some(t.as_union_value()))
            }
            Some(V::F64(value)) => {
                let t = schema::Double::create(&mut b, &schema::DoubleArgs { value: *value });
                (schema::Value::Double, Some(t.as_union_value()))
            }
            Some(V::Text(text)) => {
                let value = Some(b.create_string(text));
                let t = schema::Text::create(&mut b, &schema::TextArgs { value });
                (schema::Value::Text, Some(t.as_union_value()))
            }
            Some(V::Hist {
                bins,
                samples,
                llhist,
                cumulative,
            }) => {
                let bins: Vec<_> = bins
                    .iter()
                    .map(|&(val, exp, count)| schema::Bin::new(val, exp, count))
                    .collect();
                let args = schema::HistogramArgs {
                    bins: (!bins.is_empty()).then(|| b.create_vector(&bins)),
                    samples: (!samples.is_empty()).then(|| b.create_vector(samples)),
                    llhist: llhist.as_ref().map(|bytes| b.create_vector(bytes)),
                    cumulative: *cumulative,
                };
                let t = schema::Histogram::create(&mut b, &args);
                (schema::Value::Histogram, Some(t.as_union_value()))
            }
        };
        let args = schema::MetricArgs {
            name: Some(name),
            tags,
            ts_ms: m.ts_ms,
            mode: m.mode,
            value_type,
            value,
        };
        offsets.push(schema::Metric::create(&mut b, &args));
    }
    finish(b, &offsets)
}

fn finish<'a>(mut b: FlatBufferBuilder<'a>, offsets: &[WIPOffset<schema::Metric<'a>>]) -> Vec<u8> {
    let metrics = Some(b.create_vector(offsets));
    let list = schema::MetricList::create(&mut b, &schema::MetricListArgs { metrics });
    b.finish(list, None);
    b.finished_data().to_vec()
}

fn metric<'a>(name: &'a str, value: V<'static>) -> Metric<'a> {
    Metric {
        name,
        value: Some(value),
        ..Metric::default()
    }
}

/// The spec's httptrap example, every form, sent both ways: the same samples.
#[test]
fn spec_example_same_as_json() {
    let body = r#"{ "requests": 123853, "version": "1.alpha", "ok": true,
      "big": { "_type": "L", "_value": "18426744073709551616" },
      "db`latency|ST[db:orders]": { "_type": "h",
          "_value": ["H[1.2e-03]=5", 0.004, "AAQKAAABFAAAAR4AAAEoAAB4"] },
      "cum": { "_type": "H", "_value": ["H[4]=120"] },
      "late": { "_ts": 1700000000123, "_type": "n", "_value": 42 },
      "bytes": { "_type": "L", "_value": 125, "_fl": "+" },
      "i": { "_type": "i", "_value": -7, "_tags": ["az:b\"ZXUtMQ==\"", "rack"] },
      "nothing": null }"#;
    let llhist = Histogram::from_base64("AAQKAAABFAAAAR4AAAEoAAB4")
        .unwrap()
        .to_bytes();
    let flat_body = build(&[
        metric("requests", V::U64(123853)),
        metric("version", V::Text("1.alpha")),
        metric("ok", V::U32(1)),
        // 18426744073709551616 is beyond u64: the JSON path reads it as a double.
        metric("big", V::F64(18_426_744_073_709_551_616.0)),
        metric(
            "db`latency|ST[db:orders]",
            V::Hist {
                bins: &[(12, -3, 5)],
                samples: &[0.004],
                llhist: Some(llhist),
                cumulative: false,
            },
        ),
        metric(
            "cum",
            V::Hist {
                bins: &[(40, 0, 120)],
                samples: &[],
                llhist: None,
                cumulative: true,
            },
        ),
        Metric {
            ts_ms: Some(1_700_000_000_123),
            ..metric("late", V::I64(42))
        },
        Metric {
            mode: schema::Mode::Accumulate,
            ..metric("bytes", V::U64(125))
        },
        Metric {
            tags: &["az:b\"ZXUtMQ==\"", "rack"],
            ..metric("i", V::I32(-7))
        },
        Metric {
            name: "nothing",
            ..Metric::default()
        },
    ]);
    let batch = parse(&flat_body);
    assert_eq!(batch.rejected, []);
    let expected = json(body).samples;
    assert_eq!(batch.samples, expected);
    // Spot checks written out by hand, independent of both parsers.
    assert_eq!(batch.samples.len(), 10);
    assert_eq!(
        batch.samples[3].value,
        Value::Numeric(1.8426744073709552e19)
    );
    assert_eq!(&*batch.samples[4].tags, [("db".into(), "orders".into())]);
    match &batch.samples[4].value {
        Value::Histogram(h) => assert_eq!(h.sample_count(), 5 + 1 + 123),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        &*batch.samples[8].tags,
        [("az".into(), "eu-1".into()), ("rack".into(), String::new())]
    );
    assert_eq!(batch.samples[8].value, Value::Numeric(-7.0));
    assert_eq!(batch.samples[9].value, Value::Null);
}

#[test]
fn content_type_is_the_spec_name() {
    assert_eq!(
        flat::CONTENT_TYPE,
        "application/x-circonus-metric-list-flatbuffer"
    );
}

#[test]
fn average_mode_and_large_bin_counts() {
    let mut h = Histogram::new();
    h.insert_n(2.5, 70_000);
    h.insert_n(0.0, 3);
    h.insert_n(-1e-5, u64::MAX / 2);
    let samples = vec![
        Sample {
            name: "h".into(),
            tags: vec![("a:b".into(), "b\"x".into()), ("c".into(), "d:e".into())].into(),
            ts_ms: Some(NOW_MS),
            value: Value::CumulativeHistogram(h.clone()),
            mode: Mode::Average,
        },
        Sample {
            name: "h2".into(),
            tags: vec![("a:b".into(), "b\"x".into()), ("c".into(), "d:e".into())].into(),
            ts_ms: None,
            value: Value::Text("text ü".into()),
            mode: Mode::Set,
        },
    ];
    for form in [HistogramForm::Bins, HistogramForm::Llhist] {
        let batch = parse(&flat::encode_with(&samples, form));
        assert_eq!(batch.rejected, [], "{form:?}");
        assert_eq!(batch.samples, samples, "{form:?}");
        assert!(
            std::sync::Arc::ptr_eq(&batch.samples[0].tags, &batch.samples[1].tags),
            "equal consecutive tag lists are shared"
        );
    }
    match &parse(&flat::encode(&samples)).samples[0].value {
        Value::CumulativeHistogram(back) => {
            assert_eq!(back.count_of(Bin::from_f64(2.5)), 70_000);
            assert_eq!(back.count_of(Bin::from_f64(-1e-5)), u64::MAX / 2);
        }
        other => panic!("{other:?}"),
    }
}

/// Bins in any order, repeated, with zero counts, the zero bin under any exponent, mixed with
/// samples and an llhist — and a list longer than llhist's u16 bin count, which takes the
/// other path — all merge to the histogram `hist` builds from the same entries.
#[test]
fn histogram_entries_in_any_order_merge() {
    let bins: &[(i8, i8, u16)] = &[
        (50, 2, 3),
        (12, -3, 5),
        (50, 2, 4),
        (0, 7, 2),
        (-1, 0, 1),
        (-25, 1, 0),
        (99, 127, 65_535),
        (-10, -128, 9),
    ];
    let samples: &'static [f64] = &[0.5, 5000.0, -2.5];
    let llhist = Histogram::from_bins([(Bin::from_f64(3.0), 9)]).to_bytes();
    let mut expected = Histogram::new();
    for &(val, exp, count) in bins {
        expected.insert_bin(Bin::new(val, exp).unwrap(), u64::from(count));
    }
    for &sample in samples {
        expected.insert(sample);
    }
    expected.insert_n(3.0, 9);
    let body = build(&[metric(
        "h",
        V::Hist {
            bins,
            samples,
            llhist: Some(llhist),
            cumulative: false,
        },
    )]);
    let batch = parse(&body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples[0].value, Value::Histogram(expected.clone()));
    assert_eq!(expected.count_of(Bin::new(50, 2).unwrap()), 7);
    assert_eq!(expected.count_of(Bin::ZERO), 2);

    // 70,000 entries cycling over 700 bins, descending.
    let long: Vec<(i8, i8, u16)> = (0..70_000)
        .map(|i| {
            let bin = 699 - i % 700;
            ((10 + bin % 90) as i8, (bin / 90) as i8, 1 + (i % 3) as u16)
        })
        .collect();
    let mut expected = Histogram::new();
    for &(val, exp, count) in &long {
        expected.insert_bin(Bin::new(val, exp).unwrap(), u64::from(count));
    }
    let body = build(&[metric(
        "long",
        V::Hist {
            bins: Box::leak(long.into_boxed_slice()),
            samples: &[],
            llhist: None,
            cumulative: true,
        },
    )]);
    let batch = parse(&body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples[0].value, Value::CumulativeHistogram(expected));
}

#[test]
fn empty_body_and_empty_list() {
    let batch = parse(b"");
    assert_eq!((batch.samples.len(), batch.rejected_total), (0, 0));
    let batch = parse(&build(&[]));
    assert_eq!((batch.samples.len(), batch.rejected_total), (0, 0));
}

/// Each problem rejects its metric alone, with the metric's index and name, as the JSON path
/// rejects one key.
#[test]
fn per_metric_rejections() {
    let long_name = "n".repeat(ingest::NAME_BYTES_MAX + 1);
    let many_tags: Vec<String> = (0..=ingest::TAGS_PER_SAMPLE_MAX)
        .map(|i| format!("t{i}:v"))
        .collect();
    let many_tags: Vec<&str> = many_tags.iter().map(String::as_str).collect();
    let bad_llhist = vec![0, 1, 12];
    let metrics = [
        metric("ok", V::F64(1.0)),
        metric("nan", V::F64(f64::NAN)),
        metric("inf", V::F64(f64::INFINITY)),
        metric(&long_name, V::F64(1.0)),
        metric("", V::F64(1.0)),
        metric("x|ST[a:b]y", V::F64(1.0)),
        Metric {
            tags: &[":v"],
            ..metric("empty_category", V::F64(1.0))
        },
        Metric {
            tags: &many_tags,
            ..metric("many_tags", V::F64(1.0))
        },
        Metric {
            ts_ms: Some(1_000),
            ..metric("old", V::F64(1.0))
        },
        Metric {
            mode: schema::Mode(9),
            ..metric("mode", V::F64(1.0))
        },
        metric(
            "bad_bin",
            V::Hist {
                bins: &[(12, 0, 1), (5, 0, 1)],
                samples: &[],
                llhist: None,
                cumulative: false,
            },
        ),
        metric(
            "nan_sample",
            V::Hist {
                bins: &[],
                samples: &[1.0, f64::NAN],
                llhist: None,
                cumulative: false,
            },
        ),
        metric(
            "bad_llhist",
            V::Hist {
                bins: &[],
                samples: &[],
                llhist: Some(bad_llhist),
                cumulative: false,
            },
        ),
        metric("ok2", V::I32(2)),
    ];
    let batch = parse(&build(&metrics));
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ok", "ok2"]);
    assert_eq!(batch.rejected_total, 12);
    assert!(!batch.stopped());
    let locations: Vec<&str> = batch.rejected.iter().map(|r| r.location.as_str()).collect();
    assert_eq!(locations[0], "metric 1 (`nan`)");
    assert_eq!(locations[11], "metric 12 (`bad_llhist`)");
    let reasons: Vec<String> = batch
        .rejected
        .iter()
        .map(|r| r.reason.to_string())
        .collect();
    assert!(reasons[0].contains("finite"), "{}", reasons[0]);
    assert!(matches!(
        batch.rejected[2].reason,
        Reason::Bound {
            what: "name length in bytes",
            ..
        }
    ));
    assert_eq!(batch.rejected[3].reason, Reason::EmptyName);
    assert!(matches!(batch.rejected[4].reason, Reason::BadTag { .. }));
    assert!(matches!(batch.rejected[5].reason, Reason::BadTag { .. }));
    assert!(matches!(
        batch.rejected[6].reason,
        Reason::Bound {
            what: "tags on one sample",
            ..
        }
    ));
    assert!(matches!(batch.rejected[7].reason, Reason::Timestamp { .. }));
    assert!(reasons[8].contains("mode"), "{}", reasons[8]);
    assert!(reasons[9].contains("bin 1: val 5, exp 0"), "{}", reasons[9]);
    assert!(reasons[10].contains("sample 1: NaN"), "{}", reasons[10]);
    assert!(matches!(
        batch.rejected[11].reason,
        Reason::Decode { what: "llhist", .. }
    ));
}

fn assert_body_rejected(body: &[u8], detail_part: &str) {
    let batch = parse(body);
    assert_eq!(batch.samples, []);
    assert_eq!(batch.rejected.len(), 1);
    let rejection = &batch.rejected[0];
    assert!(rejection.rest_of_body);
    assert_eq!(rejection.location, "body");
    let text = rejection.to_string();
    assert!(!text.contains('\n'), "{text}");
    assert!(text.contains(detail_part), "`{detail_part}` not in {text}");
}

/// Structural problems (what the flatbuffers verifier refuses) reject the whole body, naming
/// where the verifier stopped.
#[test]
fn verifier_rejections_name_the_field() {
    let good = build(&[metric("a", V::F64(1.0)), metric("bb", V::F64(2.0))]);
    assert_eq!(parse(&good).samples.len(), 2);
    assert_body_rejected(&good[..good.len() / 2], "out of bounds");
    assert_body_rejected(
        b"\xff\xff\xff\xff garbage",
        "cannot decode flatbuffer metric list",
    );

    // Invalid UTF-8 in the second metric's name.
    let mut bad = good.clone();
    let at = bad.windows(2).position(|w| w == b"bb").unwrap();
    bad[at] = 0xff;
    assert_body_rejected(&bad, "Utf8");
    assert_body_rejected(&bad, "vector element 1");
    assert_body_rejected(&bad, "`name`");

    // A metric without its required name, written with the low-level builder.
    let mut b = FlatBufferBuilder::new();
    let start = b.start_table();
    b.push_slot_always(schema::Metric::VT_TS_MS, NOW_MS);
    let nameless = WIPOffset::new(b.end_table(start).value());
    let good_metric = {
        let name = Some(b.create_string("a"));
        schema::Metric::create(
            &mut b,
            &schema::MetricArgs {
                name,
                ..Default::default()
            },
        )
    };
    let body = finish(b, &[good_metric, nameless]);
    assert_body_rejected(&body, "Missing required field `name`");
    assert_body_rejected(&body, "vector element 1");
}

/// Offsets may point many metrics at one long name: the verifier's apparent-size bound keeps
/// decoded size proportional to the body.
#[test]
fn shared_offsets_cannot_amplify() {
    let name = "n".repeat(4000);
    let mut b = FlatBufferBuilder::new();
    let name = Some(b.create_string(&name));
    let one = schema::Metric::create(
        &mut b,
        &schema::MetricArgs {
            name,
            ..Default::default()
        },
    );
    let body = finish(b, &vec![one; 100_000]);
    assert!(body.len() < 420_000, "{}", body.len());
    assert_body_rejected(&body, "apparent size in bytes");
    let max = body.len() * 16 + 64 * 1024;
    assert_eq!(
        parse(&body).rejected[0].reason,
        Reason::Bound {
            what:
                "apparent size in bytes (16 × the body + 64 KiB; shared data counted per reference)",
            size: max + 1,
            max
        }
    );

    // A few shares are fine (an encoder may share tag strings and lists).
    let mut b = FlatBufferBuilder::new();
    let name = Some(b.create_string("shared"));
    let one = schema::Metric::create(
        &mut b,
        &schema::MetricArgs {
            name,
            ..Default::default()
        },
    );
    let batch = parse(&finish(b, &[one; 10]));
    assert_eq!(batch.samples.len(), 10);
    assert!(batch.samples.iter().all(|s| s.name == "shared"));
}

/// More metrics than a batch may hold: the first `SAMPLES_PER_BATCH_MAX` are read and the rest
/// of the body is rejected, as for JSON.
#[test]
fn batch_bound() {
    let mut b = FlatBufferBuilder::new();
    let name = Some(b.create_string("m"));
    let one = schema::Metric::create(
        &mut b,
        &schema::MetricArgs {
            name,
            ..Default::default()
        },
    );
    let body = finish(b, &vec![one; SAMPLES_PER_BATCH_MAX + 2]);
    let batch = parse(&body);
    assert_eq!(batch.samples.len(), SAMPLES_PER_BATCH_MAX);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].location,
        format!("metric {SAMPLES_PER_BATCH_MAX} (`m`)")
    );
}

// ---- generated metric lists, JSON and flatbuffers ----

/// Renders samples as one httptrap JSON document in the explicit form (independently of
/// `flat::encode`: every tag part base64-quoted, histograms as `H[..]=n` strings or base64).
fn render_json(samples: &[Sample], base64_histograms: bool) -> String {
    let b64 = |text: &str| {
        format!(
            "b\"{}\"",
            base64_simd::STANDARD.encode_to_string(text.as_bytes())
        )
    };
    let mut members = Vec::new();
    for s in samples {
        let (kind, value) = match &s.value {
            Value::Numeric(v) => ("n", format!("{v:?}")),
            Value::Text(t) => ("s", serde_json::to_string(t).unwrap()),
            Value::Null => ("n", "null".to_owned()),
            Value::Histogram(h) | Value::CumulativeHistogram(h) => {
                let kind = if matches!(s.value, Value::Histogram(_)) {
                    "h"
                } else {
                    "H"
                };
                if base64_histograms {
                    (kind, format!("\"{}\"", h.to_base64()))
                } else {
                    (kind, serde_json::to_string(&h.to_text()).unwrap())
                }
            }
        };
        let mut fields = vec![
            format!("\"_type\":\"{kind}\""),
            format!("\"_value\":{value}"),
        ];
        if let Some(ts_ms) = s.ts_ms {
            fields.push(format!("\"_ts\":{ts_ms}"));
        }
        match s.mode {
            Mode::Set => {}
            Mode::Accumulate => fields.push("\"_fl\":\"+\"".to_owned()),
            Mode::Average => fields.push("\"_fl\":\"~\"".to_owned()),
        }
        if !s.tags.is_empty() {
            let tags: Vec<String> = s
                .tags
                .iter()
                .map(|(c, v)| format!("{}:{}", b64(c), b64(v)))
                .collect();
            fields.push(format!(
                "\"_tags\":{}",
                serde_json::to_string(&tags).unwrap()
            ));
        }
        let key = serde_json::to_string(&s.name).unwrap();
        members.push(format!("{key}:{{{}}}", fields.join(",")));
    }
    format!("{{{}}}", members.join(","))
}

fn arb_text() -> impl Strategy<Value = String> {
    // Separators, quotes, the b" prefix, backticks and non-ASCII: what tag and name encoding
    // must carry.
    prop_oneof![
        "[a-z0-9_.`:,é\\[\\] -]{0,12}",
        "b\"[a-zA-Z0-9+/=:]{0,6}\"?",
        "[\\PC]{0,8}"
    ]
}

fn arb_histogram() -> impl Strategy<Value = Histogram> {
    let bin = prop_oneof![
        8 => ((10i8..=99), any::<i8>(), any::<bool>()).prop_map(|(v, e, neg)| {
            Bin::new(if neg { -v } else { v }, e).unwrap()
        }),
        1 => Just(Bin::ZERO),
        1 => Just(Bin::NAN),
    ];
    let count = prop_oneof![8 => 1u64..1000, 1 => 60_000u64..70_000, 1 => any::<u64>()];
    prop::collection::vec((bin, count), 0..40).prop_map(Histogram::from_bins)
}

fn arb_sample() -> impl Strategy<Value = Sample> {
    let name = arb_text().prop_filter("a non-empty name without |ST[", |n| {
        !n.is_empty() && !n.contains("|ST[")
    });
    let tag = (
        arb_text().prop_filter("non-empty category", |c| !c.is_empty()),
        arb_text(),
    );
    let value = prop_oneof![
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(Value::Numeric),
        (-1e6f64..1e6).prop_map(Value::Numeric),
        arb_text().prop_map(Value::Text),
        arb_histogram().prop_map(Value::Histogram),
        arb_histogram().prop_map(Value::CumulativeHistogram),
        Just(Value::Null),
    ];
    let ts_ms = prop::option::of(ingest::batch::TS_MIN_MS_DEFAULT..NOW_MS);
    let mode = prop_oneof![Just(Mode::Set), Just(Mode::Accumulate), Just(Mode::Average)];
    (name, prop::collection::vec(tag, 0..4), ts_ms, value, mode).prop_map(
        |(name, tags, ts_ms, value, mode)| Sample {
            name,
            tags: tags.into(),
            ts_ms,
            value,
            mode,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random metric lists sent as JSON and as flatbuffers (both histogram forms) parse to the
    /// same samples, and to the ones they were made from.
    #[test]
    fn json_and_flatbuffers_parse_alike(
        samples in prop::collection::vec(arb_sample(), 0..12),
        base64 in any::<bool>(),
    ) {
        let from_json = json(&render_json(&samples, base64));
        for form in [HistogramForm::Bins, HistogramForm::Llhist] {
            let from_flat = parse(&flat::encode_with(&samples, form));
            prop_assert_eq!(&from_flat.rejected, &from_json.rejected);
            prop_assert_eq!(&from_flat.samples, &from_json.samples);
        }
        prop_assert_eq!(&from_json.samples, &samples);
    }

    /// Arbitrary bytes, and valid bodies cut short or with one byte changed, never panic and
    /// stay within every bound (the fuzz target's checks).
    #[test]
    fn mutated_bodies_stay_within_bounds(
        samples in prop::collection::vec(arb_sample(), 1..6),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        noise in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let body = flat::encode(&samples);
        fuzz_checks::flat(&body[..cut.index(body.len() + 1)]);
        let mut changed = body.clone();
        let i = at.index(changed.len());
        changed[i] = byte;
        fuzz_checks::flat(&changed);
        fuzz_checks::flat(&noise);
    }
}

/// Writes the fuzz target's seed corpus (`fuzz/corpus/flat/`) when `STRATA_WRITE_SEEDS` is set;
/// always checks that the seeds pass the fuzz checks.
#[test]
fn seed_corpus_passes_the_fuzz_checks() {
    let mut seeds = vec![
        build(&[metric("a", V::F64(1.0))]),
        build(&[Metric {
            tags: &["a:b", "b\"YQ==\":c"],
            ts_ms: Some(NOW_MS),
            mode: schema::Mode::Average,
            ..metric("x|ST[h:1]", V::I64(-5))
        }]),
        build(&[
            metric("t", V::Text("text")),
            metric("u", V::U32(7)),
            metric("i", V::I32(-7)),
            metric("l", V::U64(u64::MAX)),
            metric(
                "h",
                V::Hist {
                    bins: &[(12, -3, 5), (0, 0, 1), (-1, 0, 2)],
                    samples: &[0.5],
                    llhist: Some(Histogram::from_bins([(Bin::from_f64(3.0), 9)]).to_bytes()),
                    cumulative: true,
                },
            ),
        ]),
    ];
    let mut h = Histogram::new();
    for i in 0..75 {
        h.insert_n(0.001 * f64::from(i + 1), u64::from(i as u8) + 1);
    }
    let sample = Sample {
        name: "api`latency".into(),
        tags: vec![("host".into(), "a".into())].into(),
        ts_ms: None,
        value: Value::Histogram(h),
        mode: Mode::Set,
    };
    seeds.push(flat::encode(&[sample.clone(), sample.clone()]));
    seeds.push(flat::encode_with(&[sample], HistogramForm::Llhist));
    let write = std::env::var_os("STRATA_WRITE_SEEDS").is_some();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/flat");
    for (i, seed) in seeds.iter().enumerate() {
        let batch = parse(seed);
        assert_eq!(batch.rejected, [], "seed {i}");
        assert!(!batch.samples.is_empty(), "seed {i}");
        fuzz_checks::flat(seed);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("seed-{i}")), seed).unwrap();
        }
    }
}
