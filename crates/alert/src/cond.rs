//! Conditions (`when`, `clear`) and the reducers they compare.
//!
//! ```text
//! cond    := or
//! or      := and ("or" and)*
//! and     := unary ("and" unary)*
//! unary   := "not" unary | "(" cond ")" | text | cmp
//! cmp     := [reducer] op number          a bare `> 5` is `value > 5`
//! reducer := name ["(" number ("," number)* ")"]
//! text    := "matches" str | "contains" str | "equals" str | ("==" | "!=") str | "changed"
//! ```
//!
//! A reducer turns an instance's windowed value into a number with the meaning of CAQL's
//! `histogram:` function of the same name (the helpers are `query::eval`'s own). A reducer with
//! no value (a percentile of an empty histogram) makes its comparison false; one applied to the
//! wrong kind (a histogram reducer on a number) is an error for that instance.

use std::fmt;

use hist::Histogram;
use regex::Regex;

/// Longest condition text.
pub const COND_BYTES_MAX: usize = 4096;
/// Deepest nesting of `not` and parentheses.
const DEPTH_MAX: usize = 32;
/// Longest regular expression, compiled size bounded by the regex crate's defaults besides.
const REGEX_BYTES_MAX: usize = 1024;

/// An instance's value over the window, as conditions and templates see it.
#[derive(Clone, Debug, PartialEq)]
pub enum Windowed {
    Num(f64),
    Hist(Histogram),
    /// The newest text in the window and the one before it (in the window), if any.
    Text {
        last: String,
        prev: Option<String>,
    },
    /// An absence rule's stream: how long it has been silent, and how long it may be before
    /// the rule judges it silent (the rule's `silent_for`, or a push source's usual interval ×
    /// the factor). Never seen (a stream listed in `expect`): `silent_ms` is `i64::MAX` and
    /// `last_seen_ms` 0.
    Silent {
        silent_ms: i64,
        last_seen_ms: i64,
        limit_ms: i64,
    },
}

impl Windowed {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Windowed::Num(_) => "numeric",
            Windowed::Hist(_) => "histogram",
            Windowed::Text { .. } => "text",
            Windowed::Silent { .. } => "absence",
        }
    }
}

/// A reduction of a windowed value to a number.
#[derive(Clone, Debug, PartialEq)]
pub enum Reducer {
    /// A numeric stream's windowed value (also the silence of an absence stream, in seconds).
    Value,
    Count,
    CountAbove(f64),
    CountBelow(f64),
    CountBetween(f64, f64),
    RatioAbove(f64),
    RatioBelow(f64),
    RatioBetween(f64, f64),
    /// 0–100.
    Percentile(f64),
    /// Percent of samples at or below the threshold.
    InversePercentile(f64),
    Mean,
    Sum,
    Min,
    Max,
    Stddev,
    /// Samples per second over the window.
    Rate,
    RateAbove(f64),
    RateBelow(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }

    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Eq => a == b,
            Op::Ne => a != b,
        }
    }
}

#[derive(Clone, Debug)]
pub enum TextOp {
    Matches(Regex),
    Contains(String),
    Equals(String),
    NotEquals(String),
    Changed,
}

#[derive(Clone, Debug)]
pub enum Cond {
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
    Cmp {
        lhs: Reducer,
        op: Op,
        rhs: f64,
    },
    Text(TextOp),
    /// Always true: an absence level without `when` (silence is the condition).
    True,
}

/// What a reducer needs besides the value.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// The window's length in seconds (for rates).
    pub window_s: f64,
}

fn hist_reducer_on(kind: &str, r: &Reducer) -> String {
    format!(
        "`{}` needs a histogram stream, but the stream is {kind}",
        r.name()
    )
}

impl Reducer {
    pub fn name(&self) -> String {
        let f = |n: &str, args: &[f64]| {
            let a: Vec<String> = args.iter().map(|x| format!("{x}")).collect();
            format!("{n}({})", a.join(", "))
        };
        match self {
            Reducer::Value => "value".into(),
            Reducer::Count => "count".into(),
            Reducer::CountAbove(t) => f("count_above", &[*t]),
            Reducer::CountBelow(t) => f("count_below", &[*t]),
            Reducer::CountBetween(a, b) => f("count_between", &[*a, *b]),
            Reducer::RatioAbove(t) => f("ratio_above", &[*t]),
            Reducer::RatioBelow(t) => f("ratio_below", &[*t]),
            Reducer::RatioBetween(a, b) => f("ratio_between", &[*a, *b]),
            Reducer::Percentile(p) => f("percentile", &[*p]),
            Reducer::InversePercentile(t) => f("inverse_percentile", &[*t]),
            Reducer::Mean => "mean".into(),
            Reducer::Sum => "sum".into(),
            Reducer::Min => "min".into(),
            Reducer::Max => "max".into(),
            Reducer::Stddev => "stddev".into(),
            Reducer::Rate => "rate".into(),
            Reducer::RateAbove(t) => f("rate_above", &[*t]),
            Reducer::RateBelow(t) => f("rate_below", &[*t]),
        }
    }

    /// Parses `name` with its arguments.
    pub fn from_call(name: &str, args: &[f64]) -> Result<Reducer, String> {
        let want = |n: usize| -> Result<(), String> {
            if args.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "`{name}` takes {n} argument(s), got {}",
                    args.len()
                ))
            }
        };
        let a = |i: usize| args.get(i).copied().unwrap_or(f64::NAN);
        let r = match name {
            "value" => want(0).map(|()| Reducer::Value)?,
            "count" => want(0).map(|()| Reducer::Count)?,
            "count_above" => want(1).map(|()| Reducer::CountAbove(a(0)))?,
            "count_below" => want(1).map(|()| Reducer::CountBelow(a(0)))?,
            "count_between" => want(2).map(|()| Reducer::CountBetween(a(0), a(1)))?,
            "ratio_above" => want(1).map(|()| Reducer::RatioAbove(a(0)))?,
            "ratio_below" => want(1).map(|()| Reducer::RatioBelow(a(0)))?,
            "ratio_between" => want(2).map(|()| Reducer::RatioBetween(a(0), a(1)))?,
            "percentile" => want(1).map(|()| Reducer::Percentile(a(0)))?,
            "quantile" => want(1).map(|()| Reducer::Percentile(a(0) * 100.0))?,
            "median" => want(0).map(|()| Reducer::Percentile(50.0))?,
            "inverse_percentile" => want(1).map(|()| Reducer::InversePercentile(a(0)))?,
            "inverse_quantile" => want(1).map(|()| Reducer::RatioBelow(a(0)))?,
            "mean" | "average" => want(0).map(|()| Reducer::Mean)?,
            "sum" => want(0).map(|()| Reducer::Sum)?,
            "min" => want(0).map(|()| Reducer::Min)?,
            "max" => want(0).map(|()| Reducer::Max)?,
            "stddev" => want(0).map(|()| Reducer::Stddev)?,
            "rate" => want(0).map(|()| Reducer::Rate)?,
            "rate_above" => want(1).map(|()| Reducer::RateAbove(a(0)))?,
            "rate_below" => want(1).map(|()| Reducer::RateBelow(a(0)))?,
            _ => return Err(format!("unknown function `{name}`")),
        };
        if let Reducer::Percentile(p) = r {
            if !(0.0..=100.0).contains(&p) {
                return Err(format!("`{name}`: {} is outside its range", a(0)));
            }
        }
        Ok(r)
    }

    /// The number this reducer gives for `v`; `Ok(None)` when it has none.
    pub fn eval(&self, v: &Windowed, ctx: Ctx) -> Result<Option<f64>, String> {
        match v {
            Windowed::Num(x) => match self {
                Reducer::Value => Ok(Some(*x)),
                r => Err(format!(
                    "`{}` needs a histogram stream, but the stream is numeric (use `value`)",
                    r.name()
                )),
            },
            Windowed::Silent { silent_ms, .. } => match self {
                Reducer::Value => Ok(Some(*silent_ms as f64 / 1000.0)),
                r => Err(hist_reducer_on("an absence stream", r)),
            },
            Windowed::Text { .. } => Err(format!(
                "`{}` compares numbers, but the stream is text (use matches, contains, equals or changed)",
                self.name()
            )),
            Windowed::Hist(h) => self.on_hist(h, ctx),
        }
    }

    fn on_hist(&self, h: &Histogram, ctx: Ctx) -> Result<Option<f64>, String> {
        use query::eval::{count_above, count_below, inverse_quantile, quantile};
        let n = h.finite_count();
        let stat = |x: f64| {
            if n == 0 || !x.is_finite() {
                None
            } else {
                Some(x)
            }
        };
        let per_s = |c: u64| {
            if ctx.window_s > 0.0 {
                Some(c as f64 / ctx.window_s)
            } else {
                None
            }
        };
        Ok(match self {
            Reducer::Value => return Err(
                "`value` needs a numeric stream; reduce a histogram first, e.g. count_above(1.5)"
                    .into(),
            ),
            Reducer::Count => Some(n as f64),
            Reducer::CountAbove(t) => Some(count_above(h, *t) as f64),
            Reducer::CountBelow(t) => Some(count_below(h, *t) as f64),
            Reducer::CountBetween(a, b) => {
                let outside = (n - count_above(h, *a)) + (n - count_below(h, *b));
                Some(n.saturating_sub(outside) as f64)
            }
            Reducer::RatioAbove(t) => stat(1.0 - inverse_quantile(h, *t)),
            Reducer::RatioBelow(t) => stat(inverse_quantile(h, *t)),
            Reducer::RatioBetween(a, b) => {
                stat((inverse_quantile(h, *b) - inverse_quantile(h, *a)).max(0.0))
            }
            Reducer::Percentile(p) => stat(quantile(h, p / 100.0)),
            Reducer::InversePercentile(t) => stat(100.0 * inverse_quantile(h, *t)),
            Reducer::Mean => stat(h.mean()),
            Reducer::Sum => stat(h.sum()),
            Reducer::Min => stat(quantile(h, 0.0)),
            Reducer::Max => stat(quantile(h, 1.0)),
            Reducer::Stddev => stat(if h.stddev().is_nan() { 0.0 } else { h.stddev() }),
            Reducer::Rate => per_s(n),
            Reducer::RateAbove(t) => per_s(count_above(h, *t)),
            Reducer::RateBelow(t) => per_s(count_below(h, *t)),
        })
    }

    /// Counts that more samples can only raise.
    fn only_grows(&self) -> bool {
        matches!(
            self,
            Reducer::Count
                | Reducer::CountAbove(_)
                | Reducer::CountBelow(_)
                | Reducer::CountBetween(..)
        )
    }
}

impl TextOp {
    fn holds(&self, v: &Windowed) -> Result<bool, String> {
        let Windowed::Text { last, prev } = v else {
            return Err(format!(
                "a text condition needs a text stream, but the stream is {}",
                v.kind_name()
            ));
        };
        Ok(match self {
            TextOp::Matches(re) => re.is_match(last),
            TextOp::Contains(s) => last.contains(s.as_str()),
            TextOp::Equals(s) => last == s,
            TextOp::NotEquals(s) => last != s,
            TextOp::Changed => prev.as_ref().is_some_and(|p| p != last),
        })
    }
}

impl Cond {
    /// Whether the condition holds for `v`.
    pub fn holds(&self, v: &Windowed, ctx: Ctx) -> Result<bool, String> {
        Ok(match self {
            Cond::True => true,
            Cond::And(a, b) => a.holds(v, ctx)? && b.holds(v, ctx)?,
            Cond::Or(a, b) => a.holds(v, ctx)? || b.holds(v, ctx)?,
            Cond::Not(a) => !a.holds(v, ctx)?,
            Cond::Cmp { lhs, op, rhs } => match lhs.eval(v, ctx)? {
                Some(x) => op.holds(x, *rhs),
                None => false,
            },
            Cond::Text(t) => t.holds(v)?,
        })
    }

    /// The first comparison's reducer: what `{{ value }}` and the record's value show.
    pub fn primary(&self) -> Option<&Reducer> {
        match self {
            Cond::Cmp { lhs, .. } => Some(lhs),
            Cond::And(a, b) | Cond::Or(a, b) => a.primary().or_else(|| b.primary()),
            Cond::Not(a) => a.primary(),
            Cond::Text(_) | Cond::True => None,
        }
    }

    /// Whether more data can only turn the condition from false to true (eager evaluation of
    /// the still-open period may then fire early without ever being wrong).
    pub fn only_grows(&self, numeric_window_counts: bool) -> bool {
        match self {
            Cond::And(a, b) | Cond::Or(a, b) => {
                a.only_grows(numeric_window_counts) && b.only_grows(numeric_window_counts)
            }
            Cond::Cmp { lhs, op, .. } => {
                matches!(op, Op::Gt | Op::Ge)
                    && (lhs.only_grows() || (*lhs == Reducer::Value && numeric_window_counts))
            }
            Cond::Not(_) | Cond::Text(_) | Cond::True => false,
        }
    }

    pub fn parse(text: &str) -> Result<Cond, String> {
        if text.len() > COND_BYTES_MAX {
            return Err(format!("condition longer than {COND_BYTES_MAX} bytes"));
        }
        let tokens = lex(text)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            depth: 0,
        };
        let c = p.or()?;
        match p.peek() {
            None => Ok(c),
            Some(t) => Err(format!("unexpected `{t}` after the condition")),
        }
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::True => f.write_str("true"),
            Cond::And(a, b) => write!(f, "({a} and {b})"),
            Cond::Or(a, b) => write!(f, "({a} or {b})"),
            Cond::Not(a) => write!(f, "not {a}"),
            Cond::Cmp { lhs, op, rhs } => write!(f, "{} {} {rhs}", lhs.name(), op.symbol()),
            Cond::Text(TextOp::Matches(r)) => write!(f, "matches {:?}", r.as_str()),
            Cond::Text(TextOp::Contains(s)) => write!(f, "contains {s:?}"),
            Cond::Text(TextOp::Equals(s)) => write!(f, "equals {s:?}"),
            Cond::Text(TextOp::NotEquals(s)) => write!(f, "!= {s:?}"),
            Cond::Text(TextOp::Changed) => f.write_str("changed"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Num(f64),
    Str(String),
    Op(Op),
    LParen,
    RParen,
    Comma,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => f.write_str(s),
            Tok::Num(n) => write!(f, "{n}"),
            Tok::Str(s) => write!(f, "\"{s}\""),
            Tok::Op(o) => f.write_str(o.symbol()),
            Tok::LParen => f.write_str("("),
            Tok::RParen => f.write_str(")"),
            Tok::Comma => f.write_str(","),
        }
    }
}

fn lex(text: &str) -> Result<Vec<Tok>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let (tok, len) = lex_one(text, i)?;
        out.push(tok);
        i += len;
    }
    Ok(out)
}

/// One token at byte `i`, and its length.
fn lex_one(text: &str, i: usize) -> Result<(Tok, usize), String> {
    let b = text.as_bytes();
    let two = b.get(i..i + 2);
    let op2 = |s: &[u8], o: Op| (two == Some(s)).then_some((Tok::Op(o), 2));
    if let Some(t) = op2(b">=", Op::Ge)
        .or_else(|| op2(b"<=", Op::Le))
        .or_else(|| op2(b"==", Op::Eq))
        .or_else(|| op2(b"!=", Op::Ne))
    {
        return Ok(t);
    }
    Ok(match b[i] {
        b'>' => (Tok::Op(Op::Gt), 1),
        b'<' => (Tok::Op(Op::Lt), 1),
        b'(' => (Tok::LParen, 1),
        b')' => (Tok::RParen, 1),
        b',' => (Tok::Comma, 1),
        b'"' | b'\'' => lex_str(text, i)?,
        c if c.is_ascii_digit() || c == b'.' || c == b'-' || c == b'+' => lex_num(text, i)?,
        c if c.is_ascii_alphabetic() || c == b'_' => {
            let len = b[i..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            (Tok::Ident(text[i..i + len].to_string()), len)
        }
        _ => {
            let ch = text[i..].chars().next().unwrap_or(' ');
            return Err(format!("unexpected character {ch:?} at byte {i}"));
        }
    })
}

fn lex_num(text: &str, i: usize) -> Result<(Tok, usize), String> {
    let b = text.as_bytes();
    let mut j = i;
    if matches!(b[j], b'-' | b'+') {
        j += 1;
    }
    while j < b.len() {
        let c = b[j];
        let exp_sign = matches!(c, b'-' | b'+') && matches!(b[j - 1], b'e' | b'E');
        if c.is_ascii_digit() || c == b'.' || c == b'e' || c == b'E' || exp_sign {
            j += 1;
        } else {
            break;
        }
    }
    let s = &text[i..j];
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok((Tok::Num(v), j - i)),
        _ => Err(format!("{s:?} at byte {i} is not a number")),
    }
}

fn lex_str(text: &str, i: usize) -> Result<(Tok, usize), String> {
    let quote = text.as_bytes()[i] as char;
    let mut out = String::new();
    let mut chars = text[i + 1..].char_indices();
    while let Some((k, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, 't')) => out.push('\t'),
                Some((_, e)) => out.push(e),
                None => break,
            },
            c if c == quote => return Ok((Tok::Str(out), k + 2)),
            c => out.push(c),
        }
    }
    Err(format!("string starting at byte {i} is not closed"))
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn keyword(&mut self, k: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident(s)) if s == k) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<Cond, String> {
        let mut c = self.and()?;
        while self.keyword("or") {
            c = Cond::Or(Box::new(c), Box::new(self.and()?));
        }
        Ok(c)
    }

    fn and(&mut self) -> Result<Cond, String> {
        let mut c = self.unary()?;
        while self.keyword("and") {
            c = Cond::And(Box::new(c), Box::new(self.unary()?));
        }
        Ok(c)
    }

    fn unary(&mut self) -> Result<Cond, String> {
        self.depth += 1;
        if self.depth > DEPTH_MAX {
            return Err(format!("condition nested deeper than {DEPTH_MAX}"));
        }
        let c = if self.keyword("not") {
            Cond::Not(Box::new(self.unary()?))
        } else if self.peek() == Some(&Tok::LParen) {
            self.pos += 1;
            let c = self.or()?;
            self.expect(&Tok::RParen)?;
            c
        } else {
            self.atom()?
        };
        self.depth -= 1;
        Ok(c)
    }

    fn expect(&mut self, t: &Tok) -> Result<(), String> {
        match self.next() {
            Some(x) if &x == t => Ok(()),
            Some(x) => Err(format!("expected `{t}`, found `{x}`")),
            None => Err(format!("expected `{t}` at the end")),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        match self.next() {
            Some(Tok::Str(s)) => Ok(s),
            _ => Err(format!("`{what}` takes a quoted string")),
        }
    }

    fn atom(&mut self) -> Result<Cond, String> {
        if let Some(Tok::Ident(k)) = self.peek().cloned() {
            match k.as_str() {
                "matches" => {
                    self.pos += 1;
                    let s = self.string("matches")?;
                    if s.len() > REGEX_BYTES_MAX {
                        return Err(format!("regex longer than {REGEX_BYTES_MAX} bytes"));
                    }
                    let re = Regex::new(&s).map_err(|e| format!("matches {s:?}: {e}"))?;
                    return Ok(Cond::Text(TextOp::Matches(re)));
                }
                "contains" => {
                    self.pos += 1;
                    return Ok(Cond::Text(TextOp::Contains(self.string("contains")?)));
                }
                "equals" => {
                    self.pos += 1;
                    return Ok(Cond::Text(TextOp::Equals(self.string("equals")?)));
                }
                "changed" => {
                    self.pos += 1;
                    return Ok(Cond::Text(TextOp::Changed));
                }
                _ => {}
            }
        }
        let lhs = match self.peek() {
            Some(Tok::Op(_)) => Reducer::Value,
            Some(Tok::Ident(_)) => self.reducer()?,
            Some(t) => return Err(format!("expected a comparison, found `{t}`")),
            None => return Err("expected a condition".into()),
        };
        let op = match self.next() {
            Some(Tok::Op(op)) => op,
            Some(t) => return Err(format!("expected a comparison operator, found `{t}`")),
            None => return Err(format!("`{}` needs a comparison", lhs.name())),
        };
        match (self.next(), op) {
            (Some(Tok::Num(rhs)), _) => Ok(Cond::Cmp { lhs, op, rhs }),
            (Some(Tok::Str(s)), Op::Eq) if lhs == Reducer::Value => {
                Ok(Cond::Text(TextOp::Equals(s)))
            }
            (Some(Tok::Str(s)), Op::Ne) if lhs == Reducer::Value => {
                Ok(Cond::Text(TextOp::NotEquals(s)))
            }
            (Some(t), _) => Err(format!(
                "expected a number after `{}`, found `{t}`",
                op.symbol()
            )),
            (None, _) => Err(format!("expected a number after `{}`", op.symbol())),
        }
    }

    fn reducer(&mut self) -> Result<Reducer, String> {
        let Some(Tok::Ident(name)) = self.next() else {
            return Err("expected a function name".into());
        };
        let mut args = Vec::new();
        if self.peek() == Some(&Tok::LParen) {
            self.pos += 1;
            if self.peek() != Some(&Tok::RParen) {
                loop {
                    match self.next() {
                        Some(Tok::Num(n)) => args.push(n),
                        _ => return Err(format!("`{name}`: arguments are numbers")),
                    }
                    if self.peek() == Some(&Tok::Comma) {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
            }
            self.expect(&Tok::RParen)?;
        }
        Reducer::from_call(&name, &args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(f64, u64)]) -> Windowed {
        let mut x = Histogram::new();
        for &(v, n) in pairs {
            x.insert_n(v, n);
        }
        Windowed::Hist(x)
    }

    const CTX: Ctx = Ctx { window_s: 300.0 };

    #[test]
    fn people_not_percentages() {
        let c = Cond::parse("count_above(1.5) >= 500").unwrap();
        assert!(c.holds(&h(&[(0.12, 40_000), (1.6, 500)]), CTX).unwrap());
        assert!(!c.holds(&h(&[(0.12, 40), (1.6, 499)]), CTX).unwrap());
        let share = Cond::parse("ratio_above(1.5) > 0.5").unwrap();
        assert!(share.holds(&h(&[(0.12, 40), (1.6, 499)]), CTX).unwrap());
    }

    #[test]
    fn precedence_and_text() {
        let c = Cond::parse("count > 1 or count > 100 and not count > 5").unwrap();
        assert_eq!(
            c.to_string(),
            "(count > 1 or (count > 100 and not count > 5))"
        );
        let t = Cond::parse(r#"matches "fail(ed)?" or == "down""#).unwrap();
        let text = |s: &str| Windowed::Text {
            last: s.into(),
            prev: Some("ok".into()),
        };
        assert!(t.holds(&text("failed"), CTX).unwrap());
        assert!(t.holds(&text("down"), CTX).unwrap());
        assert!(!t.holds(&text("up"), CTX).unwrap());
        assert!(Cond::parse("changed")
            .unwrap()
            .holds(&text("up"), CTX)
            .unwrap());
    }

    #[test]
    fn bare_comparison_is_value_and_kinds_are_checked() {
        let c = Cond::parse("> 5").unwrap();
        assert!(c.holds(&Windowed::Num(6.0), CTX).unwrap());
        assert!(c.holds(&h(&[(1.0, 1)]), CTX).is_err());
        let p = Cond::parse("percentile(99) > 1").unwrap();
        assert!(p.holds(&Windowed::Num(6.0), CTX).is_err());
        assert!(!p.holds(&h(&[]), CTX).unwrap());
    }

    #[test]
    fn bad_conditions_name_the_problem() {
        for (text, part) in [
            ("count_above() > 1", "takes 1"),
            ("p99 > 1", "unknown function"),
            ("count >", "expected a number"),
            ("count > 1 1", "unexpected"),
            ("percentile(101) > 1", "outside"),
            ("matches \"(\"", "matches"),
        ] {
            let e = Cond::parse(text).unwrap_err();
            assert!(e.contains(part), "{text}: {e}");
        }
        let deep = format!("{}count > 1{}", "(".repeat(40), ")".repeat(40));
        assert!(Cond::parse(&deep).is_err());
    }

    #[test]
    fn only_counts_with_greater_grow() {
        assert!(Cond::parse("count_above(1.5) >= 5")
            .unwrap()
            .only_grows(false));
        assert!(!Cond::parse("ratio_above(1.5) >= 5")
            .unwrap()
            .only_grows(false));
        assert!(!Cond::parse("count < 5").unwrap().only_grows(false));
        assert!(Cond::parse("> 5").unwrap().only_grows(true));
        assert!(!Cond::parse("> 5").unwrap().only_grows(false));
    }
}
