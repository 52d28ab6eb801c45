//! What a check returns: named, tagged values, and the collector the checks fill as they go (so
//! a check stopped at its deadline still returns the phases it finished).

use std::time::Duration;

/// One measured value of one stream. The broker stamps it with the scheduled time.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub name: String,
    /// The measurement's own tags (a Prometheus series' labels, a database name, …) followed by
    /// the spec's tags.
    pub tags: Vec<(String, String)>,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Numeric(f64),
    Text(String),
    /// Samples measured by this run (latencies in seconds), merged by the store per period.
    Histogram(hist::Histogram),
    /// A running total since the sender started (Prometheus native histograms), kept in the
    /// sender's buckets and differenced by the store.
    Cumulative(hist::convert::Cumulative),
}

/// Collects a run's measurements as the phases complete. `up` and `status` are kept aside and
/// written last, once, whatever path the check took.
#[derive(Default)]
pub(crate) struct Out {
    list: Vec<Measurement>,
    up: Option<bool>,
    status: Option<String>,
}

impl Out {
    pub(crate) fn numeric(&mut self, name: &str, value: f64) {
        self.push(name, Vec::new(), Value::Numeric(value));
    }

    pub(crate) fn text(&mut self, name: &str, value: impl Into<String>) {
        self.push(name, Vec::new(), Value::Text(value.into()));
    }

    /// One latency sample, in seconds, added to this run's histogram of that name (a redirect's
    /// second connect is a second sample of `connect_time`, not a second measurement).
    pub(crate) fn seconds(&mut self, name: &str, elapsed: Duration) {
        let found = self
            .list
            .iter_mut()
            .find(|m| m.name == name && m.tags.is_empty());
        if let Some(Measurement {
            value: Value::Histogram(h),
            ..
        }) = found
        {
            return h.insert(elapsed.as_secs_f64());
        }
        let mut h = hist::Histogram::new();
        h.insert(elapsed.as_secs_f64());
        self.push(name, Vec::new(), Value::Histogram(h));
    }

    pub(crate) fn push(&mut self, name: &str, tags: Vec<(String, String)>, value: Value) {
        self.list.push(Measurement {
            name: name.to_owned(),
            tags,
            value,
        });
    }

    pub(crate) fn push_owned(&mut self, measurement: Measurement) {
        self.list.push(measurement);
    }

    /// The service answered as expected.
    pub(crate) fn ok(&mut self) {
        self.up = Some(true);
        self.status = Some("ok".to_owned());
    }

    /// The service failed; `status` says how (a person reads it).
    pub(crate) fn fail(&mut self, status: impl Into<String>) {
        self.up = Some(false);
        self.status = Some(status.into());
    }

    /// The service answered, but not wholly (some pings lost): up, with `status` saying what.
    pub(crate) fn partly(&mut self, status: impl Into<String>) {
        self.up = Some(true);
        self.status = Some(status.into());
    }

    /// The deadline stopped the check: what it measured so far stays.
    pub(crate) fn timed_out(&mut self) {
        self.fail("timeout");
    }

    /// The list, with `up` and `status` appended and `tags` added to every measurement.
    pub(crate) fn finish(mut self, tags: &[(String, String)]) -> Vec<Measurement> {
        let up = self.up.unwrap_or(false);
        let status = self.status.take().unwrap_or_else(|| "no result".to_owned());
        self.numeric("up", if up { 1.0 } else { 0.0 });
        self.text("status", status);
        for m in &mut self.list {
            m.tags.extend(tags.iter().cloned());
        }
        self.list
    }
}
