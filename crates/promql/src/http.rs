//! The Prometheus HTTP API Grafana uses, over the store: `/api/v1/query`, `/query_range`,
//! `/series`, `/labels`, `/label/{name}/values`, `/metadata`, `/rules`, `/alerts`,
//! `/status/buildinfo`, each as GET
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

use crate::ast::{quote, Expr, Selector};
use crate::eval::{
    self, Annotations, EvalError, HistSample, Labels, Limits, Output, RangeSeries, Remote, Sample,
    Source,
};
pub use crate::number::format_value;
use crate::range_cache::{self, RangeCache};

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

/// The tag the server's self-monitoring streams carry (`strata:self`): listings leave them
/// out unless a selector asks for them (a matcher on the `strata` label, or on the exact
/// metric name) or the request says `include_self=true`.
pub const SELF_TAG: (&str, &str) = ("strata", "self");

/// What `/api/v1/rules` and `/api/v1/alerts` serve. Alerting plugs its rules and alert states
/// in through this; [`NoRules`] serves Prometheus's empty lists.
pub trait RuleSource: Send + Sync + 'static {
    /// The rule groups, each with its rules as Prometheus's JSON objects (`type`
    /// `alerting` or `recording`, `name`, `query`, `health`, …).
    fn rule_groups(&self) -> Vec<RuleGroup>;
    /// The active alerts.
    fn alerts(&self) -> Vec<Alert>;
}

/// One group of `/api/v1/rules` (Prometheus's `RuleGroup`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RuleGroup {
    pub name: String,
    pub file: String,
    pub rules: Vec<serde_json::Value>,
    /// Seconds.
    pub interval: f64,
    pub limit: u64,
    #[serde(rename = "evaluationTime")]
    pub evaluation_time: f64,
    /// RFC 3339.
    #[serde(rename = "lastEvaluation")]
    pub last_evaluation: String,
}

/// One alert of `/api/v1/alerts` (Prometheus's `Alert`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Alert {
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
    /// `pending` or `firing`.
    pub state: String,
    /// RFC 3339.
    #[serde(rename = "activeAt", skip_serializing_if = "Option::is_none")]
    pub active_at: Option<String>,
    pub value: String,
}

/// No rules and no alerts (until alerting plugs in).
pub struct NoRules;

impl RuleSource for NoRules {
    fn rule_groups(&self) -> Vec<RuleGroup> {
        Vec::new()
    }

    fn alerts(&self) -> Vec<Alert> {
        Vec::new()
    }
}

/// A metric family's type, help and unit, as senders described it (`/api/v1/metadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyMetadata {
    pub family: String,
    /// Prometheus's type name: `counter`, `gauge`, `histogram`, …
    pub kind: String,
    pub help: String,
    pub unit: String,
}

/// Where metric metadata comes from (the server keeps what senders send); [`NoMetadata`]
/// knows none, and `/api/v1/metadata` then types names from the store alone.
pub trait MetadataSource: Send + Sync + 'static {
    /// Every family known, or only `metric` when given, sorted by family.
    fn families(&self, metric: Option<&str>) -> Vec<FamilyMetadata>;
}

/// No metadata kept.
pub struct NoMetadata;

impl MetadataSource for NoMetadata {
    fn families(&self, _metric: Option<&str>) -> Vec<FamilyMetadata> {
        Vec::new()
    }
}

/// One exemplar as kept: its own labels, value and time.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptExemplar {
    pub labels: Vec<(String, String)>,
    pub value: f64,
    pub ts_ms: i64,
}

/// A series' exemplars (`/api/v1/query_exemplars`), its labels sorted by name.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesExemplars {
    pub series: Vec<(String, String)>,
    pub exemplars: Vec<KeptExemplar>,
}

/// A series' labels as name, value pairs.
pub type LabelPairs = [(String, String)];

/// Where exemplars come from (the server keeps what senders send); [`NoExemplars`] knows none.
pub trait ExemplarSource: Send + Sync + 'static {
    /// The exemplars within `[start_ms, end_ms]` of every series `selects` takes, the series
    /// sorted by their labels, each one's exemplars oldest first.
    fn exemplars(
        &self,
        start_ms: i64,
        end_ms: i64,
        selects: &dyn Fn(&LabelPairs) -> bool,
    ) -> Vec<SeriesExemplars>;
}

/// No exemplars kept.
pub struct NoExemplars;

impl ExemplarSource for NoExemplars {
    fn exemplars(
        &self,
        _start_ms: i64,
        _end_ms: i64,
        _selects: &dyn Fn(&LabelPairs) -> bool,
    ) -> Vec<SeriesExemplars> {
        Vec::new()
    }
}

/// What the router serves besides the store.
#[derive(Clone)]
pub struct Options {
    pub limits: Limits,
    pub rules: Arc<dyn RuleSource>,
    pub metadata: Arc<dyn MetadataSource>,
    pub exemplars: Arc<dyn ExemplarSource>,
    /// On a cluster front: queries and listings read every partition through this (the local
    /// store then serves only metadata and exemplars).
    pub remote: Option<Arc<dyn Remote>>,
    /// Range query answers over the settled past (none: every step evaluated every time). Not
    /// used with `remote`: a cluster front does not see its partitions' changes.
    pub range_cache: Option<Arc<RangeCache>>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            limits: Limits::default(),
            rules: Arc::new(NoRules),
            metadata: Arc::new(NoMetadata),
            exemplars: Arc::new(NoExemplars),
            remote: None,
            range_cache: None,
        }
    }
}

#[derive(Clone)]
struct Api {
    store: Arc<Store>,
    limits: Limits,
    rules: Arc<dyn RuleSource>,
    metadata: Arc<dyn MetadataSource>,
    exemplars: Arc<dyn ExemplarSource>,
    remote: Option<Arc<dyn Remote>>,
    range_cache: Option<Arc<RangeCache>>,
}

/// The router with the default [`Limits`].
pub fn router(store: Arc<Store>) -> Router {
    router_with(store, Options::default())
}

pub fn router_with_limits(store: Arc<Store>, limits: Limits) -> Router {
    router_with(
        store,
        Options {
            limits,
            ..Options::default()
        },
    )
}

pub fn router_with(store: Arc<Store>, options: Options) -> Router {
    let api = Api {
        store,
        limits: options.limits,
        rules: options.rules,
        metadata: options.metadata,
        exemplars: options.exemplars,
        range_cache: options.range_cache.filter(|_| options.remote.is_none()),
        remote: options.remote,
    };
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
            get(query_exemplars).post(query_exemplars),
        )
        .route("/api/v1/status/buildinfo", get(buildinfo))
        .route("/api/v1/rules", get(rules).post(rules))
        .route("/api/v1/alerts", get(alerts).post(alerts))
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
        EvalError::Timeout(_) | EvalError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
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

/// Prometheus's warning when a `limit` cut a result.
pub const TRUNCATED_WARNING: &str = "results truncated due to limit";

/// A success with Prometheus's `warnings` and `infos` arrays (left out when empty).
fn respond_annotated(result: Result<(String, Annotations), EvalError>) -> Response {
    let (data, notes) = match result {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let mut body = format!("{{\"status\":\"success\",\"data\":{data}");
    for (key, list) in [("warnings", &notes.warnings), ("infos", &notes.infos)] {
        if !list.is_empty() {
            let _ = write!(body, ",\"{key}\":{}", json_string_list(list));
        }
    }
    body.push('}');
    json_response(StatusCode::OK, body)
}

/// Cuts a listing to `limit`, with Prometheus's warning when something was cut.
fn truncate<T>(items: &mut Vec<T>, limit: usize, notes: &mut Annotations) {
    if items.len() > limit {
        items.truncate(limit);
        notes.warn(TRUNCATED_WARNING.to_string());
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
            return Err(format!("cannot parse {} to a valid timestamp", quote(text)));
        }
        return Ok((s * 1000.0).round() as i64);
    }
    parse_rfc3339(text).ok_or_else(|| format!("cannot parse {} to a valid timestamp", quote(text)))
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
            return Err(format!("cannot parse {} to a valid duration", quote(text)));
        }
        return Ok(ms as i64);
    }
    crate::parser::parse_duration(text)
        .ok_or_else(|| format!("cannot parse {} to a valid duration", quote(text)))
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

/// The `limit` parameter (0 or none: no limit but our listing bound).
fn limit_param(params: &Params) -> Result<usize, EvalError> {
    match param(params, "limit") {
        None | Some("") | Some("0") => Ok(LISTING_MAX),
        Some(l) => l
            .parse::<usize>()
            .map(|l| l.min(LISTING_MAX))
            .map_err(|_| bad(format!("invalid parameter \"limit\": {}", quote(l)))),
    }
}

/// The `limit` parameter of a query: none when absent or 0.
fn query_limit(params: &Params) -> Result<Option<usize>, EvalError> {
    match param(params, "limit") {
        None | Some("") | Some("0") => Ok(None),
        Some(l) => l
            .parse::<usize>()
            .map(Some)
            .map_err(|_| bad(format!("invalid parameter \"limit\": {}", quote(l)))),
    }
}

/// A query's result cut to `limit` series, with Prometheus's warning.
fn limit_output(out: &mut Output, limit: Option<usize>, notes: &mut Annotations) {
    let Some(limit) = limit else {
        return;
    };
    match out {
        Output::Vector { samples, .. } => truncate(samples, limit, notes),
        Output::Matrix(series) => truncate(series, limit, notes),
        Output::Scalar { .. } | Output::String { .. } => {}
    }
}

/// Whether listings include the self-monitoring streams: `include_self=true`, or a selector
/// that names them (a matcher on the `strata` label, or an exact metric name).
fn wants_self(params: &Params, selectors: &[Selector]) -> bool {
    param(params, "include_self").is_some_and(|v| v == "true" || v == "1")
        || selectors.iter().any(|s| {
            s.name.is_some()
                || s.matchers.iter().any(|m| {
                    m.label == SELF_TAG.0
                        || (m.label == "__name__" && m.op == crate::ast::MatchOp::Equal)
                })
        })
}

fn is_self(labels: &Labels) -> bool {
    labels
        .iter()
        .any(|(k, v)| k == SELF_TAG.0 && v == SELF_TAG.1)
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
    respond_annotated(
        async {
            let params = params(raw, &headers, &body)?;
            let q = param(&params, "query")
                .ok_or_else(|| bad("invalid parameter \"query\": missing"))?
                .to_string();
            let t = time_param(&params, "time", now_ms())?;
            let limits = limits_for(&api, &params)?;
            let limit = query_limit(&params)?;
            let store = Arc::clone(&api.store);
            let (remote, after) = (api.remote.clone(), read_after(&headers, &params));
            let pushdown = pushdown_param(&params);
            let (mut out, mut notes) = blocking(move || {
                let source = source(&store, &remote, &after, pushdown);
                eval::instant_from(source, &q, t, limits)
            })
            .await?;
            limit_output(&mut out, limit, &mut notes);
            Ok((output_json(&out), notes))
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
    respond_annotated(
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
            let limit = query_limit(&params)?;
            let store = Arc::clone(&api.store);
            let (remote, after) = (api.remote.clone(), read_after(&headers, &params));
            let pushdown = pushdown_param(&params);
            let cache = api.range_cache.clone();
            let (mut out, mut notes) = blocking(move || {
                let expr = eval::range_query(&q, start, end, step, &limits)?;
                match cache.filter(|_| range_cache::cacheable(&expr)) {
                    Some(cache) => cache.range(&store, &q, (start, end, step), &limits, |from| {
                        eval::range_of(Source::Local(&store), &expr, from, end, step, limits)
                    }),
                    None => {
                        let source = source(&store, &remote, &after, pushdown);
                        eval::range_of(source, &expr, start, end, step, limits)
                    }
                }
            })
            .await?;
            limit_output(&mut out, limit, &mut notes);
            Ok((output_json(&out), notes))
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
                    "invalid parameter \"{k}\": {} is not a selector",
                    quote(v)
                )))
            }
            Err(e) => return Err(bad(format!("invalid parameter \"{k}\": {e}"))),
        }
    }
    Ok(out)
}

/// Label sets of the series any selector matches, deduplicated and sorted, at most `limit`
/// (one more when more match: the caller then warns), the self-monitoring streams left out
/// unless `with_self`.
fn matched_series(
    store: &Store,
    selectors: &[Selector],
    (start, end): (i64, i64),
    limit: usize,
    with_self: bool,
) -> Result<Vec<Labels>, EvalError> {
    let mut all: Vec<Labels> = Vec::new();
    let want = limit.saturating_add(1);
    for sel in selectors {
        let found = eval::select_series(store, sel, start, end, want.min(LISTING_MAX + 1))?;
        all.extend(found.into_iter().filter(|l| with_self || !is_self(l)));
    }
    all.sort();
    all.dedup();
    all.truncate(want);
    Ok(all)
}

fn window(params: &Params) -> Result<(i64, i64), EvalError> {
    // Without start/end every series counts, whatever its activity.
    let start = time_param(params, "start", i64::MIN / 2)?;
    let end = time_param(params, "end", i64::MAX / 2)?;
    Ok((start, end.saturating_add(1)))
}

/// A listing endpoint's common parameters.
struct Listing {
    selectors: Vec<Selector>,
    window: (i64, i64),
    limit: usize,
    with_self: bool,
}

fn listing(params: &Params) -> Result<Listing, EvalError> {
    let selectors = matchers(params)?;
    let with_self = wants_self(params, &selectors);
    Ok(Listing {
        window: window(params)?,
        limit: limit_param(params)?,
        with_self,
        selectors,
    })
}

async fn series(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond_annotated(
        async {
            let params = params(raw, &headers, &body)?;
            let l = listing(&params)?;
            if l.selectors.is_empty() {
                return Err(bad("no match[] parameter provided"));
            }
            let store = Arc::clone(&api.store);
            let mut found = match api.remote.clone() {
                Some(remote) => {
                    let after = read_after(&headers, &params);
                    let forwarded = forward_query("/api/v1/series", &params);
                    blocking(move || remote_series(&*remote, &forwarded, after.as_deref())).await?
                }
                None => {
                    blocking(move || {
                        matched_series(&store, &l.selectors, l.window, l.limit, l.with_self)
                    })
                    .await?
                }
            };
            let mut notes = Annotations::default();
            let limit = limit_param(&params)?;
            truncate(&mut found, limit, &mut notes);
            let mut out = String::from("[");
            for (i, labels) in found.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_labels(&mut out, labels);
            }
            out.push(']');
            Ok((out, notes))
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

fn search_err(e: impl std::fmt::Display) -> EvalError {
    EvalError::Execution(format!("series search: {e}"))
}

/// Most self-monitoring series looked at to tell which names, categories and values only
/// they have (the server writes a few dozen).
const SELF_SERIES_MAX: usize = 4_096;

/// The metric names, label names and label values that only self-monitoring streams have:
/// what listings without a selector leave out.
#[derive(Default)]
struct SelfOnly {
    names: Vec<String>,
    categories: Vec<Vec<u8>>,
    values: Vec<(Vec<u8>, Vec<u8>)>,
}

fn self_tag_query() -> TagQuery {
    TagQuery::Term(Term::Tag {
        category: Pattern::Exact(SELF_TAG.0.as_bytes().to_vec()),
        value: Pattern::Exact(SELF_TAG.1.as_bytes().to_vec()),
    })
}

/// Whether a series other than the self-monitoring ones matches `q`.
fn others_have(store: &Store, q: TagQuery) -> Result<bool, EvalError> {
    let q = TagQuery::And(vec![q, TagQuery::Not(Box::new(self_tag_query()))]);
    Ok(!store
        .find(&q, eval::FIND_WORK_MAX)
        .map_err(search_err)?
        .is_empty())
}

fn self_only(store: &Store) -> Result<SelfOnly, EvalError> {
    let ids = store
        .find(&self_tag_query(), eval::FIND_WORK_MAX)
        .map_err(search_err)?;
    let snapshot = store.index().snapshot().map_err(index_err)?;
    let (mut names, mut tags) = (Vec::new(), Vec::new());
    for id in ids.into_iter().take(SELF_SERIES_MAX) {
        let Some(info) = snapshot.series(id).map_err(index_err)? else {
            continue;
        };
        names.push(info.key.name().to_string());
        for t in info.key.tags() {
            tags.push((t.category().to_vec(), t.value().to_vec()));
        }
    }
    names.sort();
    names.dedup();
    tags.sort();
    tags.dedup();
    let mut out = SelfOnly::default();
    for name in names {
        let q = TagQuery::Term(Term::Name(Pattern::Exact(name.as_bytes().to_vec())));
        if !others_have(store, q)? {
            out.names.push(name);
        }
    }
    for (category, value) in tags {
        let tag = |v: Pattern| {
            TagQuery::Term(Term::Tag {
                category: Pattern::Exact(category.clone()),
                value: v,
            })
        };
        if !out.categories.contains(&category)
            && !others_have(store, tag(Pattern::Glob(b"*".to_vec())))?
        {
            out.categories.push(category.clone());
        }
        if !others_have(store, tag(Pattern::Exact(value.clone())))? {
            out.values.push((category, value));
        }
    }
    Ok(out)
}

async fn labels(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond_annotated(
        async {
            let params = params(raw, &headers, &body)?;
            let l = listing(&params)?;
            let store = Arc::clone(&api.store);
            let mut names = match api.remote.clone() {
                Some(remote) => {
                    let after = read_after(&headers, &params);
                    let forwarded = forward_query("/api/v1/labels", &params);
                    blocking(move || remote_strings(&*remote, &forwarded, after.as_deref())).await?
                }
                None => blocking(move || label_names(&store, &l)).await?,
            };
            let mut notes = Annotations::default();
            truncate(&mut names, limit_param(&params)?, &mut notes);
            Ok((json_string_list(&names), notes))
        }
        .await,
    )
}

/// The label names of `/api/v1/labels`, sorted, one more than the limit when more exist.
fn label_names(store: &Store, l: &Listing) -> Result<Vec<String>, EvalError> {
    let mut names: Vec<String> = if l.selectors.is_empty() {
        let hidden = if l.with_self {
            SelfOnly::default()
        } else {
            self_only(store)?
        };
        let snapshot = store.index().snapshot().map_err(index_err)?;
        let mut names: Vec<String> = snapshot
            .categories(LISTING_MAX + 1)
            .map_err(index_err)?
            .iter()
            .filter(|c| !hidden.categories.contains(c))
            .map(|c| eval::label_name_of(c))
            .collect();
        if snapshot.series_count() > 0 {
            names.push("__name__".to_string());
        }
        names
    } else {
        matched_series(store, &l.selectors, l.window, LISTING_MAX, l.with_self)?
            .into_iter()
            .flat_map(|l| l.into_iter().map(|(k, _)| k))
            .collect()
    };
    names.sort();
    names.dedup();
    names.truncate(l.limit.saturating_add(1));
    Ok(names)
}

async fn label_values(
    State(api): State<Api>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond_annotated(
        async {
            let params = params(raw, &headers, &body)?;
            let name = label_path_name(&name)?;
            let l = listing(&params)?;
            let store = Arc::clone(&api.store);
            let mut values = match api.remote.clone() {
                Some(remote) => {
                    let after = read_after(&headers, &params);
                    let path = format!("/api/v1/label/{}/values", percent_encode(&name));
                    let forwarded = forward_query(&path, &params);
                    blocking(move || remote_strings(&*remote, &forwarded, after.as_deref())).await?
                }
                None => blocking(move || label_value_list(&store, &name, &l)).await?,
            };
            let mut notes = Annotations::default();
            truncate(&mut values, limit_param(&params)?, &mut notes);
            Ok((json_string_list(&values), notes))
        }
        .await,
    )
}

/// The label name of `/label/<name>/values`: Prometheus 3 accepts any UTF-8 name, written as
/// is or in the `U__` value-escaping form (`U__host_2e_name` for `host.name`).
fn label_path_name(name: &str) -> Result<String, EvalError> {
    if name.is_empty() {
        return Err(bad(format!("invalid label name: {}", quote(name))));
    }
    Ok(name.to_string())
}

/// The values of `/api/v1/label/<name>/values`, sorted, one more than the limit when more exist.
fn label_value_list(store: &Store, name: &str, l: &Listing) -> Result<Vec<String>, EvalError> {
    let mut values: Vec<String> = if !l.selectors.is_empty() {
        matched_series(store, &l.selectors, l.window, LISTING_MAX, l.with_self)?
            .into_iter()
            .filter_map(|labels| labels.into_iter().find(|(k, _)| *k == name).map(|(_, v)| v))
            .collect()
    } else {
        let hidden = if l.with_self {
            SelfOnly::default()
        } else {
            self_only(store)?
        };
        let snapshot = store.index().snapshot().map_err(index_err)?;
        if name == "__name__" {
            snapshot
                .names(LISTING_MAX + 1)
                .map_err(index_err)?
                .into_iter()
                .map(|(n, _)| n)
                .filter(|n| !hidden.names.contains(n))
                .collect()
        } else {
            let mut values = Vec::new();
            for category in label_categories(name) {
                let found = snapshot
                    .values(&category, LISTING_MAX + 1)
                    .map_err(index_err)?
                    .into_iter()
                    .filter(|(v, _)| !hidden.values.contains(&(category.clone(), v.clone())))
                    .map(|(v, _)| store::key::label_value(&v));
                values.extend(found);
            }
            values
        }
    };
    values.sort();
    values.dedup();
    values.truncate(l.limit.saturating_add(1));
    Ok(values)
}

/// The tag categories a label name stands for: the name's own bytes, or the category a legacy
/// `U__` escape stands for; `check` is httptrap's `__check` or a sender's own `check`.
fn label_categories(label: &str) -> Vec<Vec<u8>> {
    if label == eval::CHECK_LABEL || label == eval::CHECK_EXPORTED_LABEL {
        return eval::label_categories(label);
    }
    let category = store::key::StreamKey::from_labels([("__name__", "x"), (label, "v")])
        .ok()
        .and_then(|k| k.tags().first().map(|t| t.category().to_vec()))
        .unwrap_or_else(|| label.as_bytes().to_vec());
    vec![category]
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
            let with_self = wants_self(&params, &[]);
            let store = Arc::clone(&api.store);
            let source = Arc::clone(&api.metadata);
            let entries = blocking(move || {
                // A classic histogram's three names list as one family: read enough for the limit.
                let names_max = limit.saturating_mul(3).min(LISTING_MAX);
                let typed = metadata_entries(&store, only.clone(), names_max, with_self)?;
                Ok(merge_metadata(
                    typed,
                    source.families(only.as_deref()),
                    limit,
                ))
            })
            .await?;
            let mut data = String::from("{");
            for (i, m) in entries.iter().enumerate() {
                if i > 0 {
                    data.push(',');
                }
                write_json_str(&mut data, &m.family);
                data.push_str(":[{\"type\":");
                write_json_str(&mut data, &m.kind);
                data.push_str(",\"help\":");
                write_json_str(&mut data, &m.help);
                data.push_str(",\"unit\":");
                write_json_str(&mut data, &m.unit);
                data.push_str("}]");
            }
            data.push('}');
            Ok(data)
        }
        .await,
    )
}

/// The families `/api/v1/metadata` lists, sorted, at most `limit`: what senders described
/// (`known`), then every stored name they did not — typed `histogram` when its streams are
/// histograms or it is a classic histogram's family (`x` for stored `x_bucket` and `x_count`,
/// whose `x_bucket`, `x_sum`, `x_count` are then not listed apart), else `unknown`. A name
/// stored as histogram streams is a native histogram family under its own name.
fn merge_metadata(
    stored: Vec<(String, &'static str)>,
    known: Vec<FamilyMetadata>,
    limit: usize,
) -> Vec<FamilyMetadata> {
    use std::collections::BTreeMap;
    let names: std::collections::HashSet<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
    let mut out: BTreeMap<String, FamilyMetadata> = BTreeMap::new();
    let mut hidden: std::collections::HashSet<String> = std::collections::HashSet::new();
    let entry = |family: &str, kind: &str| FamilyMetadata {
        family: family.to_owned(),
        kind: kind.to_owned(),
        help: String::new(),
        unit: String::new(),
    };
    for (name, _) in &stored {
        if let Some(family) = name.strip_suffix("_bucket") {
            if !family.is_empty() && names.contains(format!("{family}_count").as_str()) {
                for suffix in ["_bucket", "_sum", "_count"] {
                    hidden.insert(format!("{family}{suffix}"));
                }
                out.insert(family.to_owned(), entry(family, "histogram"));
            }
        }
    }
    for (name, kind) in &stored {
        if !hidden.contains(name) && !out.contains_key(name) {
            out.insert(name.clone(), entry(name, kind));
        }
    }
    for m in known {
        // A described family's own series are not listed apart either.
        if matches!(m.kind.as_str(), "histogram" | "gaugehistogram" | "summary") {
            for suffix in ["_bucket", "_sum", "_count"] {
                out.remove(&format!("{}{suffix}", m.family));
            }
        }
        out.insert(m.family.clone(), m);
    }
    out.into_values().take(limit).collect()
}

/// Metric names and their type: `histogram` for our histogram streams, else `unknown` (what
/// senders describe comes from the [`MetadataSource`]). A `metric` asked for by name is listed even if only
/// self-monitoring streams have it.
fn metadata_entries(
    store: &Store,
    only: Option<String>,
    limit: usize,
    with_self: bool,
) -> Result<Vec<(String, &'static str)>, EvalError> {
    let snapshot = store.index().snapshot().map_err(index_err)?;
    let names: Vec<String> = match only {
        Some(m) if !m.is_empty() => vec![m],
        _ => {
            let hidden = if with_self {
                SelfOnly::default()
            } else {
                self_only(store)?
            };
            snapshot
                .names(limit.saturating_add(hidden.names.len()))
                .map_err(index_err)?
                .into_iter()
                .map(|(n, _)| n)
                .filter(|n| !hidden.names.contains(n))
                .take(limit)
                .collect()
        }
    };
    let mut out = Vec::new();
    for name in names {
        let of_kind = |kind: Kind| -> Result<bool, EvalError> {
            let q = TagQuery::And(vec![
                TagQuery::Term(Term::Name(Pattern::Exact(name.as_bytes().to_vec()))),
                TagQuery::Term(Term::Type(kind)),
            ]);
            Ok(!store
                .find(&q, eval::FIND_WORK_MAX)
                .map_err(search_err)?
                .is_empty())
        };
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
}

async fn rules(State(api): State<Api>) -> Response {
    let groups = api.rules.rule_groups();
    match serde_json::to_string(&groups) {
        Ok(list) => success(&format!("{{\"groups\":{list}}}")),
        Err(e) => error_response(&EvalError::Execution(format!("rules: {e}"))),
    }
}

async fn alerts(State(api): State<Api>) -> Response {
    let alerts = api.rules.alerts();
    match serde_json::to_string(&alerts) {
        Ok(list) => success(&format!("{{\"alerts\":{list}}}")),
        Err(e) => error_response(&EvalError::Execution(format!("alerts: {e}"))),
    }
}

/// Series exemplars listed at most (Prometheus has no bound but its storage's size).
const EXEMPLAR_SERIES_MAX: usize = 100_000;

/// `query_exemplars?query=&start=&end=`: the exemplars of the series any selector of `query`
/// selects, within `[start, end]` (either open when not given), in Prometheus's shape.
async fn query_exemplars(
    State(api): State<Api>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(
        async {
            let params = params(raw, &headers, &body)?;
            let q = param(&params, "query")
                .ok_or_else(|| bad("invalid parameter \"query\": missing"))?;
            let start = time_param(&params, "start", i64::MIN)?;
            let end = time_param(&params, "end", i64::MAX)?;
            if end < start {
                return Err(bad(
                    "invalid parameter \"end\": end timestamp must not be before start timestamp",
                ));
            }
            let expr = crate::parser::parse(q).map_err(|e| bad(e.to_string()))?;
            let sets = selector_matchers(&expr)?;
            let source = Arc::clone(&api.exemplars);
            let found = blocking(move || {
                let selects =
                    |labels: &[(String, String)]| sets.iter().any(|set| set.selects(labels));
                Ok(source.exemplars(start, end, &selects))
            })
            .await?;
            Ok(exemplars_json(&found))
        }
        .await,
    )
}

fn exemplars_json(found: &[SeriesExemplars]) -> String {
    let mut out = String::from("[");
    for (i, s) in found.iter().take(EXEMPLAR_SERIES_MAX).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"seriesLabels\":");
        write_pairs(&mut out, &s.series);
        out.push_str(",\"exemplars\":[");
        for (j, e) in s.exemplars.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str("{\"labels\":");
            write_pairs(&mut out, &e.labels);
            out.push_str(",\"value\":");
            write_json_str(&mut out, &crate::number::format_value(e.value));
            let _ = write!(out, ",\"timestamp\":{}}}", format_time(e.ts_ms));
        }
        out.push_str("]}");
    }
    out.push(']');
    out
}

fn write_pairs(out: &mut String, pairs: &[(String, String)]) {
    out.push('{');
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_json_str(out, k);
        out.push(':');
        write_json_str(out, v);
    }
    out.push('}');
}

/// One selector's matchers, compiled: a series is selected when every one matches (a label it
/// lacks is the empty string).
struct MatcherSet(Vec<(crate::ast::Matcher, Option<regex::Regex>)>);

impl MatcherSet {
    fn selects(&self, labels: &[(String, String)]) -> bool {
        self.0.iter().all(|(m, re)| {
            let value = labels
                .iter()
                .find(|(k, _)| *k == m.label)
                .map_or("", |(_, v)| v.as_str());
            match (m.op, re) {
                (crate::ast::MatchOp::Equal, _) => value == m.value,
                (crate::ast::MatchOp::NotEqual, _) => value != m.value,
                (crate::ast::MatchOp::Regex, Some(re)) => re.is_match(value),
                (crate::ast::MatchOp::NotRegex, Some(re)) => !re.is_match(value),
                (_, None) => false,
            }
        })
    }
}

/// Every selector in `expr` as a matcher set, as Prometheus's `ExtractSelectors` finds them.
fn selector_matchers(expr: &Expr) -> Result<Vec<MatcherSet>, EvalError> {
    let mut selectors: Vec<&Selector> = Vec::new();
    collect_selectors(expr, &mut selectors);
    if selectors.is_empty() {
        return Err(bad("query must contain metric selectors"));
    }
    selectors
        .into_iter()
        .map(|sel| {
            let mut set = Vec::new();
            if let Some(name) = &sel.name {
                set.push(crate::ast::Matcher {
                    label: "__name__".to_owned(),
                    op: crate::ast::MatchOp::Equal,
                    value: name.clone(),
                });
            }
            set.extend(sel.matchers.iter().cloned());
            set.into_iter()
                .map(|m| {
                    let re = match m.op {
                        crate::ast::MatchOp::Regex | crate::ast::MatchOp::NotRegex => Some(
                            crate::parser::anchored_regex(&m.value)
                                .map_err(|e| bad(format!("invalid regex: {e}")))?,
                        ),
                        _ => None,
                    };
                    Ok((m, re))
                })
                .collect::<Result<Vec<_>, EvalError>>()
                .map(MatcherSet)
        })
        .collect()
}

fn collect_selectors<'e>(expr: &'e Expr, out: &mut Vec<&'e Selector>) {
    match expr {
        Expr::Number(_) | Expr::String(_) => {}
        Expr::Selector(s) | Expr::Range { selector: s, .. } => out.push(s),
        Expr::Subquery { expr, .. } | Expr::Neg(expr) => collect_selectors(expr, out),
        Expr::Call { args, .. } => args.iter().for_each(|a| collect_selectors(a, out)),
        Expr::Aggregate { param, expr, .. } => {
            if let Some(p) = param {
                collect_selectors(p, out);
            }
            collect_selectors(expr, out);
        }
        Expr::Binary { lhs, rhs, .. } => {
            collect_selectors(lhs, out);
            collect_selectors(rhs, out);
        }
    }
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

/// Unix seconds as Prometheus writes them: whole seconds, then `.` and three digits of
/// milliseconds when there are any (`1700000000.200`).
pub fn format_time(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let abs = ms.unsigned_abs();
    match abs % 1000 {
        0 => format!("{sign}{}", abs / 1000),
        frac => format!("{sign}{}.{frac:03}", abs / 1000),
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

/// The header (or parameter `read_after`) carrying a cluster write's read-after token.
pub const READ_AFTER_HEADER: &str = "strata-read-after";

/// The read-after token of a request: its header, else its `read_after` parameter.
fn read_after(headers: &HeaderMap, params: &Params) -> Option<String> {
    headers
        .get(READ_AFTER_HEADER)
        .and_then(|v| v.to_str().ok())
        .or_else(|| param(params, "read_after"))
        .map(str::to_string)
}

/// `pushdown=false` (a cluster front's diagnostic): every aggregation evaluated on the front
/// over the partitions' series, none pushed down to them. Any other value is ignored, as
/// Prometheus ignores parameters it does not know.
fn pushdown_param(params: &Params) -> bool {
    param(params, "pushdown") != Some("false")
}

/// The source a query reads: the cluster's partitions on a front, else the local store.
fn source<'a>(
    store: &'a Store,
    remote: &'a Option<Arc<dyn Remote>>,
    read_after: &'a Option<String>,
    pushdown: bool,
) -> Source<'a> {
    match remote {
        Some(r) => Source::Remote {
            remote: &**r,
            read_after: read_after.as_deref(),
            pushdown,
        },
        None => Source::Local(store),
    }
}

/// `path` with the request's parameters (but the token, sent apart) as its query; a `limit`
/// one larger, so that the joined listing knows whether the limit cut it.
fn forward_query(path: &str, params: &Params) -> String {
    let mut out = format!("{path}?");
    for (k, v) in params.iter().filter(|(k, _)| k != "read_after") {
        let v = match (k.as_str(), v.trim().parse::<usize>()) {
            ("limit", Ok(n)) if n > 0 => n.saturating_add(1).to_string(),
            _ => v.clone(),
        };
        let _ = write!(out, "{}={}&", percent_encode(k), percent_encode(&v));
    }
    out.pop();
    out
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn partition_data(body: &[u8]) -> Result<serde_json::Value, EvalError> {
    let mut v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| EvalError::Execution(format!("a partition's listing: {e}")))?;
    Ok(v["data"].take())
}

/// A listing of names or values from every partition: their union, sorted (each partition
/// sent at most the limit and one more, so the union cut to that is exact).
fn remote_strings(
    remote: &dyn Remote,
    path_and_query: &str,
    read_after: Option<&str>,
) -> Result<Vec<String>, EvalError> {
    let mut out = Vec::new();
    for body in remote.get(path_and_query, read_after)? {
        if let serde_json::Value::Array(items) = partition_data(&body)? {
            out.extend(
                items
                    .into_iter()
                    .filter_map(|i| i.as_str().map(str::to_string)),
            );
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `/api/v1/series` from every partition: the label sets joined, sorted.
fn remote_series(
    remote: &dyn Remote,
    path_and_query: &str,
    read_after: Option<&str>,
) -> Result<Vec<Labels>, EvalError> {
    let mut out: Vec<Labels> = Vec::new();
    for body in remote.get(path_and_query, read_after)? {
        if let serde_json::Value::Array(items) = partition_data(&body)? {
            for item in items {
                let serde_json::Value::Object(map) = item else {
                    continue;
                };
                let mut labels: Labels = map
                    .into_iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_string())))
                    .collect();
                labels.sort();
                out.push(labels);
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}
