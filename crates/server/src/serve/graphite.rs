//! The Graphite plaintext TCP listener: each connection buffers complete lines and writes them
//! to the store every `graphite.flush_interval_ms` or `graphite.flush_samples_max` lines, at
//! EOF, and at shutdown. A line over `limits.line_bytes_max` is skipped up to its newline; a
//! connection silent for `limits.graphite_idle_timeout_ms` is closed.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::conn::{connection_slot, PerAddress, Silent};
use super::lograte::Rejections;
use super::write::{write_body, Protocol};
use super::{Endpoint, Shared};

/// Reads of already queued bytes after the stop signal, before the last flush.
const DRAIN_READS_MAX: usize = 1024;
/// Bytes read from a socket at once.
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Serves Graphite connections until stopped: at most `connections_max` at once (from the
/// configuration and the open-file limit) and `limits.connections_per_address_max` from one
/// client address (more are closed when accepted, so one sender cannot lock the others out).
pub async fn run(
    app: Shared,
    listener: TcpListener,
    connections_max: usize,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(connections_max));
    let per_address = Arc::new(PerAddress::default());
    let per_address_max = app.config.limits.connections_per_address_max;
    let silent = Arc::new(Silent::default());
    let idle_max = Duration::from_millis(app.config.limits.graphite_idle_timeout_ms);
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = super::stopped(&mut stop) => break,
        };
        // Reap finished connections so the set stays bounded by the permits.
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, peer)) => {
                let Some(slot) = PerAddress::take(&per_address, peer.ip(), per_address_max) else {
                    app.conn_metrics
                        .graphite_refused_per_address
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%peer, "graphite: too many connections from this address");
                    continue;
                };
                // A slot for it (a silent connection closed to make room when all are taken),
                // so at most the max are served at once.
                let Some(permit) = connection_slot(&permits, &silent, &mut stop).await else {
                    break;
                };
                let app = app.clone();
                let stop = stop.clone();
                let silent = silent.clone();
                connections.spawn(async move {
                    tracing::debug!(%peer, "graphite: connection");
                    let mut byte = [0u8; 1];
                    let first = tokio::time::timeout(idle_max, stream.peek(&mut byte));
                    match silent.until_first(first).await {
                        Some(Ok(Ok(n))) if n > 0 => {}
                        Some(_) => return,
                        None => {
                            app.conn_metrics
                                .graphite_closed_for_room
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            return;
                        }
                    }
                    connection(app, stream, stop, peer.ip().to_string()).await;
                    drop((permit, slot));
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "graphite: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    tracing::info!("graphite listener stopped");
}

/// Complete lines waiting for the store, and the line being read.
struct Lines {
    pending: Vec<u8>,
    pending_lines: usize,
    partial: Vec<u8>,
    skipping: bool,
    too_long: usize,
    line_bytes_max: usize,
}

impl Lines {
    fn push_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (segment, newline) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            bytes = &bytes[segment.len() + usize::from(newline)..];
            if !self.skipping {
                if self.partial.len() + segment.len() > self.line_bytes_max {
                    self.skipping = true;
                    self.too_long += 1;
                    self.partial.clear();
                } else {
                    self.partial.extend_from_slice(segment);
                }
            }
            if newline {
                if !self.skipping {
                    self.pending.extend_from_slice(&self.partial);
                    self.pending.push(b'\n');
                    self.pending_lines += 1;
                }
                self.partial.clear();
                self.skipping = false;
            }
        }
    }

    /// At EOF a last line without a newline still counts.
    fn finish(&mut self) {
        if !self.skipping && !self.partial.is_empty() {
            self.partial.push(b'\n');
            let partial = std::mem::take(&mut self.partial);
            self.push_bytes(&partial);
        }
    }
}

/// Rejected Graphite lines, logged at most once per `lograte::LOG_EVERY_MS`.
static REJECTED: Rejections = Rejections::new("graphite");

/// `sender` (the client's address) is the cardinality limits' source of its lines.
async fn connection(
    app: Shared,
    mut stream: TcpStream,
    mut stop: watch::Receiver<bool>,
    sender: String,
) {
    let config = &app.config;
    let flush_every = Duration::from_millis(config.graphite.flush_interval_ms);
    let idle_max = Duration::from_millis(config.limits.graphite_idle_timeout_ms);
    let flush_lines_max = config.graphite.flush_samples_max;
    let mut lines = Lines {
        pending: Vec::new(),
        pending_lines: 0,
        partial: Vec::new(),
        skipping: false,
        too_long: 0,
        line_bytes_max: config.limits.line_bytes_max,
    };
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + flush_every, flush_every);
    let mut last_read = tokio::time::Instant::now();
    loop {
        tokio::select! {
            read = stream.read(&mut chunk) => match read {
                Ok(0) => break,
                Ok(n) => {
                    last_read = tokio::time::Instant::now();
                    lines.push_bytes(&chunk[..n]);
                    if lines.pending_lines >= flush_lines_max {
                        flush(&app, &mut lines, &sender).await;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "graphite: read failed");
                    break;
                }
            },
            _ = tick.tick() => {
                flush(&app, &mut lines, &sender).await;
                if last_read.elapsed() >= idle_max {
                    tracing::debug!("graphite: idle connection closed");
                    break;
                }
            }
            _ = super::stopped(&mut stop) => {
                // Bytes already in the socket's queue were sent before the stop: take them
                // (bounded, since the peer may keep sending).
                for _ in 0..DRAIN_READS_MAX {
                    match stream.try_read(&mut chunk) {
                        Ok(n) if n > 0 => lines.push_bytes(&chunk[..n]),
                        _ => break,
                    }
                }
                break;
            }
        }
    }
    lines.finish();
    flush(&app, &mut lines, &sender).await;
}

async fn flush(app: &Shared, lines: &mut Lines, sender: &str) {
    if lines.too_long > 0 {
        app.metrics.batch(Endpoint::Graphite, 0, lines.too_long);
        let example = "a line over limits.line_bytes_max (skipped)";
        REJECTED.note(lines.too_long as u64, super::now_ms(), sender, example);
        lines.too_long = 0;
    }
    if lines.pending_lines == 0 {
        return;
    }
    let body = Bytes::from(std::mem::take(&mut lines.pending));
    lines.pending_lines = 0;
    let start_ns = clock::now();
    let result = write_body(
        app,
        Protocol::Graphite,
        body,
        Vec::new(),
        None,
        sender.to_owned(),
    )
    .await;
    let status = match &result {
        Ok(outcome) if outcome.rejected_total == 0 => 200,
        Ok(outcome) => {
            let example = outcome.error.as_deref().unwrap_or("");
            let count = outcome.rejected_total as u64;
            REJECTED.note(count, super::now_ms(), sender, example);
            400
        }
        Err(e) => {
            tracing::error!(error = %e, "graphite: write to the store failed; lines lost");
            500
        }
    };
    app.metrics.request(
        Endpoint::Graphite,
        clock::now().saturating_sub(start_ns),
        status,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_skipped_to_their_newline() {
        let mut lines = Lines {
            pending: Vec::new(),
            pending_lines: 0,
            partial: Vec::new(),
            skipping: false,
            too_long: 0,
            line_bytes_max: 8,
        };
        lines.push_bytes(b"a 1 1\nbbbbb");
        lines.push_bytes(b"bbbbbbb 2 2\nc 3");
        lines.push_bytes(b" 3");
        lines.finish();
        assert_eq!(lines.pending, b"a 1 1\nc 3 3\n");
        assert_eq!(lines.pending_lines, 2);
        assert_eq!(lines.too_long, 1);
    }
}
