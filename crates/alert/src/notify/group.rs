//! Grouping with Alertmanager's timers. A route with `group_wait`, `group_interval` or
//! `repeat_interval` (inherited down the tree) gathers its alerts into aggregation groups (one
//! per receiver, route and `group_by` values). A group's first notification goes out
//! `group_wait` after its first alert; later changes (a new alert, a resolve, a severity change)
//! go out at most every `group_interval` after the last notification; with nothing new the
//! group is sent again every `repeat_interval`. Each notification carries every alert of the
//! group (firing ones, and the ones resolved since the last). An alert more severe than the
//! group's last notification (severity 1 after 3) skips the waits.
//!
//! Time is the records' own (period ends): a timer fires at the first record at or after it is
//! due, so its precision is the evaluation period. The groups are part of the worker's saved
//! state, committed with its journal offset; after a crash the records since the checkpoint are
//! planned again from the same state and the same timers fire at the same records, with the
//! same idempotency keys. A route without timers notifies at each record, as before.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Out, Planned, Sent, GROUP_ALERTS_MAX};
use crate::util::parse_duration_ms;

/// The longest `group_wait`, `group_interval` or `repeat_interval`.
pub const TIMER_MAX_MS: i64 = 30 * 86_400_000;
/// Resolved alerts a group holds for its next notification; more sends it at once.
const RESOLVED_MAX: usize = GROUP_ALERTS_MAX;

/// A route's timers; all zero (no `repeat_ms`): notify at each record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub wait_ms: i64,
    pub interval_ms: i64,
    pub repeat_ms: Option<i64>,
}

impl Timing {
    /// Whether this route batches into timed groups.
    pub fn timed(&self) -> bool {
        self.wait_ms > 0 || self.interval_ms > 0 || self.repeat_ms.is_some()
    }

    /// A node's timers: its own where given, its parent's otherwise (Alertmanager's rule).
    pub fn inherit(
        what: &str,
        parent: Timing,
        [wait, interval, repeat]: [&Option<String>; 3],
    ) -> Result<Timing, String> {
        let read = |name: &str, t: &Option<String>| -> Result<Option<i64>, String> {
            let Some(t) = t else { return Ok(None) };
            let ms = parse_duration_ms(t).map_err(|e| format!("{what} {name}: {e}"))?;
            if !(0..=TIMER_MAX_MS).contains(&ms) {
                return Err(format!("{what} {name}: at most 30d"));
            }
            Ok(Some(ms))
        };
        let repeat_ms = match read("repeat_interval", repeat)? {
            Some(0) => return Err(format!("{what} repeat_interval: must be longer than 0")),
            Some(ms) => Some(ms),
            None => parent.repeat_ms,
        };
        Ok(Timing {
            wait_ms: read("group_wait", wait)?.unwrap_or(parent.wait_ms),
            interval_ms: read("group_interval", interval)?.unwrap_or(parent.interval_ms),
            repeat_ms,
        })
    }
}

/// An alert resolved since the group's last notification.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Resolved {
    fp: u64,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    starts_ms: i64,
    ends_ms: i64,
}

/// One aggregation group of a receiver (saved in the worker's state file).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Group {
    labels: BTreeMap<String, String>,
    timing: Timing,
    /// When its first alert came: the first notification is due `wait_ms` later.
    created_ms: i64,
    /// The last notification (none yet: waiting for `group_wait`).
    flushed_ms: Option<i64>,
    /// Something changed since the last notification.
    dirty: bool,
    /// A change more severe than the last notification: send at the next record.
    urgent: bool,
    /// The most severe (lowest) severity of the last notification; 0: none.
    sent_severity: u8,
    resolved: Vec<Resolved>,
}

/// Marks `s`'s group changed at `t_ms` (creating it when it is new).
pub(super) fn touch(groups: &mut BTreeMap<String, Group>, s: &Sent, t_ms: i64) {
    let g = groups.entry(s.group_key.clone()).or_insert_with(|| Group {
        labels: s.group_labels.clone(),
        timing: s.timing,
        created_ms: t_ms,
        flushed_ms: None,
        dirty: false,
        urgent: false,
        sent_severity: 0,
        resolved: Vec::new(),
    });
    g.dirty = true;
    if g.flushed_ms.is_some() && g.sent_severity != 0 && s.severity < g.sent_severity {
        g.urgent = true;
    }
}

/// Holds a resolved alert for its group's next notification.
pub(super) fn resolved(groups: &mut BTreeMap<String, Group>, s: &Sent, fp: u64, t_ms: i64) {
    touch(groups, s, t_ms);
    if let Some(g) = groups.get_mut(&s.group_key) {
        g.resolved.retain(|r| r.fp != fp);
        g.resolved.push(Resolved {
            fp,
            labels: s.labels.clone(),
            annotations: s.annotations.clone(),
            starts_ms: s.fired_ms,
            ends_ms: t_ms,
        });
        if g.resolved.len() >= RESOLVED_MAX {
            g.urgent = true;
        }
    }
}

fn due(g: &Group, t_ms: i64, any_unacked: bool) -> bool {
    if g.dirty {
        return g.urgent
            || match g.flushed_ms {
                None => t_ms >= g.created_ms + g.timing.wait_ms,
                Some(f) => t_ms >= f + g.timing.interval_ms,
            };
    }
    any_unacked
        && g.timing
            .repeat_ms
            .zip(g.flushed_ms)
            .is_some_and(|(r, f)| t_ms >= f + r)
}

/// Whether `s` is part of its group's notifications now (firing, not held back).
pub(super) fn member(s: &Sent) -> bool {
    s.timing.timed() && !s.muted && !s.held && !s.flap_sent
}

/// The notifications of every group due at `t_ms`; `acked(fp, fired_ms)` says whether an
/// alert is acknowledged (a group of acknowledged alerts is not repeated).
pub(super) fn flush(
    groups: &mut BTreeMap<String, Group>,
    sent: &mut BTreeMap<u64, Sent>,
    receiver: &str,
    t_ms: i64,
    acked: &dyn Fn(u64, i64) -> bool,
    out: &mut Vec<Planned>,
) {
    if groups.is_empty() {
        return;
    }
    // Members per group, in fingerprint order (one pass over the alerts).
    let mut members: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (fp, s) in sent.iter() {
        if member(s) {
            members.entry(s.group_key.as_str()).or_default().push(*fp);
        }
    }
    let mut flushed: Vec<(String, Vec<u64>)> = Vec::new();
    let mut empty: Vec<String> = Vec::new();
    for (key, g) in groups.iter_mut() {
        let fps = members.get(key.as_str()).cloned().unwrap_or_default();
        let any_unacked = fps
            .iter()
            .any(|fp| sent.get(fp).is_some_and(|s| !acked(*fp, s.fired_ms)));
        if !due(g, t_ms, any_unacked) {
            continue;
        }
        let mut alerts: Vec<Out> = fps
            .iter()
            .filter_map(|fp| sent.get(fp).map(|s| super::firing_out(*fp, s)))
            .collect();
        alerts.extend(std::mem::take(&mut g.resolved).into_iter().map(|r| Out {
            fp: r.fp,
            status: "resolved",
            labels: r.labels,
            annotations: r.annotations,
            starts_ms: r.starts_ms,
            ends_ms: Some(r.ends_ms),
        }));
        g.dirty = false;
        g.urgent = false;
        g.flushed_ms = Some(t_ms);
        g.sent_severity = fps
            .iter()
            .filter_map(|fp| sent.get(fp).map(|s| s.severity))
            .min()
            .unwrap_or(0);
        if fps.is_empty() {
            // Nothing fires any more: this was the group's last notification.
            empty.push(key.clone());
        }
        if alerts.is_empty() {
            continue;
        }
        let status = if fps.is_empty() { "resolved" } else { "firing" };
        for chunk in alerts.chunks(GROUP_ALERTS_MAX) {
            out.push(Planned {
                receiver: receiver.to_string(),
                group_key: key.clone(),
                group_labels: g.labels.clone(),
                status,
                alerts: chunk.to_vec(),
            });
        }
        flushed.push((key.clone(), fps));
    }
    for (_, fps) in &flushed {
        for fp in fps {
            if let Some(s) = sent.get_mut(fp) {
                super::mark_sent(s, t_ms);
            }
        }
    }
    for key in empty {
        let still = sent
            .values()
            .any(|s| s.group_key == key && s.timing.timed());
        if !still {
            groups.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_inherit_down_the_tree() {
        let top = Timing::inherit(
            "route 0",
            Timing::default(),
            [&Some("30s".into()), &Some("5m".into()), &Some("4h".into())],
        )
        .unwrap();
        assert_eq!(
            top,
            Timing {
                wait_ms: 30_000,
                interval_ms: 300_000,
                repeat_ms: Some(14_400_000)
            }
        );
        let child = Timing::inherit("route 0.0", top, [&Some("0s".into()), &None, &None]).unwrap();
        assert_eq!(child.wait_ms, 0);
        assert_eq!(child.interval_ms, 300_000);
        assert_eq!(child.repeat_ms, Some(14_400_000));
        let e = Timing::inherit("route 0.1", top, [&None, &None, &Some("0s".into())]).unwrap_err();
        assert_eq!(e, "route 0.1 repeat_interval: must be longer than 0");
    }
}
