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

use hist::{Histogram, QuantileType};
use store::{Kind, Pattern, SeriesId, Slicing, Store, TagQuery, Term, View};

use crate::ast::{AggOp, At, BinOp, Card, Expr, Func, MatchOp, Matcher, Matching, Selector};
use crate::parser::{anchored_regex, matcher_matches_empty};

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
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            series_per_selector_max: SERIES_PER_SELECTOR_MAX_DEFAULT,
            samples_per_query_max: SAMPLES_PER_QUERY_MAX_DEFAULT,
            steps_max: STEPS_MAX_DEFAULT,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            lookback_ms: LOOKBACK_MS_DEFAULT,
        }
    }
}

/// Errors in the three classes the Prometheus API reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    BadData(String),
    Execution(String),
    Timeout(String),
}

impl EvalError {
    pub fn error_type(&self) -> &'static str {
        match self {
            EvalError::BadData(_) => "bad_data",
            EvalError::Execution(_) => "execution",
            EvalError::Timeout(_) => "timeout",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            EvalError::BadData(m) | EvalError::Execution(m) | EvalError::Timeout(m) => m,
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

enum Value {
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
    String(String),
}

/// Evaluates `query` at `t_ms`.
pub fn instant(store: &Store, query: &str, t_ms: i64, limits: Limits) -> Result<Output, EvalError> {
    check_time(t_ms, "time")?;
    let expr = crate::parser::parse(query).map_err(|e| EvalError::BadData(e.to_string()))?;
    let mut ctx = Ctx::new(store, t_ms, t_ms, 1, limits)?;
    if let Expr::Range { selector, range_ms } = &expr {
        return Ok(Output::Matrix(ctx.raw_range(selector, *range_ms)?));
    }
    ctx.prefetch(&expr)?;
    Ok(match ctx.eval(&expr)? {
        Value::Scalar(v) => Output::Scalar { t_ms, value: v[0] },
        Value::String(s) => Output::String { t_ms, value: s },
        Value::Vector(series) => {
            let series = dedupe(series)?;
            Output::Vector {
                t_ms,
                samples: series
                    .into_iter()
                    .filter_map(|mut s| s.points[0].take().map(|p| (s.labels, p)))
                    .collect(),
            }
        }
    })
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
    let expr = crate::parser::parse(query).map_err(|e| EvalError::BadData(e.to_string()))?;
    let mut ctx = Ctx::new(store, start_ms, end_ms, step_ms, limits)?;
    ctx.prefetch(&expr)?;
    let to_range = |ctx: &Ctx<'_>, labels: Labels, points: Vec<Option<Sample>>| {
        let mut out = RangeSeries {
            labels,
            floats: Vec::new(),
            hists: Vec::new(),
        };
        for (i, p) in points.into_iter().enumerate() {
            match p {
                Some(Sample::Float(v)) => out.floats.push((ctx.time(i), v)),
                Some(Sample::Hist(h)) => out.hists.push((ctx.time(i), h)),
                None => {}
            }
        }
        out
    };
    match ctx.eval(&expr)? {
        Value::Scalar(v) => {
            let points = v.into_iter().map(|v| Some(Sample::Float(v))).collect();
            Ok(Output::Matrix(vec![to_range(&ctx, Vec::new(), points)]))
        }
        Value::String(_) => Err(EvalError::BadData(
            "invalid expression type \"string\" for range query, must be Scalar or instant Vector"
                .into(),
        )),
        Value::Vector(series) => {
            let mut out: Vec<RangeSeries> = dedupe(series)?
                .into_iter()
                .map(|s| to_range(&ctx, s.labels, s.points))
                .filter(|s| !s.floats.is_empty() || !s.hists.is_empty())
                .collect();
            out.sort_by(|a, b| a.labels.cmp(&b.labels));
            Ok(Output::Matrix(out))
        }
    }
}

fn check_time(t_ms: i64, what: &str) -> Result<(), EvalError> {
    if t_ms.abs() > TIME_MS_MAX {
        return Err(EvalError::BadData(format!(
            "{what} {t_ms} ms is out of range"
        )));
    }
    Ok(())
}

/// Two series with one label set may exist (after dropping names) if their steps do not
/// overlap; Prometheus rejects the query otherwise.
fn dedupe(series: Vec<Series>) -> Result<Vec<Series>, EvalError> {
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
                            return Err(EvalError::Execution(format!(
                                "vector cannot contain metrics with the same labelset {}",
                                format_labels(&s.labels)
                            )));
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
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    Ok(out)
}

pub fn format_labels(labels: &Labels) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(", "))
}

fn drop_name(mut labels: Labels) -> Labels {
    labels.retain(|(k, _)| k != "__name__");
    labels
}

struct Ctx<'a> {
    store: &'a Store,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    steps: usize,
    limits: Limits,
    deadline: Instant,
    samples: u64,
    /// Series and data of every selector of the query, read under one store view before
    /// evaluation (`prefetch`), by the selector node's address.
    prefetched: HashMap<usize, (Vec<Found>, Vec<Raw>)>,
}

/// Every selector of `e` with its range (the lookback for bare selectors), in evaluation order.
fn collect_selectors<'e>(e: &'e Expr, lookback_ms: i64, out: &mut Vec<(&'e Selector, i64)>) {
    match e {
        Expr::Number(_) | Expr::String(_) => {}
        Expr::Selector(sel) => out.push((sel, lookback_ms)),
        Expr::Range { selector, range_ms } => out.push((selector, *range_ms)),
        Expr::Call { args, .. } => {
            for a in args {
                collect_selectors(a, lookback_ms, out);
            }
        }
        Expr::Aggregate { param, expr, .. } => {
            if let Some(p) = param {
                collect_selectors(p, lookback_ms, out);
            }
            collect_selectors(expr, lookback_ms, out);
        }
        Expr::Binary { lhs, rhs, .. } => {
            collect_selectors(lhs, lookback_ms, out);
            collect_selectors(rhs, lookback_ms, out);
        }
        Expr::Neg(inner) => collect_selectors(inner, lookback_ms, out),
    }
}

/// What `Ctx::read` got for one series.
enum Raw {
    Numeric(Vec<(i64, f64)>),
    /// Merged histograms by start (per base period or per slice), ascending.
    Hist(Vec<(i64, Histogram)>),
    None,
}

/// One series a selector matched.
struct Found {
    id: SeriesId,
    kind: Kind,
    labels: Labels,
}

impl<'a> Ctx<'a> {
    fn new(
        store: &'a Store,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
        limits: Limits,
    ) -> Result<Ctx<'a>, EvalError> {
        let steps = ((end_ms as i128 - start_ms as i128) / step_ms as i128 + 1) as usize;
        assert!(steps >= 1, "at least one step");
        Ok(Ctx {
            store,
            start_ms,
            end_ms,
            step_ms,
            steps,
            limits,
            deadline: Instant::now() + Duration::from_millis(limits.timeout_ms),
            samples: 0,
            prefetched: HashMap::new(),
        })
    }

    fn time(&self, i: usize) -> i64 {
        self.start_ms + i as i64 * self.step_ms
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

    /// The time each step of a selector reads at, after `@` and `offset`.
    fn eval_times(&self, sel: &Selector) -> Vec<i64> {
        (0..self.steps)
            .map(|i| {
                let t = match sel.at {
                    None => self.time(i),
                    Some(At::Start) => self.start_ms,
                    Some(At::End) => self.end_ms,
                    Some(At::TimeMs(ms)) => ms,
                };
                t.saturating_sub(sel.offset_ms)
            })
            .collect()
    }

    fn new_points(&mut self) -> Result<Vec<Option<Sample>>, EvalError> {
        self.charge(self.steps as u64)?;
        Ok(vec![None; self.steps])
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
            matchers.push((m.clone(), re));
        }
        let mut terms: Vec<TagQuery> = matchers
            .iter()
            .map(|(m, _)| matcher_query(m))
            .collect::<Result<_, _>>()?;
        let base = self.store_base_period()?;
        terms.push(TagQuery::Term(Term::Activity {
            start_ms: from_ms.saturating_sub(base),
            end_ms: to_ms.saturating_add(base),
        }));
        let ids = self
            .store
            .find(&TagQuery::And(terms), FIND_WORK_MAX)
            .map_err(|e| EvalError::Execution(format!("series search: {e}")))?;
        let snapshot = self
            .store
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
            let Ok(labels) = info.key.to_labels() else {
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

    fn store_base_period(&self) -> Result<i64, EvalError> {
        Ok(self.store.view().map_err(store_err)?.base_period_ms())
    }

    fn eval(&mut self, e: &Expr) -> Result<Value, EvalError> {
        self.check_deadline()?;
        match e {
            Expr::Number(v) => Ok(Value::Scalar(vec![*v; self.steps])),
            Expr::String(s) => Ok(Value::String(s.clone())),
            Expr::Selector(sel) => Ok(Value::Vector(self.instant_selector(sel)?)),
            Expr::Range { .. } => Err(EvalError::BadData(
                "a range vector is only allowed as a function argument or as an instant query"
                    .into(),
            )),
            Expr::Neg(inner) => match self.eval(inner)? {
                Value::Scalar(v) => Ok(Value::Scalar(v.into_iter().map(|x| -x).collect())),
                Value::Vector(series) => Ok(Value::Vector(
                    series
                        .into_iter()
                        .map(|s| Series {
                            labels: drop_name(s.labels),
                            points: s
                                .points
                                .into_iter()
                                .map(|p| match p {
                                    Some(Sample::Float(v)) => Some(Sample::Float(-v)),
                                    _ => None,
                                })
                                .collect(),
                        })
                        .collect(),
                )),
                Value::String(_) => Err(EvalError::BadData("cannot negate a string".into())),
            },
            Expr::Call { func, args } => self.call(*func, args),
            Expr::Aggregate {
                op,
                grouping,
                param,
                expr,
            } => {
                let param = match param {
                    Some(p) => Some(self.scalar(p)?),
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
                self.binary(*op, l, r, *return_bool, matching.as_ref())
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

    /// A bare selector: the newest numeric sample in `(t − lookback, t]`, or the merge of the
    /// histogram periods starting in `[t − lookback, t)`.
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
        let (found, raws) = self.selector_data(sel, lookback, true)?;
        let mut out = Vec::with_capacity(found.len());
        for (f, raw) in found.into_iter().zip(raws) {
            self.check_deadline()?;
            let mut points = self.new_points()?;
            let mut stamps = vec![0i64; self.steps];
            match raw {
                Raw::Numeric(raw) => {
                    for (i, &t) in times.iter().enumerate() {
                        let end = raw.partition_point(|&(ts, _)| ts <= t);
                        if end > 0 && raw[end - 1].0 > t - lookback {
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
            out.push((
                Series {
                    labels: f.labels,
                    points,
                },
                stamps,
            ));
        }
        Ok(out)
    }

    /// The series of a selector and their data: prefetched, or (for a selector `prefetch` did
    /// not see) found and read now. `range_ms` is the range, or the lookback of a bare selector.
    fn selector_data(
        &mut self,
        sel: &Selector,
        range_ms: i64,
        allow_pushdown: bool,
    ) -> Result<(Vec<Found>, Vec<Raw>), EvalError> {
        if let Some(data) = self.prefetched.remove(&(sel as *const Selector as usize)) {
            return Ok(data);
        }
        let times = self.eval_times(sel);
        let (lo, hi) = Self::span(&times);
        let found = self.find(sel, lo - range_ms, hi + 1)?;
        let store = self.store;
        let view = store.view().map_err(store_err)?;
        let raws = self.read(&view, &found, sel, range_ms, allow_pushdown)?;
        Ok((found, raws))
    }

    /// Finds the series of every selector in `e`, then reads all their data under one store
    /// view: the whole query sees one snapshot (every batch acknowledged before it, whole).
    fn prefetch(&mut self, e: &Expr) -> Result<(), EvalError> {
        let mut selectors: Vec<(&Selector, i64)> = Vec::new();
        collect_selectors(e, self.limits.lookback_ms, &mut selectors);
        let mut founds = Vec::with_capacity(selectors.len());
        for &(sel, range_ms) in &selectors {
            let times = self.eval_times(sel);
            let (lo, hi) = Self::span(&times);
            founds.push(self.find(sel, lo - range_ms, hi + 1)?);
        }
        let store = self.store;
        let view = store.view().map_err(store_err)?;
        for ((sel, range_ms), found) in selectors.into_iter().zip(founds) {
            let raws = self.read(&view, &found, sel, range_ms, true)?;
            self.prefetched
                .insert(sel as *const Selector as usize, (found, raws));
        }
        Ok(())
    }

    /// Reads every found series under one store view, so one selector sees one snapshot (whole
    /// batches across all its series); evaluation happens after the view is released. Numerics:
    /// raw samples in `[from, to)`. Histograms: what the windows `[t − range, t)` of `times`
    /// need — the store's per-slice merges where the windows are whole slices, else the raw
    /// periods.
    fn read(
        &mut self,
        view: &View<'_>,
        found: &[Found],
        sel: &Selector,
        range_ms: i64,
        allow_pushdown: bool,
    ) -> Result<Vec<Raw>, EvalError> {
        let times = self.eval_times(sel);
        let times = &times[..];
        let (lo, hi) = Self::span(times);
        // Numerics: `(t − range, t]` windows (the lookback for bare selectors).
        let (from_ms, to_ms) = (lo - range_ms + 1, hi + 1);
        let pushdown = pushdown_period(times, range_ms, view.base_period_ms(), self.step_ms)
            .filter(|_| allow_pushdown);
        let mut out = Vec::with_capacity(found.len());
        for f in found {
            self.check_deadline()?;
            let raw = match f.kind {
                Kind::Numeric => {
                    Raw::Numeric(view.raw_numeric(f.id, from_ms, to_ms).map_err(store_err)?)
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
    fn raw_range(&mut self, sel: &Selector, range_ms: i64) -> Result<Vec<RangeSeries>, EvalError> {
        let (found, raws) = self.selector_data(sel, range_ms, false)?;
        let mut out = Vec::new();
        for (f, raw) in found.into_iter().zip(raws) {
            let mut rs = RangeSeries {
                labels: f.labels,
                floats: Vec::new(),
                hists: Vec::new(),
            };
            match raw {
                Raw::Numeric(v) => rs.floats = v,
                Raw::Hist(entries) => {
                    rs.hists = entries
                        .into_iter()
                        .map(|(ts, h)| {
                            (
                                ts,
                                HistSample {
                                    hist: Arc::new(h),
                                    scale: 1.0,
                                },
                            )
                        })
                        .collect();
                }
                Raw::None => continue,
            }
            if !rs.floats.is_empty() || !rs.hists.is_empty() {
                out.push(rs);
            }
        }
        Ok(out)
    }

    fn call(&mut self, func: Func, args: &[Expr]) -> Result<Value, EvalError> {
        use Func::*;
        match func {
            Rate | Increase | Irate | Delta | Idelta | AvgOverTime | MinOverTime | MaxOverTime
            | SumOverTime | CountOverTime | LastOverTime | StddevOverTime | StdvarOverTime
            | QuantileOverTime | Changes | Resets | Deriv | PredictLinear => {
                let (param, matrix) = match func {
                    QuantileOverTime => (Some(self.scalar(&args[0])?), &args[1]),
                    PredictLinear => (Some(self.scalar(&args[1])?), &args[0]),
                    _ => (None, &args[0]),
                };
                let Expr::Range { selector, range_ms } = matrix else {
                    return Err(EvalError::BadData(format!(
                        "{} needs a range selector, got {matrix}",
                        func.name()
                    )));
                };
                Ok(Value::Vector(
                    self.range_function(func, selector, *range_ms, param)?,
                ))
            }
            Time => Ok(Value::Scalar(
                (0..self.steps)
                    .map(|i| self.time(i) as f64 / 1000.0)
                    .collect(),
            )),
            Vector => {
                let v = self.scalar(&args[0])?;
                Ok(Value::Vector(vec![Series {
                    labels: Vec::new(),
                    points: v.into_iter().map(|x| Some(Sample::Float(x))).collect(),
                }]))
            }
            Scalar => {
                let series = self.vector(&args[0])?;
                let out = (0..self.steps)
                    .map(|i| {
                        let mut present = series.iter().filter_map(|s| s.points[i].as_ref());
                        match (present.next(), present.next()) {
                            (Some(Sample::Float(v)), None) => *v,
                            _ => f64::NAN,
                        }
                    })
                    .collect();
                Ok(Value::Scalar(out))
            }
            Timestamp => {
                if let Expr::Selector(sel) = &args[0] {
                    let series = self.instant_selector_ts(sel)?;
                    return Ok(Value::Vector(
                        series
                            .into_iter()
                            .map(|(s, stamps)| Series {
                                labels: drop_name(s.labels),
                                points: s
                                    .points
                                    .iter()
                                    .zip(stamps)
                                    .map(|(p, ts)| {
                                        p.as_ref().map(|_| Sample::Float(ts as f64 / 1000.0))
                                    })
                                    .collect(),
                            })
                            .collect(),
                    ));
                }
                let series = self.vector(&args[0])?;
                let times: Vec<f64> = (0..self.steps)
                    .map(|i| self.time(i) as f64 / 1000.0)
                    .collect();
                Ok(Value::Vector(map_points(series, true, |i, p| {
                    p.map(|_| Sample::Float(times[i]))
                })))
            }
            Abs | Ceil | Floor => {
                let series = self.vector(&args[0])?;
                let f: fn(f64) -> f64 = match func {
                    Abs => f64::abs,
                    Ceil => f64::ceil,
                    _ => f64::floor,
                };
                Ok(Value::Vector(map_floats(series, true, |_, v| Some(f(v)))))
            }
            Round => {
                let series = self.vector(&args[0])?;
                let to = match args.get(1) {
                    Some(a) => self.scalar(a)?,
                    None => vec![1.0; self.steps],
                };
                Ok(Value::Vector(map_floats(series, true, |i, v| {
                    let inverse = 1.0 / to[i];
                    Some((v * inverse + 0.5).floor() / inverse)
                })))
            }
            Clamp | ClampMin | ClampMax => {
                let series = self.vector(&args[0])?;
                let a = self.scalar(&args[1])?;
                let b = match args.get(2) {
                    Some(e) => self.scalar(e)?,
                    None => vec![f64::NAN; self.steps],
                };
                Ok(Value::Vector(map_floats(series, true, |i, v| match func {
                    Clamp if b[i] < a[i] => None,
                    Clamp => Some(go_max(a[i], go_min(b[i], v))),
                    ClampMin => Some(go_max(a[i], v)),
                    _ => Some(go_min(a[i], v)),
                })))
            }
            LabelReplace => {
                let series = self.vector(&args[0])?;
                let dst = self.string(&args[1])?;
                let replacement = self.string(&args[2])?;
                let src = self.string(&args[3])?;
                let pattern = self.string(&args[4])?;
                let re = anchored_regex(&pattern)
                    .map_err(|e| EvalError::BadData(format!("invalid regex: {e}")))?;
                Ok(Value::Vector(
                    series
                        .into_iter()
                        .map(|mut s| {
                            let value = s
                                .labels
                                .iter()
                                .find(|(k, _)| *k == src)
                                .map(|(_, v)| v.as_str())
                                .unwrap_or("");
                            if let Some(caps) = re.captures(value) {
                                let mut res = String::new();
                                caps.expand(&replacement, &mut res);
                                s.labels.retain(|(k, _)| *k != dst);
                                if !res.is_empty() {
                                    s.labels.push((dst.clone(), res));
                                    s.labels.sort();
                                }
                            }
                            s
                        })
                        .collect(),
                ))
            }
            HistogramQuantile => {
                let q = self.scalar(&args[0])?;
                let series = self.vector(&args[1])?;
                self.histogram_quantile(q, series)
            }
            HistogramFraction => {
                let lo = self.scalar(&args[0])?;
                let hi = self.scalar(&args[1])?;
                let series = self.vector(&args[2])?;
                Ok(Value::Vector(map_hists(series, |i, h| {
                    let f = |t: f64| -> f64 {
                        h.hist
                            .inverse_quantiles(&[t])
                            .ok()
                            .and_then(|v| v.first().copied())
                            .unwrap_or(f64::NAN)
                    };
                    f(hi[i]) - f(lo[i])
                })))
            }
            HistogramCount => Ok(Value::Vector(map_hists(self.vector(&args[0])?, |_, h| {
                h.count()
            }))),
            HistogramSum => Ok(Value::Vector(map_hists(self.vector(&args[0])?, |_, h| {
                h.sum()
            }))),
            Absent => {
                let series = self.vector(&args[0])?;
                // The labels of the selector's equality matchers (Prometheus's rule).
                let mut labels: Labels = match &args[0] {
                    Expr::Selector(sel) => sel
                        .matchers
                        .iter()
                        .filter(|m| m.op == MatchOp::Equal && m.label != "__name__")
                        .map(|m| (m.label.clone(), m.value.clone()))
                        .collect(),
                    _ => Vec::new(),
                };
                labels.sort();
                labels.dedup_by(|a, b| a.0 == b.0);
                let points = (0..self.steps)
                    .map(|i| {
                        let present = series.iter().any(|s| s.points[i].is_some());
                        (!present).then_some(Sample::Float(1.0))
                    })
                    .collect();
                Ok(Value::Vector(vec![Series { labels, points }]))
            }
            HistogramAvg => Ok(Value::Vector(map_hists(self.vector(&args[0])?, |_, h| {
                h.sum() / h.count()
            }))),
        }
    }

    fn histogram_quantile(&mut self, q: Vec<f64>, series: Vec<Series>) -> Result<Value, EvalError> {
        let quantile_of = |h: &HistSample, q: f64| -> f64 {
            if q.is_nan() {
                f64::NAN
            } else if q < 0.0 {
                f64::NEG_INFINITY
            } else if q > 1.0 {
                f64::INFINITY
            } else {
                h.hist
                    .quantiles(&[q], QuantileType::Type7)
                    .ok()
                    .and_then(|v| v.first().copied())
                    .unwrap_or(f64::NAN)
            }
        };
        let mut out = Vec::new();
        // Classic `le` buckets: float series grouped by their labels without `le`.
        let mut groups: Vec<(Labels, Vec<(f64, usize)>)> = Vec::new();
        let mut group_of: HashMap<Labels, usize> = HashMap::new();
        for (index, s) in series.iter().enumerate() {
            let has_hist = s.points.iter().any(|p| matches!(p, Some(Sample::Hist(_))));
            if has_hist {
                let points = s
                    .points
                    .iter()
                    .enumerate()
                    .map(|(i, p)| match p {
                        Some(Sample::Hist(h)) => Some(Sample::Float(quantile_of(h, q[i]))),
                        _ => None,
                    })
                    .collect();
                out.push(Series {
                    labels: drop_name(s.labels.clone()),
                    points,
                });
                continue;
            }
            let Some(le) = s.labels.iter().find(|(k, _)| k == "le") else {
                continue;
            };
            let Ok(bound) = parse_le(&le.1) else {
                continue;
            };
            let mut key = drop_name(s.labels.clone());
            key.retain(|(k, _)| k != "le");
            let g = *group_of.entry(key.clone()).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push((bound, index));
        }
        for (labels, members) in groups {
            self.check_deadline()?;
            let mut points = self.new_points()?;
            for (i, slot) in points.iter_mut().enumerate() {
                let mut buckets: Vec<(f64, f64)> = members
                    .iter()
                    .filter_map(|&(bound, index)| match &series[index].points[i] {
                        Some(Sample::Float(v)) => Some((bound, *v)),
                        _ => None,
                    })
                    .collect();
                if !buckets.is_empty() {
                    *slot = Some(Sample::Float(bucket_quantile(q[i], &mut buckets)));
                }
            }
            out.push(Series { labels, points });
        }
        Ok(Value::Vector(out))
    }

    fn range_function(
        &mut self,
        func: Func,
        sel: &Selector,
        range_ms: i64,
        param: Option<Vec<f64>>,
    ) -> Result<Vec<Series>, EvalError> {
        let times = self.eval_times(sel);

        let (found, raws) = self.selector_data(sel, range_ms, true)?;
        let mut out = Vec::with_capacity(found.len());
        let keeps_name = func.keeps_name();
        for (f, raw) in found.into_iter().zip(raws) {
            self.check_deadline()?;
            let mut points = self.new_points()?;
            match raw {
                Raw::Numeric(raw) => {
                    for (i, &t) in times.iter().enumerate() {
                        if i % DEADLINE_CHECK_STEPS == 0 {
                            self.check_deadline()?;
                        }
                        let from = raw.partition_point(|&(ts, _)| ts <= t - range_ms);
                        let to = raw.partition_point(|&(ts, _)| ts <= t);
                        let window = &raw[from..to.max(from)];
                        let q = param.as_ref().map(|p| p[i]).unwrap_or(f64::NAN);
                        points[i] = range_value(func, window, t, range_ms, q).map(Sample::Float);
                    }
                }
                Raw::Hist(entries) => {
                    let scale = match func {
                        Func::Rate => 1000.0 / range_ms as f64,
                        Func::Increase | Func::SumOverTime => 1.0,
                        // Other range functions have no meaning for our histograms.
                        _ => continue,
                    };
                    let windows =
                        slide_merge(&entries, &times, range_ms, || self.check_deadline())?;
                    for (slot, w) in points.iter_mut().zip(windows) {
                        *slot = w.map(|hist| Sample::Hist(HistSample { hist, scale }));
                    }
                }
                Raw::None => continue,
            }
            out.push(Series {
                labels: if keeps_name {
                    f.labels
                } else {
                    drop_name(f.labels)
                },
                points,
            });
        }
        Ok(out)
    }

    fn aggregate(
        &mut self,
        op: AggOp,
        grouping: Option<&crate::ast::Grouping>,
        param: Option<Vec<f64>>,
        series: Vec<Series>,
    ) -> Result<Value, EvalError> {
        let key_of = |labels: &Labels| -> Labels {
            match grouping {
                None => Vec::new(),
                Some(g) if g.without => labels
                    .iter()
                    .filter(|(k, _)| k != "__name__" && !g.labels.contains(k))
                    .cloned()
                    .collect(),
                Some(g) => labels
                    .iter()
                    .filter(|(k, _)| g.labels.contains(k))
                    .cloned()
                    .collect(),
            }
        };
        let mut groups: Vec<(Labels, Vec<usize>)> = Vec::new();
        let mut index: HashMap<Labels, usize> = HashMap::new();
        for (i, s) in series.iter().enumerate() {
            let key = key_of(&s.labels);
            let g = *index.entry(key.clone()).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        if matches!(op, AggOp::Topk | AggOp::Bottomk) {
            let k = param.unwrap_or_default();
            let mut out: Vec<Series> = Vec::new();
            let mut selected: Vec<Vec<bool>> = vec![vec![false; self.steps]; series.len()];
            for (_, members) in &groups {
                for (i, &kf) in k.iter().enumerate() {
                    if kf.is_nan() || kf < 1.0 {
                        continue;
                    }
                    let mut present: Vec<(f64, usize)> = members
                        .iter()
                        .filter_map(|&m| match &series[m].points[i] {
                            Some(Sample::Float(v)) => Some((*v, m)),
                            _ => None,
                        })
                        .collect();
                    // NaN sorts last in both directions.
                    present.sort_by(|a, b| {
                        let ord = if op == AggOp::Topk {
                            b.0.partial_cmp(&a.0)
                        } else {
                            a.0.partial_cmp(&b.0)
                        };
                        ord.unwrap_or_else(|| a.0.is_nan().cmp(&b.0.is_nan()))
                    });
                    for &(_, m) in present.iter().take(kf.min(usize::MAX as f64) as usize) {
                        selected[m][i] = true;
                    }
                }
            }
            for (m, s) in series.into_iter().enumerate() {
                if !selected[m].iter().any(|&b| b) {
                    continue;
                }
                let points = s
                    .points
                    .into_iter()
                    .zip(&selected[m])
                    .map(|(p, &keep)| if keep { p } else { None })
                    .collect();
                out.push(Series {
                    labels: s.labels,
                    points,
                });
            }
            return Ok(Value::Vector(out));
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
        let steps = self.steps;
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
                .or_insert_with(|| vec![false; self.steps]);
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
                        self.charge(self.steps as u64)?;
                        out.push(Series {
                            labels: labels.clone(),
                            points: vec![None; self.steps],
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

/// Prometheus's quantile over classic cumulative buckets `(upper bound, cumulative count)`.
fn bucket_quantile(q: f64, buckets: &mut [(f64, f64)]) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Equal bounds add up; cumulative counts are forced monotonic.
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
    for &(bound, count) in buckets.iter() {
        match merged.last_mut() {
            Some(last) if last.0 == bound => last.1 += count,
            _ => merged.push((bound, count)),
        }
    }
    let mut max = f64::NEG_INFINITY;
    for b in merged.iter_mut() {
        if b.1 < max {
            b.1 = max;
        }
        max = b.1;
    }
    let n = merged.len();
    if n < 2 {
        return f64::NAN;
    }
    let observations = merged[n - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = merged.partition_point(|x| x.1 < rank);
    if b == n - 1 {
        return merged[n - 2].0;
    }
    if b == 0 && merged[0].0 <= 0.0 {
        return merged[0].0;
    }
    let (mut start, end, mut count) = (0.0, merged[b].0, merged[b].1);
    if b > 0 {
        start = merged[b - 1].0;
        count -= merged[b - 1].1;
        rank -= merged[b - 1].1;
    }
    start + (end - start) * (rank / count)
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

fn mean_and_variance(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var)
}

/// One numeric range function over the window's samples (ascending by time).
fn range_value(func: Func, w: &[(i64, f64)], t: i64, range_ms: i64, q: f64) -> Option<f64> {
    if w.is_empty() {
        return None;
    }
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
        Func::AvgOverTime => Some(values().sum::<f64>() / w.len() as f64),
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
        Func::SumOverTime => Some(values().sum()),
        Func::CountOverTime => Some(w.len() as f64),
        Func::LastOverTime => Some(w[w.len() - 1].1),
        Func::StddevOverTime | Func::StdvarOverTime => {
            let v: Vec<f64> = values().collect();
            let (_, var) = mean_and_variance(&v);
            Some(if func == Func::StddevOverTime {
                var.sqrt()
            } else {
                var
            })
        }
        Func::QuantileOverTime => {
            let mut v: Vec<f64> = values().collect();
            Some(float_quantile(q, &mut v))
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
            let (slope, intercept) = linear_regression(w, t);
            Some(intercept + slope * q)
        }
        _ => None,
    }
}

/// Least-squares line through the samples, time in seconds from `intercept_ms`: (slope per
/// second, value at `intercept_ms`). Constant values give slope 0 exactly (as Prometheus).
fn linear_regression(w: &[(i64, f64)], intercept_ms: i64) -> (f64, f64) {
    let n = w.len() as f64;
    if w.iter().all(|&(_, v)| v == w[0].1) {
        return (0.0, w[0].1);
    }
    let (mut sx, mut sy, mut sxy, mut sxx) = (0.0, 0.0, 0.0, 0.0);
    for &(ts, v) in w {
        let x = (ts - intercept_ms) as f64 / 1000.0;
        sx += x;
        sy += v;
        sxy += x * v;
        sxx += x * x;
    }
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
    let duration_to_end = (t - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let average = sampled / (w.len() - 1) as f64;
    if is_counter && result > 0.0 && first_v >= 0.0 {
        let duration_to_zero = sampled * (first_v / result);
        if duration_to_zero < duration_to_start {
            duration_to_start = duration_to_zero;
        }
    }
    let threshold = average * 1.1;
    let mut interval = sampled;
    interval += if duration_to_start < threshold {
        duration_to_start
    } else {
        average / 2.0
    };
    interval += if duration_to_end < threshold {
        duration_to_end
    } else {
        average / 2.0
    };
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
        AggOp::Sum => floats.iter().sum(),
        AggOp::Avg => floats.iter().sum::<f64>() / floats.len() as f64,
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
        AggOp::Stddev => mean_and_variance(&floats).1.sqrt(),
        AggOp::Stdvar => mean_and_variance(&floats).1,
        AggOp::Quantile => float_quantile(q, &mut floats),
        AggOp::Count | AggOp::Group | AggOp::Topk | AggOp::Bottomk => return Ok(None),
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
    let mut ctx = Ctx::new(store, end_ms, end_ms, 1, limits)?;
    Ok(ctx
        .find_bounded(sel, start_ms, end_ms, true)?
        .into_iter()
        .map(|f| f.labels)
        .collect())
}
