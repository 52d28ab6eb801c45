//! Delivering one notification to one target: an HTTP POST (webhook, Alertmanager) or a synced
//! line in a file. The answer says whether to retry: network errors, 5xx and 429 are
//! transient, other 4xx permanent (the body will not become acceptable by sending it again).

use std::io::Write as _;
use std::time::Duration;

use super::config::Target;

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
}

impl Sender {
    pub fn new(timeout_ms: i64) -> Sender {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_millis(timeout_ms.max(1) as u64))
            .pool_max_idle_per_host(4)
            .build()
            .ok();
        Sender { client }
    }

    /// `body` is the whole payload (JSON); `key` goes out as the `Idempotency-Key` header.
    pub fn send(&self, target: &Target, key: &str, body: &[u8]) -> Outcome {
        match target {
            Target::Webhook(url) => self.post(url, key, body),
            Target::Alertmanager(base) => self.post(&format!("{base}/api/v2/alerts"), key, body),
            Target::File(path) => append_line(path, body),
        }
    }

    fn post(&self, url: &str, key: &str, body: &[u8]) -> Outcome {
        let Some(client) = &self.client else {
            return Outcome::Permanent("the HTTP client could not be built (TLS roots)".into());
        };
        let r = client
            .post(url)
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", key)
            .body(body.to_vec())
            .send();
        match r {
            Err(e) => Outcome::Transient(format!("{url}: {e}")),
            Ok(resp) => {
                let status = resp.status();
                if status.is_success() {
                    return Outcome::Accepted;
                }
                let text = resp.text().unwrap_or_default();
                let cut: String = text.chars().take(ERROR_BODY_BYTES_MAX).collect();
                let why = format!("{url} answered {status}: {cut}");
                if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
                    Outcome::Transient(why)
                } else {
                    Outcome::Permanent(why)
                }
            }
        }
    }
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
