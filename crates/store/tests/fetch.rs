//! Fetching by tag query, merged across series with group-by, counter rates and stddev — over
//! blocks and the head alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::Histogram;
use store::{
    counter_rates, merged_histograms, merged_numeric, Slicing, Store, StoreOptions, TagQuery,
    WriteBatch,
};

fn key(text: &str) -> store::key::StreamKey {
    store::key::StreamKey::parse(text).unwrap()
}

fn opts() -> StoreOptions {
    StoreOptions {
        base_period_ms: 1_000,
        partition_ms: 60_000,
        background_flush: false,
        ..StoreOptions::default()
    }
}

const SLICING: Slicing = Slicing {
    start_ms: 0,
    end_ms: 120_000,
    period_ms: 60_000,
};

/// Six latency series in two data centres; host h writes value h+1 once per second, minute
/// one only for even hosts.
fn load(store: &Store) {
    let mut b = WriteBatch::new();
    for host in 0..6u32 {
        let dc = if host < 4 { "a" } else { "b" };
        let k = key(&format!("lat|ST[dc:{dc},host:h{host}]"));
        let n = key(&format!("load|ST[dc:{dc},host:h{host}]"));
        for t in 0..120i64 {
            if t >= 60 && host % 2 == 1 {
                continue;
            }
            let mut h = Histogram::new();
            h.insert(f64::from(host + 1));
            b.histogram(&k, t * 1000, &h).unwrap();
            b.numeric(&n, t * 1000, f64::from(host + 1)).unwrap();
        }
    }
    store.write(&b).unwrap();
}

fn check(store: &Store) {
    let view = store.view().unwrap();
    let index = store.index().snapshot().unwrap();
    let lat = store
        .find(&TagQuery::parse("and(__name:lat)").unwrap(), 1 << 20)
        .unwrap();
    assert_eq!(lat.len(), 6);
    let groups = merged_histograms(&view, &index, &lat, SLICING, &[b"dc".to_vec()]).unwrap();
    assert_eq!(groups.len(), 2);
    let (a, b) = (&groups[0], &groups[1]);
    assert_eq!(a.key, vec![Some(b"a".to_vec())]);
    assert_eq!((a.series, b.series), (4, 2));
    // dc a: hosts 0..4, 60 each in minute 0; hosts 0 and 2 only in minute 1.
    assert_eq!(a.slices[0].sample_count(), 240);
    assert_eq!(a.slices[1].sample_count(), 120);
    assert_eq!(b.slices[0].sample_count(), 120);
    assert_eq!(b.slices[1].sample_count(), 60);
    // All in one group: the merge of everything.
    let all = merged_histograms(&view, &index, &lat, SLICING, &[]).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].slices[0].sample_count(), 360);
    let q = all[0].slices[0]
        .quantiles(&[0.0], hist::QuantileType::Type1)
        .unwrap();
    assert!((1.0..1.1).contains(&q[0]), "{q:?}");

    let load = store
        .find(&TagQuery::parse("and(__name:load,dc:a)").unwrap(), 1 << 20)
        .unwrap();
    let n = merged_numeric(&view, &index, &load, SLICING, &[]).unwrap();
    let m0 = n[0].slices[0].unwrap();
    assert_eq!(m0.count, 240);
    assert_eq!(m0.sum, 60.0 * (1.0 + 2.0 + 3.0 + 4.0));
    assert_eq!((m0.min, m0.max), (1.0, 4.0));
    assert_eq!((m0.first_ts_ms, m0.last_ts_ms), (0, 59_000));
    // Values 1,2,3,4 equally often: population stddev sqrt(1.25).
    assert!((m0.stddev() - 1.25f64.sqrt()).abs() < 1e-12);
    let m1 = n[0].slices[1].unwrap();
    assert_eq!(m1.count, 120);
    assert!((m1.mean() - 2.0).abs() < 1e-12);
}

#[test]
fn group_by_merges_and_combines_per_slice_from_head_and_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), opts()).unwrap();
    load(&store);
    check(&store);
    store.flush().unwrap();
    check(&store);
    store.close().unwrap();
    check(&Store::open(tmp.path(), opts()).unwrap());
}

#[test]
fn counter_rates_span_slices_and_survive_resets() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), opts()).unwrap();
    let k = key("requests_total");
    let mut b = WriteBatch::new();
    // +10 per second for 90 s, then a restart to 5, then +10 per second again.
    let mut v = 0.0;
    for t in 0..120i64 {
        v = if t == 90 { 5.0 } else { v + 10.0 };
        if t == 0 {
            v = 0.0;
        }
        b.numeric(&k, t * 1000, v).unwrap();
    }
    store.write(&b).unwrap();
    store.flush().unwrap();
    let id = store.index().lookup(&k).unwrap().unwrap().0;
    let view = store.view().unwrap();
    let rates = counter_rates(&view, id, SLICING).unwrap();
    // Minute 0: 59 steps of 10 (t=1..59). Minute 1: the step into t=60, 29 more of 10, the
    // reset counting 5, then 29 steps of 10.
    assert_eq!(rates[0], Some(590.0 / 60.0));
    assert_eq!(rates[1], Some((10.0 + 290.0 + 5.0 + 290.0) / 60.0));
    let later = Slicing {
        start_ms: 60_000,
        end_ms: 180_000,
        period_ms: 60_000,
    };
    let rates = counter_rates(&view, id, later).unwrap();
    assert_eq!(rates, vec![Some(595.0 / 60.0), None]);
}
