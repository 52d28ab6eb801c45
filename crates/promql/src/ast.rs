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
    CountValues,
    Limitk,
    LimitRatio,
}

impl AggOp {
    pub const ALL: [AggOp; 14] = [
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
        AggOp::CountValues,
        AggOp::Limitk,
        AggOp::LimitRatio,
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
            AggOp::CountValues => "count_values",
            AggOp::Limitk => "limitk",
            AggOp::LimitRatio => "limit_ratio",
        }
    }

    pub fn from_name(name: &str) -> Option<AggOp> {
        AggOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether the operator takes a parameter before the vector (`topk(3, v)`).
    pub fn has_param(self) -> bool {
        matches!(
            self,
            AggOp::Topk
                | AggOp::Bottomk
                | AggOp::Quantile
                | AggOp::CountValues
                | AggOp::Limitk
                | AggOp::LimitRatio
        )
    }

    /// The parameter's type: a string for `count_values`, a scalar otherwise.
    pub fn param_type(self) -> ValueType {
        if self == AggOp::CountValues {
            ValueType::String
        } else {
            ValueType::Scalar
        }
    }

    /// Aggregations Prometheus 3.5 accepts only with `promql-experimental-functions`.
    pub fn is_experimental(self) -> bool {
        matches!(self, AggOp::Limitk | AggOp::LimitRatio)
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
    Atan2,
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
            BinOp::Atan2 => "atan2",
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
            BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::Atan2 => 5,
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

/// The functions of Prometheus 3.5, with their argument types.
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
    MadOverTime,
    AbsentOverTime,
    PresentOverTime,
    TsOfMaxOverTime,
    TsOfMinOverTime,
    TsOfLastOverTime,
    DoubleExponentialSmoothing,
    Abs,
    Ceil,
    Floor,
    Round,
    Clamp,
    ClampMin,
    ClampMax,
    Sgn,
    Exp,
    Sqrt,
    Ln,
    Log2,
    Log10,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Tanh,
    Asinh,
    Acosh,
    Atanh,
    Deg,
    Rad,
    Pi,
    Scalar,
    Vector,
    Time,
    Timestamp,
    DaysInMonth,
    DayOfMonth,
    DayOfWeek,
    DayOfYear,
    Hour,
    Minute,
    Month,
    Year,
    LabelReplace,
    LabelJoin,
    Sort,
    SortDesc,
    SortByLabel,
    SortByLabelDesc,
    HistogramQuantile,
    HistogramFraction,
    HistogramCount,
    HistogramSum,
    HistogramAvg,
    HistogramStddev,
    HistogramStdvar,
    Changes,
    Resets,
    Absent,
    Deriv,
    PredictLinear,
    Info,
}

use ValueType::{Matrix as M, Scalar as S, String as Str, Vector as V};

impl Func {
    pub const ALL: [Func; 80] = [
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
        Func::MadOverTime,
        Func::AbsentOverTime,
        Func::PresentOverTime,
        Func::TsOfMaxOverTime,
        Func::TsOfMinOverTime,
        Func::TsOfLastOverTime,
        Func::DoubleExponentialSmoothing,
        Func::Abs,
        Func::Ceil,
        Func::Floor,
        Func::Round,
        Func::Clamp,
        Func::ClampMin,
        Func::ClampMax,
        Func::Sgn,
        Func::Exp,
        Func::Sqrt,
        Func::Ln,
        Func::Log2,
        Func::Log10,
        Func::Sin,
        Func::Cos,
        Func::Tan,
        Func::Asin,
        Func::Acos,
        Func::Atan,
        Func::Sinh,
        Func::Cosh,
        Func::Tanh,
        Func::Asinh,
        Func::Acosh,
        Func::Atanh,
        Func::Deg,
        Func::Rad,
        Func::Pi,
        Func::Scalar,
        Func::Vector,
        Func::Time,
        Func::Timestamp,
        Func::DaysInMonth,
        Func::DayOfMonth,
        Func::DayOfWeek,
        Func::DayOfYear,
        Func::Hour,
        Func::Minute,
        Func::Month,
        Func::Year,
        Func::LabelReplace,
        Func::LabelJoin,
        Func::Sort,
        Func::SortDesc,
        Func::SortByLabel,
        Func::SortByLabelDesc,
        Func::HistogramQuantile,
        Func::HistogramFraction,
        Func::HistogramCount,
        Func::HistogramSum,
        Func::HistogramAvg,
        Func::HistogramStddev,
        Func::HistogramStdvar,
        Func::Changes,
        Func::Resets,
        Func::Absent,
        Func::Deriv,
        Func::PredictLinear,
        Func::Info,
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
            Func::MadOverTime => "mad_over_time",
            Func::AbsentOverTime => "absent_over_time",
            Func::PresentOverTime => "present_over_time",
            Func::TsOfMaxOverTime => "ts_of_max_over_time",
            Func::TsOfMinOverTime => "ts_of_min_over_time",
            Func::TsOfLastOverTime => "ts_of_last_over_time",
            Func::DoubleExponentialSmoothing => "double_exponential_smoothing",
            Func::Abs => "abs",
            Func::Ceil => "ceil",
            Func::Floor => "floor",
            Func::Round => "round",
            Func::Clamp => "clamp",
            Func::ClampMin => "clamp_min",
            Func::ClampMax => "clamp_max",
            Func::Sgn => "sgn",
            Func::Exp => "exp",
            Func::Sqrt => "sqrt",
            Func::Ln => "ln",
            Func::Log2 => "log2",
            Func::Log10 => "log10",
            Func::Sin => "sin",
            Func::Cos => "cos",
            Func::Tan => "tan",
            Func::Asin => "asin",
            Func::Acos => "acos",
            Func::Atan => "atan",
            Func::Sinh => "sinh",
            Func::Cosh => "cosh",
            Func::Tanh => "tanh",
            Func::Asinh => "asinh",
            Func::Acosh => "acosh",
            Func::Atanh => "atanh",
            Func::Deg => "deg",
            Func::Rad => "rad",
            Func::Pi => "pi",
            Func::Scalar => "scalar",
            Func::Vector => "vector",
            Func::Time => "time",
            Func::Timestamp => "timestamp",
            Func::DaysInMonth => "days_in_month",
            Func::DayOfMonth => "day_of_month",
            Func::DayOfWeek => "day_of_week",
            Func::DayOfYear => "day_of_year",
            Func::Hour => "hour",
            Func::Minute => "minute",
            Func::Month => "month",
            Func::Year => "year",
            Func::LabelReplace => "label_replace",
            Func::LabelJoin => "label_join",
            Func::Sort => "sort",
            Func::SortDesc => "sort_desc",
            Func::SortByLabel => "sort_by_label",
            Func::SortByLabelDesc => "sort_by_label_desc",
            Func::HistogramQuantile => "histogram_quantile",
            Func::HistogramFraction => "histogram_fraction",
            Func::HistogramCount => "histogram_count",
            Func::HistogramSum => "histogram_sum",
            Func::HistogramAvg => "histogram_avg",
            Func::HistogramStddev => "histogram_stddev",
            Func::HistogramStdvar => "histogram_stdvar",
            Func::Changes => "changes",
            Func::Resets => "resets",
            Func::Absent => "absent",
            Func::Deriv => "deriv",
            Func::PredictLinear => "predict_linear",
            Func::Info => "info",
        }
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Argument types; `optional` of them (at the end) may be left out; with `repeats` the
    /// last type may also be given any number of further times (Prometheus's variadic -1).
    pub fn signature(self) -> (&'static [ValueType], usize) {
        let (types, optional, _) = self.arity();
        (types, optional)
    }

    /// Argument types, how many of them (at the end) are optional, and whether the last one
    /// repeats without bound.
    pub fn arity(self) -> (&'static [ValueType], usize, bool) {
        use Func::*;
        match self {
            Rate | Increase | Irate | Delta | Idelta | AvgOverTime | MinOverTime | MaxOverTime
            | SumOverTime | CountOverTime | LastOverTime | StddevOverTime | StdvarOverTime
            | MadOverTime | AbsentOverTime | PresentOverTime | TsOfMaxOverTime
            | TsOfMinOverTime | TsOfLastOverTime | Changes | Resets | Deriv => (&[M], 0, false),
            PredictLinear => (&[M, S], 0, false),
            DoubleExponentialSmoothing => (&[M, S, S], 0, false),
            QuantileOverTime => (&[S, M], 0, false),
            Abs | Ceil | Floor | Scalar | Sgn | Exp | Sqrt | Ln | Log2 | Log10 | Sin | Cos
            | Tan | Asin | Acos | Atan | Sinh | Cosh | Tanh | Asinh | Acosh | Atanh | Deg | Rad
            | Timestamp | Sort | SortDesc | Absent | HistogramCount | HistogramSum
            | HistogramAvg | HistogramStddev | HistogramStdvar => (&[V], 0, false),
            Round => (&[V, S], 1, false),
            Clamp => (&[V, S, S], 0, false),
            ClampMin | ClampMax => (&[V, S], 0, false),
            Vector => (&[S], 0, false),
            Time | Pi => (&[], 0, false),
            DaysInMonth | DayOfMonth | DayOfWeek | DayOfYear | Hour | Minute | Month | Year => {
                (&[V], 1, false)
            }
            LabelReplace => (&[V, Str, Str, Str, Str], 0, false),
            LabelJoin => (&[V, Str, Str, Str], 1, true),
            SortByLabel | SortByLabelDesc => (&[V, Str], 1, true),
            HistogramQuantile => (&[S, V], 0, false),
            HistogramFraction => (&[S, S, V], 0, false),
            Info => (&[V, V], 1, false),
        }
    }

    pub fn return_type(self) -> ValueType {
        match self {
            Func::Scalar | Func::Time | Func::Pi => S,
            _ => V,
        }
    }

    /// Functions of a range vector (a range selector or a subquery).
    pub fn is_range(self) -> bool {
        self.arity().0.contains(&ValueType::Matrix)
    }

    /// Functions Prometheus 3.5 accepts only with `promql-experimental-functions`.
    pub fn is_experimental(self) -> bool {
        use Func::*;
        matches!(
            self,
            DoubleExponentialSmoothing
                | Info
                | MadOverTime
                | TsOfMaxOverTime
                | TsOfMinOverTime
                | TsOfLastOverTime
                | SortByLabel
                | SortByLabelDesc
        )
    }

    /// Functions whose output keeps the metric name (Prometheus drops it everywhere else).
    pub fn keeps_name(self) -> bool {
        use Func::*;
        matches!(
            self,
            LastOverTime
                | LabelReplace
                | LabelJoin
                | Sort
                | SortDesc
                | SortByLabel
                | SortByLabelDesc
                | Info
        )
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
    /// `expr[range:step]` with its own `offset`/`@`; `step_ms` 0 = the default evaluation
    /// interval.
    Subquery {
        expr: Box<Expr>,
        range_ms: i64,
        step_ms: i64,
        offset_ms: i64,
        at: Option<At>,
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
            Expr::Range { .. } | Expr::Subquery { .. } => ValueType::Matrix,
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
            | "atan2"
            | "inf"
            | "nan"
    ) || AggOp::from_name(word).is_some()
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

/// `text` as a double-quoted PromQL string (for messages: Go's `%q` look, not Rust's).
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    // Writing into a String cannot fail.
    let _ = write_string(&mut out, text);
    out
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
        write_label_name(f, l)?;
    }
    f.write_str(")")
}

/// A label name bare when it is a classic one, else quoted (Prometheus 3's UTF-8 names).
pub fn write_label_name(out: &mut impl fmt::Write, name: &str) -> fmt::Result {
    if is_label_name(name) && !is_keyword(name) {
        out.write_str(name)
    } else {
        write_string(out, name)
    }
}

fn write_at(f: &mut fmt::Formatter<'_>, offset_ms: i64, at: Option<At>) -> fmt::Result {
    if offset_ms != 0 {
        write!(f, " offset {}", format_duration(offset_ms))?;
    }
    match at {
        None => Ok(()),
        Some(At::Start) => f.write_str(" @ start()"),
        Some(At::End) => f.write_str(" @ end()"),
        Some(At::TimeMs(ms)) => write!(f, " @ {}", format_number(ms as f64 / 1000.0)),
    }
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
            write_label_name(f, &m.label)?;
            f.write_str(m.op.symbol())?;
            write_string(f, &m.value)?;
        }
        f.write_str("}")
    }

    fn write_modifiers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_at(f, self.offset_ms, self.at)
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
            Expr::Subquery {
                expr,
                range_ms,
                step_ms,
                offset_ms,
                at,
            } => {
                // Only selectors, calls and aggregations need no parentheses before `[`.
                match expr.as_ref() {
                    Expr::Selector(s) if s.offset_ms == 0 && s.at.is_none() => write!(f, "{s}")?,
                    Expr::Call { .. } | Expr::Aggregate { .. } => write!(f, "{expr}")?,
                    _ => write!(f, "({expr})")?,
                }
                write!(f, "[{}:", format_duration(*range_ms))?;
                if *step_ms != 0 {
                    f.write_str(&format_duration(*step_ms))?;
                }
                f.write_str("]")?;
                write_at(f, *offset_ms, *at)
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
