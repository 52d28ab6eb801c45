//! The data holder's side of a link (a broker, or an agent in reverse mode): keeps one link to
//! the core up — dialled out (straight or through a CONNECT proxy) or accepted from the core —
//! and hands its HTTP/2 sender to whoever sends requests (the forwarder, the checks fetch, the
//! heartbeat). The holder is the HTTP/2 client whichever side dialled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::h2::{self, Body, Sender};
use super::{
    HEARTBEAT_S, H_BACKLOG_BYTES, H_BACKLOG_RECORDS, PATH_HEARTBEAT, REDIAL_MS_MAX, REDIAL_MS_MIN,
};
use crate::dial;
use crate::tls::{self, Identity};

/// Core dials a listening holder accepts at once (a newer link replaces the one in use).
pub const CORE_CONNECTIONS_MAX: usize = 16;

/// How a holder reaches its core.
pub struct LinkConfig {
    /// The holder's id: `Strata-Source`, and its name in the core's registry.
    pub id: String,
    pub identity: Identity,
    /// The core's certificate SHA-256 (hex, `:` and case ignored).
    pub core_sha256: String,
    /// Dial the core at this `host:port`…
    pub dial: Option<String>,
    /// …through this HTTP CONNECT proxy (`http://host:port`).
    pub proxy: Option<String>,
    /// Or wait for the core's dials here (bound already).
    pub listen: Option<TcpListener>,
}

/// The holder's backlog for its core: (records, bytes), sent with every heartbeat.
pub type Backlog = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

/// A handle on the current link (clone freely). Requests fail at once while no link is up.
#[derive(Clone)]
pub struct Link {
    current: watch::Receiver<Option<Sender>>,
    /// Links established since start (a test and the logs read it).
    pub established: Arc<AtomicU64>,
}

impl Link {
    /// Sends one request on the link in use; its status, headers and body.
    pub async fn call(
        &self,
        request: hyper::Request<Body>,
        max: usize,
    ) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
        let sender = self.current.borrow().clone();
        let mut sender = sender.ok_or("no link to the core is up")?;
        h2::call(&mut sender, request, max).await
    }

    pub fn is_up(&self) -> bool {
        self.current.borrow().is_some()
    }
}

/// Starts keeping the link up (tasks in `tasks`) and the heartbeat; returns the handle.
pub fn start(
    config: LinkConfig,
    backlog: Backlog,
    tasks: &mut JoinSet<()>,
) -> Result<Link, String> {
    let pins = tls::pin_one(&config.core_sha256);
    let (publish, current) = watch::channel(None);
    let publish = Arc::new(publish);
    let established = Arc::new(AtomicU64::new(0));
    let link = Link {
        current,
        established: established.clone(),
    };
    if let Some(address) = config.dial {
        let tls = tls::client_config(&config.identity, pins.clone())?;
        let connector = tokio_rustls::TlsConnector::from(tls);
        let (p, e) = (publish.clone(), established.clone());
        tasks.spawn(dial_loop(address, config.proxy, connector, p, e));
    }
    if let Some(listener) = config.listen {
        let tls = tls::server_config(&config.identity, pins)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        tasks.spawn(accept_loop(listener, acceptor, publish, established));
    }
    tasks.spawn(heartbeat_loop(link.clone(), config.id, backlog));
    Ok(link)
}

fn now_ms() -> u64 {
    clock::wall() / 1_000_000
}

/// Dials the core again and again, with backoff, and uses each connection until it ends.
async fn dial_loop(
    address: String,
    proxy: Option<String>,
    connector: tokio_rustls::TlsConnector,
    publish: Arc<watch::Sender<Option<Sender>>>,
    established: Arc<AtomicU64>,
) {
    let mut backoff = REDIAL_MS_MIN;
    loop {
        match dial_once(&address, proxy.as_deref(), &connector).await {
            Ok(stream) => {
                backoff = REDIAL_MS_MIN;
                let via = proxy.as_deref().unwrap_or("no proxy");
                tracing::info!(core = %address, via, "link up (this side dialled)");
                match use_link(stream, &publish, &established).await {
                    Ok(()) => tracing::warn!(core = %address, "link down"),
                    Err(e) => tracing::warn!(core = %address, error = %e, "link down"),
                }
            }
            Err(e) => tracing::warn!(core = %address, error = %e, "dialling the core"),
        }
        let jitter = now_ms() % (backoff / 4 + 1);
        tokio::time::sleep(Duration::from_millis(backoff + jitter)).await;
        backoff = (backoff * 2).min(REDIAL_MS_MAX);
    }
}

async fn dial_once(
    address: &str,
    proxy: Option<&str>,
    connector: &tokio_rustls::TlsConnector,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = dial::connect(address, proxy).await?;
    let name = tls::server_name()?;
    tokio::time::timeout(dial::CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_owned())?
        .map_err(|e| format!("TLS handshake (is --core-sha256 the core's?): {e}"))
}

/// Accepts the core's dials; each established one becomes the link in use.
async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    publish: Arc<watch::Sender<Option<Sender>>>,
    established: Arc<AtomicU64>,
) {
    let serve = move |tcp, peer: std::net::SocketAddr| {
        let acceptor = acceptor.clone();
        let (publish, established) = (publish.clone(), established.clone());
        async move {
            let tls = tokio::time::timeout(dial::CONNECT_TIMEOUT, acceptor.accept(tcp)).await;
            let stream = match tls {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    return tracing::warn!(%peer, error = %e, "a dial refused (not the pinned core)")
                }
                Err(_) => return tracing::warn!(%peer, "link TLS handshake timed out"),
            };
            tracing::info!(%peer, "link up (the core dialled)");
            match use_link(stream, &publish, &established).await {
                Ok(()) => tracing::warn!(%peer, "link down"),
                Err(e) => tracing::warn!(%peer, error = %e, "link down"),
            }
        }
    };
    crate::accept::serve_bounded(listener, CORE_CONNECTIONS_MAX, "link", serve).await
}

/// Makes `io` the link in use until its connection ends (a PING unanswered for
/// `PING_TIMEOUT_S`, a reset, the peer gone), then withdraws it unless a newer one replaced it.
async fn use_link<I>(
    io: I,
    publish: &watch::Sender<Option<Sender>>,
    established: &AtomicU64,
) -> Result<(), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = h2::client(io).await?;
    let mine = sender.clone();
    publish.send_replace(Some(sender));
    established.fetch_add(1, Ordering::Relaxed);
    let ended = conn.await;
    publish.send_if_modified(|current| {
        // Ours only if no newer link replaced it: a sender of a closed connection is closed.
        let ours = current.as_ref().is_some_and(|s| s.is_closed());
        if ours {
            *current = None;
        }
        ours
    });
    drop(mine);
    ended.map_err(|e| format!("link task: {e}"))
}

/// Tells the core every `HEARTBEAT_S` that this holder is there and how far behind it is.
async fn heartbeat_loop(link: Link, id: String, backlog: Backlog) {
    let mut tick = tokio::time::interval(Duration::from_secs(HEARTBEAT_S));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !link.is_up() {
            continue;
        }
        let (records, bytes) = backlog();
        let headers = [
            ("strata-source", id.clone()),
            (H_BACKLOG_RECORDS, records.to_string()),
            (H_BACKLOG_BYTES, bytes.to_string()),
        ];
        let Ok(request) = h2::request(Method::POST, PATH_HEARTBEAT, &headers, Vec::new()) else {
            continue;
        };
        let call = link.call(request, 4096);
        match tokio::time::timeout(Duration::from_secs(HEARTBEAT_S * 2), call).await {
            Ok(Ok((200, _, _))) => {}
            Ok(Ok((status, _, body))) => tracing::warn!(
                status,
                answer = %String::from_utf8_lossy(&body),
                "the core refused the heartbeat"
            ),
            Ok(Err(e)) => tracing::debug!(error = %e, "heartbeat"),
            Err(_) => tracing::debug!("heartbeat: no answer"),
        }
    }
}
