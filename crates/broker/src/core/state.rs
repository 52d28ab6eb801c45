//! What the core keeps about brokers, in `<data_dir>/brokers/`: the registry (each broker's id,
//! certificate pin and who dials) and the checks defined on the core (each assigned to a
//! broker). Both are rewritten whole and atomically on every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use checks::CheckSpec;
use serde::{Deserialize, Serialize};

use crate::state;

/// Brokers one core keeps a link to at most.
pub const LINK_PEERS_MAX: usize = 1024;
/// Checks defined on one core at most.
pub const CORE_CHECKS_MAX: usize = 1_000_000;

/// Who opens a broker's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dial {
    /// The broker dials the core's link listener.
    Broker,
    /// The core dials the broker's `address`.
    Core,
}

impl Dial {
    pub fn name(self) -> &'static str {
        match self {
            Dial::Broker => "broker",
            Dial::Core => "core",
        }
    }
}

/// One registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The SHA-256 of its certificate (hex; `strata broker init` prints it).
    pub certificate_sha256: String,
    pub dial: Dial,
    /// `host:port` the core dials (with `dial: core`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// A check defined on the core: the spec and the broker that runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assigned {
    pub broker: String,
    #[serde(flatten)]
    pub spec: CheckSpec,
}

/// Every registered broker and every check, as kept on disk.
pub struct CoreState {
    dir: PathBuf,
    pub brokers: BTreeMap<String, Registration>,
    pub checks: BTreeMap<String, Assigned>,
}

impl CoreState {
    pub fn load(dir: &Path) -> Result<CoreState, String> {
        Ok(CoreState {
            dir: dir.to_owned(),
            brokers: state::load_json(&dir.join("registry.json"))?.unwrap_or_default(),
            checks: state::load_json(&dir.join("checks.json"))?.unwrap_or_default(),
        })
    }

    pub fn save_brokers(&self) -> Result<(), String> {
        let p = self.dir.join("registry.json");
        state::save_json(&p, &self.brokers).map_err(|e| format!("{}: {e}", p.display()))
    }

    pub fn save_checks(&self) -> Result<(), String> {
        let p = self.dir.join("checks.json");
        state::save_json(&p, &self.checks).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// The broker registered with this certificate fingerprint.
    pub fn broker_by_fingerprint(&self, fp: &str) -> Option<String> {
        self.brokers
            .iter()
            .find(|(_, r)| crate::tls::normalize(&r.certificate_sha256) == fp)
            .map(|(id, _)| id.clone())
    }

    /// The checks assigned to one broker.
    pub fn checks_of(&self, broker: &str) -> Vec<CheckSpec> {
        self.checks
            .values()
            .filter(|a| a.broker == broker)
            .map(|a| a.spec.clone())
            .collect()
    }
}

/// A broker id as the API takes it: what a store source id may be (printable ASCII, no
/// spaces) and a path segment can carry.
pub fn valid_broker_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= store::SOURCE_ID_BYTES_MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b))
}
