//! Per-series chunk encoders: numeric (delta-of-delta timestamps, integer-delta Rice or Gorilla
//! XOR values), text (stored on change), histograms (per period, Rice-coded over a window of
//! bins; packed bins in the finest rollups) and numeric rollup aggregates. Every chunk is framed
//! as `version, kind, body, crc32c` (see `FORMAT.md`).
//!
//! Decoders never panic and never allocate more than a small multiple of their input on any
//! bytes; encoders assert their input invariants and decoders re-check them.

pub mod aggregate;
pub mod bits;
pub mod decimal;
pub mod histogram;

pub mod numeric;
pub mod numeric_stream;
pub mod packed_hist;
pub mod rice_hist;
pub mod text;

pub mod timestamps;

use std::fmt;

/// The chunk format version written by this code.
pub const CHUNK_VERSION: u8 = 2;
/// Most samples (or periods) in one chunk.
pub const CHUNK_SAMPLES_MAX: usize = 1 << 20;
/// Version, kind and the trailing checksum.
pub const CHUNK_FRAME_SIZE_BYTES: usize = 2 + 4;

/// What a chunk holds (its second byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    Numeric = 1,
    Text = 2,
    // 3 is not a chunk kind: the number stays unused so that no byte changes meaning.
    /// A numeric series' rollup slices (rollup blocks only).
    Aggregate = 4,
    /// Histograms with packed bins (rollup blocks only; `packed_hist.rs`).
    PackedHistogram = 5,
    /// Histograms, Rice-coded (`rice_hist.rs`): what base blocks and coarser rollups hold.
    RiceHistogram = 6,
}

/// Why a chunk could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    Empty,
    TooManySamples {
        count: usize,
    },
    /// Timestamps must be strictly increasing within a chunk.
    NotIncreasing {
        index: usize,
        ts_ms: i64,
        prev_ts_ms: i64,
    },
    TextTooLong {
        index: usize,
        size_bytes: usize,
    },
    /// A histogram chunk would span more bin slots than `HIST_CHUNK_SLOTS_MAX`: split it.
    TooManySlots {
        slots: u64,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chunk encode: {self:?}")
    }
}

impl std::error::Error for EncodeError {}

/// Why bytes are not a valid chunk. Offsets are into the chunk (bytes) or its bit stream (bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    TooShort { size_bytes: usize },
    Checksum { stored: u32, computed: u32 },
    Version { version: u8 },
    Kind { kind: u8, expected: ChunkKind },
    Varint { offset: usize },
    Truncated { bit_offset: u64 },
    TrailingBits { bit_offset: u64 },
    TooManySamples { count: u64 },
    Invalid { bit_offset: u64, what: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chunk decode: {self:?}")
    }
}

impl std::error::Error for DecodeError {}

/// Starts a chunk: version and kind bytes.
fn frame_start(kind: ChunkKind) -> Vec<u8> {
    vec![CHUNK_VERSION, kind as u8]
}

/// Ends a chunk: the CRC32C (Castagnoli) of every byte before it, little-endian.
fn frame_finish(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Checks the frame and returns the body (between the kind byte and the checksum).
fn frame_body(bytes: &[u8], expected: ChunkKind) -> Result<&[u8], DecodeError> {
    if bytes.len() < CHUNK_FRAME_SIZE_BYTES {
        return Err(DecodeError::TooShort {
            size_bytes: bytes.len(),
        });
    }
    let (content, crc_bytes) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    let computed = crc32c::crc32c(content);
    if stored != computed {
        return Err(DecodeError::Checksum { stored, computed });
    }
    if content[0] != CHUNK_VERSION {
        return Err(DecodeError::Version {
            version: content[0],
        });
    }
    if content[1] != expected as u8 {
        return Err(DecodeError::Kind {
            kind: content[1],
            expected,
        });
    }
    Ok(&content[2..])
}

/// Reads the sample count and bounds it by the input: every sample after the first costs at
/// least `bits_per_sample_min` bits of the remaining body, so garbage cannot force a large
/// allocation.
fn read_count(
    body: &[u8],
    pos: &mut usize,
    bits_per_sample_min: u64,
) -> Result<usize, DecodeError> {
    let count = bits::get_varint(body, pos)?;
    let available_bits = (body.len() - *pos) as u64 * 8;
    let bound = available_bits / bits_per_sample_min.max(1) + 1;
    if count == 0 || count > CHUNK_SAMPLES_MAX as u64 || count > bound {
        return Err(DecodeError::TooManySamples { count });
    }
    Ok(count as usize)
}

/// Checks that timestamps are strictly increasing and the count is within bounds.
fn check_timestamps(ts_ms: impl Iterator<Item = i64>) -> Result<usize, EncodeError> {
    let mut prev: Option<i64> = None;
    let mut count = 0;
    for (index, ts) in ts_ms.enumerate() {
        if let Some(prev_ts_ms) = prev {
            if ts <= prev_ts_ms {
                return Err(EncodeError::NotIncreasing {
                    index,
                    ts_ms: ts,
                    prev_ts_ms,
                });
            }
        }
        prev = Some(ts);
        count += 1;
    }
    if count == 0 {
        return Err(EncodeError::Empty);
    }
    if count > CHUNK_SAMPLES_MAX {
        return Err(EncodeError::TooManySamples { count });
    }
    Ok(count)
}

/// Gives `bytes` a valid frame for `kind` (version, kind, checksum over the rest), so fuzzing
/// and property tests reach the body decoders. Inputs shorter than a frame come back as is.
pub fn repair_frame(mut bytes: Vec<u8>, kind: ChunkKind) -> Vec<u8> {
    if bytes.len() >= CHUNK_FRAME_SIZE_BYTES {
        bytes.truncate(bytes.len() - 4);
        bytes[0] = CHUNK_VERSION;
        bytes[1] = kind as u8;
        frame_finish(bytes)
    } else {
        bytes
    }
}
