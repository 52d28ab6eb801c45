//! `checks`: every check type the broker runs. One call runs one check once, now, and returns
//! what it measured; scheduling, journals and the link to the core are the broker's.
//!
//! - [`CheckSpec`]: what to check (kind, target, period, timeout, kind-specific `config`, tags).
//! - [`validate`]: whether a spec can run, with a reason naming the field when it cannot.
//! - [`run`]: runs a spec once on the caller's tokio runtime, never longer than `timeout_ms`.
//!
//! A failing service is measured, not an error: `up` is 0 and `status` says what happened, and
//! the phases that did happen keep their timings. Every latency is a histogram sample (seconds).
//! Measurement names per kind: `README.md`.

mod dns;
mod error;
mod http;
mod json;
mod kind;
mod measure;
pub mod nrpe;
pub mod perfdata;
mod ping;
mod postgres;
pub mod prometheus;
pub mod redis;
mod spec;
mod tcp;
mod tls;

use std::time::Duration;

pub use error::CheckError;
pub use measure::{Measurement, Value};
pub use spec::{CheckSpec, ID_BYTES_MAX, PERIOD_MS_MAX, PERIOD_MS_MIN, TAGS_MAX};

use kind::Kind;
use measure::Out;

/// Checks that a spec can run: id, kind, target, period, timeout, tags and the kind's `config`.
/// The error names the field and says what is wrong with it.
pub fn validate(spec: &CheckSpec) -> Result<(), CheckError> {
    kind::check(spec).map(|_| ())
}

/// Runs `spec` once, now, and returns what it measured. Never takes longer than `timeout_ms`:
/// at the deadline the check stops where it is, keeps what it measured so far and reports
/// `status` "timeout" and `up` 0. `Err` only for a spec that cannot run at all.
pub async fn run(spec: &CheckSpec) -> Result<Vec<Measurement>, CheckError> {
    let kind = kind::check(spec)?;
    let mut out = Out::default();
    let limit = Duration::from_millis(spec.timeout_ms);
    let result = tokio::time::timeout(limit, run_kind(&kind, &mut out)).await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_elapsed) => out.timed_out(),
    }
    Ok(out.finish(&spec.tags))
}

async fn run_kind(kind: &Kind, out: &mut Out) -> Result<(), CheckError> {
    match kind {
        Kind::Http(c) => http::run(c, out).await,
        Kind::Tcp(c) => tcp::run(c, out).await,
        Kind::Dns(c) => dns::run(c, out).await,
        Kind::Ping(c) => ping::run(c, out).await,
        Kind::Json(c) => json::run(c, out).await,
        Kind::Prometheus(c) => prometheus::run(c, out).await,
        Kind::Postgres(c) => postgres::run(c, out).await,
        Kind::Redis(c) => redis::run(c, out).await,
        Kind::Nrpe(c) => nrpe::run(c, out).await,
    }
}
