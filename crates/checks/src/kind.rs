//! A spec's kind: the dispatch from the `kind` field to each check module's options and run.
//! Kept apart from `spec` so the check modules can use the spec's helpers without a cycle.

use crate::error::CheckError;
use crate::spec::{check_common, excerpt, CheckSpec};
use crate::{dns, http, json, nrpe, ping, postgres, prometheus, redis, tcp};

/// A validated spec's kind with its options read.
pub(crate) enum Kind {
    Http(http::Config),
    Tcp(tcp::Config),
    Dns(dns::Config),
    Ping(ping::Config),
    Json(json::Config),
    Prometheus(prometheus::Config),
    Postgres(postgres::Config),
    Redis(redis::Config),
    Nrpe(nrpe::Config),
}

pub(crate) const KINDS: &str =
    "http, https, tcp, dns, ping, json, prometheus, postgres, redis or nrpe";

/// Validates every field and reads the kind's options.
pub(crate) fn check(spec: &CheckSpec) -> Result<Kind, CheckError> {
    check_common(spec)?;
    match spec.kind.as_str() {
        "http" => http::config(spec, false).map(Kind::Http),
        "https" => http::config(spec, true).map(Kind::Http),
        "tcp" => tcp::config(spec).map(Kind::Tcp),
        "dns" => dns::config(spec).map(Kind::Dns),
        "ping" => ping::config(spec).map(Kind::Ping),
        "json" => json::config(spec).map(Kind::Json),
        "prometheus" => prometheus::config(spec).map(Kind::Prometheus),
        "postgres" => postgres::config(spec).map(Kind::Postgres),
        "redis" => redis::config(spec).map(Kind::Redis),
        "nrpe" => nrpe::config(spec).map(Kind::Nrpe),
        other => Err(CheckError::field(
            "kind",
            format!("unknown kind \"{}\" (expected {KINDS})", excerpt(other)),
        )),
    }
}
