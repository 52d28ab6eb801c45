//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the corpus replay test
//! (`tests/fuzz_corpus.rs`), so CI runs the checked-in corpus through exactly the code the fuzzer
//! exercises. Each must never panic on any input; each checks what a decoder accepts. The seed
//! corpus is written by `cargo run -p store --example write_fuzz_seeds`.

use crate::encode::{self, ChunkKind};
use crate::index;
use crate::key::StreamKey;
use crate::tagquery::TagQuery;
use crate::wal;

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

/// Rice-coded histogram chunk decoder (what flushes write): accepted chunks hold valid
/// histograms, re-encode to the same periods (from histograms and from packed periods alike),
/// and decode the same straight into an accumulator.
pub fn rice_histogram_chunk(data: &[u8]) {
    for bytes in framings(data, ChunkKind::RiceHistogram) {
        let Ok(periods) = encode::rice_hist::decode(&bytes) else {
            continue;
        };
        let merged = checked_merge(&periods);
        let mut scratch = encode::rice_hist::EncodeScratch::default();
        let again = encode::rice_hist::encode(periods.as_slice(), &mut scratch);
        let packed: Vec<(i64, Vec<u8>)> = periods
            .iter()
            .map(|(t, h)| {
                let mut b = Vec::new();
                hist::packed::pack_histogram(h, &mut b);
                (*t, b)
            })
            .collect();
        let from_packed =
            encode::rice_hist::encode(&encode::rice_hist::PackedPeriods(&packed), &mut scratch);
        assert_eq!(
            again, from_packed,
            "packed periods encode as their histograms"
        );
        assert_eq!(
            again.map(|b| encode::rice_hist::decode(&b)),
            Ok(Ok(periods))
        );
        assert_decodes_into(&merged, |acc| {
            encode::rice_hist::decode_into(&bytes, |_| Some(0), acc)
        });
    }
}

/// Packed histogram chunk decoder (rollups): accepted chunks hold valid histograms, re-encode
/// to the same periods, and decode the same straight into an accumulator.
pub fn packed_histogram_chunk(data: &[u8]) {
    for bytes in framings(data, ChunkKind::PackedHistogram) {
        let Ok(periods) = encode::packed_hist::decode(&bytes) else {
            continue;
        };
        let merged = checked_merge(&periods);
        let again = encode::packed_hist::encode(&periods).map(|b| encode::packed_hist::decode(&b));
        assert_eq!(again, Ok(Ok(periods)));
        assert_decodes_into(&merged, |acc| {
            encode::packed_hist::decode_into(&bytes, |_| Some(0), acc)
        });
    }
}

/// Checks every decoded period's histogram and returns their merge.
fn checked_merge(periods: &[(i64, hist::Histogram)]) -> hist::Histogram {
    let mut merged = hist::Histogram::new();
    for (_, h) in periods {
        h.assert_invariants();
        merged.merge(h);
    }
    merged
}

/// A chunk that decodes also decodes into one accumulator (`decode_into`), to `merged`.
fn assert_decodes_into<E: std::fmt::Debug>(
    merged: &hist::Histogram,
    decode_into: impl FnOnce(&mut [hist::Accumulator]) -> Result<encode::histogram::ChunkSummary, E>,
) {
    let mut acc = [hist::Accumulator::new()];
    let into = decode_into(&mut acc);
    assert!(
        into.is_ok(),
        "decode accepted what decode_into refused: {into:?}"
    );
    assert_eq!(acc[0].to_histogram(), *merged);
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
    canonical_tags_agree(text);
}

/// `name\ntags\nextra tags`: the one-pass key writer appends what the general one appends
/// for the same tags, or declines and appends nothing.
fn canonical_tags_agree(text: &str) {
    let mut lines = text.splitn(3, '\n');
    let (name, tags) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let extra_pairs: Vec<(&str, &str)> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|part| !part.is_empty())
        .map(|part| part.split_once(':').unwrap_or((part, "")))
        .collect();
    let Some(extra) = crate::key::CanonicalTags::new(extra_pairs.iter().copied()) else {
        return;
    };
    let mut fast = String::from("kept");
    let took = crate::key::write_key_with_canonical_tags(name, tags, &extra, &mut fast);
    if !took {
        assert_eq!(fast, "kept");
        return;
    }
    let pairs = tags
        .split(',')
        .map(|part| part.split_once(':').unwrap_or((part, "")))
        .chain(extra_pairs.iter().copied());
    let mut general = String::from("kept");
    assert_eq!(
        crate::key::write_key_with_tags(name, pairs, &mut general),
        Ok(())
    );
    assert_eq!(fast, general);
}

/// WAL record decoder: never panics; an accepted record re-encodes to bytes that decode and
/// re-encode to themselves (bit for bit, so NaN payloads and −0.0 survive).
pub fn wal_record(data: &[u8]) {
    let Ok(record) = wal::decode(data) else {
        return;
    };
    let mut once = Vec::new();
    wal::encode(&record, &mut once);
    let mut twice = Vec::new();
    wal::encode(&wal::decode(&once).unwrap_or_default(), &mut twice);
    assert_eq!(once, twice);
}

/// Recomputes a block's header, directory and footer checksums from what the footer says, so
/// the fuzzer reaches the directory checks and the chunk reads behind them.
fn repair_block(mut b: Vec<u8>) -> Vec<u8> {
    use crate::block::{header_bytes, FOOTER_SIZE_BYTES, HEADER_SIZE_BYTES};
    if b.len() < HEADER_SIZE_BYTES + FOOTER_SIZE_BYTES {
        return b;
    }
    b[..HEADER_SIZE_BYTES].copy_from_slice(&header_bytes());
    let f = b.len() - FOOTER_SIZE_BYTES;
    let read_u64 = |b: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let dir_at = read_u64(&b, f + 32) as usize;
    if dir_at <= f && dir_at >= HEADER_SIZE_BYTES {
        let crc = crc32c::crc32c(&b[dir_at..f]);
        b[f + 44..f + 48].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b[f..f + 56]);
    b[f + 56..f + 60].copy_from_slice(&crc.to_le_bytes());
    b[f + 60..].copy_from_slice(crate::block::BLOCK_MAGIC);
    b
}

/// Block file decoder: as is and with checksums repaired. Opening and reading every chunk never
/// panics; a block that opens has a directory inside its bounds, and every chunk that reads back
/// matches its entry (the reader checks that) and re-encodes.
pub fn block_file(data: &[u8]) {
    use journal::vfs::Vfs;
    let fs = journal::sim::SimFs::new(0);
    let path = std::path::Path::new("/b.blk");
    for bytes in [data.to_vec(), repair_block(data.to_vec())] {
        if fs.write_file(path, &bytes).is_err() {
            return;
        }
        let Ok(block) = crate::block::Block::open(&fs, path) else {
            continue;
        };
        for e in block.entries() {
            assert!(e.offset + e.size_bytes as u64 <= bytes.len() as u64);
            let _ = block.read_chunk(e);
        }
        let _ = crate::block::verify(&fs, path);
        let _ = fs.remove_file(path);
    }
}

/// Manifest and cumulative-state decoders, as is and with the trailing checksum repaired: an
/// accepted manifest re-encodes to the same bytes; accepted state re-encodes to itself.
pub fn manifest_file(data: &[u8]) {
    let mut repaired = data.to_vec();
    if repaired.len() >= 16 {
        let n = repaired.len() - 4;
        let crc = crc32c::crc32c(&repaired[..n]);
        repaired[n..].copy_from_slice(&crc.to_le_bytes());
    }
    for bytes in [data, repaired.as_slice()] {
        if let Ok(m) = crate::manifest::Manifest::decode(bytes) {
            assert_eq!(m.encode(), bytes);
        }
        if let Ok(state) = crate::manifest::decode_state(bytes) {
            let refs: Vec<_> = state
                .cumulative
                .iter()
                .map(|(id, ts_ms, h)| (*id, *ts_ms, h))
                .collect();
            let again = crate::manifest::encode_state(&refs, &state.sources);
            let back = crate::manifest::decode_state(&again);
            assert_eq!(back.ok(), Some(state));
        }
    }
}
