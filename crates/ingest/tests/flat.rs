//! The flatbuffer metric list (`ingest::flat`, schema version 3): every value form, the same
//! samples as the JSON form, the numeric columns (exact i32 or f64), per-metric and whole-body
//! rejections, side vectors staying aligned past a rejected metric, the size bounds, and
//! generated metric lists encoded both ways.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The shared fuzz checks; this file uses only its own format's.
#[allow(dead_code)]
#[path = "fuzz_checks/mod.rs"]
mod fuzz_checks;

use flatbuffers::FlatBufferBuilder;
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

// `Metric.flags`, as the schema defines them.
const SET: u8 = 0;
const ACCUMULATE: u8 = 1;
const AVERAGE: u8 = 2;
const TS_DOCUMENT: u8 = 1 << 2;
const TS_OWN: u8 = 2 << 2;

/// One document written field by field with the generated builder, so every schema form (and
/// every malformed one), not only what `flat::encode` writes, is exercised.
#[derive(Default, Clone)]
struct Doc {
    strings: Vec<String>,
    tag_texts: Vec<u16>,
    tag_set_ends: Vec<u32>,
    ts_ms: Option<i64>,
    metrics: Vec<schema::Metric>,
    ints: Vec<i32>,
    doubles: Vec<f64>,
    timestamps_ms: Vec<i64>,
    texts: Vec<String>,
    histograms: Vec<schema::HistogramEnds>,
    bins: Vec<schema::Bin>,
    llhist: Vec<u8>,
    native: Vec<u8>,
}

impl Doc {
    fn string(&mut self, text: &str) -> u16 {
        self.strings.push(text.to_owned());
        u16::try_from(self.strings.len() - 1).unwrap()
    }

    /// A tag set of these texts; the value for `Metric.tags`.
    fn tag_set(&mut self, texts: &[&str]) -> u16 {
        for text in texts {
            let at = self.string(text);
            self.tag_texts.push(at);
        }
        self.tag_set_ends.push(self.tag_texts.len() as u32);
        self.tag_set_ends.len() as u16
    }

    fn push(&mut self, name: &str, tags: u16, kind: schema::Kind, flags: u8) {
        let name = self.string(name);
        self.metrics
            .push(schema::Metric::new(name, tags, kind, flags));
    }

    /// A numeric metric: `Int` when `value` is an integer in i32's range other than -0.0 (the
    /// rule written out independently of the encoder's), else `Double`.
    fn number(&mut self, name: &str, tags: u16, value: f64, flags: u8) {
        let int = value.fract() == 0.0
            && (-2_147_483_648.0..=2_147_483_647.0).contains(&value)
            && !(value == 0.0 && value.is_sign_negative());
        if int {
            self.ints.push(value as i32);
            self.push(name, tags, schema::Kind::Int, flags);
        } else {
            self.doubles.push(value);
            self.push(name, tags, schema::Kind::Double, flags);
        }
    }

    fn numeric(&mut self, name: &str, value: f64) -> &mut Doc {
        self.number(name, 0, value, SET);
        self
    }

    fn text(&mut self, name: &str, text: &str) -> &mut Doc {
        self.texts.push(text.to_owned());
        self.push(name, 0, schema::Kind::Text, SET);
        self
    }

    fn hist(&mut self, name: &str, bins: &[(i8, i8, u16)], llhist: &[u8], cumulative: bool) {
        self.bins.extend(
            bins.iter()
                .map(|&(val, exp, count)| schema::Bin::new(val, exp, count)),
        );
        self.llhist.extend_from_slice(llhist);
        self.histograms.push(schema::HistogramEnds::new(
            self.bins.len() as u32,
            self.llhist.len() as u32,
        ));
        let kind = if cumulative {
            schema::Kind::CumulativeHistogram
        } else {
            schema::Kind::Histogram
        };
        self.push(name, 0, kind, SET);
    }

    fn finish<'b>(
        &self,
        b: &mut FlatBufferBuilder<'b>,
    ) -> flatbuffers::WIPOffset<schema::Document<'b>> {
        let strings: Vec<_> = self.strings.iter().map(|s| b.create_string(s)).collect();
        let texts: Vec<_> = self.texts.iter().map(|s| b.create_string(s)).collect();
        let args = schema::DocumentArgs {
            strings: Some(b.create_vector(&strings)),
            tag_texts: Some(b.create_vector(&self.tag_texts)),
            tag_set_ends: Some(b.create_vector(&self.tag_set_ends)),
            ts_ms: self.ts_ms,
            metrics: Some(b.create_vector(&self.metrics)),
            ints: Some(b.create_vector(&self.ints)),
            doubles: Some(b.create_vector(&self.doubles)),
            timestamps_ms: Some(b.create_vector(&self.timestamps_ms)),
            texts: Some(b.create_vector(&texts)),
            histograms: Some(b.create_vector(&self.histograms)),
            bins: Some(b.create_vector(&self.bins)),
            llhist: Some(b.create_vector(&self.llhist)),
            native: Some(b.create_vector(&self.native)),
        };
        schema::Document::create(b, &args)
    }
}

fn build(docs: &[Doc]) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let offsets: Vec<_> = docs.iter().map(|d| d.finish(&mut b)).collect();
    finish(b, &offsets)
}

fn finish<'a>(
    mut b: FlatBufferBuilder<'a>,
    offsets: &[flatbuffers::WIPOffset<schema::Document<'a>>],
) -> Vec<u8> {
    let documents = Some(b.create_vector(offsets));
    let list = schema::MetricList::create(&mut b, &schema::MetricListArgs { documents });
    schema::finish_metric_list_buffer(&mut b, list);
    b.finished_data().to_vec()
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
    let mut doc = Doc::default();
    doc.numeric("requests", 123853.0)
        .text("version", "1.alpha")
        .numeric("ok", 1.0)
        // 18426744073709551616 is beyond u64: the JSON path reads it as a double.
        .numeric("big", 18_426_744_073_709_551_616.0);
    // 0.004 is one sample in bin (40, -3).
    doc.hist(
        "db`latency|ST[db:orders]",
        &[(12, -3, 5), (40, -3, 1)],
        &llhist,
        false,
    );
    doc.hist("cum", &[(40, 0, 120)], &[], true);
    doc.timestamps_ms.push(1_700_000_000_123);
    doc.number("late", 0, 42.0, TS_OWN);
    doc.number("bytes", 0, 125.0, ACCUMULATE);
    let tags = doc.tag_set(&["az:b\"ZXUtMQ==\"", "rack"]);
    doc.number("i", tags, -7.0, SET);
    doc.push("nothing", 0, schema::Kind::Null, SET);
    let batch = parse(&build(&[doc]));
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
    assert_eq!(batch.samples[6].ts_ms, Some(1_700_000_000_123));
    assert_eq!(batch.samples[7].mode, Mode::Accumulate);
    assert_eq!(
        &*batch.samples[8].tags,
        [("az".into(), "eu-1".into()), ("rack".into(), String::new())]
    );
    assert_eq!(batch.samples[8].value, Value::Numeric(-7.0));
    assert_eq!(batch.samples[9].value, Value::Null);
}

#[test]
fn content_type_and_identifier() {
    assert_eq!(
        flat::CONTENT_TYPE,
        "application/x-circonus-metric-list-flatbuffer"
    );
    let body = build(&[]);
    assert_eq!(&body[4..8], b"STH3");
    assert_eq!(flat::FILE_IDENTIFIER, "STH3");
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
            "metrics of one tag set share its list"
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

/// Timestamps: at receipt, the document's, and each metric's own, in any mix; `encode` makes
/// the most common one the document's.
#[test]
fn timestamp_sources() {
    let mut doc = Doc {
        ts_ms: Some(NOW_MS - 1_000),
        ..Doc::default()
    };
    doc.timestamps_ms = vec![NOW_MS - 5, NOW_MS - 6];
    doc.number("a", 0, 1.0, TS_OWN);
    doc.number("b", 0, 2.0, TS_DOCUMENT);
    doc.number("c", 0, 3.0, SET);
    doc.number("d", 0, 4.0, TS_OWN | AVERAGE);
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.rejected, []);
    let ts: Vec<Option<i64>> = batch.samples.iter().map(|s| s.ts_ms).collect();
    assert_eq!(
        ts,
        [
            Some(NOW_MS - 5),
            Some(NOW_MS - 1_000),
            None,
            Some(NOW_MS - 6)
        ]
    );
    assert_eq!(batch.samples[3].mode, Mode::Average);

    let samples: Vec<Sample> = (0..10)
        .map(|i| Sample {
            name: format!("m{i}"),
            tags: vec![].into(),
            ts_ms: if i == 3 {
                Some(NOW_MS - 7)
            } else {
                Some(NOW_MS)
            },
            value: Value::Numeric(f64::from(i)),
            mode: Mode::Set,
        })
        .collect();
    let body = flat::encode(&samples);
    assert_eq!(parse(&body).samples, samples);
    let list = flat::schema::root_as_metric_list(&body).unwrap();
    let document = list.documents().unwrap().get(0);
    assert_eq!(document.ts_ms(), Some(NOW_MS));
    assert_eq!(document.timestamps_ms().unwrap().len(), 1);
}

/// Bins in any order, repeated, with zero counts, the zero bin under any exponent, mixed with
/// an llhist — and a list longer than llhist's u16 bin count, which takes the other path — all
/// merge to the histogram `hist` builds from the same entries.
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
    let llhist = Histogram::from_bins([(Bin::from_f64(3.0), 9)]).to_bytes();
    let mut expected = Histogram::new();
    for &(val, exp, count) in bins {
        expected.insert_bin(Bin::new(val, exp).unwrap(), u64::from(count));
    }
    expected.insert_n(3.0, 9);
    let mut doc = Doc::default();
    doc.hist("h", bins, &llhist, false);
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples[0].value, Value::Histogram(expected.clone()));
    assert_eq!(expected.count_of(Bin::new(50, 2).unwrap()), 7);
    assert_eq!(expected.count_of(Bin::ZERO), 2);

    // 70,000 entries cycling over 700 bins, descending, then a small histogram after it.
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
    let mut doc = Doc::default();
    doc.hist("long", &long, &[], true);
    doc.hist("small", &[(20, 0, 2)], &[], false);
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples[0].value, Value::CumulativeHistogram(expected));
    assert_eq!(
        batch.samples[1].value,
        Value::Histogram(Histogram::from_bins([(Bin::new(20, 0).unwrap(), 2)]))
    );
}

#[test]
fn empty_body_empty_list_and_empty_document() {
    let batch = parse(b"");
    assert_eq!((batch.samples.len(), batch.rejected_total), (0, 0));
    let batch = parse(&build(&[]));
    assert_eq!((batch.samples.len(), batch.rejected_total), (0, 0));
    let batch = parse(&build(&[Doc::default(), Doc::default()]));
    assert_eq!((batch.samples.len(), batch.rejected_total), (0, 0));
}

/// Each problem rejects its metric alone, with the document, the metric's index and name, as
/// the JSON path rejects one key; the side vectors stay aligned past a rejected metric.
#[test]
fn per_metric_rejections() {
    let long_name = "n".repeat(ingest::NAME_BYTES_MAX + 1);
    let many_tags: Vec<String> = (0..=ingest::TAGS_PER_SAMPLE_MAX)
        .map(|i| format!("t{i}:v"))
        .collect();
    let many_tags: Vec<&str> = many_tags.iter().map(String::as_str).collect();
    let mut doc = Doc::default();
    doc.numeric("ok", 1.0)
        .numeric("nan", f64::NAN)
        .numeric("inf", f64::INFINITY)
        .numeric(&long_name, 1.0)
        .numeric("", 1.0)
        .numeric("x|ST[a:b]y", 1.0);
    let empty_category = doc.tag_set(&[":v"]);
    doc.number("empty_category", empty_category, 1.0, SET);
    let many = doc.tag_set(&many_tags);
    doc.number("many_tags", many, 1.0, SET);
    doc.timestamps_ms.push(1_000);
    doc.number("old", 0, 1.0, TS_OWN);
    doc.number("mode", 0, 1.0, 3);
    doc.number("reserved", 0, 1.0, 0x10);
    doc.push("kind", 0, schema::Kind(9), SET);
    // A bad bin, then a rejected name holding a good histogram: the next histogram metric
    // still reads its own entry.
    doc.hist("bad_bin", &[(12, 0, 1), (5, 0, 1)], &[], false);
    doc.hist("", &[(30, 0, 1)], &[], false);
    doc.hist("bad_llhist", &[], &[0, 1, 12], false);
    doc.push("no_text", 0, schema::Kind::Text, SET);
    doc.number("no_ts", 0, 1.0, TS_DOCUMENT);
    doc.ints.push(1);
    doc.metrics
        .push(schema::Metric::new(10_000, 0, schema::Kind::Int, SET));
    doc.number("no_tag_set", 7, 1.0, SET);
    doc.hist("h_ok", &[(40, 0, 3)], &[], false);
    doc.numeric("ok2", 2.0);
    let batch = parse(&build(&[doc]));
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ok", "h_ok", "ok2"]);
    assert_eq!(
        batch.samples[1].value,
        Value::Histogram(Histogram::from_bins([(Bin::new(40, 0).unwrap(), 3)]))
    );
    assert_eq!(batch.rejected_total, 18);
    assert!(!batch.stopped());
    let locations: Vec<&str> = batch.rejected.iter().map(|r| r.location.as_str()).collect();
    assert_eq!(locations[0], "document 0, metric 1 (`nan`)");
    assert_eq!(locations[13], "document 0, metric 14 (`bad_llhist`)");
    assert_eq!(locations[16], "document 0, metric 17 (``)");
    let reasons = reasons_of(&batch);
    assert!(reasons[0].contains("finite"), "{}", reasons[0]);
    assert!(reasons[1].contains("finite"), "{}", reasons[1]);
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
    assert!(reasons[9].contains("bits 4–7"), "{}", reasons[9]);
    assert!(reasons[10].contains("kind"), "{}", reasons[10]);
    assert!(
        reasons[11].contains("bin 1: val 5, exp 0"),
        "{}",
        reasons[11]
    );
    assert_eq!(batch.rejected[12].reason, Reason::EmptyName);
    assert!(matches!(
        batch.rejected[13].reason,
        Reason::Decode { what: "llhist", .. }
    ));
    assert!(reasons[14].contains("texts[0] missing"), "{}", reasons[14]);
    assert!(reasons[15].contains("document `ts_ms`"), "{}", reasons[15]);
    assert!(reasons[16].contains("name 10000 of"), "{}", reasons[16]);
    assert!(reasons[17].contains("tag set 7 of 2"), "{}", reasons[17]);
}

/// Numeric values travel in `ints` when they are exactly an i32 and in `doubles` otherwise, and
/// come back bit for bit (-0.0 keeps its sign).
#[test]
fn numeric_columns_exact_i32_or_f64() {
    let ints = [0.0, 1.0, -1.0, 57.0, 2_147_483_647.0, -2_147_483_648.0, 1e9];
    let doubles = [
        -0.0,
        0.5,
        -1.25,
        2_147_483_648.0,
        -2_147_483_649.0,
        1_099_511_627_776.0,
        1e300,
        -1e-300,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
        9_007_199_254_740_993.0,
    ];
    let samples = numerics(ints.iter().chain(&doubles).copied());
    let body = flat::encode(&samples);
    let list = schema::root_as_metric_list(&body).unwrap();
    let document = list.documents().unwrap().get(0);
    let written: Vec<i32> = document.ints().unwrap().iter().collect();
    let expected: Vec<i32> = ints.iter().map(|&v| v as i32).collect();
    assert_eq!(written, expected);
    let written: Vec<u64> = document
        .doubles()
        .unwrap()
        .iter()
        .map(f64::to_bits)
        .collect();
    let expected: Vec<u64> = doubles.iter().map(|v| v.to_bits()).collect();
    assert_eq!(written, expected);
    let kinds: Vec<schema::Kind> = document
        .metrics()
        .unwrap()
        .iter()
        .map(|m| m.kind())
        .collect();
    assert_eq!(&kinds[..ints.len()], [schema::Kind::Int; 7]);
    assert_eq!(&kinds[ints.len()..], [schema::Kind::Double; 12]);
    let batch = parse(&body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples, samples);
    for (back, sent) in batch.samples.iter().zip(&samples) {
        let (Value::Numeric(back), Value::Numeric(sent)) = (&back.value, &sent.value) else {
            panic!("numeric");
        };
        assert_eq!(back.to_bits(), sent.to_bits(), "{sent}");
    }
    // 20 small integers: 6 bytes of struct and 4 of value each, no 8-byte double.
    let small: Vec<Sample> = (0..20)
        .map(|i| Sample {
            value: Value::Numeric(f64::from(i)),
            ..samples[0].clone()
        })
        .collect();
    let body = flat::encode(&small);
    let list = schema::root_as_metric_list(&body).unwrap();
    let document = list.documents().unwrap().get(0);
    assert_eq!(document.metrics().unwrap().bytes().len(), 20 * 6);
    assert_eq!(document.ints().unwrap().len(), 20);
    assert!(document.doubles().is_none());
}

/// NaN and ±inf are rejected as version 2 rejected them (a finite value expected, the metric
/// alone; `encode` writes them to `doubles`), -0.0 is kept with its sign, and the `doubles`
/// entries after a rejected one stay aligned.
#[test]
fn non_finite_values_rejected_alone() {
    let values = [
        1.5,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        2.5,
        3.0,
    ];
    let samples = numerics(values.iter().copied());
    let batch = parse(&flat::encode(&samples));
    let kept: Vec<(&str, u64)> = batch
        .samples
        .iter()
        .map(|s| match s.value {
            Value::Numeric(v) => (s.name.as_str(), v.to_bits()),
            _ => panic!("numeric"),
        })
        .collect();
    let expected = [
        ("v0", 1.5f64.to_bits()),
        ("v4", (-0.0f64).to_bits()),
        ("v5", 2.5f64.to_bits()),
        ("v6", 3.0f64.to_bits()),
    ];
    assert_eq!(kept, expected);
    assert_eq!(batch.rejected_total, 3);
    let reasons = reasons_of(&batch);
    for (reason, shown) in reasons.iter().zip(["NaN", "inf", "-inf"]) {
        assert!(reason.contains("a finite value"), "{reason}");
        assert!(reason.contains(shown), "{reason}");
    }
    assert_eq!(batch.rejected[0].location, "document 0, metric 1 (`v1`)");
}

/// A numeric metric whose column lacks its entry is rejected alone, naming the column and
/// entry; a rejected metric still consumes its entry, so the values after it stay aligned.
#[test]
fn numeric_columns_checked_and_aligned() {
    let mut doc = Doc::default();
    doc.numeric("a", 1.0).numeric("", 2.0).numeric("c", 3.0);
    doc.numeric("x", 0.5).numeric("", 1.5).numeric("z", 2.5);
    doc.push("no_int", 0, schema::Kind::Int, SET);
    doc.push("no_double", 0, schema::Kind::Double, SET);
    let batch = parse(&build(&[doc.clone()]));
    let kept: Vec<(&str, &Value)> = batch
        .samples
        .iter()
        .map(|s| (s.name.as_str(), &s.value))
        .collect();
    assert_eq!(
        kept,
        [
            ("a", &Value::Numeric(1.0)),
            ("c", &Value::Numeric(3.0)),
            ("x", &Value::Numeric(0.5)),
            ("z", &Value::Numeric(2.5)),
        ]
    );
    let reasons = reasons_of(&batch);
    assert_eq!(reasons.len(), 4);
    assert!(reasons[2].contains("ints[3] missing"), "{}", reasons[2]);
    assert!(reasons[3].contains("doubles[3] missing"), "{}", reasons[3]);
    assert_eq!(
        batch.rejected[2].location,
        "document 0, metric 6 (`no_int`)"
    );

    // Without the columns at all: the same rejections.
    let mut doc = Doc::default();
    doc.push("i", 0, schema::Kind::Int, SET);
    doc.push("d", 0, schema::Kind::Double, SET);
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.samples, []);
    let reasons = reasons_of(&batch);
    assert!(reasons[0].contains("ints[0] missing"), "{}", reasons[0]);
    assert!(reasons[1].contains("doubles[0] missing"), "{}", reasons[1]);
}

/// A document holding more strings than 16-bit indices reach is rejected whole, naming the
/// bound; `encode` starts another document before that, and the metrics come back in order.
#[test]
fn strings_per_document_bound() {
    let mut doc = Doc::default();
    doc.numeric("m", 1.0);
    doc.strings
        .extend((0..flat::STRINGS_PER_DOCUMENT_MAX).map(|i| i.to_string()));
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.samples, []);
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "strings in one document (16-bit indices)",
            size: flat::STRINGS_PER_DOCUMENT_MAX + 1,
            max: flat::STRINGS_PER_DOCUMENT_MAX,
        }
    );
    assert!(batch.rejected[0].rest_of_body);

    let samples: Vec<Sample> = (0..flat::STRINGS_PER_DOCUMENT_MAX + 10)
        .map(|i| Sample {
            name: format!("m{i}"),
            tags: if i % 1000 == 0 {
                vec![("host".into(), format!("h{i}"))].into()
            } else {
                vec![].into()
            },
            ts_ms: None,
            value: Value::Numeric(i as f64),
            mode: Mode::Set,
        })
        .collect();
    let body = flat::encode(&samples);
    let list = flat::schema::root_as_metric_list(&body).unwrap();
    let documents = list.documents().unwrap();
    assert_eq!(documents.len(), 2);
    for document in documents {
        assert!(document.strings().unwrap().len() <= flat::STRINGS_PER_DOCUMENT_MAX);
    }
    let batch = parse(&body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples, samples);
}

/// Histogram ends past the vectors or going backwards reject their metric.
#[test]
fn histogram_ends_are_checked() {
    let mut doc = Doc::default();
    doc.hist("a", &[(20, 0, 1), (30, 0, 1)], &[], false);
    doc.hist("b", &[(40, 0, 1)], &[], false);
    doc.histograms[1] = schema::HistogramEnds::new(1, 0);
    doc.push("c", 0, schema::Kind::Histogram, SET);
    doc.histograms.push(schema::HistogramEnds::new(99, 0));
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.samples.len(), 1);
    assert_eq!(batch.rejected_total, 2);
    for rejection in &batch.rejected {
        let text = rejection.reason.to_string();
        assert!(text.contains("never decreasing"), "{text}");
    }
    assert!(
        batch.rejected[1]
            .reason
            .to_string()
            .contains("bins 2..99 of 3"),
        "{}",
        batch.rejected[1].reason
    );
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
/// where the verifier stopped; so does another file identifier, naming versions 1 and 2.
#[test]
fn verifier_rejections_name_the_field() {
    let mut doc = Doc::default();
    doc.numeric("a", 1.0).numeric("bb", 2.0);
    let good = build(&[doc]);
    assert_eq!(parse(&good).samples.len(), 2);
    assert_body_rejected(&good[..good.len() / 2], "out of bounds");
    assert_body_rejected(b"\xff\xff\xff\xff garbage", "file identifier \" gar\"");
    let mut v1 = good.clone();
    v1[4..8].copy_from_slice(b"STHT");
    assert_body_rejected(&v1, "schema version 1");
    // Version 2 (a 16-byte metric with an inline f64) is rejected by its identifier, before
    // anything else is read, with what to send instead.
    let mut v2 = good.clone();
    v2[4..8].copy_from_slice(b"STH2");
    assert_body_rejected(
        &v2,
        "schema version 2 (file identifier STH2) is no longer read; send version 3 (STH3",
    );

    // Invalid UTF-8 in the second string.
    let mut bad = good.clone();
    let at = bad.windows(2).position(|w| w == b"bb").unwrap();
    bad[at] = 0xff;
    assert_body_rejected(&bad, "Utf8");
    assert_body_rejected(&bad, "vector element 1");
    assert_body_rejected(&bad, "`strings`");
}

/// Shared data cannot make a small body decode large: many metrics naming one 4 KiB string stop
/// at the decoded-bytes bound, many references to one document at the verifier's.
#[test]
fn shared_data_cannot_amplify() {
    let mut doc = Doc::default();
    let name = doc.string(&"n".repeat(4000));
    doc.metrics = vec![schema::Metric::new(name, 0, schema::Kind::Int, SET); 20_000];
    doc.ints = vec![1; 20_000];
    let body = build(&[doc]);
    assert!(body.len() < 330_000, "{}", body.len());
    let batch = parse(&body);
    let max = body.len() * 16 + 64 * 1024;
    // Every sample before the bound is kept.
    assert_eq!(batch.samples.len(), max / 4000);
    assert!(batch.stopped());
    let stop = batch.rejected.last().unwrap();
    assert_eq!(
        stop.reason,
        Reason::Bound {
            what: "decoded name and tag bytes (16 × the body + 64 KiB)",
            size: (max / 4000 + 1) * 4000,
            max,
        }
    );
    assert!(
        stop.location
            .starts_with(&format!("document 0, metric {} (`nnn", max / 4000)),
        "{}",
        stop.location
    );

    let mut b = FlatBufferBuilder::new();
    let mut doc = Doc::default();
    doc.string(&"s".repeat(4000));
    doc.numeric("m", 1.0);
    let one = doc.finish(&mut b);
    let body = finish(b, &vec![one; 100_000]);
    assert!(body.len() < 420_000, "{}", body.len());
    assert_body_rejected(&body, "apparent size in bytes");
}

/// Documents sharing one metric vector (the verifier allows it) cannot multiply the samples:
/// the vectors must fit in the body side by side.
#[test]
fn documents_cannot_share_vectors() {
    let mut b = FlatBufferBuilder::new();
    let mut doc = Doc::default();
    for i in 0..100 {
        doc.numeric(&format!("m{i}"), 1.0);
    }
    let one = doc.finish(&mut b);
    let body = finish(b, &[one; 10]);
    let batch = parse(&body);
    assert_eq!(batch.samples, []);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Bound {
            what: "bytes of metric, value, bin, histogram, timestamp, llhist and native \
                   vectors (documents sharing them), against the body's",
            // 6 bytes of `Metric` and 4 of `ints` per metric.
            size: 10 * 100 * (6 + 4),
            max: body.len(),
        }
    );
    // The same documents written out each: accepted.
    let body = build(&vec![doc; 10]);
    assert_eq!(parse(&body).samples.len(), 1000);
}

/// More metrics than a batch may hold: the first `SAMPLES_PER_BATCH_MAX` are read and the rest
/// of the body is rejected, as for JSON.
#[test]
fn batch_bound() {
    let mut doc = Doc::default();
    let name = doc.string("m");
    doc.metrics =
        vec![schema::Metric::new(name, 0, schema::Kind::Int, SET); SAMPLES_PER_BATCH_MAX + 2];
    doc.ints = vec![1; SAMPLES_PER_BATCH_MAX + 2];
    let batch = parse(&build(&[doc]));
    assert_eq!(batch.samples.len(), SAMPLES_PER_BATCH_MAX);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].location,
        format!("document 0, metric {SAMPLES_PER_BATCH_MAX} (`m`)")
    );
}

/// More distinct tag sets than one document can reference: `encode` starts another document,
/// and the metrics come back in order.
#[test]
fn encode_splits_documents_at_the_tag_set_bound() {
    let samples: Vec<Sample> = (0..flat::TAG_SETS_PER_DOCUMENT_MAX + 10)
        .map(|i| Sample {
            name: "m".into(),
            tags: vec![("host".into(), format!("h{i}"))].into(),
            ts_ms: None,
            value: Value::Numeric(i as f64),
            mode: Mode::Set,
        })
        .collect();
    let body = flat::encode(&samples);
    let list = flat::schema::root_as_metric_list(&body).unwrap();
    assert_eq!(list.documents().unwrap().len(), 2);
    let batch = parse(&body);
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples, samples);
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
            Value::Cumulative(_) => panic!("the flat strategy makes no native-bucket totals"),
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
    let mut one = Doc::default();
    one.numeric("a", 1.0);
    let mut tagged = Doc {
        ts_ms: Some(NOW_MS),
        ..Doc::default()
    };
    let tags = tagged.tag_set(&["a:b", "b\"YQ==\":c"]);
    tagged.number("x|ST[h:1]", tags, -5.0, AVERAGE | TS_DOCUMENT);
    tagged.timestamps_ms.push(NOW_MS - 1);
    tagged.push("y", tags, schema::Kind::Null, ACCUMULATE | TS_OWN);
    let mut every = Doc::default();
    every
        .text("t", "text")
        .numeric("u", 7.0)
        .numeric("w", -0.5)
        .numeric("big", 1e12);
    every.hist(
        "h",
        &[(12, -3, 5), (0, 0, 1), (-1, 0, 2)],
        &Histogram::from_bins([(Bin::from_f64(3.0), 9)]).to_bytes(),
        true,
    );
    let mut seeds = vec![
        build(&[one.clone()]),
        build(&[tagged]),
        build(&[every, one]),
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
            std::fs::write(dir.join(format!("seed-v3-{i}")), seed).unwrap();
        }
    }
}

/// Numeric samples `v0`, `v1`, … of the given values, untagged, at receipt.
fn numerics(values: impl IntoIterator<Item = f64>) -> Vec<Sample> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| Sample {
            name: format!("v{i}"),
            tags: vec![].into(),
            ts_ms: None,
            value: Value::Numeric(v),
            mode: Mode::Set,
        })
        .collect()
}

/// Every rejection's reason, as text.
fn reasons_of(batch: &ingest::Batch) -> Vec<String> {
    batch
        .rejected
        .iter()
        .map(|r| r.reason.to_string())
        .collect()
}

/// Running totals in their sender's own buckets (`Kind::Native`) travel as they are, so the
/// core differences them there: `encode` writes them to `native`, `parse` reads them back equal.
#[test]
fn native_running_totals_round_trip_in_their_own_buckets() {
    use hist::convert::{Bounded, Cumulative, Exponential};
    let exponential = Cumulative::Exponential(Exponential {
        scale: 3,
        zero_threshold: 1e-128,
        zero_count: 2,
        count: 9,
        sum: 4.5,
        positive: vec![(1, 3), (4, 1)],
        negative: vec![(-2, 3)],
    });
    let bounded = Cumulative::Bounded(Bounded {
        bounds: vec![0.1, 1.0],
        counts: vec![1, 0, 4],
        count: 5,
        sum: 7.25,
    });
    let sample = |name: &str, value: Cumulative| Sample {
        name: name.to_owned(),
        tags: vec![("job".to_owned(), "api".to_owned())].into(),
        ts_ms: Some(NOW_MS - 1_000),
        value: Value::Cumulative(value),
        mode: Mode::Set,
    };
    let samples = vec![
        sample("rpc_seconds", exponential),
        sample("otel_seconds", bounded),
    ];
    for form in [HistogramForm::Bins, HistogramForm::Llhist] {
        let batch = parse(&flat::encode_with(&samples, form));
        assert_eq!(batch.rejected, []);
        assert_eq!(batch.samples, samples);
    }
}

/// A `Native` entry that does not decode rejects its metric and, since entries say where they
/// end, every later `Native` metric of the document; other kinds read on.
#[test]
fn a_bad_native_entry_rejects_the_native_metrics_after_it() {
    use hist::convert::{Bounded, Cumulative};
    let good = Cumulative::Bounded(Bounded {
        bounds: vec![1.0],
        counts: vec![2, 1],
        count: 3,
        sum: 2.5,
    });
    let mut doc = Doc::default();
    good.encode_into(&mut doc.native);
    doc.push("first", 0, schema::Kind::Native, SET);
    doc.native.push(9);
    doc.push("bad_kind", 0, schema::Kind::Native, SET);
    good.encode_into(&mut doc.native);
    doc.push("after", 0, schema::Kind::Native, SET);
    doc.numeric("plain", 1.0);
    doc.push("missing", 0, schema::Kind::Native, SET);
    let batch = parse(&build(&[doc]));
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["first", "plain"]);
    assert_eq!(batch.samples[0].value, Value::Cumulative(good));
    let reasons = reasons_of(&batch);
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].contains("native running total"),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[1].contains("native[") && reasons[1].contains("missing"),
        "{}",
        reasons[1]
    );
    assert!(reasons[2].contains("missing"), "{}", reasons[2]);
}
