//! Webhook body templates: text with `{{ field }}` or `{{ field | json }}` (the value as a JSON
//! string literal, for templates that are JSON documents).
//!
//! Fields: `status` (firing, resolved, acknowledged), `receiver`, `key` (the idempotency key),
//! `group_key`, `count` (alerts), `alertname`, `severity` (common), `summary` (the first
//! alert's headline), `title` (`[FIRING:2] name`), `text` (the plain-text message),
//! `label.<name>` and `annotation.<name>` (common to the alerts, else the first alert's), and
//! as JSON as they are: `alerts`, `group_labels`, `common_labels`. Checked when the
//! configuration loads: an unknown field is an error there, never at delivery.

use serde_json::Value;

use super::render;

/// Longest template.
pub const TEMPLATE_BYTES_MAX: usize = 16 * 1024;
/// Most fields in one template.
const FIELDS_MAX: usize = 256;

#[derive(Clone, Debug, PartialEq)]
enum Field {
    Status,
    Receiver,
    Key,
    GroupKey,
    Count,
    Alertname,
    Severity,
    Summary,
    Title,
    Text,
    Label(String),
    Annotation(String),
    Alerts,
    GroupLabels,
    CommonLabels,
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Literal(String),
    Field { field: Field, json: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

fn field(name: &str) -> Result<Field, String> {
    Ok(match name {
        "status" => Field::Status,
        "receiver" => Field::Receiver,
        "key" => Field::Key,
        "group_key" => Field::GroupKey,
        "count" => Field::Count,
        "alertname" => Field::Alertname,
        "severity" => Field::Severity,
        "summary" => Field::Summary,
        "title" => Field::Title,
        "text" => Field::Text,
        "alerts" => Field::Alerts,
        "group_labels" => Field::GroupLabels,
        "common_labels" => Field::CommonLabels,
        other => {
            if let Some(l) = other.strip_prefix("label.").filter(|l| !l.is_empty()) {
                Field::Label(l.into())
            } else if let Some(a) = other.strip_prefix("annotation.").filter(|a| !a.is_empty()) {
                Field::Annotation(a.into())
            } else {
                return Err(format!(
                    "unknown field '{other}' (status, receiver, key, group_key, count, \
                     alertname, severity, summary, title, text, label.<name>, \
                     annotation.<name>, alerts, group_labels, common_labels)"
                ));
            }
        }
    })
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.len() > TEMPLATE_BYTES_MAX {
            return Err(format!("longer than {TEMPLATE_BYTES_MAX} bytes"));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| {
                format!(
                    "'{{{{' at byte {} is not closed",
                    text.len() - rest.len() + open
                )
            })?;
            let inner = after[..close].trim();
            let (name, json) = match inner.split_once('|') {
                None => (inner, false),
                Some((n, f)) if f.trim() == "json" => (n.trim(), true),
                Some((_, f)) => return Err(format!("unknown filter '{}' (json)", f.trim())),
            };
            parts.push(Part::Field {
                field: field(name)?,
                json,
            });
            if parts.len() > FIELDS_MAX * 2 {
                return Err(format!("more than {FIELDS_MAX} fields"));
            }
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Ok(Template { parts })
    }

    pub fn render(&self, n: &Value) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Literal(t) => out.push_str(t),
                Part::Field { field, json } => {
                    let v = value(field, n);
                    match (v, json) {
                        (Value::String(t), false) => out.push_str(&t),
                        (Value::String(t), true) => out.push_str(&Value::String(t).to_string()),
                        (other, _) => out.push_str(&other.to_string()),
                    }
                }
            }
        }
        out
    }
}

fn common(n: &Value, group: &str, per_alert: &str, name: &str) -> String {
    let from_common = n[group][name].as_str();
    let first = render::alerts(n)
        .first()
        .and_then(|a| a[per_alert][name].as_str());
    from_common.or(first).unwrap_or("").to_string()
}

fn value(f: &Field, n: &Value) -> Value {
    let text = |k: &str| Value::String(n[k].as_str().unwrap_or("").to_string());
    match f {
        Field::Status => text("status"),
        Field::Receiver => text("receiver"),
        Field::Key => text("idempotencyKey"),
        Field::GroupKey => text("groupKey"),
        Field::Count => Value::from(render::alerts(n).len()),
        Field::Alertname => Value::String(common(n, "commonLabels", "labels", "alertname")),
        Field::Severity => Value::String(common(n, "commonLabels", "labels", "severity")),
        Field::Summary => Value::String(
            render::alerts(n)
                .first()
                .map(render::headline)
                .unwrap_or_default(),
        ),
        Field::Title => Value::String(render::title(n)),
        Field::Text => Value::String(render::text(n, &None)),
        Field::Label(l) => Value::String(common(n, "commonLabels", "labels", l)),
        Field::Annotation(a) => Value::String(common(n, "commonAnnotations", "annotations", a)),
        Field::Alerts => n["alerts"].clone(),
        Field::GroupLabels => n["groupLabels"].clone(),
        Field::CommonLabels => n["commonLabels"].clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_render_plain_and_as_json() {
        let t = Template::parse(
            r#"{"msg": {{ summary | json }}, "n": {{ count }}, "who": "{{ label.team }}"}"#,
        )
        .unwrap();
        let n = json!({
            "commonLabels": { "team": "db" },
            "alerts": [{ "labels": {}, "annotations": { "summary": "5 \"people\"" } }],
        });
        let out = t.render(&n);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["msg"], "5 \"people\"");
        assert_eq!(v["n"], 1);
        assert_eq!(v["who"], "db");
    }

    #[test]
    fn mistakes_are_found_when_the_template_loads() {
        assert!(Template::parse("{{ nope }}")
            .unwrap_err()
            .contains("unknown field 'nope'"));
        assert!(Template::parse("{{ status | upper }}")
            .unwrap_err()
            .contains("unknown filter"));
        assert!(Template::parse("{{ status ")
            .unwrap_err()
            .contains("not closed"));
    }
}
