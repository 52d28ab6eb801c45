//! One bounded accept loop for every TCP listener of the broker (push HTTP, the core's and a
//! broker's link listeners, a holder waiting for its core): at most `connections_max`
//! connections are served at once — the next is accepted only when one ends — and a failed
//! accept (no file descriptors left) is retried after a pause instead of spinning.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The pause after a failed accept.
const ACCEPT_RETRY_MS: u64 = 100;

/// Serves `listener` until the process stops: each connection (with `TCP_NODELAY`) handed to
/// `serve` on a task of its own, at most `connections_max` at once. `what` names the listener
/// in the log.
pub async fn serve_bounded<F, Fut>(
    listener: TcpListener,
    connections_max: usize,
    what: &'static str,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    assert!(
        connections_max > 0,
        "a listener serves at least one connection"
    );
    let permits = Arc::new(Semaphore::new(connections_max));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(listener = what, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let served = serve(tcp, peer);
        tokio::spawn(async move {
            served.await;
            drop(permit);
        });
    }
}
