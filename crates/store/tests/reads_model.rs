//! Histogram reads (per series and merged across series with group-by, through dense
//! accumulators) and numeric per-slice aggregates equal a naive model of what was written —
//! over the head, blocks and rollups (fresh, stale after late data, and rebuilt incrementally
//! where the finer data counts as expired), at slicings that use rollup slices whole, split
//! them, or cannot use them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use hist::Histogram;
use store::key::StreamKey;
use store::{
    merged_histograms, LevelOptions, SeriesId, Slicing, Store, StoreOptions, WriteBatch, DAY_MS,
};

const BASE_MS: i64 = 1_000;
const SERIES: usize = 12;
const SECONDS: i64 = 600;

fn opts() -> StoreOptions {
    StoreOptions {
        base_period_ms: BASE_MS,
        partition_ms: 60_000,
        background_flush: false,
        background_maintenance: false,
        levels: vec![
            LevelOptions {
                period_ms: 10_000,
                retention_ms: 365 * DAY_MS,
            },
            LevelOptions {
                period_ms: 60_000,
                retention_ms: 365 * DAY_MS,
            },
        ],
        ..StoreOptions::default()
    }
}

fn numeric_key(series: usize) -> StreamKey {
    StreamKey::parse(&format!("load|ST[host:h{series}]")).unwrap()
}

fn key(series: usize) -> StreamKey {
    let dc = if series.is_multiple_of(3) { "a" } else { "b" };
    StreamKey::parse(&format!("lat|ST[dc:{dc},host:h{series}]")).unwrap()
}

/// The written data, merged per (series, base period): what every read must agree with.
#[derive(Default)]
struct Model {
    periods: BTreeMap<(usize, i64), Histogram>,
    /// Numeric samples by (series, ms); integers, so every sum is exact in any order.
    numeric: BTreeMap<(usize, i64), f64>,
}

impl Model {
    /// Per slice of `slicing`, the merge of `series`' periods in it.
    fn slices(&self, series: &[usize], slicing: Slicing) -> Vec<Histogram> {
        let n = ((slicing.end_ms - slicing.start_ms) / slicing.period_ms) as usize;
        let mut out = vec![Histogram::new(); n];
        for (&(s, t), h) in &self.periods {
            if series.contains(&s) && (slicing.start_ms..slicing.end_ms).contains(&t) {
                out[((t - slicing.start_ms) / slicing.period_ms) as usize].merge(h);
            }
        }
        out
    }

    /// Per slice: (count, sum, min, max) of the series' numeric samples.
    fn numeric_slices(&self, series: usize, slicing: Slicing) -> Vec<Option<(u64, f64, f64, f64)>> {
        let n = ((slicing.end_ms - slicing.start_ms) / slicing.period_ms) as usize;
        let mut out: Vec<Option<(u64, f64, f64, f64)>> = vec![None; n];
        for (&(s, t), &v) in &self.numeric {
            if s == series && (slicing.start_ms..slicing.end_ms).contains(&t) {
                let slot = &mut out[((t - slicing.start_ms) / slicing.period_ms) as usize];
                *slot = Some(match *slot {
                    None => (1, v, v, v),
                    Some((c, sum, lo, hi)) => (c + 1, sum + v, lo.min(v), hi.max(v)),
                });
            }
        }
        out
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Writes random histograms for seconds `from..to` (each series, each second, with
/// probability 1/2), some values far apart so bins span decades and the NaN bin.
fn write(store: &Store, model: &mut Model, rng: &mut Rng, from: i64, to: i64) {
    let keys: Vec<StreamKey> = (0..SERIES).map(key).collect();
    for t in from..to {
        let mut batch = WriteBatch::new();
        for (s, k) in keys.iter().enumerate() {
            if rng.next().is_multiple_of(2) {
                continue;
            }
            let mut h = Histogram::new();
            for _ in 0..1 + rng.next() % 4 {
                let v = match rng.next() % 10 {
                    0 => f64::NAN,
                    1 => -((rng.next() % 1000) as f64) / 7.0,
                    2 => 1e9 * (rng.next() % 50) as f64,
                    _ => (rng.next() % 5000) as f64 / 1000.0,
                };
                h.insert(v);
            }
            let ts = t * 1000 + (rng.next() % 1000) as i64;
            batch.histogram(k, ts, &h).unwrap();
            let v = (rng.next() % 100) as f64;
            batch.numeric(&numeric_key(s), ts, v).unwrap();
            model.numeric.insert((s, ts), v);
            let period = ts - ts.rem_euclid(BASE_MS);
            model.periods.entry((s, period)).or_default().merge(&h);
        }
        store.write(&batch).unwrap();
    }
}

fn check(store: &Store, model: &Model, ids: &[SeriesId], label: &str) {
    let slicings = [
        (0, SECONDS * 1000, 60_000),
        (0, SECONDS * 1000, 120_000),
        (60_000, 540_000, 30_000),
        (0, 540_000, 90_000),
        (0, SECONDS * 1000, SECONDS * 1000),
        (120_000, 240_000, 5_000),
    ];
    for (start_ms, end_ms, period_ms) in slicings {
        let slicing = Slicing {
            start_ms,
            end_ms,
            period_ms,
        };
        for exact in [false, true] {
            let view = store.view().unwrap();
            let view = if exact { view.exact() } else { view };
            let index = store.index().snapshot().unwrap();
            let what = format!("{label}, {slicing:?}, exact {exact}");
            for (s, &id) in ids.iter().enumerate() {
                let got = view.histograms(id, slicing).unwrap();
                assert_eq!(got, model.slices(&[s], slicing), "series {s}: {what}");
                let nid = store.index().lookup(&numeric_key(s)).unwrap().unwrap().0;
                let got: Vec<Option<(u64, f64, f64, f64)>> = view
                    .numeric_aggregates(nid, slicing)
                    .unwrap()
                    .iter()
                    .map(|a| a.map(|a| (a.count, a.sum, a.min, a.max)))
                    .collect();
                assert_eq!(got, model.numeric_slices(s, slicing), "numeric {s}: {what}");
            }
            let groups = merged_histograms(&view, &index, ids, slicing, &[b"dc".to_vec()]);
            let groups = groups.unwrap();
            assert_eq!(groups.len(), 2, "{what}");
            let a: Vec<usize> = (0..SERIES).filter(|s| s % 3 == 0).collect();
            let b: Vec<usize> = (0..SERIES).filter(|s| s % 3 != 0).collect();
            assert_eq!(groups[0].key, vec![Some(b"a".to_vec())]);
            assert_eq!(groups[0].series, a.len() as u64);
            assert_eq!(groups[0].slices, model.slices(&a, slicing), "dc a: {what}");
            assert_eq!(groups[1].slices, model.slices(&b, slicing), "dc b: {what}");
        }
    }
}

#[test]
fn histogram_reads_equal_the_model_over_head_blocks_and_rollups() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), opts()).unwrap();
    let mut model = Model::default();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    write(&store, &mut model, &mut rng, 0, 420);
    let ids: Vec<SeriesId> = (0..SERIES)
        .map(|s| store.index().lookup(&key(s)).unwrap().unwrap().0)
        .collect();
    check(&store, &model, &ids, "head");
    store.flush().unwrap();
    write(&store, &mut model, &mut rng, 420, SECONDS);
    check(&store, &model, &ids, "blocks and head");
    store.flush().unwrap();
    let report = store.build_rollups(400 * DAY_MS).unwrap();
    assert!(report.partitions > 0);
    let view = store.view().unwrap();
    let rollup_slices = {
        let _ = view.histograms(
            ids[0],
            Slicing {
                start_ms: 0,
                end_ms: SECONDS * 1000,
                period_ms: 60_000,
            },
        );
        view.rollup_slices_read()
    };
    drop(view);
    assert!(rollup_slices > 0, "a 1 m read uses the 1 m level");
    check(&store, &model, &ids, "rollups");
    // Late data into rolled-up minutes: first in the head, then flushed (stale rollups).
    write(&store, &mut model, &mut rng, 100, 130);
    check(&store, &model, &ids, "rollups and late data in the head");
    store.flush().unwrap();
    check(&store, &model, &ids, "stale rollups");
    store.build_rollups(400 * DAY_MS).unwrap();
    check(&store, &model, &ids, "rebuilt rollups");
    store.close().unwrap();
}
