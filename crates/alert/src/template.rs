//! Label and annotation templates: `{{ field | filter }}` inside text.
//!
//! Fields: any reducer (`count_above(1.5)`, `ratio_above(1.5)`, `percentile(99)`, `count`, …),
//! `value` (the held level's left side), `tag.<category>`, `label.<name>`, `severity`, `state`,
//! `rule`, `stream`, `text` (a text stream's newest value), `since` (RFC 3339 of the state's
//! start), `silent` (an absence stream's silence, as a duration). Filters: `percent` (×100 with
//! `%`), `int`, `fixed(n)`. Numbers print for people: integers whole, others with 4
//! significant digits. Compiled once when the ruleset loads; rendering cannot fail (a field with
//! no value prints `n/a`).

use crate::cond::{Ctx, Reducer, Windowed};
use crate::util::{format_duration, human_number, rfc3339};

/// Longest template text, and longest rendered text (cut at a character boundary past it).
pub const TEMPLATE_BYTES_MAX: usize = 4096;
/// Most `{{ … }}` fields in one template.
const FIELDS_MAX: usize = 64;

#[derive(Clone, Debug, PartialEq)]
enum Field {
    Reducer(Reducer),
    Value,
    Tag(String),
    Label(String),
    Severity,
    State,
    Rule,
    Stream,
    Text,
    Since,
    Silent,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Filter {
    Plain,
    Percent,
    Int,
    Fixed(usize),
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Lit(String),
    Field(Field, Filter),
}

/// A compiled template.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

/// What a template is rendered against.
pub struct Render<'a> {
    pub value: Option<&'a Windowed>,
    pub ctx: Ctx,
    /// The held level's left side (`{{ value }}`).
    pub primary: Option<f64>,
    pub tags: &'a [(String, String)],
    pub labels: &'a [(String, String)],
    pub severity: u8,
    pub state: &'a str,
    pub rule: &'a str,
    pub stream: &'a str,
    pub since_ms: i64,
}

fn parse_field(text: &str) -> Result<Field, String> {
    let t = text.trim();
    if let Some(cat) = t.strip_prefix("tag.") {
        return Ok(Field::Tag(cat.to_string()));
    }
    if let Some(name) = t.strip_prefix("label.") {
        return Ok(Field::Label(name.to_string()));
    }
    Ok(match t {
        "value" => Field::Value,
        "severity" => Field::Severity,
        "state" => Field::State,
        "rule" => Field::Rule,
        "stream" => Field::Stream,
        "text" => Field::Text,
        "since" => Field::Since,
        "silent" => Field::Silent,
        _ => Field::Reducer(parse_reducer(t)?),
    })
}

fn parse_reducer(t: &str) -> Result<Reducer, String> {
    let (name, args) = match t.split_once('(') {
        None => (t, Vec::new()),
        Some((name, rest)) => {
            let inner = rest
                .strip_suffix(')')
                .ok_or_else(|| format!("`{t}`: missing `)`"))?;
            let args = inner
                .split(',')
                .filter(|a| !a.trim().is_empty())
                .map(|a| {
                    a.trim()
                        .parse::<f64>()
                        .map_err(|_| format!("`{t}`: {:?} is not a number", a.trim()))
                })
                .collect::<Result<Vec<f64>, String>>()?;
            (name.trim(), args)
        }
    };
    Reducer::from_call(name, &args).map_err(|e| format!("template field: {e}"))
}

fn parse_filter(text: Option<&str>) -> Result<Filter, String> {
    let Some(t) = text.map(str::trim) else {
        return Ok(Filter::Plain);
    };
    if let Some(n) = t.strip_prefix("fixed(").and_then(|r| r.strip_suffix(')')) {
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("fixed({n}): expected digits"))?;
        return Ok(Filter::Fixed(n.min(12)));
    }
    match t {
        "percent" => Ok(Filter::Percent),
        "int" => Ok(Filter::Int),
        _ => Err(format!(
            "unknown filter `{t}` (known: percent, int, fixed(n))"
        )),
    }
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.len() > TEMPLATE_BYTES_MAX {
            return Err(format!("template longer than {TEMPLATE_BYTES_MAX} bytes"));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if parts.len() >= 2 * FIELDS_MAX {
                return Err(format!("more than {FIELDS_MAX} fields"));
            }
            if open > 0 {
                parts.push(Part::Lit(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| {
                format!(
                    "`{{{{` at byte {} is not closed",
                    text.len() - rest.len() + open
                )
            })?;
            let inner = &after[..close];
            let (field, filter) = match inner.split_once('|') {
                Some((f, flt)) => (f, Some(flt)),
                None => (inner, None),
            };
            parts.push(Part::Field(parse_field(field)?, parse_filter(filter)?));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_string()));
        }
        Ok(Template {
            source: text.to_string(),
            parts,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn render(&self, r: &Render<'_>) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Field(f, flt) => out.push_str(&field_text(f, *flt, r)),
            }
            if out.len() > TEMPLATE_BYTES_MAX {
                let mut cut = TEMPLATE_BYTES_MAX;
                while !out.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.truncate(cut);
                break;
            }
        }
        out
    }
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

fn number(v: Option<f64>, filter: Filter) -> String {
    let Some(v) = v.filter(|v| v.is_finite()) else {
        return "n/a".into();
    };
    match filter {
        Filter::Plain => human_number(v),
        Filter::Percent => format!("{}%", human_number(v * 100.0)),
        Filter::Int => format!("{}", v.round() as i64),
        Filter::Fixed(n) => format!("{v:.n$}"),
    }
}

fn field_text(f: &Field, filter: Filter, r: &Render<'_>) -> String {
    match f {
        Field::Reducer(red) => number(
            r.value.and_then(|v| red.eval(v, r.ctx).ok().flatten()),
            filter,
        ),
        Field::Value => number(r.primary, filter),
        Field::Tag(c) => lookup(r.tags, c).to_string(),
        Field::Label(n) => lookup(r.labels, n).to_string(),
        Field::Severity => r.severity.to_string(),
        Field::State => r.state.to_string(),
        Field::Rule => r.rule.to_string(),
        Field::Stream => r.stream.to_string(),
        Field::Text => match r.value {
            Some(Windowed::Text { last, .. }) => last.clone(),
            _ => "n/a".into(),
        },
        Field::Since => rfc3339(r.since_ms),
        Field::Silent => match r.value {
            Some(Windowed::Silent {
                last_seen_ms: 0, ..
            }) => "ever (never seen)".into(),
            // Whole seconds: "3m 59s", not "239900ms".
            Some(Windowed::Silent { silent_ms, .. }) => format_duration(silent_ms / 1000 * 1000),
            _ => "n/a".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hist::Histogram;

    #[test]
    fn share_and_people_in_one_annotation() {
        let t = Template::parse(
            "{{ count_above(1.5) }} people ({{ ratio_above(1.5) | percent }}) on {{ tag.app }}, sev {{severity}}",
        )
        .unwrap();
        let mut h = Histogram::new();
        h.insert_n(0.12, 3_500);
        h.insert_n(1.6, 523);
        let w = Windowed::Hist(h);
        let tags = vec![("app".to_string(), "web".to_string())];
        let r = Render {
            value: Some(&w),
            ctx: Ctx { window_s: 300.0 },
            primary: Some(523.0),
            tags: &tags,
            labels: &[],
            severity: 1,
            state: "firing",
            rule: "login",
            stream: "login|ST[app:web]",
            since_ms: 0,
        };
        assert_eq!(t.render(&r), "523 people (13%) on web, sev 1");
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(Template::parse("{{ count_above(1.5) ").is_err());
        assert!(Template::parse("{{ nope }}").is_err());
        assert!(Template::parse("{{ value | shout }}").is_err());
        assert_eq!(Template::parse("plain").unwrap().parts.len(), 1);
    }
}
