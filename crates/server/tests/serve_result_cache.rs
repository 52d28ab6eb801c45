//! The PromQL result cache through a real server, as a dashboard meets it: the same range query
//! asked again is answered from kept steps (`/metrics` counts the hit) with the same answer, a
//! write reaching back an hour shows at once in the next answer, and with the cache off
//! (`limits.query_result_cache_bytes_max = 0`) every answer is evaluated and nothing is counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use serde_json::Value;
use serve_common::{client, get_json, metrics_text, now_s, urlencode, Server};

/// Influx lines at second precision.
fn write(server: &Server, lines: &str) {
    let response = client()
        .post(server.url("/api/v2/write?precision=s"))
        .body(lines.to_string())
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
}

fn range(server: &Server, query: &str, (start, end): (i64, i64)) -> Value {
    let doc = get_json(&server.url(&format!(
        "/api/v1/query_range?query={}&start={start}&end={end}&step=60",
        urlencode(query)
    )));
    assert_eq!(doc["status"], "success", "{doc}");
    doc["data"]["result"].clone()
}

fn hits(server: &Server) -> Option<u64> {
    let text = metrics_text(server);
    let line = text
        .lines()
        .find(|l| l.starts_with("strata_query_result_cache_requests_total{result=\"hit\"}"))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// The value of the only series at `t_s`.
fn value_at(result: &Value, t_s: i64) -> String {
    let points = result[0]["values"].as_array().unwrap();
    let p = points.iter().find(|p| p[0].as_i64() == Some(t_s));
    p.unwrap_or_else(|| panic!("no point at {t_s}: {result}"))[1]
        .as_str()
        .unwrap()
        .to_string()
}

/// Two hours of `load` at 60 s for two hosts, ending ten minutes ago; the query's window.
fn two_hours(server: &Server) -> (i64, (i64, i64)) {
    let end = now_s() / 60 * 60;
    let start = end - 7200;
    let mut lines = String::new();
    for t in (start..end - 600).step_by(60) {
        for host in ["a", "b"] {
            lines.push_str(&format!("load,host={host} value={} {t}\n", t % 7));
        }
    }
    write(server, &lines);
    (start, (start, end))
}

#[test]
fn a_dashboard_refresh_is_answered_from_kept_steps_and_sees_a_late_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let (start, window) = two_hours(&server);
    let query = "sum(load_value)";
    let first = range(&server, query, window);
    assert_eq!(hits(&server), Some(0));
    let again = range(&server, query, window);
    assert_eq!(again, first);
    assert_eq!(hits(&server), Some(1));
    // An hour back, over a sample already there: the newer write wins, at once.
    let t = start + 3600;
    assert_eq!(value_at(&first, t), format!("{}", 2 * (t % 7)));
    write(&server, &format!("load,host=a value=1000 {t}\n"));
    let after = range(&server, query, window);
    assert_eq!(value_at(&after, t), format!("{}", 1000 + t % 7));
    assert_eq!(value_at(&after, t + 60), value_at(&first, t + 60));
    assert_eq!(value_at(&after, t - 60), value_at(&first, t - 60));
    // The steps before the write stayed kept.
    assert_eq!(hits(&server), Some(2));
}

#[test]
fn with_the_cache_off_nothing_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("strata.toml");
    std::fs::write(&config, "[limits]\nquery_result_cache_bytes_max = 0\n").unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let (_, window) = two_hours(&server);
    let first = range(&server, "sum(load_value)", window);
    assert_eq!(range(&server, "sum(load_value)", window), first);
    assert_eq!(hits(&server), None, "no cache, no counter");
}
