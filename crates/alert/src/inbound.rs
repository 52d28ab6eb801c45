//! Requests into the notifier from outside:
//!
//! - `POST /api/strata/v1/receivers/{name}/test` — one test notification to that receiver,
//!   sent once (no retries, no fallback); the answer says `delivered` or the receiver's error.
//! - `POST /api/strata/v1/receivers/{name}/pagerduty` — PagerDuty v3 webhooks for a
//!   `pagerduty` receiver: `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the body>` checked
//!   with its `webhook_secret`; `incident.acknowledged` of a Strata incident acknowledges the
//!   alert episode named by the incident key. Other event types are answered 200 and ignored.
//! - `POST /api/strata/v1/receivers/{name}/slack` — Slack interactivity for a `slack`
//!   receiver: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">` checked
//!   with its `signing_secret`, `X-Slack-Request-Timestamp` within 5 minutes of now; the
//!   "Acknowledge" button acknowledges the alert episode in its value.
//!
//! Both acknowledge through [`acknowledge`], the ack API's own path. A missing or wrong
//! signature is answered 401 with a JSON error, before the body is read for anything else.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::engine::Engine;
use crate::notify::config::Target;
use crate::notify::contacts::{parse_episode_key, Contact, Secret};
use crate::state::State as AlertState;

/// How far a Slack request's timestamp may be from now (Slack's own advice: 5 minutes).
pub const SLACK_SKEW_S_MAX: i64 = 300;
/// Signatures one PagerDuty header may carry (one per secret during a rotation).
const SIGNATURES_MAX: usize = 8;

pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/api/strata/v1/receivers/{name}/test", post(test))
        .route("/api/strata/v1/receivers/{name}/pagerduty", post(pagerduty))
        .route("/api/strata/v1/receivers/{name}/slack", post(slack))
        .with_state(engine)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

async fn test(State(engine): State<Arc<Engine>>, Path(name): Path<String>) -> Response {
    let Some(n) = engine.notifier().cloned() else {
        return error(
            StatusCode::NOT_FOUND,
            "notifications are not configured (alerts.notify)",
        );
    };
    if n.config().receiver(&name).is_none() {
        return error(StatusCode::NOT_FOUND, format!("no receiver '{name}'"));
    }
    let who = name.clone();
    match tokio::task::spawn_blocking(move || n.test_receiver(&who)).await {
        Ok(Ok(())) => (
            StatusCode::OK,
            axum::Json(json!({ "receiver": name, "delivered": true })),
        )
            .into_response(),
        // The receiver failed, not this request: 502 with its words.
        Ok(Err(why)) => (
            StatusCode::BAD_GATEWAY,
            axum::Json(json!({
                "receiver": name,
                "delivered": false,
                "error": format!("receiver '{name}' did not accept the test notification: {why}"),
            })),
        )
            .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The contact of receiver `name`, when it is of the kind `kind`.
fn contact(engine: &Engine, name: &str, kind: &str) -> Result<Contact, Box<Response>> {
    let n = engine.notifier().ok_or_else(|| {
        Box::new(error(
            StatusCode::NOT_FOUND,
            "notifications are not configured (alerts.notify)",
        ))
    })?;
    let r = n.config().receiver(name).ok_or_else(|| {
        Box::new(error(
            StatusCode::NOT_FOUND,
            format!("no receiver '{name}'"),
        ))
    })?;
    match &r.target {
        Target::Contact(c) if c.kind() == kind => Ok((**c).clone()),
        _ => Err(Box::new(error(
            StatusCode::NOT_FOUND,
            format!("receiver '{name}' is not a {kind} receiver"),
        ))),
    }
}

fn unhex(t: &str) -> Option<Vec<u8>> {
    if !t.len().is_multiple_of(2) || t.len() > 256 {
        return None;
    }
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(t.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Constant-time check of a hex HMAC-SHA256 of `parts` under `secret`.
fn signed(secret: &Secret, parts: &[&[u8]], hex_sig: &str) -> bool {
    let Some(sig) = unhex(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) else {
        return false;
    };
    for p in parts {
        mac.update(p);
    }
    mac.verify_slice(&sig).is_ok()
}

/// The one acknowledgement path (this API, PagerDuty's webhook, Slack's button): the alert
/// must be firing, and when the caller names an episode (its `startsAt`), that one. Blocking:
/// the acknowledgement is durable when this returns.
pub fn acknowledge(
    engine: &Engine,
    fp: u64,
    episode: Option<&str>,
    until_ms: Option<i64>,
    by: String,
    note: String,
) -> Result<crate::notify::Ack, (StatusCode, String)> {
    let n = engine.notifier().ok_or((
        StatusCode::NOT_FOUND,
        "notifications are not configured (alerts.notify)".to_string(),
    ))?;
    let fired_ms = {
        let core = engine.core();
        match core.instances.get(&fp) {
            None => return Err((StatusCode::NOT_FOUND, format!("no alert {fp:016x}"))),
            Some(i) if !matches!(i.state, AlertState::Firing | AlertState::Recovering) => {
                return Err((
                    StatusCode::CONFLICT,
                    format!("alert {fp:016x} is {}, not firing", i.state.name()),
                ))
            }
            Some(i) => i.fired_ms,
        }
    };
    if let Some(want) = episode {
        if crate::util::rfc3339(fired_ms) != want {
            return Err((
                StatusCode::CONFLICT,
                format!("alert {fp:016x}: the episode that started at {want} is over"),
            ));
        }
    }
    let a = crate::notify::Ack {
        fp,
        fired_ms,
        at_ms: crate::util::wall_ms(),
        until_ms,
        by,
        note,
    };
    n.ack(a.clone())
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e))?;
    Ok(a)
}

pub fn ack_json(a: &crate::notify::Ack) -> Value {
    json!({
        "fp": format!("{:016x}", a.fp),
        "fired": a.fired_ms,
        "at": a.at_ms,
        "until": a.until_ms,
        "by": a.by,
        "note": a.note,
    })
}

fn unauthorized(why: &str) -> Response {
    error(StatusCode::UNAUTHORIZED, why)
}

async fn ack(engine: Arc<Engine>, key: String, by: String, note: String) -> Response {
    let Some((fp, starts)) = parse_episode_key(&key).map(|(f, s)| (f, s.to_string())) else {
        return (
            StatusCode::OK,
            axum::Json(json!({ "ignored": "not a Strata alert" })),
        )
            .into_response();
    };
    let done = tokio::task::spawn_blocking(move || {
        acknowledge(&engine, fp, Some(&starts), None, by, note)
    })
    .await;
    match done {
        Ok(Ok(a)) => (StatusCode::OK, axum::Json(ack_json(&a))).into_response(),
        Ok(Err((status, why))) => error(status, why),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn pagerduty(
    State(engine): State<Arc<Engine>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let secret = match contact(&engine, &name, "pagerduty") {
        Ok(Contact::PagerDuty(p)) => p.webhook_secret,
        Ok(_) => None,
        Err(r) => return *r,
    };
    let Some(secret) = secret else {
        return error(
            StatusCode::NOT_FOUND,
            format!("receiver '{name}' has no pagerduty webhook_secret to check webhooks with"),
        );
    };
    let header = headers
        .get("x-pagerduty-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ok = header
        .split(',')
        .take(SIGNATURES_MAX)
        .filter_map(|s| s.trim().strip_prefix("v1="))
        .any(|sig| signed(&secret, &[&body], sig));
    if !ok {
        return unauthorized(
            "X-PagerDuty-Signature is missing or does not match the receiver's webhook_secret",
        );
    }
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("webhook body: {e}")),
    };
    let event = &v["event"];
    let kind = event["event_type"].as_str().unwrap_or("");
    if kind != "incident.acknowledged" {
        return (StatusCode::OK, axum::Json(json!({ "ignored": kind }))).into_response();
    }
    let incident = &event["data"];
    let key = incident["incident_key"].as_str().unwrap_or("").to_string();
    let by = event["agent"]["summary"]
        .as_str()
        .unwrap_or("PagerDuty")
        .to_string();
    let note = format!(
        "acknowledged in PagerDuty ({})",
        incident["html_url"]
            .as_str()
            .or(incident["id"].as_str())
            .unwrap_or("incident")
    );
    ack(engine, key, by, note).await
}

async fn slack(
    State(engine): State<Arc<Engine>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let secret = match contact(&engine, &name, "slack") {
        Ok(Contact::Slack(s)) => s.signing_secret,
        Ok(_) => None,
        Err(r) => return *r,
    };
    let Some(secret) = secret else {
        return error(
            StatusCode::NOT_FOUND,
            format!("receiver '{name}' has no slack signing_secret to check callbacks with"),
        );
    };
    let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let ts = h("x-slack-request-timestamp");
    let Ok(ts_s) = ts.parse::<i64>() else {
        return unauthorized("X-Slack-Request-Timestamp is missing or not a number");
    };
    let now_s = crate::util::wall_ms() / 1000;
    if (now_s - ts_s).abs() > SLACK_SKEW_S_MAX {
        return unauthorized("X-Slack-Request-Timestamp is more than 5 minutes from now");
    }
    let ok = h("x-slack-signature")
        .strip_prefix("v0=")
        .is_some_and(|sig| signed(&secret, &[b"v0:", ts.as_bytes(), b":", &body], sig));
    if !ok {
        return unauthorized(
            "X-Slack-Signature is missing or does not match the receiver's signing_secret",
        );
    }
    let payload = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_owned());
    let Some(v) = payload.and_then(|p| serde_json::from_str::<Value>(&p).ok()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "callback body: expected a form with a JSON payload field",
        );
    };
    let action = v["actions"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["action_id"] == "strata_ack"));
    let Some(action) = action else {
        return (
            StatusCode::OK,
            axum::Json(json!({ "ignored": "no Acknowledge action" })),
        )
            .into_response();
    };
    let key = action["value"].as_str().unwrap_or("").to_string();
    let user = &v["user"];
    let by = ["username", "name", "id"]
        .iter()
        .find_map(|k| user[*k].as_str())
        .unwrap_or("Slack")
        .to_string();
    ack(engine, key, by, "acknowledged in Slack".to_string()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_signatures_are_checked() {
        let s = Secret("k".into());
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(b"body");
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(signed(&s, &[b"bo", b"dy"], &hex));
        assert!(!signed(&s, &[b"body!"], &hex));
        assert!(!signed(&s, &[b"body"], "zz"));
    }
}
