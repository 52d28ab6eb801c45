//! `strata rules test`: promtool's unit-test format, in TOML, on a virtual clock.
//!
//! ```toml
//! rule_files = ["login.toml"]          # relative to the test file; or [[ruleset]] tables here
//! evaluation_interval = "1m"           # one input value per interval, from time 0
//!
//! [[input_series]]
//! series = 'login|ST[app:web]'
//! values = '{H[0.12]=40,H[1.6]=3}x4 {H[0.12]=40,H[1.6]=200}x10 _x2 stale'
//!
//! [[alert_rule_test]]
//! eval_time = "10m"
//! alertname = "login-slow"
//! [[alert_rule_test.exp_alerts]]
//! labels = { app = "web", severity = "1" }
//! annotations = { summary = "1000 people" }
//! ```
//!
//! Series notation: `a+bxn` is `a, a+b, …, a+n·b` (n+1 values), `a-bxn` likewise down, `axn`
//! is `a` n+1 times, `_` a missing value and `_xn` n of them, `stale` a missing value (our
//! streams have no staleness marker: a value is simply absent), a histogram `{H[v]=n,…}` (also
//! `{…}xn` and `{…}+{…}xn`, adding bin by bin), text `"ok"` (also `"ok"xn`).
//!
//! Value `i` is written at `i × interval`; the state at `eval_time` is the state after the
//! evaluation of the period that ends at `eval_time` (the values before it). The alerts
//! compared are the instances firing or recovering (optionally `state = "recovering"`), by
//! labels and annotations. The run goes through the same cycle as live evaluation, over a
//! temporary store.
//!
//! Notifications: with a notify configuration (`notify_file = "notify.toml"`, or the same
//! tables inline under `[notify]`), every receiver's worker reads the run's records as it
//! would live, and `[[notification_test]]` compares the notifications made in
//! `(previous eval_time, eval_time]` with `exp_notifications` (in order): `receiver`, `status`,
//! and when given `at` (the record time), `group` (group labels) and `alerts` (each a subset of
//! one notified alert's labels, all alerts counted). `[[ack]]` acknowledges, at `at`, the
//! firing alerts whose labels include `labels` (optionally `until`). `start` (RFC 3339) puts
//! time 0 at a real date, for windows in a time zone (DST days).
//!
//! ```toml
//! start = "2026-03-29T00:00:00Z"
//! notify_file = "notify.toml"
//! [[ack]]
//! at = "20m"
//! labels = { alertname = "login-slow" }
//! [[notification_test]]
//! eval_time = "10m"
//! [[notification_test.exp_notifications]]
//! receiver = "team"
//! status = "firing"
//! at = "7m"
//! group = { alertname = "login-slow" }
//! alerts = [{ app = "web" }]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hist::Histogram;
use serde::Deserialize;
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

use crate::backtest::Backtest;
use crate::record::Record;
use crate::rule::{self, Ruleset, Source, Spec};
use crate::state::State;
use crate::util::parse_duration_ms;

/// Values one series notation may expand to.
pub const VALUES_MAX: usize = 100_000;
/// Input series in one test file.
pub const SERIES_MAX: usize = 10_000;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    #[serde(default)]
    pub rule_files: Vec<String>,
    #[serde(default)]
    pub ruleset: Vec<Spec>,
    #[serde(default)]
    pub evaluation_interval: Option<String>,
    #[serde(default)]
    pub input_series: Vec<InputSeries>,
    #[serde(default)]
    pub alert_rule_test: Vec<AlertTest>,
    // ---- notifications ----
    #[serde(default)]
    pub start: Option<String>,
    #[serde(default)]
    pub notify_file: Option<String>,
    #[serde(default)]
    pub notify: Option<toml::Table>,
    #[serde(default)]
    pub ack: Vec<AckSpec>,
    #[serde(default)]
    pub notification_test: Vec<NotificationTest>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckSpec {
    pub at: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub until: Option<String>,
    #[serde(default)]
    pub note: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationTest {
    pub eval_time: String,
    #[serde(default)]
    pub exp_notifications: Vec<ExpNotification>,
}

/// An expected notification (and, filled in, one that was made).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExpNotification {
    pub receiver: String,
    pub status: String,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub group: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub alerts: Option<Vec<BTreeMap<String, String>>>,
}

impl ExpNotification {
    /// One line: `receiver status at 7m group {…} alerts [{…}, …]`.
    pub fn text(&self) -> String {
        let map = |m: &BTreeMap<String, String>| {
            let p: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            format!("{{{}}}", p.join(", "))
        };
        let mut t = format!("{} {}", self.receiver, self.status);
        if let Some(at) = &self.at {
            t.push_str(&format!(" at {at}"));
        }
        if let Some(g) = &self.group {
            t.push_str(&format!(" group {}", map(g)));
        }
        if let Some(a) = &self.alerts {
            let list: Vec<String> = a.iter().map(map).collect();
            t.push_str(&format!(" alerts [{}]", list.join(", ")));
        }
        t
    }
}

/// A failed notification expectation.
#[derive(Clone, Debug, PartialEq)]
pub struct NotifyFailure {
    pub eval_time_ms: i64,
    pub expected: Vec<ExpNotification>,
    pub got: Vec<ExpNotification>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSeries {
    pub series: String,
    pub values: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertTest {
    pub eval_time: String,
    pub alertname: String,
    #[serde(default)]
    pub exp_alerts: Vec<ExpAlert>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExpAlert {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub state: Option<String>,
}

/// One value of a series.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Missing,
    Num(f64),
    Hist(Histogram),
    Text(String),
}

/// One failed expectation.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub eval_time_ms: i64,
    pub alertname: String,
    pub expected: Vec<ExpAlert>,
    pub got: Vec<ExpAlert>,
}

/// What running a test file found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub checks: usize,
    pub failures: Vec<Failure>,
    pub notify_failures: Vec<NotifyFailure>,
    /// Every record the run made, in order.
    pub records: Vec<Record>,
}

fn split_items(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut braces, mut quoted) = (0usize, false);
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => braces += 1,
            '}' if !quoted => braces = braces.saturating_sub(1),
            c if c.is_whitespace() && !quoted && braces == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The repeat count after the last `x` outside braces and quotes, and the text before it.
fn split_repeat(item: &str) -> Result<(&str, Option<usize>), String> {
    let tail = item.rfind(['}', '"']).map_or(0, |i| i + 1);
    match item[tail..].rfind('x').map(|i| i + tail) {
        Some(x) if item[x + 1..].bytes().all(|b| b.is_ascii_digit()) && x + 1 < item.len() => {
            let n: usize = item[x + 1..]
                .parse()
                .map_err(|_| format!("{item:?}: bad repeat count"))?;
            if n > VALUES_MAX {
                return Err(format!("{item:?}: more than {VALUES_MAX} values"));
            }
            Ok((&item[..x], Some(n)))
        }
        _ => Ok((item, None)),
    }
}

fn parse_hist(text: &str) -> Result<Histogram, String> {
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| format!("{text:?}: a histogram is {{H[v]=n,…}}"))?;
    let entries = inner.split(',').map(str::trim).filter(|e| !e.is_empty());
    Histogram::from_text_entries(entries).map_err(|e| format!("{text:?}: {e}"))
}

fn parse_scalar(text: &str) -> Result<Val, String> {
    if text == "_" || text == "stale" {
        return Ok(Val::Missing);
    }
    if text.starts_with('{') {
        return parse_hist(text).map(Val::Hist);
    }
    if let Some(s) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        return Ok(Val::Text(s.to_string()));
    }
    text.parse::<f64>()
        .map(Val::Num)
        .map_err(|_| format!("{text:?} is not a value (number, {{H[v]=n}}, \"text\", _ or stale)"))
}

/// `a+b` / `a-b` split at the operator between two values (not a sign or an exponent's).
fn split_step(body: &str) -> Option<(&str, char, &str)> {
    let b = body.as_bytes();
    let (mut braces, mut quoted) = (0usize, false);
    for i in 1..b.len() {
        match b[i] {
            b'"' => quoted = !quoted,
            b'{' => braces += 1,
            b'}' => braces = braces.saturating_sub(1),
            b'+' | b'-' if !quoted && braces == 0 && !matches!(b[i - 1], b'e' | b'E') => {
                return Some((&body[..i], b[i] as char, &body[i + 1..]));
            }
            _ => {}
        }
    }
    None
}

fn add(a: &Val, b: &Val, k: usize, sign: f64) -> Result<Val, String> {
    Ok(match (a, b) {
        (Val::Num(x), Val::Num(d)) => Val::Num(x + sign * d * k as f64),
        (Val::Hist(x), Val::Hist(d)) if sign > 0.0 => {
            let mut h = x.clone();
            for _ in 0..k {
                h.merge(d);
            }
            if h.is_empty() {
                Val::Missing
            } else {
                Val::Hist(h)
            }
        }
        _ => return Err("a+bxn needs two numbers, or two histograms with +".into()),
    })
}

/// Expands series notation into values.
pub fn parse_values(text: &str) -> Result<Vec<Val>, String> {
    let mut out = Vec::new();
    for item in split_items(text) {
        let (body, repeat) = split_repeat(&item)?;
        let step = split_step(body).filter(|_| repeat.is_some());
        match (step, repeat) {
            (Some((a, op, d)), Some(n)) => {
                let (a, d) = (parse_scalar(a)?, parse_scalar(d)?);
                let sign = if op == '+' { 1.0 } else { -1.0 };
                for k in 0..=n {
                    out.push(add(&a, &d, k, sign).map_err(|e| format!("{item:?}: {e}"))?);
                }
            }
            (None, Some(n)) => {
                let v = parse_scalar(body)?;
                // `_xn` is n missing values; `axn` is a, n+1 times (promtool's rules).
                let count = if v == Val::Missing { n } else { n + 1 };
                out.extend(std::iter::repeat_n(v, count));
            }
            _ => out.push(parse_scalar(body)?),
        }
        if out.len() > VALUES_MAX {
            return Err(format!("more than {VALUES_MAX} values"));
        }
    }
    Ok(out)
}

/// A temporary store whose base period is the interval.
pub fn temp_store(dir: &Path, interval_ms: i64) -> Result<Store, String> {
    let opts = StoreOptions {
        base_period_ms: interval_ms,
        partition_ms: interval_ms * 120,
        background_flush: false,
        background_maintenance: false,
        durability: journal::Durability::Buffered,
        wal_segment_size_bytes: 4 << 20,
        ..StoreOptions::default()
    };
    Store::open(dir, opts).map_err(|e| format!("temporary store: {e}"))
}

/// Writes value `i` of each series at `i × interval` (one batch per period, in time order:
/// the order live data would arrive in).
pub fn write_series(
    store: &Store,
    series: &[(StreamKey, Vec<Val>)],
    interval_ms: i64,
    from: usize,
    to: usize,
) -> Result<(), String> {
    write_series_at(store, series, interval_ms, 0, from, to)
}

/// As `write_series`, value `i` at `origin_ms + i × interval`.
pub fn write_series_at(
    store: &Store,
    series: &[(StreamKey, Vec<Val>)],
    interval_ms: i64,
    origin_ms: i64,
    from: usize,
    to: usize,
) -> Result<(), String> {
    for i in from..to {
        let mut b = WriteBatch::new();
        let ts = origin_ms + i as i64 * interval_ms;
        for (key, vals) in series {
            let r = match vals.get(i) {
                Some(Val::Num(x)) => b.numeric(key, ts, *x),
                Some(Val::Hist(h)) => b.histogram(key, ts, h),
                Some(Val::Text(s)) => b.text(key, ts, s),
                _ => Ok(()),
            };
            r.map_err(|e| format!("{}: {e}", key.canonical()))?;
        }
        if !b.is_empty() {
            store
                .write(&b)
                .map_err(|e| format!("writing the input series: {e}"))?;
        }
    }
    Ok(())
}

fn load_rulesets(
    t: &TestFile,
    base_dir: &Path,
    interval_ms: i64,
) -> Result<Vec<Arc<Ruleset>>, String> {
    let mut specs: Vec<(Spec, Source)> = Vec::new();
    for f in &t.rule_files {
        let path: PathBuf = base_dir.join(f);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for s in rule::parse_file_text(&text).map_err(|e| format!("{}: {e}", path.display()))? {
            specs.push((s, Source::File(path.clone())));
        }
    }
    specs.extend(t.ruleset.iter().cloned().map(|s| (s, Source::Api)));
    specs
        .into_iter()
        .map(|(s, src)| {
            rule::compile(s, src, interval_ms)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn parse_series(t: &TestFile) -> Result<Vec<(StreamKey, Vec<Val>)>, String> {
    if t.input_series.len() > SERIES_MAX {
        return Err(format!("more than {SERIES_MAX} input series"));
    }
    t.input_series
        .iter()
        .map(|s| {
            let key =
                StreamKey::parse(&s.series).map_err(|e| format!("series {:?}: {e}", s.series))?;
            let vals =
                parse_values(&s.values).map_err(|e| format!("series {:?}: {e}", s.series))?;
            Ok((key, vals))
        })
        .collect()
}

fn actual(b: &Backtest<'_>, alertname: &str) -> Vec<ExpAlert> {
    let mut got: Vec<ExpAlert> = b
        .instances()
        .into_iter()
        .filter(|i| i.ruleset == alertname && matches!(i.state, State::Firing | State::Recovering))
        .map(|i| ExpAlert {
            labels: i.labels.iter().cloned().collect(),
            annotations: i.annotations.iter().cloned().collect(),
            state: Some(i.state.name().to_string()),
        })
        .collect();
    got.sort_by(|a, b| a.labels.cmp(&b.labels));
    got
}

fn matches(expected: &[ExpAlert], got: &[ExpAlert]) -> bool {
    let mut exp: Vec<ExpAlert> = expected.to_vec();
    exp.sort_by(|a, b| a.labels.cmp(&b.labels));
    exp.len() == got.len()
        && exp.iter().zip(got).all(|(e, g)| {
            e.labels == g.labels
                && e.annotations == g.annotations
                && e.state
                    .as_deref()
                    .is_none_or(|s| Some(s) == g.state.as_deref())
        })
}

/// Runs a parsed test file (`base_dir` resolves `rule_files`) over a store in `scratch`.
pub fn run(t: &TestFile, base_dir: &Path, scratch: &Path) -> Result<Report, String> {
    let interval = parse_duration_ms(t.evaluation_interval.as_deref().unwrap_or("1m"))?;
    if interval < store::BASE_PERIOD_MS_MIN || interval % 1000 != 0 {
        return Err("evaluation_interval: whole seconds, at least 1s".into());
    }
    let origin = match &t.start {
        None => 0,
        Some(s) => {
            let ms = crate::notify::config::parse_time_ms(s).map_err(|e| format!("start: {e}"))?;
            if ms % interval != 0 {
                return Err("start: a multiple of evaluation_interval since the epoch".into());
            }
            ms
        }
    };
    let rulesets = load_rulesets(t, base_dir, interval)?;
    let series = parse_series(t)?;
    let mut checks: Vec<(i64, &AlertTest)> = t
        .alert_rule_test
        .iter()
        .map(|a| parse_duration_ms(&a.eval_time).map(|ms| (ms, a)))
        .collect::<Result<_, _>>()?;
    checks.sort_by_key(|c| c.0);
    let mut notify_checks: Vec<(i64, &NotificationTest)> = t
        .notification_test
        .iter()
        .map(|n| parse_duration_ms(&n.eval_time).map(|ms| (ms, n)))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("notification_test eval_time: {e}"))?;
    notify_checks.sort_by_key(|c| c.0);
    let notifier = notifier(t, base_dir, scratch)?;
    if notifier.is_none() && !notify_checks.is_empty() {
        return Err("notification_test needs notify_file or [notify]".into());
    }
    let store = temp_store(&scratch.join("store"), interval)?;
    let values = series.iter().map(|s| s.1.len()).max().unwrap_or(0);
    write_series_at(&store, &series, interval, origin, 0, values)?;
    let mut b = Backtest::new(&store, rulesets, origin)?;
    let mut report = Report::default();
    for (ms, a) in checks {
        report.records.extend(b.run_until(origin + ms));
        let got = actual(&b, &a.alertname);
        report.checks += 1;
        if !matches(&a.exp_alerts, &got) {
            report.failures.push(Failure {
                eval_time_ms: ms,
                alertname: a.alertname.clone(),
                expected: a.exp_alerts.clone(),
                got,
            });
        }
    }
    if let Some(last) = notify_checks.last() {
        report.records.extend(b.run_until(origin + last.0));
    }
    drop(b);
    store.close().map_err(|e| e.to_string())?;
    if let Some(n) = notifier {
        check_notifications(t, &n, origin, &notify_checks, &mut report)?;
    }
    Ok(report)
}

fn notifier(
    t: &TestFile,
    base_dir: &Path,
    scratch: &Path,
) -> Result<Option<crate::notify::Notifier>, String> {
    let config = match (&t.notify_file, &t.notify) {
        (None, None) => return Ok(None),
        (Some(f), None) => {
            let path = base_dir.join(f);
            crate::notify::Config::load(&path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        (None, Some(table)) => {
            let text = toml::to_string(table).map_err(|e| format!("[notify]: {e}"))?;
            crate::notify::Config::parse(&text).map_err(|e| format!("[notify]: {e}"))?
        }
        (Some(_), Some(_)) => return Err("give notify_file or [notify], not both".into()),
    };
    crate::notify::Notifier::open(Arc::new(config), &scratch.join("alerts")).map(Some)
}

fn check_notifications(
    t: &TestFile,
    n: &crate::notify::Notifier,
    origin: i64,
    checks: &[(i64, &NotificationTest)],
    report: &mut Report,
) -> Result<(), String> {
    let acks = t
        .ack
        .iter()
        .map(|a| {
            Ok(crate::notify::simulate::SimAck {
                at_ms: origin + parse_duration_ms(&a.at).map_err(|e| format!("ack at: {e}"))?,
                until_ms: a
                    .until
                    .as_deref()
                    .map(|u| parse_duration_ms(u).map(|ms| origin + ms))
                    .transpose()
                    .map_err(|e| format!("ack until: {e}"))?,
                labels: a.labels.clone(),
                note: a.note.clone(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let made = n.simulate(&report.records, &acks);
    let mut from = i64::MIN;
    for (ms, c) in checks {
        let to = origin + ms;
        let got: Vec<&crate::notify::simulate::Simulated> = made
            .iter()
            .filter(|m| m.t_ms > from && m.t_ms <= to)
            .collect();
        from = to;
        report.checks += 1;
        let ok = got.len() == c.exp_notifications.len()
            && c.exp_notifications
                .iter()
                .zip(&got)
                .all(|(e, g)| notification_matches(e, g, origin));
        if !ok {
            report.notify_failures.push(NotifyFailure {
                eval_time_ms: *ms,
                expected: c.exp_notifications.clone(),
                got: got.iter().map(|g| as_expected(g, origin)).collect(),
            });
        }
    }
    Ok(())
}

fn as_expected(g: &crate::notify::simulate::Simulated, origin: i64) -> ExpNotification {
    ExpNotification {
        receiver: g.receiver.clone(),
        status: g.status.clone(),
        at: Some(crate::util::format_duration(g.t_ms - origin)),
        group: Some(g.group_labels.clone()),
        alerts: Some(g.alerts.iter().map(|a| a.0.clone()).collect()),
    }
}

fn notification_matches(
    e: &ExpNotification,
    g: &crate::notify::simulate::Simulated,
    origin: i64,
) -> bool {
    let at_ok =
        e.at.as_deref()
            .is_none_or(|a| parse_duration_ms(a).is_ok_and(|ms| origin + ms == g.t_ms));
    let alerts_ok = e.alerts.as_ref().is_none_or(|want| {
        // Each expected alert a subset of a distinct notified one.
        let mut used = vec![false; g.alerts.len()];
        want.len() == g.alerts.len()
            && want.iter().all(|w| {
                let hit = g.alerts.iter().enumerate().find(|(k, (labels, _))| {
                    !used[*k] && w.iter().all(|(name, v)| labels.get(name) == Some(v))
                });
                match hit {
                    Some((k, _)) => {
                        used[k] = true;
                        true
                    }
                    None => false,
                }
            })
    });
    e.receiver == g.receiver
        && e.status == g.status
        && at_ok
        && e.group.as_ref().is_none_or(|gr| *gr == g.group_labels)
        && alerts_ok
}

/// Parses and runs the test file at `path` (a fresh temporary store under `scratch`).
pub fn run_file(path: &Path, scratch: &Path) -> Result<Report, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t: TestFile =
        toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
    run(&t, path.parent().unwrap_or(Path::new(".")), scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nums(text: &str) -> Vec<Option<f64>> {
        parse_values(text)
            .unwrap()
            .into_iter()
            .map(|v| match v {
                Val::Num(x) => Some(x),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn promtool_notation() {
        assert_eq!(
            nums("-2+4x3"),
            [Some(-2.0), Some(2.0), Some(6.0), Some(10.0)]
        );
        assert_eq!(
            nums("1-2x4"),
            [Some(1.0), Some(-1.0), Some(-3.0), Some(-5.0), Some(-7.0)]
        );
        assert_eq!(nums("1x4"), [Some(1.0); 5]);
        assert_eq!(nums("1 _x3 stale"), [Some(1.0), None, None, None, None]);
        assert_eq!(nums("1e3 2.5e-1"), [Some(1000.0), Some(0.25)]);
    }

    #[test]
    fn histograms_and_text() {
        let v = parse_values("{H[0.12]=40,H[1.6]=3}x1 {H[1.6]=10}+{H[1.6]=5}x2 \"ok\"x1 \"a b\"")
            .unwrap();
        assert_eq!(v.len(), 8);
        let count = |v: &Val| match v {
            Val::Hist(h) => h.sample_count(),
            _ => 0,
        };
        assert_eq!(count(&v[0]), 43);
        assert_eq!(count(&v[1]), 43);
        assert_eq!([count(&v[2]), count(&v[3]), count(&v[4])], [10, 15, 20]);
        assert_eq!(v[5], Val::Text("ok".into()));
        assert_eq!(v[6], Val::Text("ok".into()));
        assert_eq!(v[7], Val::Text("a b".into()));
        assert!(parse_values("{H[x]=1}").is_err());
        assert!(parse_values("1x99999999").is_err());
    }
}
