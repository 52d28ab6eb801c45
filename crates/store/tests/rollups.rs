//! Rollups: a rollup equals the merge of its finer slices (histograms bit for bit, numeric
//! aggregates within float rounding) and of the raw data; late data after a build is read at
//! once (reads fall back to finer data) and changes the rollup on the next build; head data in
//! an old range is added on top; retention drops exactly the expired partitions and their files;
//! deletes are invisible at once and gone from disk after compaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use store::internals::block::{Block, ChunkData};
use store::internals::manifest::Manifest;
use store::{Kind, Slicing, Store, StoreOptions};
use support::*;

fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn level_dir(store: &Store, period_ms: i64) -> std::path::PathBuf {
    store::internals::rollup::level_dir(store.dir(), period_ms)
}

#[test]
fn rollups_equal_the_merge_of_finer_data_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    model.write_random(&store, 1, 3_000, 0, SPAN_MS);
    store.flush().unwrap();
    // Nothing built yet: every read is from base data and already right.
    assert_eq!(check_all(&store, &model, "before build"), vec![0; 7]);
    let report = store.build_rollups(SPAN_MS).unwrap();
    // 24 + 6 + 2 partitions over the span.
    assert_eq!(report.partitions, 24 + 6 + 2, "{report:?}");
    assert_eq!(report.rebuilt, 0);
    let used = check_all(&store, &model, "after build");
    assert_eq!(used[0], 0, "the base period reads no rollup");
    assert!(
        used[1..].iter().all(|&u| u > 0),
        "every level used: {used:?}"
    );
    // The coarsest level answers its period alone: one slice per series per 60 s.
    let view = store.view().unwrap();
    let s = Slicing {
        start_ms: 0,
        end_ms: SPAN_MS,
        period_ms: 60_000,
    };
    view.histograms(id(&store, HIST), s).unwrap();
    let nonempty = model.histograms(s).iter().filter(|h| !h.is_empty()).count() as u64;
    assert_eq!(view.rollup_slices_read(), nonempty);
    drop(view);
    // A second build has nothing to do.
    assert_eq!(store.build_rollups(SPAN_MS).unwrap().partitions, 0);
    // Each level's files are exactly the ones the manifest lists.
    let m = Manifest::load(&journal::vfs::RealFs, dir.path())
        .unwrap()
        .unwrap();
    for (l, &period) in m.levels.iter().zip(&LEVEL_PERIODS_MS) {
        let listed: BTreeSet<String> = l.rollups.iter().map(|r| r.id.file_name()).collect();
        assert!(
            files(&level_dir(&store, period)) == listed,
            "level {period} files"
        );
    }
    store.close().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let used = check_all(&store, &model, "after reopen");
    assert!(used[1..].iter().all(|&u| u > 0));
    assert_eq!(store.build_rollups(SPAN_MS).unwrap().partitions, 0);
}

#[test]
fn rollup_of_each_level_equals_the_merge_of_the_finer_level() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    model.write_random(&store, 2, 2_000, 0, SPAN_MS);
    store.flush().unwrap();
    store.build_rollups(SPAN_MS).unwrap();
    let view = store.view().unwrap();
    let (h, n) = (id(&store, HIST), id(&store, NUMERIC));
    // Level i's slices read straight from its files, against the merge of level i − 1's.
    for (i, &period) in LEVEL_PERIODS_MS.iter().enumerate().skip(1) {
        let finer = LEVEL_PERIODS_MS[i - 1];
        let per = (period / finer) as usize;
        let fine = Slicing {
            start_ms: 0,
            end_ms: SPAN_MS,
            period_ms: finer,
        };
        let coarse = Slicing {
            period_ms: period,
            ..fine
        };
        let fine_h = view.histograms(h, fine).unwrap();
        let coarse_h = view.histograms(h, coarse).unwrap();
        for (j, c) in coarse_h.iter().enumerate() {
            let mut merged = hist::Histogram::new();
            for f in &fine_h[j * per..(j + 1) * per] {
                merged.merge(f);
            }
            assert_eq!(c, &merged, "level {i} slice {j}");
        }
        let fine_n = view.slice_aggregates(n, fine).unwrap();
        let coarse_n = view.slice_aggregates(n, coarse).unwrap();
        for (j, c) in coarse_n.iter().enumerate() {
            let mut acc: Option<store::SliceAggregate> = None;
            for f in fine_n[j * per..(j + 1) * per].iter().flatten() {
                acc = Some(match acc {
                    Some(a) => a.then(f),
                    None => *f,
                });
            }
            match (c, acc) {
                (None, None) => {}
                (Some(c), Some(a)) => {
                    assert_eq!(c.agg.count, a.agg.count);
                    assert!(close(c.agg.sum, a.agg.sum) && close(c.increase, a.increase));
                    assert_eq!((c.agg.min, c.agg.max), (a.agg.min, a.agg.max));
                    assert_eq!(
                        (c.agg.first_ts_ms, c.agg.last_ts_ms),
                        (a.agg.first_ts_ms, a.agg.last_ts_ms)
                    );
                }
                _ => panic!("level {i} slice {j}: {c:?} vs {acc:?}"),
            }
        }
    }
}

#[test]
fn late_data_is_read_at_once_and_changes_the_rollup() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    model.write_random(&store, 3, 2_000, 0, SPAN_MS);
    store.flush().unwrap();
    store.build_rollups(SPAN_MS).unwrap();
    let before = store.view().unwrap().histograms(
        id(&store, HIST),
        Slicing {
            start_ms: 0,
            end_ms: SPAN_MS,
            period_ms: 60_000,
        },
    );
    // Late data in the first coarse partition, including samples at existing milliseconds
    // (the later write replaces a numeric value; histograms add).
    let mut late = model.clone();
    late.write_random(&store, 3, 50, 0, LEVEL_PARTITIONS_MS[0]);
    late.write_random(&store, 4, 200, 0, 17_280_000);
    // Still in the head: histograms are added on top of rollups, numeric falls back.
    check_all(&store, &late, "late, in the head");
    store.flush().unwrap();
    // Flushed, rollups stale: reads fall back to finer data for those partitions.
    check_all(&store, &late, "late, flushed, stale rollups");
    let report = store.build_rollups(SPAN_MS).unwrap();
    // The 12 finest partitions of the first coarse one, its 3 middle ones and itself.
    assert_eq!(report.rebuilt, 12 + 3 + 1, "{report:?}");
    assert_eq!(report.partitions, report.rebuilt);
    let used = check_all(&store, &late, "late, rebuilt");
    assert!(used[1..].iter().all(|&u| u > 0));
    let after = store.view().unwrap().histograms(
        id(&store, HIST),
        Slicing {
            start_ms: 0,
            end_ms: SPAN_MS,
            period_ms: 60_000,
        },
    );
    assert_ne!(before.unwrap(), after.unwrap(), "the rollup changed");
    // Replaced files are gone.
    let m = Manifest::load(&journal::vfs::RealFs, dir.path())
        .unwrap()
        .unwrap();
    for (l, &period) in m.levels.iter().zip(&LEVEL_PERIODS_MS) {
        assert_eq!(files(&level_dir(&store, period)).len(), l.rollups.len());
    }
}

/// The finest level's partition still filling is rolled up from the blocks it has (recent
/// ranges read rollups, not base periods); after another flush it is stale and reads fall back
/// to finer data until the next build replaces it. Coarser levels wait for whole partitions.
#[test]
fn a_partition_still_filling_is_rolled_up_at_the_finest_level() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    // Data in the first half of the finest level's first partition.
    let half_ms = LEVEL_PARTITIONS_MS[0] / 2;
    model.write_random(&store, 5, 1_500, 0, half_ms);
    store.flush().unwrap();
    // "Now" is inside that partition, past the grace.
    let now_ms = half_ms + opts().rollup_grace_ms + 1;
    let report = store.build_rollups(now_ms).unwrap();
    assert_eq!(
        report.partitions, 1,
        "only the finest level's partial one: {report:?}"
    );
    let used = check_all(&store, &model, "partial rollup");
    assert!(used[1] > 0, "the finest level served reads: {used:?}");
    assert!(
        used[2..].iter().all(|&u| u > 0),
        "coarser reads fall back to it: {used:?}"
    );
    for &period in &LEVEL_PERIODS_MS[1..] {
        assert!(
            files(&level_dir(&store, period)).is_empty(),
            "level {period} waits for whole partitions"
        );
    }
    // More data in the same partition, flushed: the rollup is stale, reads stay right.
    model.write_random(&store, 6, 1_500, half_ms, LEVEL_PARTITIONS_MS[0]);
    store.flush().unwrap();
    // Numeric reads fall back to finer data; histogram reads take the stale rollup with the
    // newer flush blocks added on top (exact: merging commutes).
    let used = check_all(&store, &model, "partial rollup, stale");
    assert!(
        used[1] > 0,
        "the stale rollup extended at read time: {used:?}"
    );
    // The next build replaces it; a later one has nothing to do.
    let now_ms = LEVEL_PARTITIONS_MS[0] - 1;
    let report = store.build_rollups(now_ms).unwrap();
    assert_eq!((report.partitions, report.rebuilt), (1, 1), "{report:?}");
    let used = check_all(&store, &model, "partial rollup, rebuilt");
    assert!(used[1] > 0, "{used:?}");
    assert_eq!(store.build_rollups(now_ms).unwrap().partitions, 0);
    assert_eq!(
        files(&level_dir(&store, LEVEL_PERIODS_MS[0])).len(),
        1,
        "the replaced file is gone"
    );
}

/// After a flush, the finest level's partition still filling is brought up to date from its old
/// rollup and the new blocks alone when that is exact, and rebuilt whole when it is not (a numeric
/// sample resent at a time already counted: the duplicate rule needs every sample); reads equal
/// the model either way, counter increases included.
#[test]
fn a_partition_still_filling_is_extended_by_new_flushes_when_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    let p = LEVEL_PARTITIONS_MS[0];
    model.write_random(&store, 11, 800, 0, p / 4);
    store.flush().unwrap();
    let r = store.build_rollups(p / 4).unwrap();
    assert_eq!((r.partitions, r.extended), (1, 0), "{r:?}");
    // New data after everything flushed so far (both series): extended.
    model.write_random(&store, 12, 800, p / 4, p / 2);
    store.flush().unwrap();
    check_all(&store, &model, "stale, extended at read time");
    // 6 s columns: 5 s slices straddle them, read from base data — newer blocks included — and
    // the newer blocks' periods inside them must not be added twice.
    let used = check(
        &store.view().unwrap(),
        &store,
        &model,
        6_000,
        "straddling, stale",
    );
    assert!(used > 0, "the stale rollup served the 6 s read");
    let r = store.build_rollups(p / 2).unwrap();
    assert_eq!((r.partitions, r.rebuilt, r.extended), (1, 1, 1), "{r:?}");
    let used = check_all(&store, &model, "extended");
    assert!(used[1] > 0, "the extended rollup served reads: {used:?}");
    // And again, the new data starting in the very slice the old data ended in: the counter's
    // step from the old last sample to the new first one is inside that slice.
    let last = *model.numeric.keys().next_back().unwrap();
    let slice_ms = LEVEL_PERIODS_MS[0];
    let next = if (last + 1) % slice_ms == 0 {
        last
    } else {
        last + 1
    };
    assert_eq!(next / slice_ms, last / slice_ms);
    let mut more = Model::generate(13, 1, last + 1, last + 2);
    more[0].1 = model.numeric[&last] + 7.0;
    more.extend(Model::generate(14, 300, last + 2, p * 3 / 4));
    if next == last {
        more.remove(0);
    }
    Model::write(&store, &more);
    model.add(&more);
    store.flush().unwrap();
    let r = store.build_rollups(p * 3 / 4).unwrap();
    assert_eq!(r.extended, 1, "{r:?}");
    check_all(&store, &model, "extended twice");
    // A numeric sample at a millisecond already counted: rebuilt whole, the later value wins.
    // (At a time whose 5 s slice straddles a 6 s column: 5 s ≤ t mod 30 s < 10 s.)
    let (&t, _) = model
        .numeric
        .iter()
        .find(|(&t, _)| (5_000..6_000).contains(&t.rem_euclid(30_000)))
        .unwrap();
    let resent = Model::generate(15, 1, t, t + 1);
    Model::write(&store, &resent);
    model.add(&resent);
    store.flush().unwrap();
    // (Its histogram lands in a period the rollup counted: added on top at read time, also
    // where that period's 5 s slice straddles 6 s columns.)
    check_all(&store, &model, "stale after a resend");
    check(
        &store.view().unwrap(),
        &store,
        &model,
        6_000,
        "straddling, resend",
    );
    let r = store.build_rollups(p * 3 / 4).unwrap();
    assert_eq!((r.partitions, r.rebuilt, r.extended), (1, 1, 0), "{r:?}");
    let used = check_all(&store, &model, "rebuilt after a resend");
    assert!(used[1] > 0, "{used:?}");
    // The extended file survives a reopen like any other.
    drop(store);
    let store = Store::open(dir.path(), opts()).unwrap();
    check_all(&store, &model, "after reopen");
}

/// Base blocks of the partition starting at `start_ms`.
fn blocks_in(store: &Store, start_ms: i64) -> usize {
    let stats = store.stats().unwrap();
    stats
        .blocks
        .iter()
        .filter(|b| b.partition_start_ms == start_ms)
        .count()
}

/// A running server flushes a base partition in several blocks; once the partition has ended
/// (and its grace passed) the background maintenance rewrites it as one block
/// (`Store::compact_completed`). Reads — rollups included — are unchanged, a partition still
/// within its grace is left alone, and a second pass has nothing to do.
#[test]
fn completed_partitions_are_rewritten_as_one_block() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    let part_ms = PARTITION_MS;
    for i in 0..3 {
        model.write_random(
            &store,
            40 + i as u64,
            400,
            i * part_ms / 3,
            (i + 1) * part_ms / 3,
        );
        store.flush().unwrap();
    }
    for i in 0..2 {
        let from = part_ms + i * part_ms / 2;
        model.write_random(&store, 50 + i as u64, 400, from, from + part_ms / 2);
        store.flush().unwrap();
    }
    assert_eq!((blocks_in(&store, 0), blocks_in(&store, part_ms)), (3, 2));
    // The first partition has ended, the second has not.
    let now_ms = 2 * part_ms - 1 + opts().rollup_grace_ms;
    store.build_rollups(now_ms).unwrap();
    check_all(&store, &model, "flushed in several blocks");
    assert_eq!(store.compact_completed(now_ms, 8).unwrap(), 1);
    assert_eq!((blocks_in(&store, 0), blocks_in(&store, part_ms)), (1, 2));
    check_all(&store, &model, "completed partition compacted");
    // The rewrite reflects what its blocks did: no rollup went stale.
    let report = store.build_rollups(now_ms).unwrap();
    assert_eq!(report.rebuilt, 0, "{report:?}");
    assert_eq!(store.compact_completed(now_ms, 8).unwrap(), 0);
    drop(store);
    let store = Store::open(dir.path(), opts()).unwrap();
    check_all(&store, &model, "compacted, reopened");
    assert_eq!(blocks_in(&store, 0), 1);
}

/// A completed partition holding a damaged chunk is left as it is by the background rewrite
/// (reads report the damage); the other completed partitions are still rewritten.
#[test]
fn a_damaged_partition_is_not_rewritten_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    for part in 0..2 {
        for i in 0..2 {
            let from = part * PARTITION_MS + i * PARTITION_MS / 2;
            model.write_random(
                &store,
                60 + (2 * part + i) as u64,
                300,
                from,
                from + PARTITION_MS / 2,
            );
            store.flush().unwrap();
        }
    }
    drop(store);
    // Flip a byte inside the first chunk of one of partition 0's blocks.
    let blocks_dir = dir.path().join("blocks");
    let mut names: Vec<String> = files(&blocks_dir).into_iter().collect();
    names.sort();
    let victim = blocks_dir.join(&names[0]);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[store::internals::block::HEADER_SIZE_BYTES + 12] ^= 0x40;
    std::fs::write(&victim, &bytes).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let damaged_start = store
        .stats()
        .unwrap()
        .blocks
        .iter()
        .find(|b| b.name == names[0])
        .map(|b| b.partition_start_ms)
        .unwrap();
    let other = if damaged_start == 0 { PARTITION_MS } else { 0 };
    let now_ms = 3 * PARTITION_MS;
    assert_eq!(store.compact_completed(now_ms, 8).unwrap(), 1);
    assert_eq!(
        blocks_in(&store, damaged_start),
        2,
        "the damaged partition is left alone"
    );
    assert_eq!(blocks_in(&store, other), 1);
    assert_eq!(store.compact_completed(now_ms, 8).unwrap(), 0);
}

fn retention_opts(base_ms: i64, numeric_ms: i64, level_ms: [i64; 3]) -> StoreOptions {
    let mut o = opts();
    o.base_retention_ms = base_ms;
    o.raw_numeric_retention_ms = numeric_ms;
    for (l, r) in o.levels.iter_mut().zip(level_ms) {
        l.retention_ms = r;
    }
    o
}

#[test]
fn retention_drops_exactly_the_expired_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let now = SPAN_MS;
    // Base kept 20,000 s, raw numeric 10,000 s, levels 22,000 / 25,000 / 17,000 s: each drops
    // some partitions and keeps others.
    let (base_r, num_r) = (20_000_000, 10_000_000);
    let level_r = [22_000_000, 25_000_000, 17_000_000];
    let store = Store::open(dir.path(), retention_opts(base_r, num_r, level_r)).unwrap();
    let mut model = Model::default();
    model.write_random(&store, 5, 3_000, 0, SPAN_MS);
    store.flush().unwrap();
    store.build_rollups(now).unwrap();
    let before_bytes: u64 = store
        .stats()
        .unwrap()
        .blocks
        .iter()
        .map(|b| b.size_bytes)
        .sum();
    let report = store.apply_retention(now).unwrap();
    assert!(
        report.bytes_freed > 0 && report.bytes_freed <= before_bytes * 2,
        "{report:?}"
    );
    let stats = store.stats().unwrap();
    // Base: a partition stays iff its end is after now − retention.
    let kept: BTreeSet<i64> = stats.blocks.iter().map(|b| b.partition_start_ms).collect();
    let want: BTreeSet<i64> = model
        .numeric
        .keys()
        .map(|&t| t - t.rem_euclid(PARTITION_MS))
        .filter(|&s| s + PARTITION_MS > now - base_r)
        .collect();
    assert!(
        kept == want,
        "base partitions kept differ from the expected ones"
    );
    // Numeric chunks only where the raw numeric retention has not passed.
    for path in std::fs::read_dir(dir.path().join("blocks")).unwrap() {
        let b = Block::open(&journal::vfs::RealFs, &path.unwrap().path()).unwrap();
        let end = b.partition_end_ms;
        let has_numeric = b.entries().iter().any(|e| e.kind == Kind::Numeric);
        let model_has = model
            .numeric
            .range(b.id.partition_start_ms..end)
            .next()
            .is_some();
        assert_eq!(has_numeric, end > now - num_r && model_has, "{}", b.id);
    }
    // Rollups: each level keeps exactly the partitions ending after now − its retention.
    let m = Manifest::load(&journal::vfs::RealFs, dir.path())
        .unwrap()
        .unwrap();
    for ((l, &r), (&period, &part)) in m
        .levels
        .iter()
        .zip(&level_r)
        .zip(LEVEL_PERIODS_MS.iter().zip(&LEVEL_PARTITIONS_MS))
    {
        let kept: BTreeSet<i64> = l.rollups.iter().map(|r| r.id.partition_start_ms).collect();
        let want: BTreeSet<i64> = model
            .numeric
            .keys()
            .map(|&t| t - t.rem_euclid(part))
            .filter(|&s| s + part > now - r)
            .collect();
        assert_eq!(kept, want, "level {period}");
        assert!(
            !want.is_empty() && want.len() < (SPAN_MS / part) as usize,
            "level {period}"
        );
        let listed: BTreeSet<String> = l.rollups.iter().map(|r| r.id.file_name()).collect();
        assert!(
            files(&level_dir(&store, period)) == listed,
            "level {period} files"
        );
    }
    let listed: BTreeSet<String> = m.blocks.iter().map(|r| r.id.file_name()).collect();
    assert!(
        files(&dir.path().join("blocks")) == listed,
        "files in blocks/ are the listed ones"
    );
    // What is kept still reads right: numeric at 5 s from the level where raw data is gone.
    let view = store.view().unwrap();
    let from = now - 20_000_000;
    let s = Slicing {
        start_ms: from - from.rem_euclid(LEVEL_PARTITIONS_MS[0]),
        end_ms: SPAN_MS,
        period_ms: 5_000,
    };
    let got = view.numeric_aggregates(id(&store, NUMERIC), s).unwrap();
    let want = model.numeric(Slicing {
        start_ms: s.start_ms,
        ..s
    });
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.map(|g| g.count), w.map(|w| w.count));
        if let (Some(g), Some(w)) = (g, w) {
            assert!(close(g.sum, w.sum));
        }
    }
    drop(view);
    // A second pass finds nothing more to drop.
    assert_eq!(store.apply_retention(now).unwrap(), Default::default());
}

#[test]
fn deletes_are_invisible_at_once_and_gone_from_disk_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut model = Model::default();
    model.write_random(&store, 6, 3_000, 0, SPAN_MS);
    store.flush().unwrap();
    store.build_rollups(SPAN_MS).unwrap();
    // More flushes: several blocks per partition, for compaction to merge.
    model.write_random(&store, 7, 300, 0, SPAN_MS);
    store.flush().unwrap();
    let (from, to) = (3_000_000, 20_000_123);
    let deleted = store
        .delete_matching(
            &store::TagQuery::parse("and(k:latency)").unwrap(),
            10_000,
            from,
            to,
        )
        .unwrap()
        + store.delete(&[id(&store, NUMERIC)], from, to).unwrap();
    assert_eq!(deleted, 2);
    let mut after = model.clone();
    after.numeric.retain(|&t, _| !(from..to).contains(&t));
    after.hists.retain(|&t, _| !(from..to).contains(&t));
    check_all(&store, &after, "deleted, not compacted");
    let raw = store
        .view()
        .unwrap()
        .raw_numeric(id(&store, NUMERIC), i64::MIN, i64::MAX)
        .unwrap();
    assert_eq!(raw.len(), after.numeric.len());
    // Written after the delete: visible.
    let mut later = after.clone();
    later.write_random(&store, 8, 100, from, to);
    check_all(&store, &later, "written after the delete");
    store.flush().unwrap();
    let report = store.compact(SPAN_MS).unwrap();
    assert!(
        report.partitions > 0 && report.tombstones_removed == 2,
        "{report:?}"
    );
    let used = check_all(&store, &later, "compacted");
    assert!(used[1..].iter().all(|&u| u > 0));
    // On disk: one block per partition, nothing of the deleted data left in any file.
    let m = Manifest::load(&journal::vfs::RealFs, dir.path())
        .unwrap()
        .unwrap();
    assert!(m.tombstones.is_empty());
    let parts: BTreeSet<i64> = m.blocks.iter().map(|r| r.id.partition_start_ms).collect();
    assert_eq!(parts.len(), m.blocks.len());
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path().join("blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for &p in &LEVEL_PERIODS_MS {
        paths.extend(
            std::fs::read_dir(level_dir(&store, p))
                .unwrap()
                .map(|e| e.unwrap().path()),
        );
    }
    let mut seen = 0;
    for path in paths {
        let b = Block::open(&journal::vfs::RealFs, &path).unwrap();
        for e in b.entries() {
            let times: Vec<i64> = match b.read_chunk(e).unwrap() {
                ChunkData::Numeric(v) => v.into_iter().map(|p| p.0).collect(),
                ChunkData::Histogram(v) => v.into_iter().map(|p| p.0).collect(),
                ChunkData::Aggregates(v) => v.into_iter().map(|p| p.0).collect(),
                ChunkData::Text(v) => v.into_iter().map(|p| p.0).collect(),
            };
            for t in times {
                seen += 1;
                let was_deleted = (from..to).contains(&t)
                    && !later.numeric.contains_key(&t)
                    && !later.hists.contains_key(&(t - t.rem_euclid(BASE_MS)));
                // Rollup slices start on their period: deleted iff no surviving sample in it.
                if b.base_period_ms == BASE_MS {
                    assert!(
                        !was_deleted,
                        "{}: deleted sample at {t} still on disk",
                        b.id
                    );
                }
            }
        }
    }
    assert!(seen > 0);
    store.close().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    check_all(&store, &later, "compacted, reopened");
}
