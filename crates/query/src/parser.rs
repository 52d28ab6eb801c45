//! Text → [`Query`]. A hand-written lexer and precedence-climbing parser; every error names the
//! byte offset (and line:column) and what was expected there.
//!
//! Precedence, loosest first: `|` (pipe), `or`, `and`, `not`, comparisons, `+ -`, `* / %`,
//! unary `-`, `^` (right-associative).

use std::fmt;

use crate::ast::{BinOp, Call, Constant, Directive, Expr, Query, UnOp};

/// Longest query text accepted.
pub const QUERY_SIZE_MAX: usize = 64 * 1024;
/// Deepest nesting (parentheses, calls, operators) accepted: bounds the parser's recursion.
pub const DEPTH_MAX: usize = 128;
/// Most tokens in one query.
pub const TOKENS_MAX: usize = 16 * 1024;
/// Most `#` directives.
pub const DIRECTIVES_MAX: usize = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset into the query.
    pub pos: usize,
    pub line: usize,
    pub column: usize,
    /// What the parser expected (or what is wrong).
    pub expected: String,
    /// What it found instead.
    pub found: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at byte {} (line {}, column {}): expected {}, found {}",
            self.pos, self.line, self.column, self.expected, self.found
        )
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Dur(f64),
    Str(String),
    Ident(String),
    Directive(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    Comma,
    Assign,
    Pipe,
    Op(BinOp),
    Not,
    Eof,
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(n) => format!("number {n}"),
        Tok::Dur(d) => format!("duration {d}s"),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Ident(s) => format!("name `{s}`"),
        Tok::Directive(s) => format!("directive `#{s}`"),
        Tok::LParen => "`(`".into(),
        Tok::RParen => "`)`".into(),
        Tok::LBrace => "`{`".into(),
        Tok::RBrace => "`}`".into(),
        Tok::Comma => "`,`".into(),
        Tok::Assign => "`=`".into(),
        Tok::Pipe => "`|`".into(),
        Tok::Op(op) => format!("`{}`", op.symbol()),
        Tok::Not => "`not`".into(),
        Tok::Eof => "end of query".into(),
    }
}

fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..pos.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

fn error(
    text: &str,
    pos: usize,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> ParseError {
    let (line, column) = line_col(text, pos);
    ParseError {
        pos,
        line,
        column,
        expected: expected.into(),
        found: found.into(),
    }
}

/// Seconds in one unit of a duration suffix.
fn unit_seconds(unit: &str) -> Option<f64> {
    Some(match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "M" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        "w" => 604_800.0,
        _ => return None,
    })
}

struct Lexer<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    out: Vec<(Tok, usize)>,
}

impl Lexer<'_> {
    fn err(&self, pos: usize, expected: &str, found: String) -> ParseError {
        error(self.text, pos, expected, found)
    }

    fn char_at(&self, pos: usize) -> String {
        match self.text[pos..].chars().next() {
            Some(c) => format!("{c:?}"),
            None => "end of query".into(),
        }
    }

    /// At line start: whitespace only since the last newline (or the start).
    fn at_line_start(&self, pos: usize) -> bool {
        self.bytes[..pos]
            .iter()
            .rev()
            .take_while(|&&b| b != b'\n')
            .all(|b| b.is_ascii_whitespace())
    }

    /// A number's digits from `pos`: `12`, `1.5`, `.5`, `1e-3`. Returns the end.
    fn number_end(&self, mut pos: usize) -> usize {
        let b = self.bytes;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
        }
        if pos < b.len() && (b[pos] == b'e' || b[pos] == b'E') {
            let mut p = pos + 1;
            if p < b.len() && (b[p] == b'+' || b[p] == b'-') {
                p += 1;
            }
            if p < b.len() && b[p].is_ascii_digit() {
                while p < b.len() && b[p].is_ascii_digit() {
                    p += 1;
                }
                pos = p;
            }
        }
        pos
    }

    /// A number at `start`, and if units follow, a duration of one or more `<n><unit>` parts
    /// separated by spaces (`1d 6h`).
    fn number(&mut self, start: usize) -> Result<(), ParseError> {
        let b = self.bytes;
        let end = self.number_end(start);
        let value = self.parse_f64(start, end)?;
        let unit_end = b[end..]
            .iter()
            .position(|c| !c.is_ascii_alphabetic())
            .map_or(b.len(), |n| end + n);
        if unit_end == end {
            self.pos = end;
            self.out.push((Tok::Num(value), start));
            return Ok(());
        }
        let Some(mut total) = unit_seconds(&self.text[end..unit_end]).map(|u| u * value) else {
            return Err(self.err(
                end,
                "a duration unit (ms, s, m, h, d, w)",
                format!("`{}`", &self.text[end..unit_end]),
            ));
        };
        let mut pos = unit_end;
        // Further parts: spaces (not newlines), digits, a unit.
        loop {
            let mut p = pos;
            while p < b.len() && (b[p] == b' ' || b[p] == b'\t') {
                p += 1;
            }
            if p == pos || p >= b.len() || !b[p].is_ascii_digit() {
                break;
            }
            let num_end = self.number_end(p);
            let u_end = b[num_end..]
                .iter()
                .position(|c| !c.is_ascii_alphabetic())
                .map_or(b.len(), |n| num_end + n);
            let Some(unit) = unit_seconds(&self.text[num_end..u_end]) else {
                // A plain number after a duration is the next token, not a part.
                break;
            };
            total += self.parse_f64(p, num_end)? * unit;
            pos = u_end;
        }
        if !total.is_finite() {
            return Err(self.err(start, "a finite duration", "an overflow".into()));
        }
        self.pos = pos;
        self.out.push((Tok::Dur(total), start));
        Ok(())
    }

    fn parse_f64(&self, start: usize, end: usize) -> Result<f64, ParseError> {
        match self.text[start..end].parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(self.err(
                start,
                "a finite number",
                format!("`{}`", &self.text[start..end]),
            )),
        }
    }

    fn string(&mut self, start: usize, quote: u8) -> Result<(), ParseError> {
        let mut out = String::new();
        let mut chars = self.text[start + 1..].char_indices();
        loop {
            let Some((i, c)) = chars.next() else {
                return Err(self.err(
                    start,
                    "a closing quote for this string",
                    "end of query".into(),
                ));
            };
            if c as u32 == u32::from(quote) {
                self.pos = start + 1 + i + 1;
                self.out.push((Tok::Str(out), start));
                return Ok(());
            }
            if c == '\\' {
                let Some((j, e)) = chars.next() else {
                    return Err(self.err(
                        start,
                        "a closing quote for this string",
                        "end of query".into(),
                    ));
                };
                out.push(match e {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '\\' | '"' | '\'' => e,
                    other => {
                        return Err(self.err(
                            start + 1 + j,
                            "an escape (\\n \\t \\r \\\\ \\\" \\')",
                            format!("{other:?}"),
                        ))
                    }
                });
            } else {
                out.push(c);
            }
        }
    }

    fn run(mut self) -> Result<Vec<(Tok, usize)>, ParseError> {
        let b = self.bytes;
        while self.pos < b.len() {
            if self.out.len() >= TOKENS_MAX {
                return Err(self.err(
                    self.pos,
                    &format!("at most {TOKENS_MAX} tokens"),
                    "more".into(),
                ));
            }
            let start = self.pos;
            let c = b[start];
            let two = |s: &[u8]| b[start..].starts_with(s);
            let single = |tok: Tok, len: usize, this: &mut Self| {
                this.out.push((tok, start));
                this.pos = start + len;
            };
            match c {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                b'/' if two(b"//") => {
                    self.pos = b[start..]
                        .iter()
                        .position(|&x| x == b'\n')
                        .map_or(b.len(), |n| start + n);
                }
                b'#' => {
                    if !self.at_line_start(start) {
                        return Err(self.err(
                            start,
                            "a directive only at the start of a line",
                            "`#`".into(),
                        ));
                    }
                    let end = b[start..]
                        .iter()
                        .position(|&x| x == b'\n')
                        .map_or(b.len(), |n| start + n);
                    self.out
                        .push((Tok::Directive(self.text[start + 1..end].to_string()), start));
                    self.pos = end;
                }
                b'0'..=b'9' => self.number(start)?,
                b'.' if b.get(start + 1).is_some_and(u8::is_ascii_digit) => self.number(start)?,
                b'"' | b'\'' => self.string(start, c)?,
                b'(' => single(Tok::LParen, 1, &mut self),
                b')' => single(Tok::RParen, 1, &mut self),
                b'{' => single(Tok::LBrace, 1, &mut self),
                b'}' => single(Tok::RBrace, 1, &mut self),
                b',' => single(Tok::Comma, 1, &mut self),
                b'|' if two(b"||") => single(Tok::Op(BinOp::Or), 2, &mut self),
                b'|' => single(Tok::Pipe, 1, &mut self),
                b'&' if two(b"&&") => single(Tok::Op(BinOp::And), 2, &mut self),
                b'=' if two(b"==") => single(Tok::Op(BinOp::Eq), 2, &mut self),
                b'=' => single(Tok::Assign, 1, &mut self),
                b'!' if two(b"!=") => single(Tok::Op(BinOp::Ne), 2, &mut self),
                b'!' => single(Tok::Not, 1, &mut self),
                b'>' if two(b">=") => single(Tok::Op(BinOp::Ge), 2, &mut self),
                b'>' => single(Tok::Op(BinOp::Gt), 1, &mut self),
                b'<' if two(b"<=") => single(Tok::Op(BinOp::Le), 2, &mut self),
                b'<' => single(Tok::Op(BinOp::Lt), 1, &mut self),
                b'+' => single(Tok::Op(BinOp::Add), 1, &mut self),
                b'-' => single(Tok::Op(BinOp::Sub), 1, &mut self),
                b'*' => single(Tok::Op(BinOp::Mul), 1, &mut self),
                b'/' => single(Tok::Op(BinOp::Div), 1, &mut self),
                b'%' => single(Tok::Op(BinOp::Mod), 1, &mut self),
                b'^' => single(Tok::Op(BinOp::Pow), 1, &mut self),
                c if c.is_ascii_alphabetic() || c == b'_' => {
                    let mut end = start;
                    // `pkg:fn:sub` — a colon continues a name only when a name follows it.
                    loop {
                        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
                            end += 1;
                        }
                        if end + 1 < b.len()
                            && b[end] == b':'
                            && (b[end + 1].is_ascii_alphabetic() || b[end + 1] == b'_')
                        {
                            end += 1;
                        } else {
                            break;
                        }
                    }
                    let word = &self.text[start..end];
                    let tok = match word {
                        "and" => Tok::Op(BinOp::And),
                        "or" => Tok::Op(BinOp::Or),
                        "not" => Tok::Not,
                        _ => Tok::Ident(word.to_string()),
                    };
                    single(tok, end - start, &mut self);
                }
                _ => {
                    return Err(self.err(start, "an expression", self.char_at(start)));
                }
            }
        }
        self.out.push((Tok::Eof, b.len()));
        Ok(self.out)
    }
}

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(Tok, usize)>,
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.i].0
    }

    fn pos(&self) -> usize {
        self.toks[self.i].1
    }

    fn bump(&mut self) -> Tok {
        let t = self.toks[self.i].0.clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn expected(&self, what: &str) -> ParseError {
        error(self.text, self.pos(), what, describe(self.peek()))
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> Result<(), ParseError> {
        if self.peek() == tok {
            self.bump();
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > DEPTH_MAX {
            return Err(error(
                self.text,
                self.pos(),
                format!("nesting at most {DEPTH_MAX} deep"),
                "deeper nesting",
            ));
        }
        Ok(())
    }

    /// expr := or_expr ('|' call)*
    fn pipeline(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut e = self.binary(0)?;
        while self.peek() == &Tok::Pipe {
            self.bump();
            let Tok::Ident(name) = self.peek().clone() else {
                return Err(self.expected("a function name after `|`"));
            };
            let name_pos = self.pos();
            self.bump();
            let mut call = self.call_rest(name, name_pos)?;
            call.sources.push(e);
            e = Expr::Call(call);
        }
        self.depth -= 1;
        Ok(e)
    }

    /// Binding power of an infix operator (higher binds tighter) and right-associativity.
    fn infix(tok: &Tok) -> Option<(BinOp, u8, bool)> {
        let Tok::Op(op) = tok else { return None };
        Some((*op, op.binding_power(), op.right_associative()))
    }

    fn binary(&mut self, min_bp: u8) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut lhs = self.prefix()?;
        while let Some((op, bp, right)) = Self::infix(self.peek()) {
            if bp < min_bp {
                break;
            }
            self.bump();
            let rhs = self.binary(if right { bp } else { bp + 1 })?;
            lhs = Expr::Binary {
                op,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            };
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn prefix(&mut self) -> Result<Expr, ParseError> {
        match self.peek() {
            Tok::Not => {
                self.bump();
                self.enter()?;
                // `not` binds looser than comparisons: `not a > b` is `not (a > b)`.
                let e = self.binary(UnOp::Not.operand_power())?;
                self.depth -= 1;
                Ok(Expr::Unary {
                    op: UnOp::Not,
                    expr: Box::new(e),
                })
            }
            Tok::Op(BinOp::Sub) => {
                self.bump();
                self.enter()?;
                // Unary minus binds tighter than `* /` but looser than `^`: -2^2 = -(2^2).
                let e = self.binary(UnOp::Neg.operand_power())?;
                self.depth -= 1;
                Ok(Expr::Unary {
                    op: UnOp::Neg,
                    expr: Box::new(e),
                })
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let pos = self.pos();
        match self.bump() {
            Tok::Num(n) => Ok(Expr::Number(n)),
            Tok::Dur(d) => Ok(Expr::Duration(d)),
            Tok::Str(s) => Ok(Expr::Str(s)),
            Tok::LParen => {
                let e = self.pipeline()?;
                self.expect(&Tok::RParen, "`)`")?;
                Ok(e)
            }
            Tok::Ident(name) => match name.as_str() {
                "VIEW_RANGE" => Ok(Expr::Constant(Constant::ViewRange)),
                "VIEW_PERIOD" => Ok(Expr::Constant(Constant::ViewPeriod)),
                _ => Ok(Expr::Call(self.call_rest(name, pos)?)),
            },
            other => {
                self.i -= usize::from(other != Tok::Eof);
                Err(self.expected("a number, string, duration, name or `(`"))
            }
        }
    }

    /// After a function name: optional `(args)` then optional `{sources}`.
    fn call_rest(&mut self, name: String, _name_pos: usize) -> Result<Call, ParseError> {
        let mut call = Call {
            name,
            args: Vec::new(),
            kwargs: Vec::new(),
            sources: Vec::new(),
        };
        if self.peek() == &Tok::LParen {
            self.bump();
            if self.peek() != &Tok::RParen {
                loop {
                    // `key=value` when a name is directly followed by `=`.
                    let kw = match (self.peek(), self.toks.get(self.i + 1).map(|t| &t.0)) {
                        (Tok::Ident(k), Some(Tok::Assign)) => Some(k.clone()),
                        _ => None,
                    };
                    if let Some(k) = kw {
                        self.bump();
                        self.bump();
                        let v = self.pipeline()?;
                        call.kwargs.push((k, v));
                    } else {
                        if !call.kwargs.is_empty() {
                            return Err(
                                self.expected("`key=value` (positional arguments go first)")
                            );
                        }
                        call.args.push(self.pipeline()?);
                    }
                    if self.peek() == &Tok::Comma {
                        self.bump();
                    } else {
                        break;
                    }
                }
            }
            self.expect(&Tok::RParen, "`,` or `)` in the argument list")?;
        }
        if self.peek() == &Tok::LBrace {
            self.bump();
            if self.peek() != &Tok::RBrace {
                loop {
                    call.sources.push(self.pipeline()?);
                    if self.peek() == &Tok::Comma {
                        self.bump();
                    } else {
                        break;
                    }
                }
            }
            self.expect(&Tok::RBrace, "`,` or `}` in the source list")?;
        }
        Ok(call)
    }
}

/// Parses a whole query: `#name=value` directive lines, then one expression.
pub fn parse(text: &str) -> Result<Query, ParseError> {
    if text.len() > QUERY_SIZE_MAX {
        return Err(error(
            text,
            QUERY_SIZE_MAX,
            format!("a query of at most {QUERY_SIZE_MAX} bytes"),
            format!("{} bytes", text.len()),
        ));
    }
    let lexer = Lexer {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        out: Vec::new(),
    };
    let toks = lexer.run()?;
    let mut directives = Vec::new();
    let mut rest = Vec::with_capacity(toks.len());
    for (tok, pos) in toks {
        if let Tok::Directive(body) = tok {
            if directives.len() >= DIRECTIVES_MAX {
                return Err(error(
                    text,
                    pos,
                    format!("at most {DIRECTIVES_MAX} directives"),
                    "more",
                ));
            }
            directives.push(directive(text, pos, &body)?);
        } else {
            rest.push((tok, pos));
        }
    }
    let mut p = Parser {
        text,
        toks: rest,
        i: 0,
        depth: 0,
    };
    if p.peek() == &Tok::Eof {
        return Err(p.expected("an expression"));
    }
    let expr = p.pipeline()?;
    if p.peek() != &Tok::Eof {
        return Err(p.expected("an operator, `|` or the end of the query"));
    }
    Ok(Query { directives, expr })
}

/// `#name=value`: the value is one literal (number, string, duration).
fn directive(text: &str, pos: usize, body: &str) -> Result<Directive, ParseError> {
    let Some(eq) = body.find('=') else {
        return Err(error(text, pos + 1, "`#name=value`", format!("`#{body}`")));
    };
    let name = body[..eq].trim();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(error(
            text,
            pos + 1,
            "a directive name",
            format!("`{name}`"),
        ));
    }
    let value_pos = pos + 1 + eq + 1;
    let inner = parse(&body[eq + 1..]).map_err(|e| {
        error(
            text,
            value_pos + e.pos.min(body.len() - eq - 1),
            e.expected,
            e.found,
        )
    })?;
    if !inner.directives.is_empty() {
        return Err(error(text, value_pos, "a literal value", "a directive"));
    }
    match inner.expr {
        v @ (Expr::Number(_) | Expr::Str(_) | Expr::Duration(_)) => Ok(Directive {
            name: name.to_string(),
            value: v,
        }),
        _ => Err(error(
            text,
            value_pos,
            "a number, string or duration",
            "an expression",
        )),
    }
}
