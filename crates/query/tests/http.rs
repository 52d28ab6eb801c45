//! The endpoint on a real router bound to 127.0.0.1:0 over a real store in a temp dir, asked by a
//! plain HTTP/1.1 client over TCP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use hist::Histogram;
use query::eval::Limits;
use serde_json::Value;
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

/// 2026-11-22T00:00:00Z
const T0_S: i64 = 1_795_305_600;

fn store() -> (tempfile::TempDir, Arc<Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let mut batch = WriteBatch::new();
    let lat = StreamKey::parse("lat|ST[host:a]").unwrap();
    let cpu = StreamKey::parse("cpu|ST[host:a]").unwrap();
    let cpu_b = StreamKey::parse("cpu|ST[host:b]").unwrap();
    for m in 0..3i64 {
        let mut h = Histogram::new();
        h.insert_n(1.0 + m as f64, 2 + m as u64);
        batch.histogram(&lat, (T0_S + 60 * m) * 1000, &h).unwrap();
        batch
            .numeric(&cpu, (T0_S + 60 * m) * 1000, 10.0 * m as f64)
            .unwrap();
        batch.numeric(&cpu_b, (T0_S + 60 * m) * 1000, 1.0).unwrap();
    }
    store.write(&batch).unwrap();
    (dir, Arc::new(store))
}

fn serve(store: Arc<Store>, limits: Limits) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = query::http::router_with_limits(store, limits);
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// (status, JSON body) of one request.
fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut conn = TcpStream::connect(addr).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body.as_bytes()).unwrap();
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    (
        status,
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}

fn get(addr: &str, query: &str, rest: &str) -> (u16, Value) {
    request(
        addr,
        "GET",
        &format!("/api/strata/v1/caql?query={}{rest}", enc(query)),
        "",
    )
}

#[test]
fn answers_numbers_and_histograms_in_the_documented_shape() {
    let (_dir, store) = store();
    let addr = serve(store, Limits::default());
    let range = format!("&start={T0_S}&end={}&period=60", T0_S + 240);
    let (status, v) = get(&addr, r#"find("cpu", "and(host:a)")"#, &range);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["start"], T0_S as f64);
    assert_eq!(v["end"], (T0_S + 240) as f64);
    assert_eq!(v["period"], 60.0);
    let s = &v["series"][0];
    assert_eq!(s["label"], "cpu|ST[host:a]");
    assert_eq!(s["tags"]["host"], "a");
    let t = T0_S as f64;
    assert_eq!(
        s["values"],
        serde_json::json!([
            [t, 0.0],
            [t + 60.0, 10.0],
            [t + 120.0, 20.0],
            [t + 180.0, null]
        ])
    );

    let (status, v) = get(&addr, r#"find:histogram("lat")"#, &range);
    assert_eq!(status, 200, "{v}");
    let first = &v["series"][0]["values"][0][1];
    // 1.0 ×2 → bin (val 10, exp 0), count 2.
    assert_eq!(first["bins"], serde_json::json!([[10, 0, 2]]));
    let h = Histogram::from_base64(first["b64"].as_str().unwrap()).unwrap();
    assert_eq!(h.sample_count(), 2);
    assert!(v["series"][0]["values"][3][1].is_null());
}

#[test]
fn post_form_rfc3339_times_and_duration_periods() {
    let (_dir, store) = store();
    let addr = serve(store, Limits::default());
    let body = format!(
        "query={}&start={}&end={}&period=2m",
        enc(r#"stats:sum{find("cpu")}"#),
        enc("2026-11-22T00:00:00Z"),
        enc("2026-11-22T01:04:00+01:00")
    );
    let (status, v) = request(&addr, "POST", "/api/strata/v1/caql", &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["period"], 120.0);
    assert_eq!(v["end"], (T0_S + 240) as f64);
    // 2-minute slices: mean(0, 10) + mean(1, 1) = 6; then mean(20) + mean(1) = 21
    let vals: Vec<f64> = v["series"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_f64().unwrap())
        .collect();
    assert_eq!(vals, vec![6.0, 21.0]);
}

#[test]
fn errors_are_json_with_position_and_status() {
    let (_dir, store) = store();
    let addr = serve(store.clone(), Limits::default());
    let range = format!("&start={T0_S}&end={}&period=60", T0_S + 240);
    let (status, e) = get(&addr, "find(\"cpu\") +\n  * 2", &range);
    assert_eq!(status, 400);
    assert_eq!(e["kind"], "parse");
    assert_eq!(
        (
            e["position"].as_u64(),
            e["line"].as_u64(),
            e["column"].as_u64()
        ),
        (Some(16), Some(2), Some(3))
    );
    assert!(
        e["expected"].as_str().unwrap().contains("a number, string"),
        "{e}"
    );
    assert_eq!(e["found"], "`*`");

    let (status, e) = get(&addr, "nope:thing{find(\"cpu\")}", &range);
    assert_eq!(status, 400);
    assert_eq!(e["kind"], "invalid");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("unknown function `nope:thing`"),
        "{e}"
    );

    let (status, e) = request(&addr, "GET", "/api/strata/v1/caql?start=1", "");
    assert_eq!(status, 400);
    assert!(e["error"].as_str().unwrap().contains("query"), "{e}");
    let (status, e) = get(&addr, "1", "&start=yesterday");
    assert_eq!(status, 400);
    assert!(e["error"].as_str().unwrap().contains("start"), "{e}");
    let (status, e) = get(&addr, "1", "&period=-5");
    assert_eq!(status, 400);
    assert!(e["error"].as_str().unwrap().contains("period"), "{e}");

    // Limits: more streams than allowed → 422 naming the limit; no time left → 503.
    let tight = serve(
        store.clone(),
        Limits {
            streams_max: 1,
            ..Limits::default()
        },
    );
    let (status, e) = get(&tight, r#"find("cpu")"#, &range);
    assert_eq!(status, 422, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("streams_max 1"),
        "{e}"
    );
    let (status, _) = get(&tight, r#"find("cpu", limit=1)"#, &range);
    assert_eq!(status, 200);
    let no_time = serve(
        store,
        Limits {
            time_max_ms: 0,
            ..Limits::default()
        },
    );
    let (status, e) = get(&no_time, r#"find("cpu")"#, &range);
    assert_eq!(status, 503, "{e}");
    assert_eq!(e["kind"], "timeout");
}
