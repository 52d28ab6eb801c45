//! Evaluation of a [`Query`] over the store.
//!
//! Every expression evaluates to a list of [`Stream`]s over one [`Range`] (slices of the view's
//! period). Functions that look back (rolling windows, `delay`, `derivative`, regression) or
//! need whole tumbling windows evaluate their input over a widened range and trim it again, so
//! the first output slices see their full history. Histogram merges are pushed down to the
//! store: `find:histogram` reads one merged histogram per slice per series, and
//! `histogram:merge` / `group_by:merge` directly over `find:histogram` merge slice by slice
//! inside the store's fetch, never keeping every series.
//!
//! Evaluation is bounded by [`Limits`] (streams, points, wall time) and checks a cancel flag and
//! its deadline in every loop over streams or slices.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hist::{Histogram, QuantileType};
use store::{Slicing, Store, StoreError};

use crate::ast::{BinOp, Call, Constant, Expr, Query, UnOp};
use crate::parser::{parse, ParseError};

mod funcs;
pub mod remote;
pub mod stale;

pub use remote::{answer_part, Parts, Remote};

/// Bounds on one evaluation.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most streams any stage may produce (and any `find` may read).
    pub streams_max: usize,
    /// Most stream × slice values any stage may hold.
    pub points_max: u64,
    /// Wall-clock budget of the whole query.
    pub time_max_ms: u64,
    /// Most slices in the (widened) range.
    pub slices_max: u64,
    /// Work units the tag-query search may spend.
    pub find_work_max: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            streams_max: 10_000,
            points_max: 20_000_000,
            time_max_ms: 30_000,
            slices_max: 1 << 20,
            find_work_max: store::WORK_MAX_DEFAULT,
        }
    }
}

/// Why a query failed.
#[derive(Debug)]
pub enum EvalError {
    Parse(ParseError),
    /// The query is well-formed but wrong: unknown function, bad argument, kind mismatch…
    Invalid(String),
    /// A limit was exceeded (which, and its value).
    Limit(String),
    Timeout {
        time_max_ms: u64,
    },
    Cancelled,
    Store(String),
    /// A part of the data could not be read (a cluster partition no owner answered).
    Unavailable(String),
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Parse(e) => write!(f, "parse error {e}"),
            EvalError::Invalid(m) => f.write_str(m),
            EvalError::Limit(m) => write!(f, "limit exceeded: {m}"),
            EvalError::Timeout { time_max_ms } => {
                write!(f, "query took longer than {time_max_ms} ms")
            }
            EvalError::Cancelled => f.write_str("query cancelled"),
            EvalError::Store(m) => write!(f, "store: {m}"),
            EvalError::Unavailable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for EvalError {}

impl From<ParseError> for EvalError {
    fn from(e: ParseError) -> EvalError {
        EvalError::Parse(e)
    }
}

impl From<StoreError> for EvalError {
    fn from(e: StoreError) -> EvalError {
        EvalError::Store(e.to_string())
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, EvalError> {
    Err(EvalError::Invalid(msg.into()))
}

/// The slices `[start_ms, end_ms)` at `period_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start_ms: i64,
    pub end_ms: i64,
    pub period_ms: i64,
}

impl Range {
    pub fn slices(&self) -> usize {
        ((self.end_ms - self.start_ms) / self.period_ms) as usize
    }

    fn period_s(&self) -> f64 {
        self.period_ms as f64 / 1000.0
    }

    fn widen(&self, back: usize, forward: usize) -> Range {
        Range {
            start_ms: self.start_ms.saturating_sub(back as i64 * self.period_ms),
            end_ms: self.end_ms.saturating_add(forward as i64 * self.period_ms),
            period_ms: self.period_ms,
        }
    }

    fn slicing(&self) -> Slicing {
        Slicing {
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            period_ms: self.period_ms,
        }
    }
}

/// One stream's values, one per slice.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Num(Vec<Option<f64>>),
    /// `None` where nothing was recorded (an empty histogram is `None`).
    Hist(Vec<Option<Histogram>>),
}

impl Data {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            Data::Num(v) => v.len(),
            Data::Hist(v) => v.len(),
        }
    }

    fn trim(&mut self, front: usize, back: usize) {
        fn t<T>(v: &mut Vec<T>, front: usize, back: usize) {
            let keep = v.len().saturating_sub(back);
            v.truncate(keep);
            v.drain(..front.min(v.len()));
        }
        match self {
            Data::Num(v) => t(v, front, back),
            Data::Hist(v) => t(v, front, back),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// The metric name (empty for computed streams without one).
    pub name: String,
    pub tags: Vec<(String, String)>,
    pub label: String,
    pub data: Data,
}

impl Stream {
    fn num(name: &str, tags: Vec<(String, String)>, label: String, v: Vec<Option<f64>>) -> Stream {
        Stream {
            name: name.to_string(),
            tags,
            label,
            data: Data::Num(v),
        }
    }

    fn with_num(&self, v: Vec<Option<f64>>) -> Stream {
        Stream {
            name: self.name.clone(),
            tags: self.tags.clone(),
            label: self.label.clone(),
            data: Data::Num(v),
        }
    }

    fn with_hist(&self, v: Vec<Option<Histogram>>) -> Stream {
        Stream {
            name: self.name.clone(),
            tags: self.tags.clone(),
            label: self.label.clone(),
            data: Data::Hist(v),
        }
    }

    fn tag(&self, cat: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(c, _)| c == cat)
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to a query.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub range: Range,
    pub streams: Vec<Stream>,
}

/// Evaluation state: the store, the bounds and the cancel flag.
pub struct Evaluator<'a> {
    store: &'a Store,
    /// On a cluster front: the partitions every source call reads (the store then only
    /// gives the base period).
    remote: Option<Parts<'a>>,
    limits: Limits,
    deadline: Instant,
    cancel: &'a AtomicBool,
}

/// Parses and evaluates `text` over `[start_ms, end_ms)` at `period_ms`. `start_ms` is rounded
/// down and `end_ms` up to the period; `#min_period=` may raise the period.
pub fn run(
    store: &Store,
    text: &str,
    start_ms: i64,
    end_ms: i64,
    period_ms: i64,
    limits: Limits,
    cancel: &AtomicBool,
) -> Result<Output, EvalError> {
    let query = parse(text)?;
    evaluate(store, &query, start_ms, end_ms, period_ms, limits, cancel)
}

pub fn evaluate(
    store: &Store,
    query: &Query,
    start_ms: i64,
    end_ms: i64,
    period_ms: i64,
    limits: Limits,
    cancel: &AtomicBool,
) -> Result<Output, EvalError> {
    let range = (start_ms, end_ms, period_ms);
    evaluate_from(store, None, query, range, limits, cancel)
}

/// As [`evaluate`] over `(start_ms, end_ms, period_ms)`, reading the partitions of `remote`
/// when given (a cluster front) and `store` otherwise.
pub fn evaluate_from(
    store: &Store,
    remote: Option<Parts<'_>>,
    query: &Query,
    (start_ms, end_ms, period_ms): (i64, i64, i64),
    limits: Limits,
    cancel: &AtomicBool,
) -> Result<Output, EvalError> {
    let base = store.options().base_period_ms;
    let mut period = period_ms;
    for d in &query.directives {
        match (d.name.as_str(), &d.value) {
            ("min_period", Expr::Number(s) | Expr::Duration(s)) => {
                let ms = (s * 1000.0).ceil();
                if !(1.0..=1e15).contains(&ms) {
                    return invalid(format!("#min_period={s}: out of range"));
                }
                period = period.max(ms as i64);
            }
            ("lang", Expr::Str(l)) if l == "caql" => {}
            ("lang", v) => {
                return invalid(format!(
                    "#lang={v}: only \"caql\" is supported (promql has its own endpoint)"
                ))
            }
            (name, _) => {
                return invalid(format!(
                    "unknown directive #{name} (known: min_period, lang)"
                ))
            }
        }
    }
    if period <= 0 {
        return invalid("period must be positive");
    }
    // The store slices at multiples of its base period.
    let period = (period.saturating_add(base - 1) / base).saturating_mul(base);
    if end_ms < start_ms {
        return invalid("end is before start");
    }
    let start = start_ms.div_euclid(period) * period;
    let end = end_ms.div_euclid(period) * period
        + if end_ms.rem_euclid(period) == 0 {
            0
        } else {
            period
        };
    let range = Range {
        start_ms: start,
        end_ms: end,
        period_ms: period,
    };
    if range.slices() as u64 > limits.slices_max {
        return Err(EvalError::Limit(format!(
            "{} slices, more than slices_max {}",
            range.slices(),
            limits.slices_max
        )));
    }
    let ev = Evaluator::new(store, remote, limits, cancel);
    let streams = ev.eval(&query.expr, range)?;
    Ok(Output { range, streams })
}

/// A constant argument's value.
#[derive(Clone, Debug)]
enum Lit {
    Num(f64),
    Str(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Agg {
    Sum,
    Mean,
    Min,
    Max,
    Count,
    First,
    Last,
    Stddev,
    Prod,
}

fn agg_of(name: &str) -> Option<Agg> {
    Some(match name {
        "sum" => Agg::Sum,
        "mean" | "average" | "avg" => Agg::Mean,
        "min" => Agg::Min,
        "max" => Agg::Max,
        "count" => Agg::Count,
        "first" => Agg::First,
        "last" => Agg::Last,
        "stddev" => Agg::Stddev,
        "prod" => Agg::Prod,
        _ => return None,
    })
}

/// The aggregate of the present values (`count` of nothing is 0; others are null).
fn aggregate(agg: Agg, values: &[f64]) -> Option<f64> {
    if agg == Agg::Count {
        return Some(values.len() as f64);
    }
    let (&first, &last) = (values.first()?, values.last()?);
    let n = values.len() as f64;
    Some(match agg {
        Agg::Sum => values.iter().sum(),
        Agg::Mean => values.iter().sum::<f64>() / n,
        Agg::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        Agg::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Agg::First => first,
        Agg::Last => last,
        Agg::Prod => values.iter().product(),
        Agg::Stddev => {
            let mean = values.iter().sum::<f64>() / n;
            (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt()
        }
        Agg::Count => n,
    })
}

/// Percentile `p` (0–100) of values, interpolating linearly between closest ranks.
fn percentile_of(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = (p / 100.0).clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    Some(values[lo] + (values[hi] - values[lo]) * (rank - lo as f64))
}

fn binop(op: BinOp, a: f64, b: f64) -> f64 {
    let truth = |x: bool| if x { 1.0 } else { 0.0 };
    match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Mod => a % b,
        BinOp::Pow => a.powf(b),
        BinOp::Eq => truth(a == b),
        BinOp::Ne => truth(a != b),
        BinOp::Gt => truth(a > b),
        BinOp::Ge => truth(a >= b),
        BinOp::Lt => truth(a < b),
        BinOp::Le => truth(a <= b),
        BinOp::And => truth(a != 0.0 && b != 0.0),
        BinOp::Or => truth(a != 0.0 || b != 0.0),
    }
}

fn binop_named(name: &str) -> Option<BinOp> {
    Some(match name {
        "add" | "sum" => BinOp::Add,
        "sub" => BinOp::Sub,
        "mul" | "prod" => BinOp::Mul,
        "div" => BinOp::Div,
        "mod" => BinOp::Mod,
        "pow" | "exp" => BinOp::Pow,
        "eq" => BinOp::Eq,
        "ne" | "neq" => BinOp::Ne,
        "gt" => BinOp::Gt,
        "ge" | "geq" => BinOp::Ge,
        "lt" => BinOp::Lt,
        "le" | "leq" => BinOp::Le,
        "and" => BinOp::And,
        "or" => BinOp::Or,
        _ => return None,
    })
}

fn math_fn(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "exp" => f64::exp,
        "ln" | "log" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "floor" => f64::floor,
        "ceil" => f64::ceil,
        "round" => f64::round,
        "sqrt" => f64::sqrt,
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "neg" => |x: f64| -x,
        _ => return None,
    })
}

/// NaN and infinities are not values: they become null on output of every stage.
fn clean(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// Tags shared by every stream (for outputs that combine streams).
fn common_tags(streams: &[Stream]) -> Vec<(String, String)> {
    let Some(first) = streams.first() else {
        return Vec::new();
    };
    first
        .tags
        .iter()
        .filter(|t| streams.iter().all(|s| s.tags.contains(t)))
        .cloned()
        .collect()
}

fn common_name(streams: &[Stream]) -> String {
    match streams.first() {
        Some(f) if streams.iter().all(|s| s.name == f.name) => f.name.clone(),
        _ => String::new(),
    }
}

/// A histogram's statistic, `None` for an empty one.
fn hist_stat(h: &Histogram, f: impl Fn(&Histogram) -> f64) -> Option<f64> {
    if h.is_empty() || h.finite_count() == 0 {
        return None;
    }
    clean(f(h))
}

/// The `q`-quantile (type 1), NaN for an empty histogram; public so that alert conditions
/// reduce histograms with exactly `histogram:percentile`'s meaning.
pub fn quantile(h: &Histogram, q: f64) -> f64 {
    h.quantiles(&[q], QuantileType::Type1)
        .ok()
        .and_then(|v| v.first().copied())
        .unwrap_or(f64::NAN)
}

/// The share of samples at or below `t` (interpolated inside its bin), NaN when empty.
pub fn inverse_quantile(h: &Histogram, t: f64) -> f64 {
    h.inverse_quantiles(&[t])
        .ok()
        .and_then(|v| v.first().copied())
        .unwrap_or(f64::NAN)
}

/// Samples in bins lying entirely at or above `t` (libcircllhist's `count_above`).
pub fn count_above(h: &Histogram, t: f64) -> u64 {
    h.bins()
        .filter(|(b, _)| !b.is_nan() && bin_lo(*b) >= t)
        .map(|(_, c)| c)
        .sum()
}

/// Samples in bins lying entirely at or below `t`.
pub fn count_below(h: &Histogram, t: f64) -> u64 {
    h.bins()
        .filter(|(b, _)| !b.is_nan() && bin_hi(*b) <= t)
        .map(|(_, c)| c)
        .sum()
}

fn bin_lo(b: hist::Bin) -> f64 {
    if b.is_zero() {
        0.0
    } else {
        b.lower()
    }
}

fn bin_hi(b: hist::Bin) -> f64 {
    if b.is_zero() {
        0.0
    } else {
        b.upper()
    }
}

fn merge_all<'h>(hs: impl Iterator<Item = &'h Histogram>) -> Option<Histogram> {
    let mut acc: Option<Histogram> = None;
    for h in hs {
        match &mut acc {
            Some(a) => a.merge(h),
            None => acc = Some(h.clone()),
        }
    }
    acc.filter(|h| !h.is_empty())
}

/// Slices a duration covers, at least one (rounded up to whole periods).
fn window_slices(seconds: f64, range: &Range, fname: &str) -> Result<usize, EvalError> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        return invalid(format!(
            "{fname}: the window must be a positive duration, got {seconds}"
        ));
    }
    let ms = seconds * 1000.0;
    let n = (ms / range.period_ms as f64).ceil();
    if n > 1e7 {
        return invalid(format!("{fname}: window of {seconds} s is too long"));
    }
    Ok((n as usize).max(1))
}

impl<'a> Evaluator<'a> {
    fn new(
        store: &'a Store,
        remote: Option<Parts<'a>>,
        limits: Limits,
        cancel: &'a AtomicBool,
    ) -> Evaluator<'a> {
        Evaluator {
            store,
            remote,
            limits,
            deadline: Instant::now() + Duration::from_millis(limits.time_max_ms),
            cancel,
        }
    }

    fn tick(&self) -> Result<(), EvalError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(EvalError::Cancelled);
        }
        if Instant::now() >= self.deadline {
            return Err(EvalError::Timeout {
                time_max_ms: self.limits.time_max_ms,
            });
        }
        Ok(())
    }

    fn check_size(&self, streams: usize, range: &Range) -> Result<(), EvalError> {
        if streams > self.limits.streams_max {
            return Err(EvalError::Limit(format!(
                "{streams} streams, more than streams_max {}",
                self.limits.streams_max
            )));
        }
        if range.slices() as u64 > self.limits.slices_max {
            return Err(EvalError::Limit(format!(
                "{} slices, more than slices_max {}",
                range.slices(),
                self.limits.slices_max
            )));
        }
        let points = streams as u64 * range.slices() as u64;
        if points > self.limits.points_max {
            return Err(EvalError::Limit(format!(
                "{points} points ({streams} streams × {} slices), more than points_max {}",
                range.slices(),
                self.limits.points_max
            )));
        }
        Ok(())
    }

    pub fn eval(&self, expr: &Expr, range: Range) -> Result<Vec<Stream>, EvalError> {
        self.tick()?;
        let out = match expr {
            Expr::Number(n) => vec![self.constant(*n, &format!("{n}"), range)],
            Expr::Duration(s) => vec![self.constant(*s, &format!("{s}s"), range)],
            Expr::Constant(c) => {
                let v = self.constant_value(*c, &range);
                vec![self.constant(v, &format!("{expr}"), range)]
            }
            Expr::Str(s) => return invalid(format!("the string {s:?} is not a stream")),
            Expr::Unary { op, expr } => {
                let inner = self.eval(expr, range)?;
                let mut out = Vec::with_capacity(inner.len());
                for s in inner {
                    let v = self.num_of(&s, "a unary operator")?;
                    let v = v
                        .iter()
                        .map(|x| {
                            x.and_then(|x| match op {
                                UnOp::Neg => clean(-x),
                                UnOp::Not => Some(if x == 0.0 { 1.0 } else { 0.0 }),
                            })
                        })
                        .collect();
                    out.push(s.with_num(v));
                }
                out
            }
            Expr::Binary { op, lhs, rhs } => {
                let a = self.eval(lhs, range)?;
                let b = self.eval(rhs, range)?;
                self.combine(*op, &a, &b, op.symbol())?
            }
            Expr::Call(call) => self.call(call, range)?,
        };
        self.check_size(out.len(), &range)?;
        Ok(out)
    }

    fn constant_value(&self, c: Constant, range: &Range) -> f64 {
        match c {
            Constant::ViewRange => (range.end_ms - range.start_ms) as f64 / 1000.0,
            Constant::ViewPeriod => range.period_s(),
        }
    }

    fn constant(&self, v: f64, label: &str, range: Range) -> Stream {
        Stream::num(
            "",
            Vec::new(),
            label.to_string(),
            vec![Some(v); range.slices()],
        )
    }

    fn num_of<'s>(&self, s: &'s Stream, what: &str) -> Result<&'s [Option<f64>], EvalError> {
        match &s.data {
            Data::Num(v) => Ok(v),
            Data::Hist(_) => invalid(format!(
                "{what} expects numeric streams, but `{}` is a histogram stream (use a histogram:… function first)",
                s.label
            )),
        }
    }

    fn hist_of<'s>(&self, s: &'s Stream, what: &str) -> Result<&'s [Option<Histogram>], EvalError> {
        match &s.data {
            Data::Hist(v) => Ok(v),
            Data::Num(_) => invalid(format!(
                "{what} expects histogram streams, but `{}` is numeric (use find:histogram or histogram:create)",
                s.label
            )),
        }
    }

    /// `a op b`: one stream against many broadcasts; equal counts pair up in order.
    fn combine(
        &self,
        op: BinOp,
        a: &[Stream],
        b: &[Stream],
        what: &str,
    ) -> Result<Vec<Stream>, EvalError> {
        let pairs: Vec<(&Stream, &Stream, bool)> = match (a.len(), b.len()) {
            (0, _) | (_, 0) => return Ok(Vec::new()),
            (_, 1) => a.iter().map(|x| (x, &b[0], true)).collect(),
            (1, _) => b.iter().map(|y| (&a[0], y, false)).collect(),
            (n, m) if n == m => a.iter().zip(b).map(|(x, y)| (x, y, true)).collect(),
            (n, m) => {
                return invalid(format!(
                    "`{what}`: {n} streams on the left and {m} on the right (need equal counts or one side a single stream)"
                ))
            }
        };
        let mut out = Vec::with_capacity(pairs.len());
        for (x, y, label_left) in pairs {
            self.tick()?;
            let xv = self.num_of(x, &format!("`{what}`"))?;
            let yv = self.num_of(y, &format!("`{what}`"))?;
            let v = xv
                .iter()
                .zip(yv)
                .map(|(p, q)| match (p, q) {
                    (Some(p), Some(q)) => clean(binop(op, *p, *q)),
                    _ => None,
                })
                .collect();
            out.push(if label_left {
                x.with_num(v)
            } else {
                y.with_num(v)
            });
        }
        Ok(out)
    }

    fn lit(&self, e: &Expr, range: &Range) -> Result<Lit, EvalError> {
        Ok(match e {
            Expr::Number(n) | Expr::Duration(n) => Lit::Num(*n),
            Expr::Str(s) => Lit::Str(s.clone()),
            Expr::Constant(c) => Lit::Num(self.constant_value(*c, range)),
            Expr::Unary {
                op: UnOp::Neg,
                expr,
            } => match self.lit(expr, range)? {
                Lit::Num(n) => Lit::Num(-n),
                Lit::Str(_) => return invalid("cannot negate a string"),
            },
            Expr::Binary { op, lhs, rhs } => match (self.lit(lhs, range)?, self.lit(rhs, range)?) {
                (Lit::Num(a), Lit::Num(b)) => Lit::Num(binop(*op, a, b)),
                _ => return invalid(format!("`{}` needs numbers on both sides", op.symbol())),
            },
            other => return invalid(format!("expected a constant argument, found `{other}`")),
        })
    }

    fn num_arg(&self, c: &Call, i: usize, range: &Range) -> Result<f64, EvalError> {
        match c.args.get(i) {
            None => invalid(format!("{}: argument {} is missing", c.name, i + 1)),
            Some(e) => match self.lit(e, range)? {
                Lit::Num(n) if n.is_finite() => Ok(n),
                Lit::Num(n) => invalid(format!("{}: argument {} is {n}", c.name, i + 1)),
                Lit::Str(s) => {
                    // Numbers and durations given as strings ("5m") are accepted.
                    match parse(&s).ok().map(|q| q.expr) {
                        Some(Expr::Number(n) | Expr::Duration(n)) => Ok(n),
                        _ => invalid(format!(
                            "{}: argument {} should be a number, got {s:?}",
                            c.name,
                            i + 1
                        )),
                    }
                }
            },
        }
    }

    fn str_arg(&self, c: &Call, i: usize, range: &Range) -> Result<String, EvalError> {
        match c.args.get(i).map(|e| self.lit(e, range)).transpose()? {
            Some(Lit::Str(s)) => Ok(s),
            Some(Lit::Num(n)) => Ok(format!("{n}")),
            None => invalid(format!("{}: argument {} is missing", c.name, i + 1)),
        }
    }

    fn kwarg<'c>(&self, c: &'c Call, key: &str) -> Option<&'c Expr> {
        c.kwargs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The call's input: its sources, each evaluated over `range`.
    fn inputs(&self, c: &Call, range: Range) -> Result<Vec<Stream>, EvalError> {
        if c.sources.is_empty() {
            return invalid(format!(
                "{} needs input streams: pipe into it (`… | {}`) or give them in `{{…}}`",
                c.name, c.name
            ));
        }
        let mut out = Vec::new();
        for s in &c.sources {
            out.extend(self.eval(s, range)?);
            self.check_size(out.len(), &range)?;
        }
        Ok(out)
    }

    /// Inputs over a range widened by `back`/`forward` slices, for the caller to trim.
    fn inputs_widened(
        &self,
        c: &Call,
        range: Range,
        back: usize,
        forward: usize,
    ) -> Result<(Vec<Stream>, Range), EvalError> {
        let wide = range.widen(back, forward);
        if wide.slices() as u64 > self.limits.slices_max {
            return Err(EvalError::Limit(format!(
                "{}: looking back {back} slices makes {} slices, more than slices_max {}",
                c.name,
                wide.slices(),
                self.limits.slices_max
            )));
        }
        Ok((self.inputs(c, wide)?, wide))
    }

    fn call(&self, c: &Call, range: Range) -> Result<Vec<Stream>, EvalError> {
        let name = c.name.as_str();
        let (pkg, f) = match name.split_once(':') {
            Some((p, f)) => (p, f),
            None => ("", name),
        };
        match (pkg, f) {
            ("", "find") | ("find", _) => self.find(c, f_or(pkg, f, "average"), range),
            ("metric", _) => self.metric(c, f, range),
            ("histogram", _) | ("", "histogram") => {
                self.histogram_fn(c, f_or(pkg, f, "create"), range)
            }
            ("window", _) | ("rolling", _) => self.window(c, pkg == "rolling", f, range),
            ("stats", _) => self.stats(c, f, range),
            ("op", _) => self.op(c, f, range),
            ("each", _) => self.each(c, f, range),
            ("math", _) => self.math(c, f, range),
            ("group_by", _) => self.group_by(c, f, range),
            ("tag", _) => self.tag(c, f, range),
            ("filter", _) => self.filter(c, f, range),
            ("forecasting", _) => self.forecast(c, f, range),
            ("fill", "forward") => self.per_stream(c, range, |v, _| {
                let mut last = None;
                v.iter()
                    .map(|x| {
                        if x.is_some() {
                            last = *x;
                        }
                        last
                    })
                    .collect()
            }),
            ("", _) => self.plain(c, f, range),
            _ => invalid(format!("unknown function `{name}`")),
        }
    }

    fn per_stream(
        &self,
        c: &Call,
        range: Range,
        f: impl Fn(&[Option<f64>], &Range) -> Vec<Option<f64>>,
    ) -> Result<Vec<Stream>, EvalError> {
        let inputs = self.inputs(c, range)?;
        let mut out = Vec::with_capacity(inputs.len());
        for s in &inputs {
            self.tick()?;
            let v = self.num_of(s, &c.name)?;
            out.push(s.with_num(f(v, &range)));
        }
        Ok(out)
    }

    /// Numeric per-stream functions that look `back` slices into the past: evaluated over the
    /// widened range, then trimmed to `range`.
    fn per_stream_back(
        &self,
        c: &Call,
        range: Range,
        back: usize,
        f: impl Fn(&[Option<f64>], &Range) -> Vec<Option<f64>>,
    ) -> Result<Vec<Stream>, EvalError> {
        let (inputs, wide) = self.inputs_widened(c, range, back, 0)?;
        let mut out = Vec::with_capacity(inputs.len());
        for s in &inputs {
            self.tick()?;
            let v = self.num_of(s, &c.name)?;
            let mut d = Data::Num(f(v, &wide));
            d.trim(back, 0);
            out.push(Stream {
                data: d,
                ..s.clone()
            });
        }
        Ok(out)
    }

    fn plain(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        match f {
            "integrate" => self.per_stream(c, range, |v, r| {
                let p = r.period_s();
                let mut acc = 0.0;
                v.iter()
                    .map(|x| {
                        acc += x.unwrap_or(0.0) * p;
                        Some(acc)
                    })
                    .collect()
            }),
            "derivative" | "counter" | "diff" => {
                let counter = f == "counter";
                let per_second = f != "diff";
                self.per_stream_back(c, range, 1, move |v, r| {
                    let p = if per_second { r.period_s() } else { 1.0 };
                    let mut out = vec![None; v.len()];
                    for i in 1..v.len() {
                        if let (Some(a), Some(b)) = (v[i - 1], v[i]) {
                            // A counter that drops was reset: it counted `b` since the reset.
                            let d = if counter && b < a { b } else { b - a };
                            out[i] = clean(d / p);
                        }
                    }
                    out
                })
            }
            "delay" => {
                let n = window_slices(self.num_arg(c, 0, &range)?, &range, "delay")?;
                self.per_stream_back(c, range, n, move |v, _| {
                    (0..v.len())
                        .map(|i| if i >= n { v[i - n] } else { None })
                        .collect()
                })
            }
            "fill" => {
                let x = self.num_arg(c, 0, &range)?;
                self.per_stream(c, range, move |v, _| {
                    v.iter().map(|y| Some(y.unwrap_or(x))).collect()
                })
            }
            "top" | "bottom" => {
                let k = self.num_arg(c, 0, &range)?;
                if k.is_nan() || k < 0.0 {
                    return invalid(format!("{f}: k must be ≥ 0, got {k}"));
                }
                let mut ranked: Vec<(f64, Stream)> = Vec::new();
                for s in self.inputs(c, range)? {
                    let v = self.num_of(&s, f)?;
                    let present: Vec<f64> = v.iter().flatten().copied().collect();
                    let score = aggregate(Agg::Mean, &present).unwrap_or(f64::NAN);
                    ranked.push((score, s));
                }
                // Streams without values rank last either way.
                let top = f == "top";
                ranked.sort_by(|a, b| match (a.0.is_nan(), b.0.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if top => b.0.total_cmp(&a.0),
                    _ => a.0.total_cmp(&b.0),
                });
                ranked.truncate(k as usize);
                Ok(ranked.into_iter().map(|(_, s)| s).collect())
            }
            "label" => {
                let fmt = self.str_arg(c, 0, &range)?;
                let mut out = self.inputs(c, range)?;
                for s in &mut out {
                    s.label = format_label(&fmt, s);
                }
                Ok(out)
            }
            "coalesce" => {
                let inputs = self.inputs(c, range)?;
                let mut v = vec![None; range.slices()];
                for s in &inputs {
                    let x = self.num_of(s, f)?;
                    for (o, y) in v.iter_mut().zip(x) {
                        if o.is_none() {
                            *o = *y;
                        }
                    }
                }
                Ok(vec![Stream::num(
                    &common_name(&inputs),
                    common_tags(&inputs),
                    "coalesce".into(),
                    v,
                )])
            }
            "if" => {
                if c.sources.len() != 3 {
                    return invalid(format!(
                        "if takes three sources {{condition, then, else}}, got {}",
                        c.sources.len()
                    ));
                }
                let parts: Vec<Vec<Stream>> = c
                    .sources
                    .iter()
                    .map(|s| self.eval(s, range))
                    .collect::<Result<_, _>>()?;
                let one = |i: usize| -> Result<&[Option<f64>], EvalError> {
                    match parts[i].as_slice() {
                        [s] => self.num_of(s, "if"),
                        other => invalid(format!(
                            "if: source {} has {} streams, expected one",
                            i + 1,
                            other.len()
                        )),
                    }
                };
                let (cond, a, b) = (one(0)?, one(1)?, one(2)?);
                let v = (0..range.slices())
                    .map(|i| match cond[i] {
                        Some(x) if x != 0.0 => a[i],
                        Some(_) => b[i],
                        None => None,
                    })
                    .collect();
                Ok(vec![parts[1][0].with_num(v)])
            }
            _ => invalid(format!("unknown function `{}`", c.name)),
        }
    }
}

fn f_or<'a>(pkg: &str, f: &'a str, default: &'a str) -> &'a str {
    if pkg.is_empty() {
        default
    } else {
        f
    }
}

/// `%n` name, `%cn` name with tags, `%tv{cat}` a tag's value, `%l` the current label, `%%`.
pub fn format_label(fmt: &str, s: &Stream) -> String {
    let mut out = String::new();
    let mut rest = fmt;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        if let Some(r) = rest.strip_prefix("tv{") {
            if let Some(end) = r.find('}') {
                out.push_str(s.tag(&r[..end]).unwrap_or(""));
                rest = &r[end + 1..];
                continue;
            }
        }
        if let Some(r) = rest.strip_prefix("cn") {
            out.push_str(&s.name);
            if !s.tags.is_empty() {
                out.push_str("|ST[");
                let tags: Vec<String> = s.tags.iter().map(|(c, v)| format!("{c}:{v}")).collect();
                out.push_str(&tags.join(","));
                out.push(']');
            }
            rest = r;
        } else if let Some(r) = rest.strip_prefix('n') {
            out.push_str(&s.name);
            rest = r;
        } else if let Some(r) = rest.strip_prefix('l') {
            out.push_str(&s.label);
            rest = r;
        } else if let Some(r) = rest.strip_prefix('%') {
            out.push('%');
            rest = r;
        } else {
            out.push('%');
        }
    }
    out.push_str(rest);
    out
}
