//! Packed bins: a histogram's bins as bytes, for the store's head, its WAL and the parsers
//! that read bins straight into this form.
//!
//! Layout (`FORMAT.md`, "Packed bins"): for each bin in ascending key order, the gap to the
//! previous key (the first bin: its key; then `key − previous − 1`) as an unsigned LEB128
//! varint, then its count (> 0) as a varint. Nothing else: the length is the caller's.
//! Consecutive populated bins of a latency distribution sit one or two keys apart and most
//! per-period counts are below 128, so a bin usually takes 2 bytes — against 10 in a
//! `Histogram`'s vectors and 4 in the circllhist binary form.

use crate::{Accumulator, Histogram};

/// Most bytes one bin takes: two 10-byte varints.
pub const BIN_BYTES_MAX: usize = 20;

/// Appends bins, packed, to `out`; returns whether they fit — every key valid and above the
/// one before, every count above zero — found as they are packed, so the batch checks lent
/// bins in the same pass. If they do not, `out` is left as it was.
#[must_use]
pub fn pack(keys: &[u16], counts: &[u64], out: &mut Vec<u8>) -> bool {
    pack_groups::<true>(0, keys, counts, out).is_some()
}

/// [`pack`] for bins that continue a packing whose next key is `next` (0: none yet; else the
/// last key packed + 1), with the group fast path or (tests: the reference) bin by bin only.
/// Returns the next key after them, or `None` (with `out` as it was) if they do not fit.
fn pack_groups<const GROUPS: bool>(
    mut next: u16,
    keys: &[u16],
    counts: &[u64],
    out: &mut Vec<u8>,
) -> Option<u16> {
    debug_assert_eq!(keys.len(), counts.len());
    // Room for 2 bytes a bin and one widest bin, reserved once: appends of a group's 16
    // bytes or a bin's 2 then find the room, without the zero-filling a resize did.
    let start = out.len();
    out.reserve(keys.len() * 2 + BIN_BYTES_MAX);
    let mut from = 0;
    // A group holds only bins that fit (`pack_group`), so only bins packed one by one can
    // fail: the first that does ends the packing.
    // Bounded: every step packs at least one bin.
    while from < keys.len() {
        // Groups of bins whose gaps and counts all fit one byte each (nearly all of a latency
        // distribution's) are checked and written as a whole, branch-free: one compare per
        // group instead of two per bin, which the compiler turns into vector code. A group
        // that does not fit (the first bin's gap is its whole key) goes bin by bin, and the
        // groups resume after it.
        if let (true, Some(k), Some(c)) = (
            GROUPS,
            keys.get(from..from + GROUP),
            counts.get(from..from + GROUP),
        ) {
            if let (Ok(k), Ok(c)) = (<&[u16; GROUP]>::try_from(k), <&[u64; GROUP]>::try_from(c)) {
                if let Some(bytes) = pack_group(next, k, c) {
                    out.extend_from_slice(&bytes);
                    next = k[GROUP - 1].wrapping_add(1);
                    from += GROUP;
                    continue;
                }
            }
        }
        let (k, c) = (keys[from], counts[from]);
        // `next` wraps to 0 only after key `u16::MAX`, which is not valid and ended the
        // packing, so `k >= next` is "above the key before".
        if c == 0 || k < next || !crate::key_is_valid(k) {
            out.truncate(start);
            return None;
        }
        from += 1;
        let gap = k.wrapping_sub(next);
        next = k.wrapping_add(1);
        put_bin(out, u64::from(gap), c);
    }
    Some(next)
}

/// Packed bins known to fit — every key valid and above the one before, every count above
/// zero — because this module checked them as it packed them ([`PackedList`]): a writer may
/// copy them as they are, without walking them again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedRef<'a> {
    bytes: &'a [u8],
    bins: usize,
}

impl<'a> PackedRef<'a> {
    /// The packed bytes.
    pub fn bytes(self) -> &'a [u8] {
        self.bytes
    }

    /// How many bins they hold.
    pub fn bins(self) -> usize {
        self.bins
    }

    /// The histogram they hold.
    pub fn to_histogram(self) -> Histogram {
        let h = unpack_trusted(self.bytes);
        debug_assert_eq!(h.bin_count(), self.bins);
        h
    }
}

/// A [`PackedChunk`]'s room: 64 bins of two bytes, and one more of the widest.
const CHUNK_BYTES: usize = 64 * 2 + BIN_BYTES_MAX;

/// Bins packed one at a time into a buffer on the stack and checked as they come — every key
/// (valid by its type) above the one before, every count above zero — for a parser's per-bin
/// loop: a
/// push is inlined, with no call and no vector capacity check, and a bin whose gap and count
/// fit a byte each (nearly every bin of a latency distribution) takes one compare.
/// [`PackedList::extend_chunk`] moves the chunk into a list whole.
#[derive(Clone, Debug)]
pub struct PackedChunk {
    bytes: [u8; CHUNK_BYTES],
    len: usize,
    bins: usize,
    /// The key after the last bin pushed (0: none yet).
    next: u16,
    /// `next` when the chunk's first bin was pushed: the list must be at the same key.
    start_next: u16,
    /// Every bin pushed so far fits.
    fits: bool,
}

impl Default for PackedChunk {
    fn default() -> Self {
        PackedChunk {
            bytes: [0; CHUNK_BYTES],
            len: 0,
            bins: 0,
            next: 0,
            start_next: 0,
            fits: true,
        }
    }
}

impl PackedChunk {
    /// Whether another bin surely fits (push only then).
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.len + BIN_BYTES_MAX <= CHUNK_BYTES
    }

    /// Bins pushed since the chunk was last moved into a list.
    #[inline(always)]
    pub fn bins(&self) -> usize {
        self.bins
    }

    /// Packs a bin after the ones pushed before. A bin that does not fit (or a push without
    /// room) is remembered: the list refuses the chunk.
    #[inline(always)]
    pub fn push(&mut self, key: crate::ValidKey, count: u64) {
        let key = key.get();
        // In 32 bits: a key below the one before wraps past 2³², out of both narrow ranges.
        let gap = u32::from(key).wrapping_sub(u32::from(self.next));
        // A key below the one before wraps its gap past 0x80, and a zero count its `c − 1`.
        if (u64::from(gap) | count | count.wrapping_sub(1)) < 0x80 {
            match self.bytes.get_mut(self.len..self.len + 2) {
                Some(pair) => pair.copy_from_slice(&[gap as u8, count as u8]),
                None => self.fits = false,
            }
            self.len += 2;
        } else {
            self.push_wide(key, count);
        }
        self.next = key.wrapping_add(1);
        self.bins += 1;
    }

    /// A bin whose gap or count takes more than a byte (the first of each histogram), or that
    /// does not fit.
    #[inline(never)]
    fn push_wide(&mut self, key: u16, count: u64) {
        // `next` is 0 before the first bin, and wraps only after key `u16::MAX`, which is not
        // valid.
        if count == 0 || key < self.next {
            self.fits = false;
            return;
        }
        let gap = key - self.next;
        // Written in place (a vector here was an allocation per histogram).
        let Some(room) = self.bytes.get_mut(self.len..self.len + BIN_BYTES_MAX) else {
            self.fits = false;
            return;
        };
        let at = put_varint_at(room, 0, u64::from(gap));
        let at = put_varint_at(room, at, count);
        self.len += at;
    }
}

/// Histograms packed one after another into one buffer — a parser's bins for a whole body —
/// each checked as its bins are appended, and lent as [`PackedRef`]s.
#[derive(Clone, Debug, Default)]
pub struct PackedList {
    bytes: Vec<u8>,
    /// Each finished histogram's end in `bytes` and bin count; the next starts where it ends.
    ends: Vec<(usize, usize)>,
    /// The histogram being written: the key after its last bin (0: none yet) and its bins.
    open_next: u16,
    open_bins: usize,
}

impl PackedList {
    /// Empties the list, keeping its buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.abandon();
    }

    /// Room for `bytes` more bytes of bins.
    pub fn reserve(&mut self, bytes: usize) {
        self.bytes.reserve(bytes);
    }

    /// The memory the list holds.
    pub fn capacity_bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<(usize, usize)>()
    }

    /// Finished histograms.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Where the histogram being written starts.
    fn open_start(&self) -> usize {
        self.ends.last().map_or(0, |&(end, _)| end)
    }

    /// Appends bins to the histogram being written (a new one after [`PackedList::finish`],
    /// [`PackedList::abandon`] or [`PackedList::clear`]). `false` when they do not fit after
    /// its bins so far — a key not valid or not above the one before, a zero count — leaving
    /// it as it was.
    #[must_use]
    #[inline]
    pub fn extend(&mut self, keys: &[u16], counts: &[u64]) -> bool {
        match pack_groups::<true>(self.open_next, keys, counts, &mut self.bytes) {
            Some(next) => {
                self.open_next = next;
                self.open_bins += keys.len();
                true
            }
            None => false,
        }
    }

    /// [`PackedList::extend`] for bins packed into `chunk`, which it empties for the bins
    /// after them. `false` when they do not fit — a bin that did not, or a chunk started at
    /// another key than the histogram being written is at — leaving both as they were.
    #[must_use]
    #[inline]
    pub fn extend_chunk(&mut self, chunk: &mut PackedChunk) -> bool {
        if !chunk.fits || chunk.start_next != self.open_next {
            return false;
        }
        let Some(bytes) = chunk.bytes.get(..chunk.len) else {
            return false;
        };
        self.bytes.extend_from_slice(bytes);
        self.open_next = chunk.next;
        self.open_bins += chunk.bins;
        (chunk.len, chunk.bins, chunk.start_next) = (0, 0, chunk.next);
        true
    }

    /// Ends the histogram being written and returns its index for [`PackedList::get`].
    pub fn finish(&mut self) -> usize {
        assert!(self.bytes.len() >= self.open_start() + 2 * self.open_bins);
        self.ends.push((self.bytes.len(), self.open_bins));
        (self.open_next, self.open_bins) = (0, 0);
        self.ends.len() - 1
    }

    /// Drops the histogram being written.
    pub fn abandon(&mut self) {
        let start = self.open_start();
        self.bytes.truncate(start);
        (self.open_next, self.open_bins) = (0, 0);
    }

    /// Finished histogram `index`.
    pub fn get(&self, index: usize) -> Option<PackedRef<'_>> {
        let &(end, bins) = self.ends.get(index)?;
        let start = index
            .checked_sub(1)
            .and_then(|i| self.ends.get(i))
            .map_or(0, |&(end, _)| end);
        let bytes = self.bytes.get(start..end)?;
        debug_assert_eq!(
            for_each_bin(bytes, |_, _| {}),
            Ok(bins),
            "bins the list checked"
        );
        Some(PackedRef { bytes, bins })
    }
}

/// Bins packed or unpacked at once on the fast paths.
const GROUP: usize = 8;

/// `GROUP` bins after key `next`, packed, if every gap and count fits one byte, no count is
/// zero and every key is valid. A key not above the one before does not fit: its gap wraps
/// to 2¹⁶ − 1 or near it.
///
/// Written lane by lane with no dependency between lanes (each gap from the previous key as
/// loaded, each bin's two bytes as one `u16`), so it compiles to vector code: a running
/// `prev` chained every bin on the one before and took 3× as long (2.1 against 0.7 ns a bin).
#[inline(always)]
fn pack_group(next: u16, keys: &[u16; GROUP], counts: &[u64; GROUP]) -> Option<[u8; 2 * GROUP]> {
    // Gaps in 32 bits: a key below the one before wraps past 2³², never into the narrow range
    // (in 16 bits, a high key followed by a low one wrapped to a small gap and was taken).
    let mut prevs = [u32::from(next); GROUP];
    for j in 1..GROUP {
        prevs[j] = u32::from(keys[j - 1]) + 1;
    }
    let mut wide = 0u64;
    let mut pairs = [0u16; GROUP];
    for j in 0..GROUP {
        let gap = u32::from(keys[j]).wrapping_sub(prevs[j]);
        // A zero count does not fit either (`0 − 1` wraps), so a group never holds one.
        wide |= u64::from(gap) | counts[j] | counts[j].wrapping_sub(1);
        pairs[j] = (gap & 0xff) as u16 | ((counts[j] as u16) << 8);
    }
    // Keys checked in a loop of their own, on 16-bit lanes (one vector for the group).
    let invalid = keys
        .iter()
        .fold(false, |invalid, &k| invalid | !crate::key_is_valid(k));
    wide |= u64::from(invalid) << 7;
    let mut bytes = [0u8; 2 * GROUP];
    for (out, pair) in bytes.chunks_exact_mut(2).zip(pairs) {
        out.copy_from_slice(&pair.to_le_bytes());
    }
    (wide < 0x80).then_some(bytes)
}

/// `GROUP` bins packed one byte per gap and count at the start of `bytes` (after key `next`):
/// their keys and counts, if every byte is a one-byte varint, every count > 0 and every key
/// valid. Anything else (a wider varint, damage) is left to the bin-by-bin path.
#[inline(always)]
fn unpack_group(next: u32, bytes: &[u8; 2 * GROUP]) -> Option<([u16; GROUP], [u8; GROUP])> {
    let (mut keys, mut counts) = ([0u16; GROUP], [0u8; GROUP]);
    let mut key = next;
    let mut high = 0u8;
    let mut bad = false;
    for j in 0..GROUP {
        let (gap, count) = (bytes[2 * j], bytes[2 * j + 1]);
        high |= gap | count;
        key += u32::from(gap);
        keys[j] = key as u16;
        counts[j] = count;
        // Non-short-circuit: one flag for the group, no branch per bin.
        let valid = key <= u32::from(u16::MAX) && crate::key_is_valid(key as u16);
        bad |= (count == 0) | !valid;
        key += 1;
    }
    (high < 0x80 && !bad).then_some((keys, counts))
}

/// Where a walk puts the bins it reads: one at a time, or a group of `GROUP` at once (by
/// default one at a time).
trait Sink {
    fn bin(&mut self, key: u16, count: u64);

    #[inline(always)]
    fn group(&mut self, keys: &[u16; GROUP], counts: &[u8; GROUP]) {
        for (&k, &c) in keys.iter().zip(counts) {
            self.bin(k, u64::from(c));
        }
    }

    /// A group of `GROUP` one-byte gaps and counts after key `next` (trusted bytes: see
    /// `walk_trusted`), as two little-endian words, returning the key after its last. By
    /// default through `group`.
    #[inline(always)]
    fn group_words(&mut self, mut next: usize, words: [u64; 2]) -> usize {
        let (mut keys, mut counts) = ([0u16; GROUP], [0u8; GROUP]);
        for j in 0..GROUP {
            let (gap, count) = pair_at(words, j);
            let key = next + gap;
            keys[j] = key as u16;
            counts[j] = count as u8;
            next = key + 1;
        }
        self.group(&keys, &counts);
        next
    }

    /// `WIDE_QUAD` bins of a one-byte gap and a two-byte count after key `next`, the first
    /// `3 * WIDE_QUAD` bytes of two little-endian words (see [`is_wide_quad`]), returning the
    /// key after the last. By default bin by bin.
    #[inline(always)]
    fn wide_quad(&mut self, mut next: usize, words: [u64; 2]) -> usize {
        for j in 0..WIDE_QUAD {
            let (gap, count) = wide_pair_at(words, j);
            let key = next + gap;
            self.bin(key as u16, count);
            next = key + 1;
        }
        next
    }
}

/// The `2 * GROUP` bytes at `at` as two little-endian words, if there are that many: loaded
/// as words, not assembled byte by byte (which the compiler did for a byte array).
#[inline(always)]
fn group_words_at(bytes: &[u8], at: usize) -> Option<[u64; 2]> {
    let group = bytes.get(at..at + 2 * GROUP)?;
    let (a, b) = group.split_at(GROUP);
    let (Ok(a), Ok(b)) = (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(b)) else {
        return None;
    };
    Some([u64::from_le_bytes(a), u64::from_le_bytes(b)])
}

/// The bin at the start of `word` (little-endian bytes), if its gap takes one byte and its
/// count one or two: its gap, its count and the bytes it takes, as `get_varint` reads them.
#[inline(always)]
fn short_bin(word: u64) -> Option<(usize, u64, usize)> {
    if word & 0x80 != 0 {
        return None;
    }
    let (gap, count_low) = ((word & 0x7f) as usize, (word >> 8) & 0x7f);
    if word & 0x8000 == 0 {
        return Some((gap, count_low, 2));
    }
    if word & 0x80_0000 == 0 {
        return Some((gap, count_low | ((word >> 16) & 0x7f) << 7, 3));
    }
    None
}

/// Bins in a wide quad ([`is_wide_quad`]).
const WIDE_QUAD: usize = 4;

/// Whether the first `3 * WIDE_QUAD` bytes of a group's words are `WIDE_QUAD` bins of a
/// one-byte gap and a two-byte count: the high bit set in each count's first byte and no
/// other.
#[inline(always)]
fn is_wide_quad(words: [u64; 2]) -> bool {
    // Bytes 1, 4 and 7 of the first word and 2 (the tenth) of the second; the second word's
    // bytes past the twelfth are not the quad's.
    const HIGH: [u64; 2] = [0x8000_0080_0000_8000, 0x0080_0000];
    [words[0] & 0x8080_8080_8080_8080, words[1] & 0x8080_8080] == HIGH
}

/// Bin `j` of a wide quad's words ([`is_wide_quad`]): its gap and count.
#[inline(always)]
fn wide_pair_at(words: [u64; 2], j: usize) -> (usize, u64) {
    debug_assert!(j < WIDE_QUAD);
    let bytes = (u128::from(words[1]) << 64 | u128::from(words[0])) >> (24 * j);
    let bin = bytes as u64;
    (
        (bin & 0x7f) as usize,
        (bin >> 8) & 0x7f | ((bin >> 16) & 0x7f) << 7,
    )
}

/// Bin `j` of a group's words: its gap and count bytes.
#[inline(always)]
fn pair_at(words: [u64; 2], j: usize) -> (usize, u64) {
    let pair = words[j / 4] >> (16 * (j % 4));
    ((pair & 0xff) as usize, (pair >> 8) & 0xff)
}

/// A closure called for every bin.
struct Each<F>(F);

impl<F: FnMut(u16, u64)> Sink for Each<F> {
    #[inline(always)]
    fn bin(&mut self, key: u16, count: u64) {
        (self.0)(key, count);
    }

    /// Each bin straight from the words, without the default's key and count arrays (a
    /// window's statistics over a series' first periods took 40 instructions a bin with them).
    #[inline(always)]
    fn group_words(&mut self, mut next: usize, words: [u64; 2]) -> usize {
        for j in 0..GROUP {
            let (gap, count) = pair_at(words, j);
            let key = next + gap;
            (self.0)(key as u16, count);
            next = key + 1;
        }
        next
    }
}

/// An accumulator: a group is added with one span check.
struct AddTo<'a>(&'a mut Accumulator);

impl Sink for AddTo<'_> {
    #[inline(always)]
    fn bin(&mut self, key: u16, count: u64) {
        self.0.add_key(key, count);
    }

    #[inline(always)]
    fn group(&mut self, keys: &[u16; GROUP], counts: &[u8; GROUP]) {
        self.0.add_keys(keys, counts);
    }
}

/// Puts every bin of packed `bytes` that this module packed itself (the head's own buffers)
/// into `sink` and returns how many there were. The bytes are trusted: they are checked in
/// debug builds only, and no key is validated (that was a third of a period fold); damage
/// could only misplace counts (a key is cut to 16 bits), which sinks index with checked
/// accesses.
#[inline(always)]
fn walk_trusted(bytes: &[u8], sink: &mut impl Sink) -> usize {
    debug_assert!(
        for_each_bin(bytes, |_, _| {}).is_ok(),
        "packed bins the store wrote"
    );
    let (mut at, mut next, mut bins) = (0usize, 0usize, 0usize);
    // Bounded: every step takes at least two bytes.
    while at < bytes.len() {
        if let Some(words) = group_words_at(bytes, at) {
            if (words[0] | words[1]) & 0x8080_8080_8080_8080 == 0 {
                // Eight one-byte gaps and counts.
                next = sink.group_words(next, words);
                at += 2 * GROUP;
                bins += GROUP;
                continue;
            }
            if is_wide_quad(words) {
                // A merged period's busiest bins (a run of about a quarter of them) take two
                // bytes a count: four read at once, where each took ≈ 37 instructions alone
                // (a failed group test, then a short bin).
                next = sink.wide_quad(next, words);
                at += 3 * WIDE_QUAD;
                bins += WIDE_QUAD;
                continue;
            }
            // Not a group: a bin of a one-byte gap and a one- or two-byte count (a merged
            // period's larger counts make a third of its bins miss the groups) is read off
            // the word, where the varints byte by byte took ≈ 50 instructions a bin. (Reading
            // on bin by bin up to the group's last wide byte, not retrying the group before
            // each, cost more: the reads' bounds checks were as dear as the group's test.)
            if let Some((gap, count, len)) = short_bin(words[0]) {
                let key = next + gap;
                sink.bin(key as u16, count);
                next = key + 1;
                at += len;
                bins += 1;
                continue;
            }
        }
        let (Some(gap), Some(count)) = (get_varint(bytes, &mut at), get_varint(bytes, &mut at))
        else {
            break;
        };
        let key = next.saturating_add(usize::try_from(gap).unwrap_or(usize::MAX));
        sink.bin(key as u16, count);
        next = key.saturating_add(1);
        bins += 1;
    }
    bins
}

/// Entries of a dense count array: one per 16-bit key, so that a key (cut to 16 bits) indexes
/// it with no bounds check.
pub const DENSE_KEYS: usize = 1 << 16;
/// A count per key, for [`add_to_dense_unmarked`] and [`pack_nonzero`].
pub type DenseCounts = [u64; DENSE_KEYS];

/// A zeroed dense array, on the heap.
pub fn zeroed_dense<const N: usize>() -> Box<[u64; N]> {
    match vec![0u64; N].into_boxed_slice().try_into() {
        Ok(array) => array,
        Err(_) => unreachable!("a boxed slice of N entries is a boxed array of N"),
    }
}

/// Adds every bin of packed bins the store wrote itself (see [`walk_trusted`]) into
/// `dense[key]` (saturating) and widens `lo ..= hi` to the keys seen; returns the bins added.
/// A fold then reads the merge off a scan of the range ([`pack_nonzero`], [`take_nonzero`]):
/// a period's bins sit close together, so the scan costs less than marking each bin as it
/// is added did.
pub fn add_to_dense_unmarked(
    bytes: &[u8],
    dense: &mut DenseCounts,
    (lo, hi): (&mut usize, &mut usize),
) -> usize {
    fold_into_dense(bytes, dense, (lo, hi), u64::saturating_add)
}

/// [`add_to_dense_unmarked`] with `fold(entry, count)` as each bin's new entry instead of the
/// sum (a window's statistics fold occupancy and capped counts into one word per key).
#[inline]
pub fn fold_into_dense(
    bytes: &[u8],
    dense: &mut DenseCounts,
    (lo, hi): (&mut usize, &mut usize),
    fold: impl Fn(u64, u64) -> u64,
) -> usize {
    let mut sink = DenseFold {
        dense,
        lo: *lo,
        hi: *hi,
        fold,
    };
    let bins = walk_trusted(bytes, &mut sink);
    (*lo, *hi) = (sink.lo, sink.hi);
    bins
}

/// [`fold_into_dense`]'s sink: the key range is widened once per group of eight.
struct DenseFold<'a, F> {
    dense: &'a mut DenseCounts,
    lo: usize,
    hi: usize,
    fold: F,
}

impl<F: Fn(u64, u64) -> u64> Sink for DenseFold<'_, F> {
    #[inline(always)]
    fn bin(&mut self, key: u16, count: u64) {
        let k = usize::from(key);
        let slot = &mut self.dense[k % DENSE_KEYS];
        *slot = (self.fold)(*slot, count);
        self.lo = self.lo.min(k);
        self.hi = self.hi.max(k);
    }

    #[inline(always)]
    fn group_words(&mut self, next: usize, words: [u64; 2]) -> usize {
        self.fold_words::<GROUP>(next, words, pair_at)
    }

    #[inline(always)]
    fn wide_quad(&mut self, next: usize, words: [u64; 2]) -> usize {
        self.fold_words::<WIDE_QUAD>(next, words, wide_pair_at)
    }
}

impl<F: Fn(u64, u64) -> u64> DenseFold<'_, F> {
    /// Folds in the `N` bins after key `next` that `pair(words, j)` reads off two loaded words
    /// (a group's or a wide quad's), widening the key range once for all of them; returns the
    /// key after the last.
    #[inline(always)]
    fn fold_words<const N: usize>(
        &mut self,
        mut next: usize,
        words: [u64; 2],
        pair: fn([u64; 2], usize) -> (usize, u64),
    ) -> usize {
        let first = next + pair(words, 0).0;
        for j in 0..N {
            let (gap, count) = pair(words, j);
            let k = next + gap;
            let slot = &mut self.dense[k % DENSE_KEYS];
            *slot = (self.fold)(*slot, count);
            next = k + 1;
        }
        self.lo = self.lo.min(first);
        self.hi = self.hi.max(next - 1);
        next
    }
}

/// Appends every non-zero count of `dense` in keys `lo ..= hi` to `out` as `(key, count)`, in
/// key order, and zeroes it. Work in proportion to the range, checked eight keys at a time.
pub fn take_nonzero(dense: &mut DenseCounts, range: (usize, usize), out: &mut Vec<(u16, u64)>) {
    take_each_nonzero(dense, range, |k, c| out.push((k as u16, c)));
}

/// Appends every non-zero count of `dense` in keys `lo ..= hi`, packed in key order, and
/// zeroes it: [`take_nonzero`] straight into packed bins. For a fold that added its samples
/// unmarked ([`add_to_dense_unmarked`]): a period's merged bins sit close together, so a scan
/// of their range, eight keys a step, costs less than marking every bin as it is added.
pub fn pack_nonzero(dense: &mut DenseCounts, range: (usize, usize), out: &mut Vec<u8>) {
    let mut next = 0usize;
    take_each_nonzero(dense, range, |k, c| {
        put_bin(out, (k - next) as u64, c);
        next = k + 1;
    });
}

/// Calls `f(key, count)` for every non-zero count of `dense` in keys `lo ..= hi`, in key
/// order, and zeroes it. Work in proportion to the range, checked eight keys at a time.
#[inline(always)]
pub fn take_each_nonzero(
    dense: &mut DenseCounts,
    (lo, hi): (usize, usize),
    mut f: impl FnMut(usize, u64),
) {
    let Some(span) = dense.get_mut(lo..=hi) else {
        debug_assert!(lo > hi, "a range inside the dense array");
        return;
    };
    let mut key = lo;
    // Arrays, not slices: no bounds check in the scan.
    let (chunks, rest) = span.as_chunks_mut::<8>();
    for chunk in chunks {
        // Two 4-wide ors and a test, where the compiler can (a fold over the slice was not).
        let any = (chunk[0] | chunk[4])
            | (chunk[1] | chunk[5])
            | (chunk[2] | chunk[6])
            | (chunk[3] | chunk[7]);
        if any != 0 {
            take_each(chunk, key, &mut f);
        }
        key += 8;
    }
    take_each(rest, key, &mut f);
}

#[inline(always)]
fn take_each(counts: &mut [u64], first_key: usize, f: &mut impl FnMut(usize, u64)) {
    for (i, c) in counts.iter_mut().enumerate() {
        if *c != 0 {
            f(first_key + i, std::mem::take(c));
        }
    }
}

/// Appends one bin, its gap and count (> 0): two bytes in the common case, varints otherwise.
#[inline(always)]
fn put_bin(out: &mut Vec<u8>, gap: u64, count: u64) {
    if gap < 0x80 && count < 0x80 {
        out.extend_from_slice(&[gap as u8, count as u8]);
    } else {
        put_varint(out, gap);
        put_varint(out, count);
    }
}

/// Calls `f(key, count)` for every bin of packed bins the store packed itself (see
/// [`walk_trusted`]), in key order; returns how many there were.
#[inline]
pub fn for_each_bin_trusted(bytes: &[u8], f: impl FnMut(u16, u64)) -> usize {
    walk_trusted(bytes, &mut Each(f))
}

/// Unpacks bins the store packed itself (see [`walk_trusted`]) into a histogram.
pub fn unpack_trusted(bytes: &[u8]) -> Histogram {
    // Every bin takes at least two bytes: sized once, no regrowth while pushing.
    let bins_max = bytes.len() / 2;
    let (mut keys, mut counts) = (Vec::with_capacity(bins_max), Vec::with_capacity(bins_max));
    walk_trusted(
        bytes,
        &mut Each(|k, c| {
            keys.push(k);
            counts.push(c);
        }),
    );
    Histogram::from_sorted_key_vecs(keys, counts)
}

/// Appends bins given as `(key, count)` pairs (keys strictly ascending, counts > 0), packed.
pub fn pack_pairs(bins: &[(u16, u64)], out: &mut Vec<u8>) {
    out.reserve(bins.len() * 2 + BIN_BYTES_MAX);
    let mut next = 0u16;
    for &(k, c) in bins {
        debug_assert!(k >= next && c > 0, "ascending keys, counts > 0");
        put_bin(out, u64::from(k - next), c);
        next = k.wrapping_add(1);
    }
}

/// Appends a histogram's bins, packed.
pub fn pack_histogram(h: &Histogram, out: &mut Vec<u8>) {
    let fit = pack(h.keys(), h.counts(), out);
    debug_assert!(fit, "a histogram's bins fit");
}

/// Why packed bytes are not a histogram: what, and at which byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnpackError {
    pub offset: usize,
    pub what: &'static str,
}

/// Writes `v` as an unsigned LEB128 varint at `out[at..]` (room for 10 bytes must be there)
/// and returns where it ends.
#[inline]
fn put_varint_at(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    // Bounded: at most 10 bytes.
    while v >= 0x80 {
        if let Some(b) = out.get_mut(at) {
            *b = v as u8 | 0x80;
        }
        at += 1;
        v >>= 7;
    }
    if let Some(b) = out.get_mut(at) {
        *b = v as u8;
    }
    at + 1
}

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    // Bounded: at most 10 bytes.
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*at`; `None` if the bytes end inside it or it overflows 64 bits.
#[inline]
fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    // Bounded: at most 10 bytes.
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return (shift < 63 || b <= 1).then_some(v);
        }
    }
    None
}

/// Calls `f(key, count)` for every bin of packed `bytes`, in key order, and returns how many
/// there were. Checks everything: varints complete and in range, keys valid and strictly
/// ascending, counts > 0.
pub fn for_each_bin(bytes: &[u8], f: impl FnMut(u16, u64)) -> Result<usize, UnpackError> {
    walk(bytes, usize::MAX, f).map(|(bins, _)| bins)
}

/// Reads exactly `bins` bins from the start of `bytes` into a histogram; returns it and the
/// bytes they took (a WAL record holds bins after their count, followed by more data).
pub fn unpack_prefix(bytes: &[u8], bins: usize) -> Result<(Histogram, usize), UnpackError> {
    let (mut keys, mut counts) = (Vec::with_capacity(bins), Vec::with_capacity(bins));
    let used = unpack_prefix_into(bytes, bins, &mut keys, &mut counts)?;
    Ok((Histogram::from_sorted_key_vecs(keys, counts), used))
}

/// [`unpack_prefix`] appending to the caller's key and count buffers.
pub fn unpack_prefix_into(
    bytes: &[u8],
    bins: usize,
    keys: &mut Vec<u16>,
    counts: &mut Vec<u64>,
) -> Result<usize, UnpackError> {
    for_each_bin_prefix(bytes, bins, |k, c| {
        keys.push(k);
        counts.push(c);
    })
}

/// Calls `f(key, count)` for exactly `bins` bins from the start of `bytes` (checked as
/// [`for_each_bin`] checks) and returns the bytes they took.
pub fn for_each_bin_prefix(
    bytes: &[u8],
    bins: usize,
    f: impl FnMut(u16, u64),
) -> Result<usize, UnpackError> {
    let (got, used) = walk(bytes, bins, f)?;
    if got != bins {
        return Err(UnpackError {
            offset: used,
            what: "fewer bins than their count",
        });
    }
    Ok(used)
}

/// Up to `bins_max` bins from the start of `bytes`: how many, and the bytes they took.
#[inline]
fn walk(
    bytes: &[u8],
    bins_max: usize,
    f: impl FnMut(u16, u64),
) -> Result<(usize, usize), UnpackError> {
    walk_groups::<true>(bytes, bins_max, &mut Each(f))
}

/// [`walk`] into any sink, with the group fast path or (tests: the reference) bin by bin only.
#[inline]
fn walk_groups<const GROUPS: bool>(
    bytes: &[u8],
    bins_max: usize,
    sink: &mut impl Sink,
) -> Result<(usize, usize), UnpackError> {
    let (mut at, mut next, mut bins) = (0usize, 0u32, 0usize);
    while at < bytes.len() && bins < bins_max {
        if GROUPS && bins_max - bins >= GROUP {
            let group = bytes
                .get(at..at + 2 * GROUP)
                .map(<&[u8; 2 * GROUP]>::try_from);
            if let Some(Ok(group)) = group {
                if let Some((keys, counts)) = unpack_group(next, group) {
                    debug_assert!(keys.iter().all(|&k| crate::key_is_valid(k)));
                    sink.group(&keys, &counts);
                    next = u32::from(keys[GROUP - 1]) + 1;
                    bins += GROUP;
                    at += 2 * GROUP;
                    continue;
                }
            }
        }
        // The common case: a one-byte gap and a one-byte count.
        if let Some(&[gap, count]) = bytes.get(at..at + 2) {
            let key = next + u32::from(gap);
            if gap < 0x80 && count < 0x80 && count > 0 && key <= u32::from(u16::MAX) {
                if !crate::key_is_valid(key as u16) {
                    return Err(UnpackError {
                        offset: at,
                        what: "not a valid bin key",
                    });
                }
                sink.bin(key as u16, u64::from(count));
                next = key + 1;
                bins += 1;
                at += 2;
                continue;
            }
        }
        let offset = at;
        let err = |what| UnpackError { offset, what };
        let gap = get_varint(bytes, &mut at).ok_or(err("bin gap: truncated or too long"))?;
        // Checked: a 64-bit gap must not wrap around to a key below the previous one.
        let key = u64::from(next)
            .checked_add(gap)
            .and_then(|k| u16::try_from(k).ok());
        let key = key.ok_or(err("bin key past the last key"))?;
        if !crate::key_is_valid(key) {
            return Err(err("not a valid bin key"));
        }
        let count = get_varint(bytes, &mut at).ok_or(err("bin count: truncated or too long"))?;
        if count == 0 {
            return Err(err("a bin count of zero"));
        }
        sink.bin(key, count);
        next = u32::from(key) + 1;
        bins += 1;
    }
    Ok((bins, at))
}

/// Unpacks into a histogram (checked; the store unpacks its own bins with [`unpack_trusted`]).
#[cfg(test)]
pub fn unpack(bytes: &[u8]) -> Result<Histogram, UnpackError> {
    // Every bin takes at least two bytes: sized once, no regrowth while pushing.
    let bins_max = bytes.len() / 2;
    let (mut keys, mut counts) = (Vec::with_capacity(bins_max), Vec::with_capacity(bins_max));
    for_each_bin(bytes, |k, c| {
        keys.push(k);
        counts.push(c);
    })?;
    Ok(Histogram::from_sorted_key_vecs(keys, counts))
}

/// Adds packed bins the store wrote itself into `acc` (trusted: see [`walk_trusted`]).
pub fn add_to(bytes: &[u8], acc: &mut Accumulator) {
    walk_trusted(bytes, &mut AddTo(acc));
}

/// Adds exactly `bins` bins from the start of `bytes` into `acc` (checked as [`for_each_bin`]
/// checks; on an error some bins may have been added) and returns the bytes they took.
pub fn add_prefix_to(
    bytes: &[u8],
    bins: usize,
    acc: &mut Accumulator,
) -> Result<usize, UnpackError> {
    let (got, used) = walk_groups::<true>(bytes, bins, &mut AddTo(acc))?;
    if got != bins {
        return Err(UnpackError {
            offset: used,
            what: "fewer bins than their count",
        });
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    proptest::proptest! {
        /// Adding packed samples without marks, then taking the range's non-zero counts, is
        /// their merge (saturating), in key order, with the range the bins span; the array is
        /// left zero. Then packing the pairs is packing the merge.
        #[test]
        fn unmarked_merge_then_take_nonzero_is_the_merge(
            samples in proptest::collection::vec(
                proptest::collection::btree_map(0u16..u16::MAX, 1u64..200, 0..120), 1..7),
            huge in proptest::option::of(0u16..u16::MAX),
        ) {
            let mut dense: Box<DenseCounts> = zeroed_dense();
            let mut merged: std::collections::BTreeMap<u16, u64> = Default::default();
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            for (i, sample) in samples.iter().enumerate() {
                let mut sample = sample.clone();
                sample.retain(|&k, _| crate::key_is_valid(k));
                if let (0, Some(k)) = (i, huge.filter(|&k| crate::key_is_valid(k))) {
                    sample.insert(k, u64::MAX - 1);
                }
                let (keys, counts): (Vec<u16>, Vec<u64>) = sample.iter().map(|(&k, &c)| (k, c)).unzip();
                let mut bytes = Vec::new();
                proptest::prop_assert!(pack(&keys, &counts, &mut bytes));
                let added = add_to_dense_unmarked(&bytes, &mut dense, (&mut lo, &mut hi));
                proptest::prop_assert_eq!(added, keys.len());
                for (k, c) in sample {
                    let m = merged.entry(k).or_default();
                    *m = m.saturating_add(c);
                }
            }
            let want: Vec<(u16, u64)> = merged.into_iter().collect();
            match (want.first(), want.last()) {
                (Some(first), Some(last)) => {
                    proptest::prop_assert_eq!((lo, hi), (usize::from(first.0), usize::from(last.0)));
                }
                _ => proptest::prop_assert!(lo > hi),
            }
            let mut got = vec![(1, 1)];
            take_nonzero(&mut dense, (lo, hi), &mut got);
            proptest::prop_assert_eq!(&got[1..], &want[..]);
            proptest::prop_assert!(dense.iter().all(|&c| c == 0));
            let (keys, counts): (Vec<u16>, Vec<u64>) = want.iter().copied().unzip();
            let (mut packed_pairs, mut packed_bins) = (Vec::new(), Vec::new());
            pack_pairs(&want, &mut packed_pairs);
            proptest::prop_assert!(pack(&keys, &counts, &mut packed_bins));
            proptest::prop_assert_eq!(packed_pairs, packed_bins);
        }

        /// Packing off a scan of the dense array is the same as packing the sorted bins, for
        /// narrow and wide gaps and counts, and leaves the array zero.
        #[test]
        fn pack_nonzero_equals_pack(
            bins in proptest::collection::btree_map(0u16..u16::MAX, 1u64..u64::MAX, 0..300),
            narrow in proptest::collection::vec(1u64..0x80, 0..300),
        ) {
            let mut dense: Box<DenseCounts> = zeroed_dense();
            let keys: Vec<u16> = bins.keys().copied().filter(|&k| crate::key_is_valid(k)).collect();
            // Mostly one-byte counts, as in a merged period, with the wide ones kept.
            let counts: Vec<u64> = keys
                .iter()
                .map(|k| &bins[k])
                .zip(narrow.iter().chain(std::iter::repeat(&0)))
                .map(|(&wide, &n)| if n > 0 { n } else { wide })
                .collect();
            let (mut lo, mut hi) = (usize::MAX, 0);
            for (&k, &c) in keys.iter().zip(&counts) {
                let k = usize::from(k);
                dense[k] = c;
                (lo, hi) = (lo.min(k), hi.max(k));
            }
            let (mut want, mut got) = (vec![7], vec![7]);
            proptest::prop_assert!(pack(&keys, &counts, &mut want));
            pack_nonzero(&mut dense, (lo, hi), &mut got);
            proptest::prop_assert_eq!(&got, &want);
            proptest::prop_assert!(dense.iter().all(|&c| c == 0));
        }

        #[test]
        fn round_trip(values in proptest::collection::vec((-1e30f64..1e30, 1u64..u64::MAX), 0..300),
                      special in proptest::collection::vec(0usize..4, 0..4)) {
            let mut h = Histogram::new();
            for &(v, n) in &values {
                h.insert_n(v, n);
            }
            for s in special {
                h.insert_n([0.0, f64::NAN, 1e-127, -1e127][s], 3);
            }
            let mut bytes = vec![9, 9];
            pack_histogram(&h, &mut bytes);
            proptest::prop_assert_eq!(unpack(&bytes[2..]).unwrap(), h.clone());
            let mut acc = Accumulator::new();
            add_to(&bytes[2..], &mut acc);
            proptest::prop_assert_eq!(acc.to_histogram(), h);
        }

        /// The group fast paths agree with the bin-by-bin paths: packing histograms whose
        /// gaps and counts mostly fit a byte (with wide ones and the NaN and zero keys mixed
        /// in), and walking arbitrary and mutated bytes (same bins, same error at the same
        /// byte), whole or a prefix.
        #[test]
        fn groups_agree_with_bin_by_bin(
            bins in proptest::collection::vec((0u16..4, 1u64..300), 0..120),
            specials in 0u8..4,
            flips in proptest::collection::vec((0usize..400, 0u8..0x84), 0..3),
            noise in proptest::collection::vec((0u8..3, 0u8..8, 0u8..0x84), 0..40),
            bins_max in 0usize..130,
        ) {
            let mut h = Histogram::new();
            let mut v = 1e-3;
            for &(step, n) in &bins {
                // Mostly neighbouring bins; now and then a jump of many bins.
                v *= if step == 3 { 3.0 } else { 1.0 + 0.011 * f64::from(step + 1) };
                h.insert_n(v, if n > 250 { n * 1000 } else { n });
            }
            if specials & 1 == 1 { h.insert_n(f64::NAN, 2); }
            if specials & 2 == 2 { h.insert_n(0.0, 200); }
            let mut grouped = Vec::new();
            pack_histogram(&h, &mut grouped);
            let mut single = Vec::new();
            proptest::prop_assert!(pack_groups::<false>(0, h.keys(), h.counts(), &mut single).is_some());
            proptest::prop_assert_eq!(&grouped, &single);
            proptest::prop_assert_eq!(unpack(&grouped).unwrap(), h.clone());
            // The trusted walks read the store's own bins the same way.
            proptest::prop_assert_eq!(unpack_trusted(&grouped), h.clone());
            let mut dense: Box<DenseCounts> = zeroed_dense();
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            let twice = [grouped.as_slice(), grouped.as_slice()];
            for bytes in twice {
                add_to_dense_unmarked(bytes, &mut dense, (&mut lo, &mut hi));
            }
            for (&k, &c) in h.keys().iter().zip(h.counts()) {
                proptest::prop_assert_eq!(dense[usize::from(k)], c.saturating_mul(2));
            }
            proptest::prop_assert_eq!(dense.iter().filter(|&&c| c != 0).count(), h.bin_count());
            if let (Some(&first), Some(&last)) = (h.keys().first(), h.keys().last()) {
                proptest::prop_assert_eq!((lo, hi), (usize::from(first), usize::from(last)));
            }
            let mut mutated = grouped.clone();
            for &(at, b) in &flips {
                if let Some(x) = mutated.get_mut(at % grouped.len().max(1)) { *x = b; }
            }
            // Bytes shaped like packed bins (small gaps and counts, a zero count or a wide or
            // odd byte here and there) so that many groups get as far as the last checks.
            let noise: Vec<u8> = noise
                .iter()
                .flat_map(|&(gap, count, odd)| if odd > 0x7c { [odd, count] } else { [gap, count] })
                .collect();
            // The same after a first bin at the first key of a decade (slot 1).
            let mut based = Vec::new();
            put_varint(&mut based, 1 << 7 | 1);
            based.push(1);
            based.extend_from_slice(&noise);
            for bytes in [&grouped[..], &mutated[..], &noise[..], &based[..]] {
                for max in [usize::MAX, bins_max] {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    let fast = walk_groups::<true>(bytes, max, &mut Each(|k, c| a.push((k, c))));
                    let slow = walk_groups::<false>(bytes, max, &mut Each(|k, c| b.push((k, c))));
                    // Into an accumulator: the same bins added, or the same error.
                    let mut acc = Accumulator::new();
                    let into = walk_groups::<true>(bytes, max, &mut AddTo(&mut acc));
                    proptest::prop_assert_eq!(into, slow);
                    if slow.is_ok() {
                        let mut want = Accumulator::new();
                        for &(k, c) in &b {
                            want.add_key(k, c);
                        }
                        proptest::prop_assert_eq!(acc.to_histogram(), want.to_histogram());
                    }
                    proptest::prop_assert_eq!(fast, slow);
                    proptest::prop_assert_eq!(a, b);
                }
            }
        }

        /// The trusted walk reads what the checked one does where counts of one, two and
        /// more bytes mix (a merged period's: groups broken by wide counts, read as wide
        /// quads or bin by bin), with gaps of one byte and more.
        #[test]
        fn trusted_walk_reads_mixed_widths_as_checked(
            bins in proptest::collection::vec((0u8..8, 0u8..4, 1u64..1 << 21), 0..200),
        ) {
            let (mut keys, mut counts) = (Vec::new(), Vec::new());
            let mut key = 1u32 << 15;
            for &(step, width, n) in &bins {
                key += match step { 7 => 200, 6 => 3, _ => 1 };
                while key <= u32::from(u16::MAX) && !crate::key_is_valid(key as u16) {
                    key += 1;
                }
                if key > u32::from(u16::MAX) {
                    break;
                }
                keys.push(key as u16);
                counts.push(match width { 0 | 1 => n % 0x80 + 1, 2 => n % 0x4000 + 1, _ => n });
            }
            let mut bytes = Vec::new();
            proptest::prop_assert!(pack(&keys, &counts, &mut bytes));
            let (mut want, mut got) = (Vec::new(), Vec::new());
            for_each_bin(&bytes, |k, c| want.push((k, c))).unwrap();
            let n = for_each_bin_trusted(&bytes, |k, c| got.push((k, c)));
            proptest::prop_assert_eq!(n, want.len());
            proptest::prop_assert_eq!(&got, &want);
            let mut dense: Box<DenseCounts> = zeroed_dense();
            let (mut lo, mut hi) = (usize::MAX, 0usize);
            proptest::prop_assert_eq!(add_to_dense_unmarked(&bytes, &mut dense, (&mut lo, &mut hi)), n);
            let mut taken = Vec::new();
            take_nonzero(&mut dense, (lo, hi), &mut taken);
            proptest::prop_assert_eq!(&taken, &want);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok(h) = unpack(&bytes) {
                h.assert_invariants();
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn a_list_packs_pieces_as_pack_packs_the_whole(
            values in proptest::collection::vec((1e-6f64..1e6, 1u64..300), 0..120),
            cuts in proptest::collection::vec(0usize..130, 0..4),
            swap in 0usize..130,
        ) {
            let mut h = Histogram::new();
            for &(v, n) in &values {
                h.insert_n(v, if n > 250 { n * 1000 } else { n });
            }
            let (keys, counts) = (h.keys(), h.counts());
            let mut whole = Vec::new();
            proptest::prop_assert!(pack(keys, counts, &mut whole));
            let mut list = PackedList::default();
            // A histogram before, so that offsets start past zero.
            proptest::prop_assert!(list.extend(&[1 << 7 | 5], &[3]));
            let first = list.finish();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(keys.len())).collect();
            cuts.push(0);
            cuts.push(keys.len());
            cuts.sort_unstable();
            for w in cuts.windows(2) {
                proptest::prop_assert!(list.extend(&keys[w[0]..w[1]], &counts[w[0]..w[1]]));
            }
            let at = list.finish();
            let got = list.get(at).unwrap();
            proptest::prop_assert_eq!(got.bytes(), whole.as_slice());
            proptest::prop_assert_eq!(got.bins(), keys.len());
            proptest::prop_assert_eq!(got.to_histogram(), h.clone());
            let first = list.get(first).unwrap().to_histogram();
            proptest::prop_assert_eq!(first.keys(), &[1 << 7 | 5]);
            proptest::prop_assert!(list.get(at + 1).is_none());
            // Bins out of order are refused and leave the open histogram as it was.
            if keys.len() >= 2 {
                let i = swap % (keys.len() - 1);
                let half = keys.len() / 2;
                proptest::prop_assert!(list.extend(&keys[..half], &counts[..half]));
                let before = list.bytes.len();
                let rest = [keys[i + 1], keys[i]];
                let refused = !list.extend(&rest, &counts[..2]);
                // The second key is below the first.
                proptest::prop_assert!(refused);
                proptest::prop_assert_eq!(list.bytes.len(), before);
                list.abandon();
                proptest::prop_assert_eq!(list.len(), 2);
                proptest::prop_assert_eq!(list.get(at).unwrap().bytes(), whole.as_slice());
                // A zero count is refused too.
                proptest::prop_assert!(!list.extend(&keys[..1], &[0]));
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn chunks_pushed_bin_by_bin_pack_as_pack_packs(
            values in proptest::collection::vec((1e-6f64..1e6, 1u64..300), 0..300),
            specials in 0u8..4,
            bad_at in 0usize..400,
            bad in 0u8..4,
        ) {
            let mut h = Histogram::new();
            for &(v, n) in &values {
                h.insert_n(v, if n > 250 { n * 100_000 } else { n });
            }
            if specials & 1 == 1 { h.insert_n(f64::NAN, 2); }
            if specials & 2 == 2 { h.insert_n(0.0, 200); }
            let (keys, counts) = (h.keys(), h.counts());
            let mut whole = Vec::new();
            proptest::prop_assert!(pack(keys, counts, &mut whole));
            // Bins in order, moved into the list whenever the chunk is out of room.
            let mut list = PackedList::default();
            let mut chunk = PackedChunk::default();
            for (&k, &c) in keys.iter().zip(counts) {
                if !chunk.has_room() {
                    proptest::prop_assert!(list.extend_chunk(&mut chunk));
                    proptest::prop_assert_eq!(chunk.bins(), 0);
                }
                chunk.push(crate::ValidKey::new(k).unwrap(), c);
            }
            proptest::prop_assert!(list.extend_chunk(&mut chunk));
            let at = list.finish();
            proptest::prop_assert_eq!(list.get(at).unwrap().bytes(), whole.as_slice());
            proptest::prop_assert_eq!(list.get(at).unwrap().to_histogram(), h.clone());
            // One bin that does not fit — out of order, repeated, a zero count, an invalid
            // key — and the list refuses the chunk, as it was.
            if !keys.is_empty() {
                let i = bad_at % keys.len();
                // (An invalid key has no `ValidKey`.)
                let (key, count) = match bad {
                    0 | 2 if i > 0 => (keys[i - 1], counts[i]),
                    0..=2 => (keys[i], 0),
                    _ => (keys[i], counts[i]),
                };
                let mut chunk = PackedChunk::default();
                let before = list.bytes.len();
                for j in 0..keys.len() {
                    let (k, c) = if j == i { (key, count) } else { (keys[j], counts[j]) };
                    if !chunk.has_room() && !list.extend_chunk(&mut chunk) {
                        break;
                    }
                    chunk.push(crate::ValidKey::new(k).unwrap(), c);
                }
                let fits = list.extend_chunk(&mut chunk);
                proptest::prop_assert_eq!(fits, bad == 3, "bad {} at {}", bad, i);
                list.abandon();
                proptest::prop_assert_eq!(list.bytes.len(), before);
            }
            // A chunk started at another key than the list's open histogram is refused.
            if keys.len() >= 2 {
                let mut chunk = PackedChunk::default();
                chunk.push(crate::ValidKey::new(keys[0]).unwrap(), counts[0]);
                proptest::prop_assert!(list.extend_chunk(&mut chunk));
                let mut other = PackedChunk::default();
                other.push(crate::ValidKey::new(keys[1]).unwrap(), counts[1]);
                proptest::prop_assert!(!list.extend_chunk(&mut other));
                list.abandon();
            }
        }
    }

    /// A high key followed by a low one is out of order, however close they are modulo 2¹⁶
    /// (in 16-bit arithmetic, 65,490 then 5 looked like a gap of 50).
    #[test]
    fn a_low_key_after_a_high_one_is_refused() {
        let (high, low) = (511 << 7 | 82, 5);
        assert!(crate::key_is_valid(high) && crate::key_is_valid(low));
        let mut out = Vec::new();
        assert!(!pack(&[high, low], &[1, 1], &mut out));
        // In a group of eight, and in a chunk.
        let mut keys = [low; 9];
        keys[0] = high;
        for (i, k) in keys.iter_mut().enumerate().skip(1) {
            *k = low + i as u16;
        }
        keys[1] = low;
        assert!(!pack(&keys, &[1; 9], &mut out));
        assert!(!pack(&keys[1..], &[0; 8], &mut out), "zero counts");
        assert!(
            pack(&keys[1..], &[1; 8], &mut out),
            "the same keys without the high one fit"
        );
        let mut list = PackedList::default();
        let mut chunk = PackedChunk::default();
        for &k in &keys {
            chunk.push(crate::ValidKey::new(k).unwrap(), 1);
        }
        assert!(!list.extend_chunk(&mut chunk));
        let mut list = PackedList::default();
        assert!(list.extend(&[high], &[1]));
        assert!(!list.extend(&keys[1..], &[1; 8]));
    }

    #[test]
    fn errors_name_the_byte() {
        assert_eq!(
            unpack(&[1, 0]).unwrap_err(),
            UnpackError {
                offset: 0,
                what: "a bin count of zero"
            }
        );
        assert_eq!(
            unpack(&[1, 5, 0x80]).unwrap_err(),
            UnpackError {
                offset: 2,
                what: "bin gap: truncated or too long"
            }
        );
        // Key 0 (NaN) then a gap past the last key.
        assert_eq!(
            unpack(&[0, 1, 0xff, 0xff, 0x03, 1]).unwrap_err().what,
            "bin key past the last key"
        );
        // A gap of 2^64 − 1 after key 1 must not wrap around to key 0 (found by cargo-fuzz).
        let wrap = [
            1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1,
        ];
        assert_eq!(unpack(&wrap).unwrap_err().what, "bin key past the last key");
        // A typical latency histogram packs into 2 bytes per bin.
        let mut h = Histogram::new();
        for i in 0..75 {
            h.insert_n(0.01 * (1.0 + f64::from(i) / 80.0), 5);
        }
        let mut bytes = Vec::new();
        pack_histogram(&h, &mut bytes);
        assert!(
            bytes.len() <= 2 * h.bin_count() + 2,
            "{} bytes",
            bytes.len()
        );
    }
}
