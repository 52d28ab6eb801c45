//! The notifications of a test file (`strata rules test`), on its virtual clock: every
//! receiver's planning run over a run's records, as delivered at once.

use std::collections::BTreeMap;

/// One notification a simulated run planned.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    pub t_ms: i64,
    pub receiver: String,
    pub status: String,
    pub group_labels: BTreeMap<String, String>,
    pub alerts: Vec<(BTreeMap<String, String>, String)>,
}

/// An acknowledgement a test file makes at `at_ms` of the firing alerts whose labels include
/// `labels`.
#[derive(Clone, Debug, Default)]
pub struct SimAck {
    pub at_ms: i64,
    pub until_ms: Option<i64>,
    pub labels: BTreeMap<String, String>,
    pub note: String,
}

/// Simulated runs plan at most this many notifications.
pub const SIMULATED_MAX: usize = 100_000;

impl super::Notifier {
    /// The notifications `records` call for, every receiver's worker reading them in order from
    /// an empty state, as delivered at once (no retries, no fallback). Acknowledgements are
    /// made when the run reaches their time.
    pub fn simulate(&self, records: &[crate::record::Record], acks: &[SimAck]) -> Vec<Simulated> {
        use crate::record::Record;
        let mut states: Vec<(super::Receiver, super::WorkerState)> = self
            .config
            .receivers
            .iter()
            .map(|r| (r.clone(), super::WorkerState::default()))
            .collect();
        // fp -> (labels, fired_ms) of the firing alerts, for acknowledgements.
        let mut firing: BTreeMap<u64, (BTreeMap<String, String>, i64)> = BTreeMap::new();
        let mut pending: Vec<&SimAck> = acks.iter().collect();
        pending.sort_by_key(|a| a.at_ms);
        let mut pending = pending.into_iter().peekable();
        let mut out = Vec::new();
        for r in records {
            let t = r.t_ms();
            // Acknowledgements at t cover the alerts firing at t (this record's included).
            if let Record::Eval(e) = r {
                for u in &e.updates {
                    let i = &u.instance;
                    if matches!(i.state, crate::State::Firing | crate::State::Recovering) {
                        firing.insert(i.fp, (super::labels_map(&i.labels), i.fired_ms));
                    } else {
                        firing.remove(&i.fp);
                    }
                }
            }
            while let Some(a) = pending.next_if(|a| a.at_ms <= t) {
                for (fp, (labels, fired_ms)) in &firing {
                    if a.labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                        let ack = super::Ack {
                            fp: *fp,
                            fired_ms: *fired_ms,
                            at_ms: a.at_ms,
                            until_ms: a.until_ms,
                            by: "test".into(),
                            note: a.note.clone(),
                        };
                        if let Err(e) = self.ack(ack) {
                            tracing::warn!(error = %e, "test acknowledgement not saved");
                        }
                    }
                }
            }
            for (recv, st) in states.iter_mut() {
                for p in self.plan(recv, st, r) {
                    if out.len() >= SIMULATED_MAX {
                        return out;
                    }
                    out.push(Simulated {
                        t_ms: t,
                        receiver: p.receiver,
                        status: p.status.to_string(),
                        group_labels: p.group_labels,
                        alerts: p
                            .alerts
                            .into_iter()
                            .map(|a| (a.labels, a.status.to_string()))
                            .collect(),
                    });
                }
            }
        }
        out
    }
}
