//! The core's links: accepting brokers' dials, dialling brokers that wait, and on every link the
//! same session — hello, then the configuration pushed whenever it changes, and the journal
//! pulled into the store with at most `IN_FLIGHT_MAX` records written beyond the acknowledged
//! prefix.

use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use store::SourceId;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;

use super::state::{Dial, Registration, LINK_PEERS_MAX};
use super::write::{self, Outcome, WriteError};
use super::HubInner;
use crate::link::h2::{self, Sender};
use crate::link::{
    ChecksPush, Hello, CONFIG_BYTES_MAX, FETCH_BYTES_MAX, H_BACKLOG_BYTES, H_COMMITTED, H_DROPPED,
    H_FIRST, PATH_ACK, PATH_CHECKS, PATH_HELLO, PATH_RECORDS,
};
use crate::{dial, tls};

/// Records written at once beyond the acknowledged prefix (the store's contract).
pub const IN_FLIGHT_MAX: usize = store::IN_FLIGHT_MAX as usize;
/// A records request waits this long for new records when the core is caught up.
const CAUGHT_UP_WAIT_MS: u64 = 2000;
/// The configuration is pushed again this often even without a change.
const REPUSH_S: u64 = 30;
const REDIAL_MS_MIN: u64 = 500;
const REDIAL_MS_MAX: u64 = 10_000;

fn now_ms() -> u64 {
    clock::wall() / 1_000_000
}

/// Accepts broker dials: TLS with a client certificate registered to some broker.
pub async fn accept_loop(inner: Arc<HubInner>, listener: tokio::net::TcpListener) {
    let pins_inner = inner.clone();
    let pins: tls::Pins = Arc::new(move |fp: &str| {
        let s = pins_inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.broker_by_fingerprint(fp).is_some()
    });
    let config = match tls::server_config(&inner.identity, pins) {
        Ok(c) => c,
        Err(e) => return tracing::error!(error = %e, "broker link listener"),
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let permits = Arc::new(tokio::sync::Semaphore::new(LINK_PEERS_MAX));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Ok((tcp, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let inner = inner.clone();
        tokio::spawn(async move {
            let tls = tokio::time::timeout(dial::CONNECT_TIMEOUT, acceptor.accept(tcp)).await;
            let stream = match tls {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return tracing::warn!(%peer, error = %e, "broker TLS handshake"),
                Err(_) => return tracing::warn!(%peer, "broker TLS handshake timed out"),
            };
            let fp = tls::peer_fingerprint(stream.get_ref().1.peer_certificates());
            let broker = fp.and_then(|fp| {
                let s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
                s.broker_by_fingerprint(&fp)
            });
            if let Some(broker) = broker {
                run_session(&inner, &broker, "broker", stream).await;
            }
            drop(permit);
        });
    }
}

/// Keeps one dialling task per broker registered with `dial: core`, restarting it when its
/// registration changes.
pub async fn dialers(inner: Arc<HubInner>) {
    let mut changed = inner.changed.subscribe();
    loop {
        reconcile(&inner);
        if changed.changed().await.is_err() {
            return;
        }
    }
}

fn reconcile(inner: &Arc<HubInner>) {
    let wanted: Vec<(String, Registration)> = {
        let s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        s.brokers
            .iter()
            .filter(|(_, r)| r.dial == Dial::Core && r.address.is_some())
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect()
    };
    let mut dialers = inner.dialers.lock().unwrap_or_else(|e| e.into_inner());
    dialers.retain(|id, (reg, task)| {
        let keep = wanted.iter().any(|(w, r)| w == id && r == reg);
        if !keep {
            task.abort();
        }
        keep
    });
    for (id, reg) in wanted {
        if dialers.contains_key(&id) {
            continue;
        }
        let task = tokio::spawn(dial_loop(inner.clone(), id.clone(), reg.clone()));
        dialers.insert(id, (reg, task));
    }
}

async fn dial_loop(inner: Arc<HubInner>, broker: String, reg: Registration) {
    let Some(address) = reg.address.clone() else {
        return;
    };
    let config = match tls::client_config(&inner.identity, tls::pin_one(&reg.certificate_sha256)) {
        Ok(c) => c,
        Err(e) => return tracing::error!(broker = %broker, error = %e, "broker link"),
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut backoff = REDIAL_MS_MIN;
    loop {
        match dial_once(&address, &connector).await {
            Ok(stream) => {
                backoff = REDIAL_MS_MIN;
                run_session(&inner, &broker, "core", stream).await;
            }
            Err(e) => {
                inner.update_status(&broker, |s| s.last_error = Some(e.clone()));
                tracing::debug!(broker = %broker, error = %e, "dialling the broker");
            }
        }
        let jitter = now_ms() % (backoff / 4 + 1);
        tokio::time::sleep(Duration::from_millis(backoff + jitter)).await;
        backoff = (backoff * 2).min(REDIAL_MS_MAX);
    }
}

async fn dial_once(
    address: &str,
    connector: &tokio_rustls::TlsConnector,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = dial::connect(address, None).await?;
    let name = tls::server_name()?;
    tokio::time::timeout(dial::CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_owned())?
        .map_err(|e| format!("TLS handshake: {e}"))
}

/// One link's life: the core is the HTTP/2 client whichever side dialled.
async fn run_session<I>(inner: &Arc<HubInner>, broker: &str, dialled_by: &str, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let generation = {
        let mut g = inner.generation.lock().unwrap_or_else(|e| e.into_inner());
        let n = g.entry(broker.to_owned()).or_insert(0);
        *n += 1;
        *n
    };
    let result = session(inner, broker, dialled_by, generation, io).await;
    let current = {
        let g = inner.generation.lock().unwrap_or_else(|e| e.into_inner());
        g.get(broker).copied() == Some(generation)
    };
    inner.update_status(broker, |s| {
        if current {
            s.connected = false;
        }
        if let Err(e) = &result {
            s.last_error = Some(e.clone());
        }
    });
    if let Err(e) = result {
        tracing::info!(broker = %broker, error = %e, "broker link down");
    }
}

async fn session<I>(
    inner: &Arc<HubInner>,
    broker: &str,
    dialled_by: &str,
    generation: u64,
    io: I,
) -> Result<(), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = h2::client(io).await?;
    let _conn = AbortOnDrop(conn);
    let core = inner.config.name.clone();
    let (status, _, body) = h2::call(
        &mut sender,
        Method::GET,
        &format!("{PATH_HELLO}?core={core}"),
        Vec::new(),
        64 << 10,
    )
    .await?;
    if status != 200 {
        return Err(format!(
            "hello: {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let hello: Hello = serde_json::from_slice(&body).map_err(|e| format!("hello: {e}"))?;
    if hello.broker != broker {
        return Err(format!(
            "the broker registered as `{broker}` calls itself `{}`",
            hello.broker
        ));
    }
    tracing::info!(broker = %broker, dialled_by, epoch = hello.epoch, next = hello.checkpoint, "broker link up");
    inner.update_status(broker, |s| {
        s.connected = true;
        s.dial = dialled_by.to_owned();
        s.epoch = hello.epoch;
        s.next = hello.checkpoint;
        s.last_contact_ms = now_ms();
        s.last_error = None;
    });
    let pusher = AbortOnDrop(tokio::spawn(push_checks(
        inner.clone(),
        broker.to_owned(),
        sender.clone(),
    )));
    let result = pull(inner, broker, generation, &hello, &mut sender).await;
    drop(pusher);
    result
}

/// Aborts a task when dropped (a link's helpers end with it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Pushes the broker's checks now, on every change, and every `REPUSH_S`.
async fn push_checks(inner: Arc<HubInner>, broker: String, mut sender: Sender) {
    let mut changed = inner.changed.subscribe();
    let core = inner.config.name.clone();
    loop {
        let checks = {
            let s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            s.checks_of(&broker)
        };
        let n = checks.len();
        let body = serde_json::to_vec(&ChecksPush { checks }).unwrap_or_default();
        let path = format!("{PATH_CHECKS}?core={core}");
        match h2::call(&mut sender, Method::PUT, &path, body, CONFIG_BYTES_MAX).await {
            Ok((200, _, _)) => inner.update_status(&broker, |s| s.checks = n),
            Ok((code, _, b)) => {
                tracing::warn!(broker = %broker, code, body = %String::from_utf8_lossy(&b), "pushing checks")
            }
            Err(e) => return tracing::debug!(broker = %broker, error = %e, "pushing checks"),
        }
        let _ = tokio::time::timeout(Duration::from_secs(REPUSH_S), changed.changed()).await;
    }
}

/// Pulls records from the broker's checkpoint on, writes them, acknowledges the prefix.
async fn pull(
    inner: &Arc<HubInner>,
    broker: &str,
    generation: u64,
    hello: &Hello,
    sender: &mut Sender,
) -> Result<(), String> {
    let source = SourceId::new(broker).map_err(|e| format!("broker id: {e}"))?;
    let core = inner.config.name.clone();
    let mut next = hello.checkpoint;
    let mut caught_up = false;
    loop {
        if superseded(inner, broker, generation) {
            return Ok(());
        }
        let wait = if caught_up { CAUGHT_UP_WAIT_MS } else { 0 };
        let path = format!("{PATH_RECORDS}?core={core}&from={next}&wait_ms={wait}");
        let (status, headers, body) =
            h2::call(sender, Method::GET, &path, Vec::new(), FETCH_BYTES_MAX * 2).await?;
        if status != 200 {
            return Err(format!(
                "records: {status} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        let header = |name: &str| -> u64 {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let (first, committed) = (header(H_FIRST), header(H_COMMITTED));
        let records = crate::link::records(&body)?;
        inner.update_status(broker, |s| {
            s.last_contact_ms = now_ms();
            s.backlog_records = committed.saturating_sub(next);
            s.backlog_bytes = header(H_BACKLOG_BYTES);
            s.dropped_records = header(H_DROPPED);
            if records.is_empty() {
                s.lag_ms = 0;
            }
        });
        caught_up = records.is_empty();
        if first > next {
            tracing::warn!(broker = %broker, from = next, to = first, "records dropped by the broker's disk budget");
            next = first;
        }
        if records.is_empty() {
            continue;
        }
        let owned: Vec<(u64, Vec<u8>)> = records.iter().map(|(o, b)| (*o, b.to_vec())).collect();
        for chunk in owned.chunks(IN_FLIGHT_MAX) {
            write_chunk(inner, broker, &source, hello.epoch, chunk).await?;
            next = chunk.last().map_or(next, |r| r.0 + 1);
            ack(sender, &core, next).await?;
            inner.update_status(broker, |s| {
                s.next = next;
                s.backlog_records = committed.saturating_sub(next);
            });
        }
    }
}

fn superseded(inner: &HubInner, broker: &str, generation: u64) -> bool {
    let g = inner.generation.lock().unwrap_or_else(|e| e.into_inner());
    g.get(broker).copied() != Some(generation)
}

async fn ack(sender: &mut Sender, core: &str, through: u64) -> Result<(), String> {
    let path = format!("{PATH_ACK}?core={core}&through={through}");
    let (status, _, body) = h2::call(sender, Method::POST, &path, Vec::new(), 4096).await?;
    if status != 200 {
        return Err(format!("ack: {status} {}", String::from_utf8_lossy(&body)));
    }
    Ok(())
}

/// Writes up to `IN_FLIGHT_MAX` records at once on the blocking pool; all must succeed (or be
/// skipped for good) before the prefix moves.
async fn write_chunk(
    inner: &Arc<HubInner>,
    broker: &str,
    source: &SourceId,
    epoch: u64,
    chunk: &[(u64, Vec<u8>)],
) -> Result<(), String> {
    let mut set = JoinSet::new();
    for (offset, bytes) in chunk.iter().cloned() {
        let store = inner.store.clone();
        let source = source.clone();
        set.spawn_blocking(move || write::write_record(&store, &source, epoch, offset, &bytes));
    }
    let mut error = None;
    while let Some(joined) = set.join_next().await {
        let result = joined.map_err(|e| e.to_string())?;
        match result {
            Ok(outcome) => count(inner, broker, &outcome),
            Err(WriteError::Skip(e)) => {
                tracing::warn!(broker = %broker, error = %e, "a record skipped");
                inner.update_status(broker, |s| s.records_skipped += 1);
            }
            Err(WriteError::Retry(e)) => error = Some(e),
        }
    }
    match error {
        Some(e) => Err(format!("store write: {e}")),
        None => Ok(()),
    }
}

fn count(inner: &HubInner, broker: &str, o: &Outcome) {
    let now = now_ms() as i64;
    inner.update_status(broker, |s| {
        if o.undecodable {
            s.records_skipped += 1;
        } else if o.duplicate {
            s.records_duplicate += 1;
        } else {
            s.records_written += 1;
            s.samples_written += o.samples as u64;
        }
        s.samples_rejected += o.rejected as u64;
        if o.made_ms > 0 {
            s.lag_ms = now.saturating_sub(o.made_ms).max(0) as u64;
        }
    });
}
