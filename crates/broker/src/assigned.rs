//! Checks a core assigns to this broker through its checks API: the answer of
//! `GET /api/strata/v1/checks?broker=<id>` (whole documents, `crates/server/FORMAT.md`) turned
//! into check specs. A document marked `paused` (an agent's record in push mode) is not run.

use checks::CheckSpec;
use serde_json::Value;

/// How often the core is asked for this broker's checks.
pub const FETCH_PERIOD_MS: u64 = 2_000;

/// The specs to run, and one message per document that could not be used.
pub fn specs(answer: &Value, checks_max: usize) -> (Vec<CheckSpec>, Vec<String>) {
    let mut good = Vec::new();
    let mut errors = Vec::new();
    for doc in answer.as_array().into_iter().flatten().take(checks_max) {
        let id = doc["id"].as_str().unwrap_or("").to_owned();
        if doc["paused"].as_bool() == Some(true) {
            continue;
        }
        let mut spec = doc["spec"].clone();
        if let Some(m) = spec.as_object_mut() {
            m.insert("id".into(), Value::String(id.clone()));
        }
        match serde_json::from_value::<CheckSpec>(spec) {
            Ok(s) => good.push(s),
            Err(e) => errors.push(format!("check {id}: {e}")),
        }
    }
    good.sort_by(|a, b| a.id.cmp(&b.id));
    (good, errors)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn documents_become_specs_and_paused_ones_are_left_out() {
        let answer = serde_json::json!([
            {"id": "b", "spec": {"kind": "tcp", "target": "127.0.0.1:1", "period_ms": 1000, "timeout_ms": 500}},
            {"id": "a", "paused": true, "spec": {"kind": "tcp", "target": "x:1", "period_ms": 1000, "timeout_ms": 500}},
            {"id": "c", "spec": {"kind": "tcp"}},
        ]);
        let (good, errors) = specs(&answer, 10);
        assert_eq!(good.len(), 1);
        assert_eq!(good[0].id, "b");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("check c"), "{errors:?}");
    }
}
