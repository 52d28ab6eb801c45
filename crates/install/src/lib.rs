//! `strata install agent` and `strata uninstall agent`: the steps that make a host monitored —
//! preflight, a stable host identity, files written atomically and only when their content
//! changes, the hardened systemd unit, the agent's record, worksheet and alert rules upserted on
//! the core by natural keys and labelled with their owner, enable and start, the first sample —
//! each reported as created, updated or unchanged. Running it twice changes nothing; killed
//! after any step (debug builds: `STRATA_INSTALL_FAILPOINT=<step>`), a re-run converges.
//!
//! Idempotency lives in the end state, never in receipts: files are compared byte for byte,
//! core objects are read and compared before anything is written.

mod core;
mod files;
mod host;
mod layout;
mod objects;
mod pg;
mod report;
mod service;

/// The script `GET /install.sh` serves: downloads and verifies the binary, runs `install agent`.
pub const INSTALL_SH: &str = include_str!("install.sh");

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use layout::{observe_unit_text, unit_text, Layout, Mode, OBSERVE_UNIT_NAME, UNIT_NAME};
pub use report::{Outcome, Report};

/// The host worksheet's id and body (what the installer upserts, and what the core offers when
/// an agent it did not install reports): CPU, memory, disk latency, network, filesystems.
pub fn host_worksheet(host_id: &str) -> (String, serde_json::Value) {
    let h = objects::Host {
        id: host_id,
        mode: Mode::Push,
        listen: "",
        broker: "",
    };
    match objects::worksheet(&h) {
        objects::Object::Doc { id, body, .. } => (id, body),
        objects::Object::Rule { name, .. } => unreachable!("the worksheet is a document: {name}"),
    }
}

use crate::core::Core;
use crate::layout::AgentConfig;
use crate::objects::Host;

/// The environment variable naming a step after which the installer exits (crash tests only;
/// debug builds only).
pub const FAILPOINT_ENV: &str = "STRATA_INSTALL_FAILPOINT";
/// The exit status of an installer stopped at a failpoint.
pub const FAILPOINT_EXIT_CODE: i32 = 97;
/// Every step of an install, in order (the failpoint names).
pub const STEPS: [&str; 13] = [
    "preflight",
    "host-id",
    "binary",
    "token",
    "config",
    "state-dir",
    "unit",
    "observer",
    "checks",
    "worksheet",
    "rules",
    "service",
    "first-sample",
];
/// Longest token file read, in bytes.
const TOKEN_BYTES_MAX: u64 = 4096;
/// How often the core is asked for the host's first sample.
const SAMPLE_POLL_MS: u64 = 250;
/// Longest wait for the first sample, in seconds.
pub const WAIT_S_MAX: u64 = 600;
/// Features a core must list in `/health` (`supports`) for this installer.
const CORE_FEATURES: [&str; 3] = ["checks", "owner", "unchanged"];

/// Exits the process after the step `name`. Compiled into debug builds only: a release binary
/// cannot be stopped half-way by its environment.
#[cfg(debug_assertions)]
fn failpoint(name: &str) {
    if std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == name) {
        std::process::exit(FAILPOINT_EXIT_CODE);
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
fn failpoint(_name: &str) {}

/// The init system the agent is installed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    Systemd,
    /// Files only: the operator starts `strata agent` themselves.
    None,
}

impl Init {
    pub fn parse(s: &str) -> Result<Init, String> {
        match s {
            "systemd" => Ok(Init::Systemd),
            "none" => Ok(Init::None),
            _ => Err(format!("--init {s}: must be systemd or none")),
        }
    }
}

/// What `strata install agent` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    pub core: String,
    pub token_file: Option<PathBuf>,
    pub mode: Mode,
    /// The broker: its name on the core (pull), or `host:port` (reverse).
    pub broker: Option<String>,
    /// Reverse mode through a broker: its push URL (agent registry) and token file; `None`:
    /// the agent dials the core, registered there.
    pub registry: Option<(String, Option<PathBuf>)>,
    pub plugins: Vec<String>,
    pub root: PathBuf,
    pub init: Init,
    pub dry_run: bool,
    pub force_config: bool,
    pub listen: String,
    pub statsd: String,
    /// The binary installed (the running one).
    pub binary: PathBuf,
    /// How long to wait for the host's first sample on the core (0: do not wait).
    pub wait_s: u64,
    /// The `postgres` plugin: the server's `host:port` and the monitoring role.
    pub postgres: Option<(String, String)>,
    /// The `redis` plugin: the server's `host:port`.
    pub redis: Option<String>,
    /// The `http` plugin: the local web server's port and the URL its check requests.
    pub http: Option<(u16, String)>,
    /// The interface the observer captures on (the plugins' traffic crosses it).
    pub observe_iface: String,
    /// The postgres plugin: the administrator (and password file) that creates the monitoring
    /// role; without one the role must exist.
    pub postgres_admin: Option<(String, Option<PathBuf>)>,
}

/// A failed run: the message, and the report of the steps done before it.
pub struct Failure {
    pub message: String,
    pub report: Report,
}

type Steps<T> = Result<T, String>;

/// Reads the token file (trimmed); the token never travels through arguments or environment.
fn read_token(path: &Path) -> Result<String, String> {
    read_secret(path, "--token-file")
}

/// Reads a one-line secret from the file given to `flag` (trimmed, printable, bounded).
fn read_secret(path: &Path, flag: &str) -> Result<String, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?
        .len();
    if len > TOKEN_BYTES_MAX {
        return Err(format!(
            "{flag} {}: {len} bytes, more than {TOKEN_BYTES_MAX}",
            path.display()
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    let token = text.trim().to_string();
    if token.is_empty() || token.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
        return Err(format!(
            "{flag} {}: the secret must be one line of printable characters",
            path.display()
        ));
    }
    Ok(token)
}

/// Preflight: privileges, init system, architecture, the core's reachability, version, token
/// and features. Changes nothing.
fn preflight(o: &Options, core: &Core) -> Steps<String> {
    if o.root == Path::new("/") && !rustix::process::geteuid().is_root() {
        return Err("run as root (sudo), or install into a directory with --root DIR".into());
    }
    if o.init == Init::Systemd {
        service::systemctl_path()?;
    }
    let arch = std::env::consts::ARCH;
    if !matches!(arch, "x86_64" | "aarch64") {
        return Err(format!(
            "architecture {arch} is not supported (x86_64, aarch64)"
        ));
    }
    let health = core
        .get_json("/health")?
        .ok_or_else(|| format!("core {}: no /health", core.url))?;
    let version = health["version"].as_str().unwrap_or("unknown").to_string();
    let supports: Vec<&str> = health["supports"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if let Some(missing) = CORE_FEATURES.iter().find(|f| !supports.contains(f)) {
        return Err(format!(
            "core {} (version {version}) does not support `{missing}`; upgrade the core first",
            core.url
        ));
    }
    // An authenticated read: a wrong token fails here, before anything is written.
    let a = core.request("GET", "/api/strata/v1/checks?owner=-", None)?;
    if a.status == 401 {
        return Err(format!(
            "core {} refused the token{}",
            core.url,
            o.token_file
                .as_ref()
                .map(|p| format!(" in {}", p.display()))
                .unwrap_or_else(|| " (none given: --token-file)".into())
        ));
    }
    if a.status != 200 {
        return Err(format!(
            "core {}: HTTP {} from the checks API: {}",
            core.url,
            a.status,
            a.error_text()
        ));
    }
    Ok(format!(
        "{arch}, core {} version {version}, token accepted",
        core.url
    ))
}

/// Runs every install step; on failure the report holds the steps done so far.
pub fn install(o: &Options) -> Result<Report, Failure> {
    let mut report = Report {
        dry_run: o.dry_run,
        ..Report::default()
    };
    match install_steps(o, &mut report) {
        Ok(()) => Ok(report),
        Err(message) => Err(Failure { message, report }),
    }
}

fn install_steps(o: &Options, r: &mut Report) -> Steps<()> {
    assert!(o.wait_s <= WAIT_S_MAX, "wait_s is checked by the caller");
    let started = Instant::now();
    let layout = Layout::new(&o.root);
    let token = o.token_file.as_deref().map(read_token).transpose()?;
    let core = Core::new(&o.core, token.clone())?;
    let detail = preflight(o, &core)?;
    r.push("preflight", Outcome::Ok, detail);
    failpoint("preflight");

    let (host_id, origin) = host::choose(&o.root)?;
    r.host_id = host_id.clone();
    let written = files::write_bytes(
        &layout.host_id,
        format!("{host_id}\n").as_bytes(),
        0o644,
        o.dry_run,
    )?;
    r.push("host-id", written, format!("{host_id} ({origin:?})"));
    failpoint("host-id");

    let outcome = files::copy_file(&o.binary, &layout.binary, 0o755, o.dry_run)?;
    r.push("binary", outcome, layout.binary.display().to_string());
    failpoint("binary");

    let outcome = match &token {
        Some(t) => {
            files::write_bytes(&layout.token, format!("{t}\n").as_bytes(), 0o600, o.dry_run)?
        }
        None => Outcome::Skipped,
    };
    r.push("token", outcome, layout.token.display().to_string());
    failpoint("token");

    // Where a reverse-mode agent is registered: the core, or the broker it dials.
    let via_broker = match (&o.registry, o.mode) {
        (Some((url, token_file)), Mode::Reverse) => {
            let token = token_file.as_deref().map(read_token).transpose()?;
            Some(Core::new(url, token)?)
        }
        (Some(_), _) => return Err("--broker-api is for --mode reverse".to_owned()),
        (None, _) => None,
    };
    let registry = via_broker.as_ref().unwrap_or(&core);
    let link = match o.mode {
        Mode::Reverse => Some(link_target(o, registry)?),
        _ => None,
    };
    let outcome = config_step(
        o,
        &layout,
        &host_id,
        &core.url,
        token.is_some(),
        link.as_ref(),
    )?;
    r.push("config", outcome, layout.config.display().to_string());
    failpoint("config");

    let outcome = files::ensure_dir(&layout.state, 0o700, o.dry_run)?;
    r.push("state-dir", outcome, layout.state.display().to_string());
    failpoint("state-dir");

    let unit_outcome = match o.init {
        Init::Systemd => files::write_bytes(
            &layout.unit,
            unit_text(&layout).as_bytes(),
            0o644,
            o.dry_run,
        )?,
        Init::None => Outcome::Skipped,
    };
    r.push("unit", unit_outcome, layout.unit.display().to_string());
    failpoint("unit");

    let (observer_outcome, detail) =
        observer_step(o, &layout, &host_id, &core.url, token.is_some())?;
    r.push("observer", observer_outcome, detail);
    failpoint("observer");

    if link.is_some() {
        let (outcome, detail) = link_step(o, &layout, &host_id, registry)?;
        r.push("link", outcome, detail);
    }

    let h = Host {
        id: &host_id,
        mode: o.mode,
        listen: &o.listen,
        broker: o.broker.as_deref().unwrap_or("default"),
    };
    let ws = core_steps(o, r, &core, &h)?;

    let outcome = match o.init {
        Init::Systemd => {
            let mut outcomes = vec![service::enable_start(
                UNIT_NAME,
                unit_outcome.changed(),
                o.dry_run,
            )?];
            if observer_outcome != Outcome::Skipped {
                let changed = observer_outcome.changed();
                outcomes.push(service::enable_start(
                    OBSERVE_UNIT_NAME,
                    changed,
                    o.dry_run,
                )?);
            }
            Outcome::combine(&outcomes)
        }
        Init::None => Outcome::Skipped,
    };
    r.push("service", outcome, UNIT_NAME);
    failpoint("service");

    r.worksheet_url = objects::worksheet_url(&core.url, &ws);
    let (outcome, detail) = first_sample(&core, &host_id, o, started)?;
    r.push("first-sample", outcome, detail);
    failpoint("first-sample");
    Ok(())
}

/// Where a reverse-mode agent dials, and the core certificate it pins.
struct LinkTarget {
    address: String,
    core_sha256: String,
}

/// The link listener of the core (or of the broker given by `--broker-api`), from its
/// brokers API: `--broker` when given, else its host with the listener's port.
fn link_target(o: &Options, core: &Core) -> Steps<LinkTarget> {
    let refused = || {
        format!(
            "--mode reverse: {} takes no agent links (start the core with --link-listen ADDR, \
             or the broker with --agent-listen ADDR)",
            core.url
        )
    };
    let links = core
        .get_json("/api/strata/v1/brokers")
        .map_err(|e| format!("{} ({e})", refused()))?
        .ok_or_else(refused)?;
    let core_sha256 = links["core_sha256"]
        .as_str()
        .ok_or_else(refused)?
        .to_owned();
    let address = match (&o.broker, links["listen"].as_str()) {
        (Some(b), _) => b.clone(),
        (None, Some(listen)) => {
            let port = listen.rsplit_once(':').map_or("", |(_, p)| p);
            let after_scheme = core
                .url
                .split_once("://")
                .map_or(core.url.as_str(), |(_, r)| r);
            let host_port = after_scheme.split('/').next().unwrap_or(after_scheme);
            let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
            format!("{host}:{port}")
        }
        (None, None) => return Err(refused()),
    };
    Ok(LinkTarget {
        address,
        core_sha256,
    })
}

/// The agent's link identity (`link.crt` / `link.key` in its state directory, made once) and
/// its registration on the core as `agent-<host id>`, made only when missing or different.
fn link_step(o: &Options, layout: &Layout, host_id: &str, core: &Core) -> Steps<(Outcome, String)> {
    let id = format!("agent-{host_id}");
    let stem = broker::tls::LINK_STEM;
    let made = !layout.state.join(format!("{stem}.crt")).exists();
    if o.dry_run && made {
        return Ok((
            Outcome::Created,
            format!("{id}: a new link certificate, registered"),
        ));
    }
    let identity = broker::tls::load_or_generate(&layout.state, stem, &id)?;
    let fingerprint = identity.fingerprint()?;
    let links = core.get_json("/api/strata/v1/brokers")?.unwrap_or_default();
    let held = links["brokers"]
        .as_array()
        .and_then(|all| all.iter().find(|b| b["id"] == id.as_str()));
    let outcome = match held {
        Some(b) if b["certificate_sha256"] == fingerprint.as_str() && !made => Outcome::Unchanged,
        Some(_) => Outcome::Updated,
        None => Outcome::Created,
    };
    if outcome != Outcome::Unchanged && !o.dry_run {
        let body =
            serde_json::json!({ "id": id, "certificate_sha256": fingerprint, "dial": "broker" });
        core.write(
            "POST",
            "/api/strata/v1/brokers",
            body.to_string().as_bytes(),
        )
        .map_err(|e| format!("registering {id} on the core: {e}"))?;
    }
    Ok((outcome, format!("{id} (certificate sha256 {fingerprint})")))
}

/// The `proto:port` entries the observer watches for the chosen plugins.
fn observed_wires(o: &Options) -> Result<Vec<String>, String> {
    let mut wires = Vec::new();
    if let Some((target, _)) = &o.postgres {
        wires.push(format!("postgres:{}", objects::target_port(target)?));
    }
    if let Some(target) = &o.redis {
        wires.push(format!("redis:{}", objects::target_port(target)?));
    }
    if let Some((port, _)) = &o.http {
        wires.push(format!("http:{port}"));
    }
    Ok(wires)
}

/// The observer's config and unit, written when a plugin watches a port (postgres, redis,
/// http): every query's latency seen on the wire, sent as the host's own check.
fn observer_step(
    o: &Options,
    layout: &Layout,
    host_id: &str,
    core_url: &str,
    token: bool,
) -> Steps<(Outcome, String)> {
    let wires = observed_wires(o)?;
    if wires.is_empty() {
        return Ok((Outcome::Skipped, "no plugin watches a port".into()));
    }
    let check = objects::observe_check(host_id);
    let text = layout::observe_config_text(
        layout,
        &layout::ObserveConfig {
            iface: &o.observe_iface,
            wires: &wires,
            core: core_url,
            check: &check,
            token,
        },
    );
    let mut outcomes = vec![files::write_bytes(
        &layout.observe_config,
        text.as_bytes(),
        0o644,
        o.dry_run,
    )?];
    if o.init == Init::Systemd {
        let unit = layout::observe_unit_text(layout);
        outcomes.push(files::write_bytes(
            &layout.observe_unit,
            unit.as_bytes(),
            0o644,
            o.dry_run,
        )?);
    }
    Ok((
        Outcome::combine(&outcomes),
        format!(
            "{} on {} ({})",
            wires.join(" "),
            o.observe_iface,
            layout.observe_config.display()
        ),
    ))
}

/// The agent's config: written when missing or equal, kept when it differs (an operator's edit)
/// unless `--force-config`.
fn config_step(
    o: &Options,
    layout: &Layout,
    host_id: &str,
    core_url: &str,
    token: bool,
    link: Option<&LinkTarget>,
) -> Steps<Outcome> {
    let text = layout::config_text(
        layout,
        &AgentConfig {
            host_id,
            mode: o.mode,
            listen: &o.listen,
            statsd: &o.statsd,
            core: core_url,
            broker: link.map_or(o.broker.as_deref(), |l| Some(l.address.as_str())),
            core_sha256: link.map(|l| l.core_sha256.as_str()),
            token,
        },
    )?;
    let planned = files::plan_bytes(&layout.config, text.as_bytes(), 0o644)
        .map_err(|e| format!("{}: {e}", layout.config.display()))?;
    if planned == Outcome::Updated && !o.force_config {
        return Ok(Outcome::Kept);
    }
    files::write_bytes(&layout.config, text.as_bytes(), 0o644, o.dry_run)
}

/// The host's objects on the core: its record, worksheet, rules and plugins' objects. Returns
/// the worksheet (its URL is printed at the end).
fn core_steps(o: &Options, r: &mut Report, core: &Core, h: &Host) -> Steps<objects::Object> {
    upsert_step(r, core, "checks", &[objects::agent_check(h)], o.dry_run)?;
    failpoint("checks");
    let ws = objects::worksheet(h);
    upsert_step(r, core, "worksheet", std::slice::from_ref(&ws), o.dry_run)?;
    failpoint("worksheet");
    upsert_step(r, core, "rules", &objects::rules(h), o.dry_run)?;
    failpoint("rules");
    if let Some((target, user)) = &o.postgres {
        if let Some((admin, password_file)) = &o.postgres_admin {
            let password = password_file
                .as_deref()
                .map(|p| read_secret(p, "--postgres-admin-password-file"))
                .transpose()?;
            let who = pg::Admin {
                target,
                user: admin,
                password: password.as_deref(),
            };
            let outcome = pg::ensure_monitoring_role(&who, user, o.dry_run)?;
            r.push(
                "postgres-role",
                outcome,
                format!("{user} (LOGIN, pg_monitor)"),
            );
        }
        let objs = objects::postgres(h, target, user)?;
        upsert_step(r, core, "postgres", &objs, o.dry_run)?;
    }
    if let Some(target) = &o.redis {
        let objs = objects::redis(h, target)?;
        upsert_step(r, core, "redis", &objs, o.dry_run)?;
    }
    if let Some((port, url)) = &o.http {
        upsert_step(r, core, "http", &objects::http(h, *port, url), o.dry_run)?;
    }
    Ok(ws)
}

fn upsert_step(
    r: &mut Report,
    core: &Core,
    step: &'static str,
    objs: &[objects::Object],
    dry_run: bool,
) -> Steps<()> {
    let mut parts = Vec::with_capacity(objs.len());
    let mut labels = Vec::with_capacity(objs.len());
    for obj in objs {
        parts.push(objects::upsert(core, obj, dry_run)?);
        labels.push(obj.label());
    }
    r.push(step, Outcome::combine(&parts), labels.join(" "));
    Ok(())
}

/// Waits until the core holds a stream with the tag `host:<id>`.
fn first_sample(
    core: &Core,
    host_id: &str,
    o: &Options,
    started: Instant,
) -> Steps<(Outcome, String)> {
    if o.wait_s == 0 || o.dry_run {
        return Ok((
            Outcome::Skipped,
            "not waited for (--wait-s 0 or --dry-run)".into(),
        ));
    }
    let path = format!(
        "/api/strata/v1/find?query={}",
        core::encode(&format!("and(host:{host_id})"))
    );
    let deadline = started + Duration::from_secs(o.wait_s);
    let polls_max = o.wait_s * 1000 / SAMPLE_POLL_MS + 1;
    for _ in 0..polls_max {
        let found = core
            .get_json(&path)?
            .and_then(|v| v.as_array().map(|a| a.len()))
            .unwrap_or(0);
        if found > 0 {
            return Ok((
                Outcome::Ok,
                format!(
                    "{found} stream(s) from host {host_id} on the core after {:.1} s",
                    started.elapsed().as_secs_f64()
                ),
            ));
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(SAMPLE_POLL_MS));
    }
    Err(format!(
        "no sample from host {host_id} within {} s of the start (is the agent running? \
         `strata agent --config {}`)",
        o.wait_s,
        Layout::new(&o.root).config.display()
    ))
}

/// What `strata uninstall agent` was asked to do.
#[derive(Clone, Debug)]
pub struct UninstallOptions {
    /// The core; default: the config's `[push] url`.
    pub core: Option<String>,
    pub token_file: Option<PathBuf>,
    /// The broker whose agent registry holds this agent, and its token file.
    pub registry: Option<(String, Option<PathBuf>)>,
    pub root: PathBuf,
    pub init: Init,
    pub purge: bool,
    pub dry_run: bool,
}

/// Stops and removes the agent; with `purge`, also its config, token, identity, state and every
/// object the host owns on the core.
pub fn uninstall(o: &UninstallOptions) -> Result<Report, Failure> {
    let mut report = Report {
        dry_run: o.dry_run,
        ..Report::default()
    };
    match uninstall_steps(o, &mut report) {
        Ok(()) => Ok(report),
        Err(message) => Err(Failure { message, report }),
    }
}

fn uninstall_steps(o: &UninstallOptions, r: &mut Report) -> Steps<()> {
    if o.root == Path::new("/") && !rustix::process::geteuid().is_root() {
        return Err("run as root (sudo), or give --root DIR".into());
    }
    let layout = Layout::new(&o.root);
    let config: Option<toml::Table> = match std::fs::read_to_string(&layout.config) {
        Ok(t) => Some(
            toml::from_str(&t)
                .map_err(|e| format!("{}: {}", layout.config.display(), e.message()))?,
        ),
        Err(_) => None,
    };
    let host_id = config
        .as_ref()
        .and_then(|c| c.get("host_id")?.as_str().map(str::to_owned))
        .or_else(|| {
            std::fs::read_to_string(&layout.host_id)
                .ok()
                .map(|t| t.trim().to_string())
        })
        .unwrap_or_default();
    r.host_id = host_id.clone();
    let mut stopped = Vec::with_capacity(2);
    let mut removed = Vec::with_capacity(2);
    for (unit, path) in [
        (UNIT_NAME, &layout.unit),
        (OBSERVE_UNIT_NAME, &layout.observe_unit),
    ] {
        stopped.push(match o.init {
            Init::Systemd if path.exists() => service::disable_stop(unit, o.dry_run)?,
            _ => Outcome::Skipped,
        });
        removed.push(files::remove(path, false, o.dry_run)?);
    }
    r.push("service", Outcome::combine(&stopped), UNIT_NAME);
    let outcome = Outcome::combine(&removed);
    if outcome.changed() && o.init == Init::Systemd && !o.dry_run {
        service::daemon_reload()?;
    }
    r.push("unit", outcome, layout.unit.display().to_string());
    r.push(
        "observer",
        files::remove(&layout.observe_config, false, o.dry_run)?,
        layout.observe_config.display().to_string(),
    );
    r.push(
        "binary",
        files::remove(&layout.binary, false, o.dry_run)?,
        layout.binary.display().to_string(),
    );
    if !o.purge {
        return Ok(());
    }
    purge_core(o, r, config.as_ref(), &layout, &host_id)?;
    for (step, path, tree) in [
        ("config", &layout.config, false),
        ("token", &layout.token, false),
        ("plugins", &layout.plugins, true),
        ("agent-etc", &layout.agent_etc, true),
        ("host-id", &layout.host_id, false),
        ("state-dir", &layout.state, true),
    ] {
        r.push(
            step,
            files::remove(path, tree, o.dry_run)?,
            path.display().to_string(),
        );
    }
    // Directories the installer made and that are now empty.
    for dir in [&layout.etc, &o.root.join("var/lib/strata")] {
        if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()) && !o.dry_run {
            let _ = std::fs::remove_dir(dir);
        }
    }
    Ok(())
}

fn purge_core(
    o: &UninstallOptions,
    r: &mut Report,
    config: Option<&toml::Table>,
    layout: &Layout,
    host_id: &str,
) -> Steps<()> {
    if host_id.is_empty() {
        r.push("core", Outcome::Skipped, "no host id: nothing to delete");
        return Ok(());
    }
    let push = config.and_then(|c| c.get("push")?.as_table().cloned());
    let url = o
        .core
        .clone()
        .or_else(|| push.as_ref()?.get("url")?.as_str().map(str::to_owned))
        .ok_or("--core URL is needed to delete the host's objects (the config names no core)")?;
    let token_file = o.token_file.clone().or_else(|| {
        push.as_ref()?
            .get("token_file")?
            .as_str()
            .map(PathBuf::from)
            .or_else(|| layout.token.exists().then(|| layout.token.clone()))
    });
    let token = token_file.as_deref().map(read_token).transpose()?;
    let core = Core::new(&url, token)?;
    let owner = objects::owner(host_id);
    let mut n = objects::delete_owned(&core, &owner, o.dry_run)?;
    // A reverse-mode agent's link registration (none on a core without links, or in push
    // mode), on the core or on the broker it dials.
    let via_broker = match &o.registry {
        Some((url, token_file)) => {
            let token = token_file.as_deref().map(read_token).transpose()?;
            Some(Core::new(url, token)?)
        }
        None => None,
    };
    let registry = via_broker.as_ref().unwrap_or(&core);
    let link = format!("/api/strata/v1/brokers/agent-{host_id}");
    if !o.dry_run && (200..300).contains(&registry.request("DELETE", &link, None)?.status) {
        n += 1;
    }
    let outcome = if n > 0 {
        Outcome::Removed
    } else {
        Outcome::Absent
    };
    r.push("core", outcome, format!("{n} object(s) owned by {owner}"));
    Ok(())
}
