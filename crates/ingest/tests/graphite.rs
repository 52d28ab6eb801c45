#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingest::{graphite, Batch, Mode, Options, Reason, Sample, Value};
use proptest::prelude::*;

const NOW_MS: i64 = 1_795_305_600_000;

fn parse(body: &str) -> Batch {
    graphite::parse(body.as_bytes(), &Options::at(NOW_MS))
}

fn sample(name: &str, tags: &[(&str, &str)], v: f64, ts_ms: Option<i64>) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: tags
            .iter()
            .map(|(c, v)| (c.to_string(), v.to_string()))
            .collect(),
        ts_ms,
        value: Value::Numeric(v),
        mode: Mode::Set,
    }
}

#[test]
fn plain_tagged_and_receipt_time() {
    let body = "servers.a.cpu 12.5 1795305000\n\
                disk.used;host=a;mount=/var 7 1795305000.250\r\n\
                at.receipt 1 -1\nno.ts 2\n  spaced\t3   1795305000  \nlast 4 1795305001";
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let t = Some(1_795_305_000_000);
    assert_eq!(
        batch.samples,
        [
            sample("servers.a.cpu", &[], 12.5, t),
            sample(
                "disk.used",
                &[("host", "a"), ("mount", "/var")],
                7.0,
                Some(1_795_305_000_250)
            ),
            sample("at.receipt", &[], 1.0, None),
            sample("no.ts", &[], 2.0, None),
            sample("spaced", &[], 3.0, t),
            sample("last", &[], 4.0, Some(1_795_305_001_000)),
        ]
    );
}

#[test]
fn bad_lines() {
    let body = "ok 1 1795305000\nonlypath\na b 1795305000\na 1 2 3\na 1 12\na 1 99999999999\n\
                a;host 1\na;=x 1\na nan 1795305000\na 1 1e400\n;t=v 1\nok2 2";
    let batch = parse(body);
    assert_eq!(batch.samples.len(), 2);
    assert_eq!(batch.rejected_total, 10);
    assert_eq!(batch.rejected[1].location, "line 3, column 3");
    assert!(matches!(
        batch.rejected[3].reason,
        Reason::Timestamp { ts_ms: 12_000, .. }
    ));
    assert!(matches!(batch.rejected[4].reason, Reason::Timestamp { .. }));
    assert_eq!(batch.rejected[9].reason, Reason::EmptyName);
}

#[test]
fn empty_invalid_utf8_and_oversized() {
    assert_eq!(parse(""), Batch::default());
    let batch = graphite::parse(b"a 1\n\xc3\x28 1\nb 2\n", &Options::at(NOW_MS));
    assert_eq!(batch.samples.len(), 2);
    assert_eq!(batch.rejected[0].reason, Reason::InvalidUtf8);
    let tags: Vec<String> = (0..=ingest::TAGS_PER_SAMPLE_MAX)
        .map(|i| format!(";t{i}=v"))
        .collect();
    let body = format!(
        "{} 1\nm{} 1\n",
        "x".repeat(ingest::NAME_BYTES_MAX + 1),
        tags.concat()
    );
    assert_eq!(parse(&body).rejected_total, 2);
}

proptest! {
    #[test]
    fn protocol_like_text_never_panics(text in "[a-z0-9 ,=\"\\\\:|#@;.é+\t\r\n-]{0,200}") {
        let batch = graphite::parse(text.as_bytes(), &Options::at(NOW_MS));
        prop_assert!(batch.samples.len() <= text.len());
        for s in &batch.samples {
            prop_assert!(!s.name.is_empty() && s.name.len() <= ingest::NAME_BYTES_MAX);
            prop_assert!(s.tags.len() <= ingest::TAGS_PER_SAMPLE_MAX);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = graphite::parse(&bytes, &Options::at(NOW_MS));
        prop_assert!(batch.samples.len() <= bytes.len());
        prop_assert!(batch.rejected.len() <= ingest::REJECTIONS_LISTED_MAX + 1);
    }

    #[test]
    fn rendered_lines_parse_back(
        lines in prop::collection::vec(
            ("[a-z][a-z0-9._-]{0,20}", prop::collection::vec(("[a-z]{1,5}", "[a-z0-9/.]{0,6}"), 0..4),
             any::<f64>().prop_filter("finite", |v| v.is_finite()),
             prop::option::of(1_600_000_000i64..1_795_305_600)),
            0..20)
    ) {
        let mut body = String::new();
        let mut expected = Vec::new();
        for (path, tags, v, ts) in &lines {
            let tag_text: String = tags.iter().map(|(c, v)| format!(";{c}={v}")).collect();
            let ts_text = ts.map(|t| format!(" {t}")).unwrap_or_default();
            body.push_str(&format!("{path}{tag_text} {v:?}{ts_text}\n"));
            let tags: Vec<(&str, &str)> = tags.iter().map(|(c, v)| (c.as_str(), v.as_str())).collect();
            expected.push(sample(path, &tags, *v, ts.map(|t| t * 1000)));
        }
        let batch = parse(&body);
        prop_assert_eq!(&batch.rejected, &[]);
        prop_assert_eq!(batch.samples, expected);
    }
}

#[test]
fn a_batch_over_the_sample_bound_stops_with_a_rejection() {
    let body = "a 1\n".repeat(ingest::SAMPLES_PER_BATCH_MAX + 1);
    let batch = parse(&body);
    assert_eq!(batch.samples.len(), ingest::SAMPLES_PER_BATCH_MAX);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].location,
        format!("line {}, column 1", ingest::SAMPLES_PER_BATCH_MAX + 1)
    );
}
