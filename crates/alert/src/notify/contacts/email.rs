//! Email over SMTP (lettre's blocking transport): STARTTLS (required, never a silent
//! downgrade), implicit TLS or plain, AUTH when a username is configured. One message per
//! delivery, `multipart/alternative` text + HTML; its `Message-ID` comes from the delivery's
//! idempotency key, so a re-sent delivery is the same message to threading and de-duplication.

use std::time::Duration;

use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls as LTls, TlsParameters};
use lettre::{Message, SmtpTransport, Transport};
use serde_json::Value;

use super::{render, Email, Outcome, Tls};

/// Longest subject line, in characters.
const SUBJECT_CHARS_MAX: usize = 200;

fn mailbox(a: &str) -> Result<Mailbox, String> {
    a.parse::<Mailbox>()
        .map_err(|_| format!("'{a}' is not an email address"))
}

fn message(c: &Email, n: &Value) -> Result<Message, String> {
    let key = n["idempotencyKey"].as_str().unwrap_or("test");
    let receiver = n["receiver"].as_str().unwrap_or("");
    let mut subject = render::title(n);
    if let Some(first) = render::alerts(n).first() {
        subject.push_str(" — ");
        subject.push_str(&render::headline(first));
    }
    let subject: String = subject.chars().take(SUBJECT_CHARS_MAX).collect();
    let mut b = Message::builder()
        .from(mailbox(&c.from)?)
        .subject(subject)
        .message_id(Some(format!("<{key}.{receiver}@strata>")));
    for to in &c.to {
        b = b.to(mailbox(to)?);
    }
    b.multipart(MultiPart::alternative_plain_html(
        render::text(n, &c.alert_url),
        render::html(n, &c.alert_url),
    ))
    .map_err(|e| format!("the message could not be built: {e}"))
}

fn transport(c: &Email, timeout_ms: i64) -> Result<SmtpTransport, String> {
    let params = || -> Result<TlsParameters, String> {
        let mut b = TlsParameters::builder(c.host.clone());
        if let Some(pem) = &c.ca_pem {
            let cert = Certificate::from_pem(pem)
                .map_err(|e| format!("ca_file is not a PEM certificate: {e}"))?;
            b = b.add_root_certificate(cert);
        }
        b.build_rustls()
            .map_err(|e| format!("TLS setup for {}: {e}", c.host))
    };
    let tls = match c.tls {
        Tls::StartTls => LTls::Required(params()?),
        Tls::Implicit => LTls::Wrapper(params()?),
        Tls::None => LTls::None,
    };
    let mut b = SmtpTransport::builder_dangerous(c.host.as_str())
        .port(c.port)
        .tls(tls)
        .timeout(Some(Duration::from_millis(timeout_ms.max(1) as u64)));
    if let (Some(user), Some(pass)) = (&c.username, &c.password) {
        b = b.credentials(Credentials::new(user.clone(), pass.expose().to_string()));
    }
    Ok(b.build())
}

/// Sends the notification; 5xx answers are permanent, everything else is retried.
pub fn send(c: &Email, timeout_ms: i64, n: &Value) -> Outcome {
    let built = message(c, n).and_then(|m| Ok((m, transport(c, timeout_ms)?)));
    let (msg, t) = match built {
        Ok(x) => x,
        Err(why) => return Outcome::Permanent(format!("email: {why}")),
    };
    match t.send(&msg) {
        Ok(_) => Outcome::Accepted,
        Err(e) => {
            let why = format!("email via {}:{}: {e}", c.host, c.port);
            if e.is_permanent() {
                Outcome::Permanent(why)
            } else {
                Outcome::Transient(why)
            }
        }
    }
}
