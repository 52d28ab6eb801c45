//! Histogram bins as storage-order keys (`hist::Bin::key`) for the parsers' per-bin loops, and
//! the httptrap `"H[..]=n"` list reader, which packs a list as it reads it.

use hist::packed::{PackedChunk, PackedList};
use hist::{Histogram, ValidKey};

use crate::sink::HistogramRef;

/// The key of bin `(val, exp)` (`hist::ValidKey::of`, inlined into the per-bin loops).
#[inline(always)]
pub(crate) fn bin_key(val: i8, exp: i8) -> Option<u16> {
    ValidKey::of(val, exp).map(ValidKey::get)
}

/// Keys and counts of one histogram being collected, reused between histograms.
pub(crate) struct KeyedBins {
    pub keys: Vec<u16>,
    pub counts: Vec<u64>,
    /// Scratch for the sort when the bins did not come in order.
    pairs: Vec<(u16, u64)>,
    /// Bin string prefixes read before (allocated at the first string).
    prefixes: Option<Box<Prefixes>>,
    /// A base64 histogram's binary form, decoded before its bins are read.
    pub bytes: Vec<u8>,
    /// Bins in storage order, packed as they are read (the tokenizer's).
    pub packed: PackedList,
    /// Whether bin lists are packed as they are read (else read as keys and counts, for a
    /// reader that builds histograms anyway). Kept across `clear`.
    pub pack: bool,
}

impl Default for KeyedBins {
    fn default() -> Self {
        KeyedBins {
            keys: Vec::new(),
            counts: Vec::new(),
            pairs: Vec::new(),
            prefixes: None,
            bytes: Vec::new(),
            packed: PackedList::default(),
            pack: true,
        }
    }
}

impl KeyedBins {
    pub fn clear(&mut self) {
        self.keys.clear();
        self.counts.clear();
        self.packed.clear();
    }

    #[inline]
    pub fn push(&mut self, key: u16, count: u64) {
        self.keys.push(key);
        self.counts.push(count);
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn capacity_bytes(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<u16>()
            + self.counts.capacity() * std::mem::size_of::<u64>()
            + self.pairs.capacity() * std::mem::size_of::<(u16, u64)>()
            + self.bytes.capacity()
            + self.packed.capacity_bytes()
            + self
                .prefixes
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<Prefixes>())
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn truncate(&mut self, len: usize) {
        self.keys.truncate(len);
        self.counts.truncate(len);
    }

    /// The histogram of the collected bins (repeats add up, zero counts vanish); leaves them
    /// empty. Uploads list bins in storage order (what `Histogram::to_text` and Circonus'
    /// libraries print), so when the keys are strictly ascending with non-zero counts they are
    /// copied as they are: no sort, no intermediate vector.
    pub fn take_histogram(&mut self) -> Histogram {
        if !in_storage_order(&self.keys, &self.counts) {
            let pairs = &mut self.pairs;
            pairs.clear();
            pairs.extend(
                self.keys
                    .iter()
                    .copied()
                    .zip(self.counts.iter().copied())
                    .filter(|&(_, c)| c != 0),
            );
            pairs.sort_unstable_by_key(|&(key, _)| key);
            self.keys.clear();
            self.counts.clear();
            for &(key, count) in pairs.iter() {
                match (self.keys.last(), self.counts.last_mut()) {
                    (Some(&last), Some(total)) if last == key => {
                        *total = total.saturating_add(count);
                    }
                    _ => {
                        self.keys.push(key);
                        self.counts.push(count);
                    }
                }
            }
        }
        let histogram = Histogram::from_sorted_keys(&self.keys, &self.counts);
        self.clear();
        histogram
    }
}

/// The histogram of bins `range` of `from` (bins the tokenizer read as keys and counts): lent
/// as they are when in storage order with every count above zero (a reader that does not
/// pack), merged and sorted through `scratch` otherwise.
pub(crate) fn histogram_of<'f>(
    from: &'f KeyedBins,
    range: std::ops::Range<usize>,
    scratch: &mut KeyedBins,
) -> HistogramRef<'f> {
    let (Some(keys), Some(counts)) = (from.keys.get(range.clone()), from.counts.get(range)) else {
        debug_assert!(false, "a bin range of the tokenizer's");
        return HistogramRef::Built(Histogram::new());
    };
    if in_storage_order(keys, counts) {
        return HistogramRef::Sorted { keys, counts };
    }
    scratch.clear();
    scratch.keys.extend_from_slice(keys);
    scratch.counts.extend_from_slice(counts);
    HistogramRef::Built(scratch.take_histogram())
}

/// Whether bins are strictly ascending with every count above zero (a histogram's bins as
/// they are). Non-short-circuit folds: one pass each, vector code.
fn in_storage_order(keys: &[u16], counts: &[u64]) -> bool {
    let ascending = keys.windows(2).fold(true, |ok, w| ok & (w[0] < w[1]));
    ascending & counts.iter().fold(true, |ok, &c| ok & (c != 0))
}

/// Where [`fixed_text_bins`] put the bins of a list it read; either way the offset just past
/// its last string (where the next byte is not a `,`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadBins {
    /// In storage order with every count above zero (what uploads send): packed as the open
    /// histogram of `bins.packed`, for the caller to finish.
    Packed(usize),
    /// Otherwise: appended to `bins.keys` and `bins.counts` in the order read.
    Keyed(usize),
}

/// Reads `"H[d.de±dd]=n"` strings separated by a bare `,` from the start of `s` (the shape
/// `hist`, libcircllhist and Circonus' Go library print), every check a byte compare. The bins
/// are packed as they are read, 64 at a time from the stack, and the packing checks their
/// order; a list that is not in order is read again into `bins.keys` and `bins.counts`.
/// `None` at the first byte that does not fit (another spelling, a count of 20 digits,
/// spaces), leaving the open packed histogram or the vectors partly filled (callers abandon or
/// truncate them). For every string it accepts, the bin and count equal
/// `httptrap::fixed_entry`'s (and so the float path's).
pub(crate) fn fixed_text_bins(s: &[u8], bins: &mut KeyedBins) -> Option<ReadBins> {
    let KeyedBins {
        keys,
        counts,
        prefixes,
        packed,
        pack,
        ..
    } = bins;
    let prefixes = prefixes.get_or_insert_with(|| Box::new(Prefixes::default()));
    if *pack {
        let mut chunk = PackedChunk::default();
        match read_list(s, prefixes, &mut chunk, |chunk| packed.extend_chunk(chunk)) {
            Ok(end) => return Some(ReadBins::Packed(end)),
            Err(Stop::Declined) => return None,
            Err(Stop::Refused) => packed.abandon(),
        }
    }
    // Out of storage order (rare: uploads list bins as they are stored), or not packing: read
    // (again) into keys and counts, merged and sorted when the walk lends them.
    let mut chunk = KeyedChunk {
        keys: [0u16; CHUNK_BINS],
        counts: [0u64; CHUNK_BINS],
        n: 0,
    };
    let end = read_list(s, prefixes, &mut chunk, |chunk| {
        keys.extend_from_slice(&chunk.keys[..chunk.n]);
        counts.extend_from_slice(&chunk.counts[..chunk.n]);
        chunk.n = 0;
        true
    });
    end.ok().map(ReadBins::Keyed)
}

/// [`fixed_text_bins`] on emptied `bins`, with the bins it read in the order read, wherever
/// it put them (an open packed histogram is finished to be read).
#[cfg(test)]
pub(crate) fn read_pairs(s: &[u8], bins: &mut KeyedBins) -> (Option<ReadBins>, Vec<(u16, u64)>) {
    bins.clear();
    let read = fixed_text_bins(s, bins);
    let index = bins.packed.finish();
    let packed = bins.packed.get(index).map(|p| p.to_histogram());
    let packed = packed.unwrap_or_default();
    let pairs = packed.keys().iter().zip(packed.counts());
    let keyed = bins.keys.iter().zip(&bins.counts);
    let pairs = pairs.chain(keyed).map(|(&k, &c)| (k, c)).collect();
    (read, pairs)
}

/// Why [`read_list`] stopped before the end of the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// A string the readers do not take.
    Declined,
    /// `put` refused bins.
    Refused,
}

/// Where [`read_chunk`] puts the bins it reads, on the stack: packed as they come
/// (`hist::packed::PackedChunk`), or as keys and counts.
trait Chunk {
    fn has_room(&self) -> bool;
    fn bins(&self) -> usize;
    fn push(&mut self, key: ValidKey, count: u64);
}

impl Chunk for PackedChunk {
    #[inline(always)]
    fn has_room(&self) -> bool {
        PackedChunk::has_room(self)
    }

    #[inline(always)]
    fn bins(&self) -> usize {
        PackedChunk::bins(self)
    }

    #[inline(always)]
    fn push(&mut self, key: ValidKey, count: u64) {
        PackedChunk::push(self, key, count);
    }
}

/// Keys and counts gathered between copies into the vectors.
struct KeyedChunk {
    keys: [u16; CHUNK_BINS],
    counts: [u64; CHUNK_BINS],
    n: usize,
}

impl Chunk for KeyedChunk {
    #[inline(always)]
    fn has_room(&self) -> bool {
        self.n < CHUNK_BINS
    }

    #[inline(always)]
    fn bins(&self) -> usize {
        self.n
    }

    #[inline(always)]
    fn push(&mut self, key: ValidKey, count: u64) {
        if let (Some(k), Some(c)) = (self.keys.get_mut(self.n), self.counts.get_mut(self.n)) {
            (*k, *c) = (key.get(), count);
            self.n += 1;
        }
    }
}

/// Reads the bin strings of a list at the start of `s` into `chunk`, handing it to `put`
/// (which refuses it, or takes its bins and empties it) whenever it is full and at the end;
/// returns the offset just past the last string.
#[inline(always)]
fn read_list<C: Chunk>(
    s: &[u8],
    prefixes: &mut Prefixes,
    chunk: &mut C,
    mut put: impl FnMut(&mut C) -> bool,
) -> Result<usize, Stop> {
    let mut at = 0;
    // Bounded: every step reads at least one bin string.
    loop {
        // After a full chunk that mostly missed, a few chunks skip the table: bins spread over
        // more decades than it holds would pay for the lookups and gain nothing.
        let before = chunk.bins();
        let more = if prefixes.skip_chunks == 0 {
            let mut misses = 0;
            let slots = &mut prefixes.slots;
            let more = read_chunk(s, &mut at, chunk, |word| {
                remembered_bin(word, slots, &mut misses)
            });
            let read = chunk.bins() - before;
            if !chunk.has_room() && 2 * misses > read {
                prefixes.skip_chunks = SKIPPED_CHUNKS_AFTER_MISSES;
            }
            more
        } else {
            prefixes.skip_chunks -= 1;
            read_chunk(s, &mut at, chunk, fast_bin)
        };
        // Not full: the fast reader stopped at a string it declines.
        let declined = chunk.has_room();
        if !put(chunk) {
            return Err(Stop::Refused);
        }
        if !more {
            return Ok(at);
        }
        if declined {
            // A string the fast reader declines: read it byte by byte (or stop at it).
            let (key, count, end) = bin_at(s, at).ok_or(Stop::Declined)?;
            chunk.push(key, count);
            at = end;
            if s.get(at) != Some(&b',') {
                return put(chunk).then_some(at).ok_or(Stop::Refused);
            }
            at += 1;
        }
    }
}

/// Reads fast-shaped bin strings at `s[*at..]` with `read` into `chunk` until it is full, a
/// string is not fast-shaped (`*at` stays at it) or the list ends (`*at` after its last string);
/// returns whether a `,` follows the last.
#[inline(always)]
fn read_chunk(
    s: &[u8],
    at: &mut usize,
    chunk: &mut impl Chunk,
    mut read: impl FnMut(&[u8; FAST_BYTES]) -> Option<(ValidKey, u64, usize)>,
) -> bool {
    let mut i = *at;
    let mut more = true;
    while chunk.has_room() {
        // A string and the byte after it in one bounds check (a list's last string, too near
        // the end of the text, is left to `bin_at`).
        let Some(window) = s
            .get(i..)
            .and_then(|rest| rest.first_chunk::<WINDOW_BYTES>())
        else {
            break;
        };
        let Some((word, _)) = window.split_first_chunk::<FAST_BYTES>() else {
            break;
        };
        let Some((key, count, len)) = read(word) else {
            break;
        };
        chunk.push(key, count);
        i += len;
        if window.get(len) != Some(&b',') {
            more = false;
            break;
        }
        i += 1;
    }
    *at = i;
    more
}

/// Bins a `KeyedChunk` gathers on the stack between copies into the vectors: 64, as many as a
/// `PackedChunk` holds at two bytes a bin, so that both fill after the same number of strings
/// (32 was 2 % slower in `parse_cpu` when bins were moved out in copies; 128 left the table's
/// miss count with no full chunk to judge, and lost 7 % on bins spread over many decades).
const CHUNK_BINS: usize = 64;

/// Chunks read without the remembered prefixes after one in which most lookups missed.
const SKIPPED_CHUNKS_AFTER_MISSES: u32 = 8;

/// Slots of the remembered prefixes: the bins a server sees are few (a latency spans a few
/// decades of 90 bins), and 16 KiB stays in the processor's nearest cache.
const PREFIX_SLOTS: usize = 1024;

/// One remembered bin string prefix `"H[d.de±dd]=` (its first 8 bytes and the next 4, as
/// little-endian words) and its bin's key; `lo` is 0 in a slot never filled, which no prefix
/// (starting with `"`) matches.
#[derive(Clone, Copy, Default)]
struct Prefix {
    lo: u64,
    hi: u32,
    key: ValidKey,
}

/// Prefixes already checked by `fast_bin`, by a hash of their bytes. A string whose 12 first
/// bytes equal a remembered prefix has that prefix's key: only its count is left to read.
pub(crate) struct Prefixes {
    slots: [Prefix; PREFIX_SLOTS],
    /// Chunks still to read without the table (see `SKIPPED_CHUNKS_AFTER_MISSES`).
    skip_chunks: u32,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes {
            slots: [Prefix::default(); PREFIX_SLOTS],
            skip_chunks: 0,
        }
    }
}

/// The slot of a prefix: its two words xor-ed (one-to-one on prefixes: the second word's
/// varying bytes, the exponent's digits, land on the first word's fixed `"H`), hashed by a
/// multiply.
#[inline(always)]
fn prefix_slot(lo: u64, hi: u32) -> usize {
    const SLOT_BITS: u32 = PREFIX_SLOTS.trailing_zeros();
    ((lo ^ u64::from(hi)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
}

/// [`fast_bin`] through the remembered prefixes: a known prefix costs a compare, not its
/// checks and arithmetic; an unknown one is read by `fast_bin` and remembered.
#[inline(always)]
fn remembered_bin(
    word: &[u8; FAST_BYTES],
    slots: &mut [Prefix; PREFIX_SLOTS],
    misses: &mut usize,
) -> Option<(ValidKey, u64, usize)> {
    let (lo, hi) = word.split_first_chunk::<8>()?;
    let lo = u64::from_le_bytes(*lo);
    let hi = u64::from_le_bytes(*hi.first_chunk::<8>()?);
    let slot = slots.get_mut(prefix_slot(lo, hi as u32))?;
    if slot.lo == lo && slot.hi == hi as u32 {
        let (count, len) = fast_count(*hi.to_le_bytes().last_chunk()?)?;
        debug_assert_eq!(
            fast_bin(word),
            Some((slot.key, count, len)),
            "a remembered prefix"
        );
        return Some((slot.key, count, len));
    }
    *misses += 1;
    let (key, count, len) = fast_bin(word)?;
    *slot = Prefix {
        lo,
        hi: hi as u32,
        key,
    };
    Some((key, count, len))
}

/// The count of one to three digits and the closing `"` in bytes 12 to 15 of a fast bin
/// string: the count and the string's length (`fast_bin` and a remembered
/// prefix both read the count with it).
#[inline(always)]
fn fast_count([c0, c1, c2, c3]: [u8; 4]) -> Option<(u64, usize)> {
    let digit = |c: u8| c.wrapping_sub(b'0');
    let (d0, d1, d2) = (digit(c0), digit(c1), digit(c2));
    let (count, len) = match (d0 < 10, d1 < 10, d2 < 10) {
        (true, false, _) if c1 == b'"' => (u64::from(d0), 14),
        (true, true, false) if c2 == b'"' => (u64::from(d0) * 10 + u64::from(d1), 15),
        (true, true, true) if c3 == b'"' => {
            (u64::from(d0) * 100 + u64::from(d1) * 10 + u64::from(d2), 16)
        }
        _ => return None,
    };
    Some((count, len))
}

/// Bytes `fast_bin` looks at: a positive bin's string with a count of up to three digits.
const FAST_BYTES: usize = 16;

/// Bytes the fast readers' loop takes at a time: a fast string and the byte after it.
const WINDOW_BYTES: usize = FAST_BYTES + 1;

/// The template of a positive bin's string up to its count: `"H[d.de±dd]=` with the digits and
/// the sign masked out.
const FAST_MASK: u128 = 0xffff_0000_00ff_00ff_00ff_ffff;
const FAST_TEMPLATE: u128 = u128::from_le_bytes(*b"\"H[\0.\0e\0\0\0]=\0\0\0\0");

/// One positive bin string with a count of one to three digits at the start of `word`, checked
/// as a whole against its template (the common shape; `bin_at` reads every other): its key,
/// its count and the bytes it took (through the closing `"`).
#[inline(always)]
fn fast_bin(word: &[u8; FAST_BYTES]) -> Option<(ValidKey, u64, usize)> {
    let bytes = *word;
    if u128::from_le_bytes(bytes) & FAST_MASK != FAST_TEMPLATE & FAST_MASK {
        return None;
    }
    let digit = |at: usize| bytes[at].wrapping_sub(b'0');
    let (m0, m1, x0, x1) = (digit(3), digit(5), digit(8), digit(9));
    // Non-short-circuit: one branch for the four digits.
    if (m0.wrapping_sub(1) >= 9) | (m1 >= 10) | (x0 >= 10) | (x1 >= 10) {
        return None;
    }
    let magnitude = (x0 * 10 + x1) as i8;
    let exp = match bytes[7] {
        b'+' => magnitude,
        b'-' => -magnitude,
        _ => return None,
    };
    let key = ValidKey::of((m0 * 10 + m1) as i8, exp)?;
    let [.., c0, c1, c2, c3] = bytes;
    let (count, len) = fast_count([c0, c1, c2, c3])?;
    Some((key, count, len))
}

/// One bin string at `s[i..]`, every check a byte compare: its key, its count and the offset
/// just past its closing `"`.
fn bin_at(s: &[u8], mut i: usize) -> Option<(ValidKey, u64, usize)> {
    /// Count digits read here; 19 never overflow a u64.
    const COUNT_DIGITS_MAX: usize = 19;
    if s.get(i..i + 3) != Some(b"\"H[") {
        return None;
    }
    i += 3;
    let negative = s.get(i) == Some(&b'-');
    i += usize::from(negative);
    let &[d0, b'.', d1, b'e', sign, e0, e1, b']', b'='] = s.get(i..i + 9)? else {
        return None;
    };
    i += 9;
    let (m0, m1) = (d0.wrapping_sub(b'0'), d1.wrapping_sub(b'0'));
    let (x0, x1) = (e0.wrapping_sub(b'0'), e1.wrapping_sub(b'0'));
    if !(1..10).contains(&m0) || m1 >= 10 || x0 >= 10 || x1 >= 10 {
        return None;
    }
    let magnitude = (x0 * 10 + x1) as i8;
    let exp = match sign {
        b'+' => magnitude,
        b'-' => -magnitude,
        _ => return None,
    };
    let val = (m0 * 10 + m1) as i8;
    let key = ValidKey::of(if negative { -val } else { val }, exp)?;
    let digits_start = i;
    let mut count = 0u64;
    while let Some(&c) = s.get(i) {
        let digit = c.wrapping_sub(b'0');
        if digit >= 10 {
            break;
        }
        if i - digits_start == COUNT_DIGITS_MAX {
            return None;
        }
        count = count * 10 + u64::from(digit);
        i += 1;
    }
    if i == digits_start || s.get(i) != Some(&b'"') {
        return None;
    }
    Some((key, count, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hist::Bin;

    /// Every one-byte change of bin strings of the fast shape (and the strings themselves):
    /// the fast reader reads what the byte-by-byte one does, or declines.
    #[test]
    fn fast_bin_reads_what_bin_at_reads_or_declines() {
        let texts: [&[u8]; 6] = [
            b"\"H[1.2e+01]=3\",xx",
            b"\"H[9.9e-99]=12\",x",
            b"\"H[5.0e+00]=999\"",
            b"\"H[1.0e-01]=0\",xx",
            b"\"H[3.7e+42]=45\"]x",
            b"\"H[2.5e-07]=100\"",
        ];
        let (mut read, mut declined) = (0, 0);
        for text in texts {
            let word: [u8; FAST_BYTES] = *text.first_chunk().unwrap();
            assert_eq!(fast_bin(&word), bin_at(text, 0), "{}", text.escape_ascii());
            assert!(fast_bin(&word).is_some(), "{}", text.escape_ascii());
            for at in 0..FAST_BYTES {
                for byte in 0..=u8::MAX {
                    let mut changed = word;
                    changed[at] = byte;
                    match fast_bin(&changed) {
                        Some(fast) => {
                            read += 1;
                            let slow = bin_at(&changed, 0);
                            assert_eq!(Some(fast), slow, "{}", changed.escape_ascii());
                        }
                        None => declined += 1,
                    }
                }
            }
        }
        // Both outcomes happen: digits change the bin, other bytes break the shape.
        assert!(
            read > 100 && declined > 10_000,
            "{read} read, {declined} declined"
        );
    }

    /// Every change of two bytes of a fast-shaped string to bytes near the edges of what
    /// the word checks accept (digits, `'0' - 1`, `'9' + 1`, bytes that carry, the sign and
    /// quote): the fast reader reads what the byte-by-byte one does, or declines.
    #[test]
    fn fast_bin_agrees_on_two_byte_changes() {
        let edges: Vec<u8> = (b'0'..=b'9')
            .chain([
                0, b'/', b':', b'?', b'"', b'+', b'-', b',', b']', b'=', 0x7f, 0x80,
            ])
            .chain(0xc6..=0xff)
            .collect();
        let text = b"\"H[3.7e-42]=45\"]x";
        let word: [u8; FAST_BYTES] = *text.first_chunk().unwrap();
        let mut read = 0;
        for a in 0..FAST_BYTES {
            for b in a + 1..FAST_BYTES {
                for &x in &edges {
                    for &y in &edges {
                        let mut changed = word;
                        changed[a] = x;
                        changed[b] = y;
                        if let Some(fast) = fast_bin(&changed) {
                            read += 1;
                            let slow = bin_at(&changed, 0);
                            assert_eq!(Some(fast), slow, "{}", changed.escape_ascii());
                        }
                    }
                }
            }
        }
        assert!(read > 1_000, "{read} read");
    }

    /// A seeded xorshift: each call, a number below its argument.
    fn numbers_below(mut state: u64) -> impl FnMut(u64) -> u64 {
        move |below| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        }
    }

    /// Strings read one after another through one set of remembered prefixes, first from a few
    /// hundred prefixes (so that most are known and a known one comes back with a broken count,
    /// a fourth count digit or one changed byte), then from all 17,820 (so that most miss and
    /// slots are shared): each is read as `bin_at` reads it.
    #[test]
    fn remembered_prefixes_read_what_bin_at_reads() {
        let mut next = numbers_below(0x2545_f491_4f6c_dd1d);
        let mut bins = KeyedBins::default();
        let mut strings_read = 0;
        for round in 0..200_000 {
            let narrow = round < 100_000;
            let (m0, m1) = (1 + next(if narrow { 2 } else { 9 }), next(10));
            let exp = if narrow {
                next(7) as i64 - 3
            } else {
                next(199) as i64 - 99
            };
            let count = match next(4) {
                0 => next(10),
                1 => next(100),
                2 => next(1000),
                _ => next(100_000),
            };
            // Bytes after the list, so that every string is long enough for the fast reader.
            let mut text = format!("\"H[{m0}.{m1}e{exp:+03}]={count}\"]}}}}}}").into_bytes();
            if next(8) == 0 {
                // A byte of the string, its closing quote included (what follows stays `]`).
                let at = next(text.len() as u64 - 4) as usize;
                text[at] = b"0123456789\"+-.e]=,x"[next(19) as usize];
            }
            let (read, pairs) = read_pairs(&text, &mut bins);
            let fast = read.map(|read| {
                let (ReadBins::Packed(end) | ReadBins::Keyed(end)) = read;
                // One bin is in order unless its count is zero.
                assert_eq!(matches!(read, ReadBins::Packed(_)), pairs[0].1 != 0);
                (pairs[0].0, pairs[0].1, end)
            });
            let slow = bin_at(&text, 0).map(|(key, count, end)| (key.get(), count, end));
            assert_eq!(fast, slow, "{}", text.escape_ascii());
            strings_read += usize::from(fast.is_some());
            if round == 99_999 {
                let remembered = bins.prefixes.as_ref().unwrap().slots.iter();
                let remembered = remembered.filter(|p| p.lo != 0).count();
                // The 140 prefixes of the first half (fewer where two share a slot), and the
                // valid ones a changed digit makes.
                assert!((100..=600).contains(&remembered), "{remembered} remembered");
            }
        }
        let remembered = bins.prefixes.as_ref().unwrap().slots.iter();
        let remembered = remembered.filter(|p| p.lo != 0).count();
        assert!(
            strings_read > 150_000 && remembered > 900,
            "{strings_read} read, {remembered} remembered"
        );
    }

    /// Lists of 100 strings with bins from 17,820 prefixes, read one after another: most
    /// lookups miss, so chunks are read without the table for a while and then with it again.
    /// Each list reads as `bin_at` reads it string by string.
    #[test]
    fn lists_of_scattered_bins_read_what_bin_at_reads() {
        let mut next = numbers_below(0x9e37_79b9_7f4a_7c15);
        let mut bins = KeyedBins::default();
        let mut skipped = false;
        for _ in 0..300 {
            let strings: Vec<String> = (0..100)
                .map(|_| {
                    let (m0, m1, exp) = (1 + next(9), next(10), next(199) as i64 - 99);
                    format!("\"H[{m0}.{m1}e{exp:+03}]={}\"", next(1000))
                })
                .collect();
            let text = format!("{}]}}}}}}", strings.join(","));
            let (end, read) = read_pairs(text.as_bytes(), &mut bins);
            let (mut expected, mut at) = (Vec::new(), 0);
            while let Some((key, count, next_at)) = bin_at(text.as_bytes(), at) {
                expected.push((key.get(), count));
                at = next_at + 1;
            }
            // Scattered bins are out of order: read again, keyed.
            assert_eq!(end, Some(ReadBins::Keyed(at - 1)), "{text}");
            assert_eq!(read, expected, "{text}");
            skipped |= bins.prefixes.as_ref().unwrap().skip_chunks > 0;
        }
        assert!(skipped, "no chunk was read without the table");
    }

    #[test]
    fn unordered_bins_merge_like_from_bins() {
        let pairs = [
            (50, 2, 3),
            (12, -3, 5),
            (50, 2, 4),
            (0, 7, 2),
            (-25, 1, 0),
            (-1, 0, 1),
        ];
        let mut bins = KeyedBins::default();
        for &(val, exp, count) in &pairs {
            bins.push(bin_key(val, exp).unwrap(), count);
        }
        let expected = Histogram::from_bins(
            pairs
                .iter()
                .map(|&(val, exp, count)| (Bin::new(val, exp).unwrap(), count)),
        );
        assert_eq!(bins.take_histogram(), expected);
        assert!(bins.is_empty());
        assert_eq!(expected.count_of(Bin::new(50, 2).unwrap()), 7);
        assert_eq!(expected.bin_count(), 4);
    }
}
