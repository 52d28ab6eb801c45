//! The notification test files in `testdata/notify/` (`strata rules test` files with
//! `[[notification_test]]`): routing with `continue`, grouping timers, inhibition, weekly and
//! cron maintenance windows across both DST changes in Europe/Berlin, acknowledgements,
//! reminders, escalation and flapping. Each must pass, and a changed expectation must fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/notify")
        .join(name)
}

fn passes(name: &str, checks: usize) {
    let dir = tempfile::tempdir().unwrap();
    let report = alert::testfile::run_file(&testdata(name), dir.path()).unwrap();
    let failures: Vec<String> = report
        .notify_failures
        .iter()
        .map(|f| {
            let list = |l: &[alert::testfile::ExpNotification]| -> Vec<String> {
                l.iter().map(|n| n.text()).collect()
            };
            format!(
                "eval_time {} ms\n  expected {:#?}\n  got {:#?}",
                f.eval_time_ms,
                list(&f.expected),
                list(&f.got)
            )
        })
        .collect();
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
    assert_eq!(report.checks, checks, "{name}");
}

#[test]
fn grouping_waits_batches_repeats_and_a_more_severe_alert_skips_the_waits() {
    passes("grouping_test.toml", 4);
}

#[test]
fn an_inhibited_alert_is_notified_when_its_source_resolves() {
    passes("inhibit_test.toml", 2);
}

#[test]
fn a_weekly_window_on_the_day_the_clock_jumps_forward() {
    passes("maintenance_spring_test.toml", 2);
}

#[test]
fn weekly_and_cron_windows_on_the_day_the_clock_goes_back() {
    passes("maintenance_autumn_test.toml", 3);
}

#[test]
fn routes_reminders_escalation_acks_and_flapping() {
    passes("escalation_test.toml", 3);
}

#[test]
fn a_wrong_expectation_fails_and_says_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(testdata("grouping_test.toml")).unwrap();
    // The first notification is at 5m (group_wait after 2m), not 2m.
    let wrong = text.replacen("at = \"5m\"", "at = \"2m\"", 1);
    let path = dir.path().join("wrong_test.toml");
    std::fs::write(&path, wrong).unwrap();
    std::fs::copy(testdata("hot.toml"), dir.path().join("hot.toml")).unwrap();
    let report = alert::testfile::run_file(&path, &dir.path().join("scratch")).unwrap();
    assert_eq!(report.notify_failures.len(), 1);
    let got = &report.notify_failures[0].got;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].at.as_deref(), Some("5m"));
}
