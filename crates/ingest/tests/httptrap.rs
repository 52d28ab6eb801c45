#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::Histogram;
use ingest::{httptrap, Batch, Mode, Options, Reason, Sample, Value, JSON_DEPTH_MAX};
use proptest::prelude::*;

/// 2026-11-22T00:00:00Z, the receipt time of every test.
const NOW_MS: i64 = 1_795_305_600_000;

fn parse(body: &str) -> Batch {
    httptrap::parse(body.as_bytes(), &Options::at(NOW_MS))
}

fn sample(name: &str, value: Value) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: Vec::new().into(),
        ts_ms: None,
        value,
        mode: Mode::Set,
    }
}

fn num(name: &str, v: f64) -> Sample {
    sample(name, Value::Numeric(v))
}

fn only_samples(body: &str) -> Vec<Sample> {
    let batch = parse(body);
    assert_eq!(batch.rejected, [], "{body}");
    batch.samples
}

#[test]
fn spec_example_covers_every_form() {
    let body = r#"{ "requests": 123853, "version": "1.alpha", "ok": true,
  "big": { "_type": "L", "_value": "18426744073709551616" },
  "db`latency|ST[db:orders]": { "_type": "h", "_value": ["H[1.2e-03]=5", 0.004, "AAQKAAABFAAAAR4AAAEoAAB4"] },
  "cum": { "_type": "H", "_value": ["H[4]=120"] },
  "late": { "_ts": 1700000000123, "_type": "n", "_value": 42 },
  "bytes": { "_type": "L", "_value": 125, "_fl": "+" } }"#;

    let mut latency = Histogram::new();
    latency.insert_n(1.2e-3, 5);
    latency.insert(0.004);
    latency.merge(&Histogram::from_base64("AAQKAAABFAAAAR4AAAEoAAB4").unwrap());
    assert_eq!(
        latency.sample_count(),
        5 + 1 + 123,
        "the base64 holds 1, 2, 3 and 120 samples"
    );
    let mut cum = Histogram::new();
    cum.insert_n(4.0, 120);

    let expected = vec![
        num("requests", 123853.0),
        sample("version", Value::Text("1.alpha".into())),
        num("ok", 1.0),
        num("big", 18_426_744_073_709_551_616_u64 as f64),
        Sample {
            tags: vec![("db".into(), "orders".into())].into(),
            ..sample("db`latency", Value::Histogram(latency))
        },
        sample("cum", Value::CumulativeHistogram(cum)),
        Sample {
            ts_ms: Some(1_700_000_000_123),
            ..num("late", 42.0)
        },
        Sample {
            mode: Mode::Accumulate,
            ..num("bytes", 125.0)
        },
    ];
    assert_eq!(only_samples(body), expected);
}

#[test]
fn flattening_and_plain_typing() {
    let body = r#"{"a":{"b":1,"c":[1,1.2,{"d":-3}]},"s":"12.5","n":null,"f":false,
        "neg":-9223372036854775808,"u":18446744073709551615,"huge":123456789012345678901234567890,
        "nan":"NaN","inf":"inf","e":1e3,"dup":1,"dup":2}"#;
    let got = only_samples(body);
    let names: Vec<&str> = got.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "a`b", "a`c`0", "a`c`1", "a`c`2`d", "s", "n", "f", "neg", "u", "huge", "nan", "inf",
            "e", "dup", "dup"
        ]
    );
    let values: Vec<&Value> = got.iter().map(|s| &s.value).collect();
    assert_eq!(values[3], &Value::Numeric(-3.0));
    assert_eq!(
        values[4],
        &Value::Numeric(12.5),
        "a numeric-looking string is a number"
    );
    assert_eq!(values[5], &Value::Null);
    assert_eq!(values[6], &Value::Numeric(0.0));
    assert_eq!(values[7], &Value::Numeric(i64::MIN as f64));
    assert_eq!(values[8], &Value::Numeric(u64::MAX as f64));
    assert_eq!(
        values[9],
        &Value::Numeric(1.2345678901234568e29),
        "beyond u64: a double"
    );
    assert_eq!(
        values[10],
        &Value::Text("NaN".into()),
        "NaN is not a JSON number"
    );
    assert_eq!(values[11], &Value::Text("inf".into()));
    assert_eq!(values[12], &Value::Numeric(1000.0));
    assert_eq!(
        (values[13], values[14]),
        (&Value::Numeric(1.0), &Value::Numeric(2.0))
    );
}

#[test]
fn integers_are_exact_to_2_pow_53() {
    let got = only_samples(r#"{"a":9007199254740993,"b":"9007199254740992"}"#);
    assert_eq!(got[1].value, Value::Numeric(9_007_199_254_740_992.0));
    // 2^53 + 1 rounds to even in f64; the store keeps f64, so this is the documented limit.
    assert_eq!(got[0].value, Value::Numeric(9_007_199_254_740_992.0));
}

#[test]
fn concatenated_documents_and_comments() {
    let body = "// leading\n{\"a\":1}{\"b\":2} /* between */\r\n{\"c\" /* in */ : 3} // end";
    let got = only_samples(body);
    assert_eq!(got, [num("a", 1.0), num("b", 2.0), num("c", 3.0)]);
    assert_eq!(only_samples(""), []);
    assert_eq!(only_samples("  // nothing\n"), []);
    assert_eq!(only_samples("{}"), []);
}

#[test]
fn every_type_code() {
    let body = r#"{"i":{"_type":"i","_value":-2147483648},"I":{"_type":"I","_value":"4294967295"},
        "l":{"_type":"l","_value":-5},"n":{"_type":"n","_value":[1,2,"6"]},
        "s":{"_type":"s","_value":"up"},"s2":{"_type":"s","_value":12},
        "h":{"_type":"h","_value":3.5},"hn":{"_type":"h","_value":null},
        "avg":{"_type":"n","_value":2,"_fl":"~"}}"#;
    let got = only_samples(body);
    let values: Vec<&Value> = got.iter().map(|s| &s.value).collect();
    assert_eq!(values[0], &Value::Numeric(-2_147_483_648.0));
    assert_eq!(values[1], &Value::Numeric(4_294_967_295.0));
    assert_eq!(values[2], &Value::Numeric(-5.0));
    assert_eq!(values[3], &Value::Numeric(3.0), "arrays are averaged");
    assert_eq!(values[4], &Value::Text("up".into()));
    assert_eq!(values[5], &Value::Text("12".into()));
    let mut one = Histogram::new();
    one.insert(3.5);
    assert_eq!(values[6], &Value::Histogram(one));
    assert_eq!(values[7], &Value::Null);
    assert_eq!(got[8].mode, Mode::Average);
}

#[test]
fn per_key_errors_keep_the_rest_of_the_document() {
    let body = r#"{"ok1":1,
        "t":{"_type":"x","_value":1},
        "i":{"_type":"i","_value":2147483648},
        "I":{"_type":"I","_value":-1},
        "L":{"_type":"L","_value":"18446744073709551616"},
        "d":{"_type":"i","_value":1.5},
        "fl":{"_type":"n","_value":1,"_fl":"*"},
        "ts":{"_type":"n","_value":1,"_ts":1.5},
        "old":{"_type":"n","_value":1,"_ts":1000},
        "ahead":{"_type":"n","_value":1,"_ts":"99999999999999"},
        "mix":{"_type":"n","_value":1,"other":2},
        "novalue":{"_type":"n"},
        "empty":{"_type":"n","_value":[]},
        "badh":{"_type":"h","_value":["H[x]=1"]},
        "badh2":{"_type":"h","_value":[true]},
        "tags":{"_type":"n","_value":1,"_tags":"a:b"},
        "tag2":{"_type":"n","_value":1,"_tags":[":b"]},
        "st|ST[a:b]x":1,
        "big":1e400,
        "ok2":2}"#;
    let batch = parse(body);
    assert_eq!(batch.samples, [num("ok1", 1.0), num("ok2", 2.0)]);
    assert_eq!(batch.rejected_total, 18);
    assert!(!batch.stopped());
    let first = &batch.rejected[0];
    assert_eq!(first.location, "document 1, key `t`");
    assert!(matches!(&first.reason, Reason::BadType { found } if found == "x"));
    assert!(matches!(
        batch.rejected[7].reason,
        Reason::Timestamp { ts_ms: 1000, .. }
    ));
    for r in &batch.rejected {
        assert!(!r.to_string().is_empty());
    }
}

#[test]
fn tags_from_name_and_tags_key() {
    let body = r#"{"m|ST[a:1,b\"eA==\":b\"eQ==\"]":{"_type":"n","_value":1,"_tags":["c:3","d"]}}"#;
    let got = only_samples(body);
    let tags: Vec<(&str, &str)> = got[0]
        .tags
        .iter()
        .map(|(c, v)| (c.as_str(), v.as_str()))
        .collect();
    assert_eq!(got[0].name, "m");
    assert_eq!(tags, [("a", "1"), ("x", "y"), ("c", "3"), ("d", "")]);
}

#[test]
fn histogram_elements_mix() {
    let body = r#"{"h":{"_type":"h","_value":["+12e-004=5","0.5","NaN=1",2]}}"#;
    let got = only_samples(body);
    let Value::Histogram(h) = &got[0].value else {
        panic!("{got:?}")
    };
    assert_eq!(h.sample_count(), 8);
    assert_eq!(h.nan_count(), 1);
}

#[test]
fn syntax_error_rejects_the_rest_with_its_position() {
    // The document holding the error is rejected whole: it is not known to be what was meant.
    let batch = parse("{\"a\":1}\n{\"b\":2,\n \"c\" 3}{\"d\":4}");
    assert_eq!(batch.samples, [num("a", 1.0)]);
    assert!(batch.stopped());
    assert_eq!(
        batch.rejected[0].location,
        "document 2, line 3, column 6 (byte 21)"
    );
    assert_eq!(
        batch.rejected[0].reason,
        Reason::Syntax {
            expected: "':' after an object key"
        }
    );
    for truncated in [
        "{",
        "{\"a\"",
        "{\"a\":",
        "{\"a\":[1,",
        "{\"a\":\"x",
        "{\"a\":1 /*",
    ] {
        let batch = parse(truncated);
        assert!(batch.stopped(), "{truncated}");
        assert!(batch.samples.is_empty());
    }
    assert!(parse("[1,2]").stopped(), "a document is an object");
}

#[test]
fn invalid_utf8_rejects_its_document_only() {
    let mut body = b"{\"a\":1}{\"b\":\"".to_vec();
    body.extend_from_slice(&[0xff, 0xfe]);
    body.extend_from_slice(b"\",\"c\":1}{\"d\":2}");
    let batch = httptrap::parse(&body, &Options::at(NOW_MS));
    assert_eq!(batch.samples, [num("a", 1.0), num("d", 2.0)]);
    assert_eq!(batch.rejected[0].reason, Reason::InvalidUtf8);
    assert_eq!(
        batch.rejected[0].location,
        "document 2, line 1, column 14 (byte 13)"
    );
}

#[test]
fn nesting_deeper_than_the_bound_rejects_the_document() {
    let nest = |depth: usize| {
        let mut s = String::from("{\"k\":0}");
        for _ in 1..depth {
            s = format!("{{\"k\":{s}}}");
        }
        s
    };
    let ok = only_samples(&nest(JSON_DEPTH_MAX));
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].name.matches('`').count(), JSON_DEPTH_MAX - 1);
    let body = format!("{}{{\"after\":1}}", nest(JSON_DEPTH_MAX + 1));
    let batch = parse(&body);
    assert_eq!(batch.samples, [num("after", 1.0)]);
    assert!(matches!(batch.rejected[0].reason, Reason::Bound { .. }));
    // Very deep input costs no recursion.
    let deep = format!("{{\"k\":{}{}}}", "[".repeat(200_000), "]".repeat(200_000));
    assert!(parse(&deep).samples.is_empty());
}

#[test]
fn oversized_names_and_tag_sets() {
    let long = "x".repeat(ingest::NAME_BYTES_MAX + 1);
    let tags: Vec<String> = (0..=ingest::TAGS_PER_SAMPLE_MAX)
        .map(|i| format!("\"t{i}:v\""))
        .collect();
    let body = format!(
        r#"{{"{long}":1,"m":{{"_type":"n","_value":1,"_tags":[{}]}},"ok":1}}"#,
        tags.join(",")
    );
    let batch = parse(&body);
    assert_eq!(batch.samples, [num("ok", 1.0)]);
    assert_eq!(batch.rejected_total, 2);
}

fn arb_json() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| format!("{v:e}")),
        "[a-z0-9`|\\[\\]:\\\\\"]{0,8}".prop_map(|s| format!("{s:?}")),
        Just("true".to_owned()),
        Just("null".to_owned()),
        Just(r#"{"_type":"h","_value":["H[1]=2",3,"AAQKAAABFAAAAR4AAAEoAAB4"]}"#.to_owned()),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z_]{0,6}", inner), 0..6).prop_map(|v| {
                let members: Vec<String> = v.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

proptest! {
    /// Histograms uploaded as `H[..]=n` strings, in storage order or shuffled, with bare or
    /// spaced separators, a number or a differently spelled bin among them: the parsed
    /// histogram is the one `hist` built (the in-place bytes reader and the token walk agree).
    #[test]
    fn histogram_text_arrays_in_every_spelling(
        pairs in prop::collection::vec(((-99i8..=99), (-128i8..=127), 1u64..100_000), 0..60),
        shuffle in any::<bool>(),
        spaced in any::<bool>(),
        extra in prop::option::of(-1e6f64..1e6),
        long_form in any::<bool>(),
    ) {
        let bins: Vec<(hist::Bin, u64)> = pairs
            .iter()
            .filter_map(|&(val, exp, count)| Some((hist::Bin::new(val, exp)?, count)))
            .collect();
        let mut expected = Histogram::from_bins(bins.iter().copied());
        let mut elements: Vec<String> =
            expected.to_text().iter().map(|t| format!("\"{t}\"")).collect();
        if shuffle {
            elements.reverse();
        }
        if let Some(extra) = extra {
            elements.insert(elements.len() / 2, format!("{extra:?}"));
            expected.insert(extra);
        }
        if long_form {
            // One bin written with three exponent digits: not the fixed shape.
            elements.push("\"H[1.5e+000]=2\"".to_owned());
            expected.insert_n(1.5, 2);
        }
        let separator = if spaced { ", " } else { "," };
        let body = format!(
            "{{\"h\": {{\"_type\": \"h\", \"_value\": [{}]}}}}",
            elements.join(separator)
        );
        let batch = parse(&body);
        prop_assert_eq!(&batch.rejected, &[]);
        prop_assert_eq!(&batch.samples[0].value, &Value::Histogram(expected));
    }

    /// `_value` arrays of `H[..]=n` strings under every `_type`, at the top level or nested,
    /// with other keys beside them or not: written with bare commas (read ahead by the
    /// tokenizer) they give exactly the batch they give with spaced commas (read token by
    /// token), samples and rejections alike.
    #[test]
    fn bin_arrays_read_ahead_or_token_by_token_alike(
        pairs in prop::collection::vec(((-99i8..=99), (-128i8..=127), 0u64..100_000), 1..20),
        kind in prop::sample::select(vec!["h", "H", "n", "i", "L", "s", "x"]),
        nesting in 0usize..3,
        other_key in any::<bool>(),
        repeat in any::<bool>(),
    ) {
        let elements: Vec<String> = pairs
            .iter()
            .filter_map(|&(val, exp, count)| {
                let bin = hist::Bin::new(val, exp)?;
                Some(format!("\"H[{}]={count}\"", bin.edge_text()))
            })
            .collect();
        prop_assume!(!elements.is_empty());
        let render = |separator: &str| {
            let array = format!("[{}]", elements.join(separator));
            let extra = if other_key { ",\"y\":1" } else { "" };
            let value = if repeat { format!("[],\"_value\":{array}") } else { array };
            let mut body = format!("\"_type\":\"{kind}\",\"_value\":{value}{extra}");
            for level in 0..nesting {
                body = format!("\"k{level}\":{{{body}}}");
            }
            format!("{{{body}}}")
        };
        let (compact, spaced) = (parse(&render(",")), parse(&render(", ")));
        prop_assert_eq!(&compact.samples, &spaced.samples);
        prop_assert_eq!(compact.rejected_total, spaced.rejected_total);
        // A rejection may quote the array, spaces and all (cut at 64 bytes): compared up to
        // the quote.
        let rejections = |batch: &Batch| -> Vec<(String, String)> {
            batch
                .rejected
                .iter()
                .map(|r| {
                    let reason = r.reason.to_string();
                    let before_quote = reason.split("got `").next().unwrap_or("").to_owned();
                    (r.location.clone(), before_quote)
                })
                .collect()
        };
        prop_assert_eq!(rejections(&compact), rejections(&spaced));
        if kind != "s" {
            // Only `s` quotes the whole array; the numeric types quote the first element.
            prop_assert_eq!(&compact.rejected, &spaced.rejected);
        }
        if kind == "h" && nesting > 0 && !other_key {
            prop_assert_eq!(compact.rejected.len(), 0);
            prop_assert_eq!(compact.samples.len(), 1);
        }
    }

    #[test]
    fn protocol_like_text_never_panics(text in "[a-z0-9 ,:\"\\\\{}\\[\\]/*|._é\n-]{0,200}") {
        let batch = httptrap::parse(text.as_bytes(), &Options::at(NOW_MS));
        prop_assert!(batch.samples.len() <= text.len());
        for s in &batch.samples {
            prop_assert!(!s.name.is_empty() && s.name.len() <= ingest::NAME_BYTES_MAX);
            prop_assert!(s.tags.len() <= ingest::TAGS_PER_SAMPLE_MAX);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = httptrap::parse(&bytes, &Options::at(NOW_MS));
        prop_assert!(batch.samples.len() <= bytes.len());
        prop_assert!(batch.rejected.len() <= ingest::REJECTIONS_LISTED_MAX + 1);
    }

    #[test]
    fn generated_documents_parse_and_mutations_never_panic(
        doc in arb_json(), cut in any::<prop::sample::Index>(), flip in any::<u8>()
    ) {
        let body = format!("{{\"root\":{doc}}}");
        let batch = parse(&body);
        prop_assert!(!batch.stopped(), "{body}: {:?}", batch.rejected);
        for s in &batch.samples {
            prop_assert!(s.name.starts_with("root"));
            prop_assert!(s.tags.len() <= ingest::TAGS_PER_SAMPLE_MAX);
        }
        let mut bytes = body.into_bytes();
        let at = cut.index(bytes.len());
        bytes[at] ^= flip;
        let _ = httptrap::parse(&bytes, &Options::at(NOW_MS));
        let _ = httptrap::parse(&bytes[..at], &Options::at(NOW_MS));
    }
}

#[test]
fn stream_tags_on_a_parent_key_apply_to_its_children() {
    let body = r#"{"cpu|ST[host:a]":{"user|ST[mode:u]":1,"sys":2},"x|ST[a:b]y":{"z":3},"w":4}"#;
    let batch = parse(body);
    let got: Vec<(&str, usize)> = batch
        .samples
        .iter()
        .map(|s| (s.name.as_str(), s.tags.len()))
        .collect();
    assert_eq!(got, [("cpu`user", 2), ("cpu`sys", 1), ("w", 0)]);
    assert_eq!(
        batch.samples[0].tags[1],
        ("mode".to_owned(), "u".to_owned())
    );
    assert_eq!(batch.rejected[0].location, "document 1, key `x|ST[a:b]y`");
}

/// Values under one key share its tag list; a sibling with its own tags, and the keys after
/// it, get the right lists.
#[test]
fn tag_lists_are_shared_and_stay_right_across_siblings() {
    let body = r#"{"a|ST[x:1]":{"b":1,"c|ST[y:2]":2,"d":3,"e":{"_type":"n","_value":4,
        "_tags":["z:3"]},"f":5},"g":6}"#;
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let pair = |c: &str, v: &str| (c.to_owned(), v.to_owned());
    let tags: Vec<Vec<(String, String)>> = batch.samples.iter().map(|s| s.tags.to_vec()).collect();
    assert_eq!(
        tags,
        [
            vec![pair("x", "1")],
            vec![pair("x", "1"), pair("y", "2")],
            vec![pair("x", "1")],
            vec![pair("x", "1"), pair("z", "3")],
            vec![pair("x", "1")],
            vec![],
        ]
    );
    assert!(std::sync::Arc::ptr_eq(
        &batch.samples[2].tags,
        &batch.samples[4].tags
    ));

    // Deeper: tags added and dropped at three levels, twice over.
    let body = r#"{"a|ST[x:1]":{"b|ST[y:2]":{"c":1,"d|ST[z:3]":2,"e":3},"f":4},
        "g|ST[w:4]":5,"h":6,"a|ST[x:1]":{"b|ST[y:2]":{"c":1}}}"#;
    let batch = parse(body);
    assert_eq!(batch.rejected, []);
    let names: Vec<Vec<&str>> = batch
        .samples
        .iter()
        .map(|s| s.tags.iter().map(|(c, _)| c.as_str()).collect())
        .collect();
    let expected: [&[&str]; 7] = [
        &["x", "y"],
        &["x", "y", "z"],
        &["x", "y"],
        &["x"],
        &["w"],
        &[],
        &["x", "y"],
    ];
    assert_eq!(names, expected);
    assert!(batch.samples.iter().all(|s| s
        .tags
        .iter()
        .all(|(c, v)| !v.is_empty() && v.len() == 1 && !c.is_empty())));
}

#[test]
fn many_bad_documents_are_counted_but_listed_up_to_the_bound() {
    let body = b"{\"a\":\"\xff\"}\n".repeat(100_000);
    let batch = httptrap::parse(&body, &Options::at(NOW_MS));
    assert_eq!(batch.rejected_total, 100_000);
    assert_eq!(batch.rejected.len(), ingest::REJECTIONS_LISTED_MAX);
    assert_eq!(
        batch.rejected[99].location,
        "document 100, line 100, column 7 (byte 996)"
    );
}

#[allow(dead_code)]
mod fuzz_checks;

/// Keys plain and with `|ST[…]` tags.
fn arb_tagged_key() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "[a-c]{1,2}",
        "[a-c]{1,2}\\|ST\\[[a-c]{1,2}:[a-c]{0,2}\\]",
        "[a-c]\\|ST\\[[a-c]:[a-c],[a-c]:[a-c]\\]",
    ]
}

fn object(members: &[(String, String)]) -> String {
    let members: Vec<String> = members.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
    format!("{{{}}}", members.join(","))
}

/// Documents whose keys carry `|ST[…]` tags and whose values carry `_tags`, interleaved with
/// plain values and `H[..]=n` arrays: what `tags_id`s and lent bins must get right.
fn arb_tagged_json() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        (0u32..100).prop_map(|v| v.to_string()),
        "[a-c]{1,3}".prop_map(|s| format!("{s:?}")),
        (prop::collection::vec(("[a-c]", "[a-c]"), 1..3), 0u32..9).prop_map(|(tags, v)| {
            let tags: Vec<String> = tags.iter().map(|(c, v)| format!("\"{c}:{v}\"")).collect();
            format!(
                r#"{{"_type":"n","_value":{v},"_tags":[{}]}}"#,
                tags.join(",")
            )
        }),
        prop::collection::vec((1u8..10, 0u8..10, 1u32..50), 0..5).prop_map(|bins| {
            let bins: Vec<String> = bins
                .iter()
                .map(|(m0, m1, c)| format!("\"H[{m0}.{m1}e+00]={c}\""))
                .collect();
            format!(r#"{{"_type":"h","_value":[{}]}}"#, bins.join(","))
        }),
    ];
    let value = leaf.prop_recursive(4, 48, 6, |inner| {
        prop::collection::vec((arb_tagged_key(), inner), 0..6).prop_map(|m| object(&m))
    });
    prop::collection::vec((arb_tagged_key(), value), 0..8).prop_map(|m| object(&m))
}

proptest! {
    /// `visit` hands over exactly `parse`'s samples and rejections, equal `tags_id`s carry
    /// equal tags and do not come back, and lent bins are in storage order.
    #[test]
    fn visit_keeps_the_promises_of_its_borrowed_metrics(
        documents in prop::collection::vec(arb_tagged_json(), 1..4),
    ) {
        let body = documents.join("\n");
        fuzz_checks::httptrap(body.as_bytes());
    }
}

/// A `_value` that is one base64 string (read in place into kept buffers, then lent): every
/// form the binary reader merges or drops, whitespace, escapes, and the strings that are no
/// base64 histogram, each as one value would be read on its own.
#[test]
fn lone_base64_values_read_as_histograms() {
    use base64_simd::STANDARD;
    let b64 = |bytes: &[u8]| STANDARD.encode_to_string(bytes);
    // Bins as `val, exp, width, count…`: 1.2e+00 ×3, then 1.1e+00 ×2 and 1.2e+00 ×4 again
    // (out of order, repeated), a zero count, and an invalid bin (val 5).
    let unsorted = b64(&[
        0, 5, 12, 0, 0, 3, 11, 0, 0, 2, 12, 0, 0, 4, 13, 0, 0, 0, 5, 0, 0, 9,
    ]);
    let trailing = b64(&[0, 1, 12, 0, 0, 3, 7]);
    let canonical = {
        let mut h = Histogram::new();
        h.insert_n(0.25, 7);
        h.insert_n(3.0e-6, 2);
        h.to_base64()
    };
    let spaced = format!("{} {}", &canonical[..4], &canonical[4..]);
    let escaped = canonical.replace('/', "\\/");
    let body = format!(
        r#"{{"a":{{"_type":"h","_value":"{canonical}"}},"b":{{"_type":"h","_value":"{unsorted}"}},
        "c":{{"_type":"H","_value":"{spaced}","_ts":1795305600000}},"d":{{"_type":"h","_value":"{escaped}"}},
        "e":{{"_type":"h","_value":"12"}},"f":{{"_type":"h","_value":"AA!A"}},
        "g":{{"_type":"h","_value":"{trailing}"}},"h":{{"_type":"h","_value":"AAA="}},
        "i":{{"_type":"h","_value":"{canonical}"}}}}"#
    );
    let batch = parse(&body);
    let hist_of = |name: &str| {
        let sample = batch.samples.iter().find(|s| s.name == name).unwrap();
        match &sample.value {
            Value::Histogram(h) | Value::CumulativeHistogram(h) => h.clone(),
            other => panic!("{name}: {other:?}"),
        }
    };
    let expected = Histogram::from_base64(&canonical).unwrap();
    assert_eq!(expected.sample_count(), 9);
    assert_eq!(hist_of("a"), expected);
    assert_eq!(
        hist_of("i"),
        expected,
        "the same text after others: buffers reused"
    );
    assert_eq!(hist_of("c"), expected, "whitespace is skipped");
    assert_eq!(hist_of("d"), expected, "an escaped string reads the same");
    let mut merged = Histogram::new();
    merged.insert_n(1.2, 7);
    merged.insert_n(1.1, 2);
    assert_eq!(
        hist_of("b"),
        merged,
        "repeats merged, zero and invalid bins dropped"
    );
    let mut twelve = Histogram::new();
    twelve.insert(12.0);
    assert_eq!(hist_of("e"), twelve, "a whole number is one sample");
    assert_eq!(hist_of("h"), Histogram::new(), "no bins");
    let rejected: Vec<&str> = batch.rejected.iter().map(|r| r.location.as_str()).collect();
    assert_eq!(batch.rejected.len(), 2, "{rejected:?}");
    assert!(
        rejected[0].contains('f') && rejected[1].contains('g'),
        "{rejected:?}"
    );
    assert_eq!(batch.samples.len(), 7);
}
