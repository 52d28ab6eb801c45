//! Specs from JSON and TOML, and validation messages that name the field in words.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use checks::{CheckError, CheckSpec};
use serde_json::json;

fn spec(kind: &str, target: &str, config: serde_json::Value) -> CheckSpec {
    CheckSpec {
        id: "c1".into(),
        kind: kind.into(),
        target: target.into(),
        period_ms: 60_000,
        timeout_ms: 5_000,
        config,
        tags: vec![],
    }
}

fn error(s: &CheckSpec) -> String {
    let e = checks::validate(s).unwrap_err();
    let text = e.to_string();
    // Sentences, not Rust debug text.
    for debug in ["Some(", "None", "Field {", "Setup {", "Error {", "\\\""] {
        assert!(!text.contains(debug), "{text}");
    }
    text
}

#[test]
fn specs_read_from_json_and_toml() {
    let from_json: CheckSpec = serde_json::from_str(
        r#"{"id":"web","kind":"https","target":"https://example.com/","period_ms":60000,
            "timeout_ms":10000,"config":{"follow_redirects":3},"tags":[["env","prod"]]}"#,
    )
    .unwrap();
    let from_toml: CheckSpec = toml::from_str(
        r#"
        id = "web"
        kind = "https"
        target = "https://example.com/"
        period_ms = 60000
        timeout_ms = 10000
        tags = [["env", "prod"]]
        [config]
        follow_redirects = 3
        "#,
    )
    .unwrap();
    assert_eq!(from_json, from_toml);
    checks::validate(&from_json).unwrap();
    // config and tags may be left out.
    let bare: CheckSpec = serde_json::from_str(
        r#"{"id":"p","kind":"ping","target":"127.0.0.1","period_ms":1000,"timeout_ms":1000}"#,
    )
    .unwrap();
    checks::validate(&bare).unwrap();
}

#[test]
fn common_fields_are_checked() {
    let mut s = spec("tcp", "h:1", json!({}));
    s.id = String::new();
    assert_eq!(error(&s), "`id`: must be 1 to 128 bytes, is 0");
    s.id = "x".repeat(129);
    assert_eq!(error(&s), "`id`: must be 1 to 128 bytes, is 129");
    let mut s = spec("tcp", "h:1", json!({}));
    s.period_ms = 500;
    assert_eq!(error(&s), "`period_ms`: must be 1000 to 300000 ms, is 500");
    let mut s = spec("tcp", "h:1", json!({}));
    s.timeout_ms = 70_000;
    assert_eq!(
        error(&s),
        "`timeout_ms`: must be 1 ms to period_ms (60000 ms), is 70000"
    );
    let s = spec("smtp", "h:25", json!({}));
    assert!(error(&s).starts_with("`kind`: unknown kind \"smtp\" (expected http, https,"));
    let mut s = spec("tcp", "h:1", json!({}));
    s.tags = vec![(String::new(), "v".into())];
    assert!(error(&s).starts_with("`tags[0]`"));
}

#[test]
fn kind_options_are_checked() {
    let cases = [
        (
            spec("http", "ftp://x/", json!({})),
            "`target`: \"ftp://x/\": an http check needs an http:// URL",
        ),
        (
            spec("https", "http://x/", json!({})),
            "`target`: \"http://x/\": an https check needs an https:// URL",
        ),
        (
            spec("http", "http://x/", json!({"follow_redirects": 11})),
            "`config.follow_redirects`: at most 10",
        ),
        (
            spec("http", "http://x/", json!({"method": "get"})),
            "`config.method`: an HTTP method in capitals (GET, HEAD, POST, …)",
        ),
        (
            spec("tcp", "h", json!({})),
            "`target`: \"h\": expected host:port",
        ),
        (
            spec("tcp", "h:1", json!({"ca_file": "/x"})),
            "`config.tls`: TLS options are given but `tls` is not true",
        ),
        (
            spec("redis", "h", json!({"username": "u"})),
            "`config.username`: needs config.password",
        ),
        (
            spec("postgres", "h", json!({"query": " "})),
            "`config.query`: a statement of 1 to 16384 bytes",
        ),
        (
            spec("prometheus", "http://x/", json!("nope")),
            "`config`: must be an object of options",
        ),
    ];
    for (s, expected) in cases {
        assert_eq!(error(&s), expected);
    }
    let unknown = error(&spec("tcp", "h:1", json!({"bannr": true})));
    assert!(
        unknown.starts_with("`config`: unknown field `bannr`"),
        "{unknown}"
    );
    let regex = error(&spec("http", "http://x/", json!({"body_regex": "("})));
    assert!(
        regex.starts_with("`config.body_regex`: not a valid pattern"),
        "{regex}"
    );
}

#[tokio::test]
async fn run_refuses_what_validate_refuses() {
    let s = spec("ping", "127.0.0.1", json!({"count": 0}));
    match checks::run(&s).await {
        Err(CheckError::Field { field, .. }) => assert_eq!(field, "config.count"),
        other => panic!("{other:?}"),
    }
}
