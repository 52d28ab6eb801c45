//! The collectd UDP listener (`listeners.collectd`): each datagram of collectd's binary network
//! protocol is parsed (`ingest::collectd`) and written to the store through the one write path,
//! one write per datagram; rejections are counted and logged at most once per
//! `lograte::LOG_EVERY_MS`.

use tokio::sync::watch;

use super::lograte::Rejections;
use super::write::{write_body, Protocol};
use super::{Endpoint, Shared};

/// Rejected collectd value lists and datagrams, logged at most once per `lograte::LOG_EVERY_MS`.
static REJECTED: Rejections = Rejections::new("collectd");

/// Datagrams read from the socket's queue after the stop signal.
const DRAIN_DATAGRAMS_MAX: usize = 10_000;

/// Receives datagrams until stopped, then takes what is already queued (bounded).
pub async fn run(app: Shared, socket: tokio::net::UdpSocket, mut stop: watch::Receiver<bool>) {
    let datagram_max = app
        .config
        .limits
        .udp_datagram_bytes_max
        .min(ingest::collectd::DATAGRAM_BYTES_MAX);
    let mut buffer = vec![0u8; datagram_max];
    loop {
        tokio::select! {
            received = socket.recv_from(&mut buffer) => match received {
                Ok((len, from)) => datagram(&app, &buffer[..len], from.ip().to_string()).await,
                // ICMP errors and the like surface here on some systems; keep listening.
                Err(e) => tracing::debug!(error = %e, "collectd: receive failed"),
            },
            _ = super::stopped(&mut stop) => break,
        }
    }
    for _ in 0..DRAIN_DATAGRAMS_MAX {
        match socket.try_recv_from(&mut buffer) {
            Ok((len, from)) => datagram(&app, &buffer[..len], from.ip().to_string()).await,
            Err(_) => break,
        }
    }
    tracing::info!("collectd listener stopped");
}

/// One datagram into the store; `sender` (the client's address) is its cardinality source.
async fn datagram(app: &Shared, bytes: &[u8], sender: String) {
    let start_ns = clock::now();
    let body = bytes.to_vec();
    let result = write_body(
        app,
        Protocol::Collectd,
        body,
        Vec::new(),
        None,
        sender.clone(),
    )
    .await;
    let status = match &result {
        Ok(outcome) if outcome.rejected_total == 0 => 200,
        Ok(outcome) => {
            let example = outcome.error.as_deref().unwrap_or("");
            let count = outcome.rejected_total as u64;
            REJECTED.note(count, super::now_ms(), &sender, example);
            400
        }
        Err(e) => {
            tracing::error!(error = %e, "collectd: write to the store failed; datagram lost");
            500
        }
    };
    app.metrics.request(
        Endpoint::Collectd,
        clock::now().saturating_sub(start_ns),
        status,
    );
}
