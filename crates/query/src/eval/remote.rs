//! CAQL over a cluster's partitions.
//!
//! A query's data comes from its source calls (`find:*`, `metric:*`) and from the histogram
//! merges pushed down over them (`histogram:merge`, `group_by:merge` directly over a histogram
//! source). On a cluster front each of those calls is sent as text to every partition, which
//! evaluates it over its own store with the single-node code (`answer_part`); the front joins
//! the streams (a stream lives in exactly one partition) or merges the partial merges group by
//! group (histogram merges are exact), then evaluates the rest of the pipeline itself.

use std::collections::BTreeMap;

use hist::Histogram;
use serde::{Deserialize, Serialize};
use store::Store;

use super::{Data, EvalError, Evaluator, Limits, Range, Stream};
use crate::ast::{Call, Expr};

/// A cluster front's way to its partitions: one up-to-date owner of each answers.
pub trait Remote: Send + Sync {
    /// Posts a part request (JSON) to every partition; their answer bodies. A partition no
    /// owner answered is `EvalError::Unavailable` naming it.
    fn part(&self, request: &[u8], read_after: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError>;
}

/// A front's partitions with the read-after token the request carried (if any).
pub type Parts<'a> = (&'a dyn Remote, Option<&'a str>);

#[derive(Serialize, Deserialize)]
struct PartRequest {
    call: String,
    start_ms: i64,
    end_ms: i64,
    period_ms: i64,
    streams_max: usize,
    points_max: u64,
    time_max_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct PartStream {
    name: String,
    tags: Vec<(String, String)>,
    label: String,
    /// Numeric slices: the value's IEEE 754 bits, or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    num: Option<Vec<Option<u64>>>,
    /// Histogram slices: the base64 binary form, or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hist: Option<Vec<Option<String>>>,
}

fn bad_answer(e: impl std::fmt::Display) -> EvalError {
    EvalError::Store(format!("a partition's answer: {e}"))
}

/// Every partition's streams for `call` over `range`, in partition order.
fn ask(
    ev: &Evaluator<'_>,
    (remote, read_after): Parts<'_>,
    call: &Call,
    range: Range,
) -> Result<Vec<Vec<Stream>>, EvalError> {
    let request = PartRequest {
        call: call.to_string(),
        start_ms: range.start_ms,
        end_ms: range.end_ms,
        period_ms: range.period_ms,
        streams_max: ev.limits.streams_max,
        points_max: ev.limits.points_max,
        time_max_ms: ev.limits.time_max_ms,
    };
    let body = serde_json::to_vec(&request).map_err(bad_answer)?;
    let mut out = Vec::new();
    for answer in remote.part(&body, read_after)? {
        ev.tick()?;
        let streams: Vec<PartStream> = serde_json::from_slice(&answer).map_err(bad_answer)?;
        out.push(
            streams
                .into_iter()
                .map(|s| stream_of(s, range.slices()))
                .collect::<Result<_, _>>()?,
        );
    }
    Ok(out)
}

fn stream_of(s: PartStream, slices: usize) -> Result<Stream, EvalError> {
    let data = match (s.num, s.hist) {
        (Some(v), _) => Data::Num(v.into_iter().map(|b| b.map(f64::from_bits)).collect()),
        (None, Some(v)) => Data::Hist(
            v.into_iter()
                .map(|b| {
                    b.map(|b| Histogram::from_base64(&b).map_err(bad_answer))
                        .transpose()
                })
                .collect::<Result<_, _>>()?,
        ),
        (None, None) => Data::Num(vec![None; slices]),
    };
    if data.len() != slices {
        return Err(bad_answer("a stream of another length than the range"));
    }
    Ok(Stream {
        name: s.name,
        tags: s.tags,
        label: s.label,
        data,
    })
}

/// A source call's streams from every partition: joined, in the single node's order (by
/// canonical key, which is the label of a source's stream), held to the streams bound.
pub(super) fn source(
    ev: &Evaluator<'_>,
    remote: Parts<'_>,
    call: &Call,
    range: Range,
    limit: Option<usize>,
) -> Result<Vec<Stream>, EvalError> {
    let mut all: Vec<Stream> = ask(ev, remote, call, range)?
        .into_iter()
        .flatten()
        .collect();
    all.sort_by(|a, b| a.label.cmp(&b.label));
    if let Some(l) = limit {
        all.truncate(l);
    }
    ev.check_size(all.len(), &range)?;
    Ok(all)
}

/// A histogram merge pushed down to every partition, its partial merges merged group by group
/// (by the `by` categories' values, the single node's group order).
pub(super) fn merge(
    ev: &Evaluator<'_>,
    remote: Parts<'_>,
    call: &Call,
    by: &[String],
    range: Range,
) -> Result<Vec<Stream>, EvalError> {
    let mut groups: BTreeMap<Vec<Option<String>>, Stream> = BTreeMap::new();
    let mut names: Vec<String> = Vec::new();
    for part in ask(ev, remote, call, range)? {
        for s in part {
            ev.tick()?;
            if !s.name.is_empty() && !names.contains(&s.name) {
                names.push(s.name.clone());
            }
            let key: Vec<Option<String>> = by
                .iter()
                .map(|c| s.tags.iter().find(|(k, _)| k == c).map(|(_, v)| v.clone()))
                .collect();
            match groups.get_mut(&key) {
                None => {
                    groups.insert(key, s);
                }
                Some(g) => {
                    if let (Data::Hist(acc), Data::Hist(add)) = (&mut g.data, &s.data) {
                        for (a, h) in acc.iter_mut().zip(add) {
                            match (a.as_mut(), h) {
                                (Some(a), Some(h)) => a.merge(h),
                                (None, Some(h)) => *a = Some(h.clone()),
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
    }
    // The merged streams are named when every partition's series had one name.
    let name = match names.as_slice() {
        [one] => one.clone(),
        _ => String::new(),
    };
    let mut out: Vec<Stream> = groups.into_values().collect();
    for s in &mut out {
        s.name.clone_from(&name);
    }
    // Without groups the single node answers one empty merge; partitions without series
    // answer the same, so at most one placeholder is left.
    ev.check_size(out.len(), &range)?;
    Ok(out)
}

/// Whether `e` is a source whose histograms merge in the store (see `histogram_source`).
pub(super) fn is_histogram_source(e: &Expr) -> bool {
    matches!(e, Expr::Call(c) if matches!(
        c.name.as_str(),
        "find:histogram" | "find:histogram_cum" | "metric:histogram"
    ))
}

/// A partition's answer to a part request: the call evaluated over its own store.
pub fn answer_part(
    store: &Store,
    request: &[u8],
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Vec<u8>, EvalError> {
    let r: PartRequest = serde_json::from_slice(request)
        .map_err(|e| EvalError::Invalid(format!("part request: {e}")))?;
    let query = crate::parser::parse(&r.call)?;
    let Expr::Call(_) = &query.expr else {
        return Err(EvalError::Invalid(format!(
            "part request: `{}` is not a call",
            r.call
        )));
    };
    if r.period_ms <= 0 || r.end_ms < r.start_ms {
        return Err(EvalError::Invalid("part request: bad range".into()));
    }
    let range = Range {
        start_ms: r.start_ms,
        end_ms: r.end_ms,
        period_ms: r.period_ms,
    };
    let limits = Limits {
        streams_max: r.streams_max,
        points_max: r.points_max,
        time_max_ms: r.time_max_ms,
        ..Limits::default()
    };
    if range.slices() as u64 > limits.slices_max {
        return Err(EvalError::Limit("part request: too many slices".into()));
    }
    let ev = Evaluator::new(store, None, limits, cancel);
    let streams = ev.eval(&query.expr, range)?;
    let parts: Vec<PartStream> = streams
        .into_iter()
        .map(|s| {
            let (num, hist) = match s.data {
                Data::Num(v) => (
                    Some(v.into_iter().map(|x| x.map(f64::to_bits)).collect()),
                    None,
                ),
                Data::Hist(v) => (
                    None,
                    Some(v.into_iter().map(|h| h.map(|h| h.to_base64())).collect()),
                ),
            };
            PartStream {
                name: s.name,
                tags: s.tags,
                label: s.label,
                num,
                hist,
            }
        })
        .collect();
    serde_json::to_vec(&parts).map_err(|e| EvalError::Store(format!("part answer: {e}")))
}
