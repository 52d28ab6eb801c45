//! End-to-end: real clients from the package registries (statsd, the OpenTelemetry SDK with
//! the OTLP/HTTP exporter, the Influx client, curl with httptrap JSON, Prometheus remote write
//! from the upstream protobuf definitions, Graphite plaintext) against one `strata serve`,
//! each script reading its data back through `/api/strata/v1/fetch` and, where mounted, the
//! Prometheus HTTP API the way Grafana calls it; the OpenTelemetry SDK again across a process
//! restart (`otel_restart.py`, one series). Prints `e2e clients: N passed, N failed`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/support.rs"]
mod support;

/// Short flush intervals so the statsd and Graphite data are readable within a second.
const CONFIG: &str = r#"
[statsd]
flush_interval_ms = 300

[graphite]
flush_interval_ms = 200

[otlp]
promote_resource_attributes = ["deployment.environment"]
"#;

const SCRIPTS: [&str; 6] = [
    "httptrap_curl.py",
    "statsd_client.py",
    "otel_client.py",
    "influx_client.py",
    "remote_write_client.py",
    "graphite_client.py",
];

#[test]
fn e2e_real_clients() {
    let python = support::venv_python();
    let dir = support::fresh_dir("e2e-clients");
    let server = support::Server::start(&dir.join("data"), CONFIG);
    let env = server.env();
    let mut tally = support::Tally::default();
    for script in SCRIPTS {
        tally.run_script(&python, script, &[], &env);
    }
    // The same SDK program twice, two processes: still one series.
    for phase in ["first", "second"] {
        tally.run_script(&python, "otel_restart.py", &[phase], &env);
    }
    let clean = server.stop();
    if !clean {
        tally.failed += 1;
        tally
            .failures
            .push("strata serve did not exit 0 on SIGTERM".to_owned());
    } else {
        tally.passed += 1;
    }
    tally.finish("e2e clients");
}
