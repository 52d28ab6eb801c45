//! The parser: text → [`Expr`], with Prometheus's precedence and type rules. Errors carry the
//! byte position and what was expected there.

use std::fmt;

use crate::ast::{
    is_label_name, AggOp, At, BinOp, Expr, Func, Grouping, MatchOp, Matcher, Matching, Selector,
    ValueType,
};

/// Longest query text accepted, in bytes.
pub const QUERY_SIZE_MAX: usize = 64 * 1024;
/// Deepest nesting accepted (parentheses, operators, calls): bounds the parser's recursion.
pub const DEPTH_MAX: usize = 64;
/// Most tokens in one query.
pub const TOKENS_MAX: usize = 16 * 1024;
/// Size limit of one compiled matcher or `label_replace` regex.
pub const REGEX_SIZE_MAX: usize = 1 << 20;
/// Longest duration accepted anywhere (about 290 years: timestamps stay far from overflow).
pub const DURATION_MS_MAX: i64 = 1 << 53;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset in the query text.
    pub pos: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "parse error at byte {}: {}", self.pos, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Number(f64),
    Duration(i64),
    Str(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Comma,
    Colon,
    At,
    Assign,
    EqRegex,
    NeRegex,
    Op(BinOp),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("identifier \"{s}\""),
            Tok::Number(v) => format!("number {v}"),
            Tok::Duration(ms) => format!("duration {}", crate::ast::format_duration(*ms)),
            Tok::Str(_) => "string".to_string(),
            Tok::LParen => "\"(\"".to_string(),
            Tok::RParen => "\")\"".to_string(),
            Tok::LBrace => "\"{\"".to_string(),
            Tok::RBrace => "\"}\"".to_string(),
            Tok::LBracket => "\"[\"".to_string(),
            Tok::RBracket => "\"]\"".to_string(),
            Tok::Comma => "\",\"".to_string(),
            Tok::Colon => "\":\"".to_string(),
            Tok::At => "\"@\"".to_string(),
            Tok::Assign => "\"=\"".to_string(),
            Tok::EqRegex => "\"=~\"".to_string(),
            Tok::NeRegex => "\"!~\"".to_string(),
            Tok::Op(op) => format!("\"{}\"", op.symbol()),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

fn err(pos: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        pos,
        message: message.into(),
    }
}

struct Lexer<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

fn unit_ms(unit: &str) -> Option<i64> {
    Some(match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        "y" => 365 * 86_400_000,
        _ => return None,
    })
}

impl Lexer<'_> {
    fn peek_byte(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.pos + ahead).copied()
    }

    fn tokens(mut self) -> Result<Vec<(usize, Tok)>, ParseError> {
        let mut out = Vec::new();
        loop {
            if out.len() > TOKENS_MAX {
                return Err(err(self.pos, format!("more than {TOKENS_MAX} tokens")));
            }
            self.skip_space();
            let start = self.pos;
            let Some(b) = self.peek_byte(0) else {
                out.push((start, Tok::Eof));
                return Ok(out);
            };
            let tok = match b {
                b'(' => self.one(Tok::LParen),
                b')' => self.one(Tok::RParen),
                b'{' => self.one(Tok::LBrace),
                b'}' => self.one(Tok::RBrace),
                b'[' => self.one(Tok::LBracket),
                b']' => self.one(Tok::RBracket),
                b',' => self.one(Tok::Comma),
                b'@' => self.one(Tok::At),
                b'+' => self.one(Tok::Op(BinOp::Add)),
                b'-' => self.one(Tok::Op(BinOp::Sub)),
                b'*' => self.one(Tok::Op(BinOp::Mul)),
                b'/' => self.one(Tok::Op(BinOp::Div)),
                b'%' => self.one(Tok::Op(BinOp::Mod)),
                b'^' => self.one(Tok::Op(BinOp::Pow)),
                b'=' => match self.peek_byte(1) {
                    Some(b'=') => self.two(Tok::Op(BinOp::Eq)),
                    Some(b'~') => self.two(Tok::EqRegex),
                    _ => self.one(Tok::Assign),
                },
                b'!' => match self.peek_byte(1) {
                    Some(b'=') => self.two(Tok::Op(BinOp::Ne)),
                    Some(b'~') => self.two(Tok::NeRegex),
                    _ => return Err(err(start, "expected \"!=\" or \"!~\" after \"!\"")),
                },
                b'<' => match self.peek_byte(1) {
                    Some(b'=') => self.two(Tok::Op(BinOp::Le)),
                    _ => self.one(Tok::Op(BinOp::Lt)),
                },
                b'>' => match self.peek_byte(1) {
                    Some(b'=') => self.two(Tok::Op(BinOp::Ge)),
                    _ => self.one(Tok::Op(BinOp::Gt)),
                },
                b'"' | b'\'' | b'`' => self.string(b)?,
                b'0'..=b'9' | b'.' => self.number()?,
                b':' if !self
                    .peek_byte(1)
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':') =>
                {
                    self.one(Tok::Colon)
                }
                c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => self.ident(),
                _ => {
                    let c = self.text[start..].chars().next().unwrap_or('?');
                    return Err(err(
                        start,
                        format!("unexpected character {}", crate::ast::quote(&c.to_string())),
                    ));
                }
            };
            out.push((start, tok));
        }
    }

    fn skip_space(&mut self) {
        while let Some(b) = self.peek_byte(0) {
            if b.is_ascii_whitespace() {
                self.pos += 1;
            } else if b == b'#' {
                // A comment runs to the end of the line.
                while self.peek_byte(0).is_some_and(|c| c != b'\n') {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn one(&mut self, tok: Tok) -> Tok {
        self.pos += 1;
        tok
    }

    fn two(&mut self, tok: Tok) -> Tok {
        self.pos += 2;
        tok
    }

    fn ident(&mut self) -> Tok {
        let start = self.pos;
        while self
            .peek_byte(0)
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
        {
            self.pos += 1;
        }
        Tok::Ident(self.text[start..self.pos].to_string())
    }

    fn number(&mut self) -> Result<Tok, ParseError> {
        let start = self.pos;
        if self.peek_byte(0) == Some(b'0') && matches!(self.peek_byte(1), Some(b'x' | b'X')) {
            self.pos += 2;
            let digits = self.pos;
            while self.peek_byte(0).is_some_and(|c| c.is_ascii_hexdigit()) {
                self.pos += 1;
            }
            let value = u64::from_str_radix(&self.text[digits..self.pos], 16)
                .map_err(|_| err(start, "expected a hexadecimal number"))?;
            return Ok(Tok::Number(value as f64));
        }
        // A duration is digits followed directly by a unit, possibly repeated (`1h30m`).
        if self.peek_byte(0).is_some_and(|c| c.is_ascii_digit()) {
            if let Some(tok) = self.duration()? {
                return Ok(tok);
            }
        }
        self.pos = start;
        while self
            .peek_byte(0)
            .is_some_and(|c| c.is_ascii_digit() || c == b'.')
        {
            self.pos += 1;
        }
        if matches!(self.peek_byte(0), Some(b'e' | b'E')) {
            let save = self.pos;
            self.pos += 1;
            if matches!(self.peek_byte(0), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.peek_byte(0).is_some_and(|c| c.is_ascii_digit()) {
                while self.peek_byte(0).is_some_and(|c| c.is_ascii_digit()) {
                    self.pos += 1;
                }
            } else {
                self.pos = save;
            }
        }
        let text = &self.text[start..self.pos];
        text.parse::<f64>().map(Tok::Number).map_err(|_| {
            err(
                start,
                format!("expected a number, found {}", crate::ast::quote(text)),
            )
        })
    }

    /// Reads `<digits><unit>…` if the text is a duration; `None` (position unchanged) if not.
    fn duration(&mut self) -> Result<Option<Tok>, ParseError> {
        let start = self.pos;
        let mut total: i64 = 0;
        let mut parts = 0;
        loop {
            let digits = self.pos;
            while self.peek_byte(0).is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
            if digits == self.pos {
                break;
            }
            let unit_start = self.pos;
            while self.peek_byte(0).is_some_and(|c| c.is_ascii_lowercase()) {
                self.pos += 1;
            }
            let Some(unit) = unit_ms(&self.text[unit_start..self.pos]) else {
                if parts == 0 {
                    self.pos = start;
                    return Ok(None);
                }
                return Err(err(
                    unit_start,
                    "expected a duration unit (ms, s, m, h, d, w, y)",
                ));
            };
            let count: i64 = self.text[digits..unit_start]
                .parse()
                .map_err(|_| err(digits, "duration too long"))?;
            total = count
                .checked_mul(unit)
                .and_then(|v| v.checked_add(total))
                .filter(|&v| v <= DURATION_MS_MAX)
                .ok_or_else(|| err(start, "duration too long"))?;
            parts += 1;
        }
        if parts == 0 {
            self.pos = start;
            return Ok(None);
        }
        if self
            .peek_byte(0)
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            return Err(err(self.pos, "expected the end of the duration"));
        }
        Ok(Some(Tok::Duration(total)))
    }

    fn string(&mut self, quote: u8) -> Result<Tok, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                return Err(err(start, "unterminated string"));
            };
            self.pos += c.len_utf8();
            if c as u32 == u32::from(quote) {
                return Ok(Tok::Str(out));
            }
            if c == '\\' && quote != b'`' {
                let esc_pos = self.pos - 1;
                let Some(e) = self.text[self.pos..].chars().next() else {
                    return Err(err(start, "unterminated string"));
                };
                self.pos += e.len_utf8();
                let decoded = match e {
                    'a' => '\u{7}',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'v' => '\u{b}',
                    '\\' | '"' | '\'' => e,
                    'x' => self.hex_escape(2, esc_pos)?,
                    'u' => self.hex_escape(4, esc_pos)?,
                    'U' => self.hex_escape(8, esc_pos)?,
                    _ => return Err(err(esc_pos, format!("unknown escape sequence \\{e}"))),
                };
                out.push(decoded);
            } else if c == '\n' && quote != b'`' {
                return Err(err(start, "unterminated string (newline inside)"));
            } else {
                out.push(c);
            }
        }
    }

    fn hex_escape(&mut self, digits: usize, esc_pos: usize) -> Result<char, ParseError> {
        let hex = self
            .text
            .get(self.pos..self.pos + digits)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| err(esc_pos, format!("expected {digits} hex digits in escape")))?;
        self.pos += digits;
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| err(esc_pos, "escape is not a valid character"))
    }
}

/// What the language accepts beyond Prometheus 3.5's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// The functions and aggregations Prometheus enables with
    /// `--enable-feature=promql-experimental-functions` (off by default, as there).
    pub experimental_functions: bool,
}

/// Parses a PromQL expression as Prometheus 3.5 does by default.
pub fn parse(text: &str) -> Result<Expr, ParseError> {
    parse_with(text, ParseOptions::default())
}

/// Parses a PromQL expression with `options`.
pub fn parse_with(text: &str, options: ParseOptions) -> Result<Expr, ParseError> {
    if text.len() > QUERY_SIZE_MAX {
        return Err(err(
            QUERY_SIZE_MAX,
            format!("query longer than {QUERY_SIZE_MAX} bytes"),
        ));
    }
    let tokens = Lexer {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    }
    .tokens()?;
    let mut p = Parser {
        tokens,
        i: 0,
        depth: 0,
        options,
    };
    let expr = p.expr()?;
    let (pos, tok) = p.peek_pos();
    if tok != Tok::Eof {
        let what = if matches!(tok, Tok::LBracket) {
            "end of input (a range is allowed only after a vector selector)".to_string()
        } else {
            "an operator or end of input".to_string()
        };
        return Err(err(
            pos,
            format!("expected {what}, found {}", tok.describe()),
        ));
    }
    Ok(expr)
}

/// Compiles a matcher or `label_replace` regex the way Prometheus anchors it.
pub fn anchored_regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_MAX)
        .build()
}

struct Parser {
    tokens: Vec<(usize, Tok)>,
    i: usize,
    depth: usize,
    options: ParseOptions,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.i.min(self.tokens.len() - 1)].1
    }

    fn peek_pos(&self) -> (usize, Tok) {
        self.tokens[self.i.min(self.tokens.len() - 1)].clone()
    }

    fn pos(&self) -> usize {
        self.tokens[self.i.min(self.tokens.len() - 1)].0
    }

    fn next(&mut self) -> (usize, Tok) {
        let t = self.peek_pos();
        if self.i < self.tokens.len() - 1 {
            self.i += 1;
        }
        t
    }

    fn expect(&mut self, want: Tok, what: &str) -> Result<usize, ParseError> {
        let (pos, tok) = self.next();
        if tok == want {
            Ok(pos)
        } else {
            Err(err(
                pos,
                format!("expected {what}, found {}", tok.describe()),
            ))
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > DEPTH_MAX {
            return Err(err(self.pos(), format!("nesting deeper than {DEPTH_MAX}")));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let e = self.binary(1);
        self.depth -= 1;
        e
    }

    fn peek_binop(&self) -> Option<BinOp> {
        match self.peek() {
            Tok::Op(op) => Some(*op),
            Tok::Ident(w) => match w.to_ascii_lowercase().as_str() {
                "and" => Some(BinOp::And),
                "or" => Some(BinOp::Or),
                "unless" => Some(BinOp::Unless),
                "atan2" => Some(BinOp::Atan2),
                _ => None,
            },
            _ => None,
        }
    }

    fn peek_word(&self, word: &str) -> bool {
        matches!(self.peek(), Tok::Ident(w) if w.eq_ignore_ascii_case(word))
    }

    fn binary(&mut self, min_prec: u8) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut lhs = self.unary()?;
        while let Some(op) = self.peek_binop().filter(|op| op.precedence() >= min_prec) {
            let op_pos = self.next().0;
            let mut return_bool = false;
            if self.peek_word("bool") {
                if !op.is_comparison() {
                    return Err(err(
                        self.pos(),
                        "bool modifier is only allowed on comparisons",
                    ));
                }
                self.next();
                return_bool = true;
            }
            let mut matching = None;
            if self.peek_word("on") || self.peek_word("ignoring") {
                let on = self.peek_word("on");
                self.next();
                let labels = self.label_list()?;
                let mut card = crate::ast::Card::OneToOne;
                if self.peek_word("group_left") || self.peek_word("group_right") {
                    let left = self.peek_word("group_left");
                    let gpos = self.next().0;
                    if op.is_set() {
                        return Err(err(
                            gpos,
                            "no grouping allowed for set operations (and, or, unless)",
                        ));
                    }
                    // The include list is optional: `group_left` alone copies nothing.
                    let include = if *self.peek() == Tok::LParen {
                        self.label_list()?
                    } else {
                        Vec::new()
                    };
                    card = if left {
                        crate::ast::Card::ManyToOne(include)
                    } else {
                        crate::ast::Card::OneToMany(include)
                    };
                }
                matching = Some(Matching { on, labels, card });
            }
            // `^` is right-associative; everything else is left-associative.
            let next_min = if op == BinOp::Pow {
                op.precedence()
            } else {
                op.precedence() + 1
            };
            let rhs_pos = self.pos();
            let rhs = self.binary(next_min)?;
            lhs = check_binary(op, lhs, rhs, return_bool, matching, op_pos, rhs_pos)?;
        }
        self.depth -= 1;
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        match self.peek() {
            Tok::Op(BinOp::Sub) | Tok::Op(BinOp::Add) => {
                let (pos, tok) = self.next();
                // Unary minus binds less tightly than `^`: `-2 ^ 2` is `-(2 ^ 2)`.
                let operand = self.binary(BinOp::Pow.precedence())?;
                match operand.value_type() {
                    ValueType::Scalar | ValueType::Vector => {}
                    t => {
                        return Err(err(
                            pos,
                            format!(
                            "unary expression only allowed on scalars or instant vectors, got {}",
                            t.name()
                        ),
                        ))
                    }
                }
                if tok == Tok::Op(BinOp::Add) {
                    return Ok(operand);
                }
                Ok(match operand {
                    Expr::Number(v) => Expr::Number(-v),
                    e => Expr::Neg(Box::new(e)),
                })
            }
            _ => self.postfix(),
        }
    }

    fn postfix(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.primary()?;
        loop {
            if *self.peek() == Tok::LBracket {
                e = self.range_or_subquery(e)?;
            } else if self.peek_word("offset") {
                let pos = self.next().0;
                let ms = self.duration_value(true)?;
                let slot = modifiers_mut(&mut e).ok_or_else(|| {
                    err(
                        pos,
                        "offset modifier must be preceded by an instant vector selector or range vector selector or a subquery",
                    )
                })?;
                if *slot.0 != 0 {
                    return Err(err(pos, "offset may not be set multiple times"));
                }
                *slot.0 = ms;
            } else if *self.peek() == Tok::At {
                let pos = self.next().0;
                let at = self.at_value()?;
                let slot = modifiers_mut(&mut e).ok_or_else(|| {
                    err(
                        pos,
                        "@ modifier must be preceded by an instant vector selector or range vector selector or a subquery",
                    )
                })?;
                if slot.1.is_some() {
                    return Err(err(pos, "@ <timestamp> may not be set multiple times"));
                }
                *slot.1 = Some(at);
            } else {
                break;
            }
        }
        Ok(e)
    }

    /// After an expression, `[range]` (a range selector) or `[range:step]` (a subquery).
    fn range_or_subquery(&mut self, e: Expr) -> Result<Expr, ParseError> {
        let bracket = self.next().0;
        let range_ms = self.duration_value(false)?;
        if *self.peek() == Tok::Colon {
            self.next();
            let step_ms = if *self.peek() == Tok::RBracket {
                0
            } else {
                self.duration_value(false)?
            };
            self.expect(Tok::RBracket, "\"]\"")?;
            if e.value_type() != ValueType::Vector {
                return Err(err(
                    bracket,
                    format!(
                        "subquery is only allowed on instant vector, got {} instead",
                        prom_type_name(e.value_type())
                    ),
                ));
            }
            return Ok(Expr::Subquery {
                expr: Box::new(e),
                range_ms,
                step_ms,
                offset_ms: 0,
                at: None,
            });
        }
        self.expect(Tok::RBracket, "\"]\" or \":\"")?;
        let Expr::Selector(selector) = e else {
            return Err(err(bracket, "ranges only allowed for vector selectors"));
        };
        if selector.offset_ms != 0 {
            return Err(err(bracket, "no offset modifiers allowed before range"));
        }
        if selector.at.is_some() {
            return Err(err(bracket, "no @ modifiers allowed before range"));
        }
        Ok(Expr::Range { selector, range_ms })
    }

    /// A duration (`5m`) or a number of seconds (`300`, Prometheus 3), in milliseconds; a
    /// leading `-` only where `signed` (offsets). Ranges and steps must be positive.
    fn duration_value(&mut self, signed: bool) -> Result<i64, ParseError> {
        let neg = signed && *self.peek() == Tok::Op(BinOp::Sub);
        if neg || (signed && *self.peek() == Tok::Op(BinOp::Add)) {
            self.next();
        }
        let (pos, tok) = self.next();
        let ms = match tok {
            Tok::Duration(ms) => ms,
            Tok::Number(v) => seconds_to_ms(v)
                .filter(|ms| ms.abs() <= DURATION_MS_MAX)
                .ok_or_else(|| err(pos, "duration out of range"))?,
            t => {
                return Err(err(
                    pos,
                    format!("expected a duration, found {}", t.describe()),
                ))
            }
        };
        if !signed && ms <= 0 {
            return Err(err(pos, "duration must be greater than 0"));
        }
        Ok(if neg { -ms } else { ms })
    }

    fn at_value(&mut self) -> Result<At, ParseError> {
        let (pos, tok) = self.next();
        match tok {
            Tok::Number(v) => seconds_to_ms(v)
                .map(At::TimeMs)
                .ok_or_else(|| err(pos, "@ timestamp out of range")),
            Tok::Op(BinOp::Sub) => match self.next() {
                (p, Tok::Number(v)) => seconds_to_ms(-v)
                    .map(At::TimeMs)
                    .ok_or_else(|| err(p, "@ timestamp out of range")),
                (p, t) => Err(err(p, format!("expected a number, found {}", t.describe()))),
            },
            Tok::Ident(w) if w == "start" || w == "end" => {
                self.expect(Tok::LParen, "\"(\"")?;
                self.expect(Tok::RParen, "\")\"")?;
                Ok(if w == "start" { At::Start } else { At::End })
            }
            t => Err(err(
                pos,
                format!(
                    "expected a timestamp, start() or end() after @, found {}",
                    t.describe()
                ),
            )),
        }
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let (pos, tok) = self.next();
        match tok {
            Tok::Number(v) => Ok(Expr::Number(v)),
            Tok::Str(s) => Ok(Expr::String(s)),
            Tok::LParen => {
                let e = self.expr()?;
                self.expect(Tok::RParen, "\")\"")?;
                Ok(e)
            }
            Tok::LBrace => self.selector(None, pos),
            Tok::Ident(word) => {
                if word.eq_ignore_ascii_case("inf") {
                    return Ok(Expr::Number(f64::INFINITY));
                }
                if word.eq_ignore_ascii_case("nan") {
                    return Ok(Expr::Number(f64::NAN));
                }
                if let Some(op) = AggOp::from_name(&word) {
                    return self.aggregate(op, pos);
                }
                if *self.peek() == Tok::LParen {
                    let Some(func) = Func::from_name(&word) else {
                        return Err(err(pos, format!("unknown function with name \"{word}\"")));
                    };
                    return self.call(func, pos);
                }
                if crate::ast::is_keyword(&word) {
                    return Err(err(
                        pos,
                        format!("expected an expression, found keyword \"{word}\""),
                    ));
                }
                if *self.peek() == Tok::LBrace {
                    self.next();
                    return self.selector(Some(word), pos);
                }
                Ok(Expr::Selector(Selector {
                    name: Some(word),
                    matchers: Vec::new(),
                    offset_ms: 0,
                    at: None,
                }))
            }
            Tok::Duration(_) => Err(err(
                pos,
                "expected an expression, found a duration (durations belong in [] or after offset)",
            )),
            t => Err(err(
                pos,
                format!("expected an expression, found {}", t.describe()),
            )),
        }
    }

    /// After `{` (and the metric name, if any).
    fn selector(&mut self, name: Option<String>, start: usize) -> Result<Expr, ParseError> {
        let mut sel = Selector {
            name,
            matchers: Vec::new(),
            offset_ms: 0,
            at: None,
        };
        loop {
            let (pos, tok) = self.next();
            match tok {
                Tok::RBrace => break,
                // A quoted string alone is the metric name; followed by an operator it is a
                // (UTF-8) label name.
                Tok::Str(s) if !self.peek_match_op() => {
                    if sel.name.is_some() {
                        return Err(err(pos, "metric name must not be set twice"));
                    }
                    sel.name = Some(s);
                }
                Tok::Ident(_) | Tok::Str(_) => {
                    let label = match tok {
                        Tok::Ident(l) if is_label_name(&l) => l,
                        Tok::Str(l) => l,
                        _ => {
                            return Err(err(pos, format!("invalid label name {}", tok.describe())))
                        }
                    };
                    let (op_pos, op_tok) = self.next();
                    let op = match op_tok {
                        Tok::Assign => MatchOp::Equal,
                        Tok::Op(BinOp::Ne) => MatchOp::NotEqual,
                        Tok::EqRegex => MatchOp::Regex,
                        Tok::NeRegex => MatchOp::NotRegex,
                        t => {
                            return Err(err(
                                op_pos,
                                format!("expected one of = != =~ !~, found {}", t.describe()),
                            ))
                        }
                    };
                    let (vpos, vtok) = self.next();
                    let Tok::Str(value) = vtok else {
                        return Err(err(
                            vpos,
                            format!("expected a string, found {}", vtok.describe()),
                        ));
                    };
                    if matches!(op, MatchOp::Regex | MatchOp::NotRegex) {
                        anchored_regex(&value)
                            .map_err(|e| err(vpos, format!("invalid regex: {e}")))?;
                    }
                    sel.matchers.push(Matcher { label, op, value });
                }
                t => {
                    return Err(err(
                        pos,
                        format!("expected a label matcher or \"}}\", found {}", t.describe()),
                    ))
                }
            }
            let (pos, tok) = self.next();
            match tok {
                Tok::Comma => continue,
                Tok::RBrace => break,
                t => {
                    return Err(err(
                        pos,
                        format!("expected \",\" or \"}}\", found {}", t.describe()),
                    ))
                }
            }
        }
        let selects_something = sel.name.as_deref().is_some_and(|n| !n.is_empty())
            || sel.matchers.iter().any(|m| !matcher_matches_empty(m));
        if !selects_something {
            return Err(err(
                start,
                "vector selector must contain at least one non-empty matcher",
            ));
        }
        Ok(Expr::Selector(sel))
    }

    fn peek_match_op(&self) -> bool {
        matches!(
            self.peek(),
            Tok::Assign | Tok::Op(BinOp::Ne) | Tok::EqRegex | Tok::NeRegex
        )
    }

    fn label_list(&mut self) -> Result<Vec<String>, ParseError> {
        self.expect(Tok::LParen, "\"(\" starting a label list")?;
        let mut labels = Vec::new();
        loop {
            let (pos, tok) = self.next();
            match tok {
                Tok::RParen => return Ok(labels),
                Tok::Ident(l) if is_label_name(&l) => labels.push(l),
                Tok::Str(l) => labels.push(l),
                t => {
                    return Err(err(
                        pos,
                        format!("expected a label name, found {}", t.describe()),
                    ))
                }
            }
            let (pos, tok) = self.next();
            match tok {
                Tok::Comma => {}
                Tok::RParen => return Ok(labels),
                t => {
                    return Err(err(
                        pos,
                        format!("expected \",\" or \")\", found {}", t.describe()),
                    ))
                }
            }
        }
    }

    fn grouping(&mut self) -> Result<Option<Grouping>, ParseError> {
        if self.peek_word("by") || self.peek_word("without") {
            let without = self.peek_word("without");
            self.next();
            return Ok(Some(Grouping {
                without,
                labels: self.label_list()?,
            }));
        }
        Ok(None)
    }

    fn aggregate(&mut self, op: AggOp, pos: usize) -> Result<Expr, ParseError> {
        self.enter()?;
        if op.is_experimental() && !self.options.experimental_functions {
            return Err(err(
                pos,
                format!(
                    "{}() is experimental and must be enabled with --enable-feature=promql-experimental-functions",
                    op.name()
                ),
            ));
        }
        let mut grouping = self.grouping()?;
        self.expect(Tok::LParen, &format!("\"(\" after {}", op.name()))?;
        let mut param = None;
        if op.has_param() {
            let ppos = self.pos();
            let p = self.expr()?;
            if p.value_type() != op.param_type() {
                return Err(err(
                    ppos,
                    format!(
                        "expected type {} in aggregation parameter, got {}",
                        op.param_type().name(),
                        p.value_type().name()
                    ),
                ));
            }
            param = Some(Box::new(p));
            self.expect(Tok::Comma, "\",\"")?;
        }
        let epos = self.pos();
        let expr = self.expr()?;
        if expr.value_type() != ValueType::Vector {
            return Err(err(
                epos,
                format!(
                    "expected type instant vector in aggregation {}, got {}",
                    op.name(),
                    expr.value_type().name()
                ),
            ));
        }
        self.expect(Tok::RParen, "\")\"")?;
        if let Some(g) = self.grouping()? {
            if grouping.is_some() {
                return Err(err(pos, "grouping given twice"));
            }
            grouping = Some(g);
        }
        self.depth -= 1;
        Ok(Expr::Aggregate {
            op,
            grouping,
            param,
            expr: Box::new(expr),
        })
    }

    fn call(&mut self, func: Func, pos: usize) -> Result<Expr, ParseError> {
        self.enter()?;
        if func.is_experimental() && !self.options.experimental_functions {
            return Err(err(
                pos,
                format!("function \"{}\" is not enabled", func.name()),
            ));
        }
        self.expect(Tok::LParen, "\"(\"")?;
        let (types, optional, repeats) = func.arity();
        let mut args = Vec::new();
        if *self.peek() != Tok::RParen {
            loop {
                let apos = self.pos();
                let arg = self.expr()?;
                let want = match types.get(args.len()) {
                    Some(&t) => t,
                    None if repeats => types[types.len() - 1],
                    None => {
                        return Err(err(
                            apos,
                            format!(
                                "expected at most {} argument(s) in call to \"{}\", got {}",
                                types.len(),
                                func.name(),
                                args.len() + 1
                            ),
                        ))
                    }
                };
                if arg.value_type() != want {
                    return Err(err(
                        apos,
                        format!(
                            "expected type {} in call to function \"{}\", got {}",
                            want.name(),
                            func.name(),
                            arg.value_type().name()
                        ),
                    ));
                }
                args.push(arg);
                if *self.peek() == Tok::Comma {
                    self.next();
                } else {
                    break;
                }
            }
        }
        let close = self.expect(Tok::RParen, "\",\" or \")\"")?;
        if args.len() + optional < types.len() {
            return Err(err(
                close,
                format!(
                    "expected {} argument(s) in call to \"{}\", got {}",
                    types.len() - optional,
                    func.name(),
                    args.len()
                ),
            ));
        }
        check_call_literals(func, &args, pos)?;
        self.depth -= 1;
        Ok(Expr::Call { func, args })
    }
}

/// The string arguments of `label_replace` / `label_join` checked where Prometheus checks
/// them (label names: any non-empty UTF-8 text; the regex must compile).
fn check_call_literals(func: Func, args: &[Expr], pos: usize) -> Result<(), ParseError> {
    let name = func.name();
    match func {
        Func::LabelReplace => {
            let (Some(Expr::String(dst)), Some(Expr::String(re))) = (args.get(1), args.get(4))
            else {
                return Err(err(pos, "label_replace needs string literals"));
            };
            if dst.is_empty() {
                return Err(err(
                    pos,
                    format!("invalid destination label name in {name}(): {dst}"),
                ));
            }
            anchored_regex(re).map_err(|e| {
                err(
                    pos,
                    format!("invalid regular expression in {name}(): {re}: {e}"),
                )
            })?;
        }
        Func::LabelJoin => {
            for (i, a) in args.iter().enumerate().skip(1) {
                match a {
                    Expr::String(l) if i == 1 && l.is_empty() => {
                        return Err(err(
                            pos,
                            format!("invalid destination label name in {name}(): {l}"),
                        ))
                    }
                    Expr::String(_) => {}
                    _ => return Err(err(pos, format!("{name} needs string literals"))),
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// A type as Prometheus's parser names it in some messages (`matrix` for a range vector).
fn prom_type_name(t: ValueType) -> &'static str {
    match t {
        ValueType::Matrix => "matrix",
        ValueType::Vector => "vector",
        t => t.name(),
    }
}

/// The `offset` and `@` slots of a selector, range selector or subquery.
fn modifiers_mut(e: &mut Expr) -> Option<(&mut i64, &mut Option<At>)> {
    match e {
        Expr::Selector(s) | Expr::Range { selector: s, .. } => Some((&mut s.offset_ms, &mut s.at)),
        Expr::Subquery { offset_ms, at, .. } => Some((offset_ms, at)),
        _ => None,
    }
}

fn seconds_to_ms(v: f64) -> Option<i64> {
    let ms = (v * 1000.0).round();
    (ms.is_finite() && ms.abs() <= DURATION_MS_MAX as f64 * 8.0).then_some(ms as i64)
}

/// Whether the matcher accepts a missing label (Prometheus: matches the empty string).
pub fn matcher_matches_empty(m: &Matcher) -> bool {
    match m.op {
        MatchOp::Equal => m.value.is_empty(),
        MatchOp::NotEqual => !m.value.is_empty(),
        MatchOp::Regex => anchored_regex(&m.value).is_ok_and(|r| r.is_match("")),
        MatchOp::NotRegex => anchored_regex(&m.value).is_ok_and(|r| !r.is_match("")),
    }
}

fn check_binary(
    op: BinOp,
    lhs: Expr,
    rhs: Expr,
    return_bool: bool,
    matching: Option<Matching>,
    op_pos: usize,
    rhs_pos: usize,
) -> Result<Expr, ParseError> {
    let (lt, rt) = (lhs.value_type(), rhs.value_type());
    for (t, p) in [(lt, op_pos), (rt, rhs_pos)] {
        if !matches!(t, ValueType::Scalar | ValueType::Vector) {
            return Err(err(
                p,
                format!(
                    "binary expression must contain only scalar and instant vector types, got {}",
                    t.name()
                ),
            ));
        }
    }
    if op.is_set() && (lt != ValueType::Vector || rt != ValueType::Vector) {
        return Err(err(
            op_pos,
            format!(
                "set operator \"{}\" not allowed in binary scalar expression",
                op.symbol()
            ),
        ));
    }
    if op.is_comparison() && lt == ValueType::Scalar && rt == ValueType::Scalar && !return_bool {
        return Err(err(
            op_pos,
            "comparisons between scalars must use BOOL modifier",
        ));
    }
    if matching.is_some() && (lt != ValueType::Vector || rt != ValueType::Vector) {
        return Err(err(
            op_pos,
            "vector matching only allowed between instant vectors",
        ));
    }
    Ok(Expr::Binary {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
        return_bool,
        matching,
    })
}

/// Parses a duration (`1h30m`, `15s`) to milliseconds; `None` if the text is not exactly one.
pub fn parse_duration(text: &str) -> Option<i64> {
    let mut lexer = Lexer {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    match lexer.duration() {
        Ok(Some(Tok::Duration(ms))) if lexer.pos == text.len() => Some(ms),
        _ => None,
    }
}
