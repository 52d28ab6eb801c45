//! Text chunks: (ms timestamp, string) of one series, stored on change.
//!
//! A sample whose string equals the previous stored one is dropped by the encoder, so a chunk
//! holds the changes only. Strings are UTF-8, each at most [`TEXT_SIZE_MAX`] bytes.

use super::bits::{get_varint, put_varint, BitReader, BitWriter};
use super::timestamps;
use super::{check_timestamps, frame_body, frame_finish, frame_start, read_count};
use super::{ChunkKind, DecodeError, EncodeError};

/// Longest text value, in bytes.
pub const TEXT_SIZE_MAX: usize = 64 * 1024;

/// The samples that differ from the sample before them (the first always counts).
pub fn changes<'a>(samples: &[(i64, &'a str)]) -> Vec<(i64, &'a str)> {
    let mut out: Vec<(i64, &str)> = Vec::with_capacity(samples.len());
    for &(ts, text) in samples {
        if out.last().is_none_or(|&(_, last)| last != text) {
            out.push((ts, text));
        }
    }
    out
}

/// Encodes the changes among `samples` (timestamps strictly increasing) into one chunk.
pub fn encode(samples: &[(i64, &str)]) -> Result<Vec<u8>, EncodeError> {
    check_timestamps(samples.iter().map(|s| s.0))?;
    if let Some(index) = samples.iter().position(|s| s.1.len() > TEXT_SIZE_MAX) {
        return Err(EncodeError::TextTooLong {
            index,
            size_bytes: samples[index].1.len(),
        });
    }
    let stored = changes(samples);
    let ts_ms: Vec<i64> = stored.iter().map(|s| s.0).collect();
    let mut out = frame_start(ChunkKind::Text);
    put_varint(&mut out, stored.len() as u64);
    let header = timestamps::write_header(&mut out, &ts_ms);
    for (_, text) in &stored {
        put_varint(&mut out, text.len() as u64);
        out.extend_from_slice(text.as_bytes());
    }
    let mut w = BitWriter::new();
    timestamps::write_bits(&mut w, &ts_ms, header);
    out.extend_from_slice(&w.finish());
    Ok(frame_finish(out))
}

/// Decodes one chunk; never panics, allocation bounded by the input length.
pub fn decode(bytes: &[u8]) -> Result<Vec<(i64, String)>, DecodeError> {
    let body = frame_body(bytes, ChunkKind::Text)?;
    let mut pos = 0;
    // Every sample costs at least its one-byte length.
    let count = read_count(body, &mut pos, 8)?;
    let header = timestamps::read_header(body, &mut pos, count)?;
    let mut texts = Vec::with_capacity(count);
    for _ in 0..count {
        let len_offset = pos;
        let len = get_varint(body, &mut pos)?;
        let invalid = |what| DecodeError::Invalid {
            bit_offset: len_offset as u64 * 8,
            what,
        };
        if len > TEXT_SIZE_MAX as u64 || len > (body.len() - pos) as u64 {
            return Err(invalid("text length"));
        }
        let raw = &body[pos..pos + len as usize];
        pos += len as usize;
        let text = std::str::from_utf8(raw).map_err(|_| invalid("text not UTF-8"))?;
        if texts.last().is_some_and(|last: &String| last == text) {
            return Err(invalid("text repeats the previous one"));
        }
        texts.push(text.to_string());
    }
    let mut r = BitReader::new(&body[pos..]);
    let ts_ms = timestamps::read_bits(&mut r, header, count)?;
    r.finish()?;
    Ok(ts_ms.into_iter().zip(texts).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::repair_frame;
    use proptest::prelude::*;

    #[test]
    fn stores_changes_only() {
        let samples = [
            (1, "up"),
            (2, "up"),
            (3, "down"),
            (4, ""),
            (5, ""),
            (9, "up"),
        ];
        let back = decode(&encode(&samples).unwrap()).unwrap();
        let want: Vec<(i64, String)> = [(1, "up"), (3, "down"), (4, ""), (9, "up")]
            .iter()
            .map(|&(t, s)| (t, s.to_string()))
            .collect();
        assert_eq!(back, want);
    }

    #[test]
    fn rejects_bad_input() {
        let long = "x".repeat(TEXT_SIZE_MAX + 1);
        assert_eq!(
            encode(&[(1, "a"), (2, long.as_str())]),
            Err(EncodeError::TextTooLong {
                index: 1,
                size_bytes: TEXT_SIZE_MAX + 1
            })
        );
        assert_eq!(encode(&[]), Err(EncodeError::Empty));
    }

    proptest! {
        #[test]
        fn arbitrary_texts_round_trip(
            ts in proptest::collection::btree_set(any::<i64>(), 1..40),
            texts in proptest::collection::vec(prop_oneof!["\\PC{0,12}", "[ab]{0,1}"], 40),
        ) {
            let samples: Vec<(i64, &str)> = ts.iter().zip(&texts).map(|(&t, s)| (t, s.as_str())).collect();
            let back = decode(&encode(&samples).unwrap()).unwrap();
            let want: Vec<(i64, String)> = changes(&samples).into_iter().map(|(t, s)| (t, s.to_string())).collect();
            prop_assert_eq!(back, want);
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
            let _ = decode(&repair_frame(bytes, ChunkKind::Text));
        }
    }
}
