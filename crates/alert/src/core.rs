//! One evaluation cycle over every ruleset due at a period end, as proposals; and applying
//! records (live after the journal acknowledged them, or when restoring).
//!
//! `Core::propose` reads the store and the current instances and returns the records the cycle
//! makes plus the instances it would leave behind; nothing changes until `Core::apply`. Live
//! evaluation, backtests and test files all run this, so the same data gives the same records.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use store::Store;

use crate::cond::{Ctx, Windowed};
use crate::observe::{self, Obs, Tags};
use crate::record::{
    Cycle, Eval, Forget, Record, Update, CYCLE_ACTIVE_MAX, EVAL_PART_BYTES_MAX, FLAG_EAGER,
    FLAG_PART,
};
use crate::rule::{Kind, Level, NoData, Ruleset};
use crate::sources::Tracker;
use crate::state::{step, step_eager, Instance, State, Timing, Verdict};
use crate::template::Render;
use crate::util::fnv1a;

/// Instances kept in memory at most; past it new instances are not created (the ruleset
/// reports it) so memory stays bounded.
pub const INSTANCES_MAX: usize = 1_000_000;
/// An instance whose stream has been gone (nodata) this long is cleared and forgotten.
pub const NODATA_FORGET_MS: i64 = 86_400_000;

/// The fingerprint of `stream` under `ruleset`: stable across restarts, reloads and versions.
pub fn fingerprint(ruleset: &str, stream: &str) -> u64 {
    fnv1a(&[ruleset.as_bytes(), stream.as_bytes()])
}

/// How a ruleset's last evaluation went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    pub last_t_ms: i64,
    pub duration_ns: u64,
    pub error: Option<String>,
    pub instances: usize,
}

/// The rulesets, the instances and each ruleset's progress.
#[derive(Default)]
pub struct Core {
    rulesets: Vec<Arc<Ruleset>>,
    pub instances: HashMap<u64, Instance>,
    by_ruleset: HashMap<String, BTreeSet<u64>>,
    active: HashSet<u64>,
    /// Newest period end evaluated, per ruleset.
    pub progress: HashMap<String, i64>,
    pub last_cycle_ms: i64,
    pub health: HashMap<String, Health>,
    /// Push sources, when the built-in rule runs (live only).
    pub tracker: Option<Tracker>,
    /// Series selections kept between cycles.
    cache: observe::Cache,
}

/// A cycle's records and the instances it leaves (`None`: forgotten).
pub struct Proposal {
    pub t_ms: i64,
    pub records: Vec<Record>,
    staged: HashMap<u64, Option<Instance>>,
    evaluated: Vec<String>,
    health: Vec<(String, Health)>,
}

impl Proposal {
    /// Every update the cycle makes.
    pub fn updates(&self) -> impl Iterator<Item = (&Eval, &Update)> {
        self.records.iter().flat_map(|r| match r {
            Record::Eval(e) => e.updates.iter().map(move |u| (e, u)).collect::<Vec<_>>(),
            _ => Vec::new(),
        })
    }
}

/// Instances as the cycle so far left them.
struct Stage<'a> {
    core: &'a Core,
    staged: HashMap<u64, Option<Instance>>,
}

impl Stage<'_> {
    fn get(&self, fp: u64) -> Option<&Instance> {
        match self.staged.get(&fp) {
            Some(x) => x.as_ref(),
            None => self.core.instances.get(&fp),
        }
    }

    fn of_ruleset(&self, name: &str) -> Vec<u64> {
        let mut out: BTreeSet<u64> = self.core.by_ruleset.get(name).cloned().unwrap_or_default();
        for (fp, i) in &self.staged {
            match i {
                Some(i) if i.ruleset == name => {
                    out.insert(*fp);
                }
                None => {
                    out.remove(fp);
                }
                _ => {}
            }
        }
        out.into_iter().collect()
    }
}

fn timing(rs: &Ruleset) -> Timing {
    Timing {
        for_ms: rs.for_ms,
        keep_firing_for_ms: rs.keep_firing_for_ms,
    }
}

fn ctx(rs: &Ruleset) -> Ctx {
    Ctx {
        window_s: rs.window.ms as f64 / 1000.0,
    }
}

/// Instance labels: alertname, the stream's tags, the ruleset's labels, severity.
pub fn labels_of(rs: &Ruleset, tags: &[(String, String)], severity: u8) -> Vec<(String, String)> {
    let mut m: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in tags {
        m.insert(k.clone(), v.clone());
    }
    for (k, v) in &rs.labels {
        m.insert(k.clone(), v.clone());
    }
    m.insert("alertname".into(), rs.name.clone());
    m.remove("alertstate");
    if severity > 0 {
        m.insert("severity".into(), severity.to_string());
    } else {
        m.remove("severity");
    }
    m.into_iter().collect()
}

/// The stream tags back from labels (for instances whose stream is gone this period).
fn tags_from_labels(rs: &Ruleset, labels: &[(String, String)]) -> Vec<(String, String)> {
    labels
        .iter()
        .filter(|(k, _)| {
            !matches!(k.as_str(), "alertname" | "severity")
                && !rs.labels.iter().any(|(l, _)| l == k)
        })
        .cloned()
        .collect()
}

fn first_match<'r>(rs: &'r Ruleset, v: &Windowed, c: Ctx) -> Result<Option<&'r Level>, String> {
    for l in &rs.levels {
        if l.when.holds(v, c)? {
            return Ok(Some(l));
        }
    }
    Ok(None)
}

fn clear_holds(l: &Level, v: &Windowed, c: Ctx) -> Result<bool, String> {
    match &l.clear {
        Some(cl) => cl.holds(v, c),
        None => Ok(!l.when.holds(v, c)?),
    }
}

/// The severity ladder with hysteresis: an instance pending or firing at a level stays there
/// until that level's `clear` holds, unless a worse level matches.
pub fn verdict(rs: &Ruleset, prev: Option<&Instance>, o: &Obs) -> Verdict {
    let Some(v) = &o.value else {
        return match rs.nodata {
            NoData::Ok => Verdict::Level {
                severity: 0,
                value: f64::NAN,
            },
            _ => Verdict::NoData,
        };
    };
    let c = ctx(rs);
    if let Windowed::Silent {
        silent_ms,
        limit_ms,
        ..
    } = v
    {
        if silent_ms <= limit_ms {
            return Verdict::Level {
                severity: 0,
                value: *silent_ms as f64 / 1000.0,
            };
        }
    }
    let first = match first_match(rs, v, c) {
        Ok(f) => f,
        Err(e) => return Verdict::Error(e),
    };
    let held = prev
        .filter(|p| matches!(p.state, State::Pending | State::Firing) && p.severity > 0)
        .and_then(|p| rs.level(p.severity));
    let chosen = match held {
        None => first,
        Some(h) if first.is_some_and(|f| f.severity < h.severity) => first,
        Some(h) => match clear_holds(h, v, c) {
            Ok(true) => first,
            Ok(false) => Some(h),
            Err(e) => return Verdict::Error(e),
        },
    };
    let value = chosen
        .or(rs.levels.first())
        .and_then(|l| l.when.primary())
        .and_then(|r| r.eval(v, c).ok().flatten())
        .or(match v {
            Windowed::Silent { silent_ms, .. } => Some(*silent_ms as f64 / 1000.0),
            _ => None,
        })
        .unwrap_or(f64::NAN);
    Verdict::Level {
        severity: chosen.map_or(0, |l| l.severity),
        value,
    }
}

/// Parent instances firing at severity 1, as their label sets.
fn parents_firing(stage: &Stage<'_>, rs: &Ruleset) -> Vec<Vec<(String, String)>> {
    let Some(parent) = &rs.depends_on else {
        return Vec::new();
    };
    stage
        .of_ruleset(parent)
        .into_iter()
        .filter_map(|fp| stage.get(fp))
        .filter(|i| i.state == State::Firing && i.severity == 1)
        .map(|i| i.labels.clone())
        .collect()
}

fn suppressed(
    rs: &Ruleset,
    parents: &[Vec<(String, String)>],
    labels: &[(String, String)],
) -> bool {
    let get =
        |ls: &[(String, String)], k: &str| ls.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
    parents.iter().any(|p| {
        rs.depends_on_match
            .iter()
            .all(|cat| get(p, cat).is_some() && get(p, cat) == get(labels, cat))
    })
}

/// Everything one step of one instance needs besides the instance.
struct StepIn<'a> {
    rs: &'a Ruleset,
    t: i64,
    verdict: Verdict,
    value: Option<&'a Windowed>,
    tags: Tags,
    parents: &'a [Vec<(String, String)>],
    eager: bool,
}

/// Steps one instance; returns the update a record carries if anything a record carries changed.
fn step_one(
    prev: Option<&Instance>,
    fp: u64,
    stream: &str,
    s: &StepIn<'_>,
) -> Option<(Instance, Update)> {
    let rs = s.rs;
    let base = prev
        .cloned()
        .unwrap_or_else(|| Instance::new(fp, &rs.name, stream));
    let mut next = if s.eager {
        let mut n = step_eager(&base, &s.verdict, s.t, timing(rs))?;
        // An eager look is not an evaluation: history and its time stay.
        n.last_t_ms = base.last_t_ms;
        n.history = base.history;
        n
    } else {
        let mut n = step(&base, &s.verdict, s.t, timing(rs));
        if base.last_t_ms > 0 {
            n.history = base
                .history
                .advanced((s.t - base.last_t_ms) / rs.period_ms - 1);
        }
        n.history.push(s.verdict.code());
        if rs.flapping.enabled {
            n.flapping = n
                .history
                .flapping(base.flapping, rs.flapping.low, rs.flapping.high);
        }
        n
    };
    next.labels = labels_of(rs, &s.tags, next.severity);
    next.suppressed = rs.depends_on.is_some() && suppressed(rs, s.parents, &next.labels);
    // Rendered at every evaluation (the API shows today's numbers), recorded only with a
    // change.
    next.annotations = annotations(rs, &next, s);
    if prev.is_some() && !base.differs(&next) {
        return Some((next, no_update()));
    }
    let update = Update {
        from_state: base.state,
        from_severity: base.severity,
        new: prev.is_none(),
        instance: next.clone(),
    };
    Some((next, update))
}

/// A marker for "stepped, nothing to record" (an update whose instance has fingerprint 0 and
/// no ruleset is never recorded).
fn no_update() -> Update {
    Update {
        from_state: State::Ok,
        from_severity: 0,
        new: false,
        instance: Instance::new(0, "", ""),
    }
}

fn is_no_update(u: &Update) -> bool {
    u.instance.fp == 0 && u.instance.ruleset.is_empty()
}

fn annotations(rs: &Ruleset, i: &Instance, s: &StepIn<'_>) -> Vec<(String, String)> {
    let primary = match &s.verdict {
        Verdict::Level { value, .. } if value.is_finite() => Some(*value),
        _ => None,
    };
    let r = Render {
        value: s.value,
        ctx: ctx(rs),
        primary,
        tags: &s.tags,
        labels: &i.labels,
        severity: i.severity,
        state: i.state.name(),
        rule: &rs.name,
        stream: &i.stream,
        since_ms: i.since_ms,
    };
    let mut out: Vec<(String, String)> = rs
        .annotations
        .iter()
        .map(|(k, t)| (k.clone(), t.render(&r)))
        .collect();
    if let Verdict::Error(e) = &s.verdict {
        out.push(("error".into(), e.clone()));
    }
    out
}

impl Core {
    pub fn new(rulesets: Vec<Arc<Ruleset>>) -> Core {
        Core {
            rulesets,
            ..Core::default()
        }
    }

    pub fn rulesets(&self) -> &[Arc<Ruleset>] {
        &self.rulesets
    }

    pub fn ruleset(&self, name: &str) -> Option<&Arc<Ruleset>> {
        self.rulesets.iter().find(|r| r.name == name)
    }

    /// Replaces the rulesets (already ordered parents first). Instances of rulesets that no
    /// longer exist are returned for a Forget record.
    pub fn set_rulesets(&mut self, rulesets: Vec<Arc<Ruleset>>) -> Vec<(String, Vec<u64>)> {
        self.rulesets = rulesets;
        let names: HashSet<&str> = self.rulesets.iter().map(|r| r.name.as_str()).collect();
        let mut gone: Vec<(String, Vec<u64>)> = self
            .by_ruleset
            .iter()
            .filter(|(r, fps)| !names.contains(r.as_str()) && !fps.is_empty())
            .map(|(r, fps)| (r.clone(), fps.iter().copied().collect()))
            .collect();
        gone.sort();
        gone
    }

    /// Rulesets due at `t_ms` not yet evaluated there (of `only`, when given), parents first.
    pub fn due(&self, t_ms: i64, only: Option<&HashSet<String>>) -> Vec<Arc<Ruleset>> {
        self.rulesets
            .iter()
            .filter(|r| t_ms.rem_euclid(r.period_ms) == 0)
            .filter(|r| self.progress.get(&r.name).is_none_or(|&p| p < t_ms))
            .filter(|r| only.is_none_or(|o| o.contains(&r.name)))
            .cloned()
            .collect()
    }

    /// Puts a restored instance back (from a snapshot).
    pub fn insert_instance(&mut self, i: Instance) {
        self.put(i.fp, Some(i));
    }

    /// The records of the cycle at period end `t_ms` (flags: late, backfill), and what it
    /// leaves; `only` limits the rulesets evaluated (a new one may start later). `written_ms`
    /// is the wall time recorded.
    pub fn propose(
        &mut self,
        store: &Store,
        t_ms: i64,
        flags: u8,
        written_ms: i64,
        only: Option<&HashSet<String>>,
    ) -> Proposal {
        let due = self.due(t_ms, only);
        let mut tracker = self.tracker.take();
        let mut cache = std::mem::take(&mut self.cache);
        let mut stage = Stage {
            core: self,
            staged: HashMap::new(),
        };
        let mut records = Vec::new();
        let mut health = Vec::new();
        for rs in &due {
            let started = std::time::Instant::now();
            let obs = match &rs.kind {
                Kind::PushSources { factor } => match tracker.as_mut() {
                    Some(t) => t.observe(store, t_ms, *factor),
                    None => Ok(Vec::new()),
                },
                _ => observe::observe(store, rs, t_ms, &mut cache),
            };
            let h = Health {
                last_t_ms: t_ms,
                duration_ns: started.elapsed().as_nanos() as u64,
                error: obs.as_ref().err().cloned(),
                instances: obs.as_ref().map_or(0, Vec::len),
            };
            let updates = evaluate_ruleset(&mut stage, rs, t_ms, obs, false);
            health.push((rs.name.clone(), h));
            if !updates.is_empty() {
                let eval = Eval {
                    flags,
                    t_ms,
                    written_ms,
                    ruleset: rs.name.clone(),
                    updates,
                };
                records.extend(eval.into_parts(EVAL_PART_BYTES_MAX));
            }
        }
        let staged = stage.staged;
        self.tracker = tracker;
        self.cache = cache;
        let mut p = Proposal {
            t_ms,
            records,
            staged,
            evaluated: due.iter().map(|r| r.name.clone()).collect(),
            health,
        };
        if !due.is_empty() {
            let cycle = self.cycle_record(&p, flags, written_ms, due.len() as u32);
            p.records.push(Record::Cycle(cycle));
        }
        p
    }

    /// Eager look at the still-open period ending at `open_end_ms` for one ruleset: records
    /// only moves towards firing, at `now_ms`.
    pub fn propose_eager(
        &self,
        store: &Store,
        rs: &Arc<Ruleset>,
        open_end_ms: i64,
        now_ms: i64,
    ) -> Proposal {
        let mut stage = Stage {
            core: self,
            staged: HashMap::new(),
        };
        // Eager looks are rare and small: no cache (it lives with the cycles).
        let obs = observe::observe(store, rs, open_end_ms, &mut observe::Cache::default());
        let updates = match obs {
            Ok(list) => eager_ruleset(&mut stage, rs, now_ms, list),
            Err(_) => Vec::new(),
        };
        let records = if updates.is_empty() {
            Vec::new()
        } else {
            let eval = Eval {
                flags: FLAG_EAGER,
                t_ms: now_ms,
                written_ms: now_ms,
                ruleset: rs.name.clone(),
                updates,
            };
            eval.into_parts(EVAL_PART_BYTES_MAX)
        };
        Proposal {
            t_ms: now_ms,
            records,
            staged: stage.staged,
            evaluated: Vec::new(),
            health: Vec::new(),
        }
    }

    fn cycle_record(&self, p: &Proposal, flags: u8, written_ms: i64, rulesets: u32) -> Cycle {
        let mut active: BTreeMap<u64, (State, u8)> = BTreeMap::new();
        for fp in &self.active {
            if !p.staged.contains_key(fp) {
                if let Some(i) = self.instances.get(fp) {
                    active.insert(*fp, (i.state, i.severity));
                }
            }
        }
        for (fp, i) in &p.staged {
            if let Some(i) = i.as_ref().filter(|i| i.state.is_active()) {
                active.insert(*fp, (i.state, i.severity));
            }
        }
        Cycle {
            flags,
            t_ms: p.t_ms,
            written_ms,
            rulesets,
            active_total: active.len() as u32,
            active: active
                .into_iter()
                .take(CYCLE_ACTIVE_MAX)
                .map(|(fp, (s, sev))| (fp, s, sev))
                .collect(),
        }
    }

    /// Makes a proposal true (after the journal acknowledged its records).
    pub fn apply(&mut self, p: Proposal) {
        for (fp, i) in p.staged {
            self.put(fp, i);
        }
        for name in p.evaluated {
            let e = self.progress.entry(name).or_insert(i64::MIN);
            *e = (*e).max(p.t_ms);
        }
        for (name, h) in p.health {
            self.health.insert(name, h);
        }
        if p.records.iter().any(|r| matches!(r, Record::Cycle(_))) {
            self.last_cycle_ms = self.last_cycle_ms.max(p.t_ms);
        }
    }

    fn put(&mut self, fp: u64, i: Option<Instance>) {
        match i {
            Some(i) if !i.forgettable() => {
                if i.state.is_active() {
                    self.active.insert(fp);
                } else {
                    self.active.remove(&fp);
                }
                self.by_ruleset
                    .entry(i.ruleset.clone())
                    .or_default()
                    .insert(fp);
                self.instances.insert(fp, i);
            }
            _ => {
                if let Some(old) = self.instances.remove(&fp) {
                    if let Some(set) = self.by_ruleset.get_mut(&old.ruleset) {
                        set.remove(&fp);
                    }
                }
                self.active.remove(&fp);
            }
        }
    }

    /// A proposal whose records could not be journaled: none of it applies, and its rulesets'
    /// health says why (the rules APIs), not what the last success said.
    pub fn fail(&mut self, p: Proposal, error: &str) {
        for (name, mut h) in p.health {
            h.error = Some(error.to_string());
            self.health.insert(name, h);
        }
    }

    /// Applies a record read back from the journal (restore).
    pub fn apply_record(&mut self, r: &Record) {
        match r {
            Record::Eval(e) => {
                for u in &e.updates {
                    self.put(u.instance.fp, Some(u.instance.clone()));
                }
                // A part before the last leaves the period to be evaluated again (its updated
                // instances are skipped then: `evaluate_ruleset`).
                if e.flags & (FLAG_EAGER | FLAG_PART) == 0 {
                    let p = self.progress.entry(e.ruleset.clone()).or_insert(i64::MIN);
                    *p = (*p).max(e.t_ms);
                }
            }
            Record::Cycle(c) => self.last_cycle_ms = self.last_cycle_ms.max(c.t_ms),
            Record::Forget(f) => {
                for fp in &f.fps {
                    self.put(*fp, None);
                }
            }
        }
    }

    /// After restoring: each ruleset continues after its newest Eval record or Cycle record,
    /// and every instance's flap history is advanced over the evaluations that left no record.
    pub fn finish_restore(&mut self) {
        for rs in &self.rulesets {
            if self.last_cycle_ms > 0 {
                let from_cycle = crate::util::align_down(self.last_cycle_ms, rs.period_ms);
                let p = self.progress.entry(rs.name.clone()).or_insert(i64::MIN);
                *p = (*p).max(from_cycle);
            }
        }
        let periods: HashMap<&str, i64> = self
            .rulesets
            .iter()
            .map(|r| (r.name.as_str(), r.period_ms))
            .collect();
        let mut forget = Vec::new();
        for (fp, i) in self.instances.iter_mut() {
            let (Some(&p), Some(&done)) = (
                periods.get(i.ruleset.as_str()),
                self.progress.get(&i.ruleset),
            ) else {
                continue;
            };
            if i.last_t_ms > 0 && done > i.last_t_ms {
                i.history = i.history.advanced((done - i.last_t_ms) / p);
                i.last_t_ms = done;
            }
            if i.forgettable() {
                forget.push(*fp);
            }
        }
        for fp in forget {
            self.put(fp, None);
        }
    }

    /// The Forget record for rulesets that went away, and applies it.
    pub fn forget_rulesets(
        &mut self,
        gone: Vec<(String, Vec<u64>)>,
        t_ms: i64,
        written_ms: i64,
    ) -> Vec<Record> {
        let mut out = Vec::new();
        for (ruleset, fps) in gone {
            let r = Record::Forget(Forget {
                t_ms,
                written_ms,
                ruleset: ruleset.clone(),
                fps,
            });
            self.apply_record(&r);
            self.by_ruleset.remove(&ruleset);
            self.progress.remove(&ruleset);
            self.health.remove(&ruleset);
            out.push(r);
        }
        out
    }

    /// Instances, by ruleset then stream.
    pub fn sorted_instances(&self) -> Vec<&Instance> {
        let mut v: Vec<&Instance> = self.instances.values().collect();
        v.sort_by(|a, b| (&a.ruleset, &a.stream).cmp(&(&b.ruleset, &b.stream)));
        v
    }

    pub fn active_count(&self) -> usize {
        self.active.len()
    }
}

/// Steps every instance of `rs` for the observations of period end `t` (or the ruleset's
/// error) and returns the updates to record.
fn evaluate_ruleset(
    stage: &mut Stage<'_>,
    rs: &Arc<Ruleset>,
    t: i64,
    obs: Result<Vec<Obs>, String>,
    eager: bool,
) -> Vec<Update> {
    let error_fp = fingerprint(&rs.name, "");
    let mut updates = Vec::new();
    let list = match obs {
        Err(e) => {
            let s = StepIn {
                rs,
                t,
                verdict: Verdict::Error(e),
                value: None,
                tags: Tags::default(),
                parents: &[],
                eager,
            };
            stage_step(stage, error_fp, "", &s, &mut updates);
            return updates;
        }
        Ok(list) => list,
    };
    if stage.get(error_fp).is_some() {
        let s = StepIn {
            rs,
            t,
            verdict: Verdict::Level {
                severity: 0,
                value: f64::NAN,
            },
            value: None,
            tags: Tags::default(),
            parents: &[],
            eager,
        };
        stage_step(stage, error_fp, "", &s, &mut updates);
    }
    let parents = parents_firing(stage, rs);
    let mut touched: HashSet<u64> = HashSet::with_capacity(list.len());
    for o in &list {
        let fp = fingerprint(&rs.name, &o.stream);
        touched.insert(fp);
        let prev = stage.get(fp);
        if already_evaluated(prev, t, eager) {
            continue;
        }
        let v = verdict(rs, prev, o);
        let keep = rs.nodata == NoData::Keep && o.value.is_none();
        // A stream with no data at all in the window is not an instance yet: a backtest sees
        // series the store only learns of later (all empty then), live evaluation does not.
        let nothing_new = prev.is_none()
            && (matches!(v, Verdict::Level { severity: 0, .. })
                || (v == Verdict::NoData && o.coverage == 0.0));
        if keep || nothing_new {
            continue;
        }
        if prev.is_none() && stage.core.instances.len() + stage.staged.len() >= INSTANCES_MAX {
            continue;
        }
        let s = StepIn {
            rs,
            t,
            verdict: v,
            value: o.value.as_ref(),
            tags: o.tags.clone(),
            parents: &parents,
            eager,
        };
        stage_step(stage, fp, &o.stream, &s, &mut updates);
    }
    step_missing(stage, rs, t, &touched, error_fp, &parents, &mut updates);
    updates
}

/// Whether an instance was evaluated at `t` already: only after a restart that found some
/// parts of that evaluation's records but not the last (`FLAG_PART`), so the period is
/// evaluated again and the instances those parts updated must not step twice.
fn already_evaluated(prev: Option<&Instance>, t: i64, eager: bool) -> bool {
    !eager && prev.is_some_and(|p| p.last_t_ms >= t)
}

/// Instances whose stream the expression no longer gave: nodata (forgotten after a day);
/// absence rules keep them as they are (an unseen stream stays silent).
fn step_missing(
    stage: &mut Stage<'_>,
    rs: &Arc<Ruleset>,
    t: i64,
    touched: &HashSet<u64>,
    error_fp: u64,
    parents: &[Vec<(String, String)>],
    updates: &mut Vec<Update>,
) {
    if matches!(rs.kind, Kind::Absent { .. } | Kind::PushSources { .. }) {
        return;
    }
    for fp in stage.of_ruleset(&rs.name) {
        if touched.contains(&fp) || fp == error_fp {
            continue;
        }
        let Some(prev) = stage.get(fp) else { continue };
        if already_evaluated(Some(prev), t, false) {
            continue;
        }
        let gone_long = prev.state == State::NoData && t - prev.since_ms >= NODATA_FORGET_MS;
        let v = if gone_long || rs.nodata == NoData::Ok {
            Verdict::Level {
                severity: 0,
                value: f64::NAN,
            }
        } else if rs.nodata == NoData::Keep {
            continue;
        } else {
            Verdict::NoData
        };
        let tags = Arc::new(tags_from_labels(rs, &prev.labels));
        let stream = prev.stream.clone();
        let s = StepIn {
            rs,
            t,
            verdict: v,
            value: None,
            tags,
            parents,
            eager: false,
        };
        stage_step(stage, fp, &stream, &s, updates);
    }
}

fn stage_step(
    stage: &mut Stage<'_>,
    fp: u64,
    stream: &str,
    s: &StepIn<'_>,
    updates: &mut Vec<Update>,
) {
    let prev = stage.get(fp).cloned();
    let Some((next, update)) = step_one(prev.as_ref(), fp, stream, s) else {
        return;
    };
    if !is_no_update(&update) {
        updates.push(update);
    }
    let keep = !next.forgettable();
    stage.staged.insert(fp, keep.then_some(next));
}

fn eager_ruleset(
    stage: &mut Stage<'_>,
    rs: &Arc<Ruleset>,
    now: i64,
    list: Vec<Obs>,
) -> Vec<Update> {
    let parents = parents_firing(stage, rs);
    let mut updates = Vec::new();
    for o in &list {
        let fp = fingerprint(&rs.name, &o.stream);
        let prev = stage.get(fp);
        let v = verdict(rs, prev, o);
        if !matches!(v, Verdict::Level { severity: 1.., .. }) {
            continue;
        }
        let s = StepIn {
            rs,
            t: now,
            verdict: v,
            value: o.value.as_ref(),
            tags: o.tags.clone(),
            parents: &parents,
            eager: true,
        };
        stage_step(stage, fp, &o.stream, &s, &mut updates);
    }
    updates
}
