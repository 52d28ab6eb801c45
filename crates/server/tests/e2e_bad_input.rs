//! End-to-end bad input for every protocol (httptrap, Influx, remote write, OTLP, statsd,
//! Graphite): truncated, oversized, wrong types, invalid UTF-8, absurd timestamps, huge tag
//! sets → the right 4xx with a JSON body naming the place, nothing stored from what was
//! rejected, and the server keeps serving (tests/e2e/bad_input.py).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/support.rs"]
mod support;

/// A 1 MiB body limit so the oversized cases stay small; short flushes for statsd/Graphite.
const CONFIG: &str = r#"
[limits]
body_size_bytes_max = 1048576

[statsd]
flush_interval_ms = 300

[graphite]
flush_interval_ms = 200
"#;

#[test]
fn e2e_bad_input_is_rejected_and_nothing_of_it_stored() {
    let python = support::venv_python();
    let dir = support::fresh_dir("e2e-bad-input");
    let server = support::Server::start(&dir.join("data"), CONFIG);
    let mut tally = support::Tally::default();
    tally.run_script(&python, "bad_input.py", &[], &server.env());
    if server.stop() {
        tally.passed += 1;
    } else {
        tally.failed += 1;
        tally
            .failures
            .push("strata serve did not exit 0 on SIGTERM".to_owned());
    }
    tally.finish("e2e bad input");
}
