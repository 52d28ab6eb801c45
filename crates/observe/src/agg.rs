//! Per-period histograms: every paired request lands in its period's streams (latency, time to
//! first response byte, request and response bytes, rows), keyed by its tags.
//!
//! Cardinality is capped per period: each tag category of each observed port takes at most
//! `tag_values_max` distinct values (the rest are recorded under the value `overflow` and
//! counted), and a period holds at most `streams_max` streams (requests beyond are counted, not
//! recorded).

use std::collections::BTreeMap;

use std::fmt::Write as _;

use foldhash::{HashMap, HashSet};

use hist::Recorder;

use crate::stream::Span;

/// Periods open at once: a request older than the oldest is counted late, not recorded.
pub const PERIODS_OPEN_MAX: usize = 3;

/// The histograms of one stream in one period.
pub struct Hists {
    pub latency: Recorder,
    pub ttfb: Recorder,
    pub request_bytes: Recorder,
    pub response_bytes: Recorder,
    pub rows: Option<Recorder>,
}

impl Hists {
    fn new() -> Hists {
        Hists {
            latency: Recorder::new(),
            ttfb: Recorder::new(),
            request_bytes: Recorder::new(),
            response_bytes: Recorder::new(),
            rows: None,
        }
    }
}

/// A tag category of one observed port: (proto, port, category).
type Slot = (&'static str, u16, &'static str);

#[derive(Default)]
struct Period {
    streams: HashMap<String, Hists>,
    values: HashMap<Slot, HashSet<Box<str>>>,
    overflow: HashMap<Slot, u64>,
    streams_overflow: u64,
}

/// A closed period, ready to send.
pub struct Closed {
    pub start_ms: u64,
    /// Stream tags (`proto:http,port:8080,…`) and their histograms.
    pub streams: Vec<(String, Hists)>,
    /// Tag values recorded as `overflow`, per `proto:…,port:…,tag:…`.
    pub overflow: Vec<(String, u64)>,
    pub streams_overflow: u64,
}

pub struct Agg {
    period_ns: u64,
    periods: BTreeMap<u64, Period>,
    pub tag_values_max: usize,
    pub streams_max: usize,
    pub late: u64,
    /// The key being built (kept to spare an allocation per request).
    scratch: String,
}

/// One paired request as the aggregator takes it.
pub struct Record<'a> {
    pub proto: &'static str,
    pub port: u16,
    pub tags: &'a [(&'static str, &'a str)],
    pub req: &'a Span,
    pub resp: &'a Span,
    pub rows: Option<u64>,
}

impl Agg {
    pub fn new(period_ms: u64, tag_values_max: usize, streams_max: usize) -> Agg {
        Agg {
            period_ns: period_ms.max(1) * 1_000_000,
            periods: BTreeMap::new(),
            tag_values_max,
            streams_max,
            late: 0,
            scratch: String::new(),
        }
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Opens the period holding `ts_ns` (so that a period with no requests still reports the
    /// observer's counters).
    pub fn touch(&mut self, ts_ns: u64) {
        let start = ts_ns - ts_ns % self.period_ns;
        if self
            .periods
            .last_key_value()
            .is_none_or(|(&last, _)| last < start)
        {
            self.periods.entry(start).or_default();
        }
    }

    pub fn record(&mut self, r: &Record<'_>) {
        let start = r.req.first_ns - r.req.first_ns % self.period_ns;
        if self.periods.len() >= PERIODS_OPEN_MAX && !self.periods.contains_key(&start) {
            match self.periods.keys().next() {
                Some(&oldest) if start < oldest => {
                    self.late += 1;
                    return;
                }
                // A jump forward: the oldest period is sent early, never dropped.
                _ => {}
            }
        }
        let (values_max, streams_max) = (self.tag_values_max, self.streams_max);
        let p = self.periods.entry(start).or_default();
        let key = &mut self.scratch;
        p.key(r, values_max, key);
        let n = p.streams.len();
        if !p.streams.contains_key(key.as_str()) {
            if n >= streams_max {
                p.streams_overflow += 1;
                return;
            }
            p.streams.insert(key.clone(), Hists::new());
        }
        let Some(h) = p.streams.get_mut(key.as_str()) else {
            return;
        };
        h.latency
            .insert_intscale(r.resp.last_ns.saturating_sub(r.req.first_ns) as i64, -9);
        h.ttfb
            .insert_intscale(r.resp.first_ns.saturating_sub(r.req.first_ns) as i64, -9);
        h.request_bytes.insert_intscale(r.req.bytes as i64, 0);
        h.response_bytes.insert_intscale(r.resp.bytes as i64, 0);
        if let Some(rows) = r.rows {
            h.rows
                .get_or_insert_with(Recorder::new)
                .insert_intscale(rows as i64, 0);
        }
    }

    /// Closes every period that ended at or before `now_ns` (all of them when `all`), and the
    /// oldest ones while more than [`PERIODS_OPEN_MAX`] are open.
    pub fn close(&mut self, now_ns: u64, all: bool) -> Vec<Closed> {
        let mut out = Vec::new();
        while let Some((&start, _)) = self.periods.first_key_value() {
            let ended = start + self.period_ns <= now_ns;
            if !(all || ended || self.periods.len() > PERIODS_OPEN_MAX) {
                break;
            }
            let Some(p) = self.periods.remove(&start) else {
                break;
            };
            out.push(Closed {
                start_ms: start / 1_000_000,
                streams: p.streams.into_iter().collect(),
                overflow: p
                    .overflow
                    .into_iter()
                    .map(|((proto, port, cat), n)| {
                        (format!("proto:{proto},port:{port},tag:{cat}"), n)
                    })
                    .collect(),
                streams_overflow: p.streams_overflow,
            });
        }
        out
    }
}

impl Period {
    /// The stream's tag text into `key`, with over-cap values replaced by `overflow`.
    fn key(&mut self, r: &Record<'_>, values_max: usize, key: &mut String) {
        key.clear();
        key.push_str("proto:");
        key.push_str(r.proto);
        key.push_str(",port:");
        let _ = write!(key, "{}", r.port);
        for &(cat, value) in r.tags {
            let slot = (r.proto, r.port, cat);
            let seen = self.values.entry(slot).or_default();
            let value = if seen.contains(value) {
                value
            } else if seen.len() < values_max {
                seen.insert(Box::from(value));
                value
            } else {
                *self.overflow.entry(slot).or_default() += 1;
                "overflow"
            };
            key.push(',');
            key.push_str(cat);
            key.push(':');
            push_tag_value(key, value);
        }
    }
}

/// A tag value in the stream-tag charset as it is, or as `b"<base64>"` otherwise.
pub fn push_tag_value(out: &mut String, v: &str) {
    let plain = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"`+!@#$%^&\"'/?._-:=".contains(&b));
    if plain {
        out.push_str(v);
        return;
    }
    out.push_str("b\"");
    base64(v.as_bytes(), out);
    out.push('"');
}

fn base64(bytes: &[u8], out: &mut String) {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(first: u64, last: u64) -> Span {
        Span {
            first_ns: first,
            last_ns: last,
            bytes: 10,
            probe: None,
        }
    }

    #[test]
    fn caps_tag_values_per_period() {
        let mut a = Agg::new(60_000, 2, 100);
        let (req, resp) = (span(1_000, 2_000), span(5_000, 9_000));
        for route in ["a", "b", "c", "d"] {
            let tags = [("route", route)];
            a.record(&Record {
                proto: "http",
                port: 80,
                tags: &tags,
                req: &req,
                resp: &resp,
                rows: None,
            });
        }
        let closed = a.close(0, true);
        assert_eq!(closed.len(), 1);
        let mut keys: Vec<&str> = closed[0].streams.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "proto:http,port:80,route:a",
                "proto:http,port:80,route:b",
                "proto:http,port:80,route:overflow"
            ]
        );
        assert_eq!(
            closed[0].overflow,
            [("proto:http,port:80,tag:route".to_string(), 2)]
        );
    }

    #[test]
    fn values_outside_the_charset_are_base64() {
        let mut s = String::new();
        push_tag_value(&mut s, "a b");
        assert_eq!(s, "b\"YSBi\"");
        let mut s = String::new();
        push_tag_value(&mut s, "");
        assert_eq!(s, "b\"\"");
    }
}
