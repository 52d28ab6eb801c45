//! Sources and the function families.

use std::collections::BTreeMap;

use hist::Histogram;
use store::key::StreamKey;
use store::{merged_histograms, Kind, SeriesId};
use store::{Pattern, TagQuery, Term};

use super::{
    agg_of, aggregate, binop, binop_named, clean, common_name, common_tags, count_above,
    count_below, hist_stat, invalid, inverse_quantile, math_fn, merge_all, percentile_of, quantile,
    window_slices, Data, EvalError, Evaluator, Range, Stream,
};
use crate::ast::{Call, Expr};

/// Most thresholds or percentiles one histogram function takes.
const FN_ARGS_MAX: usize = 64;
/// Most group-by categories.
const GROUP_TAGS_MAX: usize = 16;

fn stream_of(key: &StreamKey) -> Stream {
    Stream {
        name: key.name().to_string(),
        tags: key
            .tags()
            .iter()
            .map(|t| {
                (
                    String::from_utf8_lossy(t.category()).into_owned(),
                    String::from_utf8_lossy(t.value()).into_owned(),
                )
            })
            .collect(),
        label: key.canonical(),
        data: Data::Num(Vec::new()),
    }
}

fn store_err(e: impl std::fmt::Display) -> EvalError {
    EvalError::Store(e.to_string())
}

/// A `find`-like source reduced to what to read: which series, and of which kind.
struct Selection {
    series: Vec<(SeriesId, StreamKey)>,
}

impl Evaluator<'_> {
    /// Series whose name matches `name_glob`, of `kind`, satisfying `tagq` and `extra`.
    fn select(
        &self,
        c: &Call,
        name_glob: &str,
        tagq: Option<&str>,
        extra: Option<TagQuery>,
        kind: Kind,
        range: &Range,
    ) -> Result<Selection, EvalError> {
        let name = if name_glob.contains('*') {
            Pattern::Glob(name_glob.as_bytes().to_vec())
        } else {
            Pattern::Exact(name_glob.as_bytes().to_vec())
        };
        let mut terms = vec![
            TagQuery::Term(Term::Name(name)),
            TagQuery::Term(Term::Type(kind)),
        ];
        if let Some(t) = tagq.filter(|t| !t.trim().is_empty()) {
            let q = TagQuery::parse(t)
                .map_err(|e| EvalError::Invalid(format!("{}: tag query {t:?}: {e}", c.name)))?;
            terms.push(q);
        }
        terms.extend(extra);
        let ids = self
            .store
            .find(&TagQuery::And(terms), self.limits.find_work_max)?;
        let limit = self.limit_kwarg(c, range)?;
        let take = match limit {
            Some(l) => l.min(self.limits.streams_max),
            None if ids.len() > self.limits.streams_max => {
                return Err(EvalError::Limit(format!(
                    "{} matched {} streams, more than streams_max {} (add limit=…)",
                    c.name,
                    ids.len(),
                    self.limits.streams_max
                )))
            }
            None => ids.len(),
        };
        self.check_size(take.min(ids.len()), range)?;
        let snap = self.store.index().snapshot().map_err(store_err)?;
        let mut series = Vec::with_capacity(take.min(ids.len()));
        for &id in ids.iter().take(take) {
            self.tick()?;
            if let Some(info) = snap.series(id).map_err(store_err)? {
                series.push((id, info.key));
            }
        }
        Ok(Selection {
            series: series_sorted(series),
        })
    }

    /// A source call's `limit=` (most streams it reads).
    fn limit_kwarg(&self, c: &Call, range: &Range) -> Result<Option<usize>, EvalError> {
        match self.kwarg(c, "limit") {
            Some(e) => match self.lit(e, range)? {
                super::Lit::Num(n) if n >= 0.0 => Ok(Some(n as usize)),
                _ => invalid(format!("{}: limit must be a number ≥ 0", c.name)),
            },
            None => Ok(None),
        }
    }

    /// The series a source call reads, if it is a `find`/`metric` of histograms (for pushdown).
    fn histogram_source(&self, e: &Expr, range: &Range) -> Result<Option<Selection>, EvalError> {
        let Expr::Call(c) = e else { return Ok(None) };
        match c.name.as_str() {
            "find:histogram" | "find:histogram_cum" => {
                let name = self.str_arg(c, 0, range)?;
                let tq = c
                    .args
                    .get(1)
                    .map(|_| self.str_arg(c, 1, range))
                    .transpose()?;
                Ok(Some(self.select(
                    c,
                    &name,
                    tq.as_deref(),
                    None,
                    Kind::Histogram,
                    range,
                )?))
            }
            "metric:histogram" => {
                let (check, name) = (self.str_arg(c, 0, range)?, self.str_arg(c, 1, range)?);
                let extra = check_term(&check);
                Ok(Some(self.select(
                    c,
                    &name,
                    None,
                    Some(extra),
                    Kind::Histogram,
                    range,
                )?))
            }
            _ => Ok(None),
        }
    }

    pub(super) fn find(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        if !c.sources.is_empty() {
            return invalid(format!("{} takes no input streams", c.name));
        }
        let name = self.str_arg(c, 0, &range)?;
        let tq = c
            .args
            .get(1)
            .map(|_| self.str_arg(c, 1, &range))
            .transpose()?;
        self.read(c, f, &name, tq.as_deref(), None, range)
    }

    pub(super) fn metric(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let (check, name) = (self.str_arg(c, 0, &range)?, self.str_arg(c, 1, &range)?);
        self.read(c, f, &name, None, Some(check_term(&check)), range)
    }

    fn read(
        &self,
        c: &Call,
        f: &str,
        name: &str,
        tq: Option<&str>,
        extra: Option<TagQuery>,
        range: Range,
    ) -> Result<Vec<Stream>, EvalError> {
        if !matches!(
            f,
            "average"
                | "count"
                | "sum"
                | "min"
                | "max"
                | "first"
                | "last"
                | "stddev"
                | "counter"
                | "derivative"
                | "histogram"
                | "histogram_cum"
        ) {
            return invalid(format!(
                "unknown source `{}` (find:{{average,count,sum,min,max,first,last,stddev,counter,derivative,histogram,histogram_cum}})",
                c.name
            ));
        }
        if let Some(remote) = self.remote {
            let limit = self
                .limit_kwarg(c, &range)?
                .map(|l| l.min(self.limits.streams_max));
            return super::remote::source(self, remote, c, range, limit);
        }
        let histogram = matches!(f, "histogram" | "histogram_cum");
        let kind = if histogram {
            Kind::Histogram
        } else {
            Kind::Numeric
        };
        let sel = self.select(c, name, tq, extra, kind, &range)?;
        let view = self.store.view()?;
        let mut out = Vec::with_capacity(sel.series.len());
        if histogram {
            for (id, key) in &sel.series {
                self.tick()?;
                let hs = view.histograms(*id, range.slicing())?;
                let v = hs
                    .into_iter()
                    .map(|h| (!h.is_empty()).then_some(h))
                    .collect();
                out.push(Stream {
                    data: Data::Hist(v),
                    ..stream_of(key)
                });
            }
            return Ok(out);
        }
        let derivative = f == "derivative";
        let wide = if derivative { range.widen(1, 0) } else { range };
        for (id, key) in &sel.series {
            self.tick()?;
            let v: Vec<Option<f64>> = match f {
                // Prometheus stale markers (remote write) are not values.
                "counter" => super::stale::counter_rates(&view, *id, range.slicing())?,
                _ => {
                    let aggs = super::stale::numeric_aggregates(&view, *id, wide.slicing())?;
                    let pick = |a: &store::NumericAggregate| -> f64 {
                        match f {
                            "count" => a.count as f64,
                            "sum" => a.sum,
                            "min" => a.min,
                            "max" => a.max,
                            "first" => a.first,
                            "last" => a.last,
                            "stddev" => a.stddev(),
                            _ => a.mean(),
                        }
                    };
                    let vals: Vec<Option<f64>> =
                        aggs.iter().map(|a| a.as_ref().map(pick)).collect();
                    if derivative {
                        let p = range.period_s();
                        (1..vals.len())
                            .map(|i| match (vals[i - 1], vals[i]) {
                                (Some(a), Some(b)) => clean((b - a) / p),
                                _ => None,
                            })
                            .collect()
                    } else {
                        vals
                    }
                }
            };
            out.push(Stream {
                data: Data::Num(v),
                ..stream_of(key)
            });
        }
        Ok(out)
    }

    // ---- histograms ----

    pub(super) fn histogram_fn(
        &self,
        c: &Call,
        f: &str,
        range: Range,
    ) -> Result<Vec<Stream>, EvalError> {
        match f {
            "merge" => {
                if let ([src], Some(remote)) = (c.sources.as_slice(), self.remote) {
                    if super::remote::is_histogram_source(src) {
                        return super::remote::merge(self, remote, c, &[], range);
                    }
                }
                if let [src] = c.sources.as_slice() {
                    if let Some(sel) = self.histogram_source(src, &range)? {
                        return self.pushdown_merge(&sel, &[], range);
                    }
                }
                let inputs = self.inputs(c, range)?;
                let mut v: Vec<Option<Histogram>> = vec![None; range.slices()];
                for s in &inputs {
                    self.tick()?;
                    for (acc, h) in v.iter_mut().zip(self.hist_of(s, &c.name)?) {
                        if let Some(h) = h {
                            match acc {
                                Some(a) => a.merge(h),
                                None => *acc = Some(h.clone()),
                            }
                        }
                    }
                }
                Ok(vec![Stream {
                    name: common_name(&inputs),
                    tags: common_tags(&inputs),
                    label: "histogram:merge".into(),
                    data: Data::Hist(v),
                }])
            }
            "subtract" => {
                let inputs = self.inputs(c, range)?;
                let Some((first, rest)) = inputs.split_first() else {
                    return Ok(Vec::new());
                };
                let mut v: Vec<Option<Histogram>> = self.hist_of(first, &c.name)?.to_vec();
                for s in rest {
                    self.tick()?;
                    for (acc, h) in v.iter_mut().zip(self.hist_of(s, &c.name)?) {
                        if let (Some(a), Some(h)) = (acc.as_mut(), h) {
                            a.subtract(h);
                        }
                    }
                }
                for h in &mut v {
                    if h.as_ref().is_some_and(Histogram::is_empty) {
                        *h = None;
                    }
                }
                Ok(vec![first.with_hist(v)])
            }
            "create" => {
                let inputs = self.inputs(c, range)?;
                let mut v: Vec<Option<Histogram>> = vec![None; range.slices()];
                for s in &inputs {
                    self.tick()?;
                    for (acc, x) in v.iter_mut().zip(self.num_of(s, &c.name)?) {
                        if let Some(x) = x {
                            acc.get_or_insert_with(Histogram::new).insert(*x);
                        }
                    }
                }
                Ok(vec![Stream {
                    name: common_name(&inputs),
                    tags: common_tags(&inputs),
                    label: "histogram".into(),
                    data: Data::Hist(v),
                }])
            }
            _ => self.histogram_stat(c, f, range),
        }
    }

    /// `fetch::merged_histograms`: one accumulator per group, merged slice by slice in the store.
    fn pushdown_merge(
        &self,
        sel: &Selection,
        by: &[String],
        range: Range,
    ) -> Result<Vec<Stream>, EvalError> {
        let ids: Vec<SeriesId> = sel.series.iter().map(|(id, _)| *id).collect();
        let cats: Vec<Vec<u8>> = by.iter().map(|c| c.as_bytes().to_vec()).collect();
        let view = self.store.view()?;
        let snap = self.store.index().snapshot().map_err(store_err)?;
        let groups = merged_histograms(&view, &snap, &ids, range.slicing(), &cats)?;
        drop(view);
        let name = match sel.series.first() {
            Some((_, k)) if sel.series.iter().all(|(_, x)| x.name() == k.name()) => {
                k.name().to_string()
            }
            _ => String::new(),
        };
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            self.tick()?;
            let tags: Vec<(String, String)> = by
                .iter()
                .zip(&g.key)
                .filter_map(|(c, v)| {
                    v.as_ref()
                        .map(|v| (c.clone(), String::from_utf8_lossy(v).into_owned()))
                })
                .collect();
            let label = if by.is_empty() {
                "histogram:merge".to_string()
            } else {
                group_label(&g.key)
            };
            let v = g
                .slices
                .into_iter()
                .map(|h| (!h.is_empty()).then_some(h))
                .collect();
            out.push(Stream {
                name: name.clone(),
                tags,
                label,
                data: Data::Hist(v),
            });
        }
        if out.is_empty() && by.is_empty() {
            out.push(Stream {
                name,
                tags: Vec::new(),
                label: "histogram:merge".into(),
                data: Data::Hist(vec![None; range.slices()]),
            });
        }
        Ok(out)
    }

    fn nums_args(&self, c: &Call, range: &Range, min: usize) -> Result<Vec<f64>, EvalError> {
        if c.args.len() < min {
            return invalid(format!("{} needs at least {min} argument(s)", c.name));
        }
        if c.args.len() > FN_ARGS_MAX {
            return invalid(format!("{}: at most {FN_ARGS_MAX} arguments", c.name));
        }
        (0..c.args.len())
            .map(|i| self.num_arg(c, i, range))
            .collect()
    }

    fn histogram_stat(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        type F = Box<dyn Fn(&Histogram) -> Option<f64>>;
        let period_s = range.period_s();
        // One output stream per function (several for multi-valued percentile calls).
        let fns: Vec<(F, Option<String>)> = match f {
            "percentile" | "inverse_percentile" => {
                let ps = self.nums_args(c, &range, 1)?;
                let multi = ps.len() > 1;
                let mut fs: Vec<(F, Option<String>)> = Vec::new();
                for p in ps {
                    let suffix = multi.then(|| format!("{p}"));
                    if f == "percentile" {
                        if !(0.0..=100.0).contains(&p) {
                            return invalid(format!(
                                "histogram:percentile: {p} is outside [0, 100]"
                            ));
                        }
                        fs.push((
                            Box::new(move |h| hist_stat(h, |h| quantile(h, p / 100.0))),
                            suffix,
                        ));
                    } else {
                        fs.push((
                            Box::new(move |h| hist_stat(h, |h| 100.0 * inverse_quantile(h, p))),
                            suffix,
                        ));
                    }
                }
                fs
            }
            _ => {
                let one: F = match f {
                    "count" => Box::new(|h| (!h.is_empty()).then(|| h.finite_count() as f64)),
                    "rate" => Box::new(move |h| {
                        (!h.is_empty()).then(|| h.finite_count() as f64 / period_s)
                    }),
                    "count_above" | "count_below" | "rate_above" | "rate_below" => {
                        let t = self.num_arg(c, 0, &range)?;
                        let above = f.ends_with("above");
                        let div = if f.starts_with("rate") { period_s } else { 1.0 };
                        Box::new(move |h| {
                            (!h.is_empty()).then(|| {
                                let n = if above {
                                    count_above(h, t)
                                } else {
                                    count_below(h, t)
                                };
                                n as f64 / div
                            })
                        })
                    }
                    "count_between" => {
                        let (a, b) = (self.num_arg(c, 0, &range)?, self.num_arg(c, 1, &range)?);
                        Box::new(move |h| {
                            (!h.is_empty()).then(|| {
                                let n = h.finite_count();
                                // Bins entirely inside [a, b]: all, less those not entirely ≥ a, less those not entirely ≤ b.
                                let outside = (n - count_above(h, a)) + (n - count_below(h, b));
                                n.saturating_sub(outside) as f64
                            })
                        })
                    }
                    "count_bin" => {
                        let t = self.num_arg(c, 0, &range)?;
                        Box::new(move |h| (!h.is_empty()).then(|| h.count_nearby(t) as f64))
                    }
                    "ratio_above" => {
                        let t = self.num_arg(c, 0, &range)?;
                        Box::new(move |h| hist_stat(h, |h| 1.0 - inverse_quantile(h, t)))
                    }
                    "ratio_below" => {
                        let t = self.num_arg(c, 0, &range)?;
                        Box::new(move |h| hist_stat(h, |h| inverse_quantile(h, t)))
                    }
                    "ratio_between" => {
                        let (a, b) = (self.num_arg(c, 0, &range)?, self.num_arg(c, 1, &range)?);
                        Box::new(move |h| {
                            hist_stat(h, |h| {
                                (inverse_quantile(h, b) - inverse_quantile(h, a)).max(0.0)
                            })
                        })
                    }
                    "mean" | "average" => Box::new(|h| hist_stat(h, Histogram::mean)),
                    "sum" => Box::new(|h| hist_stat(h, Histogram::sum)),
                    // A one-bin histogram can round to a tiny negative variance: that is 0, not NaN.
                    "stddev" => Box::new(|h| {
                        hist_stat(h, |h| {
                            let s = h.stddev();
                            if s.is_nan() {
                                0.0
                            } else {
                                s
                            }
                        })
                    }),
                    "median" => Box::new(|h| hist_stat(h, |h| quantile(h, 0.5))),
                    "min" => Box::new(|h| hist_stat(h, |h| quantile(h, 0.0))),
                    "max" => Box::new(|h| hist_stat(h, |h| quantile(h, 1.0))),
                    "IQR" | "iqr" => {
                        Box::new(|h| hist_stat(h, |h| quantile(h, 0.75) - quantile(h, 0.25)))
                    }
                    _ => return invalid(format!("unknown function `{}`", c.name)),
                };
                vec![(one, None)]
            }
        };
        // One histogram stream straight from the store's merge when the source allows it.
        let inputs = match c.sources.as_slice() {
            [Expr::Call(inner)] if inner.name == "histogram:merge" => {
                self.eval(&c.sources[0], range)?
            }
            _ => self.inputs(c, range)?,
        };
        let mut out = Vec::with_capacity(inputs.len() * fns.len());
        for s in &inputs {
            let hs = self.hist_of(s, &c.name)?;
            for (func, suffix) in &fns {
                self.tick()?;
                let v = hs
                    .iter()
                    .map(|h| h.as_ref().and_then(|h| func(h).and_then(clean)))
                    .collect();
                let mut o = s.with_num(v);
                if let Some(sfx) = suffix {
                    o.label = format!("{} {sfx}", o.label);
                }
                out.push(o);
            }
        }
        Ok(out)
    }

    // ---- windows ----

    pub(super) fn window(
        &self,
        c: &Call,
        rolling: bool,
        f: &str,
        range: Range,
    ) -> Result<Vec<Stream>, EvalError> {
        let d = self.num_arg(c, 0, &range)?;
        let w = window_slices(d, &range, &c.name)?;
        let (back, forward) = if rolling {
            (w - 1, 0)
        } else {
            let span = w as i64 * range.period_ms;
            let lo = range.start_ms.div_euclid(span) * span;
            let hi = range.end_ms.div_euclid(span) * span
                + if range.end_ms.rem_euclid(span) == 0 {
                    0
                } else {
                    span
                };
            (
                ((range.start_ms - lo) / range.period_ms) as usize,
                ((hi - range.end_ms) / range.period_ms) as usize,
            )
        };
        let (inputs, wide) = self.inputs_widened(c, range, back, forward)?;
        let n = wide.slices();
        // Each slice's window [lo, hi) in the widened range.
        let bounds: Vec<(usize, usize)> = (0..n)
            .map(|i| {
                if rolling {
                    ((i + 1).saturating_sub(w), i + 1)
                } else {
                    let span = w as i64 * wide.period_ms;
                    let t = wide.start_ms + i as i64 * wide.period_ms;
                    let lo = ((t.div_euclid(span) * span - wide.start_ms) / wide.period_ms).max(0)
                        as usize;
                    (lo, (lo + w).min(n))
                }
            })
            .collect();
        let param = if c.args.len() > 1 {
            Some(self.num_arg(c, 1, &range)?)
        } else {
            None
        };
        let mut out = Vec::with_capacity(inputs.len());
        for s in &inputs {
            self.tick()?;
            let mut data = match (&s.data, f) {
                (Data::Hist(hs), "merge") => Data::Hist(window_merge(hs, &bounds, rolling)),
                (Data::Hist(hs), "percentile" | "inverse_percentile") => {
                    let Some(p) = param else {
                        return invalid(format!(
                            "{}(d, p): the second argument is missing",
                            c.name
                        ));
                    };
                    let merged = window_merge(hs, &bounds, rolling);
                    let inverse = f == "inverse_percentile";
                    Data::Num(
                        merged
                            .iter()
                            .map(|h| {
                                h.as_ref().and_then(|h| {
                                    if inverse {
                                        hist_stat(h, |h| 100.0 * inverse_quantile(h, p))
                                    } else {
                                        hist_stat(h, |h| quantile(h, p / 100.0))
                                    }
                                })
                            })
                            .collect(),
                    )
                }
                (Data::Hist(_), _) => {
                    return invalid(format!(
                        "{} expects numeric streams, but `{}` is a histogram stream",
                        c.name, s.label
                    ))
                }
                (Data::Num(_), "merge" | "inverse_percentile") => {
                    return invalid(format!(
                        "{} expects histogram streams, but `{}` is numeric",
                        c.name, s.label
                    ))
                }
                (Data::Num(v), _) => {
                    let agg = agg_of(f);
                    if agg.is_none() && f != "percentile" {
                        return invalid(format!("unknown function `{}`", c.name));
                    }
                    if f == "percentile" && param.is_none() {
                        return invalid(format!(
                            "{}(d, p): the second argument is missing",
                            c.name
                        ));
                    }
                    let mut vals: Vec<f64> = Vec::new();
                    Data::Num(
                        bounds
                            .iter()
                            .map(|&(lo, hi)| {
                                vals.clear();
                                vals.extend(v[lo..hi].iter().flatten());
                                match (agg, param) {
                                    (Some(a), _) => aggregate(a, &vals).and_then(clean),
                                    (None, Some(p)) => percentile_of(&mut vals, p),
                                    (None, None) => None,
                                }
                            })
                            .collect(),
                    )
                }
            };
            data.trim(back, forward);
            out.push(Stream { data, ..s.clone() });
        }
        Ok(out)
    }

    // ---- across streams ----

    pub(super) fn stats(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let inputs = self.inputs(c, range)?;
        let p = if f == "percentile" {
            Some(self.num_arg(c, 0, &range)?)
        } else {
            None
        };
        let agg = agg_of(f);
        if agg.is_none() && !matches!(f, "percentile" | "div" | "sub") {
            return invalid(format!("unknown function `{}`", c.name));
        }
        let cols: Vec<&[Option<f64>]> = inputs
            .iter()
            .map(|s| self.num_of(s, &c.name))
            .collect::<Result<_, _>>()?;
        let mut vals = Vec::with_capacity(cols.len());
        let mut v = Vec::with_capacity(range.slices());
        for i in 0..range.slices() {
            if i % 4096 == 0 {
                self.tick()?;
            }
            vals.clear();
            vals.extend(cols.iter().filter_map(|col| col[i]));
            v.push(match f {
                "percentile" => percentile_of(&mut vals, p.unwrap_or(50.0)),
                // The first stream less (or divided by) the others present.
                "sub" | "div" => match cols.first().and_then(|col| col[i]) {
                    None => None,
                    Some(first) => {
                        let rest = cols[1..].iter().filter_map(|col| col[i]);
                        clean(if f == "sub" {
                            first - rest.sum::<f64>()
                        } else {
                            first / rest.product::<f64>()
                        })
                    }
                },
                _ => agg.and_then(|a| aggregate(a, &vals)).and_then(clean),
            });
        }
        Ok(vec![Stream::num(
            &common_name(&inputs),
            common_tags(&inputs),
            c.name.clone(),
            v,
        )])
    }

    pub(super) fn op(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let inputs = self.inputs(c, range)?;
        if f == "not" {
            let mut out = Vec::with_capacity(inputs.len());
            for s in &inputs {
                let v = self.num_of(s, &c.name)?;
                out.push(
                    s.with_num(
                        v.iter()
                            .map(|x| x.map(|x| if x == 0.0 { 1.0 } else { 0.0 }))
                            .collect(),
                    ),
                );
            }
            return Ok(out);
        }
        let Some(op) = binop_named(f) else {
            return invalid(format!("unknown function `{}`", c.name));
        };
        let cols: Vec<&[Option<f64>]> = inputs
            .iter()
            .map(|s| self.num_of(s, &c.name))
            .collect::<Result<_, _>>()?;
        let Some((first, rest)) = cols.split_first() else {
            return Ok(Vec::new());
        };
        // Strict: a slice missing in any input is missing in the result.
        let v = (0..range.slices())
            .map(|i| {
                let mut acc = first[i]?;
                for col in rest {
                    acc = binop(op, acc, col[i]?);
                }
                clean(acc)
            })
            .collect();
        Ok(vec![Stream::num(
            &common_name(&inputs),
            common_tags(&inputs),
            c.name.clone(),
            v,
        )])
    }

    pub(super) fn each(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let x = self.num_arg(c, 0, &range)?;
        let op: Box<dyn Fn(f64) -> f64> = match f {
            "min" => Box::new(move |v: f64| v.min(x)),
            "max" => Box::new(move |v: f64| v.max(x)),
            _ => match binop_named(f) {
                Some(op) => Box::new(move |v| binop(op, v, x)),
                None => return invalid(format!("unknown function `{}`", c.name)),
            },
        };
        self.per_stream(c, range, |v, _| {
            v.iter().map(|y| y.and_then(|y| clean(op(y)))).collect()
        })
    }

    pub(super) fn math(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let func: Box<dyn Fn(f64) -> f64> = match f {
            "pow" => {
                let e = self.num_arg(c, 0, &range)?;
                Box::new(move |x: f64| x.powf(e))
            }
            "min" | "max" => {
                let y = self.num_arg(c, 0, &range)?;
                if f == "min" {
                    Box::new(move |x: f64| x.min(y))
                } else {
                    Box::new(move |x: f64| x.max(y))
                }
            }
            _ => match math_fn(f) {
                Some(g) => Box::new(g),
                None => return invalid(format!("unknown function `{}`", c.name)),
            },
        };
        self.per_stream(c, range, |v, _| {
            v.iter().map(|y| y.and_then(|y| clean(func(y)))).collect()
        })
    }

    pub(super) fn group_by(
        &self,
        c: &Call,
        f: &str,
        range: Range,
    ) -> Result<Vec<Stream>, EvalError> {
        if c.args.is_empty() || c.args.len() > GROUP_TAGS_MAX {
            return invalid(format!(
                "{} takes 1 to {GROUP_TAGS_MAX} tag categories",
                c.name
            ));
        }
        let by: Vec<String> = (0..c.args.len())
            .map(|i| self.str_arg(c, i, &range))
            .collect::<Result<_, _>>()?;
        if f == "merge" {
            if let ([src], Some(remote)) = (c.sources.as_slice(), self.remote) {
                if super::remote::is_histogram_source(src) {
                    return super::remote::merge(self, remote, c, &by, range);
                }
            }
            if let [src] = c.sources.as_slice() {
                if let Some(sel) = self.histogram_source(src, &range)? {
                    return self.pushdown_merge(&sel, &by, range);
                }
            }
        }
        let agg = agg_of(f);
        if agg.is_none() && f != "merge" {
            return invalid(format!(
                "unknown function `{}` (group_by:{{sum,mean,min,max,count,merge}})",
                c.name
            ));
        }
        let inputs = self.inputs(c, range)?;
        let mut groups: BTreeMap<Vec<Option<String>>, Vec<&Stream>> = BTreeMap::new();
        for s in &inputs {
            let key = by
                .iter()
                .map(|cat| s.tag(cat).map(str::to_string))
                .collect();
            groups.entry(key).or_default().push(s);
        }
        let mut out = Vec::with_capacity(groups.len());
        for (key, members) in groups {
            self.tick()?;
            let tags: Vec<(String, String)> = by
                .iter()
                .zip(&key)
                .filter_map(|(c, v)| v.clone().map(|v| (c.clone(), v)))
                .collect();
            let label = key
                .iter()
                .map(|v| v.clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(",");
            let data = if f == "merge" {
                let cols: Vec<&[Option<Histogram>]> = members
                    .iter()
                    .map(|s| self.hist_of(s, &c.name))
                    .collect::<Result<_, _>>()?;
                Data::Hist(
                    (0..range.slices())
                        .map(|i| merge_all(cols.iter().filter_map(|col| col[i].as_ref())))
                        .collect(),
                )
            } else {
                let cols: Vec<&[Option<f64>]> = members
                    .iter()
                    .map(|s| self.num_of(s, &c.name))
                    .collect::<Result<_, _>>()?;
                let mut vals = Vec::with_capacity(cols.len());
                Data::Num(
                    (0..range.slices())
                        .map(|i| {
                            vals.clear();
                            vals.extend(cols.iter().filter_map(|col| col[i]));
                            agg.and_then(|a| aggregate(a, &vals)).and_then(clean)
                        })
                        .collect(),
                )
            };
            let group: Vec<Stream> = members.iter().map(|s| (*s).clone()).collect();
            out.push(Stream {
                name: common_name(&group),
                tags,
                label,
                data,
            });
        }
        Ok(out)
    }

    pub(super) fn tag(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let cat = self.str_arg(c, 0, &range)?;
        let value = match f {
            "add" => Some(self.str_arg(c, 1, &range)?),
            "remove" => None,
            _ => {
                return invalid(format!(
                    "unknown function `{}` (tag:add, tag:remove)",
                    c.name
                ))
            }
        };
        let mut out = self.inputs(c, range)?;
        for s in &mut out {
            s.tags.retain(|(k, _)| *k != cat);
            if let Some(v) = &value {
                s.tags.push((cat.clone(), v.clone()));
                s.tags.sort();
            }
        }
        Ok(out)
    }

    /// `filter:values:OP(x)` nulls the values failing `value OP x`; `filter:{any,all}:OP(x)` keeps
    /// streams with any / all present values passing; `filter:{mean,min,max,sum,count,last}:OP(x)`
    /// keeps streams whose aggregate over the range passes.
    pub(super) fn filter(&self, c: &Call, f: &str, range: Range) -> Result<Vec<Stream>, EvalError> {
        let Some((scope, cmp)) = f.split_once(':') else {
            return invalid(format!(
                "{}: expected filter:<scope>:<comparison>, e.g. filter:values:gt(5)",
                c.name
            ));
        };
        let op = match binop_named(cmp) {
            Some(
                op @ (super::BinOp::Eq
                | super::BinOp::Ne
                | super::BinOp::Gt
                | super::BinOp::Ge
                | super::BinOp::Lt
                | super::BinOp::Le),
            ) => op,
            _ => {
                return invalid(format!(
                    "{}: unknown comparison `{cmp}` (eq, ne, gt, geq, lt, leq)",
                    c.name
                ))
            }
        };
        let x = self.num_arg(c, 0, &range)?;
        let pass = |v: f64| binop(op, v, x) != 0.0;
        let inputs = self.inputs(c, range)?;
        let mut out = Vec::with_capacity(inputs.len());
        for s in inputs {
            self.tick()?;
            let v = self.num_of(&s, &c.name)?;
            let present: Vec<f64> = v.iter().flatten().copied().collect();
            let keep = match scope {
                "values" => {
                    let nv = v.iter().map(|y| y.filter(|&y| pass(y))).collect();
                    out.push(s.with_num(nv));
                    continue;
                }
                "any" => present.iter().any(|&y| pass(y)),
                "all" => !present.is_empty() && present.iter().all(|&y| pass(y)),
                other => match agg_of(other) {
                    Some(a) => aggregate(a, &present).is_some_and(pass),
                    None => return invalid(format!("{}: unknown scope `{other}` (values, any, all, mean, min, max, sum, count, last)", c.name)),
                },
            };
            if keep {
                out.push(s);
            }
        }
        Ok(out)
    }

    // ---- forecasting ----

    pub(super) fn forecast(
        &self,
        c: &Call,
        f: &str,
        range: Range,
    ) -> Result<Vec<Stream>, EvalError> {
        match f {
            "regression" | "slope" => {
                let w = window_slices(self.num_arg(c, 0, &range)?, &range, &c.name)?;
                let slope_only = f == "slope";
                self.per_stream_back(c, range, w - 1, move |v, r| regression(v, w, r, slope_only))
            }
            "ewma" => {
                let a = self.num_arg(c, 0, &range)?;
                if !(a > 0.0 && a <= 1.0) {
                    return invalid(format!("{}: alpha must be in (0, 1], got {a}", c.name));
                }
                self.per_stream(c, range, move |v, _| {
                    let mut s: Option<f64> = None;
                    v.iter()
                        .map(|x| {
                            if let Some(x) = x {
                                s = Some(match s {
                                    Some(s) => a * x + (1.0 - a) * s,
                                    None => *x,
                                });
                            }
                            s
                        })
                        .collect()
                })
            }
            "holt_winters" => {
                let (a, b, g) = (
                    self.num_arg(c, 0, &range)?,
                    self.num_arg(c, 1, &range)?,
                    self.num_arg(c, 2, &range)?,
                );
                for (n, x) in [("alpha", a), ("beta", b), ("gamma", g)] {
                    if !(0.0..=1.0).contains(&x) {
                        return invalid(format!("{}: {n} must be in [0, 1], got {x}", c.name));
                    }
                }
                let season = match self.kwarg(c, "period") {
                    Some(e) => match self.lit(e, &range)? {
                        super::Lit::Num(s) => window_slices(s, &range, &c.name)?,
                        super::Lit::Str(_) => {
                            return invalid(format!("{}: period= must be a duration", c.name))
                        }
                    },
                    None => 1,
                };
                self.per_stream(c, range, move |v, _| holt_winters(v, a, b, g, season))
            }
            _ => invalid(format!(
                "unknown function `{}` (forecasting:{{regression,slope,ewma,holt_winters}})",
                c.name
            )),
        }
    }
}

fn series_sorted(mut s: Vec<(SeriesId, StreamKey)>) -> Vec<(SeriesId, StreamKey)> {
    s.sort_by_key(|(_, k)| k.canonical());
    s
}

fn check_term(check: &str) -> TagQuery {
    TagQuery::Term(Term::Tag {
        category: Pattern::Exact(b"__check".to_vec()),
        value: Pattern::Exact(check.as_bytes().to_vec()),
    })
}

fn group_label(key: &[Option<Vec<u8>>]) -> String {
    key.iter()
        .map(|v| {
            v.as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Each slice's window merged; a sliding window adds the newest slice and subtracts the one
/// leaving (exact: counts are integers), so its cost does not grow with the window.
fn window_merge(
    hs: &[Option<Histogram>],
    bounds: &[(usize, usize)],
    rolling: bool,
) -> Vec<Option<Histogram>> {
    if rolling {
        let mut acc = Histogram::new();
        let mut out = Vec::with_capacity(hs.len());
        for (i, &(lo, _)) in bounds.iter().enumerate() {
            if let Some(h) = &hs[i] {
                acc.merge(h);
            }
            if lo > 0 {
                if let Some(old) = &hs[lo - 1] {
                    acc.subtract(old);
                }
            }
            out.push((!acc.is_empty()).then(|| acc.clone()));
        }
        return out;
    }
    let mut out: Vec<Option<Histogram>> = Vec::with_capacity(hs.len());
    let mut cache: Option<((usize, usize), Option<Histogram>)> = None;
    for &b in bounds {
        let merged = match &cache {
            Some((cb, m)) if *cb == b => m.clone(),
            _ => {
                let m = merge_all(hs[b.0..b.1].iter().flatten());
                cache = Some((b, m.clone()));
                m
            }
        };
        out.push(merged);
    }
    out
}

/// Least-squares line through the present values of the trailing window of `w` slices; each
/// slice gets the fitted value at its own time (or the slope per second). Where a window has
/// fewer than two values, the last fit is extended: that is the forecast past the data.
fn regression(v: &[Option<f64>], w: usize, r: &Range, slope_only: bool) -> Vec<Option<f64>> {
    let p = r.period_s();
    let mut last_fit: Option<(f64, f64)> = None; // (intercept at x = 0, slope per slice)
    let mut out = Vec::with_capacity(v.len());
    for i in 0..v.len() {
        let lo = (i + 1).saturating_sub(w);
        let (mut n, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (j, y) in v.iter().enumerate().take(i + 1).skip(lo) {
            if let Some(y) = y {
                let x = j as f64;
                n += 1.0;
                sx += x;
                sy += y;
                sxx += x * x;
                sxy += x * y;
            }
        }
        let denom = n * sxx - sx * sx;
        if n >= 2.0 && denom != 0.0 {
            let slope = (n * sxy - sx * sy) / denom;
            last_fit = Some(((sy - slope * sx) / n, slope));
        }
        out.push(
            last_fit.and_then(|(b, m)| clean(if slope_only { m / p } else { b + m * i as f64 })),
        );
    }
    out
}

/// Additive Holt-Winters; each slice gets the one-step-ahead forecast made before seeing it
/// (so missing slices — the future — get the continued forecast).
fn holt_winters(v: &[Option<f64>], a: f64, b: f64, g: f64, season: usize) -> Vec<Option<f64>> {
    let mut seasonal = vec![0.0; season];
    let mut state: Option<(f64, f64)> = None; // (level, trend)
    let mut out = Vec::with_capacity(v.len());
    for (i, x) in v.iter().enumerate() {
        let s = i % season;
        let forecast = state.map(|(l, t)| l + t + seasonal[s]);
        out.push(forecast.and_then(clean));
        state = match (state, x) {
            (None, Some(x)) => Some((*x, 0.0)),
            (None, None) => None,
            (Some((l, t)), None) => Some((l + t, t)),
            (Some((l, t)), Some(x)) => {
                let level = a * (x - seasonal[s]) + (1.0 - a) * (l + t);
                let trend = b * (level - l) + (1.0 - b) * t;
                seasonal[s] = g * (x - level) + (1.0 - g) * seasonal[s];
                Some((level, trend))
            }
        };
    }
    out
}
