#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The workload generator: deterministic per seed, the benchmark's shapes (counts, time order,
//! value ranges, bins per histogram, series lifetimes in churn) and the TSBS key layout.

use std::collections::{HashMap, HashSet};

use storebench::workload::{
    self, Config, GenValue, Sample, Shape, Workload, CHURN_GENERATION_SERIES, CPU_METRICS,
    INTERVAL_MS, START_MS,
};

/// Every sample of a workload with each sample's canonical key, chunk by chunk.
fn drain(config: Config, chunk: usize) -> Vec<(String, Sample)> {
    let mut w = Workload::new(config).unwrap();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while w.next_chunk(chunk, &mut buf).unwrap() > 0 {
        for s in buf.drain(..) {
            out.push((w.key(s.series).canonical(), s));
        }
    }
    assert_eq!(out.len() as u64, w.samples_total());
    assert_eq!(w.samples_done(), w.samples_total());
    out
}

fn numeric(v: &GenValue) -> f64 {
    match v {
        GenValue::Numeric(x) => *x,
        GenValue::Histogram(_) => panic!("histogram in a numeric shape"),
    }
}

fn config(shape: Shape, series: u64, steps: u64, seed: u64) -> Config {
    Config {
        shape,
        series,
        steps,
        seed,
        run_samples: 1,
        start_ms: START_MS,
    }
}

#[test]
fn the_issue_sizes() {
    // 4 hours at 10 s = 1,440 steps; 1,000 hosts × 10 metrics; 1 M churned series × 6.
    assert_eq!(workload::steps_for_hours(4.0), Some(4 * 3600 / 10));
    for (shape, samples) in [
        (Shape::NumericInt, 14_400_000u64),
        (Shape::NumericFloat, 14_400_000),
        (Shape::Histogram, 1_440_000),
        (Shape::Churn, 6_000_000),
    ] {
        let w = Workload::new(Config::issue(shape)).unwrap();
        assert_eq!(w.samples_total(), samples, "{shape:?}");
    }
    assert_eq!(workload::steps_for_hours(-1.0), None);
    assert_eq!(workload::steps_for_hours(f64::NAN), None);
    assert!(Workload::new(config(Shape::NumericInt, 0, 10, 1)).is_err());
    assert!(Workload::new(config(Shape::NumericInt, 10, 0, 1)).is_err());
    for shape in Shape::ALL {
        assert_eq!(Shape::parse(shape.name()), Some(shape));
    }
    assert_eq!(Shape::parse("numeric"), None);
}

#[test]
fn same_seed_same_samples_other_seed_other_values() {
    for shape in Shape::ALL {
        let a = drain(config(shape, 30, 5, 7), 64);
        // A different chunk size must not change the stream either.
        let b = drain(config(shape, 30, 5, 7), 13);
        assert_eq!(a, b, "{shape:?}");
        let c = drain(config(shape, 30, 5, 8), 64);
        assert_ne!(a, c, "{shape:?}: seed ignored");
    }
}

#[test]
fn numeric_shapes_are_time_major_walks_in_range() {
    let (series, steps) = (25u64, 40u64);
    for shape in [Shape::NumericInt, Shape::NumericFloat] {
        let samples = drain(config(shape, series, steps, 3), 100);
        let mut per_series: HashMap<String, Vec<(i64, f64)>> = HashMap::new();
        let mut last_ts = i64::MIN;
        for (key, s) in &samples {
            assert!(s.ts_ms >= last_ts, "time order");
            last_ts = s.ts_ms;
            let v = numeric(&s.value);
            assert!((0.0..=100.0).contains(&v), "{v} out of 0–100");
            if shape == Shape::NumericInt {
                assert_eq!(v, v.trunc(), "integer shape gave {v}");
            }
            per_series
                .entry(key.clone())
                .or_default()
                .push((s.ts_ms, v));
        }
        assert_eq!(per_series.len() as u64, series);
        let mut steps_seen = Vec::new();
        for points in per_series.values() {
            let ts: Vec<i64> = points.iter().map(|p| p.0).collect();
            let expected: Vec<i64> = (0..steps as i64)
                .map(|i| START_MS + i * INTERVAL_MS)
                .collect();
            assert_eq!(ts, expected);
            steps_seen.extend(points.windows(2).map(|w| w[1].1 - w[0].1));
        }
        let n = steps_seen.len() as f64;
        let rms = (steps_seen.iter().map(|d| d * d).sum::<f64>() / n).sqrt();
        if shape == Shape::NumericFloat {
            // N(0, 1) steps (clamping at 0 and 100 only shortens a few).
            assert!((0.8..1.2).contains(&rms), "float walk step rms {rms}");
            assert!(samples
                .iter()
                .any(|(_, s)| numeric(&s.value).fract() != 0.0));
        } else {
            assert!((0.6..1.4).contains(&rms), "integer walk step rms {rms}");
        }
    }
}

#[test]
fn keys_follow_tsbs_cpu_only() {
    let key = workload::series_key(Shape::NumericInt, 123).unwrap();
    assert_eq!(key.name(), CPU_METRICS[3]);
    let categories: Vec<&[u8]> = key.tags().iter().map(|t| t.category()).collect();
    for c in [
        "arch",
        "datacenter",
        "hostname",
        "os",
        "rack",
        "region",
        "service",
        "service_environment",
        "service_version",
        "team",
    ] {
        assert!(categories.contains(&c.as_bytes()), "missing tag {c}");
    }
    let host = key
        .tags()
        .iter()
        .find(|t| t.category() == b"hostname")
        .unwrap();
    assert_eq!(host.value(), b"host_12");
    // The 10 metrics of one host share its tags.
    let other = workload::series_key(Shape::NumericInt, 129).unwrap();
    assert_eq!(key.tags(), other.tags());
    assert_ne!(key.name(), other.name());
    // 1,000 hosts × 10 metrics: all distinct.
    let keys: HashSet<String> = (0..10_000)
        .map(|i| {
            workload::series_key(Shape::NumericInt, i)
                .unwrap()
                .canonical()
        })
        .collect();
    assert_eq!(keys.len(), 10_000);
}

#[test]
fn histograms_hold_100_lognormal_observations_in_about_75_bins() {
    let samples = drain(config(Shape::Histogram, 20, 30, 5), 50);
    let mut bins = 0usize;
    for (_, s) in &samples {
        let GenValue::Histogram(h) = &s.value else {
            panic!("numeric in the histogram shape");
        };
        assert_eq!(h.sample_count(), 100);
        bins += h.bin_count();
    }
    let mean_bins = bins as f64 / samples.len() as f64;
    assert!(
        (65.0..85.0).contains(&mean_bins),
        "{mean_bins} bins per sample"
    );
}

#[test]
fn churn_series_live_for_six_samples_and_never_return() {
    // Two full generations and a partial third.
    let series = 2 * CHURN_GENERATION_SERIES + 1_234;
    let samples = drain(config(Shape::Churn, series, 99, 2), 10_000);
    let mut per_key: HashMap<String, Vec<i64>> = HashMap::new();
    let mut last_ts = i64::MIN;
    for (key, s) in &samples {
        assert!(s.ts_ms >= last_ts, "time order");
        last_ts = s.ts_ms;
        per_key.entry(key.clone()).or_default().push(s.ts_ms);
    }
    assert_eq!(per_key.len() as u64, series);
    for (key, ts) in &per_key {
        assert_eq!(ts.len(), 6, "{key}");
        assert!(
            ts.windows(2).all(|w| w[1] - w[0] == INTERVAL_MS),
            "{key}: {ts:?}"
        );
    }
    // A generation starts after the previous one's last sample: no overlap in time.
    let first_of_second = &samples[(6 * CHURN_GENERATION_SERIES) as usize];
    assert_eq!(first_of_second.1.ts_ms, START_MS + 6 * INTERVAL_MS);
}

#[test]
fn runs_give_each_series_consecutive_timestamps() {
    let (series, steps) = (7u64, 10u64);
    let mut c = config(Shape::NumericInt, series, steps, 4);
    c.run_samples = 4;
    let samples = drain(c, 9);
    // Runs of 4, 4 and the remaining 2 steps, series after series.
    let mut expected = Vec::new();
    for (start, len) in [(0i64, 4i64), (4, 4), (8, 2)] {
        for s in 0..series {
            for i in start..start + len {
                expected.push((s, START_MS + i * INTERVAL_MS));
            }
        }
    }
    let got: Vec<(u64, i64)> = samples.iter().map(|(_, s)| (s.series, s.ts_ms)).collect();
    assert_eq!(got, expected);
    c.run_samples = 0;
    assert!(Workload::new(c).is_err());
}

#[test]
fn recent_starts_are_partition_aligned_and_end_before_now() {
    let now_ms = 1_800_000_123_456i64;
    // Spans: 4 h for the numeric and histogram shapes; 100 churn generations × 6 steps × 10 s.
    for (shape, span_ms) in [
        (Shape::NumericInt, 4 * 3_600_000i64),
        (Shape::Histogram, 4 * 3_600_000),
        (Shape::Churn, 100 * 6 * 10_000),
    ] {
        let start = workload::recent_start_ms(now_ms, &Config::issue(shape));
        assert_eq!(start % workload::START_ALIGN_MS, 0, "{shape:?}");
        assert!(start + span_ms <= now_ms, "{shape:?} ends in the future");
        assert!(
            now_ms - start < span_ms + workload::START_ALIGN_MS,
            "{shape:?} too old"
        );
    }
}
