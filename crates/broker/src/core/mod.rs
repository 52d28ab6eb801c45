//! The core's side of brokers: the registry and the checks defined on the core (`state`), the
//! links — dialling brokers that wait for the core, accepting dials from brokers that make
//! them — and on each link the pull of the broker's journal into the store (`link`, `write`),
//! and the HTTP API for both (`api`). `strata serve` starts a [`Hub`] and mounts its router.

mod api;
mod link;
pub mod state;
pub mod write;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::tls::{self, Identity};
use state::CoreState;

/// How a core runs its side of the broker links.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// Where the core keeps its link identity, registry and checks (`<data_dir>/brokers`).
    pub dir: PathBuf,
    /// This core's name: the broker keeps a checkpoint under it.
    pub name: String,
    /// Accept broker dials here (`None`: only dial).
    pub listen: Option<SocketAddr>,
}

/// One broker as the API shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BrokerStatus {
    pub id: String,
    pub dial: String,
    pub connected: bool,
    /// Last request answered on its link (ms since the epoch; 0: never).
    pub last_contact_ms: u64,
    /// Records the broker holds that this core has not written yet, and their segments' bytes.
    pub backlog_records: u64,
    pub backlog_bytes: u64,
    /// Age of the newest record written, when it was written (0 when nothing is waiting).
    pub lag_ms: u64,
    pub epoch: u64,
    /// Next record this core reads.
    pub next: u64,
    pub records_written: u64,
    pub records_duplicate: u64,
    pub records_skipped: u64,
    pub samples_written: u64,
    pub samples_rejected: u64,
    /// Records the broker dropped under its disk budget (its count, for every core).
    pub dropped_records: u64,
    pub checks: usize,
    pub last_error: Option<String>,
}

pub(crate) struct HubInner {
    pub config: HubConfig,
    pub store: Arc<Store>,
    pub identity: Identity,
    pub fingerprint: String,
    pub state: Mutex<CoreState>,
    /// Bumped on every change of checks or registrations: links push again, dialers restart.
    pub changed: watch::Sender<u64>,
    pub status: Mutex<HashMap<String, BrokerStatus>>,
    /// Per broker, the newest link's number: an older link still running stops.
    pub generation: Mutex<HashMap<String, u64>>,
    pub dialers: Mutex<HashMap<String, (state::Registration, JoinHandle<()>)>>,
}

/// The core's broker links. Dropping it stops them.
pub struct Hub {
    inner: Arc<HubInner>,
    tasks: Vec<JoinHandle<()>>,
    pub listen: Option<SocketAddr>,
}

impl Hub {
    /// Loads (or makes) the identity, registry and checks, and starts the links. Inside a
    /// tokio runtime.
    pub async fn start(config: HubConfig, store: Arc<Store>) -> Result<Hub, String> {
        std::fs::create_dir_all(&config.dir)
            .map_err(|e| format!("{}: {e}", config.dir.display()))?;
        let identity = tls::load_or_generate(&config.dir, "core", &config.name)?;
        let fingerprint = identity.fingerprint()?;
        let state = CoreState::load(&config.dir)?;
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(HubInner {
            config: config.clone(),
            store,
            identity,
            fingerprint,
            state: Mutex::new(state),
            changed,
            status: Mutex::new(HashMap::new()),
            generation: Mutex::new(HashMap::new()),
            dialers: Mutex::new(HashMap::new()),
        });
        let mut tasks = Vec::new();
        let mut listen = None;
        if let Some(addr) = config.listen {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("broker link listener {addr}: {e}"))?;
            listen = l.local_addr().ok();
            tasks.push(tokio::spawn(link::accept_loop(inner.clone(), l)));
        }
        tasks.push(tokio::spawn(link::dialers(inner.clone())));
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

    /// `/api/strata/v1/checks…` and `/api/strata/v1/brokers…`.
    pub fn router(&self) -> axum::Router {
        api::router(self.inner.clone())
    }

    /// Every registered broker's status.
    pub fn brokers(&self) -> Vec<BrokerStatus> {
        api::statuses(&self.inner)
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let dialers = self.inner.dialers.lock().unwrap_or_else(|e| e.into_inner());
        for (_, t) in dialers.values() {
            t.abort();
        }
    }
}

impl HubInner {
    pub fn notify_changed(&self) {
        self.changed.send_modify(|g| *g += 1);
    }

    pub fn update_status(&self, broker: &str, f: impl FnOnce(&mut BrokerStatus)) {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let entry = s.entry(broker.to_owned()).or_insert_with(|| BrokerStatus {
            id: broker.to_owned(),
            ..BrokerStatus::default()
        });
        f(entry);
    }
}
