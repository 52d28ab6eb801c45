//! The Prometheus views of rules and alerts (`/api/v1/rules`, `/api/v1/alerts`), as plain
//! data: the server hands them to the promql router's rule hook.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::engine::Engine;
use crate::rule::{Kind, Source};
use crate::state::{Instance, State};
use crate::util::rfc3339;

/// One group of `/api/v1/rules` (Prometheus's `RuleGroup`).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub name: String,
    pub file: String,
    pub rules: Vec<Value>,
    pub interval_s: f64,
    pub evaluation_time_s: f64,
    pub last_evaluation: String,
}

/// One alert of `/api/v1/alerts` (Prometheus's `Alert`).
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `pending` or `firing`.
    pub state: String,
    pub active_at: Option<String>,
    pub value: String,
}

fn prom_state(s: State) -> Option<&'static str> {
    match s {
        State::Pending => Some("pending"),
        State::Firing | State::Recovering => Some("firing"),
        _ => None,
    }
}

fn alert_of(i: &Instance, for_ms: i64) -> Option<Alert> {
    let state = prom_state(i.state)?;
    let active = if i.state == State::Pending {
        i.active_ms
    } else {
        i.fired_ms - for_ms
    };
    Some(Alert {
        labels: i.labels.iter().cloned().collect(),
        annotations: i.annotations.iter().cloned().collect(),
        state: state.into(),
        active_at: (active > 0).then(|| rfc3339(active)),
        value: if i.value.is_finite() {
            format!("{}", i.value)
        } else {
            "NaN".into()
        },
    })
}

fn alert_json(a: &Alert) -> Value {
    json!({
        "labels": a.labels,
        "annotations": a.annotations,
        "state": a.state,
        "activeAt": a.active_at,
        "value": a.value,
    })
}

/// Pending and firing alerts, suppressed ones left out (they are silent).
pub fn alerts(engine: &Engine) -> Vec<Alert> {
    let core = engine.core();
    core.sorted_instances()
        .into_iter()
        .filter(|i| !i.suppressed)
        .filter_map(|i| {
            let for_ms = core.ruleset(&i.ruleset).map_or(0, |r| r.for_ms);
            alert_of(i, for_ms)
        })
        .collect()
}

fn group_of(source: &Source) -> (String, String) {
    match source {
        Source::File(p) => (
            p.file_stem()
                .map_or("rules".into(), |s| s.to_string_lossy().into_owned()),
            p.display().to_string(),
        ),
        Source::Api => ("api".into(), "api".into()),
        Source::Builtin => ("builtin".into(), "builtin".into()),
    }
}

fn query_text(k: &Kind) -> String {
    match k {
        Kind::Caql { text, .. } => text.clone(),
        Kind::Text { name, .. } => format!("text {name}"),
        Kind::Absent { name, .. } => format!("absent {name}"),
        Kind::PushSources { factor } => {
            format!("push sources silent for more than {factor}× their interval")
        }
    }
}

/// Rule groups: one per rules file, `api` and `builtin`; one alerting rule per ruleset.
pub fn rule_groups(engine: &Engine) -> Vec<Group> {
    let infos = engine.rule_infos();
    let core = engine.core();
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for info in infos {
        let Some(r) = &info.ruleset else { continue };
        let (name, file) = group_of(&r.source);
        let alerts: Vec<Value> = core
            .sorted_instances()
            .into_iter()
            .filter(|i| i.ruleset == r.name && !i.suppressed)
            .filter_map(|i| alert_of(i, r.for_ms))
            .map(|a| alert_json(&a))
            .collect();
        let state = if alerts.iter().any(|a| a["state"] == "firing") {
            "firing"
        } else if alerts.is_empty() {
            "inactive"
        } else {
            "pending"
        };
        let h = info.health.clone().unwrap_or_default();
        let health = match (&info.health, &h.error) {
            (None, _) => "unknown",
            (_, Some(_)) => "err",
            _ => "ok",
        };
        let eval_s = h.duration_ns as f64 / 1e9;
        let last = if h.last_t_ms > 0 {
            rfc3339(h.last_t_ms)
        } else {
            "0001-01-01T00:00:00Z".into()
        };
        let rule = json!({
            "state": state,
            "name": r.name,
            "query": query_text(&r.kind),
            "duration": r.for_ms as f64 / 1000.0,
            "keepFiringFor": r.keep_firing_for_ms as f64 / 1000.0,
            "labels": r.labels.iter().cloned().collect::<BTreeMap<_, _>>(),
            "annotations": r.annotations.iter().map(|(k, t)| (k.clone(), t.source().to_string())).collect::<BTreeMap<_, _>>(),
            "alerts": alerts,
            "health": health,
            "lastError": h.error.clone().unwrap_or_default(),
            "evaluationTime": eval_s,
            "lastEvaluation": last,
            "type": "alerting",
        });
        let g = groups.entry((name.clone(), file.clone())).or_insert(Group {
            name,
            file,
            rules: Vec::new(),
            interval_s: r.period_ms as f64 / 1000.0,
            evaluation_time_s: 0.0,
            last_evaluation: last.clone(),
        });
        g.evaluation_time_s += eval_s;
        if last > g.last_evaluation {
            g.last_evaluation = last;
        }
        g.rules.push(rule);
    }
    groups.into_values().collect()
}
