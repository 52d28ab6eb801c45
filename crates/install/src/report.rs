//! What each step did, for the one-line-per-step text report and `--json`.

use serde_json::{json, Value};

/// What one step did (or, in a dry run, would do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Updated,
    Unchanged,
    /// An existing config left as it is (it differs; `--force-config` replaces it).
    Kept,
    Removed,
    /// Nothing to remove.
    Absent,
    /// Not done in this mode (`--init none`, `--wait-s 0`, …).
    Skipped,
    /// A check that changes nothing (preflight, the first sample).
    Ok,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Kept => "kept",
            Outcome::Removed => "removed",
            Outcome::Absent => "absent",
            Outcome::Skipped => "skipped",
            Outcome::Ok => "ok",
        }
    }

    /// Whether the step changed something on disk, in the init system or on the core.
    pub fn changed(self) -> bool {
        matches!(self, Outcome::Created | Outcome::Updated | Outcome::Removed)
    }

    /// The outcome of several parts (parts skipped in this mode left out): created if all
    /// were, removed if something was removed and nothing else changed, unchanged if nothing
    /// changed, absent if there was nothing to remove.
    pub fn combine(parts: &[Outcome]) -> Outcome {
        let done: Vec<Outcome> = parts
            .iter()
            .copied()
            .filter(|o| *o != Outcome::Skipped)
            .collect();
        let all = |want: Outcome| done.iter().all(|o| *o == want);
        if done.is_empty() {
            Outcome::Skipped
        } else if all(Outcome::Created) {
            Outcome::Created
        } else if done.contains(&Outcome::Removed)
            && !done
                .iter()
                .any(|o| matches!(o, Outcome::Created | Outcome::Updated))
        {
            Outcome::Removed
        } else if done.iter().any(|o| o.changed()) {
            Outcome::Updated
        } else if all(Outcome::Absent) {
            Outcome::Absent
        } else {
            Outcome::Unchanged
        }
    }
}

/// One step's line.
#[derive(Clone, Debug)]
pub struct Step {
    pub step: &'static str,
    pub outcome: Outcome,
    pub detail: String,
}

/// Everything one run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub host_id: String,
    pub dry_run: bool,
    pub steps: Vec<Step>,
    /// Where the host's worksheet opens in the core's UI.
    pub worksheet_url: Option<String>,
}

impl Report {
    pub fn push(&mut self, step: &'static str, outcome: Outcome, detail: impl Into<String>) {
        self.steps.push(Step {
            step,
            outcome,
            detail: detail.into(),
        });
    }

    /// Steps that changed something.
    pub fn changed(&self) -> usize {
        self.steps.iter().filter(|s| s.outcome.changed()).count()
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        for s in &self.steps {
            out.push_str(&format!(
                "{:<13} {:<10} {}\n",
                s.step,
                s.outcome.word(),
                s.detail
            ));
        }
        let verb = if self.dry_run {
            "would change"
        } else {
            "changed"
        };
        out.push_str(&format!(
            "host {}: {} step(s) {verb}\n",
            self.host_id,
            self.changed()
        ));
        if let Some(url) = &self.worksheet_url {
            out.push_str(&format!("worksheet: {url}\n"));
        }
        out
    }

    pub fn json(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| json!({ "step": s.step, "outcome": s.outcome.word(), "detail": s.detail }))
            .collect();
        json!({
            "host_id": self.host_id,
            "dry_run": self.dry_run,
            "changed": self.changed(),
            "steps": steps,
            "worksheet_url": self.worksheet_url,
        })
    }
}
