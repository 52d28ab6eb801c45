//! Blocks, the manifest and flushing: reads across blocks, frozen heads and the head agree with a
//! naive model whatever the flush and reopen points; damaged and torn blocks are reported and
//! quarantined, never served; a flush that runs out of space loses nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use hist::Histogram;
use rand::{Rng, SeedableRng};
use store::{Latest, SeriesId, Slicing, Store, StoreError, StoreOptions, WriteBatch};

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

/// Small partitions, so a few minutes of data spread over many blocks.
fn opts(base_period_ms: i64) -> StoreOptions {
    StoreOptions {
        base_period_ms,
        partition_ms: base_period_ms * 10,
        background_flush: false,
        ..StoreOptions::default()
    }
}

#[derive(Default)]
struct Model {
    numeric: BTreeMap<i64, f64>,
    text: BTreeMap<i64, String>,
    hists: BTreeMap<i64, Histogram>,
}

fn check(store: &Store, model: &Model) {
    let view = store.view().unwrap();
    let all = (i64::MIN, i64::MAX);
    let raw = view.raw_numeric(id(store, "n"), all.0, all.1).unwrap();
    let want: Vec<(i64, f64)> = model.numeric.iter().map(|(&t, &v)| (t, v)).collect();
    assert_eq!(raw, want, "numeric");
    let text = view.raw_text(id(store, "t"), all.0, all.1).unwrap();
    let mut want_text: Vec<(i64, String)> = Vec::new();
    for (&t, v) in &model.text {
        if want_text.last().is_none_or(|(_, last)| last != v) {
            want_text.push((t, v.clone()));
        }
    }
    assert_eq!(text, want_text, "text changes");
    let hs = view.raw_histograms(id(store, "h"), all.0, all.1).unwrap();
    let want: Vec<(i64, Histogram)> = model.hists.iter().map(|(&t, h)| (t, h.clone())).collect();
    assert_eq!(hs, want, "histograms");
    // A sub-range cuts correctly at both ends.
    let (lo, hi) = (-61_000, 95_000);
    let part = view.raw_numeric(id(store, "n"), lo, hi).unwrap();
    let want: Vec<(i64, f64)> = model.numeric.range(lo..hi).map(|(&t, &v)| (t, v)).collect();
    assert_eq!(part, want, "numeric sub-range");
    if let Some((&t, &v)) = model.numeric.last_key_value() {
        let latest = view.latest(id(store, "n")).unwrap();
        assert_eq!(latest, Some(Latest::Numeric { ts_ms: t, value: v }));
    }
    let s = Slicing {
        start_ms: -600_000,
        end_ms: 600_000,
        period_ms: 120_000,
    };
    let merged = view.histograms(id(store, "h"), s).unwrap();
    let count: u64 = merged.iter().map(|h| h.sample_count()).sum();
    let want: u64 = model.hists.values().map(|h| h.sample_count()).sum();
    assert_eq!(count, want, "per-slice merges");
}

/// Random writes (duplicates across flushes, late data into flushed partitions, negative
/// times), random flushes, random reopens with and without a flush: always the model.
#[test]
fn reads_across_blocks_and_heads_match_a_naive_model() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for round in 0..4 {
        let base = [1_000, 60_000][round % 2];
        let tmp = tempfile::tempdir().unwrap();
        let mut store = Store::open(tmp.path(), opts(base)).unwrap();
        let mut model = Model::default();
        for step in 0..40 {
            let mut b = WriteBatch::new();
            for i in 0..rng.random_range(1..30i64) {
                let ts: i64 = rng.random_range(-300_000..300_000);
                let v = f64::from(rng.random_range(-50i32..50));
                b.numeric(&key("n"), ts, v).unwrap();
                model.numeric.insert(ts, v);
                // Text in time order: storing on change drops a repeat, and a late sample
                // landing between two equal values cannot bring it back (FORMAT.md).
                let text_ts = -300_000 + step * 15_000 + i * 10;
                let word = ["up", "down"][rng.random_range(0..2usize)];
                b.text(&key("t"), text_ts, word).unwrap();
                model.text.insert(text_ts, word.to_string());
                let h = hist_of(&[v, v.abs() + 1.0]);
                b.histogram(&key("h"), ts, &h).unwrap();
                model
                    .hists
                    .entry(ts - ts.rem_euclid(base))
                    .or_default()
                    .merge(&h);
            }
            store.write(&b).unwrap();
            match rng.random_range(0..10) {
                0..=2 => {
                    store.flush().unwrap();
                }
                3 => {
                    drop(store);
                    store = Store::open(tmp.path(), opts(base)).unwrap();
                }
                4 => {
                    store.close().unwrap();
                    store = Store::open(tmp.path(), opts(base)).unwrap();
                    assert_eq!(store.replay_report().records, 0);
                }
                _ => {}
            }
            if step % 5 == 0 {
                check(&store, &model);
            }
        }
        check(&store, &model);
        let stats = store.stats().unwrap();
        assert!(stats.blocks.len() > 4, "few blocks: {}", stats.blocks.len());
        store.close().unwrap();
        check(&Store::open(tmp.path(), opts(base)).unwrap(), &model);
    }
}

/// Writers, a background flusher with a tiny head and readers at once: readers never see part
/// of a batch, and after reopen every acknowledged batch is there exactly once.
#[test]
fn background_flushes_under_concurrent_writers_and_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let o = StoreOptions {
        head_samples_max: 50,
        background_flush: true,
        // Flushes only: maintenance against the wall clock would expire these 1970 samples.
        background_maintenance: false,
        ..opts(1_000)
    };
    let store = Arc::new(Store::open(tmp.path(), o.clone()).unwrap());
    let batches_n = 300i64;
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..batches_n {
                    let ts = i * 2 + w;
                    let mut b = WriteBatch::new();
                    b.numeric(&key("a"), ts, 1.0).unwrap();
                    b.histogram(&key("c"), ts * 500, &hist_of(&[1.0])).unwrap();
                    store.write(&b).unwrap();
                    if i % 50 == 0 {
                        store.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    let mut reads = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        let view = store.view().unwrap();
        let ids = (
            store.index().lookup(&key("a")).unwrap(),
            store.index().lookup(&key("c")).unwrap(),
        );
        if let (Some((a, _)), Some((c, _))) = ids {
            let na = view.raw_numeric(a, 0, i64::MAX).unwrap().len() as u64;
            let hs = view.raw_histograms(c, 0, i64::MAX).unwrap();
            let nc: u64 = hs.iter().map(|(_, h)| h.sample_count()).sum();
            assert_eq!(na, nc, "a batch seen partly or twice");
            reads += 1;
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    assert!(reads > 0);
    let stats = store.stats().unwrap();
    assert!(!stats.blocks.is_empty());
    drop(store);
    let store = Store::open(tmp.path(), o).unwrap();
    let view = store.view().unwrap();
    let n = view
        .raw_numeric(id(&store, "a"), 0, i64::MAX)
        .unwrap()
        .len();
    assert_eq!(n as i64, 2 * batches_n);
    let hs = view.raw_histograms(id(&store, "c"), 0, i64::MAX).unwrap();
    let total: u64 = hs.iter().map(|(_, h)| h.sample_count()).sum();
    assert_eq!(total as i64, 2 * batches_n);
}

fn write_three_series(store: &Store) {
    let mut b = WriteBatch::new();
    for t in 0..100 {
        b.numeric(&key("n"), t * 100, t as f64).unwrap();
        b.numeric(&key("other"), t * 100, -(t as f64)).unwrap();
        b.histogram(&key("h"), t * 100, &hist_of(&[t as f64]))
            .unwrap();
    }
    store.write(&b).unwrap();
}

fn only_block(dir: &Path) -> std::path::PathBuf {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

/// A flipped bit inside a chunk: that series' read fails with the block, series and time
/// range; other series in the same block still read; nothing wrong is ever returned.
#[test]
fn a_damaged_chunk_is_reported_with_its_series_and_range() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), opts(60_000)).unwrap();
    write_three_series(&store);
    let n = id(&store, "n");
    store.close().unwrap();
    let path = only_block(tmp.path());
    let block = store::internals::block::Block::open(&journal::vfs::RealFs, &path).unwrap();
    let entry = block.entries_of(n)[0];
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[entry.offset as usize + 3] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let store = Store::open(tmp.path(), opts(60_000)).unwrap();
    let view = store.view().unwrap();
    for _ in 0..2 {
        match view.raw_numeric(n, 0, i64::MAX) {
            Err(StoreError::BlockDamaged {
                block,
                series,
                start_ms,
                end_ms,
                ..
            }) => {
                assert_eq!(block, path.file_name().unwrap().to_str().unwrap());
                assert_eq!(series, n.0);
                assert_eq!((start_ms, end_ms), (0, 9_901));
            }
            other => panic!("expected BlockDamaged, got {other:?}"),
        }
    }
    // Outside the damaged chunk's range the series still reads.
    assert_eq!(view.raw_numeric(n, 20_000, 30_000).unwrap(), vec![]);
    let other = view.raw_numeric(id(&store, "other"), 0, i64::MAX).unwrap();
    assert_eq!(other.len(), 100);
    assert_eq!(other[5], (500, -5.0));
    let verified = store::internals::block::verify(&journal::vfs::RealFs, &path).unwrap_err();
    assert_eq!(verified.len(), 1, "{verified:?}");
}

/// Damage in a block's directory or footer, or a torn block: the store still opens, the block
/// is moved to `quarantine/`, reads that need its partition fail, new writes work.
#[test]
fn damaged_and_torn_blocks_are_quarantined() {
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, Damage); 3] = [
        ("directory bit flip", |b| {
            let at = b.len() - store::internals::block::FOOTER_SIZE_BYTES - 5;
            b[at] ^= 1;
        }),
        ("footer bit flip", |b| {
            let at = b.len() - 20;
            b[at] ^= 4;
        }),
        ("torn (truncated) block", |b| b.truncate(b.len() / 2)),
    ];
    for (what, damage) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path(), opts(60_000)).unwrap();
        write_three_series(&store);
        store.close().unwrap();
        let path = only_block(tmp.path());
        let mut bytes = std::fs::read(&path).unwrap();
        damage(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();

        let store = Store::open(tmp.path(), opts(60_000)).unwrap();
        let report = store.replay_report();
        assert_eq!(report.quarantined.len(), 1, "{what}");
        let name = path.file_name().unwrap();
        assert!(!path.exists(), "{what}: still in blocks/");
        assert!(tmp.path().join("quarantine").join(name).exists(), "{what}");
        let view = store.view().unwrap();
        match view.raw_numeric(id(&store, "n"), 0, 60_000) {
            Err(StoreError::Quarantined { block, .. }) => {
                assert_eq!(block, name.to_str().unwrap(), "{what}")
            }
            other => panic!("{what}: expected Quarantined, got {other:?}"),
        }
        drop(view);
        // Writes and reads elsewhere in time go on; the quarantine survives a reopen.
        let mut b = WriteBatch::new();
        b.numeric(&key("n"), 10_000_000, 1.5).unwrap();
        store.write(&b).unwrap();
        store.close().unwrap();
        let store = Store::open(tmp.path(), opts(60_000)).unwrap();
        let view = store.view().unwrap();
        let late = view.raw_numeric(id(&store, "n"), 9_000_000, 11_000_000);
        assert_eq!(late.unwrap(), vec![(10_000_000, 1.5)], "{what}");
        assert_eq!(store.stats().unwrap().quarantined.len(), 1, "{what}");
    }
}

/// Files a flush left before its manifest was replaced are not part of the store: deleted on
/// open, and the data they held is replayed from the WAL instead.
#[test]
fn uncommitted_block_files_are_removed_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), opts(60_000)).unwrap();
    write_three_series(&store);
    store.close().unwrap();
    let blocks = tmp.path().join("blocks");
    let real = only_block(tmp.path());
    std::fs::copy(&real, blocks.join("p0_g99.blk")).unwrap();
    std::fs::write(blocks.join("p0_g2.blk.tmp"), b"half a block").unwrap();
    let store = Store::open(tmp.path(), opts(60_000)).unwrap();
    assert_eq!(only_block(tmp.path()), real);
    let view = store.view().unwrap();
    assert_eq!(
        view.raw_numeric(id(&store, "n"), 0, i64::MAX)
            .unwrap()
            .len(),
        100
    );
}

#[test]
fn reopening_with_another_base_period_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    Store::open(tmp.path(), opts(60_000))
        .unwrap()
        .close()
        .unwrap();
    match Store::open(tmp.path(), opts(1_000)) {
        Err(StoreError::LayoutMismatch {
            stored_base_period_ms,
            stored_partition_ms,
        }) => assert_eq!(
            (stored_base_period_ms, stored_partition_ms),
            (60_000, 600_000)
        ),
        Err(e) => panic!("expected LayoutMismatch, got {e:?}"),
        Ok(_) => panic!("expected LayoutMismatch, got a store"),
    }
}

/// The disk fills during a flush: the flush fails, readers still see everything (the frozen
/// head stays), writes resume once there is space, and the next flush and a reopen keep it all.
#[test]
fn a_flush_that_runs_out_of_space_loses_nothing() {
    use journal::sim::{Faults, SimFs};
    let sim = Arc::new(SimFs::new(5));
    let dir = tempfile::tempdir().unwrap();
    let o = StoreOptions {
        vfs: sim.clone(),
        wal_segment_size_bytes: 1 << 20,
        ..opts(60_000)
    };
    let store = Store::open(dir.path(), o.clone()).unwrap();
    write_three_series(&store);
    let used = sim_used_bytes(&sim, dir.path());
    sim.set_faults(Faults {
        capacity_bytes: Some(used + 100),
        ..Faults::default()
    });
    let err = store.flush().unwrap_err();
    assert!(format!("{err:?}").contains("28") || format!("{err:?}").contains("space"));
    let count = |store: &Store| {
        let view = store.view().unwrap();
        view.raw_numeric(id(store, "n"), 0, i64::MAX).unwrap().len()
    };
    assert_eq!(count(&store), 100);
    sim.set_faults(Faults::default());
    let report = store.flush().unwrap();
    assert_eq!(report.blocks, 1);
    assert_eq!(count(&store), 100);
    drop(store);
    let store = Store::open(dir.path(), o).unwrap();
    assert_eq!(count(&store), 100);
    let view = store.view().unwrap();
    let hs = view.raw_histograms(id(&store, "h"), 0, i64::MAX).unwrap();
    assert_eq!(hs.iter().map(|(_, h)| h.sample_count()).sum::<u64>(), 100);
}

fn sim_used_bytes(sim: &journal::sim::SimFs, dir: &Path) -> u64 {
    use journal::vfs::Vfs;
    let mut total = 0;
    for sub in [dir.to_path_buf(), dir.join("wal"), dir.join("blocks")] {
        for name in sim.list(&sub).unwrap_or_default() {
            total += sim.read_file(&sub.join(name)).map_or(0, |b| b.len() as u64);
        }
    }
    total
}

/// After a flush the WAL segments it covered are purged: the disk is reclaimed.
#[test]
fn flushing_lets_the_journal_purge_what_blocks_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let o = StoreOptions {
        wal_segment_size_bytes: 64 << 10,
        ..opts(1_000)
    };
    let store = Store::open(tmp.path(), o).unwrap();
    for round in 0..40i64 {
        let mut b = WriteBatch::new();
        for t in 0..500i64 {
            b.numeric(
                &key(&format!("n|ST[r:{}]", t % 7)),
                round * 500 + t,
                t as f64,
            )
            .unwrap();
        }
        store.write(&b).unwrap();
    }
    let segments = || std::fs::read_dir(tmp.path().join("wal")).unwrap().count();
    let before = segments();
    store.flush().unwrap();
    // The purge may keep the active segment and one before it.
    let after = segments();
    assert!(after < before, "segments {before} → {after}");
    assert!(store.stats().unwrap().checkpoint > 0);
}

/// A flush writes histogram series as Rice-coded chunks (kind 6), encoded from the head's
/// packed periods, and they read back as written.
#[test]
fn a_flush_writes_rice_coded_histogram_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), opts(60_000)).unwrap();
    write_three_series(&store);
    let h = id(&store, "h");
    store.close().unwrap();
    let path = only_block(tmp.path());
    let block = store::internals::block::Block::open(&journal::vfs::RealFs, &path).unwrap();
    let entries = block.entries_of(h);
    assert!(!entries.is_empty());
    for entry in entries {
        let (_, bytes) = block
            .read_span(std::slice::from_ref(entry))
            .unwrap()
            .unwrap();
        assert_eq!(bytes[1], 6, "a Rice-coded histogram chunk");
        assert!(matches!(
            block.read_chunk(entry).unwrap(),
            store::internals::block::ChunkData::Histogram(p) if !p.is_empty()
        ));
    }
}

/// A background flush that fails (its blocks directory replaced by a file) is counted and
/// reported by `background_failures` with its error, nothing acknowledged is lost, and the
/// report clears once a flush succeeds again.
#[test]
fn background_flush_failures_are_reported_until_one_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let o = StoreOptions {
        head_samples_max: 1,
        background_flush: true,
        background_maintenance: false,
        ..opts(1_000)
    };
    let store = Store::open(tmp.path(), o.clone()).unwrap();
    let blocks = tmp.path().join("blocks");
    std::fs::remove_dir_all(&blocks).unwrap();
    std::fs::write(&blocks, b"not a directory").unwrap();
    let mut b = WriteBatch::new();
    b.numeric(&key("a"), 1_000, 1.0).unwrap();
    store.write(&b).unwrap();
    let failing = (0..100)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            store.background_failures()
        })
        .find(|f| f.flush_failing)
        .expect("the background flush failed and said so");
    assert!(failing.flush_failures_total >= 1);
    assert!(failing.last_error.is_some());
    std::fs::remove_file(&blocks).unwrap();
    std::fs::create_dir(&blocks).unwrap();
    let recovered = (0..100).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        Some(store.background_failures()).filter(|f| !f.flush_failing)
    });
    let recovered = recovered.expect("a later flush succeeded");
    assert!(recovered.flush_failures_total >= failing.flush_failures_total);
    let view = store.view().unwrap();
    assert_eq!(
        view.raw_numeric(id(&store, "a"), 0, i64::MAX).unwrap(),
        vec![(1_000, 1.0)]
    );
}
