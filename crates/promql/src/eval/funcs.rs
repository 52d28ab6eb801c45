//! Function calls: the instant-vector functions, the range-vector functions (over range
//! selectors and subqueries alike) and `histogram_quantile`.

use std::collections::HashMap;

use hist::QuantileType;

use super::{
    bucket_quantile, check_unique, drop_name, go_max, go_min, map_floats, map_hists, map_points,
    parse_le, range_value, slide_merge, Ctx, EvalError, HistSample, Labels, Raw, Sample, Series,
    Upto, Value, DEADLINE_CHECK_STEPS,
};
use crate::ast::{Expr, Func, MatchOp};
use crate::parser::anchored_regex;

impl Ctx<'_> {
    pub(super) fn call(&mut self, func: Func, args: &[Expr]) -> Result<Value, EvalError> {
        use Func::*;
        if func.is_range() {
            return self.range_call(func, args);
        }
        match func {
            Time => Ok(Value::Scalar(self.step_seconds())),
            Pi => Ok(Value::Scalar(vec![std::f64::consts::PI; self.grid.steps])),
            Vector => {
                let v = self.scalar(&args[0])?;
                Ok(Value::Vector(vec![Series {
                    labels: Vec::new(),
                    points: v.into_iter().map(|x| Some(Sample::Float(x))).collect(),
                }]))
            }
            Scalar => self.scalar_of(&args[0]),
            Timestamp => self.timestamp(&args[0]),
            Abs | Ceil | Floor | Sgn | Exp | Sqrt | Ln | Log2 | Log10 | Sin | Cos | Tan | Asin
            | Acos | Atan | Sinh | Cosh | Tanh | Asinh | Acosh | Atanh | Deg | Rad => {
                let f = math_fn(func);
                Ok(Value::Vector(map_floats(
                    self.vector(&args[0])?,
                    true,
                    |_, v| Some(f(v)),
                )))
            }
            Round => {
                let series = self.vector(&args[0])?;
                let to = match args.get(1) {
                    Some(a) => self.scalar(a)?,
                    None => vec![1.0; self.grid.steps],
                };
                Ok(Value::Vector(map_floats(series, true, |i, v| {
                    let inverse = 1.0 / to[i];
                    Some((v * inverse + 0.5).floor() / inverse)
                })))
            }
            Clamp | ClampMin | ClampMax => self.clamp(func, args),
            DaysInMonth | DayOfMonth | DayOfWeek | DayOfYear | Hour | Minute | Month | Year => {
                self.date(func, args)
            }
            LabelReplace => self.label_replace(args),
            LabelJoin => self.label_join(args),
            Sort | SortDesc => {
                let mut series = self.vector(&args[0])?;
                sort_by_value(&mut series, func == SortDesc);
                Ok(Value::Vector(series))
            }
            SortByLabel | SortByLabelDesc => {
                let mut series = self.vector(&args[0])?;
                let mut labels = Vec::new();
                for a in &args[1..] {
                    labels.push(self.string(a)?);
                }
                sort_by_labels(&mut series, &labels, func == SortByLabelDesc);
                Ok(Value::Vector(series))
            }
            HistogramQuantile | HistogramFraction | HistogramCount | HistogramSum
            | HistogramAvg | HistogramStddev | HistogramStdvar => self.histogram_call(func, args),
            Absent => self.absent(&args[0]),
            Info => self.info(args),
            _ => Err(EvalError::BadData(format!(
                "function {} has no evaluation",
                func.name()
            ))),
        }
    }

    /// The histogram functions (`histogram_quantile` also reads classic `le` buckets).
    fn histogram_call(&mut self, func: Func, args: &[Expr]) -> Result<Value, EvalError> {
        use Func::*;
        match func {
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
            HistogramAvg => Ok(Value::Vector(map_hists(self.vector(&args[0])?, |_, h| {
                h.sum() / h.count()
            }))),
            // The spread of the bins' midpoints (the llhist estimate), whatever the scale.
            HistogramStddev => Ok(Value::Vector(map_hists(self.vector(&args[0])?, |_, h| {
                h.hist.stddev()
            }))),
            HistogramStdvar => Ok(Value::Vector(map_hists(self.vector(&args[0])?, |_, h| {
                h.hist.stddev().powi(2)
            }))),
            _ => Err(EvalError::BadData(format!(
                "{} is not a histogram function",
                func.name()
            ))),
        }
    }

    fn step_seconds(&self) -> Vec<f64> {
        (0..self.grid.steps)
            .map(|i| self.time(i) as f64 / 1000.0)
            .collect()
    }

    fn scalar_of(&mut self, arg: &Expr) -> Result<Value, EvalError> {
        let series = self.vector(arg)?;
        let out = (0..self.grid.steps)
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

    /// `timestamp(selector)` gives each sample's own time; of anything else, the step's.
    fn timestamp(&mut self, arg: &Expr) -> Result<Value, EvalError> {
        if let Expr::Selector(sel) = arg {
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
                            .map(|(p, ts)| p.as_ref().map(|_| Sample::Float(ts as f64 / 1000.0)))
                            .collect(),
                    })
                    .collect(),
            ));
        }
        let series = self.vector(arg)?;
        let times = self.step_seconds();
        Ok(Value::Vector(map_points(series, true, |i, p| {
            p.map(|_| Sample::Float(times[i]))
        })))
    }

    fn clamp(&mut self, func: Func, args: &[Expr]) -> Result<Value, EvalError> {
        let series = self.vector(&args[0])?;
        let a = self.scalar(&args[1])?;
        let b = match args.get(2) {
            Some(e) => self.scalar(e)?,
            None => vec![f64::NAN; self.grid.steps],
        };
        Ok(Value::Vector(map_floats(series, true, |i, v| match func {
            Func::Clamp if b[i] < a[i] => None,
            Func::Clamp => Some(go_max(a[i], go_min(b[i], v))),
            Func::ClampMin => Some(go_max(a[i], v)),
            _ => Some(go_min(a[i], v)),
        })))
    }

    /// The date functions: of each value as unix seconds (UTC), or of the step's time.
    fn date(&mut self, func: Func, args: &[Expr]) -> Result<Value, EvalError> {
        let f = |seconds: f64| date_part(func, seconds);
        match args.first() {
            None => {
                // Prometheus takes the step's time in whole seconds.
                let points = (0..self.grid.steps)
                    .map(|i| Some(Sample::Float(f(self.time(i).div_euclid(1000) as f64))))
                    .collect();
                Ok(Value::Vector(vec![Series {
                    labels: Vec::new(),
                    points,
                }]))
            }
            Some(a) => Ok(Value::Vector(map_floats(self.vector(a)?, true, |_, v| {
                Some(f(v))
            }))),
        }
    }

    fn label_replace(&mut self, args: &[Expr]) -> Result<Value, EvalError> {
        let series = self.vector(&args[0])?;
        let dst = self.string(&args[1])?;
        let replacement = self.string(&args[2])?;
        let src = self.string(&args[3])?;
        let pattern = self.string(&args[4])?;
        let re = anchored_regex(&pattern).map_err(|e| {
            EvalError::BadData(format!(
                "invalid regular expression in label_replace(): {pattern}: {e}"
            ))
        })?;
        let out: Vec<Series> = series
            .into_iter()
            .map(|mut s| {
                let value = label_value(&s.labels, &src).to_string();
                if let Some(caps) = re.captures(&value) {
                    let mut res = String::new();
                    caps.expand(&replacement, &mut res);
                    set_label(&mut s.labels, &dst, res);
                }
                s
            })
            .collect();
        check_unique(&out)?;
        Ok(Value::Vector(out))
    }

    fn label_join(&mut self, args: &[Expr]) -> Result<Value, EvalError> {
        let series = self.vector(&args[0])?;
        let dst = self.string(&args[1])?;
        let sep = self.string(&args[2])?;
        let mut srcs = Vec::with_capacity(args.len().saturating_sub(3));
        for a in &args[3..] {
            srcs.push(self.string(a)?);
        }
        let out: Vec<Series> = series
            .into_iter()
            .map(|mut s| {
                let parts: Vec<&str> = srcs.iter().map(|l| label_value(&s.labels, l)).collect();
                let joined = parts.join(&sep);
                set_label(&mut s.labels, &dst, joined);
                s
            })
            .collect();
        check_unique(&out)?;
        Ok(Value::Vector(out))
    }

    fn absent(&mut self, arg: &Expr) -> Result<Value, EvalError> {
        let series = self.vector(arg)?;
        let labels = absent_labels(arg);
        let points = (0..self.grid.steps)
            .map(|i| {
                let present = series.iter().any(|s| s.points[i].is_some());
                (!present).then_some(Sample::Float(1.0))
            })
            .collect();
        Ok(Value::Vector(vec![Series { labels, points }]))
    }

    /// `info(v [, selector])`: each series of `v` gains the labels of the info series
    /// (`target_info` unless a selector says otherwise) sharing its `instance` and `job`.
    fn info(&mut self, args: &[Expr]) -> Result<Value, EvalError> {
        let series = self.vector(&args[0])?;
        let infos = match args.get(1) {
            Some(e) => self.vector(e)?,
            None => self.instant_selector(super::target_info_selector())?,
        };
        const IDENTIFYING: [&str; 2] = ["instance", "job"];
        let key = |l: &Labels| -> Vec<String> {
            IDENTIFYING
                .iter()
                .map(|k| label_value(l, k).to_string())
                .collect()
        };
        let mut by_key: HashMap<Vec<String>, &Labels> = HashMap::new();
        for s in &infos {
            by_key.entry(key(&s.labels)).or_insert(&s.labels);
        }
        let out = series
            .into_iter()
            .map(|mut s| {
                if let Some(info) = by_key.get(&key(&s.labels)) {
                    for (k, v) in info.iter() {
                        let identifying = IDENTIFYING.contains(&k.as_str()) || k == "__name__";
                        if !identifying && !s.labels.iter().any(|(l, _)| l == k) {
                            s.labels.push((k.clone(), v.clone()));
                        }
                    }
                    s.labels.sort();
                }
                s
            })
            .collect();
        Ok(Value::Vector(out))
    }

    /// A function of a range vector (a range selector or a subquery).
    fn range_call(&mut self, func: Func, args: &[Expr]) -> Result<Value, EvalError> {
        let (params, matrix) = match func {
            Func::QuantileOverTime => (vec![self.scalar(&args[0])?], &args[1]),
            Func::PredictLinear => (vec![self.scalar(&args[1])?], &args[0]),
            Func::DoubleExponentialSmoothing => (
                vec![self.scalar(&args[1])?, self.scalar(&args[2])?],
                &args[0],
            ),
            _ => (Vec::new(), &args[0]),
        };
        if func == Func::DoubleExponentialSmoothing {
            check_factors(&params)?;
        }
        let (data, times, range_ms) = self.matrix_arg(matrix)?;
        if matches!(func, Func::AbsentOverTime) {
            let present =
                self.range_apply(Func::PresentOverTime, data, &times, range_ms, &params)?;
            let labels = match matrix {
                Expr::Range { selector, .. } => absent_labels(&Expr::Selector(selector.clone())),
                _ => Vec::new(),
            };
            let points = (0..self.grid.steps)
                .map(|i| {
                    let any = present.iter().any(|s| s.points[i].is_some());
                    (!any).then_some(Sample::Float(1.0))
                })
                .collect();
            return Ok(Value::Vector(vec![Series { labels, points }]));
        }
        let out = self.range_apply(func, data, &times, range_ms, &params)?;
        check_unique(&out)?;
        Ok(Value::Vector(out))
    }

    /// `func` over the windows `(t − range, t]` of each series, for each `t` of `times`.
    fn range_apply(
        &mut self,
        func: Func,
        data: Vec<(Labels, Raw)>,
        times: &[i64],
        range_ms: i64,
        params: &[Vec<f64>],
    ) -> Result<Vec<Series>, EvalError> {
        let mut out = Vec::with_capacity(data.len());
        let keeps_name = func.keeps_name();
        for (labels, raw) in data {
            self.check_deadline()?;
            let mut points = self.new_points()?;
            match raw {
                Raw::Numeric(raw) => {
                    let (mut from_upto, mut to_upto) = (Upto::new(), Upto::new());
                    for (i, &t) in times.iter().enumerate() {
                        if i % DEADLINE_CHECK_STEPS == 0 {
                            self.check_deadline()?;
                        }
                        let from = from_upto.at(&raw, t - range_ms);
                        let to = to_upto.at(&raw, t);
                        let window = &raw[from..to.max(from)];
                        let p: Vec<f64> = params.iter().map(|p| p[i]).collect();
                        let at = (t, self.time(i));
                        points[i] = range_value(func, window, at, range_ms, &p).map(Sample::Float);
                    }
                }
                Raw::Hist(entries) => {
                    let scale = match func {
                        Func::Rate => 1000.0 / range_ms as f64,
                        Func::Increase | Func::SumOverTime => 1.0,
                        // Whether a window holds a period (counting them would depend on
                        // whether the store merged them per slice).
                        Func::PresentOverTime => {
                            self.present_hist_windows(&entries, times, range_ms, &mut points)?;
                            out.push(Series {
                                labels: drop_name(labels),
                                points,
                            });
                            continue;
                        }
                        // Other range functions have no meaning for our histograms.
                        _ => continue,
                    };
                    let windows = slide_merge(&entries, times, range_ms, || self.check_deadline())?;
                    for (slot, w) in points.iter_mut().zip(windows) {
                        *slot = w.map(|hist| Sample::Hist(HistSample { hist, scale }));
                    }
                }
                Raw::None => continue,
            }
            self.note_non_counter(func, &labels, &points);
            out.push(Series {
                labels: if keeps_name {
                    labels
                } else {
                    drop_name(labels)
                },
                points,
            });
        }
        Ok(out)
    }

    /// Prometheus's info when `rate` or `increase` gives values for a float series whose name
    /// does not look like a counter's.
    fn note_non_counter(&mut self, func: Func, labels: &Labels, points: &[Option<Sample>]) {
        if !matches!(func, Func::Rate | Func::Increase) {
            return;
        }
        let name = label_value(labels, "__name__");
        let counter_like = ["_total", "_sum", "_count", "_bucket"]
            .iter()
            .any(|s| name.ends_with(s));
        let floats = points.iter().any(|p| matches!(p, Some(Sample::Float(_))));
        if !name.is_empty() && !counter_like && floats {
            self.notes.info(format!(
                "PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {}",
                crate::ast::quote(name)
            ));
        }
    }

    /// `present_over_time` of histogram periods: 1 where a window holds one.
    fn present_hist_windows(
        &self,
        entries: &[(i64, hist::Histogram)],
        times: &[i64],
        range_ms: i64,
        points: &mut [Option<Sample>],
    ) -> Result<(), EvalError> {
        for (i, &t) in times.iter().enumerate() {
            if i % DEADLINE_CHECK_STEPS == 0 {
                self.check_deadline()?;
            }
            let from = entries.partition_point(|(s, _)| *s < t - range_ms);
            let to = entries.partition_point(|(s, _)| *s < t).max(from);
            if to > from {
                points[i] = Some(Sample::Float(1.0));
            }
        }
        Ok(())
    }

    pub(super) fn histogram_quantile(
        &mut self,
        q: Vec<f64>,
        series: Vec<Series>,
    ) -> Result<Value, EvalError> {
        if let Some(bad) = q.iter().find(|q| !(0.0..=1.0).contains(*q)) {
            self.notes.warn(format!(
                "PromQL warning: quantile value should be between 0 and 1, got {}",
                crate::number::format_value(*bad)
            ));
        }
        let mut out = Vec::new();
        // Classic `le` buckets: float series grouped by their labels without `le`.
        let mut groups: Vec<BucketGroup> = Vec::new();
        let mut group_of: HashMap<Labels, usize> = HashMap::new();
        for (index, s) in series.iter().enumerate() {
            if s.points.iter().any(|p| matches!(p, Some(Sample::Hist(_)))) {
                out.push(Series {
                    labels: drop_name(s.labels.clone()),
                    points: s
                        .points
                        .iter()
                        .enumerate()
                        .map(|(i, p)| match p {
                            Some(Sample::Hist(h)) => Some(Sample::Float(llhist_quantile(h, q[i]))),
                            _ => None,
                        })
                        .collect(),
                });
                continue;
            }
            if !s.points.iter().any(|p| matches!(p, Some(Sample::Float(_)))) {
                // No sample in this range: nothing to warn about (Prometheus warns per sample).
                continue;
            }
            let name = label_value(&s.labels, "__name__").to_string();
            let bound = s
                .labels
                .iter()
                .find(|(k, _)| k == "le")
                .and_then(|(_, v)| parse_le(v).ok());
            let Some(bound) = bound else {
                self.notes.warn(format!(
                    "PromQL warning: bucket label \"le\" is missing or has a malformed value of \"{}\" for metric name \"{name}\"",
                    label_value(&s.labels, "le")
                ));
                continue;
            };
            let mut key = drop_name(s.labels.clone());
            key.retain(|(k, _)| k != "le");
            let g = *group_of.entry(key.clone()).or_insert_with(|| {
                groups.push((key, name, Vec::new()));
                groups.len() - 1
            });
            groups[g].2.push((bound, index));
        }
        for (labels, name, members) in groups {
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
                    let (v, forced) = bucket_quantile(q[i], &mut buckets);
                    if forced {
                        self.notes.info(format!(
                            "PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name \"{name}\""
                        ));
                    }
                    *slot = Some(Sample::Float(v));
                }
            }
            out.push(Series { labels, points });
        }
        Ok(Value::Vector(out))
    }
}

/// `double_exponential_smoothing`'s factors must lie strictly between 0 and 1.
fn check_factors(params: &[Vec<f64>]) -> Result<(), EvalError> {
    for (name, values) in ["smoothing", "trend"].iter().zip(params) {
        if let Some(bad) = values.iter().find(|v| !(**v > 0.0 && **v < 1.0)) {
            return Err(EvalError::Execution(format!(
                "invalid {name} factor. Expected: 0 < {} < 1, got: {bad}",
                if *name == "smoothing" { "sf" } else { "tf" }
            )));
        }
    }
    Ok(())
}

/// Classic buckets of one `histogram_quantile` group: its labels, metric name (for the
/// annotations) and each member's upper bound and series index.
type BucketGroup = (Labels, String, Vec<(f64, usize)>);

fn llhist_quantile(h: &HistSample, q: f64) -> f64 {
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
}

/// A label's value; the empty string when absent (Prometheus's rule).
pub(super) fn label_value<'l>(labels: &'l Labels, name: &str) -> &'l str {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// Sets a label (an empty value removes it), keeping the labels sorted.
fn set_label(labels: &mut Labels, name: &str, value: String) {
    labels.retain(|(k, _)| k != name);
    if !value.is_empty() {
        labels.push((name.to_string(), value));
        labels.sort();
    }
}

/// The labels `absent()` gives, by Prometheus's rule: in matcher order, an equality matcher
/// sets its label unless an earlier equality matcher did; any other matcher on a label removes
/// it (so `{job="a", job="b"}` and `{job="a", job=~"x"}` give no `job`).
fn absent_labels(arg: &Expr) -> Labels {
    let Expr::Selector(sel) = arg else {
        return Vec::new();
    };
    let mut out: Labels = Vec::new();
    let mut set: Vec<&str> = Vec::new();
    for m in sel.matchers.iter().filter(|m| m.label != "__name__") {
        out.retain(|(k, _)| *k != m.label);
        if m.op == MatchOp::Equal && !set.contains(&m.label.as_str()) {
            out.push((m.label.clone(), m.value.clone()));
            set.push(&m.label);
        }
    }
    out.sort();
    out
}

fn math_fn(func: Func) -> fn(f64) -> f64 {
    use Func::*;
    match func {
        Abs => f64::abs,
        Ceil => f64::ceil,
        Floor => f64::floor,
        Sgn => |v: f64| {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                v
            }
        },
        Exp => f64::exp,
        Sqrt => f64::sqrt,
        Ln => f64::ln,
        Log2 => f64::log2,
        Log10 => f64::log10,
        Sin => f64::sin,
        Cos => f64::cos,
        Tan => f64::tan,
        Asin => f64::asin,
        Acos => f64::acos,
        Atan => f64::atan,
        Sinh => f64::sinh,
        Cosh => f64::cosh,
        Tanh => f64::tanh,
        Asinh => f64::asinh,
        Acosh => f64::acosh,
        Atanh => f64::atanh,
        Deg => |v: f64| v * 180.0 / std::f64::consts::PI,
        Rad => |v: f64| v * std::f64::consts::PI / 180.0,
        _ => |v: f64| v,
    }
}

/// One date function of unix seconds, in UTC. Prometheus truncates the value to whole seconds.
pub(super) fn date_part(func: Func, seconds: f64) -> f64 {
    if !seconds.is_finite() || seconds.abs() > 1e15 {
        return f64::NAN;
    }
    let secs = seconds.trunc() as i64;
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let v = match func {
        Func::Minute => (of_day / 60) % 60,
        Func::Hour => of_day / 3600,
        Func::DayOfWeek => (days + 4).rem_euclid(7),
        Func::DayOfMonth => d,
        Func::DayOfYear => days - days_from_civil(y, 1, 1) + 1,
        Func::Month => m,
        Func::Year => y,
        Func::DaysInMonth => match m {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        },
        _ => return f64::NAN,
    };
    v as f64
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of `days_from_civil`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The value at the first step (instant queries; a range query's result is sorted by labels).
fn first_float(s: &Series) -> Option<f64> {
    match s.points.first() {
        Some(Some(Sample::Float(v))) => Some(*v),
        _ => None,
    }
}

/// `sort` / `sort_desc`: by value, NaN last either way; ties by labels (Prometheus leaves
/// them undefined). Histogram samples are left out, as Prometheus does.
fn sort_by_value(series: &mut Vec<Series>, desc: bool) {
    series.retain(|s| !s.points.iter().any(|p| matches!(p, Some(Sample::Hist(_)))));
    series.sort_by(|a, b| {
        let (x, y) = (first_float(a), first_float(b));
        let nan = |v: Option<f64>| v.is_none_or(f64::is_nan);
        let by_value = match (nan(x), nan(y)) {
            (true, true) => std::cmp::Ordering::Equal,
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            _ => {
                let (x, y) = (x.unwrap_or_default(), y.unwrap_or_default());
                if desc {
                    y.total_cmp(&x)
                } else {
                    x.total_cmp(&y)
                }
            }
        };
        by_value.then_with(|| a.labels.cmp(&b.labels))
    });
}

/// `sort_by_label(_desc)`: by the listed labels in natural order, then by the whole label set.
fn sort_by_labels(series: &mut [Series], labels: &[String], desc: bool) {
    series.sort_by(|a, b| {
        for l in labels {
            let ord = natural_cmp(label_value(&a.labels, l), label_value(&b.labels, l));
            if ord != std::cmp::Ordering::Equal {
                return if desc { ord.reverse() } else { ord };
            }
        }
        a.labels.cmp(&b.labels)
    });
}

/// Natural order: runs of digits compare as numbers, everything else byte by byte.
pub(super) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let (si, sj) = (i, j);
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let x = trim_zeros(&a[si..i]);
            let y = trim_zeros(&b[sj..j]);
            let ord = x.len().cmp(&y.len()).then_with(|| x.cmp(y));
            if ord != Ordering::Equal {
                return ord;
            }
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let start = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    &digits[start..]
}
