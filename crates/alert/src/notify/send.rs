//! Delivering one notification to one target: an HTTP POST (webhook, Alertmanager), a synced
//! line in a file, or a contact's own requests (`contacts`: email, Slack, PagerDuty, …). The answer says whether to retry: network errors, 5xx and 429 are
//! transient, other 4xx permanent (the body will not become acceptable by sending it again).

use std::io::Write as _;
use std::time::Duration;

use super::config::Target;

const JSON: &str = "application/json";
/// Bytes of a receiver's error answer kept for the log.
const ERROR_BODY_BYTES_MAX: usize = 512;

#[derive(Debug, PartialEq)]
pub enum Outcome {
    Accepted,
    Transient(String),
    Permanent(String),
}

/// One HTTP client per worker: connections are kept alive between deliveries.
pub struct Sender {
    client: Option<reqwest::blocking::Client>,
    timeout_ms: i64,
}

impl Sender {
    pub fn new(timeout_ms: i64) -> Sender {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_millis(timeout_ms.max(1) as u64))
            .pool_max_idle_per_host(4)
            .build()
            .ok();
        Sender { client, timeout_ms }
    }

    pub fn timeout_ms(&self) -> i64 {
        self.timeout_ms
    }

    /// `body` is the whole payload (JSON); `key` goes out as the `Idempotency-Key` header.
    pub fn send(&self, target: &Target, key: &str, body: &[u8]) -> Outcome {
        match target {
            Target::Webhook(url) => self.post(url, url, key, JSON, body),
            Target::Alertmanager(base) => {
                let url = format!("{base}/api/v2/alerts");
                self.post(&url, &url, key, JSON, body)
            }
            Target::File(path) => append_line(path, body),
            Target::Contact(c) => c.send(self, key, body),
        }
    }

    /// POSTs `body`; errors name the target as `what` (a contact's URL may hold a secret).
    pub fn post(
        &self,
        url: &str,
        what: &str,
        key: &str,
        content_type: &str,
        body: &[u8],
    ) -> Outcome {
        let Some(client) = &self.client else {
            return Outcome::Permanent("the HTTP client could not be built (TLS roots)".into());
        };
        let r = client
            .post(url)
            .header("Content-Type", content_type)
            .header("Idempotency-Key", key)
            .body(body.to_vec())
            .send();
        match r {
            Err(e) => Outcome::Transient(format!("{what}: {}", causes(e.without_url()))),
            Ok(resp) => {
                let status = resp.status();
                if status.is_success() {
                    return Outcome::Accepted;
                }
                let text = resp.text().unwrap_or_default();
                let cut: String = text.chars().take(ERROR_BODY_BYTES_MAX).collect();
                let why = format!("{what} answered {status}: {cut}");
                if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
                    Outcome::Transient(why)
                } else {
                    Outcome::Permanent(why)
                }
            }
        }
    }
}

/// How many causes of an error are printed.
const CAUSES_MAX: usize = 8;

/// "error sending request: connection refused": the error and its causes, without the URL.
fn causes(e: reqwest::Error) -> String {
    use std::error::Error as _;
    let mut out = e.to_string();
    let mut next = e.source();
    for _ in 0..CAUSES_MAX {
        let Some(c) = next else { break };
        let t = c.to_string();
        if !out.ends_with(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        next = c.source();
    }
    out
}

fn append_line(path: &std::path::Path, body: &[u8]) -> Outcome {
    let run = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let mut line = Vec::with_capacity(body.len() + 1);
        line.extend_from_slice(body);
        line.push(b'\n');
        f.write_all(&line)?;
        f.sync_data()
    };
    match run() {
        Ok(()) => Outcome::Accepted,
        Err(e) => Outcome::Transient(format!("{}: {e}", path.display())),
    }
}
