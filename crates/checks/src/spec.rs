//! The check spec and its validation: the common fields here, each kind's target and `config`
//! in its own module, read once into a typed form the run uses.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::CheckError;

/// Longest check id, in bytes.
pub const ID_BYTES_MAX: usize = 128;
/// Shortest and longest period between runs.
pub const PERIOD_MS_MIN: u64 = 1_000;
pub const PERIOD_MS_MAX: u64 = 300_000;
/// Most tags a spec adds to its measurements (the ingest bound on tags per sample, less room
/// for a measurement's own tags).
pub const TAGS_MAX: usize = 32;
/// Longest tag category or value, in bytes (the ingest bound).
pub const TAG_BYTES_MAX: usize = 1024;
/// Longest target, in bytes.
pub const TARGET_BYTES_MAX: usize = 4096;

/// One check: what to measure, how often, and with what limits. Read from JSON or TOML.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckSpec {
    /// Stable id, 1..=128 bytes.
    pub id: String,
    /// "http" | "https" | "tcp" | "dns" | "ping" | "json" | "prometheus" | "postgres" |
    /// "redis" | "nrpe".
    pub kind: String,
    /// host:port, URL, … as the kind defines (`README.md`).
    pub target: String,
    /// 1_000 ..= 300_000.
    pub period_ms: u64,
    /// How long one run may take, at most `period_ms`.
    pub timeout_ms: u64,
    /// Kind-specific options, validated (unknown keys are errors).
    #[serde(default)]
    pub config: serde_json::Value,
    /// Stream tags added to every measurement.
    #[serde(default)]
    pub tags: Vec<(String, String)>,
}

pub(crate) fn check_common(spec: &CheckSpec) -> Result<(), CheckError> {
    if spec.id.is_empty() || spec.id.len() > ID_BYTES_MAX {
        let n = spec.id.len();
        return Err(CheckError::field(
            "id",
            format!("must be 1 to {ID_BYTES_MAX} bytes, is {n}"),
        ));
    }
    if spec.target.is_empty() || spec.target.len() > TARGET_BYTES_MAX {
        let n = spec.target.len();
        return Err(CheckError::field(
            "target",
            format!("must be 1 to {TARGET_BYTES_MAX} bytes, is {n}"),
        ));
    }
    if !(PERIOD_MS_MIN..=PERIOD_MS_MAX).contains(&spec.period_ms) {
        return Err(CheckError::field(
            "period_ms",
            format!(
                "must be {PERIOD_MS_MIN} to {PERIOD_MS_MAX} ms, is {}",
                spec.period_ms
            ),
        ));
    }
    if spec.timeout_ms == 0 || spec.timeout_ms > spec.period_ms {
        return Err(CheckError::field(
            "timeout_ms",
            format!(
                "must be 1 ms to period_ms ({} ms), is {}",
                spec.period_ms, spec.timeout_ms
            ),
        ));
    }
    check_tags(&spec.tags)
}

fn check_tags(tags: &[(String, String)]) -> Result<(), CheckError> {
    if tags.len() > TAGS_MAX {
        return Err(CheckError::field(
            "tags",
            format!("at most {TAGS_MAX} tags, got {}", tags.len()),
        ));
    }
    for (i, (category, value)) in tags.iter().enumerate() {
        if category.is_empty() || category.len() > TAG_BYTES_MAX || value.len() > TAG_BYTES_MAX {
            return Err(CheckError::field(
                format!("tags[{i}]"),
                format!("a category of 1 to {TAG_BYTES_MAX} bytes and a value of at most {TAG_BYTES_MAX}"),
            ));
        }
    }
    Ok(())
}

/// Reads `config` into a kind's options (`null` reads as `{}`); unknown keys are refused.
pub(crate) fn options<T: DeserializeOwned + Default>(spec: &CheckSpec) -> Result<T, CheckError> {
    if spec.config.is_null() {
        return Ok(T::default());
    }
    if !spec.config.is_object() {
        return Err(CheckError::field("config", "must be an object of options"));
    }
    T::deserialize(&spec.config).map_err(|e| CheckError::field("config", e.to_string()))
}

/// A `host:port` target (`[v6]:port` for IPv6 literals; `default_port` when none is given).
pub(crate) fn host_port(
    target: &str,
    default_port: Option<u16>,
) -> Result<(String, u16), CheckError> {
    let bad = |why: &str| CheckError::field("target", format!("\"{}\": {why}", excerpt(target)));
    let (host, port) = if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| bad("unclosed `[`"))?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(bad("expected `:port` after `]`")),
        }
    } else {
        match target.rsplit_once(':') {
            // Two colons or more without brackets is a bare IPv6 address.
            Some((h, _)) if h.contains(':') => (target, None),
            Some((h, p)) => (h, Some(p)),
            None => (target, None),
        }
    };
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
        return Err(bad("expected a host name or address"));
    }
    let port = match (port, default_port) {
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| bad("port must be 1 to 65535"))?,
        (None, Some(p)) => p,
        (None, None) => return Err(bad("expected host:port")),
    };
    Ok((host.to_owned(), port))
}

/// Longest excerpt of user input quoted back in an error.
const EXCERPT_BYTES_MAX: usize = 80;

/// User input quoted in a message, cut at a character boundary.
pub(crate) fn excerpt(text: &str) -> String {
    if text.len() <= EXCERPT_BYTES_MAX {
        return text.to_owned();
    }
    let mut end = EXCERPT_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// A regex option, compiled with a size limit so a spec cannot ask for a huge automaton.
pub(crate) fn regex(field: &str, pattern: &str) -> Result<regex::bytes::Regex, CheckError> {
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| CheckError::field(format!("config.{field}"), regex_reason(&e)))
}

fn regex_reason(e: &regex::Error) -> String {
    match e {
        regex::Error::CompiledTooBig(_) => "the pattern is too large".to_owned(),
        // The syntax error's Display is a readable, multi-line caret diagram.
        other => format!("not a valid pattern: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(host_port("a:1", None).unwrap(), ("a".into(), 1));
        assert_eq!(host_port("[::1]:53", None).unwrap(), ("::1".into(), 53));
        assert_eq!(host_port("::1", Some(7)).unwrap(), ("::1".into(), 7));
        assert_eq!(host_port("[::1]", Some(7)).unwrap(), ("::1".into(), 7));
        assert_eq!(host_port("h", Some(9)).unwrap(), ("h".into(), 9));
        assert!(host_port("h", None).is_err());
        assert!(host_port("h:0", None).is_err());
        assert!(host_port("h:99999", None).is_err());
        assert!(host_port(":80", None).is_err());
    }
}
