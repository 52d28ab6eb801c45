//! The checks every ingest fuzz target runs, shared by the libFuzzer targets (`fuzz/`) and the
//! corpus replay in `tests/fuzz_corpus.rs`: any bytes, each parser, no panic, and every batch
//! within the bounds the crate promises.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingest::influx::Precision;
use ingest::{
    collectd, flat, graphite, httptrap, influx, otlp, remote_write, remote_write2, statsd, Batch,
    Options, Value, NAME_BYTES_MAX, REJECTIONS_LISTED_MAX, TAGS_PER_SAMPLE_MAX, TAG_BYTES_MAX,
};

/// 2026-11-22T00:00:00Z.
const NOW_MS: i64 = 1_795_305_600_000;

pub fn httptrap(data: &[u8]) {
    let batch = httptrap::parse(data, &Options::at(NOW_MS));
    check(data, &batch);
    httptrap_visit(data, &batch);
}

/// `httptrap::parse_into` keeps the promises of its lent series and points: within a document,
/// equal tag-list ids carry equal tags and an id does not come back once another followed it,
/// a lent suffix comes with the name as its raw series bytes, lent histogram bins are strictly
/// ascending with counts above zero, and the samples and rejections are `parse`'s, in its
/// order.
pub fn httptrap_visit(data: &[u8], batch: &Batch) {
    let mut checker = VisitChecker::default();
    httptrap::parse_into(data, &Options::at(NOW_MS), &mut checker);
    assert_eq!(
        checker.samples, batch.samples,
        "visit hands over parse's samples"
    );
    assert_eq!(checker.rejections, batch.rejected_total);
    assert_eq!(checker.stopped, batch.stopped());
    // The same with buffers kept from every body read before on this thread (as the server
    // keeps them): what earlier bodies left in them changes nothing.
    let mut kept = VisitChecker::default();
    SCRATCH.with(|scratch| {
        httptrap::parse_into_with(
            data,
            &Options::at(NOW_MS),
            &mut kept,
            &mut scratch.borrow_mut(),
        )
    });
    assert_eq!(
        kept.samples, batch.samples,
        "a kept scratch changes nothing"
    );
    assert_eq!(kept.rejections, batch.rejected_total);
    assert_eq!(kept.stopped, batch.stopped());
}

thread_local! {
    static SCRATCH: std::cell::RefCell<httptrap::Scratch> = Default::default();
}

#[derive(Default)]
struct VisitChecker {
    /// This document's ids in order of first use, with their tags.
    ids: Vec<(u64, Vec<(String, String)>)>,
    samples: Vec<ingest::Sample>,
    rejections: usize,
    stopped: bool,
}

impl ingest::Sink for VisitChecker {
    fn document(&mut self, _index: usize, _metrics: usize) {
        self.ids.clear();
    }

    fn sample(&mut self, series: &ingest::Series<'_>, point: ingest::Point<'_>) -> bool {
        assert!(!self.stopped, "no sample after a stopping rejection");
        match series.tags {
            ingest::TagsRef::List { id, tags } => {
                assert!(
                    series.raw.is_none(),
                    "raw bytes only with a lent suffix alone"
                );
                let tags = tags.to_vec();
                match self.ids.iter().position(|(seen, _)| *seen == id) {
                    Some(at) => {
                        assert_eq!(at, self.ids.len() - 1, "tag-list id {id} came back");
                        assert_eq!(self.ids[at].1, tags, "tag-list id {id}");
                    }
                    None => self.ids.push((id, tags)),
                }
            }
            ingest::TagsRef::Suffix(text) => {
                let raw = series.raw.expect("a lent suffix alone has raw bytes");
                assert_eq!(raw.first, series.name.to_string().as_bytes());
                assert_eq!(raw.second, text.as_bytes());
            }
            other => panic!("httptrap lends no {other:?}"),
        }
        assert_eq!(series.lookup, ingest::Lookup::NotAsked);
        if let ingest::ValueRef::Histogram(h) | ingest::ValueRef::CumulativeHistogram(h) =
            &point.value
        {
            match h {
                ingest::HistogramRef::Sorted { keys, counts } => {
                    assert_eq!(keys.len(), counts.len());
                    assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted keys");
                    assert!(counts.iter().all(|&c| c > 0), "counts above zero");
                }
                // Packed bins the store copies unchecked: they must unpack under every check.
                ingest::HistogramRef::Packed(bins) => {
                    let (h, used) = hist::packed::unpack_prefix(bins.bytes(), bins.bins())
                        .expect("packed bins unpack");
                    assert_eq!(used, bins.bytes().len(), "no byte after the bins");
                    assert_eq!(h.bin_count(), bins.bins());
                }
                ingest::HistogramRef::Built(_) => {}
            }
        }
        let (name, tags) = series.to_owned_parts();
        self.samples.push(ingest::Sample {
            name,
            tags,
            ts_ms: point.ts_ms,
            value: point.value.into_value(),
            mode: point.mode,
        });
        true
    }

    fn reject(
        &mut self,
        _location: &dyn Fn() -> String,
        _reason: ingest::Reason,
        scope: ingest::Scope,
    ) {
        assert!(!self.stopped, "nothing after a stopping rejection");
        self.rejections += 1;
        self.stopped = scope != ingest::Scope::One;
    }
}

pub fn statsd(data: &[u8]) {
    check(data, &statsd::parse(data, &Options::at(NOW_MS)));
}

/// A collectd datagram: also, one refused whole hands nothing over.
pub fn collectd(data: &[u8]) {
    let batch = collectd::parse(data, &Options::at(NOW_MS));
    if batch.stopped() {
        assert!(
            batch.samples.is_empty(),
            "a refused datagram hands nothing over"
        );
    }
    // Every value takes 9 bytes of a values part.
    assert!(batch.samples.len() <= data.len() / 9);
    check(data, &batch);
}

pub fn graphite(data: &[u8]) {
    check(data, &graphite::parse(data, &Options::at(NOW_MS)));
}

/// The first byte picks the precision, so the corpus covers every unit.
pub fn influx(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let precision = match first % 4 {
        0 => Precision::Nanoseconds,
        1 => Precision::Microseconds,
        2 => Precision::Milliseconds,
        _ => Precision::Seconds,
    };
    check(body, &influx::parse(body, &Options::at(NOW_MS), precision));
}

/// The first byte picks the layer: odd = a snappy body as sent, even = the protobuf behind it
/// (so the fuzzer reaches the decoder and the mapping without producing valid snappy).
pub fn remote_write(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let options = Options::at(NOW_MS);
    if first % 2 == 1 {
        // A snappy copy element expands 3 bytes into at most 64, so the protobuf is at most
        // ~21.3× the body; every sample needs bytes of its own in the protobuf.
        let raw_len_max = body.len().saturating_mul(22);
        check_within(
            raw_len_max,
            &remote_write::parse(body, &options),
            Floats::Any,
        );
    } else {
        check_within(
            body.len(),
            &remote_write::parse_decompressed(body, &options),
            Floats::Any,
        );
    }
}

/// Remote write 2.0 as [`remote_write`]; also: what the decoder reports written is what the
/// batch holds.
pub fn remote_write2(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let options = Options::at(NOW_MS);
    let mut batch = Batch::default();
    if first % 2 == 1 {
        let written = remote_write2::parse_into(body, &options, &mut batch);
        assert_eq!(written.samples + written.histograms, batch.samples.len());
        check_within(body.len().saturating_mul(22), &batch, Floats::Any);
    } else {
        let written = remote_write2::parse_decompressed_into(body, &options, &mut batch);
        assert_eq!(written.samples + written.histograms, batch.samples.len());
        check_within(body.len(), &batch, Floats::Any);
    }
}

/// The first byte picks the encoding: even = protobuf, odd = OTLP JSON.
pub fn otlp(data: &[u8]) {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let options = Options::at(NOW_MS);
    if first % 2 == 0 {
        check(body, &otlp::parse_protobuf(body, &options));
    } else {
        check(body, &otlp::parse_json(body, &options));
    }
}

/// The flatbuffer metric list (`flat::parse`), bytes as sent.
pub fn flat(data: &[u8]) {
    let batch = flat::parse(data, &Options::at(NOW_MS));
    // Every sample is a 6-byte `Metric` struct in a vector that fits the body unshared.
    assert!(
        batch.samples.len() <= data.len() / 6,
        "more samples than 6-byte metric structs in the body"
    );
    check(data, &batch);
}

/// Which numbers a protocol keeps: remote write keeps NaN and ±Inf as Prometheus does; every
/// other parser refuses them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Floats {
    Finite,
    Any,
}

fn check(data: &[u8], batch: &Batch) {
    check_within(data.len(), batch, Floats::Finite);
}

/// `input_len`: bytes of the decoded input; no batch holds more samples than that.
fn check_within(input_len: usize, batch: &Batch, floats: Floats) {
    let options = Options::at(NOW_MS);
    assert!(
        batch.samples.len() <= input_len,
        "more samples than input bytes"
    );
    assert!(batch.rejected.len() <= REJECTIONS_LISTED_MAX + 1);
    assert!(batch.rejected_total >= batch.rejected.len());
    let stops = batch.rejected.iter().filter(|r| r.rest_of_body).count();
    assert!(stops <= 1, "at most one stopping rejection");
    if stops == 1 {
        assert!(
            batch.rejected.last().unwrap().rest_of_body,
            "the stop is the last rejection"
        );
    }
    for rejection in &batch.rejected {
        assert!(!rejection.location.is_empty());
        assert!(!rejection.to_string().is_empty());
    }
    for sample in &batch.samples {
        assert!(!sample.name.is_empty() && sample.name.len() <= NAME_BYTES_MAX);
        assert!(sample.tags.len() <= TAGS_PER_SAMPLE_MAX);
        for (category, value) in sample.tags.iter() {
            assert!(!category.is_empty());
            assert!(category.len() <= TAG_BYTES_MAX && value.len() <= TAG_BYTES_MAX);
        }
        if let Some(ts_ms) = sample.ts_ms {
            assert_eq!(
                options.check_ts(ts_ms),
                Ok(ts_ms),
                "timestamp outside the window"
            );
        }
        match &sample.value {
            Value::Numeric(v) => assert!(
                v.is_finite() || floats == Floats::Any,
                "non-finite numeric {v}"
            ),
            Value::Histogram(h) | Value::CumulativeHistogram(h) => h.assert_invariants(),
            Value::Cumulative(c) => c.to_histogram().assert_invariants(),
            Value::Text(_) | Value::Null => {}
        }
    }
}
