//! End-to-end: the OpenTelemetry Python SDK exports metrics with dotted names, UCUM units, every
//! instrument kind and odd attribute keys to `strata serve`, and the series it made — names and
//! labels, `target_info` included — equal what a real Prometheus 3.5 OTLP receiver made for the
//! same metrics (recorded by `scripts/otlp-names-prometheus` in
//! `e2e/otel_names.prometheus-3.5.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/support.rs"]
mod support;

/// The same `[otlp]` settings the recording's Prometheus ran with.
const CONFIG: &str = r#"
[otlp]
promote_resource_attributes = ["deployment.environment"]
translation_strategy = "UnderscoreEscapingWithSuffixes"
"#;

#[test]
fn otlp_names_equal_prometheus_3_5s() {
    let python = support::venv_python();
    let dir = support::fresh_dir("e2e-otlp-names");
    let server = support::Server::start(&dir.join("data"), CONFIG);
    let env = server.env();
    let mut tally = support::Tally::default();
    tally.run_script(
        &python,
        "otel_names.py",
        &["check", "otel_names.prometheus-3.5.json"],
        &env,
    );
    assert!(server.stop(), "strata serve did not exit 0 on SIGTERM");
    tally.finish("otlp names");
}
