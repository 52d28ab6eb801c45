//! Contacts: receivers that speak a service's own format — email over SMTP, Slack incoming
//! webhooks, PagerDuty Events v2, VictorOps (Splunk On-Call) REST, and a webhook whose body is
//! a user template. Each renders from the notification's Alertmanager-shaped JSON (the same
//! document the plain webhook sends), so planning, keys, retries and fallback stay the
//! notifier's; a contact only chooses the requests and says whether they were accepted.
//!
//! PagerDuty and VictorOps get one event per alert in a delivery, keyed by the alert's episode
//! (`strata-<fp>-<startsAt>`, see [`episode_key`]): the trigger, the acknowledgement and the
//! resolve of one episode name the same incident, and a re-sent delivery names it again (both
//! services de-duplicate on that key). The delivery's idempotency key travels in the event's
//! details. Inbound acknowledgements ([`inbound`]) read the episode back from that key.
//!
//! Secrets (SMTP passwords, routing keys, API keys, Slack webhook URLs and signing secrets)
//! come from the file, a file (`*_file`) or the environment (`*_env`); they are never printed:
//! [`Secret`] has no `Display`, its `Debug` is redacted, and errors are scrubbed of them.

pub mod email;
pub mod render;
pub mod template;

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

/// What a receiver made of a delivery: network errors, 5xx and 429 are transient, other 4xx
/// permanent (the body will not become acceptable by sending it again).
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Accepted,
    Transient(String),
    Permanent(String),
}

/// The HTTP client a contact sends with (the notifier's `send::Sender`).
pub trait Post {
    /// POSTs `body`; errors name the target as `what` (a contact's URL may hold a secret).
    fn post(&self, url: &str, what: &str, key: &str, content_type: &str, body: &[u8]) -> Outcome;
    fn timeout_ms(&self) -> i64;
}

/// Bytes of a secret read from a file.
const SECRET_BYTES_MAX: usize = 4096;
/// Recipients of one email receiver.
const RECIPIENTS_MAX: usize = 64;
/// Events one PagerDuty or VictorOps delivery sends (one per alert).
pub const EVENTS_MAX: usize = super::GROUP_ALERTS_MAX;

const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";
const VICTOROPS_URL: &str = "https://alert.victorops.com/integrations/generic/20131114/alert";

/// A secret value: compared, used, never shown.
#[derive(Clone, PartialEq)]
pub struct Secret(pub(crate) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the secret replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.0, "***")
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tls {
    /// Plain connection upgraded with STARTTLS (required: no fallback to plain text).
    StartTls,
    /// TLS from the first byte (SMTPS, usually port 465).
    Implicit,
    /// No TLS (loopback relays only).
    None,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Email {
    pub host: String,
    pub port: u16,
    pub tls: Tls,
    pub from: String,
    pub to: Vec<String>,
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// Extra trusted root (PEM) for a relay with a private CA.
    pub ca_pem: Option<Vec<u8>>,
    /// `https://strata.example.org/alerts?fp={fp}`: a link per alert.
    pub alert_url: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Slack {
    pub url: Secret,
    pub channel: Option<String>,
    pub alert_url: Option<String>,
    /// Verifies the interactive callbacks (the "Acknowledge" button); without it the button
    /// is not shown.
    pub signing_secret: Option<Secret>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PagerDuty {
    pub url: String,
    pub routing_key: Secret,
    pub alert_url: Option<String>,
    /// Verifies PagerDuty's v3 webhooks (`incident.acknowledged`).
    pub webhook_secret: Option<Secret>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VictorOps {
    pub url: String,
    pub api_key: Secret,
    pub routing_key: String,
    pub alert_url: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TemplateHook {
    pub url: String,
    pub template: template::Template,
    pub content_type: String,
}

/// A receiver kind with its own payload.
#[derive(Clone, Debug, PartialEq)]
pub enum Contact {
    Email(Email),
    Slack(Slack),
    PagerDuty(PagerDuty),
    VictorOps(VictorOps),
    Template(TemplateHook),
}

impl Contact {
    /// Whether acknowledgements are sent to this contact (as `acknowledge` events).
    pub fn wants_acks(&self) -> bool {
        matches!(self, Contact::PagerDuty(_) | Contact::VictorOps(_))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Contact::Email(_) => "email",
            Contact::Slack(_) => "slack",
            Contact::PagerDuty(_) => "pagerduty",
            Contact::VictorOps(_) => "victorops",
            Contact::Template(_) => "webhook",
        }
    }

    fn secrets(&self) -> Vec<&Secret> {
        match self {
            Contact::Email(e) => e.password.iter().collect(),
            Contact::Slack(s) => std::iter::once(&s.url)
                .chain(s.signing_secret.iter())
                .collect(),
            Contact::PagerDuty(p) => std::iter::once(&p.routing_key)
                .chain(p.webhook_secret.iter())
                .collect(),
            Contact::VictorOps(v) => vec![&v.api_key],
            Contact::Template(_) => Vec::new(),
        }
    }

    /// Sends the notification `note` (Alertmanager webhook JSON v4); `key` is the delivery's
    /// idempotency key.
    pub fn send(&self, sender: &dyn Post, key: &str, note: &[u8]) -> Outcome {
        let outcome = match serde_json::from_slice::<Value>(note) {
            Err(e) => Outcome::Permanent(format!("the notification is not JSON: {e}")),
            Ok(n) => self.send_value(sender, key, &n),
        };
        let scrub = |text: String| self.secrets().iter().fold(text, |t, s| s.scrub(&t));
        match outcome {
            Outcome::Accepted => Outcome::Accepted,
            Outcome::Transient(why) => Outcome::Transient(scrub(why)),
            Outcome::Permanent(why) => Outcome::Permanent(scrub(why)),
        }
    }

    fn send_value(&self, sender: &dyn Post, key: &str, n: &Value) -> Outcome {
        match self {
            Contact::Email(e) => email::send(e, sender.timeout_ms(), n),
            Contact::Slack(s) => {
                let body = render::slack(s, n).to_string();
                sender.post(
                    s.url.expose(),
                    "Slack",
                    key,
                    "application/json",
                    body.as_bytes(),
                )
            }
            Contact::PagerDuty(p) => each_event(render::pagerduty(p, n), |ev| {
                let body = ev.to_string();
                sender.post(
                    &p.url,
                    "PagerDuty",
                    key,
                    "application/json",
                    body.as_bytes(),
                )
            }),
            Contact::VictorOps(v) => {
                let url = format!(
                    "{}/{}/{}",
                    v.url,
                    v.api_key.expose(),
                    path_segment(&v.routing_key)
                );
                each_event(render::victorops(v, n), |ev| {
                    let body = ev.to_string();
                    sender.post(&url, "VictorOps", key, "application/json", body.as_bytes())
                })
            }
            Contact::Template(t) => {
                let body = t.template.render(n);
                sender.post(&t.url, &t.url, key, &t.content_type, body.as_bytes())
            }
        }
    }
}

/// Sends every event in order; the delivery is accepted when all were (a retry sends them all
/// again, which the services de-duplicate by their key).
fn each_event(events: Vec<Value>, mut post: impl FnMut(&Value) -> Outcome) -> Outcome {
    assert!(events.len() <= EVENTS_MAX);
    for ev in &events {
        match post(ev) {
            Outcome::Accepted => {}
            other => return other,
        }
    }
    Outcome::Accepted
}

/// `s` percent-encoded for one URL path segment.
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The key that names one alert episode at PagerDuty and VictorOps, and in Slack's buttons.
pub fn episode_key(fp: &str, starts_at: &str) -> String {
    format!("strata-{fp}-{starts_at}")
}

/// (fp, startsAt) back from an [`episode_key`].
pub fn parse_episode_key(key: &str) -> Option<(u64, &str)> {
    let rest = key.strip_prefix("strata-")?;
    let (fp, starts) = rest.split_at_checked(16)?;
    let starts = starts.strip_prefix('-')?;
    let fp = u64::from_str_radix(fp, 16).ok()?;
    Some((fp, starts))
}

// ---- the configuration file ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailFile {
    /// `host:port`.
    smtp: String,
    tls: Option<String>,
    from: String,
    to: Vec<String>,
    username: Option<String>,
    password: Option<String>,
    password_file: Option<PathBuf>,
    password_env: Option<String>,
    ca_file: Option<PathBuf>,
    alert_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackFile {
    url: Option<String>,
    url_file: Option<PathBuf>,
    url_env: Option<String>,
    channel: Option<String>,
    signing_secret: Option<String>,
    signing_secret_file: Option<PathBuf>,
    signing_secret_env: Option<String>,
    alert_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerDutyFile {
    url: Option<String>,
    routing_key: Option<String>,
    routing_key_file: Option<PathBuf>,
    routing_key_env: Option<String>,
    webhook_secret: Option<String>,
    webhook_secret_file: Option<PathBuf>,
    webhook_secret_env: Option<String>,
    alert_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VictorOpsFile {
    url: Option<String>,
    api_key: Option<String>,
    api_key_file: Option<PathBuf>,
    api_key_env: Option<String>,
    routing_key: String,
    alert_url: Option<String>,
}

/// The contact fields of one `[[receiver]]`.
pub struct Files<'a> {
    pub email: Option<&'a EmailFile>,
    pub slack: Option<&'a SlackFile>,
    pub pagerduty: Option<&'a PagerDutyFile>,
    pub victorops: Option<&'a VictorOpsFile>,
    pub webhook: Option<&'a str>,
    pub template: Option<&'a str>,
    pub content_type: Option<&'a str>,
}

/// The contact a receiver names, if any; errors start with `what` (the receiver).
pub fn parse(what: &str, f: &Files) -> Result<Option<Contact>, String> {
    let kinds = [
        f.email.is_some(),
        f.slack.is_some(),
        f.pagerduty.is_some(),
        f.victorops.is_some(),
        f.template.is_some(),
    ];
    let given = kinds.iter().filter(|&&k| k).count();
    if given > 1 || (given == 1 && f.webhook.is_some() && f.template.is_none()) {
        return Err(format!(
            "{what}: give exactly one of webhook, alertmanager, file, email, slack, pagerduty or victorops"
        ));
    }
    if f.content_type.is_some() && f.template.is_none() {
        return Err(format!("{what}: content_type goes with a webhook template"));
    }
    if let Some(e) = f.email {
        return email_contact(what, e).map(|e| Some(Contact::Email(e)));
    }
    if let Some(s) = f.slack {
        let w = format!("{what} slack");
        return Ok(Some(Contact::Slack(Slack {
            url: secret_url(&w, "url", &s.url, &s.url_file, &s.url_env)?,
            channel: s.channel.clone(),
            alert_url: alert_url(&w, &s.alert_url)?,
            signing_secret: secret_opt(
                &w,
                "signing_secret",
                &s.signing_secret,
                &s.signing_secret_file,
                &s.signing_secret_env,
            )?,
        })));
    }
    if let Some(p) = f.pagerduty {
        let w = format!("{what} pagerduty");
        let routing_key = secret_opt(
            &w,
            "routing_key",
            &p.routing_key,
            &p.routing_key_file,
            &p.routing_key_env,
        )?
        .ok_or_else(|| format!("{w}: give routing_key, routing_key_file or routing_key_env"))?;
        return Ok(Some(Contact::PagerDuty(PagerDuty {
            url: http_url(&w, p.url.as_deref().unwrap_or(PAGERDUTY_URL))?,
            routing_key,
            alert_url: alert_url(&w, &p.alert_url)?,
            webhook_secret: secret_opt(
                &w,
                "webhook_secret",
                &p.webhook_secret,
                &p.webhook_secret_file,
                &p.webhook_secret_env,
            )?,
        })));
    }
    if let Some(v) = f.victorops {
        let w = format!("{what} victorops");
        let api_key = secret_opt(&w, "api_key", &v.api_key, &v.api_key_file, &v.api_key_env)?
            .ok_or_else(|| format!("{w}: give api_key, api_key_file or api_key_env"))?;
        if v.routing_key.is_empty() {
            return Err(format!("{w}: routing_key is empty"));
        }
        return Ok(Some(Contact::VictorOps(VictorOps {
            url: http_url(&w, v.url.as_deref().unwrap_or(VICTOROPS_URL))?
                .trim_end_matches('/')
                .to_string(),
            api_key,
            routing_key: v.routing_key.clone(),
            alert_url: alert_url(&w, &v.alert_url)?,
        })));
    }
    if let Some(t) = f.template {
        let Some(url) = f.webhook else {
            return Err(format!("{what}: a template needs webhook = \"<url>\""));
        };
        return Ok(Some(Contact::Template(TemplateHook {
            url: http_url(what, url)?,
            template: template::Template::parse(t).map_err(|e| format!("{what} template: {e}"))?,
            content_type: f.content_type.unwrap_or("application/json").to_string(),
        })));
    }
    Ok(None)
}

fn email_contact(what: &str, e: &EmailFile) -> Result<Email, String> {
    let w = format!("{what} email");
    let (host, port) = e
        .smtp
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("{w}: smtp '{}' is not host:port", e.smtp))?;
    let tls = match e.tls.as_deref() {
        None | Some("starttls") => Tls::StartTls,
        Some("tls") => Tls::Implicit,
        Some("none") => Tls::None,
        Some(other) => {
            return Err(format!(
                "{w}: tls '{other}' is not one of starttls, tls or none"
            ))
        }
    };
    if e.to.is_empty() || e.to.len() > RECIPIENTS_MAX {
        return Err(format!("{w}: to names 1 to {RECIPIENTS_MAX} addresses"));
    }
    for a in std::iter::once(&e.from).chain(e.to.iter()) {
        if a.parse::<lettre::message::Mailbox>().is_err() {
            return Err(format!("{w}: '{a}' is not an email address"));
        }
    }
    let password = secret_opt(
        &w,
        "password",
        &e.password,
        &e.password_file,
        &e.password_env,
    )?;
    if password.is_some() != e.username.is_some() {
        return Err(format!("{w}: username and password go together"));
    }
    let ca_pem = match &e.ca_file {
        None => None,
        Some(p) => {
            Some(std::fs::read(p).map_err(|err| format!("{w} ca_file: {}: {err}", p.display()))?)
        }
    };
    Ok(Email {
        host: host.to_string(),
        port,
        tls,
        from: e.from.clone(),
        to: e.to.clone(),
        username: e.username.clone(),
        password,
        ca_pem,
        alert_url: alert_url(&w, &e.alert_url)?,
    })
}

fn http_url(what: &str, u: &str) -> Result<String, String> {
    if u.starts_with("http://") || u.starts_with("https://") {
        Ok(u.to_string())
    } else {
        Err(format!("{what}: '{u}' is not an http:// or https:// URL"))
    }
}

fn alert_url(what: &str, u: &Option<String>) -> Result<Option<String>, String> {
    u.as_deref()
        .map(|u| {
            let u = http_url(&format!("{what} alert_url"), u)?;
            if u.contains("{fp}") {
                Ok(u)
            } else {
                Err(format!("{what} alert_url: '{u}' has no {{fp}} in it"))
            }
        })
        .transpose()
}

/// A secret given inline, in a file (trailing newline dropped) or an environment variable:
/// at most one of the three.
fn secret_opt(
    what: &str,
    name: &str,
    inline: &Option<String>,
    file: &Option<PathBuf>,
    env: &Option<String>,
) -> Result<Option<Secret>, String> {
    let value = match (inline, file, env) {
        (None, None, None) => return Ok(None),
        (Some(v), None, None) => v.clone(),
        (None, Some(p), None) => {
            let meta = std::fs::metadata(p)
                .map_err(|e| format!("{what} {name}_file: {}: {e}", p.display()))?;
            if meta.len() > SECRET_BYTES_MAX as u64 {
                return Err(format!(
                    "{what} {name}_file: {} is larger than {SECRET_BYTES_MAX} bytes",
                    p.display()
                ));
            }
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("{what} {name}_file: {}: {e}", p.display()))?;
            text.trim_end_matches(['\n', '\r']).to_string()
        }
        (None, None, Some(var)) => {
            std::env::var(var).map_err(|_| format!("{what} {name}_env: ${var} is not set"))?
        }
        _ => {
            return Err(format!(
                "{what}: give one of {name}, {name}_file or {name}_env"
            ))
        }
    };
    if value.is_empty() {
        return Err(format!("{what}: {name} is empty"));
    }
    Ok(Some(Secret(value)))
}

fn secret_url(
    what: &str,
    name: &str,
    inline: &Option<String>,
    file: &Option<PathBuf>,
    env: &Option<String>,
) -> Result<Secret, String> {
    let s = secret_opt(what, name, inline, file, env)?
        .ok_or_else(|| format!("{what}: give {name}, {name}_file or {name}_env"))?;
    if s.0.starts_with("http://") || s.0.starts_with("https://") {
        Ok(s)
    } else {
        // The URL itself is the secret: say what is wrong without printing it.
        Err(format!("{what}: {name} is not an http:// or https:// URL"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn episode_keys_read_back() {
        let k = episode_key("00000000000000ff", "2026-11-28T22:00:00Z");
        assert_eq!(k, "strata-00000000000000ff-2026-11-28T22:00:00Z");
        assert_eq!(parse_episode_key(&k), Some((255, "2026-11-28T22:00:00Z")));
        assert_eq!(parse_episode_key("strata-xyz"), None);
        assert_eq!(parse_episode_key("other-00000000000000ff-x"), None);
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret("hunter2".into());
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(s.scrub("auth hunter2 failed"), "auth *** failed");
    }
}
