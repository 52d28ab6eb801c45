//! Rulesets: the TOML form ([`Spec`]), checked and compiled into a [`Ruleset`].
//!
//! A rules file holds `[[ruleset]]` tables; the API takes one ruleset per request (a
//! `[[ruleset]]` table or the bare keys). Compiling parses the CAQL expression, every condition
//! and template, and checks every duration against the evaluation period, so a ruleset that
//! loads cannot fail for its own text at evaluation time (only for the data it meets).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cond::Cond;
use crate::template::Template;
use crate::util::{format_duration, parse_duration_ms};

/// Most rulesets loaded at once.
pub const RULESETS_MAX: usize = 10_000;
/// Longest ruleset name.
pub const NAME_BYTES_MAX: usize = 64;
/// Severity levels in one ladder (severities 1–5).
pub const LEVELS_MAX: usize = 5;
pub const LABELS_MAX: usize = 64;
pub const ANNOTATIONS_MAX: usize = 32;
/// Streams an absence ruleset may list in `expect`.
pub const EXPECT_MAX: usize = 10_000;
/// Largest rules file read.
pub const RULE_FILE_BYTES_MAX: usize = 4 << 20;
/// Longest window: a day of periods is what catch-up and the store's head are sized for; a
/// week is allowed for coarse rules.
pub const WINDOW_MS_MAX: i64 = 7 * 86_400_000;
/// Longest `for` / `keep_firing_for`.
pub const HOLD_MS_MAX: i64 = 30 * 86_400_000;
/// Default look-back of text and absence rules.
pub const SEEN_WITHIN_MS_DEFAULT: i64 = 86_400_000;
/// The built-in push-source ruleset's name (the only name with a `:`, so no file can take it).
pub const PUSH_SOURCES_NAME: &str = "builtin:push-sources";

/// One ruleset as written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_coverage: Option<f64>,
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on_match: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_for: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_within: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flapping: Option<FlapSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub severity: Vec<LevelSpec>,
    /// Who manages the ruleset (`host:<id>` for an installed agent's rules), so everything one
    /// owner created can be listed and deleted together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelSpec {
    pub level: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlapSpec {
    pub enabled: bool,
    pub low: f64,
    pub high: f64,
}

impl Default for FlapSpec {
    fn default() -> FlapSpec {
        FlapSpec {
            enabled: true,
            low: 5.0,
            high: 20.0,
        }
    }
}

/// A rules file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    #[serde(default)]
    pub ruleset: Vec<Spec>,
}

/// Where a ruleset came from: files are read-only through the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Api,
    Builtin,
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Api => "api".into(),
            Source::Builtin => "builtin".into(),
        }
    }
}

/// What a ruleset evaluates.
#[derive(Clone, Debug)]
pub enum Kind {
    Caql {
        text: String,
        query: query::Query,
    },
    Text {
        name: String,
        tags: Option<String>,
    },
    Absent {
        name: String,
        tags: Option<String>,
        silent_for_ms: i64,
        expect: Vec<String>,
    },
    PushSources {
        factor: f64,
    },
}

/// How a window reduces its periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinFn {
    Merge,
    Sum,
    Mean,
    Min,
    Max,
    Last,
    Count,
}

impl WinFn {
    fn parse(s: &str) -> Option<WinFn> {
        Some(match s {
            "merge" => WinFn::Merge,
            "sum" => WinFn::Sum,
            "mean" | "average" | "avg" => WinFn::Mean,
            "min" => WinFn::Min,
            "max" => WinFn::Max,
            "last" => WinFn::Last,
            "count" => WinFn::Count,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            WinFn::Merge => "merge",
            WinFn::Sum => "sum",
            WinFn::Mean => "mean",
            WinFn::Min => "min",
            WinFn::Max => "max",
            WinFn::Last => "last",
            WinFn::Count => "count",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// `None`: merge for histograms, mean for numbers.
    pub f: Option<WinFn>,
    /// A whole number of periods.
    pub ms: i64,
}

#[derive(Clone, Debug)]
pub struct Level {
    pub severity: u8,
    pub when: Cond,
    pub clear: Option<Cond>,
}

/// What an empty (or too sparse) window does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoData {
    /// The `nodata` state.
    NoData,
    /// As if no level matched.
    Ok,
    /// The instance is not stepped this period.
    Keep,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Flapping {
    pub enabled: bool,
    pub low: f64,
    pub high: f64,
}

/// A compiled ruleset.
#[derive(Clone, Debug)]
pub struct Ruleset {
    pub name: String,
    pub source: Source,
    pub spec: Spec,
    pub kind: Kind,
    pub period_ms: i64,
    pub window: Window,
    pub min_coverage: f64,
    pub levels: Vec<Level>,
    pub for_ms: i64,
    pub keep_firing_for_ms: i64,
    pub nodata: NoData,
    pub eager: bool,
    pub depends_on: Option<String>,
    pub depends_on_match: Vec<String>,
    /// Look-back of text and absence rules.
    pub seen_within_ms: i64,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, Template)>,
    pub flapping: Flapping,
}

/// Why a ruleset (or a rules file) was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesetError {
    pub file: Option<String>,
    pub ruleset: Option<String>,
    pub message: String,
}

impl fmt::Display for RulesetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if let Some(r) = &self.ruleset {
            write!(f, "ruleset {r:?}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for RulesetError {}

fn err(ruleset: &str, message: impl Into<String>) -> RulesetError {
    RulesetError {
        file: None,
        ruleset: (!ruleset.is_empty()).then(|| ruleset.to_string()),
        message: message.into(),
    }
}

/// `[A-Za-z0-9_.-]`, 1–64 bytes, not starting with `.`: a ruleset name is also a file name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn duration(
    name: &str,
    key: &str,
    text: &Option<String>,
    default: i64,
) -> Result<i64, RulesetError> {
    match text {
        None => Ok(default),
        Some(t) => parse_duration_ms(t).map_err(|e| err(name, format!("{key}: {e}"))),
    }
}

/// `rolling:<fn>(<d>)`, `<fn>(<d>)` or `<d>`.
fn parse_window(name: &str, text: &str, period_ms: i64) -> Result<Window, RulesetError> {
    let t = text.trim();
    let t = t.strip_prefix("rolling:").unwrap_or(t);
    let (f, d) = match t.split_once('(') {
        Some((f, rest)) => {
            let d = rest
                .strip_suffix(')')
                .ok_or_else(|| err(name, format!("window {text:?}: missing `)`")))?;
            let f = WinFn::parse(f.trim()).ok_or_else(|| {
                err(
                    name,
                    format!(
                        "window {text:?}: unknown function (merge, sum, mean, min, max, last, count)"
                    ),
                )
            })?;
            (Some(f), d)
        }
        None => (None, t),
    };
    let ms = parse_duration_ms(d).map_err(|e| err(name, format!("window: {e}")))?;
    if ms <= 0 || ms > WINDOW_MS_MAX {
        return Err(err(
            name,
            format!(
                "window {text:?}: must be positive and at most {}",
                format_duration(WINDOW_MS_MAX)
            ),
        ));
    }
    // Whole periods: a window of 90 s over 1-minute periods covers two.
    let periods = (ms + period_ms - 1) / period_ms;
    Ok(Window {
        f,
        ms: periods * period_ms,
    })
}

fn parse_cond(name: &str, what: &str, text: &str) -> Result<Cond, RulesetError> {
    Cond::parse(text).map_err(|e| err(name, format!("{what} {text:?}: {e}")))
}

fn compile_levels(spec: &Spec, absence: bool) -> Result<Vec<Level>, RulesetError> {
    let name = spec.name.as_str();
    let specs: Vec<LevelSpec> = if spec.severity.is_empty() && absence {
        vec![LevelSpec {
            level: 3,
            when: None,
            clear: None,
        }]
    } else {
        spec.severity.clone()
    };
    if specs.is_empty() {
        return Err(err(
            name,
            "no [[ruleset.severity]] level (at least one, with `when`)",
        ));
    }
    if specs.len() > LEVELS_MAX {
        return Err(err(name, format!("more than {LEVELS_MAX} severity levels")));
    }
    let mut out: Vec<Level> = Vec::with_capacity(specs.len());
    for l in &specs {
        if !(1..=5).contains(&l.level) {
            return Err(err(
                name,
                format!("severity level {} is outside 1–5", l.level),
            ));
        }
        if out.last().is_some_and(|p| p.severity >= l.level) {
            return Err(err(
                name,
                "severity levels must be listed worst first, strictly ascending (1 before 2 …)",
            ));
        }
        let when = match (&l.when, absence) {
            (Some(w), _) => parse_cond(name, "when", w)?,
            (None, true) => Cond::True,
            (None, false) => return Err(err(name, format!("severity {} has no `when`", l.level))),
        };
        let clear = l
            .clear
            .as_ref()
            .map(|c| parse_cond(name, "clear", c))
            .transpose()?;
        out.push(Level {
            severity: l.level,
            when,
            clear,
        });
    }
    Ok(out)
}

fn compile_kind(spec: &Spec, silent_for: i64) -> Result<Kind, RulesetError> {
    let name = spec.name.as_str();
    match (&spec.expr, &spec.text, &spec.absent) {
        (Some(e), None, None) => {
            let query = query::parse(e).map_err(|x| err(name, format!("expr: {x}")))?;
            Ok(Kind::Caql {
                text: e.clone(),
                query,
            })
        }
        (None, Some(t), None) => Ok(Kind::Text {
            name: t.clone(),
            tags: spec.tags.clone(),
        }),
        (None, None, Some(a)) => {
            if spec.expect.len() > EXPECT_MAX {
                return Err(err(
                    name,
                    format!("more than {EXPECT_MAX} streams in expect"),
                ));
            }
            for k in &spec.expect {
                store::key::StreamKey::parse(k)
                    .map_err(|e| err(name, format!("expect {k:?}: {e}")))?;
            }
            Ok(Kind::Absent {
                name: a.clone(),
                tags: spec.tags.clone(),
                silent_for_ms: silent_for,
                expect: spec.expect.clone(),
            })
        }
        _ => Err(err(
            name,
            "exactly one of `expr` (CAQL), `text` (text streams) or `absent` (silent streams)",
        )),
    }
}

type Pairs = (Vec<(String, String)>, Vec<(String, Template)>);

fn compile_pairs(spec: &Spec) -> Result<Pairs, RulesetError> {
    let name = spec.name.as_str();
    if spec.labels.len() > LABELS_MAX || spec.annotations.len() > ANNOTATIONS_MAX {
        return Err(err(
            name,
            format!("at most {LABELS_MAX} labels and {ANNOTATIONS_MAX} annotations"),
        ));
    }
    for k in spec.labels.keys() {
        if matches!(k.as_str(), "alertname" | "severity" | "alertstate") {
            return Err(err(name, format!("label {k:?} is set by the engine")));
        }
    }
    let labels = spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let annotations = spec
        .annotations
        .iter()
        .map(|(k, v)| {
            Template::parse(v)
                .map(|t| (k.clone(), t))
                .map_err(|e| err(name, format!("annotation {k:?}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok((labels, annotations))
}

fn nodata_of(spec: &Spec) -> Result<NoData, RulesetError> {
    match spec.nodata.as_deref() {
        None | Some("nodata") => Ok(NoData::NoData),
        Some("ok") => Ok(NoData::Ok),
        Some("keep") => Ok(NoData::Keep),
        Some(o) => Err(err(
            &spec.name,
            format!("nodata {o:?}: one of nodata, ok, keep"),
        )),
    }
}

fn flapping_of(spec: &Spec) -> Result<Flapping, RulesetError> {
    let f = spec.flapping.clone().unwrap_or_default();
    if !(0.0..=100.0).contains(&f.low) || !(0.0..=100.0).contains(&f.high) || f.low > f.high {
        return Err(err(&spec.name, "flapping: 0 ≤ low ≤ high ≤ 100 (percent)"));
    }
    Ok(Flapping {
        enabled: f.enabled,
        low: f.low,
        high: f.high,
    })
}

/// Checks and compiles one ruleset; `base_period_ms` is the store's.
pub fn compile(spec: Spec, source: Source, base_period_ms: i64) -> Result<Ruleset, RulesetError> {
    let name = spec.name.clone();
    let builtin = source == Source::Builtin && name == PUSH_SOURCES_NAME;
    if !(valid_name(&name) || builtin) {
        return Err(err(
            &name,
            format!(
                "name {name:?}: [A-Za-z0-9_.-], 1 to {NAME_BYTES_MAX} bytes, not starting with `.`"
            ),
        ));
    }
    let period_ms = duration(&name, "period", &spec.period, base_period_ms)?;
    if period_ms <= 0 || period_ms % base_period_ms != 0 || period_ms > WINDOW_MS_MAX {
        return Err(err(
            &name,
            format!(
                "period must be a positive multiple of the store's base period ({})",
                format_duration(base_period_ms)
            ),
        ));
    }
    let window = match &spec.window {
        Some(w) => parse_window(&name, w, period_ms)?,
        None => Window {
            f: None,
            ms: period_ms,
        },
    };
    let silent_for = duration(&name, "silent_for", &spec.silent_for, 10 * period_ms)?;
    let kind = compile_kind(&spec, silent_for)?;
    let absence = matches!(kind, Kind::Absent { .. });
    let levels = compile_levels(&spec, absence)?;
    let for_ms = duration(&name, "for", &spec.for_, 0)?;
    let keep_firing_for_ms = duration(&name, "keep_firing_for", &spec.keep_firing_for, 0)?;
    if for_ms > HOLD_MS_MAX || keep_firing_for_ms > HOLD_MS_MAX {
        return Err(err(&name, "for and keep_firing_for: at most 30 days"));
    }
    let min_coverage = spec.min_coverage.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_coverage) {
        return Err(err(&name, "min_coverage is a share, 0 to 1"));
    }
    let seen_within_ms = duration(
        &name,
        "seen_within",
        &spec.seen_within,
        SEEN_WITHIN_MS_DEFAULT,
    )?;
    let eager = spec.eager.unwrap_or(false);
    if eager {
        check_eager(&name, &kind, &levels, window)?;
    }
    if spec.depends_on.as_deref() == Some(name.as_str()) {
        return Err(err(&name, "depends_on names the ruleset itself"));
    }
    let (labels, annotations) = compile_pairs(&spec)?;
    Ok(Ruleset {
        name,
        source,
        nodata: nodata_of(&spec)?,
        flapping: flapping_of(&spec)?,
        depends_on: spec.depends_on.clone(),
        depends_on_match: spec.depends_on_match.clone(),
        spec,
        kind,
        period_ms,
        window,
        min_coverage,
        levels,
        for_ms,
        keep_firing_for_ms,
        eager,
        seen_within_ms,
        labels,
        annotations,
    })
}

fn check_eager(
    name: &str,
    kind: &Kind,
    levels: &[Level],
    window: Window,
) -> Result<(), RulesetError> {
    if !matches!(kind, Kind::Caql { .. }) {
        return Err(err(name, "eager evaluation is for expressions (expr)"));
    }
    let counts = window.f == Some(WinFn::Count);
    if let Some(l) = levels.iter().find(|l| !l.when.only_grows(counts)) {
        return Err(err(
            name,
            format!(
                "eager: severity {}'s `when` can fall as data arrives; eager needs counts compared with > or >=",
                l.severity
            ),
        ));
    }
    Ok(())
}

impl Ruleset {
    /// The window function in effect for a value of this kind.
    pub fn window_fn(&self, histogram: bool) -> WinFn {
        match (self.window.f, histogram) {
            (Some(f), _) => f,
            (None, true) => WinFn::Merge,
            (None, false) => WinFn::Mean,
        }
    }

    /// Periods one window covers.
    pub fn window_periods(&self) -> usize {
        (self.window.ms / self.period_ms).max(1) as usize
    }

    pub fn level(&self, severity: u8) -> Option<&Level> {
        self.levels.iter().find(|l| l.severity == severity)
    }

    /// The ruleset's text as TOML (the API shows it; `PUT` takes the same).
    pub fn to_toml(&self) -> String {
        let file = FileSpec {
            ruleset: vec![self.spec.clone()],
        };
        toml::to_string(&file).unwrap_or_default()
    }

    /// The built-in ruleset for silent push sources.
    pub fn push_sources(
        base_period_ms: i64,
        factor: f64,
        severity: u8,
    ) -> Result<Ruleset, RulesetError> {
        let spec = Spec {
            name: PUSH_SOURCES_NAME.into(),
            annotations: BTreeMap::from([(
                "summary".to_string(),
                "push source {{ stream }} has sent nothing for {{ silent }}".to_string(),
            )]),
            ..Spec::default()
        };
        let mut r = compile(
            Spec {
                absent: Some("*".into()),
                severity: vec![LevelSpec {
                    level: severity.clamp(1, 5),
                    when: None,
                    clear: None,
                }],
                ..spec
            },
            Source::Builtin,
            base_period_ms,
        )?;
        r.kind = Kind::PushSources { factor };
        r.spec.absent = None;
        Ok(r)
    }
}

/// Parses a rules file's text into specs.
pub fn parse_file_text(text: &str) -> Result<Vec<Spec>, RulesetError> {
    if text.len() > RULE_FILE_BYTES_MAX {
        return Err(RulesetError {
            file: None,
            ruleset: None,
            message: format!("larger than {RULE_FILE_BYTES_MAX} bytes"),
        });
    }
    let file: FileSpec = toml::from_str(text).map_err(|e| RulesetError {
        file: None,
        ruleset: None,
        message: e.message().to_string(),
    })?;
    Ok(file.ruleset)
}

/// One ruleset from an API body: a `[[ruleset]]` table or the bare keys.
pub fn parse_one(text: &str) -> Result<Spec, RulesetError> {
    let plain = |message: String| RulesetError {
        file: None,
        ruleset: None,
        message,
    };
    if text.len() > RULE_FILE_BYTES_MAX {
        return Err(plain(format!("larger than {RULE_FILE_BYTES_MAX} bytes")));
    }
    if let Ok(file) = toml::from_str::<FileSpec>(text) {
        return match file.ruleset.len() {
            1 => Ok(file.ruleset.into_iter().next().unwrap_or_default()),
            0 => Err(plain("no ruleset in the body".into())),
            n => Err(plain(format!("{n} rulesets in the body; one at a time"))),
        };
    }
    toml::from_str::<Spec>(text).map_err(|e| plain(e.message().to_string()))
}

/// Orders rulesets parents first (`depends_on`); a missing parent or a cycle is an error
/// naming the ruleset.
pub fn order(rulesets: Vec<Arc<Ruleset>>) -> Result<Vec<Arc<Ruleset>>, RulesetError> {
    let index: HashMap<&str, usize> = rulesets
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    if index.len() != rulesets.len() {
        let mut seen = HashMap::new();
        for r in &rulesets {
            if seen.insert(r.name.as_str(), ()).is_some() {
                return Err(err(&r.name, "defined twice"));
            }
        }
    }
    let mut depth = vec![0usize; rulesets.len()];
    for (i, r) in rulesets.iter().enumerate() {
        let mut at = r.as_ref();
        let mut d = 0;
        while let Some(parent) = &at.depends_on {
            let Some(&p) = index.get(parent.as_str()) else {
                return Err(err(
                    &r.name,
                    format!("depends_on {parent:?}: no such ruleset"),
                ));
            };
            d += 1;
            if d > rulesets.len() {
                return Err(err(&r.name, "depends_on forms a cycle"));
            }
            at = rulesets[p].as_ref();
        }
        depth[i] = d;
    }
    let mut order: Vec<usize> = (0..rulesets.len()).collect();
    order.sort_by(|&a, &b| {
        depth[a]
            .cmp(&depth[b])
            .then(rulesets[a].name.cmp(&rulesets[b].name))
    });
    Ok(order.into_iter().map(|i| rulesets[i].clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEOPLE: &str = r#"
[[ruleset]]
name = "login-slow"
expr = 'find:histogram("login", "app:web")'
window = "rolling:merge(5m)"
min_coverage = 0.6
for = "2m"
keep_firing_for = "5m"
labels = { team = "identity" }
annotations = { summary = "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }})" }

[[ruleset.severity]]
level = 1
when = "count_above(1.5) >= 500"
clear = "count_above(1.5) < 400"

[[ruleset.severity]]
level = 3
when = "count_above(1.5) >= 100"
"#;

    fn one(text: &str) -> Result<Ruleset, RulesetError> {
        let spec = parse_file_text(text)?
            .into_iter()
            .next()
            .unwrap_or_default();
        compile(spec, Source::Api, 60_000)
    }

    #[test]
    fn the_people_ruleset_compiles() {
        let r = one(PEOPLE).unwrap();
        assert_eq!(
            r.window,
            Window {
                f: Some(WinFn::Merge),
                ms: 300_000
            }
        );
        assert_eq!(r.window_periods(), 5);
        assert_eq!((r.for_ms, r.keep_firing_for_ms), (120_000, 300_000));
        assert_eq!(r.levels.len(), 2);
        assert!(r.level(1).unwrap().clear.is_some());
        // The TOML it shows compiles to the same.
        let again = one(&r.to_toml()).unwrap();
        assert_eq!(again.spec, r.spec);
    }

    #[test]
    fn mistakes_are_named() {
        for (edit, part) in [
            (("name = \"login-slow\"", "name = \"a/b\""), "name"),
            (("level = 3", "level = 0"), "outside"),
            (("level = 3", "level = 1"), "ascending"),
            (("for = \"2m\"", "for = \"soon\""), "for"),
            (
                (
                    "window = \"rolling:merge(5m)\"",
                    "window = \"rolling:p99(5m)\"",
                ),
                "unknown function",
            ),
            (("min_coverage = 0.6", "min_coverage = 6"), "share"),
            (
                ("labels = { team", "labels = { severity"),
                "set by the engine",
            ),
            (("{{ count_above(1.5) }}", "{{ nope }}"), "annotation"),
            (
                (
                    "team = \"identity\" }",
                    "team = \"identity\" }\neager = true\nbogus = 1",
                ),
                "unknown field",
            ),
        ] {
            let e = one(&PEOPLE.replace(edit.0, edit.1))
                .unwrap_err()
                .to_string();
            assert!(e.contains(part), "{edit:?}: {e}");
        }
    }

    #[test]
    fn eager_needs_growing_counts() {
        let eager = PEOPLE.replace("for = \"2m\"", "for = \"2m\"\neager = true");
        assert!(one(&eager).is_ok());
        let bad = eager.replace("count_above(1.5) >= 100", "ratio_above(1.5) >= 0.1");
        assert!(one(&bad).unwrap_err().to_string().contains("eager"));
    }

    #[test]
    fn order_puts_parents_first_and_refuses_cycles() {
        let mk = |name: &str, parent: Option<&str>| {
            let mut r = one(PEOPLE).unwrap();
            r.name = name.into();
            r.depends_on = parent.map(str::to_string);
            Arc::new(r)
        };
        let o = order(vec![mk("c", Some("b")), mk("b", Some("a")), mk("a", None)]).unwrap();
        let names: Vec<&str> = o.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(order(vec![mk("a", Some("b")), mk("b", Some("a"))]).is_err());
        assert!(order(vec![mk("a", Some("z"))]).is_err());
        assert!(order(vec![mk("a", None), mk("a", None)]).is_err());
    }

    #[test]
    fn absence_and_text_rulesets() {
        let a = one("[[ruleset]]\nname = \"gone\"\nabsent = \"cpu\"\nsilent_for = \"10m\"\nexpect = [\"cpu|ST[host:a]\"]\n").unwrap();
        assert!(matches!(
            a.kind,
            Kind::Absent {
                silent_for_ms: 600_000,
                ..
            }
        ));
        assert_eq!(a.levels[0].severity, 3);
        let t = one("[[ruleset]]\nname = \"build\"\ntext = \"status\"\n[[ruleset.severity]]\nlevel = 2\nwhen = 'matches \"fail\"'\n").unwrap();
        assert!(matches!(t.kind, Kind::Text { .. }));
        assert!(one("[[ruleset]]\nname = \"x\"\nexpr = \"1\"\ntext = \"y\"\n").is_err());
    }
}
