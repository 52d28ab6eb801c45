//! Optional HTTPS: rustls with the `ring` provider (aws-lc would need cmake), certificates and
//! key from PEM files, every connection served by hyper with the same router.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How long shutdown waits for open connections to finish their requests.
const DRAIN_TIMEOUT_MS: u64 = 30_000;

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

/// Accepts TLS connections until stopped, then waits (bounded) for open ones to finish.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = super::stopped(&mut stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "https: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
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
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%peer, error = %e, "https: connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_millis(DRAIN_TIMEOUT_MS), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("https: connections still open after the drain timeout");
    }
}
