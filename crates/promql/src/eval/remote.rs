//! Where a query's series come from: the local store, or a cluster's partitions.
//!
//! Evaluation reads data in one place, the selectors (`Ctx::prefetch`, `Ctx::selector_data`).
//! Over a [`Remote`] those reads become one select request (`FORMAT.md`) that every partition
//! answers from its own store with the single-node code (`answer_select`); the front joins
//! the answers and evaluates the rest of the query itself. A series lives in exactly one
//! partition, so the joined series are exactly the single node's.

use serde::{Deserialize, Serialize};
use store::Store;

use super::{Ctx, EvalError, Labels, Limits, Planned, Raw};
use crate::ast::{Expr, Selector};

/// The data behind a query.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    Local(&'a Store),
    /// A cluster's partitions, with the read-after token the request carried (if any).
    Remote {
        remote: &'a dyn Remote,
        read_after: Option<&'a str>,
    },
}

/// A cluster front's way to its partitions: one up-to-date owner of each answers.
pub trait Remote: Send + Sync {
    /// Posts a select request to every partition; their answer bodies. A partition no owner
    /// answered is `EvalError::Unavailable` naming it; a malformed `read_after` is `BadData`.
    fn select(&self, request: &[u8], read_after: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError>;
    /// GETs a Prometheus API path (with its query) from every partition; their answer bodies.
    fn get(&self, path_and_query: &str, read_after: Option<&str>)
        -> Result<Vec<Vec<u8>>, EvalError>;
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
) -> Result<Vec<(Vec<Labels>, Vec<Raw>)>, EvalError> {
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
