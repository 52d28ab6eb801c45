//! statsd / DogStatsD aggregation: datagrams are parsed as they arrive into an [`Aggregator`]
//! (a sink), which keeps one value per stream and flush interval; the server writes its batch
//! once per interval (and at shutdown).
//!
//! Aggregation per stream (name + tags) and interval, stamped with the flush time unless the
//! line carried a timestamp (`|T`):
//! - counters (`c`): summed (each value already weighted by 1/rate by the parser);
//! - gauges (`g`): the last value set; a delta (`+v`/`-v`) is added to the gauge's latest value,
//!   which is remembered across intervals (as statsd does), else to 0;
//! - timers and histograms (`ms h d`): merged into one histogram;
//! - sets (`s`): the members are kept per interval and the number of distinct ones is written
//!   (up to `SET_MEMBERS_MAX` members per stream; beyond it the count stops growing);
//! - text (`t`): the last value.

use std::collections::{HashMap, HashSet};

use hist::Histogram;
use ingest::{Mode, Point, Reason, Scope, Series, Sink, ValueRef};
use store::key::StreamKey;
use store::WriteBatch;

/// Streams aggregated in one interval; samples of further streams are dropped (and counted).
pub const STREAMS_PER_INTERVAL_MAX: usize = 200_000;
/// Distinct members remembered per set stream and interval.
pub const SET_MEMBERS_MAX: usize = 100_000;
/// Gauges whose latest value is remembered across intervals for deltas.
pub const GAUGES_REMEMBERED_MAX: usize = 200_000;

enum Agg {
    /// Sum of increments, and whether the stream is a gauge (a delta applies to its last value).
    Sum(f64),
    Gauge(f64),
    Hist(Histogram),
    Text(String),
    Set(HashSet<String>),
}

#[derive(Default)]
pub struct Aggregator {
    /// Per (stream, explicit timestamp) in first-seen order.
    slots: HashMap<(StreamKey, Option<i64>), Agg>,
    order: Vec<(StreamKey, Option<i64>)>,
    gauges: HashMap<StreamKey, f64>,
    dropped: usize,
}

/// The type section of a statsd line (`name:values|type|…`), if it has one.
fn line_type(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let colon = line.iter().position(|&b| b == b':')?;
    let rest = &line[colon + 1..];
    let pipe = rest.iter().position(|&b| b == b'|')?;
    let kind = &rest[pipe + 1..];
    Some(&kind[..kind.iter().position(|&b| b == b'|').unwrap_or(kind.len())])
}

impl Aggregator {
    /// Adds one datagram; returns (accepted, rejected) sample counts. Set lines are read one by
    /// one so their members can be counted distinct over the interval (the parser only sees one
    /// datagram); every other line goes through one parse of the rest.
    pub fn add_datagram(&mut self, datagram: &[u8], options: &ingest::Options) -> (usize, usize) {
        let has_set = datagram
            .split(|&b| b == b'\n')
            .any(|line| line_type(line) == Some(b"s"));
        if !has_set {
            return self.add(datagram, options);
        }
        let mut rest = Vec::with_capacity(datagram.len());
        let (mut accepted, mut rejected) = (0, 0);
        for line in datagram.split(|&b| b == b'\n') {
            if line_type(line) != Some(b"s") {
                rest.extend_from_slice(line);
                rest.push(b'\n');
                continue;
            }
            let mut first = FirstKey::default();
            ingest::statsd::parse_into(line, options, &mut first);
            rejected += first.rejected;
            let (key, ts_ms) = match first.key {
                Some((Ok(key), ts_ms)) => (key, ts_ms),
                Some((Err(_), _)) => {
                    rejected += 1;
                    continue;
                }
                None => continue,
            };
            // The parser accepted the line, so it is UTF-8 with `:` and `|` where expected.
            let text = String::from_utf8_lossy(line);
            let values = text
                .split_once(':')
                .map(|(_, r)| r.split('|').next().unwrap_or(""))
                .unwrap_or("");
            let slot_key = (key, ts_ms);
            if !self.slots.contains_key(&slot_key) && self.slots.len() >= STREAMS_PER_INTERVAL_MAX {
                self.dropped += 1;
                rejected += 1;
                continue;
            }
            if !matches!(self.slots.get(&slot_key), Some(Agg::Set(_))) {
                self.put(slot_key.clone(), Agg::Set(HashSet::new()));
            }
            if let Some(Agg::Set(members)) = self.slots.get_mut(&slot_key) {
                for member in values.split(':') {
                    if members.len() < SET_MEMBERS_MAX {
                        members.insert(member.to_owned());
                    }
                }
            }
            accepted += 1;
        }
        let (a, r) = self.add(&rest, options);
        (accepted + a, rejected + r)
    }

    /// Adds the lines of a datagram (no set lines among them); returns (accepted, rejected)
    /// sample counts.
    pub fn add(&mut self, lines: &[u8], options: &ingest::Options) -> (usize, usize) {
        let mut adding = Adding {
            aggregator: self,
            accepted: 0,
            rejected: 0,
        };
        ingest::statsd::parse_into(lines, options, &mut adding);
        (adding.accepted, adding.rejected)
    }

    /// Adds one sample; false when it is dropped (a stream over the interval's bound) or
    /// refused (a sum or gauge delta that would overflow to an infinity).
    fn add_sample(
        &mut self,
        key: StreamKey,
        ts_ms: Option<i64>,
        value: ValueRef<'_>,
        mode: Mode,
    ) -> bool {
        let slot_key = (key, ts_ms);
        if !self.slots.contains_key(&slot_key) && self.slots.len() >= STREAMS_PER_INTERVAL_MAX {
            self.dropped += 1;
            return false;
        }
        let remembered = self.gauges.get(&slot_key.0).copied();
        match (value, mode) {
            (ValueRef::Numeric(v), Mode::Set) => {
                self.put(slot_key, Agg::Gauge(v));
            }
            // A sum or a gauge delta past f64's range would store ±Inf: that sample is refused
            // and the value so far kept.
            (ValueRef::Numeric(v), _) => match self.slots.get_mut(&slot_key) {
                Some(Agg::Sum(s)) | Some(Agg::Gauge(s)) => {
                    if !(*s + v).is_finite() {
                        return false;
                    }
                    *s += v;
                }
                Some(other) => *other = Agg::Sum(v),
                None => match remembered {
                    Some(g) if !(g + v).is_finite() => return false,
                    Some(g) => self.put(slot_key, Agg::Gauge(g + v)),
                    None => self.put(slot_key, Agg::Sum(v)),
                },
            },
            (ValueRef::Histogram(h), _) | (ValueRef::CumulativeHistogram(h), _) => {
                let h = h.into_histogram();
                match self.slots.get_mut(&slot_key) {
                    Some(Agg::Hist(acc)) => acc.merge(&h),
                    _ => self.put(slot_key, Agg::Hist(h)),
                }
            }
            // statsd bodies carry no running totals; a sink's contract still takes them.
            (ValueRef::Cumulative(c), _) => {
                let h = c.to_histogram();
                match self.slots.get_mut(&slot_key) {
                    Some(Agg::Hist(acc)) => acc.merge(&h),
                    _ => self.put(slot_key, Agg::Hist(h)),
                }
            }
            (ValueRef::Text(t), _) => self.put(slot_key, Agg::Text(t.to_owned())),
            (ValueRef::Null, _) => {}
        }
        true
    }

    fn put(&mut self, slot_key: (StreamKey, Option<i64>), agg: Agg) {
        if !self.slots.contains_key(&slot_key) {
            self.order.push(slot_key.clone());
        }
        self.slots.insert(slot_key, agg);
    }

    /// The interval's batch, stamped `now_ms` where no timestamp was given; empties the interval.
    /// The metric families of this interval and their Prometheus types (counters `c` a
    /// counter, gauges `g` and sets `s` a gauge, timers and histograms `ms h d` a histogram),
    /// for `/api/v1/metadata`; one per name (the first stream's type), text streams none.
    /// Call before [`Aggregator::take`].
    pub fn families(&self) -> Vec<ingest::MetadataOwned> {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut out = Vec::new();
        for slot_key in &self.order {
            let kind = match self.slots.get(slot_key) {
                Some(Agg::Sum(_)) => ingest::MetricType::Counter,
                Some(Agg::Gauge(_) | Agg::Set(_)) => ingest::MetricType::Gauge,
                Some(Agg::Hist(_)) => ingest::MetricType::Histogram,
                Some(Agg::Text(_)) | None => continue,
            };
            let name = slot_key.0.name();
            if seen.insert(name) {
                out.push(ingest::MetadataOwned {
                    family: name.to_owned(),
                    kind,
                    help: String::new(),
                    unit: String::new(),
                });
            }
        }
        out
    }

    pub fn take(&mut self, now_ms: i64) -> WriteBatch {
        let mut batch = WriteBatch::new();
        let order = std::mem::take(&mut self.order);
        if self.dropped > 0 {
            tracing::warn!(
                dropped = self.dropped,
                "statsd: samples of streams over STREAMS_PER_INTERVAL_MAX dropped this interval"
            );
            self.dropped = 0;
        }
        for slot_key in order {
            let Some(agg) = self.slots.remove(&slot_key) else {
                continue;
            };
            let (key, ts) = slot_key;
            let ts_ms = ts.unwrap_or(now_ms);
            let value = match agg {
                Agg::Sum(v) => store::Value::Numeric(v),
                Agg::Gauge(v) => {
                    if self.gauges.len() < GAUGES_REMEMBERED_MAX || self.gauges.contains_key(&key) {
                        self.gauges.insert(key.clone(), v);
                    }
                    store::Value::Numeric(v)
                }
                Agg::Hist(h) => store::Value::Histogram(h),
                Agg::Text(t) => store::Value::Text(t),
                Agg::Set(members) => store::Value::Numeric(members.len() as f64),
            };
            if let Err(e) = batch.push(&key, ts_ms, value) {
                tracing::warn!(key = %key.canonical(), error = %e, "statsd: sample not written");
            }
        }
        batch
    }
}

/// A datagram's samples into the aggregator, counted.
struct Adding<'g> {
    aggregator: &'g mut Aggregator,
    accepted: usize,
    rejected: usize,
}

impl Sink for Adding<'_> {
    fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool {
        let key = match crate::stream_key(series) {
            Ok(key) => key,
            Err(e) => {
                tracing::debug!(name = %series.name, error = %e, "statsd: bad stream key");
                self.rejected += 1;
                return true;
            }
        };
        if self
            .aggregator
            .add_sample(key, point.ts_ms, point.value, point.mode)
        {
            self.accepted += 1;
        } else {
            self.rejected += 1;
        }
        true
    }

    fn reject(&mut self, _location: &dyn Fn() -> String, _reason: Reason, _scope: Scope) {
        self.rejected += 1;
    }
}

/// The stream key and timestamp of a set line's first sample, and the line's rejections.
#[derive(Default)]
struct FirstKey {
    key: Option<(Result<StreamKey, store::key::KeyError>, Option<i64>)>,
    rejected: usize,
}

impl Sink for FirstKey {
    fn sample(&mut self, series: &Series<'_>, point: Point<'_>) -> bool {
        if self.key.is_none() {
            self.key = Some((crate::stream_key(series), point.ts_ms));
        }
        true
    }

    fn reject(&mut self, _location: &dyn Fn() -> String, _reason: Reason, _scope: Scope) {
        self.rejected += 1;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn numbers(batch: &WriteBatch) -> Vec<(String, f64)> {
        batch
            .samples()
            .filter_map(|(key, _, v)| match (key, &*v) {
                (store::KeyRef::Text(k), store::Value::Numeric(x)) => Some((k.to_owned(), *x)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn counters_sum_gauges_keep_last_and_deltas_carry_over() {
        let opts = ingest::Options::at(1_800_000_000_000);
        let mut agg = Aggregator::default();
        agg.add(b"hits:2|c\ntemp:10|g\n", &opts);
        agg.add(b"hits:3|c\ntemp:+5|g\nlat:1|ms\nlat:2|ms\n", &opts);
        let first = agg.take(1);
        assert_eq!(
            numbers(&first),
            vec![("hits".to_owned(), 5.0), ("temp".to_owned(), 15.0)]
        );
        let lat = first
            .samples()
            .find(|(key, _, _)| *key == store::KeyRef::Text("lat"))
            .unwrap();
        match &*lat.2 {
            store::Value::Histogram(h) => assert_eq!(h.sample_count(), 2),
            other => panic!("{other:?}"),
        }
        // Next interval: a delta applies to the remembered gauge; counters start again.
        agg.add(b"temp:-3|g\nhits:1|c\n", &opts);
        assert_eq!(
            numbers(&agg.take(2)),
            vec![("temp".to_owned(), 12.0), ("hits".to_owned(), 1.0)]
        );
        assert!(agg.take(3).is_empty());
    }

    /// A counter sum or a gauge delta past f64's range is refused (it stored +Inf before) and
    /// the value so far kept, within an interval and across intervals.
    #[test]
    fn overflowing_sums_and_deltas_are_refused() {
        let opts = ingest::Options::at(1_800_000_000_000);
        let mut agg = Aggregator::default();
        assert_eq!(agg.add(b"g:1e308|g\ng:+1e308|g\n", &opts), (1, 1));
        assert_eq!(agg.add(b"c:1e308|c\nc:1e308|c\n", &opts), (1, 1));
        assert_eq!(
            numbers(&agg.take(1)),
            vec![("g".to_owned(), 1e308), ("c".to_owned(), 1e308)]
        );
        assert_eq!(agg.add(b"g:+1e308|g\n", &opts), (0, 1));
        assert_eq!(agg.add(b"g:-1|g\n", &opts), (1, 0));
        assert_eq!(numbers(&agg.take(2)), vec![("g".to_owned(), 1e308 - 1.0)]);
    }

    #[test]
    fn set_members_are_distinct_over_the_interval() {
        let opts = ingest::Options::at(1_800_000_000_000);
        let mut agg = Aggregator::default();
        assert_eq!(
            agg.add_datagram(b"users:alice|s\nhits:1|c\nusers:bob|s", &opts),
            (3, 0)
        );
        assert_eq!(
            agg.add_datagram(b"users:alice|s\r\nusers:carol:bob|s\r\n", &opts),
            (2, 0)
        );
        assert_eq!(
            numbers(&agg.take(1)),
            vec![("users".to_owned(), 3.0), ("hits".to_owned(), 1.0)]
        );
        assert_eq!(agg.add_datagram(b"users:dave|s|#a:b", &opts), (1, 0));
        assert_eq!(
            numbers(&agg.take(2)),
            vec![("users|ST[a:b]".to_owned(), 1.0)]
        );
    }
}
