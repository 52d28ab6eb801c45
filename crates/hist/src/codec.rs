//! The binary form and its base64 wrapping (spec §9, `crates/hist/FORMAT.md`).
//!
//! ```text
//! hist := u16 nbins (big-endian), bin{nbins}
//! bin  := i8 val, i8 exp, u8 w (0..=7), count: w+1 bytes little-endian
//! ```

use crate::bin::{key_bytes, raw_key, DECADE_SHIFT, KEY_ZERO};
use crate::error::DecodeError;
use crate::histogram::Histogram;

/// Largest encoded bin: 3 header bytes and an 8-byte count.
const BIN_SIZE_BYTES_MAX: usize = 11;

impl Histogram {
    /// Encoded size in bytes: 2 + Σ(4 + w).
    pub fn encoded_len(&self) -> usize {
        2 + self.counts.iter().map(|&c| 3 + count_len(c)).sum::<usize>()
    }

    /// Appends the binary form to `out`: populated bins in storage order, minimal count widths.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let nbins = u16::try_from(self.keys.len());
        // At most 46,082 distinct bins exist, so the count always fits the u16 header.
        let nbins = nbins.unwrap_or(u16::MAX);
        let start = out.len();
        out.reserve(2 + self.keys.len() * BIN_SIZE_BYTES_MAX);
        out.extend_from_slice(&nbins.to_be_bytes());
        let all_positive = self.keys.first().is_some_and(|&k| k > KEY_ZERO);
        if all_positive {
            // Keys ascend, so the first one being positive makes them all positive (the common
            // case for latencies): the wire bytes follow from the key with two adds.
            encode_bins(&self.keys, &self.counts, out, positive_head);
        } else {
            encode_bins(&self.keys, &self.counts, out, |key| {
                let (val, exp) = key_bytes(key);
                u32::from(val) | u32::from(exp) << 8
            });
        }
        debug_assert_eq!(out.len() - start, self.encoded_len());
    }

    /// The binary form, in an allocation of exactly its size (it is usually kept).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out.shrink_to_fit();
        out
    }

    /// Reads exactly one histogram from `bytes`; trailing bytes are an error.
    pub fn decode(bytes: &[u8]) -> Result<Histogram, DecodeError> {
        let (h, used) = Histogram::decode_prefix(bytes)?;
        if used != bytes.len() {
            return Err(DecodeError::TrailingBytes {
                offset: used,
                len: bytes.len(),
            });
        }
        Ok(h)
    }

    /// Reads one histogram from the start of `bytes`, returning it and the bytes it used.
    /// Bins may come in any order and repeat (they are merged); zero counts and invalid bins are
    /// dropped, as the C reader does. Allocation is bounded by the input length, not the header.
    pub fn decode_prefix(bytes: &[u8]) -> Result<(Histogram, usize), DecodeError> {
        let mut h = Histogram::new();
        let used = decode_bins(bytes, &mut h.keys, &mut h.counts)?;
        if cfg!(debug_assertions) {
            h.assert_invariants();
        }
        Ok((h, used))
    }

    /// [`Histogram::from_base64`] into the caller's buffers, for a reader of many histograms
    /// that keeps them (no allocation once they have grown): `bytes` receives the binary form,
    /// `keys` and `counts` the histogram's bins as [`Histogram::from_sorted_keys`] takes them
    /// (valid keys strictly ascending, counts above zero). On an error their contents are
    /// unspecified.
    pub fn decode_base64_into(
        text: &[u8],
        bytes: &mut Vec<u8>,
        keys: &mut Vec<u16>,
        counts: &mut Vec<u64>,
    ) -> Result<(), DecodeError> {
        bytes.clear();
        decode_base64_append(text, bytes)?;
        let used = decode_bins(bytes, keys, counts)?;
        if used != bytes.len() {
            return Err(DecodeError::TrailingBytes {
                offset: used,
                len: bytes.len(),
            });
        }
        Ok(())
    }

    /// The standard padded base64 of the binary form.
    pub fn to_base64(&self) -> String {
        let mut bytes = Vec::new();
        self.encode_into(&mut bytes);
        base64_simd::STANDARD.encode_to_string(bytes)
    }

    /// Reads a base64 histogram, padded or not; ASCII whitespace is ignored.
    pub fn from_base64(text: &str) -> Result<Histogram, DecodeError> {
        let bytes = decode_base64(text.as_bytes())?;
        Histogram::decode(&bytes)
    }
}

/// The `val | exp << 8` bytes of a positive regular bin's key: `val = slot + 9` and
/// `exp = decade − 384`, which as a byte is `decade + 128` modulo 256.
#[inline(always)]
fn positive_head(key: u16) -> u32 {
    debug_assert!(key > KEY_ZERO);
    let k = u32::from(key);
    ((k & 127) + 9) | (((k >> DECADE_SHIFT) + 128) & 255) << 8
}

/// Bins encoded per staging batch, and the staging buffer: a batch needs at most 64 × 11 = 704
/// bytes; offsets are masked to 1023 so the compiler can see every write is in bounds.
const ENCODE_BATCH_BINS: usize = 64;
const STAGING_MASK: usize = 1023;

/// Encodes bins through a stack buffer, `ENCODE_BATCH_BINS` at a time, appending to `out`.
/// Each bin is written as a full 11-byte record (the 3 header bytes with a spare fourth, then the
/// 8-byte count over that spare byte) and the cursor advances by its real size, so a bin costs
/// two stores and no branch.
#[inline(always)]
fn encode_bins(keys: &[u16], counts: &[u64], out: &mut Vec<u8>, head_of: impl Fn(u16) -> u32) {
    let mut staging = [0u8; STAGING_MASK + 1 + BIN_SIZE_BYTES_MAX];
    for (keys, counts) in keys
        .chunks(ENCODE_BATCH_BINS)
        .zip(counts.chunks(ENCODE_BATCH_BINS))
    {
        let mut used = 0usize;
        for (&key, &count) in keys.iter().zip(counts) {
            let width = count_len(count) - 1;
            let at = used & STAGING_MASK;
            let head = head_of(key) | (width as u32) << 16;
            staging[at..at + 4].copy_from_slice(&head.to_le_bytes());
            staging[at + 3..at + BIN_SIZE_BYTES_MAX].copy_from_slice(&count.to_le_bytes());
            used += 4 + width;
        }
        debug_assert!(used <= ENCODE_BATCH_BINS * BIN_SIZE_BYTES_MAX);
        out.extend_from_slice(&staging[..used]);
    }
}

/// Bytes needed for a non-zero count (1..=8).
#[inline]
fn count_len(count: u64) -> usize {
    debug_assert!(count > 0);
    // 1 + floor((bits − 1) / 8) with bits ≥ 1; `| 1` spares the zero special case of lzcnt.
    1 + ((63 - (count | 1).leading_zeros() as usize) >> 3)
}

/// Low `w + 1` bytes of a little-endian u64, for count width `w`.
const COUNT_MASKS: [u64; 8] = {
    let mut t = [u64::MAX; 8];
    let mut w = 0;
    while w < 7 {
        t[w] = (1u64 << (8 * (w + 1))) - 1;
        w += 1;
    }
    t
};

/// Reads the bins of one binary-form histogram at the start of `bytes` into `keys` and
/// `counts` (replacing what they held) as a histogram holds them, returning the bytes used.
/// Bins may come in any order and repeat (they are merged); zero counts and invalid bins are
/// dropped, as the C reader does. Growth is bounded by the input length, not the header.
fn decode_bins(
    bytes: &[u8],
    keys: &mut Vec<u16>,
    counts: &mut Vec<u64>,
) -> Result<usize, DecodeError> {
    let Some(header) = bytes.get(..2) else {
        return Err(DecodeError::Truncated {
            offset: 0,
            needed: 2,
            available: bytes.len(),
        });
    };
    let nbins = usize::from(u16::from_be_bytes([header[0], header[1]]));
    // Every bin takes at least 4 bytes: a header claiming more bins than that is truncated,
    // and the capacity (allocation) is bounded by the input, not by the header.
    let cap = nbins.min((bytes.len() - 2) / 4);
    keys.clear();
    counts.clear();
    keys.resize(cap, 0);
    counts.resize(cap, 0);
    let mut pos = 2;
    let mut all_kept = true;
    for (key_slot, count_slot) in keys.iter_mut().zip(counts.iter_mut()) {
        let (val, exp, count, next) = match bytes.get(pos..pos + BIN_SIZE_BYTES_MAX) {
            // Fast path: a full 8-byte count window is readable; mask it to the bin's width.
            Some(window) => read_bin_window(window, pos)?,
            None => read_bin_tail(bytes, pos)?,
        };
        pos = next;
        let (key, valid) = raw_key(val, exp);
        // Invalid bins are dropped like empty ones: their count is masked to zero here and
        // the rare compaction below removes them.
        let count = count & 0u64.wrapping_sub(u64::from(valid));
        *key_slot = key;
        *count_slot = count;
        all_kept &= count != 0;
    }
    if cap < nbins {
        // The input cannot hold the declared bins: this read reports where it ends.
        read_bin_tail(bytes, pos)?;
        return Err(DecodeError::Truncated {
            offset: pos,
            needed: 4,
            available: 0,
        });
    }
    // Rare: dropped bins, or bins out of order or repeated (which readers must merge).
    if !all_kept || !keys.windows(2).all(|w| w[0] < w[1]) {
        let mut pairs: Vec<(u16, u64)> = keys
            .iter()
            .copied()
            .zip(counts.iter().copied())
            .filter(|&(_, c)| c != 0)
            .collect();
        let merged = Histogram::from_unsorted_keys(&mut pairs);
        (*keys, *counts) = merged.into_key_vecs();
    }
    Ok(pos)
}

/// Reads the bin at `pos` from an 11-byte window: (val, exp, count, next position).
#[inline(always)]
fn read_bin_window(window: &[u8], pos: usize) -> Result<(i8, i8, u64, usize), DecodeError> {
    let width = window[2];
    if width > 7 {
        return Err(DecodeError::BadCountWidth {
            offset: pos + 2,
            width,
        });
    }
    let mut le = [0u8; 8];
    le.copy_from_slice(&window[3..BIN_SIZE_BYTES_MAX]);
    let count = u64::from_le_bytes(le) & COUNT_MASKS[usize::from(width)];
    Ok((
        window[0] as i8,
        window[1] as i8,
        count,
        pos + 4 + usize::from(width),
    ))
}

/// Reads the bin at `pos` near the end of the input, checking every length.
fn read_bin_tail(bytes: &[u8], pos: usize) -> Result<(i8, i8, u64, usize), DecodeError> {
    let truncated = |needed| DecodeError::Truncated {
        offset: pos,
        needed,
        available: bytes.len().saturating_sub(pos),
    };
    let head = bytes.get(pos..pos + 3).ok_or_else(|| truncated(3))?;
    let (val, exp, width) = (head[0] as i8, head[1] as i8, head[2]);
    if width > 7 {
        return Err(DecodeError::BadCountWidth {
            offset: pos + 2,
            width,
        });
    }
    let len = usize::from(width) + 1;
    let raw = bytes
        .get(pos + 3..pos + 3 + len)
        .ok_or_else(|| truncated(3 + len))?;
    let mut le = [0u8; 8];
    le[..len].copy_from_slice(raw);
    Ok((val, exp, u64::from_le_bytes(le), pos + 3 + len))
}

/// Decodes standard-alphabet base64, padded or unpadded, skipping ASCII whitespace.
pub(crate) fn decode_base64(text: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let mut bytes = Vec::new();
    decode_base64_append(text, &mut bytes)?;
    Ok(bytes)
}

/// [`decode_base64`], appending to `out`.
fn decode_base64_append(text: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let len = out.len();
    if decode_base64_strict(text, out).is_ok() {
        return Ok(());
    }
    out.truncate(len);
    // Rare path: whitespace (which C skips) or an error to locate.
    let cleaned: Vec<u8> = text
        .iter()
        .copied()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    decode_base64_strict(&cleaned, out).map_err(|_| DecodeError::Base64 {
        position: bad_base64_at(text),
    })
}

fn decode_base64_strict(input: &[u8], out: &mut Vec<u8>) -> Result<(), base64_simd::Error> {
    let engine = if input.len().is_multiple_of(4) {
        base64_simd::STANDARD
    } else {
        base64_simd::STANDARD_NO_PAD
    };
    engine.decode_append(input, out)
}

/// Position of the first character that makes `input` invalid base64 (for the error message).
fn bad_base64_at(input: &[u8]) -> usize {
    let alphabet =
        |c: u8| c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c.is_ascii_whitespace();
    let body = input.iter().rposition(|&c| c != b'=').map_or(0, |i| i + 1);
    match input[..body].iter().position(|&c| !alphabet(c)) {
        Some(i) => i,
        // Every body character is valid: the padding or the length is what is wrong.
        None => body,
    }
}
