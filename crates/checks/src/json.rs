//! `json`: GETs a document in httptrap JSON form (Strata's push format) and returns its
//! metrics, read by the server's own parser (`ingest::httptrap`): numbers, text, histograms
//! (`"H[1.2e-01]=40"` bins) and cumulative histograms (`_type: "H"`). The document's own `_ts`
//! timestamps and `_fl` modes are not kept: the broker stamps each run's measurements.

use hyper::header::{HeaderValue, ACCEPT};
use hyper::Method;
use serde::Deserialize;

use crate::error::CheckError;
use crate::http::{self, Fetch};
use crate::measure::{Measurement, Out, Value};
use crate::spec::{self, CheckSpec};
use crate::tls;

/// Largest document read; a larger one fails the check.
pub const BODY_BYTES_MAX: usize = 16 << 20;
/// Most metrics taken from one document; more fails the check.
pub const METRICS_MAX: usize = 100_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    headers: Option<std::collections::BTreeMap<String, String>>,
    tls_verify: Option<bool>,
    ca_file: Option<std::path::PathBuf>,
    cert_file: Option<std::path::PathBuf>,
    key_file: Option<std::path::PathBuf>,
    server_name: Option<String>,
}

pub(crate) struct Config {
    fetch: Fetch,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let o: Options = spec::options(spec)?;
    let tls = tls::Options {
        tls_verify: o.tls_verify,
        ca_file: o.ca_file,
        cert_file: o.cert_file,
        key_file: o.key_file,
        server_name: o.server_name,
    };
    tls.check()?;
    let mut headers = http::headers(o.headers.unwrap_or_default())?;
    headers.push((ACCEPT, HeaderValue::from_static("application/json")));
    Ok(Config {
        fetch: Fetch {
            method: Method::GET,
            uri: http::url(&spec.target, None)?,
            headers,
            body: Default::default(),
            redirects_max: 0,
            body_max: BODY_BYTES_MAX,
            tls,
        },
    })
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let Some(response) = http::fetch(&c.fetch, out).await? else {
        return Ok(());
    };
    out.numeric("code", f64::from(response.status));
    out.numeric("bytes", response.body.len() as f64);
    if !(200..300).contains(&response.status) {
        out.fail(format!("unexpected status {}", response.status));
        return Ok(());
    }
    match read(&response.body) {
        Ok(document) => {
            let metrics = document.metrics.len();
            for m in document.metrics {
                out.push_owned(m);
            }
            out.numeric("metrics", metrics as f64);
            out.numeric("rejected", document.rejected as f64);
            match document.first_rejection {
                Some(r) => out.partly(format!("rejected: {r}")),
                None => out.ok(),
            }
        }
        Err(status) => out.fail(status),
    }
    Ok(())
}

/// A document's metrics and what the parser refused.
pub struct Document {
    pub metrics: Vec<Measurement>,
    pub rejected: usize,
    /// The first rejection, with its location, as the server would answer it.
    pub first_rejection: Option<String>,
}

/// Reads an httptrap body. `Err` when nothing can be taken from it (a JSON syntax error before
/// any metric, too many metrics).
pub fn read(body: &[u8]) -> Result<Document, String> {
    // Timestamps in the document are dropped, so any receipt time serves for the window.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let batch = ingest::httptrap::parse(body, &ingest::Options::at(now_ms));
    if batch.samples.len() > METRICS_MAX {
        return Err(format!("more than {METRICS_MAX} metrics in the document"));
    }
    let first_rejection = batch.rejected.first().map(|r| r.to_string());
    if batch.samples.is_empty() && batch.stopped() {
        return Err(format!(
            "not httptrap JSON: {}",
            first_rejection.unwrap_or_default()
        ));
    }
    let metrics = batch.samples.into_iter().filter_map(measurement).collect();
    Ok(Document {
        metrics,
        rejected: batch.rejected_total,
        first_rejection,
    })
}

fn measurement(s: ingest::Sample) -> Option<Measurement> {
    let value = match s.value {
        ingest::Value::Numeric(v) => Value::Numeric(v),
        ingest::Value::Text(t) => Value::Text(t),
        ingest::Value::Histogram(h) => Value::Histogram(h),
        ingest::Value::CumulativeHistogram(h) => {
            Value::Cumulative(hist::convert::Cumulative::Bins(h))
        }
        ingest::Value::Cumulative(c) => Value::Cumulative(c),
        // A metric present with no value: nothing to record this run.
        ingest::Value::Null => return None,
    };
    Some(Measurement {
        name: s.name,
        tags: s.tags.iter().cloned().collect(),
        value,
    })
}
