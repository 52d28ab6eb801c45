//! Influx line protocol: `measurement[,tag=value…] field=value[,field=value…] [timestamp]`.
//! Each field becomes the stream `<measurement>_<field>` with the line's tags. A line is
//! atomic: any error in it rejects the whole line. Mapping rules: `FORMAT.md`.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::batch::{
    check_tag, check_tag_count, Batch, Mode, Options, Reason, Sample, TagList, Tags, Value,
    NAME_BYTES_MAX,
};
use crate::lines::{self, LineError};

/// Joins the measurement and the field key into the stream name.
pub const FIELD_SEPARATOR: char = '_';

/// The unit of the timestamps in a body (the `precision` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    #[default]
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
}

impl Precision {
    /// Reads the query parameter (`ns`, `us`, `ms`, `s`; also v1's `n`, `u`, `µ`).
    pub fn from_param(text: &str) -> Option<Precision> {
        match text {
            "ns" | "n" => Some(Precision::Nanoseconds),
            "us" | "u" | "µ" | "µs" => Some(Precision::Microseconds),
            "ms" => Some(Precision::Milliseconds),
            "s" => Some(Precision::Seconds),
            _ => None,
        }
    }

    /// The timestamp in ms, rounded toward negative infinity (None on overflow).
    fn to_ms(self, ts: i64) -> Option<i64> {
        match self {
            Precision::Nanoseconds => Some(ts.div_euclid(1_000_000)),
            Precision::Microseconds => Some(ts.div_euclid(1_000)),
            Precision::Milliseconds => Some(ts),
            Precision::Seconds => ts.checked_mul(1_000),
        }
    }
}

/// Parses a body of lines. Bad lines are rejected with line and column; good ones kept.
pub fn parse(input: &[u8], options: &Options, precision: Precision) -> Batch {
    let mut batch = Batch::default();
    let mut fields = Vec::new();
    let mut tag_sets = TagSets::default();
    for (line_no, bytes) in split_lines(input) {
        let start = bytes.iter().take_while(|c| c.is_ascii_whitespace()).count();
        if start == bytes.len() || bytes[start] == b'#' {
            continue;
        }
        let Some(line) = lines::utf8(&mut batch, line_no, bytes) else {
            continue;
        };
        fields.clear();
        let mut cursor = Cursor { line, pos: start };
        match cursor.line(options, precision, &mut fields, &mut tag_sets) {
            Ok(point) => {
                if !point.push_into(&mut batch, &mut fields, line_no) {
                    break;
                }
            }
            Err((offset, reason)) => batch.reject(|| lines::at(line_no, offset), reason),
        }
    }
    batch
}

/// The lines of a body, numbered from 1 (a line's number is that of its first byte), without
/// their `\n` / `\r\n`. As in InfluxDB, a newline inside a quoted string field does not end
/// the line.
fn split_lines(input: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut rest = input;
    let mut line_no = 1;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (len, inner_newlines) = line_len(rest);
        let line = &rest[..len];
        let this_line_no = line_no;
        line_no += 1 + inner_newlines;
        rest = rest.get(len + 1..).unwrap_or(&[]);
        Some((this_line_no, line.strip_suffix(b"\r").unwrap_or(line)))
    })
}

/// The length of the first line of `s` and the newlines inside it: up to the first newline
/// that is not inside a quoted string field. Quotes count only after the first unescaped space
/// (in the fields), so a quote in a measurement or tag is an ordinary character; comment lines
/// end at the first newline.
fn line_len(s: &[u8]) -> (usize, usize) {
    let first_newline = s.iter().position(|&c| c == b'\n').unwrap_or(s.len());
    // Most lines hold no quote at all: then the first newline ends them (both scans are memchr).
    if !s[..first_newline].contains(&b'"') {
        return (first_newline, 0);
    }
    let start = s.iter().take_while(|c| matches!(c, b' ' | b'\t')).count();
    if s.get(start) == Some(&b'#') {
        return (first_newline, 0);
    }
    let (mut in_fields, mut quoted, mut newlines) = (false, false, 0);
    let mut i = start;
    while let Some(&c) = s.get(i) {
        match c {
            b'\n' if !quoted => return (i, newlines),
            b'\n' => newlines += 1,
            // An escape: the next byte is literal, unless it is a newline (which still ends an
            // unquoted line and is kept in a quoted one either way).
            b'\\' if s.get(i + 1).is_some_and(|&n| n != b'\n') => i += 1,
            b'"' if in_fields => quoted = !quoted,
            b' ' if !quoted => in_fields = true,
            _ => {}
        }
        i += 1;
    }
    (s.len(), newlines)
}

/// Tag sections already parsed in this batch, by their text.
type TagSets<'a> = HashMap<&'a str, Tags>;

/// The length of the tag section at the start of `s`: up to the first unescaped space.
fn section_len(s: &[u8]) -> usize {
    let mut i = 0;
    while let Some(&c) = s.get(i) {
        match c {
            b'\\' if s.get(i + 1).is_some_and(|n| b",= ".contains(n)) => i += 2,
            b' ' => break,
            _ => i += 1,
        }
    }
    i.min(s.len())
}

/// A parsed line; its fields are in the caller's reusable vector.
struct Point<'a> {
    measurement: Cow<'a, str>,
    tags: Tags,
    ts_ms: Option<i64>,
}

impl Point<'_> {
    fn push_into(
        self,
        batch: &mut Batch,
        fields: &mut Vec<(Cow<'_, str>, Value)>,
        line_no: usize,
    ) -> bool {
        for (key, value) in fields.drain(..) {
            let mut name = String::with_capacity(self.measurement.len() + 1 + key.len());
            name.push_str(&self.measurement);
            name.push(FIELD_SEPARATOR);
            name.push_str(&key);
            let sample = Sample {
                name,
                tags: self.tags.clone(),
                ts_ms: self.ts_ms,
                value,
                mode: Mode::Set,
            };
            if !batch.push(sample, || lines::at(line_no, 0)) {
                return false;
            }
        }
        true
    }
}

struct Cursor<'a> {
    line: &'a str,
    pos: usize,
}

/// Which bytes end an identifier, by position in the line.
const MEASUREMENT_END: &[u8] = b", ";
const TAG_KEY_END: &[u8] = b"=, ";
const FIELD_KEY_END: &[u8] = b"=, ";

impl<'a> Cursor<'a> {
    fn line(
        &mut self,
        options: &Options,
        precision: Precision,
        fields: &mut Vec<(Cow<'a, str>, Value)>,
        tag_sets: &mut TagSets<'a>,
    ) -> Result<Point<'a>, LineError> {
        let measurement = self.identifier(MEASUREMENT_END, "a measurement")?;
        let tags = self.tags(tag_sets)?;
        self.spaces()?;
        loop {
            let key_at = self.pos;
            let key = self.identifier(FIELD_KEY_END, "a field key")?;
            let size = measurement.len() + 1 + key.len();
            if size > NAME_BYTES_MAX {
                let what = "name length in bytes";
                let max = NAME_BYTES_MAX;
                return Err((key_at, Reason::Bound { what, size, max }));
            }
            self.expect(b'=', "'=' after a field key")?;
            let value = self.field_value()?;
            fields.push((key, value));
            if !self.eat(b',') {
                break;
            }
        }
        let ts_ms = self.timestamp(options, precision)?;
        Ok(Point {
            measurement,
            tags,
            ts_ms,
        })
    }

    /// Reads the `,tag=value…` section. Batches repeat the same few tag sets on many lines, so
    /// each distinct section text is parsed once per batch and its `Tags` shared.
    fn tags(&mut self, tag_sets: &mut TagSets<'a>) -> Result<Tags, LineError> {
        let start = self.pos;
        let end = start + section_len(&self.line.as_bytes()[start..]);
        let text = &self.line[start..end];
        if let Some(tags) = tag_sets.get(text) {
            self.pos = end;
            return Ok(tags.clone());
        }
        let mut tags = TagList::new();
        while self.eat(b',') {
            let tag_at = self.pos;
            let key = self.identifier(TAG_KEY_END, "a tag key")?;
            self.expect(b'=', "'=' after a tag key")?;
            let value = self.identifier(MEASUREMENT_END, "a tag value")?;
            check_tag(&key, &value).map_err(|r| (tag_at, r))?;
            tags.push((key.into_owned(), value.into_owned()));
            check_tag_count(tags.len()).map_err(|r| (tag_at, r))?;
        }
        let tags: Tags = tags.into();
        // Only a section read exactly to its end is reusable (a malformed one errs later).
        if self.pos == end {
            tag_sets.insert(text, tags.clone());
        }
        Ok(tags)
    }

    /// Reads up to an unescaped byte of `end` (or the end of the line); `\` escapes `,` `=`
    /// and space, and is literal before anything else.
    fn identifier(&mut self, end: &[u8], what: &'static str) -> Result<Cow<'a, str>, LineError> {
        let bytes = self.line.as_bytes();
        let start = self.pos;
        let mut escaped = false;
        let mut i = start;
        while let Some(&c) = bytes.get(i) {
            if c == b'\\' && bytes.get(i + 1).is_some_and(|n| b",= ".contains(n)) {
                escaped = true;
                i += 2;
            } else if end.contains(&c) {
                break;
            } else {
                i += 1;
            }
        }
        self.pos = i;
        if i == start {
            return Err((start, Reason::Syntax { expected: what }));
        }
        let raw = &self.line[start..i];
        Ok(if escaped {
            Cow::Owned(unescape(raw, b",= "))
        } else {
            Cow::Borrowed(raw)
        })
    }

    fn field_value(&mut self) -> Result<Value, LineError> {
        let start = self.pos;
        if self.eat(b'"') {
            return self.string_value(start);
        }
        let bytes = self.line.as_bytes();
        let len = bytes[start..]
            .iter()
            .take_while(|&&c| c != b',' && c != b' ')
            .count();
        self.pos = start + len;
        let text = &self.line[start..start + len];
        scalar(text).map_err(|r| (start, r))
    }

    /// A double-quoted string; `\"` and `\\` are escapes, any other backslash is literal.
    fn string_value(&mut self, start: usize) -> Result<Value, LineError> {
        let bytes = self.line.as_bytes();
        let mut i = self.pos;
        let mut escaped = false;
        loop {
            match bytes.get(i) {
                None => {
                    let expected = "'\"' closing a string field";
                    return Err((start, Reason::Syntax { expected }));
                }
                Some(b'\\') if matches!(bytes.get(i + 1), Some(b'"' | b'\\')) => {
                    escaped = true;
                    i += 2;
                }
                Some(b'"') => break,
                Some(_) => i += 1,
            }
        }
        let raw = &self.line[self.pos..i];
        self.pos = i + 1;
        let text = if escaped {
            unescape(raw, b"\"\\")
        } else {
            raw.to_owned()
        };
        Ok(Value::Text(text))
    }

    fn timestamp(
        &mut self,
        options: &Options,
        precision: Precision,
    ) -> Result<Option<i64>, LineError> {
        let rest = &self.line[self.pos..];
        let text = rest.trim_matches(|c: char| c.is_ascii_whitespace());
        if text.is_empty() {
            return Ok(None);
        }
        if !rest.starts_with(' ') {
            let expected = "',' or ' ' after a field value";
            return Err((self.pos, Reason::Syntax { expected }));
        }
        let at = self.pos + (rest.len() - rest.trim_start().len());
        let ts = text
            .parse::<i64>()
            .map_err(|_| (at, Reason::bad_value("an integer timestamp", text)))?;
        let ts_ms = precision.to_ms(ts).unwrap_or(i64::MAX);
        options.check_ts(ts_ms).map(Some).map_err(|r| (at, r))
    }

    fn spaces(&mut self) -> Result<(), LineError> {
        let skipped = self.line.as_bytes()[self.pos..]
            .iter()
            .take_while(|&&c| c == b' ')
            .count();
        if skipped == 0 {
            let expected = "',' or ' ' and the fields after the measurement and tags";
            return Err((self.pos, Reason::Syntax { expected }));
        }
        self.pos += skipped;
        Ok(())
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.line.as_bytes().get(self.pos) == Some(&c);
        self.pos += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8, expected: &'static str) -> Result<(), LineError> {
        if self.eat(c) {
            return Ok(());
        }
        Err((self.pos, Reason::Syntax { expected }))
    }
}

/// An unquoted field value: `1i` int64, `1u` uint64, booleans, or a float.
fn scalar(text: &str) -> Result<Value, Reason> {
    let numeric = |v: Option<f64>, expected| {
        v.map(Value::Numeric)
            .ok_or_else(|| Reason::bad_value(expected, text))
    };
    match text {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(Value::Numeric(1.0)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(Value::Numeric(0.0)),
        _ => {}
    }
    if let Some(int) = text.strip_suffix('i') {
        return numeric(
            int.parse::<i64>().ok().map(|v| v as f64),
            "an int64 (`<digits>i`)",
        );
    }
    if let Some(uint) = text.strip_suffix('u') {
        return numeric(
            uint.parse::<u64>().ok().map(|v| v as f64),
            "a uint64 (`<digits>u`)",
        );
    }
    let float = text
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && is_float_text(text));
    numeric(
        float,
        "a finite float, <int>i, <uint>u, a boolean or a \"string\"",
    )
}

/// Rust accepts `inf`, `NaN` and `infinity`; line protocol does not.
fn is_float_text(text: &str) -> bool {
    text.bytes()
        .all(|c| c.is_ascii_digit() || b"+-.eE".contains(&c))
}

/// Removes the backslash before each byte of `escapable`.
fn unescape(raw: &str, escapable: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&next) = chars.peek() {
                if next.is_ascii() && escapable.contains(&(next as u8)) {
                    out.push(next);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}
