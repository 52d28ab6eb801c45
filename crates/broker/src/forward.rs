//! Store-and-forward over the core's HTTP ingest: every journal record is sent to the core's
//! httptrap endpoint as one flatbuffer metric list carrying the exactly-once headers
//! (`Strata-Source` = broker id, `Strata-Epoch` = the journal's life, `Strata-Sequence` = the
//! record's offset). Delivery is at least once — anything not answered 2xx is sent again, after
//! any crash of either side, from the core's journal checkpoint — and the core applies each
//! (source, epoch, sequence) once, so the effect is exactly once. The checkpoint moves only
//! over the contiguous prefix of records the core answered 2xx (or refused for good, counted).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::record::{self, Value};
use crate::spool::Spool;

/// Batches of this source sent and not yet answered 2xx, at most (the core's contract).
pub const IN_FLIGHT_MAX: u64 = 64;
/// One request's whole time, connect to answer.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Resend backoff: from the first to the last, doubling.
pub const RETRY_MS_MIN: u64 = 200;
pub const RETRY_MS_MAX: u64 = 5_000;
/// The journal checkpoint is written after this many more records are at the core, or this
/// long after the last write, whichever is first (and whenever nothing is in flight).
pub const ACK_EVERY_RECORDS: u64 = 64;
pub const ACK_EVERY_MS: u64 = 200;

/// The httptrap flatbuffer content type (`ingest::flat::CONTENT_TYPE`).
const FLAT_CONTENT_TYPE: &str = ingest::flat::CONTENT_TYPE;

/// Where and as whom a broker forwards.
#[derive(Clone, Debug)]
pub struct ForwardConfig {
    /// The core's HTTP base URL, e.g. `http://core:8080`.
    pub url: String,
    /// The journal subscriber (core name) whose checkpoint this forwarder moves.
    pub core: String,
    /// `Strata-Source`: the broker's id.
    pub source: String,
    /// The httptrap check name (the core tags every sample `__check:<check>`).
    pub check: String,
    /// The httptrap secret, when the core wants one.
    pub secret: Option<String>,
    /// Sent as `Authorization: Bearer …`, when the core wants a token (`auth.token`).
    pub bearer: Option<String>,
}

/// Counters a person reads (health, logs, tests).
#[derive(Default)]
pub struct ForwardStats {
    /// Records answered 2xx as newly applied.
    pub applied: AtomicU64,
    /// Records answered 2xx with `Strata-Duplicate: true` (resends after a lost answer).
    pub duplicates: AtomicU64,
    /// Records the core refused for good (400, 409 stale epoch, 413), counted and passed over.
    pub refused: AtomicU64,
    /// Sends that will be tried again (503, 5xx, no answer).
    pub retries: AtomicU64,
    /// Samples left out because the record could not be read back (never expected).
    pub unreadable: AtomicU64,
    /// The journal checkpoint: every record below it is at the core.
    pub acked_through: AtomicU64,
    /// Wall-clock ms of the last 2xx from the core.
    pub last_contact_ms: AtomicU64,
    /// Time made (ms) of the newest record acknowledged: lag = now − this.
    pub newest_acked_made_ms: AtomicU64,
}

/// How one send ended.
enum Sent {
    /// The core has it (2xx).
    Done { duplicate: bool },
    /// The core will never take it (counted, passed over).
    Refused(String),
    /// Try again later.
    Retry(String),
}

fn now_ms() -> u64 {
    clock::wall() / 1_000_000
}

/// A record made ready to send.
struct Body {
    /// The record's samples as an httptrap flatbuffer metric list.
    bytes: Vec<u8>,
    /// When the record was made (ms since the epoch).
    made_ms: i64,
    /// Whether it holds running totals, which the core differences in arrival order.
    totals: bool,
    /// The sender's own origin, when the record is a batch relayed for it.
    relay: Option<Arc<Relayed>>,
}

/// The exactly-once origin and check of a relayed batch, as the core is sent it: the source is
/// `<this source>/<sender>`, so the core's link accepts it from this broker only and keeps its
/// sequences apart from the broker's own.
struct Relayed {
    source: String,
    check: String,
    epoch: u64,
    sequence: u64,
}

/// The request body of a record. An error when the record cannot be read (one this broker
/// wrote always can).
fn body_of(bytes: &[u8], source: &str) -> Result<Body, String> {
    if let Some(relay) = record::Relay::decode(bytes) {
        let relay = relay.map_err(|e| e.to_string())?;
        return Ok(Body {
            made_ms: relay.made_ms,
            totals: relay.totals,
            relay: Some(Arc::new(Relayed {
                source: format!("{source}/{}", relay.sender),
                check: relay.sender,
                epoch: relay.epoch,
                sequence: relay.sequence,
            })),
            bytes: relay.body,
        });
    }
    let rec = record::decode(bytes).map_err(|e| e.to_string())?;
    let totals = rec
        .samples
        .iter()
        .any(|s| matches!(s.value, Value::Cumulative(_)));
    let samples: Vec<ingest::Sample> = rec
        .samples
        .iter()
        .map(|s| ingest::Sample {
            name: s.name.clone(),
            tags: s.tags.clone().into(),
            ts_ms: Some(s.ts_ms),
            value: match &s.value {
                Value::Null => ingest::Value::Null,
                Value::Numeric(v) => ingest::Value::Numeric(*v),
                Value::Text(t) => ingest::Value::Text(t.clone()),
                Value::Histogram(h) => ingest::Value::Histogram(h.clone()),
                // Running totals travel in their sender's own buckets (the flatbuffer's
                // `Native` kind): the core differences them there, after it has admitted the
                // record once, so a resend never differences twice.
                Value::Cumulative(hist::convert::Cumulative::Bins(h)) => {
                    ingest::Value::CumulativeHistogram(h.clone())
                }
                Value::Cumulative(c) => ingest::Value::Cumulative(c.clone()),
            },
            mode: match s.mode {
                record::Mode::Set => ingest::Mode::Set,
                record::Mode::Accumulate => ingest::Mode::Accumulate,
                record::Mode::Average => ingest::Mode::Average,
            },
        })
        .collect();
    Ok(Body {
        bytes: ingest::flat::encode(&samples),
        made_ms: rec.made_ms,
        totals,
        relay: None,
    })
}

/// One send's end, with what a resend needs.
struct Flown {
    offset: u64,
    sent: Sent,
    waiting: Waiting,
}

/// A record waiting to be sent (or sent again).
struct Waiting {
    body: Arc<Vec<u8>>,
    made_ms: i64,
    backoff: u64,
    totals: bool,
    relay: Option<Arc<Relayed>>,
}

/// Whom a request names: `Strata-Source`, `-Epoch`, `-Sequence` and the httptrap check.
struct Named<'a> {
    source: &'a str,
    epoch: u64,
    sequence: u64,
    check: &'a str,
}

/// How requests reach the core: its HTTP ingest, or the TLS link (`link`).
#[derive(Clone)]
pub enum Transport {
    Http(reqwest::Client),
    Link(crate::link::client::Link),
}

struct Sender {
    transport: Transport,
    config: ForwardConfig,
    epoch: u64,
}

/// An answer as far as the forwarder reads it.
struct Answer {
    status: u16,
    duplicate: bool,
    text: String,
}

impl Sender {
    /// The core's httptrap endpoint for `check`.
    fn endpoint(&self, check: &str) -> String {
        let base = self.config.url.trim_end_matches('/');
        match &self.config.secret {
            Some(secret) => format!("{base}/module/httptrap/{check}/{secret}"),
            None => format!("{base}/write/{check}"),
        }
    }

    async fn send(&self, offset: u64, waiting: &Waiting) -> Sent {
        let named = match &waiting.relay {
            Some(r) => Named {
                source: &r.source,
                epoch: r.epoch,
                sequence: r.sequence,
                check: &r.check,
            },
            None => Named {
                source: &self.config.source,
                epoch: self.epoch,
                sequence: offset,
                check: &self.config.check,
            },
        };
        let body = waiting.body.clone();
        let answer = match &self.transport {
            Transport::Http(client) => self.send_http(client, &named, body).await,
            Transport::Link(link) => self.send_link(link, &named, body, waiting.made_ms).await,
        };
        let answer = match answer {
            Ok(a) => a,
            Err(e) => return Sent::Retry(e),
        };
        if (200..300).contains(&answer.status) {
            return Sent::Done {
                duplicate: answer.duplicate,
            };
        }
        let text: String = answer.text.chars().take(300).collect();
        let status = answer.status;
        match status {
            // The body itself is refused, or a newer life of this broker was seen: sending it
            // again can never succeed.
            400 | 409 | 413 | 422 => Sent::Refused(format!("HTTP {status}: {text}")),
            // Busy, not there yet, misconfigured (a secret, a path): the data waits.
            _ => Sent::Retry(format!("HTTP {status}: {text}")),
        }
    }

    async fn send_http(
        &self,
        client: &reqwest::Client,
        named: &Named<'_>,
        body: Arc<Vec<u8>>,
    ) -> Result<Answer, String> {
        let mut request = client.post(self.endpoint(named.check));
        if let Some(token) = &self.config.bearer {
            request = request.bearer_auth(token);
        }
        let request = request
            .header(reqwest::header::CONTENT_TYPE, FLAT_CONTENT_TYPE)
            .header("Strata-Source", named.source)
            .header("Strata-Epoch", named.epoch.to_string())
            .header("Strata-Sequence", named.sequence.to_string())
            .body(body.to_vec());
        let response = request
            .send()
            .await
            .map_err(|e| format!("no answer from {}: {e}", self.config.url))?;
        let duplicate = is_duplicate(response.headers());
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        Ok(Answer {
            status,
            duplicate,
            text,
        })
    }

    async fn send_link(
        &self,
        link: &crate::link::client::Link,
        named: &Named<'_>,
        body: Arc<Vec<u8>>,
        made_ms: i64,
    ) -> Result<Answer, String> {
        let mut headers = vec![
            ("content-type", FLAT_CONTENT_TYPE.to_owned()),
            ("strata-source", named.source.to_owned()),
            ("strata-epoch", named.epoch.to_string()),
            ("strata-sequence", named.sequence.to_string()),
            (crate::link::H_MADE_MS, made_ms.to_string()),
        ];
        if let Some(token) = &self.config.bearer {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        let path = format!("/write/{}", named.check);
        let request =
            crate::link::h2::request(hyper::Method::POST, &path, &headers, body.to_vec())?;
        let call = link.call(request, 64 << 10);
        let (status, headers, text) =
            tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), call)
                .await
                .map_err(|_| "no answer on the link".to_owned())??;
        Ok(Answer {
            status,
            duplicate: is_duplicate(&headers),
            text: String::from_utf8_lossy(&text).into_owned(),
        })
    }
}

fn is_duplicate(headers: &hyper::HeaderMap) -> bool {
    headers
        .get("strata-duplicate")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// Forwards the journal to one core until the task is aborted. Never gives up: an unreachable
/// core only grows the backlog.
pub async fn forward_loop(spool: Arc<Spool>, config: ForwardConfig, stats: Arc<ForwardStats>) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
        .pool_max_idle_per_host(IN_FLIGHT_MAX as usize)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "the forwarder's HTTP client could not be made");
            return;
        }
    };
    forward_with(spool, config, stats, Transport::Http(client)).await
}

/// Forwards the journal as [`forward_loop`] does, over `transport`.
pub async fn forward_with(
    spool: Arc<Spool>,
    config: ForwardConfig,
    stats: Arc<ForwardStats>,
    transport: Transport,
) {
    let sender = Arc::new(Sender {
        transport,
        epoch: spool.epoch(),
        config,
    });
    let core = sender.config.core.clone();
    let mut committed = spool.watch_committed();
    // Every record below `prefix` is at the core; `next` is the first not yet sent; `done`
    // holds records at or above `prefix` that are at the core.
    let mut prefix = match spool.ensure_subscriber(&core) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!(error = %e, "the forwarder has no journal checkpoint");
            return;
        }
    };
    stats.acked_through.store(prefix, Ordering::Relaxed);
    let mut next = prefix;
    let mut done: BTreeSet<u64> = BTreeSet::new();
    // Records read from the journal and not yet sent (at most one journal batch), and the
    // reader, kept open so that each record is read once.
    let mut ahead: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut reader: Option<journal::Reader> = None;
    let mut batch = journal::Batch::new();
    // Records waiting to be sent (or resent), by offset.
    let mut pending: BTreeMap<u64, Waiting> = BTreeMap::new();
    // Records holding running totals not yet answered for good. The core differences a total
    // against the newest it applied, so two in flight at once could be applied out of order
    // (the older then adds nothing, and across a reset its increase is lost): only the first
    // of these is ever in flight.
    let mut totals: BTreeSet<u64> = BTreeSet::new();
    let mut flight: JoinSet<Flown> = JoinSet::new();
    let mut acked = prefix;
    let mut acked_at = Instant::now();
    loop {
        // Read ahead when nothing is left to send and the journal has more.
        if ahead.is_empty() && next < prefix + IN_FLIGHT_MAX && next < spool.committed() {
            if reader.is_none() {
                match spool.reader(next) {
                    Ok((first, r)) => {
                        if first > next {
                            // The disk budget dropped these before they were sent (counted
                            // there).
                            tracing::warn!(from = next, to = first, "records dropped unsent");
                            done.extend(next..first);
                            next = first;
                        }
                        reader = Some(r);
                    }
                    Err(e) => tracing::warn!(error = %e, "reading the journal to forward"),
                }
            }
            if let Some(r) = reader.as_mut() {
                match r.next_batch(&mut batch) {
                    Ok(_) => {
                        ahead.extend(batch.iter().map(|(o, payload)| (o, payload.to_vec())));
                    }
                    Err(e) => {
                        // A segment dropped underneath, or damage: open again where we are.
                        tracing::warn!(error = %e, "reading the journal to forward");
                        reader = None;
                    }
                }
            }
        }
        // Fill the window: never beyond IN_FLIGHT_MAX records past the acknowledged prefix.
        while next < prefix + IN_FLIGHT_MAX {
            let Some((offset, bytes)) = ahead.pop_front() else {
                break;
            };
            if offset < next {
                continue;
            }
            match body_of(&bytes, &sender.config.source) {
                Ok(body) => {
                    if body.totals {
                        totals.insert(offset);
                    }
                    let waiting = Waiting {
                        body: Arc::new(body.bytes),
                        made_ms: body.made_ms,
                        backoff: 0,
                        totals: body.totals,
                        relay: body.relay,
                    };
                    pending.insert(offset, waiting);
                }
                Err(e) => {
                    tracing::warn!(offset, error = %e, "an unreadable record passed over");
                    stats.unreadable.fetch_add(1, Ordering::Relaxed);
                    done.insert(offset);
                }
            }
            next = offset + 1;
        }
        let first_totals = totals.first().copied();
        for (offset, waiting) in std::mem::take(&mut pending) {
            if waiting.totals && first_totals != Some(offset) {
                pending.insert(offset, waiting);
                continue;
            }
            let sender = sender.clone();
            flight.spawn(async move {
                if waiting.backoff > 0 {
                    tokio::time::sleep(Duration::from_millis(waiting.backoff)).await;
                }
                let sent = sender.send(offset, &waiting).await;
                Flown {
                    offset,
                    sent,
                    waiting,
                }
            });
        }
        // The prefix the core has moves at once; the journal checkpoint (a synced file) only
        // every ACK_EVERY_RECORDS records or ACK_EVERY_MS, so a sync is not paid per record.
        let before = prefix;
        while done.remove(&prefix) {
            prefix += 1;
        }
        let due = prefix - acked >= ACK_EVERY_RECORDS
            || acked_at.elapsed() >= Duration::from_millis(ACK_EVERY_MS)
            || flight.is_empty();
        if prefix > acked && due {
            let (s, c) = (spool.clone(), core.clone());
            match tokio::task::spawn_blocking(move || s.ack(&c, prefix)).await {
                Ok(Ok(_)) => {
                    acked = prefix;
                    acked_at = Instant::now();
                    stats.acked_through.store(prefix, Ordering::Relaxed);
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "moving the journal checkpoint"),
                Err(e) => tracing::warn!(error = %e, "moving the journal checkpoint"),
            }
        }
        if prefix > before {
            continue;
        }
        tokio::select! {
            joined = flight.join_next(), if !flight.is_empty() => {
                let Some(Ok(Flown { offset, sent, mut waiting })) = joined else {
                    continue;
                };
                match sent {
                    Sent::Done { duplicate } => {
                        let counter = if duplicate { &stats.duplicates } else { &stats.applied };
                        counter.fetch_add(1, Ordering::Relaxed);
                        stats.last_contact_ms.store(now_ms(), Ordering::Relaxed);
                        let made = u64::try_from(waiting.made_ms).unwrap_or(0);
                        stats.newest_acked_made_ms.fetch_max(made, Ordering::Relaxed);
                        totals.remove(&offset);
                        done.insert(offset);
                    }
                    Sent::Refused(why) => {
                        tracing::warn!(offset, reason = %why, "the core refused a record for good");
                        stats.refused.fetch_add(1, Ordering::Relaxed);
                        totals.remove(&offset);
                        done.insert(offset);
                    }
                    Sent::Retry(why) => {
                        waiting.backoff =
                            (waiting.backoff * 2).clamp(RETRY_MS_MIN, RETRY_MS_MAX);
                        if stats.retries.fetch_add(1, Ordering::Relaxed).is_multiple_of(100) {
                            tracing::warn!(offset, reason = %why, "forwarding: will send again");
                        }
                        pending.insert(offset, waiting);
                    }
                }
            }
            _ = committed.changed(), if next < prefix + IN_FLIGHT_MAX => {}
            _ = tokio::time::sleep(Duration::from_millis(ACK_EVERY_MS)) => {}
        }
    }
}
