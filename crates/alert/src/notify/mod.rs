//! Notifications that are never lost: one worker per receiver, each a named subscriber
//! (`notify.<receiver>`) of the alert journal. A worker reads the records in order, plans the
//! notifications they call for (routing, grouping, maintenance, flapping, reminders,
//! escalation), delivers each — retrying, then handing it to the fallback receiver — and only
//! then saves its state and advances its checkpoint. A crash re-sends what the last batch sent,
//! with the same idempotency keys; it never skips a planned notification. The journal is the
//! queue: a receiver that is down holds its worker (and no other), bounded by the disk.
//!
//! Planning reads only the record and the worker's saved state, plus acknowledgements, so a
//! re-read batch plans the same notifications with the same keys. Time is the records' period
//! ends: reminders, escalation and the end of a maintenance window are seen at the next Cycle
//! record (each evaluation period).

pub mod config;
pub mod contacts;
pub mod send;
// ---- routing side: grouping timers, inhibition, windows, alertmanager.yml ----
pub mod amconfig;
pub mod group;
pub mod inhibit;
pub mod matcher;
pub mod simulate;
pub mod window;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::record::Record;
use crate::state::State;
use crate::util::{fnv1a, rfc3339};

pub use config::Config;
use config::{Receiver, Target};
use send::{Outcome, Sender};

/// Journal subscriber names start with this, then the receiver's name.
pub const SUBSCRIBER_PREFIX: &str = "notify.";
/// Deliveries kept in memory for the delivery-history API.
pub const DELIVERY_LOG_MAX: usize = 10_000;
/// Alerts one delivery carries at most; a larger group is split.
pub const GROUP_ALERTS_MAX: usize = 1_000;
/// How many fallback hops a delivery may take (a fallback's own fallback, …).
const FALLBACK_HOPS_MAX: usize = 3;
/// A worker saves its progress this often while delivering (or, when saving a large state
/// takes long, after ten times as long as the last save took, so that saving stays under a
/// tenth of the work, up to `SAVE_INTERVAL_MAX`), so that a crash re-sends little and a long batch still moves forward
/// across repeated crashes.
const SAVE_INTERVAL_MS: u64 = 50;
const SAVE_SHARE_INVERSE: u32 = 10;
/// The longest interval between saves: a crash re-sends at most this much delivery work.
const SAVE_INTERVAL_MAX: Duration = Duration::from_millis(250);
/// How long a worker waits for new records before looking again.
const IDLE_MS: u64 = 200;
/// Sleeps are cut into slices this long so that stopping is quick.
const SLEEP_SLICE_MS: u64 = 50;

/// What a notifier needs of the engine that owns it: the alert journal and whether to stop.
pub trait Host: Send + Sync {
    fn journal(&self) -> &journal::Journal;
    fn stopping(&self) -> bool;
}

/// An acknowledgement: no reminders or escalation for this firing episode (until `until_ms`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub fp: u64,
    /// The episode acknowledged: a re-fire after resolve pages again.
    pub fired_ms: i64,
    pub at_ms: i64,
    pub until_ms: Option<i64>,
    pub by: String,
    pub note: String,
}

impl Ack {
    fn covers(&self, fired_ms: i64, t_ms: i64) -> bool {
        self.fired_ms == fired_ms && self.until_ms.is_none_or(|u| t_ms < u)
    }
}

/// One delivery as the delivery-history API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Delivered {
    pub receiver: String,
    /// The receiver that planned it (differs for escalation and fallback).
    pub via: String,
    pub key: String,
    pub group_key: String,
    pub status: String,
    pub fps: Vec<String>,
    pub t_ms: i64,
    pub attempts: u32,
    /// `delivered`, `fallback` (this receiver failed; the fallback's entry follows) or
    /// `dropped` (failed permanently with no fallback).
    pub outcome: String,
    pub error: Option<String>,
}

/// What a worker remembers of one alert instance it notified about.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Sent {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    group_key: String,
    group_labels: BTreeMap<String, String>,
    fired_ms: i64,
    severity: u8,
    firing_sent: bool,
    sent_severity: u8,
    last_sent_ms: i64,
    reminders: u32,
    muted: bool,
    flap_sent: bool,
    /// Escalation receivers that got the firing notification (they get the resolve too).
    escalated: Vec<String>,
    /// Its route's timers (timed: notified with its group, notify/group.rs).
    #[serde(default)]
    timing: group::Timing,
    /// Suppressed by a dependency: not part of its group's notifications.
    #[serde(default)]
    held: bool,
    /// The acknowledgement was sent (contacts that track acknowledgements).
    #[serde(default)]
    ack_sent: bool,
}

/// A worker's saved state: the journal offset it covers and what it notified.
#[derive(Clone, Default, Serialize, Deserialize)]
struct WorkerState {
    /// The next record to read.
    offset: u64,
    /// Deliveries of record `offset` already accepted (`sent` is as before that record, so
    /// planning it again gives the same list, and these are skipped).
    #[serde(default)]
    skip: u64,
    sent: BTreeMap<u64, Sent>,
    /// Aggregation groups of timed routes, by group key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    groups: BTreeMap<String, group::Group>,
    /// Labels of every firing alert, kept only when there are inhibit rules.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    firing: BTreeMap<u64, BTreeMap<String, String>>,
}

/// One planned notification: a group of alerts for one receiver.
#[derive(Clone, Debug)]
struct Planned {
    receiver: String,
    group_key: String,
    group_labels: BTreeMap<String, String>,
    status: &'static str,
    alerts: Vec<Out>,
}

#[derive(Clone, Debug)]
struct Out {
    fp: u64,
    status: &'static str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    starts_ms: i64,
    ends_ms: Option<i64>,
}

/// The notification side of the engine: configuration, acknowledgements, delivery history.
pub struct Notifier {
    config: Arc<Config>,
    dir: PathBuf,
    acks: Mutex<BTreeMap<u64, Ack>>,
    /// Maintenance windows made through the API (`windows.json`), beside the file's.
    windows: Mutex<Vec<window::Window>>,
    log: Mutex<VecDeque<Delivered>>,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn io(what: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", what.display())
}

fn labels_map(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    pairs.iter().cloned().collect()
}

fn group_key(route: &str, receiver: &str, labels: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{receiver}/{route}:{{{}}}", inner.join(","))
}

impl Notifier {
    /// Opens `<alerts>/notify` and the acknowledgements saved there.
    pub fn open(config: Arc<Config>, alerts_dir: &Path) -> Result<Notifier, String> {
        let dir = alerts_dir.join("notify");
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let path = dir.join("acks.json");
        let acks = match std::fs::read(&path) {
            Ok(b) => {
                let list: Vec<Ack> = serde_json::from_slice(&b).map_err(|e| io(&path, e))?;
                list.into_iter().map(|a| (a.fp, a)).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(io(&path, e)),
        };
        let in_file = |name: &str| config.maintenance.iter().any(|m| m.name() == name);
        let windows = window::load_api_windows(&dir.join(window::API_WINDOWS_FILE), &in_file)?;
        Ok(Notifier {
            config,
            dir,
            acks: Mutex::new(acks),
            windows: Mutex::new(windows),
            log: Mutex::new(VecDeque::new()),
            delivered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The journal subscribers this configuration needs.
    pub fn subscriber_names(&self) -> Vec<String> {
        self.config
            .receivers
            .iter()
            .map(|r| format!("{SUBSCRIBER_PREFIX}{}", r.name))
            .collect()
    }

    /// Acknowledges a firing episode; durable before this returns.
    pub fn ack(&self, a: Ack) -> Result<(), String> {
        let mut acks = lock(&self.acks);
        // Acknowledgements of episodes long over are dropped as new ones come in.
        if acks.len() >= crate::rule::RULESETS_MAX * 100 {
            let oldest = acks.values().min_by_key(|a| a.at_ms).map(|a| a.fp);
            if let Some(fp) = oldest {
                acks.remove(&fp);
            }
        }
        acks.insert(a.fp, a);
        self.save_acks(&acks)
    }

    /// Removes an acknowledgement; false when there was none.
    pub fn unack(&self, fp: u64) -> Result<bool, String> {
        let mut acks = lock(&self.acks);
        let had = acks.remove(&fp).is_some();
        if had {
            self.save_acks(&acks)?;
        }
        Ok(had)
    }

    pub fn acks(&self) -> Vec<Ack> {
        lock(&self.acks).values().cloned().collect()
    }

    fn save_acks(&self, acks: &BTreeMap<u64, Ack>) -> Result<(), String> {
        let list: Vec<&Ack> = acks.values().collect();
        let bytes = serde_json::to_vec(&list).map_err(|e| e.to_string())?;
        let path = self.dir.join("acks.json");
        write_atomic(&path, &bytes).map_err(|e| io(&path, e))
    }

    // ---- maintenance windows by API (notify/window.rs) ----

    /// Creates or replaces the API window of this name; durable before this returns. Err names
    /// what is wrong (a file window of the same name cannot be replaced).
    pub fn put_window(&self, spec: window::WindowSpec) -> Result<bool, String> {
        let w = window::Window::parse(spec)?;
        if self.config.maintenance.iter().any(|m| m.name() == w.name()) {
            return Err(format!(
                "maintenance '{}' is defined in the configuration file (read-only)",
                w.name()
            ));
        }
        let mut ws = lock(&self.windows);
        let replaced = match ws.iter_mut().find(|x| x.name() == w.name()) {
            Some(x) => {
                *x = w;
                true
            }
            None => {
                if ws.len() >= config::MAINTENANCE_MAX {
                    return Err(format!(
                        "at most {} maintenance windows",
                        config::MAINTENANCE_MAX
                    ));
                }
                ws.push(w);
                false
            }
        };
        window::save_api_windows(&self.dir.join(window::API_WINDOWS_FILE), &ws)?;
        Ok(replaced)
    }

    /// Removes an API window; false when there was none of that name.
    pub fn delete_window(&self, name: &str) -> Result<bool, String> {
        let mut ws = lock(&self.windows);
        let before = ws.len();
        ws.retain(|w| w.name() != name);
        if ws.len() == before {
            return Ok(false);
        }
        window::save_api_windows(&self.dir.join(window::API_WINDOWS_FILE), &ws)?;
        Ok(true)
    }

    /// Every window: (window, from the API).
    pub fn windows(&self) -> Vec<(window::Window, bool)> {
        let mut out: Vec<(window::Window, bool)> = self
            .config
            .maintenance
            .iter()
            .map(|w| (w.clone(), false))
            .collect();
        out.extend(lock(&self.windows).iter().map(|w| (w.clone(), true)));
        out
    }

    /// The acknowledgement covering this firing episode at `t_ms`, if any.
    pub fn ack_of(&self, fp: u64, fired_ms: i64, t_ms: i64) -> Option<Ack> {
        lock(&self.acks)
            .get(&fp)
            .filter(|a| a.covers(fired_ms, t_ms))
            .cloned()
    }

    /// The names of the windows (file and API) muting an alert with these labels at `t_ms`.
    pub fn muted_by(
        &self,
        t_ms: i64,
        labels: &BTreeMap<String, String>,
        severity: u8,
    ) -> Vec<String> {
        self.windows()
            .iter()
            .filter(|(w, _)| w.mutes(t_ms, labels, severity))
            .map(|(w, _)| w.name().to_string())
            .collect()
    }

    fn acked(&self, fp: u64, fired_ms: i64, t_ms: i64) -> bool {
        lock(&self.acks)
            .get(&fp)
            .is_some_and(|a| a.covers(fired_ms, t_ms))
    }

    /// Recent deliveries, oldest first, of one instance (`fp`) or all.
    pub fn deliveries(&self, fp: Option<u64>) -> Vec<Delivered> {
        let want = fp.map(|f| format!("{f:016x}"));
        lock(&self.log)
            .iter()
            .filter(|d| want.as_ref().is_none_or(|w| d.fps.contains(w)))
            .cloned()
            .collect()
    }

    /// (delivered, dropped) since start.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.delivered.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }

    fn remember(&self, d: Delivered) {
        let mut log = lock(&self.log);
        if log.len() >= DELIVERY_LOG_MAX {
            log.pop_front();
        }
        log.push_back(d);
    }

    // ---- planning ----

    fn dest_for(&self, recv: &str, labels: &BTreeMap<String, String>) -> Option<config::Dest> {
        self.config
            .route
            .route(labels)
            .into_iter()
            .find(|d| d.receiver == recv)
    }

    /// The notifications one record calls for from `recv`'s point of view; updates `st`.
    fn plan(&self, recv: &Receiver, st: &mut WorkerState, r: &Record) -> Vec<Planned> {
        let mut out = Vec::new();
        match r {
            Record::Eval(e) => {
                if !self.config.inhibit.is_empty() {
                    // Inhibition looks at every firing alert, not only this receiver's.
                    for u in &e.updates {
                        let i = &u.instance;
                        if matches!(i.state, State::Firing | State::Recovering) {
                            st.firing.insert(i.fp, labels_map(&i.labels));
                        } else {
                            st.firing.remove(&i.fp);
                        }
                    }
                }
                for u in &e.updates {
                    self.plan_update(recv, st, e.t_ms, &u.instance, &mut out);
                }
                self.flush_groups(recv, st, e.t_ms, &mut out);
            }
            Record::Cycle(c) => {
                for &(fp, state, _) in &c.active {
                    if matches!(state, State::Firing | State::Recovering) {
                        self.plan_cycle(recv, st, c.t_ms, fp, &mut out);
                    }
                }
                self.flush_groups(recv, st, c.t_ms, &mut out);
            }
            Record::Forget(f) => {
                for fp in &f.fps {
                    st.firing.remove(fp);
                    if let Some(s) = st.sent.remove(fp) {
                        self.resolve_sent(&s, *fp, f.t_ms, &recv.name, &mut st.groups, &mut out);
                    }
                }
                self.flush_groups(recv, st, f.t_ms, &mut out);
            }
        }
        out
    }

    /// A firing alert that needs notifying: at once on an untimed route, else at its group's
    /// next notification.
    fn notify_firing(
        groups: &mut BTreeMap<String, group::Group>,
        recv: &str,
        fp: u64,
        s: &mut Sent,
        t_ms: i64,
        out: &mut Vec<Planned>,
    ) {
        if s.timing.timed() {
            group::touch(groups, s, t_ms);
        } else {
            let a = firing_out(fp, s);
            push(out, recv, s, "firing", a);
            mark_sent(s, t_ms);
        }
    }

    fn resolve_sent(
        &self,
        s: &Sent,
        fp: u64,
        t_ms: i64,
        recv: &str,
        groups: &mut BTreeMap<String, group::Group>,
        out: &mut Vec<Planned>,
    ) {
        if s.timing.timed() && s.firing_sent {
            group::resolved(groups, s, fp, t_ms);
            // Escalation receivers got it at once: they get the resolve at once too.
            let escalated = Sent {
                firing_sent: true,
                ..s.clone()
            };
            resolve_escalated(&escalated, fp, t_ms, out);
            return;
        }
        if s.timing.timed() {
            // Never notified (still waiting for group_wait): its group may have nothing left.
            group::touch(groups, s, t_ms);
            return;
        }
        resolve(s, fp, t_ms, recv, out);
    }

    fn flush_groups(
        &self,
        recv: &Receiver,
        st: &mut WorkerState,
        t_ms: i64,
        out: &mut Vec<Planned>,
    ) {
        let acked = |fp: u64, fired_ms: i64| self.acked(fp, fired_ms, t_ms);
        group::flush(&mut st.groups, &mut st.sent, &recv.name, t_ms, &acked, out);
    }

    /// Held back: by a maintenance window (file or API) or an inhibit rule.
    fn held(
        &self,
        firing: &BTreeMap<u64, BTreeMap<String, String>>,
        t_ms: i64,
        fp: u64,
        labels: &BTreeMap<String, String>,
        severity: u8,
    ) -> bool {
        self.config.muted_by(t_ms, labels, severity).is_some()
            || lock(&self.windows)
                .iter()
                .any(|w| w.mutes(t_ms, labels, severity))
            || inhibit::inhibited_by(&self.config.inhibit, firing, fp, labels).is_some()
    }

    fn plan_update(
        &self,
        recv: &Receiver,
        st: &mut WorkerState,
        t_ms: i64,
        i: &crate::state::Instance,
        out: &mut Vec<Planned>,
    ) {
        let labels = labels_map(&i.labels);
        let firing = matches!(i.state, State::Firing | State::Recovering);
        if !firing {
            // Flapping: quiet until it stops, resolves included.
            let quiet = i.flapping && st.sent.get(&i.fp).is_some_and(|s| s.flap_sent);
            if quiet {
                return;
            }
            if let Some(s) = st.sent.remove(&i.fp) {
                self.resolve_sent(&s, i.fp, t_ms, &recv.name, &mut st.groups, out);
            }
            return;
        }
        let s = match st.sent.entry(i.fp) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let Some(d) = self.dest_for(&recv.name, &labels) else {
                    return;
                };
                v.insert(Sent {
                    group_key: group_key(&d.route, &recv.name, &d.group_labels),
                    group_labels: d.group_labels,
                    timing: d.timing,
                    ..Sent::default()
                })
            }
        };
        if s.fired_ms != i.fired_ms && s.firing_sent {
            // A new episode without a resolve in between (a restart's catch-up).
            s.firing_sent = false;
            s.escalated.clear();
            s.reminders = 0;
            s.ack_sent = false;
        }
        s.labels = labels;
        s.annotations = labels_map(&i.annotations);
        s.fired_ms = i.fired_ms;
        s.severity = i.severity;
        s.held = i.suppressed;
        if i.suppressed {
            return;
        }
        if self.held(&st.firing, t_ms, i.fp, &s.labels, i.severity) {
            s.muted = true;
            return;
        }
        s.muted = false;
        if i.flapping {
            // One "flapping" notification, then quiet until it stops.
            if !s.flap_sent {
                s.flap_sent = true;
                let mut a = firing_out(i.fp, s);
                a.annotations.insert("flapping".into(), "true".into());
                push(out, &recv.name, s, "firing", a);
                mark_sent(s, t_ms);
            }
            return;
        }
        let flap_over = std::mem::take(&mut s.flap_sent);
        if flap_over || !s.firing_sent || s.sent_severity != i.severity {
            Self::notify_firing(&mut st.groups, &recv.name, i.fp, s, t_ms, out);
            s.reminders = 0;
        }
    }

    fn plan_cycle(
        &self,
        recv: &Receiver,
        st: &mut WorkerState,
        t_ms: i64,
        fp: u64,
        out: &mut Vec<Planned>,
    ) {
        let Some(s) = st.sent.get_mut(&fp) else {
            return;
        };
        if s.muted {
            // The window ended (or the inhibiting alert resolved) with the alert still
            // firing: notify now.
            if !self.held(&st.firing, t_ms, fp, &s.labels, s.severity) {
                s.muted = false;
                Self::notify_firing(&mut st.groups, &recv.name, fp, s, t_ms, out);
            }
            return;
        }
        if !s.firing_sent || s.flap_sent {
            return;
        }
        let acked = self.acked(fp, s.fired_ms, t_ms);
        // ---- contacts: PagerDuty and VictorOps are told of acknowledgements ----
        let tracks_acks = matches!(&recv.target, Target::Contact(k) if k.wants_acks());
        if acked && tracks_acks && !s.ack_sent {
            s.ack_sent = true;
            let a = firing_out(fp, s);
            push(out, &recv.name, s, "acknowledged", a);
        }
        let resend = matches!(recv.target, Target::Alertmanager(_))
            && t_ms - s.last_sent_ms >= recv.resend_ms;
        let remind = !acked
            && recv.reminders_ms.last().is_some_and(|last| {
                let delay = recv.reminders_ms.get(s.reminders as usize).unwrap_or(last);
                t_ms - s.last_sent_ms >= *delay
            });
        if remind || resend {
            if remind {
                s.reminders += 1;
            }
            let a = firing_out(fp, s);
            push(out, &recv.name, s, "firing", a);
            mark_sent(s, t_ms);
        }
        if !acked {
            if let Some((after, to)) = recv.escalate.get(s.escalated.len()) {
                if t_ms - s.fired_ms >= *after {
                    let a = firing_out(fp, s);
                    push(out, to, s, "firing", a);
                    s.escalated.push(to.clone());
                }
            }
        }
    }

    // ---- delivery ----

    fn body(&self, recv: &Receiver, p: &Planned, key: &str, via: &str) -> Vec<u8> {
        let alert = |a: &Out| {
            json!({
                "status": a.status,
                "labels": a.labels,
                "annotations": a.annotations,
                "startsAt": rfc3339(a.starts_ms),
                "endsAt": a.ends_ms.map_or("0001-01-01T00:00:00Z".to_string(), rfc3339),
                "generatorURL": "",
                "fingerprint": format!("{:016x}", a.fp),
            })
        };
        let v: Value = match &recv.target {
            Target::Alertmanager(_) => Value::Array(
                p.alerts
                    .iter()
                    .map(|a| {
                        json!({
                            "labels": a.labels,
                            "annotations": a.annotations,
                            "startsAt": rfc3339(a.starts_ms),
                            // Firing: valid for four resends, as Prometheus does, so that
                            // Alertmanager resolves it by itself if Strata goes away.
                            "endsAt": rfc3339(a.ends_ms.unwrap_or_else(|| {
                                crate::util::wall_ms() + 4 * recv.resend_ms
                            })),
                            "generatorURL": "",
                        })
                    })
                    .collect(),
            ),
            _ => {
                let common = |f: &dyn Fn(&Out) -> &BTreeMap<String, String>| {
                    let mut c = p.alerts.first().map(|a| f(a).clone()).unwrap_or_default();
                    for a in &p.alerts[1..] {
                        c.retain(|k, v| f(a).get(k) == Some(v));
                    }
                    c
                };
                json!({
                    "version": "4",
                    "groupKey": p.group_key,
                    "idempotencyKey": key,
                    "truncatedAlerts": 0,
                    "status": p.status,
                    "receiver": p.receiver,
                    "via": via,
                    "groupLabels": p.group_labels,
                    "commonLabels": common(&|a| &a.labels),
                    "commonAnnotations": common(&|a| &a.annotations),
                    "externalURL": "",
                    "alerts": p.alerts.iter().map(alert).collect::<Vec<_>>(),
                })
            }
        };
        v.to_string().into_bytes()
    }

    /// Delivers `p` to its receiver, retrying; on permanent failure or after `give_up_after`
    /// hands it to the fallback. Err only when the engine is stopping (nothing is committed).
    fn deliver(
        &self,
        engine: &dyn Host,
        sender: &Sender,
        p: &Planned,
        key: &str,
        via: &str,
    ) -> Result<(), ()> {
        let mut target_name = p.receiver.clone();
        for _hop in 0..=FALLBACK_HOPS_MAX {
            let Some(recv) = self.config.receiver(&target_name) else {
                break;
            };
            let body = self.body(recv, p, key, via);
            let started = Instant::now();
            let mut backoff_ms = recv.retry_initial_ms;
            let mut attempts = 0u32;
            let failure = loop {
                attempts += 1;
                match sender.send(&recv.target, key, &body) {
                    Outcome::Accepted => {
                        self.delivered.fetch_add(1, Ordering::Relaxed);
                        self.remember(self.entry(
                            p,
                            &target_name,
                            via,
                            key,
                            attempts,
                            "delivered",
                            None,
                        ));
                        return Ok(());
                    }
                    Outcome::Permanent(why) => break why,
                    Outcome::Transient(why) => {
                        let waited = started.elapsed().as_millis() as i64;
                        if recv.fallback.is_some() && waited >= recv.give_up_after_ms {
                            break why;
                        }
                        if attempts == 1 || attempts.is_power_of_two() {
                            tracing::warn!(receiver = %target_name, attempts, error = %why, "notification not accepted; retrying");
                        }
                        if !sleep(engine, backoff_ms) {
                            return Err(());
                        }
                        backoff_ms = (backoff_ms * 2).min(recv.retry_max_ms);
                    }
                }
            };
            match &recv.fallback {
                Some(fb) => {
                    tracing::warn!(receiver = %target_name, fallback = %fb, error = %failure, "notification handed to the fallback receiver");
                    self.remember(self.entry(
                        p,
                        &target_name,
                        via,
                        key,
                        attempts,
                        "fallback",
                        Some(failure),
                    ));
                    target_name = fb.clone();
                }
                None => {
                    tracing::error!(receiver = %target_name, error = %failure, "notification dropped: failed permanently and the receiver has no fallback");
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    self.remember(self.entry(
                        p,
                        &target_name,
                        via,
                        key,
                        attempts,
                        "dropped",
                        Some(failure),
                    ));
                    return Ok(());
                }
            }
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn entry(
        &self,
        p: &Planned,
        receiver: &str,
        via: &str,
        key: &str,
        attempts: u32,
        outcome: &str,
        error: Option<String>,
    ) -> Delivered {
        Delivered {
            receiver: receiver.into(),
            via: via.into(),
            key: key.into(),
            group_key: p.group_key.clone(),
            status: p.status.into(),
            fps: p.alerts.iter().map(|a| format!("{:016x}", a.fp)).collect(),
            t_ms: crate::util::wall_ms(),
            attempts,
            outcome: outcome.into(),
            error,
        }
    }

    // ---- workers ----

    fn state_path(&self, recv: &str) -> PathBuf {
        self.dir.join(format!("{recv}.state.json"))
    }

    fn load_state(&self, recv: &str) -> Result<Option<WorkerState>, String> {
        let path = self.state_path(recv);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| io(&path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    fn save_state(&self, recv: &str, st: &WorkerState) -> Result<(), String> {
        let bytes = serde_json::to_vec(st).map_err(|e| e.to_string())?;
        let path = self.state_path(recv);
        write_atomic(&path, &bytes).map_err(|e| io(&path, e))
    }

    /// Opens the worker of receiver `recv` at its saved state.
    pub fn worker(&self, engine: &dyn Host, recv: &str) -> Result<Worker, String> {
        let receiver = self
            .config
            .receiver(recv)
            .ok_or_else(|| format!("no receiver '{recv}'"))?
            .clone();
        let mut sub = engine
            .journal()
            .subscriber(&format!("{SUBSCRIBER_PREFIX}{recv}"))
            .map_err(|e| format!("alert journal: {e}"))?;
        let state = match self.load_state(recv)? {
            // Saved past the checkpoint (a crash between the two): the state file rules.
            Some(s) if s.offset != sub.checkpoint() => {
                sub.seek(s.offset)
                    .map_err(|e| format!("alert journal: {e}"))?;
                // The checkpoint follows now: waiting for the next record would show a lag
                // that is not there and keep journal segments the worker is done with.
                sub.commit_offset(s.offset)
                    .map_err(|e| format!("alert journal: {e}"))?;
                s
            }
            Some(s) => s,
            None => WorkerState {
                offset: sub.checkpoint(),
                ..WorkerState::default()
            },
        };
        Ok(Worker {
            sender: Sender::new(receiver.timeout_ms),
            receiver,
            sub,
            state,
            batch: journal::Batch::new(),
        })
    }

    /// Reads, plans and delivers the next batch of records; saves and commits after.
    /// Returns the records read (0: nothing new). Err: stopping or a journal failure.
    pub fn run_once(&self, engine: &dyn Host, w: &mut Worker) -> Result<usize, String> {
        let Worker {
            receiver,
            sender,
            sub,
            state,
            batch,
        } = w;
        let n = sub
            .next_batch(batch)
            .map_err(|e| format!("alert journal: {e}"))?;
        if n == 0 {
            return Ok(0);
        }
        let mut end = state.offset;
        let mut saved = Instant::now();
        let mut interval = Duration::from_millis(SAVE_INTERVAL_MS);
        for (offset, payload) in batch.iter() {
            end = offset + 1;
            if offset < state.offset {
                continue;
            }
            let Ok(r) = Record::decode(payload) else {
                continue;
            };
            let skip = if offset == state.offset {
                std::mem::take(&mut state.skip)
            } else {
                0
            };
            let before = state.clone();
            let planned = self.plan(receiver, state, &r);
            let keys: Vec<String> = planned
                .iter()
                .enumerate()
                .map(|(idx, p)| {
                    format!(
                        "{:016x}",
                        fnv1a(&[
                            p.group_key.as_bytes(),
                            p.receiver.as_bytes(),
                            &offset.to_le_bytes(),
                            &(idx as u64).to_le_bytes(),
                        ])
                    )
                })
                .collect();
            // Pipelined (send.rs): `done` deliveries from the start are accepted.
            let from = (skip as usize).min(planned.len());
            self.deliver_all(
                engine,
                sender,
                &planned,
                &keys,
                from,
                &receiver.name,
                |done| {
                    if saved.elapsed() < interval || done >= planned.len() {
                        return Ok(());
                    }
                    // Mid-record: the state before it, and how many of its deliveries are done.
                    let progress = WorkerState {
                        offset,
                        skip: done as u64,
                        ..before.clone()
                    };
                    let t = Instant::now();
                    self.commit(&receiver.name, sub, &progress)?;
                    interval = interval
                        .max(t.elapsed() * SAVE_SHARE_INVERSE)
                        .min(SAVE_INTERVAL_MAX);
                    saved = Instant::now();
                    Ok(())
                },
            )?;
            if saved.elapsed() >= interval {
                let t = Instant::now();
                state.offset = end;
                let st = std::mem::take(state);
                let r = self.commit(&receiver.name, sub, &st);
                *state = st;
                r?;
                interval = interval
                    .max(t.elapsed() * SAVE_SHARE_INVERSE)
                    .min(SAVE_INTERVAL_MAX);
                saved = Instant::now();
            }
        }
        state.offset = end;
        state.skip = 0;
        let st = std::mem::take(state);
        let r = self.commit(&receiver.name, sub, &st);
        *state = st;
        r?;
        Ok(n)
    }

    /// Saves `st` and moves the subscriber's checkpoint to its offset.
    fn commit(
        &self,
        recv: &str,
        sub: &mut journal::Subscriber,
        st: &WorkerState,
    ) -> Result<(), String> {
        self.save_state(recv, st)?;
        sub.commit_offset(st.offset)
            .map_err(|e| format!("alert journal: {e}"))
    }

    /// One thread per receiver, until the engine stops.
    pub fn start(self: &Arc<Self>, engine: &Arc<dyn Host>) -> Vec<std::thread::JoinHandle<()>> {
        let mut out = Vec::new();
        for r in &self.config.receivers {
            let (me, engine, name) = (self.clone(), engine.clone(), r.name.clone());
            let t = std::thread::Builder::new()
                .name(format!("strata-notify-{name}"))
                .spawn(move || me.worker_loop(&*engine, &name));
            match t {
                Ok(t) => out.push(t),
                Err(e) => tracing::error!(receiver = %r.name, error = %e, "notifier not started"),
            }
        }
        out
    }

    fn worker_loop(&self, engine: &dyn Host, name: &str) {
        let mut w = match self.worker(engine, name) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(receiver = %name, error = %e, "notifier cannot start");
                return;
            }
        };
        while !engine.stopping() {
            match self.run_once(engine, &mut w) {
                Ok(0) => {
                    sleep(engine, IDLE_MS as i64);
                }
                Ok(_) => {}
                Err(e) => {
                    if engine.stopping() {
                        return;
                    }
                    tracing::warn!(receiver = %name, error = %e, "notifier failed; reading again from its checkpoint");
                    match self.worker(engine, name) {
                        Ok(again) => w = again,
                        Err(e) => {
                            tracing::warn!(receiver = %name, error = %e, "notifier reopen failed")
                        }
                    }
                    sleep(engine, 1_000);
                }
            }
        }
    }
}

/// A receiver's reading position, state and HTTP client.
pub struct Worker {
    receiver: Receiver,
    sender: Sender,
    sub: journal::Subscriber,
    state: WorkerState,
    batch: journal::Batch,
}

/// Sleeps `ms` unless the engine stops first; false when it did.
fn sleep(engine: &dyn Host, ms: i64) -> bool {
    let until = Instant::now() + Duration::from_millis(ms.max(0) as u64);
    loop {
        if engine.stopping() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(SLEEP_SLICE_MS)));
    }
}

fn firing_out(fp: u64, s: &Sent) -> Out {
    Out {
        fp,
        status: "firing",
        labels: s.labels.clone(),
        annotations: s.annotations.clone(),
        starts_ms: s.fired_ms,
        ends_ms: None,
    }
}

fn mark_sent(s: &mut Sent, t_ms: i64) {
    s.firing_sent = true;
    s.sent_severity = s.severity;
    s.last_sent_ms = t_ms;
}

fn resolved_out(s: &Sent, fp: u64, t_ms: i64) -> Out {
    Out {
        fp,
        status: "resolved",
        labels: s.labels.clone(),
        annotations: s.annotations.clone(),
        starts_ms: s.fired_ms,
        ends_ms: Some(t_ms),
    }
}

/// Resolves go to every receiver that got the firing notification.
fn resolve(s: &Sent, fp: u64, t_ms: i64, recv: &str, out: &mut Vec<Planned>) {
    if !s.firing_sent {
        return;
    }
    push(out, recv, s, "resolved", resolved_out(s, fp, t_ms));
    resolve_escalated(s, fp, t_ms, out);
}

fn resolve_escalated(s: &Sent, fp: u64, t_ms: i64, out: &mut Vec<Planned>) {
    for to in &s.escalated {
        push(out, to, s, "resolved", resolved_out(s, fp, t_ms));
    }
}

/// Adds `a` to the record's notification for (receiver, group, status), or starts one.
fn push(out: &mut Vec<Planned>, receiver: &str, s: &Sent, status: &'static str, a: Out) {
    let same = out.iter_mut().find(|p| {
        p.receiver == receiver
            && p.group_key == s.group_key
            && p.status == status
            && p.alerts.len() < GROUP_ALERTS_MAX
    });
    match same {
        Some(p) => p.alerts.push(a),
        None => out.push(Planned {
            receiver: receiver.into(),
            group_key: s.group_key.clone(),
            group_labels: s.group_labels.clone(),
            status,
            alerts: vec![a],
        }),
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
