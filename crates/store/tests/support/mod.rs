//! Shared by the rollup tests: a small-period store layout, a naive model of what was written,
//! and checks of every per-slice read against the model.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;

use hist::Histogram;
use rand::{Rng, SeedableRng};
use store::{LevelOptions, SeriesId, Slicing, Store, StoreOptions, View, WriteBatch};

pub const BASE_MS: i64 = 1_000;
pub const PARTITION_MS: i64 = 10_000;
/// Levels 5 s, 20 s, 60 s: partitions 1,440 s, 5,760 s and 17,280 s.
pub const LEVEL_PERIODS_MS: [i64; 3] = [5_000, 20_000, 60_000];
pub const LEVEL_PARTITIONS_MS: [i64; 3] = [1_440_000, 5_760_000, 17_280_000];
/// Two partitions of the coarsest level.
pub const SPAN_MS: i64 = 2 * 17_280_000;
pub const NUMERIC: &str = "roll_n|ST[k:counter]";
pub const HIST: &str = "roll_h|ST[k:latency]";

pub fn opts() -> StoreOptions {
    StoreOptions {
        base_period_ms: BASE_MS,
        partition_ms: PARTITION_MS,
        background_flush: false,
        levels: LEVEL_PERIODS_MS
            .iter()
            .map(|&period_ms| LevelOptions {
                period_ms,
                retention_ms: 1 << 50,
            })
            .collect(),
        base_retention_ms: 1 << 50,
        raw_numeric_retention_ms: 1 << 50,
        rollup_grace_ms: 0,
        ..StoreOptions::default()
    }
}

pub fn key(text: &str) -> store::key::StreamKey {
    store::key::StreamKey::parse(text).unwrap()
}

pub fn id(store: &Store, text: &str) -> SeriesId {
    store.index().lookup(&key(text)).unwrap().unwrap().0
}

/// What was written: numeric samples (later write wins a millisecond) and histograms merged
/// per base period.
#[derive(Default, Clone)]
pub struct Model {
    pub numeric: BTreeMap<i64, f64>,
    pub hists: BTreeMap<i64, Histogram>,
}

impl Model {
    /// `n` random samples in `[start_ms, end_ms)` for both series: a counter that sometimes
    /// resets, and histograms of 1–4 lognormal-ish values. The same seed gives the same samples.
    pub fn generate(seed: u64, n: usize, start_ms: i64, end_ms: i64) -> Vec<(i64, f64, Histogram)> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut counter = rng.random_range(0.0..100.0f64).floor();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t = rng.random_range(start_ms..end_ms);
            counter = if rng.random_range(0..50) == 0 {
                rng.random_range(0.0..5.0f64).floor()
            } else {
                counter + rng.random_range(0.0..10.0f64).floor()
            };
            let mut h = Histogram::new();
            for _ in 0..rng.random_range(1..5) {
                h.insert((rng.random_range(-3.0..2.0f64)).exp());
            }
            out.push((t, counter, h));
        }
        out
    }

    /// Adds samples to the model (in write order: a later one wins a millisecond).
    pub fn add(&mut self, samples: &[(i64, f64, Histogram)]) {
        for (t, v, h) in samples {
            self.numeric.insert(*t, *v);
            self.hists
                .entry(t - t.rem_euclid(BASE_MS))
                .or_default()
                .merge(h);
        }
    }

    /// Writes samples in batches of 500 (one WAL record each).
    pub fn write(store: &Store, samples: &[(i64, f64, Histogram)]) {
        let (nk, hk) = (key(NUMERIC), key(HIST));
        for part in samples.chunks(500) {
            let mut batch = WriteBatch::new();
            for (t, v, h) in part {
                batch.numeric(&nk, *t, *v).unwrap();
                batch.histogram(&hk, *t, h).unwrap();
            }
            store.write(&batch).unwrap();
        }
    }

    /// Generates, writes and adds to the model.
    pub fn write_random(&mut self, store: &Store, seed: u64, n: usize, start_ms: i64, end_ms: i64) {
        let samples = Model::generate(seed, n, start_ms, end_ms);
        Model::write(store, &samples);
        self.add(&samples);
    }

    /// Drops what a delete of `series` (`NUMERIC` or `HIST`) over `[start_ms, end_ms)` removes.
    pub fn delete(&mut self, series: &str, start_ms: i64, end_ms: i64) {
        if series == NUMERIC {
            self.numeric.retain(|t, _| !(start_ms..end_ms).contains(t));
        } else {
            self.hists.retain(|t, _| !(start_ms..end_ms).contains(t));
        }
    }

    pub fn histograms(&self, s: Slicing) -> Vec<Histogram> {
        let n = ((s.end_ms - s.start_ms) / s.period_ms) as usize;
        let mut out = vec![Histogram::new(); n];
        for (&t, h) in self.hists.range(s.start_ms..s.end_ms) {
            out[((t - s.start_ms) / s.period_ms) as usize].merge(h);
        }
        out
    }

    /// Per slice: (count, sum, min, max, first, last, first_ts, last_ts, increase inside).
    pub fn numeric(&self, s: Slicing) -> Vec<Option<Expected>> {
        let n = ((s.end_ms - s.start_ms) / s.period_ms) as usize;
        let mut out: Vec<Option<Expected>> = vec![None; n];
        for (&t, &v) in self.numeric.range(s.start_ms..s.end_ms) {
            let slot = &mut out[((t - s.start_ms) / s.period_ms) as usize];
            match slot {
                None => {
                    *slot = Some(Expected {
                        count: 1,
                        sum: v,
                        sum_squares: v * v,
                        min: v,
                        max: v,
                        first: (t, v),
                        last: (t, v),
                        increase: 0.0,
                    })
                }
                Some(e) => {
                    e.count += 1;
                    e.sum += v;
                    e.sum_squares += v * v;
                    e.min = e.min.min(v);
                    e.max = e.max.max(v);
                    e.increase += if v >= e.last.1 { v - e.last.1 } else { v };
                    e.last = (t, v);
                }
            }
        }
        out
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Expected {
    pub count: u64,
    pub sum: f64,
    pub sum_squares: f64,
    pub min: f64,
    pub max: f64,
    pub first: (i64, f64),
    pub last: (i64, f64),
    pub increase: f64,
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Every per-slice read of both series over the whole span at `period_ms` equals the model:
/// histograms bit for bit, numeric aggregates within float rounding. Returns the rollup slices
/// the reads used.
pub fn check(view: &View<'_>, store: &Store, model: &Model, period_ms: i64, what: &str) -> u64 {
    let s = Slicing {
        start_ms: 0,
        end_ms: SPAN_MS,
        period_ms,
    };
    let before = view.rollup_slices_read();
    let got = view.histograms(id(store, HIST), s).unwrap();
    let want = model.histograms(s);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{what}: histogram slice {i} at period {period_ms}");
    }
    let got = view.slice_aggregates(id(store, NUMERIC), s).unwrap();
    let want = model.numeric(s);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        match (g, w) {
            (None, None) => {}
            (Some(g), Some(w)) => {
                let a = &g.agg;
                let ok = a.count == w.count
                    && close(a.sum, w.sum)
                    && close(a.sum_squares, w.sum_squares)
                    && a.min == w.min
                    && a.max == w.max
                    && (a.first_ts_ms, a.first) == w.first
                    && (a.last_ts_ms, a.last) == w.last
                    && close(g.increase, w.increase);
                assert!(
                    ok,
                    "{what}: numeric slice {i} at period {period_ms}: {g:?} vs {w:?}"
                );
            }
            _ => panic!("{what}: numeric slice {i} at period {period_ms}: {g:?} vs {w:?}"),
        }
    }
    view.rollup_slices_read() - before
}

/// `check` at the base period, every level's period, a multiple of the coarsest and periods
/// that are not multiples of the coarser levels.
pub fn check_all(store: &Store, model: &Model, what: &str) -> Vec<u64> {
    let view = store.view().unwrap();
    let mut used = Vec::new();
    // 90 s and 270 s are not multiples of the 20 s and 60 s levels: their slices that fit in
    // one column are used, the straddling ones read from finer data.
    for p in [BASE_MS, 5_000, 20_000, 60_000, 90_000, 180_000, 270_000] {
        used.push(check(&view, store, model, p, what));
    }
    drop(view);
    let exact = store.view().unwrap().exact();
    for p in [5_000, 60_000] {
        assert_eq!(
            check(&exact, store, model, p, what),
            0,
            "{what}: exact read used rollups"
        );
    }
    used
}
