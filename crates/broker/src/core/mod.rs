//! The core's side of the links (design: `link/mod.rs`): the broker registry (`state`), the
//! link listener that accepts registered brokers' dials, one dialler per broker registered with
//! `dial: core`, and on every link — whichever side dialled — the core as the HTTP/2 server:
//! heartbeats answered here, and the requests a broker may make (its own records, its own
//! checks) handed to the server's handler with the broker's id. `strata serve` starts a [`Hub`].

pub mod state;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dial;
use crate::link::h2::{self, Body};
use crate::link::{
    H_BACKLOG_BYTES, H_BACKLOG_RECORDS, H_MADE_MS, PATH_HEARTBEAT, REDIAL_MS_MAX, REDIAL_MS_MIN,
};
use crate::tls::{self, Identity};
use state::{Dial, Registration, Registry, LINK_PEERS_MAX};

/// The path a broker asks for its checks on (answered by the server's checks API).
const PATH_CHECKS: &str = "/api/strata/v1/checks";

/// How a core runs its side of the links (or a broker its side of agents' links).
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// Where the identity and the registry are kept.
    pub dir: PathBuf,
    /// Accept dials here (`None`: only dial).
    pub listen: Option<SocketAddr>,
    /// The identity's certificate name (`strata-core`, or `strata-broker-<id>`).
    pub common_name: String,
    /// Longest peer id registered: a broker relaying for agents names them `<its id>/<agent>`
    /// to its core, which must stay a store source id.
    pub peer_id_bytes_max: usize,
}

/// A registration as the brokers API takes it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterBody {
    id: String,
    certificate_sha256: String,
    dial: Dial,
    #[serde(default)]
    address: Option<String>,
}

/// What serves a broker's request once the link has checked it may make it: the broker's id
/// and the request, to its response.
pub type Handler = Arc<
    dyn Fn(String, Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>
        + Send
        + Sync,
>;

/// One broker as the API shows it: its registration and its link's state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BrokerStatus {
    pub id: String,
    pub certificate_sha256: String,
    /// Who dials: `broker` or `core`.
    pub dial: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Whether a link is up now.
    pub connected: bool,
    /// Links up now (more than one only while a newer one replaces an older one).
    pub links: u32,
    /// The last request or heartbeat on its link (ms since the epoch; 0: never).
    pub last_contact_ms: u64,
    /// Records and journal bytes the broker holds that this core has not answered yet (its
    /// last heartbeat).
    pub backlog_records: u64,
    pub backlog_bytes: u64,
    /// Age of the newest record written when it arrived (0 when the broker has no backlog).
    pub lag_s: f64,
    /// Records written over its links (answered 2xx), since this core started.
    pub records: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Live {
    links: u32,
    last_contact_ms: u64,
    backlog_records: u64,
    backlog_bytes: u64,
    lag_s: f64,
    /// When the newest record written was made (ms): an older one resent does not set the lag.
    newest_made_ms: u64,
    records: u64,
    last_error: Option<String>,
}

struct Inner {
    dir: PathBuf,
    peer_id_bytes_max: usize,
    identity: Identity,
    fingerprint: String,
    handler: Handler,
    registry: Mutex<Registry>,
    live: Mutex<HashMap<String, Live>>,
    /// Bumped on every registry change: dialers restart, links of removed brokers end.
    changed: watch::Sender<u64>,
    dialers: Mutex<HashMap<String, (Registration, JoinHandle<()>)>>,
}

/// A `/metrics` family of the links: name, type, help, and each broker's value at a time (ms).
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&BrokerStatus, u64) -> f64,
);

/// The core's broker links. Dropping it stops them.
pub struct Hub {
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
    /// The link listener's address, bound.
    pub listen: Option<SocketAddr>,
}

fn now_ms() -> u64 {
    clock::wall() / 1_000_000
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    /// Loads (or makes) the core's identity and the registry, and starts the links. Inside a
    /// tokio runtime.
    pub async fn start(config: HubConfig, handler: Handler) -> Result<Hub, String> {
        std::fs::create_dir_all(&config.dir)
            .map_err(|e| format!("{}: {e}", config.dir.display()))?;
        let identity = tls::load_or_generate(&config.dir, "core", &config.common_name)?;
        let fingerprint = identity.fingerprint()?;
        let registry = Registry::load(&config.dir)?;
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            dir: config.dir.clone(),
            peer_id_bytes_max: config.peer_id_bytes_max,
            identity,
            fingerprint,
            handler,
            registry: Mutex::new(registry),
            live: Mutex::new(HashMap::new()),
            changed,
            dialers: Mutex::new(HashMap::new()),
        });
        let mut tasks = Vec::new();
        let mut listen = None;
        if let Some(addr) = config.listen {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("link listener {addr}: {e}"))?;
            listen = l.local_addr().ok();
            tasks.push(tokio::spawn(accept_loop(inner.clone(), l)));
        }
        tasks.push(tokio::spawn(dialers(inner.clone())));
        Ok(Hub {
            inner,
            tasks,
            listen,
        })
    }

    /// SHA-256 of the core's link certificate: what brokers pin (`--core-sha256`).
    pub fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }

    /// Where the identity and registry are kept.
    pub fn dir(&self) -> &std::path::Path {
        &self.inner.dir
    }

    /// Every registered broker with its link's state, by id.
    pub fn list(&self) -> Vec<BrokerStatus> {
        let registry = lock(&self.inner.registry);
        let live = lock(&self.inner.live);
        registry
            .brokers
            .iter()
            .map(|(id, r)| {
                let l = live.get(id);
                BrokerStatus {
                    id: id.clone(),
                    certificate_sha256: r.certificate_sha256.clone(),
                    dial: r.dial.name().to_owned(),
                    address: r.address.clone(),
                    connected: l.is_some_and(|l| l.links > 0),
                    links: l.map_or(0, |l| l.links),
                    last_contact_ms: l.map_or(0, |l| l.last_contact_ms),
                    backlog_records: l.map_or(0, |l| l.backlog_records),
                    backlog_bytes: l.map_or(0, |l| l.backlog_bytes),
                    lag_s: l.map_or(0.0, |l| l.lag_s),
                    records: l.map_or(0, |l| l.records),
                    last_error: l.and_then(|l| l.last_error.clone()),
                }
            })
            .collect()
    }

    /// Registers (or changes) a broker; durable before it returns. `Err` names the field.
    pub fn register(&self, id: &str, mut registration: Registration) -> Result<(), String> {
        registration.certificate_sha256 = tls::normalize(&registration.certificate_sha256);
        if let Some(why) = state::refusal(id, &registration) {
            return Err(why);
        }
        if id.len() > self.inner.peer_id_bytes_max {
            let max = self.inner.peer_id_bytes_max;
            return Err(format!("`id`: `{id}` is longer than {max} bytes here"));
        }
        {
            let mut registry = lock(&self.inner.registry);
            let fp = &registration.certificate_sha256;
            if let Some(other) = registry.broker_by_fingerprint(fp).filter(|o| o != id) {
                return Err(format!(
                    "`certificate_sha256`: already registered to broker `{other}`"
                ));
            }
            if !registry.brokers.contains_key(id) && registry.brokers.len() >= LINK_PEERS_MAX {
                return Err(format!(
                    "`id`: {LINK_PEERS_MAX} brokers are registered already"
                ));
            }
            let before = registry.brokers.insert(id.to_owned(), registration);
            if let Err(e) = registry.save() {
                match before {
                    Some(b) => registry.brokers.insert(id.to_owned(), b),
                    None => registry.brokers.remove(id),
                };
                return Err(e);
            }
        }
        self.inner.changed.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Removes a broker (its links end); `Ok(false)` when it was not registered.
    pub fn remove(&self, id: &str) -> Result<bool, String> {
        {
            let mut registry = lock(&self.inner.registry);
            let Some(before) = registry.brokers.remove(id) else {
                return Ok(false);
            };
            if let Err(e) = registry.save() {
                registry.brokers.insert(id.to_owned(), before);
                return Err(e);
            }
        }
        lock(&self.inner.live).remove(id);
        self.inner.changed.send_modify(|g| *g += 1);
        Ok(true)
    }

    /// `GET /api/strata/v1/brokers`: this side's fingerprint and listener, and every peer.
    pub fn api_list(&self) -> serde_json::Value {
        serde_json::json!({
            "core_sha256": self.fingerprint(),
            "listen": self.listen.map(|a| a.to_string()),
            "brokers": self.list(),
        })
    }

    /// `POST /api/strata/v1/brokers` with a JSON registration: the status and the answer.
    pub fn api_register(&self, body: &[u8]) -> (u16, serde_json::Value) {
        let error = |status, message: String| (status, serde_json::json!({ "error": message }));
        let body: RegisterBody = match serde_json::from_slice(body) {
            Ok(b) => b,
            Err(e) => return error(400, format!("broker registration: {e}")),
        };
        let registration = Registration {
            certificate_sha256: body.certificate_sha256,
            dial: body.dial,
            address: body.address,
        };
        match self.register(&body.id, registration) {
            Ok(()) => (
                200,
                serde_json::json!({
                    "id": body.id,
                    "core_sha256": self.fingerprint(),
                    "listen": self.listen.map(|a| a.to_string()),
                }),
            ),
            Err(e) if e.starts_with('`') => error(400, format!("broker registration: {e}")),
            Err(e) => error(500, format!("saving the registry: {e}")),
        }
    }

    /// `DELETE /api/strata/v1/brokers/{id}`: 204, or the status and the error.
    pub fn api_remove(&self, id: &str) -> (u16, Option<serde_json::Value>) {
        match self.remove(id) {
            Ok(true) => (204, None),
            Ok(false) => (
                404,
                Some(serde_json::json!({ "error": format!("no broker `{id}` is registered") })),
            ),
            Err(e) => (
                500,
                Some(serde_json::json!({ "error": format!("saving the registry: {e}") })),
            ),
        }
    }

    /// Each broker's link state in Prometheus text, for the core's `/metrics`.
    pub fn prometheus_text(&self) -> String {
        let now = now_ms();
        let list = self.list();
        let mut out = String::new();
        let families: [Family; 5] = [
            (
                "strata_broker_connected",
                "gauge",
                "1 while a link to the broker is up.",
                |b, _| f64::from(u8::from(b.connected)),
            ),
            (
                "strata_broker_last_contact_age_seconds",
                "gauge",
                "Seconds since the broker's last request or heartbeat (-1: never).",
                |b, now| {
                    if b.last_contact_ms == 0 {
                        -1.0
                    } else {
                        now.saturating_sub(b.last_contact_ms) as f64 / 1000.0
                    }
                },
            ),
            (
                "strata_broker_backlog_records",
                "gauge",
                "Records the broker holds that this core has not answered (its last heartbeat).",
                |b, _| b.backlog_records as f64,
            ),
            (
                "strata_broker_backlog_bytes",
                "gauge",
                "Journal bytes the broker holds that this core has not answered.",
                |b, _| b.backlog_bytes as f64,
            ),
            (
                "strata_broker_lag_seconds",
                "gauge",
                "Age of the newest record written when it arrived (0 without a backlog).",
                |b, _| b.lag_s,
            ),
        ];
        for (name, kind, help, value) in families {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for b in &list {
                out.push_str(&format!(
                    "{name}{{broker=\"{}\"}} {}\n",
                    b.id,
                    value(b, now)
                ));
            }
        }
        out
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for (_, t) in lock(&self.inner.dialers).values() {
            t.abort();
        }
    }
}

impl Inner {
    fn update(&self, broker: &str, f: impl FnOnce(&mut Live)) {
        f(lock(&self.live).entry(broker.to_owned()).or_default());
    }

    /// Whether `broker` is still registered with this fingerprint.
    fn still_registered(&self, broker: &str, fp: &str) -> bool {
        lock(&self.registry)
            .brokers
            .get(broker)
            .is_some_and(|r| r.certificate_sha256 == fp)
    }
}

/// Accepts broker dials: TLS with a client certificate registered to some broker. A dial with
/// any other certificate is refused with one log line naming its fingerprint.
async fn accept_loop(inner: Arc<Inner>, listener: tokio::net::TcpListener) {
    let serve = move |tcp, peer| {
        let inner = inner.clone();
        async move { accept_one(&inner, tcp, peer).await }
    };
    crate::accept::serve_bounded(listener, LINK_PEERS_MAX, "link", serve).await
}

async fn accept_one(inner: &Arc<Inner>, tcp: tokio::net::TcpStream, peer: SocketAddr) {
    // A config per dial, so the refusal can name the certificate this peer showed.
    let seen = Arc::new(Mutex::new(None::<String>));
    let (pins_inner, pins_seen) = (inner.clone(), seen.clone());
    let pins: tls::Pins = Arc::new(move |fp: &str| {
        *lock(&pins_seen) = Some(fp.to_owned());
        lock(&pins_inner.registry)
            .broker_by_fingerprint(fp)
            .is_some()
    });
    let config = match tls::server_config(&inner.identity, pins) {
        Ok(c) => c,
        Err(e) => return tracing::error!(error = %e, "link listener"),
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(dial::CONNECT_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return match lock(&seen).clone() {
                Some(fp) => tracing::warn!(
                    "link from {peer} refused: its certificate (sha256 {fp}) is not \
                     registered here (strata broker register)"
                ),
                None => tracing::warn!(%peer, error = %e, "broker link refused: TLS handshake"),
            }
        }
        Err(_) => return tracing::warn!(%peer, "broker link refused: TLS handshake timed out"),
    };
    let fp = tls::peer_fingerprint(stream.get_ref().1.peer_certificates()).unwrap_or_default();
    let broker = lock(&inner.registry).broker_by_fingerprint(&fp);
    let Some(broker) = broker else { return };
    tracing::info!(%broker, %peer, "broker link up (the broker dialled)");
    let ended = serve_link(inner, &broker, &fp, stream).await;
    tracing::warn!(%broker, %peer, why = %ended, "broker link down");
}

/// Keeps one dialling task per broker registered with `dial: core`, restarting it when its
/// registration changes.
async fn dialers(inner: Arc<Inner>) {
    let mut changed = inner.changed.subscribe();
    loop {
        reconcile(&inner);
        if changed.changed().await.is_err() {
            return;
        }
    }
}

fn reconcile(inner: &Arc<Inner>) {
    let wanted: Vec<(String, Registration)> = lock(&inner.registry)
        .brokers
        .iter()
        .filter(|(_, r)| r.dial == Dial::Core)
        .map(|(id, r)| (id.clone(), r.clone()))
        .collect();
    let mut dialers = lock(&inner.dialers);
    dialers.retain(|id, (reg, task)| {
        let keep = wanted.iter().any(|(w, r)| w == id && r == reg);
        if !keep {
            task.abort();
        }
        keep
    });
    for (id, reg) in wanted {
        if dialers.contains_key(&id) {
            continue;
        }
        let task = tokio::spawn(dial_loop(inner.clone(), id.clone(), reg.clone()));
        dialers.insert(id, (reg, task));
    }
}

async fn dial_loop(inner: Arc<Inner>, broker: String, reg: Registration) {
    let Some(address) = reg.address.clone() else {
        return;
    };
    let fp = reg.certificate_sha256.clone();
    let config = match tls::client_config(&inner.identity, tls::pin_one(&fp)) {
        Ok(c) => c,
        Err(e) => return tracing::error!(%broker, error = %e, "broker link"),
    };
    let connector = tokio_rustls::TlsConnector::from(config);
    let mut backoff = REDIAL_MS_MIN;
    loop {
        match dial_once(&address, &connector).await {
            Ok(stream) => {
                backoff = REDIAL_MS_MIN;
                tracing::info!(%broker, %address, "broker link up (the core dialled)");
                let ended = serve_link(&inner, &broker, &fp, stream).await;
                tracing::warn!(%broker, %address, why = %ended, "broker link down");
            }
            Err(e) => {
                tracing::warn!(%broker, %address, error = %e, "dialling the broker");
                inner.update(&broker, |l| l.last_error = Some(e));
            }
        }
        let jitter = now_ms() % (backoff / 4 + 1);
        tokio::time::sleep(Duration::from_millis(backoff + jitter)).await;
        backoff = (backoff * 2).min(REDIAL_MS_MAX);
    }
}

async fn dial_once(
    address: &str,
    connector: &tokio_rustls::TlsConnector,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = dial::connect(address, None).await?;
    let name = tls::server_name()?;
    tokio::time::timeout(dial::CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_owned())?
        .map_err(|e| format!("TLS handshake (is the registered certificate the broker's?): {e}"))
}

/// Serves one established link (the core is the HTTP/2 server) until it ends or the broker's
/// registration changes; why it ended.
async fn serve_link<I>(inner: &Arc<Inner>, broker: &str, fp: &str, io: I) -> String
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    inner.update(broker, |l| {
        l.links += 1;
        l.last_contact_ms = now_ms();
        l.last_error = None;
    });
    let mut changed = inner.changed.subscribe();
    let (handle_inner, handle_broker) = (inner.clone(), broker.to_owned());
    let served = h2::serve(io, move |req| {
        let (inner, broker) = (handle_inner.clone(), handle_broker.clone());
        async move { handle(&inner, &broker, req).await }
    });
    tokio::pin!(served);
    let ended = loop {
        tokio::select! {
            result = &mut served => break match result {
                Ok(()) => "closed by the broker".to_owned(),
                Err(e) => e,
            },
            c = changed.changed() => {
                if c.is_err() || !inner.still_registered(broker, fp) {
                    break "the broker's registration changed".to_owned();
                }
            }
        }
    };
    inner.update(broker, |l| {
        l.links = l.links.saturating_sub(1);
        l.last_error = Some(format!("link down: {ended}"));
    });
    ended
}

fn header_u64(req: &Request<Incoming>, name: &str) -> Option<u64> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Why a broker may not make this request (`None`: it may): it writes its own records
/// (`Strata-Source` its id, to `/write/<id>`) and the batches it relays for senders that
/// delivered them to it (`Strata-Source` `<id>/<sender>`, to `/write/<sender>`), and reads only
/// its own checks.
fn refusal(
    broker: &str,
    method: &Method,
    uri: &hyper::Uri,
    source: Option<&[u8]>,
) -> Option<String> {
    let path = uri.path();
    let relayed = source
        .and_then(|s| s.strip_prefix(broker.as_bytes()))
        .and_then(|s| s.strip_prefix(b"/"))
        .filter(|sender| !sender.is_empty());
    if let Some(source) = source {
        if source != broker.as_bytes() && relayed.is_none() {
            return Some(format!(
                "Strata-Source `{}` is neither this link's broker `{broker}` nor \
                 `{broker}/<sender>`",
                String::from_utf8_lossy(source)
            ));
        }
    }
    let own_checks = format!("broker={broker}");
    let write_to = |check: &[u8]| path.strip_prefix("/write/").map(str::as_bytes) == Some(check);
    let allowed = match *method {
        Method::POST => {
            path == PATH_HEARTBEAT || relayed.map_or_else(|| write_to(broker.as_bytes()), write_to)
        }
        Method::GET => path == PATH_CHECKS && uri.query() == Some(own_checks.as_str()),
        _ => false,
    };
    (!allowed).then(|| {
        format!(
            "{method} {path}: a broker's link carries POST /write/{broker}, POST /write/<sender> \
             for `Strata-Source: {broker}/<sender>`, POST {PATH_HEARTBEAT} and \
             GET {PATH_CHECKS}?{own_checks} only"
        )
    })
}

async fn handle(inner: &Arc<Inner>, broker: &str, req: Request<Incoming>) -> Response<Body> {
    let now = now_ms();
    inner.update(broker, |l| l.last_contact_ms = now);
    let source = req.headers().get("strata-source").map(|s| s.as_bytes());
    if let Some(why) = refusal(broker, req.method(), req.uri(), source) {
        let body = serde_json::json!({ "error": why }).to_string();
        return h2::respond(403, body);
    }
    if req.uri().path() == PATH_HEARTBEAT {
        let records = header_u64(&req, H_BACKLOG_RECORDS).unwrap_or(0);
        let bytes = header_u64(&req, H_BACKLOG_BYTES).unwrap_or(0);
        inner.update(broker, |l| {
            l.backlog_records = records;
            l.backlog_bytes = bytes;
            if records == 0 {
                l.lag_s = 0.0;
            }
        });
        return h2::respond(200, "{}");
    }
    let made_ms = header_u64(&req, H_MADE_MS);
    let write = req.method() == Method::POST;
    let response = (inner.handler)(broker.to_owned(), req).await;
    if write && response.status().is_success() {
        inner.update(broker, |l| {
            l.records += 1;
            if let Some(made) = made_ms.filter(|m| *m >= l.newest_made_ms) {
                l.newest_made_ms = made;
                l.lag_s = now.saturating_sub(made) as f64 / 1000.0;
            }
        });
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(method: Method, uri: &str, source: Option<&str>) -> bool {
        let uri: hyper::Uri = uri.parse().unwrap();
        refusal("edge-1", &method, &uri, source.map(str::as_bytes)).is_some()
    }

    #[test]
    fn a_broker_writes_its_own_records_and_relays_under_its_prefix_only() {
        assert!(!refused(Method::POST, "/write/edge-1", Some("edge-1")));
        assert!(!refused(
            Method::POST,
            "/write/agent-a",
            Some("edge-1/agent-a")
        ));
        assert!(!refused(Method::POST, PATH_HEARTBEAT, Some("edge-1")));
        let checks = format!("{PATH_CHECKS}?broker=edge-1");
        assert!(!refused(Method::GET, &checks, None));
        // Another broker's name, another sender's check, an empty sender, another path.
        assert!(refused(Method::POST, "/write/edge-2", Some("edge-2")));
        assert!(refused(Method::POST, "/write/edge-1", Some("edge-2")));
        assert!(refused(
            Method::POST,
            "/write/agent-b",
            Some("edge-1/agent-a")
        ));
        assert!(refused(Method::POST, "/write/agent-a", Some("edge-1")));
        assert!(refused(Method::POST, "/write/", Some("edge-1/")));
        assert!(refused(Method::POST, "/write/x", Some("edge-1x/x")));
        assert!(refused(
            Method::GET,
            &format!("{PATH_CHECKS}?broker=edge-2"),
            None
        ));
        assert!(refused(Method::DELETE, "/write/edge-1", Some("edge-1")));
    }
}
