//! Typed errors. Each names what was wrong and where, so callers can report it verbatim.

use std::fmt;

/// The binary or base64 form could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside the header or a bin.
    Truncated {
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// A bin's count-width byte is above 7 (counts are 1 to 8 bytes).
    BadCountWidth { offset: usize, width: u8 },
    /// Bytes follow the last declared bin.
    TrailingBytes { offset: usize, len: usize },
    /// A character outside the base64 alphabet, or malformed padding.
    Base64 { position: usize },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated {
                offset,
                needed,
                available,
            } => write!(
                f,
                "histogram truncated at byte {offset}: needs {needed} more bytes, {available} left"
            ),
            DecodeError::BadCountWidth { offset, width } => {
                write!(
                    f,
                    "histogram bin at byte {offset} has count width {width} (must be 0..=7)"
                )
            }
            DecodeError::TrailingBytes { offset, len } => {
                write!(
                    f,
                    "histogram ends at byte {offset} but input has {len} bytes"
                )
            }
            DecodeError::Base64 { position } => {
                write!(f, "invalid base64 at character {position}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// A text form (`H[1.2e-03]=5`, `+12e-004=5`, `{"0.0012":5}`) could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextError {
    /// Byte position in the input where the problem starts.
    pub position: usize,
    /// What was expected there.
    pub expected: &'static str,
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "histogram text: expected {} at byte {}",
            self.expected, self.position
        )
    }
}

impl std::error::Error for TextError {}

/// A quantile or threshold list was not acceptable.
#[derive(Clone, Debug, PartialEq)]
pub enum QuantileError {
    /// Requests must be in ascending order; this index is smaller than the one before it.
    NotSorted { index: usize },
    /// Quantiles must lie in [0, 1].
    OutOfRange { index: usize, value: f64 },
}

impl fmt::Display for QuantileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuantileError::NotSorted { index } => {
                write!(
                    f,
                    "request {index} is smaller than the one before it (must be sorted)"
                )
            }
            QuantileError::OutOfRange { index, value } => {
                write!(f, "quantile {index} is {value}, outside [0, 1]")
            }
        }
    }
}

impl std::error::Error for QuantileError {}
