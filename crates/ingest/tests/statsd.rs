#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::Histogram;
use ingest::{statsd, Batch, Mode, Options, Reason, Sample, Value};
use proptest::prelude::*;

const NOW_MS: i64 = 1_795_305_600_000;

fn parse(body: &str) -> Batch {
    statsd::parse(body.as_bytes(), &Options::at(NOW_MS))
}

fn sample(name: &str, value: Value, mode: Mode) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: Vec::new().into(),
        ts_ms: None,
        value,
        mode,
    }
}

fn hist_of(values: &[(f64, u64)]) -> Value {
    let mut h = Histogram::new();
    for &(v, n) in values {
        h.insert_n(v, n);
    }
    Value::Histogram(h)
}

#[test]
fn every_type() {
    let body = "hits:3|c\nhits:2|c|@0.5\nload:0.7|g\nload:+2|g\nload:-1.5|g\n\
                users:alice|s\nusers:bob|s\nusers:alice|s\n\
                lat:12|ms|@0.25\nsize:5|h\ndist:1:2:3|d\nstate:up and running|t\n";
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let expected = vec![
        sample("hits", Value::Numeric(3.0), Mode::Accumulate),
        sample("hits", Value::Numeric(4.0), Mode::Accumulate),
        sample("load", Value::Numeric(0.7), Mode::Set),
        sample("load", Value::Numeric(2.0), Mode::Accumulate),
        sample("load", Value::Numeric(-1.5), Mode::Accumulate),
        sample("users", Value::Numeric(1.0), Mode::Accumulate),
        sample("users", Value::Numeric(1.0), Mode::Accumulate),
        sample("lat", hist_of(&[(12.0, 4)]), Mode::Set),
        sample("size", hist_of(&[(5.0, 1)]), Mode::Set),
        sample("dist", hist_of(&[(1.0, 1), (2.0, 1), (3.0, 1)]), Mode::Set),
        sample("state", Value::Text("up and running".into()), Mode::Set),
    ];
    assert_eq!(batch.samples, expected);
}

#[test]
fn dogstatsd_tags_rate_and_timestamp() {
    let batch = parse("page.views:1|c|@0.1|#env:prod,region,host:a:b|T1795305000|c:abc123\r\n");
    assert_eq!(batch.rejected, []);
    let s = &batch.samples[0];
    assert_eq!(s.value, Value::Numeric(10.0));
    assert_eq!(s.ts_ms, Some(1_795_305_000_000));
    let tags: Vec<(&str, &str)> = s
        .tags
        .iter()
        .map(|(c, v)| (c.as_str(), v.as_str()))
        .collect();
    assert_eq!(tags, [("env", "prod"), ("region", ""), ("host", "a:b")]);
}

#[test]
fn bad_lines_are_rejected_with_positions_and_good_ones_kept() {
    let body = "ok:1|c\nnocolon\nx:1\nx:1|q\nx:abc|c\nx:1|c|@0\nx:1|c|@2\nx:NaN|g\n\
                x:1|c|zz\n:1|c\n_e{5,4}:title|text\nx:1|c|T12\nx:1|ms|#:v\nok2:2|c";
    let batch = parse(body);
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ok", "ok2"]);
    assert_eq!(batch.rejected_total, 12);
    let locations: Vec<&str> = batch.rejected.iter().map(|r| r.location.as_str()).collect();
    assert_eq!(locations[0], "line 2, column 8");
    assert_eq!(locations[2], "line 4, column 5");
    assert_eq!(locations[3], "line 5, column 3");
    assert!(matches!(
        batch.rejected[9].reason,
        Reason::Unsupported { .. }
    ));
    assert!(matches!(
        batch.rejected[10].reason,
        Reason::Timestamp { .. }
    ));
}

#[test]
fn empty_input_blank_lines_and_invalid_utf8() {
    assert_eq!(parse(""), Batch::default());
    assert_eq!(parse("\n\r\n  \n"), Batch::default());
    let batch = statsd::parse(b"a:1|c\nb\xff:1|c\nc:1|c", &Options::at(NOW_MS));
    assert_eq!(batch.samples.len(), 2);
    assert_eq!(batch.rejected[0].location, "line 2, column 2");
    assert_eq!(batch.rejected[0].reason, Reason::InvalidUtf8);
}

#[test]
fn oversized_names_and_tag_sets() {
    let long = "x".repeat(ingest::NAME_BYTES_MAX + 1);
    let tags: Vec<String> = (0..=ingest::TAGS_PER_SAMPLE_MAX)
        .map(|i| format!("t{i}:v"))
        .collect();
    let body = format!(
        "{long}:1|c\nm:1|c|#{}\nm:1|c|#k:{}",
        tags.join(","),
        "v".repeat(5000)
    );
    let batch = parse(&body);
    assert!(batch.samples.is_empty());
    assert_eq!(batch.rejected_total, 3);
}

/// A line and the samples it should produce.
fn arb_line() -> impl Strategy<Value = (String, Sample)> {
    let name = "[a-z][a-z0-9._]{0,12}";
    let tags = prop::collection::vec(("[a-z]{1,5}", "[a-z0-9.]{0,5}"), 0..4);
    (
        name,
        tags,
        -1.0e6f64..1.0e6,
        prop_oneof![Just("c"), Just("g"), Just("ms")],
    )
        .prop_map(|(name, tags, v, kind)| {
            let tag_text: Vec<String> = tags.iter().map(|(c, v)| format!("{c}:{v}")).collect();
            let suffix = if tags.is_empty() {
                String::new()
            } else {
                format!("|#{}", tag_text.join(","))
            };
            let (value, mode, v) = match kind {
                "c" => (Value::Numeric(v), Mode::Accumulate, v),
                // A signed gauge is a delta; an unsigned one sets.
                "g" => (Value::Numeric(v.abs()), Mode::Set, v.abs()),
                _ => (hist_of(&[(v, 1)]), Mode::Set, v),
            };
            let line = format!("{name}:{v:?}|{kind}{suffix}");
            (
                line,
                Sample {
                    name,
                    tags: tags.into(),
                    ts_ms: None,
                    value,
                    mode,
                },
            )
        })
}

proptest! {
    #[test]
    fn protocol_like_text_never_panics(text in "[a-z0-9 ,=\"\\\\:|#@;.éT+\r\n-]{0,200}") {
        let batch = statsd::parse(text.as_bytes(), &Options::at(NOW_MS));
        prop_assert!(batch.samples.len() <= text.len());
        for s in &batch.samples {
            prop_assert!(!s.name.is_empty() && s.name.len() <= ingest::NAME_BYTES_MAX);
            prop_assert!(s.tags.len() <= ingest::TAGS_PER_SAMPLE_MAX);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = statsd::parse(&bytes, &Options::at(NOW_MS));
        prop_assert!(batch.samples.len() <= bytes.len());
        prop_assert!(batch.rejected.len() <= ingest::REJECTIONS_LISTED_MAX + 1);
        for s in &batch.samples {
            prop_assert!(!s.name.is_empty() && s.name.len() <= ingest::NAME_BYTES_MAX);
        }
    }

    #[test]
    fn rendered_lines_parse_back(lines in prop::collection::vec(arb_line(), 0..20), crlf: bool) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let body: Vec<&str> = lines.iter().map(|(l, _)| l.as_str()).collect();
        let batch = parse(&body.join(eol));
        prop_assert_eq!(&batch.rejected, &[]);
        let expected: Vec<Sample> = lines.into_iter().map(|(_, s)| s).collect();
        prop_assert_eq!(batch.samples, expected);
    }
}

#[test]
fn rejections_are_listed_up_to_the_bound_and_all_counted() {
    let body = "bad\n".repeat(ingest::REJECTIONS_LISTED_MAX * 3);
    let batch = parse(&body);
    assert_eq!(batch.rejected.len(), ingest::REJECTIONS_LISTED_MAX);
    assert_eq!(batch.rejected_total, ingest::REJECTIONS_LISTED_MAX * 3);
}

#[test]
fn tag_sections_are_shared_and_several_sections_add_up() {
    let batch = parse("a:1|c|#env:prod\nb:2|g|#env:prod\nc:3|c|#x:1|#y:2");
    assert_eq!(batch.rejected, []);
    let s = &batch.samples;
    assert!(std::sync::Arc::ptr_eq(&s[0].tags, &s[1].tags));
    let tags: Vec<(&str, &str)> = s[2]
        .tags
        .iter()
        .map(|(c, v)| (c.as_str(), v.as_str()))
        .collect();
    assert_eq!(tags, [("x", "1"), ("y", "2")]);
}
