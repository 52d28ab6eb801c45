//! `strata observe`'s settings: flags or a TOML file (flags win), with their bounds checked.

use serde::Deserialize;

use crate::Protocol;

/// Most `--wire` entries (the kernel filter tests each port).
pub const WIRES_MAX: usize = capture::bpf::PORTS_MAX;

#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Interface to capture on (`lo`, `eth0`).
    pub iface: Option<String>,
    /// A pcap file to read instead of capturing.
    pub read: Option<String>,
    /// `proto:port` entries: `http:8080`, `postgres:5432`, `redis:6379`, `mysql:3306`,
    /// `kafka:9092`, `cassandra:9042`.
    #[serde(default)]
    pub wire: Vec<String>,
    /// The core's base URL; without one, documents are printed to standard output.
    pub core: Option<String>,
    /// A file holding the httptrap secret.
    pub token_file: Option<String>,
    /// A file holding the core's bearer token (`Authorization: Bearer`), for a core started
    /// with `auth.token`.
    pub core_token_file: Option<String>,
    /// The httptrap check the documents are written as (the `__check` tag); default `observe`.
    pub check: Option<String>,
    /// Seconds per period.
    pub period_s: Option<u64>,
    /// HTTP routes, `NAME=PATTERN`.
    #[serde(default)]
    pub route: Vec<String>,
    /// Distinct values per tag category, port and period.
    pub tag_values_max: Option<usize>,
    /// Ring size in MiB (live capture).
    pub ring_mib: Option<u32>,
    /// Stop after this many seconds (live capture); run until interrupted otherwise.
    pub duration_s: Option<u64>,
}

/// `proto:port` → the pair.
pub fn parse_wire(s: &str) -> Result<(Protocol, u16), String> {
    let (p, port) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected PROTO:PORT"))?;
    let proto = Protocol::from_name(p).ok_or_else(|| {
        format!("`{p}`: not a protocol (http, postgres, redis, mysql, kafka, cassandra)")
    })?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}`: not a port number"))?;
    if port == 0 {
        return Err("port 0 cannot be observed".into());
    }
    Ok((proto, port))
}

impl Config {
    /// The wires, checked.
    pub fn wires(&self) -> Result<Vec<(Protocol, u16)>, String> {
        if self.wire.is_empty() {
            return Err("give at least one --wire PROTO:PORT".into());
        }
        if self.wire.len() > WIRES_MAX {
            return Err(format!("at most {WIRES_MAX} wires"));
        }
        let wires: Vec<_> = self
            .wire
            .iter()
            .map(|w| parse_wire(w))
            .collect::<Result<_, _>>()?;
        for (i, w) in wires.iter().enumerate() {
            if wires[..i].iter().any(|o| o.1 == w.1) {
                return Err(format!("port {} is given twice", w.1));
            }
        }
        Ok(wires)
    }

    /// Flags over file: every field set in `flags` replaces the file's.
    pub fn merged(file: Config, flags: Config) -> Config {
        Config {
            iface: flags.iface.or(file.iface),
            read: flags.read.or(file.read),
            wire: if flags.wire.is_empty() {
                file.wire
            } else {
                flags.wire
            },
            core: flags.core.or(file.core),
            token_file: flags.token_file.or(file.token_file),
            core_token_file: flags.core_token_file.or(file.core_token_file),
            check: flags.check.or(file.check),
            period_s: flags.period_s.or(file.period_s),
            route: if flags.route.is_empty() {
                file.route
            } else {
                flags.route
            },
            tag_values_max: flags.tag_values_max.or(file.tag_values_max),
            ring_mib: flags.ring_mib.or(file.ring_mib),
            duration_s: flags.duration_s.or(file.duration_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wires() {
        assert_eq!(parse_wire("http:8080").unwrap(), (Protocol::Http, 8080));
        assert!(parse_wire("gopher:70").is_err());
        assert!(parse_wire("http").is_err());
        assert!(parse_wire("http:0").is_err());
        let c = Config {
            wire: vec!["http:1".into(), "redis:1".into()],
            ..Config::default()
        };
        assert!(c.wires().is_err());
    }
}
