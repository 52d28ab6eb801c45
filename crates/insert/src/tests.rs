#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use hist::Histogram;
use ingest::influx::Precision;
use ingest::remote_write::proto;
use ingest::{Mode, Name, Options, Sample, Value};
use prost::Message;
use store::key::{StreamKey, Tag};
use store::SeriesId;
use store::{KeyRef, Store, StoreOptions};

use super::*;

/// 2026-11-22T00:00:00Z.
const NOW_MS: i64 = 1_795_305_600_000;

type Row = (String, i64, store::Value);

/// The batch's samples; a key pushed by id as `#id`.
fn rows(inserted: &Inserted) -> Vec<Row> {
    inserted
        .batch
        .samples()
        .map(|(key, ts_ms, value)| {
            let key = match key {
                KeyRef::Text(text) => text.to_owned(),
                KeyRef::Id(id) => format!("#{}", id.0),
            };
            (key, ts_ms, value.into_owned())
        })
        .collect()
}

fn numbers(inserted: &Inserted) -> Vec<(String, i64, f64)> {
    rows(inserted)
        .into_iter()
        .filter_map(|(key, ts, v)| match v {
            store::Value::Numeric(x) => Some((key, ts, x)),
            _ => None,
        })
        .collect()
}

fn setup(extra: &[Tag]) -> Setup<'_> {
    Setup {
        now_ms: NOW_MS,
        extra_tags: extra,
        cache: None,
        names: None,
    }
}

/// Owned samples and rejections lent to a sink as a parser would (each tag list its own id).
fn lend(batch: &ingest::Batch, sink: &mut impl Sink) {
    let mut ids: HashMap<usize, u64> = HashMap::new();
    for s in &batch.samples {
        let next = ids.len() as u64;
        let id = *ids
            .entry(Arc::as_ptr(&s.tags) as *const () as usize)
            .or_insert(next);
        let series = Series {
            name: Name::new(&s.name),
            tags: ingest::TagsRef::List { id, tags: &s.tags },
            lookup: Lookup::NotAsked,
            raw: None,
            index: None,
        };
        let text;
        let value = match &s.value {
            Value::Null => ValueRef::Null,
            Value::Numeric(v) => ValueRef::Numeric(*v),
            Value::Text(t) => {
                text = t.clone();
                ValueRef::Text(&text)
            }
            Value::Histogram(h) => ValueRef::Histogram(HistogramRef::Built(h.clone())),
            Value::CumulativeHistogram(h) => {
                ValueRef::CumulativeHistogram(HistogramRef::Built(h.clone()))
            }
            Value::Cumulative(c) => ValueRef::Cumulative(c.clone()),
        };
        let point = Point {
            ts_ms: s.ts_ms,
            value,
            mode: s.mode,
        };
        if !sink.sample(&series, point) {
            return;
        }
    }
    for r in &batch.rejected {
        let scope = if r.rest_of_body {
            Scope::Rest
        } else {
            Scope::One
        };
        sink.reject(&|| r.location.clone(), r.reason.clone(), scope);
    }
}

/// `batch` through the sink, with `extra` tags and no cache.
fn insert_owned(batch: &ingest::Batch, extra: &[Tag]) -> Inserted {
    insert(&setup(extra), Buffers::default(), |sink| lend(batch, sink))
}

fn sample(name: &str, ts_ms: Option<i64>, value: f64, mode: Mode) -> Sample {
    Sample {
        name: name.to_owned(),
        tags: Arc::from(vec![("host".to_owned(), "a".to_owned())]),
        ts_ms,
        value: Value::Numeric(value),
        mode,
    }
}

fn histogram(values: &[f64]) -> Histogram {
    let mut h = Histogram::new();
    for &v in values {
        h.insert(v);
    }
    h
}

fn check_tag() -> Vec<Tag> {
    vec![Tag::new("__check", "web-1").unwrap()]
}

fn sorted(mut list: Vec<String>) -> Vec<String> {
    list.sort();
    list
}

// ---------------------------------------------------------------------------------------------
// The combining rule, rejections, stops

#[test]
fn modes_combine_per_stream_and_timestamp() {
    let batch = ingest::Batch {
        samples: vec![
            sample("c", None, 2.0, Mode::Accumulate),
            sample("c", None, 3.0, Mode::Accumulate),
            sample("avg", Some(1_000), 1.0, Mode::Average),
            sample("avg", Some(1_000), 4.0, Mode::Average),
            sample("g", None, 7.0, Mode::Set),
            sample("g", None, 1.0, Mode::Accumulate),
            sample("g", Some(5), 9.0, Mode::Set),
        ],
        ..ingest::Batch::default()
    };
    let inserted = insert_owned(&batch, &[]);
    assert_eq!(inserted.accepted, 7);
    assert_eq!(
        numbers(&inserted),
        vec![
            ("c|ST[host:a]".to_owned(), NOW_MS, 5.0),
            ("avg|ST[host:a]".to_owned(), 1_000, 2.5),
            ("g|ST[host:a]".to_owned(), NOW_MS, 8.0),
            ("g|ST[host:a]".to_owned(), 5, 9.0),
        ]
    );
}

#[test]
fn a_stop_at_a_size_bound_is_too_large_and_stores_nothing() {
    let mut batch = ingest::Batch {
        samples: vec![sample("kept", None, 1.0, Mode::Set)],
        ..ingest::Batch::default()
    };
    batch.rejected.push(ingest::Rejection {
        location: "body".to_owned(),
        reason: Reason::Bound {
            what: "samples in the batch",
            size: 2,
            max: 1,
        },
        rest_of_body: true,
    });
    batch.rejected_total = 1;
    let inserted = insert_owned(&batch, &[]);
    assert!(inserted.stopped && inserted.stopped_too_large && inserted.batch.is_empty());
    assert_eq!(inserted.accepted, 0);
    let syntax = ingest::httptrap::parse(b"{\"a\": ", &Options::at(NOW_MS));
    let inserted = insert_owned(&syntax, &[]);
    assert!(inserted.stopped && !inserted.stopped_too_large);
}

#[test]
fn equal_tags_in_separate_lists_are_one_stream() {
    // Each sample with its own tag list; equal lists (in any order) are one key.
    let mut a = sample("n", None, 2.0, Mode::Accumulate);
    a.tags = Arc::from(vec![
        ("x".to_owned(), "1".to_owned()),
        ("host".to_owned(), "a".to_owned()),
    ]);
    let mut b = sample("n", None, 3.0, Mode::Accumulate);
    b.tags = Arc::from(vec![
        ("host".to_owned(), "a".to_owned()),
        ("x".to_owned(), "1".to_owned()),
    ]);
    let batch = ingest::Batch {
        samples: vec![a, b],
        ..ingest::Batch::default()
    };
    let inserted = insert_owned(&batch, &[]);
    assert_eq!(
        numbers(&inserted),
        vec![("n|ST[host:a,x:1]".to_owned(), NOW_MS, 5.0)]
    );
}

#[test]
fn bad_key_and_kind_clash_are_rejections_naming_the_key() {
    let mut text = sample("t", None, 0.0, Mode::Set);
    text.value = Value::Text("x".to_owned());
    let mut empty_tag = sample("e", None, 1.0, Mode::Set);
    empty_tag.tags = Arc::from(vec![("cat".to_owned(), String::new())]);
    let batch = ingest::Batch {
        samples: vec![sample("t", None, 1.0, Mode::Set), text, empty_tag],
        ..ingest::Batch::default()
    };
    let inserted = insert_owned(&batch, &[]);
    assert_eq!(inserted.accepted, 1);
    assert_eq!(inserted.rejected_total, 2);
    let r = &inserted.rejected;
    assert!(r[0].contains("t|ST[host:a]"), "{r:?}");
    assert!(
        r[1].contains("`e`") && r[1].contains("empty tag value"),
        "{r:?}"
    );
    assert!(
        !r.iter().any(|m| m.contains("Empty")),
        "no debug text: {r:?}"
    );
}

#[test]
fn a_stopped_body_lists_only_the_parsers_rejections() {
    // `e` is the sink's rejection (an empty tag value), the syntax error the parser's.
    let body = br#"{"e|ST[flag:]": 1, "bad": {"_type": "x", "_value": 1}} {"a": "#;
    let inserted = insert(&setup(&[]), Buffers::default(), |sink| {
        ingest::httptrap::parse_into(body, &Options::at(NOW_MS), sink)
    });
    assert!(inserted.stopped && inserted.batch.is_empty());
    assert_eq!(inserted.rejected_total, 2, "{:?}", inserted.rejected);
    assert!(inserted.rejected[0].contains("`bad`"));
    assert!(inserted.rejected[1].contains("syntax error"));
}

// ---------------------------------------------------------------------------------------------
// httptrap, JSON and flatbuffers: the sink against the owned batch

/// A body read straight into the sink and read into the owned batch then lent to it: the same
/// rows, counts and rejections (in another order: the owned batch keeps the parser's apart).
fn assert_same_as_owned_in(flat: bool, body: &[u8]) -> Inserted {
    let options = Options::at(NOW_MS);
    let extra = check_tag();
    let direct = insert(&setup(&extra), Buffers::default(), |sink| match flat {
        true => ingest::flat::parse_into(body, &options, sink),
        false => ingest::httptrap::parse_into(body, &options, sink),
    });
    let parsed = match flat {
        true => ingest::flat::parse(body, &options),
        false => ingest::httptrap::parse(body, &options),
    };
    let owned = insert_owned(&parsed, &extra);
    assert_eq!(rows(&direct), rows(&owned));
    assert_eq!(direct.accepted, owned.accepted);
    assert_eq!(
        sorted(direct.rejected.clone()),
        sorted(owned.rejected.clone())
    );
    assert_eq!(direct.rejected_total, owned.rejected_total);
    assert_eq!(direct.stopped, owned.stopped);
    assert_eq!(direct.stopped_too_large, owned.stopped_too_large);
    direct
}

fn owned_sample(name: &str, tags: &[(&str, &str)], value: Value, mode: Mode) -> Sample {
    let tags: Vec<(String, String)> = tags
        .iter()
        .map(|(c, v)| ((*c).to_owned(), (*v).to_owned()))
        .collect();
    Sample {
        name: name.to_owned(),
        tags: tags.into(),
        ts_ms: Some(NOW_MS - 1_000),
        value,
        mode,
    }
}

#[test]
fn every_value_kind_goes_under_its_key_with_the_check_tag() {
    let samples = vec![
        owned_sample("cpu", &[("host", "a")], Value::Numeric(1.5), Mode::Set),
        owned_sample("cpu", &[("host", "b")], Value::Numeric(2.5), Mode::Set),
        owned_sample(
            "state",
            &[("host", "a")],
            Value::Text("up".into()),
            Mode::Set,
        ),
        owned_sample("gone", &[("host", "a")], Value::Null, Mode::Set),
        owned_sample(
            "latency",
            &[("host", "a"), ("dc", "x")],
            Value::Histogram(histogram(&[0.5, 1.5, 1.5, 30.0])),
            Mode::Set,
        ),
        owned_sample(
            "requests",
            &[],
            Value::CumulativeHistogram(histogram(&[-2.0, 7.0])),
            Mode::Set,
        ),
        owned_sample(
            "suffixed|ST[app:api]",
            &[("host", "a")],
            Value::Numeric(3.0),
            Mode::Set,
        ),
        owned_sample("suffixed|ST[app:api]", &[], Value::Numeric(4.0), Mode::Set),
    ];
    let inserted = assert_same_as_owned_in(true, &ingest::flat::encode(&samples));
    assert_eq!(inserted.accepted, samples.len());
    assert_eq!(inserted.rejected_total, 0, "{:?}", inserted.rejected);
    let keys: Vec<String> = rows(&inserted).into_iter().map(|r| r.0).collect();
    assert_eq!(
        keys,
        [
            "cpu|ST[__check:web-1,host:a]",
            "cpu|ST[__check:web-1,host:b]",
            "state|ST[__check:web-1,host:a]",
            "latency|ST[__check:web-1,dc:x,host:a]",
            "requests|ST[__check:web-1]",
            "suffixed|ST[__check:web-1,app:api,host:a]",
            "suffixed|ST[__check:web-1,app:api]",
        ]
    );
}

#[test]
fn histograms_as_bins_and_as_llhist_are_the_same() {
    let h = histogram(&[0.001, 0.5, 3.0, 3.0, 1e6]);
    let samples = vec![owned_sample(
        "h",
        &[("a", "b")],
        Value::Histogram(h),
        Mode::Set,
    )];
    for form in [
        ingest::flat::HistogramForm::Bins,
        ingest::flat::HistogramForm::Llhist,
    ] {
        let inserted = assert_same_as_owned_in(true, &ingest::flat::encode_with(&samples, form));
        assert_eq!(inserted.accepted, 1);
    }
}

#[test]
fn keys_the_store_refuses_are_rejections_in_body_order() {
    // An empty tag value is a valid httptrap tag but not a store tag; an infinite value is
    // the parser's rejection.
    let samples = vec![
        owned_sample("bad_tag", &[("flag", "")], Value::Numeric(1.0), Mode::Set),
        owned_sample("inf", &[], Value::Numeric(f64::INFINITY), Mode::Set),
        owned_sample("ok", &[], Value::Numeric(1.0), Mode::Set),
    ];
    let inserted = assert_same_as_owned_in(true, &ingest::flat::encode(&samples));
    assert_eq!(inserted.accepted, 1);
    assert_eq!(inserted.rejected_total, 2, "{:?}", inserted.rejected);
    assert!(
        inserted.rejected[0].contains("bad_tag"),
        "{:?}",
        inserted.rejected
    );
    assert!(
        inserted.rejected[1].contains("(`inf`)"),
        "{:?}",
        inserted.rejected
    );
    assert!(!inserted.stopped);
}

#[test]
fn modes_that_combine_read_the_body_again() {
    let samples = vec![
        owned_sample("c", &[], Value::Numeric(2.0), Mode::Accumulate),
        owned_sample("c", &[], Value::Numeric(3.0), Mode::Accumulate),
        owned_sample("g", &[], Value::Numeric(7.0), Mode::Set),
    ];
    let inserted = assert_same_as_owned_in(true, &ingest::flat::encode(&samples));
    let values: Vec<(String, f64)> = numbers(&inserted)
        .into_iter()
        .map(|(key, _, v)| (key, v))
        .collect();
    assert_eq!(
        values,
        [
            ("c|ST[__check:web-1]".to_owned(), 5.0),
            ("g|ST[__check:web-1]".to_owned(), 7.0)
        ]
    );
}

#[test]
fn a_body_rejected_whole_stores_nothing() {
    let mut body = ingest::flat::encode(&[owned_sample("x", &[], Value::Numeric(1.0), Mode::Set)]);
    body.truncate(body.len() - 3);
    let inserted = assert_same_as_owned_in(true, &body);
    assert!(inserted.stopped && inserted.batch.is_empty());
    assert_eq!(inserted.accepted, 0);
    assert!(!inserted.stopped_too_large);
    assert!(assert_same_as_owned_in(true, b"").batch.is_empty());
}

/// A seeded generator: each call gives a number below `n` (an LCG; the data only has to vary
/// reproducibly).
fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |n| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    }
}

/// Generated metric lists (several documents' worth of tag sets, repeated names, every kind,
/// bad values) give what the owned batch gives.
#[test]
fn generated_lists_match_the_owned_batch() {
    let mut next = below(0x9e37_79b9_7f4a_7c15);
    for round in 0..100 {
        let count = 1 + next(300) as usize;
        let samples: Vec<Sample> = (0..count)
            .map(|_| {
                let host = format!("h{}", next(5));
                let value = match next(7) {
                    0 => Value::Null,
                    1 => Value::Text(format!("t{}", next(3))),
                    2 => Value::Histogram(histogram(&[next(100) as f64, 0.25])),
                    3 => Value::Numeric(f64::NAN),
                    _ => Value::Numeric(next(1_000) as f64),
                };
                let name = match next(6) {
                    0 => format!("m{}|ST[app:x{}]", next(3), next(2)),
                    1 => format!("m{}|ST[zone:z{},app:x,app:x]", next(3), next(2)),
                    2 => format!("m{}|ST[a0:c,a:z]", next(3)),
                    _ => format!("m{}", next(20)),
                };
                let tags: &[(&str, &str)] = match next(4) {
                    0 => &[],
                    1 => &[("flag", "")],
                    _ => &[("dc", "x")],
                };
                let mut s = owned_sample(&name, tags, value, Mode::Set);
                // Half without the host: a name's suffix is then its only tags.
                let mut all = s.tags.to_vec();
                if next(2) == 0 {
                    all.push(("host".to_owned(), host));
                }
                s.tags = all.into();
                s
            })
            .collect();
        let inserted = assert_same_as_owned_in(true, &ingest::flat::encode(&samples));
        assert_eq!(
            inserted.accepted + inserted.rejected_total,
            count,
            "round {round}"
        );
    }
}

/// One httptrap JSON body of every kind of value, key and rejection; `fl` adds `_fl` numerics
/// (which make the body be read again by the combining sink).
fn mixed_json(fl: bool) -> String {
    let b64 = histogram(&[0.25, 0.25, 40.0]).to_base64();
    let counters = if fl {
        r#""reqs": {"_type": "L", "_value": 3, "_fl": "+"},
           "reqs|ST[x:1]": {"_type": "L", "_value": 4, "_fl": "+"},
           "load_avg": {"_type": "n", "_value": [1, 2], "_fl": "~"},"#
    } else {
        ""
    };
    format!(
        r#"{{"cpu": 1.5, "state": "up", "quoted": "a\"b", "flag": true, "num_text": "42",
          "gone": null, "list": [1, "two", 3],
          "host|ST[host:a]": {{
            "load": 0.5,
            "lat": {{"_type": "h", "_value": ["H[1.2e-03]=5", "H[3.4e+00]=2"]}},
            "lat_unsorted": {{"_type": "h", "_value": ["H[3.4e+00]=2", "H[1.2e-03]=5"]}},
            "lat_repeated": {{"_type": "h", "_value": ["H[1.2e-03]=5", "H[1.2e-03]=1"]}},
            "lat_b64": {{"_type": "h", "_value": "{b64}"}},
            "lat_mixed": {{"_type": "h", "_value": ["{b64}", "H[1.2e-03]=5", 7]}},
            "cum": {{"_type": "H", "_value": ["H[1.0e+00]=1"], "_tags": ["dc:x"]}},
            "tagged": {{"_type": "n", "_value": 2, "_tags": ["dc:y", "rack:r1"]}},
            "text": {{"_type": "s", "_value": "warm", "_ts": {ts}}},
            {counters}
            "inner|ST[app:api]": {{"a": 1, "b": {{"_type": "h", "_value": ["H[2.0e+00]=1"]}}}},
            "after": 9
          }},
          "bad": {{"_type": "x", "_value": 1}},
          "inf": 1e999,
          "empty_value|ST[flag:]": 1,
          "solo|ST[rack:r2,az:b]": {{"_type": "n", "_value": 3}},
          "h_fl": {{"_type": "h", "_value": ["H[1.0e+00]=1"], "_fl": "+"}},
          "bad_tag|ST[a:b": 1}}
        {{"second|ST[host:b]": {{"load": 0.7}}, "cpu": 2.5}}"#,
        ts = NOW_MS - 5_000
    )
}

#[test]
fn json_bodies_give_what_the_owned_batch_gives() {
    for fl in [false, true] {
        let body = mixed_json(fl);
        let inserted = assert_same_as_owned_in(false, body.as_bytes());
        assert!(!inserted.stopped);
        // `bad`, `inf` and `bad_tag|…` are the parser's; `empty_value` the sink's.
        assert_eq!(inserted.rejected_total, 4, "{:?}", inserted.rejected);
        let r = &inserted.rejected;
        assert!(r[0].contains("key `bad`"), "{r:?}");
        assert!(r[2].contains("empty_value"), "{r:?}");
        let keys: Vec<String> = rows(&inserted).into_iter().map(|r| r.0).collect();
        for key in [
            "host`lat|ST[__check:web-1,host:a]",
            "host`cum|ST[__check:web-1,dc:x,host:a]",
            "host`tagged|ST[__check:web-1,dc:y,host:a,rack:r1]",
            "host`inner`b|ST[__check:web-1,app:api,host:a]",
            "host`after|ST[__check:web-1,host:a]",
            "second`load|ST[__check:web-1,host:b]",
            "solo|ST[__check:web-1,az:b,rack:r2]",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} in {keys:?}");
        }
    }
}

#[test]
fn json_fl_counters_combine() {
    let inserted = assert_same_as_owned_in(false, mixed_json(true).as_bytes());
    let value_of = |key: &str| {
        rows(&inserted)
            .into_iter()
            .find(|r| r.0 == key)
            .map(|r| r.2)
    };
    let reqs = value_of("host`reqs|ST[__check:web-1,host:a]");
    assert_eq!(reqs, Some(store::Value::Numeric(3.0)));
    let load = value_of("host`load_avg|ST[__check:web-1,host:a]");
    assert_eq!(load, Some(store::Value::Numeric(1.5)));
}

#[test]
fn json_stops_and_bounds_match_the_owned_batch() {
    for body in [
        &b""[..],
        b"{\"a\": 1} {\"b\": ",
        b"{\"a\": 1, \"b\": [1, 2,]}",
        b"{\"a|ST[t:v]\": {\"x\": 1}} garbage",
        b"{\"\\ud800\": 1, \"ok\": 2}",
    ] {
        assert_same_as_owned_in(false, body);
    }
    let stopped = assert_same_as_owned_in(false, b"{\"a\": 1} {\"b\": ");
    assert!(stopped.stopped && stopped.batch.is_empty());
}

/// Generated JSON documents (nested keys with and without `|ST[…]`, repeated names, every
/// kind, bad values, several documents) give what the owned batch gives.
#[test]
fn generated_json_matches_the_owned_batch() {
    let mut next = below(0x2545_f491_4f6c_dd1d);
    for round in 0..200 {
        let mut body = String::new();
        for _ in 0..1 + next(3) {
            body.push('{');
            for member in 0..1 + next(30) {
                if member > 0 {
                    body.push(',');
                }
                // Suffixes lent as they are (sorted or not, repeated tags, `:` in a value, a
                // tag without a value, a text order unlike the tag order) and ones the parser
                // splits (`b"…"` parts, escapes in the key).
                let key = match next(13) {
                    0 => format!("k{}|ST[host:h{}]", next(4), next(3)),
                    1 => format!("k{}|ST[flag:]", next(4)),
                    2 => format!("k{}|ST[host:h{},app:a{}]", next(4), next(3), next(2)),
                    3 => format!("k{}|ST[a:z,a0:c]", next(4)),
                    4 => format!("k{}|ST[app:x,app:x]", next(4)),
                    5 => format!("k{}|ST[url:http://x:80,flag]", next(4)),
                    6 => format!("k{}|ST[b\\\"YSBi\\\":v,app:x]", next(4)),
                    7 => format!("k{}|ST[__check:other]", next(4)),
                    8 => "k\\u0031|ST[host:h1]".to_owned(),
                    _ => format!("k{}", next(6)),
                };
                let value = match next(10) {
                    0 => "null".to_owned(),
                    1 => format!("\"t{}\"", next(3)),
                    2 => format!(
                        "{{\"_type\": \"h\", \"_value\": [\"H[{}.0e+00]=2\"]}}",
                        1 + next(9)
                    ),
                    3 => format!("{{\"a\": {}, \"b|ST[app:x]\": {}}}", next(9), next(9)),
                    4 => "{\"_type\": \"q\", \"_value\": 1}".to_owned(),
                    5 => format!(
                        "{{\"_type\": \"n\", \"_value\": {}, \"_tags\": [\"dc:{}\"]}}",
                        next(9),
                        next(2)
                    ),
                    9 => format!("[{}, {{\"_type\": \"n\", \"_value\": 1}}]", next(9)),
                    _ => next(1_000).to_string(),
                };
                body.push_str(&format!("\"{key}\": {value}"));
            }
            body.push('}');
        }
        let inserted = assert_same_as_owned_in(false, body.as_bytes());
        assert!(!inserted.stopped, "round {round}: {body}");
    }
}

// ---------------------------------------------------------------------------------------------
// The id cache: httptrap, Influx, remote write

fn open_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    (dir, store)
}

/// Writes an inserted body as the server does, and learns its new series.
fn write(store: &Store, cache: &SeriesCache, inserted: &mut Inserted) {
    let (_, refused) = store.write_partial(&inserted.batch).unwrap();
    inserted.apply_kind_rejections(&refused);
    inserted.learn(store, cache);
}

fn id_of(store: &Store, key: &str) -> u32 {
    let parsed = StreamKey::parse(key).unwrap();
    store.index().lookup(&parsed).unwrap().unwrap().0 .0
}

/// A series written once is pushed by id from the next body on, for its own check only: the
/// same metric key under another check is another series (the check is part of the cache's
/// namespace), and a metric with tags from a key above it goes by key.
#[test]
fn httptrap_series_written_once_are_pushed_by_id_per_check() {
    let (_dir, store) = open_store();
    let cache = SeriesCache::new(1000);
    let body = br#"{"lat|ST[host:a]":{"_type":"h","_value":["H[1.2e-03]=5","H[2.0e-03]=1"]},
        "n|ST[host:a]":{"_type":"n","_value":3},
        "outer|ST[dc:x]":{"inner|ST[host:b]":{"_type":"n","_value":1}}}"#;
    let read = |check: &str| {
        let tags = [Tag::new("__check", check).unwrap()];
        let setup = Setup {
            now_ms: NOW_MS,
            extra_tags: &tags,
            cache: Some((&cache, cache.namespace("httptrap", &tags).unwrap())),
            names: Some(&store),
        };
        let mut scratch = ingest::httptrap::Scratch::default();
        insert(&setup, Buffers::default(), |sink| {
            ingest::httptrap::parse_into_with(body, &Options::at(NOW_MS), sink, &mut scratch)
        })
    };
    let keys =
        |inserted: &Inserted| -> Vec<String> { rows(inserted).into_iter().map(|r| r.0).collect() };
    let mut first = read("web-1");
    assert_eq!(
        keys(&first),
        [
            "lat|ST[__check:web-1,host:a]",
            "n|ST[__check:web-1,host:a]",
            "outer`inner|ST[__check:web-1,dc:x,host:b]"
        ]
    );
    write(&store, &cache, &mut first);
    assert_eq!(cache.len(), 2, "the two metrics with their own tags only");
    let again = read("web-1");
    let got = keys(&again);
    assert_eq!(
        got[0],
        format!("#{}", id_of(&store, "lat|ST[__check:web-1,host:a]"))
    );
    assert_eq!(
        got[1],
        format!("#{}", id_of(&store, "n|ST[__check:web-1,host:a]"))
    );
    assert_eq!(got[2], "outer`inner|ST[__check:web-1,dc:x,host:b]");
    assert_eq!(again.accepted, 3);
    let values = |i: &Inserted| -> Vec<(i64, store::Value)> {
        rows(i).into_iter().map(|r| (r.1, r.2)).collect()
    };
    assert_eq!(values(&again), values(&first));
    // Another check: the same body is other series, pushed by key.
    let other = read("web-2");
    assert_eq!(
        keys(&other),
        [
            "lat|ST[__check:web-2,host:a]",
            "n|ST[__check:web-2,host:a]",
            "outer`inner|ST[__check:web-2,dc:x,host:b]"
        ]
    );
}

/// An Influx body through the sink (no cache) and through `parse` then the sink: the same
/// batch, counts and rejections.
fn influx_same_as_parse(body: &str) {
    let options = Options::at(NOW_MS);
    let direct = insert(&setup(&[]), Buffers::default(), |sink| {
        ingest::influx::parse_into(body.as_bytes(), &options, Precision::Milliseconds, sink)
    });
    let parsed = ingest::influx::parse(body.as_bytes(), &options, Precision::Milliseconds);
    let owned = insert_owned(&parsed, &[]);
    assert_eq!(rows(&direct), rows(&owned), "{body}");
    assert_eq!(direct.accepted, owned.accepted, "{body}");
    assert_eq!(direct.rejected_total, owned.rejected_total, "{body}");
    assert_eq!(sorted(direct.rejected), sorted(owned.rejected), "{body}");
    assert_eq!(direct.stopped, owned.stopped, "{body}");
}

#[test]
fn influx_bodies_give_what_parse_gives() {
    let ts = NOW_MS - 1000;
    for body in [
        format!("cpu,host=a,dc=x user=1.5,sys=2i {ts}\ncpu,host=a user=2.5 {ts}\n"),
        format!("m,t\\ x=1\\,2 f\\=g=1,s=\"txt\" {ts}\nm v=1 {ts}\nm,t=1 v= {ts}\n"),
        format!("m,=x v=1 {ts}\nm,a=b v=1,w=x {ts}\n# comment\n\nm,a=b,a=c v=1 {ts}\n"),
        format!("m,a=b v=1 1\nm,a=b x {ts}\nm,a v=1 {ts}\nm,a=b v=1 {ts} extra\n"),
        "m,a=b v=1\nm,a=b v=2\n".to_owned(),
        format!("m v=1 {ts}\nm v=\"text now\" {ts}\n"),
        format!("m|ST[x:y] v=1 {ts}\n"),
    ] {
        influx_same_as_parse(&body);
    }
}

fn read_influx(cache: &SeriesCache, store: Option<&Store>, body: &str) -> Inserted {
    let setup = Setup {
        now_ms: NOW_MS,
        extra_tags: &[],
        cache: Some((cache, cache.namespace("influx", &[]).unwrap())),
        names: store,
    };
    insert(&setup, Buffers::default(), |sink| {
        let options = Options::at(NOW_MS);
        ingest::influx::parse_into(body.as_bytes(), &options, Precision::Milliseconds, sink)
    })
}

#[test]
fn influx_cached_fields_are_pushed_by_id_and_new_ones_by_key() {
    let cache = SeriesCache::new(1000);
    let ns = cache.namespace("influx", &[]).unwrap();
    let raw = RawSeries {
        first: b"cpu,host=a",
        second: b"user",
    };
    cache.insert(&cache.key(ns, raw), SeriesId(41));
    let inserted = read_influx(
        &cache,
        None,
        &format!("cpu,host=a user=1,sys=2 {}\n", NOW_MS - 5),
    );
    assert_eq!(inserted.rejected_total, 0, "{:?}", inserted.rejected);
    assert_eq!(
        rows(&inserted),
        vec![
            ("#41".to_owned(), NOW_MS - 5, store::Value::Numeric(1.0)),
            (
                "cpu_sys|ST[host:a]".to_owned(),
                NOW_MS - 5,
                store::Value::Numeric(2.0)
            ),
        ]
    );
    assert!(!inserted.misses.is_empty());
}

#[test]
fn influx_series_written_once_are_pushed_by_id_the_next_time() {
    let (_dir, store) = open_store();
    let cache = SeriesCache::new(1000);
    let body = |ts: i64| {
        format!("cpu,host=a user=1,sys=2 {ts}\ncpu,host=b user=3 {ts}\nmem,host=a x=\"t\" {ts}\n")
    };
    let mut first = read_influx(&cache, Some(&store), &body(NOW_MS - 10));
    assert_eq!(first.accepted, 4);
    write(&store, &cache, &mut first);
    assert_eq!(cache.len(), 4);
    let mut again = read_influx(&cache, Some(&store), &body(NOW_MS));
    let got = rows(&again);
    assert_eq!(got.len(), 4);
    assert!(
        got.iter().all(|(key, _, _)| key.starts_with('#')),
        "{got:?}"
    );
    assert!(again.misses.is_empty());
    // Each id is the series' own: written by id, read back by key.
    write(&store, &cache, &mut again);
    for (key, id) in [("cpu_user|ST[host:a]", 0), ("cpu_sys|ST[host:a]", 1)] {
        assert_eq!(id_of(&store, key), id, "{key}");
        assert_eq!(got[id as usize].0, format!("#{id}"));
    }
}

#[test]
fn influx_a_cached_line_with_an_escaped_section_is_another_series() {
    // `t=a\ b` is not the bytes `t=a`: its own key, pushed by text.
    let cache = SeriesCache::new(1000);
    let ns = cache.namespace("influx", &[]).unwrap();
    let raw = RawSeries {
        first: b"m,t=a",
        second: b"v",
    };
    cache.insert(&cache.key(ns, raw), SeriesId(3));
    let inserted = read_influx(
        &cache,
        None,
        &format!("m,t=a\\ b v=1 {NOW_MS}\nm,t=a v=2 {NOW_MS}\n"),
    );
    let got = rows(&inserted);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].0.starts_with("m_v|ST[t:"), "{got:?}");
    assert_eq!(got[1].0, "#3");
}

fn label(name: &str, value: &str) -> proto::Label {
    proto::Label {
        name: name.into(),
        value: value.into(),
    }
}

fn snappy(timeseries: Vec<proto::TimeSeries>) -> Vec<u8> {
    let raw = proto::WriteRequest { timeseries }.encode_to_vec();
    snap::raw::Encoder::new().compress_vec(&raw).unwrap()
}

/// A remote write body as the server reads it, with `cache` (or none).
fn read_remote_write(cache: Option<&SeriesCache>, body: &[u8]) -> Inserted {
    let setup = Setup {
        now_ms: NOW_MS,
        extra_tags: &[],
        cache: cache.map(|c| (c, c.namespace("remote_write", &[]).unwrap())),
        names: None,
    };
    insert(&setup, Buffers::default(), |sink| {
        ingest::remote_write::parse_into(body, &Options::at(NOW_MS), sink)
    })
}

#[test]
fn remote_write_samples_go_under_the_key_of_their_labels() {
    let series = proto::TimeSeries {
        labels: vec![
            label("job", "api"),
            label("__name__", "up"),
            label("dc", "x"),
            label("empty", ""),
        ],
        samples: vec![
            proto::Sample {
                value: 1.0,
                timestamp: NOW_MS - 2,
            },
            proto::Sample {
                value: 2.0,
                timestamp: NOW_MS - 1,
            },
        ],
        ..Default::default()
    };
    let inserted = read_remote_write(None, &snappy(vec![series]));
    assert_eq!(inserted.rejected_total, 0, "{:?}", inserted.rejected);
    assert_eq!(inserted.accepted, 2);
    let expected = StreamKey::from_labels([
        ("job", "api"),
        ("__name__", "up"),
        ("dc", "x"),
        ("empty", ""),
    ])
    .unwrap()
    .canonical();
    assert_eq!(
        numbers(&inserted),
        vec![
            (expected.clone(), NOW_MS - 2, 1.0),
            (expected, NOW_MS - 1, 2.0)
        ]
    );
}

#[test]
fn remote_write_bad_series_and_samples_are_named_and_the_rest_kept() {
    let sample = |value: f64| proto::Sample {
        value,
        timestamp: NOW_MS,
    };
    let duplicate = proto::TimeSeries {
        labels: vec![label("__name__", "a"), label("x", "1"), label("x", "2")],
        samples: vec![sample(1.0)],
        ..Default::default()
    };
    // A timestamp two years ahead (NaN and ±Inf are values, as Prometheus keeps them).
    let future = proto::TimeSeries {
        labels: vec![label("__name__", "b")],
        samples: vec![
            proto::Sample {
                value: 2.0,
                timestamp: NOW_MS + 2 * 365 * 86_400_000,
            },
            sample(3.0),
        ],
        ..Default::default()
    };
    let inserted = read_remote_write(None, &snappy(vec![duplicate, future]));
    assert_eq!(inserted.accepted, 1);
    assert_eq!(inserted.rejected_total, 2, "{:?}", inserted.rejected);
    let r = &inserted.rejected;
    assert!(r[0].starts_with("series 0 (`a`)"), "{r:?}");
    assert!(r[0].contains("label `x` is repeated"), "{r:?}");
    assert!(r[1].starts_with("series 1 (`b`), sample 0"), "{r:?}");
    assert_eq!(numbers(&inserted), vec![("b".to_owned(), NOW_MS, 3.0)]);
    assert!(!inserted.stopped);
}

#[test]
fn remote_write_a_body_malformed_after_good_series_stores_and_caches_nothing() {
    let good = proto::TimeSeries {
        labels: vec![label("__name__", "up"), label("job", "a")],
        samples: vec![proto::Sample {
            value: 1.0,
            timestamp: NOW_MS,
        }],
        ..Default::default()
    };
    let mut raw = proto::WriteRequest {
        timeseries: vec![good.clone(), good],
    }
    .encode_to_vec();
    let good_only = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    // A third series whose sample's value (field 1, a double) comes as a varint: prost refuses
    // the whole body; the decoder finds it after handing over two series.
    raw.extend_from_slice(&[0x0a, 4, 0x12, 2, 0x08, 1]);
    let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    let cache = SeriesCache::new(100);
    // The series cached (its label bytes, as prost writes them first): pushed by id.
    let labels = proto::TimeSeries {
        labels: vec![label("__name__", "up"), label("job", "a")],
        ..Default::default()
    }
    .encode_to_vec();
    let ns = cache.namespace("remote_write", &[]).unwrap();
    let raw_series = RawSeries {
        first: &labels,
        second: b"",
    };
    cache.insert(&cache.key(ns, raw_series), SeriesId(5));
    let first = read_remote_write(Some(&cache), &good_only);
    assert_eq!(first.accepted, 2, "{:?}", first.rejected);
    assert!(first
        .batch
        .samples()
        .all(|(key, _, _)| key == KeyRef::Id(SeriesId(5))));
    assert!(first.misses.is_empty());
    let inserted = read_remote_write(Some(&cache), &body);
    assert!(inserted.stopped && inserted.batch.is_empty());
    assert_eq!(inserted.accepted, 0);
    assert!(inserted.misses.is_empty());
    assert_eq!(inserted.rejected.len(), 1, "{:?}", inserted.rejected);
    assert!(
        inserted.rejected[0].contains("wire type"),
        "{:?}",
        inserted.rejected
    );
    assert!(!inserted.stopped_too_large);
}

#[test]
fn remote_write_a_body_rejected_whole_stores_nothing() {
    let inserted = read_remote_write(None, b"not snappy");
    assert!(inserted.stopped && inserted.batch.is_empty());
    assert!(
        inserted.rejected[0].contains("snappy"),
        "{:?}",
        inserted.rejected
    );
    assert!(!inserted.stopped_too_large);
}

/// A cached series' bad point is named by the name in its key (its labels were not read).
#[test]
fn remote_write_a_cached_series_bad_point_is_named_from_its_key() {
    let (_dir, store) = open_store();
    let cache = SeriesCache::new(100);
    let series = |timestamp: i64| proto::TimeSeries {
        labels: vec![label("__name__", "up"), label("job", "a")],
        samples: vec![proto::Sample {
            value: 1.0,
            timestamp,
        }],
        ..Default::default()
    };
    let setup = Setup {
        now_ms: NOW_MS,
        extra_tags: &[],
        cache: Some((&cache, cache.namespace("remote_write", &[]).unwrap())),
        names: Some(&store),
    };
    let read = |body: &[u8]| {
        insert(&setup, Buffers::default(), |sink| {
            ingest::remote_write::parse_into(body, &Options::at(NOW_MS), sink)
        })
    };
    let mut first = read(&snappy(vec![series(NOW_MS)]));
    write(&store, &cache, &mut first);
    // A timestamp two years ahead.
    let bad = read(&snappy(vec![series(NOW_MS + 2 * 365 * 86_400_000)]));
    assert_eq!(bad.rejected_total, 1);
    assert!(
        bad.rejected[0].starts_with("series 0 (`up`), sample 0"),
        "{:?}",
        bad.rejected
    );
}
