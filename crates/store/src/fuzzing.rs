//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`), so CI runs the checked-in corpus through exactly the code the fuzzer
//! exercises. Each must never panic on any input; each checks what a decoder accepts.

use crate::encode::{self, ChunkKind};
use crate::index;
use crate::key::StreamKey;
use crate::tagquery::TagQuery;

/// The input as a chunk of `kind`, as is and with its frame repaired (version, kind, checksum),
/// so the fuzzer reaches the body decoders rather than stopping at the checksum.
fn framings(data: &[u8], kind: ChunkKind) -> [Vec<u8>; 2] {
    [data.to_vec(), encode::repair_frame(data.to_vec(), kind)]
}

/// Numeric chunk decoder: accepted chunks have increasing timestamps and re-encode to the same
/// samples bit for bit.
pub fn numeric_chunk(data: &[u8]) {
    for bytes in framings(data, ChunkKind::Numeric) {
        let Ok(samples) = encode::numeric::decode(&bytes) else {
            continue;
        };
        assert!(samples.windows(2).all(|p| p[0].0 < p[1].0));
        let again = encode::numeric::decode(&encode::numeric::encode(&samples).unwrap_or_default());
        let again = again.unwrap_or_default();
        assert_eq!(again.len(), samples.len());
        for (a, b) in samples.iter().zip(&again) {
            assert_eq!((a.0, a.1.to_bits()), (b.0, b.1.to_bits()));
        }
    }
}

/// Text chunk decoder: accepted chunks hold changes only and re-encode to the same texts.
pub fn text_chunk(data: &[u8]) {
    for bytes in framings(data, ChunkKind::Text) {
        let Ok(samples) = encode::text::decode(&bytes) else {
            continue;
        };
        let borrowed: Vec<(i64, &str)> = samples.iter().map(|(t, s)| (*t, s.as_str())).collect();
        let again = encode::text::encode(&borrowed).map(|b| encode::text::decode(&b));
        assert_eq!(again, Ok(Ok(samples)));
    }
}

/// Histogram chunk decoder: accepted chunks hold valid histograms and re-encode exactly.
pub fn histogram_chunk(data: &[u8]) {
    for bytes in framings(data, ChunkKind::Histogram) {
        let Ok(periods) = encode::histogram::decode(&bytes) else {
            continue;
        };
        for (_, h) in &periods {
            h.assert_invariants();
        }
        let again = encode::histogram::encode(&periods).map(|b| encode::histogram::decode(&b));
        assert_eq!(again, Ok(Ok(periods)));
    }
}

/// Index file replay, as is and behind a valid header: never panics, and what it accepts is
/// internally consistent.
pub fn index_replay(data: &[u8]) {
    index::fuzz_replay(data);
}

/// Stream key and tag query parsers: accepted text prints back to text that parses to the same
/// thing.
pub fn key_and_query(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(key) = StreamKey::parse(text) {
        key.assert_invariants();
        assert_eq!(StreamKey::parse(&key.canonical()).as_ref(), Ok(&key));
        if let Ok(labels) = key.to_labels() {
            let back = StreamKey::from_labels(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            assert_eq!(back.as_ref(), Ok(&key));
        }
    }
    if let Ok(query) = TagQuery::parse(text) {
        let printed = query.to_string();
        let reparsed = TagQuery::parse(&printed).map(|q| q.to_string());
        assert_eq!(reparsed.as_deref(), Ok(printed.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{histogram, numeric, text};
    use hist::Histogram;
    use std::path::PathBuf;

    fn write(target: &str, name: &str, bytes: &[u8]) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }

    /// Writes the seed corpus: `cargo test -p store -- --ignored write_fuzz_corpus`.
    #[test]
    #[ignore]
    fn write_fuzz_corpus() {
        let ints: Vec<(i64, f64)> = (0..50).map(|i| (i * 10_000, (i % 7) as f64)).collect();
        let floats: Vec<(i64, f64)> = (0..50)
            .map(|i| (i * 10_000 + i % 3, (i as f64).sin()))
            .collect();
        let specials = [
            (1, f64::NAN),
            (2, -0.0),
            (3, f64::INFINITY),
            (9, f64::NEG_INFINITY),
        ];
        write("numeric_chunk", "ints", &numeric::encode(&ints).unwrap());
        write(
            "numeric_chunk",
            "floats",
            &numeric::encode(&floats).unwrap(),
        );
        write(
            "numeric_chunk",
            "specials",
            &numeric::encode(&specials).unwrap(),
        );
        write(
            "numeric_chunk",
            "one",
            &numeric::encode(&[(-5, 1e300)]).unwrap(),
        );
        write(
            "numeric_chunk",
            "garbage",
            b"\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        );
        let texts = [(1, "up"), (5, "down"), (7, ""), (100, "up \u{1F600}")];
        write("text_chunk", "changes", &text::encode(&texts).unwrap());
        write("text_chunk", "one", &text::encode(&[(0, "x")]).unwrap());
        write(
            "text_chunk",
            "regular",
            &text::encode(&[(0, "a"), (10, "b"), (20, "a")]).unwrap(),
        );
        write(
            "text_chunk",
            "empty_string",
            &text::encode(&[(3, "")]).unwrap(),
        );
        write(
            "text_chunk",
            "garbage",
            b"\x01\x02\x05\x00\x00\xff\x00\x00\x00\x00",
        );
        let h = |values: &[f64]| {
            let mut h = Histogram::new();
            values.iter().for_each(|&v| h.insert(v));
            h
        };
        let periods = vec![
            (0, h(&[0.1, 0.12, 0.5, 3.0])),
            (60_000, h(&[0.1, 0.5, 3.0, 3.1, 250.0])),
            (120_000, Histogram::new()),
            (180_000, h(&[f64::NAN, 0.0, -1.0, 1e-100])),
        ];
        write(
            "histogram_chunk",
            "periods",
            &histogram::encode(&periods).unwrap(),
        );
        write(
            "histogram_chunk",
            "one",
            &histogram::encode(&periods[..1]).unwrap(),
        );
        let repeated: Vec<(i64, Histogram)> =
            (0..6).map(|i| (i * 60_000, h(&[1.0, 2.0, 3.0]))).collect();
        write(
            "histogram_chunk",
            "repeated",
            &histogram::encode(&repeated).unwrap(),
        );
        write(
            "histogram_chunk",
            "empty_period",
            &histogram::encode(&[(7, Histogram::new())]).unwrap(),
        );
        write(
            "histogram_chunk",
            "garbage",
            b"\x01\x03\x02\x00\xff\xff\xff\xff\xff\xff",
        );
        for (name, bytes) in index::fuzz_seeds() {
            write("index_replay", name, &bytes);
        }
        let texts = [
            "cpu|ST[host:a,dc:b\"eCx5\"]",
            "m",
            "m|ST[a:b:c=d]",
            "and(a:b,or(c*:d*,not(/x/:/y\\/z/)))",
            "and(__name:cpu,__type:numeric,__activity:0-100)",
            "or(b\"YQ==\":*)",
        ];
        for (i, t) in texts.iter().enumerate() {
            write("key_and_query", &format!("seed{i}"), t.as_bytes());
        }
    }
}
