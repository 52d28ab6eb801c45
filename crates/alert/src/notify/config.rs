//! The notification configuration (TOML): a routing tree in Alertmanager's shape, receivers
//! with their retries, reminders, escalation and fallback, and maintenance windows.
//!
//! ```toml
//! [route]
//! receiver = "team"
//! group_by = ["alertname"]
//! [[route.routes]]
//! matchers = ['severity="1"']
//! receiver = "pager"
//! continue = true
//!
//! [[receiver]]
//! name = "team"
//! webhook = "http://127.0.0.1:8080/hook"   # or alertmanager = "http://…:9093", file = "/…"
//! fallback = "log"
//! reminders = ["1h", "4h"]
//! escalate = [{ after = "30m", receiver = "pager" }]
//!
//! [[maintenance]]
//! name = "db upgrade"
//! start = "2026-11-28T22:00:00Z"
//! end = "2026-11-28T23:00:00Z"
//! matchers = ['team="db"']
//! severities = [2, 3, 4, 5]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::util::parse_duration_ms;

/// Receivers one configuration may name.
pub const RECEIVERS_MAX: usize = 64;
/// Routes in the whole tree.
pub const ROUTES_MAX: usize = 1_024;
/// How deep the routing tree may nest.
pub const ROUTE_DEPTH_MAX: usize = 16;
/// Maintenance windows.
pub const MAINTENANCE_MAX: usize = 1_024;
/// Reminder delays and escalation steps per receiver.
pub const STEPS_MAX: usize = 16;
// Matchers and times live in notify/matcher.rs (the windows and inhibit rules use them too).
pub use super::matcher::{parse_time_ms, Matcher, MATCHERS_MAX};

/// Where a receiver delivers.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// POST of Alertmanager's webhook JSON (version 4).
    Webhook(String),
    /// An existing Alertmanager: POST `<url>/api/v2/alerts`, firing alerts re-sent every
    /// `resend_ms` as Prometheus does, so its own routing, silences and UI keep working.
    Alertmanager(String),
    /// One JSON line per delivery appended to a file, synced.
    File(PathBuf),
    /// Email, Slack, PagerDuty, VictorOps or a templated webhook (`notify/contacts`).
    Contact(Box<super::contacts::Contact>),
}

#[derive(Clone, Debug)]
pub struct Receiver {
    pub name: String,
    pub target: Target,
    /// Takes a delivery this receiver failed permanently (4xx) or for longer than
    /// `give_up_after_ms`; without one, a failing delivery is retried until it succeeds.
    pub fallback: Option<String>,
    pub give_up_after_ms: i64,
    pub retry_initial_ms: i64,
    pub retry_max_ms: i64,
    /// Per-request timeout.
    pub timeout_ms: i64,
    /// Delays between reminders of an unacknowledged firing alert; the last one repeats.
    pub reminders_ms: Vec<i64>,
    /// (delay since firing, receiver) steps for an unacknowledged firing alert.
    pub escalate: Vec<(i64, String)>,
    /// Alertmanager targets: how often firing alerts are sent again.
    pub resend_ms: i64,
}

/// One node of the routing tree, its unset fields inherited from its parent.
#[derive(Clone, Debug)]
pub struct Route {
    /// `0`, `0.1`, `0.1.0`: the node's place in the tree (part of the group key).
    pub id: String,
    pub receiver: String,
    pub matchers: Vec<Matcher>,
    pub group_by: Vec<String>,
    pub cont: bool,
    pub routes: Vec<Route>,
    // ---- grouping timers (notify/group.rs), inherited down the tree ----
    pub timing: super::group::Timing,
}

/// Where one alert goes: the route node that took it, its receiver, its group's labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Dest {
    pub route: String,
    pub receiver: String,
    pub group_labels: BTreeMap<String, String>,
    pub timing: super::group::Timing,
}

impl Route {
    fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matchers.iter().all(|m| m.matches(labels))
    }

    /// Alertmanager's walk: children in order, the first that matches taken (and later ones
    /// too while the matching child says `continue`); the node itself when none matched.
    fn walk(&self, labels: &BTreeMap<String, String>, out: &mut Vec<Dest>) {
        let mut any = false;
        for c in &self.routes {
            if !c.admits(labels) {
                continue;
            }
            c.walk(labels, out);
            any = true;
            if !c.cont {
                break;
            }
        }
        if !any {
            let group_labels = if self.group_by.iter().any(|g| g == "...") {
                labels.clone()
            } else {
                self.group_by
                    .iter()
                    .filter_map(|g| labels.get(g).map(|v| (g.clone(), v.clone())))
                    .collect()
            };
            out.push(Dest {
                route: self.id.clone(),
                receiver: self.receiver.clone(),
                group_labels,
                timing: self.timing,
            });
        }
    }

    /// Every destination of an alert with these labels, in tree order.
    pub fn route(&self, labels: &BTreeMap<String, String>) -> Vec<Dest> {
        let mut out = Vec::new();
        self.walk(labels, &mut out);
        out
    }
}

/// A window during which matching alerts are not notified (evaluation and history go on).
pub type Maintenance = super::window::Window;

#[derive(Clone, Debug)]
pub struct Config {
    pub route: Route,
    pub receivers: Vec<Receiver>,
    pub maintenance: Vec<Maintenance>,
    // ---- inhibition (notify/inhibit.rs) ----
    pub inhibit: Vec<super::inhibit::InhibitRule>,
}

impl Config {
    pub fn receiver(&self, name: &str) -> Option<&Receiver> {
        self.receivers.iter().find(|r| r.name == name)
    }

    /// The window muting this alert at `t_ms`, if any.
    pub fn muted_by(
        &self,
        t_ms: i64,
        labels: &BTreeMap<String, String>,
        severity: u8,
    ) -> Option<&Maintenance> {
        self.maintenance
            .iter()
            .find(|m| m.mutes(t_ms, labels, severity))
    }
}

/// Where an example alert goes: `strata rules routes test` prints it, the routes API answers it.
#[derive(Clone, Debug, PartialEq)]
pub struct Explain {
    /// Its destinations, in tree order.
    pub dests: Vec<Dest>,
    /// The windows whose scope holds it (it is muted while one is active).
    pub windows: Vec<String>,
    /// The inhibit rules (by place in the file) it is a target of.
    pub inhibit: Vec<usize>,
}

impl Config {
    /// Where an alert with these labels goes, which of `windows` scope it (its severity is its
    /// `severity` label), and which inhibit rules could mute it.
    pub fn explain<'a>(
        &self,
        labels: &BTreeMap<String, String>,
        windows: impl Iterator<Item = &'a Maintenance>,
    ) -> Explain {
        let severity: u8 = labels
            .get("severity")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Explain {
            dests: self.route.route(labels),
            windows: windows
                .filter(|w| w.scopes(labels, severity))
                .map(|w| w.name().to_string())
                .collect(),
            inhibit: (0..self.inhibit.len())
                .filter(|&n| self.inhibit[n].target.iter().all(|m| m.matches(labels)))
                .collect(),
        }
    }
}

// ---- the file ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    receiver: Option<String>,
    #[serde(default)]
    matchers: Vec<String>,
    group_by: Option<Vec<String>>,
    #[serde(default, rename = "continue")]
    cont: bool,
    #[serde(default)]
    routes: Vec<RouteFile>,
    // ---- grouping timers (notify/group.rs) ----
    group_wait: Option<String>,
    group_interval: Option<String>,
    repeat_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    after: String,
    receiver: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiverFile {
    name: String,
    webhook: Option<String>,
    alertmanager: Option<String>,
    file: Option<PathBuf>,
    fallback: Option<String>,
    give_up_after: Option<String>,
    retry_initial: Option<String>,
    retry_max: Option<String>,
    timeout: Option<String>,
    #[serde(default)]
    reminders: Vec<String>,
    #[serde(default)]
    escalate: Vec<StepFile>,
    resend: Option<String>,
    // ---- contacts (notify/contacts) ----
    email: Option<super::contacts::EmailFile>,
    slack: Option<super::contacts::SlackFile>,
    pagerduty: Option<super::contacts::PagerDutyFile>,
    victorops: Option<super::contacts::VictorOpsFile>,
    template: Option<String>,
    content_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    route: Option<RouteFile>,
    #[serde(default)]
    receiver: Vec<ReceiverFile>,
    #[serde(default)]
    maintenance: Vec<super::window::WindowSpec>,
    // ---- routing side: inhibition, an alertmanager.yml read as it is ----
    #[serde(default)]
    inhibit_rules: Vec<super::inhibit::InhibitFile>,
    alertmanager_yml: Option<PathBuf>,
}

fn duration(what: &str, text: Option<&String>, default_ms: i64) -> Result<i64, String> {
    match text {
        None => Ok(default_ms),
        Some(t) => parse_duration_ms(t).map_err(|e| format!("{what}: {e}")),
    }
}

fn matchers(what: &str, list: &[String]) -> Result<Vec<Matcher>, String> {
    if list.len() > MATCHERS_MAX {
        return Err(format!("{what}: more than {MATCHERS_MAX} matchers"));
    }
    list.iter()
        .map(|m| Matcher::parse(m).map_err(|e| format!("{what}: {e}")))
        .collect()
}

struct Parent<'a> {
    receiver: Option<&'a str>,
    group_by: &'a [String],
    timing: super::group::Timing,
}

fn route(f: &RouteFile, id: String, parent: &Parent, count: &mut usize) -> Result<Route, String> {
    *count += 1;
    if *count > ROUTES_MAX {
        return Err(format!("more than {ROUTES_MAX} routes"));
    }
    if id.split('.').count() > ROUTE_DEPTH_MAX {
        return Err(format!("route {id}: nested deeper than {ROUTE_DEPTH_MAX}"));
    }
    let receiver = f
        .receiver
        .as_deref()
        .or(parent.receiver)
        .ok_or_else(|| format!("route {id}: no receiver (the top route must name one)"))?;
    let group_by = f.group_by.as_deref().unwrap_or(parent.group_by);
    let timing = super::group::Timing::inherit(
        &format!("route {id}"),
        parent.timing,
        [&f.group_wait, &f.group_interval, &f.repeat_interval],
    )?;
    let here = Parent {
        receiver: Some(receiver),
        group_by,
        timing,
    };
    let mut routes = Vec::with_capacity(f.routes.len());
    for (n, c) in f.routes.iter().enumerate() {
        routes.push(route(c, format!("{id}.{n}"), &here, count)?);
    }
    Ok(Route {
        matchers: matchers(&format!("route {id}"), &f.matchers)?,
        receiver: receiver.to_string(),
        group_by: group_by.to_vec(),
        cont: f.cont,
        routes,
        id,
        timing,
    })
}

fn receiver(f: &ReceiverFile) -> Result<Receiver, String> {
    let what = format!("receiver '{}'", f.name);
    let valid = !f.name.is_empty()
        && f.name.len() <= 48
        && f.name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
    if !valid {
        return Err(format!(
            "{what}: a name is 1-48 of [A-Za-z0-9_-] (it names files and journal subscribers)"
        ));
    }
    // ---- contacts (notify/contacts) ----
    let contact = super::contacts::parse(
        &what,
        &super::contacts::Files {
            email: f.email.as_ref(),
            slack: f.slack.as_ref(),
            pagerduty: f.pagerduty.as_ref(),
            victorops: f.victorops.as_ref(),
            webhook: f.webhook.as_deref(),
            template: f.template.as_deref(),
            content_type: f.content_type.as_deref(),
        },
    )?;
    let target = match (contact, &f.webhook, &f.alertmanager, &f.file) {
        (Some(c), _, None, None) => Target::Contact(Box::new(c)),
        (None, Some(u), None, None) => Target::Webhook(url(&what, u)?),
        (None, None, Some(u), None) => {
            Target::Alertmanager(url(&what, u)?.trim_end_matches('/').into())
        }
        (None, None, None, Some(p)) => Target::File(p.clone()),
        _ => {
            return Err(format!(
                "{what}: give exactly one of webhook, alertmanager, file, email, slack, pagerduty or victorops"
            ))
        }
    };
    let reminders_ms = f
        .reminders
        .iter()
        .map(|r| duration(&format!("{what} reminders"), Some(r), 0))
        .collect::<Result<Vec<_>, _>>()?;
    if reminders_ms.iter().any(|&r| r <= 0) {
        return Err(format!("{what}: reminders must be longer than 0"));
    }
    let escalate = f
        .escalate
        .iter()
        .map(|s| {
            Ok((
                duration(&format!("{what} escalate"), Some(&s.after), 0)?,
                s.receiver.clone(),
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if reminders_ms.len() > STEPS_MAX || escalate.len() > STEPS_MAX {
        return Err(format!(
            "{what}: more than {STEPS_MAX} reminders or escalation steps"
        ));
    }
    let r = Receiver {
        name: f.name.clone(),
        target,
        fallback: f.fallback.clone(),
        give_up_after_ms: duration(
            &format!("{what} give_up_after"),
            f.give_up_after.as_ref(),
            300_000,
        )?,
        retry_initial_ms: duration(
            &format!("{what} retry_initial"),
            f.retry_initial.as_ref(),
            500,
        )?,
        retry_max_ms: duration(&format!("{what} retry_max"), f.retry_max.as_ref(), 30_000)?,
        timeout_ms: duration(&format!("{what} timeout"), f.timeout.as_ref(), 10_000)?,
        reminders_ms,
        escalate,
        resend_ms: duration(&format!("{what} resend"), f.resend.as_ref(), 60_000)?,
    };
    if r.retry_initial_ms <= 0 || r.retry_max_ms < r.retry_initial_ms || r.timeout_ms <= 0 {
        return Err(format!(
            "{what}: retry_initial and timeout must be longer than 0, retry_max at least retry_initial"
        ));
    }
    Ok(r)
}

fn url(what: &str, u: &str) -> Result<String, String> {
    if u.starts_with("http://") || u.starts_with("https://") {
        Ok(u.to_string())
    } else {
        Err(format!("{what}: '{u}' is not an http:// or https:// URL"))
    }
}

impl Config {
    /// Reads and checks a configuration; errors name the receiver, route or window.
    /// `alertmanager_yml` is read relative to the working directory (see `load`).
    pub fn parse(text: &str) -> Result<Config, String> {
        Config::parse_in(text, std::path::Path::new("."))
    }

    /// Reads the configuration file at `path` (`alertmanager_yml` relative to its directory).
    pub fn load(path: &std::path::Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        Config::parse_in(&text, path.parent().unwrap_or(std::path::Path::new(".")))
    }

    fn parse_in(text: &str, base: &std::path::Path) -> Result<Config, String> {
        let mut f: File = toml::from_str(text).map_err(|e| e.message().to_string())?;
        // ---- an alertmanager.yml read as it is (notify/amconfig.rs) ----
        if let Some(yml) = f.alertmanager_yml.take() {
            let path = base.join(&yml);
            let am = super::amconfig::read_file(&path)?;
            let am: File =
                toml::from_str(&am).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
            if f.route.is_some() {
                return Err(format!(
                    "give [route] or alertmanager_yml, not both ({} has the route)",
                    path.display()
                ));
            }
            f.route = am.route;
            f.inhibit_rules.extend(am.inhibit_rules);
            // Receivers of the TOML file win over the YAML's of the same name.
            for r in am.receiver {
                if !f.receiver.iter().any(|x| x.name == r.name) {
                    f.receiver.push(r);
                }
            }
        }
        let Some(route_file) = &f.route else {
            return Err("no [route] (and no alertmanager_yml)".into());
        };
        if f.receiver.len() > RECEIVERS_MAX || f.maintenance.len() > MAINTENANCE_MAX {
            return Err(format!(
                "at most {RECEIVERS_MAX} receivers and {MAINTENANCE_MAX} maintenance windows"
            ));
        }
        if f.inhibit_rules.len() > super::inhibit::INHIBIT_RULES_MAX {
            return Err(format!(
                "at most {} inhibit rules",
                super::inhibit::INHIBIT_RULES_MAX
            ));
        }
        let receivers = f
            .receiver
            .iter()
            .map(receiver)
            .collect::<Result<Vec<_>, _>>()?;
        let mut count = 0;
        let top = Parent {
            receiver: None,
            group_by: &[],
            timing: super::group::Timing::default(),
        };
        let route = route(route_file, "0".into(), &top, &mut count)?;
        let maintenance = f
            .maintenance
            .into_iter()
            .map(super::window::Window::parse)
            .collect::<Result<Vec<_>, _>>()?;
        let inhibit = f
            .inhibit_rules
            .iter()
            .enumerate()
            .map(|(n, r)| super::inhibit::InhibitRule::parse(n, r))
            .collect::<Result<Vec<_>, _>>()?;
        let c = Config {
            route,
            receivers,
            maintenance,
            inhibit,
        };
        c.check_names()?;
        Ok(c)
    }

    fn check_names(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.receivers {
            if !seen.insert(r.name.as_str()) {
                return Err(format!("receiver '{}' is defined twice", r.name));
            }
        }
        let known = |n: &str, what: String| {
            if seen.contains(n) {
                Ok(())
            } else {
                Err(format!("{what} names receiver '{n}', which is not defined"))
            }
        };
        let mut stack = vec![&self.route];
        while let Some(r) = stack.pop() {
            known(&r.receiver, format!("route {}", r.id))?;
            stack.extend(r.routes.iter());
        }
        for r in &self.receivers {
            if let Some(f) = &r.fallback {
                known(f, format!("receiver '{}' fallback", r.name))?;
                if *f == r.name {
                    return Err(format!("receiver '{}' is its own fallback", r.name));
                }
            }
            for (_, e) in &r.escalate {
                known(e, format!("receiver '{}' escalate", r.name))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const CONFIG: &str = r#"
[route]
receiver = "team"
group_by = ["alertname"]
[[route.routes]]
matchers = ['severity="1"']
receiver = "pager"
continue = true
[[route.routes]]
matchers = ['team=~"db|storage"']
receiver = "db"
group_by = ["alertname", "instance"]
[[route.routes]]
matchers = ['team!=""']
receiver = "other"

[[receiver]]
name = "team"
webhook = "http://127.0.0.1:1/hook"
[[receiver]]
name = "pager"
webhook = "http://127.0.0.1:1/page"
fallback = "team"
[[receiver]]
name = "db"
file = "/tmp/db.jsonl"
[[receiver]]
name = "other"
alertmanager = "http://127.0.0.1:9093/"

[[maintenance]]
name = "db upgrade"
start = "2026-11-28T22:00:00Z"
end = "2026-11-28T23:30:00+01:00"
matchers = ['team="db"']
severities = [2, 3]
"#;

    #[test]
    fn routes_walk_as_alertmanager_does() {
        let c = Config::parse(CONFIG).unwrap();
        let to = |l: &[(&str, &str)]| -> Vec<String> {
            c.route
                .route(&labels(l))
                .into_iter()
                .map(|d| format!("{}@{}{:?}", d.receiver, d.route, d.group_labels))
                .collect()
        };
        // continue: the pager and then the first later match.
        assert_eq!(
            to(&[("alertname", "a"), ("severity", "1"), ("team", "db")]),
            [
                "pager@0.0{\"alertname\": \"a\"}",
                "db@0.1{\"alertname\": \"a\"}"
            ]
        );
        // Without continue the first match ends the walk.
        assert_eq!(
            to(&[("alertname", "a"), ("team", "storage"), ("instance", "x")]),
            ["db@0.1{\"alertname\": \"a\", \"instance\": \"x\"}"]
        );
        assert_eq!(
            to(&[("alertname", "a"), ("team", "web")]),
            ["other@0.2{\"alertname\": \"a\"}"]
        );
        // No child matched: the top route.
        assert_eq!(to(&[("alertname", "a")]), ["team@0{\"alertname\": \"a\"}"]);
    }

    #[test]
    fn maintenance_windows_mute_by_time_labels_and_severity() {
        let c = Config::parse(CONFIG).unwrap();
        let start = parse_time_ms("2026-11-28T22:00:00Z").unwrap();
        // 23:30 at +01:00 is 22:30 UTC.
        assert_eq!(
            c.maintenance[0].occurrence_at(start),
            Some((start, start + 1_800_000))
        );
        let db = labels(&[("team", "db")]);
        assert!(c.muted_by(start, &db, 2).is_some());
        assert!(c.muted_by(start + 1_799_999, &db, 3).is_some());
        assert!(
            c.muted_by(start + 1_800_000, &db, 2).is_none(),
            "the end is open"
        );
        assert!(c.muted_by(start - 1, &db, 2).is_none());
        assert!(
            c.muted_by(start, &db, 1).is_none(),
            "severity 1 still pages"
        );
        assert!(c.muted_by(start, &labels(&[("team", "web")]), 2).is_none());
    }

    #[test]
    fn bad_configurations_say_what_and_where() {
        let cases = [
            (
                CONFIG.replace("fallback = \"team\"", "fallback = \"nobody\""),
                "receiver 'pager' fallback names receiver 'nobody', which is not defined",
            ),
            (
                CONFIG.replace("severity=\"1\"", "severity~1"),
                "route 0.0: matcher 'severity~1'",
            ),
            (
                CONFIG.replace(
                    "webhook = \"http://127.0.0.1:1/hook\"",
                    "webhook = \"ftp://x\"",
                ),
                "receiver 'team': 'ftp://x' is not an http:// or https:// URL",
            ),
            (
                CONFIG.replace("2026-11-28T22:00:00Z", "tomorrow"),
                "maintenance 'db upgrade' start: 'tomorrow' is not a time",
            ),
        ];
        for (text, want) in cases {
            let e = Config::parse(&text).unwrap_err();
            assert!(e.contains(want), "{e} should say {want}");
        }
    }

    #[test]
    fn a_converted_alertmanager_yml_reads_as_a_configuration() {
        let c = super::super::amconfig::convert(super::super::amconfig::tests::AM).unwrap();
        // With the receiver it could not convert defined in TOML.
        let full = format!(
            "{}\n[[receiver]]\nname = \"db\"\nfile = \"/tmp/db.jsonl\"\n",
            c.toml
        );
        let cfg = Config::parse(&full).unwrap();
        assert_eq!(cfg.inhibit.len(), 2);
        assert_eq!(cfg.route.routes[0].timing.wait_ms, 10_000);
        assert_eq!(cfg.route.routes[1].timing.wait_ms, 30_000, "inherited");
    }

    #[test]
    fn times_read_with_offsets() {
        assert_eq!(parse_time_ms("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(parse_time_ms("1970-01-01T01:00:00+01:00").unwrap(), 0);
        assert_eq!(
            parse_time_ms("2000-03-01T00:00:00Z").unwrap(),
            951_868_800_000
        );
        assert!(parse_time_ms("2000-13-01T00:00:00Z").is_err());
        assert_eq!(parse_time_ms("1970-01-01T00:00:01.5Z").unwrap(), 1_500);
        assert_eq!(parse_time_ms("1970-01-01T01:00:00.250+01:00").unwrap(), 250);
        assert!(parse_time_ms("1970-01-01T00:00:01.Z").is_err());
    }
}
