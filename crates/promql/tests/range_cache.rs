//! Range answers through the result cache equal a fresh evaluation, whatever is written (near
//! the clock, far back, over samples already there, new series with old samples), deleted or
//! asked between two queries, and repeated questions are answered from it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use promql::eval::{self, Limits, Output, Source};
use promql::range_cache::{self, RangeCache};
use store::key::StreamKey;
use store::{Store, StoreOptions, TagQuery, WriteBatch};

const SEC: i64 = 1_000;
const MIN: i64 = 60 * SEC;
const HOSTS: [&str; 4] = ["a", "b", "c", "d"];

const QUERIES: [&str; 13] = [
    "cpu",
    "histogram_count(sum(rate(lat[5m])))",
    "histogram_quantile(0.9, sum by (host) (rate(lat[5m])))",
    "sum(rate(reqs_total[5m]))",
    "max by (host) (cpu)",
    "cpu offset 5m",
    "avg_over_time(cpu[3m])",
    "count(cpu > 50)",
    "sum(rate(reqs_total[5m])) / count(cpu)",
    "time()",
    "max_over_time(cpu[10m:1m])",
    // Not kept (a step reads after itself or at a fixed time), answered all the same.
    "cpu @ end()",
    "cpu offset -5m",
];

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(name: &str, host: &str) -> StreamKey {
    StreamKey::from_labels([("__name__", name), ("host", host)]).unwrap()
}

fn write(store: &Store, host: &str, t_ms: i64, v: f64) {
    let mut b = WriteBatch::new();
    b.numeric(&key("cpu", host), t_ms, v).unwrap();
    b.numeric(&key("reqs_total", host), t_ms, (t_ms / SEC) as f64 + v)
        .unwrap();
    let mut h = hist::Histogram::new();
    h.insert_n(v / 100.0, 3);
    b.histogram(&key("lat", host), t_ms, &h).unwrap();
    store.write(&b).unwrap();
}

/// The answer with every float as its bits (NaN equals itself).
fn canonical(out: &Output) -> String {
    match out {
        Output::Matrix(series) => series
            .iter()
            .map(|s| {
                let points: Vec<String> = s
                    .floats
                    .iter()
                    .map(|(t, v)| format!("{t}:{:x}", v.to_bits()))
                    .collect();
                format!("{:?} {} {:?}\n", s.labels, points.join(","), s.hists)
            })
            .collect(),
        other => format!("{other:?}"),
    }
}

#[test]
fn cached_answers_equal_fresh_ones_through_writes_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions {
            wal_segment_size_bytes: 1 << 20,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = (now - 3 * 60 * MIN) / MIN * MIN;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for host in HOSTS {
        let mut b = WriteBatch::new();
        for t in (base..now - MIN).step_by(10 * SEC as usize) {
            let v = rng.below(100) as f64;
            b.numeric(&key("cpu", host), t, v).unwrap();
            b.numeric(&key("reqs_total", host), t, (t / SEC) as f64 + v)
                .unwrap();
            let mut h = hist::Histogram::new();
            h.insert_n(v / 100.0, 3);
            b.histogram(&key("lat", host), t, &h).unwrap();
        }
        store.write(&b).unwrap();
    }
    let cache = RangeCache::new(8 << 20);
    let limits = Limits::default();
    let step = MIN;
    let mut deletes = 0;
    let mut last: Option<(&str, i64, i64)> = None;
    for round in 0..200 {
        match rng.below(8) {
            // Far back, perhaps over a sample already there (the newer one wins).
            0 | 1 => {
                let host = HOSTS[rng.below(4) as usize];
                let t = base + (rng.below(150) as i64) * 10 * SEC;
                write(&store, host, t, 1000.0 + rng.below(100) as f64);
            }
            // Near the clock, and near where kept steps end.
            2 => write(&store, "a", now - (rng.below(120) as i64) * SEC, 7.0),
            3 => write(
                &store,
                "b",
                now - 5 * MIN + (rng.below(60) as i64) * SEC,
                9.0,
            ),
            // A new series whose samples are old.
            4 => {
                let host = format!("new-{round}");
                let t = base + (rng.below(100) as i64) * MIN;
                write(&store, &host, t, 42.0);
            }
            5 if deletes < 3 => {
                deletes += 1;
                let host = HOSTS[rng.below(4) as usize];
                let from = base + (rng.below(120) as i64) * MIN;
                let q = TagQuery::parse(&format!("and(__name:cpu,host:{host})")).unwrap();
                store
                    .delete_matching(&q, 1 << 20, from, from + 20 * MIN)
                    .unwrap();
            }
            _ => {}
        }
        // Half the time a dashboard's refresh: the last question a step later.
        // Or a narrower window inside it, ending off the steps.
        let (query, start, end) = match (last, rng.below(4)) {
            (Some((q, s, e)), 0 | 1) => (q, s + step, e + step),
            (Some((q, s, e)), 2) if s + step <= e - 75 * SEC => (q, s + step, e - 75 * SEC),
            _ => {
                let start = base + (rng.below(60) as i64) * step;
                // Not always on a step: the last step is then before it.
                let len = (30 + rng.below(150) as i64) * MIN + (rng.below(4) as i64) * 15 * SEC;
                let end = (start + len).min(now + 2 * MIN);
                (
                    QUERIES[rng.below(QUERIES.len() as u64) as usize],
                    start,
                    end,
                )
            }
        };
        last = Some((query, start, end));
        let fresh = eval::range_from(Source::Local(&store), query, start, end, step, limits);
        let answered = if range_cache::answers(query, (start, end, step), &limits) {
            cache.range(&store, query, (start, end, step), &limits, |from| {
                eval::range_from(Source::Local(&store), query, from, end, step, limits)
            })
        } else {
            assert!(query.contains('@') || query.contains("offset -"), "{query}");
            fresh.clone()
        };
        let (fresh, answered) = (fresh.unwrap(), answered.unwrap());
        assert_eq!(
            canonical(&answered.0),
            canonical(&fresh.0),
            "round {round}: {query} over [{start}, {end}]"
        );
        assert_eq!(answered.1, fresh.1, "round {round}: annotations of {query}");
    }
    let stats = cache.stats();
    assert!(stats.hits >= 50, "{stats:?}");
    assert!(stats.bytes > 0 && stats.bytes <= 8 << 20, "{stats:?}");
}

#[test]
fn only_queries_whose_steps_read_no_later_time_are_kept() {
    let limits = Limits::default();
    let ok = |q: &str| range_cache::answers(q, (0, 3_600_000, 60_000), &limits);
    assert!(ok("sum(rate(x[5m] offset 1h))"));
    assert!(ok("max_over_time(x[10m:1m] offset 5m)"));
    assert!(!ok("x @ 100"));
    assert!(!ok("x offset -1m"));
    assert!(!ok("rate(x[5m] @ start())"));
    assert!(!ok("max_over_time(x[10m:1m] @ end())"));
    assert!(!ok("x[5m]"), "a range vector is an error for a range query");
    assert!(!ok("x +"), "a parse error is the evaluation's to report");
    assert!(!range_cache::answers("x", (10, 0, 60_000), &limits));
    assert!(!range_cache::answers("x", (0, 10, 0), &limits));
}

/// A histogram is kept at its base period's start: one written just after the kept steps end
/// lands before that end, and the kept steps from its period on are not kept any more.
#[test]
fn a_histogram_written_after_the_kept_steps_changes_those_of_its_period() {
    const PERIOD_MS: i64 = 10 * MIN;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        StoreOptions {
            base_period_ms: PERIOD_MS,
            partition_ms: 12 * PERIOD_MS,
            levels: Vec::new(),
            wal_segment_size_bytes: 1 << 20,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let hist = |n: u64| {
        let mut h = hist::Histogram::new();
        h.insert_n(0.25, n);
        h
    };
    let write = |t: i64, n: u64| {
        let mut b = WriteBatch::new();
        b.histogram(&key("lat", "a"), t, &hist(n)).unwrap();
        store.write(&b).unwrap();
    };
    // Where the kept steps will end must not be within seconds after a period's start.
    let settled = loop {
        let s = store.past_mark().settled_before_ms;
        if s.rem_euclid(PERIOD_MS) > 10 * SEC {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    let start = (settled - 60 * MIN) / MIN * MIN;
    for t in (start..settled).step_by(PERIOD_MS as usize) {
        write(t, 1);
    }
    let cache = RangeCache::new(1 << 20);
    let limits = Limits::default();
    let (query, end) = ("histogram_count(lat)", settled + 10 * MIN);
    let ask = || {
        cache
            .range(&store, query, (start, end, MIN), &limits, |from| {
                eval::range_from(Source::Local(&store), query, from, end, MIN, limits)
            })
            .unwrap()
    };
    let first = ask();
    // Just after the kept steps' end: near the clock, yet in a period that began before it.
    write(settled + 2 * SEC, 5);
    let fresh = eval::range_from(Source::Local(&store), query, start, end, MIN, limits).unwrap();
    assert_ne!(
        canonical(&fresh.0),
        canonical(&first.0),
        "the write changed the answer"
    );
    assert_eq!(canonical(&ask().0), canonical(&fresh.0));
    assert_eq!(cache.stats().hits, 1);
}
