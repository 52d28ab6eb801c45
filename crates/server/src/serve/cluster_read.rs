//! A cluster's read path: a front reads every partition from one up-to-date owner (its own
//! side first, the other when that one is down or behind) and joins; a storage node answers
//! for each partition it owns. PromQL evaluates on the front over the series the partitions
//! select (`promql::eval::Remote`); listings and the native API join the partitions' answers.
//!
//! Read-your-writes: a front's 2xx to a write carries `Strata-Read-After: <p>:<offset>,…`, the
//! Kafka offsets its records got (`cluster::ReadAfter`). A read that passes it back (the header,
//! or the parameter `read_after`) is answered for those partitions only by owners that applied
//! past the offsets; an owner waits for that up to `READ_AFTER_WAIT_MS_MAX`, else the front
//! asks the next, and 503 names the partition no owner could answer.

// A helper's early answer is the whole response; boxing it buys nothing here.
#![allow(clippy::result_large_err)]

use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use cluster::ReadAfter;
use promql::eval::EvalError;
use serde_json::Value;
use tower::ServiceExt as _;

use super::reply::error;
use super::Shared;

/// The header of the read-after token, on a write's answer and on a read.
pub const READ_AFTER_HEADER: &str = "strata-read-after";
/// The parameter a read may carry the token in instead.
const READ_AFTER_PARAM: &str = "read_after";
/// The parameter a front adds for a partition its token names: answer only once the record
/// at this offset is applied.
const AFTER_PARAM: &str = "after";
/// The parameter a front adds to its first choice of owner: answer only if at most this many
/// records behind Kafka's end of the partition.
const LAG_PARAM: &str = "lag_max";
/// Records an owner may be behind and still count as up to date.
const LAG_RECORDS_MAX: i64 = 100;
/// How long an owner waits to apply a token's offset before answering 503, in ms.
const READ_AFTER_WAIT_MS_MAX: u64 = 5_000;
/// How often a waiting owner looks at its applied offset again, in ms.
const READ_AFTER_POLL_MS: u64 = 5;
/// How long a front waits for one storage node's answer to a read, in ms.
const PEER_TIMEOUT_MS: u64 = 30_000;
/// Most bytes of one storage node's answer to a read.
const PEER_ANSWER_BYTES_MAX: u64 = 256 << 20;
/// Most bytes of a front's request to a partition (a select carries each selector's read
/// times: at most 256 selectors × 11,000 steps).
const PART_REQUEST_BYTES_MAX: usize = 64 << 20;
/// Most partitions read at once for one request (each on a thread of its own).
const PARTITIONS_AT_ONCE_MAX: usize = 64;

// ---- the token on writes ----

tokio::task_local! {
    /// The offsets a request's writes were given, while a front handles it.
    static PRODUCED: Arc<Mutex<ReadAfter>>;
}

thread_local! {
    /// The request's collector while its write runs on a blocking thread.
    static PRODUCED_HERE: RefCell<Option<Arc<Mutex<ReadAfter>>>> = const { RefCell::new(None) };
}

/// The collector of the request being handled, if it has one (on a front).
pub fn collector() -> Option<Arc<Mutex<ReadAfter>>> {
    PRODUCED.try_with(Arc::clone).ok()
}

/// Runs `f` (a write on a blocking thread) with `c` as where produced offsets go.
pub fn collecting<T>(c: Option<Arc<Mutex<ReadAfter>>>, f: impl FnOnce() -> T) -> T {
    if c.is_none() {
        return f();
    }
    PRODUCED_HERE.with(|h| *h.borrow_mut() = c);
    let out = f();
    PRODUCED_HERE.with(|h| *h.borrow_mut() = None);
    out
}

/// Notes the offsets Kafka gave a write's records, for its answer's token.
pub fn note_produced(offsets: &[(u32, i64)]) {
    PRODUCED_HERE.with(|h| {
        if let Some(c) = h.borrow().as_ref() {
            if let Ok(mut t) = c.lock() {
                t.join(&ReadAfter::of(offsets));
            }
        }
    });
}

/// A front's layer: a 2xx to a request whose writes Kafka took carries their token.
pub async fn read_after_header(request: Request, next: Next) -> Response {
    let c = Arc::new(Mutex::new(ReadAfter::default()));
    let mut response = PRODUCED.scope(Arc::clone(&c), next.run(request)).await;
    if !response.status().is_success() {
        return response;
    }
    let token = c.lock().map(|t| t.to_string()).unwrap_or_default();
    if let (false, Ok(v)) = (token.is_empty(), HeaderValue::from_str(&token)) {
        response.headers_mut().insert(READ_AFTER_HEADER, v);
    }
    response
}

// ---- a front asking the owners ----

/// What a front asks a partition: a path below `/api/strata/v1/cluster/p/<n>/` with its query,
/// and a body for a POST.
struct Ask<'a> {
    tail: &'a str,
    body: Option<&'a [u8]>,
}

/// The token of a read: its header, else its parameter (400 when malformed).
fn token_of(
    app: &Shared,
    headers: &HeaderMap,
    query: &str,
) -> Result<Option<ReadAfter>, (StatusCode, String)> {
    let text = match headers.get(READ_AFTER_HEADER) {
        Some(v) => Some(v.to_str().map(str::to_string).map_err(|_| {
            let m = format!("header `{READ_AFTER_HEADER}` is not text");
            (StatusCode::BAD_REQUEST, m)
        })?),
        None => form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == READ_AFTER_PARAM)
            .map(|(_, v)| v.into_owned()),
    };
    parse_token(app, text.as_deref())
}

fn parse_token(
    app: &Shared,
    text: Option<&str>,
) -> Result<Option<ReadAfter>, (StatusCode, String)> {
    let partitions = app
        .cluster
        .as_ref()
        .map_or(0, |r| r.topology.kafka.partitions);
    text.map(|t| {
        ReadAfter::parse(t, partitions).map_err(|e| {
            let m = format!("read-after token `{t}`: {e}");
            (StatusCode::BAD_REQUEST, m)
        })
    })
    .transpose()
}

/// Asks the owners of `partition` in turn (own side first) until one answers 200: with a
/// token offset, only owners that applied it; else an up-to-date owner first, then any that
/// answers (an answer a little behind beats none). A 4xx other than 404 is the request's own
/// fault and is returned at once.
fn ask_partition(
    app: &Shared,
    partition: u32,
    ask: &Ask<'_>,
    after: Option<i64>,
) -> Result<Vec<u8>, (StatusCode, String)> {
    let Some(role) = &app.cluster else {
        return Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            "not a cluster node".into(),
        ));
    };
    let mut owners = role.topology.owners(partition);
    owners.sort_by_key(|n| n.side != role.node.side);
    let token = app.config.auth.token.as_deref();
    let sep = if ask.tail.contains('?') { '&' } else { '?' };
    let base = format!("/api/strata/v1/cluster/p/{partition}/{}", ask.tail);
    let paths: Vec<String> = match after {
        Some(o) => vec![format!("{base}{sep}{AFTER_PARAM}={o}")],
        None => vec![format!("{base}{sep}{LAG_PARAM}={LAG_RECORDS_MAX}"), base],
    };
    let mut failures = Vec::new();
    // An owner that could not be reached at all is not asked again in the second pass.
    let mut unreachable: Vec<&str> = Vec::new();
    for path in &paths {
        for owner in &owners {
            if unreachable.contains(&owner.name.as_str()) {
                continue;
            }
            let asked = crate::cli_cluster::peer_request(
                if ask.body.is_some() { "POST" } else { "GET" },
                &owner.http,
                (path, ask.body),
                token,
                PEER_TIMEOUT_MS,
                PEER_ANSWER_BYTES_MAX,
            );
            match asked {
                Ok((200, body)) => return Ok(body),
                Ok((status, body)) if (400..500).contains(&status) && status != 404 => {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let m = v["error"].as_str().unwrap_or("refused").to_owned();
                    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
                    return Err((code, m));
                }
                Ok((status, body)) => {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let why = v["error"]
                        .as_str()
                        .map_or(String::new(), |m| format!(": {m}"));
                    failures.push(format!("{}: HTTP {status}{why}", owner.name));
                }
                Err(e) => {
                    unreachable.push(&owner.name);
                    failures.push(format!("{}: {e}", owner.name));
                }
            }
        }
    }
    let what = match after {
        Some(o) => format!("no owner of partition {partition} applied offset {o} in time"),
        None => format!("no owner of partition {partition} answered"),
    };
    Err((
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what} ({})", failures.join("; ")),
    ))
}

/// Every partition's answer to `ask`, in partition order; the first failure otherwise.
fn ask_all(
    app: &Shared,
    ask: &Ask<'_>,
    token: Option<&ReadAfter>,
) -> Result<Vec<Vec<u8>>, (StatusCode, String)> {
    let partitions = app
        .cluster
        .as_ref()
        .map_or(0, |r| r.topology.kafka.partitions);
    let after = |p: u32| token.and_then(|t| t.offsets.get(&p).copied());
    let all: Vec<u32> = (0..partitions).collect();
    let mut out = Vec::with_capacity(all.len());
    for chunk in all.chunks(PARTITIONS_AT_ONCE_MAX) {
        let answers: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&p| s.spawn(move || ask_partition(app, p, ask, after(p))))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err((
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "a read thread panicked".into(),
                        ))
                    })
                })
                .collect()
        });
        for a in answers {
            out.push(a?);
        }
    }
    Ok(out)
}

/// The native API's fan-out (`clustered.rs` joins the answers): every partition's JSON.
pub async fn native_fanout(
    app: Shared,
    what: &'static str,
    query: String,
    headers: HeaderMap,
) -> Result<Vec<Value>, Response> {
    let token = token_of(&app, &headers, &query).map_err(|(s, m)| error(s, m))?;
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(
            form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| k != READ_AFTER_PARAM),
        )
        .finish();
    let joined = tokio::task::spawn_blocking(move || {
        let tail = format!("{what}?{query}");
        let bodies = ask_all(
            &app,
            &Ask {
                tail: &tail,
                body: None,
            },
            token.as_ref(),
        )?;
        bodies
            .into_iter()
            .enumerate()
            .map(|(p, b)| {
                serde_json::from_slice(&b).map_err(|e| {
                    let m = format!("partition {p} answered with bad JSON: {e}");
                    (StatusCode::BAD_GATEWAY, m)
                })
            })
            .collect::<Result<Vec<Value>, _>>()
    })
    .await;
    match joined {
        Ok(Ok(v)) => Ok(v),
        Ok(Err((s, m))) => Err(error(s, m)),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("read task: {e}"),
        )),
    }
}

/// PromQL's way to the partitions on a front.
pub struct PromRemote {
    app: std::sync::Weak<super::App>,
}

/// The PromQL remote of a front (`None` elsewhere: PromQL reads the local store).
pub fn prom_remote(app: &Shared) -> Option<Arc<dyn promql::eval::Remote>> {
    app.cluster.as_ref().filter(|r| r.is_front())?;
    Some(Arc::new(PromRemote {
        app: Arc::downgrade(app),
    }))
}

fn eval_error((status, m): (StatusCode, String)) -> EvalError {
    match status.as_u16() {
        400 => EvalError::BadData(m),
        503 => EvalError::Unavailable(m),
        _ => EvalError::Execution(m),
    }
}

impl PromRemote {
    fn ask(
        &self,
        tail: &str,
        body: Option<&[u8]>,
        read_after: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, EvalError> {
        let Some(app) = self.app.upgrade() else {
            return Err(EvalError::Unavailable("the server is shutting down".into()));
        };
        let token = parse_token(&app, read_after).map_err(eval_error)?;
        ask_all(&app, &Ask { tail, body }, token.as_ref()).map_err(eval_error)
    }
}

impl promql::eval::Remote for PromRemote {
    fn select(&self, request: &[u8], read_after: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError> {
        self.ask("prom/select", Some(request), read_after)
    }

    fn get(
        &self,
        path_and_query: &str,
        read_after: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, EvalError> {
        let tail = format!("prom{path_and_query}");
        self.ask(&tail, None, read_after)
    }

    fn partial(&self, request: &[u8], read_after: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError> {
        self.ask("prom/partial", Some(request), read_after)
    }
}

/// CAQL's way to the partitions on a front.
pub struct CaqlRemote {
    app: std::sync::Weak<super::App>,
}

/// The CAQL remote of a front (`None` elsewhere: CAQL reads the local store).
pub fn caql_remote(app: &Shared) -> Option<Arc<dyn query::eval::Remote>> {
    app.cluster.as_ref().filter(|r| r.is_front())?;
    Some(Arc::new(CaqlRemote {
        app: Arc::downgrade(app),
    }))
}

impl query::eval::Remote for CaqlRemote {
    fn part(
        &self,
        request: &[u8],
        read_after: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, query::eval::EvalError> {
        use query::eval::EvalError as E;
        let Some(app) = self.app.upgrade() else {
            return Err(E::Unavailable("the server is shutting down".into()));
        };
        let ask = Ask {
            tail: "caql/part",
            body: Some(request),
        };
        parse_token(&app, read_after)
            .and_then(|token| ask_all(&app, &ask, token.as_ref()))
            .map_err(|(status, m)| match status.as_u16() {
                400 => E::Invalid(m),
                422 => E::Limit(m),
                503 => E::Unavailable(m),
                _ => E::Store(m),
            })
    }
}

// ---- a storage node answering for its partitions ----

type Params = std::collections::HashMap<String, String>;

/// The reading `App` of partition `n`, once it may answer: with `after`, when it applied that
/// offset (waiting up to `READ_AFTER_WAIT_MS_MAX`); with `lag_max`, when at most that many
/// records behind. 503 otherwise (the front asks another owner), 404 when not owned here.
pub async fn fresh(app: &Shared, n: u32, params: &mut Params) -> Result<Shared, Response> {
    let whole = |name: &str, text: String| {
        text.trim().parse::<i64>().map_err(|_| {
            let m = format!("parameter `{name}`: `{text}` is not a whole number");
            error(StatusCode::BAD_REQUEST, m)
        })
    };
    let lag_max = params
        .remove(LAG_PARAM)
        .map(|t| whole(LAG_PARAM, t))
        .transpose()?;
    let after = params
        .remove(AFTER_PARAM)
        .map(|t| whole(AFTER_PARAM, t))
        .transpose()?;
    let role = app.cluster.as_ref();
    let Some(partition) = role.and_then(|r| r.partition_apps.get(&n)).cloned() else {
        let m = format!("partition {n} is not owned by this node");
        return Err(error(StatusCode::NOT_FOUND, m));
    };
    let status = || {
        role.and_then(|r| r.storage.as_ref())
            .and_then(|s| s.status().into_iter().find(|p| p.partition == n))
    };
    if let Some(offset) = after {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(READ_AFTER_WAIT_MS_MAX);
        // Bounded by the deadline: the owner is behind until then, or it is not.
        while let Some(p) = status() {
            if p.next_offset > offset {
                break;
            }
            if p.failed.is_some() || tokio::time::Instant::now() >= deadline {
                let m = format!(
                    "partition {n} here has not applied offset {offset} (next {})",
                    p.next_offset
                );
                return Err(error(StatusCode::SERVICE_UNAVAILABLE, m));
            }
            tokio::time::sleep(Duration::from_millis(READ_AFTER_POLL_MS)).await;
        }
    }
    if let (Some(lag_max), Some(p)) = (lag_max, status()) {
        let lag = p.end_offset - p.next_offset;
        if p.failed.is_some() || p.end_offset < 0 || lag > lag_max {
            let m = format!("partition {n} here is not up to date ({lag} records behind)");
            return Err(error(StatusCode::SERVICE_UNAVAILABLE, m));
        }
    }
    Ok(partition)
}

/// A storage node's PromQL routes per owned partition: the select of a front's query and the
/// Prometheus listings.
pub fn partition_routes(router: Router<Shared>) -> Router<Shared> {
    router
        .route(
            "/api/strata/v1/cluster/p/{n}/prom/select",
            post(prom_select).layer(DefaultBodyLimit::max(PART_REQUEST_BYTES_MAX)),
        )
        .route(
            "/api/strata/v1/cluster/p/{n}/prom/partial",
            post(prom_partial).layer(DefaultBodyLimit::max(PART_REQUEST_BYTES_MAX)),
        )
        .route(
            "/api/strata/v1/cluster/p/{n}/caql/part",
            post(caql_part).layer(DefaultBodyLimit::max(PART_REQUEST_BYTES_MAX)),
        )
        .route(
            "/api/strata/v1/cluster/p/{n}/prom/api/v1/{*rest}",
            get(prom_listing),
        )
}

fn query_params(raw: &Option<String>) -> Params {
    form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

async fn prom_select(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    prom_part(app, n, raw, body, promql::eval::answer_select).await
}

async fn prom_partial(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    prom_part(app, n, raw, body, promql::eval::answer_partial).await
}

/// A partition's answer to a front's PromQL request (`answer`: select or partial).
async fn prom_part(
    app: Shared,
    n: u32,
    raw: Option<String>,
    body: Bytes,
    answer: fn(&store::Store, &[u8]) -> Result<Vec<u8>, EvalError>,
) -> Response {
    let partition = match fresh(&app, n, &mut query_params(&raw)).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let store = Arc::clone(&partition.store);
    let answered = tokio::task::spawn_blocking(move || answer(&store, &body)).await;
    match answered {
        Ok(Ok(bytes)) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            bytes,
        )
            .into_response(),
        Ok(Err(e)) => {
            let status = match e {
                EvalError::BadData(_) => StatusCode::BAD_REQUEST,
                EvalError::Execution(_) => StatusCode::UNPROCESSABLE_ENTITY,
                EvalError::Timeout(_) | EvalError::Unavailable(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
            };
            error(status, e.message())
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("select task: {e}"),
        ),
    }
}

async fn prom_listing(
    State(app): State<Shared>,
    Path((n, rest)): Path<(u32, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    let mut params = query_params(&raw);
    let partition = match fresh(&app, n, &mut params).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let query: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(
            form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes())
                .filter(|(k, _)| k != LAG_PARAM && k != AFTER_PARAM),
        )
        .finish();
    let uri = format!("/api/v1/{rest}?{query}");
    let Ok(request) = axum::http::Request::get(uri).body(axum::body::Body::empty()) else {
        return error(StatusCode::BAD_REQUEST, "the listing's path is not a URI");
    };
    let router = promql::http::router(Arc::clone(&partition.store));
    match router.oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

async fn caql_part(
    State(app): State<Shared>,
    Path(n): Path<u32>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Response {
    use query::eval::EvalError as E;
    let partition = match fresh(&app, n, &mut query_params(&raw)).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let store = Arc::clone(&partition.store);
    let answered = tokio::task::spawn_blocking(move || {
        let cancel = std::sync::atomic::AtomicBool::new(false);
        query::eval::answer_part(&store, &body, &cancel)
    })
    .await;
    match answered {
        Ok(Ok(bytes)) => (
            StatusCode::OK,
            [("content-type", "application/json")],
            bytes,
        )
            .into_response(),
        Ok(Err(e)) => {
            let status = match e {
                E::Parse(_) | E::Invalid(_) => StatusCode::BAD_REQUEST,
                E::Limit(_) => StatusCode::UNPROCESSABLE_ENTITY,
                E::Timeout { .. } | E::Cancelled | E::Unavailable(_) => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                E::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error(status, e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("part task: {e}")),
    }
}
