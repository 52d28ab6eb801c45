//! What one ruleset sees at one period end: one observation per stream.
//!
//! An observation depends only on the data stored in `[T − window, T)` (text and absence
//! rules: `[T − seen_within, T)`), so the same data always gives the same observations.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A ruleset's selected series: id, key text, tags.
type Selection = Arc<Vec<(SeriesId, Arc<str>, Tags)>>;

use hist::{Accumulator, Histogram};
use query::eval::{Data, Limits, Stream};
use store::key::StreamKey;
use store::Store;
use store::{Kind as SeriesKind, SeriesId};
use store::{Pattern, Slicing, TagQuery, Term};

use crate::cond::Windowed;
use crate::rule::{Kind, Ruleset, WinFn};

/// Streams one ruleset may watch: more is an `error` for the ruleset, never a partial answer.
pub const INSTANCES_PER_RULESET_MAX: usize = 10_000;
/// Wall-clock budget of one ruleset's expression.
pub const EVAL_TIME_MS_MAX: u64 = 20_000;

/// A stream's tags, shared by its observations from one period to the next.
pub type Tags = Arc<Vec<(String, String)>>;

/// One stream's value over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct Obs {
    /// The stream's identity: its CAQL label (a `find`'s canonical key), made unique.
    pub stream: Arc<str>,
    pub tags: Tags,
    /// `None`: the window held too little data.
    pub value: Option<Windowed>,
    /// Share of the window's periods holding a value.
    pub coverage: f64,
}

fn tags_of(key: &StreamKey) -> Vec<(String, String)> {
    key.tags()
        .iter()
        .map(|t| {
            (
                String::from_utf8_lossy(t.category()).into_owned(),
                String::from_utf8_lossy(t.value()).into_owned(),
            )
        })
        .collect()
}

/// The series a ruleset's `find` selected, kept while the index has no new series (series
/// are never removed from it, so the same count means the same answer).
#[derive(Default)]
pub struct Cache {
    selections: HashMap<String, (u32, Selection)>,
}

/// Observes `rs` at period end `t_ms`. `Err` is an error of the whole ruleset.
pub fn observe(
    store: &Store,
    rs: &Ruleset,
    t_ms: i64,
    cache: &mut Cache,
) -> Result<Vec<Obs>, String> {
    observe_with(store, rs, t_ms, cache, true)
}

/// As [`observe`]; `direct` false evaluates a plain `find:histogram` through CAQL too (tests
/// check that both give the same).
pub fn observe_with(
    store: &Store,
    rs: &Ruleset,
    t_ms: i64,
    cache: &mut Cache,
    direct: bool,
) -> Result<Vec<Obs>, String> {
    match &rs.kind {
        Kind::Caql { query, .. } => match plain_find_histogram(query).filter(|_| direct) {
            Some((name, tags)) => observe_direct(store, rs, &name, tags.as_deref(), t_ms, cache),
            None => observe_caql(store, rs, query, t_ms),
        },
        Kind::Text { name, tags } => observe_text(store, rs, name, tags.as_deref(), t_ms),
        Kind::Absent {
            name,
            tags,
            silent_for_ms,
            expect,
        } => observe_absent(
            store,
            rs,
            name,
            tags.as_deref(),
            *silent_for_ms,
            expect,
            t_ms,
        ),
        // Judged from the index's live activity by `sources`, not here.
        Kind::PushSources { .. } => Ok(Vec::new()),
    }
}

fn observe_caql(
    store: &Store,
    rs: &Ruleset,
    q: &query::Query,
    t_ms: i64,
) -> Result<Vec<Obs>, String> {
    let limits = Limits {
        streams_max: INSTANCES_PER_RULESET_MAX,
        time_max_ms: EVAL_TIME_MS_MAX,
        ..Limits::default()
    };
    let cancel = AtomicBool::new(false);
    let start = t_ms - rs.window.ms;
    let out = query::eval::evaluate(store, q, start, t_ms, rs.period_ms, limits, &cancel)
        .map_err(|e| e.to_string())?;
    if out.range.period_ms != rs.period_ms || out.range.end_ms != t_ms {
        return Err(format!(
            "the expression evaluates at a period of {} ms; set the ruleset's period to it",
            out.range.period_ms
        ));
    }
    if out.streams.len() > INSTANCES_PER_RULESET_MAX {
        return Err(format!(
            "{} streams, more than {INSTANCES_PER_RULESET_MAX} instances per ruleset",
            out.streams.len()
        ));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    Ok(out
        .streams
        .into_iter()
        .map(|s| {
            let stream = unique_label(&mut seen, &s.label);
            windowed(rs, s, stream)
        })
        .collect())
}

/// Labels may repeat (`label("x")`); later ones get ` #2`, ` #3` in output order (which is the
/// store's key order, so stable).
fn unique_label(seen: &mut HashMap<String, usize>, label: &str) -> String {
    let n = seen.entry(label.to_string()).or_insert(0);
    *n += 1;
    if *n == 1 {
        label.to_string()
    } else {
        format!("{label} #{n}")
    }
}

fn windowed(rs: &Ruleset, s: Stream, stream: String) -> Obs {
    let (value, coverage) = match s.data {
        Data::Num(v) => window_num(rs, &v),
        Data::Hist(v) => window_hist(rs, v),
    };
    let value = value.filter(|_| coverage > 0.0 && coverage >= rs.min_coverage);
    Obs {
        stream: stream.into(),
        tags: Arc::new(s.tags),
        value,
        coverage,
    }
}

fn coverage(present: usize, len: usize) -> f64 {
    if len == 0 {
        0.0
    } else {
        present as f64 / len as f64
    }
}

fn window_num(rs: &Ruleset, v: &[Option<f64>]) -> (Option<Windowed>, f64) {
    let present: Vec<f64> = v.iter().flatten().copied().collect();
    let cov = coverage(present.len(), v.len());
    let n = present.len() as f64;
    let x = match rs.window_fn(false) {
        WinFn::Sum | WinFn::Merge => present.iter().sum(),
        WinFn::Mean => present.iter().sum::<f64>() / n,
        WinFn::Min => present.iter().copied().fold(f64::INFINITY, f64::min),
        WinFn::Max => present.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        WinFn::Last => present.last().copied().unwrap_or(f64::NAN),
        WinFn::Count => n,
    };
    let value = (!present.is_empty() && x.is_finite()).then_some(Windowed::Num(x));
    (value, cov)
}

fn window_hist(rs: &Ruleset, v: Vec<Option<Histogram>>) -> (Option<Windowed>, f64) {
    let len = v.len();
    let present: Vec<Histogram> = v.into_iter().flatten().collect();
    let cov = coverage(present.len(), len);
    let h = match rs.window_fn(true) {
        WinFn::Last => present.into_iter().last(),
        // Sums, means and counts of histograms are their merge; min and max make no sense of a
        // distribution and are refused by the reducers that follow (`Windowed::Hist`).
        _ => {
            let mut it = present.into_iter();
            it.next().map(|mut acc| {
                for h in it {
                    acc.merge(&h);
                }
                acc
            })
        }
    };
    (h.map(Windowed::Hist), cov)
}

fn name_pattern(glob: &str) -> Pattern {
    if glob.contains('*') {
        Pattern::Glob(glob.as_bytes().to_vec())
    } else {
        Pattern::Exact(glob.as_bytes().to_vec())
    }
}

/// Series matching a name glob, an optional tag query and an optional kind, with their facts.
fn select(
    store: &Store,
    name: &str,
    tags: Option<&str>,
    kind: Option<SeriesKind>,
) -> Result<Vec<store::SeriesInfo>, String> {
    let mut terms = vec![TagQuery::Term(Term::Name(name_pattern(name)))];
    if let Some(k) = kind {
        terms.push(TagQuery::Term(Term::Type(k)));
    }
    if let Some(t) = tags.filter(|t| !t.trim().is_empty()) {
        terms.push(TagQuery::parse(t).map_err(|e| format!("tags {t:?}: {e}"))?);
    }
    let ids = store
        .find(&TagQuery::And(terms), store::WORK_MAX_DEFAULT)
        .map_err(|e| e.to_string())?;
    if ids.len() > INSTANCES_PER_RULESET_MAX {
        return Err(format!(
            "{} streams match, more than {INSTANCES_PER_RULESET_MAX} instances per ruleset",
            ids.len()
        ));
    }
    let snap = store.index().snapshot().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(info) = snap.series(id).map_err(|e| e.to_string())? {
            out.push(info);
        }
    }
    out.sort_by(|a, b| a.key.canonical_str().cmp(b.key.canonical_str()));
    Ok(out)
}

/// `find:histogram("name"[, "tags"])` and nothing else: (name glob, tag query).
fn plain_find_histogram(q: &query::Query) -> Option<(String, Option<String>)> {
    let query::Expr::Call(c) = &q.expr else {
        return None;
    };
    let plain = q.directives.is_empty()
        && c.name == "find:histogram"
        && c.kwargs.is_empty()
        && c.sources.is_empty();
    match (plain, c.args.as_slice()) {
        (true, [query::Expr::Str(name)]) => Some((name.clone(), None)),
        (true, [query::Expr::Str(name), query::Expr::Str(tags)]) => {
            Some((name.clone(), Some(tags.clone())))
        }
        _ => None,
    }
}

impl Cache {
    /// The histogram series `name` and `tags` select, in key order, as CAQL's `find` has them.
    fn select(
        &mut self,
        store: &Store,
        ruleset: &str,
        name: &str,
        tags: Option<&str>,
    ) -> Result<Selection, String> {
        let count = store
            .index()
            .snapshot()
            .map_err(|e| e.to_string())?
            .series_count();
        if let Some((c, sel)) = self.selections.get(ruleset) {
            if *c == count {
                return Ok(sel.clone());
            }
        }
        let series = select(store, name, tags, Some(SeriesKind::Histogram))?;
        let sel: Selection = Arc::new(
            series
                .into_iter()
                .map(|s| {
                    (
                        s.id,
                        Arc::from(s.key.canonical_str()),
                        Arc::new(tags_of(&s.key)),
                    )
                })
                .collect(),
        );
        self.selections
            .insert(ruleset.to_string(), (count, sel.clone()));
        Ok(sel)
    }
}

/// A plain `find:histogram` read straight into reused accumulators: the window's periods per
/// series, no stream vectors, no histogram per period (what CAQL would do, cheaper).
fn observe_direct(
    store: &Store,
    rs: &Ruleset,
    name: &str,
    tags: Option<&str>,
    t_ms: i64,
    cache: &mut Cache,
) -> Result<Vec<Obs>, String> {
    let series = cache.select(store, &rs.name, name, tags)?;
    let view = store.view().map_err(|e| e.to_string())?;
    let slicing = Slicing {
        start_ms: t_ms - rs.window.ms,
        end_ms: t_ms,
        period_ms: rs.period_ms,
    };
    let n = rs.window_periods();
    let mut periods = vec![Accumulator::new(); n];
    let mut window = Accumulator::new();
    let last = rs.window_fn(true) == WinFn::Last;
    let mut out = Vec::with_capacity(series.len());
    for (id, key, tags) in series.iter() {
        periods.iter_mut().for_each(Accumulator::clear);
        view.accumulate_histograms(*id, slicing, &mut periods)
            .map_err(|e| e.to_string())?;
        let present = periods.iter().filter(|a| !a.is_empty()).count();
        let coverage = present as f64 / n as f64;
        let value = if present == 0 || coverage < rs.min_coverage {
            None
        } else if last {
            periods
                .iter()
                .rev()
                .find(|a| !a.is_empty())
                .map(Accumulator::to_histogram)
        } else {
            window.clear();
            periods.iter().for_each(|a| window.add_accumulator(a));
            Some(window.to_histogram())
        };
        out.push(Obs {
            stream: key.clone(),
            tags: tags.clone(),
            value: value.map(Windowed::Hist),
            coverage,
        });
    }
    Ok(out)
}

fn observe_text(
    store: &Store,
    rs: &Ruleset,
    name: &str,
    tags: Option<&str>,
    t_ms: i64,
) -> Result<Vec<Obs>, String> {
    let series = select(store, name, tags, Some(SeriesKind::Text))?;
    let view = store.view().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(series.len());
    for s in series {
        let changes = view
            .raw_text(s.id, t_ms - rs.seen_within_ms, t_ms)
            .map_err(|e| e.to_string())?;
        let value = changes.last().map(|(ts, last)| {
            // `changed` means changed in the period just closed: the value before is only
            // known (and only relevant) when the newest change falls in it.
            let in_period = *ts >= t_ms - rs.period_ms;
            let prev = changes
                .len()
                .checked_sub(2)
                .filter(|_| in_period)
                .map(|i| changes[i].1.clone());
            Windowed::Text {
                last: last.clone(),
                prev,
            }
        });
        out.push(Obs {
            stream: s.key.canonical().into(),
            tags: Arc::new(tags_of(&s.key)),
            coverage: if value.is_some() { 1.0 } else { 0.0 },
            value,
        });
    }
    Ok(out)
}

/// The newest timestamp of `id` in `[start, end)` (histograms: the newest period's start).
pub fn newest_in(
    view: &store::View<'_>,
    id: SeriesId,
    kind: SeriesKind,
    start: i64,
    end: i64,
    base_period_ms: i64,
) -> Result<Option<i64>, String> {
    if end <= start {
        return Ok(None);
    }
    let e = |x: store::StoreError| x.to_string();
    Ok(match kind {
        SeriesKind::Numeric => view
            .raw_numeric(id, start, end)
            .map_err(e)?
            .last()
            .map(|p| p.0),
        SeriesKind::Text => view
            .raw_text(id, start, end)
            .map_err(e)?
            .last()
            .map(|p| p.0),
        SeriesKind::Histogram => {
            let from = crate::util::align_down(start, base_period_ms);
            view.raw_histograms(id, from, end)
                .map_err(e)?
                .last()
                .map(|p| p.0.max(start))
        }
    })
}

fn observe_absent(
    store: &Store,
    rs: &Ruleset,
    name: &str,
    tags: Option<&str>,
    silent_for_ms: i64,
    expect: &[String],
    t_ms: i64,
) -> Result<Vec<Obs>, String> {
    let base = store.options().base_period_ms;
    let series = select(store, name, tags, None)?;
    let view = store.view().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(series.len());
    let mut found = std::collections::HashSet::new();
    for s in &series {
        let key = s.key.canonical();
        let seen = last_seen(&view, s, t_ms, rs.seen_within_ms, base)?;
        found.insert(key.clone());
        let Some(last) = seen else { continue };
        out.push(silent_obs(key, tags_of(&s.key), t_ms, last, silent_for_ms));
    }
    for k in expect {
        let Ok(key) = StreamKey::parse(k) else {
            continue;
        };
        if found.contains(key.canonical_str()) {
            continue;
        }
        // Listed but never seen: silent since forever.
        out.push(Obs {
            stream: key.canonical().into(),
            tags: Arc::new(tags_of(&key)),
            value: Some(Windowed::Silent {
                silent_ms: i64::MAX,
                last_seen_ms: 0,
                limit_ms: silent_for_ms,
            }),
            coverage: 1.0,
        });
    }
    out.sort_by(|a, b| a.stream.cmp(&b.stream));
    Ok(out)
}

fn silent_obs(stream: String, tags: Vec<(String, String)>, t: i64, last: i64, limit: i64) -> Obs {
    Obs {
        stream: stream.into(),
        tags: Arc::new(tags),
        value: Some(Windowed::Silent {
            silent_ms: t - last,
            last_seen_ms: last,
            limit_ms: limit,
        }),
        coverage: 1.0,
    }
}

/// When the series last had data before `t`, within `seen_within` (`None`: not in that time).
fn last_seen(
    view: &store::View<'_>,
    s: &store::SeriesInfo,
    t: i64,
    seen_within: i64,
    base: i64,
) -> Result<Option<i64>, String> {
    let Some((first, last)) = s.activity_ms else {
        return Ok(None);
    };
    let from = t - seen_within;
    if first >= t || last < from {
        return Ok(None);
    }
    if last < t {
        // Nothing after `last` at all: the index says exactly when it was last seen.
        return Ok(Some(last));
    }
    newest_in(view, s.id, s.kind, from, t, base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_labels_are_made_unique_in_order() {
        let mut seen = HashMap::new();
        let got: Vec<String> = ["a", "b", "a", "a"]
            .iter()
            .map(|l| unique_label(&mut seen, l))
            .collect();
        assert_eq!(got, ["a", "b", "a #2", "a #3"]);
    }
}
