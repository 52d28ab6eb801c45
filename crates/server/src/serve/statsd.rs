//! The statsd / DogStatsD UDP listener: datagrams are parsed as they arrive into the
//! aggregator (`insert::statsd`), whose batch is written once per flush interval (and at
//! shutdown).

use std::time::Duration;

use insert::statsd::Aggregator;
use tokio::sync::watch;

use super::{now_ms, Endpoint, Shared};

/// Datagrams read from the socket's queue after the stop signal, before the last flush.
const DRAIN_DATAGRAMS_MAX: usize = 100_000;

/// Receives datagrams until stopped, flushing every `statsd.flush_interval_ms` and at the end.
pub async fn run(app: Shared, socket: tokio::net::UdpSocket, mut stop: watch::Receiver<bool>) {
    let datagram_max = app.config.limits.udp_datagram_bytes_max;
    let interval = Duration::from_millis(app.config.statsd.flush_interval_ms);
    let mut buffer = vec![0u8; datagram_max];
    let mut aggregator = Aggregator::default();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        tokio::select! {
            received = socket.recv_from(&mut buffer) => match received {
                Ok((len, _from)) => {
                    let start_ns = clock::now();
                    let options = ingest::Options::at(now_ms());
                    let (accepted, rejected) = aggregator.add_datagram(&buffer[..len], &options);
                    app.metrics.batch(Endpoint::Statsd, accepted, rejected);
                    let status = if rejected > 0 { 400 } else { 200 };
                    app.metrics.request(Endpoint::Statsd, clock::now().saturating_sub(start_ns), status);
                }
                Err(e) => {
                    // ICMP errors and the like surface here on some systems; keep listening.
                    tracing::debug!(error = %e, "statsd: receive failed");
                }
            },
            _ = tick.tick() => flush(&app, &mut aggregator).await,
            _ = super::stopped(&mut stop) => break,
        }
    }
    // Datagrams already queued in the socket were sent before the stop: take them too
    // (bounded, since senders may keep sending while we drain).
    for _ in 0..DRAIN_DATAGRAMS_MAX {
        match socket.try_recv_from(&mut buffer) {
            Ok((len, _from)) => {
                let options = ingest::Options::at(now_ms());
                let (accepted, rejected) = aggregator.add_datagram(&buffer[..len], &options);
                app.metrics.batch(Endpoint::Statsd, accepted, rejected);
            }
            Err(_) => break,
        }
    }
    flush(&app, &mut aggregator).await;
    tracing::info!("statsd listener stopped");
}

async fn flush(app: &Shared, aggregator: &mut Aggregator) {
    let batch = aggregator.take(now_ms());
    let samples = batch.sample_count();
    if let Err(e) = app.write(batch).await {
        tracing::error!(error = %e, samples, "statsd: flush to the store failed; samples lost");
    }
}
