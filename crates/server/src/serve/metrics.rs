//! Self-monitoring: request latency per endpoint, ingest batch sizes and store write time as
//! histograms (two `clock` reads + one `hist::Recorder` insert each), request and sample
//! counters; written into the store every base period as `strata:self` histogram streams and
//! served as Prometheus text on `GET /metrics`.
//!
//! `/metrics` format: counters as `counter`s; each histogram as a Prometheus `summary`
//! (quantiles 0.5, 0.9, 0.99 plus `_sum` and `_count`, in seconds or samples) over everything
//! since start — llhist quantiles are within a bin's 4.76 %, and a summary needs no bucket
//! boundaries chosen in advance.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hist::{Histogram, QuantileType, Recorder};
use store::key::{StreamKey, Tag};
use store::WriteBatch;

/// Where a request or datagram came in; one slot per endpoint in every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Httptrap,
    Influx,
    RemoteWrite,
    Otlp,
    Statsd,
    Graphite,
    Collectd,
    Find,
    Fetch,
    Caql,
    Metrics,
    Health,
    PromApi,
    Other,
}

impl Endpoint {
    pub const ALL: [Endpoint; 14] = [
        Endpoint::Httptrap,
        Endpoint::Influx,
        Endpoint::RemoteWrite,
        Endpoint::Otlp,
        Endpoint::Statsd,
        Endpoint::Graphite,
        Endpoint::Collectd,
        Endpoint::Find,
        Endpoint::Fetch,
        Endpoint::Caql,
        Endpoint::Metrics,
        Endpoint::Health,
        Endpoint::PromApi,
        Endpoint::Other,
    ];
    const COUNT: usize = Endpoint::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Httptrap => "httptrap",
            Endpoint::Influx => "influx",
            Endpoint::RemoteWrite => "remote_write",
            Endpoint::Otlp => "otlp",
            Endpoint::Statsd => "statsd",
            Endpoint::Graphite => "graphite",
            Endpoint::Collectd => "collectd",
            Endpoint::Find => "find",
            Endpoint::Fetch => "fetch",
            Endpoint::Caql => "caql",
            Endpoint::Metrics => "metrics",
            Endpoint::Health => "health",
            Endpoint::PromApi => "prom_api",
            Endpoint::Other => "other",
        }
    }

    /// The endpoint of a request path (the router's paths; anything else is `Other`).
    /// An endpoint whose requests carry a body to write (read before the request takes a slot).
    pub fn is_ingest(self) -> bool {
        matches!(
            self,
            Endpoint::Httptrap | Endpoint::Influx | Endpoint::RemoteWrite | Endpoint::Otlp
        )
    }

    pub fn of_path(path: &str) -> Endpoint {
        if path.starts_with("/module/httptrap/") || path.starts_with("/write/") {
            Endpoint::Httptrap
        } else if path == "/write" || path == "/api/v2/write" {
            Endpoint::Influx
        } else if path == "/api/v1/write" {
            Endpoint::RemoteWrite
        } else if path == "/v1/metrics" {
            Endpoint::Otlp
        } else if path == "/api/strata/v1/find" {
            Endpoint::Find
        } else if path == "/api/strata/v1/fetch" {
            Endpoint::Fetch
        } else if path == "/api/strata/v1/caql" {
            Endpoint::Caql
        } else if path == "/metrics" {
            Endpoint::Metrics
        } else if path == "/health" {
            Endpoint::Health
        } else if path.starts_with("/api/v1/") {
            Endpoint::PromApi
        } else {
            Endpoint::Other
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Status classes counted per endpoint.
const STATUS_CLASSES: [&str; 4] = ["2xx", "3xx", "4xx", "5xx"];

/// One histogram: the current period (written to the store, then cleared) and the total since
/// start (for `/metrics`).
#[derive(Default)]
struct Timing {
    period: Recorder,
    total: Histogram,
}

#[derive(Default)]
struct PerEndpoint {
    latency: Mutex<Timing>,
    batch_samples: Mutex<Timing>,
    requests: [AtomicU64; 4],
    samples_accepted: AtomicU64,
    samples_rejected: AtomicU64,
}

pub struct Metrics {
    endpoints: Vec<PerEndpoint>,
    store_write: Mutex<Timing>,
    store_write_errors: AtomicU64,
    /// When the server started (unix ms), for its uptime.
    started_ms: i64,
}

/// Counters since start, for the landing page's health summary.
pub struct Totals {
    pub started_ms: i64,
    /// Requests by status class: 2xx, 3xx, 4xx, 5xx.
    pub requests: [u64; 4],
    /// `(endpoint, accepted, rejected)` for endpoints that ingested anything.
    pub ingest: Vec<(&'static str, u64, u64)>,
    pub store_write_errors: u64,
}

/// The status classes `Totals::requests` counts, in order.
pub const STATUS_CLASS_NAMES: [&str; 4] = STATUS_CLASSES;

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

fn record(timing: &Mutex<Timing>, value: i64, scale: i32) {
    if let Ok(mut t) = timing.lock() {
        t.period.insert_intscale(value, scale);
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            endpoints: (0..Endpoint::COUNT)
                .map(|_| PerEndpoint::default())
                .collect(),
            store_write: Mutex::new(Timing::default()),
            store_write_errors: AtomicU64::new(0),
            started_ms: super::now_ms(),
        }
    }

    /// Everything counted since start.
    pub fn totals(&self) -> Totals {
        let mut requests = [0u64; 4];
        let mut ingest = Vec::new();
        for e in Endpoint::ALL {
            let at = self.at(e);
            for (i, n) in requests.iter_mut().enumerate() {
                *n += at.requests[i].load(Ordering::Relaxed);
            }
            let accepted = at.samples_accepted.load(Ordering::Relaxed);
            let rejected = at.samples_rejected.load(Ordering::Relaxed);
            if accepted + rejected > 0 {
                ingest.push((e.name(), accepted, rejected));
            }
        }
        Totals {
            started_ms: self.started_ms,
            requests,
            ingest,
            store_write_errors: self.store_write_errors.load(Ordering::Relaxed),
        }
    }

    fn at(&self, endpoint: Endpoint) -> &PerEndpoint {
        &self.endpoints[endpoint.slot()]
    }

    /// One finished request: its latency (ns) and status.
    pub fn request(&self, endpoint: Endpoint, latency_ns: u64, status: u16) {
        let e = self.at(endpoint);
        let class = usize::from(status / 100).clamp(2, 5) - 2;
        e.requests[class].fetch_add(1, Ordering::Relaxed);
        record(&e.latency, latency_ns.min(i64::MAX as u64) as i64, -9);
    }

    /// One ingested batch: accepted and rejected sample counts.
    pub fn batch(&self, endpoint: Endpoint, accepted: usize, rejected: usize) {
        let e = self.at(endpoint);
        e.samples_accepted
            .fetch_add(accepted as u64, Ordering::Relaxed);
        e.samples_rejected
            .fetch_add(rejected as u64, Ordering::Relaxed);
        record(&e.batch_samples, accepted as i64, 0);
    }

    pub fn store_write(&self, elapsed_ns: u64, ok: bool) {
        if !ok {
            self.store_write_errors.fetch_add(1, Ordering::Relaxed);
        }
        record(
            &self.store_write,
            elapsed_ns.min(i64::MAX as u64) as i64,
            -9,
        );
    }

    /// Every histogram stream with its current period's contents, each period then folded into
    /// the total and cleared. Streams with nothing recorded are left out.
    fn take_periods(&self) -> Vec<(StreamKey, Histogram)> {
        let mut out = Vec::new();
        let mut take = |name: &str, endpoint: Option<Endpoint>, timing: &Mutex<Timing>| {
            let Ok(mut t) = timing.lock() else { return };
            if t.period.sample_count() == 0 {
                return;
            }
            let h = t.period.to_histogram();
            t.period.clear();
            t.total.merge(&h);
            drop(t);
            let mut tags = vec![Tag::new("strata", "self")];
            if let Some(e) = endpoint {
                tags.push(Tag::new("endpoint", e.name()));
            }
            let tags: Result<Vec<Tag>, _> = tags.into_iter().collect();
            if let Ok(key) = tags.and_then(|tags| StreamKey::new(name, tags)) {
                out.push((key, h));
            }
        };
        for e in Endpoint::ALL {
            let at = self.at(e);
            take("strata.http.request_latency", Some(e), &at.latency);
            take("strata.ingest.batch_samples", Some(e), &at.batch_samples);
        }
        take("strata.store.write_latency", None, &self.store_write);
        out
    }

    /// The self-monitoring batch for one period, stamped `now_ms`.
    pub fn period_batch(&self, now_ms: i64) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for (key, h) in self.take_periods() {
            // Only fails at BATCH_SAMPLES_MAX, far above the few dozen streams here.
            let _ = batch.histogram(&key, now_ms, &h);
        }
        batch
    }

    /// Everything since start, current period included, as Prometheus text.
    pub fn prometheus_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP strata_http_requests_total Requests (and statsd datagrams, Graphite flushes) by endpoint and status class.\n# TYPE strata_http_requests_total counter"
        );
        for e in Endpoint::ALL {
            for (i, class) in STATUS_CLASSES.iter().enumerate() {
                let n = self.at(e).requests[i].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "strata_http_requests_total{{endpoint=\"{}\",code=\"{class}\"}} {n}",
                        e.name()
                    );
                }
            }
        }
        for (metric, help, load) in [
            (
                "strata_ingest_samples_accepted_total",
                "Samples accepted by endpoint.",
                (|p: &PerEndpoint| p.samples_accepted.load(Ordering::Relaxed))
                    as fn(&PerEndpoint) -> u64,
            ),
            (
                "strata_ingest_samples_rejected_total",
                "Samples, lines or documents rejected by endpoint.",
                |p: &PerEndpoint| p.samples_rejected.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
            for e in Endpoint::ALL {
                let n = load(self.at(e));
                if n > 0 {
                    let _ = writeln!(out, "{metric}{{endpoint=\"{}\"}} {n}", e.name());
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP strata_store_write_errors_total Store writes that failed.\n# TYPE strata_store_write_errors_total counter\nstrata_store_write_errors_total {}",
            self.store_write_errors.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP strata_http_request_duration_seconds Request latency by endpoint.\n# TYPE strata_http_request_duration_seconds summary"
        );
        for e in Endpoint::ALL {
            summary(
                &mut out,
                "strata_http_request_duration_seconds",
                Some(e),
                &self.at(e).latency,
            );
        }
        let _ = writeln!(
            out,
            "# HELP strata_ingest_batch_samples Samples accepted per ingested batch.\n# TYPE strata_ingest_batch_samples summary"
        );
        for e in Endpoint::ALL {
            summary(
                &mut out,
                "strata_ingest_batch_samples",
                Some(e),
                &self.at(e).batch_samples,
            );
        }
        let _ = writeln!(
            out,
            "# HELP strata_store_write_duration_seconds Store::write time (durable acknowledgement).\n# TYPE strata_store_write_duration_seconds summary"
        );
        summary(
            &mut out,
            "strata_store_write_duration_seconds",
            None,
            &self.store_write,
        );
        out
    }
}

fn summary(out: &mut String, metric: &str, endpoint: Option<Endpoint>, timing: &Mutex<Timing>) {
    let Ok(t) = timing.lock() else { return };
    let mut h = t.total.clone();
    h.merge(&t.period.to_histogram());
    drop(t);
    if h.sample_count() == 0 {
        return;
    }
    let label = endpoint
        .map(|e| format!("endpoint=\"{}\"", e.name()))
        .unwrap_or_default();
    let sep = if label.is_empty() { "" } else { "," };
    let qs = [0.5, 0.9, 0.99];
    if let Ok(values) = h.quantiles(&qs, QuantileType::Type1) {
        for (q, v) in qs.iter().zip(values) {
            let _ = writeln!(out, "{metric}{{{label}{sep}quantile=\"{q}\"}} {v}");
        }
    }
    let braces = if label.is_empty() {
        String::new()
    } else {
        format!("{{{label}}}")
    };
    let _ = writeln!(out, "{metric}_sum{braces} {}", h.sum());
    let _ = writeln!(out, "{metric}_count{braces} {}", h.sample_count());
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn period_is_written_once_and_kept_in_the_total() {
        let m = Metrics::new();
        m.request(Endpoint::Influx, 1_500_000, 204);
        m.request(Endpoint::Influx, 2_500_000, 400);
        let batch = m.period_batch(60_000);
        let keys: Vec<_> = batch.samples().map(|(key, _, _)| key).collect();
        assert_eq!(
            keys,
            vec![store::KeyRef::Text(
                "strata.http.request_latency|ST[endpoint:influx,strata:self]"
            )]
        );
        assert!(
            m.period_batch(120_000).is_empty(),
            "a period is written once"
        );
        let text = m.prometheus_text();
        assert!(text.contains("strata_http_requests_total{endpoint=\"influx\",code=\"2xx\"} 1"));
        assert!(text.contains("strata_http_requests_total{endpoint=\"influx\",code=\"4xx\"} 1"));
        assert!(text.contains("strata_http_request_duration_seconds_count{endpoint=\"influx\"} 2"));
    }
}
