//! Exactly-once through HTTP: a client that names itself (`Strata-Source`, `Strata-Epoch`,
//! `Strata-Sequence`) and sends every request twice — once more at the same time as the first —
//! and all of them once again after the server was killed with SIGKILL leaves the store exactly
//! as a client that sent each request once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use serde_json::Value;
use serve_common::{client, fetch, get_json, now_s, Server};

const REQUESTS: u64 = 40;

/// Request `i`: an httptrap histogram body or an Influx counter line, at its own second.
fn request(i: u64, ts_s: i64) -> (String, &'static str, String) {
    let ts = ts_s + i as i64;
    if i.is_multiple_of(2) {
        let body = format!(
            r#"{{"login|ST[app:web]": {{"_type": "h", "_value": ["H[1.2e-01]={}", "H[1.6e+00]={}"], "_ts": {}}}}}"#,
            i + 1,
            i % 3,
            ts * 1000
        );
        ("/module/httptrap/web/any".to_owned(), "PUT", body)
    } else {
        let body = format!("requests,app=web total={i} {}", ts * 1_000_000_000);
        ("/api/v2/write?precision=ns".to_owned(), "POST", body)
    }
}

/// Sends request `i` with the sender headers (or none), returns (status, duplicate header).
fn send(server: &Server, i: u64, ts_s: i64, named: bool) -> (u16, bool) {
    let (path, method, body) = request(i, ts_s);
    let url = server.url(&path);
    let mut r = match method {
        "PUT" => client().put(url),
        _ => client().post(url),
    }
    .body(body);
    if named {
        r = r
            .header("Strata-Source", "e2e-client")
            .header("Strata-Epoch", "1")
            .header("Strata-Sequence", i.to_string());
    }
    let response = r.send().unwrap();
    let duplicate = response
        .headers()
        .get("strata-duplicate")
        .is_some_and(|v| v == "true");
    (response.status().as_u16(), duplicate)
}

/// What the store holds: the histogram and numeric series, one-minute slices around `ts_s`.
fn contents(server: &Server, ts_s: i64) -> (Value, Value) {
    let h = fetch(server, "and(__name:login)", ts_s, "&kind=histogram");
    let n = fetch(server, "and(__name:requests_total)", ts_s, "");
    (h["series"].clone(), n["series"].clone())
}

#[test]
fn resent_requests_leave_the_store_as_one_delivery_would() {
    let ts_s = now_s() - 600;
    let (resent_dir, once_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let once = Server::start(once_dir.path(), &[]);
    for i in 0..REQUESTS {
        assert_eq!(send(&once, i, ts_s, false).0 / 100, 2);
    }

    let server = Server::start(resent_dir.path(), &[]);
    for i in 0..REQUESTS {
        // The first delivery and a resend racing it: exactly one is applied.
        let results: Vec<(u16, bool)> = std::thread::scope(|s| {
            let a = s.spawn(|| send(&server, i, ts_s, true));
            let b = s.spawn(|| send(&server, i, ts_s, true));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        assert!(
            results.iter().all(|(status, _)| status / 100 == 2),
            "{results:?}"
        );
        let duplicates = results.iter().filter(|(_, d)| *d).count();
        assert_eq!(duplicates, 1, "request {i}: {results:?}");
    }
    // Killed with SIGKILL, restarted on the same data: every resend is a duplicate.
    drop(server);
    let server = Server::start(resent_dir.path(), &[]);
    for i in (0..REQUESTS).rev() {
        assert_eq!(
            send(&server, i, ts_s, true),
            (if i % 2 == 0 { 200 } else { 204 }, true)
        );
    }
    assert_eq!(contents(&server, ts_s), contents(&once, ts_s));
    let (histograms, numerics) = contents(&server, ts_s);
    assert_eq!(histograms.as_array().unwrap().len(), 1, "{histograms}");
    assert_eq!(numerics.as_array().unwrap().len(), 1, "{numerics}");

    // Malformed or partial sender headers are refused before anything is written.
    let r = client()
        .post(server.url("/api/v2/write"))
        .header("Strata-Source", "e2e-client")
        .body("requests,app=web total=1")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let error: Value = r.json().unwrap();
    assert!(error.to_string().contains("strata-epoch"), "{error}");
    // A stale epoch is refused with 409 and applies nothing.
    for (epoch, status) in [("2", 204), ("1", 409)] {
        let r = client()
            .post(server.url("/api/v2/write"))
            .header("Strata-Source", "e2e-client")
            .header("Strata-Epoch", epoch)
            .header("Strata-Sequence", "0")
            .body(format!("other,app=web total=1 {}", ts_s * 1_000_000_000))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "epoch {epoch}");
    }
    let health = get_json(&server.url("/health"));
    assert!(health.is_object() || health.is_string(), "{health}");
}
