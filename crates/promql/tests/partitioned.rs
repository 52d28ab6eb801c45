//! Queries over data split across partitions (`eval::Source::Remote`) answer what the same
//! queries answer over one store holding all of it: with every aggregation evaluated on the
//! front over the joined series (exactly), and with `sum`/`count`/`min`/`max` pushed down to
//! the partitions and their partials merged (histograms exactly, float sums to the last
//! place; groups mixing floats and histograms across partitions have no value, as on one
//! store). The partitions are real stores answering through `answer_select` and
//! `answer_partial`, the functions a storage node serves; only HTTP is left out (the server's
//! `cluster_reads` test covers it).
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hist::Histogram;
use promql::eval::{self, EvalError, Limits, Output, Remote, Sample, Source};
use store::key::{StreamKey, Tag};
use store::{Store, StoreOptions, WriteBatch};

const PARTITIONS: usize = 3;
const STEP_MS: i64 = 15_000;
const POINTS: i64 = 80;

struct Partitions {
    stores: Vec<Arc<Store>>,
    partials: AtomicUsize,
    selects: AtomicUsize,
}

impl Remote for Partitions {
    fn select(&self, request: &[u8], _: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError> {
        self.selects.fetch_add(1, Ordering::Relaxed);
        self.stores
            .iter()
            .map(|s| eval::answer_select(s, request))
            .collect()
    }

    fn get(&self, _: &str, _: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError> {
        Err(EvalError::Execution("listings are not read here".into()))
    }

    fn partial(&self, request: &[u8], _: Option<&str>) -> Result<Vec<Vec<u8>>, EvalError> {
        self.partials.fetch_add(1, Ordering::Relaxed);
        self.stores
            .iter()
            .map(|s| eval::answer_partial(s, request))
            .collect()
    }
}

fn open(dir: &std::path::Path) -> Arc<Store> {
    let options = StoreOptions {
        wal_segment_size_bytes: 1 << 20,
        ..StoreOptions::default()
    };
    Arc::new(Store::open(dir, options).unwrap())
}

fn key(name: &str, tags: &[(&str, &str)]) -> StreamKey {
    let tags = tags
        .iter()
        .map(|(k, v)| Tag::new(k.as_bytes(), v.as_bytes()).unwrap());
    StreamKey::new(name.to_string(), tags).unwrap()
}

fn partition_of(k: &StreamKey, h: u32, partitions: usize) -> usize {
    (k.canonical().len() + h as usize) % partitions
}

/// Counters per host and code (one resets), a gauge per host, a histogram per host: every
/// series written to `whole` and to the partition its key hashes to.
fn load(whole: &Store, parts: &[Arc<Store>]) {
    let mut all = WriteBatch::new();
    let mut split: Vec<WriteBatch> = (0..parts.len()).map(|_| WriteBatch::new()).collect();
    for h in 0..6u32 {
        let host = format!("h{h}");
        let mut series = Vec::new();
        for (c, code) in ["200", "500"].iter().enumerate() {
            let k = key("req_total", &[("host", &host), ("code", code)]);
            series.push((k, Some((h + 1) as f64 * (c as f64 * 2.5 + 1.0)), None));
        }
        series.push((key("temp", &[("host", &host)]), None, None));
        series.push((key("lat", &[("host", &host)]), None, Some(h)));
        // One name, numeric on some hosts and histograms on others: groups that mix them.
        // (Numeric in the first partition only, so that some partitions hold one kind.)
        let mix = key("mix", &[("host", &host)]);
        series.push(match partition_of(&mix, h, parts.len()) {
            0 => (mix, Some(1.0), None),
            _ => (mix, None, Some(h)),
        });
        for (k, rate, hist_seed) in series {
            let p = partition_of(&k, h, parts.len());
            for i in 0..POINTS {
                let ts = i * STEP_MS;
                let put = |b: &mut WriteBatch| match (rate, hist_seed) {
                    (Some(r), _) => {
                        // One counter resets half way.
                        let i = if h == 2 && i >= POINTS / 2 {
                            i - POINTS / 2
                        } else {
                            i
                        };
                        b.numeric(&k, ts, r * i as f64).unwrap()
                    }
                    (None, Some(seed)) => {
                        let mut hist = Histogram::new();
                        for j in 0..(3 + (i + seed as i64) % 4) {
                            hist.insert(0.01 * (1 + j + seed as i64) as f64);
                        }
                        b.histogram(&k, ts, &hist).unwrap()
                    }
                    (None, None) => b
                        .numeric(&k, ts, (i as f64 * 0.37 + h as f64).sin() * 10.0 + 20.0)
                        .unwrap(),
                };
                put(&mut all);
                put(&mut split[p]);
            }
        }
    }
    whole.write(&all).unwrap();
    for (store, batch) in parts.iter().zip(split) {
        store.write(&batch).unwrap();
    }
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn samples_close(a: &Sample, b: &Sample) -> bool {
    match (a, b) {
        (Sample::Float(x), Sample::Float(y)) => close(*x, *y),
        (Sample::Hist(x), Sample::Hist(y)) => x.hist == y.hist && close(x.scale, y.scale),
        _ => false,
    }
}

/// Equal outputs, floats to 1e-12 relative.
fn outputs_close(a: &Output, b: &Output) -> bool {
    match (a, b) {
        (Output::Vector { samples: x, .. }, Output::Vector { samples: y, .. }) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((lx, sx), (ly, sy))| lx == ly && samples_close(sx, sy))
        }
        (Output::Matrix(x), Output::Matrix(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(s, t)| {
                    s.labels == t.labels
                        && s.floats.len() == t.floats.len()
                        && s.floats
                            .iter()
                            .zip(&t.floats)
                            .all(|(p, q)| p.0 == q.0 && close(p.1, q.1))
                        && s.hists.len() == t.hists.len()
                        && s.hists.iter().zip(&t.hists).all(|(p, q)| {
                            p.0 == q.0 && p.1.hist == q.1.hist && close(p.1.scale, q.1.scale)
                        })
                })
        }
        _ => a == b,
    }
}

const QUERIES: &[(&str, bool)] = &[
    // (query, pushed down)
    ("req_total", false),
    ("sum(req_total)", true),
    ("sum by (host) (rate(req_total[2m]))", true),
    ("sum without (code) (increase(req_total[5m]))", true),
    ("count by (code) (req_total)", true),
    ("max(temp)", true),
    ("min by (host) (temp)", true),
    ("sum(max_over_time(temp[5m]))", true),
    ("max(quantile_over_time(0.5, temp[5m]))", true),
    ("sum(temp offset 1m)", true),
    ("sum(temp @ 600)", true),
    ("max(rate(req_total[1m])) / 2", true),
    ("sum by (code) (resets(req_total[10m])) + 1", true),
    ("count(lat)", true),
    ("sum(lat)", true),
    ("sum(rate(lat[5m]))", true),
    (
        "histogram_quantile(0.9, sum by (host) (rate(lat[5m])))",
        true,
    ),
    ("histogram_count(sum(increase(lat[2m])))", true),
    ("sum(mix)", true),
    ("max(mix)", true),
    ("min(mix)", true),
    ("count(mix)", true),
    ("sum by (host) (mix)", true),
    ("avg(temp)", false),
    ("topk(2, temp)", false),
    ("quantile(0.5, rate(req_total[2m]))", false),
    ("sum(rate(req_total[5m:1m]))", false),
    ("absent_over_time(nothing[5m])", false),
    ("rate(lat[5m])", false),
];

#[test]
fn partitioned_answers_equal_one_store_pushed_down_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let whole = open(&dir.path().join("whole"));
    let stores: Vec<Arc<Store>> = (0..PARTITIONS)
        .map(|p| open(&dir.path().join(format!("p{p}"))))
        .collect();
    load(&whole, &stores);
    let parts = Partitions {
        stores,
        partials: AtomicUsize::new(0),
        selects: AtomicUsize::new(0),
    };
    let limits = Limits::default();
    let remote = |pushdown| Source::Remote {
        remote: &parts,
        read_after: None,
        pushdown,
    };
    for &(query, pushed) in QUERIES {
        for t in [10 * 60_000, 15 * 60_000 + 7_000, (POINTS - 1) * STEP_MS] {
            let want = eval::instant_annotated(&whole, query, t, limits).unwrap();
            let joined = eval::instant_from(remote(false), query, t, limits).unwrap();
            assert_eq!(joined, want, "{query} at {t}: fetched and joined");
            let before = parts.partials.load(Ordering::Relaxed);
            let (got, notes) = eval::instant_from(remote(true), query, t, limits).unwrap();
            assert!(
                outputs_close(&got, &want.0),
                "{query} at {t}: pushed down\n{got:?}\n{want:?}"
            );
            assert_eq!(notes, want.1, "{query} at {t}: annotations");
            let used = parts.partials.load(Ordering::Relaxed) > before;
            assert_eq!(used, pushed, "{query}: pushed down or not");
        }
        let (start, end) = (5 * 60_000, (POINTS - 1) * STEP_MS);
        let want = eval::range_annotated(&whole, query, start, end, 30_000, limits);
        let Ok(want) = want else { continue };
        let joined = eval::range_from(remote(false), query, start, end, 30_000, limits).unwrap();
        assert_eq!(joined, want, "{query} over a range: fetched and joined");
        let (got, _) = eval::range_from(remote(true), query, start, end, 30_000, limits).unwrap();
        assert!(
            outputs_close(&got, &want.0),
            "{query} over a range: pushed down"
        );
    }
    assert!(parts.selects.load(Ordering::Relaxed) > 0);
}
