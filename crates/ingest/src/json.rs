//! A small JSON tokenizer for httptrap bodies. Our own because httptrap allows what JSON
//! libraries refuse (concatenated documents, `//` and `/* */` comments) and because numbers must
//! keep their text (a uint64 like 18426744073709551616 must not pass through f64 first).
//!
//! One document becomes a flat tape of tokens holding byte ranges into the input (nothing is
//! copied or unescaped here); each container token knows where its contents end, so a reader
//! walks or skips subtrees without recursion on untrusted depth.

use std::borrow::Cow;

use crate::batch::JSON_DEPTH_MAX;
use crate::bins::{fixed_text_bins, KeyedBins, ReadBins};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Array,
    /// `start..end` is the text between the quotes, escapes still in place.
    String {
        escaped: bool,
    },
    /// `start..end` is the number's text; `integer` = no fraction and no exponent.
    Number {
        integer: bool,
    },
    True,
    False,
    Null,
    /// An array of `"H[d.de±dd]=n"` strings that is the value of a `_value` key (below the
    /// document's top level, so always a histogram upload's or an explicit form's value): its
    /// bins were read by the tokenizer (`Tokenizer::bins`), and it has no element tokens.
    /// `start..end` is the array's text; the next token is its `PackedBins` or `BinRange`.
    Bins,
    /// After a `Bins` token whose bins are in storage order with every count above zero: `start`
    /// is their histogram's index in `Tokenizer::bins.packed`.
    PackedBins,
    /// After a `Bins` token whose bins are not: `start..end` is their range in
    /// `Tokenizer::bins`'s keys and counts.
    BinRange,
}

/// One token, 16 bytes: the tape is written once and read once per body byte or so, so its
/// size is most of the tokenizer's memory traffic. Positions are u32: `BODY_BYTES_MAX` bounds
/// the input. Objects hold alternating key (`String`) and value tokens.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token {
    pub kind: Kind,
    start: u32,
    end: u32,
    /// Index of the first token after this value (past a container's contents).
    next: u32,
}

/// The largest input the tokenizer reads (token positions are u32).
pub(crate) const BODY_BYTES_MAX: usize = u32::MAX as usize;

impl Token {
    fn new(kind: Kind, start: usize, end: usize, next: usize) -> Token {
        // Positions and tape indices are at most the input length, checked by the caller
        // against `BODY_BYTES_MAX`.
        debug_assert!(end <= BODY_BYTES_MAX && next <= BODY_BYTES_MAX);
        Token {
            kind,
            start: start as u32,
            end: end as u32,
            next: next as u32,
        }
    }

    #[inline]
    pub(crate) fn start(&self) -> usize {
        self.start as usize
    }

    #[inline]
    pub(crate) fn end(&self) -> usize {
        self.end as usize
    }

    /// Index of the first token after this value (past a container's contents).
    #[inline]
    pub(crate) fn next(&self) -> usize {
        self.next as usize
    }
}

/// Input that is not JSON; the parse cannot continue past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub position: usize,
    pub expected: &'static str,
}

/// A well-formed document that must still be rejected as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DocumentError {
    InvalidUtf8 { position: usize },
    TooDeep { position: usize },
}

pub(crate) struct Tokenizer<'a> {
    s: &'a [u8],
    pos: usize,
    /// Open containers (true = object) — kept even past the depth bound, to find the end.
    open: Vec<bool>,
    /// Tape indices of the open containers that are being recorded.
    open_tokens: Vec<usize>,
    doc_error: Option<DocumentError>,
    /// The bins of the current document's `Bins` arrays.
    pub(crate) bins: KeyedBins,
}

/// Fewest body bytes one `"H[d.de±dd]=n"` bin string takes, with its separator.
const BIN_TEXT_BYTES_MIN: usize = 15;
/// Most body bytes the bin vectors are sized for up front (they grow past it as needed).
const BINS_RESERVE_BODY_BYTES_MAX: usize = 16 << 20;

/// `Ok` when the document's tape is usable, otherwise why the whole document is rejected.
pub(crate) type Document = Result<(), DocumentError>;

impl<'a> Tokenizer<'a> {
    /// A tokenizer reading its `Bins` arrays into `bins` (emptied), a caller's kept buffers.
    pub(crate) fn with_bins(s: &'a [u8], mut bins: KeyedBins) -> Tokenizer<'a> {
        bins.clear();
        Tokenizer {
            s,
            pos: 0,
            open: Vec::new(),
            open_tokens: Vec::new(),
            doc_error: None,
            bins,
        }
    }

    /// The bin buffers, for the caller to keep for its next body.
    pub(crate) fn into_bins(self) -> KeyedBins {
        self.bins
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Reads the next document into `tape` (cleared first). `None` at the end of the input.
    pub(crate) fn next_document(
        &mut self,
        tape: &mut Vec<Token>,
    ) -> Option<Result<Document, SyntaxError>> {
        tape.clear();
        self.bins.clear();
        self.open.clear();
        self.open_tokens.clear();
        self.doc_error = None;
        if let Err(e) = self.skip_blank() {
            return Some(Err(e));
        }
        if self.pos == self.s.len() {
            return None;
        }
        if self.s[self.pos] != b'{' {
            return Some(Err(self.error("'{' starting a document")));
        }
        Some(self.value_tree(tape).map(|()| match self.doc_error {
            Some(e) => Err(e),
            None => Ok(()),
        }))
    }

    /// Reads one value and everything inside it, iteratively.
    fn value_tree(&mut self, tape: &mut Vec<Token>) -> Result<(), SyntaxError> {
        loop {
            self.skip_blank()?;
            let opened = self.value(tape)?;
            if opened && self.close_if_empty(tape)? {
                // An empty container is a complete value; fall through to the separators.
            } else if opened {
                if self.open.last() == Some(&true) {
                    self.key(tape)?;
                    continue;
                }
                if self.s.get(self.pos) != Some(&b'"') {
                    continue;
                }
                // A histogram upload's `_value` array is read and closed here (a complete value,
                // so on to the separators); another array of strings is read in one loop while
                // its strings are separated by a bare `,`: any other separator, or a non-string
                // element, goes back to the general loop at that point, which does exactly what
                // it would have done from the start.
                if !self.bins_array(tape) {
                    self.string_run(tape)?;
                }
            }
            // After a complete value: close containers until one continues with ','.
            loop {
                if self.open.is_empty() {
                    return Ok(());
                }
                self.skip_blank()?;
                let in_object = self.open.last() == Some(&true);
                match self.s.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        if in_object {
                            self.key(tape)?;
                        }
                        break;
                    }
                    Some(b'}') if in_object => self.close(tape),
                    Some(b']') if !in_object => self.close(tape),
                    _ if in_object => return Err(self.error("',' or '}'")),
                    _ => return Err(self.error("',' or ']'")),
                }
            }
        }
    }

    /// Reads a scalar, or opens a container; true if a container was opened.
    fn value(&mut self, tape: &mut Vec<Token>) -> Result<bool, SyntaxError> {
        let start = self.pos;
        let kind = match self.s.get(self.pos) {
            Some(b'{') => return Ok(self.open_container(tape, true)),
            Some(b'[') => return Ok(self.open_container(tape, false)),
            Some(b'"') => return self.string(tape),
            Some(b'-' | b'0'..=b'9') => {
                let (len, integer) =
                    number_len(&self.s[self.pos..]).ok_or(self.error("a number"))?;
                self.pos += len;
                Kind::Number { integer }
            }
            Some(b't') => self.literal(b"true", Kind::True)?,
            Some(b'f') => self.literal(b"false", Kind::False)?,
            Some(b'n') => self.literal(b"null", Kind::Null)?,
            _ => return Err(self.error("a value")),
        };
        self.record(tape, kind, start, self.pos);
        Ok(false)
    }

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<Kind, SyntaxError> {
        if !self.s[self.pos..].starts_with(word) {
            return Err(self.error("true, false or null"));
        }
        self.pos += word.len();
        Ok(kind)
    }

    /// Reads `"key"` then `:`, leaving the position at the value.
    fn key(&mut self, tape: &mut Vec<Token>) -> Result<(), SyntaxError> {
        // Compact bodies have no blanks around keys: a skip is needed only when the byte that
        // should be there is not (and then skipping finds the same byte the plain check would).
        if self.s.get(self.pos) != Some(&b'"') {
            self.skip_blank()?;
            if self.s.get(self.pos) != Some(&b'"') {
                return Err(self.error("'\"' starting an object key"));
            }
        }
        self.string(tape)?;
        if self.s.get(self.pos) != Some(&b':') {
            self.skip_blank()?;
            if self.s.get(self.pos) != Some(&b':') {
                return Err(self.error("':' after an object key"));
            }
        }
        self.pos += 1;
        Ok(())
    }

    /// At the first `"` of an array just opened: if the array is the value of a `_value` key
    /// below the top level and holds only `"H[d.de±dd]=n"` strings separated by a bare `,`,
    /// reads its bins into `bins`, records it as `Bins` + `PackedBins` or `BinRange` (no element
    /// tokens) and closes it. Otherwise changes nothing and returns false.
    fn bins_array(&mut self, tape: &mut Vec<Token>) -> bool {
        // The array, its key and the key's object, which is not the document itself: only an
        // explicit-form object holds `_value` there (the walker reads such an array as a
        // histogram, or rejects it quoting its text or its first element's).
        let depth = self.open.len();
        if depth < 3 || self.open.get(depth - 2) != Some(&true) || !self.recording() {
            return false;
        }
        let Some(key) = tape.len().checked_sub(2).and_then(|at| tape.get(at)) else {
            return false;
        };
        let is_value_key = key.kind == (Kind::String { escaped: false })
            && self.s.get(key.start()..key.end()) == Some(b"_value");
        if !is_value_key {
            return false;
        }
        if self.bins.packed.is_empty() {
            // Sized once per body for the bins its text can hold, at two bytes a bin (a no-op
            // on the kept buffers of a caller reading many bodies): a body of histograms grew
            // the buffer a dozen times, copying and faulting it in each time.
            let bins = self.s.len().min(BINS_RESERVE_BODY_BYTES_MAX) / BIN_TEXT_BYTES_MIN;
            self.bins.packed.reserve(2 * bins);
        }
        let first = self.bins.len();
        let read = self
            .s
            .get(self.pos..)
            .and_then(|rest| fixed_text_bins(rest, &mut self.bins));
        let closed = |len: usize| self.s.get(self.pos + len) == Some(&b']');
        let (len, token) = match read {
            Some(ReadBins::Packed(len)) if closed(len) => {
                let index = self.bins.packed.finish();
                (
                    len,
                    Token::new(Kind::PackedBins, index, index, tape.len() + 1),
                )
            }
            Some(ReadBins::Keyed(len)) if closed(len) => {
                let range = Token::new(Kind::BinRange, first, self.bins.len(), tape.len() + 1);
                (len, range)
            }
            _ => {
                self.bins.packed.abandon();
                self.bins.truncate(first);
                return false;
            }
        };
        let array = tape.len() - 1;
        tape[array].kind = Kind::Bins;
        tape.push(token);
        self.pos += len;
        self.close(tape);
        debug_assert_eq!(tape[array].next(), array + 2);
        true
    }

    /// Reads `"…"` strings separated by a bare `,` (the position is at the first `"`), leaving
    /// the position after the last string read.
    fn string_run(&mut self, tape: &mut Vec<Token>) -> Result<(), SyntaxError> {
        loop {
            self.string(tape)?;
            if self.s.get(self.pos..self.pos + 2) != Some(b",\"") {
                return Ok(());
            }
            self.pos += 1;
        }
    }

    /// Reads the string whose opening `"` is at the position. Inlined into its few callers so
    /// that the fast path returns no `Result` through memory.
    #[inline(always)]
    fn string(&mut self, tape: &mut Vec<Token>) -> Result<bool, SyntaxError> {
        let start = self.pos + 1;
        // Most strings (keys, names, `"h"`) are plain ASCII: one run reaches the closing quote,
        // and the general loop below is for the rest.
        let end = start + plain_run(self.s.get(start..).unwrap_or_default());
        if self.s.get(end) == Some(&b'"') {
            self.pos = end + 1;
            self.record(tape, Kind::String { escaped: false }, start, end);
            return Ok(false);
        }
        self.string_rest(tape, start, end)
    }

    /// `string` past its first plain run, which ended at `i`: the end of the input or a byte
    /// that needs a look and is not the closing `"`.
    #[inline(never)]
    fn string_rest(
        &mut self,
        tape: &mut Vec<Token>,
        start: usize,
        mut i: usize,
    ) -> Result<bool, SyntaxError> {
        let mut escaped = false;
        let mut high = false;
        loop {
            // Plain ASCII runs are skipped 8 bytes at a time; the match sees only the rest.
            i += plain_run(&self.s[i..]);
            match self.s.get(i) {
                None => {
                    self.pos = i;
                    return Err(self.error("'\"' closing a string"));
                }
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    i += escape_len(&self.s[i..]).ok_or_else(|| {
                        self.pos = i;
                        self.error("a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)")
                    })?;
                }
                Some(&c) if c < 0x20 => {
                    self.pos = i;
                    return Err(self.error("no control characters inside a string"));
                }
                Some(&c) => {
                    high |= c >= 0x80;
                    i += 1;
                }
            }
        }
        if high {
            if let Err(e) = std::str::from_utf8(&self.s[start..i]) {
                let position = start + e.valid_up_to();
                self.doc_error
                    .get_or_insert(DocumentError::InvalidUtf8 { position });
            }
        }
        self.pos = i + 1;
        self.record(tape, Kind::String { escaped }, start, i);
        Ok(false)
    }

    #[inline]
    fn open_container(&mut self, tape: &mut Vec<Token>, object: bool) -> bool {
        let start = self.pos;
        self.pos += 1;
        self.open.push(object);
        if self.open.len() > JSON_DEPTH_MAX {
            self.doc_error
                .get_or_insert(DocumentError::TooDeep { position: start });
        }
        if self.recording() {
            self.open_tokens.push(tape.len());
            let kind = if object { Kind::Object } else { Kind::Array };
            tape.push(Token::new(kind, start, start, 0));
        }
        true
    }

    /// Closes the container just opened if the next non-blank byte closes it.
    fn close_if_empty(&mut self, tape: &mut [Token]) -> Result<bool, SyntaxError> {
        self.skip_blank()?;
        let closer = if self.open.last() == Some(&true) {
            b'}'
        } else {
            b']'
        };
        if self.s.get(self.pos) == Some(&closer) {
            self.close(tape);
            return Ok(true);
        }
        Ok(false)
    }

    /// Consumes the closing byte (already checked) and finishes the container's token.
    fn close(&mut self, tape: &mut [Token]) {
        self.pos += 1;
        let recorded = self.recording();
        self.open.pop();
        if recorded {
            if let Some(index) = self.open_tokens.pop() {
                let next = tape.len();
                let token = &mut tape[index];
                *token = Token::new(token.kind, token.start(), self.pos, next);
            }
        }
    }

    /// Tokens are recorded only while the document is still acceptable: a rejected document
    /// costs no tape memory however large it is.
    fn recording(&self) -> bool {
        self.doc_error.is_none()
    }

    fn record(&mut self, tape: &mut Vec<Token>, kind: Kind, start: usize, end: usize) {
        if self.recording() {
            let next = tape.len() + 1;
            tape.push(Token::new(kind, start, end, next));
        }
    }

    /// Skips whitespace and comments.
    #[inline]
    fn skip_blank(&mut self) -> Result<(), SyntaxError> {
        // Compact bodies have no blanks: one look at the next byte settles most calls (ASCII
        // whitespace is all at or below b' '), and the loop below stays out of line.
        match self.s.get(self.pos) {
            Some(&c) if c > b' ' && c != b'/' => Ok(()),
            _ => self.skip_blank_run(),
        }
    }

    /// `skip_blank` past its first byte's look.
    #[inline(never)]
    fn skip_blank_run(&mut self) -> Result<(), SyntaxError> {
        loop {
            while self
                .s
                .get(self.pos)
                .is_some_and(|c| c.is_ascii_whitespace())
            {
                self.pos += 1;
            }
            if self.s.get(self.pos) != Some(&b'/') {
                return Ok(());
            }
            match self.s.get(self.pos + 1) {
                Some(b'/') => {
                    let rest = &self.s[self.pos..];
                    self.pos += rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
                }
                Some(b'*') => {
                    let rest = &self.s[self.pos + 2..];
                    let close = rest.windows(2).position(|w| w == b"*/");
                    let close = close.ok_or_else(|| self.error("'*/' closing a comment"))?;
                    self.pos += 2 + close + 2;
                }
                _ => return Err(self.error("'//' or '/*' starting a comment")),
            }
        }
    }

    fn error(&self, expected: &'static str) -> SyntaxError {
        SyntaxError {
            position: self.pos,
            expected,
        }
    }
}

/// Whether a string byte needs a closer look: `"`, `\`, a control character or non-ASCII.
fn needs_look(c: u8) -> bool {
    c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c)
}

/// The number of bytes at the start of `s` that need no look (see `needs_look`), 8 at a time:
/// string contents are most of an httptrap body. Each test below sets a byte's high bit for a
/// match; a borrow can only carry upward from a matching byte, so the lowest set bit is exact.
fn plain_run(s: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let is_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let quote = is_zero(x ^ (ONES * u64::from(b'"')));
        let backslash = is_zero(x ^ (ONES * u64::from(b'\\')));
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGHS;
        let special = quote | backslash | control | (x & HIGHS);
        if special != 0 {
            return i + (special.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    let rest = &s[i..];
    i + rest
        .iter()
        .position(|&c| needs_look(c))
        .unwrap_or(rest.len())
}

/// The length of the escape at the start of `s` (which begins with a backslash).
fn escape_len(s: &[u8]) -> Option<usize> {
    match s.get(1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(2),
        b'u' if s.get(2..6)?.iter().all(u8::is_ascii_hexdigit) => Some(6),
        _ => None,
    }
}

/// The number of ASCII digits at the start of `s`, 8 at a time: a millisecond `_ts` has 13.
/// A byte's high bit is set below `0` (the borrow), above `9` (the carry past 0x7f) and for
/// non-ASCII; digits neither borrow nor carry, so the lowest set bit is exact.
fn digit_run(s: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let below = x.wrapping_sub(ONES * u64::from(b'0'));
        let above = x.wrapping_add(ONES * u64::from(0x80 - b'9' - 1));
        let other = (below | above | x) & HIGHS;
        if other != 0 {
            return i + (other.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    let rest = &s[i..];
    i + rest.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// The length of the JSON number at the start of `s` and whether it is an integer, or `None`
/// if `s` does not start with one (`01`, `1.`, `-`, `.5` are not numbers).
#[inline]
pub(crate) fn number_len(s: &[u8]) -> Option<(usize, bool)> {
    let sign = usize::from(s.first() == Some(&b'-'));
    let whole = digit_run(&s[sign..]);
    if whole == 0 || (whole > 1 && s[sign] == b'0') {
        return None;
    }
    let i = sign + whole;
    // Integers (timestamps, counts) end here; the rest of the grammar stays out of line.
    match s.get(i) {
        Some(b'.' | b'e' | b'E') => fraction_and_exponent(s, i),
        _ => Some((i, true)),
    }
}

/// `number_len` past the integer part, which ends at `i`, before a `.`, `e` or `E`.
#[inline(never)]
fn fraction_and_exponent(s: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let digits = |from: usize| digit_run(&s[from.min(s.len())..]);
    if s.get(i) == Some(&b'.') {
        let frac = digits(i + 1);
        if frac == 0 {
            return None;
        }
        i += 1 + frac;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = digits(i);
        if exp == 0 {
            return None;
        }
        i += exp;
    }
    Some((i, false))
}

/// True if all of `s` is one JSON number; `Some(integer)` then.
pub(crate) fn whole_number(s: &[u8]) -> Option<bool> {
    number_len(s).and_then(|(len, integer)| (len == s.len()).then_some(integer))
}

/// The text of a string token with escapes resolved; `None` for an unpaired surrogate.
/// The tokenizer has already checked the escapes' syntax and the UTF-8.
pub(crate) fn unescape(raw: &str, escaped: bool) -> Option<Cow<'_, str>> {
    if !escaped {
        return Some(Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next()? {
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => unicode_escape(&mut chars)?,
            other => other,
        };
        out.push(decoded);
    }
    Some(Cow::Owned(out))
}

/// Reads the XXXX of `\uXXXX` (and a following `\uXXXX` low surrogate where needed).
fn unicode_escape(chars: &mut std::str::Chars<'_>) -> Option<char> {
    let hex4 = |chars: &mut std::str::Chars<'_>| {
        let text: String = chars.by_ref().take(4).collect();
        u32::from_str_radix(&text, 16).ok()
    };
    let first = hex4(chars)?;
    if !(0xD800..0xDC00).contains(&first) {
        return char::from_u32(first);
    }
    if chars.next()? != '\\' || chars.next()? != 'u' {
        return None;
    }
    let low = hex4(chars)?;
    if !(0xDC00..0xE000).contains(&low) {
        return None;
    }
    char::from_u32(0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00))
}

/// 1-based line and column (in bytes) of a byte position, for error messages.
pub(crate) fn line_column(s: &[u8], position: usize) -> (usize, usize) {
    let before = &s[..position.min(s.len())];
    let line = 1 + before.iter().filter(|&&c| c == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    (line, position - line_start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tape(s: &str) -> Result<Vec<(Kind, String)>, SyntaxError> {
        let mut t = Tokenizer::with_bins(s.as_bytes(), KeyedBins::default());
        let mut tape = Vec::new();
        let mut out = Vec::new();
        while let Some(doc) = t.next_document(&mut tape) {
            doc?.unwrap();
            out.extend(
                tape.iter()
                    .map(|k| (k.kind, s[k.start()..k.end()].to_owned())),
            );
        }
        Ok(out)
    }

    #[test]
    fn numbers() {
        assert_eq!(number_len(b"0"), Some((1, true)));
        assert_eq!(number_len(b"-12.5e+3,"), Some((8, false)));
        assert_eq!(number_len(b"18426744073709551616"), Some((20, true)));
        for bad in ["01", "1.", "-", ".5", "1e", "+1", "-a"] {
            assert_eq!(whole_number(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn documents_and_comments() {
        let t = tape("// c\n{\"a\" /* x */ : [1, {}], \"b\": \"q\\\"\"}{\"c\":null}").unwrap();
        let kinds: Vec<Kind> = t.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds.len(), 10);
        assert_eq!(t[4].1, "{}");
        assert_eq!(t[6].1, "q\\\"");
        assert_eq!(t[9].0, Kind::Null);
    }

    #[test]
    fn syntax_errors_name_the_position() {
        assert_eq!(tape("{\"a\":1,}").unwrap_err().position, 7);
        assert_eq!(tape("{\"a\" 1}").unwrap_err().position, 5);
        assert_eq!(tape("{\"a\":[1 2]}").unwrap_err().position, 8);
        assert_eq!(tape("{\"a\":tru}").unwrap_err().position, 5);
        assert_eq!(tape("[1]").unwrap_err().position, 0);
        assert!(tape("{\"a\":1} /* open").is_err());
        assert!(tape("{\"a\":\"x").is_err());
        assert!(tape("{\"a\":\"\\x\"}").is_err());
        assert_eq!(line_column(b"ab\ncd", 4), (2, 2));
    }

    proptest::proptest! {
        #[test]
        fn plain_run_finds_the_first_byte_that_needs_a_look(
            s in proptest::collection::vec(proptest::prop_oneof![
                0x20u8..0x7f, proptest::prelude::Just(b'"'), proptest::prelude::Just(b'\\'),
                proptest::prelude::any::<u8>()
            ], 0..40)
        ) {
            let expected = s.iter().position(|&c| needs_look(c)).unwrap_or(s.len());
            proptest::prop_assert_eq!(plain_run(&s), expected);
        }
    }

    proptest::proptest! {
        #[test]
        fn digit_run_counts_the_leading_digits(
            s in proptest::collection::vec(proptest::prop_oneof![
                b'0'..=b'9', b'0'..=b'9', b'0'..=b'9', proptest::prelude::any::<u8>()
            ], 0..40)
        ) {
            let expected = s.iter().take_while(|c| c.is_ascii_digit()).count();
            proptest::prop_assert_eq!(digit_run(&s), expected);
        }
    }

    #[test]
    fn unescapes() {
        assert_eq!(
            unescape("a\\n\\u00e9\\ud83d\\ude00", true).unwrap(),
            "a\né😀"
        );
        assert_eq!(unescape("\\ud83d", true), None);
        assert_eq!(unescape("\\u0041\\/", true).unwrap(), "A/");
    }
}
