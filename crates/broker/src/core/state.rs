//! The core's broker registry, `<dir>/registry.json`: each link peer's id, certificate pin, who
//! dials, and the address when the core dials. Rewritten whole and atomically on every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::state;

/// Brokers (and reverse-mode agents) one core keeps a link to at most.
pub const LINK_PEERS_MAX: usize = 1024;

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
    /// The SHA-256 of its certificate (64 lowercase hex digits; `strata broker init` prints it).
    pub certificate_sha256: String,
    pub dial: Dial,
    /// `host:port` the core dials (with `dial: core`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// Every registered broker, as kept on disk.
pub struct Registry {
    path: PathBuf,
    pub brokers: BTreeMap<String, Registration>,
}

impl Registry {
    pub fn load(dir: &Path) -> Result<Registry, String> {
        let path = dir.join("registry.json");
        let brokers = state::load_json(&path)?.unwrap_or_default();
        Ok(Registry { path, brokers })
    }

    pub fn save(&self) -> Result<(), String> {
        state::save_json(&self.path, &self.brokers)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }

    /// The broker registered with this certificate fingerprint.
    pub fn broker_by_fingerprint(&self, fp: &str) -> Option<String> {
        self.brokers
            .iter()
            .find(|(_, r)| r.certificate_sha256 == fp)
            .map(|(id, _)| id.clone())
    }
}

/// Why a registration is refused (`None`: it is good), naming the field.
pub fn refusal(id: &str, r: &Registration) -> Option<String> {
    if !valid_broker_id(id) {
        return Some(format!(
            "`id`: `{id}` must be 1 to {} letters, digits or `-_.:@`",
            store::SOURCE_ID_BYTES_MAX
        ));
    }
    let fp = &r.certificate_sha256;
    if fp.len() != 64 || !fp.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(format!(
            "`certificate_sha256`: `{fp}` is not 64 hex digits (`strata broker init` prints it)"
        ));
    }
    match (r.dial, &r.address) {
        (Dial::Core, None) => Some("`address`: `dial: core` needs the broker's host:port".into()),
        (Dial::Core, Some(a)) if !a.contains(':') => {
            Some(format!("`address`: `{a}` is not host:port"))
        }
        (Dial::Broker, Some(_)) => {
            Some("`address`: only `dial: core` takes an address (the broker dials)".into())
        }
        _ => None,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn registrations_are_checked_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let fp = "ab".repeat(32);
        let good = Registration {
            certificate_sha256: fp.clone(),
            dial: Dial::Core,
            address: Some("10.0.0.1:7443".into()),
        };
        assert_eq!(refusal("edge-1", &good), None);
        let no_address = Registration {
            address: None,
            ..good.clone()
        };
        assert!(refusal("edge-1", &no_address).unwrap().contains("address"));
        let short = Registration {
            certificate_sha256: "abc".into(),
            ..good.clone()
        };
        assert!(refusal("edge-1", &short)
            .unwrap()
            .contains("certificate_sha256"));
        assert!(refusal("edge 1", &good).unwrap().contains("`id`"));
        let mut r = Registry::load(dir.path()).unwrap();
        r.brokers.insert("edge-1".into(), good.clone());
        r.save().unwrap();
        let back = Registry::load(dir.path()).unwrap();
        assert_eq!(back.brokers.get("edge-1"), Some(&good));
        assert_eq!(back.broker_by_fingerprint(&fp).as_deref(), Some("edge-1"));
    }
}
