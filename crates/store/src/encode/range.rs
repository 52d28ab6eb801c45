//! A static multi-symbol range coder (rANS, "range asymmetric numeral systems") for the histogram
//! chunk: every symbol is one of `ALPHABET` small-integer classes, coded in one of several
//! contexts whose symbol frequencies the encoder counts over the whole chunk and writes in the
//! chunk, normalized to `SCALE`. One table lookup and one multiply per symbol to decode — no
//! adaptation and no bit-by-bit binary decisions — which is what makes it several times faster
//! than the adaptive binary coder it replaced, at nearly the same size.
//!
//! Two interleaved states (symbol `i` uses state `i mod 2`) so consecutive symbols' arithmetic
//! overlaps. The encoder runs backwards over the symbols; the stream is 16-bit little-endian
//! words. Integer arithmetic only.

use std::cell::RefCell;
use std::thread::LocalKey;

use super::bits::{get_varint, put_varint};
use super::DecodeError;

/// Frequencies of a context sum to `SCALE = 2^SCALE_BITS`.
pub const SCALE_BITS: u32 = 11;
pub const SCALE: u32 = 1 << SCALE_BITS;
/// Values below this are their own symbol; a larger value of bit length `L` (5 ..= 64) is symbol
/// `LITERALS + L − 5` followed by its `L − 1` bits below the leading one as raw bits.
pub const LITERALS: u64 = 16;
const LITERAL_BITS: u32 = 4;
/// The symbol of a value of bit length `L ≥ 5` is `L + SYMBOL_OF_LEN`.
pub const SYMBOL_OF_LEN: u32 = LITERALS as u32 - LITERAL_BITS - 1;
/// Symbols per context: the literals and one per bit length 5 ..= 64.
pub const ALPHABET: usize = LITERALS as usize + 64 - LITERAL_BITS as usize;
/// Interleaved states: symbol `i` uses state `i mod STATES`, so two symbols' arithmetic is in
/// flight at once. (Four were measured slower to decode: the rotation spills.)
const STATES: usize = 2;
/// The states live in `[STATE_LOW, 2^32)`; all start and end at `STATE_LOW`.
const STATE_LOW: u32 = 1 << 16;
const WORD_BITS: u32 = 16;
/// Marks decode-table slots of an unused context; its `freq_cum` entry (frequency 1, cumulative
/// 0) keeps the arithmetic in range while the decoder records the failure.
const SYMBOL_NONE: u8 = ALPHABET as u8;
/// Decoder `freq_cum` entries per context: the alphabet and `SYMBOL_NONE`.
const DECODE_STRIDE: usize = ALPHABET + 1;
/// Most contexts a table set may have (the bits of its used-context mask).
pub const TABLE_CONTEXTS_MAX: usize = 64;

const _: () = assert!(ALPHABET < u8::MAX as usize && SCALE_BITS <= WORD_BITS);

/// The symbol of `value` and how many raw bits follow it (its bits below the leading one).
#[inline(always)]
pub fn symbol_of(value: u64) -> (u8, u32) {
    if value < LITERALS {
        (value as u8, 0)
    } else {
        let len = 64 - value.leading_zeros();
        ((len + SYMBOL_OF_LEN) as u8, len - 1)
    }
}

/// The number of raw bits after `symbol` (below `ALPHABET`).
#[inline(always)]
pub fn raw_bits_of(symbol: u8) -> u32 {
    debug_assert!(usize::from(symbol) < ALPHABET);
    if u64::from(symbol) < LITERALS {
        0
    } else {
        u32::from(symbol) - (LITERALS as u32 - LITERAL_BITS)
    }
}

/// The value of `symbol` (at least `LITERALS`) with the raw bits read after it.
#[inline(always)]
pub fn value_of(symbol: u8, raw: u64) -> u64 {
    let bits = raw_bits_of(symbol);
    debug_assert!(bits >= LITERAL_BITS && (bits == 64 || raw >> bits == 0));
    (1u64 << bits) | raw
}

/// Normalized symbol frequencies of `contexts` contexts; a context nobody used has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tables {
    contexts: usize,
    /// `freq[ctx * ALPHABET + symbol]`: 0 for an unused symbol, else 1 ..= SCALE.
    freq: Vec<u16>,
    /// `(ctx, symbol)` of every non-zero frequency, ascending: the decoder's table build visits
    /// only these (a context uses a few of its `ALPHABET` symbols).
    used: Vec<(u8, u8)>,
}

/// The `(ctx, symbol)` pairs of the non-zero entries of `freq`, ascending.
fn used_of(freq: &[u16]) -> Vec<(u8, u8)> {
    freq.iter()
        .enumerate()
        .filter(|(_, &x)| x != 0)
        .map(|(i, _)| ((i / ALPHABET) as u8, (i % ALPHABET) as u8))
        .collect()
}

impl Tables {
    /// Frequencies proportional to `counts[ctx * ALPHABET + symbol]`, each used symbol at least 1,
    /// each used context summing to `SCALE`.
    pub fn from_counts(counts: &[u32], contexts: usize) -> Tables {
        assert!(contexts <= TABLE_CONTEXTS_MAX && counts.len() == contexts * ALPHABET);
        let mut freq = vec![0u16; counts.len()];
        for (c, f) in counts
            .chunks_exact(ALPHABET)
            .zip(freq.chunks_exact_mut(ALPHABET))
        {
            normalize(c, f);
        }
        let used = used_of(&freq);
        Tables {
            contexts,
            freq,
            used,
        }
    }

    /// A varint bit mask of the used contexts (bit `ctx`); then per used context the number `n`
    /// of used symbols (1 ..= ALPHABET), the `n` symbols as gaps from the previous one
    /// (`symbol − previous − 1`, the first from −1), and the frequencies − 1 of all but the last
    /// symbol (the last has the rest of `SCALE`), all varints.
    pub fn write(&self, out: &mut Vec<u8>) {
        let used = |f: &[u16]| f.iter().any(|&x| x > 0);
        let mask = self
            .freq
            .chunks_exact(ALPHABET)
            .enumerate()
            .filter(|(_, f)| used(f))
            .fold(0u64, |m, (ctx, _)| m | 1 << ctx);
        put_varint(out, mask);
        for f in self.freq.chunks_exact(ALPHABET).filter(|f| used(f)) {
            let used_symbols = f.iter().filter(|&&x| x > 0).count();
            put_varint(out, used_symbols as u64);
            let mut next = 0;
            let mut last = 0;
            for (symbol, _) in f.iter().enumerate().filter(|(_, &x)| x > 0) {
                put_varint(out, (symbol - next) as u64);
                next = symbol + 1;
                last = symbol;
            }
            for &x in f[..last].iter().filter(|&&x| x > 0) {
                put_varint(out, u64::from(x - 1));
            }
        }
    }

    /// Reads what `write` wrote; rejects unknown contexts, symbols out of range or order and
    /// frequencies that do not leave the last symbol at least 1 of `SCALE`.
    pub fn read(body: &[u8], pos: &mut usize, contexts: usize) -> Result<Tables, DecodeError> {
        assert!(contexts <= TABLE_CONTEXTS_MAX);
        let invalid = |pos: usize, what| DecodeError::Invalid {
            bit_offset: pos as u64 * 8,
            what,
        };
        let mask = get_varint(body, pos)?;
        if contexts < 64 && mask >> contexts != 0 {
            return Err(invalid(*pos, "table for an unknown context"));
        }
        let mut freq = vec![0u16; contexts * ALPHABET];
        let mut used = Vec::with_capacity(4 * mask.count_ones() as usize);
        for (ctx, f) in freq.chunks_exact_mut(ALPHABET).enumerate() {
            if mask >> ctx & 1 == 0 {
                continue;
            }
            let n = get_varint(body, pos)?;
            if n == 0 || n > ALPHABET as u64 {
                return Err(invalid(*pos, "symbol count of a context out of range"));
            }
            let mut symbols = [0usize; ALPHABET];
            let mut next = 0u64;
            for s in symbols.iter_mut().take(n as usize) {
                let symbol = next.saturating_add(get_varint(body, pos)?);
                if symbol >= ALPHABET as u64 {
                    return Err(invalid(*pos, "symbol out of range"));
                }
                *s = symbol as usize;
                next = symbol + 1;
                used.push((ctx as u8, symbol as u8));
            }
            let mut sum = 0u64;
            for &symbol in &symbols[..n as usize - 1] {
                let x = get_varint(body, pos)?.saturating_add(1);
                sum = sum.saturating_add(x);
                if sum >= u64::from(SCALE) {
                    return Err(invalid(
                        *pos,
                        "frequencies leave nothing for the last symbol",
                    ));
                }
                f[symbol] = x as u16;
            }
            f[symbols[n as usize - 1]] = (u64::from(SCALE) - sum) as u16;
        }
        debug_assert_eq!(used, used_of(&freq));
        Ok(Tables {
            contexts,
            freq,
            used,
        })
    }

    pub fn contexts(&self) -> usize {
        self.contexts
    }
}

/// `SCALE` split in proportion to `counts` (all zero → all zero), every used symbol at least 1.
fn normalize(counts: &[u32], freq: &mut [u16]) {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return;
    }
    let mut sum = 0u64;
    let mut largest = 0;
    for (i, (&c, f)) in counts.iter().zip(freq.iter_mut()).enumerate() {
        if c > 0 {
            // Rounded to nearest, at least 1.
            let x = ((u64::from(c) * u64::from(SCALE) + total / 2) / total).max(1);
            *f = x as u16;
            sum += x;
            if c > counts[largest] {
                largest = i;
            }
        }
    }
    // Rounding and the minimum of 1 leave `sum` off by at most one per used symbol: the largest
    // absorbs a shortfall; an excess is taken from the largest symbols that can spare it (the
    // largest holds at least SCALE / ALPHABET > ALPHABET, so one or two suffice).
    if sum < u64::from(SCALE) {
        freq[largest] += (u64::from(SCALE) - sum) as u16;
    }
    for _ in 0..ALPHABET {
        if sum <= u64::from(SCALE) {
            break;
        }
        let Some((i, _)) = freq.iter().enumerate().max_by_key(|&(_, &f)| f) else {
            break;
        };
        let take = (sum - u64::from(SCALE)).min(u64::from(freq[i]) - 1);
        freq[i] -= take as u16;
        sum -= take;
    }
    debug_assert_eq!(
        freq.iter().map(|&f| u64::from(f)).sum::<u64>(),
        u64::from(SCALE)
    );
}

/// Encoder reciprocals: `x / freq` is the high 64 bits of `x · RCP[freq]` for every `x < 2^32`,
/// with `RCP[freq] = ⌈2^64 / freq⌉` for `freq ≥ 2` (the error `x · (RCP[freq] − 2^64 / freq) /
/// 2^64 < 2^−32` stays below the smallest gap `1 / freq` to the next integer). For `freq = 1`
/// (`2^64` does not fit) `RCP[1] = 2^64 − 1` gives `x − 1` for `x ≥ 1`, which the symbol's
/// `bias` makes up for. The table is computed at compile time; building the encoder's table per
/// chunk once divided for every (context × symbol) entry.
static RCP: [u64; SCALE as usize + 1] = reciprocals();

const fn reciprocals() -> [u64; SCALE as usize + 1] {
    let mut rcp = [0u64; SCALE as usize + 1];
    rcp[1] = u64::MAX;
    let mut freq = 2;
    while freq <= SCALE as usize {
        // ⌈2^64 / freq⌉ = ⌊(2^64 − 1) / freq⌋ + 1 for a freq that does not divide 2^64, and
        // 2^64 / freq for a power of two.
        rcp[freq] = if freq.is_power_of_two() {
            1u64 << (64 - freq.trailing_zeros())
        } else {
            u64::MAX / freq as u64 + 1
        };
        freq += 1;
    }
    rcp
}

/// One symbol's encoding constants, 16 bytes so four share a cache line: coding it takes state
/// `x` (after the shift) to `x + bias + q · cmpl` with `q = x / freq` (`x − 1` for freq 1),
/// that is `q · SCALE + x mod freq + cum`.
#[derive(Clone, Copy, Default)]
struct EncSymbol {
    rcp: u64,
    /// States above this are shifted out by one word before coding the symbol.
    state_max: u32,
    /// `cum`, plus `SCALE − 1` for freq 1 (its `q` is one short).
    bias: u16,
    /// `SCALE − freq`.
    cmpl: u16,
}

const _: () = assert!(std::mem::size_of::<EncSymbol>() == 16 && SCALE_BITS < 16);

/// The symbol's constants for frequency `freq` (1 ..= SCALE) and cumulative frequency `cum`.
fn enc_symbol(freq: u32, cum: u32) -> EncSymbol {
    debug_assert!((1..=SCALE).contains(&freq) && cum + freq <= SCALE);
    EncSymbol {
        rcp: RCP[freq as usize],
        // freq · 2^(32 − SCALE_BITS) − 1; u32::MAX for freq = SCALE (never shifts).
        state_max: (freq << (32 - SCALE_BITS)).wrapping_sub(1),
        bias: (cum + if freq == 1 { SCALE - 1 } else { 0 }) as u16,
        cmpl: (SCALE - freq) as u16,
    }
}

/// Codes state `x` with symbol `e`, given `x ≤ e.state_max` (or `state_max = u32::MAX`).
#[inline(always)]
fn code_state(x: u32, e: EncSymbol) -> u32 {
    let q = ((u128::from(x) * u128::from(e.rcp)) >> 64) as u32;
    x + u32::from(e.bias) + q * u32::from(e.cmpl)
}

/// Codes `symbols` (each `ctx * ALPHABET + symbol`, with a non-zero frequency in `tables`) into
/// the word stream, decodable front to back by [`RansDecoder`].
pub fn encode(tables: &Tables, symbols: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(tables, symbols, &mut out);
    out
}

/// [`encode`], appending the stream to `out`.
pub fn encode_into(tables: &Tables, symbols: &[u16], out: &mut Vec<u8>) {
    let mut enc = take_kept(&ENCODE_TABLE);
    encode_with(tables, symbols, out, &mut enc);
    put_kept(&ENCODE_TABLE, enc);
}

/// A thread's kept buffer, taken out (a fresh one if another use has it, or during teardown).
fn take_kept<T: Default>(key: &'static LocalKey<RefCell<T>>) -> T {
    key.try_with(|t| t.try_borrow_mut().map(|mut t| std::mem::take(&mut *t)).ok())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Gives a buffer back to be kept (`try_with`: during thread teardown it is simply dropped).
fn put_kept<T>(key: &'static LocalKey<RefCell<T>>, value: T) {
    let _ = key.try_with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            *t = value;
        }
    });
}

thread_local! {
    /// The encoder's per-symbol constants, kept per thread between chunks: a flush codes a
    /// chunk per series (often of a few periods), and allocating and zeroing the whole table
    /// (contexts × `ALPHABET` entries, ≈ 36 KiB) per chunk cost as much as coding a short one.
    static ENCODE_TABLE: RefCell<Vec<EncSymbol>> = const { RefCell::new(Vec::new()) };
}

/// [`encode_into`] with the caller's table buffer. Only the entries of the symbols `tables`
/// uses are written: no other entry is read, as every coded symbol has a frequency.
fn encode_with(tables: &Tables, symbols: &[u16], out: &mut Vec<u8>, enc: &mut Vec<EncSymbol>) {
    if enc.len() < tables.freq.len() {
        enc.resize(tables.freq.len(), EncSymbol::default());
    }
    let (mut cum, mut context) = (0u32, usize::MAX);
    for &(ctx, symbol) in &tables.used {
        let i = usize::from(ctx) * ALPHABET + usize::from(symbol);
        if usize::from(ctx) != context {
            (cum, context) = (0, usize::from(ctx));
        }
        let freq = u32::from(tables.freq[i]);
        enc[i] = enc_symbol(freq, cum);
        cum += freq;
    }
    // The stream, written backwards from the end of `buf` (the encoder runs backwards over the
    // symbols): a symbol shifts out at most one word (after coding, a state is below 2^32, so
    // one shift brings it below 2^16 ≤ freq · 2^(32 − SCALE_BITS)), and the final states take
    // two words each.
    let mut buf = vec![0u8; 2 * (symbols.len() + 2 * STATES)];
    let mut pos = buf.len();
    // Branch-free: the low word is always stored below `pos`, and kept (`pos` moves) only when
    // the state shifts — a data-dependent branch here mispredicted often.
    let code = |x: u32, s: u16, buf: &mut [u8], pos: &mut usize| -> u32 {
        let e = enc[usize::from(s)];
        debug_assert!(
            tables.freq[usize::from(s)] != 0,
            "symbol {s} has no frequency"
        );
        let shift = x > e.state_max;
        buf[*pos - 2..*pos].copy_from_slice(&(x as u16).to_le_bytes());
        *pos -= 2 * usize::from(shift);
        code_state(if shift { x >> WORD_BITS } else { x }, e)
    };
    let [mut a, mut b] = [STATE_LOW; STATES];
    // Backwards: an odd last symbol first (symbol i uses state i mod 2), then pair by pair.
    let pairs = symbols.chunks_exact(STATES);
    if let [last] = pairs.remainder() {
        a = code(a, *last, &mut buf, &mut pos);
    }
    for pair in pairs.rev() {
        b = code(b, pair[1], &mut buf, &mut pos);
        a = code(a, pair[0], &mut buf, &mut pos);
    }
    // The decoder reads state 0 then state 1, each high word first.
    for state in [b, a] {
        for word in [state as u16, (state >> WORD_BITS) as u16] {
            buf[pos - 2..pos].copy_from_slice(&word.to_le_bytes());
            pos -= 2;
        }
    }
    out.extend_from_slice(&buf[pos..]);
}

/// A decoder's tables, kept per thread between chunks: a read decoding thousands of small chunks
/// (4-slice rollups) would otherwise allocate, fault in and fill ~60 KiB of slots per chunk —
/// measured as a third of such a read. Only the contexts a chunk uses are refilled, and those
/// the previous chunk used but this one does not are reset to `SYMBOL_NONE`.
#[derive(Default)]
struct DecodeTables {
    slots: Vec<u8>,
    freq_cum: Vec<u32>,
    /// Per context: every slot holds `SYMBOL_NONE`.
    unused: Vec<bool>,
}

thread_local! {
    static DECODE_TABLES: RefCell<DecodeTables> = RefCell::new(DecodeTables::default());
}

/// Decodes the symbols of a stream written by [`encode`] with the same tables.
pub struct RansDecoder<'a> {
    words: &'a [u8],
    pos: usize,
    /// The states of the next symbol and of the one after it.
    cur: u32,
    other: u32,
    /// `SCALE` slots per context: the symbol whose range holds the slot, or `SYMBOL_NONE`.
    slots: Vec<u8>,
    /// Per `ctx * DECODE_STRIDE + symbol`: frequency in the low 16 bits, cumulative frequency
    /// above.
    freq_cum: Vec<u32>,
    /// Set when the input ran out or named a symbol of an unused context; `check` reports it.
    failed: bool,
    /// Which contexts hold only `SYMBOL_NONE` (given back with the tables).
    unused: Vec<bool>,
}

impl Drop for RansDecoder<'_> {
    fn drop(&mut self) {
        let tables = DecodeTables {
            slots: std::mem::take(&mut self.slots),
            freq_cum: std::mem::take(&mut self.freq_cum),
            unused: std::mem::take(&mut self.unused),
        };
        put_kept(&DECODE_TABLES, tables);
    }
}

impl<'a> RansDecoder<'a> {
    pub fn new(tables: &Tables, words: &'a [u8]) -> Result<RansDecoder<'a>, DecodeError> {
        let mut kept = take_kept(&DECODE_TABLES);
        let slot_count = tables.contexts * SCALE as usize;
        if kept.slots.len() != slot_count || kept.unused.len() != tables.contexts {
            kept.slots.clear();
            kept.slots.resize(slot_count, SYMBOL_NONE);
            kept.unused.clear();
            kept.unused.resize(tables.contexts, true);
        }
        // Entries of symbols no slot names are never read, and `SYMBOL_NONE`'s are never
        // overwritten: the vector is set up once per context count.
        if kept.freq_cum.len() != tables.contexts * DECODE_STRIDE {
            kept.freq_cum.clear();
            kept.freq_cum.resize(tables.contexts * DECODE_STRIDE, 1);
        }
        let mut used = tables.used.iter().peekable();
        for (ctx, ((s, fc), unused)) in kept
            .slots
            .chunks_exact_mut(SCALE as usize)
            .zip(kept.freq_cum.chunks_exact_mut(DECODE_STRIDE))
            .zip(kept.unused.iter_mut())
            .enumerate()
        {
            let mut cum = 0usize;
            // Bounded: each step takes one entry of `tables.used`.
            while let Some(&(_, symbol)) = used.next_if(|&&(c, _)| usize::from(c) == ctx) {
                let symbol = usize::from(symbol);
                let x = tables.freq[ctx * ALPHABET + symbol];
                s[cum..cum + usize::from(x)].fill(symbol as u8);
                fc[symbol] = u32::from(x) | (cum as u32) << 16;
                cum += usize::from(x);
            }
            // A used context fills all `SCALE` slots (`Tables::read` makes it sum to `SCALE`);
            // whatever is left is reset, so each slot is what a fresh table would hold.
            if cum < s.len() && !(cum == 0 && *unused) {
                s[cum..].fill(SYMBOL_NONE);
            }
            *unused = cum == 0;
        }
        let mut d = RansDecoder {
            words,
            pos: 0,
            cur: 0,
            other: 0,
            slots: kept.slots,
            freq_cum: kept.freq_cum,
            failed: false,
            unused: kept.unused,
        };
        d.cur = d.word()? << 16 | d.word()?;
        d.other = d.word()? << 16 | d.word()?;
        if d.cur < STATE_LOW || d.other < STATE_LOW {
            return Err(d.invalid("range coder state below its bound"));
        }
        Ok(d)
    }

    fn word(&mut self) -> Result<u32, DecodeError> {
        match self.words.get(self.pos..self.pos + 2) {
            Some(w) => {
                self.pos += 2;
                Ok(u32::from(u16::from_le_bytes([w[0], w[1]])))
            }
            None => Err(DecodeError::Truncated {
                bit_offset: self.words.len() as u64 * 8,
            }),
        }
    }

    /// The next symbol, coded in context `ctx` (below the tables' context count). On bad input
    /// it returns some symbol and marks the decoder failed: callers `check` after a bounded
    /// number of symbols, which keeps the hot path free of error plumbing.
    #[inline(always)]
    pub fn symbol(&mut self, ctx: usize) -> u8 {
        let (mut pos, mut failed) = (self.pos, self.failed);
        let (symbol, x) = self.step(ctx, self.cur, &mut pos, &mut failed);
        (self.pos, self.failed) = (pos, failed);
        self.cur = self.other;
        self.other = x;
        symbol
    }

    /// One symbol in context `ctx` from state `x`: the symbol and the state after it (with a
    /// word read from `pos` when it fell below `STATE_LOW`; past the end 0, and `failed`).
    #[inline(always)]
    fn step(&self, ctx: usize, x: u32, pos: &mut usize, failed: &mut bool) -> (u8, u32) {
        let slot = x & (SCALE - 1);
        let symbol = self.slots[ctx * SCALE as usize + slot as usize];
        *failed |= symbol == SYMBOL_NONE;
        let fc = self.freq_cum[ctx * DECODE_STRIDE + usize::from(symbol)];
        // `slot` lies in the symbol's range [cum, cum + freq) (for `SYMBOL_NONE`, cum = 0), so
        // this never underflows; and freq · (x >> SCALE_BITS) < 2^32.
        let mut x = (fc & 0xffff) * (x >> SCALE_BITS) + slot - (fc >> 16);
        if x < STATE_LOW {
            let word = match self.words.get(*pos..*pos + 2) {
                Some(w) => {
                    *pos += 2;
                    u32::from(u16::from_le_bytes([w[0], w[1]]))
                }
                None => {
                    *failed = true;
                    0
                }
            };
            x = x << WORD_BITS | word;
        }
        (symbol, x)
    }

    /// Decodes one symbol per entry of `contexts` (each below the tables' context count), in
    /// order, calling `each(i, symbol)` after the `i`-th: [`RansDecoder::symbol`] in a loop
    /// with the states held in locals, so they stay in registers across a long run (in a
    /// caller's larger loop they were kept on the stack, adding a store and a load to every
    /// symbol's chain of dependent steps).
    #[inline(always)]
    pub fn symbols(&mut self, contexts: &[usize], mut each: impl FnMut(usize, u8)) {
        let (mut cur, mut other, mut pos) = (self.cur, self.other, self.pos);
        let mut failed = false;
        for (i, &ctx) in contexts.iter().enumerate() {
            let (symbol, x) = self.step(ctx, cur, &mut pos, &mut failed);
            cur = other;
            other = x;
            each(i, symbol);
        }
        self.cur = cur;
        self.other = other;
        self.pos = pos;
        self.failed |= failed;
    }

    /// Marks the stream invalid (a caller found what follows a symbol missing).
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// Whether every symbol so far was valid.
    pub fn check(&self) -> Result<(), DecodeError> {
        if self.failed {
            return Err(self.invalid("range coder input ended or names an unused context"));
        }
        Ok(())
    }

    /// Checks that the stream ended where the encoder began: every word used, both states back
    /// at their start.
    pub fn finish(self) -> Result<(), DecodeError> {
        self.check()?;
        if self.pos < self.words.len() {
            return Err(DecodeError::TrailingBits {
                bit_offset: self.pos as u64 * 8,
            });
        }
        if self.cur != STATE_LOW || self.other != STATE_LOW {
            return Err(self.invalid("range coder states do not end at their start"));
        }
        Ok(())
    }

    pub fn invalid(&self, what: &'static str) -> DecodeError {
        DecodeError::Invalid {
            bit_offset: self.pos as u64 * 8,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(contexts: usize, symbols: &[u16]) -> Vec<u8> {
        let mut counts = vec![0u32; contexts * ALPHABET];
        for &s in symbols {
            counts[usize::from(s)] += 1;
        }
        let tables = Tables::from_counts(&counts, contexts);
        let mut header = Vec::new();
        tables.write(&mut header);
        let mut pos = 0;
        let read = Tables::read(&header, &mut pos, contexts).unwrap();
        assert_eq!(pos, header.len());
        assert_eq!(read, tables);
        let bytes = encode(&tables, symbols);
        let mut d = RansDecoder::new(&read, &bytes).unwrap();
        for &s in symbols {
            let ctx = usize::from(s) / ALPHABET;
            assert_eq!(usize::from(d.symbol(ctx)), usize::from(s) % ALPHABET);
        }
        d.finish().unwrap();
        bytes
    }

    #[test]
    fn kept_tables_equal_fresh_ones_and_unused_contexts_still_fail() {
        // Context 2 used by the first chunk only; the second's stream, read with a context it
        // does not use, must fail as with fresh tables; then a third chunk decodes.
        let a: Vec<u16> = (0..500)
            .map(|i| (i % 3 * ALPHABET + i % 7) as u16)
            .collect();
        round_trip(3, &a);
        let b: Vec<u16> = (0..300)
            .map(|i| (i % 2 * ALPHABET + i % 5) as u16)
            .collect();
        let bytes = round_trip(3, &b);
        let mut counts = vec![0u32; 3 * ALPHABET];
        for &s in &b {
            counts[usize::from(s)] += 1;
        }
        let tables = Tables::from_counts(&counts, 3);
        let mut d = RansDecoder::new(&tables, &bytes).unwrap();
        d.symbol(2);
        assert!(d.check().is_err(), "a symbol of an unused context");
        drop(d);
        round_trip(3, &a);
        round_trip(3, &b);
    }

    #[test]
    fn values_map_to_symbols_and_back() {
        for value in (0..100u64).chain([u64::MAX, 1 << 63, (1 << 63) - 1, 12345]) {
            let (symbol, bits) = symbol_of(value);
            assert!(usize::from(symbol) < ALPHABET);
            assert_eq!(raw_bits_of(symbol), bits);
            if value < LITERALS {
                assert_eq!(u64::from(symbol), value);
            } else {
                let raw = if bits == 64 {
                    value
                } else {
                    value & ((1 << bits) - 1)
                };
                assert_eq!(value_of(symbol, raw), value);
            }
        }
        assert_eq!(symbol_of(u64::MAX).0 as usize, ALPHABET - 1);
    }

    #[test]
    fn reciprocals_divide_exactly() {
        // Coding must give q · SCALE + x mod freq + cum (the decoder's inverse), for every
        // frequency and the states hardest for a reciprocal.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for freq in 1..=SCALE {
            let cum = (SCALE - freq) / 2;
            let e = enc_symbol(freq, cum);
            let check = |x: u32| {
                if x == 0 || x > e.state_max {
                    return;
                }
                let want = u64::from(x / freq) * u64::from(SCALE) + u64::from(x % freq + cum);
                assert_eq!(u64::from(code_state(x, e)), want, "{x} with freq {freq}");
            };
            let top = e.state_max;
            for x in [1, freq - 1, freq, freq + 1, top, top - 1, top / freq * freq] {
                check(x);
                check(x.wrapping_sub(1));
            }
            for _ in 0..200 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let x = rng as u32 % top.max(1);
                check(x);
                // Just below a multiple of freq: the hardest case for a reciprocal.
                check((x / freq * freq).wrapping_sub(1));
            }
        }
        // And the exact reciprocal claim itself, over all x below 2^32 near multiples.
        for freq in 2..=SCALE as u64 {
            for x in [u64::from(u32::MAX), u64::from(u32::MAX) / freq * freq - 1] {
                let q = ((u128::from(x) * u128::from(RCP[freq as usize])) >> 64) as u64;
                assert_eq!(q, x / freq, "{x} / {freq}");
            }
        }
    }

    #[test]
    fn skewed_symbols_are_cheap() {
        // 10,000 zeros and 10 ones: about 0.014 bits each, so well under 100 bytes.
        let mut symbols = vec![0u16; 10_000];
        for i in 0..10 {
            symbols[i * 997] = 1;
        }
        let bytes = round_trip(1, &symbols);
        assert!(bytes.len() < 100, "{}", bytes.len());
    }

    #[test]
    fn normalize_keeps_every_used_symbol() {
        let mut counts = vec![1u32; ALPHABET];
        counts[3] = u32::MAX / 2;
        let t = Tables::from_counts(&counts, 1);
        assert!(t.freq.iter().all(|&f| f >= 1));
        assert_eq!(t.freq.iter().map(|&f| u32::from(f)).sum::<u32>(), SCALE);
    }

    proptest! {
        #[test]
        fn symbols_round_trip(
            contexts in 1usize..4,
            raw in proptest::collection::vec((0usize..4, prop_oneof![0usize..3, 0..ALPHABET]), 0..500),
        ) {
            let symbols: Vec<u16> = raw
                .iter()
                .map(|&(c, s)| ((c % contexts) * ALPHABET + s) as u16)
                .collect();
            round_trip(contexts, &symbols);
        }

        #[test]
        fn garbage_never_panics(
            header in proptest::collection::vec(any::<u8>(), 0..40),
            words in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut pos = 0;
            if let Ok(tables) = Tables::read(&header, &mut pos, 2) {
                if let Ok(mut d) = RansDecoder::new(&tables, &words) {
                    for i in 0..100 {
                        d.symbol(i % 2);
                    }
                    let _ = d.finish();
                }
            }
        }
    }
}
