//! The Prometheus HTTP API Grafana uses, over the store: `/api/v1/query`, `/query_range`,
//! `/series`, `/labels`, `/label/{name}/values`, `/metadata`, `/status/buildinfo`, each as GET
//! and as POST with an `application/x-www-form-urlencoded` body (parameters from the URL and
//! the body are merged, as Prometheus does). Responses have Prometheus's JSON shapes; histogram
//! samples use the native-histogram form with one bucket per llhist bin. Evaluation blocks on
//! the store, so it runs in `tokio::task::spawn_blocking`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use hist::Bin;
use store::{Kind, Pattern, Store, TagQuery, Term};

use crate::ast::{Expr, Selector};
use crate::eval::{self, EvalError, HistSample, Labels, Limits, Output, RangeSeries, Sample};

/// Most parameters one request may carry.
pub const PARAMS_MAX: usize = 1_024;
/// Most `match[]` selectors in one request.
pub const MATCHES_MAX: usize = 64;
/// Most series, label names or values a listing returns when the request sets no `limit`.
pub const LISTING_MAX: usize = 100_000;
/// The Prometheus version reported to clients: Grafana enables native-histogram features by it.
pub const PROMETHEUS_VERSION: &str = "3.5.0";
/// Timestamps accepted, in seconds: ±(2^53 ms) keeps every millisecond exact.
const TIME_S_MAX: f64 = 9.0e12;

#[derive(Clone)]
struct Api {
    store: Arc<Store>,
    limits: Limits,
}

/// The router with the default [`Limits`].
pub fn router(store: Arc<Store>) -> Router {
    router_with_limits(store, Limits::default())
}

pub fn router_with_limits(store: Arc<Store>, limits: Limits) -> Router {
    let api = Api { store, limits };
    Router::new()
        .route("/api/v1/query", get(query).post(query))
        .route("/api/v1/query_range", get(query_range).post(query_range))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/labels", get(labels).post(labels))
        .route(
            "/api/v1/label/{name}/values",
            get(label_values).post(label_values),
        )
        .route("/api/v1/metadata", get(metadata).post(metadata))
        .route(
            "/api/v1/query_exemplars",
            get(no_exemplars).post(no_exemplars),
        )
        .route("/api/v1/status/buildinfo", get(buildinfo))
        .with_state(api)
}

type Params = Vec<(String, String)>;

fn bad(message: impl Into<String>) -> EvalError {
    EvalError::BadData(message.into())
}

fn error_response(e: &EvalError) -> Response {
    let status = match e {
        EvalError::BadData(_) => StatusCode::BAD_REQUEST,
        EvalError::Execution(_) => StatusCode::UNPROCESSABLE_ENTITY,
        EvalError::Timeout(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut body = String::from("{\"status\":\"error\",\"errorType\":");
    write_json_str(&mut body, e.error_type());
    body.push_str(",\"error\":");
    write_json_str(&mut body, e.message());
    body.push('}');
    json_response(status, body)
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn success(data: &str) -> Response {
    json_response(
        StatusCode::OK,
        format!("{{\"status\":\"success\",\"data\":{data}}}"),
    )
}

fn respond(result: Result<String, EvalError>) -> Response {
    match result {
        Ok(data) => success(&data),
        Err(e) => error_response(&e),
    }
}

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space, `%XX` a byte).
fn parse_form(text: &[u8], out: &mut Params) -> Result<(), EvalError> {
    for pair in text.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        if out.len() >= PARAMS_MAX {
            return Err(bad(format!("more than {PARAMS_MAX} parameters")));
        }
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        out.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(())
}

fn percent_decode(bytes: &[u8]) -> Result<String, EvalError> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("invalid percent-encoding in parameters"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad("parameters are not UTF-8"))
}

/// URL parameters, then (for a form POST) the body's.
fn params(raw: Option<String>, headers: &HeaderMap, body: &Bytes) -> Result<Params, EvalError> {
    let mut out = Vec::new();
    if let Some(q) = raw {
        parse_form(q.as_bytes(), &mut out)?;
    }
    if !body.is_empty() {
        let form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !form {
            return Err(bad("a POST body must be application/x-www-form-urlencoded"));
        }
        parse_form(body, &mut out)?;
    }
    Ok(out)
}

fn param<'a>(params: &'a Params, name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A time parameter: unix seconds (float) or RFC 3339.
pub fn parse_time(text: &str) -> Result<i64, String> {
    if let Ok(s) = text.parse::<f64>() {
        if !s.is_finite() || s.abs() > TIME_S_MAX {
            return Err(format!("cannot parse {text:?} to a valid timestamp"));
        }
        return Ok((s * 1000.0).round() as i64);
    }
    parse_rfc3339(text).ok_or_else(|| format!("cannot parse {text:?} to a valid timestamp"))
}

fn digits(text: &str, from: usize, len: usize) -> Option<i64> {
    let part = text.get(from..from + len)?;
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (
        digits(text, 0, 4)?,
        digits(text, 5, 2)?,
        digits(text, 8, 2)?,
    );
    let (h, mi, s) = (
        digits(text, 11, 2)?,
        digits(text, 14, 2)?,
        digits(text, 17, 2)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &text[start..i.min(start + 3)];
        frac_ms = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
    }
    let offset_s = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let v = digits(text, i + 1, 2)? * 3600 + digits(text, i + 4, 2)? * 60;
            if *sign == b'+' {
                v
            } else {
                -v
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    Some(secs * 1000 + frac_ms)
}

/// A duration parameter: float seconds or a PromQL duration.
pub fn parse_duration_param(text: &str) -> Result<i64, String> {
    if let Ok(s) = text.parse::<f64>() {
        let ms = (s * 1000.0).round();
        if !ms.is_finite() || ms.abs() > crate::parser::DURATION_MS_MAX as f64 {
            return Err(format!("cannot parse {text:?} to a valid duration"));
        }
        return Ok(ms as i64);
    }
    crate::parser::parse_duration(text)
        .ok_or_else(|| format!("cannot parse {text:?} to a valid duration"))
}

fn time_param(params: &Params, name: &str, default: i64) -> Result<i64, EvalError> {
    match param(params, name) {
        None | Some("") => Ok(default),
        Some(t) => parse_time(t).map_err(|e| bad(format!("invalid parameter \"{name}\": {e}"))),
    }
}

fn limits_for(api: &Api, params: &Params) -> Result<Limits, EvalError> {
    let mut limits = api.limits;
    if let Some(t) = param(params, "timeout").filter(|t| !t.is_empty()) {
        let ms = parse_duration_param(t)
            .map_err(|e| bad(format!("invalid parameter \"timeout\": {e}")))?;
        if ms > 0 {
            limits.timeout_ms = limits.timeout_ms.min(ms as u64);
        }
    }
    Ok(limits)
}

fn limit_param(params: &Params) -> Result<usize, EvalError> {
    match param(params, "limit") {
        None | Some("") | Some("0") => Ok(LISTING_MAX),
        Some(l) => l
            .parse::<usize>()
            .map(|l| l.min(LISTING_MAX))
            .map_err(|_| bad(format!("invalid parameter \"limit\": {l:?}"))),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EvalError> + Send + 'static,
) -> Result<T, EvalError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EvalError::Execution(format!("evaluation failed: {e}")))?
}

async fn query(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            let q = param(&params, "query")
                .ok_or_else(|| bad("invalid parameter \"query\": missing"))?
                .to_string();
            let t = time_param(&params, "time", now_ms())?;
            let limits = limits_for(&api, &params)?;
            let store = Arc::clone(&api.store);
            let out = blocking(move || eval::instant(&store, &q, t, limits)).await?;
            Ok(output_json(&out))
        }
        .await,
    )
}

async fn query_range(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            let q = param(&params, "query")
                .ok_or_else(|| bad("invalid parameter \"query\": missing"))?
                .to_string();
            let need = |name: &str| -> Result<i64, EvalError> {
                let v = param(&params, name)
                    .ok_or_else(|| bad(format!("invalid parameter \"{name}\": missing")))?;
                parse_time(v).map_err(|e| bad(format!("invalid parameter \"{name}\": {e}")))
            };
            let (start, end) = (need("start")?, need("end")?);
            let step_text =
                param(&params, "step").ok_or_else(|| bad("invalid parameter \"step\": missing"))?;
            let step = parse_duration_param(step_text)
                .map_err(|e| bad(format!("invalid parameter \"step\": {e}")))?;
            let limits = limits_for(&api, &params)?;
            let store = Arc::clone(&api.store);
            let out = blocking(move || eval::range(&store, &q, start, end, step, limits)).await?;
            Ok(output_json(&out))
        }
        .await,
    )
}

/// The `match[]` selectors of a request.
fn matchers(params: &Params) -> Result<Vec<Selector>, EvalError> {
    let mut out = Vec::new();
    for (k, v) in params.iter().filter(|(k, _)| k == "match[]") {
        if out.len() >= MATCHES_MAX {
            return Err(bad(format!("more than {MATCHES_MAX} match[] parameters")));
        }
        match crate::parser::parse(v) {
            Ok(Expr::Selector(s)) => out.push(s),
            Ok(_) => {
                return Err(bad(format!(
                    "invalid parameter \"{k}\": {v:?} is not a selector"
                )))
            }
            Err(e) => return Err(bad(format!("invalid parameter \"{k}\": {e}"))),
        }
    }
    Ok(out)
}

/// Label sets of the series any selector matches, deduplicated and sorted, at most `limit`.
fn matched_series(
    store: &Store,
    selectors: &[Selector],
    start: i64,
    end: i64,
    limit: usize,
) -> Result<Vec<Labels>, EvalError> {
    let mut all: Vec<Labels> = Vec::new();
    for sel in selectors {
        all.extend(eval::select_series(store, sel, start, end, limit)?);
    }
    all.sort();
    all.dedup();
    all.truncate(limit);
    Ok(all)
}

fn window(params: &Params) -> Result<(i64, i64), EvalError> {
    // Without start/end every series counts, whatever its activity.
    let start = time_param(params, "start", i64::MIN / 2)?;
    let end = time_param(params, "end", i64::MAX / 2)?;
    Ok((start, end.saturating_add(1)))
}

async fn series(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            let selectors = matchers(&params)?;
            if selectors.is_empty() {
                return Err(bad("no match[] parameter provided"));
            }
            let (start, end) = window(&params)?;
            let limit = limit_param(&params)?;
            let store = Arc::clone(&api.store);
            let found =
                blocking(move || matched_series(&store, &selectors, start, end, limit)).await?;
            let mut out = String::from("[");
            for (i, labels) in found.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_labels(&mut out, labels);
            }
            out.push(']');
            Ok(out)
        }
        .await,
    )
}

fn json_string_list(items: &[String]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_str(&mut out, item);
    }
    out.push(']');
    out
}

fn index_err(e: impl std::fmt::Display) -> EvalError {
    EvalError::Execution(format!("series index: {e}"))
}

async fn labels(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            let selectors = matchers(&params)?;
            let (start, end) = window(&params)?;
            let limit = limit_param(&params)?;
            let store = Arc::clone(&api.store);
            let names = blocking(move || {
                let mut names: Vec<String> = if selectors.is_empty() {
                    let snapshot = store.index().snapshot().map_err(index_err)?;
                    let mut names: Vec<String> = snapshot
                        .categories(LISTING_MAX)
                        .map_err(index_err)?
                        .iter()
                        .map(|c| store::key::label_name(c))
                        .collect();
                    if snapshot.series_count() > 0 {
                        names.push("__name__".to_string());
                    }
                    names
                } else {
                    matched_series(&store, &selectors, start, end, LISTING_MAX)?
                        .into_iter()
                        .flat_map(|l| l.into_iter().map(|(k, _)| k))
                        .collect()
                };
                names.sort();
                names.dedup();
                names.truncate(limit);
                Ok(names)
            })
            .await?;
            Ok(json_string_list(&names))
        }
        .await,
    )
}

async fn label_values(
    State(api): State<Api>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            if !crate::ast::is_label_name(&name) {
                return Err(bad(format!("invalid label name: {name:?}")));
            }
            let selectors = matchers(&params)?;
            let (start, end) = window(&params)?;
            let limit = limit_param(&params)?;
            let store = Arc::clone(&api.store);
            let values = blocking(move || {
                let mut values: Vec<String> = if !selectors.is_empty() {
                    matched_series(&store, &selectors, start, end, LISTING_MAX)?
                        .into_iter()
                        .filter_map(|l| l.into_iter().find(|(k, _)| *k == name).map(|(_, v)| v))
                        .collect()
                } else if name == "__name__" {
                    let snapshot = store.index().snapshot().map_err(index_err)?;
                    snapshot
                        .names(LISTING_MAX)
                        .map_err(index_err)?
                        .into_iter()
                        .map(|(n, _)| n)
                        .collect()
                } else {
                    let category = label_category(&name);
                    let snapshot = store.index().snapshot().map_err(index_err)?;
                    snapshot
                        .values(&category, LISTING_MAX)
                        .map_err(index_err)?
                        .iter()
                        .map(|(v, _)| store::key::label_value(v))
                        .collect()
                };
                values.sort();
                values.dedup();
                values.truncate(limit);
                Ok(values)
            })
            .await?;
            Ok(json_string_list(&values))
        }
        .await,
    )
}

/// The tag category a label name stands for (`U__` escapes decoded by the store's mapping).
fn label_category(label: &str) -> Vec<u8> {
    store::key::StreamKey::from_labels([("__name__", "x"), (label, "v")])
        .ok()
        .and_then(|k| k.tags().first().map(|t| t.category().to_vec()))
        .unwrap_or_else(|| label.as_bytes().to_vec())
}

async fn metadata(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            let limit = limit_param(&params)?;
            let only = param(&params, "metric").map(str::to_string);
            let store = Arc::clone(&api.store);
            let entries = blocking(move || {
                let snapshot = store.index().snapshot().map_err(index_err)?;
                let names: Vec<String> = match only {
                    Some(m) if !m.is_empty() => vec![m],
                    _ => snapshot
                        .names(limit)
                        .map_err(index_err)?
                        .into_iter()
                        .map(|(n, _)| n)
                        .collect(),
                };
                let mut out = Vec::new();
                for name in names {
                    let of_kind = |kind: Kind| -> Result<bool, EvalError> {
                        let q = TagQuery::And(vec![
                            TagQuery::Term(Term::Name(Pattern::Exact(name.as_bytes().to_vec()))),
                            TagQuery::Term(Term::Type(kind)),
                        ]);
                        let ids = store
                            .find(&q, eval::FIND_WORK_MAX)
                            .map_err(|e| EvalError::Execution(format!("series search: {e}")))?;
                        Ok(!ids.is_empty())
                    };
                    // Our streams carry no type or help text; histograms are known by kind.
                    let ty = if of_kind(Kind::Histogram)? {
                        "histogram"
                    } else if of_kind(Kind::Numeric)? {
                        "unknown"
                    } else {
                        continue;
                    };
                    out.push((name, ty));
                }
                Ok(out)
            })
            .await?;
            let mut data = String::from("{");
            for (i, (name, ty)) in entries.iter().enumerate() {
                if i > 0 {
                    data.push(',');
                }
                write_json_str(&mut data, name);
                let _ = write!(data, ":[{{\"type\":\"{ty}\",\"help\":\"\",\"unit\":\"\"}}]");
            }
            data.push('}');
            Ok(data)
        }
        .await,
    )
}

/// Grafana asks for exemplars alongside panels; the store keeps none.
async fn no_exemplars() -> Response {
    success("[]")
}

async fn buildinfo() -> Response {
    success(&format!(
        "{{\"version\":\"{PROMETHEUS_VERSION}\",\"revision\":\"strata-{}\",\"branch\":\"\",\"buildUser\":\"strata\",\"buildDate\":\"\",\"goVersion\":\"none (strata, Rust)\"}}",
        env!("CARGO_PKG_VERSION")
    ))
}

pub fn write_json_str(out: &mut String, text: &str) {
    // serde_json's string escaping; a `&str` always serialises.
    match serde_json::to_string(text) {
        Ok(s) => out.push_str(&s),
        Err(_) => out.push_str("\"\""),
    }
}

fn write_labels(out: &mut String, labels: &Labels) {
    out.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_str(out, k);
        out.push(':');
        write_json_str(out, v);
    }
    out.push('}');
}

/// Unix seconds as Prometheus writes them: a JSON number with at most millisecond digits.
pub fn format_time(ms: i64) -> String {
    format!("{}", ms as f64 / 1000.0)
}

/// A sample value as Prometheus writes it (Go's `'f'` format, `+Inf`, `-Inf`, `NaN`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v}")
    }
}

/// The native-histogram JSON object: count, sum, and one bucket per populated llhist bin:
/// `[1, lower, upper, n]` (closed left) for positive bins, `[0, lower, upper, n]` (closed
/// right) for negative bins, `[3, "-1e-128", "1e-128", n]` for the zero bin. NaN-bin samples
/// count in `count` only.
pub fn write_histogram(out: &mut String, h: &HistSample) {
    let _ = write!(
        out,
        "{{\"count\":\"{}\",\"sum\":\"{}\",\"buckets\":[",
        format_value(h.count()),
        format_value(h.sum())
    );
    let mut first = true;
    for (bin, count) in h.hist.bins() {
        if bin.is_nan() {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        let n = format_value(count as f64 * h.scale);
        let (rule, lower, upper) = bucket_bounds(bin);
        let _ = write!(out, "[{rule},\"{lower}\",\"{upper}\",\"{n}\"]");
    }
    out.push_str("]}");
}

fn bucket_bounds(bin: Bin) -> (u8, String, String) {
    if bin.is_zero() {
        return (3, format_value(-1e-128), format_value(1e-128));
    }
    let rule = if bin.lower() < 0.0 { 0 } else { 1 };
    (rule, format_value(bin.lower()), format_value(bin.upper()))
}

fn write_point(out: &mut String, t_ms: i64, v: f64) {
    let _ = write!(out, "[{},\"{}\"]", format_time(t_ms), format_value(v));
}

fn write_hist_point(out: &mut String, t_ms: i64, h: &HistSample) {
    let _ = write!(out, "[{},", format_time(t_ms));
    write_histogram(out, h);
    out.push(']');
}

fn write_matrix_series(out: &mut String, s: &RangeSeries) {
    out.push_str("{\"metric\":");
    write_labels(out, &s.labels);
    if !s.floats.is_empty() {
        out.push_str(",\"values\":[");
        for (i, &(t, v)) in s.floats.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_point(out, t, v);
        }
        out.push(']');
    }
    if !s.hists.is_empty() {
        out.push_str(",\"histograms\":[");
        for (i, (t, h)) in s.hists.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_hist_point(out, *t, h);
        }
        out.push(']');
    }
    out.push('}');
}

/// The `data` object of a query response.
pub fn output_json(out: &Output) -> String {
    let mut s = String::new();
    match out {
        Output::Scalar { t_ms, value } => {
            s.push_str("{\"resultType\":\"scalar\",\"result\":");
            write_point(&mut s, *t_ms, *value);
        }
        Output::String { t_ms, value } => {
            let _ = write!(
                s,
                "{{\"resultType\":\"string\",\"result\":[{},",
                format_time(*t_ms)
            );
            write_json_str(&mut s, value);
            s.push(']');
        }
        Output::Vector { t_ms, samples } => {
            s.push_str("{\"resultType\":\"vector\",\"result\":[");
            for (i, (labels, sample)) in samples.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str("{\"metric\":");
                write_labels(&mut s, labels);
                match sample {
                    Sample::Float(v) => {
                        s.push_str(",\"value\":");
                        write_point(&mut s, *t_ms, *v);
                    }
                    Sample::Hist(h) => {
                        s.push_str(",\"histogram\":");
                        write_hist_point(&mut s, *t_ms, h);
                    }
                }
                s.push('}');
            }
            s.push(']');
        }
        Output::Matrix(series) => {
            s.push_str("{\"resultType\":\"matrix\",\"result\":[");
            for (i, rs) in series.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                write_matrix_series(&mut s, rs);
            }
            s.push(']');
        }
    }
    s.push('}');
    s
}
