//! Influx line protocol: `measurement[,tag=value…] field=value[,field=value…] [timestamp]`.
//! Each field becomes the stream `<measurement>_<field>` with the line's tags. A line is
//! atomic: any error in it rejects the whole line. Mapping rules: `FORMAT.md`.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::batch::{
    check_tag, check_tag_count, Batch, Mode, Options, Reason, TagList, Tags, Value, NAME_BYTES_MAX,
    SAMPLES_PER_BATCH_MAX,
};
use crate::lines::{self, LineError};
use crate::sink::{Lookup, Name, Point, RawSeries, Scope, Series, Sink, TagsRef, ValueRef};

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
    parse_into(input, options, precision, &mut batch);
    batch
}

/// [`parse`] into any sink. Each field is a series whose raw bytes are the line's measurement
/// and tag section as sent, then the field key as sent: a line whose fields the sink all knows
/// ([`Sink::known_series`]) has its tags neither read nor checked.
pub fn parse_into<S: Sink>(input: &[u8], options: &Options, precision: Precision, sink: &mut S) {
    let mut feeder = Feeder {
        sink,
        tag_sets: TagSets::default(),
        handed: 0,
    };
    visit(input, options, precision, &mut feeder);
}

/// One field of a well-formed line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Field<'a> {
    /// The key exactly as sent (escapes kept).
    pub raw_key: &'a str,
    /// The key with its escapes removed.
    pub key: Cow<'a, str>,
    /// `Numeric` or `Text`.
    pub value: Value,
}

/// A line whose measurement, fields and timestamp are well formed, as [`visit`] hands it over.
/// Its tags are read only when asked for ([`Line::tags`]): a caller that already knows the
/// series by its bytes (`series`) does not pay for them.
#[derive(Debug)]
pub(crate) struct Line<'a, 'f> {
    /// 1-based, as in rejections.
    pub line_no: usize,
    /// The measurement and tag section exactly as sent (escapes kept): equal sections always
    /// mean equal measurements and tags, and a section whose tags were read once without error
    /// always reads without error.
    pub series: &'a str,
    pub measurement: Cow<'a, str>,
    pub fields: &'f [Field<'a>],
    /// Milliseconds since the epoch, checked against the options; `None` = at receipt.
    pub ts_ms: Option<i64>,
    /// The whole line and where its tag section starts (right after the measurement) and ends.
    text: &'a str,
    tags_at: usize,
    section_end: usize,
}

impl<'a> Line<'a, '_> {
    /// The tag section as sent (`,k=v…`, possibly empty).
    pub fn tag_section(&self) -> &'a str {
        &self.text[self.tags_at..self.section_end]
    }

    /// The line's tags in the order sent, checked as [`parse`] checks them. An error rejects
    /// the whole line: (0-based byte offset in the line, reason).
    pub fn tags(&self) -> Result<Vec<(String, String)>, (usize, Reason)> {
        let mut cursor = Cursor {
            line: self.text,
            pos: self.tags_at,
        };
        let tags = cursor.tag_list()?;
        cursor.at_section_end(self.section_end)?;
        Ok(tags)
    }
}

/// Receives the lines of a body in order.
trait Visitor<'a> {
    /// A well-formed line (its tags not read yet: [`Line::tags`]). Returns `false` to stop
    /// reading the body.
    fn line(&mut self, line: &Line<'a, '_>) -> bool;
    /// Line `line_no` is rejected whole, at 0-based byte `offset` of the line.
    fn reject(&mut self, line_no: usize, offset: usize, reason: Reason);
}

/// Reads a body of lines into `visitor`: each well-formed line to [`Visitor::line`], each bad
/// one to [`Visitor::reject`] (the first error in the line).
fn visit<'a>(
    input: &'a [u8],
    options: &Options,
    precision: Precision,
    visitor: &mut impl Visitor<'a>,
) {
    let mut fields = Vec::new();
    for (line_no, bytes) in split_lines(input) {
        let start = bytes.iter().take_while(|c| c.is_ascii_whitespace()).count();
        if start == bytes.len() || bytes[start] == b'#' {
            continue;
        }
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                visitor.reject(line_no, e.valid_up_to(), Reason::InvalidUtf8);
                continue;
            }
        };
        fields.clear();
        let mut cursor = Cursor {
            line: text,
            pos: start,
        };
        match cursor.line(options, precision, &mut fields) {
            Ok(head) => {
                let line = Line {
                    line_no,
                    series: &text[start..head.section_end],
                    measurement: head.measurement,
                    fields: &fields,
                    ts_ms: head.ts_ms,
                    text,
                    tags_at: head.tags_at,
                    section_end: head.section_end,
                };
                if !visitor.line(&line) {
                    break;
                }
            }
            Err((offset, reason)) => visitor.reject(line_no, offset, reason),
        }
    }
}

/// Lines into a sink: each field a sample, each distinct tag section's tags read once and
/// shared (one list per section: cloning it per field made parsing 10× slower).
struct Feeder<'a, 's, S> {
    sink: &'s mut S,
    tag_sets: TagSets<'a>,
    /// Samples handed over, against `SAMPLES_PER_BATCH_MAX`.
    handed: usize,
}

impl<'a, S: Sink> Feeder<'a, '_, S> {
    /// The line's tags as a shared list and its id, read once per distinct section; `Err`
    /// rejects the line.
    fn tags(&mut self, line: &Line<'a, '_>) -> Result<(u64, Tags), (usize, Reason)> {
        let section = line.tag_section();
        if let Some(found) = self.tag_sets.get(section) {
            return Ok(found.clone());
        }
        let tags: Tags = line.tags()?.into();
        let id = self.tag_sets.len() as u64;
        self.tag_sets.insert(section, (id, tags.clone()));
        Ok((id, tags))
    }
}

impl<'a, S: Sink> Visitor<'a> for Feeder<'a, '_, S> {
    fn line(&mut self, line: &Line<'a, '_>) -> bool {
        let (line_no, fields) = (line.line_no, line.fields);
        if self.handed + fields.len() > SAMPLES_PER_BATCH_MAX {
            // A line is atomic: the body stops before it.
            let reason = Reason::Bound {
                what: "samples in the batch",
                size: SAMPLES_PER_BATCH_MAX + 1,
                max: SAMPLES_PER_BATCH_MAX,
            };
            self.sink
                .reject(&|| lines::at(line_no, 0), reason, Scope::Rest);
            return false;
        }
        self.handed += fields.len();
        let section = line.series.as_bytes();
        // Read at the first field the sink does not know. A known field's section read
        // without error before, so reading it cannot fail once a field was handed over: the
        // line is never half handed over. (A cell, so that the series below, made once per
        // line, can borrow the tags once they are read.)
        let tags: std::cell::OnceCell<(u64, Tags)> = std::cell::OnceCell::new();
        let mut series = Series {
            name: Name::joined(&line.measurement, FIELD_SEPARATOR, ""),
            tags: TagsRef::Unread,
            lookup: Lookup::Unknown,
            raw: None,
            index: None,
        };
        for (i, field) in fields.iter().enumerate() {
            let raw = RawSeries {
                first: section,
                second: field.raw_key.as_bytes(),
            };
            series.lookup = match self.sink.known_series(raw) {
                Some(known) => Lookup::Known(known),
                None => Lookup::Unknown,
            };
            if series.lookup == Lookup::Unknown && tags.get().is_none() {
                match self.tags(line) {
                    Ok(read) => {
                        let (id, tags) = tags.get_or_init(|| read);
                        series.tags = TagsRef::List { id: *id, tags };
                    }
                    Err((offset, reason)) => {
                        debug_assert_eq!(i, 0, "a known section reads without error");
                        self.reject(line_no, offset, reason);
                        return true;
                    }
                }
            }
            let value = match &field.value {
                Value::Numeric(v) => ValueRef::Numeric(*v),
                Value::Text(text) => ValueRef::Text(text),
                // The line protocol has no other kinds.
                _ => continue,
            };
            series.name.tail = Some((FIELD_SEPARATOR, &field.key));
            series.raw = Some(raw);
            let point = Point {
                ts_ms: line.ts_ms,
                value,
                mode: Mode::Set,
            };
            if !self.sink.sample(&series, point) {
                return false;
            }
        }
        true
    }

    fn reject(&mut self, line_no: usize, offset: usize, reason: Reason) {
        self.sink
            .reject(&|| lines::at(line_no, offset), reason, Scope::One);
    }
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

/// Tag sections already read in this batch, by their text.
/// foldhash: the std hasher (SipHash) cost 450 instructions a section, 6 a sample of a body whose
/// series a sink does not know yet.
type TagSets<'a> = HashMap<&'a str, (u64, Tags), foldhash::fast::RandomState>;

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

/// What [`Cursor::line`] read besides the fields (which are in the caller's vector).
struct Head<'a> {
    measurement: Cow<'a, str>,
    /// Where the tag section starts and ends in the line.
    tags_at: usize,
    section_end: usize,
    ts_ms: Option<i64>,
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
    /// Reads a line except its tags, which are only checked when something else in the line
    /// is wrong (a tag error comes first in the line, so it is the one named).
    fn line(
        &mut self,
        options: &Options,
        precision: Precision,
        fields: &mut Vec<Field<'a>>,
    ) -> Result<Head<'a>, LineError> {
        let measurement = self.identifier(MEASUREMENT_END, "a measurement")?;
        let tags_at = self.pos;
        let section_end = tags_at + section_len(&self.line.as_bytes()[tags_at..]);
        self.pos = section_end;
        match self.fields_and_timestamp(&measurement, options, precision, fields) {
            Ok(ts_ms) => Ok(Head {
                measurement,
                tags_at,
                section_end,
                ts_ms,
            }),
            Err(e) => {
                let mut tags = Cursor {
                    line: self.line,
                    pos: tags_at,
                };
                tags.tag_list()?;
                tags.at_section_end(section_end)?;
                Err(e)
            }
        }
    }

    fn fields_and_timestamp(
        &mut self,
        measurement: &str,
        options: &Options,
        precision: Precision,
        fields: &mut Vec<Field<'a>>,
    ) -> Result<Option<i64>, LineError> {
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
            let raw_key = &self.line[key_at..self.pos];
            self.expect(b'=', "'=' after a field key")?;
            let value = self.field_value()?;
            fields.push(Field {
                raw_key,
                key,
                value,
            });
            if !self.eat(b',') {
                break;
            }
        }
        self.timestamp(options, precision)
    }

    /// Reads the `,tag=value…` section.
    fn tag_list(&mut self) -> Result<TagList, LineError> {
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
        Ok(tags)
    }

    /// The tags end where the section does (the fields follow a space); anything else is the
    /// error the fields would meet.
    fn at_section_end(&self, section_end: usize) -> Result<(), LineError> {
        if self.pos == section_end {
            return Ok(());
        }
        let expected = "',' or ' ' and the fields after the measurement and tags";
        Err((self.pos, Reason::Syntax { expected }))
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
