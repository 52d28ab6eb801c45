//! Nagios plugin output: the first line's text, the long text of the lines after it, and the
//! performance data after `|` on the first line and on any later line from the one holding
//! the second `|` on (`label=value[UOM];[warn];[crit];[min];[max]`, labels quoted with `'` when
//! they hold spaces or `=`, `''` for a quote inside).

/// Most performance data items read from one output; the rest are counted as skipped.
pub const ITEMS_MAX: usize = 256;
/// Longest label, in bytes.
pub const LABEL_BYTES_MAX: usize = 256;

#[derive(Clone, Debug, PartialEq)]
pub struct Perf {
    pub label: String,
    /// `None` for `U` (the plugin could not measure it).
    pub value: Option<f64>,
    /// Unit of measure as written: `s`, `ms`, `us`, `%`, `B`, `KB`, `MB`, `TB`, `c`, or other.
    pub uom: String,
    /// Thresholds as written (a number or a Nagios range such as `10:20` or `@~:5`).
    pub warn: Option<String>,
    pub crit: Option<String>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// The first line's text before `|`.
    pub summary: String,
    /// The text of the later lines, without their performance data.
    pub long_text: String,
    pub perf: Vec<Perf>,
    /// Items that did not parse or were past [`ITEMS_MAX`].
    pub skipped: usize,
}

/// Splits a plugin's output.
pub fn parse_output(text: &str) -> Output {
    let mut out = Output::default();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let (summary, perf) = first.split_once('|').unwrap_or((first, ""));
    out.summary = summary.trim().to_owned();
    parse_items(perf, &mut out);
    let mut long = Vec::new();
    let mut in_perf = false;
    for line in lines {
        if in_perf {
            parse_items(line, &mut out);
            continue;
        }
        match line.split_once('|') {
            Some((text, perf)) => {
                long.push(text);
                parse_items(perf, &mut out);
                in_perf = true;
            }
            None => long.push(line),
        }
    }
    out.long_text = long.join("\n").trim_end().to_owned();
    out
}

/// Reads the items of one stretch of performance data into `out`.
fn parse_items(text: &str, out: &mut Output) {
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (item, after) = next_item(rest);
        rest = after.trim_start();
        match item {
            Some(p) if out.perf.len() < ITEMS_MAX => out.perf.push(p),
            _ => out.skipped += 1,
        }
    }
}

/// One item from the front of `s` (which starts with a non-space) and the text after it. An
/// item that does not parse is `None`; the text after it starts at the next space.
fn next_item(s: &str) -> (Option<Perf>, &str) {
    let (label, after_label) = match label(s) {
        Some(pair) => pair,
        None => return (None, skip_word(s)),
    };
    let end = after_label.find([' ', '\t']).unwrap_or(after_label.len());
    let (spec, after) = after_label.split_at(end);
    (item(label, spec), after)
}

fn skip_word(s: &str) -> &str {
    // A quoted label may hold spaces: skip to its closing quote first.
    let from = match s.strip_prefix('\'') {
        Some(q) => q.find('\'').map_or(s.len(), |i| i + 2),
        None => 0,
    };
    let from = from.min(s.len());
    match s[from..].find([' ', '\t']) {
        Some(i) => &s[from + i..],
        None => "",
    }
}

/// The label and the text after its `=`.
fn label(s: &str) -> Option<(String, &str)> {
    let (label, rest) = match s.strip_prefix('\'') {
        Some(quoted) => {
            let mut label = String::new();
            let mut i = 0;
            let bytes = quoted.as_bytes();
            loop {
                let at = quoted[i..].find('\'')? + i;
                label.push_str(&quoted[i..at]);
                if bytes.get(at + 1) == Some(&b'\'') {
                    label.push('\'');
                    i = at + 2;
                } else {
                    break (label, &quoted[at + 1..]);
                }
            }
        }
        None => {
            let eq = s.find('=')?;
            let label = &s[..eq];
            if label.contains([' ', '\t']) {
                return None;
            }
            (label.to_owned(), &s[eq..])
        }
    };
    if label.is_empty() || label.len() > LABEL_BYTES_MAX {
        return None;
    }
    Some((label, rest.strip_prefix('=')?))
}

/// `value[UOM];warn;crit;min;max` after the `=`.
fn item(label: String, spec: &str) -> Option<Perf> {
    let mut fields = spec.split(';');
    let (value, uom) = value_and_uom(fields.next()?)?;
    let text = |f: Option<&str>| f.filter(|t| !t.is_empty()).map(str::to_owned);
    let number = |f: Option<&str>| -> Option<Option<f64>> {
        match f.filter(|t| !t.is_empty()) {
            None => Some(None),
            Some(t) => t.parse::<f64>().ok().filter(|v| v.is_finite()).map(Some),
        }
    };
    let warn = text(fields.next());
    let crit = text(fields.next());
    let min = number(fields.next())?;
    let max = number(fields.next())?;
    Some(Perf {
        label,
        value,
        uom: uom.to_owned(),
        warn,
        crit,
        min,
        max,
    })
}

/// The number at the front (or `U`) and the unit after it.
fn value_and_uom(field: &str) -> Option<(Option<f64>, &str)> {
    if field == "U" {
        return Some((None, ""));
    }
    let b = field.as_bytes();
    let digits = |mut i: usize| {
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'.') {
            i += 1;
        }
        i
    };
    let mut end = digits(usize::from(matches!(b.first(), Some(b'-' | b'+'))));
    if matches!(b.get(end), Some(b'e' | b'E')) && is_exponent(&field[end + 1..]) {
        end += 1 + usize::from(matches!(b.get(end + 1), Some(b'-' | b'+')));
        end = digits(end);
    }
    let value = field[..end].parse::<f64>().ok().filter(|v| v.is_finite())?;
    Some((Some(value), &field[end..]))
}

/// Whether an `e` is an exponent: a digit follows, maybe after a sign.
fn is_exponent(after: &str) -> bool {
    let digits = after.strip_prefix(['-', '+']).unwrap_or(after);
    digits.starts_with(|c: char| c.is_ascii_digit())
}

/// A threshold's number when it is a plain one (`10`, or a range's upper end `~:10`, `0:10`).
pub fn threshold_number(t: &str) -> Option<f64> {
    if t.starts_with('@') {
        return None;
    }
    let end = t.rsplit_once(':').map_or(t, |(_, end)| end);
    end.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_load_output() {
        let o = parse_output(
            "OK - load average: 0.10, 0.20, 0.30|load1=0.100;15.000;30.000;0; \
             load5=0.200;10.000;25.000;0; load15=0.300;5.000;20.000;0; ",
        );
        assert_eq!(o.summary, "OK - load average: 0.10, 0.20, 0.30");
        assert_eq!(o.perf.len(), 3);
        let p = &o.perf[1];
        assert_eq!(
            (p.label.as_str(), p.value, p.uom.as_str()),
            ("load5", Some(0.2), "")
        );
        assert_eq!(
            (p.warn.as_deref(), p.crit.as_deref()),
            (Some("10.000"), Some("25.000"))
        );
        assert_eq!((p.min, p.max), (Some(0.0), None));
        assert_eq!(o.skipped, 0);
    }

    #[test]
    fn quoted_labels_units_long_text_and_junk() {
        let text =
            "DISK OK|'/ free'=12.5GB;;;0;100 'it''s'=3c\nline two\nline three|time=1.5e-3s\nx=U";
        let o = parse_output(text);
        assert_eq!(o.long_text, "line two\nline three");
        let labels: Vec<&str> = o.perf.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["/ free", "it's", "time", "x"]);
        assert_eq!(
            (o.perf[0].value, o.perf[0].uom.as_str()),
            (Some(12.5), "GB")
        );
        assert_eq!((o.perf[0].min, o.perf[0].max), (Some(0.0), Some(100.0)));
        assert_eq!(
            (o.perf[2].value, o.perf[2].uom.as_str()),
            (Some(0.0015), "s")
        );
        assert_eq!(o.perf[3].value, None);
        let o = parse_output("X|junk a=1 ='x' b=z c=2");
        assert_eq!(
            o.perf.iter().map(|p| p.label.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
        assert_eq!(o.skipped, 3);
    }

    #[test]
    fn thresholds() {
        assert_eq!(threshold_number("10"), Some(10.0));
        assert_eq!(threshold_number("~:10"), Some(10.0));
        assert_eq!(threshold_number("5:"), None);
        assert_eq!(threshold_number("@1:2"), None);
    }
}
