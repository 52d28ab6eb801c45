//! Saved documents of the web UI — worksheets (ad-hoc analysis) and dashboards (grids of
//! panels) — one JSON file each in `<data_dir>/<collection>/<id>.json` (format:
//! `crates/server/FORMAT.md`).
//!
//! Per collection (`/api/strata/v1/worksheets`, `/dashboards`, `/checks`):
//! `GET` lists `[{id, name, updated_ms, owner?}]`, most recently changed first (`?owner=` only
//! that owner's); `POST` creates with an id chosen here (201); `DELETE ?owner=<owner>` deletes
//! every document that owner manages; `GET|PUT|DELETE …/<id>` reads, creates-or-replaces at a
//! client-chosen id (201 created, 200 replaced, 200 with `x-strata-unchanged: true` and the
//! stored document untouched when the body is what is stored), and deletes. Checks are also
//! listed in full per broker (`GET /api/strata/v1/checks?broker=<name>`), for brokers to fetch. Names are unique within a
//! collection (compared trimmed and case-insensitively): a write whose name another document
//! has is refused with 409 and that document's `id`, so the UI can ask before replacing it.
//! Writes go to a temporary file that is synced and renamed over the old one, so a crash leaves
//! the old or the new document, never a torn one. Sizes and counts are bounded.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use super::reply::{error, json_response};
use super::{now_ms, Shared};

/// Largest document body, in bytes.
pub const DOC_BYTES_MAX: usize = 256 * 1024;
/// Most documents kept in one collection.
pub const DOCS_MAX: usize = 1000;
/// Longest name, in characters.
pub const NAME_CHARS_MAX: usize = 200;
/// Longest id, in bytes.
pub const ID_BYTES_MAX: usize = 64;
/// The format version the server writes (`version`); bodies may omit it.
pub const FORMAT_VERSION: u64 = 1;

/// What differs between collections.
pub struct Kind {
    /// `worksheet`, `dashboard`: used in messages.
    pub noun: &'static str,
    /// The directory under the data directory, and the last part of the API path.
    pub dir: &'static str,
    /// Server-chosen ids are `<prefix>-<unix ms>-<n>`.
    pub id_prefix: &'static str,
    /// Checks the fields only this collection has, and fills in their defaults.
    pub check: fn(&mut Map<String, Value>) -> Result<(), String>,
}

pub const WORKSHEETS: Kind = Kind {
    noun: "worksheet",
    dir: "worksheets",
    id_prefix: "ws",
    check: check_worksheet,
};

pub const DASHBOARDS: Kind = Kind {
    noun: "dashboard",
    dir: "dashboards",
    id_prefix: "db",
    check: check_dashboard,
};

/// Most graphs in one worksheet.
pub const GRAPHS_MAX: usize = 100;

/// Checks defined on the core: `spec` is what `strata check test` runs (its `id` is the
/// document's), `broker` the broker that runs it.
pub const CHECKS: Kind = Kind {
    noun: "check",
    dir: "checks",
    id_prefix: "ck",
    check: check_check,
};

/// Longest `owner` and `broker` values, in bytes.
pub const OWNER_BYTES_MAX: usize = 128;
/// The broker a check runs on when its body names none.
pub const BROKER_DEFAULT: &str = "default";

fn check_check(map: &mut Map<String, Value>) -> Result<(), String> {
    let Some(Value::Object(spec)) = map.get("spec") else {
        return Err("`spec` must be an object (kind, target, period_ms, timeout_ms, …)".into());
    };
    let mut spec = spec.clone();
    spec.remove("id");
    let mut with_id = spec.clone();
    with_id.insert("id".into(), json!("check"));
    let parsed: checks::CheckSpec =
        serde_json::from_value(Value::Object(with_id)).map_err(|e| format!("`spec`: {e}"))?;
    checks::validate(&parsed).map_err(|e| format!("`spec`: {e}"))?;
    map.insert("spec".into(), Value::Object(spec));
    match map.get("broker") {
        None | Some(Value::Null) => {
            map.insert("broker".into(), json!(BROKER_DEFAULT));
            Ok(())
        }
        Some(Value::String(b)) if !b.is_empty() && b.len() <= OWNER_BYTES_MAX => Ok(()),
        Some(_) => Err(format!(
            "`broker` must be a string of 1 to {OWNER_BYTES_MAX} bytes"
        )),
    }
}

fn check_worksheet(map: &mut Map<String, Value>) -> Result<(), String> {
    match map.get("graphs") {
        Some(Value::Array(g)) if g.len() <= GRAPHS_MAX => Ok(()),
        Some(Value::Array(_)) => Err(format!("`graphs`: at most {GRAPHS_MAX} graphs")),
        _ => Err("`graphs` must be an array".into()),
    }
}

/// Most panels on one dashboard.
pub const PANELS_MAX: usize = 100;
/// Columns of the dashboard grid.
pub const GRID_COLUMNS: u64 = 12;
/// Tallest panel, in grid rows.
pub const PANEL_ROWS_MAX: u64 = 12;
/// Lowest row a panel may start at.
pub const PANEL_Y_MAX: u64 = 10_000;
/// Panel types the UI draws.
pub const PANEL_TYPES: [&str; 6] = ["heatmap", "line", "value", "histogram", "text", "alerts"];
/// Longest text field of a panel (a query, a CAQL expression, a text panel's text), in bytes.
pub const PANEL_TEXT_BYTES_MAX: usize = 16 * 1024;
/// Most tags on a panel's stream.
pub const PANEL_TAGS_MAX: usize = 64;
/// Longest dashboard description, in characters.
pub const DESCRIPTION_CHARS_MAX: usize = 2000;

fn uint(p: &Map<String, Value>, field: &str, at: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match p.get(field).and_then(Value::as_u64) {
        Some(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{at}.{field}` must be an integer from {lo} to {hi}"
        )),
    }
}

fn opt_text(p: &Map<String, Value>, field: &str, at: &str, max: usize) -> Result<(), String> {
    match p.get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s.len() <= max => Ok(()),
        Some(Value::String(_)) => Err(format!("`{at}.{field}` is longer than {max} bytes")),
        Some(_) => Err(format!("`{at}.{field}` must be a string")),
    }
}

fn check_panel(p: &Value, i: usize, ids: &mut Vec<String>) -> Result<(), String> {
    let at = format!("panels[{i}]");
    let Value::Object(p) = p else {
        return Err(format!("`{at}` must be an object"));
    };
    let id = p.get("id").and_then(Value::as_str).unwrap_or("");
    if id.is_empty() || id.len() > ID_BYTES_MAX {
        return Err(format!(
            "`{at}.id` must be a string of 1 to {ID_BYTES_MAX} bytes"
        ));
    }
    if ids.iter().any(|seen| seen == id) {
        return Err(format!("`{at}.id`: `{id}` is used by another panel"));
    }
    ids.push(id.to_owned());
    match p.get("type").and_then(Value::as_str) {
        Some(t) if PANEL_TYPES.contains(&t) => {}
        _ => {
            return Err(format!(
                "`{at}.type` must be one of {}",
                PANEL_TYPES.join(", ")
            ))
        }
    }
    let x = uint(p, "x", &at, 0, GRID_COLUMNS - 1)?;
    let w = uint(p, "w", &at, 1, GRID_COLUMNS)?;
    if x + w > GRID_COLUMNS {
        return Err(format!(
            "`{at}`: x + w is {}; the grid has {GRID_COLUMNS} columns",
            x + w
        ));
    }
    uint(p, "y", &at, 0, PANEL_Y_MAX)?;
    uint(p, "h", &at, 1, PANEL_ROWS_MAX)?;
    for field in ["title", "stat", "unit", "kind"] {
        opt_text(p, field, &at, NAME_CHARS_MAX)?;
    }
    for field in ["query", "key", "name", "caql", "text"] {
        opt_text(p, field, &at, PANEL_TEXT_BYTES_MAX)?;
    }
    match p.get("color") {
        None | Some(Value::Null) => {}
        Some(Value::String(c)) if c == "density" || c == "count" => {}
        Some(_) => return Err(format!("`{at}.color` must be density or count")),
    }
    match p.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tags))
            if tags.len() <= PANEL_TAGS_MAX
                && tags
                    .iter()
                    .all(|t| t.as_str().is_some_and(|s| s.len() <= PANEL_TEXT_BYTES_MAX)) => {}
        Some(_) => {
            return Err(format!(
                "`{at}.tags` must be an array of at most {PANEL_TAGS_MAX} strings"
            ))
        }
    }
    Ok(())
}

fn check_dashboard(map: &mut Map<String, Value>) -> Result<(), String> {
    let panels = match map.get("panels") {
        Some(Value::Array(p)) if p.len() <= PANELS_MAX => p,
        Some(Value::Array(_)) => return Err(format!("`panels`: at most {PANELS_MAX} panels")),
        _ => return Err("`panels` must be an array".into()),
    };
    let mut ids = Vec::with_capacity(panels.len());
    for (i, p) in panels.iter().enumerate() {
        check_panel(p, i, &mut ids)?;
    }
    match map.get("description") {
        None | Some(Value::Null) => {}
        Some(Value::String(d)) if d.chars().count() <= DESCRIPTION_CHARS_MAX => {}
        Some(_) => {
            return Err(format!(
                "`description` must be a string of at most {DESCRIPTION_CHARS_MAX} characters"
            ))
        }
    }
    match map.get("range") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(r)) if r.len() <= 16 => Ok(()),
        Some(_) => Err("`range` must be a short string such as 1h".into()),
    }
}

struct Entry {
    name: String,
    updated_ms: i64,
    owner: Option<String>,
    /// A check's broker.
    broker: Option<String>,
}

fn entry_of(doc: &Map<String, Value>) -> Entry {
    let text = |k: &str| doc.get(k).and_then(Value::as_str).map(str::to_owned);
    Entry {
        name: text("name").unwrap_or_default(),
        updated_ms: doc.get("updated_ms").and_then(Value::as_i64).unwrap_or(0),
        owner: text("owner"),
        broker: text("broker"),
    }
}

struct Docs {
    kind: &'static Kind,
    dir: PathBuf,
    /// id → name and last change, read from the directory on first use and kept up to date by
    /// every write here. Also serialises writers, so the name and count checks cannot race.
    index: Mutex<Option<HashMap<String, Entry>>>,
    /// Server-chosen ids: a counter beside the time.
    next: std::sync::atomic::AtomicU64,
}

pub fn router(app: &Shared, kind: &'static Kind) -> Router {
    let docs = Arc::new(Docs {
        kind,
        dir: app.config.store.data_dir.join(kind.dir),
        index: Mutex::new(None),
        next: std::sync::atomic::AtomicU64::new(0),
    });
    let base = format!("/api/strata/v1/{}", kind.dir);
    Router::new()
        .route(&base, get(list).post(create).delete(remove_owned))
        .route(
            &format!("{base}/{{id}}"),
            get(read).put(replace).delete(remove),
        )
        .with_state(docs)
}

pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The form names are compared in: trimmed, lower case.
fn name_key(name: &str) -> String {
    name.trim().to_lowercase()
}

/// Checks a body and returns the object to store (without `id` / `updated_ms`, set here).
fn parse_body(kind: &Kind, body: &[u8]) -> Result<Map<String, Value>, String> {
    let noun = kind.noun;
    if body.len() > DOC_BYTES_MAX {
        return Err(format!(
            "the {noun} is {} bytes; at most {DOC_BYTES_MAX} are kept",
            body.len()
        ));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("{noun} body is not JSON: {e}"))?;
    let Value::Object(mut map) = value else {
        return Err(format!("{noun} body must be a JSON object"));
    };
    let name = map.get("name").and_then(Value::as_str).unwrap_or("");
    let chars = name.trim().chars().count();
    if chars == 0 || chars > NAME_CHARS_MAX {
        return Err(format!(
            "`name` must be a string of 1 to {NAME_CHARS_MAX} characters"
        ));
    }
    let trimmed = name.trim().to_owned();
    map.insert("name".into(), json!(trimmed));
    match map.get("version") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(FORMAT_VERSION) => {}
        Some(v) => {
            return Err(format!(
                "`version` {v} is not supported (this server writes {FORMAT_VERSION})"
            ))
        }
    }
    match map.get("owner") {
        None | Some(Value::Null) => {}
        Some(Value::String(o)) if !o.is_empty() && o.len() <= OWNER_BYTES_MAX => {}
        Some(_) => {
            return Err(format!(
                "`owner` must be a string of 1 to {OWNER_BYTES_MAX} bytes"
            ))
        }
    }
    (kind.check)(&mut map)?;
    map.remove("id");
    map.remove("updated_ms");
    map.insert("version".into(), json!(FORMAT_VERSION));
    Ok(map)
}

/// Writes `bytes` to `path` atomically: temporary file, fsync, rename, fsync of the directory.
fn write_atomic(path: &FsPath, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(FsPath::new("."));
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fs::File::open(dir)?.sync_all()
}

/// The ids of the files in `dir` (at most twice the bound, for a directory filled from outside).
fn ids(dir: &FsPath) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_suffix(".json").filter(|id| valid_id(id)) {
            out.push(id.to_string());
            if out.len() >= DOCS_MAX * 2 {
                break;
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A failed request: status, message and extra fields of the JSON answer.
struct Fail(StatusCode, String, Option<Value>);

impl Fail {
    fn new(status: StatusCode, message: String) -> Fail {
        Fail(status, message, None)
    }

    fn response(self) -> Response {
        match self.2 {
            None => error(self.0, self.1),
            Some(Value::Object(mut extra)) => {
                extra.insert("error".into(), json!(self.1));
                json_response(self.0, Value::Object(extra))
            }
            Some(_) => error(self.0, self.1),
        }
    }
}

fn io_error(what: &str, e: impl std::fmt::Display) -> Fail {
    Fail::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))
}

fn bad_id(kind: &Kind, id: &str) -> Fail {
    Fail::new(
        StatusCode::BAD_REQUEST,
        format!(
            "`{id}` is not a {} id (1 to {ID_BYTES_MAX} of A-Z a-z 0-9 - _)",
            kind.noun
        ),
    )
}

fn read_doc(kind: &Kind, dir: &FsPath, id: &str) -> Result<Option<Map<String, Value>>, Fail> {
    if !valid_id(id) {
        return Err(bad_id(kind, id));
    }
    let path = dir.join(format!("{id}.json"));
    match fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok(Some(map)),
            Ok(_) => Err(io_error(
                &format!("{} {id}", kind.noun),
                "the file is not a JSON object",
            )),
            Err(e) => Err(io_error(&format!("{} {id}", kind.noun), e)),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(&format!("reading {} {id}", kind.noun), e)),
    }
}

/// Reads every document's name and time (once per process).
fn load_index(kind: &Kind, dir: &FsPath) -> Result<HashMap<String, Entry>, Fail> {
    let mut index = HashMap::new();
    let all = ids(dir).map_err(|e| io_error(&format!("listing {}s", kind.noun), e))?;
    for id in all {
        // A damaged file is left out of the list (and reported when read).
        if let Ok(Some(doc)) = read_doc(kind, dir, &id) {
            index.insert(id, entry_of(&doc));
        }
    }
    Ok(index)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Fail> + Send + 'static,
) -> Result<T, Fail> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io_error("task", e)))
}

/// The index, loaded on first use; the guard serialises writers.
async fn index_guard(
    docs: &Arc<Docs>,
) -> Result<tokio::sync::MutexGuard<'_, Option<HashMap<String, Entry>>>, Fail> {
    let mut guard = docs.index.lock().await;
    if guard.is_none() {
        let (kind, dir) = (docs.kind, docs.dir.clone());
        *guard = Some(blocking(move || load_index(kind, &dir)).await?);
    }
    Ok(guard)
}

async fn list(State(docs): State<Arc<Docs>>, Query(q): Query<HashMap<String, String>>) -> Response {
    let guard = match index_guard(&docs).await {
        Ok(g) => g,
        Err(f) => return f.response(),
    };
    let (owner, broker) = (q.get("owner"), q.get("broker"));
    let mut out: Vec<(&String, &Entry)> = guard
        .iter()
        .flatten()
        .filter(|(_, e)| owner.is_none() || e.owner.as_ref() == owner)
        .filter(|(_, e)| broker.is_none() || e.broker.as_ref() == broker)
        .collect();
    out.sort_by(|a, b| b.1.updated_ms.cmp(&a.1.updated_ms).then(a.0.cmp(b.0)));
    out.truncate(DOCS_MAX);
    if broker.is_some() {
        // A broker fetching its checks wants them whole.
        let ids: Vec<String> = out.into_iter().map(|(id, _)| id.clone()).collect();
        drop(guard);
        let (kind, dir) = (docs.kind, docs.dir.clone());
        let full = blocking(move || {
            let mut all = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(doc) = read_doc(kind, &dir, &id)? {
                    all.push(Value::Object(doc));
                }
            }
            Ok(all)
        })
        .await;
        return match full {
            Ok(all) => json_response(StatusCode::OK, Value::Array(all)),
            Err(f) => f.response(),
        };
    }
    let list: Vec<Value> = out
        .into_iter()
        .map(|(id, e)| {
            let mut v = json!({ "id": id, "name": e.name, "updated_ms": e.updated_ms });
            if let Some(o) = &e.owner {
                v["owner"] = json!(o);
            }
            v
        })
        .collect();
    json_response(StatusCode::OK, Value::Array(list))
}

/// `DELETE <collection>?owner=<owner>`: every document that owner manages, so an uninstalled
/// host leaves nothing behind.
async fn remove_owned(
    State(docs): State<Arc<Docs>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let kind = docs.kind;
    let Some(owner) = q.get("owner").filter(|o| !o.is_empty()).cloned() else {
        return Fail::new(
            StatusCode::BAD_REQUEST,
            format!(
                "DELETE /api/strata/v1/{} needs ?owner=<owner> (one {}: …/{}/<id>)",
                kind.dir, kind.noun, kind.dir
            ),
        )
        .response();
    };
    let mut guard = match index_guard(&docs).await {
        Ok(g) => g,
        Err(f) => return f.response(),
    };
    let Some(index) = guard.as_mut() else {
        return json_response(StatusCode::OK, json!({ "deleted": [] }));
    };
    let mut owned: Vec<String> = index
        .iter()
        .filter(|(_, e)| e.owner.as_deref() == Some(owner.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    owned.sort();
    let dir = docs.dir.clone();
    let ids = owned.clone();
    let result = blocking(move || {
        for id in &ids {
            match fs::remove_file(dir.join(format!("{id}.json"))) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&format!("deleting {} {id}", kind.noun), e)),
            }
        }
        Ok(())
    })
    .await;
    match result {
        Ok(()) => {
            for id in &owned {
                index.remove(id);
            }
            json_response(StatusCode::OK, json!({ "deleted": owned }))
        }
        Err(f) => f.response(),
    }
}

/// What a write did.
enum Stored {
    Created(Value),
    Replaced(Value),
    Unchanged(Value),
}

async fn store_doc(docs: Arc<Docs>, id: Option<String>, body: Bytes) -> Result<Stored, Fail> {
    let kind = docs.kind;
    let map = parse_body(kind, &body).map_err(|m| Fail::new(StatusCode::BAD_REQUEST, m))?;
    if let Some(id) = &id {
        if !valid_id(id) {
            return Err(bad_id(kind, id));
        }
    }
    let mut guard = index_guard(&docs).await?;
    let index = guard.get_or_insert_with(HashMap::new);
    let name = map
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let key = name_key(&name);
    if let Some((other, _)) = index
        .iter()
        .find(|(other, e)| Some(*other) != id.as_ref() && name_key(&e.name) == key)
    {
        return Err(Fail(
            StatusCode::CONFLICT,
            format!(
                "a {} named `{name}` exists (id `{other}`); save to that id to replace it, or \
                 choose another name",
                kind.noun
            ),
            Some(json!({ "id": other })),
        ));
    }
    let exists = id.as_ref().is_some_and(|id| index.contains_key(id));
    if !exists && index.len() >= DOCS_MAX {
        return Err(Fail::new(
            StatusCode::INSUFFICIENT_STORAGE,
            format!(
                "{} {}s are stored; at most {DOCS_MAX}",
                index.len(),
                kind.noun
            ),
        ));
    }
    let id = match id {
        Some(id) => id,
        None => loop {
            let n = docs.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let id = format!("{}-{}-{n}", kind.id_prefix, now_ms());
            if !index.contains_key(&id) {
                break id;
            }
        },
    };
    let dir = docs.dir.clone();
    let write_id = id.clone();
    let (owner, broker) = (
        map.get("owner").and_then(Value::as_str).map(str::to_owned),
        map.get("broker").and_then(Value::as_str).map(str::to_owned),
    );
    let (stored, updated_ms) = blocking(move || {
        let id = write_id;
        if exists {
            if let Some(mut old) = read_doc(kind, &dir, &id)? {
                let updated = old.remove("updated_ms");
                old.remove("id");
                if old == map {
                    old.insert("id".into(), json!(id));
                    if let Some(u) = updated.clone() {
                        old.insert("updated_ms".into(), u);
                    }
                    let ms = updated.and_then(|u| u.as_i64()).unwrap_or(0);
                    return Ok((Stored::Unchanged(Value::Object(old)), ms));
                }
            }
        }
        let ms = now_ms();
        let mut doc = Map::new();
        doc.insert("id".into(), json!(id));
        doc.insert("updated_ms".into(), json!(ms));
        doc.extend(map);
        let value = Value::Object(doc);
        let bytes = serde_json::to_vec_pretty(&value)
            .map_err(|e| io_error(&format!("encoding {} {id}", kind.noun), e))?;
        write_atomic(&dir.join(format!("{id}.json")), &bytes)
            .map_err(|e| io_error(&format!("writing {} {id}", kind.noun), e))?;
        Ok((
            if exists {
                Stored::Replaced(value)
            } else {
                Stored::Created(value)
            },
            ms,
        ))
    })
    .await?;
    index.insert(
        id,
        Entry {
            name,
            updated_ms,
            owner,
            broker,
        },
    );
    Ok(stored)
}

fn stored_response(result: Result<Stored, Fail>) -> Response {
    match result {
        Ok(Stored::Created(v)) => json_response(StatusCode::CREATED, v),
        Ok(Stored::Replaced(v)) => json_response(StatusCode::OK, v),
        Ok(Stored::Unchanged(v)) => {
            let mut r = json_response(StatusCode::OK, v);
            r.headers_mut()
                .insert("x-strata-unchanged", HeaderValue::from_static("true"));
            r
        }
        Err(f) => f.response(),
    }
}

async fn create(State(docs): State<Arc<Docs>>, body: Bytes) -> Response {
    stored_response(store_doc(docs, None, body).await)
}

async fn replace(State(docs): State<Arc<Docs>>, Path(id): Path<String>, body: Bytes) -> Response {
    stored_response(store_doc(docs, Some(id), body).await)
}

async fn read(State(docs): State<Arc<Docs>>, Path(id): Path<String>) -> Response {
    let (kind, dir) = (docs.kind, docs.dir.clone());
    let found = blocking(move || read_doc(kind, &dir, &id).map(|d| (id, d))).await;
    match found {
        Ok((_, Some(doc))) => json_response(StatusCode::OK, Value::Object(doc)),
        Ok((id, None)) => {
            Fail::new(StatusCode::NOT_FOUND, format!("no {} `{id}`", kind.noun)).response()
        }
        Err(f) => f.response(),
    }
}

async fn remove(State(docs): State<Arc<Docs>>, Path(id): Path<String>) -> Response {
    let kind = docs.kind;
    if !valid_id(&id) {
        return bad_id(kind, &id).response();
    }
    let mut guard = match index_guard(&docs).await {
        Ok(g) => g,
        Err(f) => return f.response(),
    };
    let dir = docs.dir.clone();
    let removed_id = id.clone();
    let result = blocking(
        move || match fs::remove_file(dir.join(format!("{removed_id}.json"))) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error(&format!("deleting {} {removed_id}", kind.noun), e)),
        },
    )
    .await;
    match result {
        Ok(true) => {
            if let Some(index) = guard.as_mut() {
                index.remove(&id);
            }
            json_response(StatusCode::OK, json!({ "deleted": id }))
        }
        Ok(false) => {
            Fail::new(StatusCode::NOT_FOUND, format!("no {} `{id}`", kind.noun)).response()
        }
        Err(f) => f.response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn panel(extra: &str) -> String {
        format!(r#"{{"id":"a","type":"heatmap","x":0,"y":0,"w":6,"h":2{extra}}}"#)
    }

    #[test]
    fn worksheet_bodies_are_checked_and_named() {
        assert!(parse_body(&WORKSHEETS, br#"{"name":"a","graphs":[]}"#).is_ok());
        let e = parse_body(&WORKSHEETS, br#"{"graphs":[]}"#).unwrap_err();
        assert!(e.contains("`name`"), "{e}");
        let e = parse_body(&WORKSHEETS, br#"{"name":"a","graphs":{}}"#).unwrap_err();
        assert!(e.contains("`graphs`"), "{e}");
        let e = parse_body(&WORKSHEETS, b"[1]").unwrap_err();
        assert!(e.contains("object"), "{e}");
        let e = parse_body(&WORKSHEETS, b"{").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let big = format!(
            r#"{{"name":"a","graphs":[],"x":"{}"}}"#,
            "y".repeat(DOC_BYTES_MAX)
        );
        assert!(parse_body(&WORKSHEETS, big.as_bytes())
            .unwrap_err()
            .contains("at most"));
        let kept = parse_body(
            &WORKSHEETS,
            br#"{"name":" a ","graphs":[],"id":"zz","updated_ms":1}"#,
        )
        .unwrap();
        assert!(!kept.contains_key("id") && !kept.contains_key("updated_ms"));
        assert_eq!(kept["name"], "a");
        assert_eq!(kept["version"], 1);
        let e = parse_body(&WORKSHEETS, br#"{"name":"a","graphs":[],"version":2}"#).unwrap_err();
        assert!(e.contains("`version`"), "{e}");
    }

    #[test]
    fn dashboard_panels_are_checked_and_named() {
        let ok = format!(r#"{{"name":"d","panels":[{}]}}"#, panel(""));
        assert!(parse_body(&DASHBOARDS, ok.as_bytes()).is_ok());
        let cases = [
            (r#"{"name":"d"}"#.to_string(), "`panels` must be an array"),
            (
                format!(
                    r#"{{"name":"d","panels":[{}]}}"#,
                    panel(r#","w":13"#).replace(r#""w":6,"#, "")
                ),
                "`panels[0].w`",
            ),
            (
                format!(
                    r#"{{"name":"d","panels":[{}]}}"#,
                    panel("").replace("heatmap", "pie")
                ),
                "`panels[0].type`",
            ),
            (
                format!(
                    r#"{{"name":"d","panels":[{}]}}"#,
                    panel("").replace(r#""x":0"#, r#""x":8"#)
                ),
                "x + w is 14",
            ),
            (
                format!(r#"{{"name":"d","panels":[{},{}]}}"#, panel(""), panel("")),
                "`panels[1].id`",
            ),
            (
                format!(
                    r#"{{"name":"d","panels":[{}]}}"#,
                    panel(r#","color":"red""#)
                ),
                "`panels[0].color`",
            ),
            (
                format!(r#"{{"name":"d","panels":[{}]}}"#, panel(r#","tags":[1]"#)),
                "`panels[0].tags`",
            ),
            (
                format!(
                    r#"{{"name":"d","panels":[{}]}}"#,
                    panel(r#","h":0"#).replace(r#""h":2,"#, "")
                ),
                "`panels[0].h`",
            ),
        ];
        for (body, want) in cases {
            let e = parse_body(&DASHBOARDS, body.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
        }
        let many: Vec<String> = (0..=PANELS_MAX)
            .map(|i| panel("").replace(r#""id":"a""#, &format!(r#""id":"p{i}""#)))
            .collect();
        let body = format!(r#"{{"name":"d","panels":[{}]}}"#, many.join(","));
        assert!(parse_body(&DASHBOARDS, body.as_bytes())
            .unwrap_err()
            .contains("at most 100 panels"));
    }

    #[test]
    fn ids_are_restricted_to_safe_file_names() {
        assert!(valid_id("ws-1700000000000-3"));
        assert!(valid_id("web-latency"));
        assert!(!valid_id("../etc/passwd"));
        assert!(!valid_id("a/b"));
        assert!(!valid_id("a.b"));
        assert!(!valid_id(""));
        assert!(!valid_id(&"a".repeat(ID_BYTES_MAX + 1)));
    }

    #[test]
    fn names_compare_trimmed_and_case_insensitive() {
        assert_eq!(name_key(" Latency Review "), name_key("latency review"));
        assert_ne!(name_key("latency review"), name_key("latency review 2"));
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sheets/ws-1.json");
        write_atomic(&path, b"{\"v\":1}").unwrap();
        write_atomic(&path, b"{\"v\":2}").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"{\"v\":2}");
        let names: Vec<_> = fs::read_dir(dir.path().join("sheets")).unwrap().collect();
        assert_eq!(names.len(), 1);
        assert_eq!(
            ids(&dir.path().join("sheets")).unwrap(),
            vec!["ws-1".to_string()]
        );
        assert!(ids(&dir.path().join("missing")).unwrap().is_empty());
    }
}
