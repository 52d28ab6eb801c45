//! Worksheets: named sets of graphs saved by the web UI, one JSON file each in
//! `<data_dir>/worksheets/<id>.json`.
//!
//! `GET /api/strata/v1/worksheets` lists `[{id, name, updated_ms}]`; `POST` creates (201 with
//! the stored worksheet); `GET|PUT|DELETE /api/strata/v1/worksheets/<id>` reads, replaces and
//! deletes one. A worksheet is a JSON object with a `name` (1..=`NAME_CHARS_MAX` characters)
//! and a `graphs` array; other fields (range, objective, …) are kept as given. Writes go to a
//! temporary file that is synced and renamed over the old one, so a crash leaves the old or the
//! new worksheet, never a torn one. Sizes and counts are bounded.

use std::fs;
use std::io::Write as _;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::sync::Mutex;

use super::reply::{error, json_response};
use super::{now_ms, Shared};

/// Largest worksheet body, in bytes.
pub const WORKSHEET_BYTES_MAX: usize = 256 * 1024;
/// Most worksheets kept in one data directory.
pub const WORKSHEETS_MAX: usize = 1000;
/// Longest worksheet name, in characters.
pub const NAME_CHARS_MAX: usize = 200;
/// Most graphs in one worksheet.
pub const GRAPHS_MAX: usize = 100;
/// Longest id, in bytes (ids are made here: `ws-<ms>-<n>`).
const ID_BYTES_MAX: usize = 64;

struct Sheets {
    dir: PathBuf,
    /// Serialises writers so the count check and the id choice cannot race.
    write: Mutex<u64>,
}

pub fn router(app: Shared) -> Router {
    let sheets = Arc::new(Sheets {
        dir: app.config.store.data_dir.join("worksheets"),
        write: Mutex::new(0),
    });
    Router::new()
        .route("/api/strata/v1/worksheets", get(list).post(create))
        .route(
            "/api/strata/v1/worksheets/{id}",
            get(read).put(replace).delete(remove),
        )
        .with_state(sheets)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks a body and returns the object to store (without `id` / `updated_ms`, set by us).
fn parse_body(body: &[u8]) -> Result<Map<String, Value>, String> {
    if body.len() > WORKSHEET_BYTES_MAX {
        return Err(format!(
            "worksheet is {} bytes; at most {WORKSHEET_BYTES_MAX} are kept",
            body.len()
        ));
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("worksheet body is not JSON: {e}"))?;
    let Value::Object(mut map) = value else {
        return Err("worksheet body must be a JSON object".into());
    };
    let name = map.get("name").and_then(Value::as_str).unwrap_or("");
    let chars = name.trim().chars().count();
    if chars == 0 || chars > NAME_CHARS_MAX {
        return Err(format!(
            "`name` must be a string of 1 to {NAME_CHARS_MAX} characters"
        ));
    }
    match map.get("graphs") {
        Some(Value::Array(g)) if g.len() <= GRAPHS_MAX => {}
        Some(Value::Array(_)) => return Err(format!("`graphs`: at most {GRAPHS_MAX} graphs")),
        _ => return Err("`graphs` must be an array".into()),
    }
    map.remove("id");
    map.remove("updated_ms");
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
            // A directory filled from outside is listed only up to the bound.
            if out.len() >= WORKSHEETS_MAX * 2 {
                break;
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A failed request: status and message (small, unlike a `Response`, so `Result`s stay cheap).
struct Fail(StatusCode, String);

impl Fail {
    fn response(self) -> Response {
        error(self.0, self.1)
    }
}

fn io_error(what: &str, e: std::io::Error) -> Fail {
    Fail(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))
}

fn read_sheet(dir: &FsPath, id: &str) -> Result<Value, Fail> {
    if !valid_id(id) {
        return Err(Fail(
            StatusCode::BAD_REQUEST,
            format!("`{id}` is not a worksheet id"),
        ));
    }
    let path = dir.join(format!("{id}.json"));
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| io_error(&format!("worksheet {id}"), std::io::Error::other(e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(Fail(StatusCode::NOT_FOUND, format!("no worksheet `{id}`")))
        }
        Err(e) => Err(io_error(&format!("reading worksheet {id}"), e)),
    }
}

async fn blocking(f: impl FnOnce() -> Response + Send + 'static) -> Response {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn list(State(sheets): State<Arc<Sheets>>) -> Response {
    blocking(move || {
        let ids = match ids(&sheets.dir) {
            Ok(ids) => ids,
            Err(e) => return io_error("listing worksheets", e).response(),
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids.iter().take(WORKSHEETS_MAX) {
            if let Ok(sheet) = read_sheet(&sheets.dir, id) {
                out.push(json!({
                    "id": id,
                    "name": sheet.get("name").cloned().unwrap_or(Value::Null),
                    "updated_ms": sheet.get("updated_ms").cloned().unwrap_or(Value::Null),
                }));
            }
        }
        json_response(StatusCode::OK, Value::Array(out))
    })
    .await
}

async fn store_sheet(
    sheets: Arc<Sheets>,
    id: Option<String>,
    body: Bytes,
) -> Result<(StatusCode, Value), Fail> {
    let map = parse_body(&body).map_err(|m| Fail(StatusCode::BAD_REQUEST, m))?;
    let mut counter = sheets.write.lock().await;
    *counter += 1;
    let n = *counter;
    let dir = sheets.dir.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let (id, status) = match id {
            Some(id) => {
                read_sheet(&dir, &id)?;
                (id, StatusCode::OK)
            }
            None => {
                let count = ids(&dir)
                    .map_err(|e| io_error("listing worksheets", e))?
                    .len();
                if count >= WORKSHEETS_MAX {
                    return Err(Fail(
                        StatusCode::INSUFFICIENT_STORAGE,
                        format!("{count} worksheets are stored; at most {WORKSHEETS_MAX}"),
                    ));
                }
                (format!("ws-{}-{n}", now_ms()), StatusCode::CREATED)
            }
        };
        let mut map = map;
        map.insert("id".into(), json!(id));
        map.insert("updated_ms".into(), json!(now_ms()));
        let value = Value::Object(map);
        let bytes = serde_json::to_vec_pretty(&value)
            .map_err(|e| io_error("encoding worksheet", std::io::Error::other(e)))?;
        write_atomic(&dir.join(format!("{id}.json")), &bytes)
            .map_err(|e| io_error(&format!("writing worksheet {id}"), e))?;
        Ok((status, value))
    })
    .await;
    drop(counter);
    joined.unwrap_or_else(|e| Err(Fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())))
}

async fn create(State(sheets): State<Arc<Sheets>>, body: Bytes) -> Response {
    match store_sheet(sheets, None, body).await {
        Ok((status, value)) => json_response(status, value),
        Err(f) => f.response(),
    }
}

async fn replace(
    State(sheets): State<Arc<Sheets>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    match store_sheet(sheets, Some(id), body).await {
        Ok((status, value)) => json_response(status, value),
        Err(f) => f.response(),
    }
}

async fn read(State(sheets): State<Arc<Sheets>>, Path(id): Path<String>) -> Response {
    blocking(move || match read_sheet(&sheets.dir, &id) {
        Ok(v) => json_response(StatusCode::OK, v),
        Err(f) => f.response(),
    })
    .await
}

async fn remove(State(sheets): State<Arc<Sheets>>, Path(id): Path<String>) -> Response {
    let guard = sheets.write.lock().await;
    let dir = sheets.dir.clone();
    let response = blocking(move || {
        if let Err(f) = read_sheet(&dir, &id) {
            return f.response();
        }
        match fs::remove_file(dir.join(format!("{id}.json"))) {
            Ok(()) => json_response(StatusCode::OK, json!({ "deleted": id })),
            Err(e) => io_error(&format!("deleting worksheet {id}"), e).response(),
        }
    })
    .await;
    drop(guard);
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn bodies_are_checked_and_named() {
        assert!(parse_body(br#"{"name":"a","graphs":[]}"#).is_ok());
        let e = parse_body(br#"{"graphs":[]}"#).unwrap_err();
        assert!(e.contains("`name`"), "{e}");
        let e = parse_body(br#"{"name":"a","graphs":{}}"#).unwrap_err();
        assert!(e.contains("`graphs`"), "{e}");
        let e = parse_body(b"[1]").unwrap_err();
        assert!(e.contains("object"), "{e}");
        let e = parse_body(b"{").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let big = format!(
            r#"{{"name":"a","graphs":[],"x":"{}"}}"#,
            "y".repeat(WORKSHEET_BYTES_MAX)
        );
        assert!(parse_body(big.as_bytes()).unwrap_err().contains("at most"));
        let id_kept = parse_body(br#"{"name":"a","graphs":[],"id":"zz","updated_ms":1}"#).unwrap();
        assert!(!id_kept.contains_key("id") && !id_kept.contains_key("updated_ms"));
    }

    #[test]
    fn ids_are_restricted_to_safe_file_names() {
        assert!(valid_id("ws-1700000000000-3"));
        assert!(!valid_id("../etc/passwd"));
        assert!(!valid_id("a/b"));
        assert!(!valid_id(""));
        assert!(!valid_id(&"a".repeat(ID_BYTES_MAX + 1)));
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
