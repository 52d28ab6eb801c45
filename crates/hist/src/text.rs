//! Text forms (spec §10). Emitted: the Go/httptrap form `H[1.2e-03]=5`. Accepted: that form,
//! the C form `+12e-004=5` (also `0=3`, `NaN=1`) and the C tool's JSON `{"0.0012":5}`.

use std::fmt::Write as _;

use crate::bin::Bin;
use crate::error::TextError;
use crate::histogram::Histogram;

impl Bin {
    /// The bin's edge as C's `%3.1e` prints it (`1.2e-03`, `-5.0e+00`, `0.0e+00`, `NaN`).
    /// Parsing it back with `Bin::from_f64` gives this bin again, for every bin.
    pub fn edge_text(self) -> String {
        if self.is_nan() {
            return "NaN".to_owned();
        }
        if self.is_zero() {
            return "0.0e+00".to_owned();
        }
        let val = self.val();
        let sign = if val < 0 { "-" } else { "" };
        let abs = val.unsigned_abs();
        let exp = self.exp();
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!(
            "{sign}{}.{}e{exp_sign}{:02}",
            abs / 10,
            abs % 10,
            exp.unsigned_abs()
        )
    }

    /// The C library's bin text: `+12e-004` (val·10^(exp−1)), `0`, `NaN`.
    pub fn c_text(self) -> String {
        if self.is_nan() {
            return "NaN".to_owned();
        }
        if self.is_zero() {
            return "0".to_owned();
        }
        format!("{:+03}e{:+04}", self.val(), i32::from(self.exp()) - 1)
    }
}

impl Histogram {
    /// One `H[edge]=count` entry per populated bin, in storage order.
    pub fn to_text(&self) -> Vec<String> {
        self.bins()
            .map(|(b, c)| format!("H[{}]={c}", b.edge_text()))
            .collect()
    }

    /// One C-form `+12e-004=5` entry per populated bin, in storage order.
    pub fn to_c_text(&self) -> Vec<String> {
        self.bins()
            .map(|(b, c)| format!("{}={c}", b.c_text()))
            .collect()
    }

    /// The C tool's JSON object form, `{"0.0012":5,...}` keyed by the bin edge.
    pub fn to_json_map(&self) -> String {
        let mut out = String::from("{");
        for (i, (b, c)) in self.bins().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let key = if b.is_nan() {
                "NaN".to_owned()
            } else {
                format!("{:?}", b.edge())
            };
            let _ = write!(out, "{sep}\"{key}\":{c}");
        }
        out.push('}');
        out
    }

    /// Builds a histogram from text entries in any accepted form.
    pub fn from_text_entries<'a, I>(entries: I) -> Result<Histogram, TextError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut pairs = Vec::new();
        for entry in entries {
            let (bin, count) = parse_entry(entry)?;
            if count > 0 {
                pairs.push((bin.key(), count));
            }
        }
        Ok(Histogram::from_unsorted_keys(&mut pairs))
    }

    /// Parses the C tool's JSON object form, `{"0.0012":5, "NaN":1}`.
    pub fn from_json_map(text: &str) -> Result<Histogram, TextError> {
        let mut p = Cursor {
            s: text.as_bytes(),
            pos: 0,
        };
        let mut pairs = Vec::new();
        p.skip_ws();
        p.expect(b'{', "'{'")?;
        p.skip_ws();
        if !p.eat(b'}') {
            loop {
                p.skip_ws();
                p.expect(b'"', "'\"' starting a bin value")?;
                let start = p.pos;
                let end = start + p.s[start..].iter().position(|&c| c == b'"').unwrap_or(0);
                if end == start {
                    return Err(TextError {
                        position: start,
                        expected: "a number in quotes",
                    });
                }
                let value = parse_float(&text[start..end], start)?;
                p.pos = end + 1;
                p.skip_ws();
                p.expect(b':', "':'")?;
                p.skip_ws();
                let count = p.integer()?;
                if count > 0 {
                    pairs.push((Bin::from_f64(value).key(), count));
                }
                p.skip_ws();
                if p.eat(b'}') {
                    break;
                }
                p.expect(b',', "',' or '}'")?;
            }
        }
        p.skip_ws();
        if p.pos != p.s.len() {
            return Err(TextError {
                position: p.pos,
                expected: "end of input",
            });
        }
        Ok(Histogram::from_unsorted_keys(&mut pairs))
    }
}

/// Parses one `H[<float>]=<count>` or C-form `<bin>=<count>` entry.
pub fn parse_entry(entry: &str) -> Result<(Bin, u64), TextError> {
    let eq = entry.rfind('=').ok_or(TextError {
        position: entry.len(),
        expected: "'='",
    })?;
    let count_text = entry[eq + 1..].trim();
    let count = count_text.parse::<u64>().map_err(|_| TextError {
        position: eq + 1,
        expected: "a non-negative integer count",
    })?;
    let lhs = entry[..eq].trim();
    let bin = if let Some(inner) = lhs.strip_prefix("H[") {
        let inner = inner.strip_suffix(']').ok_or(TextError {
            position: eq,
            expected: "']' before '='",
        })?;
        Bin::from_f64(parse_float(inner, 2)?)
    } else {
        c_form_bin(lhs).map_or_else(|| parse_float(lhs, 0).map(Bin::from_f64), Ok)?
    };
    Ok((bin, count))
}

/// The exact bin named by the C form `±DDe±EEE` (val·10^(exp−1)), without going through floats.
fn c_form_bin(text: &str) -> Option<Bin> {
    let b = text.as_bytes();
    let sign_ok = matches!(b.first(), Some(b'+' | b'-'));
    if b.len() < 5 || !sign_ok || b[3] != b'e' {
        return None;
    }
    let digits: i32 = text[1..3].parse().ok()?;
    let exp: i32 = text[4..].parse().ok()?;
    let val = if b[0] == b'-' { -digits } else { digits };
    Bin::new(i8::try_from(val).ok()?, i8::try_from(exp + 1).ok()?)
}

fn parse_float(text: &str, position: usize) -> Result<f64, TextError> {
    text.trim().parse::<f64>().map_err(|_| TextError {
        position,
        expected: "a number",
    })
}

struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.pos) == Some(&c);
        self.pos += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8, expected: &'static str) -> Result<(), TextError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(TextError {
                position: self.pos,
                expected,
            })
        }
    }

    fn integer(&mut self) -> Result<u64, TextError> {
        let start = self.pos;
        let len = self.s[start..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.pos += len;
        std::str::from_utf8(&self.s[start..start + len])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or(TextError {
                position: start,
                expected: "a non-negative integer count",
            })
    }
}
