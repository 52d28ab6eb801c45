//! Delivering one notification to one target: an HTTP POST (webhook, Alertmanager), a synced
//! line in a file, or a contact's own requests (`contacts`: email, Slack, PagerDuty, …). The answer says whether to retry: network errors, 5xx and 429 are
//! transient, other 4xx permanent (the body will not become acceptable by sending it again).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::mpsc;
use std::time::Duration;

use super::config::Target;
use super::{Host, Notifier, Out, Planned};
use crate::util::fnv1a;

/// Deliveries one receiver has in flight at once. Deliveries are pipelined so that a
/// receiver's round trip does not bound the rate; the checkpoint still only covers the
/// contiguous prefix of accepted ones.
pub const DELIVERIES_INFLIGHT_MAX: usize = 16;
/// Threads one receiver delivers on; a group always takes the same one, so its notifications
/// keep their order.
const LANES_MAX: usize = 8;

const JSON: &str = "application/json";
/// Bytes of a receiver's error answer kept for the log.
const ERROR_BODY_BYTES_MAX: usize = 512;

pub use super::contacts::Outcome;

/// One HTTP client per worker: connections are kept alive between deliveries.
pub struct Sender {
    client: Option<reqwest::blocking::Client>,
    timeout_ms: i64,
}

impl Sender {
    pub fn new(timeout_ms: i64) -> Sender {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_millis(timeout_ms.max(1) as u64))
            .pool_max_idle_per_host(DELIVERIES_INFLIGHT_MAX)
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

impl super::contacts::Post for Sender {
    fn post(&self, url: &str, what: &str, key: &str, content_type: &str, body: &[u8]) -> Outcome {
        Sender::post(self, url, what, key, content_type, body)
    }

    fn timeout_ms(&self) -> i64 {
        self.timeout_ms
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

impl Notifier {
    /// Delivers `planned[from..]` (keys alike), several at once; calls `progress(n)` each time
    /// the first `n` are all accepted, never counting past one that is not. Err: the engine is
    /// stopping (nothing past the last `progress` may be committed), or `progress` failed.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver_all(
        &self,
        engine: &dyn Host,
        sender: &Sender,
        planned: &[Planned],
        keys: &[String],
        from: usize,
        via: &str,
        mut progress: impl FnMut(usize) -> Result<(), String>,
    ) -> Result<(), String> {
        assert_eq!(planned.len(), keys.len());
        assert!(from <= planned.len());
        let n = planned.len();
        if n - from <= 1 {
            // One delivery (the usual record): no threads.
            for i in from..n {
                if self
                    .deliver(engine, sender, &planned[i], &keys[i], via)
                    .is_err()
                {
                    return Err("stopping".into());
                }
                progress(i + 1)?;
            }
            return Ok(());
        }
        let lanes = LANES_MAX.min(n - from);
        std::thread::scope(|scope| {
            let (done_tx, done_rx) = mpsc::channel::<(usize, bool)>();
            let mut queues = Vec::with_capacity(lanes);
            for _ in 0..lanes {
                // In flight is bounded overall, so a lane's queue never fills.
                let (tx, rx) = mpsc::sync_channel::<usize>(DELIVERIES_INFLIGHT_MAX);
                let done_tx = done_tx.clone();
                scope.spawn(move || {
                    for i in rx {
                        let ok = self
                            .deliver(engine, sender, &planned[i], &keys[i], via)
                            .is_ok();
                        if done_tx.send((i, ok)).is_err() {
                            return;
                        }
                    }
                });
                queues.push(tx);
            }
            drop(done_tx);
            let mut accepted = vec![false; n - from];
            let (mut next, mut prefix, mut inflight) = (from, from, 0usize);
            let mut failure: Option<String> = None;
            loop {
                while failure.is_none() && next < n && inflight < DELIVERIES_INFLIGHT_MAX {
                    let lane = fnv1a(&[planned[next].group_key.as_bytes()]) % lanes as u64;
                    if queues[lane as usize].send(next).is_err() {
                        failure = Some("a delivery thread stopped".into());
                        break;
                    }
                    next += 1;
                    inflight += 1;
                }
                if inflight == 0 {
                    break;
                }
                let Ok((i, ok)) = done_rx.recv() else {
                    failure.get_or_insert_with(|| "a delivery thread stopped".into());
                    break;
                };
                inflight -= 1;
                if !ok {
                    failure.get_or_insert_with(|| "stopping".into());
                    continue;
                }
                accepted[i - from] = true;
                let before = prefix;
                while prefix < n && accepted[prefix - from] {
                    prefix += 1;
                }
                if prefix > before && failure.is_none() {
                    if let Err(e) = progress(prefix) {
                        failure = Some(e);
                    }
                }
            }
            drop(queues);
            match failure {
                Some(e) => Err(e),
                None => {
                    assert_eq!(prefix, n, "every delivery accepted");
                    Ok(())
                }
            }
        })
    }
}

impl Notifier {
    /// Sends one test notification (a firing alert `StrataTestNotification`, severity 3) to
    /// receiver `name`, once; Err is the receiver's error in words.
    pub fn test_receiver(&self, name: &str) -> Result<(), String> {
        let recv = self
            .config
            .receiver(name)
            .ok_or_else(|| format!("no receiver '{name}'"))?;
        let now = crate::util::wall_ms();
        let labels: BTreeMap<String, String> = [
            ("alertname", "StrataTestNotification"),
            ("severity", "3"),
            ("receiver", name),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let annotations = BTreeMap::from([(
            "summary".to_string(),
            format!("A test notification from Strata to receiver '{name}'"),
        )]);
        let p = Planned {
            receiver: name.to_string(),
            group_key: format!("{name}/test"),
            group_labels: BTreeMap::from([(
                "alertname".to_string(),
                "StrataTestNotification".to_string(),
            )]),
            status: "firing",
            alerts: vec![Out {
                fp: crate::util::fnv1a(&[b"test", name.as_bytes()]),
                status: "firing",
                labels,
                annotations,
                starts_ms: now,
                ends_ms: None,
            }],
        };
        let key = format!("test-{now:x}");
        let sender = Sender::new(recv.timeout_ms);
        let send = |p: &Planned, key: &str| {
            let body = self.body(recv, p, key, name);
            match sender.send(&recv.target, key, &body) {
                Outcome::Accepted => Ok(()),
                Outcome::Transient(why) | Outcome::Permanent(why) => Err(why),
            }
        };
        send(&p, &key)?;
        // Incident services keep a triggered test open: resolve it again.
        if matches!(&recv.target, Target::Contact(c) if c.wants_acks()) {
            let mut resolved = p.clone();
            resolved.status = "resolved";
            for a in &mut resolved.alerts {
                a.status = "resolved";
                a.ends_ms = Some(now);
            }
            send(&resolved, &format!("{key}-resolved"))?;
        }
        Ok(())
    }
}
