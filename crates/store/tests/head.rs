#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The write path and head: write → read back, per-period merge, out-of-order and late data, the
//! duplicate rule, cumulative histograms, concurrent writers, reopen.

use std::sync::Arc;

use hist::Histogram;
use store::{Latest, SeriesId, Slicing, Store, StoreOptions, TagQuery, WriteBatch};

fn key(text: &str) -> store::key::StreamKey {
    store::key::StreamKey::parse(text).unwrap()
}

fn id(store: &Store, text: &str) -> SeriesId {
    store.index().lookup(&key(text)).unwrap().unwrap().0
}

fn hist_of(values: &[f64]) -> Histogram {
    let mut h = Histogram::new();
    for &v in values {
        h.insert(v);
    }
    h
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, StoreOptions::default()).unwrap()
}

#[test]
fn write_then_read_back_every_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let mut b = WriteBatch::new();
    let (n, t, h) = (
        key("cpu|ST[host:a]"),
        key("state|ST[host:a]"),
        key("lat|ST[host:a]"),
    );
    for i in 0..100i64 {
        b.numeric(&n, i * 1000, i as f64 * 0.5).unwrap();
    }
    b.numeric(&n, 200_000, f64::NAN).unwrap();
    b.numeric(&n, 201_000, -0.0).unwrap();
    b.text(&t, 10, "up").unwrap();
    b.text(&t, 20, "up").unwrap();
    b.text(&t, 30, "down").unwrap();
    b.histogram(&h, 5_000, &hist_of(&[1.0, 2.0])).unwrap();
    store.write(&b).unwrap();

    let view = store.view().unwrap();
    let raw = view
        .raw_numeric(id(&store, "cpu|ST[host:a]"), 0, i64::MAX)
        .unwrap();
    assert_eq!(raw.len(), 102);
    for (i, (ts, v)) in raw.iter().take(100).enumerate() {
        assert_eq!((*ts, *v), (i as i64 * 1000, i as f64 * 0.5));
    }
    assert!(raw[100].1.is_nan());
    assert_eq!(raw[101].1.to_bits(), (-0.0f64).to_bits());
    let text = view
        .raw_text(id(&store, "state|ST[host:a]"), 0, 100)
        .unwrap();
    assert_eq!(text, vec![(10, "up".to_owned()), (30, "down".to_owned())]);
    let hs = view
        .raw_histograms(id(&store, "lat|ST[host:a]"), 0, 60_000)
        .unwrap();
    assert_eq!(hs, vec![(0, hist_of(&[1.0, 2.0]))]);
    assert_eq!(
        view.latest(id(&store, "state|ST[host:a]")).unwrap(),
        Some(Latest::Text {
            ts_ms: 30,
            value: "down".into()
        })
    );
    drop(view);

    // The same through a tag query.
    let found = store.find(&TagQuery::parse("and(host:a,__name:cpu)").unwrap(), 1 << 20);
    assert_eq!(found.unwrap(), vec![id(&store, "cpu|ST[host:a]")]);
}

#[test]
fn aggregates_and_histograms_per_slice() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let n = key("m");
    let h = key("h");
    let mut b = WriteBatch::new();
    // Two minutes of 10 s samples; histograms every 10 s merged per 60 s base period.
    for i in 0..12i64 {
        b.numeric(&n, i * 10_000, i as f64).unwrap();
        b.histogram(&h, i * 10_000, &hist_of(&[i as f64])).unwrap();
    }
    store.write(&b).unwrap();
    let view = store.view().unwrap();
    let s = Slicing {
        start_ms: 0,
        end_ms: 180_000,
        period_ms: 60_000,
    };
    let aggs = view.numeric_aggregates(id(&store, "m"), s).unwrap();
    assert_eq!(aggs.len(), 3);
    let a = aggs[0].unwrap();
    assert_eq!(
        (a.count, a.sum, a.min, a.max, a.first, a.last),
        (6, 15.0, 0.0, 5.0, 0.0, 5.0)
    );
    assert_eq!(a.mean(), 2.5);
    assert_eq!(aggs[1].unwrap().sum, 6.0 + 7.0 + 8.0 + 9.0 + 10.0 + 11.0);
    assert!(aggs[2].is_none());
    let hs = view.histograms(id(&store, "h"), s).unwrap();
    assert_eq!(hs[0], hist_of(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]));
    assert_eq!(hs[1], hist_of(&[6.0, 7.0, 8.0, 9.0, 10.0, 11.0]));
    assert!(hs[2].is_empty());
    // A 120 s period merges both base periods.
    let wide = Slicing {
        period_ms: 120_000,
        end_ms: 120_000,
        ..s
    };
    assert_eq!(
        view.histograms(id(&store, "h"), wide).unwrap()[0].sample_count(),
        12
    );
    // Unaligned requests are refused.
    let bad = Slicing { start_ms: 1, ..s };
    assert!(view.numeric_aggregates(id(&store, "m"), bad).is_err());
    let bad = Slicing {
        period_ms: 90_000,
        ..s
    };
    assert!(view.histograms(id(&store, "h"), bad).is_err());
}

#[test]
fn out_of_order_late_and_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let n = key("m");
    let h = key("h");
    for ts in [50_000i64, 10_000, 30_000, 20_000, 40_000] {
        let mut b = WriteBatch::new();
        b.numeric(&n, ts, ts as f64).unwrap();
        b.histogram(&h, ts, &hist_of(&[1.0])).unwrap();
        store.write(&b).unwrap();
    }
    // Late by an hour, then duplicates: a later batch wins, and within a batch the last added.
    let mut late = WriteBatch::new();
    late.numeric(&n, -3_600_000, 7.0).unwrap();
    late.histogram(&h, -3_600_000, &hist_of(&[2.0])).unwrap();
    late.histogram(&h, 30_000, &hist_of(&[3.0])).unwrap();
    late.numeric(&n, 30_000, 1.0).unwrap();
    late.numeric(&n, 30_000, 2.0).unwrap();
    store.write(&late).unwrap();

    let check = |store: &Store| {
        let view = store.view().unwrap();
        let raw = view
            .raw_numeric(id(store, "m"), i64::MIN, i64::MAX)
            .unwrap();
        let want = vec![
            (-3_600_000, 7.0),
            (10_000, 10_000.0),
            (20_000, 20_000.0),
            (30_000, 2.0),
            (40_000, 40_000.0),
            (50_000, 50_000.0),
        ];
        assert_eq!(raw, want);
        let hs = view
            .raw_histograms(id(store, "h"), i64::MIN, i64::MAX)
            .unwrap();
        let mut merged = hist_of(&[1.0; 5]);
        merged.merge(&hist_of(&[3.0]));
        assert_eq!(hs, vec![(-3_600_000, hist_of(&[2.0])), (0, merged)]);
    };
    check(&store);
    drop(store);
    // Replay reproduces the same head, duplicates included.
    let store = open(tmp.path());
    assert_eq!(store.replay_report().records, 6);
    check(&store);
    // So do blocks: `close` flushes, and the reopened store replays nothing.
    store.close().unwrap();
    let store = open(tmp.path());
    assert_eq!(store.replay_report().records, 0);
    assert!(store.replay_report().blocks >= 2);
    check(&store);
}

/// A broker forwarding cumulative histograms it stored during an outage, after newer ones
/// came: each older submission adds nothing (taking it as a counter reset would count its
/// counts twice), and the next newer one differs from the newest, so the total is exact. The
/// same after replay, and after a flush (the state file keeps each series' newest time).
#[test]
fn older_cumulative_histograms_add_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let h = key("logins");
    let submit = |store: &Store, ts_ms: i64, n: usize| {
        let mut b = WriteBatch::new();
        b.cumulative_histogram(&h, ts_ms, &hist_of(&vec![1.5; n]))
            .unwrap();
        store.write(&b).unwrap();
    };
    submit(&store, 0, 5);
    submit(&store, 300_000, 40);
    // The backfill, older than the newest: left out.
    submit(&store, 60_000, 12);
    submit(&store, 120_000, 30);
    submit(&store, 360_000, 41);
    let id = id(&store, "logins");
    let want = vec![
        (0, hist_of(&[1.5; 5])),
        (300_000, hist_of(&[1.5; 35])),
        (360_000, hist_of(&[1.5; 1])),
    ];
    let read = |store: &Store| {
        store
            .view()
            .unwrap()
            .raw_histograms(id, 0, 600_000)
            .unwrap()
    };
    assert_eq!(read(&store), want);
    assert_eq!(store.cumulative_left_out().unwrap(), 2);
    drop(store);
    // Replay from the WAL leaves the same submissions out.
    let store = open(tmp.path());
    assert_eq!(read(&store), want);
    assert_eq!(store.cumulative_left_out().unwrap(), 2);
    store.flush().unwrap();
    store.close().unwrap();
    // After a flush the state comes from the state file: an older submission is still left
    // out, a newer one is still a difference.
    let store = open(tmp.path());
    submit(&store, 180_000, 33);
    submit(&store, 420_000, 44);
    let mut want = want;
    want.push((420_000, hist_of(&[1.5; 3])));
    assert_eq!(read(&store), want);
}

#[test]
fn cumulative_histograms_with_a_counter_reset() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let h = key("requests");
    let submit = |ts_ms: i64, values: &[f64]| {
        let mut b = WriteBatch::new();
        b.cumulative_histogram(&h, ts_ms, &hist_of(values)).unwrap();
        store.write(&b).unwrap();
    };
    submit(0, &[1.0, 2.0]); // first: taken whole
    submit(60_000, &[1.0, 2.0, 2.0, 5.0]); // + 2.0, 5.0
    submit(120_000, &[1.0]); // a bin went down: reset, taken whole
    submit(180_000, &[1.0, 1.0, 9.0]); // + 1.0, 9.0
    let want = vec![
        (0, hist_of(&[1.0, 2.0])),
        (60_000, hist_of(&[2.0, 5.0])),
        (120_000, hist_of(&[1.0])),
        (180_000, hist_of(&[1.0, 9.0])),
    ];
    let id = id(&store, "requests");
    assert_eq!(
        store
            .view()
            .unwrap()
            .raw_histograms(id, 0, 240_000)
            .unwrap(),
        want
    );
    store.close().unwrap();
    let store = open(tmp.path());
    assert_eq!(
        store
            .view()
            .unwrap()
            .raw_histograms(id, 0, 240_000)
            .unwrap(),
        want
    );
    // The difference state survives the reopen: the next submission is a difference again.
    let mut b = WriteBatch::new();
    b.cumulative_histogram(&h, 240_000, &hist_of(&[1.0, 1.0, 9.0, 9.0]))
        .unwrap();
    store.write(&b).unwrap();
    let got = store
        .view()
        .unwrap()
        .raw_histograms(id, 240_000, 300_000)
        .unwrap();
    assert_eq!(got, vec![(240_000, hist_of(&[9.0]))]);
}

#[test]
fn kinds_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let k = key("x");
    let mut b = WriteBatch::new();
    b.numeric(&k, 0, 1.0).unwrap();
    assert!(b.text(&k, 0, "a").is_err());
    store.write(&b).unwrap();
    let mut b = WriteBatch::new();
    b.text(&k, 1, "a").unwrap();
    assert!(store.write(&b).is_err());
    assert!(Store::open(
        tmp.path().join("other"),
        StoreOptions {
            base_period_ms: 999,
            ..StoreOptions::default()
        }
    )
    .is_err());
}

#[test]
fn partial_writes_leave_out_only_keys_of_another_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let (x, y) = (key("x|ST[h:a]"), key("y|ST[h:a]"));
    let mut b = WriteBatch::new();
    b.numeric(&x, 0, 1.0).unwrap();
    store.write(&b).unwrap();
    // x is numeric: its text samples are refused, by key text and by id; y is written.
    let mut b = WriteBatch::new();
    b.text(&x, 1, "a").unwrap();
    b.numeric(&y, 1, 2.0).unwrap();
    b.text(&x, 2, "b").unwrap();
    b.push_id(id(&store, "x|ST[h:a]"), 3, store::Value::Text("c".into()))
        .unwrap();
    b.numeric(&x, 4, 5.0).unwrap();
    assert!(store.write(&b).is_err(), "write refuses the whole batch");
    assert!(
        store.index().lookup(&y).unwrap().is_none() || {
            let view = store.view().unwrap();
            view.raw_numeric(id(&store, "y|ST[h:a]"), 0, 10)
                .unwrap()
                .is_empty()
        }
    );
    let (_, rejected) = store.write_partial(&b).unwrap();
    let summary: Vec<(&str, usize)> = rejected
        .iter()
        .map(|r| (r.key.as_str(), r.samples))
        .collect();
    assert_eq!(
        summary,
        vec![("x|ST[h:a]", 1), ("x|ST[h:a]", 1), ("x|ST[h:a]", 1)]
    );
    assert!(rejected
        .iter()
        .all(|r| r.existing == store::Kind::Numeric && r.requested == store::Kind::Text));
    drop(store);
    let store = open(tmp.path());
    let view = store.view().unwrap();
    assert_eq!(
        view.raw_numeric(id(&store, "y|ST[h:a]"), 0, 10).unwrap(),
        vec![(1, 2.0)]
    );
    assert_eq!(
        view.raw_numeric(id(&store, "x|ST[h:a]"), 0, 10).unwrap(),
        vec![(0, 1.0), (4, 5.0)]
    );
    // A batch made only of refused samples writes nothing and says so.
    let mut b = WriteBatch::new();
    b.text(&x, 9, "z").unwrap();
    assert_eq!(store.write_partial(&b).unwrap().1.len(), 1);
    // Key text that is new and not canonical is refused rather than made a second series.
    let mut b = WriteBatch::new();
    b.push_canonical("z|ST[h:b,a:c]", 1, store::Value::Numeric(1.0))
        .unwrap();
    let err = store.write(&b).unwrap_err();
    assert!(format!("{err:?}").contains("NotCanonical"), "{err:?}");
}

#[test]
fn concurrent_writers_every_acknowledged_sample_present() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(open(tmp.path()));
    let threads_n = 4usize;
    let batches_n = 50i64;
    let handles: Vec<_> = (0..threads_n)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..batches_n {
                    let mut b = WriteBatch::new();
                    // A shared series, and a new series every 10 batches.
                    b.numeric(&key("shared"), i * 10 + t as i64, i as f64)
                        .unwrap();
                    let own = key(&format!("own|ST[t:{t},g:{}]", i / 10));
                    b.numeric(&own, i, i as f64).unwrap();
                    b.histogram(&key("h"), i * 1000, &hist_of(&[t as f64]))
                        .unwrap();
                    store.write(&b).unwrap();
                    // Acknowledged means visible.
                    let view = store.view().unwrap();
                    let raw = view
                        .raw_numeric(id(&store, &own.canonical()), i, i + 1)
                        .unwrap();
                    assert_eq!(raw, vec![(i, i as f64)]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let check = |store: &Store| {
        let view = store.view().unwrap();
        assert_eq!(
            view.raw_numeric(id(store, "shared"), 0, i64::MAX)
                .unwrap()
                .len(),
            200
        );
        let hs = view
            .raw_histograms(id(store, "h"), i64::MIN, i64::MAX)
            .unwrap();
        let total: u64 = hs.iter().map(|(_, h)| h.sample_count()).sum();
        assert_eq!(total, (threads_n as u64) * batches_n as u64);
        for t in 0..threads_n {
            for g in 0..5 {
                let own = id(store, &format!("own|ST[g:{g},t:{t}]"));
                assert_eq!(view.raw_numeric(own, 0, i64::MAX).unwrap().len(), 10);
            }
        }
    };
    check(&store);
    let store = Arc::into_inner(store).unwrap();
    store.close().unwrap();
    check(&open(tmp.path()));
}

#[test]
fn readers_see_whole_batches_while_writers_write() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(open(tmp.path()));
    let batches_n = 100i64;
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..batches_n {
                let mut b = WriteBatch::new();
                b.numeric(&key("a"), i, i as f64).unwrap();
                b.numeric(&key("b"), i, i as f64).unwrap();
                b.histogram(&key("c"), i * 1000, &hist_of(&[1.0])).unwrap();
                store.write(&b).unwrap();
            }
        })
    };
    let mut seen_max = 0;
    // Until the writer is done, and once more after (a failed writer ends the loop too).
    let mut writer_done = false;
    while seen_max < batches_n as usize && !writer_done {
        writer_done = writer.is_finished();
        let view = store.view().unwrap();
        let id_of = |name: &str| store.index().lookup(&key(name)).unwrap().map(|(id, _)| id);
        let (Some(a), Some(b), Some(c)) = (id_of("a"), id_of("b"), id_of("c")) else {
            continue;
        };
        let na = view.raw_numeric(a, 0, i64::MAX).unwrap().len();
        let nb = view.raw_numeric(b, 0, i64::MAX).unwrap().len();
        let hs = view.raw_histograms(c, 0, i64::MAX).unwrap();
        let nc: u64 = hs.iter().map(|(_, h)| h.sample_count()).sum();
        assert_eq!(na, nb, "a batch seen partly");
        assert_eq!(na as u64, nc, "a batch seen partly");
        seen_max = na;
    }
    writer.join().unwrap();
}

/// Random batches with duplicates, out-of-order and negative timestamps against a naive model:
/// numeric — the last write per millisecond; histograms — everything merged per base period.
#[test]
fn random_batches_match_a_naive_model() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for round in 0..4 {
        let tmp = tempfile::tempdir().unwrap();
        let base_period_ms = [1_000, 60_000][round % 2];
        let opts = || StoreOptions {
            base_period_ms,
            ..StoreOptions::default()
        };
        let store = Store::open(tmp.path(), opts()).unwrap();
        let mut numeric: BTreeMap<i64, f64> = BTreeMap::new();
        let mut hists: BTreeMap<i64, Histogram> = BTreeMap::new();
        for _ in 0..20 {
            let mut b = WriteBatch::new();
            for _ in 0..rng.random_range(1..50) {
                let ts: i64 = rng.random_range(-200_000..200_000);
                let v: f64 = rng.random_range(-5.0..5.0);
                b.numeric(&key("n"), ts, v).unwrap();
                numeric.insert(ts, v);
                let h = hist_of(&[v]);
                b.histogram(&key("h"), ts, &h).unwrap();
                hists
                    .entry(ts - ts.rem_euclid(base_period_ms))
                    .or_default()
                    .merge(&h);
            }
            store.write(&b).unwrap();
        }
        let check = |store: &Store| {
            let view = store.view().unwrap();
            let raw = view
                .raw_numeric(id(store, "n"), i64::MIN, i64::MAX)
                .unwrap();
            assert_eq!(
                raw,
                numeric.iter().map(|(&t, &v)| (t, v)).collect::<Vec<_>>()
            );
            let hs = view
                .raw_histograms(id(store, "h"), i64::MIN, i64::MAX)
                .unwrap();
            assert_eq!(
                hs,
                hists
                    .iter()
                    .map(|(&t, h)| (t, h.clone()))
                    .collect::<Vec<_>>()
            );
            let s = Slicing {
                start_ms: -240_000,
                end_ms: 240_000,
                period_ms: 120_000,
            };
            let aggs = view.numeric_aggregates(id(store, "n"), s).unwrap();
            let total: u64 = aggs.iter().flatten().map(|a| a.count).sum();
            assert_eq!(total, numeric.len() as u64);
            let merged = view.histograms(id(store, "h"), s).unwrap();
            let count: u64 = merged.iter().map(|h| h.sample_count()).sum();
            assert_eq!(count, hists.values().map(|h| h.sample_count()).sum::<u64>());
        };
        check(&store);
        store.close().unwrap();
        check(&Store::open(tmp.path(), opts()).unwrap());
    }
}

/// A WAL record the journal accepted but that does not decode, or that names a series the index
/// does not have (or with another kind), stops the open with a typed error.
#[test]
fn bad_wal_records_are_reported_on_open() {
    use store::internals::wal::{self, Group};
    use store::{StoreError, Value};
    type Expect = fn(&StoreError) -> bool;
    let cases: [(Vec<u8>, Expect); 3] = [
        (vec![1, 1, 0], |e| {
            matches!(e, StoreError::WalCorrupt { .. })
        }),
        (
            {
                let mut out = Vec::new();
                let samples = vec![(0, Value::Numeric(1.0))];
                wal::encode(
                    &wal::Record {
                        origin: None,
                        groups: vec![Group {
                            id: SeriesId(9),
                            samples,
                        }],
                    },
                    &mut out,
                );
                out
            },
            |e| matches!(e, StoreError::WalUnknownSeries { id: 9, .. }),
        ),
        (
            {
                let mut out = Vec::new();
                let samples = vec![(0, Value::Text("x".into()))];
                wal::encode(
                    &wal::Record {
                        origin: None,
                        groups: vec![Group {
                            id: SeriesId(0),
                            samples,
                        }],
                    },
                    &mut out,
                );
                out
            },
            |e| matches!(e, StoreError::WalUnknownSeries { id: 0, .. }),
        ),
    ];
    for (record, expected) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let store = open(tmp.path());
        let mut b = WriteBatch::new();
        b.numeric(&key("n"), 0, 1.0).unwrap();
        store.write(&b).unwrap();
        store.close().unwrap();
        let j =
            journal::Journal::open(tmp.path().join("wal"), journal::Options::default()).unwrap();
        j.append(&record).unwrap();
        j.close().unwrap();
        let err = Store::open(tmp.path(), StoreOptions::default())
            .err()
            .unwrap();
        assert!(expected(&err), "{err:?}");
    }
}

/// ENOSPC in the WAL: `write` returns the journal's `NoSpace`, everything acknowledged before is
/// still read back, writes resume once there is space, and a reopen replays it all.
#[test]
fn wal_enospc_loses_nothing_acknowledged() {
    use journal::sim::{Faults, SimFs};
    use journal::vfs::Vfs;
    let tmp = tempfile::tempdir().unwrap();
    let sim = Arc::new(SimFs::new(11));
    let opts = || StoreOptions {
        wal_segment_size_bytes: 16 << 10,
        vfs: sim.clone(),
        ..StoreOptions::default()
    };
    let wal = tmp.path().join("wal");
    let store = Store::open(tmp.path(), opts()).unwrap();
    let used: u64 = sim
        .list(&wal)
        .unwrap()
        .iter()
        .map(|n| sim.read_file(&wal.join(n)).map_or(0, |b| b.len() as u64))
        .sum();
    sim.set_faults(Faults {
        capacity_bytes: Some(used + 100),
        ..Faults::default()
    });
    let write = |store: &Store, i: i64| {
        let mut b = WriteBatch::new();
        for s in 0..20 {
            b.numeric(&key(&format!("n|ST[s:{s}]")), i, i as f64)
                .unwrap();
        }
        store.write(&b)
    };
    let mut acked = 0;
    loop {
        match write(&store, acked) {
            Ok(_) => acked += 1,
            Err(store::StoreError::Journal(journal::Error::NoSpace)) => break,
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(acked < 10_000, "never ran out of space");
    }
    assert!(acked > 0);
    let count = |store: &Store| {
        let view = store.view().unwrap();
        (0..20)
            .map(|s| {
                view.raw_numeric(id(store, &format!("n|ST[s:{s}]")), 0, i64::MAX)
                    .unwrap()
                    .len()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(count(&store), vec![acked as usize; 20]);
    sim.set_faults(Faults::default());
    write(&store, acked).unwrap();
    acked += 1;
    store.close().unwrap();
    let store = Store::open(tmp.path(), opts()).unwrap();
    assert_eq!(count(&store), vec![acked as usize; 20]);
}

/// Simulated power loss of the WAL (the journal's `SimFs`) under two writer threads: every batch
/// acknowledged with group commit survives each kind of loss, and nothing is invented.
#[test]
fn wal_power_loss_keeps_every_acknowledged_batch() {
    use journal::sim::{PowerLoss, SimFs};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let losses = [
        PowerLoss::DropUnsynced,
        PowerLoss::RandomPages,
        PowerLoss::TearLastWrite,
    ];
    for (seed, loss) in losses.into_iter().enumerate() {
        let tmp = tempfile::tempdir().unwrap();
        let sim = Arc::new(SimFs::new(seed as u64));
        let opts = || StoreOptions {
            wal_segment_size_bytes: 64 << 10,
            vfs: sim.clone(),
            ..StoreOptions::default()
        };
        let store = Arc::new(Store::open(tmp.path(), opts()).unwrap());
        let (acked, cut) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let writers: Vec<_> = (0..2i64)
            .map(|t| {
                let (store, acked, cut) = (store.clone(), acked.clone(), cut.clone());
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..100_000i64 {
                        if cut.load(Ordering::SeqCst) {
                            break;
                        }
                        let ts = i * 2 + t;
                        let mut b = WriteBatch::new();
                        b.numeric(&key(&format!("p|ST[t:{t}]")), ts, ts as f64)
                            .unwrap();
                        if store.write(&b).is_err() {
                            break;
                        }
                        mine.push(ts);
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                    mine
                })
            })
            .collect();
        let target = 20 + seed as u64 * 30;
        // Writers stop before the cut only by failing: then the assert below reports it.
        while acked.load(Ordering::SeqCst) < target && !writers.iter().all(|w| w.is_finished()) {
            std::thread::yield_now();
        }
        assert!(
            acked.load(Ordering::SeqCst) >= target,
            "writers failed before the cut"
        );
        sim.power_cut(loss);
        cut.store(true, Ordering::SeqCst);
        let mine: Vec<Vec<i64>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        drop(Arc::into_inner(store).unwrap());
        let store = Store::open(tmp.path(), opts()).unwrap();
        let view = store.view().unwrap();
        for (t, acked_ts) in mine.iter().enumerate() {
            // A thread the cut stopped before its first write never created its series.
            let sid = store.index().lookup(&key(&format!("p|ST[t:{t}]"))).unwrap();
            let Some((sid, _)) = sid else {
                assert!(acked_ts.is_empty());
                continue;
            };
            let raw = view.raw_numeric(sid, 0, i64::MAX).unwrap();
            assert!(raw
                .iter()
                .all(|&(ts, v)| ts as f64 == v && ts % 2 == t as i64));
            let present: std::collections::BTreeSet<i64> = raw.iter().map(|p| p.0).collect();
            for ts in acked_ts {
                assert!(present.contains(ts), "{loss:?}: acknowledged {ts} lost");
            }
        }
    }
}

/// Histograms added as sorted bins (`push_canonical_bins` / `push_at_bins` / `push_id_bins`: packed into the
/// batch, copied into the WAL record) or packed by the caller (`push_canonical_packed`) read back exactly as the same histograms added as values,
/// from the head and after a reopen replays the WAL, in batches that also hold numerics and
/// cumulative histograms (which send the whole batch through the cumulative path).
#[test]
fn histograms_added_as_bins_equal_histograms_added_as_values() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut written = Vec::new();
    let by_id: Vec<_> = (0..5)
        .map(|s| {
            let k = key(&format!("as_id_bins|ST[s:{s}]"));
            store.resolve(&k, store::Kind::Histogram).unwrap()
        })
        .collect();
    let by_id_packed: Vec<_> = (0..5)
        .map(|s| {
            let k = key(&format!("as_id_packed|ST[s:{s}]"));
            store.resolve(&k, store::Kind::Histogram).unwrap()
        })
        .collect();
    for round in 0..12i64 {
        let mut b = WriteBatch::new();
        for s in 0..5 {
            let values: Vec<f64> = (0..(next() % 40))
                .map(|_| (next() % 100_000) as f64 / 1000.0 - 10.0)
                .collect();
            let h = hist_of(&values);
            let ts_ms = round * 7_000 + s;
            b.histogram(&key(&format!("as_value|ST[s:{s}]")), ts_ms, &h)
                .unwrap();
            let slot = b
                .push_canonical_bins(&format!("as_bins|ST[s:{s}]"), ts_ms, h.keys(), h.counts())
                .unwrap();
            // A second sample through the slot, one millisecond later.
            b.push_at_bins(slot, ts_ms + 1, h.keys(), h.counts())
                .unwrap();
            b.histogram(&key(&format!("as_value|ST[s:{s}]")), ts_ms + 1, &h)
                .unwrap();
            for t in [ts_ms, ts_ms + 1] {
                b.push_id_bins(by_id[s as usize], t, h.keys(), h.counts())
                    .unwrap();
            }
            // Packed by a parser in two pieces, then lent.
            let mut list = hist::packed::PackedList::default();
            let half = h.bin_count() / 2;
            assert!(list.extend(&h.keys()[..half], &h.counts()[..half]));
            assert!(list.extend(&h.keys()[half..], &h.counts()[half..]));
            let index = list.finish();
            let packed = list.get(index).unwrap();
            for t in [ts_ms, ts_ms + 1] {
                b.push_canonical_packed(&format!("as_packed|ST[s:{s}]"), t, packed)
                    .unwrap();
                b.push_id_packed(by_id_packed[s as usize], t, packed)
                    .unwrap();
            }
            written.push(h);
        }
        b.numeric(&key("n"), round, round as f64).unwrap();
        if round % 3 == 0 {
            b.cumulative_histogram(&key("cumulative"), round * 1000, &hist_of(&[1.0]))
                .unwrap();
        }
        // What the batch reports holding: the bins unpacked, equal to what went in.
        let held: Vec<Histogram> = b
            .samples()
            .filter(|(k, _, _)| matches!(k, store::KeyRef::Text(t) if t.starts_with("as_bins")))
            .map(|(_, _, v)| match v.into_owned() {
                store::Value::Histogram(h) => h,
                other => panic!("{other:?}"),
            })
            .collect();
        let want: Vec<Histogram> = written[written.len() - 5..]
            .iter()
            .flat_map(|h| [h.clone(), h.clone()])
            .collect();
        assert_eq!(held, want);
        store.write(&b).unwrap();
    }
    let check = |store: &Store| {
        let view = store.view().unwrap();
        for s in 0..5 {
            let by_value = view
                .raw_histograms(id(store, &format!("as_value|ST[s:{s}]")), 0, i64::MAX)
                .unwrap();
            let by_bins = view
                .raw_histograms(id(store, &format!("as_bins|ST[s:{s}]")), 0, i64::MAX)
                .unwrap();
            let by_id_bins = view
                .raw_histograms(id(store, &format!("as_id_bins|ST[s:{s}]")), 0, i64::MAX)
                .unwrap();
            let by_packed = view
                .raw_histograms(id(store, &format!("as_packed|ST[s:{s}]")), 0, i64::MAX)
                .unwrap();
            assert!(!by_value.is_empty());
            assert_eq!(by_bins, by_value, "series {s}");
            assert_eq!(by_packed, by_value, "series {s} packed");
            let by_id_packed = view
                .raw_histograms(id(store, &format!("as_id_packed|ST[s:{s}]")), 0, i64::MAX)
                .unwrap();
            assert_eq!(by_id_packed, by_value, "series {s} packed by id");
            assert_eq!(by_id_bins, by_value, "series {s} by id");
        }
    };
    check(&store);
    drop(store);
    let store = open(tmp.path());
    check(&store);
}

#[test]
fn bins_that_are_not_a_histogram_are_refused_naming_why() {
    let invalid_key = (0..=u16::MAX).find(|&k| !hist::key_is_valid(k)).unwrap();
    let valid: Vec<u16> = hist_of(&[1.0, 2.0, 3.0]).keys().to_vec();
    let cases: [(&[u16], &[u64], &str); 5] = [
        (&valid, &[1, 1], "as many counts as keys"),
        (&[valid[1], valid[0]], &[1, 1], "strictly ascending keys"),
        (&[valid[0], valid[0]], &[1, 1], "strictly ascending keys"),
        (&[invalid_key], &[1], "valid bin keys"),
        (&valid, &[1, 0, 1], "counts above zero"),
    ];
    let mut b = WriteBatch::new();
    for (keys, counts, why) in cases {
        match b.push_canonical_bins("h", 0, keys, counts) {
            Err(store::StoreError::InvalidBins { expected }) => assert_eq!(expected, why),
            other => panic!("{keys:?} {counts:?}: {other:?}"),
        }
    }
    // Long lists are checked eight bins at a time as they are packed: a fault anywhere in a
    // group, or after one, is named the same.
    // The first and the last bin of 21 decades (five groups of eight and two bins after): between a decade's last and the next one's
    // first lie invalid keys, and every gap fits the group path's byte.
    let keys: Vec<u16> = (300u16..320)
        .flat_map(|d| [d << 7 | 1, d << 7 | 90])
        .collect();
    let counts: Vec<u64> = (1..=keys.len() as u64).collect();
    assert!(keys.iter().all(|&k| hist::key_is_valid(k)));
    let faults: [(usize, &str); 4] = [
        (0, "strictly ascending keys"),
        (1, "strictly ascending keys"),
        (2, "valid bin keys"),
        (3, "counts above zero"),
    ];
    for at in [2, 8, 14, keys.len() - 2] {
        for (fault, why) in faults {
            let (mut k, mut c) = (keys.clone(), counts.clone());
            match fault {
                0 => k.swap(at - 1, at),
                1 => k[at] = k[at - 1],
                // `at` is even: a decade's first bin, after the last of the one before.
                2 => k[at] = k[at - 1] + 10,
                _ => c[at] = 0,
            }
            match b.push_canonical_bins("h", 0, &k, &c) {
                Err(store::StoreError::InvalidBins { expected }) => {
                    assert_eq!(expected, why, "fault {fault} at bin {at}")
                }
                other => panic!("fault {fault} at bin {at}: {other:?}"),
            }
        }
    }
    assert_eq!(b.sample_count(), 0);
    // Nothing of the refused bins stays in the batch: the next histogram reads back whole.
    b.push_canonical_bins("long", 0, &keys, &counts).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    store.write(&b).unwrap();
    let got = store
        .view()
        .unwrap()
        .raw_histograms(id(&store, "long"), 0, i64::MAX)
        .unwrap();
    let want: Vec<(u16, u64)> = keys.iter().copied().zip(counts.iter().copied()).collect();
    assert_eq!(got.len(), 1);
    let bins: Vec<(u16, u64)> = got[0]
        .1
        .keys()
        .iter()
        .copied()
        .zip(got[0].1.counts().iter().copied())
        .collect();
    assert_eq!(bins, want);
    let mut b = WriteBatch::new();
    // An empty histogram is one.
    b.push_canonical_bins("h", 0, &[], &[]).unwrap();
    assert_eq!(b.sample_count(), 1);
}

/// A series' activity range (what `__activity:` finds it by) spans its first to its last
/// sample, whether they came as one run of a batch, as runs of one sample each, or in two
/// batches.
#[test]
fn activity_spans_every_sample_written() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    let (run, singles, later) = (key("run"), key("singles"), key("later"));
    let mut b = WriteBatch::new();
    // `run`: three samples in a row, one run. `singles`: interleaved with `later`, so every
    // run is one sample.
    for ts in [10_000, 20_000, 30_000] {
        b.numeric(&run, ts, 1.0).unwrap();
    }
    for ts in [15_000, 25_000] {
        b.numeric(&singles, ts, 1.0).unwrap();
        b.numeric(&later, ts + 1, 1.0).unwrap();
    }
    store.write(&b).unwrap();
    let mut b = WriteBatch::new();
    b.numeric(&later, 90_000, 1.0).unwrap();
    store.write(&b).unwrap();
    let active = |start_ms: i64, end_ms: i64| -> Vec<SeriesId> {
        let query = TagQuery::parse(&format!("__activity:{start_ms}-{end_ms}")).unwrap();
        let mut found = store.find(&query, 1 << 20).unwrap();
        found.sort();
        found
    };
    let (run, singles, later) = (
        id(&store, "run"),
        id(&store, "singles"),
        id(&store, "later"),
    );
    let mut all = vec![run, singles, later];
    all.sort();
    // Inside each series' range but between its samples.
    assert_eq!(active(22_000, 23_000), all);
    // `singles` ended at 25 s, `run` at 30 s; `later` goes on to 90 s.
    let mut run_and_later = vec![run, later];
    run_and_later.sort();
    assert_eq!(active(30_000, 30_001), run_and_later);
    assert_eq!(active(50_000, 50_001), vec![later]);
    assert_eq!(active(5_000, 9_999), Vec::<SeriesId>::new());
    assert_eq!(active(90_001, 100_000), Vec::<SeriesId>::new());
}
