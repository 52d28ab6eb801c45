//! JSON replies shared by the handlers: a leaf module, so the modules that `http` routes to
//! (the read API, the UI and its documents) can answer without depending on `http` itself.
//! `http` keeps the same two functions for the ingest handlers beside it, which are being moved
//! out of this crate; once they are, `http` uses these too.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// `body` as JSON with a status.
pub fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// `{"error": message}` with a status.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, json!({ "error": message.into() }))
}
