//! The aggregations that are not a fold over values: `count_values`, `limitk`, `limit_ratio`.

use std::collections::BTreeMap;
use std::collections::HashMap;

use super::{Ctx, EvalError, Labels, Sample, Series, Value};
use crate::ast::AggOp;

impl Ctx<'_> {
    /// `count_values("label", v)`: per group and step, how many samples have each value; the
    /// value (Prometheus's number text) becomes `label` of the output series.
    pub(super) fn count_values(
        &mut self,
        label: &str,
        groups: Vec<(Labels, Vec<usize>)>,
        series: &[Series],
    ) -> Result<Value, EvalError> {
        if label.is_empty() {
            return Err(EvalError::Execution(format!(
                "invalid label name {}",
                crate::ast::quote(label)
            )));
        }
        let mut out: Vec<Series> = Vec::new();
        let mut index: HashMap<Labels, usize> = HashMap::new();
        for (key, members) in groups {
            self.check_deadline()?;
            for i in 0..self.grid.steps {
                let mut counts: BTreeMap<String, f64> = BTreeMap::new();
                for &m in &members {
                    if let Some(Sample::Float(v)) = &series[m].points[i] {
                        *counts.entry(crate::number::format_value(*v)).or_default() += 1.0;
                    }
                }
                for (value, n) in counts {
                    let mut labels = key.clone();
                    labels.retain(|(k, _)| k != label);
                    labels.push((label.to_string(), value));
                    labels.sort();
                    let o = match index.get(&labels) {
                        Some(&o) => o,
                        None => {
                            let points = self.new_points()?;
                            out.push(Series {
                                labels: labels.clone(),
                                points,
                            });
                            index.insert(labels, out.len() - 1);
                            out.len() - 1
                        }
                    };
                    out[o].points[i] = Some(Sample::Float(n));
                }
            }
        }
        Ok(Value::Vector(out))
    }

    /// `topk(k, v)` / `bottomk(k, v)`: per group and step the `k` greatest (least) values,
    /// each kept in its own series with all its labels. NaN sorts last either way.
    pub(super) fn top(
        &mut self,
        op: AggOp,
        k: &[f64],
        groups: &[(Labels, Vec<usize>)],
        series: Vec<Series>,
    ) -> Vec<Series> {
        let mut out: Vec<Series> = Vec::new();
        let mut selected: Vec<Vec<bool>> = vec![vec![false; self.grid.steps]; series.len()];
        for (_, members) in groups {
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
        out
    }

    /// `limitk(k, v)`: per group and step the first `k` series with a value (in label order);
    /// `limit_ratio(r, v)`: the series whose label hash falls in the first `r` of the hash
    /// space (the last `−r` for a negative `r`), so a ratio keeps the same series every step.
    pub(super) fn limit(
        &mut self,
        op: AggOp,
        param: &[f64],
        groups: &[(Labels, Vec<usize>)],
        series: Vec<Series>,
    ) -> Result<Vec<Series>, EvalError> {
        let mut keep = vec![vec![false; self.grid.steps]; series.len()];
        for (_, members) in groups {
            self.check_deadline()?;
            for (i, &p) in param.iter().enumerate() {
                let present = members.iter().filter(|&&m| series[m].points[i].is_some());
                if op == AggOp::Limitk {
                    let k = if p.is_nan() || p < 1.0 {
                        0
                    } else {
                        p.min(1e9) as usize
                    };
                    present.take(k).for_each(|&m| keep[m][i] = true);
                    continue;
                }
                let r = self.ratio_param(p);
                for &m in present {
                    let offset = label_hash(&series[m].labels) as f64 / u64::MAX as f64;
                    keep[m][i] = (r >= 0.0 && offset < r) || (r < 0.0 && offset >= 1.0 + r);
                }
            }
        }
        Ok(series
            .into_iter()
            .zip(keep)
            .map(|(s, k)| Series {
                labels: s.labels,
                points: s
                    .points
                    .into_iter()
                    .zip(k)
                    .map(|(p, keep)| if keep { p } else { None })
                    .collect(),
            })
            .collect())
    }

    fn ratio_param(&mut self, r: f64) -> f64 {
        if (-1.0..=1.0).contains(&r) {
            return r;
        }
        let to = if r.is_nan() { 0.0 } else { r.clamp(-1.0, 1.0) };
        self.notes.warn(format!(
            "PromQL warning: ratio value should be between -1 and 1, got {}, capping to {}",
            crate::number::format_value(r),
            crate::number::format_value(to)
        ));
        to
    }
}

/// The groups of an aggregation: each group's labels and its members' indexes, in the order
/// first seen.
pub(super) fn groups_of(
    grouping: Option<&crate::ast::Grouping>,
    series: &[Series],
) -> Vec<(Labels, Vec<usize>)> {
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
    groups
}

/// FNV-1a over the label pairs: stable across steps and runs.
fn label_hash(labels: &Labels) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in labels {
        for b in k.bytes().chain([0xff]).chain(v.bytes()).chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
