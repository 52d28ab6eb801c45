//! Prometheus stale markers survive the store bit for bit — in the head, in a flushed block and
//! after the WAL is replayed — and PromQL honours them from each of those places.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use promql::eval::{self, Limits, Output, Sample, STALE_NAN_BITS};
use store::key::StreamKey;
use store::{Store, StoreOptions, WriteBatch};

const STALE: u64 = STALE_NAN_BITS;
/// Another NaN payload, which must stay a value (not a marker).
const OTHER_NAN: u64 = 0x7ff8_0000_0000_0001;

fn open(dir: &std::path::Path) -> Store {
    Store::open(
        dir,
        StoreOptions {
            wal_segment_size_bytes: 1 << 20,
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

fn bits(store: &Store, key: &StreamKey) -> Vec<(i64, u64)> {
    let id = store
        .find(
            &store::TagQuery::parse(&format!("and(__name:{})", key.name())).unwrap(),
            1_000_000,
        )
        .unwrap()[0];
    let view = store.view().unwrap();
    view.raw_numeric(id, 0, 1_000_000)
        .unwrap()
        .into_iter()
        .map(|(t, v)| (t, v.to_bits()))
        .collect()
}

/// `m` at 1m: the newest sample at 2m is a stale marker, so nothing; at 1m, 2.
fn check_promql(store: &Store) {
    let at = |t: i64| match eval::instant(store, "m", t, Limits::default()).unwrap() {
        Output::Vector { samples, .. } => samples,
        other => panic!("{other:?}"),
    };
    assert_eq!(at(60_000).len(), 1);
    assert!(at(120_000).is_empty(), "the marker ends the series");
    // The other NaN is a value.
    let other = at(180_000);
    assert!(matches!(other[0].1, Sample::Float(v) if v.is_nan()));
}

#[test]
fn stale_markers_round_trip_exactly_and_end_series() {
    let dir = tempfile::tempdir().unwrap();
    let key = StreamKey::parse("m").unwrap();
    let want = vec![
        (0, 1.0f64.to_bits()),
        (60_000, 2.0f64.to_bits()),
        (120_000, STALE),
        (180_000, OTHER_NAN),
    ];
    {
        let store = open(dir.path());
        let mut batch = WriteBatch::new();
        for &(t, b) in &want {
            batch.numeric(&key, t, f64::from_bits(b)).unwrap();
        }
        store.write(&batch).unwrap();
        assert_eq!(bits(&store, &key), want, "head");
        check_promql(&store);
        // Dropped unflushed: the next open replays the WAL.
        drop(store);
    }
    let store = open(dir.path());
    assert_eq!(bits(&store, &key), want, "after WAL replay");
    check_promql(&store);
    store.flush().unwrap();
    assert_eq!(bits(&store, &key), want, "from a block");
    check_promql(&store);
    drop(store);
    let store = open(dir.path());
    assert_eq!(bits(&store, &key), want, "block after reopen");
}
