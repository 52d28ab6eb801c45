//! The syntax tree of the PromQL subset, and its printer (which the parser reads back to an
//! equal tree: `parse(print(e)) == e`).

use std::fmt;

/// What an expression evaluates to (Prometheus's four value types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    Scalar,
    Vector,
    Matrix,
    String,
}

impl ValueType {
    pub fn name(self) -> &'static str {
        match self {
            ValueType::Scalar => "scalar",
            ValueType::Vector => "instant vector",
            ValueType::Matrix => "range vector",
            ValueType::String => "string",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

impl MatchOp {
    pub fn symbol(self) -> &'static str {
        match self {
            MatchOp::Equal => "=",
            MatchOp::NotEqual => "!=",
            MatchOp::Regex => "=~",
            MatchOp::NotRegex => "!~",
        }
    }
}

/// One label matcher. For the regex operators `value` is the pattern as written; the parser has
/// checked that it compiles (fully anchored).
#[derive(Clone, Debug, PartialEq)]
pub struct Matcher {
    pub label: String,
    pub op: MatchOp,
    pub value: String,
}

/// The `@` modifier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum At {
    TimeMs(i64),
    Start,
    End,
}

/// An instant vector selector (also the inside of a range selector).
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    /// The metric name written before the braces (or as a bare string inside them).
    pub name: Option<String>,
    pub matchers: Vec<Matcher>,
    pub offset_ms: i64,
    pub at: Option<At>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggOp {
    Sum,
    Avg,
    Min,
    Max,
    Count,
    Group,
    Stddev,
    Stdvar,
    Topk,
    Bottomk,
    Quantile,
}

impl AggOp {
    pub const ALL: [AggOp; 11] = [
        AggOp::Sum,
        AggOp::Avg,
        AggOp::Min,
        AggOp::Max,
        AggOp::Count,
        AggOp::Group,
        AggOp::Stddev,
        AggOp::Stdvar,
        AggOp::Topk,
        AggOp::Bottomk,
        AggOp::Quantile,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AggOp::Sum => "sum",
            AggOp::Avg => "avg",
            AggOp::Min => "min",
            AggOp::Max => "max",
            AggOp::Count => "count",
            AggOp::Group => "group",
            AggOp::Stddev => "stddev",
            AggOp::Stdvar => "stdvar",
            AggOp::Topk => "topk",
            AggOp::Bottomk => "bottomk",
            AggOp::Quantile => "quantile",
        }
    }

    pub fn from_name(name: &str) -> Option<AggOp> {
        AggOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether the operator takes a parameter before the vector (`topk(3, v)`).
    pub fn has_param(self) -> bool {
        matches!(self, AggOp::Topk | AggOp::Bottomk | AggOp::Quantile)
    }
}

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
    Lt,
    Ge,
    Le,
    And,
    Or,
    Unless,
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
            BinOp::Lt => "<",
            BinOp::Ge => ">=",
            BinOp::Le => "<=",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Unless => "unless",
        }
    }

    /// Binding strength, higher binds tighter (Prometheus's table).
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And | BinOp::Unless => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Lt | BinOp::Ge | BinOp::Le => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div | BinOp::Mod => 5,
            BinOp::Pow => 6,
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Gt | BinOp::Lt | BinOp::Ge | BinOp::Le
        )
    }

    pub fn is_set(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Unless)
    }
}

/// Which side of a vector–vector operation may have many series per match group.
#[derive(Clone, Debug, PartialEq)]
pub enum Card {
    OneToOne,
    /// `group_left(include…)`: many on the left; the listed labels are copied from the right.
    ManyToOne(Vec<String>),
    /// `group_right(include…)`: many on the right; the listed labels come from the left.
    OneToMany(Vec<String>),
}

/// `on(…)` / `ignoring(…)` of a vector–vector operation, with its cardinality.
#[derive(Clone, Debug, PartialEq)]
pub struct Matching {
    pub on: bool,
    pub labels: Vec<String>,
    pub card: Card,
}

/// `by(…)` / `without(…)` of an aggregation.
#[derive(Clone, Debug, PartialEq)]
pub struct Grouping {
    pub without: bool,
    pub labels: Vec<String>,
}

/// The functions of the subset, with their argument types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Rate,
    Increase,
    Irate,
    Delta,
    Idelta,
    AvgOverTime,
    MinOverTime,
    MaxOverTime,
    SumOverTime,
    CountOverTime,
    LastOverTime,
    StddevOverTime,
    StdvarOverTime,
    QuantileOverTime,
    Abs,
    Ceil,
    Floor,
    Round,
    Clamp,
    ClampMin,
    ClampMax,
    Scalar,
    Vector,
    Time,
    Timestamp,
    LabelReplace,
    HistogramQuantile,
    HistogramFraction,
    HistogramCount,
    HistogramSum,
    HistogramAvg,
    Changes,
    Resets,
    Absent,
    Deriv,
    PredictLinear,
}

use ValueType::{Matrix as M, Scalar as S, String as Str, Vector as V};

impl Func {
    pub const ALL: [Func; 36] = [
        Func::Rate,
        Func::Increase,
        Func::Irate,
        Func::Delta,
        Func::Idelta,
        Func::AvgOverTime,
        Func::MinOverTime,
        Func::MaxOverTime,
        Func::SumOverTime,
        Func::CountOverTime,
        Func::LastOverTime,
        Func::StddevOverTime,
        Func::StdvarOverTime,
        Func::QuantileOverTime,
        Func::Abs,
        Func::Ceil,
        Func::Floor,
        Func::Round,
        Func::Clamp,
        Func::ClampMin,
        Func::ClampMax,
        Func::Scalar,
        Func::Vector,
        Func::Time,
        Func::Timestamp,
        Func::LabelReplace,
        Func::HistogramQuantile,
        Func::HistogramFraction,
        Func::HistogramCount,
        Func::HistogramSum,
        Func::HistogramAvg,
        Func::Changes,
        Func::Resets,
        Func::Absent,
        Func::Deriv,
        Func::PredictLinear,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Func::Rate => "rate",
            Func::Increase => "increase",
            Func::Irate => "irate",
            Func::Delta => "delta",
            Func::Idelta => "idelta",
            Func::AvgOverTime => "avg_over_time",
            Func::MinOverTime => "min_over_time",
            Func::MaxOverTime => "max_over_time",
            Func::SumOverTime => "sum_over_time",
            Func::CountOverTime => "count_over_time",
            Func::LastOverTime => "last_over_time",
            Func::StddevOverTime => "stddev_over_time",
            Func::StdvarOverTime => "stdvar_over_time",
            Func::QuantileOverTime => "quantile_over_time",
            Func::Abs => "abs",
            Func::Ceil => "ceil",
            Func::Floor => "floor",
            Func::Round => "round",
            Func::Clamp => "clamp",
            Func::ClampMin => "clamp_min",
            Func::ClampMax => "clamp_max",
            Func::Scalar => "scalar",
            Func::Vector => "vector",
            Func::Time => "time",
            Func::Timestamp => "timestamp",
            Func::LabelReplace => "label_replace",
            Func::HistogramQuantile => "histogram_quantile",
            Func::HistogramFraction => "histogram_fraction",
            Func::HistogramCount => "histogram_count",
            Func::HistogramSum => "histogram_sum",
            Func::HistogramAvg => "histogram_avg",
            Func::Changes => "changes",
            Func::Resets => "resets",
            Func::Absent => "absent",
            Func::Deriv => "deriv",
            Func::PredictLinear => "predict_linear",
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Argument types; `optional` of them (at the end) may be left out.
    pub fn signature(self) -> (&'static [ValueType], usize) {
        match self {
            Func::Rate
            | Func::Increase
            | Func::Irate
            | Func::Delta
            | Func::Idelta
            | Func::AvgOverTime
            | Func::MinOverTime
            | Func::MaxOverTime
            | Func::SumOverTime
            | Func::CountOverTime
            | Func::LastOverTime
            | Func::StddevOverTime
            | Func::StdvarOverTime
            | Func::Changes
            | Func::Resets
            | Func::Deriv => (&[M], 0),
            Func::PredictLinear => (&[M, S], 0),
            Func::QuantileOverTime => (&[S, M], 0),
            Func::Abs | Func::Ceil | Func::Floor | Func::Scalar => (&[V], 0),
            Func::Round => (&[V, S], 1),
            Func::Clamp => (&[V, S, S], 0),
            Func::ClampMin | Func::ClampMax => (&[V, S], 0),
            Func::Vector => (&[S], 0),
            Func::Time => (&[], 0),
            Func::Timestamp => (&[V], 0),
            Func::LabelReplace => (&[V, Str, Str, Str, Str], 0),
            Func::HistogramQuantile => (&[S, V], 0),
            Func::HistogramFraction => (&[S, S, V], 0),
            Func::HistogramCount | Func::HistogramSum | Func::HistogramAvg | Func::Absent => {
                (&[V], 0)
            }
        }
    }

    pub fn return_type(self) -> ValueType {
        match self {
            Func::Scalar | Func::Time => S,
            _ => V,
        }
    }

    /// Functions whose output keeps the metric name (Prometheus drops it everywhere else).
    pub fn keeps_name(self) -> bool {
        matches!(self, Func::LastOverTime | Func::LabelReplace)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Number(f64),
    String(String),
    Selector(Selector),
    /// `selector[range]` with the selector's offset/@ written after the range.
    Range {
        selector: Selector,
        range_ms: i64,
    },
    Call {
        func: Func,
        args: Vec<Expr>,
    },
    Aggregate {
        op: AggOp,
        grouping: Option<Grouping>,
        param: Option<Box<Expr>>,
        expr: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
        return_bool: bool,
        matching: Option<Matching>,
    },
    Neg(Box<Expr>),
}

impl Expr {
    pub fn value_type(&self) -> ValueType {
        match self {
            Expr::Number(_) => ValueType::Scalar,
            Expr::String(_) => ValueType::String,
            Expr::Selector(_) => ValueType::Vector,
            Expr::Range { .. } => ValueType::Matrix,
            Expr::Call { func, .. } => func.return_type(),
            Expr::Aggregate { .. } => ValueType::Vector,
            Expr::Binary { lhs, rhs, .. } => {
                if lhs.value_type() == ValueType::Scalar && rhs.value_type() == ValueType::Scalar {
                    ValueType::Scalar
                } else {
                    ValueType::Vector
                }
            }
            Expr::Neg(e) => e.value_type(),
        }
    }
}

/// Whether `name` can be written bare as a metric name.
pub fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !is_keyword(name)
}

/// Whether `name` is a valid label name.
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Words that cannot be a bare metric name (the printer quotes such names).
pub fn is_keyword(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "and"
            | "or"
            | "unless"
            | "by"
            | "without"
            | "on"
            | "ignoring"
            | "group_left"
            | "group_right"
            | "bool"
            | "offset"
            | "inf"
            | "nan"
    ) || AggOp::from_name(word).is_some()
        || Func::from_name(word).is_some()
}

/// Writes `text` as a double-quoted PromQL string.
pub fn write_string(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in text.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\t' => out.write_str("\\t")?,
            '\r' => out.write_str("\\r")?,
            c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(out, "\\u{:04x}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

/// A duration in milliseconds as PromQL writes it (`1h30m`, `250ms`); `0s` for zero.
pub fn format_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if ms < 0 {
        out.push('-');
    }
    let mut rest = ms.unsigned_abs();
    for (unit, size) in [
        ("d", 86_400_000u64),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// A float as a PromQL literal that parses back to the same value.
pub fn format_number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "Inf" } else { "-Inf" }.to_string()
    } else {
        // `{:?}` is the shortest round-tripping form, with an exponent for large magnitudes.
        format!("{value:?}")
    }
}

fn write_labels(f: &mut fmt::Formatter<'_>, labels: &[String]) -> fmt::Result {
    f.write_str("(")?;
    for (i, l) in labels.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(l)?;
    }
    f.write_str(")")
}

impl Selector {
    fn write_inner(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bare_name = self.name.as_deref().filter(|n| is_metric_name(n));
        if let Some(name) = bare_name {
            f.write_str(name)?;
        }
        let quoted_name = self.name.as_deref().filter(|_| bare_name.is_none());
        if self.matchers.is_empty() && quoted_name.is_none() {
            return Ok(());
        }
        f.write_str("{")?;
        let mut first = true;
        if let Some(name) = quoted_name {
            write_string(f, name)?;
            first = false;
        }
        for m in &self.matchers {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            f.write_str(&m.label)?;
            f.write_str(m.op.symbol())?;
            write_string(f, &m.value)?;
        }
        f.write_str("}")
    }

    fn write_modifiers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.offset_ms != 0 {
            write!(f, " offset {}", format_duration(self.offset_ms))?;
        }
        match self.at {
            None => Ok(()),
            Some(At::Start) => f.write_str(" @ start()"),
            Some(At::End) => f.write_str(" @ end()"),
            Some(At::TimeMs(ms)) => write!(f, " @ {}", format_number(ms as f64 / 1000.0)),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_inner(f)?;
        self.write_modifiers(f)
    }
}

/// Operands of a binary operator (and of unary minus) that are themselves operators, or
/// negative numbers, are parenthesised, so precedence never changes the printed tree.
fn write_operand(f: &mut fmt::Formatter<'_>, e: &Expr) -> fmt::Result {
    let wrap = match e {
        Expr::Binary { .. } | Expr::Neg(_) => true,
        Expr::Number(v) => v.is_sign_negative() && !v.is_nan(),
        _ => false,
    };
    if wrap {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Number(v) => f.write_str(&format_number(*v)),
            Expr::String(s) => write_string(f, s),
            Expr::Selector(s) => write!(f, "{s}"),
            Expr::Range { selector, range_ms } => {
                selector.write_inner(f)?;
                write!(f, "[{}]", format_duration(*range_ms))?;
                selector.write_modifiers(f)
            }
            Expr::Call { func, args } => {
                write!(f, "{}(", func.name())?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Expr::Aggregate {
                op,
                grouping,
                param,
                expr,
            } => {
                f.write_str(op.name())?;
                if let Some(g) = grouping {
                    f.write_str(if g.without { " without " } else { " by " })?;
                    write_labels(f, &g.labels)?;
                    f.write_str(" ")?;
                }
                f.write_str("(")?;
                if let Some(p) = param {
                    write!(f, "{p}, ")?;
                }
                write!(f, "{expr})")
            }
            Expr::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
            } => {
                write_operand(f, lhs)?;
                write!(f, " {}", op.symbol())?;
                if *return_bool {
                    f.write_str(" bool")?;
                }
                if let Some(m) = matching {
                    f.write_str(if m.on { " on" } else { " ignoring" })?;
                    write_labels(f, &m.labels)?;
                    match &m.card {
                        Card::OneToOne => {}
                        Card::ManyToOne(include) => {
                            f.write_str(" group_left")?;
                            write_labels(f, include)?;
                        }
                        Card::OneToMany(include) => {
                            f.write_str(" group_right")?;
                            write_labels(f, include)?;
                        }
                    }
                }
                f.write_str(" ")?;
                write_operand(f, rhs)
            }
            Expr::Neg(e) => {
                f.write_str("-")?;
                write_operand(f, e)
            }
        }
    }
}
