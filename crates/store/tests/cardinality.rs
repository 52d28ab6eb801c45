#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `Store::write_limited` with a body of many refused new series: only what was admitted is
//! written (and replayed after a reopen), existing series are written beside the refusals, and
//! each distinct refused key is counted once. (That refusals past a limit never wait for the
//! index's write lock is `index.rs`'s `refusals_past_the_limit_take_only_the_read_lock`.)

use store::key::StreamKey;
use store::{CardinalityLimit, CardinalityOptions, Store, StoreOptions, WriteBatch, Written};

/// New series one source may create a minute.
const SOURCE_NEW_MAX: u64 = 3;
/// New keys in the flood: several times the index's lock chunk (4,096 keys).
const FLOOD_KEYS: usize = 20_000;
/// The existing series gets one sample every this many flood keys.
const EXISTING_EVERY: usize = 1_000;

fn key(text: &str) -> StreamKey {
    StreamKey::parse(text).unwrap()
}

fn open(dir: &std::path::Path) -> Store {
    let opts = StoreOptions {
        cardinality: CardinalityOptions {
            source_series_new_per_minute_max: SOURCE_NEW_MAX,
            ..CardinalityOptions::UNLIMITED
        },
        ..StoreOptions::default()
    };
    Store::open(dir, opts).unwrap()
}

/// The timestamps of the numeric series `text`.
fn stored(store: &Store, text: &str) -> Vec<i64> {
    let id = store.index().lookup(&key(text)).unwrap().unwrap().0;
    let view = store.view().unwrap();
    let raw = view.raw_numeric(id, i64::MIN, i64::MAX).unwrap();
    raw.iter().map(|(ts, _)| *ts).collect()
}

#[test]
fn a_flood_of_refused_series_writes_only_what_was_admitted() {
    let tmp = tempfile::tempdir().unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let store = open(tmp.path());
    let mut pre = WriteBatch::new();
    pre.numeric(&key("pre|ST[host:a]"), now_ms, 1.0).unwrap();
    store.write_limited(&pre, "setup").unwrap();

    // Runs of the existing series separated by runs of refused ones, and a refused key again
    // (a second entry of the batch).
    let mut flood = WriteBatch::new();
    let mut existing_ts = vec![now_ms];
    for i in 0..FLOOD_KEYS {
        if i % EXISTING_EVERY == 0 {
            let ts = now_ms + 1 + i as i64;
            flood.numeric(&key("pre|ST[host:a]"), ts, 2.0).unwrap();
            existing_ts.push(ts);
        }
        let k = key(&format!("flood|ST[f:f{i}]"));
        flood.numeric(&k, now_ms, 1.0).unwrap();
        if i == 6 {
            let again = key("flood|ST[f:f5]");
            flood.numeric(&again, now_ms + 1, 1.0).unwrap();
        }
    }
    let written = store.write_limited(&flood, "a").unwrap();
    assert_eq!(written.written, Written::Applied);
    // Listed per entry; counted once per key.
    let refused = FLOOD_KEYS - SOURCE_NEW_MAX as usize;
    assert_eq!(written.refused.len(), refused + 1);
    assert!(written
        .refused
        .iter()
        .all(|r| r.limit == CardinalityLimit::SourceNewPerMinute && r.samples == 1));
    let again = written.refused.iter().filter(|r| r.key == "flood|ST[f:f5]");
    assert_eq!(again.count(), 2);
    let stats = store.cardinality_stats().unwrap();
    assert_eq!(stats.refused_total, [0, 0, refused as u64, 0]);
    assert_eq!(stats.new_this_minute, 1 + SOURCE_NEW_MAX);
    assert_eq!(
        store.index().snapshot().unwrap().series_count(),
        1 + SOURCE_NEW_MAX as u32
    );
    assert_eq!(stored(&store, "pre|ST[host:a]"), existing_ts);
    for i in 0..SOURCE_NEW_MAX {
        assert_eq!(stored(&store, &format!("flood|ST[f:f{i}]")), vec![now_ms]);
    }

    // The WAL record holds what was written, in order.
    store.close().unwrap();
    let store = open(tmp.path());
    assert_eq!(stored(&store, "pre|ST[host:a]"), existing_ts);
    assert_eq!(store.index().snapshot().unwrap().series_count(), 4);
    store.close().unwrap();
}
