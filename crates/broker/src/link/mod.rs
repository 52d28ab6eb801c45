//! The link between a broker and a core: HTTP/2 over one mutually authenticated TLS
//! connection, the core always the HTTP client and the broker always the HTTP server, whichever
//! side dialled. Paths, headers and the records body: `FORMAT.md`, "Link".

pub mod h2;
pub mod serve;

use serde::{Deserialize, Serialize};

/// Longest body of one records response (at least one record is sent, however large).
pub const FETCH_BYTES_MAX: usize = 4 << 20;
/// Longest a records request waits for new records.
pub const FETCH_WAIT_MS_MAX: u64 = 10_000;
/// Longest configuration push (a full checks list).
pub const CONFIG_BYTES_MAX: usize = 16 << 20;
/// Concurrent HTTP/2 streams on one link.
pub const LINK_STREAMS_MAX: u32 = 32;
/// HTTP/2 PING every this often, and the connection dropped when one is unanswered this long.
pub const PING_INTERVAL_S: u64 = 10;
pub const PING_TIMEOUT_S: u64 = 20;

pub const PATH_HELLO: &str = "/link/v1/hello";
pub const PATH_RECORDS: &str = "/link/v1/records";
pub const PATH_ACK: &str = "/link/v1/ack";
pub const PATH_CHECKS: &str = "/link/v1/checks";

/// Response headers of a records fetch.
pub const H_FIRST: &str = "strata-first";
pub const H_COMMITTED: &str = "strata-committed";
pub const H_DROPPED: &str = "strata-dropped-records";
pub const H_BACKLOG_BYTES: &str = "strata-backlog-bytes";

/// The broker's answer to hello: who it is and where its journal stands for this core.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hello {
    pub broker: String,
    pub epoch: u64,
    pub earliest: u64,
    pub committed: u64,
    /// This core's checkpoint: where its pull resumes.
    pub checkpoint: u64,
}

/// A configuration push: every check the core assigns to this broker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChecksPush {
    pub checks: Vec<checks::CheckSpec>,
}

/// What the broker made of a push.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChecksApplied {
    pub checks: usize,
    /// Specs refused, each "id: why".
    pub errors: Vec<String>,
}

/// Appends one record to a records body.
pub fn put_record(out: &mut Vec<u8>, offset: u64, payload: &[u8]) {
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Splits a records body into (offset, payload) pairs, refusing a cut or overlong one.
pub fn records(body: &[u8]) -> Result<Vec<(u64, &[u8])>, String> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        if rest.len() < 12 {
            return Err("records body cut inside a record header".to_owned());
        }
        let mut o = [0u8; 8];
        o.copy_from_slice(&rest[..8]);
        let mut l = [0u8; 4];
        l.copy_from_slice(&rest[8..12]);
        let len = u32::from_le_bytes(l) as usize;
        if rest.len() - 12 < len {
            return Err("records body cut inside a record".to_owned());
        }
        out.push((u64::from_le_bytes(o), &rest[12..12 + len]));
        rest = &rest[12 + len..];
    }
    Ok(out)
}

/// A core name as a link query carries it: what a journal subscriber name may hold.
pub fn valid_core_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        && !name.starts_with('.')
}
