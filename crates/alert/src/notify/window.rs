//! Maintenance windows: one-off (`start`/`end`), weekly (`days`, `at`, `duration` in a named
//! time zone) or cron (`cron`, `duration`, time zone); scoped by alert labels (matchers),
//! rulesets, tags and severities. A window always ends: one without an end or a duration is
//! refused.
//!
//! Time zones and DST: `at` is a wall-clock time in `timezone` (IANA name, tz database bundled
//! with the binary). On the day the clock jumps forward over `at` (02:30 in Europe/Berlin on
//! the last Sunday of March), the window starts at the same distance after the jump (03:30
//! local, the instant 02:30 would have been had the clock not moved); on the day the clock
//! goes back over `at`, the window starts once, at the first 02:30. `duration` is elapsed time,
//! so a 1h window that starts at 01:30 on the day the clock goes back ends at 02:30 (first
//! occurrence). Cron windows start at each instant the cron expression names, resolved the same
//! way by the cron library: a start in a jump forward is moved to the first minute after it,
//! and a start in a repeated hour happens once.

use std::collections::BTreeMap;

use jiff::civil::{Time, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::matcher::{parse_time_ms, Matcher, MATCHERS_MAX};
use crate::util::parse_duration_ms;

/// The longest a window may last: a week for weekly windows would cover every day already.
pub const WINDOW_DURATION_MAX_MS: i64 = 7 * 86_400_000;
/// The longest one-off window.
pub const ONCE_DURATION_MAX_MS: i64 = 366 * 86_400_000;
/// Rulesets and tags one window may name.
pub const SCOPE_ITEMS_MAX: usize = 64;
/// Bytes of a window name.
pub const WINDOW_NAME_BYTES_MAX: usize = 128;

/// A window as written in the configuration file or sent to the API (JSON, same fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    pub name: String,
    /// One-off: RFC 3339 (`2026-11-28T22:00:00Z`) or ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Weekly: `["mon", "tue", …]` (empty with `at`: every day).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
    /// Weekly: the local start time, `HH:MM` or `HH:MM:SS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Cron: five fields (minute hour day-of-month month day-of-week), local time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// Weekly and cron (and one-off instead of `end`): how long each occurrence lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// IANA time zone of `at` and `cron`; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matchers: Vec<String>,
    /// Ruleset names (the alert's `alertname`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rulesets: Vec<String>,
    /// `key:value` tags every one of which the alert's labels must carry (`key:*`: any value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Empty: every severity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub severities: Vec<u8>,
    /// Who made it and why (API windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

#[derive(Clone, Debug)]
enum Schedule {
    Once {
        start_ms: i64,
        end_ms: i64,
    },
    Weekly {
        tz: TimeZone,
        /// Bit `n`: weekday `n` (Monday = 0).
        days: u8,
        at: Time,
        duration_ms: i64,
    },
    Cron {
        tz: TimeZone,
        cron: Box<croner::Cron>,
        duration_ms: i64,
    },
}

/// A checked window.
#[derive(Clone, Debug)]
pub struct Window {
    pub spec: WindowSpec,
    schedule: Schedule,
    matchers: Vec<Matcher>,
    tags: Vec<(String, Option<String>)>,
}

fn weekday(text: &str) -> Option<Weekday> {
    let t = text.trim().to_ascii_lowercase();
    let w = match t.get(..3)? {
        "mon" => Weekday::Monday,
        "tue" => Weekday::Tuesday,
        "wed" => Weekday::Wednesday,
        "thu" => Weekday::Thursday,
        "fri" => Weekday::Friday,
        "sat" => Weekday::Saturday,
        "sun" => Weekday::Sunday,
        _ => return None,
    };
    Some(w)
}

fn zone(what: &str, name: Option<&str>) -> Result<TimeZone, WindowError> {
    match name {
        None | Some("UTC") => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|_| {
            at("timezone")(format!(
                "{what}: unknown time zone '{n}' (expected an IANA name such as Europe/Berlin)"
            ))
        }),
    }
}

fn window_duration(what: &str, spec: &WindowSpec, max_ms: i64) -> Result<i64, WindowError> {
    let Some(d) = &spec.duration else {
        return Err(at("duration")(format!(
            "{what}: needs a duration (open-ended windows are refused)"
        )));
    };
    let ms = parse_duration_ms(d).map_err(|e| at("duration")(format!("{what} duration: {e}")))?;
    if ms <= 0 || ms > max_ms {
        return Err(at("duration")(format!(
            "{what}: duration must be longer than 0 and at most {}",
            crate::util::format_duration(max_ms)
        )));
    }
    Ok(ms)
}

/// What is wrong with a window: the field (as the JSON and TOML name it) and the message
/// (which names the window and the field too).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowError {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for WindowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Tags an error message with the field it is about.
fn at(field: &'static str) -> impl Fn(String) -> WindowError {
    move |message| WindowError { field, message }
}

impl Window {
    /// Checks a window; errors name it and the field.
    pub fn parse(spec: WindowSpec) -> Result<Window, String> {
        Window::check(spec).map_err(|e| e.message)
    }

    /// `parse`, with the field the error is about (for the API's 400 answer and the UI).
    pub fn check(spec: WindowSpec) -> Result<Window, WindowError> {
        let what = format!("maintenance '{}'", spec.name);
        if spec.name.trim().is_empty() || spec.name.len() > WINDOW_NAME_BYTES_MAX {
            return Err(at("name")(format!(
                "maintenance: a window needs a name of 1 to {WINDOW_NAME_BYTES_MAX} bytes"
            )));
        }
        let recurring = spec.at.is_some() || !spec.days.is_empty();
        let schedule = match (&spec.start, recurring, &spec.cron) {
            (Some(start), false, None) => {
                let start_ms =
                    parse_time_ms(start).map_err(|e| at("start")(format!("{what} start: {e}")))?;
                let end_ms = match (&spec.end, &spec.duration) {
                    (Some(end), None) => {
                        parse_time_ms(end).map_err(|e| at("end")(format!("{what} end: {e}")))?
                    }
                    (None, Some(_)) => {
                        start_ms + window_duration(&what, &spec, ONCE_DURATION_MAX_MS)?
                    }
                    (None, None) => {
                        return Err(at("end")(format!(
                            "{what}: needs an end or a duration (open-ended windows are refused)"
                        )))
                    }
                    (Some(_), Some(_)) => {
                        return Err(at("end")(format!(
                            "{what}: give an end or a duration, not both"
                        )))
                    }
                };
                if end_ms <= start_ms {
                    return Err(at("end")(format!("{what}: end must be after start")));
                }
                if end_ms - start_ms > ONCE_DURATION_MAX_MS {
                    return Err(at("end")(format!(
                        "{what}: a one-off window lasts at most 366 days"
                    )));
                }
                Schedule::Once { start_ms, end_ms }
            }
            (None, true, None) => {
                let tz = zone(&what, spec.timezone.as_deref())?;
                let at_text = spec.at.as_deref().ok_or_else(|| {
                    at("at")(format!(
                        "{what}: a weekly window needs `at` (its local start time, e.g. 02:30)"
                    ))
                })?;
                let start: Time = at_text.trim().parse().map_err(|_| {
                    at("at")(format!(
                        "{what} at: '{at_text}' is not a time of day (expected e.g. 02:30)"
                    ))
                })?;
                let mut days = 0u8;
                for d in &spec.days {
                    let w = weekday(d).ok_or_else(|| {
                        at("days")(format!(
                            "{what} days: '{d}' is not a weekday (mon, tue, …, sun)"
                        ))
                    })?;
                    days |= 1 << w.to_monday_zero_offset();
                }
                if spec.days.is_empty() {
                    days = 0x7f;
                }
                Schedule::Weekly {
                    tz,
                    days,
                    at: start,
                    duration_ms: window_duration(&what, &spec, WINDOW_DURATION_MAX_MS)?,
                }
            }
            (None, false, Some(expr)) => {
                let tz = zone(&what, spec.timezone.as_deref())?;
                let cron = croner::parser::CronParser::builder()
                    .build()
                    .parse(expr)
                    .map_err(|e| at("cron")(format!("{what} cron: '{expr}': {e}")))?;
                Schedule::Cron {
                    tz,
                    cron: Box::new(cron),
                    duration_ms: window_duration(&what, &spec, WINDOW_DURATION_MAX_MS)?,
                }
            }
            (None, false, None) => {
                return Err(at("start")(format!(
                    "{what}: give start and end (one-off), days/at and duration (weekly), or cron \
                     and duration"
                )))
            }
            _ => {
                return Err(at("start")(format!(
                    "{what}: give only one of start (one-off), days/at (weekly) or cron"
                )))
            }
        };
        if spec.end.is_some() && !matches!(schedule, Schedule::Once { .. }) {
            return Err(at("end")(format!(
                "{what}: `end` is for one-off windows; recurring ones take a duration"
            )));
        }
        if spec.matchers.len() > MATCHERS_MAX
            || spec.rulesets.len() > SCOPE_ITEMS_MAX
            || spec.tags.len() > SCOPE_ITEMS_MAX
        {
            return Err(at("matchers")(format!(
                "{what}: at most {MATCHERS_MAX} matchers and {SCOPE_ITEMS_MAX} rulesets or tags"
            )));
        }
        if spec.severities.iter().any(|s| !(1..=5).contains(s)) {
            return Err(at("severities")(format!("{what}: severities are 1 to 5")));
        }
        let matchers = spec
            .matchers
            .iter()
            .map(|m| Matcher::parse(m).map_err(|e| at("matchers")(format!("{what}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let tags = spec
            .tags
            .iter()
            .map(|t| match t.split_once(':') {
                Some((k, "*")) if !k.is_empty() => Ok((k.to_string(), None)),
                Some((k, v)) if !k.is_empty() => Ok((k.to_string(), Some(v.to_string()))),
                _ => Err(at("tags")(format!(
                    "{what} tags: '{t}' is not key:value (or key:*)"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Window {
            spec,
            schedule,
            matchers,
            tags,
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether an alert with these labels and severity is in scope (at any time).
    pub fn scopes(&self, labels: &BTreeMap<String, String>, severity: u8) -> bool {
        let s = &self.spec;
        (s.severities.is_empty() || s.severities.contains(&severity))
            && (s.rulesets.is_empty()
                || labels
                    .get("alertname")
                    .is_some_and(|a| s.rulesets.iter().any(|r| r == a)))
            && self.tags.iter().all(|(k, v)| match (labels.get(k), v) {
                (Some(have), Some(want)) => have == want,
                (Some(_), None) => true,
                (None, _) => false,
            })
            && self.matchers.iter().all(|m| m.matches(labels))
    }

    pub fn mutes(&self, t_ms: i64, labels: &BTreeMap<String, String>, severity: u8) -> bool {
        self.scopes(labels, severity) && self.active_at(t_ms)
    }

    /// The occurrence `[start, end)` that contains `t_ms`, if any.
    pub fn occurrence_at(&self, t_ms: i64) -> Option<(i64, i64)> {
        match &self.schedule {
            Schedule::Once { start_ms, end_ms } => (*start_ms..*end_ms)
                .contains(&t_ms)
                .then_some((*start_ms, *end_ms)),
            Schedule::Weekly {
                tz,
                days,
                at,
                duration_ms,
            } => weekly_occurrence(tz, *days, *at, *duration_ms, t_ms),
            Schedule::Cron {
                tz,
                cron,
                duration_ms,
            } => cron_occurrence(tz, cron, *duration_ms, t_ms),
        }
    }

    pub fn active_at(&self, t_ms: i64) -> bool {
        self.occurrence_at(t_ms).is_some()
    }

    /// How long each occurrence lasts.
    pub fn duration_ms(&self) -> i64 {
        match &self.schedule {
            Schedule::Once { start_ms, end_ms } => end_ms - start_ms,
            Schedule::Weekly { duration_ms, .. } | Schedule::Cron { duration_ms, .. } => {
                *duration_ms
            }
        }
    }

    /// The occurrence in progress at `t_ms`, else the next one (`None`: a one-off window that
    /// is over); for listing when a window next starts and ends.
    pub fn current_or_next(&self, t_ms: i64) -> Option<(i64, i64)> {
        self.occurrence_at(t_ms)
            .or_else(|| self.next_start(t_ms).map(|s| (s, s + self.duration_ms())))
    }

    /// The first occurrence that starts at or after `t_ms` (`None` for a one-off window that
    /// is over); for listing.
    pub fn next_start(&self, t_ms: i64) -> Option<i64> {
        match &self.schedule {
            Schedule::Once { start_ms, end_ms } => (t_ms < *end_ms).then_some(*start_ms),
            Schedule::Weekly {
                tz,
                days,
                at,
                duration_ms: _,
            } => {
                let date = Timestamp::from_millisecond(t_ms)
                    .ok()?
                    .to_zoned(tz.clone())
                    .date();
                (0..8i64).find_map(|k| {
                    let d = date.checked_add(jiff::Span::new().days(k)).ok()?;
                    let start = day_start(tz, *days, *at, d)?;
                    (start >= t_ms).then_some(start)
                })
            }
            Schedule::Cron { tz, cron, .. } => {
                let z = Timestamp::from_millisecond(t_ms).ok()?.to_zoned(tz.clone());
                let next = cron.find_next_occurrence(&z, true).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }
}

/// The instant the window starts on local date `d`, if `d` is one of its days. A wall-clock
/// time the clock skips resolves after the jump, a repeated one to its first occurrence
/// (jiff's "compatible" rule, as RFC 5545 and Temporal have it).
fn day_start(tz: &TimeZone, days: u8, at: Time, d: jiff::civil::Date) -> Option<i64> {
    if days & (1 << d.weekday().to_monday_zero_offset()) == 0 {
        return None;
    }
    let z = d.to_datetime(at).to_zoned(tz.clone()).ok()?;
    Some(z.timestamp().as_millisecond())
}

fn weekly_occurrence(
    tz: &TimeZone,
    days: u8,
    at: Time,
    duration_ms: i64,
    t_ms: i64,
) -> Option<(i64, i64)> {
    let date = Timestamp::from_millisecond(t_ms)
        .ok()?
        .to_zoned(tz.clone())
        .date();
    // Occurrences that started up to `duration` (≤ 7 days) before t, one day more for offsets.
    let back = duration_ms / 86_400_000 + 2;
    (0..=back).find_map(|k| {
        let d = date.checked_sub(jiff::Span::new().days(k)).ok()?;
        let start = day_start(tz, days, at, d)?;
        (start <= t_ms && t_ms < start + duration_ms).then_some((start, start + duration_ms))
    })
}

fn cron_occurrence(
    tz: &TimeZone,
    cron: &croner::Cron,
    duration_ms: i64,
    t_ms: i64,
) -> Option<(i64, i64)> {
    // The first start after t - duration: t is inside that occurrence when it is not later
    // than t (an earlier start ends at or before t). The cron library works in whole
    // seconds, so a start exactly at t - duration is stepped over by hand.
    let from = Timestamp::from_millisecond(t_ms - duration_ms)
        .ok()?
        .to_zoned(tz.clone());
    let mut start = cron.find_next_occurrence(&from, true).ok()?;
    if start.timestamp().as_millisecond() + duration_ms <= t_ms {
        start = cron.find_next_occurrence(&start, false).ok()?;
    }
    let start_ms = start.timestamp().as_millisecond();
    (start_ms <= t_ms && t_ms < start_ms + duration_ms)
        .then_some((start_ms, start_ms + duration_ms))
}

/// The API windows' file in the notifier's directory: a JSON array of window specs.
pub const API_WINDOWS_FILE: &str = "windows.json";

/// Reads the API windows (none when the file does not exist).
/// `in_file(name)`: whether the configuration file has a window of that name (it wins).
pub fn load_api_windows(
    path: &std::path::Path,
    in_file: &dyn Fn(&str) -> bool,
) -> Result<Vec<Window>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let specs: Vec<WindowSpec> =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::with_capacity(specs.len());
    for s in specs {
        let name = s.name.clone();
        match Window::parse(s) {
            // A file window took the name since: the file's wins.
            Ok(_) if in_file(&name) => {
                tracing::warn!(window = %name, "API maintenance window shadowed by the file's");
            }
            Ok(w) => out.push(w),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(out)
}

pub fn save_api_windows(path: &std::path::Path, windows: &[Window]) -> Result<(), String> {
    let specs: Vec<&WindowSpec> = windows.iter().map(|w| &w.spec).collect();
    let bytes = serde_json::to_vec_pretty(&specs).map_err(|e| e.to_string())?;
    super::write_atomic(path, &bytes).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        parse_time_ms(text).unwrap()
    }

    fn weekly(days: &[&str], at: &str, duration: &str) -> Window {
        Window::parse(WindowSpec {
            name: "w".into(),
            days: days.iter().map(|d| d.to_string()).collect(),
            at: Some(at.into()),
            duration: Some(duration.into()),
            timezone: Some("Europe/Berlin".into()),
            ..WindowSpec::default()
        })
        .unwrap()
    }

    #[test]
    fn weekly_windows_follow_the_local_clock() {
        let w = weekly(&["mon", "fri"], "22:00", "4h");
        // Friday 2026-11-27 22:00 CET is 21:00 UTC; it runs past midnight into Saturday.
        assert!(w.active_at(ms("2026-11-27T21:00:00Z")));
        assert!(w.active_at(ms("2026-11-28T00:59:59Z")));
        assert!(!w.active_at(ms("2026-11-28T01:00:00Z")), "the end is open");
        assert!(!w.active_at(ms("2026-11-27T20:59:59Z")));
        // Not on a Wednesday.
        assert!(!w.active_at(ms("2026-11-25T21:30:00Z")));
        // Summer: 22:00 CEST is 20:00 UTC.
        assert!(w.active_at(ms("2026-07-03T20:00:00Z")));
        assert!(!w.active_at(ms("2026-07-03T19:59:00Z")));
        assert_eq!(
            w.next_start(ms("2026-11-25T00:00:00Z")),
            Some(ms("2026-11-27T21:00:00Z"))
        );
    }

    #[test]
    fn a_start_the_clock_skips_begins_after_the_jump_and_a_repeated_one_once() {
        // 2026-03-29: Berlin jumps 02:00 CET -> 03:00 CEST; 02:30 does not exist.
        let w = weekly(&["sun"], "02:30", "1h");
        // 02:30 resolves to 03:30 CEST = 01:30 UTC, lasting an hour.
        assert!(!w.active_at(ms("2026-03-29T01:29:59Z")));
        assert!(w.active_at(ms("2026-03-29T01:30:00Z")));
        assert!(w.active_at(ms("2026-03-29T02:29:59Z")));
        assert!(!w.active_at(ms("2026-03-29T02:30:00Z")));
        // 2026-10-25: Berlin goes back 03:00 CEST -> 02:00 CET; 02:30 happens twice. The window
        // starts at the first (00:30 UTC) and lasts one elapsed hour, not into the second.
        assert!(w.active_at(ms("2026-10-25T00:30:00Z")));
        assert!(w.active_at(ms("2026-10-25T01:29:59Z")));
        assert!(!w.active_at(ms("2026-10-25T01:30:00Z")));
        // A normal Sunday: 02:30 CET = 01:30 UTC.
        assert!(w.active_at(ms("2026-11-29T01:30:00Z")));
    }

    #[test]
    fn cron_windows_with_a_duration() {
        let w = Window::parse(WindowSpec {
            name: "c".into(),
            cron: Some("30 2 * * 0".into()),
            duration: Some("1h".into()),
            timezone: Some("Europe/Berlin".into()),
            ..WindowSpec::default()
        })
        .unwrap();
        assert!(w.active_at(ms("2026-11-29T01:30:00Z")));
        assert!(w.active_at(ms("2026-11-29T02:29:59Z")));
        assert!(!w.active_at(ms("2026-11-29T02:30:00Z")));
        assert!(
            !w.active_at(ms("2026-11-28T01:30:00Z")),
            "not on a Saturday"
        );
        // The day 02:30 does not exist: the cron library starts it right after the jump.
        let (start, _) = w.occurrence_at(ms("2026-03-29T01:45:00Z")).unwrap();
        assert_eq!(start, ms("2026-03-29T01:00:00Z"));
        // The day 02:30 happens twice: once, at the first.
        let (start, end) = w.occurrence_at(ms("2026-10-25T00:45:00Z")).unwrap();
        assert_eq!(
            (start, end),
            (ms("2026-10-25T00:30:00Z"), ms("2026-10-25T01:30:00Z"))
        );
        assert!(w.occurrence_at(ms("2026-10-25T01:45:00Z")).is_none());
    }

    #[test]
    fn windows_without_an_end_and_bad_fields_are_refused() {
        let cases = [
            (
                WindowSpec {
                    name: "open".into(),
                    start: Some("2026-11-28T22:00:00Z".into()),
                    ..WindowSpec::default()
                },
                "maintenance 'open': needs an end or a duration (open-ended windows are refused)",
            ),
            (
                WindowSpec {
                    name: "weekly".into(),
                    days: vec!["sat".into()],
                    at: Some("01:00".into()),
                    ..WindowSpec::default()
                },
                "maintenance 'weekly': needs a duration (open-ended windows are refused)",
            ),
            (
                WindowSpec {
                    name: "tz".into(),
                    at: Some("01:00".into()),
                    duration: Some("1h".into()),
                    timezone: Some("Mars/Olympus".into()),
                    ..WindowSpec::default()
                },
                "maintenance 'tz': unknown time zone 'Mars/Olympus'",
            ),
            (
                WindowSpec {
                    name: "day".into(),
                    days: vec!["someday".into()],
                    at: Some("01:00".into()),
                    duration: Some("1h".into()),
                    ..WindowSpec::default()
                },
                "maintenance 'day' days: 'someday' is not a weekday",
            ),
            (
                WindowSpec {
                    name: "cron".into(),
                    cron: Some("61 * * * *".into()),
                    duration: Some("1h".into()),
                    ..WindowSpec::default()
                },
                "maintenance 'cron' cron: '61 * * * *'",
            ),
            (
                WindowSpec {
                    name: "long".into(),
                    cron: Some("0 0 * * *".into()),
                    duration: Some("8d".into()),
                    ..WindowSpec::default()
                },
                "maintenance 'long': duration must be longer than 0 and at most 7d",
            ),
        ];
        for (spec, want) in cases {
            let e = Window::parse(spec).unwrap_err();
            assert!(e.contains(want), "{e} should say {want}");
        }
    }

    #[test]
    fn scope_by_ruleset_tags_labels_and_severity() {
        let w = Window::parse(WindowSpec {
            name: "s".into(),
            start: Some("0".into()),
            end: Some("1000".into()),
            rulesets: vec!["login-slow".into()],
            tags: vec!["app:web".into(), "team:*".into()],
            matchers: vec!["dc!=\"b\"".into()],
            severities: vec![2, 3],
            ..WindowSpec::default()
        })
        .unwrap();
        let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ok = l(&[("alertname", "login-slow"), ("app", "web"), ("team", "id")]);
        assert!(w.mutes(0, &ok, 2));
        assert!(!w.mutes(1000, &ok, 2));
        assert!(!w.mutes(0, &ok, 1));
        let mut other = ok.clone();
        other.insert("alertname".into(), "disk".into());
        assert!(!w.mutes(0, &other, 2));
        let mut no_team = ok.clone();
        no_team.remove("team");
        assert!(!w.mutes(0, &no_team, 2));
        let mut dc_b = ok.clone();
        dc_b.insert("dc".into(), "b".into());
        assert!(!w.mutes(0, &dc_b, 2));
    }
}
