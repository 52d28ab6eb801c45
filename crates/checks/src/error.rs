//! Why a check cannot run at all. A service that fails is measured, never an error.

use std::fmt;

/// A spec that cannot run: a field that is wrong, or something the machine refuses (a CA file
/// that cannot be read, no ICMP socket). Displayed as a sentence naming the field or the cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// A field of the spec is invalid. `field` is its path, e.g. `timeout_ms` or
    /// `config.method`.
    Field { field: String, reason: String },
    /// The spec is valid but cannot run on this machine; `reason` says why and what to change.
    Setup { reason: String },
}

impl CheckError {
    pub(crate) fn field(field: impl Into<String>, reason: impl Into<String>) -> CheckError {
        CheckError::Field {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn setup(reason: impl Into<String>) -> CheckError {
        CheckError::Setup {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Field { field, reason } => write!(f, "`{field}`: {reason}"),
            CheckError::Setup { reason } => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for CheckError {}

/// A socket error as a status a person reads.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connect refused".to_owned(),
        K::ConnectionReset => "connection reset by the server".to_owned(),
        K::ConnectionAborted => "connection aborted".to_owned(),
        K::UnexpectedEof => "the server closed the connection early".to_owned(),
        K::TimedOut => "timed out".to_owned(),
        K::HostUnreachable => "host unreachable".to_owned(),
        K::NetworkUnreachable => "network unreachable".to_owned(),
        K::AddrNotAvailable => "address not available".to_owned(),
        _ => e.to_string(),
    }
}
