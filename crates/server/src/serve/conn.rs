//! HTTP connections: an accept loop serving the router through hyper with a header-read timeout
//! (a client that never finishes its headers is dropped), a bound on open connections, a graceful
//! drain at shutdown, and optional HTTPS (rustls with the `ring` provider — aws-lc would need
//! cmake — certificate and key from PEM files).

use std::path::Path;
use std::sync::Arc;
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

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How long shutdown waits for open connections to finish their requests.
const DRAIN_TIMEOUT_MS: u64 = 30_000;
/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// Open HTTP connections at once (each request on them is bounded separately); further
/// clients wait in the kernel's accept queue.
pub const CONNECTIONS_MAX: usize = 10_000;

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
    mut stop: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS));
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
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        let builder = builder.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Some(acceptor) = acceptor else {
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
    service: TowerToHyperService<Router>,
    watcher: hyper_util::server::graceful::Watcher,
    peer: std::net::SocketAddr,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(e) = watcher.watch(connection.into_owned()).await {
        tracing::debug!(%peer, error = %e, "http: connection ended with an error");
    }
}
