//! The one error type of the write endpoints and each protocol's response shape: a failure
//! (a refused request or body, a store that failed) is a [`ServeError`] — a status and a
//! message written for the user, never Rust debug text — and turns into the shape its protocol
//! answers with ([`Shape`]); what a body became ([`Outcome`]) turns into each protocol's
//! success or partial-success answer.

use std::fmt;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use store::StoreError;

/// A JSON response with a status.
pub fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// `{"error": message}` with a status: a [`ServeError`] in the plain shape (the read API, the
/// request frame).
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    ServeError::new(status, message).response(Shape::Json)
}

/// The content type of OTLP protobuf bodies (and responses to them).
pub const PROTOBUF: &str = "application/x-protobuf";

/// Why a request did not get (all of) its data stored: the status and what the user reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeError {
    pub status: StatusCode,
    pub message: String,
    /// A limit that refused part of the request, and the metric it refused first: named in
    /// the JSON body as `limit` and `metric`.
    pub limited: Option<(String, String)>,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServeError {}

impl ServeError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ServeError {
        ServeError {
            status,
            message: message.into(),
            limited: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ServeError {
        ServeError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn too_large(message: impl Into<String>) -> ServeError {
        ServeError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    /// The server is stopping: the client may send again (to this server once it is back).
    pub fn shutting_down() -> ServeError {
        ServeError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down")
    }

    /// A failed store write: the data's own fault (400, not retried), the disk's or the
    /// journal's (503: the client retries), or the store's (500).
    pub fn from_store(e: &StoreError) -> ServeError {
        use store::IndexError;
        let status = match e {
            StoreError::KindMismatchInBatch { .. }
            | StoreError::TextTooLong { .. }
            | StoreError::InvalidBins { .. }
            | StoreError::BatchTooLarge
            | StoreError::Index(IndexError::KindMismatch { .. })
            | StoreError::Index(IndexError::Key(_)) => StatusCode::BAD_REQUEST,
            StoreError::Journal(_)
            | StoreError::Io(_)
            | StoreError::TooManySources { .. }
            | StoreError::SameBatchBusy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            // A newer incarnation of the sender exists: this one must not retry.
            StoreError::StaleEpoch { .. } => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ServeError::new(status, e.to_string())
    }

    /// The error in `shape`.
    pub fn response(&self, shape: Shape) -> Response {
        let (status, message) = (self.status, self.message.as_str());
        let with_limit = |mut body: serde_json::Value| {
            if let Some((limit, metric)) = &self.limited {
                body["limit"] = json!(limit);
                body["metric"] = json!(metric);
            }
            json_response(status, body)
        };
        match shape {
            Shape::Json => with_limit(json!({ "error": message })),
            Shape::Httptrap => with_limit(json!({"stats": 0, "filtered": 0, "error": message})),
            Shape::Influx => {
                let code = match status {
                    StatusCode::PAYLOAD_TOO_LARGE => "request too large",
                    StatusCode::TOO_MANY_REQUESTS => "too many requests",
                    StatusCode::SERVICE_UNAVAILABLE => "unavailable",
                    StatusCode::INTERNAL_SERVER_ERROR => "internal error",
                    _ => "invalid",
                };
                with_limit(json!({ "code": code, "message": message }))
            }
            Shape::Otlp { json } => {
                let code = match status {
                    StatusCode::SERVICE_UNAVAILABLE => RPC_UNAVAILABLE,
                    StatusCode::INTERNAL_SERVER_ERROR => RPC_INTERNAL,
                    _ => RPC_INVALID_ARGUMENT,
                };
                otlp_reply(
                    json,
                    status,
                    json!({ "code": code, "message": message }),
                    rpc_status_protobuf(code, message),
                )
            }
        }
    }
}

/// How a protocol answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `{"error": message}` (remote write, the read API, everything else).
    Json,
    /// `{"stats", "filtered", "error"}`.
    Httptrap,
    /// `{"code", "message"}`, as InfluxDB answers.
    Influx,
    /// A `google.rpc.Status`, as protobuf or JSON.
    Otlp { json: bool },
}

/// What a written body became, as its response reports it.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub accepted: usize,
    pub rejected_total: usize,
    /// The rejections as one line.
    pub error: Option<String>,
    /// The parse stopped: nothing of the body was stored.
    pub stopped: bool,
    /// It stopped at a size bound.
    pub too_large: bool,
    /// Its origin (sender, epoch, sequence) was applied before: acknowledged, not applied.
    pub duplicate: bool,
    /// A remote write 2.0 body: what of it was stored, by kind.
    pub written: Option<ingest::remote_write2::Written>,
    /// A cardinality limit refused new series (`cardinality.<name>`), the first one's key.
    pub limited: Option<(String, String)>,
}

impl Outcome {
    /// The status for a body with rejections: 413 when the parse stopped at a size bound, 429
    /// when a cardinality limit refused new series, 400 otherwise.
    pub fn rejected_status(&self) -> StatusCode {
        if self.too_large {
            StatusCode::PAYLOAD_TOO_LARGE
        } else if self.limited.is_some() {
            StatusCode::TOO_MANY_REQUESTS
        } else {
            StatusCode::BAD_REQUEST
        }
    }

    /// The rejections as an error (`None` when there were none).
    fn as_error(&self) -> Option<ServeError> {
        let message = self.error.clone()?;
        let mut e = ServeError::new(self.rejected_status(), message);
        e.limited = self.limited.clone();
        Some(e)
    }
}

/// The answer to a written body, marked `Strata-Duplicate: true` when its origin had been applied
/// before (the sender then knows its resend changed nothing).
pub fn acknowledged(outcome: &Outcome, mut response: Response) -> Response {
    if outcome.duplicate {
        response.headers_mut().insert(
            super::origin::DUPLICATE_HEADER,
            HeaderValue::from_static("true"),
        );
    }
    response
}

/// httptrap: `200 {"stats", "filtered"[, "error"]}`; a body whose parse stopped, or of which
/// every metric was rejected, is a 4xx with the rejections named; new series over a
/// cardinality limit a 429.
pub fn httptrap(outcome: &Outcome) -> Response {
    if outcome.stopped {
        return json_response(
            outcome.rejected_status(),
            json!({
                "stats": 0,
                "filtered": outcome.rejected_total + outcome.accepted,
                "error": outcome.error,
            }),
        );
    }
    let mut body = json!({ "stats": outcome.accepted, "filtered": outcome.rejected_total });
    if let Some(text) = &outcome.error {
        body["error"] = json!(text);
    }
    // Nothing stored and something rejected (a bad key, invalid UTF-8): not a success.
    if outcome.accepted == 0 && outcome.rejected_total > 0 && outcome.limited.is_none() {
        return json_response(StatusCode::BAD_REQUEST, body);
    }
    // New series over a cardinality limit: a 429 that still reports what was stored.
    if let Some((limit, metric)) = &outcome.limited {
        body["limit"] = json!(limit);
        body["metric"] = json!(metric);
        return json_response(StatusCode::TOO_MANY_REQUESTS, body);
    }
    json_response(StatusCode::OK, body)
}

/// Influx: 204, or the rejections as an error (`partial write: …` when some were stored).
pub fn influx(outcome: &Outcome) -> Response {
    match outcome.as_error() {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(mut e) => {
            if !outcome.stopped && outcome.accepted > 0 {
                e.message.insert_str(0, "partial write: ");
            }
            e.response(Shape::Influx)
        }
    }
}

/// Remote write: 204, or the rejections as a 4xx (Prometheus drops a batch on a 4xx other than
/// 429 and retries on 5xx: permanently bad data is a 400 naming it, the good series stored).
/// New series over a cardinality limit are a 400 too: a 429 would be resent for ever, the
/// series already stored with it.
pub fn remote_write(outcome: &Outcome) -> Response {
    match outcome.as_error() {
        None => StatusCode::NO_CONTENT.into_response(),
        Some(mut e) => {
            if e.status == StatusCode::TOO_MANY_REQUESTS {
                e.status = StatusCode::BAD_REQUEST;
            }
            e.response(Shape::Json)
        }
    }
}

/// Remote write 2.0: as 1.0, with the written counts the 2.0 spec requires on every answer.
pub fn remote_write2(outcome: &Outcome) -> Response {
    let written = outcome.written.unwrap_or_default();
    with_written(remote_write(outcome), written)
}

/// The `X-Prometheus-Remote-Write-*-Written` headers on a response (a 2.0 sender reads a 2xx
/// without them as a receiver that does not speak 2.0).
pub fn with_written(mut response: Response, written: ingest::remote_write2::Written) -> Response {
    for (name, count) in [
        (WRITTEN_SAMPLES, written.samples),
        (WRITTEN_HISTOGRAMS, written.histograms),
        (WRITTEN_EXEMPLARS, written.exemplars),
    ] {
        response
            .headers_mut()
            .insert(name, HeaderValue::from(count as u64));
    }
    response
}

pub const WRITTEN_SAMPLES: &str = "x-prometheus-remote-write-samples-written";
pub const WRITTEN_HISTOGRAMS: &str = "x-prometheus-remote-write-histograms-written";
pub const WRITTEN_EXEMPLARS: &str = "x-prometheus-remote-write-exemplars-written";

/// OTLP: `ExportMetricsServiceResponse` with `partial_success` when points were rejected; a
/// body whose parse stopped is an error `Status`.
pub fn otlp(outcome: &Outcome, json_body: bool) -> Response {
    if outcome.stopped {
        let message = outcome.error.clone().unwrap_or_default();
        return ServeError::new(outcome.rejected_status(), message)
            .response(Shape::Otlp { json: json_body });
    }
    let rejected = outcome.rejected_total as u64;
    let message = outcome.error.clone().unwrap_or_default();
    let json = if rejected == 0 {
        json!({})
    } else {
        json!({ "partialSuccess": {
            "rejectedDataPoints": rejected.to_string(),
            "errorMessage": message,
        }})
    };
    otlp_reply(
        json_body,
        StatusCode::OK,
        json,
        otlp_response_protobuf(rejected, &message),
    )
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// `ExportMetricsServiceResponse { partial_success { rejected_data_points, error_message } }`
/// (an empty message when nothing was rejected).
pub fn otlp_response_protobuf(rejected: u64, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    if rejected == 0 && message.is_empty() {
        return out;
    }
    let mut inner = Vec::new();
    if rejected > 0 {
        put_varint(&mut inner, 1 << 3);
        put_varint(&mut inner, rejected);
    }
    if !message.is_empty() {
        put_bytes_field(&mut inner, 2, message.as_bytes());
    }
    put_bytes_field(&mut out, 1, &inner);
    out
}

/// `google.rpc.Status { code, message }`, the body of an OTLP error response.
fn rpc_status_protobuf(code: u32, message: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, 1 << 3);
    put_varint(&mut out, u64::from(code));
    put_bytes_field(&mut out, 2, message.as_bytes());
    out
}

/// gRPC status codes used in OTLP error bodies.
const RPC_INVALID_ARGUMENT: u32 = 3;
const RPC_UNAVAILABLE: u32 = 14;
const RPC_INTERNAL: u32 = 13;

fn otlp_reply(
    json_body: bool,
    status: StatusCode,
    json: serde_json::Value,
    proto: Vec<u8>,
) -> Response {
    if json_body {
        json_response(status, json)
    } else {
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF))],
            proto,
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn otlp_partial_success_bytes() {
        assert!(otlp_response_protobuf(0, "").is_empty());
        // field 1 (len 6) { field 1 = 3, field 2 = "ab" }
        assert_eq!(
            otlp_response_protobuf(3, "ab"),
            vec![0x0a, 6, 0x08, 3, 0x12, 2, b'a', b'b']
        );
    }

    #[test]
    fn a_full_disk_is_a_503_that_says_so() {
        let e = ServeError::from_store(&StoreError::Journal(journal::Error::NoSpace));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.starts_with("disk full: "), "{e}");
        assert!(!e.message.contains("NoSpace"), "{e}");
    }
}
