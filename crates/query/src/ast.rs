//! The syntax tree of a query, and its canonical text form.
//!
//! Pipes are desugared while parsing (`A | B` is `B{A}`), parentheses leave no node, and the
//! printed form ([`std::fmt::Display`]) has the fewest parentheses that give back an equal tree
//! (so it never nests deeper than the text it was parsed from).

use std::fmt;

/// Infix and prefix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    And,
    Or,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
            BinOp::Pow => "^",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

/// The view's constants, known only at evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constant {
    /// `VIEW_RANGE`: end − start, in seconds.
    ViewRange,
    /// `VIEW_PERIOD`: the period, in seconds.
    ViewPeriod,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A non-negative finite number (a minus sign is a [`UnOp::Neg`]).
    Number(f64),
    Str(String),
    /// A duration literal, in seconds.
    Duration(f64),
    Constant(Constant),
    /// `pkg:fn(args, key=value){ sources }`; a bare name is a call with nothing.
    Call(Call),
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    Unary {
        op: UnOp,
        expr: Box<Expr>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// `pkg:fn` with its colons, e.g. `histogram:percentile`.
    pub name: String,
    pub args: Vec<Expr>,
    pub kwargs: Vec<(String, Expr)>,
    pub sources: Vec<Expr>,
}

/// A `#name=value` line.
#[derive(Clone, Debug, PartialEq)]
pub struct Directive {
    pub name: String,
    pub value: Expr,
}

/// A whole query: directives, then one expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub directives: Vec<Directive>,
    pub expr: Expr,
}

fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

impl BinOp {
    /// Binding power in the parser (higher binds tighter).
    pub fn binding_power(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Ge | BinOp::Lt | BinOp::Le => 4,
            BinOp::Add | BinOp::Sub => 5,
            BinOp::Mul | BinOp::Div | BinOp::Mod => 6,
            BinOp::Pow => 8,
        }
    }

    pub fn right_associative(self) -> bool {
        self == BinOp::Pow
    }
}

impl UnOp {
    /// The parser reads a unary operator's operand with this minimum binding power: `-` takes
    /// only `^` along, `not` everything down to comparisons.
    pub fn operand_power(self) -> u8 {
        match self {
            UnOp::Neg => 7,
            UnOp::Not => 4,
        }
    }
}

/// Prints `e` with the fewest parentheses that parse back to the same tree: `min` is the
/// binding power the position requires, `follow` that of the operator printed right after it
/// (0 for none). Fewest matters: every parenthesis is a nesting level the parser bounds.
fn write_expr(f: &mut fmt::Formatter<'_>, e: &Expr, min: u8, follow: u8) -> fmt::Result {
    match e {
        Expr::Binary { op, lhs, rhs } => {
            let bp = op.binding_power();
            let paren = bp < min;
            let follow = if paren { 0 } else { follow };
            if paren {
                f.write_str("(")?;
            }
            let (lmin, rmin) = if op.right_associative() {
                (bp + 1, bp)
            } else {
                (bp, bp + 1)
            };
            write_expr(f, lhs, lmin, bp)?;
            write!(f, " {} ", op.symbol())?;
            write_expr(f, rhs, rmin, follow)?;
            if paren {
                f.write_str(")")?;
            }
            Ok(())
        }
        Expr::Unary { op, expr } => {
            // A prefix operator may start any operand; only what follows can be absorbed.
            let m = op.operand_power();
            let paren = follow >= m;
            let follow = if paren { 0 } else { follow };
            if paren {
                f.write_str("(")?;
            }
            f.write_str(match op {
                UnOp::Neg => "-",
                UnOp::Not => "not ",
            })?;
            write_expr(f, expr, m, follow)?;
            if paren {
                f.write_str(")")?;
            }
            Ok(())
        }
        // Rust prints the shortest text that reads back as the same f64.
        Expr::Number(n) => write!(f, "{n}"),
        Expr::Str(s) => write_str(f, s),
        Expr::Duration(s) => write!(f, "{s}s"),
        Expr::Constant(Constant::ViewRange) => f.write_str("VIEW_RANGE"),
        Expr::Constant(Constant::ViewPeriod) => f.write_str("VIEW_PERIOD"),
        Expr::Call(c) => write!(f, "{c}"),
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(f, self, 0, 0)
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if !self.args.is_empty() || !self.kwargs.is_empty() {
            f.write_str("(")?;
            let mut first = true;
            for a in &self.args {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                write!(f, "{a}")?;
            }
            for (k, v) in &self.kwargs {
                if !first {
                    f.write_str(", ")?;
                }
                first = false;
                write!(f, "{k}={v}")?;
            }
            f.write_str(")")?;
        }
        if !self.sources.is_empty() {
            f.write_str("{")?;
            for (i, s) in self.sources.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{s}")?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.directives {
            writeln!(f, "#{}={}", d.name, d.value)?;
        }
        write!(f, "{}", self.expr)
    }
}
