//! Line handling shared by the line protocols: splitting (statsd, Graphite; Influx splits with
//! quote awareness itself) on `\n` or `\r\n`, a missing final newline accepted, each line
//! checked for UTF-8 on its own, and `line N, column C` locations.

use crate::batch::Reason;

/// The lines of `input`, numbered from 1, without their `\n` / `\r\n`.
pub(crate) fn lines(input: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    input
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// The line as text, or the position of its first byte that is not UTF-8.
pub(crate) fn utf8(line: &[u8]) -> Result<&str, LineError> {
    std::str::from_utf8(line).map_err(|e| (e.valid_up_to(), Reason::InvalidUtf8))
}

/// "line 7, column 12" for a 0-based byte offset in the line.
pub(crate) fn at(line_no: usize, offset: usize) -> String {
    format!("line {line_no}, column {}", offset + 1)
}

/// A line-level failure: the 0-based byte offset where it was found and why.
pub(crate) type LineError = (usize, Reason);

/// Byte offset of `part` (a subslice of `line`) within `line`.
pub(crate) fn offset_in(line: &str, part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(line.as_ptr() as usize)
}

/// A finite f64, or the reason it is not one.
pub(crate) fn finite(text: &str) -> Result<f64, Reason> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(Reason::bad_value("a finite number", text)),
    }
}
