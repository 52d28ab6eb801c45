//! Alert history: the journal subscriber `history` that writes every record into the store
//! (exactly once, through the record's origin), and reading transitions back for the API.
//!
//! Streams written (each tagged `alertname` and the instance's stream tags and labels):
//! - `strata_alert_state` — the state code at each state or severity change (0 ok, 1 pending,
//!   2 firing, 3 recovering, 4 resolved, 5 nodata, 6 error); a step function (`fill:forward`).
//! - `strata_alert_transition` — 1 per state change, tagged `to:<state>` (count them).
//! - `strata_alert_event` — text: `<state> sev <n>: <summary>` per update.
//! - `ALERTS` — 1 per Cycle record for each pending or firing instance, tagged `alertstate`
//!   (`pending` or `firing`; recovering is `firing`, as Prometheus's `keep_firing_for`) and
//!   `severity`, as Prometheus writes it.

use std::collections::BTreeMap;

use store::key::{StreamKey, Tag};
use store::{Origin, SourceId, WriteBatch};

use crate::record::{Eval, Record, Update};
use crate::state::{Instance, State};

/// The store origin's source id for alert history.
pub const SOURCE_ID: &str = "alerts";

fn key(name: &str, pairs: &BTreeMap<String, String>) -> Option<StreamKey> {
    let tags = pairs
        .iter()
        .filter_map(|(k, v)| Tag::new(k.as_bytes(), v.as_bytes()).ok());
    StreamKey::new(name, tags).ok()
}

/// The instance's labels without `severity` (which changes within an episode).
fn base_tags(i: &Instance) -> BTreeMap<String, String> {
    i.labels
        .iter()
        .filter(|(k, _)| k != "severity")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `firing sev 1: 523 people …` (the `summary` annotation, else the value).
pub fn event_text(u: &Update) -> String {
    let i = &u.instance;
    let what = i
        .annotations
        .iter()
        .find(|(k, _)| k == "summary")
        .map(|(_, v)| v.clone())
        .or_else(|| {
            i.annotations
                .iter()
                .find(|(k, _)| k == "error")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| crate::util::human_number(i.value));
    let mut s = format!("{} sev {}: {what}", i.state.name(), i.severity);
    if i.flapping {
        s.push_str(" (flapping)");
    }
    if i.suppressed {
        s.push_str(" (suppressed)");
    }
    s
}

fn eval_batch(e: &Eval, b: &mut WriteBatch) -> Result<(), String> {
    let err = |x: store::StoreError| x.to_string();
    for u in &e.updates {
        let i = &u.instance;
        let tags = base_tags(i);
        let state_changed = u.from_state != i.state || u.new;
        if state_changed || u.from_severity != i.severity {
            if let Some(k) = key("strata_alert_state", &tags) {
                b.numeric(&k, e.t_ms, f64::from(i.state as u8))
                    .map_err(err)?;
            }
        }
        if state_changed {
            let mut t = tags.clone();
            t.insert("to".into(), i.state.name().into());
            if let Some(k) = key("strata_alert_transition", &t) {
                b.numeric(&k, e.t_ms, 1.0).map_err(err)?;
            }
        }
        if let Some(k) = key("strata_alert_event", &tags) {
            b.text(&k, e.t_ms, &event_text(u)).map_err(err)?;
        }
    }
    Ok(())
}

/// The store batch for one record; `labels` finds an active instance's labels by fingerprint
/// (a Cycle record lists fingerprints only).
pub fn batch_of(
    r: &Record,
    labels: &dyn Fn(u64) -> Option<Vec<(String, String)>>,
) -> Result<WriteBatch, String> {
    let mut b = WriteBatch::new();
    match r {
        Record::Eval(e) => eval_batch(e, &mut b)?,
        Record::Cycle(c) => {
            for (fp, state, sev) in &c.active {
                let Some(ls) = labels(*fp) else { continue };
                let mut tags: BTreeMap<String, String> = ls.into_iter().collect();
                let st = if *state == State::Pending {
                    "pending"
                } else {
                    "firing"
                };
                tags.insert("alertstate".into(), st.into());
                tags.insert("severity".into(), sev.to_string());
                if let Some(k) = key("ALERTS", &tags) {
                    b.numeric(&k, c.t_ms, 1.0).map_err(|e| e.to_string())?;
                }
            }
        }
        Record::Forget(_) => {}
    }
    Ok(b)
}

/// The origin of the store batch for the record at journal `offset`.
pub fn origin(epoch: u64, offset: u64, now_ms: i64) -> Option<Origin> {
    Some(Origin {
        source: SourceId::new(SOURCE_ID).ok()?,
        epoch,
        seq: offset,
        received_ms: now_ms,
    })
}

/// One transition as the history API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub offset: u64,
    pub t_ms: i64,
    pub written_ms: i64,
    pub flags: u8,
    pub from_state: State,
    pub from_severity: u8,
    pub instance: Instance,
}

/// Filters for history reads.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub ruleset: Option<String>,
    pub fp: Option<u64>,
    pub start_ms: Option<i64>,
    pub end_ms: Option<i64>,
}

impl Filter {
    pub fn admits(&self, e: &Eval, u: &Update) -> bool {
        self.ruleset.as_ref().is_none_or(|r| *r == e.ruleset)
            && self.fp.is_none_or(|f| f == u.instance.fp)
            && self.start_ms.is_none_or(|s| e.t_ms >= s)
            && self.end_ms.is_none_or(|x| e.t_ms < x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eval_record_becomes_state_transition_and_event_streams() {
        let mut i = Instance::new(1, "login-slow", "login|ST[app:web]");
        i.state = State::Firing;
        i.severity = 1;
        i.labels = vec![
            ("alertname".into(), "login-slow".into()),
            ("app".into(), "web".into()),
            ("severity".into(), "1".into()),
        ];
        i.annotations = vec![("summary".into(), "523 people".into())];
        let r = Record::Eval(Eval {
            flags: 0,
            t_ms: 600_000,
            written_ms: 605_000,
            ruleset: "login-slow".into(),
            updates: vec![Update {
                from_state: State::Pending,
                from_severity: 1,
                new: false,
                instance: i,
            }],
        });
        let b = batch_of(&r, &|_| None).unwrap();
        let keys: Vec<String> = b.samples().map(|(k, t, _)| format!("{k:?}@{t}")).collect();
        assert_eq!(keys.len(), 3, "{keys:?}");
        assert!(keys[0].contains("strata_alert_state|ST[alertname:login-slow,app:web]"));
        assert!(keys[1].contains("to:firing"));
        assert!(keys[2].contains("strata_alert_event"));
    }
}
