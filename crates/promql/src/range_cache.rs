//! Range query answers kept for the settled past, so a dashboard asking the same query again a
//! little later evaluates only the steps it has not seen.
//!
//! Each step of a range query is evaluated on its own, from samples at or before it (once the
//! query has no `@` and no negative `offset`), so an answer over `[start, end]` is the answer
//! over `[start, t)` followed by the one over `[t, end]`, and the steps before a time stay right
//! while no sample at or before them changes. The store says when one did
//! (`Store::past_mark`, `Store::past_changed_since`): a write reaching back, a deletion, a
//! retention drop. A kept answer is cut back to the steps before the earliest change, and
//! only steps before the mark's `settled_before_ms` are kept at all, so nothing kept can be
//! changed by a write the store did not note.
//!
//! Bounds: `bytes_max` in all (least recently used answers go first), one answer at most an
//! eighth of it, `ENTRIES_MAX` answers. Answers with warnings or infos are not kept, and when the
//! steps not kept give one, the whole range is evaluated: the steps a note came from are not
//! known.

use std::collections::HashMap;
use std::sync::Mutex;

use store::{PastMark, Store};

use crate::ast::Expr;
use crate::eval::{Annotations, EvalError, Limits, Output, RangeSeries};

/// Answers kept at most.
const ENTRIES_MAX: usize = 4_096;

/// What makes two requests' steps the same computation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    query: String,
    step_ms: i64,
    /// Where the steps fall: `start mod step`.
    phase_ms: i64,
    lookback_ms: i64,
    subquery_step_ms: i64,
}

struct Entry {
    mark: PastMark,
    /// Steps `first_ms..=last_ms` are kept (every step of the phase; a series may have none).
    first_ms: i64,
    last_ms: i64,
    series: Vec<RangeSeries>,
    bytes: usize,
    used: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    bytes: usize,
    tick: u64,
    hits: u64,
    misses: u64,
}

/// Hits and misses since start (for `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub bytes: u64,
    pub entries: u64,
}

/// Range query answers over the settled past (see the module's text).
pub struct RangeCache {
    bytes_max: usize,
    state: Mutex<State>,
}

/// Whether a range query may be answered here: one `range_from` would evaluate without an
/// error about its parameters, whose steps each depend only on samples at or before them.
pub fn answers(query: &str, (start_ms, end_ms, step_ms): (i64, i64, i64), limits: &Limits) -> bool {
    crate::eval::range_query(query, start_ms, end_ms, step_ms, limits).is_ok_and(|e| cacheable(&e))
}

/// Whether each step of a range query's answer depends only on samples at or before it.
pub fn cacheable(e: &Expr) -> bool {
    match e {
        Expr::Number(_) | Expr::String(_) => true,
        Expr::Selector(s) | Expr::Range { selector: s, .. } => s.at.is_none() && s.offset_ms >= 0,
        Expr::Subquery {
            expr,
            offset_ms,
            at,
            ..
        } => at.is_none() && *offset_ms >= 0 && cacheable(expr),
        Expr::Call { args, .. } => args.iter().all(cacheable),
        Expr::Aggregate { param, expr, .. } => {
            param.as_deref().is_none_or(cacheable) && cacheable(expr)
        }
        Expr::Binary { lhs, rhs, .. } => cacheable(lhs) && cacheable(rhs),
        Expr::Neg(e) => cacheable(e),
    }
}

fn series_bytes(s: &RangeSeries) -> usize {
    let labels: usize = s.labels.iter().map(|(k, v)| k.len() + v.len() + 48).sum();
    let hists: usize = s
        .hists
        .iter()
        .map(|(_, h)| 64 + 16 * h.hist.bin_count())
        .sum();
    72 + labels + 16 * s.floats.len() + hists
}

/// The series' points with times in `[lo, hi]`, series left with none dropped.
fn slice(series: &[RangeSeries], lo: i64, hi: i64) -> Vec<RangeSeries> {
    let within = |t: &i64| lo <= *t && *t <= hi;
    series
        .iter()
        .map(|s| RangeSeries {
            labels: s.labels.clone(),
            floats: s.floats.iter().filter(|p| within(&p.0)).copied().collect(),
            hists: s.hists.iter().filter(|p| within(&p.0)).cloned().collect(),
        })
        .filter(|s| !s.floats.is_empty() || !s.hists.is_empty())
        .collect()
}

/// `older` then `newer` (later steps), by labels, sorted as a range answer is.
fn join(older: Vec<RangeSeries>, newer: Vec<RangeSeries>) -> Vec<RangeSeries> {
    let mut by_labels: HashMap<crate::eval::Labels, RangeSeries> = HashMap::new();
    for s in older.into_iter().chain(newer) {
        match by_labels.get_mut(&s.labels) {
            Some(have) => {
                have.floats.extend(s.floats);
                have.hists.extend(s.hists);
            }
            None => {
                by_labels.insert(s.labels.clone(), s);
            }
        }
    }
    let mut out: Vec<RangeSeries> = by_labels.into_values().collect();
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    out
}

/// The last step of `phase` at or before `t`.
fn step_at_or_before(t: i64, step_ms: i64, phase_ms: i64) -> i64 {
    t - (t - phase_ms).rem_euclid(step_ms)
}

impl RangeCache {
    pub fn new(bytes_max: usize) -> RangeCache {
        RangeCache {
            bytes_max,
            state: Mutex::new(State::default()),
        }
    }

    pub fn stats(&self) -> CacheStats {
        self.state
            .lock()
            .map_or(CacheStats::default(), |s| CacheStats {
                hits: s.hits,
                misses: s.misses,
                bytes: s.bytes as u64,
                entries: s.entries.len() as u64,
            })
    }

    /// The answer over `[start_ms, end_ms]`: kept steps from here, the rest from `eval` (called
    /// with the first step it must evaluate; again from `start_ms` when the rest has notes).
    /// What is settled is kept for next time.
    pub fn range(
        &self,
        store: &Store,
        query: &str,
        (start_ms, end_ms, step_ms): (i64, i64, i64),
        limits: &Limits,
        eval: impl Fn(i64) -> Result<(Output, Annotations), EvalError>,
    ) -> Result<(Output, Annotations), EvalError> {
        assert!(step_ms > 0 && start_ms <= end_ms);
        let key = Key {
            query: query.to_string(),
            step_ms,
            phase_ms: start_ms.rem_euclid(step_ms),
            lookback_ms: limits.lookback_ms,
            subquery_step_ms: limits.subquery_step_ms,
        };
        // Before anything is read: a write this answer does not see is noted after it.
        let mark = store.past_mark();
        let kept = self.kept(store, &key, (start_ms, end_ms));
        // The request's last step (`end_ms` need not be one).
        let end_step_ms = step_at_or_before(end_ms, step_ms, key.phase_ms);
        let (out, notes) = match kept {
            Some((last_ms, _)) if last_ms >= end_step_ms => {
                (Output::Matrix(Vec::new()), Annotations::default())
            }
            Some((last_ms, _)) => eval(last_ms + step_ms)?,
            None => eval(start_ms)?,
        };
        let noted = !(notes.warnings.is_empty() && notes.infos.is_empty());
        if noted && kept.is_some() {
            // Which steps a note came from is not known, and a note the later steps give may
            // not be the whole range's: the whole range, as if nothing were kept.
            return eval(start_ms);
        }
        let Output::Matrix(fresh) = out else {
            return Ok((out, notes));
        };
        let series = match kept {
            Some((_, older)) => join(older, fresh),
            None => fresh,
        };
        check_answer(&series, limits)?;
        if !noted {
            self.keep(key, mark, start_ms, end_ms, &series);
        }
        Ok((Output::Matrix(series), notes))
    }

    /// The kept steps within `[start_ms, end_ms]` (the last kept step, the series), cut back to
    /// before any change of the past since they were kept; counted as a hit or a miss.
    fn kept(
        &self,
        store: &Store,
        key: &Key,
        window: (i64, i64),
    ) -> Option<(i64, Vec<RangeSeries>)> {
        let mut state = self.state.lock().ok()?;
        let found = Self::lookup(&mut state, store, key, window);
        if found.is_some() {
            state.hits += 1;
        } else {
            state.misses += 1;
        }
        found
    }

    fn lookup(
        state: &mut State,
        store: &Store,
        key: &Key,
        (start_ms, end_ms): (i64, i64),
    ) -> Option<(i64, Vec<RangeSeries>)> {
        state.tick += 1;
        let tick = state.tick;
        let entry = state.entries.get_mut(key)?;
        if let Some(changed_ms) = store.past_changed_since(&entry.mark) {
            if changed_ms <= entry.first_ms {
                let bytes = entry.bytes;
                state.entries.remove(key);
                state.bytes -= bytes;
                return None;
            }
            if changed_ms <= entry.last_ms {
                // The steps before the change: `first_ms` is one, so none is before it.
                entry.last_ms = step_at_or_before(changed_ms - 1, key.step_ms, key.phase_ms);
                assert!(entry.last_ms >= entry.first_ms);
                let (lo, hi) = (entry.first_ms, entry.last_ms);
                entry.series = slice(&entry.series, lo, hi);
            }
        }
        if entry.first_ms > start_ms || entry.last_ms < start_ms {
            return None;
        }
        entry.used = tick;
        let hi = entry.last_ms.min(end_ms);
        Some((entry.last_ms, slice(&entry.series, start_ms, hi)))
    }

    /// Keeps the settled steps of an answer over `[start_ms, end_ms]` read after `mark`.
    fn keep(&self, key: Key, mark: PastMark, start_ms: i64, end_ms: i64, series: &[RangeSeries]) {
        if mark.settled_before_ms == i64::MIN || self.bytes_max == 0 {
            return;
        }
        let last_ms = step_at_or_before(
            end_ms.min(mark.settled_before_ms - 1),
            key.step_ms,
            key.phase_ms,
        );
        if last_ms < start_ms {
            return;
        }
        let series = slice(series, start_ms, last_ms);
        let bytes: usize = series.iter().map(series_bytes).sum::<usize>() + key.query.len() + 128;
        if bytes > self.bytes_max / 8 {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if let Some(old) = state.entries.remove(&key) {
            state.bytes -= old.bytes;
        }
        while !state.entries.is_empty()
            && (state.bytes + bytes > self.bytes_max || state.entries.len() >= ENTRIES_MAX)
        {
            let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = state.entries.remove(&oldest) {
                state.bytes -= e.bytes;
            }
        }
        state.tick += 1;
        let used = state.tick;
        state.bytes += bytes;
        state.entries.insert(
            key,
            Entry {
                mark,
                first_ms: start_ms,
                last_ms,
                series,
                bytes,
                used,
            },
        );
        assert!(state.bytes <= self.bytes_max && state.entries.len() <= ENTRIES_MAX);
    }
}

/// The answer's own share of the samples limit, as evaluation would have charged it.
fn check_answer(series: &[RangeSeries], limits: &Limits) -> Result<(), EvalError> {
    let cost = limits.answer_sample_cost_samples;
    if cost == 0 {
        return Ok(());
    }
    let samples = crate::eval::matrix_sample_count(series);
    if samples.saturating_mul(cost) > limits.samples_per_query_max {
        return Err(EvalError::Execution(format!(
            "query processing would load too many samples into memory in query execution \
             (limit {}; its answer alone holds {samples} samples, each counted {cost} times)",
            limits.samples_per_query_max
        )));
    }
    Ok(())
}
