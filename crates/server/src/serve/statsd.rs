//! The statsd / DogStatsD UDP listener: datagrams are parsed as they arrive into the
//! aggregator (`insert::statsd`), whose batch is written once per flush interval (and at
//! shutdown).

use std::time::Duration;

use insert::statsd::Aggregator;
use tokio::sync::watch;

use super::lograte::Rejections;
use super::{now_ms, Endpoint, Shared};

/// Rejected statsd lines, logged at most once per `lograte::LOG_EVERY_MS`.
static REJECTED: Rejections = Rejections::new("statsd");

/// Datagrams read from the socket's queue after the stop signal, before the last flush.
const DRAIN_DATAGRAMS_MAX: usize = 100_000;

/// Asks the kernel for a receive buffer of `<listener>.receive_buffer_bytes` (it caps the
/// request at `net.core.rmem_max`); the socket's inode, by which `/proc/self/net/udp*` counts
/// its drops. Shared by the UDP listeners (statsd, collectd).
pub fn prepare_socket(
    socket: &tokio::net::UdpSocket,
    receive_buffer_bytes: u64,
    listener: &str,
) -> Option<u64> {
    use rustix::net::sockopt;
    let wanted = usize::try_from(receive_buffer_bytes).unwrap_or(usize::MAX);
    if let Err(e) = sockopt::set_socket_recv_buffer_size(socket, wanted) {
        tracing::warn!(error = %e, listener, "cannot set the receive buffer size");
    }
    match sockopt::socket_recv_buffer_size(socket) {
        // Linux reports twice the size asked for (its own bookkeeping included).
        Ok(size) => tracing::info!(receive_buffer_bytes = size, listener, "UDP socket ready"),
        Err(e) => tracing::debug!(error = %e, listener, "receive buffer size unknown"),
    }
    rustix::fs::fstat(socket).ok().map(|stat| stat.st_ino)
}

/// Lines of `/proc/self/net/udp*` read when looking for the socket.
const PROC_UDP_LINES_MAX: usize = 1_000_000;

/// Datagrams the kernel dropped on the socket with this inode (its receive buffer was full),
/// from the `drops` column of `/proc/self/net/udp` or `udp6`.
pub fn kernel_drops(inode: u64) -> Option<u64> {
    let inode = inode.to_string();
    for table in ["/proc/self/net/udp", "/proc/self/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1).take(PROC_UDP_LINES_MAX) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
            if fields.get(9) == Some(&inode.as_str()) {
                return fields.last().and_then(|d| d.parse().ok());
            }
        }
    }
    None
}

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
                Ok((len, from)) => {
                    let start_ns = clock::now();
                    let options = ingest::Options::at(now_ms());
                    let datagram = &buffer[..len];
                    let (accepted, rejected) = aggregator.add_datagram(datagram, &options);
                    app.metrics.batch(Endpoint::Statsd, accepted, rejected);
                    if rejected > 0 {
                        let example = String::from_utf8_lossy(datagram);
                        let from = from.ip().to_string();
                        REJECTED.note(rejected as u64, options.now_ms, &from, &example);
                    }
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
    let families = aggregator.families();
    let batch = aggregator.take(now_ms());
    let samples = batch.sample_count();
    match app.write_ingest(batch).await {
        Ok(_) => app.metadata.record(&families),
        Err(e) => {
            tracing::error!(error = %e, samples, "statsd: flush to the store failed; samples lost")
        }
    }
}
