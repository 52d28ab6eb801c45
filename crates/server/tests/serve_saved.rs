//! Worksheets, dashboards and the landing page's overview through a real `strata serve`:
//! create-or-replace at a client-chosen id, an unchanged body is a no-op, names stay unique,
//! the list is newest first and survives a restart, bodies and lists are bounded with errors
//! naming the field; the overview lists the user's streams by recent activity with the
//! self-monitoring ones apart, and `find?order=recent` does the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use serde_json::{json, Value};
use serve_common::{client, get_json, now_s, urlencode, Server};

fn send(server: &Server, method: &str, path: &str, body: &Value) -> (u16, Value, bool) {
    let http = client();
    let url = server.url(path);
    let request = match method {
        "PUT" => http.put(url),
        "POST" => http.post(url),
        "DELETE" => http.delete(url),
        _ => http.get(url),
    };
    let request = if body.is_null() {
        request
    } else {
        request.json(body)
    };
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    let unchanged = response.headers().get("x-strata-unchanged").is_some();
    let text = response.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        unchanged,
    )
}

fn dashboard(name: &str, panels: Value) -> Value {
    json!({ "name": name, "panels": panels })
}

fn panel(id: &str, x: u64, w: u64) -> Value {
    json!({ "id": id, "type": "line", "x": x, "y": 0, "w": w, "h": 2, "query": "__name:reqs" })
}

#[test]
fn dashboards_are_created_replaced_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let base = "/api/strata/v1/dashboards";

    let body = dashboard("Checkout", json!([panel("a", 0, 6)]));
    let (status, created, _) = send(&server, "PUT", &format!("{base}/checkout"), &body);
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["id"], "checkout");
    assert_eq!(created["version"], 1);
    let created_ms = created["updated_ms"].as_i64().unwrap();

    // The same body again changes nothing, not even the time.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (status, same, unchanged) = send(&server, "PUT", &format!("{base}/checkout"), &body);
    assert_eq!((status, unchanged), (200, true), "{same}");
    assert_eq!(same["updated_ms"].as_i64(), Some(created_ms));

    // A changed body replaces it.
    let changed = dashboard("Checkout", json!([panel("a", 0, 6), panel("b", 6, 6)]));
    let (status, replaced, unchanged) = send(&server, "PUT", &format!("{base}/checkout"), &changed);
    assert_eq!((status, unchanged), (200, false));
    assert!(replaced["updated_ms"].as_i64().unwrap() > created_ms);

    // A second dashboard, created with a server-chosen id, lists first (newest).
    let (status, other, _) = send(&server, "POST", base, &dashboard("Login", json!([])));
    assert_eq!(status, 201);
    let other_id = other["id"].as_str().unwrap().to_owned();
    assert!(other_id.starts_with("db-"), "{other_id}");
    let list = get_json(&server.url(base));
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Login", "Checkout"]);

    // Names are unique (trimmed, any case): 409 with the id that has it.
    let (status, conflict, _) = send(&server, "POST", base, &dashboard(" checkout ", json!([])));
    assert_eq!(status, 409, "{conflict}");
    assert_eq!(conflict["id"], "checkout");
    let (status, _, _) = send(
        &server,
        "PUT",
        &format!("{base}/{other_id}"),
        &dashboard("CHECKOUT", json!([])),
    );
    assert_eq!(status, 409);

    // Errors name the field.
    for (bad, want) in [
        (
            dashboard(
                "x",
                json!([{ "id": "a", "type": "line", "x": 0, "y": 0, "w": 0, "h": 2 }]),
            ),
            "`panels[0].w`",
        ),
        (dashboard("x", json!({})), "`panels` must be an array"),
        (json!({ "panels": [] }), "`name`"),
        (
            dashboard("x", json!([panel("a", 0, 6), panel("a", 6, 6)])),
            "`panels[1].id`",
        ),
    ] {
        let (status, e, _) = send(&server, "POST", base, &bad);
        assert_eq!(status, 400, "{bad}: {e}");
        assert!(e["error"].as_str().unwrap().contains(want), "{e}");
    }
    let many: Vec<Value> = (0..101).map(|i| panel(&format!("p{i}"), 0, 1)).collect();
    let (status, e, _) = send(&server, "POST", base, &dashboard("many", json!(many)));
    assert_eq!(status, 400);
    assert!(
        e["error"].as_str().unwrap().contains("at most 100 panels"),
        "{e}"
    );
    let (status, e, _) = send(&server, "GET", &format!("{base}/..%2Fetc"), &Value::Null);
    assert_eq!(status, 400, "{e}");

    // After a restart the list is read from the files.
    let status = server.stop();
    assert!(status.success());
    let server = Server::start(dir.path(), &[]);
    let list = get_json(&server.url(base));
    assert_eq!(list.as_array().unwrap().len(), 2);
    let kept = get_json(&server.url(&format!("{base}/checkout")));
    assert_eq!(kept["panels"].as_array().unwrap().len(), 2);
    let (status, again, _) = send(&server, "POST", base, &dashboard("Checkout", json!([])));
    assert_eq!(
        status, 409,
        "names are still unique after a restart: {again}"
    );

    let (status, deleted, _) = send(&server, "DELETE", &format!("{base}/checkout"), &Value::Null);
    assert_eq!(
        (status, deleted["deleted"].as_str()),
        (200, Some("checkout"))
    );
    let (status, _, _) = send(&server, "GET", &format!("{base}/checkout"), &Value::Null);
    assert_eq!(status, 404);
    assert!(!dir.path().join("dashboards/checkout.json").exists());
    assert!(dir
        .path()
        .join(format!("dashboards/{other_id}.json"))
        .exists());
}

#[test]
fn worksheets_keep_their_api_and_gain_unique_names() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let base = "/api/strata/v1/worksheets";
    let sheet = json!({ "name": "latency review", "graphs": [{ "query": "__name:lat" }] });
    let (status, created, _) = send(&server, "POST", base, &sheet);
    assert_eq!(status, 201);
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ws-"), "{id}");
    let (status, conflict, _) = send(&server, "POST", base, &sheet);
    assert_eq!((status, conflict["id"].as_str()), (409, Some(id.as_str())));
    let (status, replaced, _) = send(
        &server,
        "PUT",
        &format!("{base}/{id}"),
        &json!({ "name": "latency review", "graphs": [] }),
    );
    assert_eq!(status, 200, "{replaced}");
    let e = send(
        &server,
        "PUT",
        &format!("{base}/{id}"),
        &json!({ "name": "x" }),
    )
    .1;
    assert!(e["error"].as_str().unwrap().contains("`graphs`"), "{e}");
}

#[test]
fn the_overview_and_recent_order_put_the_users_streams_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now_ms = now_s() * 1000;
    let http = client();
    // Oldest first; one stream looks like self-monitoring but is not tagged so.
    for (i, name) in ["old_latency", "mid_latency", "new_latency"]
        .iter()
        .enumerate()
    {
        let body = json!({ *name: { "_type": "h", "_ts": now_ms - 60_000 * (3 - i as i64), "_value": [0.1, 0.2] } });
        let r = http
            .put(server.url("/module/httptrap/web/secret"))
            .json(&body)
            .send()
            .unwrap();
        assert!(r.status().is_success());
    }
    // A self-monitoring stream written from outside (the server's own appear after a period).
    let body =
        json!({ "zz_latency|ST[strata:self]": { "_type": "h", "_ts": now_ms, "_value": [0.3] } });
    let r = http
        .put(server.url("/module/httptrap/web/secret"))
        .json(&body)
        .send()
        .unwrap();
    assert!(r.status().is_success());

    let o = get_json(&server.url("/api/strata/v1/overview?limit=10"));
    let names: Vec<&str> = o["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["new_latency", "mid_latency", "old_latency"]);
    assert_eq!(o["self_streams"][0]["name"], "zz_latency");
    assert_eq!(o["series"]["self"], 1);
    assert_eq!(o["series"]["mine"]["histogram"], 3);
    assert_eq!(o["ingest"]["accepted"], 4);
    assert_eq!(o["listeners"]["http"].as_str(), server.http.as_deref());
    assert_eq!(o["listeners"]["statsd"].as_str(), server.statsd.as_deref());
    assert_eq!(o["version"], env!("CARGO_PKG_VERSION"));

    let found = get_json(&server.url(&format!(
        "/api/strata/v1/find?query={}&order=recent&limit=3",
        urlencode("__name:*latency")
    )));
    let names: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["new_latency", "mid_latency", "old_latency"]);
    let (status, e, _) = send(
        &server,
        "GET",
        "/api/strata/v1/find?query=__name:x&order=sideways",
        &Value::Null,
    );
    assert_eq!(status, 400);
    assert!(e["error"].as_str().unwrap().contains("`order`"), "{e}");
    let (status, e, _) = send(
        &server,
        "GET",
        "/api/strata/v1/overview?limit=0",
        &Value::Null,
    );
    assert_eq!(status, 400);
    assert!(e["error"].as_str().unwrap().contains("`limit`"), "{e}");
}

#[test]
fn a_host_whose_agent_reports_is_offered_its_worksheet() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let now_ms = now_s() * 1000;
    // What an agent sends (its CPU histogram), and a tag no document id can hold.
    for host in ["web-7", "a/b"] {
        let key = format!("cpu_busy_ratio|ST[cpu:total,host:{host}]");
        let body = json!({ key: { "_type": "h", "_ts": now_ms, "_value": [0.25, 0.5] } });
        let r = client()
            .put(server.url("/module/httptrap/agent/secret"))
            .json(&body)
            .send()
            .unwrap();
        assert!(r.status().is_success());
    }
    let o = get_json(&server.url("/api/strata/v1/overview"));
    let hosts = o["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    assert_eq!(hosts[0]["host"], "web-7");
    assert_eq!(hosts[0]["worksheet"], Value::Null);
    let offer = &hosts[0]["offer"];
    assert_eq!(offer["id"], "host-web-7");
    assert!(
        offer["body"]["graphs"]
            .to_string()
            .contains("cpu_busy_ratio"),
        "{offer}"
    );
    // Taking the offer saves it; the overview then points at it.
    let (status, _, _) = send(
        &server,
        "PUT",
        "/api/strata/v1/worksheets/host-web-7",
        &offer["body"],
    );
    assert_eq!(status, 201);
    let o = get_json(&server.url("/api/strata/v1/overview"));
    assert_eq!(o["hosts"][0]["worksheet"], "host-web-7");
    assert_eq!(o["hosts"][0]["offer"], Value::Null);
}
