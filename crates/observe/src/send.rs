//! The sender: each closed period's document is PUT to the core, exactly once in effect.
//!
//! Every batch carries the exactly-once headers (`crates/server/FORMAT.md`): `Strata-Source`
//! (`observe-<host>`), `Strata-Epoch` (this process's start time in ms, so a restarted observer
//! is a new epoch) and `Strata-Sequence` (one per batch, from 1). A failed send is retried with
//! the same headers until it succeeds (backoff doubling to 30 s), so a batch the core applied but
//! whose answer was lost counts once. The queue is bounded ([`QUEUE_MAX`] batches waiting, at
//! most [`IN_FLIGHT_MAX`] being sent); the capture thread never waits on it: a batch offered to a
//! full queue is dropped and counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Batches waiting to be sent.
pub const QUEUE_MAX: usize = 1024;
/// Batches being sent at once.
pub const IN_FLIGHT_MAX: usize = 64;
const BACKOFF_MAX: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct SendConfig {
    /// The core's base URL (`http://127.0.0.1:8112`).
    pub core: String,
    /// The httptrap secret: with one, batches go to `/module/httptrap/observe/<secret>`,
    /// without, to `/write/observe`.
    pub token: Option<String>,
    /// The core's bearer token, sent as `Authorization: Bearer` on every batch.
    pub bearer: Option<String>,
    /// The httptrap check name in the URL (`observe` unless configured).
    pub check: String,
    pub source: String,
    pub epoch: u64,
}

impl SendConfig {
    pub fn url(&self) -> String {
        let base = self.core.trim_end_matches('/');
        match &self.token {
            Some(t) => format!("{base}/module/httptrap/{}/{t}", self.check),
            None => format!("{base}/write/{}", self.check),
        }
    }
}

/// What the sender did, shared with the capture thread.
#[derive(Default)]
pub struct SendStats {
    pub sent: AtomicU64,
    pub retries: AtomicU64,
    pub dropped: AtomicU64,
    pub rejected: AtomicU64,
}

pub struct Sender {
    tx: Option<tokio::sync::mpsc::Sender<(u64, String)>>,
    next_seq: u64,
    pub stats: Arc<SendStats>,
    thread: Option<JoinHandle<()>>,
}

impl Sender {
    /// Starts the sending thread.
    pub fn start(cfg: SendConfig) -> std::io::Result<Sender> {
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_MAX);
        let stats = Arc::new(SendStats::default());
        let st = stats.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("observe-send".into())
            .spawn(move || rt.block_on(send_loop(cfg, rx, st)))?;
        Ok(Sender {
            tx: Some(tx),
            next_seq: 1,
            stats,
            thread: Some(thread),
        })
    }

    /// Queues one document; `false` (dropped and counted) when the queue is full.
    pub fn submit(&mut self, body: String) -> bool {
        let seq = self.next_seq;
        self.next_seq += 1;
        let ok = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.try_send((seq, body)).is_ok());
        if !ok {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Stops taking batches and waits for those queued to be sent, at most `wait`.
    pub fn finish(mut self, wait: Duration) {
        self.tx = None;
        let deadline = std::time::Instant::now() + wait;
        while let Some(t) = &self.thread {
            if t.is_finished() || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

async fn send_loop(
    cfg: SendConfig,
    mut rx: tokio::sync::mpsc::Receiver<(u64, String)>,
    stats: Arc<SendStats>,
) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("strata observe: cannot build the HTTP client: {e}");
            return;
        }
    };
    let cfg = Arc::new(cfg);
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_MAX));
    let mut tasks = tokio::task::JoinSet::new();
    while let Some((seq, body)) = rx.recv().await {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let (client, cfg, stats) = (client.clone(), cfg.clone(), stats.clone());
        tasks.spawn(async move {
            deliver(&client, &cfg, seq, body, &stats).await;
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// Sends one batch until the core takes it (or refuses it for good).
async fn deliver(
    client: &reqwest::Client,
    cfg: &SendConfig,
    seq: u64,
    body: String,
    stats: &SendStats,
) {
    let mut backoff = Duration::from_millis(200);
    loop {
        let mut req = client.put(cfg.url());
        if let Some(bearer) = &cfg.bearer {
            req = req.bearer_auth(bearer);
        }
        let res = req
            .header("Content-Type", "application/json")
            .header("Strata-Source", &cfg.source)
            .header("Strata-Epoch", cfg.epoch.to_string())
            .header("Strata-Sequence", seq.to_string())
            .body(body.clone())
            .send()
            .await;
        match res {
            Ok(r) if r.status().is_success() => {
                stats.sent.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // A request the core will never take (a bad document, a wrong secret): retrying
            // cannot help, and the sequence must not block those after it.
            Ok(r) if r.status().is_client_error() && r.status() != 408 && r.status() != 429 => {
                stats.rejected.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "strata observe: the core refused batch {seq}: HTTP {}",
                    r.status().as_u16()
                );
                return;
            }
            _ => {}
        }
        stats.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
