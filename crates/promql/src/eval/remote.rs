//! Where a query's series come from: the local store, or a cluster's partitions.
//!
//! Evaluation reads data in one place, the selectors (`Ctx::prefetch`, `Ctx::selector_data`).
//! Over a [`Remote`] those reads become one select request (`FORMAT.md`) that every partition
//! answers from its own store with the single-node code (`answer_select`); the front joins
//! the answers and evaluates the rest of the query itself. A series lives in exactly one
//! partition, so the joined series are exactly the single node's.

use serde::{Deserialize, Serialize};
use store::Store;

use super::{
    Ctx, EvalError, HistSample, Labels, Limits, Planned, Raw, Sample, SelectedData, Series,
};
use crate::ast::{AggOp, Expr, Selector};

/// The data behind a query.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    Local(&'a Store),
    /// A cluster's partitions, with the read-after token the request carried (if any).
    Remote {
        remote: &'a dyn Remote,
        read_after: Option<&'a str>,
        /// Aggregations that merge exactly are evaluated per partition (`pushable`).
        pushdown: bool,
    },
}

/// A cluster front's way to its partitions: one up-to-date owner of each answers.
pub trait Remote: Send + Sync {
    /// Posts a select request to every partition; their answer bodies. A partition no owner
    /// answered is `EvalError::Unavailable` naming it; a malformed `read_after` is `BadData`.
    fn select(&self, request: &[u8], read_after: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError>;
    /// GETs a Prometheus API path (with its query) from every partition; their answer bodies.
    fn get(
        &self,
        path_and_query: &str,
        read_after: Option<&str>,
    ) -> Result<Vec<Vec<u8>>, EvalError>;
    /// Posts a partial-aggregate request to every partition; their answer bodies.
    fn partial(&self, request: &[u8], read_after: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError>;
}

/// Most selectors one select request may carry (a query has few; this bounds the answer).
const SELECTS_MAX: usize = 256;

#[derive(Serialize, Deserialize)]
struct Request {
    pushdown: bool,
    series_per_selector_max: usize,
    samples_per_query_max: u64,
    timeout_ms: u64,
    selects: Vec<Select>,
}

#[derive(Serialize, Deserialize)]
struct Select {
    selector: String,
    range_ms: i64,
    bare: bool,
    step_ms: i64,
    times: Vec<i64>,
}

#[derive(Serialize, Deserialize, Default)]
struct Answer {
    selects: Vec<Vec<SeriesData>>,
}

#[derive(Serialize, Deserialize)]
struct SeriesData {
    labels: Labels,
    /// Numeric samples: time and the value's IEEE 754 bits (stale markers are NaNs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    numeric: Option<Vec<(i64, u64)>>,
    /// Histograms: start and the base64 binary form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hist: Option<Vec<(i64, String)>>,
}

fn bad_answer(e: impl std::fmt::Display) -> EvalError {
    EvalError::Execution(format!("a partition's select answer: {e}"))
}

/// The selectors of `plans` read from every partition and joined: per plan, the series sorted
/// by labels and their data. The query's limits hold on the join.
pub(crate) fn select(
    remote: &dyn Remote,
    read_after: Option<&str>,
    plans: &[Planned<'_>],
    pushdown: bool,
    limits: &Limits,
) -> Result<Vec<SelectedData>, EvalError> {
    if plans.len() > SELECTS_MAX {
        return Err(EvalError::Execution(format!(
            "more than {SELECTS_MAX} selectors in one query"
        )));
    }
    let request = Request {
        pushdown,
        series_per_selector_max: limits.series_per_selector_max,
        samples_per_query_max: limits.samples_per_query_max,
        timeout_ms: limits.timeout_ms,
        selects: plans
            .iter()
            .map(|p| Select {
                selector: p.sel.to_string(),
                range_ms: p.range_ms,
                bare: p.bare,
                step_ms: p.step_ms,
                times: p.times.clone(),
            })
            .collect(),
    };
    let body = serde_json::to_vec(&request).map_err(bad_answer)?;
    let answers = remote.select(&body, read_after)?;
    let mut joined: Vec<Vec<SeriesData>> = (0..plans.len()).map(|_| Vec::new()).collect();
    for a in answers {
        let answer: Answer = serde_json::from_slice(&a).map_err(bad_answer)?;
        if answer.selects.len() != plans.len() {
            return Err(bad_answer("wrong number of selectors"));
        }
        for (all, part) in joined.iter_mut().zip(answer.selects) {
            all.extend(part);
        }
    }
    let mut out = Vec::with_capacity(plans.len());
    for (plan, mut series) in plans.iter().zip(joined) {
        if series.len() > limits.series_per_selector_max {
            return Err(EvalError::Execution(format!(
                "selector {} matches more than {} series",
                plan.sel, limits.series_per_selector_max
            )));
        }
        series.sort_by(|a, b| a.labels.cmp(&b.labels));
        let mut labels = Vec::with_capacity(series.len());
        let mut raws = Vec::with_capacity(series.len());
        for s in series {
            raws.push(raw_of(s.numeric, s.hist)?);
            labels.push(s.labels);
        }
        out.push((labels, raws));
    }
    Ok(out)
}

fn raw_of(
    numeric: Option<Vec<(i64, u64)>>,
    hist: Option<Vec<(i64, String)>>,
) -> Result<Raw, EvalError> {
    Ok(match (numeric, hist) {
        (Some(v), _) => Raw::Numeric(v.into_iter().map(|(t, b)| (t, f64::from_bits(b))).collect()),
        (None, Some(v)) => Raw::Hist(
            v.into_iter()
                .map(|(t, b)| Ok((t, hist::Histogram::from_base64(&b).map_err(bad_answer)?)))
                .collect::<Result<_, EvalError>>()?,
        ),
        (None, None) => Raw::None,
    })
}

/// A partition's answer to a select request, read from its own store with the single-node
/// code: every selector's series found, then all read under one store view.
pub fn answer_select(store: &Store, request: &[u8]) -> Result<Vec<u8>, EvalError> {
    let request: Request = serde_json::from_slice(request)
        .map_err(|e| EvalError::BadData(format!("select request: {e}")))?;
    if request.selects.len() > SELECTS_MAX {
        return Err(EvalError::BadData(format!(
            "select request: more than {SELECTS_MAX} selectors"
        )));
    }
    let mut selectors: Vec<Selector> = Vec::with_capacity(request.selects.len());
    for s in &request.selects {
        match crate::parser::parse(&s.selector) {
            Ok(Expr::Selector(sel)) => selectors.push(sel),
            _ => {
                return Err(EvalError::BadData(format!(
                    "select request: `{}` is not a selector",
                    s.selector
                )))
            }
        }
    }
    let plans: Vec<Planned<'_>> = request
        .selects
        .iter()
        .zip(&selectors)
        .map(|(s, sel)| Planned {
            sel,
            range_ms: s.range_ms,
            bare: s.bare,
            times: s.times.clone(),
            step_ms: s.step_ms.max(1),
        })
        .collect();
    let limits = Limits {
        series_per_selector_max: request.series_per_selector_max,
        samples_per_query_max: request.samples_per_query_max,
        timeout_ms: request.timeout_ms,
        ..Limits::default()
    };
    let mut ctx = Ctx::new(Source::Local(store), 0, 0, 1, limits)?;
    let read = ctx.find_and_read(&plans, request.pushdown)?;
    let answer = Answer {
        selects: read
            .into_iter()
            .map(|(found, raws)| {
                found
                    .into_iter()
                    .zip(raws)
                    .map(|(f, raw)| series_data(f.labels, raw))
                    .collect()
            })
            .collect(),
    };
    serde_json::to_vec(&answer).map_err(|e| EvalError::Execution(format!("select answer: {e}")))
}

fn series_data(labels: Labels, raw: Raw) -> SeriesData {
    let (numeric, hist) = match raw {
        Raw::Numeric(v) => (
            Some(v.into_iter().map(|(t, x)| (t, x.to_bits())).collect()),
            None,
        ),
        Raw::Hist(v) => (
            None,
            Some(v.into_iter().map(|(t, h)| (t, h.to_base64())).collect()),
        ),
        Raw::None => (None, None),
    };
    SeriesData {
        labels,
        numeric,
        hist,
    }
}

// ---- aggregation pushed down ----

/// Whether `op(inner)` may be evaluated per partition and its partials merged exactly: a
/// `sum`, `count`, `min` or `max` without parameter over a selector or a per-series range
/// function of a range selector (a series lives in one partition, so each group's partials
/// are disjoint). `absent*` look at all series at once and stay on the front.
pub(crate) fn pushable(op: AggOp, param: bool, inner: &Expr) -> bool {
    use crate::ast::Func::*;
    if param || !matches!(op, AggOp::Sum | AggOp::Count | AggOp::Min | AggOp::Max) {
        return false;
    }
    match inner {
        Expr::Selector(_) => true,
        Expr::Call { func, args } => {
            matches!(
                func,
                Rate | Increase
                    | Irate
                    | Delta
                    | Idelta
                    | Deriv
                    | Changes
                    | Resets
                    | AvgOverTime
                    | MinOverTime
                    | MaxOverTime
                    | SumOverTime
                    | CountOverTime
                    | LastOverTime
                    | StddevOverTime
                    | StdvarOverTime
                    | QuantileOverTime
                    | PresentOverTime
            ) && args
                .iter()
                .all(|a| matches!(a, Expr::Range { .. } | Expr::Number(_)))
                && args.iter().any(|a| matches!(a, Expr::Range { .. }))
        }
        _ => false,
    }
}

#[derive(Serialize, Deserialize)]
struct PartialRequest {
    expr: String,
    start_ms: i64,
    end_ms: i64,
    step_ms: i64,
    query_start_ms: i64,
    query_end_ms: i64,
    lookback_ms: i64,
    series_per_selector_max: usize,
    samples_per_query_max: u64,
    timeout_ms: u64,
    experimental_functions: bool,
}

#[derive(Serialize, Deserialize, Default)]
struct PartialAnswer {
    series: Vec<PartialSeries>,
    warnings: Vec<String>,
    infos: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct PartialSeries {
    labels: Labels,
    /// Per step: null, `{"f": bits}` or `{"h": base64, "s": scale bits}`.
    points: Vec<Option<PartialPoint>>,
}

#[derive(Serialize, Deserialize)]
struct PartialPoint {
    /// The kinds among the group's members at this step: 1 floats, 2 histograms (a group
    /// mixing them has no value, whichever partitions the kinds are in).
    #[serde(default)]
    k: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    f: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    h: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<u64>,
}

impl<'a> Ctx<'a> {
    /// `op(inner)` evaluated by every partition on this grid and the partials merged.
    pub(crate) fn pushed_down(
        &mut self,
        remote: &dyn Remote,
        read_after: Option<&str>,
        aggregate: &Expr,
        op: AggOp,
    ) -> Result<Vec<Series>, EvalError> {
        let request = PartialRequest {
            expr: aggregate.to_string(),
            start_ms: self.grid.start_ms,
            end_ms: self.grid.end_ms,
            step_ms: self.grid.step_ms,
            query_start_ms: self.query_start_ms,
            query_end_ms: self.query_end_ms,
            lookback_ms: self.limits.lookback_ms,
            series_per_selector_max: self.limits.series_per_selector_max,
            samples_per_query_max: self.limits.samples_per_query_max,
            timeout_ms: self.limits.timeout_ms,
            experimental_functions: self.limits.experimental_functions,
        };
        let body = serde_json::to_vec(&request).map_err(bad_answer)?;
        let mut groups: Vec<(Labels, Vec<Option<Sample>>, Vec<u8>)> = Vec::new();
        let mut index: std::collections::HashMap<Labels, usize> = Default::default();
        for a in remote.partial(&body, read_after)? {
            self.check_deadline()?;
            let answer: PartialAnswer = serde_json::from_slice(&a).map_err(bad_answer)?;
            answer.warnings.into_iter().for_each(|w| self.notes.warn(w));
            answer.infos.into_iter().for_each(|i| self.notes.info(i));
            for s in answer.series {
                if s.points.len() != self.grid.steps {
                    return Err(bad_answer("a series of another length than the grid"));
                }
                let (points, kinds): (Vec<_>, Vec<_>) = s
                    .points
                    .into_iter()
                    .map(point_of)
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .unzip();
                match index.get(&s.labels) {
                    Some(&g) => {
                        let (_, acc, acc_kinds) = &mut groups[g];
                        for (a, p) in acc.iter_mut().zip(points) {
                            *a = merge_partial(op, a.take(), p)?;
                        }
                        for (a, k) in acc_kinds.iter_mut().zip(kinds) {
                            *a |= k;
                        }
                    }
                    None => {
                        self.charge(self.grid.steps as u64)?;
                        index.insert(s.labels.clone(), groups.len());
                        groups.push((s.labels, points, kinds));
                    }
                }
            }
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(groups
            .into_iter()
            .map(|(labels, mut points, kinds)| {
                for (p, k) in points.iter_mut().zip(kinds) {
                    if mixed_has_no_value(op, k) {
                        *p = None;
                    }
                }
                Series { labels, points }
            })
            .collect())
    }
}

/// Whether a group whose members had `kinds` at a step has no value under `op`, as on one
/// node: `sum` of floats and histograms together, `min`/`max` with any histogram.
fn mixed_has_no_value(op: AggOp, kinds: u8) -> bool {
    match op {
        AggOp::Sum => kinds == KIND_FLOAT | KIND_HIST,
        AggOp::Min | AggOp::Max => kinds & KIND_HIST != 0,
        _ => false,
    }
}

const KIND_FLOAT: u8 = 1;
const KIND_HIST: u8 = 2;

fn point_of(p: Option<PartialPoint>) -> Result<(Option<Sample>, u8), EvalError> {
    let Some(p) = p else {
        return Ok((None, 0));
    };
    let kinds = p.k;
    if p.f.is_none() && p.h.is_none() {
        return Ok((None, kinds));
    }
    Ok((
        Some(match (p.f, p.h) {
            (Some(bits), _) => Sample::Float(f64::from_bits(bits)),
            (None, Some(h)) => Sample::Hist(HistSample {
                hist: std::sync::Arc::new(hist::Histogram::from_base64(&h).map_err(bad_answer)?),
                scale: f64::from_bits(p.s.unwrap_or(1f64.to_bits())),
            }),
            (None, None) => return Err(bad_answer("a point without a value")),
        }),
        kinds,
    ))
}

/// Two partitions' partials of one group at one step, merged as `op` merges its members.
fn merge_partial(
    op: AggOp,
    a: Option<Sample>,
    b: Option<Sample>,
) -> Result<Option<Sample>, EvalError> {
    let (a, b) = match (a, b) {
        (None, x) | (x, None) => return Ok(x),
        (Some(a), Some(b)) => (a, b),
    };
    Ok(match (op, a, b) {
        (AggOp::Sum | AggOp::Count, Sample::Float(x), Sample::Float(y)) => {
            Some(Sample::Float(super::float::sum([x, y].into_iter())))
        }
        (AggOp::Min, Sample::Float(x), Sample::Float(y)) => Some(Sample::Float(nan_min(x, y))),
        (AggOp::Max, Sample::Float(x), Sample::Float(y)) => Some(Sample::Float(nan_max(x, y))),
        (AggOp::Sum, Sample::Hist(x), Sample::Hist(y)) => {
            if x.scale != y.scale {
                return Err(EvalError::Execution(
                    "cannot add histograms of different scales (rates over different ranges)"
                        .into(),
                ));
            }
            let merged = hist::Histogram::merge_many(&[x.hist.as_ref(), y.hist.as_ref()]);
            Some(Sample::Hist(HistSample {
                hist: std::sync::Arc::new(merged),
                scale: x.scale,
            }))
        }
        // Floats in one partition and histograms in another: no value, as on one node.
        _ => None,
    })
}

/// Prometheus's `min` over floats: NaN only when every value is NaN.
fn nan_min(x: f64, y: f64) -> f64 {
    match (x.is_nan(), y.is_nan()) {
        (true, _) => y,
        (_, true) => x,
        _ => x.min(y),
    }
}

fn nan_max(x: f64, y: f64) -> f64 {
    match (x.is_nan(), y.is_nan()) {
        (true, _) => y,
        (_, true) => x,
        _ => x.max(y),
    }
}

/// A partition's partial aggregate: the pushed-down expression evaluated over its own store on
/// the front's grid, with its annotations.
pub fn answer_partial(store: &Store, request: &[u8]) -> Result<Vec<u8>, EvalError> {
    let r: PartialRequest = serde_json::from_slice(request)
        .map_err(|e| EvalError::BadData(format!("partial request: {e}")))?;
    let limits = Limits {
        series_per_selector_max: r.series_per_selector_max,
        samples_per_query_max: r.samples_per_query_max,
        timeout_ms: r.timeout_ms,
        lookback_ms: r.lookback_ms,
        experimental_functions: r.experimental_functions,
        ..Limits::default()
    };
    let expr = crate::parser::parse_with(
        &r.expr,
        crate::parser::ParseOptions {
            experimental_functions: limits.experimental_functions,
        },
    )
    .map_err(|e| EvalError::BadData(e.to_string()))?;
    let Expr::Aggregate {
        op,
        param,
        expr: inner,
        ..
    } = &expr
    else {
        return Err(EvalError::BadData(
            "partial request: not an aggregation".into(),
        ));
    };
    if !pushable(*op, param.is_some(), inner) || r.step_ms <= 0 || r.end_ms < r.start_ms {
        return Err(EvalError::BadData("partial request: not pushable".into()));
    }
    let mut ctx = Ctx::new(
        Source::Local(store),
        r.start_ms,
        r.end_ms,
        r.step_ms,
        limits,
    )?;
    ctx.query_start_ms = r.query_start_ms;
    ctx.query_end_ms = r.query_end_ms;
    ctx.prefetch(&expr)?;
    let grouping = match &expr {
        Expr::Aggregate { grouping, .. } => grouping.as_ref(),
        _ => None,
    };
    let members = ctx.vector(inner)?;
    let kinds = member_kinds(grouping, &members, ctx.grid.steps);
    let super::Value::Vector(series) = ctx.aggregate(*op, grouping, None, members)? else {
        return Err(EvalError::Execution("partial: not a vector".into()));
    };
    let answer = PartialAnswer {
        series: series
            .into_iter()
            .map(|s| {
                let k = kinds.get(&s.labels);
                let points = s
                    .points
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let k = k.and_then(|k| k.get(i).copied()).unwrap_or(0);
                        partial_point(p, k)
                    })
                    .collect();
                PartialSeries {
                    labels: s.labels,
                    points,
                }
            })
            .collect(),
        warnings: std::mem::take(&mut ctx.notes.warnings),
        infos: std::mem::take(&mut ctx.notes.infos),
    };
    serde_json::to_vec(&answer).map_err(|e| EvalError::Execution(format!("partial answer: {e}")))
}

/// Per group (by its labels) and step, the kinds its members had there.
fn member_kinds(
    grouping: Option<&crate::ast::Grouping>,
    members: &[Series],
    steps: usize,
) -> std::collections::HashMap<Labels, Vec<u8>> {
    super::aggregate::groups_of(grouping, members)
        .into_iter()
        .map(|(labels, indexes)| {
            let mut kinds = vec![0u8; steps];
            for &m in &indexes {
                for (k, p) in kinds.iter_mut().zip(&members[m].points) {
                    *k |= match p {
                        Some(Sample::Float(_)) => KIND_FLOAT,
                        Some(Sample::Hist(_)) => KIND_HIST,
                        None => 0,
                    };
                }
            }
            (labels, kinds)
        })
        .collect()
}

fn partial_point(s: Option<Sample>, k: u8) -> Option<PartialPoint> {
    match s {
        None if k == 0 => None,
        None => Some(PartialPoint {
            k,
            f: None,
            h: None,
            s: None,
        }),
        Some(Sample::Float(v)) => Some(PartialPoint {
            k,
            f: Some(v.to_bits()),
            h: None,
            s: None,
        }),
        Some(Sample::Hist(h)) => Some(PartialPoint {
            k,
            f: None,
            h: Some(h.hist.to_base64()),
            s: Some(h.scale.to_bits()),
        }),
    }
}
