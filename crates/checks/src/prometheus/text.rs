//! The Prometheus text exposition formats: 0.0.4 and OpenMetrics 1.0, into metric families.
//!
//! One pass over the body, line by line, building only what the families keep (names, labels,
//! help). Samples join the family whose `# TYPE` (or `# HELP`) came last when their name is
//! that family's or one of its kind's suffixes (`_bucket`, `_sum`, `_count`, `_total`, …);
//! any other sample starts an untyped family of its own, as Prometheus reads them. Quoted
//! (UTF-8) metric and label names, `{"name", label="v"}`, are read as Prometheus 3 writes them.
//! Timestamps are checked and dropped: the broker stamps every measurement.

use std::fmt;

/// Labels one series may carry.
pub const LABELS_MAX: usize = 48;
/// Longest metric or label name, in bytes.
pub const NAME_BYTES_MAX: usize = 1024;
/// Longest label value or help text, in bytes.
pub const VALUE_BYTES_MAX: usize = 16 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    /// `untyped` (0.0.4) and `unknown` (OpenMetrics), and samples with no `# TYPE`.
    Unknown,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: Kind,
    pub help: Option<String>,
    pub unit: Option<String>,
    pub samples: Vec<Sample>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The name as written (`foo_bucket`, `foo_total`, …).
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Where a body stops being the format, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Parses a whole body. At most `series_max` samples are accepted; one more is an error (a
/// scrape is taken whole or not at all, as Prometheus's `sample_limit`).
pub fn parse(body: &[u8], format: Format, series_max: usize) -> Result<Vec<Family>, ParseError> {
    let text = std::str::from_utf8(body).map_err(|e| ParseError {
        line: 1 + body[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        reason: "not UTF-8".to_owned(),
    })?;
    let mut p = Parser {
        format,
        families: Vec::new(),
        samples: 0,
        series_max,
        eof: false,
    };
    for (i, line) in text.split('\n').enumerate() {
        p.line(line).map_err(|reason| ParseError {
            line: i + 1,
            reason,
        })?;
    }
    if format == Format::OpenMetrics && !p.eof {
        let line = text.split('\n').count();
        return Err(ParseError {
            line,
            reason: "missing `# EOF`".to_owned(),
        });
    }
    Ok(p.families)
}

struct Parser {
    format: Format,
    families: Vec<Family>,
    samples: usize,
    series_max: usize,
    eof: bool,
}

type Step = Result<(), String>;

impl Parser {
    fn line(&mut self, line: &str) -> Step {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if self.eof {
            return match line.is_empty() {
                true => Ok(()),
                false => Err("content after `# EOF`".to_owned()),
            };
        }
        let trimmed = line.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() {
            return Ok(());
        }
        if let Some(comment) = trimmed.strip_prefix('#') {
            return self.comment(comment);
        }
        self.sample(trimmed)
    }

    fn comment(&mut self, comment: &str) -> Step {
        let comment = comment.trim_start_matches([' ', '\t']);
        let (word, rest) = split_word(comment);
        match word {
            "EOF" if self.format == Format::OpenMetrics => {
                self.eof = true;
                Ok(())
            }
            "TYPE" => {
                let (name, kind) = metric_name_then(rest)?;
                let kind = self.kind(kind.trim())?;
                self.family_mut(name).kind = kind;
                Ok(())
            }
            "HELP" => {
                let (name, help) = metric_name_then(rest)?;
                let help = unescape_help(help.strip_prefix([' ', '\t']).unwrap_or(help))?;
                self.family_mut(name).help = Some(help);
                Ok(())
            }
            "UNIT" if self.format == Format::OpenMetrics => {
                let (name, unit) = metric_name_then(rest)?;
                self.family_mut(name).unit = Some(unit.trim().to_owned());
                Ok(())
            }
            // Other comments carry nothing a check keeps.
            _ => Ok(()),
        }
    }

    fn kind(&self, word: &str) -> Result<Kind, String> {
        let kind = match (word, self.format) {
            ("counter", _) => Kind::Counter,
            ("gauge", _) => Kind::Gauge,
            ("histogram", _) => Kind::Histogram,
            ("summary", _) => Kind::Summary,
            ("untyped", Format::Text) | ("unknown", Format::OpenMetrics) => Kind::Unknown,
            ("gaugehistogram", Format::OpenMetrics) => Kind::GaugeHistogram,
            ("info", Format::OpenMetrics) => Kind::Info,
            ("stateset", Format::OpenMetrics) => Kind::StateSet,
            _ => return Err(format!("unknown metric type `{}`", cut(word))),
        };
        Ok(kind)
    }

    /// The family `name` when it is the current one and has no samples yet (HELP and TYPE of
    /// one family in either order), else a new one.
    fn family_mut(&mut self, name: String) -> &mut Family {
        let reuse =
            matches!(self.families.last(), Some(f) if f.name == name && f.samples.is_empty());
        if !reuse {
            self.families.push(Family {
                name,
                kind: Kind::Unknown,
                help: None,
                unit: None,
                samples: Vec::new(),
            });
        }
        let last = self.families.len() - 1;
        &mut self.families[last]
    }

    fn sample(&mut self, line: &str) -> Step {
        if self.samples >= self.series_max {
            return Err(format!("more than {} series", self.series_max));
        }
        let sample = read_sample(line, self.format)?;
        self.samples += 1;
        let joins = matches!(self.families.last(), Some(f) if belongs(f, &sample.name));
        if !joins {
            self.families.push(Family {
                name: sample.name.clone(),
                kind: Kind::Unknown,
                help: None,
                unit: None,
                samples: Vec::new(),
            });
        }
        if let Some(f) = self.families.last_mut() {
            f.samples.push(sample);
        }
        Ok(())
    }
}

/// Whether a sample named `name` is part of family `f`.
fn belongs(f: &Family, name: &str) -> bool {
    let Some(suffix) = name.strip_prefix(f.name.as_str()) else {
        return false;
    };
    let suffixes: &[&str] = match f.kind {
        Kind::Counter => &["", "_total", "_created"],
        Kind::Histogram => &["_bucket", "_sum", "_count", "_created"],
        Kind::GaugeHistogram => &["_bucket", "_gsum", "_gcount"],
        Kind::Summary => &["", "_sum", "_count", "_created"],
        Kind::Info => &["_info"],
        Kind::Gauge | Kind::StateSet | Kind::Unknown => &[""],
    };
    suffixes.contains(&suffix)
}

/// A sample line: name, labels, value, and an optional timestamp and (OpenMetrics) exemplar.
fn read_sample(line: &str, format: Format) -> Result<Sample, String> {
    let mut c = Cursor::new(line);
    let mut name = match c.peek() {
        Some(b'{') => String::new(),
        _ => c.bare_name(true)?.to_owned(),
    };
    let mut labels = Vec::new();
    if c.peek() == Some(b'{') {
        c.bump();
        read_labels(&mut c, &mut name, &mut labels)?;
    }
    if name.is_empty() {
        return Err("a sample has no metric name".to_owned());
    }
    if !c.blank() {
        return Err("expected a space before the value".to_owned());
    }
    let value = parse_value(c.token())?;
    if c.blank() && !c.at_end() {
        if c.peek() != Some(b'#') {
            parse_timestamp(c.token(), format)?;
            c.blank();
        }
        if c.peek() == Some(b'#') {
            exemplar(&mut c, format)?;
        }
    }
    if !c.at_end() {
        return Err("unexpected text after the value".to_owned());
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// `{…}` after its `{`: labels, and the metric name when it is quoted inside.
fn read_labels(c: &mut Cursor, name: &mut String, labels: &mut Vec<(String, String)>) -> Step {
    loop {
        c.spaces();
        match c.peek() {
            Some(b'}') => {
                c.bump();
                return Ok(());
            }
            Some(b'"') => {
                let quoted = c.quoted()?;
                c.spaces();
                if c.peek() != Some(b'=') {
                    if !name.is_empty() {
                        return Err("two metric names".to_owned());
                    }
                    *name = quoted;
                } else {
                    c.bump();
                    c.spaces();
                    labels.push((quoted, c.quoted()?));
                }
            }
            Some(_) => {
                let label = c.bare_name(false)?.to_owned();
                c.spaces();
                if !c.eat(b'=') {
                    return Err(format!("expected `=` after label `{}`", cut(&label)));
                }
                c.spaces();
                labels.push((label, c.quoted()?));
            }
            None => return Err("unclosed `{`".to_owned()),
        }
        if labels.len() > LABELS_MAX {
            return Err(format!("more than {LABELS_MAX} labels"));
        }
        c.spaces();
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err("expected `,` or `}` in the labels".to_owned());
        }
    }
}

/// ` # {labels} value [timestamp]` (OpenMetrics); checked, not kept.
fn exemplar(c: &mut Cursor, format: Format) -> Step {
    if format != Format::OpenMetrics {
        return Err("exemplars are OpenMetrics only".to_owned());
    }
    c.bump();
    c.blank();
    if !c.eat(b'{') {
        return Err("expected `{` to open the exemplar's labels".to_owned());
    }
    let mut name = String::new();
    let mut labels = Vec::new();
    read_labels(c, &mut name, &mut labels)?;
    if !c.blank() {
        return Err("expected the exemplar's value".to_owned());
    }
    parse_value(c.token())?;
    if c.blank() && !c.at_end() {
        parse_timestamp(c.token(), Format::OpenMetrics)?;
    }
    Ok(())
}

fn parse_value(token: &str) -> Result<f64, String> {
    // Rust reads `NaN`, `+Inf`, `-Inf` and `Inf` (any case) as Go's ParseFloat does.
    token
        .parse::<f64>()
        .map_err(|_| format!("`{}` is not a number", cut(token)))
}

fn parse_timestamp(token: &str, format: Format) -> Step {
    let ok = match format {
        Format::Text => token.parse::<i64>().is_ok(),
        Format::OpenMetrics => token.parse::<f64>().is_ok_and(f64::is_finite),
    };
    match ok {
        true => Ok(()),
        false => Err(format!("`{}` is not a timestamp", cut(token))),
    }
}

/// A `# TYPE`/`# HELP`/`# UNIT` line's metric name (bare or quoted) and the rest.
fn metric_name_then(rest: &str) -> Result<(String, &str), String> {
    let mut c = Cursor::new(rest.trim_start_matches([' ', '\t']));
    let name = match c.peek() {
        Some(b'"') => c.quoted()?,
        _ => c.bare_name(true)?.to_owned(),
    };
    Ok((name, c.rest()))
}

fn unescape_help(text: &str) -> Result<String, String> {
    if text.len() > VALUE_BYTES_MAX {
        return Err(format!("help longer than {VALUE_BYTES_MAX} bytes"));
    }
    if !text.contains('\\') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        match (ch, ch == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some('\\') => out.push('\\'),
                // 0.0.4 help text keeps other escapes as written; OpenMetrics allows `\"`.
                Some('"') => out.push('"'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            (other, false) => out.push(other),
        }
    }
    Ok(out)
}

fn split_word(s: &str) -> (&str, &str) {
    match s.find([' ', '\t']) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    }
}

/// A short excerpt of input for a message.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A read position in one line.
struct Cursor<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Cursor<'a> {
        Cursor { s, i: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.i).copied()
    }

    fn bump(&mut self) {
        self.i += 1;
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn rest(&self) -> &'a str {
        &self.s[self.i..]
    }

    /// Skips spaces and tabs; true if there were any.
    fn blank(&mut self) -> bool {
        let start = self.i;
        self.spaces();
        self.i > start
    }

    fn spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// Up to the next space or tab (or the end).
    fn token(&mut self) -> &'a str {
        let start = self.i;
        while !matches!(self.peek(), None | Some(b' ' | b'\t')) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` (colons only in metric names).
    fn bare_name(&mut self, metric: bool) -> Result<&'a str, String> {
        let start = self.i;
        let ok = |b: u8, first: bool| {
            b.is_ascii_alphabetic()
                || b == b'_'
                || (metric && b == b':')
                || (!first && b.is_ascii_digit())
        };
        while let Some(b) = self.peek() {
            if !ok(b, self.i == start) {
                break;
            }
            self.i += 1;
        }
        let name = &self.s[start..self.i];
        if name.is_empty() {
            let found = self
                .rest()
                .chars()
                .next()
                .map_or("end of line".to_owned(), |c| format!("`{c}`"));
            return Err(format!("expected a name, found {found}"));
        }
        if name.len() > NAME_BYTES_MAX {
            return Err(format!("a name longer than {NAME_BYTES_MAX} bytes"));
        }
        Ok(name)
    }

    /// A double-quoted string with `\\`, `\"` and `\n` escapes.
    fn quoted(&mut self) -> Result<String, String> {
        if !self.eat(b'"') {
            return Err("expected a quoted string".to_owned());
        }
        let start = self.i;
        let bytes = self.s.as_bytes();
        // The common case: no escapes, one slice.
        while let Some(&b) = bytes.get(self.i) {
            match b {
                b'"' => {
                    let v = &self.s[start..self.i];
                    self.i += 1;
                    return check_len(v).map(str::to_owned);
                }
                b'\\' => return self.quoted_escaped(start),
                _ => self.i += 1,
            }
        }
        Err("unclosed quoted string".to_owned())
    }

    fn quoted_escaped(&mut self, start: usize) -> Result<String, String> {
        let mut out = String::from(&self.s[start..self.i]);
        let mut chars = self.s[self.i..].char_indices();
        while let Some((at, ch)) = chars.next() {
            match ch {
                '"' => {
                    self.i += at + 1;
                    check_len(&out)?;
                    return Ok(out);
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('n') => out.push('\n'),
                    Some('\\') => out.push('\\'),
                    Some('"') => out.push('"'),
                    Some(other) => return Err(format!("unknown escape `\\{other}`")),
                    None => break,
                },
                other => out.push(other),
            }
        }
        Err("unclosed quoted string".to_owned())
    }
}

fn check_len(v: &str) -> Result<&str, String> {
    match v.len() > VALUE_BYTES_MAX {
        true => Err(format!("a label value longer than {VALUE_BYTES_MAX} bytes")),
        false => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(body: &str, format: Format) -> Vec<Family> {
        parse(body.as_bytes(), format, 1000).unwrap()
    }

    #[test]
    fn text_families_and_suffixes() {
        let body = "# HELP rq Requests.\n# TYPE rq counter\nrq{code=\"200\"} 7 1700000000000\n\
                    # TYPE lat histogram\nlat_bucket{le=\"0.1\"} 1\nlat_bucket{le=\"+Inf\"} 2\n\
                    lat_sum 0.3\nlat_count 2\nloose 1\n";
        let f = one(body, Format::Text);
        assert_eq!(f.len(), 3);
        assert_eq!(
            (f[0].kind, f[0].help.as_deref()),
            (Kind::Counter, Some("Requests."))
        );
        assert_eq!(
            f[0].samples[0].labels,
            vec![("code".to_owned(), "200".to_owned())]
        );
        assert_eq!(f[1].samples.len(), 4);
        assert_eq!(f[1].samples[1].value, 2.0);
        assert_eq!((f[2].name.as_str(), f[2].kind), ("loose", Kind::Unknown));
    }

    #[test]
    fn openmetrics_needs_eof_and_reads_exemplars() {
        let body = "# TYPE a counter\na_total 1 # {trace_id=\"x\"} 0.5 123.4\n# EOF\n";
        let f = one(body, Format::OpenMetrics);
        assert_eq!(f[0].samples[0].name, "a_total");
        let e = parse(b"a 1\n", Format::OpenMetrics, 10).unwrap_err();
        assert_eq!(e.reason, "missing `# EOF`");
    }

    #[test]
    fn escapes_quoted_names_and_errors() {
        let f = one("{\"my.metric\", \"a.b\"=\"x\\\"y\\n\"} NaN\n", Format::Text);
        assert_eq!(f[0].samples[0].name, "my.metric");
        assert_eq!(f[0].samples[0].labels[0].1, "x\"y\n");
        assert!(f[0].samples[0].value.is_nan());
        let e = parse(b"ok 1\nbad{a=1} 2\n", Format::Text, 10).unwrap_err();
        assert_eq!((e.line, e.reason.as_str()), (2, "expected a quoted string"));
        let e = parse(b"a 1\nb 2\nc 3\n", Format::Text, 2).unwrap_err();
        assert_eq!(e.reason, "more than 2 series");
    }
}
