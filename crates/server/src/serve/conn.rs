//! HTTP connections: an accept loop serving the router through hyper with a header-read timeout
//! (a client that does not send its first byte, or a request's headers, or its next request on a
//! kept-alive connection in time is dropped), a bound on open connections (derived from the
//! open-file limit) and on connections from one client address, a graceful drain at shutdown, and optional HTTPS (rustls with the `ring` provider — aws-lc would need
//! cmake — certificate and key from PEM files).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// The client address of a request (a request extension set per connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How long shutdown waits for open connections to finish their requests.
const DRAIN_TIMEOUT_MS: u64 = 30_000;
/// Open HTTP connections at once at most, whatever the open-file limit allows (each request
/// on them is bounded separately); further clients wait in the kernel's accept queue.
pub const CONNECTIONS_MAX: usize = 10_000;

/// The bounds on HTTP connections.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Open connections at once.
    pub connections_max: usize,
    /// Open connections from one client address at once; more are closed when accepted.
    pub per_address_max: usize,
    /// For the first byte, a request's headers, and the next request on a kept-alive
    /// connection.
    pub header_read_timeout: Duration,
}

/// Open connections per client address; an entry leaves with its last connection.
#[derive(Default)]
pub struct PerAddress(Mutex<HashMap<IpAddr, usize>>);

/// One counted connection of an address, uncounted when dropped.
pub struct AddressSlot {
    table: Arc<PerAddress>,
    ip: IpAddr,
}

impl PerAddress {
    /// A slot for one more connection from `ip`, unless it has `max` already.
    pub fn take(table: &Arc<PerAddress>, ip: IpAddr, max: usize) -> Option<AddressSlot> {
        let mut open = table.0.lock().ok()?;
        let count = open.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            table: table.clone(),
            ip,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.table.0.lock() {
            if let Some(count) = open.get_mut(&self.ip) {
                *count -= 1;
                if *count == 0 {
                    open.remove(&self.ip);
                }
            }
        }
    }
}

/// Connections the limits closed, for `/metrics`.
#[derive(Default)]
pub struct ConnMetrics {
    /// Closed when accepted: their address had `per_address_max` open already.
    pub refused_per_address: AtomicU64,
    /// Closed for sending no first byte within the header timeout.
    pub closed_idle: AtomicU64,
    /// Graphite connections closed when accepted: too many from their address.
    pub graphite_refused_per_address: AtomicU64,
}

impl ConnMetrics {
    /// The counters in Prometheus text.
    pub fn prometheus_text(&self) -> String {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "# HELP strata_connections_refused_total Connections closed when accepted: their \
             client address had limits.connections_per_address_max open already.\n\
             # TYPE strata_connections_refused_total counter\n\
             strata_connections_refused_total{{listener=\"http\"}} {}\n\
             strata_connections_refused_total{{listener=\"graphite\"}} {}\n\
             # HELP strata_http_connections_idle_closed_total HTTP connections closed for \
             sending no request within limits.header_read_timeout_ms.\n\
             # TYPE strata_http_connections_idle_closed_total counter\n\
             strata_http_connections_idle_closed_total {}\n",
            read(&self.refused_per_address),
            read(&self.graphite_refused_per_address),
            read(&self.closed_idle),
        )
    }
}

pub fn acceptor(cert_path: &Path, key_path: &Path) -> Result<TlsAcceptor, String> {
    let read =
        |path: &Path| std::fs::read(path).map_err(|e| format!("tls: {}: {e}", path.display()));
    let cert_pem = read(cert_path)?;
    let key_pem = read(key_path)?;
    let certs: Vec<_> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.cert {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls.cert {}: no certificate in the file",
            cert_path.display()
        ));
    }
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| format!("tls.key {}: {e}", key_path.display()))?
        .ok_or_else(|| format!("tls.key {}: no private key in the file", key_path.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls: certificate and key do not fit: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections until stopped (TLS when `acceptor` is set), then waits (bounded) for
/// open ones to finish.
pub async fn serve(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    router: Router,
    limits: ConnLimits,
    metrics: Arc<ConnMetrics>,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.connections_max));
    let per_address = Arc::new(PerAddress::default());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's header timeout also runs while a kept-alive connection waits for its next
    // request; the first byte of a plain connection is awaited below (the version sniff
    // before hyper has no deadline of its own).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = super::stopped(&mut stop) => break,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = super::stopped(&mut stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "http: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = PerAddress::take(&per_address, peer.ip(), limits.per_address_max) else {
            metrics.refused_per_address.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "http: too many connections from this address; closed");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let metrics = metrics.clone();
        let service = router.clone();
        let watcher = graceful.watcher();
        let builder = builder.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _slot = slot;
            let Some(acceptor) = acceptor else {
                let mut first = [0u8; 1];
                let waited =
                    tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut first));
                match waited.await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        metrics.closed_idle.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, "http: no request within the header timeout");
                        return;
                    }
                }
                serve_io(&builder, stream, service, watcher, peer).await;
                return;
            };
            let handshake = tokio::time::timeout(
                Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
                acceptor.accept(stream),
            )
            .await;
            let tls = match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "https: handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "https: handshake timed out");
                    return;
                }
            };
            serve_io(&builder, tls, service, watcher, peer).await;
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_millis(DRAIN_TIMEOUT_MS), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("http: connections still open after the drain timeout");
    }
}

async fn serve_io<IO>(
    builder: &auto::Builder<TokioExecutor>,
    io: IO,
    router: Router,
    watcher: hyper_util::server::graceful::Watcher,
    peer: std::net::SocketAddr,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Each request carries its client's address (the cardinality limits' source).
    let service = TowerToHyperService::new(router.map_request(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(Peer(peer.ip()));
            request
        },
    ));
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(connection.into_owned()).await {
        tracing::debug!(%peer, error = %e, "http: connection ended with an error");
    }
}
