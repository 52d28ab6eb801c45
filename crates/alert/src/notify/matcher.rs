//! Label matchers in Alertmanager's syntax and RFC 3339 times: what routes, inhibit rules and
//! maintenance windows share.

use std::collections::BTreeMap;

use regex::Regex;

/// Matchers per route, inhibit rule side or window.
pub const MATCHERS_MAX: usize = 32;

/// One label matcher, Alertmanager's syntax: `name="v"`, `!=`, `=~` and `!~` (anchored).
#[derive(Clone, Debug)]
pub struct Matcher {
    pub name: String,
    op: Op,
    value: String,
    re: Option<Regex>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Eq,
    Ne,
    Re,
    NotRe,
}

impl Matcher {
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let bad = || format!("matcher '{text}': expected name=\"value\", !=, =~ or !~");
        let t = text.trim();
        let at = t.find(['=', '!']).ok_or_else(bad)?;
        let name = t[..at].trim();
        let rest = &t[at..];
        let (op, value) = if let Some(v) = rest.strip_prefix("=~") {
            (Op::Re, v)
        } else if let Some(v) = rest.strip_prefix("!~") {
            (Op::NotRe, v)
        } else if let Some(v) = rest.strip_prefix("!=") {
            (Op::Ne, v)
        } else if let Some(v) = rest.strip_prefix('=') {
            (Op::Eq, v)
        } else {
            return Err(bad());
        };
        if name.is_empty()
            || !name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
        {
            return Err(bad());
        }
        let v = value.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v)
            .to_string();
        let re = match op {
            Op::Re | Op::NotRe => Some(
                Regex::new(&format!("^(?:{v})$"))
                    .map_err(|e| format!("matcher '{text}': bad regular expression: {e}"))?,
            ),
            _ => None,
        };
        Ok(Matcher {
            name: name.to_string(),
            op,
            value: v,
            re,
        })
    }

    /// A missing label reads as the empty string, as in Alertmanager.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.name).map_or("", String::as_str);
        match (self.op, &self.re) {
            (Op::Eq, _) => v == self.value,
            (Op::Ne, _) => v != self.value,
            (Op::Re, Some(re)) => re.is_match(v),
            (Op::NotRe, Some(re)) => !re.is_match(v),
            _ => false,
        }
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Re => "=~",
            Op::NotRe => "!~",
        };
        write!(f, "{}{op}{:?}", self.name, self.value)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-28T22:00:00Z` or with an offset (`+01:00`); or milliseconds since the epoch.
pub fn parse_time_ms(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Ok(ms);
    }
    let bad = || format!("'{t}' is not a time (expected e.g. 2026-11-28T22:00:00Z)");
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| t.get(r).and_then(|s| s.parse::<i64>().ok());
    let (y, mo, d, h, mi, s) = (
        num(0..4).ok_or_else(bad)?,
        num(5..7).ok_or_else(bad)?,
        num(8..10).ok_or_else(bad)?,
        num(11..13).ok_or_else(bad)?,
        num(14..16).ok_or_else(bad)?,
        num(17..19).ok_or_else(bad)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    // Fractional seconds (as this crate's own answers print them): milliseconds kept.
    let mut zone = &t[19..];
    let mut frac_ms = 0;
    if let Some(rest) = zone.strip_prefix('.') {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let ms_text = format!("{:0<3}", &rest[..digits.min(3)]);
        frac_ms = ms_text.parse::<i64>().map_err(|_| bad())?;
        zone = &rest[digits..];
    }
    let offset_s = if zone == "Z" {
        0
    } else {
        let sign = match zone.as_bytes().first() {
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return Err(bad()),
        };
        let oh = zone.get(1..3).and_then(|x| x.parse::<i64>().ok());
        let om = zone.get(4..6).and_then(|x| x.parse::<i64>().ok());
        match (oh, om) {
            (Some(oh), Some(om)) if zone.len() == 6 => sign * (oh * 3600 + om * 60),
            _ => return Err(bad()),
        }
    };
    Ok(((days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s) - offset_s) * 1000 + frac_ms)
}
