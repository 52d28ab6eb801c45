//! The link between a data holder (a broker, or an agent in reverse mode) and a core: one
//! mutually authenticated TLS connection carrying HTTP/2, opened by either side. Wire details
//! byte by byte: `FORMAT.md`, "The link".
//!
//! # Design
//!
//! **Data flow.** The data holder keeps everything in its journal (`spool`) and *pushes* it:
//! the forwarder (`forward.rs`) sends each record as one `POST /write/<id>` carrying the
//! exactly-once headers (`Strata-Source` = id, `Strata-Epoch`, `Strata-Sequence` = journal
//! offset), exactly as it does over plain HTTP. The core admits each (source, epoch, sequence)
//! once in its store; the holder's journal checkpoint moves only over the prefix the core
//! answered 2xx. So a record resent after a cut link, a `kill -9` of either side, or a lost
//! answer is applied once. The core *pushes* configuration in the same direction of requests:
//! the holder asks `GET /api/strata/v1/checks?broker=<id>` over the link every 2 s and applies
//! the answer when it changed (a core cannot send a request to a holder; one request direction
//! keeps one code path for both dial directions).
//!
//! **Roles.** TLS: whoever dialled is the TLS client, the other the TLS server. HTTP/2: the
//! data holder is always the client and the core always the server, whichever side dialled —
//! after the handshake the two directions are the same connection.
//!
//! | dial | TCP connect | TLS client | TLS server | HTTP/2 client | HTTP/2 server |
//! |---|---|---|---|---|---|
//! | holder dials (`--core-link`, optional CONNECT `--proxy`) | holder | holder | core | holder | core |
//! | core dials (`--link-listen` on the holder, `dial: core` in the registry) | core | core | holder | holder | core |
//!
//! **Identity and pinning.** Every holder and core has a key pair and a self-signed certificate
//! (`tls.rs`; `strata broker init` makes the holder's). No certificate authority: each side
//! accepts exactly the SHA-256 of the DER certificates it was given — the core its registry
//! (`/api/strata/v1/brokers`: id → fingerprint, dial direction, address), the holder
//! `--core-sha256`. The handshake signature is still verified with the pinned key. The core
//! maps the client certificate to the registered id and refuses any request naming another
//! source or path (403). TLS 1.3 only, ALPN `strata-link/1`.
//!
//! **Keepalive and dead peers.** Both HTTP/2 ends send a PING every `PING_INTERVAL_S` and drop
//! the connection when one is unanswered for `PING_TIMEOUT_S`: a peer that stops answering
//! (SIGSTOP, a cut cable, a proxy that hangs) is detected within
//! `PING_INTERVAL_S + PING_TIMEOUT_S` = 30 s ≤ 45 s. The holder also sends a heartbeat request
//! every `HEARTBEAT_S` carrying its backlog, so the core's last-contact time moves while idle.
//!
//! **Reconnects.** The dialling side redials after `REDIAL_MS_MIN`, doubling to
//! `REDIAL_MS_MAX`, with jitter; records unanswered on the dead connection are resent on the
//! next one (the forwarder's retry), never lost, never applied twice.
//!
//! **Failure cases.** Unknown or wrong certificate: the handshake fails; the core logs one line
//! naming the fingerprint and the peer address. A proxy that refuses or dies: the dial fails
//! and is retried. A core that restarts: the holder's in-flight requests fail and are resent.
//! A holder that restarts: its journal and epoch survive, the forwarder resumes from the
//! checkpoint. A second link of the same holder: both serve, the store's admission keeps
//! writes exactly once.

pub mod client;
pub mod h2;

/// Concurrent HTTP/2 streams on one link (the forwarder keeps at most 64 records in flight).
pub const LINK_STREAMS_MAX: u32 = 128;
/// HTTP/2 PING every this often, and the connection dropped when one is unanswered this long.
pub const PING_INTERVAL_S: u64 = 10;
pub const PING_TIMEOUT_S: u64 = 20;
/// The holder's heartbeat request period.
pub const HEARTBEAT_S: u64 = 5;
/// Redial backoff: from the first to the last, doubling.
pub const REDIAL_MS_MIN: u64 = 500;
pub const REDIAL_MS_MAX: u64 = 10_000;
/// Longest response body read on the link (a checks list).
pub const RESPONSE_BYTES_MAX: usize = 16 << 20;

/// The heartbeat path (answered by the core's link layer itself).
pub const PATH_HEARTBEAT: &str = "/link/v1/heartbeat";

/// Request headers the holder adds: its backlog for this core, and when a record was made.
pub const H_BACKLOG_RECORDS: &str = "strata-backlog-records";
pub const H_BACKLOG_BYTES: &str = "strata-backlog-bytes";
pub const H_MADE_MS: &str = "strata-made-ms";

// The dead-peer bound the link promises.
const _: () = assert!(PING_INTERVAL_S + PING_TIMEOUT_S <= 45);
