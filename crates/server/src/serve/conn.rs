//! HTTP connections: an accept loop serving the router through hyper with a header-read timeout
//! (a client that does not send its first byte, or a request's headers, or its next request on a
//! kept-alive connection in time is dropped), a bound on open connections (derived from the
//! open-file limit) and on connections from one client address, a graceful drain at shutdown,
//! and optional HTTPS (rustls with the `ring` provider — aws-lc would need cmake — certificate
//! and key from PEM files).
//!
//! Every connection, plain or TLS, HTTP/1 or HTTP/2, is closed once nothing moved on it either
//! way for its idle deadline ([`Deadlined`]): HTTP/2 has no header timeout of its own, and a
//! TLS connection waits in the protocol sniff before hyper's. A TLS handshake must finish
//! within the header timeout. HTTP/2 streams per connection are bounded, and streams a client
//! opens and resets at once (CVE-2023-44487, "rapid reset") end the connection past a bound.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore, TryAcquireError};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

/// The client address of a request (a request extension set per connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

/// Concurrent HTTP/2 streams one connection may have open (requests in flight on it); a client
/// opening more is refused the extra streams (`REFUSED_STREAM`).
const H2_STREAMS_MAX: u32 = 100;
/// Streams a client opened and reset before the server took them, pending at once: past it the
/// connection ends with `ENHANCE_YOUR_CALM` (the rapid-reset attack).
const H2_PENDING_RESET_STREAMS_MAX: usize = 20;
/// Streams the server had to reset for a client's protocol errors on one connection before it
/// ends the connection.
const H2_ERROR_RESET_STREAMS_MAX: usize = 256;
/// Header list bytes of one HTTP/2 request.
const H2_HEADER_LIST_BYTES_MAX: u32 = 16 << 10;
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
    /// For the first byte, a request's headers, the next request on a kept-alive
    /// connection, and a TLS handshake.
    pub header_read_timeout: Duration,
    /// Longest a request may take (`limits.request_timeout_ms`): a connection with nothing
    /// moving for the header timeout plus this is idle whatever its protocol.
    pub request_timeout: Duration,
}

impl ConnLimits {
    /// How long nothing may move on a connection once its first byte came: longer than any
    /// request may take, so an answer being worked on is never cut.
    fn idle_timeout(&self) -> Duration {
        self.header_read_timeout + self.request_timeout
    }
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

/// Connections that have sent nothing yet (no first byte, no finished TLS handshake): when every
/// connection slot is taken, the longest-waiting of them is closed to make room, so a flood of
/// silent connections cannot lock out a client that has a request to send.
#[derive(Default)]
pub struct Silent {
    waiting: AtomicUsize,
    evict: Notify,
}

impl Silent {
    /// Asks the longest-waiting silent connection to close; false when there is none.
    pub fn make_room(&self) -> bool {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.evict.notify_one();
        true
    }

    /// `first` (a connection's first byte or handshake), unless the connection is asked to
    /// make room before it: then `None`.
    pub async fn until_first<T>(&self, first: impl std::future::Future<Output = T>) -> Option<T> {
        let evicted = self.evict.notified();
        tokio::pin!(evicted);
        // Registered before it is counted, so a `make_room` that saw it reaches it.
        evicted.as_mut().enable();
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let outcome = tokio::select! {
            biased;
            done = first => Some(done),
            () = evicted => None,
        };
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        outcome
    }
}

/// How often a connection waiting for a slot asks again for a silent one to make room (one may
/// have started waiting since).
const ROOM_RETRY_MS: u64 = 50;

/// A slot for a connection just accepted: free now, or once a silent connection made room, or
/// once another closed (`None` when the slots are closed or the server stops).
pub async fn connection_slot(
    permits: &Arc<Semaphore>,
    silent: &Silent,
    stop: &mut watch::Receiver<bool>,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let retry = Duration::from_millis(ROOM_RETRY_MS);
    // Bounded by the server's life: each turn either gets a slot or waits `retry`.
    loop {
        match permits.clone().try_acquire_owned() {
            Ok(permit) => return Some(permit),
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => {}
        }
        silent.make_room();
        tokio::select! {
            p = permits.clone().acquire_owned() => return p.ok(),
            () = tokio::time::sleep(retry) => {}
            () = super::stopped(stop) => return None,
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
    /// TLS connections closed for not finishing their handshake within the header timeout.
    pub handshake_timed_out: AtomicU64,
    /// Connections (TLS or HTTP/2) closed for nothing moving on them within their deadline.
    pub closed_stalled: AtomicU64,
    /// Silent HTTP connections closed to make room for a new one when every slot was taken.
    pub closed_for_room: AtomicU64,
    /// Silent Graphite connections closed to make room.
    pub graphite_closed_for_room: AtomicU64,
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
             strata_http_connections_idle_closed_total {}\n\
             # HELP strata_http_tls_handshakes_timed_out_total TLS connections closed for not \
             finishing their handshake within limits.header_read_timeout_ms.\n\
             # TYPE strata_http_tls_handshakes_timed_out_total counter\n\
             strata_http_tls_handshakes_timed_out_total {}\n\
             # HELP strata_http_connections_stalled_closed_total Connections (TLS, HTTP/2) \
             closed for nothing moving on them within their idle deadline.\n\
             # TYPE strata_http_connections_stalled_closed_total counter\n\
             strata_http_connections_stalled_closed_total {}\n\
             # HELP strata_connections_closed_for_room_total Connections that had sent nothing \
             closed to make room when every connection slot was taken.\n\
             # TYPE strata_connections_closed_for_room_total counter\n\
             strata_connections_closed_for_room_total{{listener=\"http\"}} {}\n\
             strata_connections_closed_for_room_total{{listener=\"graphite\"}} {}\n",
            read(&self.refused_per_address),
            read(&self.graphite_refused_per_address),
            read(&self.closed_idle),
            read(&self.handshake_timed_out),
            read(&self.closed_stalled),
            read(&self.closed_for_room),
            read(&self.graphite_closed_for_room),
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
    let silent = Arc::new(Silent::default());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's header timeout also runs while a kept-alive connection waits for its next
    // request; the first byte of a plain connection is awaited below (the version sniff
    // before hyper has no deadline of its own).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_STREAMS_MAX)
        .max_pending_accept_reset_streams(H2_PENDING_RESET_STREAMS_MAX)
        .max_local_error_reset_streams(H2_ERROR_RESET_STREAMS_MAX)
        .max_header_list_size(H2_HEADER_LIST_BYTES_MAX)
        // No keep-alive pings: the server's own pings would count as traffic and keep an idle
        // connection open; the idle deadline closes a gone peer's connection as well.
        .keep_alive_interval(None);
    let builder = Arc::new(builder);
    loop {
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
        // Taken once a connection is there to serve (so silent ones make room only for a real
        // newcomer); until then it is one open file past the bound.
        let Some(permit) = connection_slot(&permits, &silent, &mut stop).await else {
            break;
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let metrics = metrics.clone();
        let service = router.clone();
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let silent = silent.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _slot = slot;
            let Some(acceptor) = acceptor else {
                let mut first = [0u8; 1];
                let waited =
                    tokio::time::timeout(limits.header_read_timeout, stream.peek(&mut first));
                match silent.until_first(waited).await {
                    Some(Ok(Ok(n))) if n > 0 => {}
                    Some(Ok(_)) => return,
                    None => {
                        metrics.closed_for_room.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Some(Err(_)) => {
                        metrics.closed_idle.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, "http: no request within the header timeout");
                        return;
                    }
                }
                let stream = Deadlined::new(stream, &limits, metrics);
                serve_io(&builder, stream, service, watcher, peer).await;
                return;
            };
            let handshake =
                tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream));
            let tls = match silent.until_first(handshake).await {
                None => {
                    metrics.closed_for_room.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Some(Ok(Ok(tls))) => tls,
                Some(Ok(Err(e))) => {
                    tracing::debug!(%peer, error = %e, "https: handshake failed");
                    return;
                }
                Some(Err(_)) => {
                    metrics.handshake_timed_out.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "https: handshake timed out");
                    return;
                }
            };
            let tls = Deadlined::new(tls, &limits, metrics);
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

/// A connection that fails its next read or write once nothing moved on it either way for its
/// deadline: the header timeout before the first byte read, the idle timeout after. hyper polls
/// reads whenever it waits for the peer (HTTP/2 always) and writes while a peer does not take
/// its answers (a flood whose acknowledgements are never read), so the deadline is seen without
/// a task of its own.
struct Deadlined<IO> {
    io: IO,
    idle: Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    metrics: Arc<ConnMetrics>,
}

impl<IO> Deadlined<IO> {
    fn new(io: IO, limits: &ConnLimits, metrics: Arc<ConnMetrics>) -> Deadlined<IO> {
        Deadlined {
            io,
            idle: limits.idle_timeout(),
            deadline: Box::pin(tokio::time::sleep(limits.header_read_timeout)),
            metrics,
        }
    }

    fn moved(&mut self) {
        let next = tokio::time::Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// On a read or write that cannot go on: the error ending the connection once its deadline
    /// has passed (the deadline's wake-up registered otherwise).
    fn expired(&mut self, cx: &mut std::task::Context<'_>) -> Option<std::io::Error> {
        if std::future::Future::poll(self.deadline.as_mut(), cx).is_pending() {
            return None;
        }
        self.metrics.closed_stalled.fetch_add(1, Ordering::Relaxed);
        Some(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "nothing moved on the connection within its idle deadline",
        ))
    }

    /// A write's outcome: progress moves the deadline; waiting past it ends the connection.
    fn written(
        &mut self,
        cx: &mut std::task::Context<'_>,
        outcome: std::task::Poll<std::io::Result<usize>>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        match outcome {
            Poll::Ready(Ok(n)) if n > 0 => {
                self.moved();
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match self.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            other => other,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Deadlined<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Deadlined<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let outcome = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.written(cx, outcome)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let outcome = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.written(cx, outcome)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        match std::pin::Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Pending => match self.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            done => done,
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
