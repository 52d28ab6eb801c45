//! The sender identity of an ingest request: `Strata-Source`, `Strata-Epoch` and
//! `Strata-Sequence` headers (`FORMAT.md`, "Exactly-once writes"). A request that names all three
//! is applied once however often it is delivered; one that names none behaves as before; one
//! that names some, or malformed ones, is refused before its body is read.

use axum::http::HeaderMap;
use store::{Origin, SourceId};

pub const SOURCE_HEADER: &str = "strata-source";
pub const EPOCH_HEADER: &str = "strata-epoch";
pub const SEQUENCE_HEADER: &str = "strata-sequence";
/// Set (to `true`) on the answer to a request whose batch was applied before.
pub const DUPLICATE_HEADER: &str = "strata-duplicate";

/// The origin a request names, if any; `Err` says which header is wrong and why.
pub fn from_headers(headers: &HeaderMap, received_ms: i64) -> Result<Option<Origin>, String> {
    let text = |name: &str| -> Result<Option<&str>, String> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.trim()))
                .map_err(|_| format!("header {name} is not printable ASCII")),
        }
    };
    let number = |name: &str| -> Result<Option<u64>, String> {
        match text(name)? {
            None => Ok(None),
            Some(s) => s.parse::<u64>().map(Some).map_err(|_| {
                format!("header {name} must be a whole number from 0 to 2^64-1, got `{s}`")
            }),
        }
    };
    let source = text(SOURCE_HEADER)?;
    let epoch = number(EPOCH_HEADER)?;
    let seq = number(SEQUENCE_HEADER)?;
    match (source, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(source), Some(epoch), Some(seq)) => {
            let source =
                SourceId::new(source).map_err(|e| format!("header {SOURCE_HEADER}: {e}"))?;
            Ok(Some(Origin {
                source,
                epoch,
                seq,
                received_ms,
            }))
        }
        _ => Err(format!(
            "headers {SOURCE_HEADER}, {EPOCH_HEADER} and {SEQUENCE_HEADER} go together: \
             send all three or none"
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn all_three_or_none() {
        assert_eq!(from_headers(&HeaderMap::new(), 5), Ok(None));
        let o = from_headers(
            &headers(&[
                ("strata-source", "broker-1"),
                ("strata-epoch", "3"),
                ("strata-sequence", "18446744073709551615"),
            ]),
            5,
        )
        .unwrap()
        .unwrap();
        assert_eq!(o.source.as_str(), "broker-1");
        assert_eq!((o.epoch, o.seq, o.received_ms), (3, u64::MAX, 5));
        let partial = from_headers(&headers(&[("strata-source", "a")]), 0).unwrap_err();
        assert!(partial.contains("go together"), "{partial}");
        let bad = from_headers(
            &headers(&[
                ("strata-source", "a"),
                ("strata-epoch", "-1"),
                ("strata-sequence", "1"),
            ]),
            0,
        )
        .unwrap_err();
        assert!(bad.contains("strata-epoch"), "{bad}");
        let long = "x".repeat(65);
        let bad = from_headers(
            &headers(&[
                ("strata-source", &long),
                ("strata-epoch", "1"),
                ("strata-sequence", "1"),
            ]),
            0,
        )
        .unwrap_err();
        assert!(bad.contains("at most 64"), "{bad}");
    }
}
