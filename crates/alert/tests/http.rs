//! The alerting API through its router: compact alerts with filters, the ETag and the long
//! poll, history, rules CRUD (file rulesets read-only) and backtests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use serde_json::Value;
use tower::ServiceExt;

const RULES: &str = r#"
[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login")'
window = "rolling:merge(2m)"
annotations = { summary = "{{ count_above(1.5) }} people" }
[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 100"
[[ruleset.severity]]
level = 3
when = "count_above(1.5) >= 10"
"#;

async fn call(
    r: &axum::Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = r
        .clone()
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, headers, String::from_utf8(bytes.to_vec()).unwrap())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

struct Setup {
    _dir: tempfile::TempDir,
    s: Arc<store::Store>,
    e: Arc<alert::Engine>,
    clock: VClock,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("store"), MIN);
    let rules = rules_dir(dir.path(), RULES);
    let clock = VClock::default();
    let e = engine(&s, &dir.path().join("alerts"), &rules, &clock);
    for m in 0..4 {
        let slow = if m >= 2 { 80 } else { 1 };
        write_hist(&s, "login|ST[app:web]", m * MIN, &[(1.6, slow)]);
        write_hist(&s, "login|ST[app:api]", m * MIN, &[(1.6, 20)]);
        clock.set((m + 1) * MIN + 6_000);
        e.tick().unwrap();
    }
    Setup {
        _dir: dir,
        s,
        e,
        clock,
    }
}

#[tokio::test]
async fn alerts_filter_and_carry_an_etag() {
    let x = setup();
    let r = alert::http::router(x.e.clone(), 10_000);
    let (st, h, body) = call(&r, "GET", "/api/strata/v1/alerts", &[], "").await;
    assert_eq!(st, StatusCode::OK);
    let v = json(&body);
    let alerts = v["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 2);
    assert_eq!(alerts[0]["stream"], "login|ST[app:api]");
    assert_eq!(alerts[0]["severity"], 3);
    assert_eq!(alerts[1]["severity"], 1);
    assert_eq!(alerts[1]["annotations"]["summary"], "160 people");
    let etag = h["etag"].to_str().unwrap().to_string();
    let (st, _, body) = call(
        &r,
        "GET",
        "/api/strata/v1/alerts?state=firing&severity=1",
        &[],
        "",
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(json(&body)["alerts"].as_array().unwrap().len(), 1);
    let (st, _, _) = call(
        &r,
        "GET",
        "/api/strata/v1/alerts",
        &[("if-none-match", &etag)],
        "",
    )
    .await;
    assert_eq!(st, StatusCode::NOT_MODIFIED);
    let (st, _, body) = call(&r, "GET", "/api/strata/v1/alerts?state=burning", &[], "").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn a_long_poll_returns_when_its_answer_changes() {
    let x = setup();
    let r = alert::http::router(x.e.clone(), 10_000);
    let uri = "/api/strata/v1/alerts?severity=1&wait=10s";
    let (_, h, _) = call(&r, "GET", "/api/strata/v1/alerts?severity=1", &[], "").await;
    let etag = h["etag"].to_str().unwrap().to_string();
    // Nothing changes for severity 1 within 300 ms: 304 after the wait.
    let r2 = alert::http::router(x.e.clone(), 300);
    let started = std::time::Instant::now();
    let (st, _, _) = call(&r2, "GET", uri, &[("if-none-match", &etag)], "").await;
    assert_eq!(st, StatusCode::NOT_MODIFIED);
    assert!(started.elapsed() >= Duration::from_millis(300));
    // The severity-1 alert resolves while a request waits: it returns with the new answer.
    let waiting = {
        let r = r.clone();
        let etag = etag.clone();
        tokio::spawn(async move { call(&r, "GET", uri, &[("if-none-match", &etag)], "").await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (e, s, clock) = (x.e.clone(), x.s.clone(), x.clock.clone());
    tokio::task::spawn_blocking(move || {
        for m in 4..7 {
            write_hist(&s, "login|ST[app:web]", m * MIN, &[(1.6, 1)]);
            clock.set((m + 1) * MIN + 6_000);
            e.tick().unwrap();
        }
    })
    .await
    .unwrap();
    let (st, h, body) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st, StatusCode::OK);
    assert_ne!(h["etag"].to_str().unwrap(), etag);
    assert!(
        json(&body)["alerts"].as_array().unwrap().is_empty(),
        "{body}"
    );
}

#[tokio::test]
async fn history_rules_crud_and_backtest() {
    let x = setup();
    let r = alert::http::router(x.e.clone(), 1_000);
    let (st, _, body) = call(
        &r,
        "GET",
        "/api/strata/v1/alerts/history?rule=login-slow",
        &[],
        "",
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let t = json(&body)["transitions"].as_array().unwrap().clone();
    // Newest first: web's escalation at minute 4, web firing at 3, api firing at 1.
    assert_eq!(t.len(), 3, "{body}");
    assert_eq!(
        (t[0]["from"].as_str(), t[0]["severity"].as_i64()),
        (Some("firing"), Some(1))
    );
    assert_eq!(
        (t[2]["from"].as_str(), t[2]["stream"].as_str()),
        (Some("ok"), Some("login|ST[app:api]"))
    );
    let (st, _, body) = call(&r, "GET", "/api/strata/v1/rules", &[], "").await;
    assert_eq!(st, StatusCode::OK);
    let rules = json(&body)["rules"].as_array().unwrap().clone();
    assert_eq!(rules[0]["name"], "login-slow");
    assert_eq!(rules[0]["read_only"], true);
    assert_eq!(rules[0]["health"], "ok");
    let def = "expr = 'find:max(\"q\")'\n[[severity]]\nlevel = 2\nwhen = \"> 5\"\n";
    let (st, _, body) = call(&r, "PUT", "/api/strata/v1/rules/queue", &[], def).await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let (st, _, _) = call(&r, "PUT", "/api/strata/v1/rules/login-slow", &[], def).await;
    assert_eq!(st, StatusCode::CONFLICT);
    let (st, _, body) = call(&r, "PUT", "/api/strata/v1/rules/bad", &[], "expr = 'find('").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(json(&body)["error"].as_str().unwrap().contains("expr"));
    // The answer says where in the text: the one line here.
    assert_eq!(json(&body)["line"], 1, "{body}");
    let (st, _, body) = call(&r, "GET", "/api/strata/v1/rules/queue", &[], "").await;
    assert_eq!(st, StatusCode::OK);
    assert!(json(&body)["definition"]
        .as_str()
        .unwrap()
        .contains("find:max"));
    let (st, _, _) = call(&r, "DELETE", "/api/strata/v1/rules/queue", &[], "").await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, _, _) = call(&r, "DELETE", "/api/strata/v1/rules/login-slow", &[], "").await;
    assert_eq!(st, StatusCode::CONFLICT);
    // Backtest a stricter ruleset over the same four minutes.
    let strict = RULES
        .replace(">= 100", ">= 150")
        .replace("login-slow", "strict");
    let (st, _, body) = call(
        &r,
        "POST",
        "/api/strata/v1/rules/evaluate?start=0&end=240",
        &[],
        &strict,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let v = json(&body);
    let ts = v["transitions"].as_array().unwrap();
    let web: Vec<(i64, i64)> = ts
        .iter()
        .filter(|t| t["stream"] == "login|ST[app:web]")
        .map(|t| {
            (
                t["t"].as_i64().unwrap() / MIN,
                t["severity"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(web, [(3, 3), (4, 1)]);
}
