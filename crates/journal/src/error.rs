//! Typed errors. Callers match on these: `NoSpace` is back-pressure, `Poisoned` means reopen,
//! `Corrupt` names exactly where the damage is.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// Damaged bytes: `segment` is the segment's base offset, `offset` the byte position in its file.
    Corrupt {
        segment: u64,
        offset: u64,
        reason: String,
    },
    /// The disk is full. Nothing was acknowledged for the failed records; retry later.
    NoSpace,
    /// An earlier sync or write failed; nothing more is accepted until the journal is reopened.
    Poisoned,
    /// Another process holds the writer lock.
    Locked,
    /// The journal was closed while the operation waited.
    Closed,
    /// A record does not fit in one segment.
    RecordTooLarge {
        size_bytes: u64,
        size_bytes_max: u64,
    },
    /// A segment was written by a format version this code cannot read.
    UnsupportedVersion {
        segment: u64,
        version: u16,
    },
    /// The offset is not in the retained range `[earliest, committed]`.
    NotRetained {
        offset: u64,
        earliest: u64,
        committed: u64,
    },
    SubscriberExists(String),
    NoSuchSubscriber(String),
    InvalidName(String),
    InvalidOptions(&'static str),
    Io(io::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Classifies an I/O error: ENOSPC becomes `NoSpace`, everything else stays `Io`.
    pub fn from_io(e: io::Error) -> Error {
        if e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == io::ErrorKind::StorageFull {
            Error::NoSpace
        } else {
            Error::Io(e)
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::from_io(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt {
                segment,
                offset,
                reason,
            } => {
                write!(
                    f,
                    "corrupt data in segment {segment} at byte {offset}: {reason}"
                )
            }
            Error::NoSpace => write!(f, "no space left on device"),
            Error::Poisoned => write!(f, "journal poisoned by an earlier I/O error; reopen it"),
            Error::Locked => write!(f, "another process holds the journal's writer lock"),
            Error::Closed => write!(f, "journal closed"),
            Error::RecordTooLarge {
                size_bytes,
                size_bytes_max,
            } => {
                write!(
                    f,
                    "record of {size_bytes} bytes exceeds the maximum {size_bytes_max}"
                )
            }
            Error::UnsupportedVersion { segment, version } => {
                write!(
                    f,
                    "segment {segment} has unsupported format version {version}"
                )
            }
            Error::NotRetained {
                offset,
                earliest,
                committed,
            } => {
                write!(
                    f,
                    "offset {offset} is outside the retained range [{earliest}, {committed}]"
                )
            }
            Error::SubscriberExists(n) => write!(f, "subscriber {n:?} already exists"),
            Error::NoSuchSubscriber(n) => write!(f, "no subscriber named {n:?}"),
            Error::InvalidName(n) => write!(f, "invalid subscriber name {n:?}"),
            Error::InvalidOptions(why) => write!(f, "invalid options: {why}"),
            Error::Io(e) => write!(f, "I/O error: {e}"),
        }
    }
}

impl std::error::Error for Error {}
