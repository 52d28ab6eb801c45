#![allow(clippy::unwrap_used, clippy::expect_used)]

// The shared fuzz checks; this file uses only its own format's.
#[allow(dead_code)]
#[path = "fuzz_checks/mod.rs"]
mod fuzz_checks;

use hist::convert::ConvertError;
use hist::QuantileType;
use ingest::remote_write::{
    self, proto, DECOMPRESSED_BYTES_MAX, LABELS_PER_REQUEST_MAX, SERIES_PER_REQUEST_MAX,
};
use ingest::{Batch, Mode, Options, Reason, Value};
use proptest::prelude::*;
use prost::Message;

/// 2026-11-22T00:00:00Z.
const NOW_MS: i64 = 1_795_305_600_000;
const TS_MS: i64 = NOW_MS - 15_000;

fn label(name: &str, value: &str) -> proto::Label {
    proto::Label {
        name: name.into(),
        value: value.into(),
    }
}

fn series(labels: &[(&str, &str)]) -> proto::TimeSeries {
    proto::TimeSeries {
        labels: labels.iter().map(|(n, v)| label(n, v)).collect(),
        ..Default::default()
    }
}

fn float(value: f64, timestamp: i64) -> proto::Sample {
    proto::Sample { value, timestamp }
}

fn compress(raw: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new().compress_vec(raw).unwrap()
}

fn body(timeseries: Vec<proto::TimeSeries>) -> Vec<u8> {
    compress(&proto::WriteRequest { timeseries }.encode_to_vec())
}

fn parse(body: &[u8]) -> Batch {
    remote_write::parse(body, &Options::at(NOW_MS))
}

fn span(offset: i32, length: u32) -> proto::BucketSpan {
    proto::BucketSpan { offset, length }
}

/// Buckets 1, 2, 3 of schema 0 — (1,2], (2,4], (4,8] — holding 2, 3, 2, plus 1 in the zero
/// bucket, integer delta-encoded.
fn integer_histogram() -> proto::Histogram {
    proto::Histogram {
        count: Some(proto::Count::CountInt(8)),
        sum: 27.0,
        schema: 0,
        zero_threshold: 1e-128,
        zero_count: Some(proto::ZeroCount::ZeroCountInt(1)),
        positive_spans: vec![span(1, 3)],
        positive_deltas: vec![2, 1, -1],
        timestamp: TS_MS,
        ..Default::default()
    }
}

/// The histogram a sample holds; a running total in its sender's buckets as llhist.
fn histogram_of(batch: &Batch, index: usize) -> hist::Histogram {
    match &batch.samples[index].value {
        Value::Histogram(h) | Value::CumulativeHistogram(h) => h.clone(),
        Value::Cumulative(c) => c.to_histogram(),
        other => panic!("not a histogram: {other:?}"),
    }
}

fn quantile(h: &hist::Histogram, q: f64) -> f64 {
    h.quantiles(&[q], QuantileType::Type1).unwrap()[0]
}

fn only_reason(batch: &Batch) -> &Reason {
    assert_eq!(batch.rejected.len(), 1, "{:?}", batch.rejected);
    &batch.rejected[0].reason
}

#[test]
fn float_samples_become_numerics_with_labels_as_tags() {
    let mut a = series(&[("__name__", "up"), ("job", "node"), ("instance", "a:9100")]);
    a.samples = vec![float(1.0, TS_MS), float(0.0, TS_MS + 15_000)];
    let mut b = series(&[("job", "x"), ("__name__", "temp_celsius")]);
    b.samples = vec![float(-3.5, TS_MS)];
    let batch = parse(&body(vec![a, b]));
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples.len(), 3);
    let first = &batch.samples[0];
    assert_eq!(first.name, "up");
    assert_eq!(
        &*first.tags,
        [
            ("job".to_owned(), "node".to_owned()),
            ("instance".to_owned(), "a:9100".to_owned())
        ]
    );
    assert_eq!(first.ts_ms, Some(TS_MS));
    assert_eq!(first.value, Value::Numeric(1.0));
    assert_eq!(first.mode, Mode::Set);
    assert_eq!(batch.samples[1].ts_ms, Some(TS_MS + 15_000));
    assert_eq!(batch.samples[2].name, "temp_celsius");
    assert_eq!(batch.samples[2].value, Value::Numeric(-3.5));
}

#[test]
fn classic_bucket_series_stay_numerics() {
    let mut bucket = series(&[("__name__", "rpc_seconds_bucket"), ("le", "0.5")]);
    bucket.samples = vec![float(42.0, TS_MS)];
    let mut inf = series(&[("__name__", "rpc_seconds_bucket"), ("le", "+Inf")]);
    inf.samples = vec![float(50.0, TS_MS)];
    let batch = parse(&body(vec![bucket, inf]));
    assert_eq!(batch.rejected, []);
    assert_eq!(batch.samples[0].value, Value::Numeric(42.0));
    assert_eq!(
        &*batch.samples[0].tags,
        [("le".to_owned(), "0.5".to_owned())]
    );
    assert_eq!(
        &*batch.samples[1].tags,
        [("le".to_owned(), "+Inf".to_owned())]
    );
}

#[test]
fn native_histogram_with_integer_deltas() {
    let mut s = series(&[("__name__", "rpc_seconds")]);
    s.histograms = vec![integer_histogram()];
    let batch = parse(&body(vec![s]));
    assert_eq!(batch.rejected, []);
    assert!(matches!(batch.samples[0].value, Value::Cumulative(_)));
    let h = histogram_of(&batch, 0);
    h.assert_invariants();
    assert_eq!(h.sample_count(), 8);
    // Ranks: 1 zero, 2 in (1,2], 3 in (2,4], 2 in (4,8]; llhist bins are 10% wide.
    assert!(quantile(&h, 0.1).abs() < 1e-100);
    let median = quantile(&h, 0.5);
    assert!((2.0..=4.4).contains(&median), "median {median}");
    let p99 = quantile(&h, 0.99);
    assert!((4.0..=8.8).contains(&p99), "p99 {p99}");
}

#[test]
fn native_histogram_with_float_counts_and_gauge_hint() {
    let mut h = integer_histogram();
    h.count = Some(proto::Count::CountFloat(8.0));
    h.zero_count = Some(proto::ZeroCount::ZeroCountFloat(1.0));
    h.positive_deltas.clear();
    h.positive_counts = vec![2.0, 3.0, 2.0];
    h.reset_hint = 3;
    let mut s = series(&[("__name__", "queue_depth")]);
    s.histograms = vec![h];
    let batch = parse(&body(vec![s]));
    assert_eq!(batch.rejected, []);
    assert!(matches!(batch.samples[0].value, Value::Histogram(_)));
    let h = histogram_of(&batch, 0);
    assert_eq!(h.sample_count(), 8);
    let median = quantile(&h, 0.5);
    assert!((2.0..=4.4).contains(&median), "median {median}");
}

#[test]
fn native_histogram_with_custom_bounds() {
    // Schema −53: bucket 1 is (0.1, 0.5], bucket 2 is (0.5, 1.0].
    let h = proto::Histogram {
        count: Some(proto::Count::CountInt(8)),
        sum: 4.0,
        schema: -53,
        positive_spans: vec![span(1, 2)],
        positive_deltas: vec![5, -2],
        custom_values: vec![0.1, 0.5, 1.0],
        timestamp: TS_MS,
        ..Default::default()
    };
    let mut s = series(&[("__name__", "nhcb_seconds")]);
    s.histograms = vec![h];
    let batch = parse(&body(vec![s]));
    assert_eq!(batch.rejected, []);
    let h = histogram_of(&batch, 0);
    assert_eq!(h.sample_count(), 8);
    let q25 = quantile(&h, 0.25);
    assert!((0.1..=0.55).contains(&q25), "q25 {q25}");
    let q90 = quantile(&h, 0.9);
    assert!((0.5..=1.1).contains(&q90), "q90 {q90}");
}

#[test]
fn bad_snappy_rejects_the_whole_body() {
    let batch = parse(b"\x10\xfdnot snappy at all");
    assert!(batch.stopped());
    assert_eq!(batch.rejected[0].location, "body");
    assert!(
        matches!(only_reason(&batch), Reason::Decode { what, .. } if *what == "snappy block"),
        "{:?}",
        batch.rejected
    );
    assert!(batch.samples.is_empty());
}

#[test]
fn truncated_protobuf_rejects_the_whole_body() {
    let mut s = series(&[("__name__", "up")]);
    s.samples = vec![float(1.0, TS_MS)];
    let raw = proto::WriteRequest {
        timeseries: vec![s],
    }
    .encode_to_vec();
    let batch = parse(&compress(&raw[..raw.len() - 3]));
    assert!(batch.stopped());
    assert!(
        matches!(only_reason(&batch), Reason::Decode { what, .. } if what.contains("protobuf")),
        "{:?}",
        batch.rejected
    );
    assert!(batch.samples.is_empty());
}

#[test]
fn declared_length_over_the_bound_is_rejected_before_allocating() {
    // A snappy block header is the uncompressed length as a varint: claim 1 GiB in 5 bytes.
    let mut claim = Vec::new();
    let mut n: u64 = 1 << 30;
    while n >= 0x80 {
        claim.push((n as u8) | 0x80);
        n >>= 7;
    }
    claim.push(n as u8);
    claim.extend_from_slice(b"\x00");
    let batch = parse(&claim);
    assert!(batch.stopped());
    assert_eq!(
        only_reason(&batch),
        &Reason::Bound {
            what: "decompressed body size in bytes",
            size: 1 << 30,
            max: DECOMPRESSED_BYTES_MAX
        }
    );
}

/// Empty series and labels are 2 bytes on the wire but a struct each once decoded: their
/// counts are checked before decoding.
#[test]
fn series_and_label_counts_are_bounded_before_decoding() {
    let series = b"\x0a\x00".repeat(SERIES_PER_REQUEST_MAX + 1);
    let batch = parse(&compress(&series));
    assert!(batch.stopped());
    assert_eq!(
        only_reason(&batch),
        &Reason::Bound {
            what: "series in the request",
            size: SERIES_PER_REQUEST_MAX + 1,
            max: SERIES_PER_REQUEST_MAX
        }
    );
    let labels = b"\x0a\x00".repeat(LABELS_PER_REQUEST_MAX + 1);
    let mut one_series = vec![0x0a];
    let mut len = labels.len();
    while len >= 0x80 {
        one_series.push((len as u8) | 0x80);
        len >>= 7;
    }
    one_series.push(len as u8);
    one_series.extend_from_slice(&labels);
    let batch = parse(&compress(&one_series));
    assert!(matches!(
        only_reason(&batch),
        Reason::Bound {
            what: "labels in the request",
            ..
        }
    ));
}

/// A length-delimited field: `key` (field number << 3 | 2), the varint length, `payload`.
fn delimited(key: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![key];
    let mut len = payload.len();
    while len >= 0x80 {
        out.push((len as u8) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(payload);
    out
}

/// Packed bucket deltas are 1 byte per bucket on the wire and 8 once decoded, empty spans 2
/// and 8: they are counted, packed or not, before decoding.
#[test]
fn native_histogram_buckets_are_bounded_before_decoding() {
    let over = remote_write::BUCKETS_PER_REQUEST_MAX + 1;
    // TimeSeries.histograms (4) → Histogram.positive_deltas (12), packed: one zero byte each.
    let packed = delimited(0x62, &vec![0; over]);
    let body = delimited(0x0a, &delimited(0x22, &packed));
    let batch = parse(&compress(&body));
    assert!(batch.stopped());
    assert_eq!(
        only_reason(&batch),
        &Reason::Bound {
            what: "native histogram buckets (deltas and spans) in the request",
            size: over,
            max: remote_write::BUCKETS_PER_REQUEST_MAX
        }
    );
    // The same count as unpacked deltas (key 0x48 = field 9, varint) and empty spans (0x5a =
    // field 11), spread over two histograms of one series.
    let unpacked = b"\x48\x00".repeat(over / 2);
    let spans = b"\x5a\x00".repeat(over - over / 2);
    let mut series = delimited(0x22, &unpacked);
    series.extend(delimited(0x22, &spans));
    let batch = parse(&compress(&delimited(0x0a, &series)));
    assert!(matches!(
        only_reason(&batch),
        Reason::Bound { what, size, .. } if what.starts_with("native histogram") && *size == over
    ));
    // Under the bound the same shapes are read (and rejected as histograms, not as a body).
    let small = delimited(0x0a, &delimited(0x22, &delimited(0x62, &[0; 100])));
    let batch = parse(&compress(&small));
    assert!(!batch.stopped(), "{:?}", batch.rejected);
}

#[test]
fn wrong_wire_types_reject_the_whole_body() {
    // Field 1 (timeseries) sent as a varint instead of a length-delimited message.
    let batch = parse(&compress(b"\x08\x01"));
    assert!(batch.stopped());
    assert!(matches!(only_reason(&batch), Reason::Decode { .. }));
}

#[test]
fn bad_series_are_rejected_alone_and_named() {
    let mut nameless = series(&[("job", "x")]);
    nameless.samples = vec![float(1.0, TS_MS)];
    let mut bad_utf8 = series(&[("__name__", "up")]);
    bad_utf8.labels.push(proto::Label {
        name: b"job".to_vec(),
        value: vec![0xff, 0xfe],
    });
    bad_utf8.samples = vec![float(1.0, TS_MS)];
    let mut mixed = series(&[("__name__", "temp")]);
    mixed.samples = vec![
        float(1.0, TS_MS),
        float(f64::from_bits(0x7ff0_0000_0000_0002), TS_MS), // stale marker: kept, exact bits
        float(f64::NAN, TS_MS),                              // a NaN value: kept, as Prometheus
        float(2.0, 1_000),
    ];
    let mut bad_hist = series(&[("__name__", "h")]);
    let mut h = integer_histogram();
    h.schema = 20;
    bad_hist.histograms = vec![h];
    let batch = parse(&body(vec![nameless, bad_utf8, mixed, bad_hist]));
    assert!(!batch.stopped());
    assert_eq!(batch.samples.len(), 3);
    assert_eq!(batch.samples[0].value, Value::Numeric(1.0));
    assert!(
        matches!(batch.samples[1].value, Value::Numeric(v) if v.to_bits() == 0x7ff0_0000_0000_0002)
    );
    // An ordinary NaN stays an ordinary NaN, not a stale marker.
    assert!(
        matches!(batch.samples[2].value, Value::Numeric(v) if v.is_nan() && v.to_bits() != 0x7ff0_0000_0000_0002)
    );
    let got: Vec<(&str, &Reason)> = batch
        .rejected
        .iter()
        .map(|r| (r.location.as_str(), &r.reason))
        .collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0], ("series 0", &Reason::EmptyName));
    assert_eq!(got[1], ("series 1", &Reason::InvalidUtf8));
    assert_eq!(got[2].0, "series 2 (`temp`), sample 3");
    assert!(matches!(got[2].1, Reason::Timestamp { .. }));
    assert_eq!(got[3].0, "series 3 (`h`), histogram 0");
    assert_eq!(
        got[3].1,
        &Reason::Histogram(ConvertError::BadSchema { schema: 20 })
    );
    assert_eq!(batch.rejected_total, 4);
}

#[test]
fn empty_body_is_rejected() {
    let batch = parse(b"");
    assert!(batch.stopped());
}

#[test]
fn empty_request_is_an_empty_batch() {
    let batch = parse(&body(Vec::new()));
    assert_eq!(batch, Batch::default());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = parse(&bytes);
        prop_assert!(batch.samples.len() <= bytes.len());
    }

    /// Compressed garbage gets past snappy and exercises the protobuf decoder and the mapping.
    #[test]
    fn arbitrary_protobuf_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let batch = parse(&compress(&bytes));
        prop_assert!(batch.samples.len() <= bytes.len());
    }

    #[test]
    fn mutated_valid_bodies_never_panic(flip in 0usize..400, byte in any::<u8>()) {
        let mut s = series(&[("__name__", "rpc_seconds"), ("job", "api")]);
        s.samples = vec![float(1.0, TS_MS)];
        s.histograms = vec![integer_histogram()];
        let mut raw = proto::WriteRequest { timeseries: vec![s] }.encode_to_vec();
        let at = flip % raw.len();
        raw[at] = byte;
        let _ = parse(&compress(&raw));
    }
}

/// The requests the seed corpus is made of: every shape above, good and bad.
fn seed_requests() -> Vec<proto::WriteRequest> {
    let mut floats = series(&[("__name__", "up"), ("job", "node")]);
    floats.samples = vec![float(1.0, TS_MS), float(0.5, TS_MS + 1)];
    let mut classic = series(&[("__name__", "rpc_seconds_bucket"), ("le", "0.5")]);
    classic.samples = vec![float(42.0, TS_MS)];
    let mut ints = series(&[("__name__", "rpc_seconds")]);
    ints.histograms = vec![integer_histogram()];
    let mut floats_h = ints.clone();
    let h = &mut floats_h.histograms[0];
    h.count = Some(proto::Count::CountFloat(8.0));
    h.positive_deltas.clear();
    h.positive_counts = vec![2.0, 3.0, 2.0];
    let mut negative = ints.clone();
    negative.histograms[0].negative_spans = vec![span(-2, 2)];
    negative.histograms[0].negative_deltas = vec![1, 1];
    negative.histograms[0].count = Some(proto::Count::CountInt(11));
    let mut custom = ints.clone();
    let h = &mut custom.histograms[0];
    h.schema = -53;
    h.zero_count = None;
    h.custom_values = vec![0.1, 0.5, 1.0];
    let mut bad_schema = ints.clone();
    bad_schema.histograms[0].schema = 9;
    let mut stale = series(&[("__name__", "gone")]);
    stale.samples = vec![float(f64::from_bits(0x7ff0_0000_0000_0002), TS_MS)];
    let nameless = series(&[("job", "x")]);
    let all = vec![
        floats.clone(),
        classic.clone(),
        ints.clone(),
        floats_h.clone(),
        negative.clone(),
        custom.clone(),
    ];
    [
        vec![floats],
        vec![classic],
        vec![ints],
        vec![floats_h],
        vec![negative],
        vec![custom],
        vec![bad_schema],
        vec![stale],
        vec![nameless],
        all,
        Vec::new(),
    ]
    .into_iter()
    .map(|timeseries| proto::WriteRequest { timeseries })
    .collect()
}

/// Every seed request for `fuzz/corpus/remote_write/` passes the checks the fuzz target makes; with
/// `STRATA_WRITE_SEEDS=1` the test also writes them there (after changing the seeds).
#[test]
fn seed_corpus_passes_the_fuzz_checks() {
    // With STRATA_WRITE_SEEDS set, the seeds are also written out as the fuzzer's starting corpus.
    let write = std::env::var_os("STRATA_WRITE_SEEDS").is_some();
    let mut seeds = 0;
    let mut put = |path: std::path::PathBuf, bytes: Vec<u8>| {
        fuzz_checks::remote_write(&bytes);
        seeds += 1;
        if write {
            std::fs::write(path, bytes).unwrap();
        }
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/remote_write");
    if write {
        std::fs::create_dir_all(&dir).unwrap();
    }
    for (i, request) in seed_requests().iter().enumerate() {
        let raw = request.encode_to_vec();
        let snappy = compress(&raw);
        put(
            dir.join(format!("seed-{i:02}-protobuf")),
            [&[0u8][..], &raw].concat(),
        );
        put(
            dir.join(format!("seed-{i:02}-snappy")),
            [&[1u8][..], &snappy].concat(),
        );
    }
    assert!(seeds > 10, "only {seeds} seeds");
}

/// Label bytes: mostly short ASCII from a small alphabet (so names repeat and collide),
/// sometimes empty, long (over the tag bound) or not UTF-8.
fn label_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => "[a-c_]{1,3}".prop_map(String::into_bytes),
        2 => "[a-cé€]{1,3}".prop_map(String::into_bytes),
        1 => Just(b"__name__".to_vec()),
        1 => Just(Vec::new()),
        1 => Just(vec![b'x'; 1_500]),
        1 => prop::collection::vec(any::<u8>(), 1..4),
    ]
}

fn random_label() -> impl Strategy<Value = proto::Label> {
    (label_bytes(), label_bytes()).prop_map(|(name, value)| proto::Label { name, value })
}

fn random_sample() -> impl Strategy<Value = proto::Sample> {
    let value = prop_oneof![
        8 => any::<f64>(),
        1 => Just(f64::from_bits(0x7ff0_0000_0000_0002)),
        1 => Just(f64::INFINITY),
    ];
    let ts = prop_oneof![8 => TS_MS - 100_000..TS_MS + 100_000, 1 => any::<i64>()];
    (value, ts).prop_map(|(value, timestamp)| float(value, timestamp))
}

fn random_histogram() -> impl Strategy<Value = proto::Histogram> {
    (
        any::<bool>(),
        prop::collection::vec(-3i64..4, 0..6),
        prop::collection::vec(0.0f64..10.0, 0..4),
        -2i32..3,
        prop_oneof![Just(0), Just(3)],
    )
        .prop_map(|(int, deltas, counts, offset, reset_hint)| {
            let mut h = integer_histogram();
            h.reset_hint = reset_hint;
            if int {
                h.positive_spans = vec![span(offset, deltas.len() as u32)];
                h.positive_deltas = deltas;
            } else {
                h.count = Some(proto::Count::CountFloat(counts.iter().sum()));
                h.positive_spans = vec![span(offset, counts.len() as u32)];
                h.positive_deltas = Vec::new();
                h.positive_counts = counts;
            }
            h
        })
}

/// Exemplars go to the sink after their series' points, with the series' labels as sent; one
/// whose labels pass 128 characters or are not UTF-8 is dropped, not rejected, and the series
/// is kept.
#[test]
fn exemplars_come_with_their_series_labels_and_bad_ones_are_dropped() {
    let exemplar = |labels: Vec<proto::Label>, value: f64| proto::Exemplar {
        labels,
        value,
        timestamp: TS_MS,
    };
    let mut s = series(&[("__name__", "req_total"), ("job", "api")]);
    s.samples = vec![float(3.0, TS_MS)];
    s.exemplars = vec![
        exemplar(vec![label("trace_id", "abc")], 1.5),
        exemplar(vec![label("trace_id", &"x".repeat(130))], 2.0),
        exemplar(
            vec![proto::Label {
                name: b"trace_id".to_vec(),
                value: vec![0xff],
            }],
            3.0,
        ),
    ];
    let request = body(vec![s]);
    let batch = parse(&request);
    assert!(batch.rejected.is_empty(), "{:?}", batch.rejected);
    assert_eq!(batch.samples.len(), 1);
    assert_eq!(
        batch.exemplars,
        [ingest::ExemplarOwned {
            series: vec![
                ("__name__".to_owned(), "req_total".to_owned()),
                ("job".to_owned(), "api".to_owned())
            ],
            labels: vec![("trace_id".to_owned(), "abc".to_owned())],
            value: 1.5,
            ts_ms: TS_MS,
        }]
    );
    assert_eq!(
        format!("{batch:?}"),
        format!(
            "{:?}",
            remote_write::parse_with_prost(&request, &Options::at(NOW_MS))
        )
    );
}

fn random_exemplar() -> impl Strategy<Value = proto::Exemplar> {
    (
        prop::collection::vec(random_label(), 0..3),
        any::<f64>(),
        any::<i64>(),
    )
        .prop_map(|(labels, value, timestamp)| proto::Exemplar {
            labels,
            value,
            timestamp,
        })
}

fn random_request() -> impl Strategy<Value = proto::WriteRequest> {
    let one = (
        prop::collection::vec(random_label(), 0..5),
        any::<bool>(),
        prop::collection::vec(random_sample(), 0..4),
        prop::collection::vec(random_histogram(), 0..2),
        prop::collection::vec(random_exemplar(), 0..3),
    )
        .prop_map(|(mut labels, named, samples, histograms, exemplars)| {
            if named {
                labels.insert(0, label("__name__", "m"));
            }
            proto::TimeSeries {
                labels,
                samples,
                histograms,
                exemplars,
            }
        });
    prop::collection::vec(one, 0..6).prop_map(|timeseries| proto::WriteRequest { timeseries })
}

proptest! {
    /// The zero-copy decoder (`parse`, through `visit`) and the prost decoder it replaced give
    /// the same batch — samples, tags, rejections and their messages — for any request.
    #[test]
    fn visitor_and_prost_decoders_agree(request in random_request()) {
        let body = compress(&request.encode_to_vec());
        let options = Options::at(NOW_MS);
        let visited = remote_write::parse(&body, &options);
        let decoded = remote_write::parse_with_prost(&body, &options);
        // As text: a kept stale marker is a NaN, unequal to itself.
        prop_assert_eq!(format!("{visited:?}"), format!("{decoded:?}"));
    }

    /// A request with one byte changed: both decoders reject the whole body, or give the
    /// same batch (the structure check stands in for prost's refusals).
    #[test]
    fn visitor_and_prost_decoders_agree_on_mutated_bodies(
        request in random_request(),
        flip in any::<usize>(),
        byte in any::<u8>(),
    ) {
        let mut raw = request.encode_to_vec();
        if !raw.is_empty() {
            let at = flip % raw.len();
            raw[at] = byte;
        }
        let body = compress(&raw);
        let options = Options::at(NOW_MS);
        let visited = remote_write::parse(&body, &options);
        let decoded = remote_write::parse_with_prost(&body, &options);
        prop_assert_eq!(visited.stopped(), decoded.stopped(), "{:?} / {:?}", visited, decoded);
        if !decoded.stopped() {
            prop_assert_eq!(format!("{visited:?}"), format!("{decoded:?}"));
        }
    }
}
