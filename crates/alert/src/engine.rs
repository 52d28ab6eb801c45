//! The live engine: rules loaded from files and the API, the alert journal, restore after a
//! crash, the evaluation schedule (grace, catch-up, eager), snapshots, the history writer, and
//! the version counter the API's long poll waits on.
//!
//! One evaluator thread proposes each cycle, appends its records, waits until the journal has
//! them durable, and only then applies them; readers (the API) take the core's read lock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

use journal::{Journal, Start};
use store::Store;

use crate::core::{Core, Health, Proposal};
use crate::record::{Record, FLAG_BACKFILL, FLAG_LATE};
use crate::rule::{self, Ruleset, RulesetError, Source, Spec, RULESETS_MAX};
use crate::snapshot::Snapshot;
use crate::sources::Tracker;
use crate::util::{align_down, wall_ms};

/// Journal bytes appended before a snapshot is written.
pub const SNAPSHOT_JOURNAL_BYTES_MAX: u64 = 8 << 20;
/// Periods re-evaluated after downtime, per ruleset; older ones are skipped.
pub const CATCH_UP_PERIODS_MAX: i64 = 1_440;
/// Cycles run in one tick before the evaluator looks at eager rulesets and rule files again.
const CYCLES_PER_TICK_MAX: usize = 64;
/// How often rule files are checked for changes.
const RELOAD_CHECK_MS: i64 = 5_000;
/// How long the history writer waits for new records before looking again.
const HISTORY_IDLE_MS: u64 = 1_000;
/// The alert journal keeps segments this long after every subscriber read them (the history
/// API reads it).
pub const JOURNAL_RETENTION_MS: u64 = 7 * 86_400_000;
const SUBSCRIBER_SNAPSHOT: &str = "snapshot";
pub const SUBSCRIBER_HISTORY: &str = "history";

/// The wall clock in ms (tests give a virtual one).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

#[derive(Clone)]
pub struct EngineOptions {
    /// `<data>/alerts`.
    pub dir: PathBuf,
    /// Directories of read-only rules files (`*.toml`).
    pub rules_dirs: Vec<PathBuf>,
    pub grace_ms: i64,
    pub catch_up_periods_max: i64,
    pub eager_interval_ms: i64,
    /// The built-in push-source rule: (factor, severity), or off.
    pub push_sources: Option<(f64, u8)>,
    pub snapshot_journal_bytes_max: u64,
    pub durability: journal::Durability,
    pub journal_segment_bytes: u64,
    pub clock: Clock,
    /// Notifications: routes, receivers, maintenance windows (off when None).
    pub notify: Option<Arc<crate::notify::Config>>,
}

impl EngineOptions {
    pub fn new(dir: impl Into<PathBuf>) -> EngineOptions {
        EngineOptions {
            dir: dir.into(),
            rules_dirs: Vec::new(),
            grace_ms: 5_000,
            catch_up_periods_max: CATCH_UP_PERIODS_MAX,
            eager_interval_ms: 250,
            push_sources: Some((3.0, 3)),
            snapshot_journal_bytes_max: SNAPSHOT_JOURNAL_BYTES_MAX,
            durability: journal::Durability::default(),
            journal_segment_bytes: 4 << 20,
            clock: Arc::new(wall_ms),
            notify: None,
        }
    }
}

/// A ruleset as the API lists it.
#[derive(Clone, Debug)]
pub struct RuleInfo {
    pub name: String,
    pub source: Source,
    pub ruleset: Option<Arc<Ruleset>>,
    /// Why it is not loaded (or why its file was refused).
    pub error: Option<String>,
    pub health: Option<Health>,
}

/// A ruleset (or a rules file) that did not load: its name if known, source, why.
type LoadError = (Option<String>, Source, String);

#[derive(Default)]
struct Rules {
    /// Rules files' (path, modified, length) when last loaded.
    signature: Vec<(PathBuf, Option<std::time::SystemTime>, u64)>,
    checked_ms: i64,
    loaded: Vec<Arc<Ruleset>>,
    errors: Vec<LoadError>,
    /// Rulesets created with a backfill: evaluations up to this period end are marked so.
    backfill_until: HashMap<String, i64>,
}

/// Why the engine could not start.
#[derive(Debug)]
pub struct EngineError(pub String);

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EngineError {}

/// What a create-or-replace did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    Created,
    Replaced,
    /// The stored definition already was this one: nothing was written.
    Unchanged,
}

/// Longest `owner` of a ruleset, in bytes.
pub const OWNER_BYTES_MAX: usize = 128;

/// Why an API change of a ruleset was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ChangeError {
    Invalid(String),
    ReadOnly(String),
    NotFound,
    Io(String),
}

impl std::fmt::Display for ChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChangeError::Invalid(m) | ChangeError::Io(m) => f.write_str(m),
            ChangeError::ReadOnly(src) => write!(
                f,
                "the ruleset comes from {src} and is read-only through the API; edit the file"
            ),
            ChangeError::NotFound => f.write_str("no such ruleset"),
        }
    }
}

pub struct Engine {
    store: Arc<Store>,
    opts: EngineOptions,
    journal: Journal,
    epoch: u64,
    core: RwLock<Core>,
    rules: Mutex<Rules>,
    version: tokio::sync::watch::Sender<u64>,
    appended_since_snapshot: AtomicU64,
    /// The last journal failure, until an append succeeds again.
    journal_error: Mutex<Option<String>>,
    eager_done_ms: AtomicU64,
    stop: AtomicBool,
    wake: (Mutex<u64>, Condvar),
    /// Serialises cycles (ticks from tests and the evaluator thread).
    cycle_lock: Mutex<()>,
    notifier: Option<Arc<crate::notify::Notifier>>,
}

fn io_err(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError(format!("{what}: {e}"))
}

/// The journal's life: created once with the directory, read back after.
fn load_epoch(dir: &Path) -> Result<u64, EngineError> {
    let path = dir.join("EPOCH");
    match std::fs::read_to_string(&path) {
        Ok(t) => t
            .trim()
            .parse()
            .map_err(|_| EngineError(format!("{}: not a number", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let epoch = u64::try_from(wall_ms()).unwrap_or(1).max(1);
            let tmp = dir.join("EPOCH.tmp");
            std::fs::write(&tmp, format!("{epoch}\n")).map_err(|e| io_err("EPOCH", e))?;
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err("EPOCH", e))?;
            std::fs::rename(&tmp, &path).map_err(|e| io_err("EPOCH", e))?;
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_err("alerts directory", e))?;
            Ok(epoch)
        }
        Err(e) => Err(io_err("EPOCH", e)),
    }
}

fn open_journal(
    opts: &EngineOptions,
    notify_subscribers: &[String],
) -> Result<Journal, EngineError> {
    let j = Journal::open(
        opts.dir.join("journal"),
        journal::Options {
            durability: opts.durability,
            segment_size_bytes: opts.journal_segment_bytes,
            retention: journal::Retention {
                bytes_min: 0,
                age_ms_min: JOURNAL_RETENTION_MS,
            },
            ..journal::Options::default()
        },
    )
    .map_err(|e| io_err("alert journal", e))?;
    let have: HashSet<String> = j
        .subscribers()
        .map_err(|e| io_err("alert journal", e))?
        .into_iter()
        .map(|s| s.name)
        .collect();
    for name in [SUBSCRIBER_SNAPSHOT, SUBSCRIBER_HISTORY] {
        if !have.contains(name) {
            j.add_subscriber(name, Start::Begin)
                .map_err(|e| io_err("alert journal", e))?;
        }
    }
    // A receiver new to the configuration hears of transitions from now on (not the whole
    // retained history); one no longer configured stops holding the journal's segments.
    for name in notify_subscribers {
        if !have.contains(name) {
            j.add_subscriber(name, Start::End)
                .map_err(|e| io_err("alert journal", e))?;
        }
    }
    for name in &have {
        if name.starts_with(crate::notify::SUBSCRIBER_PREFIX) && !notify_subscribers.contains(name)
        {
            j.remove_subscriber(name)
                .map_err(|e| io_err("alert journal", e))?;
        }
    }
    Ok(j)
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    out.sort();
    out
}

impl Engine {
    /// Opens (or creates) `<data>/alerts`, loads the rules and restores every instance.
    pub fn open(store: Arc<Store>, opts: EngineOptions) -> Result<Arc<Engine>, EngineError> {
        std::fs::create_dir_all(opts.dir.join("rules"))
            .map_err(|e| io_err("alerts directory", e))?;
        let epoch = load_epoch(&opts.dir)?;
        let notifier = match &opts.notify {
            Some(c) => Some(Arc::new(
                crate::notify::Notifier::open(c.clone(), &opts.dir).map_err(EngineError)?,
            )),
            None => None,
        };
        let names = notifier
            .as_ref()
            .map(|n| n.subscriber_names())
            .unwrap_or_default();
        let journal = open_journal(&opts, &names)?;
        let (version, _) = tokio::sync::watch::channel(0u64);
        let engine = Engine {
            store,
            journal,
            epoch,
            core: RwLock::new(Core::default()),
            rules: Mutex::new(Rules::default()),
            version,
            appended_since_snapshot: AtomicU64::new(0),
            journal_error: Mutex::new(None),
            eager_done_ms: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            wake: (Mutex::new(0), Condvar::new()),
            cycle_lock: Mutex::new(()),
            notifier,
            opts,
        };
        engine.reload_rules(true);
        engine.restore()?;
        Ok(Arc::new(engine))
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn options(&self) -> &EngineOptions {
        &self.opts
    }

    /// Notifications, when configured.
    pub fn notifier(&self) -> Option<&Arc<crate::notify::Notifier>> {
        self.notifier.as_ref()
    }

    /// True once `stop` was called.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn now(&self) -> i64 {
        (self.opts.clock)()
    }

    /// The engine's clock (virtual in tests): what "now" means for the API's answers.
    pub fn now_ms(&self) -> i64 {
        self.now()
    }

    /// Wakes the long polls: something they show besides the instances changed (an
    /// acknowledgement, a maintenance window).
    pub fn touch(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    pub fn core(&self) -> RwLockReadGuard<'_, Core> {
        self.core.read().unwrap_or_else(|e| e.into_inner())
    }

    fn core_mut(&self) -> std::sync::RwLockWriteGuard<'_, Core> {
        self.core.write().unwrap_or_else(|e| e.into_inner())
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes whenever instances change; the long poll waits on it.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// The last journal failure, while appends fail.
    pub fn journal_error(&self) -> Option<String> {
        self.journal_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    // ---- restore ----

    fn restore(&self) -> Result<(), EngineError> {
        let mut core = self.core_mut();
        let snap = match Snapshot::read(&self.opts.dir) {
            Ok(Some(s)) if s.epoch == self.epoch => Some(s),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "alert snapshot unreadable; replaying the whole journal");
                None
            }
        };
        let earliest = self
            .journal
            .earliest_offset()
            .map_err(|e| io_err("alert journal", e))?;
        let from = match &snap {
            Some(s) if s.offset >= earliest => {
                for i in &s.instances {
                    core.insert_instance(i.clone());
                }
                core.progress = s.progress.iter().cloned().collect();
                core.last_cycle_ms = s.last_cycle_ms;
                s.offset
            }
            _ => earliest,
        };
        let mut reader = self
            .journal
            .reader(from)
            .map_err(|e| io_err("alert journal", e))?;
        let mut batch = journal::Batch::new();
        let mut bad = 0u64;
        while reader
            .next_batch(&mut batch)
            .map_err(|e| io_err("alert journal", e))?
            > 0
        {
            for (offset, payload) in batch.iter() {
                match Record::decode(payload) {
                    Ok(r) => core.apply_record(&r),
                    Err(e) => {
                        bad += 1;
                        tracing::warn!(offset, error = %e, "alert journal record skipped");
                    }
                }
            }
        }
        let rulesets = self.rules().loaded.clone();
        let gone = core.set_rulesets(rulesets);
        core.finish_restore();
        if self.opts.push_sources.is_some() {
            let resumed_ms = core.progress.get(crate::rule::PUSH_SOURCES_NAME).copied();
            core.tracker = Some(Tracker::resuming(resumed_ms));
        }
        drop(core);
        if bad > 0 {
            tracing::warn!(records = bad, "alert journal had undecodable records");
        }
        self.forget(gone)
            .map_err(|e| EngineError(format!("alert journal: {e}")))
    }

    fn forget(&self, gone: Vec<(String, Vec<u64>)>) -> Result<(), String> {
        if gone.is_empty() {
            return Ok(());
        }
        let now = self.now();
        let mut core = self.core_mut();
        let records = core.forget_rulesets(gone, now, now);
        drop(core);
        self.append(&records)?;
        self.bump();
        Ok(())
    }

    // ---- rules ----

    fn rule_files(&self) -> Vec<(PathBuf, Source)> {
        let mut out: Vec<(PathBuf, Source)> = Vec::new();
        for d in &self.opts.rules_dirs {
            for p in toml_files(d) {
                out.push((p.clone(), Source::File(p)));
            }
        }
        for p in toml_files(&self.opts.dir.join("rules")) {
            out.push((p, Source::Api));
        }
        out
    }

    fn signature(&self) -> Vec<(PathBuf, Option<std::time::SystemTime>, u64)> {
        self.rule_files()
            .into_iter()
            .map(|(p, _)| {
                let m = std::fs::metadata(&p).ok();
                let modified = m.as_ref().and_then(|m| m.modified().ok());
                (p, modified, m.map_or(0, |m| m.len()))
            })
            .collect()
    }

    fn base_period_ms(&self) -> i64 {
        self.store.options().base_period_ms
    }

    /// Reads every rules file; keeps what compiles; returns (loaded, errors).
    fn load_all(&self) -> (Vec<Arc<Ruleset>>, Vec<LoadError>) {
        let base = self.base_period_ms();
        let mut loaded: Vec<Arc<Ruleset>> = Vec::new();
        let mut errors = Vec::new();
        let mut names: HashSet<String> = HashSet::new();
        for (path, source) in self.rule_files() {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    errors.push((None, source, format!("{}: {e}", path.display())));
                    continue;
                }
            };
            let specs = match rule::parse_file_text(&text) {
                Ok(s) => s,
                Err(e) => {
                    errors.push((None, source, format!("{}: {e}", path.display())));
                    continue;
                }
            };
            for spec in specs {
                let name = spec.name.clone();
                match rule::compile(spec, source.clone(), base) {
                    Ok(_) if names.contains(&name) => errors.push((
                        Some(name.clone()),
                        source.clone(),
                        format!("{}: ruleset {name:?} is defined twice", path.display()),
                    )),
                    Ok(_) if loaded.len() >= RULESETS_MAX => errors.push((
                        Some(name.clone()),
                        source.clone(),
                        format!("more than {RULESETS_MAX} rulesets"),
                    )),
                    Ok(r) => {
                        names.insert(name);
                        loaded.push(Arc::new(r));
                    }
                    Err(e) => errors.push((
                        Some(name),
                        source.clone(),
                        format!("{}: {e}", path.display()),
                    )),
                }
            }
        }
        if let Some((factor, sev)) = self.opts.push_sources {
            match Ruleset::push_sources(base, factor, sev) {
                Ok(r) => loaded.push(Arc::new(r)),
                Err(e) => errors.push((None, Source::Builtin, e.to_string())),
            }
        }
        order_keeping_valid(loaded, &mut errors)
    }

    /// Reloads the rules if a file changed (or always with `force`); instances of rulesets that
    /// went away are forgotten (a Forget record).
    pub fn reload_rules(&self, force: bool) -> Vec<(String, Vec<u64>)> {
        let now = self.now();
        {
            let mut rules = self.rules();
            if !force && now - rules.checked_ms < RELOAD_CHECK_MS {
                return Vec::new();
            }
            rules.checked_ms = now;
            let sig = self.signature();
            if !force && sig == rules.signature {
                return Vec::new();
            }
            rules.signature = sig;
        }
        let (loaded, errors) = self.load_all();
        for (name, _, e) in &errors {
            tracing::warn!(ruleset = name.as_deref().unwrap_or(""), error = %e, "ruleset not loaded");
        }
        let mut rules = self.rules();
        rules.loaded = loaded.clone();
        rules.errors = errors;
        drop(rules);
        self.core_mut().set_rulesets(loaded)
    }

    /// Every ruleset, loaded or refused, by name.
    pub fn rule_infos(&self) -> Vec<RuleInfo> {
        let rules = self.rules();
        let core = self.core();
        let mut out: BTreeMap<String, RuleInfo> = BTreeMap::new();
        for r in &rules.loaded {
            out.insert(
                r.name.clone(),
                RuleInfo {
                    name: r.name.clone(),
                    source: r.source.clone(),
                    ruleset: Some(r.clone()),
                    error: None,
                    health: core.health.get(&r.name).cloned(),
                },
            );
        }
        for (name, source, e) in &rules.errors {
            let key = name.clone().unwrap_or_else(|| source.describe());
            out.entry(key.clone()).or_insert(RuleInfo {
                name: key,
                source: source.clone(),
                ruleset: None,
                error: Some(e.clone()),
                health: None,
            });
        }
        out.into_values().collect()
    }

    fn api_path(&self, name: &str) -> PathBuf {
        self.opts.dir.join("rules").join(format!("{name}.toml"))
    }

    fn read_only_source(&self, name: &str) -> Option<Source> {
        self.rules()
            .loaded
            .iter()
            .find(|r| r.name == name && r.source != Source::Api)
            .map(|r| r.source.clone())
    }

    /// Creates or replaces an API ruleset from its TOML; with `backfill_ms`, a new ruleset is
    /// first evaluated over that much of the past (marked `backfill`). A definition equal to
    /// the stored one writes nothing (so an installer re-run changes no file and no timestamp).
    pub fn put_ruleset(
        &self,
        name: &str,
        text: &str,
        backfill_ms: i64,
    ) -> Result<Put, ChangeError> {
        if let Some(src) = self.read_only_source(name) {
            return Err(ChangeError::ReadOnly(src.describe()));
        }
        let mut spec: Spec =
            rule::parse_one(text).map_err(|e| ChangeError::Invalid(e.to_string()))?;
        if spec.name.is_empty() {
            spec.name = name.to_string();
        }
        if spec.name != name {
            return Err(ChangeError::Invalid(format!(
                "the body names ruleset {:?} but the path names {name:?}",
                spec.name
            )));
        }
        if let Some(owner) = &spec.owner {
            if owner.is_empty() || owner.len() > OWNER_BYTES_MAX {
                return Err(ChangeError::Invalid(format!(
                    "`owner` must be 1 to {OWNER_BYTES_MAX} bytes"
                )));
            }
        }
        let compiled = rule::compile(spec, Source::Api, self.base_period_ms())
            .map_err(|e| ChangeError::Invalid(e.to_string()))?;
        let mut candidate = self.rules().loaded.clone();
        candidate.retain(|r| r.name != name);
        if candidate.len() >= RULESETS_MAX {
            return Err(ChangeError::Invalid(format!(
                "more than {RULESETS_MAX} rulesets"
            )));
        }
        candidate.push(Arc::new(compiled.clone()));
        rule::order(candidate).map_err(|e| ChangeError::Invalid(e.to_string()))?;
        let path = self.api_path(name);
        let text = compiled.to_toml();
        let created = match std::fs::read_to_string(&path) {
            Ok(old) if old == text => return Ok(Put::Unchanged),
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(ChangeError::Io(e.to_string())),
        };
        write_atomic(&path, text.as_bytes()).map_err(|e| ChangeError::Io(e.to_string()))?;
        if created && backfill_ms > 0 {
            self.start_backfill(&compiled, backfill_ms);
        }
        let gone = self.reload_rules(true);
        self.forget(gone).map_err(ChangeError::Io)?;
        self.poke();
        Ok(if created { Put::Created } else { Put::Replaced })
    }

    /// Deletes every API ruleset whose `owner` is `owner`; returns their names (sorted).
    pub fn delete_owned(&self, owner: &str) -> Result<Vec<String>, ChangeError> {
        let owned: Vec<String> = self
            .rules()
            .loaded
            .iter()
            .filter(|r| r.source == Source::Api && r.spec.owner.as_deref() == Some(owner))
            .map(|r| r.name.clone())
            .collect();
        for name in &owned {
            match std::fs::remove_file(self.api_path(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ChangeError::Io(e.to_string())),
            }
        }
        if !owned.is_empty() {
            let gone = self.reload_rules(true);
            self.forget(gone).map_err(ChangeError::Io)?;
            self.poke();
        }
        Ok(owned)
    }

    fn start_backfill(&self, r: &Ruleset, backfill_ms: i64) {
        let latest = align_down(self.now() - self.opts.grace_ms, r.period_ms);
        let periods = (backfill_ms / r.period_ms).clamp(1, self.opts.catch_up_periods_max);
        self.core_mut()
            .progress
            .insert(r.name.clone(), latest - periods * r.period_ms);
        self.rules().backfill_until.insert(r.name.clone(), latest);
    }

    pub fn delete_ruleset(&self, name: &str) -> Result<(), ChangeError> {
        if let Some(src) = self.read_only_source(name) {
            return Err(ChangeError::ReadOnly(src.describe()));
        }
        let path = self.api_path(name);
        if !path.exists() {
            return Err(ChangeError::NotFound);
        }
        std::fs::remove_file(&path).map_err(|e| ChangeError::Io(e.to_string()))?;
        let gone = self.reload_rules(true);
        self.forget(gone).map_err(ChangeError::Io)?;
        self.poke();
        Ok(())
    }

    // ---- evaluation ----

    /// The next period end `r` is evaluated at, and whether periods were skipped to get there.
    fn next_t(&self, core: &Core, r: &Ruleset, now: i64) -> (i64, bool) {
        let latest = align_down(now - self.opts.grace_ms, r.period_ms);
        match core.progress.get(&r.name) {
            None => (latest, false),
            Some(&p) => {
                let floor = latest - (self.opts.catch_up_periods_max - 1) * r.period_ms;
                let next = p + r.period_ms;
                (next.max(floor), next < floor)
            }
        }
    }

    /// Runs every cycle due by `now` (at most `CYCLES_PER_TICK_MAX`), then eager looks.
    /// Returns the number of cycles run.
    pub fn tick(&self) -> Result<usize, String> {
        let _one = self.cycle_lock.lock().unwrap_or_else(|e| e.into_inner());
        let gone = self.reload_rules(false);
        self.forget(gone)?;
        let mut cycles = 0;
        while cycles < CYCLES_PER_TICK_MAX && !self.stop.load(Ordering::Relaxed) {
            let now = self.now();
            let Some((t, names)) = self.next_cycle(now) else {
                break;
            };
            self.run_cycle(t, &names, now)?;
            cycles += 1;
        }
        self.eager()?;
        Ok(cycles)
    }

    /// The earliest period end due, and the rulesets evaluated there.
    fn next_cycle(&self, now: i64) -> Option<(i64, HashSet<String>)> {
        let core = self.core();
        let mut best: Option<i64> = None;
        let mut plan: Vec<(String, i64, bool)> = Vec::new();
        for r in core.rulesets() {
            let (t, skipped) = self.next_t(&core, r, now);
            if t > align_down(now - self.opts.grace_ms, r.period_ms) {
                continue;
            }
            best = Some(best.map_or(t, |b: i64| b.min(t)));
            plan.push((r.name.clone(), t, skipped));
        }
        let t = best?;
        for (name, _, _) in plan.iter().filter(|p| p.1 == t && p.2) {
            tracing::warn!(ruleset = %name, t_ms = t, "alert evaluation skipped periods older than the catch-up bound");
        }
        Some((
            t,
            plan.into_iter().filter(|p| p.1 == t).map(|p| p.0).collect(),
        ))
    }

    fn run_cycle(&self, t: i64, names: &HashSet<String>, now: i64) -> Result<(), String> {
        let base = self.base_period_ms();
        let mut flags = 0;
        if now > t + self.opts.grace_ms + base {
            flags |= FLAG_LATE;
        }
        {
            let mut rules = self.rules();
            let backfill: Vec<String> = rules
                .backfill_until
                .iter()
                .filter(|(_, until)| t <= **until)
                .map(|(n, _)| n.clone())
                .collect();
            if names.iter().any(|n| backfill.contains(n)) {
                flags |= FLAG_BACKFILL;
            }
            rules.backfill_until.retain(|_, until| t < *until);
        }
        let proposal = self
            .core_mut()
            .propose(&self.store, t, flags, now, Some(names));
        self.commit(proposal)
    }

    /// Appends the proposal's records, waits until durable, then applies it.
    fn commit(&self, p: Proposal) -> Result<(), String> {
        let changed = p
            .records
            .iter()
            .any(|r| matches!(r, Record::Eval(_) | Record::Forget(_)));
        if let Err(e) = self.append(&p.records) {
            self.core_mut().fail(p, &e);
            return Err(e);
        }
        self.core_mut().apply(p);
        if changed {
            self.bump();
        }
        self.maybe_snapshot();
        Ok(())
    }

    fn append(&self, records: &[Record]) -> Result<(), String> {
        if records.is_empty() {
            return Ok(());
        }
        let encoded: Vec<Vec<u8>> = records.iter().map(Record::encode).collect();
        let bytes: u64 = encoded.iter().map(|r| r.len() as u64).sum();
        let result = self
            .journal
            .submit(&encoded)
            .and_then(journal::Ticket::wait)
            .map_err(|e| format!("alert journal append failed: {e}"));
        let mut err = self.journal_error.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(_) => {
                *err = None;
                self.appended_since_snapshot
                    .fetch_add(bytes, Ordering::Relaxed);
                self.notify_history();
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "alert cycle not applied; retried next tick");
                *err = Some(e.clone());
                Err(e)
            }
        }
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Eager looks at the still-open period, for eager rulesets, every `eager_interval_ms`.
    fn eager(&self) -> Result<(), String> {
        let now = self.now();
        let last = self.eager_done_ms.load(Ordering::Relaxed) as i64;
        if now - last < self.opts.eager_interval_ms {
            return Ok(());
        }
        self.eager_done_ms
            .store(now.max(0) as u64, Ordering::Relaxed);
        let eager: Vec<Arc<Ruleset>> = self
            .core()
            .rulesets()
            .iter()
            .filter(|r| r.eager)
            .cloned()
            .collect();
        for r in eager {
            let open_end = align_down(now, r.period_ms) + r.period_ms;
            let caught_up = self
                .core()
                .progress
                .get(&r.name)
                .is_some_and(|&p| p >= open_end - 2 * r.period_ms);
            if !caught_up {
                continue;
            }
            let p = self.core().propose_eager(&self.store, &r, open_end, now);
            if !p.records.is_empty() {
                self.commit(p)?;
            }
        }
        Ok(())
    }

    // ---- snapshot ----

    fn maybe_snapshot(&self) {
        if self.appended_since_snapshot.load(Ordering::Relaxed)
            >= self.opts.snapshot_journal_bytes_max
        {
            if let Err(e) = self.snapshot() {
                tracing::warn!(error = %e, "alert snapshot failed; retried after the next cycle");
            }
        }
    }

    /// Writes the state file covering every record appended so far, then lets the journal
    /// drop what every subscriber has read.
    pub fn snapshot(&self) -> Result<(), String> {
        let core = self.core();
        let offset = self.journal.committed_offset();
        let mut progress: Vec<(String, i64)> =
            core.progress.iter().map(|(k, v)| (k.clone(), *v)).collect();
        progress.sort();
        let s = Snapshot {
            offset,
            epoch: self.epoch,
            last_cycle_ms: core.last_cycle_ms,
            written_ms: self.now(),
            progress,
            instances: core.sorted_instances().into_iter().cloned().collect(),
        };
        drop(core);
        s.write(&self.opts.dir)
            .map_err(|e| format!("alert snapshot: {e}"))?;
        self.appended_since_snapshot.store(0, Ordering::Relaxed);
        self.journal
            .rewind_subscriber(SUBSCRIBER_SNAPSHOT, offset)
            .map_err(|e| format!("alert journal: {e}"))?;
        self.journal
            .purge()
            .map_err(|e| format!("alert journal: {e}"))?;
        Ok(())
    }

    // ---- threads ----

    fn poke(&self) {
        let (m, cv) = &self.wake;
        *m.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        cv.notify_all();
    }

    fn notify_history(&self) {
        self.poke();
    }

    /// Sleeps until `ms` passed, a poke, or stop.
    fn sleep(&self, ms: i64) {
        let (m, cv) = &self.wake;
        let guard = m.lock().unwrap_or_else(|e| e.into_inner());
        let seen = *guard;
        let _ = cv
            .wait_timeout_while(
                guard,
                Duration::from_millis(ms.clamp(1, 60_000) as u64),
                |g| *g == seen && !self.stop.load(Ordering::Relaxed),
            )
            .map(|_| ());
    }

    /// How long until something is due: the next period end + grace, or the next eager look.
    fn idle_ms(&self) -> i64 {
        let now = self.now();
        let core = self.core();
        let mut wait = 1_000;
        for r in core.rulesets() {
            let due_at = match core.progress.get(&r.name) {
                Some(&p) => p + r.period_ms + self.opts.grace_ms,
                None => now,
            };
            wait = wait.min(due_at - now);
            if r.eager {
                wait = wait.min(self.opts.eager_interval_ms);
            }
        }
        wait.max(1)
    }

    /// Starts the evaluator and the history writer; `stop` ends both.
    pub fn start(self: &Arc<Self>) -> Vec<std::thread::JoinHandle<()>> {
        let ev = self.clone();
        let hist = self.clone();
        let threads = [
            std::thread::Builder::new()
                .name("strata-alerts".into())
                .spawn(move || ev.evaluator_loop()),
            std::thread::Builder::new()
                .name("strata-alert-history".into())
                .spawn(move || hist.history_loop()),
        ];
        let mut out: Vec<_> = threads.into_iter().filter_map(Result::ok).collect();
        if let Some(n) = &self.notifier {
            let host: Arc<dyn crate::notify::Host> = self.clone();
            out.extend(n.start(&host));
        }
        out
    }

    fn evaluator_loop(&self) {
        while !self.stop.load(Ordering::Relaxed) {
            match self.tick() {
                Ok(n) if n >= CYCLES_PER_TICK_MAX => continue,
                Ok(_) => {}
                Err(_) => {
                    self.sleep(1_000);
                    continue;
                }
            }
            self.sleep(self.idle_ms());
        }
    }

    /// Stops the threads; the next `snapshot` (done here) makes restart fast.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.poke();
    }

    pub fn close(&self) -> Result<(), String> {
        self.stop();
        let _one = self.cycle_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.snapshot()
    }

    fn history_loop(&self) {
        let mut sub = match self.journal.subscriber(SUBSCRIBER_HISTORY) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "alert history writer cannot start");
                return;
            }
        };
        let mut batch = journal::Batch::new();
        while !self.stop.load(Ordering::Relaxed) {
            match self.write_history(&mut sub, &mut batch) {
                Ok(0) => self.sleep(HISTORY_IDLE_MS as i64),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "alert history write failed; retrying");
                    // Read again from the checkpoint: the store refuses what it already has.
                    let _ = sub.seek(sub.checkpoint());
                    self.sleep(HISTORY_IDLE_MS as i64);
                }
            }
        }
    }

    /// Writes the next batch of records into the store; returns how many were read.
    pub fn write_history(
        &self,
        sub: &mut journal::Subscriber,
        batch: &mut journal::Batch,
    ) -> Result<usize, String> {
        let n = sub.next_batch(batch).map_err(|e| e.to_string())?;
        for (offset, payload) in batch.iter() {
            let Ok(r) = Record::decode(payload) else {
                continue;
            };
            let core = self.core();
            let labels = |fp: u64| core.instances.get(&fp).map(|i| i.labels.clone());
            let mut wb = crate::history::batch_of(&r, &labels)?;
            drop(core);
            if wb.is_empty() {
                continue;
            }
            wb.set_origin(crate::history::origin(self.epoch, offset, self.now()));
            self.store.write(&wb).map_err(|e| e.to_string())?;
        }
        if n > 0 {
            sub.commit().map_err(|e| e.to_string())?;
        }
        Ok(n)
    }

    /// Transitions newest first (at most `limit`, reading at most `scan_max` records).
    pub fn history(
        &self,
        f: &crate::history::Filter,
        limit: usize,
        scan_max: u64,
    ) -> Result<(Vec<crate::history::Transition>, bool), String> {
        let earliest = self.journal.earliest_offset().map_err(|e| e.to_string())?;
        let end = self.journal.committed_offset();
        let from = earliest.max(end.saturating_sub(scan_max));
        let mut reader = self.journal.reader(from).map_err(|e| e.to_string())?;
        let mut batch = journal::Batch::new();
        let mut out = Vec::new();
        while reader.next_batch(&mut batch).map_err(|e| e.to_string())? > 0 {
            for (offset, payload) in batch.iter() {
                let Ok(Record::Eval(e)) = Record::decode(payload) else {
                    continue;
                };
                for u in &e.updates {
                    if f.admits(&e, u) {
                        out.push(crate::history::Transition {
                            offset,
                            t_ms: e.t_ms,
                            written_ms: e.written_ms,
                            flags: e.flags,
                            from_state: u.from_state,
                            from_severity: u.from_severity,
                            instance: u.instance.clone(),
                        });
                    }
                }
            }
        }
        out.reverse();
        let truncated = from > earliest || out.len() > limit;
        out.truncate(limit);
        Ok((out, truncated))
    }
}

impl crate::notify::Host for Engine {
    fn journal(&self) -> &Journal {
        &self.journal
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// `path` written through a temporary file and a rename, synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("toml.tmp");
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

/// Orders rulesets parents first, dropping (with an error each) those whose parent is missing
/// or in a cycle.
fn order_keeping_valid(
    mut loaded: Vec<Arc<Ruleset>>,
    errors: &mut Vec<LoadError>,
) -> (Vec<Arc<Ruleset>>, Vec<LoadError>) {
    for _ in 0..=loaded.len() {
        match rule::order(loaded.clone()) {
            Ok(o) => return (o, std::mem::take(errors)),
            Err(RulesetError {
                ruleset, message, ..
            }) => {
                let Some(name) = ruleset else { break };
                if let Some(pos) = loaded.iter().position(|r| r.name == name) {
                    let r = loaded.remove(pos);
                    errors.push((Some(name), r.source.clone(), message));
                } else {
                    break;
                }
            }
        }
    }
    (Vec::new(), std::mem::take(errors))
}
