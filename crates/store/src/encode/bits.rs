//! Bit-level writer and reader (most significant bit first), LEB128 varints, zigzag, and the
//! Rice code with an escape that every chunk encoder uses.

use super::DecodeError;

/// Rice quotients at or above this are escaped: this many one bits, then the value's bit length
/// less one in 6 bits, then the value's bits below its leading one.
pub const RICE_ESCAPE_Q: u64 = 16;
pub const RICE_ESCAPE_LEN_BITS: u32 = 6;
/// Largest Rice parameter (low bits written verbatim).
pub const RICE_K_MAX: u32 = 63;
/// A LEB128 varint of a u64 is at most this many bytes.
pub const VARINT_SIZE_MAX: usize = 10;

/// Appends bits to a byte vector, most significant bit first; the last byte is zero-padded.
///
/// Each write stores the pending bits as one 8-byte word at the first unfinished byte and
/// moves on by the whole bytes it completed, so a write is a shift, an or and one store with
/// no loop (a byte at a time, with a loop per write, was most of a histogram chunk's Rice
/// coding). The buffer keeps 8 bytes of slack past that byte for the store. Hot loops write
/// through [`BitWriter::packer`], whose state lives in registers.
#[derive(Debug, Clone)]
pub struct BitWriter {
    /// Finished bytes `..at`, then the unfinished one, then zeros; at least `at + 8` long.
    bytes: Vec<u8>,
    at: usize,
    /// The unfinished byte's bits, in the high `fill` bits (`fill` < 8; the rest zero).
    acc: u64,
    fill: u32,
}

/// Most bits one `put` takes: with fewer than 8 pending, they fit one word.
const PUT_BITS_MAX: u32 = 56;
/// Most bits any one write of a [`Packer`] takes (an escaped Rice code after a run of zeros
/// is split into several puts; this bounds one Rice code with its escape).
pub const RICE_CODE_BITS_MAX: u64 = RICE_ESCAPE_Q + RICE_ESCAPE_LEN_BITS as u64 + 64;

impl Default for BitWriter {
    fn default() -> BitWriter {
        BitWriter::with_capacity(0)
    }
}

impl BitWriter {
    pub fn new() -> BitWriter {
        BitWriter::default()
    }

    /// A writer whose buffer holds `bytes` before it grows.
    pub fn with_capacity(bytes: usize) -> BitWriter {
        BitWriter {
            bytes: vec![0; bytes + 8],
            at: 0,
            acc: 0,
            fill: 0,
        }
    }

    /// Bits written so far.
    pub fn bit_len(&self) -> u64 {
        self.at as u64 * 8 + u64::from(self.fill)
    }

    /// Runs `f` with a [`Packer`] that may write up to `bits_max` bits (more panics), then
    /// keeps what it wrote.
    #[inline(always)]
    pub fn packer<R>(&mut self, bits_max: u64, f: impl FnOnce(&mut Packer<'_>) -> R) -> R {
        let need = self.at + (bits_max as usize).div_ceil(8) + 16;
        if need > self.bytes.len() {
            grow(&mut self.bytes, need);
        }
        let mut p = Packer {
            out: &mut self.bytes,
            pos: self.at * 8 + self.fill as usize,
            acc: self.acc,
        };
        let result = f(&mut p);
        (self.at, self.acc, self.fill) = (p.pos / 8, p.acc, (p.pos % 8) as u32);
        result
    }

    /// Writes the low `bits` bits of `value` (`bits` ≤ 64; higher bits must be zero).
    pub fn write(&mut self, value: u64, bits: u32) {
        assert!(bits <= 64);
        self.packer(64, |p| p.write(value, bits));
    }

    pub fn write_bit(&mut self, bit: bool) {
        self.packer(1, |p| p.put(u64::from(bit), 1));
    }

    /// Rice code of `value` with parameter `k`; see [`rice_bits`] for the size.
    pub fn write_rice(&mut self, value: u64, k: u32) {
        self.packer(RICE_CODE_BITS_MAX, |p| p.write_rice(value, k));
    }

    /// Forgets what was written, keeping the buffer.
    pub fn clear(&mut self) {
        let used = (self.at + 8).min(self.bytes.len());
        self.bytes[..used].fill(0);
        (self.at, self.acc, self.fill) = (0, 0, 0);
    }

    /// The bytes written so far, last one zero-padded (as [`BitWriter::finish`] returns them).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.at + usize::from(self.fill > 0)]
    }

    /// The bytes, last one zero-padded.
    pub fn finish(mut self) -> Vec<u8> {
        // The unfinished byte is already stored (zero-padded) at `at`.
        self.bytes.truncate(self.at + usize::from(self.fill > 0));
        self.bytes
    }
}

/// A [`BitWriter`]'s state, borrowed for a hot loop: plain values the optimiser keeps in
/// registers (through `&mut self` methods of the writer they were reloaded after every store),
/// and a buffer with room for what the caller reserved, so no write grows it.
pub struct Packer<'a> {
    out: &'a mut [u8],
    /// Bits written: the unfinished byte is `pos / 8`, holding `pos % 8` of them.
    pos: usize,
    /// As `BitWriter::acc`.
    acc: u64,
}

/// A packer's position: the bits written, and the unfinished byte's bits (high end). Two
/// values, so a function taking and returning them keeps them in registers (three went
/// through memory).
type PackState = (usize, u64);

/// Writes the low `bits` bits of `value` (`bits` ≤ `PUT_BITS_MAX`) at a packer's position and
/// returns the new one: the new bits go right below the pending ones, the word is stored at
/// the unfinished byte, and the position moves on by the whole bytes completed. State by
/// value, so a caller's loop keeps it in registers.
#[inline(always)]
fn put_at(out: &mut [u8], (pos, mut acc): PackState, value: u64, bits: u32) -> PackState {
    let (at, fill) = (pos / 8, (pos % 8) as u32);
    debug_assert!(bits <= PUT_BITS_MAX);
    debug_assert!(value >> bits == 0, "value {value} wider than {bits}");
    // `fill + bits` ≤ 63, so the shift is 1..=63 unless `bits` is 0, when `value` is 0 and any
    // shift gives 0.
    acc |= value.wrapping_shl(64 - fill - bits);
    // In bounds by the reservation `BitWriter::packer` made (a failed check is a bug in the
    // caller's bound: a panic, not a wrong chunk).
    out[at..at + 8].copy_from_slice(&acc.to_be_bytes());
    let pos = pos + bits as usize;
    // At most 7 whole bytes completed (`fill + bits` ≤ 63): the shift is at most 56.
    acc <<= (pos / 8 - at) * 8;
    (pos, acc)
}

/// `zeros` zero bits then the Rice code of `value` with parameter `k` (≤ `RICE_K_MAX`) as one
/// word and its length, when they fit one `put` (no escape): q ones then a zero, then the
/// low k bits — `(2^(q+1) − 2) · 2^k + value − q · 2^k`, two shifts (k ≤ 55 here); the zeros
/// are the word's leading zeros.
#[inline(always)]
fn short_rice(zeros: u64, value: u64, k: u32) -> Option<(u64, u32)> {
    let q = value >> k;
    let bits = zeros + q + 1 + u64::from(k);
    (q < RICE_ESCAPE_Q && bits <= u64::from(PUT_BITS_MAX))
        .then(|| ((((2u64 << q) - 2 - q) << k) + value, bits as u32))
}

impl Packer<'_> {
    /// Writes the low `bits` bits of `value` (`bits` ≤ `PUT_BITS_MAX`).
    #[inline(always)]
    fn put(&mut self, value: u64, bits: u32) {
        (self.pos, self.acc) = put_at(self.out, (self.pos, self.acc), value, bits);
    }

    /// Writes the low `bits` bits of `value` (`bits` ≤ 64; higher bits must be zero).
    #[inline(always)]
    pub fn write(&mut self, value: u64, bits: u32) {
        debug_assert!(bits <= 64);
        debug_assert!(
            bits >= 64 || value >> bits == 0,
            "value {value} wider than {bits}"
        );
        if bits > 32 {
            self.put(value >> 32, bits - 32);
            self.put(value & 0xffff_ffff, 32);
        } else {
            self.put(value, bits);
        }
    }

    /// Writes `bits` zero bits.
    #[inline(always)]
    pub fn write_zeros(&mut self, mut bits: u64) {
        // Bounded: `PUT_BITS_MAX` bits a step.
        while bits > 0 {
            let step = bits.min(u64::from(PUT_BITS_MAX)) as u32;
            self.put(0, step);
            bits -= u64::from(step);
        }
    }

    /// Rice code of `value` with parameter `k`; see [`rice_bits`] for the size.
    #[inline(always)]
    pub fn write_rice(&mut self, value: u64, k: u32) {
        self.write_zeros_then_rice(0, value, k);
    }

    /// `zeros` zero bits, then the Rice code of `value` with parameter `k`: in one store when
    /// they fit one (a run of empty bins before a populated one, in a histogram chunk).
    #[inline(always)]
    pub fn write_zeros_then_rice(&mut self, zeros: u64, value: u64, k: u32) {
        debug_assert!(k <= RICE_K_MAX);
        let k = k.min(RICE_K_MAX);
        if let Some((code, bits)) = short_rice(zeros, value, k) {
            self.put(code, bits);
        } else {
            cold_path();
            self.write_zeros(zeros);
            self.write_rice_in_parts(value, k);
        }
    }

    /// A run of Rice codes in which the codes of value 0 are left out: each item is
    /// `(before, k, value)`, `before` the bits of all the codes before it in the run had they
    /// all been 0 (a code of 0 is `k + 1` zero bits), so the gap since the previous item is a
    /// run of zeros; `run_bits` is that sum for the whole run. One loop over locals (the
    /// writer's state in registers), one store per item where the zeros and the code fit one.
    #[inline(always)]
    pub fn write_sparse_rice_run(
        &mut self,
        items: impl Iterator<Item = (u64, u32, u64)>,
        run_bits: u64,
    ) {
        // Plain locals, and a slow path that takes and returns them by value: nothing of the
        // state has an address, so none of it is kept in memory (≈ 60 instructions a code
        // with the state behind `&mut self`, most of them spills).
        let out = &mut *self.out;
        let mut state = (self.pos, self.acc);
        let mut written = 0u64;
        for (before, k, value) in items {
            debug_assert!(before >= written && k <= RICE_K_MAX);
            let zeros = before - written;
            written = before + u64::from(k) + 1;
            state = match short_rice(zeros, value, k.min(RICE_K_MAX)) {
                Some((code, bits)) => put_at(out, state, code, bits),
                None => zeros_then_rice_slow(out, state, zeros, value, k),
            };
        }
        debug_assert!(run_bits >= written);
        (self.pos, self.acc) = state;
        self.write_zeros(run_bits - written);
    }

    /// Rice codes of `(value, k)` pairs one after another, the bits [`Packer::write_rice`]
    /// writes for each. Made for a run of many short codes (a histogram window's counts): the
    /// pending bits stay right-aligned in a word and leave 32 at a time, on a branch taken
    /// about every tenth code, so a code is a shift, an or and an add. Placing every code in
    /// the unfinished byte and storing the whole word each time (`put_at`, branch-free) cost a
    /// dozen instructions more a code and ≈ 1.6× the time on a window of 305 bins.
    ///
    /// `K_SMALL`: every `k` is at most `RUN_K_SMALL_MAX`, so a quotient below the escape makes a
    /// code that fits the fast path with no check of its length.
    #[inline(always)]
    pub fn write_rice_run<const K_SMALL: bool>(&mut self, items: impl Iterator<Item = (u64, u32)>) {
        // Plain locals, the output as the slice still to fill (two registers, where a buffer
        // and an index took three and pushed the state into memory), the slow path taking and
        // returning them by value.
        let (at, fill) = (self.pos / 8, (self.pos % 8) as u32);
        let out_len = self.out.len();
        let mut rest = &mut self.out[at..];
        let mut pending = fill;
        let mut acc = self.acc.checked_shr(64 - fill).unwrap_or(0);
        for (value, k) in items {
            debug_assert!(k <= RICE_K_MAX);
            // Masked shifts: `k` ≤ `RICE_K_MAX` < 64, so no clamp.
            let q = value.wrapping_shr(k);
            let bits = q + 1 + u64::from(k);
            // Non-short-circuit: one branch. `bits` ≤ 32 keeps the word from overflowing
            // (fewer than 32 pending bits, then at most 32 more).
            debug_assert!(!K_SMALL || k <= RUN_K_SMALL_MAX);
            if (q < RICE_ESCAPE_Q) & (K_SMALL | (bits <= u64::from(RUN_CODE_BITS_MAX))) {
                let code = RUN_UNARY[(q % RICE_ESCAPE_Q) as usize].wrapping_shl(k) + value;
                acc = (acc << bits) | code;
                pending += bits as u32;
                if pending >= 32 {
                    pending -= 32;
                    let word = (acc >> pending) as u32;
                    let (done, tail) = std::mem::take(&mut rest).split_at_mut(4);
                    done.copy_from_slice(&word.to_be_bytes());
                    rest = tail;
                }
            } else {
                (rest, pending, acc) = rice_run_slow(rest, pending, acc, value, k);
            }
        }
        let at = out_len - rest.len();
        let (fill_bits, acc) = store_pending(rest, pending, acc);
        (self.pos, self.acc) = (at * 8 + fill_bits, acc);
    }

    /// Appends the first `bit_len` bits of `bytes` (most significant bit first; at least that
    /// many bits long), six bytes a store.
    #[inline]
    pub fn append_bits(&mut self, bytes: &[u8], bit_len: u32) {
        let bit_len = bit_len as usize;
        assert!(
            bit_len <= bytes.len() * 8,
            "{bit_len} bits in {} bytes",
            bytes.len()
        );
        let whole = bit_len / 48;
        let mut word = [0u8; 8];
        for six in bytes.chunks_exact(6).take(whole) {
            word[2..].copy_from_slice(six);
            self.put(u64::from_be_bytes(word), 48);
        }
        // Bounded: fewer than 48 bits are left, at most 6 bytes.
        let mut left = bit_len - whole * 48;
        let mut at = whole * 6;
        while left > 0 {
            let take = left.min(8);
            let byte = u64::from(bytes[at]) >> (8 - take);
            self.put(byte, take as u32);
            left -= take;
            at += 1;
        }
    }

    #[inline(always)]
    fn write_rice_in_parts(&mut self, value: u64, k: u32) {
        let q = value >> k;
        if q < RICE_ESCAPE_Q {
            // q ones then a zero (q + 1 ≤ 16 bits), then the low bits.
            self.put(((1u64 << q) - 1) << 1, q as u32 + 1);
            self.write(value & low_mask(k), k);
        } else {
            // Escape: the ones, the bit length less one, then the bits below the leading one.
            let len = 64 - value.leading_zeros();
            self.put((1u64 << RICE_ESCAPE_Q) - 1, RICE_ESCAPE_Q as u32);
            self.put(u64::from(len - 1), RICE_ESCAPE_LEN_BITS);
            self.write(value & low_mask(len - 1), len - 1);
        }
    }
}

/// `Packer::write_zeros_then_rice` on a packer's state given and returned by value (the rare
/// path of `write_sparse_rice_run`: escapes and long runs of zeros).
#[cold]
#[inline(never)]
fn zeros_then_rice_slow(
    out: &mut [u8],
    (pos, acc): PackState,
    zeros: u64,
    value: u64,
    k: u32,
) -> PackState {
    let mut p = Packer { out, pos, acc };
    p.write_zeros_then_rice(zeros, value, k);
    (p.pos, p.acc)
}

/// Longest code [`Packer::write_rice_run`] writes on its fast path, in bits.
const RUN_CODE_BITS_MAX: u32 = 32;
/// Largest `k` whose codes with a quotient below the escape all fit `RUN_CODE_BITS_MAX`.
pub const RUN_K_SMALL_MAX: u32 = RUN_CODE_BITS_MAX - RICE_ESCAPE_Q as u32 - 1;
const _: () = assert!(RICE_ESCAPE_Q as u32 + RUN_K_SMALL_MAX < RUN_CODE_BITS_MAX);
/// By quotient `q` below the escape: the code's unary part, `q` ones and a zero (`2^(q+1) − 2`
/// as the top bits of `q + 1 + k`), less the `q << k` that adding the value puts back — so a
/// code is `RUN_UNARY[q] << k + value`, one load instead of four operations.
const RUN_UNARY: [u64; RICE_ESCAPE_Q as usize] = {
    let mut table = [0u64; RICE_ESCAPE_Q as usize];
    let mut q = 0;
    while q < RICE_ESCAPE_Q {
        table[q as usize] = (2u64 << q) - 2 - q;
        q += 1;
    }
    table
};

/// Stores the `pending` (< 32) low bits of `acc` at the start of `rest`, zero-padded (as `put_at`
/// keeps a packer's unfinished byte stored); returns them as a packer's position in `rest` and
/// its `acc` (the unfinished byte's bits in the high end).
#[inline(always)]
fn store_pending(rest: &mut [u8], pending: u32, acc: u64) -> (usize, u64) {
    debug_assert!(pending < 32);
    let word = acc.checked_shl(64 - pending).unwrap_or(0);
    rest[..8].copy_from_slice(&word.to_be_bytes());
    (pending as usize, word << (pending / 8 * 8))
}

/// A code [`Packer::write_rice_run`]'s fast path does not take (an escape, or more than
/// `RUN_CODE_BITS_MAX` bits), written through a packer over what is left of the output.
#[cold]
#[inline(never)]
fn rice_run_slow(
    rest: &mut [u8],
    pending: u32,
    acc: u64,
    value: u64,
    k: u32,
) -> (&mut [u8], u32, u64) {
    let (pos, acc) = store_pending(rest, pending, acc);
    let mut p = Packer {
        out: rest,
        pos,
        acc,
    };
    p.write_rice_in_parts(value, k);
    let (pos, acc) = (p.pos, p.acc);
    let fill = (pos % 8) as u32;
    let acc = acc.checked_shr(64 - fill).unwrap_or(0);
    (&mut rest[pos / 8..], fill, acc)
}

/// Makes the buffer at least `need` bytes long (and at least twice as long as it was).
#[cold]
#[inline(never)]
fn grow(bytes: &mut Vec<u8>, need: usize) {
    let len = (bytes.len() * 2).max(need);
    bytes.resize(len, 0);
}

/// Marks the path that calls it as rare for the optimiser.
#[cold]
#[inline(never)]
fn cold_path() {}

fn low_mask(k: u32) -> u64 {
    if k >= 64 {
        u64::MAX
    } else {
        (1u64 << k) - 1
    }
}

/// Size in bits of the Rice code of `value` with parameter `k`.
pub fn rice_bits(value: u64, k: u32) -> u64 {
    let q = value >> k;
    if q < RICE_ESCAPE_Q {
        q + 1 + u64::from(k)
    } else {
        let len = u64::from(64 - value.leading_zeros());
        RICE_ESCAPE_Q + u64::from(RICE_ESCAPE_LEN_BITS) + len - 1
    }
}

/// The Rice parameter in `0..=k_max` that codes `values` in the fewest bits, and that size.
pub fn best_rice_k(values: &[u64], k_max: u32) -> (u32, u64) {
    let widest = values.iter().fold(0u64, |a, &v| a | v);
    let k_top = k_max.min(64 - widest.leading_zeros()).min(RICE_K_MAX);
    let mut best = (0, u64::MAX);
    for k in 0..=k_top {
        let bits: u64 = values.iter().map(|&v| rice_bits(v, k)).sum();
        if bits < best.1 {
            best = (k, bits);
        }
    }
    best
}

/// Reads bits written by [`BitWriter`], never past the end of its slice.
#[derive(Debug)]
pub struct BitReader<'a> {
    bytes: &'a [u8],
    pos_bits: u64,
}

impl<'a> BitReader<'a> {
    pub fn new(bytes: &'a [u8]) -> BitReader<'a> {
        BitReader { bytes, pos_bits: 0 }
    }

    pub fn remaining_bits(&self) -> u64 {
        self.bytes.len() as u64 * 8 - self.pos_bits
    }

    /// The next 57 or more bits, most significant first, when 8 bytes are left from the
    /// current byte: the fast paths read within it; near the end the bitwise path is used.
    #[inline(always)]
    fn window(&self) -> Option<(u64, u32)> {
        let at = (self.pos_bits / 8) as usize;
        let bytes: [u8; 8] = self.bytes.get(at..at + 8)?.try_into().ok()?;
        let skip = (self.pos_bits % 8) as u32;
        Some((u64::from_be_bytes(bytes) << skip, 64 - skip))
    }

    #[inline]
    pub fn read(&mut self, bits: u32) -> Result<u64, DecodeError> {
        assert!(bits <= 64);
        if let Some((window, valid)) = self.window() {
            if bits <= valid {
                self.pos_bits += u64::from(bits);
                return Ok(if bits == 0 { 0 } else { window >> (64 - bits) });
            }
        }
        self.read_bitwise(bits)
    }

    fn read_bitwise(&mut self, bits: u32) -> Result<u64, DecodeError> {
        if u64::from(bits) > self.remaining_bits() {
            return Err(DecodeError::Truncated {
                bit_offset: self.pos_bits,
            });
        }
        let mut value = 0u64;
        let mut need = bits;
        while need > 0 {
            let byte = self.bytes[(self.pos_bits / 8) as usize];
            let avail = 8 - (self.pos_bits % 8) as u32;
            let take = avail.min(need);
            let chunk = (u64::from(byte) >> (avail - take)) & low_mask(take);
            value = (value << take) | chunk;
            self.pos_bits += u64::from(take);
            need -= take;
        }
        Ok(value)
    }

    pub fn read_bit(&mut self) -> Result<bool, DecodeError> {
        Ok(self.read(1)? == 1)
    }

    /// Counts one bits up to `max` (a terminating zero is consumed, `max` ones are not followed
    /// by one).
    pub fn read_unary(&mut self, max: u64) -> Result<u64, DecodeError> {
        let mut ones = 0;
        while ones < max && self.read_bit()? {
            ones += 1;
        }
        Ok(ones)
    }

    #[inline]
    pub fn read_rice(&mut self, k: u32) -> Result<u64, DecodeError> {
        if k > RICE_K_MAX {
            return Err(self.invalid("Rice parameter above 63"));
        }
        // Fast path: the ones, their zero and the k low bits all inside one 64-bit window
        // (then q < 16 and k ≤ 56, so the value cannot overflow).
        if let Some((window, valid)) = self.window() {
            let q = u64::from((!window).leading_zeros());
            let used = q + 1 + u64::from(k);
            if q < RICE_ESCAPE_Q && used <= u64::from(valid) {
                let after = window << (q + 1);
                let low = if k == 0 { 0 } else { after >> (64 - k) };
                self.pos_bits += used;
                return Ok((q << k) | low);
            }
        }
        let q = self.read_unary(RICE_ESCAPE_Q)?;
        if q == RICE_ESCAPE_Q {
            let len = self.read(RICE_ESCAPE_LEN_BITS)? as u32 + 1;
            return Ok((1u64 << (len - 1)) | self.read(len - 1)?);
        }
        let low = self.read(k)?;
        if k > 0 && q > u64::MAX >> k {
            return Err(self.invalid("Rice value above 2^64"));
        }
        Ok((q << k) | low)
    }

    /// `n` Rice codes with parameter `k`, each passed to `each`: the same values, bits and
    /// errors as `n` calls of `read_rice`. Codes are taken from one 64-bit window for as long as
    /// they fit in it, so consecutive codes depend on a register, not on a load each (a numeric
    /// chunk's values were one such run before their parameter adapted; kept as the reference
    /// the window reader is tested against).
    #[cfg(test)]
    pub fn read_rice_run(
        &mut self,
        k: u32,
        n: usize,
        mut each: impl FnMut(u64),
    ) -> Result<(), DecodeError> {
        if k > RICE_K_MAX {
            return Err(self.invalid("Rice parameter above 63"));
        }
        self.read_rice_codes(n, |_| k, |_, v| each(v))
    }

    /// One Rice code per parameter of `ks` into `out` (as long as `ks`): the same values, bits
    /// and errors as a `read_rice` for each, taken from one 64-bit window at a time as
    /// `read_rice_run` does (a histogram chunk's window bins each have their own parameter).
    pub fn read_rice_each(&mut self, ks: &[u32], out: &mut [u64]) -> Result<(), DecodeError> {
        assert_eq!(ks.len(), out.len());
        self.read_rice_codes(ks.len(), |i| ks[i], |i, v| out[i] = v)
    }

    /// `n` Rice codes, code `i` with parameter `k_of(i)`, each passed to `each(i, value)`:
    /// the same values, bits and errors as `n` calls of `read_rice`. Codes are taken from one
    /// 64-bit window for as long as they fit in it, so consecutive codes depend on a register,
    /// not on a load each.
    #[inline(always)]
    fn read_rice_codes(
        &mut self,
        n: usize,
        k_of: impl Fn(usize) -> u32,
        mut each: impl FnMut(usize, u64),
    ) -> Result<(), DecodeError> {
        let mut i = 0;
        // Bounded: every pass of the outer loop reads at least one code or leaves it.
        while i < n {
            let Some((mut w, valid)) = self.window() else {
                break;
            };
            let mut used = 0u32;
            while i < n {
                let k = k_of(i);
                let q = (!w).leading_zeros();
                let len = q + 1 + k;
                if u64::from(q) >= RICE_ESCAPE_Q || k > RICE_K_MAX || used + len > valid {
                    break;
                }
                // q < 16 and 1 ≤ k ≤ 63 where shifted (len fits the window): no shift overflows.
                let low = if k == 0 {
                    0
                } else {
                    (w << (q + 1)) >> (64 - k)
                };
                each(i, (u64::from(q) << k) | low);
                w = w.checked_shl(len).unwrap_or(0);
                used += len;
                i += 1;
            }
            self.pos_bits += u64::from(used);
            if used == 0 {
                // An escape, a parameter out of range, or a code longer than the window's rest.
                each(i, self.read_rice(k_of(i))?);
                i += 1;
            }
        }
        for j in i..n {
            each(j, self.read_rice(k_of(j))?);
        }
        Ok(())
    }

    /// Checks that only zero padding (under one byte) is left.
    pub fn finish(mut self) -> Result<(), DecodeError> {
        let remaining = self.remaining_bits();
        if remaining >= 8 {
            return Err(DecodeError::TrailingBits {
                bit_offset: self.pos_bits,
            });
        }
        if self.read(remaining as u32)? != 0 {
            return Err(self.invalid("non-zero padding"));
        }
        Ok(())
    }

    pub fn invalid(&self, what: &'static str) -> DecodeError {
        DecodeError::Invalid {
            bit_offset: self.pos_bits,
            what,
        }
    }
}

pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads a LEB128 varint at `*pos`; rejects overlong (more than 10 bytes or above 2^64) input.
pub fn get_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let start = *pos;
    let mut value = 0u64;
    for i in 0..VARINT_SIZE_MAX {
        let Some(&byte) = bytes.get(*pos) else {
            return Err(DecodeError::Varint { offset: start });
        };
        *pos += 1;
        let low = u64::from(byte & 0x7f);
        if i == VARINT_SIZE_MAX - 1 && low > 1 {
            return Err(DecodeError::Varint { offset: start });
        }
        value |= low << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::Varint { offset: start })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn bits_round_trip(
            items in proptest::collection::vec((any::<u64>(), 0u32..=64, 0u32..=63, 0u64..100), 0..64),
        ) {
            let mut w = BitWriter::new();
            let mut expected_bits = 0;
            for &(v, bits, k, zeros) in &items {
                let v = if bits == 64 { v } else { v & ((1u64 << bits) - 1) };
                w.write(v, bits);
                w.write_rice(v, k);
                w.packer(zeros, |p| p.write_zeros(zeros));
                expected_bits += u64::from(bits) + rice_bits(v, k) + zeros;
                prop_assert_eq!(w.bit_len(), expected_bits);
            }
            let bytes = w.finish();
            prop_assert_eq!(bytes.len() as u64, expected_bits.div_ceil(8));
            let mut r = BitReader::new(&bytes);
            for &(v, bits, k, zeros) in &items {
                let v = if bits == 64 { v } else { v & ((1u64 << bits) - 1) };
                prop_assert_eq!(r.read(bits).unwrap(), v);
                prop_assert_eq!(r.read_rice(k).unwrap(), v);
                for _ in 0..zeros {
                    prop_assert!(!r.read_bit().unwrap());
                }
            }
            r.finish().unwrap();
        }

        #[test]
        fn append_bits_equals_writing_them(
            prefix in 0u32..64,
            parts in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 0..200), 1..6),
        ) {
            // A reused writer (cleared between parts) codes each part; the parts are then
            // appended after a prefix of `prefix` bits, as a flush copies coded periods.
            let mut part_writer = BitWriter::new();
            let mut joined = BitWriter::new();
            let mut bit_by_bit = BitWriter::new();
            joined.write(0, prefix.min(64));
            bit_by_bit.write(0, prefix.min(64));
            for part in &parts {
                part_writer.clear();
                for &bit in part {
                    part_writer.write_bit(bit);
                    bit_by_bit.write_bit(bit);
                }
                prop_assert_eq!(part_writer.bit_len(), part.len() as u64);
                let bytes = part_writer.as_bytes().to_vec();
                prop_assert_eq!(bytes.len(), part.len().div_ceil(8));
                joined.packer(part.len() as u64, |p| p.append_bits(&bytes, part.len() as u32));
            }
            prop_assert_eq!(joined.bit_len(), bit_by_bit.bit_len());
            prop_assert_eq!(joined.finish(), bit_by_bit.finish());
        }

        #[test]
        fn varint_and_zigzag_round_trip(v in any::<u64>(), s in any::<i64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut pos = 0;
            prop_assert_eq!(get_varint(&out, &mut pos).unwrap(), v);
            prop_assert_eq!(pos, out.len());
            prop_assert_eq!(unzigzag(zigzag(s)), s);
        }

        #[test]
        fn fast_paths_equal_bit_by_bit_reading(
            bytes in proptest::collection::vec(any::<u8>(), 0..48),
            ops in proptest::collection::vec((any::<bool>(), 0u32..=64), 1..40),
        ) {
            // Reference: every bit read alone (the slow path), the Rice code spelled out.
            fn rice_bitwise(r: &mut BitReader<'_>, k: u32) -> Result<u64, DecodeError> {
                let mut q = 0;
                while q < RICE_ESCAPE_Q && r.read_bitwise(1)? == 1 {
                    q += 1;
                }
                if q == RICE_ESCAPE_Q {
                    let len = r.read_bitwise(RICE_ESCAPE_LEN_BITS)? as u32 + 1;
                    return Ok((1u64 << (len - 1)) | r.read_bitwise(len - 1)?);
                }
                let low = r.read_bitwise(k)?;
                if k > 0 && q > u64::MAX >> k {
                    return Err(r.invalid("Rice value above 2^64"));
                }
                Ok((q << k) | low)
            }
            let (mut fast, mut slow) = (BitReader::new(&bytes), BitReader::new(&bytes));
            for &(rice, n) in &ops {
                let (a, b) = if rice {
                    let k = n.min(RICE_K_MAX);
                    (fast.read_rice(k), rice_bitwise(&mut slow, k))
                } else {
                    (fast.read(n), slow.read_bitwise(n))
                };
                prop_assert_eq!(a.is_ok(), b.is_ok());
                if a.is_err() {
                    break;
                }
                prop_assert_eq!(a.unwrap(), b.unwrap());
                prop_assert_eq!(fast.pos_bits, slow.pos_bits);
            }
        }

        #[test]
        fn rice_runs_read_as_single_codes(
            values in proptest::collection::vec(prop_oneof![0u64..8, 0u64..64, any::<u64>()], 0..80),
            k in 0u32..=63,
            extra in 0usize..3,
            tail in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            let mut w = BitWriter::new();
            for &v in &values {
                w.write_rice(v, k);
            }
            let mut bytes = w.finish();
            bytes.extend_from_slice(&tail);
            // `extra` more codes than written: both readers must fail (or read the tail) alike.
            let n = values.len() + extra;
            let mut one = BitReader::new(&bytes);
            let singles: Vec<Result<u64, DecodeError>> = (0..n).map(|_| one.read_rice(k)).collect();
            let ok_len = singles.iter().take_while(|r| r.is_ok()).count();
            let mut run = BitReader::new(&bytes);
            let mut got = Vec::new();
            let result = run.read_rice_run(k, n, |v| got.push(v));
            prop_assert_eq!(result.is_ok(), ok_len == n);
            let want: Vec<u64> = singles[..ok_len].iter().map(|r| *r.as_ref().unwrap()).collect();
            prop_assert_eq!(&got[..], &want[..]);
            if result.is_ok() {
                prop_assert_eq!(run.pos_bits, one.pos_bits);
            }
        }

        #[test]
        fn rice_each_reads_as_single_codes(
            codes in proptest::collection::vec((any::<u64>(), 0u32..=20, 0u32..=66), 0..200),
            cut in any::<usize>(),
        ) {
            let mut w = BitWriter::new();
            for &(v, k, _) in &codes {
                let v = v >> (64 - 24);
                w.write_rice(v, k);
            }
            let mut bytes = w.finish();
            // Truncated streams fail the same way too.
            if !bytes.is_empty() && cut % 3 == 0 {
                bytes.truncate(cut % bytes.len());
            }
            // Parameters as written, or (the third field) others: out of range ones included.
            let ks: Vec<u32> = codes
                .iter()
                .enumerate()
                .map(|(i, &(_, k, other))| if i % 5 == 4 { other } else { k })
                .collect();
            let mut single = BitReader::new(&bytes);
            let one_by_one: Result<Vec<u64>, DecodeError> =
                ks.iter().map(|&k| single.read_rice(k)).collect();
            let mut each = BitReader::new(&bytes);
            let mut out = vec![0; ks.len()];
            let got = each.read_rice_each(&ks, &mut out).map(|()| out);
            prop_assert_eq!(&got, &one_by_one);
            if got.is_ok() {
                prop_assert_eq!(each.remaining_bits(), single.remaining_bits());
            }
        }

        #[test]
        fn readers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..32), k in 0u32..=70) {
            let mut pos = 0;
            let _ = get_varint(&bytes, &mut pos);
            let mut r = BitReader::new(&bytes);
            while r.read_rice(k).is_ok() {}
        }
    }

    #[test]
    fn append_concatenates_bits() {
        let mut a = BitWriter::new();
        a.write(0b101, 3);
        let mut b = BitWriter::new();
        b.write(0b11_1110_0001, 10);
        let bits = b.bit_len();
        a.packer(bits, |p| p.append_bits(b.as_bytes(), bits as u32));
        assert_eq!(a.bit_len(), 13);
        assert_eq!(a.finish(), vec![0b1011_1111, 0b0000_1000]);
    }
}
