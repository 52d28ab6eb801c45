//! The payloads: each contact's document built from the notification's Alertmanager-shaped
//! JSON (`status`, `receiver`, `groupLabels`, `commonLabels`, `alerts[]` with `labels`,
//! `annotations`, `startsAt`, `endsAt`, `fingerprint`; `idempotencyKey`). Pure functions.

use serde_json::{json, Map, Value};

use super::{episode_key, PagerDuty, Slack, VictorOps};

/// Alerts listed one by one in a Slack message or an email; the rest are counted.
pub const LISTED_ALERTS_MAX: usize = 20;
/// PagerDuty's limit on `payload.summary`.
const PAGERDUTY_SUMMARY_CHARS_MAX: usize = 1024;
/// Slack's limit on a section's text.
const SLACK_TEXT_CHARS_MAX: usize = 3000;

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn label<'a>(a: &'a Value, k: &str) -> &'a str {
    s(&a["labels"], k)
}

pub fn alerts(n: &Value) -> &[Value] {
    n["alerts"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// Severity 1 (most urgent) to 5; 0 when the alert carries none.
pub fn severity(a: &Value) -> u8 {
    label(a, "severity").parse().unwrap_or(0)
}

/// The alert's one line for people: its summary annotation (where rulesets put "523 people
/// (12.5 %) waited …"), else its description, else its stream.
pub fn headline(a: &Value) -> String {
    ["summary", "description", "message"]
        .iter()
        .map(|k| s(&a["annotations"], k))
        .find(|t| !t.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| label(a, "stream").to_string())
}

fn alertname(n: &Value) -> String {
    let from_group = s(&n["groupLabels"], "alertname");
    let from_common = s(&n["commonLabels"], "alertname");
    let first = alerts(n)
        .first()
        .map(|a| label(a, "alertname"))
        .unwrap_or("");
    [from_group, from_common, first]
        .into_iter()
        .find(|t| !t.is_empty())
        .unwrap_or("alert")
        .to_string()
}

/// `[FIRING:2] hot` — Alertmanager's subject line, with the severity when it is common.
pub fn title(n: &Value) -> String {
    let status = s(n, "status").to_uppercase();
    let count = alerts(n).len();
    let sev = s(&n["commonLabels"], "severity");
    let sev = if sev.is_empty() {
        String::new()
    } else {
        format!(" (severity {sev})")
    };
    format!("[{status}:{count}] {}{sev}", alertname(n))
}

pub fn link(pattern: &Option<String>, a: &Value) -> Option<String> {
    pattern
        .as_ref()
        .map(|p| p.replace("{fp}", s(a, "fingerprint")))
}

pub fn key_of(a: &Value) -> String {
    episode_key(s(a, "fingerprint"), s(a, "startsAt"))
}

/// Labels as `k=v, …` without the ones the headline already says.
pub fn label_line(a: &Value) -> String {
    a["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.as_str() != "alertname")
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// Where the alert is, for PagerDuty's `source`: its `instance` or `host` label, else its other
/// labels (`app=web`), else `strata`.
fn source(a: &Value) -> String {
    for k in ["instance", "host"] {
        if !label(a, k).is_empty() {
            return label(a, k).to_string();
        }
    }
    let rest: Vec<String> = a["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "severity"))
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if rest.is_empty() {
        "strata".into()
    } else {
        rest.join(", ")
    }
}

fn cut(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut t: String = text.chars().take(chars.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// Slack's colour bar: red, orange, yellow, blue by severity; green when resolved.
pub fn slack_color(status: &str, severity: u8) -> &'static str {
    match (status, severity) {
        ("resolved", _) => "#2eb67d",
        (_, 1) => "#d40e0d",
        (_, 2) => "#f2711c",
        (_, 3) => "#ecb22e",
        _ => "#36c5f0",
    }
}

/// Slack incoming-webhook message: a fallback `text`, and one attachment (the colour bar) of
/// blocks: a header, one section per alert (with an "Acknowledge" button while firing, when a
/// signing secret is configured to verify the callback), a context line.
pub fn slack(c: &Slack, n: &Value) -> Value {
    let status = s(n, "status");
    let list = alerts(n);
    let worst = list
        .iter()
        .map(severity)
        .filter(|&v| v > 0)
        .min()
        .unwrap_or(0);
    let mut blocks = vec![json!({
        "type": "header",
        "text": { "type": "plain_text", "text": cut(&title(n), 150) },
    })];
    for a in list.iter().take(LISTED_ALERTS_MAX) {
        let mut text = format!("*{}*\n{}", headline(a), label_line(a));
        if let Some(l) = link(&c.alert_url, a) {
            text.push_str(&format!("\n<{l}|Open in Strata>"));
        }
        let mut section = json!({
            "type": "section",
            "text": { "type": "mrkdwn", "text": cut(&text, SLACK_TEXT_CHARS_MAX) },
        });
        if status == "firing" && c.signing_secret.is_some() {
            section["accessory"] = json!({
                "type": "button",
                "action_id": "strata_ack",
                "style": "primary",
                "text": { "type": "plain_text", "text": "Acknowledge" },
                "value": key_of(a),
            });
        }
        blocks.push(section);
    }
    if list.len() > LISTED_ALERTS_MAX {
        blocks.push(json!({
            "type": "section",
            "text": { "type": "mrkdwn", "text": format!("… and {} more", list.len() - LISTED_ALERTS_MAX) },
        }));
    }
    blocks.push(json!({
        "type": "context",
        "elements": [{ "type": "mrkdwn", "text": format!("Strata · receiver {} · {}", s(n, "receiver"), s(n, "idempotencyKey")) }],
    }));
    let mut msg = json!({
        "text": title(n),
        "attachments": [{
            "color": slack_color(status, worst),
            "fallback": title(n),
            "blocks": blocks,
        }],
    });
    if let Some(ch) = &c.channel {
        msg["channel"] = json!(ch);
    }
    msg
}

/// PagerDuty's severities: 1 critical, 2 error, 3 warning, else info.
pub fn pagerduty_severity(severity: u8) -> &'static str {
    match severity {
        1 => "critical",
        2 => "error",
        3 => "warning",
        _ => "info",
    }
}

fn details(n: &Value, a: &Value) -> Value {
    let mut d = Map::new();
    d.insert("labels".into(), a["labels"].clone());
    d.insert("annotations".into(), a["annotations"].clone());
    d.insert("starts_at".into(), a["startsAt"].clone());
    d.insert("receiver".into(), n["receiver"].clone());
    d.insert("idempotency_key".into(), n["idempotencyKey"].clone());
    d.insert("fingerprint".into(), a["fingerprint"].clone());
    Value::Object(d)
}

/// One Events v2 event per alert: `trigger`, `acknowledge` or `resolve`, the alert episode's
/// key as `dedup_key`.
pub fn pagerduty(c: &PagerDuty, n: &Value) -> Vec<Value> {
    let action = match s(n, "status") {
        "resolved" => "resolve",
        "acknowledged" => "acknowledge",
        _ => "trigger",
    };
    alerts(n)
        .iter()
        .map(|a| {
            let mut ev = json!({
                "routing_key": c.routing_key.expose(),
                "event_action": action,
                "dedup_key": key_of(a),
            });
            if action == "trigger" {
                let source = source(a);
                ev["payload"] = json!({
                    "summary": cut(&format!("{}: {}", label(a, "alertname"), headline(a)), PAGERDUTY_SUMMARY_CHARS_MAX),
                    "source": source,
                    "severity": pagerduty_severity(severity(a)),
                    "timestamp": a["startsAt"],
                    "class": label(a, "alertname"),
                    "group": s(n, "groupKey"),
                    "custom_details": details(n, a),
                });
                ev["client"] = json!("Strata");
                if let Some(l) = link(&c.alert_url, a) {
                    ev["client_url"] = json!(l);
                    ev["links"] = json!([{ "href": l, "text": "Open in Strata" }]);
                }
            }
            ev
        })
        .collect()
}

/// VictorOps message types: severity 1–2 CRITICAL, else WARNING; RECOVERY; ACKNOWLEDGEMENT.
pub fn victorops_type(status: &str, severity: u8) -> &'static str {
    match (status, severity) {
        ("resolved", _) => "RECOVERY",
        ("acknowledged", _) => "ACKNOWLEDGEMENT",
        (_, 1 | 2) => "CRITICAL",
        _ => "WARNING",
    }
}

/// One REST event per alert, the alert episode's key as `entity_id`.
pub fn victorops(c: &VictorOps, n: &Value) -> Vec<Value> {
    let status = s(n, "status");
    alerts(n)
        .iter()
        .map(|a| {
            let mut ev = json!({
                "message_type": victorops_type(status, severity(a)),
                "entity_id": key_of(a),
                "entity_display_name": format!("{}: {}", label(a, "alertname"), headline(a)),
                "state_message": format!("{}\n{}", headline(a), label_line(a)),
                "monitoring_tool": "Strata",
                "strata_severity": label(a, "severity"),
                "strata_fingerprint": a["fingerprint"],
                "strata_idempotency_key": n["idempotencyKey"],
                "strata_starts_at": a["startsAt"],
            });
            if let Some(l) = link(&c.alert_url, a) {
                ev["alert_url"] = json!(l);
            }
            ev
        })
        .collect()
}

/// The plain-text body (email, templates' `{{ text }}`).
pub fn text(n: &Value, alert_url: &Option<String>) -> String {
    let mut out = format!("{}\n\n", title(n));
    let list = alerts(n);
    for a in list.iter().take(LISTED_ALERTS_MAX) {
        out.push_str(&format!(
            "* {} — severity {}\n  {}\n",
            label(a, "alertname"),
            label(a, "severity"),
            headline(a)
        ));
        out.push_str(&format!("  labels: {}\n", label_line(a)));
        if let Some(ann) = a["annotations"].as_object() {
            for (k, v) in ann.iter().filter(|(k, _)| k.as_str() != "summary") {
                out.push_str(&format!("  {k}: {}\n", v.as_str().unwrap_or("")));
            }
        }
        out.push_str(&format!("  since: {}\n", s(a, "startsAt")));
        if s(a, "status") == "resolved" {
            out.push_str(&format!("  resolved: {}\n", s(a, "endsAt")));
        }
        if let Some(l) = link(alert_url, a) {
            out.push_str(&format!("  {l}\n"));
        }
        out.push('\n');
    }
    if list.len() > LISTED_ALERTS_MAX {
        out.push_str(&format!(
            "… and {} more\n\n",
            list.len() - LISTED_ALERTS_MAX
        ));
    }
    out.push_str(&format!(
        "-- \nStrata, receiver {} (notification {})\n",
        s(n, "receiver"),
        s(n, "idempotencyKey")
    ));
    out
}

pub fn escape_html(t: &str) -> String {
    let mut o = String::with_capacity(t.len());
    for c in t.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// The HTML body: the same content as [`text`], a coloured bar per alert.
pub fn html(n: &Value, alert_url: &Option<String>) -> String {
    let e = escape_html;
    let status = s(n, "status");
    let mut out = format!(
        "<!DOCTYPE html><html><body style=\"font-family:sans-serif\"><h2>{}</h2>\n",
        e(&title(n))
    );
    let list = alerts(n);
    for a in list.iter().take(LISTED_ALERTS_MAX) {
        out.push_str(&format!(
            "<div style=\"border-left:6px solid {};padding:4px 10px;margin:10px 0\">\
             <p><b>{}</b> — severity {}</p><p style=\"font-size:1.1em\">{}</p>\
             <p style=\"color:#555\">{}<br>since {}</p>",
            slack_color(status, severity(a)),
            e(label(a, "alertname")),
            e(label(a, "severity")),
            e(&headline(a)),
            e(&label_line(a)),
            e(s(a, "startsAt")),
        ));
        if let Some(l) = link(alert_url, a) {
            out.push_str(&format!("<p><a href=\"{}\">Open in Strata</a></p>", e(&l)));
        }
        out.push_str("</div>\n");
    }
    if list.len() > LISTED_ALERTS_MAX {
        out.push_str(&format!(
            "<p>… and {} more</p>\n",
            list.len() - LISTED_ALERTS_MAX
        ));
    }
    out.push_str(&format!(
        "<p style=\"color:#888;font-size:0.8em\">Strata, receiver {} (notification {})</p></body></html>\n",
        e(s(n, "receiver")),
        e(s(n, "idempotencyKey"))
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_map_to_each_service() {
        assert_eq!(pagerduty_severity(1), "critical");
        assert_eq!(pagerduty_severity(2), "error");
        assert_eq!(pagerduty_severity(3), "warning");
        assert_eq!(pagerduty_severity(5), "info");
        assert_eq!(victorops_type("firing", 2), "CRITICAL");
        assert_eq!(victorops_type("firing", 4), "WARNING");
        assert_eq!(victorops_type("resolved", 1), "RECOVERY");
        assert_eq!(victorops_type("acknowledged", 1), "ACKNOWLEDGEMENT");
        assert_eq!(slack_color("resolved", 1), "#2eb67d");
        assert_eq!(slack_color("firing", 1), "#d40e0d");
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html("<a href='x'>&"),
            "&lt;a href=&#39;x&#39;&gt;&amp;"
        );
    }
}
