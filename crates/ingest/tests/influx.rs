#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingest::influx::{self, Precision};
use ingest::{Batch, Mode, Options, Reason, Sample, Value};
use proptest::prelude::*;

const NOW_MS: i64 = 1_795_305_600_000;

fn parse(body: &str) -> Batch {
    influx::parse(
        body.as_bytes(),
        &Options::at(NOW_MS),
        Precision::Nanoseconds,
    )
}

fn sample(name: &str, tags: &[(&str, &str)], value: Value, ts_ms: Option<i64>) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: tags
            .iter()
            .map(|(c, v)| (c.to_string(), v.to_string()))
            .collect(),
        ts_ms,
        value,
        mode: Mode::Set,
    }
}

#[test]
fn spec_example_and_every_field_type() {
    let body =
        "cpu,hostname=host_17,region=eu usage_user=58i,usage_system=3i 1795305000000000000\n\
                m f=1.0,f2=3i,f3=\"str\",f4=t,f5=F,f6=18446744073709551615u,f7=-1.5e3";
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let tags = [("hostname", "host_17"), ("region", "eu")];
    let t = Some(1_795_305_000_000);
    assert_eq!(
        batch.samples,
        [
            sample("cpu_usage_user", &tags, Value::Numeric(58.0), t),
            sample("cpu_usage_system", &tags, Value::Numeric(3.0), t),
            sample("m_f", &[], Value::Numeric(1.0), None),
            sample("m_f2", &[], Value::Numeric(3.0), None),
            sample("m_f3", &[], Value::Text("str".into()), None),
            sample("m_f4", &[], Value::Numeric(1.0), None),
            sample("m_f5", &[], Value::Numeric(0.0), None),
            sample("m_f6", &[], Value::Numeric(u64::MAX as f64), None),
            sample("m_f7", &[], Value::Numeric(-1500.0), None),
        ]
    );
}

#[test]
fn escapes() {
    let body = r#"my\ meas\,x,t\ k\=1=v\,1\ 2 f\=k\ 1="a \"q\" \\ \n b",g=1 1795305000000000000"#;
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let s = &batch.samples[0];
    assert_eq!(s.name, "my meas,x_f=k 1");
    assert_eq!(*s.tags, [("t k=1".to_owned(), "v,1 2".to_owned())]);
    assert_eq!(s.value, Value::Text(r#"a "q" \ \n b"#.into()));
    assert_eq!(batch.samples[1].name, "my meas,x_g");
}

#[test]
fn precision() {
    let cases = [
        (Precision::Nanoseconds, "1795305000123456789"),
        (Precision::Microseconds, "1795305000123456"),
        (Precision::Milliseconds, "1795305000123"),
        (Precision::Seconds, "1795305000"),
    ];
    for (precision, ts) in cases {
        let body = format!("m f=1 {ts}");
        let batch = influx::parse(body.as_bytes(), &Options::at(NOW_MS), precision);
        let expected = if precision == Precision::Seconds {
            1_795_305_000_000
        } else {
            1_795_305_000_123
        };
        assert_eq!(batch.samples[0].ts_ms, Some(expected), "{precision:?}");
    }
    assert_eq!(Precision::from_param("us"), Some(Precision::Microseconds));
    assert_eq!(Precision::from_param("h"), None);
}

#[test]
fn bad_lines_are_atomic_and_named() {
    let body = "# comment\nok f=1\nm\nm f\nm f=\nm f=abc\nm f=1x\nm f=NaN\nm f=inf\n\
                m f=99999999999999999999i\nm f=-1u\nm f=1 12\nm f=1 abc\n\
                m,t f=1\nm,=v f=1\n,t=v f=1\nm f=1,g=bad 1795305000000000000\nm f=\"s\"x\nok2 g=2\n\
                m f=\"open";
    let batch = parse(body);
    let names: Vec<&str> = batch.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ok_f", "ok2_g"]);
    assert_eq!(batch.rejected_total, 17);
    assert_eq!(batch.rejected[0].location, "line 3, column 2");
    assert_eq!(batch.rejected[3].location, "line 6, column 5");
    assert!(matches!(batch.rejected[9].reason, Reason::Timestamp { .. }));
}

#[test]
fn empty_crlf_invalid_utf8_and_oversized() {
    assert_eq!(parse(""), Batch::default());
    assert_eq!(parse("\n\n   \r\n"), Batch::default());
    assert_eq!(parse("m f=1\r\nm g=2\r\n").samples.len(), 2);
    let batch = influx::parse(
        b"m f=1\nm,t=\xff f=1\nm g=2",
        &Options::at(NOW_MS),
        Precision::Nanoseconds,
    );
    assert_eq!(batch.samples.len(), 2);
    assert_eq!(batch.rejected[0].location, "line 2, column 5");
    let tags: Vec<String> = (0..=ingest::TAGS_PER_SAMPLE_MAX)
        .map(|i| format!(",t{i}=v"))
        .collect();
    let body = format!(
        "m{} f=1\n{} f=1\nm,t={} f=1",
        tags.concat(),
        "x".repeat(5000),
        "v".repeat(5000)
    );
    assert_eq!(parse(&body).rejected_total, 3);
}

/// Renders an identifier with line protocol escapes.
fn escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if matches!(c, ',' | '=' | ' ') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn arb_value() -> impl Strategy<Value = (String, Value)> {
    prop_oneof![
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| (format!("{v:?}"), Value::Numeric(v))),
        any::<i64>().prop_map(|v| (format!("{v}i"), Value::Numeric(v as f64))),
        any::<u64>().prop_map(|v| (format!("{v}u"), Value::Numeric(v as f64))),
        any::<bool>().prop_map(|v| (v.to_string(), Value::Numeric(f64::from(u8::from(v))))),
        "[ -~é\n]{0,12}".prop_map(|s| {
            let quoted = s.replace('\\', "\\\\").replace('"', "\\\"");
            (format!("\"{quoted}\""), Value::Text(s))
        }),
    ]
}

proptest! {
    #[test]
    fn protocol_like_text_never_panics(text in "[a-z0-9 ,=\"\\\\:|#@;.éiutf+\r\n-]{0,200}") {
        let batch = influx::parse(text.as_bytes(), &Options::at(NOW_MS), Precision::Seconds);
        prop_assert!(batch.samples.len() <= text.len());
        for s in &batch.samples {
            prop_assert!(!s.name.is_empty() && s.name.len() <= ingest::NAME_BYTES_MAX);
            prop_assert!(s.tags.len() <= ingest::TAGS_PER_SAMPLE_MAX);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = influx::parse(&bytes, &Options::at(NOW_MS), Precision::Nanoseconds);
        prop_assert!(batch.samples.len() <= bytes.len());
        prop_assert!(batch.rejected.len() <= ingest::REJECTIONS_LISTED_MAX + 1);
    }

    #[test]
    fn rendered_lines_parse_back(
        lines in prop::collection::vec((
            "[a-z][a-z0-9 ,=_é]{0,10}",
            prop::collection::vec(("[a-z][a-z0-9 ,=]{0,5}", "[a-z0-9 ,=/]{1,6}"), 0..4),
            prop::collection::vec(("[a-z][a-z0-9 ,=_]{0,6}", arb_value()), 1..5),
            prop::option::of(1_600_000_000_000_000_000i64..1_795_305_600_000_000_000),
        ), 0..10)
    ) {
        let mut body = String::new();
        let mut expected = Vec::new();
        for (measurement, tags, fields, ts) in &lines {
            let tag_text: String = tags.iter().map(|(k, v)| format!(",{}={}", escape(k), escape(v))).collect();
            let field_text: Vec<String> = fields.iter().map(|(k, (text, _))| format!("{}={text}", escape(k))).collect();
            let ts_text = ts.map(|t| format!(" {t}")).unwrap_or_default();
            body.push_str(&format!("{}{tag_text} {}{ts_text}\n", escape(measurement), field_text.join(",")));
            let tags: Vec<(&str, &str)> = tags.iter().map(|(c, v)| (c.as_str(), v.as_str())).collect();
            for (key, (_, value)) in fields {
                let ts_ms = ts.map(|t| t.div_euclid(1_000_000));
                expected.push(sample(&format!("{measurement}_{key}"), &tags, value.clone(), ts_ms));
            }
        }
        let batch = parse(&body);
        prop_assert_eq!(&batch.rejected, &[]);
        prop_assert_eq!(batch.samples, expected);
    }
}

#[test]
fn lines_with_the_same_tag_section_share_one_tag_set() {
    let batch =
        parse("m,a=1,b=2 f=1,g=2\nm,a=1,b=2 h=3\nm,a=1,b=3 f=1\nm,a=1,=2 f=1\nm,a=1,=2 f=1");
    let s = &batch.samples;
    assert_eq!(s.len(), 4);
    assert!(
        std::sync::Arc::ptr_eq(&s[0].tags, &s[2].tags),
        "cached across lines"
    );
    assert_eq!(s[3].tags[1], ("b".to_owned(), "3".to_owned()));
    assert_eq!(
        batch.rejected_total, 2,
        "a bad tag section is never cached as good"
    );
}

#[test]
fn a_newline_inside_a_string_field_stays_in_the_line() {
    let body =
        "# a \"comment\nm f=\"two\nlines\",g=1 1795305000000000000\r\nm,t=\"x h=\"a\\\"\n\"\nm k=2";
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let values: Vec<(&str, &Value)> = batch
        .samples
        .iter()
        .map(|s| (s.name.as_str(), &s.value))
        .collect();
    assert_eq!(
        values,
        [
            ("m_f", &Value::Text("two\nlines".into())),
            ("m_g", &Value::Numeric(1.0)),
            ("m_h", &Value::Text("a\"\n".into())),
            ("m_k", &Value::Numeric(2.0)),
        ]
    );
    assert_eq!(*batch.samples[2].tags, [("t".to_owned(), "\"x".to_owned())]);
    let batch = parse("m f=1\nm f=\"open\nm g=2\nm h=3");
    assert_eq!(
        batch.samples.len(),
        1,
        "an unterminated string swallows the rest, then fails"
    );
    assert_eq!(batch.rejected[0].location, "line 2, column 5");
}
