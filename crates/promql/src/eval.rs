//! Evaluation over the store, one step grid at a time, bounded by [`Limits`].
//!
//! Every node evaluates to values at all steps of the query at once (an instant query is a
//! range query of one step), so each selector reads its series once for the whole query.
//! Numeric windows are Prometheus's: a bare selector takes the newest sample in
//! `(t − lookback, t]`, a range selector `[r]` the samples in `(t − r, t]`. Histogram streams are
//! stored per base period; a window over them is the merge of the periods whose start lies in
//! `[t − r, t)` (`README.md`). Where the steps and the range are multiples of the base period
//! the store merges per slice (`View::histograms`) and windows slide over the slices, adding
//! the slice that enters and subtracting the one that leaves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hist::Histogram;
use store::{Kind, Pattern, SeriesId, Slicing, Store, TagQuery, Term, View};

use crate::ast::{AggOp, At, BinOp, Card, Expr, Func, MatchOp, Matcher, Matching, Selector};
use crate::parser::{anchored_regex, matcher_matches_empty};

mod aggregate;
mod float;
mod funcs;
pub mod remote;

/// How many of a series' samples are at or before a bound, for bounds that mostly grow (a
/// query's evaluation times ascend): the count moves on from the last answer, where a binary
/// search per step and series was a fifth of a range query's CPU; a bound below the last one is
/// searched for.
#[derive(Clone, Copy)]
struct Upto {
    n: usize,
    bound: i64,
}

impl Upto {
    fn new() -> Upto {
        Upto {
            n: 0,
            bound: i64::MIN,
        }
    }

    #[inline]
    fn at(&mut self, raw: &[(i64, f64)], bound: i64) -> usize {
        if bound < self.bound {
            self.n = raw.partition_point(|&(ts, _)| ts <= bound);
        } else {
            while self.n < raw.len() && raw[self.n].0 <= bound {
                self.n += 1;
            }
        }
        self.bound = bound;
        debug_assert_eq!(self.n, raw.partition_point(|&(ts, _)| ts <= bound));
        self.n
    }
}

pub use remote::{answer_partial, answer_select, Remote, Source};

/// Prometheus's default global evaluation interval: the step of `x[5m:]`.
pub const SUBQUERY_STEP_MS_DEFAULT: i64 = 60_000;
/// Prometheus's stale marker: the NaN with this bit pattern ends a series.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;
/// Prometheus's default lookback for bare selectors.
pub const LOOKBACK_MS_DEFAULT: i64 = 5 * 60_000;
/// Prometheus's bound on points per series in a range query.
pub const STEPS_MAX_DEFAULT: usize = 11_000;
pub const SERIES_PER_SELECTOR_MAX_DEFAULT: usize = 10_000;
/// Samples (raw samples and histogram periods read, plus points produced) per query.
pub const SAMPLES_PER_QUERY_MAX_DEFAULT: u64 = 20_000_000;
pub const TIMEOUT_MS_DEFAULT: u64 = 120_000;
/// Budget of the index search behind one selector (the store's unit of work).
pub const FIND_WORK_MAX: u64 = 10_000_000;
/// Most slices the evaluator asks the store to merge for one series (else raw periods).
pub const PUSHDOWN_SLICES_MAX: i64 = 1 << 20;
/// Query times accepted, in milliseconds either side of the epoch (about 3 million years): every
/// window arithmetic on them stays far from overflow.
pub const TIME_MS_MAX: i64 = 1 << 56;
/// Deadline checks happen every this many steps inside long per-series loops.
const DEADLINE_CHECK_STEPS: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub series_per_selector_max: usize,
    pub samples_per_query_max: u64,
    pub steps_max: usize,
    pub timeout_ms: u64,
    pub lookback_ms: i64,
    /// The step of a subquery written without one (`x[5m:]`): Prometheus's global evaluation
    /// interval, 1 m by default.
    pub subquery_step_ms: i64,
    /// Accept the functions Prometheus enables with `promql-experimental-functions`.
    pub experimental_functions: bool,
    /// What each sample of the answer costs, in samples of `samples_per_query_max`, on top of
    /// what evaluation charged (0: answers cost nothing more). A server that writes answers as
    /// JSON sets it to what a point of text costs beside a sample held while evaluating.
    pub answer_sample_cost_samples: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            series_per_selector_max: SERIES_PER_SELECTOR_MAX_DEFAULT,
            samples_per_query_max: SAMPLES_PER_QUERY_MAX_DEFAULT,
            steps_max: STEPS_MAX_DEFAULT,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            lookback_ms: LOOKBACK_MS_DEFAULT,
            subquery_step_ms: SUBQUERY_STEP_MS_DEFAULT,
            experimental_functions: false,
            answer_sample_cost_samples: 0,
        }
    }
}

/// Errors in the three classes the Prometheus API reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    BadData(String),
    Execution(String),
    Timeout(String),
    /// A part of the data could not be read (a cluster partition no owner answered): 503.
    Unavailable(String),
}

impl EvalError {
    pub fn error_type(&self) -> &'static str {
        match self {
            EvalError::BadData(_) => "bad_data",
            EvalError::Execution(_) => "execution",
            EvalError::Timeout(_) => "timeout",
            EvalError::Unavailable(_) => "unavailable",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            EvalError::BadData(m)
            | EvalError::Execution(m)
            | EvalError::Timeout(m)
            | EvalError::Unavailable(m) => m,
        }
    }
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error_type(), self.message())
    }
}

impl std::error::Error for EvalError {}

fn store_err(e: store::StoreError) -> EvalError {
    EvalError::Execution(format!("reading the store: {e}"))
}

/// Labels sorted by name.
pub type Labels = Vec<(String, String)>;

/// A histogram with every count multiplied by `scale` (rates divide by the window's seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct HistSample {
    pub hist: Arc<Histogram>,
    pub scale: f64,
}

impl HistSample {
    pub fn count(&self) -> f64 {
        self.hist.sample_count() as f64 * self.scale
    }

    /// Σ bin midpoint × count; NaN when a sample is in the NaN bin (NaN, ±inf, |x| ≥ 1e128),
    /// as a Prometheus histogram's sum would be.
    pub fn sum(&self) -> f64 {
        if self.hist.nan_count() > 0 {
            return f64::NAN;
        }
        self.hist.sum() * self.scale
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Sample {
    Float(f64),
    Hist(HistSample),
}

/// One series of an instant vector at every step (`None` where it has no value).
#[derive(Clone, Debug)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<Option<Sample>>,
}

/// One series of raw samples (an instant query of a range selector), or of a range query.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeSeries {
    pub labels: Labels,
    pub floats: Vec<(i64, f64)>,
    pub hists: Vec<(i64, HistSample)>,
}

/// The result of a query, shaped for the API.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Scalar {
        t_ms: i64,
        value: f64,
    },
    String {
        t_ms: i64,
        value: String,
    },
    Vector {
        t_ms: i64,
        samples: Vec<(Labels, Sample)>,
    },
    Matrix(Vec<RangeSeries>),
}

impl Output {
    /// Samples in the answer, a histogram counted once per bin (its JSON writes each bucket).
    pub fn sample_count(&self) -> u64 {
        let hist = |h: &HistSample| 1 + h.hist.bin_count() as u64;
        let sample = |s: &Sample| match s {
            Sample::Float(_) => 1,
            Sample::Hist(h) => hist(h),
        };
        match self {
            Output::Scalar { .. } | Output::String { .. } => 1,
            Output::Vector { samples, .. } => samples.iter().map(|(_, s)| sample(s)).sum(),
            Output::Matrix(series) => matrix_sample_count(series),
        }
    }
}

/// [`Output::sample_count`] of a range answer's series.
pub fn matrix_sample_count(series: &[RangeSeries]) -> u64 {
    series
        .iter()
        .map(|r| {
            let hists: u64 = r
                .hists
                .iter()
                .map(|(_, h)| 1 + h.hist.bin_count() as u64)
                .sum();
            r.floats.len() as u64 + hists
        })
        .sum()
}

/// Warnings and infos Prometheus returns beside a result (`warnings`, `infos` in the JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations {
    pub warnings: Vec<String>,
    pub infos: Vec<String>,
}

/// Most distinct annotations of each kind one query keeps.
pub const ANNOTATIONS_MAX: usize = 64;

impl Annotations {
    pub fn warn(&mut self, message: String) {
        push_bounded(&mut self.warnings, message);
    }

    pub fn info(&mut self, message: String) {
        push_bounded(&mut self.infos, message);
    }
}

fn push_bounded(list: &mut Vec<String>, message: String) {
    if list.len() < ANNOTATIONS_MAX && !list.contains(&message) {
        list.push(message);
    }
}

enum Value {
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
    String(String),
    /// A range vector (only at the top of an instant query): raw samples per series.
    Matrix(Vec<RangeSeries>),
}

fn parse_for(query: &str, limits: &Limits) -> Result<Expr, EvalError> {
    let options = crate::parser::ParseOptions {
        experimental_functions: limits.experimental_functions,
    };
    crate::parser::parse_with(query, options).map_err(|e| EvalError::BadData(e.to_string()))
}

/// Evaluates `query` at `t_ms`.
pub fn instant(store: &Store, query: &str, t_ms: i64, limits: Limits) -> Result<Output, EvalError> {
    instant_annotated(store, query, t_ms, limits).map(|(out, _)| out)
}

/// Evaluates `query` at `t_ms`, with the warnings and infos Prometheus would give.
pub fn instant_annotated(
    store: &Store,
    query: &str,
    t_ms: i64,
    limits: Limits,
) -> Result<(Output, Annotations), EvalError> {
    instant_from(Source::Local(store), query, t_ms, limits)
}

/// As [`instant_annotated`], over the series of `source`.
pub fn instant_from(
    source: Source<'_>,
    query: &str,
    t_ms: i64,
    limits: Limits,
) -> Result<(Output, Annotations), EvalError> {
    check_time(t_ms, "time")?;
    let expr = parse_for(query, &limits)?;
    let mut ctx = Ctx::new(source, t_ms, t_ms, 1, limits)?;
    ctx.prefetch(&expr)?;
    let out = match ctx.eval(&expr)? {
        Value::Scalar(v) => Output::Scalar { t_ms, value: v[0] },
        Value::String(s) => Output::String { t_ms, value: s },
        Value::Matrix(m) => Output::Matrix(m),
        Value::Vector(series) => {
            // `sort*` at the top decide the order; everything else is sorted by labels.
            let series = dedupe(series, !is_sort_call(&expr))?;
            Output::Vector {
                t_ms,
                samples: series
                    .into_iter()
                    .filter_map(|mut s| s.points[0].take().map(|p| (s.labels, p)))
                    .collect(),
            }
        }
    };
    ctx.charge_answer(&out)?;
    Ok((out, ctx.notes))
}

fn is_sort_call(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Call {
            func: Func::Sort | Func::SortDesc | Func::SortByLabel | Func::SortByLabelDesc,
            ..
        }
    )
}

/// Evaluates `query` at `start_ms, start_ms + step_ms, … ≤ end_ms`.
pub fn range(
    store: &Store,
    query: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    limits: Limits,
) -> Result<Output, EvalError> {
    range_annotated(store, query, start_ms, end_ms, step_ms, limits).map(|(out, _)| out)
}

/// As [`range`], with the warnings and infos Prometheus would give.
pub fn range_annotated(
    store: &Store,
    query: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    limits: Limits,
) -> Result<(Output, Annotations), EvalError> {
    range_from(
        Source::Local(store),
        query,
        start_ms,
        end_ms,
        step_ms,
        limits,
    )
}

/// As [`range_annotated`], over the series of `source`.
pub fn range_from(
    source: Source<'_>,
    query: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    limits: Limits,
) -> Result<(Output, Annotations), EvalError> {
    let expr = range_query(query, start_ms, end_ms, step_ms, &limits)?;
    range_of(source, &expr, start_ms, end_ms, step_ms, limits)
}

/// A range query's expression, its parameters checked as Prometheus checks them.
pub fn range_query(
    query: &str,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    limits: &Limits,
) -> Result<Expr, EvalError> {
    if step_ms <= 0 {
        return Err(EvalError::BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer"
                .into(),
        ));
    }
    if end_ms < start_ms {
        return Err(EvalError::BadData(
            "end timestamp must not be before start time".into(),
        ));
    }
    let steps = (end_ms as i128 - start_ms as i128) / step_ms as i128 + 1;
    if steps > limits.steps_max as i128 {
        return Err(EvalError::BadData(format!(
            "exceeded maximum resolution of {} points per timeseries. Try decreasing the query resolution (?step=XX)",
            limits.steps_max
        )));
    }
    let expr = parse_for(query, limits)?;
    if expr.value_type() == crate::ast::ValueType::Matrix {
        return Err(EvalError::BadData(
            "invalid expression type \"range vector\" for range query, must be Scalar or instant Vector"
                .into(),
        ));
    }
    Ok(expr)
}

/// Evaluates a [`range_query`]'s expression over `[start_ms, end_ms]`.
pub fn range_of(
    source: Source<'_>,
    expr: &Expr,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    limits: Limits,
) -> Result<(Output, Annotations), EvalError> {
    let mut ctx = Ctx::new(source, start_ms, end_ms, step_ms, limits)?;
    ctx.prefetch(expr)?;
    let grid = ctx.grid;
    let out = match ctx.eval(expr)? {
        Value::Scalar(v) => {
            let points = v.into_iter().map(|v| Some(Sample::Float(v))).collect();
            Output::Matrix(vec![to_range(&grid, Vec::new(), points)])
        }
        Value::String(_) | Value::Matrix(_) => {
            return Err(EvalError::BadData(
                "invalid expression type for range query, must be Scalar or instant Vector".into(),
            ))
        }
        Value::Vector(series) => {
            let mut out: Vec<RangeSeries> = dedupe(series, true)?
                .into_iter()
                .map(|s| to_range(&grid, s.labels, s.points))
                .filter(|s| !s.floats.is_empty() || !s.hists.is_empty())
                .collect();
            out.sort_by(|a, b| a.labels.cmp(&b.labels));
            Output::Matrix(out)
        }
    };
    ctx.charge_answer(&out)?;
    Ok((out, ctx.notes))
}

fn to_range(grid: &Grid, labels: Labels, points: Vec<Option<Sample>>) -> RangeSeries {
    let mut out = RangeSeries {
        labels,
        floats: Vec::new(),
        hists: Vec::new(),
    };
    for (i, p) in points.into_iter().enumerate() {
        match p {
            Some(Sample::Float(v)) => out.floats.push((grid.time(i), v)),
            Some(Sample::Hist(h)) => out.hists.push((grid.time(i), h)),
            None => {}
        }
    }
    out
}

fn check_time(t_ms: i64, what: &str) -> Result<(), EvalError> {
    if t_ms.abs() > TIME_MS_MAX {
        return Err(EvalError::BadData(format!(
            "{what} {t_ms} ms is out of range"
        )));
    }
    Ok(())
}

/// Prometheus's error for a vector whose series share a label set.
fn same_labelset() -> EvalError {
    EvalError::Execution("vector cannot contain metrics with the same labelset".into())
}

/// Two series with one label set may exist (after dropping names) if their steps do not
/// overlap: they become one series, as Prometheus's step-by-step evaluation makes them.
/// Prometheus rejects the query if they overlap. Sorted by labels when `sort`.
fn dedupe(series: Vec<Series>, sort: bool) -> Result<Vec<Series>, EvalError> {
    let mut by_labels: HashMap<Labels, usize> = HashMap::new();
    let mut out: Vec<Series> = Vec::new();
    for s in series {
        if s.points.iter().all(Option::is_none) {
            continue;
        }
        match by_labels.get(&s.labels) {
            Some(&i) => {
                let target = &mut out[i];
                for (slot, p) in target.points.iter_mut().zip(s.points) {
                    if p.is_some() {
                        if slot.is_some() {
                            return Err(same_labelset());
                        }
                        *slot = p;
                    }
                }
            }
            None => {
                by_labels.insert(s.labels.clone(), out.len());
                out.push(s);
            }
        }
    }
    if sort {
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
    }
    Ok(out)
}

/// Prometheus's check on the output of a range-vector function: no two series (with any
/// value) may share a label set, whatever their steps.
fn check_unique(series: &[Series]) -> Result<(), EvalError> {
    let mut seen: std::collections::HashSet<&Labels> = std::collections::HashSet::new();
    for s in series
        .iter()
        .filter(|s| s.points.iter().any(Option::is_some))
    {
        if !seen.insert(&s.labels) {
            return Err(same_labelset());
        }
    }
    Ok(())
}

pub fn format_labels(labels: &Labels) -> String {
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", crate::ast::quote(v)))
        .collect();
    format!("{{{}}}", inner.join(", "))
}

fn drop_name(mut labels: Labels) -> Labels {
    labels.retain(|(k, _)| k != "__name__");
    labels
}

pub fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// The step grid an expression is evaluated on: the query's, or a subquery's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Grid {
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    steps: usize,
}

impl Grid {
    fn time(&self, i: usize) -> i64 {
        self.start_ms + i as i64 * self.step_ms
    }
}

/// The grid of a subquery `[range:step]` read at `times`: Prometheus's, from the first
/// multiple of the step after `min(times) − range` to `max(times)` (none if that is empty).
fn subquery_grid(times: &[i64], range_ms: i64, step_ms: i64) -> Grid {
    let (lo, hi) = Ctx::span(times);
    let from = lo - range_ms;
    // Go's integer division truncates toward zero, as Rust's does.
    let mut start = step_ms * (from / step_ms);
    if start <= from {
        start += step_ms;
    }
    let steps = if times.is_empty() || start > hi {
        0
    } else {
        ((hi - start) / step_ms + 1) as usize
    };
    Grid {
        start_ms: start,
        end_ms: hi,
        step_ms,
        steps,
    }
}

struct Ctx<'a> {
    source: Source<'a>,
    /// The grid being evaluated (the query's, or a subquery's while it is evaluated).
    grid: Grid,
    /// The query's own start and end (`@ start()`, `@ end()` everywhere, as Prometheus).
    query_start_ms: i64,
    query_end_ms: i64,
    limits: Limits,
    deadline: Instant,
    samples: u64,
    /// Series and data of every selector of the query, read under one store view before
    /// evaluation (`prefetch`), by the selector node's address.
    prefetched: HashMap<usize, SelectedData>,
    notes: Annotations,
}

/// A selector of the query and what evaluating it will read.
pub(crate) struct Planned<'e> {
    sel: &'e Selector,
    /// The range, or the lookback of a bare selector.
    range_ms: i64,
    bare: bool,
    times: Vec<i64>,
    step_ms: i64,
}

/// `target_info`, the info series `info(v)` joins by default (one selector for every query).
fn target_info_selector() -> &'static Selector {
    static SELECTOR: std::sync::OnceLock<Selector> = std::sync::OnceLock::new();
    SELECTOR.get_or_init(|| Selector {
        name: Some("target_info".into()),
        matchers: Vec::new(),
        offset_ms: 0,
        at: None,
    })
}

/// A range-vector argument: each series' data, the times its windows end at, the range.
type MatrixArg = (Vec<(Labels, Raw)>, Vec<i64>, i64);

/// What `Ctx::read` got for one series.
pub(crate) enum Raw {
    /// Samples ascending; stale markers are kept only for bare selectors.
    Numeric(Vec<(i64, f64)>),
    /// Merged histograms by start (per base period or per slice), ascending.
    Hist(Vec<(i64, Histogram)>),
    None,
}

/// A selector's series and what was read of each.
pub(crate) type FoundData = (Vec<Found>, Vec<Raw>);
/// A selector's series by labels and what was read of each.
pub(crate) type SelectedData = (Vec<Labels>, Vec<Raw>);

/// One series a selector matched.
pub(crate) struct Found {
    id: SeriesId,
    kind: Kind,
    labels: Labels,
}

impl<'a> Ctx<'a> {
    fn new(
        source: Source<'a>,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        limits: Limits,
    ) -> Result<Ctx<'a>, EvalError> {
        let steps = ((end_ms as i128 - start_ms as i128) / step_ms as i128 + 1).max(1) as usize;
        Ok(Ctx {
            source,
            grid: Grid {
                start_ms,
                end_ms,
                step_ms,
                steps,
            },
            query_start_ms: start_ms,
            query_end_ms: end_ms,
            limits,
            deadline: Instant::now() + Duration::from_millis(limits.timeout_ms),
            samples: 0,
            prefetched: HashMap::new(),
            notes: Annotations::default(),
        })
    }

    fn time(&self, i: usize) -> i64 {
        self.grid.time(i)
    }

    fn check_deadline(&self) -> Result<(), EvalError> {
        if Instant::now() >= self.deadline {
            return Err(EvalError::Timeout(format!(
                "query timed out in expression evaluation (timeout {} ms)",
                self.limits.timeout_ms
            )));
        }
        Ok(())
    }

    fn charge(&mut self, samples: u64) -> Result<(), EvalError> {
        self.samples = self.samples.saturating_add(samples);
        if self.samples > self.limits.samples_per_query_max {
            return Err(EvalError::Execution(format!(
                "query processing would load too many samples into memory in query execution (limit {})",
                self.limits.samples_per_query_max
            )));
        }
        Ok(())
    }

    /// Charges the answer's samples at `answer_sample_cost_samples` each: a query may load
    /// many samples to answer few, or answer every sample it loaded, and the second costs more.
    fn charge_answer(&mut self, out: &Output) -> Result<(), EvalError> {
        let cost = self.limits.answer_sample_cost_samples;
        if cost == 0 {
            return Ok(());
        }
        let samples = out.sample_count();
        self.samples = self.samples.saturating_add(samples.saturating_mul(cost));
        if self.samples > self.limits.samples_per_query_max {
            return Err(EvalError::Execution(format!(
                "query processing would load too many samples into memory in query execution \
                 (limit {}; its answer alone holds {samples} samples, each counted {cost} times)",
                self.limits.samples_per_query_max
            )));
        }
        Ok(())
    }

    /// The time each step of `grid` reads at after `@` and `offset`.
    fn times_on(&self, grid: &Grid, at: Option<At>, offset_ms: i64) -> Vec<i64> {
        (0..grid.steps)
            .map(|i| {
                let t = match at {
                    None => grid.time(i),
                    Some(At::Start) => self.query_start_ms,
                    Some(At::End) => self.query_end_ms,
                    Some(At::TimeMs(ms)) => ms,
                };
                t.saturating_sub(offset_ms)
            })
            .collect()
    }

    /// The time each step of a selector reads at, after `@` and `offset`.
    fn eval_times(&self, sel: &Selector) -> Vec<i64> {
        self.times_on(&self.grid, sel.at, sel.offset_ms)
    }

    fn new_points(&mut self) -> Result<Vec<Option<Sample>>, EvalError> {
        self.charge(self.grid.steps as u64)?;
        Ok(vec![None; self.grid.steps])
    }

    fn find(&mut self, sel: &Selector, from_ms: i64, to_ms: i64) -> Result<Vec<Found>, EvalError> {
        self.find_bounded(sel, from_ms, to_ms, false)
    }

    /// The series a selector matches, in label order. Past `series_per_selector_max` matches:
    /// an error, or with `truncate` the first ones found (listings with a `limit`).
    fn find_bounded(
        &mut self,
        sel: &Selector,
        from_ms: i64,
        to_ms: i64,
        truncate: bool,
    ) -> Result<Vec<Found>, EvalError> {
        self.check_deadline()?;
        let mut matchers: Vec<(Matcher, Option<regex::Regex>)> = Vec::new();
        if let Some(name) = &sel.name {
            matchers.push((
                Matcher {
                    label: "__name__".into(),
                    op: MatchOp::Equal,
                    value: name.clone(),
                },
                None,
            ));
        }
        for m in &sel.matchers {
            let re = match m.op {
                MatchOp::Regex | MatchOp::NotRegex => Some(
                    anchored_regex(&m.value)
                        .map_err(|e| EvalError::BadData(format!("invalid regex: {e}")))?,
                ),
                _ => None,
            };
            let label = real_label_name(&m.label);
            matchers.push((Matcher { label, ..m.clone() }, re));
        }
        let mut terms: Vec<TagQuery> = matchers
            .iter()
            .map(|(m, _)| matcher_query(m))
            .collect::<Result<_, _>>()?;
        let store = self.local()?;
        let base = store.view().map_err(store_err)?.base_period_ms();
        terms.push(TagQuery::Term(Term::Activity {
            start_ms: from_ms.saturating_sub(base),
            end_ms: to_ms.saturating_add(base),
        }));
        let ids = store
            .find(&TagQuery::And(terms), FIND_WORK_MAX)
            .map_err(|e| EvalError::Execution(format!("series search: {e}")))?;
        let snapshot = store
            .index()
            .snapshot()
            .map_err(|e| EvalError::Execution(format!("series index: {e}")))?;
        let mut out = Vec::new();
        for (n, id) in ids.into_iter().enumerate() {
            if n % DEADLINE_CHECK_STEPS == 0 {
                self.check_deadline()?;
            }
            let Some(info) = snapshot
                .series(id)
                .map_err(|e| EvalError::Execution(format!("series index: {e}")))?
            else {
                continue;
            };
            if info.kind == Kind::Text {
                continue;
            }
            // Keys that repeat a tag category have no Prometheus label view.
            let Some(labels) = prom_labels(&info.key) else {
                continue;
            };
            if !matchers
                .iter()
                .all(|(m, re)| label_matches(&labels, m, re.as_ref()))
            {
                continue;
            }
            if out.len() >= self.limits.series_per_selector_max {
                if truncate {
                    break;
                }
                return Err(EvalError::Execution(format!(
                    "selector {sel} matches more than {} series",
                    self.limits.series_per_selector_max
                )));
            }
            out.push(Found {
                id,
                kind: info.kind,
                labels,
            });
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// The local store; a remote source reads through `remote::select` only.
    fn local(&self) -> Result<&'a Store, EvalError> {
        match self.source {
            Source::Local(store) => Ok(store),
            Source::Remote { .. } => Err(EvalError::Execution(
                "internal: a local read over a remote source".into(),
            )),
        }
    }

    fn eval(&mut self, e: &Expr) -> Result<Value, EvalError> {
        self.check_deadline()?;
        match e {
            Expr::Number(v) => Ok(Value::Scalar(vec![*v; self.grid.steps])),
            Expr::String(s) => Ok(Value::String(s.clone())),
            Expr::Selector(sel) => Ok(Value::Vector(self.instant_selector(sel)?)),
            Expr::Range { selector, range_ms } => {
                Ok(Value::Matrix(self.range_matrix(selector, *range_ms)?))
            }
            Expr::Subquery { .. } => {
                let (data, _, _) = self.matrix_arg(e)?;
                Ok(Value::Matrix(matrix_of(data)))
            }
            Expr::Neg(inner) => match self.eval(inner)? {
                Value::Scalar(v) => Ok(Value::Scalar(v.into_iter().map(|x| -x).collect())),
                Value::Vector(series) => Ok(Value::Vector(dedupe(
                    map_floats(series, true, |_, v| Some(-v)),
                    false,
                )?)),
                _ => Err(EvalError::BadData(
                    "unary minus needs a scalar or an instant vector".into(),
                )),
            },
            Expr::Call { func, args } => match self.call(*func, args)? {
                Value::Vector(v) if !func.is_range() => Ok(Value::Vector(dedupe(v, false)?)),
                v => Ok(v),
            },
            Expr::Aggregate {
                op,
                grouping,
                param,
                expr,
            } => {
                if let Source::Remote {
                    remote,
                    read_after,
                    pushdown: true,
                } = self.source
                {
                    if remote::pushable(*op, param.is_some(), expr) {
                        return Ok(Value::Vector(self.pushed_down(remote, read_after, e, *op)?));
                    }
                }
                let param = match param {
                    Some(p) => Some(self.eval(p)?),
                    None => None,
                };
                let series = self.vector(expr)?;
                self.aggregate(*op, grouping.as_ref(), param, series)
            }
            Expr::Binary {
                op,
                lhs,
                rhs,
                return_bool,
                matching,
            } => {
                let l = self.eval(lhs)?;
                let r = self.eval(rhs)?;
                match self.binary(*op, l, r, *return_bool, matching.as_ref())? {
                    Value::Vector(v) => Ok(Value::Vector(dedupe(v, false)?)),
                    v => Ok(v),
                }
            }
        }
    }

    fn scalar(&mut self, e: &Expr) -> Result<Vec<f64>, EvalError> {
        match self.eval(e)? {
            Value::Scalar(v) => Ok(v),
            _ => Err(EvalError::BadData(format!("expected a scalar: {e}"))),
        }
    }

    fn vector(&mut self, e: &Expr) -> Result<Vec<Series>, EvalError> {
        match self.eval(e)? {
            Value::Vector(v) => Ok(v),
            _ => Err(EvalError::BadData(format!(
                "expected an instant vector: {e}"
            ))),
        }
    }

    fn string(&mut self, e: &Expr) -> Result<String, EvalError> {
        match self.eval(e)? {
            Value::String(s) => Ok(s),
            _ => Err(EvalError::BadData(format!("expected a string: {e}"))),
        }
    }

    fn span(times: &[i64]) -> (i64, i64) {
        let lo = times.iter().copied().min().unwrap_or(0);
        let hi = times.iter().copied().max().unwrap_or(0);
        (lo, hi)
    }

    /// A bare selector: the newest numeric sample in `(t − lookback, t]` unless it is a stale
    /// marker, or the merge of the histogram periods starting in `[t − lookback, t)`.
    fn instant_selector(&mut self, sel: &Selector) -> Result<Vec<Series>, EvalError> {
        Ok(self
            .instant_selector_ts(sel)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// As `instant_selector`, also giving each point's sample timestamp (for `timestamp()`).
    fn instant_selector_ts(
        &mut self,
        sel: &Selector,
    ) -> Result<Vec<(Series, Vec<i64>)>, EvalError> {
        let times = self.eval_times(sel);
        let lookback = self.limits.lookback_ms;
        let (found, raws) = self.selector_data(sel, lookback, true, true)?;
        let mut out = Vec::with_capacity(found.len());
        for (f, raw) in found.into_iter().zip(raws) {
            self.check_deadline()?;
            let mut points = self.new_points()?;
            let mut stamps = vec![0i64; self.grid.steps];
            match raw {
                Raw::Numeric(raw) => {
                    let mut upto = Upto::new();
                    for (i, &t) in times.iter().enumerate() {
                        let end = upto.at(&raw, t);
                        // A stale marker as the newest sample: the series has ended.
                        if end > 0 && raw[end - 1].0 > t - lookback && !is_stale(raw[end - 1].1) {
                            points[i] = Some(Sample::Float(raw[end - 1].1));
                            stamps[i] = raw[end - 1].0;
                        }
                    }
                }
                Raw::Hist(entries) => {
                    let windows =
                        slide_merge(&entries, &times, lookback, || self.check_deadline())?;
                    for (i, w) in windows.into_iter().enumerate() {
                        if let Some(h) = w {
                            points[i] = Some(Sample::Hist(HistSample {
                                hist: h,
                                scale: 1.0,
                            }));
                            stamps[i] = times[i];
                        }
                    }
                }
                Raw::None => continue,
            }
            out.push((Series { labels: f, points }, stamps));
        }
        Ok(out)
    }

    /// The series of a selector and their data: prefetched, or (for a selector `prefetch` did
    /// not see) found and read now. `range_ms` is the range, or the lookback of a bare selector.
    fn selector_data(
        &mut self,
        sel: &Selector,
        range_ms: i64,
        bare: bool,
        allow_pushdown: bool,
    ) -> Result<SelectedData, EvalError> {
        if let Some(data) = self.prefetched.remove(&(sel as *const Selector as usize)) {
            return Ok(data);
        }
        let plan = Planned {
            sel,
            range_ms,
            bare,
            times: self.eval_times(sel),
            step_ms: self.grid.step_ms,
        };
        if let Source::Remote {
            remote, read_after, ..
        } = self.source
        {
            let mut joined =
                remote::select(remote, read_after, &[plan], allow_pushdown, &self.limits)?;
            let (labels, raws) = joined.pop().unwrap_or_default();
            self.charge_raws(&raws)?;
            return Ok((labels, raws));
        }
        let (found, raws) = self
            .find_and_read(&[plan], allow_pushdown)?
            .pop()
            .unwrap_or_default();
        Ok((found.into_iter().map(|f| f.labels).collect(), raws))
    }

    /// Finds the series of every plan, then reads them all under one store view.
    pub(crate) fn find_and_read(
        &mut self,
        plans: &[Planned<'_>],
        allow_pushdown: bool,
    ) -> Result<Vec<FoundData>, EvalError> {
        let mut founds = Vec::with_capacity(plans.len());
        for plan in plans {
            let (lo, hi) = Self::span(&plan.times);
            founds.push(self.find(plan.sel, lo - plan.range_ms, hi + 1)?);
        }
        let store = self.local()?;
        let view = store.view().map_err(store_err)?;
        let mut out = Vec::with_capacity(plans.len());
        for (plan, found) in plans.iter().zip(founds) {
            let raws = self.read(&view, &found, plan, allow_pushdown)?;
            out.push((found, raws));
        }
        Ok(out)
    }

    /// Charges what a remote source read (each partition was held to the limits alone).
    fn charge_raws(&mut self, raws: &[Raw]) -> Result<(), EvalError> {
        for raw in raws {
            self.check_deadline()?;
            self.charge(match raw {
                Raw::Numeric(v) => v.len(),
                Raw::Hist(v) => v.len(),
                Raw::None => 0,
            } as u64)?;
        }
        Ok(())
    }

    /// Every selector of `e` with its range and the times it reads at on `grid` (subqueries
    /// bring their own grids), in evaluation order. Subquery grids are planned while their
    /// steps fit in `budget` (what is left of the samples limit); the others are not read
    /// ahead: evaluating them fails on the limit before anything is allocated.
    fn plan<'e>(&self, e: &'e Expr, grid: &Grid, budget: &mut u64, out: &mut Vec<Planned<'e>>) {
        let lookback = self.limits.lookback_ms;
        match e {
            Expr::Number(_) | Expr::String(_) => {}
            Expr::Selector(sel) => out.push(Planned {
                sel,
                range_ms: lookback,
                bare: true,
                times: self.times_on(grid, sel.at, sel.offset_ms),
                step_ms: grid.step_ms,
            }),
            Expr::Range { selector, range_ms } => out.push(Planned {
                sel: selector,
                range_ms: *range_ms,
                bare: false,
                times: self.times_on(grid, selector.at, selector.offset_ms),
                step_ms: grid.step_ms,
            }),
            Expr::Subquery {
                expr,
                range_ms,
                step_ms,
                offset_ms,
                at,
            } => {
                let outer = self.times_on(grid, *at, *offset_ms);
                let inner = subquery_grid(&outer, *range_ms, self.subquery_step(*step_ms));
                if let Some(left) = budget.checked_sub(inner.steps as u64) {
                    *budget = left;
                    self.plan(expr, &inner, budget, out);
                }
            }
            Expr::Call { func, args } => {
                args.iter().for_each(|a| self.plan(a, grid, budget, out));
                // `info(v)` reads `target_info` too: under the same view.
                if *func == Func::Info && args.len() == 1 {
                    let sel = target_info_selector();
                    out.push(Planned {
                        sel,
                        range_ms: lookback,
                        bare: true,
                        times: self.times_on(grid, sel.at, sel.offset_ms),
                        step_ms: grid.step_ms,
                    });
                }
            }
            Expr::Aggregate {
                op, param, expr, ..
            } => {
                // A pushed-down aggregation's series are read by the partitions, not here.
                let pushed = matches!(self.source, Source::Remote { pushdown: true, .. })
                    && remote::pushable(*op, param.is_some(), expr);
                if pushed {
                    return;
                }
                if let Some(p) = param {
                    self.plan(p, grid, budget, out);
                }
                self.plan(expr, grid, budget, out);
            }
            Expr::Binary { lhs, rhs, .. } => {
                self.plan(lhs, grid, budget, out);
                self.plan(rhs, grid, budget, out);
            }
            Expr::Neg(inner) => self.plan(inner, grid, budget, out),
        }
    }

    fn subquery_step(&self, step_ms: i64) -> i64 {
        if step_ms > 0 {
            step_ms
        } else {
            self.limits.subquery_step_ms.max(1)
        }
    }

    /// Finds the series of every selector in `e`, then reads all their data under one store
    /// view: the whole query sees one snapshot (every batch acknowledged before it, whole).
    fn prefetch(&mut self, e: &Expr) -> Result<(), EvalError> {
        let mut plans: Vec<Planned<'_>> = Vec::new();
        let grid = self.grid;
        let mut budget = self
            .limits
            .samples_per_query_max
            .saturating_sub(self.samples);
        self.plan(e, &grid, &mut budget, &mut plans);
        // A range selector as the whole query returns its raw periods, never slice merges.
        let pushdown = !matches!(e, Expr::Range { .. });
        let data: Vec<SelectedData> = match self.source {
            Source::Remote {
                remote, read_after, ..
            } => {
                let joined = remote::select(remote, read_after, &plans, pushdown, &self.limits)?;
                for (_, raws) in &joined {
                    self.charge_raws(raws)?;
                }
                joined
            }
            Source::Local(_) => self
                .find_and_read(&plans, pushdown)?
                .into_iter()
                .map(|(found, raws)| (found.into_iter().map(|f| f.labels).collect(), raws))
                .collect(),
        };
        for (plan, d) in plans.iter().zip(data) {
            self.prefetched
                .insert(plan.sel as *const Selector as usize, d);
        }
        Ok(())
    }

    /// Reads every found series under one store view, so one selector sees one snapshot (whole
    /// batches across all its series); evaluation happens after the view is released. Numerics:
    /// raw samples in `[from, to)`, stale markers dropped unless the selector is bare (where
    /// one ends the series). Histograms: what the windows `[t − range, t)` of the times need —
    /// the store's per-slice merges where the windows are whole slices, else the raw periods.
    fn read(
        &mut self,
        view: &View<'_>,
        found: &[Found],
        plan: &Planned<'_>,
        allow_pushdown: bool,
    ) -> Result<Vec<Raw>, EvalError> {
        let times = &plan.times[..];
        let range_ms = plan.range_ms;
        let (lo, hi) = Self::span(times);
        // Numerics: `(t − range, t]` windows (the lookback for bare selectors).
        let (from_ms, to_ms) = (lo - range_ms + 1, hi + 1);
        let pushdown = pushdown_period(times, range_ms, view.base_period_ms(), plan.step_ms)
            .filter(|_| allow_pushdown);
        let mut out = Vec::with_capacity(found.len());
        for f in found {
            self.check_deadline()?;
            if times.is_empty() {
                out.push(Raw::None);
                continue;
            }
            let raw = match f.kind {
                Kind::Numeric => {
                    let mut v = view.raw_numeric(f.id, from_ms, to_ms).map_err(store_err)?;
                    if !plan.bare {
                        v.retain(|&(_, x)| !is_stale(x));
                    }
                    Raw::Numeric(v)
                }
                Kind::Histogram => Raw::Hist(match pushdown {
                    Some(g) => {
                        let slicing = Slicing {
                            start_ms: lo - range_ms,
                            end_ms: hi,
                            period_ms: g,
                        };
                        view.histograms(f.id, slicing)
                            .map_err(store_err)?
                            .into_iter()
                            .enumerate()
                            .filter(|(_, h)| !h.is_empty())
                            .map(|(j, h)| (slicing.start_ms + j as i64 * g, h))
                            .collect()
                    }
                    None => view
                        .raw_histograms(f.id, lo - range_ms, hi)
                        .map_err(store_err)?,
                }),
                Kind::Text => Raw::None,
            };
            self.charge(match &raw {
                Raw::Numeric(v) => v.len(),
                Raw::Hist(v) => v.len(),
                Raw::None => 0,
            } as u64)?;
            out.push(raw);
        }
        Ok(out)
    }

    /// Raw samples of a range selector at the single evaluation time (instant queries).
    fn range_matrix(
        &mut self,
        sel: &Selector,
        range_ms: i64,
    ) -> Result<Vec<RangeSeries>, EvalError> {
        let (found, raws) = self.selector_data(sel, range_ms, false, false)?;
        let data = found.into_iter().zip(raws).collect();
        Ok(matrix_of(data))
    }

    /// A range-vector argument: each series' data, the times its windows end at, the range.
    fn matrix_arg(&mut self, e: &Expr) -> Result<MatrixArg, EvalError> {
        match e {
            Expr::Range { selector, range_ms } => {
                let times = self.eval_times(selector);
                let (found, raws) = self.selector_data(selector, *range_ms, false, true)?;
                let data = found.into_iter().zip(raws).collect();
                Ok((data, times, *range_ms))
            }
            Expr::Subquery {
                expr,
                range_ms,
                step_ms,
                offset_ms,
                at,
            } => {
                let times = self.times_on(&self.grid, *at, *offset_ms);
                let grid = subquery_grid(&times, *range_ms, self.subquery_step(*step_ms));
                let data = self.subquery_data(expr, grid)?;
                Ok((data, times, *range_ms))
            }
            _ => Err(EvalError::BadData(format!(
                "expected a range vector, got {e}"
            ))),
        }
    }

    /// Evaluates a subquery's expression on its own grid: its float points as raw samples.
    /// The grid's steps are charged before anything is allocated for it.
    fn subquery_data(&mut self, e: &Expr, grid: Grid) -> Result<Vec<(Labels, Raw)>, EvalError> {
        if grid.steps == 0 {
            return Ok(Vec::new());
        }
        self.charge(grid.steps as u64)?;
        let outer = std::mem::replace(&mut self.grid, grid);
        let value = self.eval(e);
        self.grid = outer;
        let series = match value? {
            Value::Vector(v) => dedupe(v, false)?,
            _ => return Err(EvalError::BadData(format!("subquery of a non-vector: {e}"))),
        };
        Ok(series
            .into_iter()
            .map(|s| {
                let points = s
                    .points
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, p)| match p {
                        Some(Sample::Float(v)) => Some((grid.time(i), v)),
                        // Histogram points of a subquery have no meaning in our model.
                        _ => None,
                    })
                    .collect();
                (s.labels, Raw::Numeric(points))
            })
            .collect())
    }

    fn aggregate(
        &mut self,
        op: AggOp,
        grouping: Option<&crate::ast::Grouping>,
        param: Option<Value>,
        series: Vec<Series>,
    ) -> Result<Value, EvalError> {
        let (param, label) = match param {
            Some(Value::Scalar(v)) => (Some(v), None),
            Some(Value::String(s)) => (None, Some(s)),
            _ => (None, None),
        };
        let groups = aggregate::groups_of(grouping, &series);
        match op {
            AggOp::CountValues => {
                let label = label.unwrap_or_default();
                return self.count_values(&label, groups, &series);
            }
            AggOp::Limitk | AggOp::LimitRatio => {
                let p = param.unwrap_or_default();
                return Ok(Value::Vector(self.limit(op, &p, &groups, series)?));
            }
            _ => {}
        }
        if matches!(op, AggOp::Topk | AggOp::Bottomk) {
            let k = param.unwrap_or_default();
            return Ok(Value::Vector(self.top(op, &k, &groups, series)));
        }
        let mut out = Vec::with_capacity(groups.len());
        for (labels, members) in groups {
            self.check_deadline()?;
            let mut points = self.new_points()?;
            for (i, slot) in points.iter_mut().enumerate() {
                let samples: Vec<&Sample> = members
                    .iter()
                    .filter_map(|&m| series[m].points[i].as_ref())
                    .collect();
                if samples.is_empty() {
                    continue;
                }
                let q = param.as_ref().map(|p| p[i]).unwrap_or(f64::NAN);
                *slot = aggregate_step(op, &samples, q)?;
                if op == AggOp::Quantile && !(0.0..=1.0).contains(&q) {
                    self.notes.warn(format!(
                        "PromQL warning: quantile value should be between 0 and 1, got {}",
                        crate::number::format_value(q)
                    ));
                }
            }
            out.push(Series { labels, points });
        }
        Ok(Value::Vector(out))
    }

    fn binary(
        &mut self,
        op: BinOp,
        l: Value,
        r: Value,
        return_bool: bool,
        matching: Option<&Matching>,
    ) -> Result<Value, EvalError> {
        match (l, r) {
            (Value::Scalar(a), Value::Scalar(b)) => Ok(Value::Scalar(
                a.iter()
                    .zip(&b)
                    .map(|(&x, &y)| {
                        let v = scalar_op(op, x, y);
                        if op.is_comparison() {
                            if v.is_some() {
                                1.0
                            } else {
                                0.0
                            }
                        } else {
                            v.unwrap_or(f64::NAN)
                        }
                    })
                    .collect(),
            )),
            (Value::Vector(v), Value::Scalar(s)) => {
                Ok(Value::Vector(vector_scalar(op, v, &s, false, return_bool)))
            }
            (Value::Scalar(s), Value::Vector(v)) => {
                Ok(Value::Vector(vector_scalar(op, v, &s, true, return_bool)))
            }
            (Value::Vector(a), Value::Vector(b)) => {
                if op.is_set() {
                    Ok(Value::Vector(self.set_op(op, a, b, matching)))
                } else {
                    Ok(Value::Vector(self.vector_vector(
                        op,
                        a,
                        b,
                        return_bool,
                        matching,
                    )?))
                }
            }
            _ => Err(EvalError::BadData(
                "binary operators need scalars or instant vectors".into(),
            )),
        }
    }

    fn set_op(
        &mut self,
        op: BinOp,
        a: Vec<Series>,
        b: Vec<Series>,
        matching: Option<&Matching>,
    ) -> Vec<Series> {
        let sig_a: Vec<Labels> = a.iter().map(|s| signature(&s.labels, matching)).collect();
        let sig_b: Vec<Labels> = b.iter().map(|s| signature(&s.labels, matching)).collect();
        let steps = self.grid.steps;
        // Which signatures the other side has at each step.
        let present = |series: &[Series], sigs: &[Labels]| {
            let mut m: HashMap<Labels, Vec<bool>> = HashMap::new();
            for (s, sig) in series.iter().zip(sigs) {
                let e = m.entry(sig.clone()).or_insert_with(|| vec![false; steps]);
                for (slot, p) in e.iter_mut().zip(&s.points) {
                    *slot |= p.is_some();
                }
            }
            m
        };
        let in_b = present(&b, &sig_b);
        let filter = |series: Vec<Series>,
                      sigs: &[Labels],
                      keep_if_present: bool,
                      other: &HashMap<Labels, Vec<bool>>| {
            series
                .into_iter()
                .zip(sigs)
                .map(|(s, sig)| {
                    let mask = other.get(sig);
                    Series {
                        labels: s.labels,
                        points: s
                            .points
                            .into_iter()
                            .enumerate()
                            .map(|(i, p)| {
                                let there = mask.is_some_and(|m| m[i]);
                                if there == keep_if_present {
                                    p
                                } else {
                                    None
                                }
                            })
                            .collect(),
                    }
                })
                .collect::<Vec<_>>()
        };
        match op {
            BinOp::And => filter(a, &sig_a, true, &in_b),
            BinOp::Unless => filter(a, &sig_a, false, &in_b),
            _ => {
                let in_a = present(&a, &sig_a);
                let mut out = a;
                out.extend(filter(b, &sig_b, false, &in_a));
                out
            }
        }
    }

    fn vector_vector(
        &mut self,
        op: BinOp,
        a: Vec<Series>,
        b: Vec<Series>,
        return_bool: bool,
        matching: Option<&Matching>,
    ) -> Result<Vec<Series>, EvalError> {
        let card = matching.map(|m| &m.card).unwrap_or(&Card::OneToOne);
        // `many` may hold several series per match group, `one` at most one per step. For
        // group_right the sides swap; the operator still applies left op right.
        let swapped = matches!(card, Card::OneToMany(_));
        let (many, one) = if swapped { (&b, &a) } else { (&a, &b) };
        let (many_side, one_side) = if swapped {
            ("right", "left")
        } else {
            ("left", "right")
        };
        let mut one_by_sig: HashMap<Labels, Vec<usize>> = HashMap::new();
        for (j, s) in one.iter().enumerate() {
            one_by_sig
                .entry(signature(&s.labels, matching))
                .or_default()
                .push(j);
        }
        let mut out: Vec<Series> = Vec::new();
        let mut out_index: HashMap<Labels, usize> = HashMap::new();
        let mut many_seen: HashMap<Labels, Vec<bool>> = HashMap::new();
        for s in many {
            self.check_deadline()?;
            let sig = signature(&s.labels, matching);
            let Some(candidates) = one_by_sig.get(&sig) else {
                continue;
            };
            let seen = many_seen
                .entry(sig.clone())
                .or_insert_with(|| vec![false; self.grid.steps]);
            for (i, mv) in s.points.iter().enumerate() {
                let Some(mv) = mv else {
                    continue;
                };
                if *card == Card::OneToOne && seen[i] {
                    return Err(EvalError::Execution(format!(
                        "found duplicate series for the match group {} on the {many_side} hand-side of the operation; many-to-many matching not allowed",
                        format_labels(&sig)
                    )));
                }
                seen[i] = true;
                let mut present = candidates
                    .iter()
                    .filter_map(|&j| one[j].points[i].as_ref().map(|p| (j, p)));
                let Some((j, ov)) = present.next() else {
                    continue;
                };
                if present.next().is_some() {
                    return Err(EvalError::Execution(format!(
                        "found duplicate series for the match group {} on the {one_side} hand-side of the operation; many-to-many matching not allowed",
                        format_labels(&sig)
                    )));
                }
                let (lv, rv) = if swapped { (ov, mv) } else { (mv, ov) };
                let Some(value) = sample_op(op, lv, rv, return_bool, false) else {
                    continue;
                };
                let labels = result_labels(&s.labels, &one[j].labels, op, return_bool, matching);
                let o = match out_index.get(&labels) {
                    Some(&o) => o,
                    None => {
                        self.charge(self.grid.steps as u64)?;
                        out.push(Series {
                            labels: labels.clone(),
                            points: vec![None; self.grid.steps],
                        });
                        out_index.insert(labels.clone(), out.len() - 1);
                        out.len() - 1
                    }
                };
                if out[o].points[i].is_some() {
                    return Err(EvalError::Execution(format!(
                        "multiple matches for labels {}: grouping labels must ensure unique matches",
                        format_labels(&labels)
                    )));
                }
                out[o].points[i] = Some(value);
            }
        }
        Ok(out)
    }
}

/// A range vector's series as raw samples (the instant result of a range selector or a
/// subquery); histogram periods keep their start times.
fn matrix_of(data: Vec<(Labels, Raw)>) -> Vec<RangeSeries> {
    let mut out = Vec::with_capacity(data.len());
    for (labels, raw) in data {
        let mut rs = RangeSeries {
            labels,
            floats: Vec::new(),
            hists: Vec::new(),
        };
        match raw {
            Raw::Numeric(v) => rs.floats = v,
            Raw::Hist(entries) => {
                rs.hists = entries
                    .into_iter()
                    .map(|(ts, h)| {
                        let hist = Arc::new(h);
                        (ts, HistSample { hist, scale: 1.0 })
                    })
                    .collect();
            }
            Raw::None => continue,
        }
        if !rs.floats.is_empty() || !rs.hists.is_empty() {
            out.push(rs);
        }
    }
    out
}

/// Whether the store can merge windows per slice: every window `[t − range, t)` must be a
/// whole number of slices of one period that is a multiple of the base period.
fn pushdown_period(times: &[i64], range_ms: i64, base_ms: i64, step_ms: i64) -> Option<i64> {
    let (lo, hi) = Ctx::span(times);
    let all_equal = lo == hi;
    let g = if all_equal {
        range_ms
    } else {
        gcd(range_ms, step_ms)
    };
    if g <= 0 || g % base_ms != 0 || (lo - range_ms).rem_euclid(g) != 0 {
        return None;
    }
    let slices = (hi - (lo - range_ms)) / g;
    (slices <= PUSHDOWN_SLICES_MAX).then_some(g)
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.abs()
}

/// For each `t`, the merge of the entries (sorted by start) whose start lies in `[t − range, t)`.
/// Windows move forward, so the running merge adds what enters and subtracts what leaves.
fn slide_merge(
    entries: &[(i64, Histogram)],
    times: &[i64],
    range_ms: i64,
    mut check: impl FnMut() -> Result<(), EvalError>,
) -> Result<Vec<Option<Arc<Histogram>>>, EvalError> {
    let mut out = Vec::with_capacity(times.len());
    let mut acc = Histogram::new();
    let (mut lo, mut hi) = (0usize, 0usize);
    let mut last: Option<(usize, usize, Arc<Histogram>)> = None;
    for (i, &t) in times.iter().enumerate() {
        if i % DEADLINE_CHECK_STEPS == 0 {
            check()?;
        }
        let from = entries.partition_point(|(s, _)| *s < t - range_ms);
        let to = entries.partition_point(|(s, _)| *s < t).max(from);
        if from == to {
            out.push(None);
            continue;
        }
        if let Some((f, e, h)) = &last {
            if *f == from && *e == to {
                out.push(Some(Arc::clone(h)));
                continue;
            }
        }
        let slides = from >= lo && to >= hi && from < hi;
        let mut exact = slides;
        if slides {
            for (_, h) in &entries[hi..to] {
                acc.merge(h);
            }
            for (_, h) in &entries[lo..from] {
                exact &= acc.subtract(h);
            }
        }
        if !exact {
            let parts: Vec<&Histogram> = entries[from..to].iter().map(|(_, h)| h).collect();
            acc = Histogram::merge_many(&parts);
        }
        (lo, hi) = (from, to);
        let h = Arc::new(acc.clone());
        last = Some((from, to, Arc::clone(&h)));
        out.push(Some(h));
    }
    Ok(out)
}

fn parse_le(text: &str) -> Result<f64, ()> {
    match text {
        "+Inf" | "Inf" | "inf" | "+inf" => Ok(f64::INFINITY),
        _ => text.parse::<f64>().map_err(|_| ()),
    }
}

/// Prometheus's quantile over classic cumulative buckets `(upper bound, cumulative count)`,
/// and whether the counts had to be forced monotonic (Prometheus then adds an info).
fn bucket_quantile(q: f64, buckets: &mut [(f64, f64)]) -> (f64, bool) {
    if q.is_nan() {
        return (f64::NAN, false);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, false);
    }
    if q > 1.0 {
        return (f64::INFINITY, false);
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return (f64::NAN, false);
    }
    // Equal bounds add up.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(bound, count) in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.0 == bound => last.1 += count,
            _ => merged.push((bound, count)),
        }
    }
    let forced = make_monotonic(&mut merged);
    let n = merged.len();
    if n < 2 {
        return (f64::NAN, false);
    }
    let observations = merged[n - 1].1;
    if observations == 0.0 {
        return (f64::NAN, false);
    }
    let mut rank = q * observations;
    let b = merged[..n - 1].partition_point(|x| x.1 < rank);
    if b == n - 1 {
        return (merged[n - 2].0, forced);
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return (merged[0].0, forced);
    }
    let (mut start, end, mut count) = (0.0, merged[b].0, merged[b].1);
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    (start + (end - start) * (rank / count), forced)
}

/// Prometheus's tolerance for rounding differences between cumulative bucket counts.
const SMALL_DELTA_TOLERANCE: f64 = 1e-12;

/// Counts that differ from the previous one only by rounding take its value; decreases are
/// lifted to it. Returns whether a real decrease was lifted.
fn make_monotonic(buckets: &mut [(f64, f64)]) -> bool {
    let mut forced = false;
    let Some(&(_, mut prev)) = buckets.first() else {
        return false;
    };
    for b in buckets.iter_mut().skip(1) {
        let curr = b.1;
        if curr == prev {
            continue;
        }
        if almost_equal(prev, curr, SMALL_DELTA_TOLERANCE) {
            b.1 = prev;
            continue;
        }
        if curr < prev {
            b.1 = prev;
            forced = true;
            continue;
        }
        prev = curr;
    }
    forced
}

/// Relative equality within `epsilon` (Prometheus's `almost.Equal`).
fn almost_equal(a: f64, b: f64, epsilon: f64) -> bool {
    if a.is_nan() && b.is_nan() || a == b {
        return true;
    }
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < f64::MIN_POSITIVE {
        return diff < epsilon * f64::MIN_POSITIVE;
    }
    diff / abs_sum.min(f64::MAX) < epsilon
}

/// Prometheus's `quantile`: linear interpolation between the closest ranks (type 7).
fn float_quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

/// Go's `math.Max`/`math.Min`: NaN wins.
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// One numeric range function over the window's samples (ascending by time).
/// `t` is the window's end; `step_ms` the evaluation step's time (which `predict_linear`
/// extrapolates from, offset or not, as Prometheus does).
fn range_value(
    func: Func,
    w: &[(i64, f64)],
    (t, step_ms): (i64, i64),
    range_ms: i64,
    params: &[f64],
) -> Option<f64> {
    if w.is_empty() {
        return None;
    }
    let q = params.first().copied().unwrap_or(f64::NAN);
    let values = || w.iter().map(|&(_, v)| v);
    match func {
        Func::Rate | Func::Increase | Func::Delta => {
            extrapolated_rate(w, t, range_ms, func != Func::Delta, func == Func::Rate)
        }
        Func::Irate | Func::Idelta => {
            if w.len() < 2 {
                return None;
            }
            let (t0, v0) = w[w.len() - 2];
            let (t1, v1) = w[w.len() - 1];
            if func == Func::Idelta {
                return Some(v1 - v0);
            }
            let delta = if v1 < v0 { v1 } else { v1 - v0 };
            Some(delta / ((t1 - t0) as f64 / 1000.0))
        }
        Func::AvgOverTime => float::mean(values()),
        Func::MinOverTime => values().fold(None, |acc: Option<f64>, v| {
            Some(match acc {
                None => v,
                Some(a) if v < a || a.is_nan() => v,
                Some(a) => a,
            })
        }),
        Func::MaxOverTime => values().fold(None, |acc: Option<f64>, v| {
            Some(match acc {
                None => v,
                Some(a) if v > a || a.is_nan() => v,
                Some(a) => a,
            })
        }),
        Func::SumOverTime => Some(float::sum(values())),
        Func::CountOverTime => Some(w.len() as f64),
        Func::LastOverTime => Some(w[w.len() - 1].1),
        Func::StddevOverTime => float::window_variance(values()).map(f64::sqrt),
        Func::StdvarOverTime => float::window_variance(values()),
        Func::QuantileOverTime => {
            let mut v: Vec<f64> = values().collect();
            Some(float_quantile(q, &mut v))
        }
        Func::MadOverTime => {
            let mut v: Vec<f64> = values().collect();
            let median = float_quantile(0.5, &mut v);
            let mut dev: Vec<f64> = values().map(|x| (x - median).abs()).collect();
            Some(float_quantile(0.5, &mut dev))
        }
        Func::PresentOverTime => Some(1.0),
        Func::TsOfLastOverTime => Some(w[w.len() - 1].0 as f64 / 1000.0),
        // The latest time of the greatest (least) value; NaN gives way to any number.
        Func::TsOfMaxOverTime | Func::TsOfMinOverTime => {
            let (mut at, mut best) = w[0];
            for &(ts, v) in w {
                let better = if func == Func::TsOfMaxOverTime {
                    v >= best
                } else {
                    v <= best
                };
                if better || best.is_nan() {
                    (best, at) = (v, ts);
                }
            }
            Some(at as f64 / 1000.0)
        }
        Func::DoubleExponentialSmoothing => {
            double_exponential_smoothing(w, q, params.get(1).copied().unwrap_or(f64::NAN))
        }
        Func::Changes => Some(
            w.windows(2)
                .filter(|p| p[1].1 != p[0].1 && !(p[1].1.is_nan() && p[0].1.is_nan()))
                .count() as f64,
        ),
        Func::Resets => Some(w.windows(2).filter(|p| p[1].1 < p[0].1).count() as f64),
        Func::Deriv => {
            if w.len() < 2 {
                return None;
            }
            Some(linear_regression(w, w[0].0).0)
        }
        Func::PredictLinear => {
            if w.len() < 2 {
                return None;
            }
            let (slope, intercept) = linear_regression(w, step_ms);
            Some(intercept + slope * q)
        }
        _ => None,
    }
}

/// Prometheus's `double_exponential_smoothing` (smoothing factor `sf`, trend factor `tf`, both
/// checked to lie in (0, 1) before): the last smoothed value; none under two samples.
fn double_exponential_smoothing(w: &[(i64, f64)], sf: f64, tf: f64) -> Option<f64> {
    if w.len() < 2 {
        return None;
    }
    let (mut s0, mut s1) = (0.0, w[0].1);
    let mut b = w[1].1 - w[0].1;
    for (i, &(_, v)) in w.iter().enumerate().skip(1) {
        let x = sf * v;
        // The trend at the previous point (the first trend is the first difference).
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        (s0, s1) = (s1, x + y);
    }
    Some(s1)
}

/// Least-squares line through the samples, time in seconds from `intercept_ms`: (slope per
/// second, value at `intercept_ms`), with Prometheus's compensated sums. Constant values give
/// slope 0 exactly (NaN for a constant infinity), as Prometheus.
fn linear_regression(w: &[(i64, f64)], intercept_ms: i64) -> (f64, f64) {
    let first = w[0].1;
    if w.iter().all(|&(_, v)| v == first) {
        if first.is_infinite() {
            return (f64::NAN, f64::NAN);
        }
        return (0.0, first);
    }
    let n = w.len() as f64;
    let mut sums = [(0.0, 0.0); 4];
    for &(ts, v) in w {
        let x = (ts - intercept_ms) as f64 / 1e3;
        for (slot, inc) in sums.iter_mut().zip([x, v, x * v, x * x]) {
            *slot = float::kahan_inc(inc, slot.0, slot.1);
        }
    }
    let [sx, sy, sxy, sxx] = sums.map(|(s, c)| s + c);
    let cov = sxy - sx * sy / n;
    let var = sxx - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

/// Prometheus's `extrapolatedRate` for `rate`, `increase` and `delta`.
fn extrapolated_rate(
    w: &[(i64, f64)],
    t: i64,
    range_ms: i64,
    is_counter: bool,
    is_rate: bool,
) -> Option<f64> {
    if w.len() < 2 {
        return None;
    }
    let range_start = t - range_ms;
    let (first_t, first_v) = w[0];
    let (last_t, last_v) = w[w.len() - 1];
    let mut result = last_v - first_v;
    if is_counter {
        for pair in w.windows(2) {
            if pair[1].1 < pair[0].1 {
                result += pair[0].1;
            }
        }
    }
    let mut duration_to_start = (first_t - range_start) as f64 / 1000.0;
    let mut duration_to_end = (t - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let average = sampled / (w.len() - 1) as f64;
    let threshold = average * 1.1;
    // Prometheus 3's order: cap the gap to the start, then stop at zero for counters.
    if duration_to_start >= threshold {
        duration_to_start = average / 2.0;
    }
    if is_counter && result > 0.0 && first_v >= 0.0 {
        let duration_to_zero = sampled * (first_v / result);
        if duration_to_zero < duration_to_start {
            duration_to_start = duration_to_zero;
        }
    }
    if duration_to_end >= threshold {
        duration_to_end = average / 2.0;
    }
    let interval = sampled + duration_to_start + duration_to_end;
    let mut factor = interval / sampled;
    if is_rate {
        factor /= range_ms as f64 / 1000.0;
    }
    Some(result * factor)
}

fn aggregate_step(op: AggOp, samples: &[&Sample], q: f64) -> Result<Option<Sample>, EvalError> {
    let floats: Vec<f64> = samples
        .iter()
        .filter_map(|s| match s {
            Sample::Float(v) => Some(*v),
            Sample::Hist(_) => None,
        })
        .collect();
    let hists: Vec<&HistSample> = samples
        .iter()
        .filter_map(|s| match s {
            Sample::Hist(h) => Some(h),
            Sample::Float(_) => None,
        })
        .collect();
    if op == AggOp::Count {
        return Ok(Some(Sample::Float(samples.len() as f64)));
    }
    if op == AggOp::Group {
        return Ok(Some(Sample::Float(1.0)));
    }
    if !hists.is_empty() {
        // Mixed floats and histograms in one group have no value (as in Prometheus).
        if !floats.is_empty() || !matches!(op, AggOp::Sum | AggOp::Avg) {
            return Ok(None);
        }
        let scale = hists[0].scale;
        if hists.iter().any(|h| h.scale != scale) {
            return Err(EvalError::Execution(
                "cannot add histograms of different scales (rates over different ranges)".into(),
            ));
        }
        let parts: Vec<&Histogram> = hists.iter().map(|h| h.hist.as_ref()).collect();
        let merged = Histogram::merge_many(&parts);
        let scale = if op == AggOp::Avg {
            scale / hists.len() as f64
        } else {
            scale
        };
        return Ok(Some(Sample::Hist(HistSample {
            hist: Arc::new(merged),
            scale,
        })));
    }
    let mut floats = floats;
    let v = match op {
        AggOp::Sum => float::sum(floats.iter().copied()),
        AggOp::Avg => float::mean(floats.iter().copied()).unwrap_or(f64::NAN),
        AggOp::Min => floats
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))))
            .unwrap_or(f64::NAN),
        AggOp::Max => floats
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
            .unwrap_or(f64::NAN),
        AggOp::Stddev => float::group_variance(floats.iter().copied())
            .unwrap_or(f64::NAN)
            .sqrt(),
        AggOp::Stdvar => float::group_variance(floats.iter().copied()).unwrap_or(f64::NAN),
        AggOp::Quantile => float_quantile(q, &mut floats),
        AggOp::Count
        | AggOp::Group
        | AggOp::Topk
        | AggOp::Bottomk
        | AggOp::CountValues
        | AggOp::Limitk
        | AggOp::LimitRatio => return Ok(None),
    };
    Ok(Some(Sample::Float(v)))
}

/// The value of `x op y` for floats: `None` where a comparison is false.
fn scalar_op(op: BinOp, x: f64, y: f64) -> Option<f64> {
    let cmp = |b: bool| if b { Some(x) } else { None };
    match op {
        BinOp::Add => Some(x + y),
        BinOp::Sub => Some(x - y),
        BinOp::Mul => Some(x * y),
        BinOp::Div => Some(x / y),
        BinOp::Mod => Some(x % y),
        BinOp::Pow => Some(x.powf(y)),
        BinOp::Atan2 => Some(x.atan2(y)),
        BinOp::Eq => cmp(x == y),
        BinOp::Ne => cmp(x != y),
        BinOp::Gt => cmp(x > y),
        BinOp::Lt => cmp(x < y),
        BinOp::Ge => cmp(x >= y),
        BinOp::Le => cmp(x <= y),
        BinOp::And | BinOp::Or | BinOp::Unless => None,
    }
}

/// `l op r` for two samples. `keep_rhs`: a comparison keeps the right value (the vector side of
/// `scalar op vector`).
fn sample_op(
    op: BinOp,
    l: &Sample,
    r: &Sample,
    return_bool: bool,
    keep_rhs: bool,
) -> Option<Sample> {
    match (l, r) {
        (Sample::Float(x), Sample::Float(y)) => {
            let v = scalar_op(op, *x, *y);
            if op.is_comparison() {
                if return_bool {
                    return Some(Sample::Float(if v.is_some() { 1.0 } else { 0.0 }));
                }
                return v.map(|_| Sample::Float(if keep_rhs { *y } else { *x }));
            }
            v.map(Sample::Float)
        }
        (Sample::Hist(h), Sample::Float(s)) if matches!(op, BinOp::Mul | BinOp::Div) => {
            let scale = if op == BinOp::Mul {
                h.scale * s
            } else {
                h.scale / s
            };
            Some(Sample::Hist(HistSample {
                hist: Arc::clone(&h.hist),
                scale,
            }))
        }
        (Sample::Float(s), Sample::Hist(h)) if op == BinOp::Mul => Some(Sample::Hist(HistSample {
            hist: Arc::clone(&h.hist),
            scale: h.scale * s,
        })),
        (Sample::Hist(a), Sample::Hist(b)) if op == BinOp::Add && a.scale == b.scale => {
            let merged = Histogram::merge_many(&[a.hist.as_ref(), b.hist.as_ref()]);
            Some(Sample::Hist(HistSample {
                hist: Arc::new(merged),
                scale: a.scale,
            }))
        }
        // Anything else involving a histogram has no value (Prometheus drops it too).
        _ => None,
    }
}

fn vector_scalar(
    op: BinOp,
    series: Vec<Series>,
    scalar: &[f64],
    scalar_left: bool,
    return_bool: bool,
) -> Vec<Series> {
    let drop = !op.is_comparison() || return_bool;
    series
        .into_iter()
        .map(|s| Series {
            labels: if drop { drop_name(s.labels) } else { s.labels },
            points: s
                .points
                .into_iter()
                .enumerate()
                .map(|(i, p)| {
                    let p = p?;
                    let sc = Sample::Float(scalar[i]);
                    if scalar_left {
                        sample_op(op, &sc, &p, return_bool, true)
                    } else {
                        sample_op(op, &p, &sc, return_bool, false)
                    }
                })
                .collect(),
        })
        .collect()
}

/// The labels two sides are matched on.
fn signature(labels: &Labels, matching: Option<&Matching>) -> Labels {
    match matching {
        Some(m) if m.on => labels
            .iter()
            .filter(|(k, _)| m.labels.contains(k))
            .cloned()
            .collect(),
        Some(m) => labels
            .iter()
            .filter(|(k, _)| k != "__name__" && !m.labels.contains(k))
            .cloned()
            .collect(),
        None => drop_name(labels.clone()),
    }
}

/// Labels of a result: the "many" side's (the left one for one-to-one), without the name for
/// arithmetic (and `bool`); one-to-one keeps only the `on(…)` labels or drops the `ignoring(…)`
/// ones; `group_left(l…)`/`group_right(l…)` copy each `l` from the "one" side (absent there →
/// removed).
fn result_labels(
    labels: &Labels,
    one: &Labels,
    op: BinOp,
    return_bool: bool,
    matching: Option<&Matching>,
) -> Labels {
    let mut out = if !op.is_comparison() || return_bool {
        drop_name(labels.clone())
    } else {
        labels.clone()
    };
    if let Some(m) = matching {
        match &m.card {
            Card::OneToOne if m.on => out.retain(|(k, _)| m.labels.contains(k)),
            Card::OneToOne => out.retain(|(k, _)| !m.labels.contains(k)),
            Card::ManyToOne(include) | Card::OneToMany(include) => {
                for l in include {
                    out.retain(|(k, _)| k != l);
                    if let Some(pair) = one.iter().find(|(k, _)| k == l) {
                        out.push(pair.clone());
                    }
                }
                out.sort();
            }
        }
    }
    out
}

fn map_points(
    series: Vec<Series>,
    drop: bool,
    f: impl Fn(usize, Option<Sample>) -> Option<Sample>,
) -> Vec<Series> {
    series
        .into_iter()
        .map(|s| Series {
            labels: if drop { drop_name(s.labels) } else { s.labels },
            points: s
                .points
                .into_iter()
                .enumerate()
                .map(|(i, p)| f(i, p))
                .collect(),
        })
        .collect()
}

/// Applies `f` to float points; histogram points have no value.
fn map_floats(
    series: Vec<Series>,
    drop: bool,
    f: impl Fn(usize, f64) -> Option<f64>,
) -> Vec<Series> {
    map_points(series, drop, |i, p| match p {
        Some(Sample::Float(v)) => f(i, v).map(Sample::Float),
        _ => None,
    })
}

/// Applies `f` to histogram points; float points have no value.
fn map_hists(series: Vec<Series>, f: impl Fn(usize, &HistSample) -> f64) -> Vec<Series> {
    map_points(series, true, |i, p| match p {
        Some(Sample::Hist(h)) => Some(Sample::Float(f(i, &h))),
        _ => None,
    })
}

/// The Prometheus labels of a stream key, sorted, with Prometheus 3's UTF-8 label names: a
/// tag category is named by its own text ([`label_name_of`]). `None` for a key that repeats a
/// category (Prometheus labels are a map).
pub fn prom_labels(key: &store::key::StreamKey) -> Option<Labels> {
    let tags = key.tags();
    let checked = tags.iter().any(|t| t.category() == CHECK_CATEGORY);
    let mut labels = Vec::with_capacity(tags.len() + 1);
    labels.push(("__name__".to_string(), key.name().to_string()));
    for (i, tag) in tags.iter().enumerate() {
        if i > 0 && tags[i - 1].category() == tag.category() {
            return None;
        }
        // The sender's own `check` next to httptrap's: `exported_check`, as Prometheus renames
        // a scraped label that clashes with a target label.
        let name = if checked && tag.category() == CHECK_LABEL.as_bytes() {
            CHECK_EXPORTED_LABEL.to_string()
        } else {
            label_name_of(tag.category())
        };
        labels.push((name, store::key::label_value(tag.value())));
    }
    labels.sort_unstable();
    // Two categories shown under one name (`exported_check` sent as such, beside a renamed
    // `check`) have no label view, as a repeated category has none.
    if labels.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    Some(labels)
}

/// httptrap's check tag (`__check:<check>`, written by the server on every httptrap sample):
/// the plain label `check` in the Prometheus view (Prometheus hides `__` labels).
pub const CHECK_CATEGORY: &[u8] = b"__check";
pub const CHECK_LABEL: &str = "check";
/// A sender's own `check` tag on a series that also has httptrap's.
pub const CHECK_EXPORTED_LABEL: &str = "exported_check";

/// The label name of a tag category: the category itself when it is UTF-8 (any such text is
/// a label name in Prometheus 3), else the store's `U__…` escape; httptrap's `__check` is
/// `check`.
pub fn label_name_of(category: &[u8]) -> String {
    if category == CHECK_CATEGORY {
        return CHECK_LABEL.to_string();
    }
    match std::str::from_utf8(category) {
        Ok(text) if !text.is_empty() && text != "__name__" => text.to_string(),
        _ => store::key::label_name(category),
    }
}

/// The tag categories whose values a label name can show: `check` is httptrap's `__check` or a
/// sender's own `check`; any other label one category.
pub fn label_categories(label: &str) -> Vec<Vec<u8>> {
    match label {
        CHECK_LABEL => vec![CHECK_CATEGORY.to_vec(), CHECK_LABEL.as_bytes().to_vec()],
        CHECK_EXPORTED_LABEL => vec![CHECK_LABEL.as_bytes().to_vec()],
        _ => vec![category_of(label)],
    }
}

/// A matcher's label as the label view names it: a legacy `U__…` escape (how these labels
/// were shown before UTF-8 names) stands for the category it escapes.
fn real_label_name(label: &str) -> String {
    if label.starts_with(store::key::PROM_ESCAPE_PREFIX) {
        if let Some((category, _)) = decode_label(label, "v") {
            return label_name_of(&category);
        }
    }
    label.to_string()
}

/// The label-value bytes a tag value has (inverse of `store::key::label_value`), via the
/// store's own label mapping.
fn decode_label(label: &str, value: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let key = store::key::StreamKey::from_labels([("__name__", "x"), (label, value)]).ok()?;
    let tag = key.tags().first()?;
    Some((tag.category().to_vec(), tag.value().to_vec()))
}

fn category_of(label: &str) -> Vec<u8> {
    decode_label(label, "v")
        .map(|(c, _)| c)
        .unwrap_or_else(|| label.as_bytes().to_vec())
}

fn bytes_regex(pattern: &str) -> Result<regex::bytes::Regex, EvalError> {
    regex::bytes::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(crate::parser::REGEX_SIZE_MAX)
        .build()
        .map_err(|e| EvalError::BadData(format!("invalid regex: {e}")))
}

/// A tag query that finds every series the matcher accepts (maybe more: the evaluator checks
/// each found series' labels against the matcher again).
fn matcher_query(m: &Matcher) -> Result<TagQuery, EvalError> {
    let any = || Pattern::Glob(b"*".to_vec());
    if m.label == "__name__" {
        let name = |p: Pattern| TagQuery::Term(Term::Name(p));
        return Ok(match m.op {
            MatchOp::Equal => name(Pattern::Exact(m.value.as_bytes().to_vec())),
            MatchOp::NotEqual => {
                TagQuery::Not(Box::new(name(Pattern::Exact(m.value.as_bytes().to_vec()))))
            }
            MatchOp::Regex => name(Pattern::Regex(bytes_regex(&m.value)?)),
            MatchOp::NotRegex => {
                TagQuery::Not(Box::new(name(Pattern::Regex(bytes_regex(&m.value)?))))
            }
        });
    }
    if m.label == CHECK_LABEL || m.label == CHECK_EXPORTED_LABEL {
        return check_matcher_query(m);
    }
    let category = category_of(&m.label);
    let tag = |value: Pattern| {
        TagQuery::Term(Term::Tag {
            category: Pattern::Exact(category.clone()),
            value,
        })
    };
    let exact = |v: &str| -> Pattern {
        match decode_label(&m.label, v) {
            Some((_, bytes)) => Pattern::Exact(bytes),
            None => Pattern::Exact(v.as_bytes().to_vec()),
        }
    };
    let empty = matcher_matches_empty(m);
    Ok(match (m.op, empty) {
        // Matchers that accept a missing label: everything but the series whose value fails.
        (MatchOp::Equal, _) if m.value.is_empty() => TagQuery::Not(Box::new(tag(any()))),
        (MatchOp::Equal, _) => tag(exact(&m.value)),
        (MatchOp::NotEqual, _) if m.value.is_empty() => tag(any()),
        (MatchOp::NotEqual, _) => TagQuery::Not(Box::new(tag(exact(&m.value)))),
        (MatchOp::Regex, false) => tag(Pattern::Regex(bytes_regex(&m.value)?)),
        (MatchOp::Regex, true) => TagQuery::Not(Box::new(TagQuery::And(vec![
            tag(any()),
            TagQuery::Not(Box::new(tag(Pattern::Regex(bytes_regex(&m.value)?)))),
        ]))),
        (MatchOp::NotRegex, false) => {
            TagQuery::Not(Box::new(tag(Pattern::Regex(bytes_regex(&m.value)?))))
        }
        (MatchOp::NotRegex, true) => TagQuery::And(vec![
            tag(any()),
            TagQuery::Not(Box::new(tag(Pattern::Regex(bytes_regex(&m.value)?)))),
        ]),
    })
}

/// A matcher on `check` or `exported_check`, whose value may come from either of two
/// categories: the series having the value in any of them when the matcher needs a value,
/// every series otherwise (the evaluator checks the labels of each found series again).
fn check_matcher_query(m: &Matcher) -> Result<TagQuery, EvalError> {
    let value = match m.op {
        MatchOp::Equal if !m.value.is_empty() => Pattern::Exact(m.value.as_bytes().to_vec()),
        MatchOp::Regex if !matcher_matches_empty(m) => Pattern::Regex(bytes_regex(&m.value)?),
        _ => {
            let any = TagQuery::Term(Term::Tag {
                category: Pattern::Exact(CHECK_CATEGORY.to_vec()),
                value: Pattern::Glob(b"*".to_vec()),
            });
            return Ok(TagQuery::Or(vec![
                any.clone(),
                TagQuery::Not(Box::new(any)),
            ]));
        }
    };
    let terms = label_categories(&m.label)
        .into_iter()
        .map(|category| {
            TagQuery::Term(Term::Tag {
                category: Pattern::Exact(category),
                value: value.clone(),
            })
        })
        .collect();
    Ok(TagQuery::Or(terms))
}

/// The matcher against a series' Prometheus labels (a missing label is the empty string).
pub fn label_matches(labels: &Labels, m: &Matcher, re: Option<&regex::Regex>) -> bool {
    let value = labels
        .iter()
        .find(|(k, _)| *k == m.label)
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    match m.op {
        MatchOp::Equal => value == m.value,
        MatchOp::NotEqual => value != m.value,
        MatchOp::Regex => re.is_some_and(|r| r.is_match(value)),
        MatchOp::NotRegex => re.is_some_and(|r| !r.is_match(value)),
    }
}

/// Series matching a selector whose activity meets `[start_ms, end_ms)` (for `/api/v1/series`
/// and friends), with their labels: at most `limit`, the first found (in id order) when more
/// match.
pub fn select_series(
    store: &Store,
    sel: &Selector,
    start_ms: i64,
    end_ms: i64,
    limit: usize,
) -> Result<Vec<Labels>, EvalError> {
    let limits = Limits {
        series_per_selector_max: limit,
        ..Limits::default()
    };
    let mut ctx = Ctx::new(Source::Local(store), end_ms, end_ms, 1, limits)?;
    Ok(ctx
        .find_bounded(sel, start_ms, end_ms, true)?
        .into_iter()
        .map(|f| f.labels)
        .collect())
}

#[cfg(test)]
mod check_label_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(key: &str) -> Option<Labels> {
        prom_labels(&store::key::StreamKey::parse(key).unwrap())
    }

    fn pairs(list: &[(&str, &str)]) -> Labels {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// httptrap's `__check` is the label `check`; a sender's own `check` beside it is
    /// `exported_check`, and alone stays `check`.
    #[test]
    fn the_check_tag_is_the_plain_label_check() {
        let want = pairs(&[("__name__", "lat"), ("check", "web-1"), ("host", "a")]);
        assert_eq!(labels("lat|ST[__check:web-1,host:a]"), Some(want));
        let want = pairs(&[
            ("__name__", "lat"),
            ("check", "web-1"),
            ("exported_check", "mine"),
        ]);
        assert_eq!(labels("lat|ST[__check:web-1,check:mine]"), Some(want));
        let want = pairs(&[("__name__", "lat"), ("check", "mine")]);
        assert_eq!(labels("lat|ST[check:mine]"), Some(want));
        assert_eq!(labels("lat|ST[__check:a,check:b,exported_check:c]"), None);
        assert_eq!(label_categories("check").len(), 2);
    }
}
