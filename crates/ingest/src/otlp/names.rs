//! OTLP metric and attribute names as Prometheus 3.5's OTLP receiver makes them, for each of its
//! `translation_strategy` options: characters outside the legacy charset escaped to `_`, a
//! unit suffix from the UCUM unit (`s` → `_seconds`, `By/s` → `_bytes_per_second`), `_total`
//! for a monotonic sum and `_ratio` for a gauge of unit `1`. Rules: `FORMAT.md`, "OTLP names".

use std::borrow::Cow;

/// Prometheus's `otlp.translation_strategy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Names escaped to the legacy charset, unit and type suffixes added (Prometheus's default).
    #[default]
    UnderscoreEscapingWithSuffixes,
    /// Names kept as sent (any UTF-8), unit and type suffixes added.
    NoUtf8EscapingWithSuffixes,
    /// Names kept exactly as sent.
    NoTranslation,
}

impl Strategy {
    /// The strategy Prometheus's configuration names so.
    pub fn from_name(name: &str) -> Option<Strategy> {
        match name {
            "UnderscoreEscapingWithSuffixes" => Some(Strategy::UnderscoreEscapingWithSuffixes),
            "NoUTF8EscapingWithSuffixes" => Some(Strategy::NoUtf8EscapingWithSuffixes),
            "NoTranslation" => Some(Strategy::NoTranslation),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Strategy::UnderscoreEscapingWithSuffixes => "UnderscoreEscapingWithSuffixes",
            Strategy::NoUtf8EscapingWithSuffixes => "NoUTF8EscapingWithSuffixes",
            Strategy::NoTranslation => "NoTranslation",
        }
    }

    fn escapes(self) -> bool {
        self == Strategy::UnderscoreEscapingWithSuffixes
    }
}

/// What kind of metric a name is built for (the suffix rules look at it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    MonotonicCounter,
    NonMonotonicCounter,
    Histogram,
    ExponentialHistogram,
    Summary,
}

/// A UCUM unit's Prometheus word, or `None` when it has none (the unit is then used as is).
fn unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        _ => return None,
    })
}

/// The word after `per_` for a rate's denominator unit.
fn per_unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

/// A unit's main and `per_` parts (`By/s` → `bytes`, `per_second`); annotations in braces
/// (`{request}`) give none.
fn unit_suffixes(unit: &str) -> (String, String) {
    let (main, per) = match unit.split_once('/') {
        Some((main, per)) => (main, Some(per)),
        None => (unit, None),
    };
    let main = main.trim();
    let main = if main.is_empty() || main.contains(['{', '}']) {
        String::new()
    } else {
        unit_word(main).unwrap_or(main).to_owned()
    };
    let per = match per.map(str::trim) {
        Some(per) if !per.is_empty() && !per.contains(['{', '}']) => {
            format!("per_{}", per_unit_word(per).unwrap_or(per))
        }
        _ => String::new(),
    };
    (main, per)
}

/// Whether a character may stand in a legacy metric name (`_` apart: it separates words).
fn metric_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// A unit part escaped: every other character a `_`, runs of `_` one, no leading `_`.
fn clean_unit(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    for c in unit.chars() {
        let c = if metric_char(c) { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out.trim_start_matches('_').to_owned()
}

/// The metric name Prometheus's OTLP receiver stores `name` (of `unit` and `kind`) under.
pub fn metric_name<'n>(name: &'n str, unit: &str, kind: Kind, strategy: Strategy) -> Cow<'n, str> {
    match strategy {
        Strategy::NoTranslation => Cow::Borrowed(name),
        Strategy::NoUtf8EscapingWithSuffixes => Cow::Owned(suffixed_utf8(name, unit, kind)),
        Strategy::UnderscoreEscapingWithSuffixes => {
            let escaped = escaped(name, unit, kind);
            // A name of underscores only becomes empty: the name check then refuses it, as
            // Prometheus refuses it.
            if escaped != name && escaped.bytes().all(|b| b == b'_') {
                Cow::Owned(String::new())
            } else {
                Cow::Owned(escaped)
            }
        }
    }
}

/// Words of the legacy charset, the unit's words added once, then `total` or `ratio` last.
fn escaped(name: &str, unit: &str, kind: Kind) -> String {
    let mut words: Vec<&str> = name
        .split(|c| !metric_char(c))
        .filter(|w| !w.is_empty())
        .collect();
    let (main, per) = unit_suffixes(unit);
    let (mut main, per) = (clean_unit(&main), clean_unit(&per));
    if words.contains(&main.as_str()) {
        main.clear();
    }
    let per = if per == "per_" {
        String::new()
    } else {
        let per = per.trim_end_matches('_').to_owned();
        if words.contains(&per.as_str()) {
            String::new()
        } else {
            per
        }
    };
    if !per.is_empty() {
        main = main.trim_end_matches('_').to_owned();
    }
    if !main.is_empty() {
        words.push(&main);
    }
    if !per.is_empty() {
        words.push(&per);
    }
    if kind == Kind::MonotonicCounter {
        words.retain(|w| *w != "total");
        words.push("total");
    }
    if unit == "1" && kind == Kind::Gauge {
        words.retain(|w| *w != "ratio");
        words.push("ratio");
    }
    let joined = words.join("_");
    if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

/// `name` kept, suffixes added as with UTF-8 names: each suffix (and the `_` before it) taken
/// off the end first, then put back in order (unit, `per_` unit, `_total` or `_ratio`).
fn suffixed_utf8(name: &str, unit: &str, kind: Kind) -> String {
    let trim = |name: &mut String, suffix: &str| {
        if name.ends_with(suffix) && name.len() > suffix.len() + 1 {
            name.truncate(name.len() - suffix.len() - 1);
        }
    };
    let mut out = name.to_owned();
    let ratio = unit == "1" && kind == Kind::Gauge;
    if ratio {
        trim(&mut out, "ratio");
    }
    let total = kind == Kind::MonotonicCounter;
    if total {
        trim(&mut out, "total");
    }
    let (main, per) = unit_suffixes(unit);
    if !per.is_empty() {
        trim(&mut out, &per);
    }
    if !main.is_empty() && !out.ends_with(&main) {
        out.push('_');
        out.push_str(&main);
    }
    if !per.is_empty() {
        out.push('_');
        out.push_str(&per);
    }
    if total {
        out.push_str("_total");
    }
    if ratio {
        out.push_str("_ratio");
    }
    out
}

/// The label name an attribute key becomes: with escaping, every character outside
/// `[a-zA-Z0-9_]` a `_`, and `key_` before a leading digit, `key` before one leading `_`
/// (`__` names are kept).
pub fn label_name(key: &str, strategy: Strategy) -> Cow<'_, str> {
    if !strategy.escapes() || key.is_empty() {
        return Cow::Borrowed(key);
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let clean = key.bytes().next().is_some_and(|b| !b.is_ascii_digit())
        && key.chars().all(valid)
        && (!key.starts_with('_') || key.starts_with("__"));
    if clean {
        return Cow::Borrowed(key);
    }
    let mut out: String = key
        .chars()
        .map(|c| if valid(c) { c } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    } else if out.starts_with('_') && !out.starts_with("__") {
        out.insert_str(0, "key");
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Strategy = Strategy::UnderscoreEscapingWithSuffixes;

    #[test]
    fn default_names_take_unit_and_type_suffixes() {
        let cases = [
            (
                "http.server.request.duration",
                "s",
                Kind::Histogram,
                "http_server_request_duration_seconds",
            ),
            (
                "system.memory.usage",
                "By",
                Kind::NonMonotonicCounter,
                "system_memory_usage_bytes",
            ),
            ("requests", "1", Kind::MonotonicCounter, "requests_total"),
            (
                "requests.total",
                "{request}",
                Kind::MonotonicCounter,
                "requests_total",
            ),
            ("cpu.utilization", "1", Kind::Gauge, "cpu_utilization_ratio"),
            ("net.io", "By/s", Kind::Gauge, "net_io_bytes_per_second"),
            ("latency_seconds", "s", Kind::Histogram, "latency_seconds"),
            ("temp", "Cel", Kind::Gauge, "temp_celsius"),
            ("odd__name..x", "", Kind::Gauge, "odd_name_x"),
            ("2xx", "", Kind::Gauge, "_2xx"),
            ("queue", "{item}/min", Kind::Gauge, "queue_per_min"),
            ("weird", "m/s²", Kind::Gauge, "weird_meters_per_s"),
        ];
        for (name, unit, kind, want) in cases {
            assert_eq!(
                metric_name(name, unit, kind, DEFAULT),
                want,
                "{name} {unit}"
            );
        }
        assert_eq!(metric_name("...", "", Kind::Gauge, DEFAULT), "");
    }

    #[test]
    fn utf8_and_untranslated_names() {
        let utf8 = Strategy::NoUtf8EscapingWithSuffixes;
        assert_eq!(
            metric_name("http.requests", "", Kind::MonotonicCounter, utf8),
            "http.requests_total"
        );
        assert_eq!(
            metric_name("mem.used", "By", Kind::Gauge, utf8),
            "mem.used_bytes"
        );
        assert_eq!(metric_name("up.ratio", "1", Kind::Gauge, utf8), "up_ratio");
        let none = Strategy::NoTranslation;
        assert_eq!(
            metric_name("http.requests", "s", Kind::MonotonicCounter, none),
            "http.requests"
        );
    }

    #[test]
    fn label_names_are_escaped_and_prefixed() {
        assert_eq!(label_name("host.name", DEFAULT), "host_name");
        assert_eq!(label_name("1st", DEFAULT), "key_1st");
        assert_eq!(label_name("_private", DEFAULT), "key_private");
        assert_eq!(label_name("__reserved", DEFAULT), "__reserved");
        assert_eq!(label_name("ok_label", DEFAULT), "ok_label");
        assert_eq!(
            label_name("host.name", Strategy::NoTranslation),
            "host.name"
        );
        assert_eq!(
            label_name("host.name", Strategy::NoUtf8EscapingWithSuffixes),
            "host.name"
        );
    }
}
