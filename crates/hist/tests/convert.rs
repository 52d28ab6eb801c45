//! Conversions into llhist from Prometheus native, OTel exponential and classic explicit-bound
//! histograms: hand-checked splits, the edge cases of every family, errors, and property tests
//! (totals kept exactly; quantiles within the source bucket's width of the samples' quantiles).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::convert::{
    from_classic, from_explicit, from_exponential, from_native, ClassicHistogram, ConvertError,
    CumulativeBucket, ExplicitHistogram, ExponentialBuckets, ExponentialHistogram, NativeCounts,
    NativeHistogram, Part, SourceCount, Span, SOURCE_BUCKETS_MAX,
};
use hist::{Bin, Histogram, QuantileType};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};

fn bins(h: &Histogram) -> Vec<((i8, i8), u64)> {
    h.bins().map(|(b, c)| ((b.val(), b.exp()), c)).collect()
}

fn integer_native(schema: i32, spans: Vec<Span>, deltas: Vec<i64>, count: u64) -> NativeHistogram {
    NativeHistogram {
        schema,
        positive_spans: spans,
        counts: NativeCounts::Integer {
            count,
            zero_count: 0,
            positive_deltas: deltas,
            negative_deltas: vec![],
        },
        sum: 1.0,
        ..Default::default()
    }
}

fn span(offset: i32, length: u32) -> Span {
    Span { offset, length }
}

/// Bucket (1, 2] holding 100 samples: ln-width shares of [1.0, 1.1) … [1.9, 2.0) are
/// log2(1.1) = 13.75%, …; cumulative 13.75, 26.30, 37.85, 48.54, 58.50, 67.81, 76.55, 84.80,
/// 92.60, 100 rounds to 14, 26, 38, 49, 58, 68, 77, 85, 93, 100.
const ONE_TO_TWO: [u64; 10] = [14, 12, 12, 11, 9, 10, 9, 8, 8, 7];

fn expected_one_to_two(sign: i8) -> Vec<((i8, i8), u64)> {
    let mut v: Vec<_> = (10..20)
        .zip(ONE_TO_TWO)
        .map(|(val, c)| ((sign * val, 0), c))
        .collect();
    if sign < 0 {
        v.reverse();
    }
    v
}

#[test]
fn schema0_bucket_one_to_two_splits_by_log_width() {
    let c = from_native(&integer_native(0, vec![span(1, 1)], vec![100], 100)).unwrap();
    assert_eq!(bins(&c.histogram), expected_one_to_two(1));
    assert_eq!(c.count, Some(SourceCount::Integer(100)));
    assert_eq!(c.sum, Some(1.0));
}

#[test]
fn negative_buckets_mirror_and_zero_bucket_goes_to_zero_bin() {
    let h = NativeHistogram {
        schema: 0,
        zero_threshold: 1e-3,
        negative_spans: vec![span(1, 1)],
        counts: NativeCounts::Integer {
            count: 107,
            zero_count: 7,
            positive_deltas: vec![],
            negative_deltas: vec![100],
        },
        ..Default::default()
    };
    let c = from_native(&h).unwrap();
    let mut expected = expected_one_to_two(-1);
    expected.push(((0, 0), 7));
    assert_eq!(bins(&c.histogram), expected);
}

#[test]
fn deltas_run_across_spans() {
    // Buckets -2, -1 and 3 (the second span starts 3 after the first ends) with counts 5, 3,
    // 10; schema 0 bucket 3 is (4, 8].
    let h = integer_native(0, vec![span(-2, 2), span(3, 1)], vec![5, -2, 7], 18);
    let c = from_native(&h).unwrap();
    let got = &c.histogram;
    assert_eq!(got.sample_count(), 18);
    // (0.125, 0.25] and (0.25, 0.5]
    let below_half: u64 = got
        .bins()
        .filter(|(b, _)| b.upper() <= 0.5 + 1e-12)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(below_half, 8);
    let above_four: u64 = got
        .bins()
        .filter(|(b, _)| b.lower() >= 4.0 - 1e-12)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(above_four, 10);
    assert!(got
        .bins()
        .all(|(b, _)| b.lower() >= 0.125 - 1e-12 && b.upper() <= 8.0 + 1e-9));
}

#[test]
fn higher_schema_bucket_within_one_bin() {
    // Schema 3 bucket 1 is (1, 2^(1/8)] = (1, 1.0905]: entirely inside [1.0, 1.1).
    let c = from_native(&integer_native(3, vec![span(1, 1)], vec![42], 42)).unwrap();
    assert_eq!(bins(&c.histogram), vec![((10, 0), 42)]);
    // Schema -4 bucket 1 is (1, 65536]: 4.8 decades, split over ~430 bins.
    let c = from_native(&integer_native(
        -4,
        vec![span(1, 1)],
        vec![1_000_000],
        1_000_000,
    ))
    .unwrap();
    assert_eq!(c.histogram.sample_count(), 1_000_000);
    let b = bins(&c.histogram);
    assert_eq!(b.first().unwrap().0, (10, 0));
    assert_eq!(b.last().unwrap().0, (65, 4));
}

#[test]
fn count_beyond_buckets_goes_to_nan_bin_and_below_is_an_error() {
    let c = from_native(&integer_native(0, vec![span(1, 1)], vec![100], 103)).unwrap();
    assert_eq!(c.histogram.nan_count(), 3);
    assert_eq!(c.histogram.sample_count(), 103);
    let e = from_native(&integer_native(0, vec![span(1, 1)], vec![100], 99)).unwrap_err();
    assert_eq!(
        e,
        ConvertError::CountBelowBuckets {
            count: 99,
            buckets: 100
        }
    );
}

#[test]
fn float_native_counts_round_cumulatively() {
    let h = NativeHistogram {
        schema: 2,
        positive_spans: vec![span(0, 3)],
        counts: NativeCounts::Float {
            count: 1.6,
            zero_count: 0.4,
            positive_counts: vec![0.4, 0.4, 0.4],
            negative_counts: vec![],
        },
        ..Default::default()
    };
    let c = from_native(&h).unwrap();
    // Running totals 0.4, 0.8, 1.2, 1.6 round to 0, 1, 1, 2.
    assert_eq!(c.histogram.sample_count(), 2);
    assert_eq!(c.histogram.count_of(Bin::ZERO), 0);
    assert_eq!(c.count, Some(SourceCount::Float(1.6)));
}

#[test]
fn native_custom_bounds() {
    // Bounds 0.1, 1, 10: buckets (-inf,0.1] (0.1,1] (1,10] (10,+inf).
    let h = NativeHistogram {
        schema: -53,
        positive_spans: vec![span(0, 4)],
        custom_values: vec![0.1, 1.0, 10.0],
        counts: NativeCounts::Integer {
            count: 100,
            zero_count: 0,
            positive_deltas: vec![10, 20, -10, 20],
            negative_deltas: vec![],
        },
        ..Default::default()
    };
    let c = from_native(&h).unwrap();
    let g = &c.histogram;
    assert_eq!(g.sample_count(), 100);
    let in_range = |lo: f64, hi: f64| -> u64 {
        g.bins()
            .filter(|(b, _)| b.lower() >= lo * (1.0 - 1e-12) && b.upper() <= hi * (1.0 + 1e-12))
            .map(|(_, n)| n)
            .sum()
    };
    assert_eq!(in_range(0.0, 0.1), 10);
    assert_eq!(in_range(0.1, 1.0), 30);
    assert_eq!(in_range(1.0, 10.0), 20);
    // The +inf bucket sits at the bin of the last finite bound.
    assert_eq!(g.count_of(Bin::from_f64(10.0)), 40);
}

#[test]
fn otel_scale_and_offset_index_buckets() {
    // Scale 0, index 0 is (1, 2]: the same split as Prometheus schema 0 index 1.
    let h = ExponentialHistogram {
        scale: 0,
        count: 100,
        positive: ExponentialBuckets {
            offset: 0,
            bucket_counts: vec![100],
        },
        // At the bucket's own bounds: they narrow nothing, and pass through.
        min: Some(1.0),
        max: Some(2.0),
        sum: Some(150.0),
        ..Default::default()
    };
    let c = from_exponential(&h).unwrap();
    assert_eq!(bins(&c.histogram), expected_one_to_two(1));
    assert_eq!((c.min, c.max, c.sum), (Some(1.0), Some(2.0), Some(150.0)));
    // Scale 1, offset -1: index -1 is (2^-0.5, 1] = (0.707, 1], index 0 is (1, 1.414].
    let h = ExponentialHistogram {
        scale: 1,
        count: 21,
        zero_count: 1,
        negative: ExponentialBuckets {
            offset: -1,
            bucket_counts: vec![10, 10],
        },
        ..Default::default()
    };
    let c = from_exponential(&h).unwrap();
    let g = &c.histogram;
    assert_eq!(g.sample_count(), 21);
    assert_eq!(g.count_of(Bin::ZERO), 1);
    assert!(g
        .bins()
        .all(|(b, _)| b.is_zero() || (b.lower() >= -1.5 && b.upper() <= -0.7)));
    let near_one: u64 = g
        .bins()
        .filter(|(b, _)| b.upper() <= -0.99 && b.lower() >= -1.5)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(near_one, 10);
}

#[test]
fn otel_min_and_max_narrow_the_buckets_they_fall_in() {
    let one_to_two = |min: f64, max: f64, negative: bool| {
        let buckets = ExponentialBuckets {
            offset: 0,
            bucket_counts: vec![100],
        };
        let (positive, negative) = if negative {
            (ExponentialBuckets::default(), buckets)
        } else {
            (buckets, ExponentialBuckets::default())
        };
        let h = ExponentialHistogram {
            count: 100,
            positive,
            negative,
            min: Some(min),
            max: Some(max),
            ..Default::default()
        };
        from_exponential(&h).unwrap().histogram
    };
    // min == max: every sample is that value.
    assert_eq!(bins(&one_to_two(1.5, 1.5, false)), vec![((15, 0), 100)]);
    assert_eq!(bins(&one_to_two(-1.5, -1.5, true)), vec![((-15, 0), 100)]);
    // (1, 2] narrowed to (1.5, 2]: nothing below 1.5.
    let g = one_to_two(1.5, 2.0, false);
    assert_eq!(g.sample_count(), 100);
    assert!(g.bins().all(|(b, _)| b.lower() >= 1.5 - 1e-12));
    // Negative side: values in [-2, -1); max = -1.2 bounds the magnitudes from below.
    let g = one_to_two(-1.8, -1.2, true);
    assert_eq!(g.sample_count(), 100);
    assert!(g
        .bins()
        .all(|(b, _)| b.upper() <= -1.2 + 1e-12 && b.lower() >= -1.9 - 1e-12));
    // A min/max outside the bucket is inconsistent and ignored.
    assert_eq!(bins(&one_to_two(5.0, 7.0, false)), expected_one_to_two(1));
}

#[test]
fn otel_extreme_scales_stay_finite() {
    // Scale -10: index 0 is (1, 2^1024] — beyond f64 and llhist; most of it lands in NaN.
    let h = ExponentialHistogram {
        scale: -10,
        count: 1000,
        positive: ExponentialBuckets {
            offset: 0,
            bucket_counts: vec![1000],
        },
        ..Default::default()
    };
    let c = from_exponential(&h).unwrap();
    assert_eq!(c.histogram.sample_count(), 1000);
    let nan = c.histogram.nan_count();
    // log2(1e128) / 1024 = 41.5% below 1e128.
    assert!((580..590).contains(&nan), "{nan}");
    // Scale 20: tiny buckets, each inside one bin.
    let h = ExponentialHistogram {
        scale: 20,
        count: 5,
        positive: ExponentialBuckets {
            offset: 1 << 20,
            bucket_counts: vec![5],
        },
        ..Default::default()
    };
    let c = from_exponential(&h).unwrap();
    assert_eq!(bins(&c.histogram), vec![((20, 0), 5)]);
}

#[test]
fn classic_le_with_inf_bucket() {
    let h = ClassicHistogram {
        // Any order.
        buckets: vec![
            CumulativeBucket {
                le: f64::INFINITY,
                count: 35.0,
            },
            CumulativeBucket {
                le: 0.1,
                count: 10.0,
            },
            CumulativeBucket {
                le: 1.0,
                count: 30.0,
            },
        ],
        count: Some(35.0),
        sum: Some(12.5),
    };
    let c = from_classic(&h).unwrap();
    let g = &c.histogram;
    assert_eq!(g.sample_count(), 35);
    assert_eq!(c.count, Some(SourceCount::Float(35.0)));
    // (0, 0.1] linearly: 90% in [0.01, 0.1), each 0.001-wide bin of [0.09, 0.1) holds 1%.
    let first: u64 = g
        .bins()
        .filter(|(b, _)| b.upper() <= 0.1 + 1e-15)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(first, 10);
    assert_eq!(g.count_of(Bin::new(95, -2).unwrap()), 0);
    let top_decade: u64 = g
        .bins()
        .filter(|(b, _)| b.lower() >= 0.01 - 1e-15 && b.upper() <= 0.1 + 1e-15)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(top_decade, 9);
    // (0.1, 1]: 20 over one decade by log-width, ~2.2 per 10 bins.
    let second: u64 = g
        .bins()
        .filter(|(b, _)| b.lower() >= 0.1 - 1e-15 && b.upper() <= 1.0 + 1e-12)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(second, 20);
    // +Inf: 5 at the bin of 1.0.
    assert_eq!(g.count_of(Bin::new(10, 0).unwrap()), 5);
}

#[test]
fn classic_without_inf_bucket_uses_count() {
    let h = ClassicHistogram {
        buckets: vec![CumulativeBucket {
            le: 2.0,
            count: 4.0,
        }],
        count: Some(6.0),
        sum: None,
    };
    let c = from_classic(&h).unwrap();
    assert_eq!(c.histogram.sample_count(), 6);
    assert_eq!(c.histogram.count_of(Bin::new(20, 0).unwrap()), 2);
}

#[test]
fn classic_negative_bounds_and_a_bucket_across_zero() {
    // (-inf, -1] → all at the bin of -1; (-1, 1] → half each side, linearly from 0.
    let h = ClassicHistogram {
        buckets: vec![
            CumulativeBucket {
                le: -1.0,
                count: 3.0,
            },
            CumulativeBucket {
                le: 1.0,
                count: 13.0,
            },
            CumulativeBucket {
                le: f64::INFINITY,
                count: 13.0,
            },
        ],
        count: None,
        sum: None,
    };
    let c = from_classic(&h).unwrap();
    let g = &c.histogram;
    assert_eq!(g.sample_count(), 13);
    assert_eq!(g.count_of(Bin::from_f64(-1.0)), 3);
    let negative: u64 = g
        .bins()
        .filter(|(b, _)| b.upper() <= 0.0)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(negative, 8);
    assert_eq!(c.count, Some(SourceCount::Float(13.0)));
}

#[test]
fn otel_explicit_uses_min_and_max_for_the_open_buckets() {
    let h = ExplicitHistogram {
        explicit_bounds: vec![1.0, 10.0],
        bucket_counts: vec![2, 5, 3],
        count: 10,
        sum: Some(40.0),
        min: Some(0.5),
        max: Some(20.0),
    };
    let c = from_explicit(&h).unwrap();
    let g = &c.histogram;
    assert_eq!(g.sample_count(), 10);
    assert!(g
        .bins()
        .all(|(b, _)| b.lower() >= 0.5 && b.upper() <= 20.0 + 1e-9));
    let last: u64 = g
        .bins()
        .filter(|(b, _)| b.lower() >= 10.0)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(last, 3);
    // Without min/max: (0, 1] linearly and the +inf bucket at the bin of 10.
    let h = ExplicitHistogram {
        min: None,
        max: None,
        ..h
    };
    let g = from_explicit(&h).unwrap().histogram;
    assert_eq!(g.count_of(Bin::new(10, 1).unwrap()), 3);
    let first: u64 = g
        .bins()
        .filter(|(b, _)| b.upper() <= 1.0)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(first, 2);
    assert!(g.bins().all(|(b, _)| b.lower() > 0.0));
    // Bounds one ulp apart: a point.
    let h = ExplicitHistogram {
        explicit_bounds: vec![1.0, f64::from_bits(1.0f64.to_bits() + 1)],
        bucket_counts: vec![0, 9, 0],
        count: 9,
        ..Default::default()
    };
    assert_eq!(
        bins(&from_explicit(&h).unwrap().histogram),
        vec![((10, 0), 9)]
    );
    // No bounds at all and no min/max: values unknown → NaN bin.
    let h = ExplicitHistogram {
        explicit_bounds: vec![],
        bucket_counts: vec![4],
        count: 4,
        ..Default::default()
    };
    assert_eq!(from_explicit(&h).unwrap().histogram.nan_count(), 4);
}

#[test]
fn malformed_inputs_are_typed_errors() {
    let bad = |h: NativeHistogram| from_native(&h).unwrap_err();
    assert_eq!(
        bad(integer_native(9, vec![], vec![], 0)),
        ConvertError::BadSchema { schema: 9 }
    );
    assert_eq!(
        bad(integer_native(0, vec![span(0, 2)], vec![1], 1)),
        ConvertError::SpanLengthMismatch {
            part: Part::Positive,
            spans_total: 2,
            counts: 1
        }
    );
    assert_eq!(
        bad(integer_native(
            0,
            vec![span(0, 1), span(-1, 1)],
            vec![1, 0],
            2
        )),
        ConvertError::BadSpan {
            part: Part::Positive,
            index: 1
        }
    );
    assert_eq!(
        bad(integer_native(0, vec![span(0, 2)], vec![1, -2], 2)),
        ConvertError::BadCount {
            part: Part::Positive,
            index: 1,
            value: -1.0
        }
    );
    assert_eq!(
        bad(integer_native(0, vec![span(0, 2)], vec![i64::MAX, 1], 2)),
        ConvertError::CountOverflow {
            part: Part::Positive,
            index: 1
        }
    );
    let too_many = u32::try_from(SOURCE_BUCKETS_MAX).unwrap() + 1;
    assert!(matches!(
        bad(integer_native(0, vec![span(0, too_many)], vec![], 0)),
        ConvertError::TooManyBuckets { .. }
    ));
    let mut custom = integer_native(-53, vec![span(0, 3)], vec![1, 0, 0], 3);
    custom.custom_values = vec![1.0];
    assert_eq!(
        bad(custom.clone()),
        ConvertError::BadSpan {
            part: Part::Positive,
            index: 0
        }
    );
    custom.custom_values = vec![1.0, 1.0];
    assert_eq!(
        bad(custom),
        ConvertError::BadBound {
            index: 1,
            value: 1.0
        }
    );
    let float = NativeHistogram {
        positive_spans: vec![span(0, 1)],
        counts: NativeCounts::Float {
            count: 1.0,
            zero_count: 0.0,
            positive_counts: vec![f64::NAN],
            negative_counts: vec![],
        },
        ..Default::default()
    };
    assert!(matches!(
        bad(float),
        ConvertError::BadCount {
            part: Part::Positive,
            index: 0,
            ..
        }
    ));
    let e = from_exponential(&ExponentialHistogram {
        scale: 21,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e, ConvertError::BadScale { scale: 21 });
    let e = from_explicit(&ExplicitHistogram {
        explicit_bounds: vec![1.0],
        bucket_counts: vec![1],
        count: 1,
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(
        e,
        ConvertError::BucketCountMismatch {
            bounds: 1,
            counts: 1
        }
    );
    let e = from_classic(&ClassicHistogram {
        buckets: vec![
            CumulativeBucket {
                le: 1.0,
                count: 5.0,
            },
            CumulativeBucket {
                le: 2.0,
                count: 4.0,
            },
        ],
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e, ConvertError::NotCumulative { le: 2.0 });
    assert!(!e.to_string().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Property tests.

fn native_strategy() -> impl Strategy<Value = NativeHistogram> {
    let side = prop::collection::vec((0i32..5, 0u32..6), 0..6).prop_flat_map(|gaps| {
        let n: u32 = gaps.iter().map(|g| g.1).sum();
        (
            Just(gaps),
            prop::collection::vec(0u64..1_000_000, n as usize),
        )
    });
    (
        -4i32..=8,
        -200i32..200,
        side.clone(),
        side,
        0u64..1000,
        0u64..5,
    )
        .prop_map(|(schema, first, (pg, pc), (ng, nc), zero, extra)| {
            let spans = |g: &[(i32, u32)]| -> Vec<Span> {
                g.iter()
                    .enumerate()
                    .map(|(i, &(gap, length))| Span {
                        offset: if i == 0 { first } else { gap },
                        length,
                    })
                    .collect()
            };
            let deltas = |c: &[u64]| -> Vec<i64> {
                let mut prev = 0i64;
                c.iter()
                    .map(|&x| {
                        let d = x as i64 - prev;
                        prev = x as i64;
                        d
                    })
                    .collect()
            };
            let total = pc.iter().chain(&nc).sum::<u64>() + zero + extra;
            NativeHistogram {
                schema,
                positive_spans: spans(&pg),
                negative_spans: spans(&ng),
                counts: NativeCounts::Integer {
                    count: total,
                    zero_count: zero,
                    positive_deltas: deltas(&pc),
                    negative_deltas: deltas(&nc),
                },
                ..Default::default()
            }
        })
}

/// Exact type-7 quantile of sorted samples.
fn exact_quantile(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let j = h.floor() as usize;
    let next = sorted[(j + 1).min(sorted.len() - 1)];
    sorted[j] + (h - j as f64) * (next - sorted[j])
}

fn lognormal_samples(seed: u64, n: usize) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let dist = LogNormal::new(-3.0, 1.5).unwrap();
    let mut v: Vec<f64> = (0..n).map(|_| dist.sample(&mut rng)).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Positive samples bucketed as Prometheus schema `schema` buckets (index i: (b^(i−1), b^i]).
fn prometheus_buckets(samples: &[f64], schema: i32) -> NativeHistogram {
    let per_doubling = 2f64.powi(schema);
    let mut counts: Vec<(i32, u64)> = Vec::new();
    for &x in samples {
        let i = (x.log2() * per_doubling).ceil() as i32;
        match counts.last_mut() {
            Some((last, c)) if *last == i => *c += 1,
            _ => counts.push((i, 1)),
        }
    }
    // One span per bucket with its gap: the simplest valid encoding.
    let mut spans = Vec::new();
    let mut deltas = Vec::new();
    let (mut next, mut prev) = (0i32, 0i64);
    for (k, &(i, c)) in counts.iter().enumerate() {
        let offset = if k == 0 { i } else { i - next };
        spans.push(span(offset, 1));
        next = i + 1;
        deltas.push(c as i64 - prev);
        prev = c as i64;
    }
    integer_native(schema, spans, deltas, samples.len() as u64)
}

/// Positive samples bucketed as OTel scale `scale` buckets (index i: (base^i, base^(i+1)]).
fn otel_buckets(samples: &[f64], scale: i32) -> ExponentialHistogram {
    let per_doubling = 2f64.powi(scale);
    let index = |x: f64| (x.log2() * per_doubling).ceil() as i32 - 1;
    let offset = index(samples[0]);
    let mut counts = vec![0u64; (index(samples[samples.len() - 1]) - offset + 1) as usize];
    for &x in samples {
        counts[(index(x) - offset) as usize] += 1;
    }
    ExponentialHistogram {
        scale,
        count: samples.len() as u64,
        positive: ExponentialBuckets {
            offset,
            bucket_counts: counts,
        },
        ..Default::default()
    }
}

const QS: [f64; 9] = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0];

/// Every type-7 quantile of `converted` lies within the source bucket ratio `base` (widened by
/// llhist's widest bin, 10%) of the samples bracketing the exact quantile.
fn assert_quantiles_close(converted: &Histogram, sorted: &[f64], base: f64) {
    let got = converted.quantiles(&QS, QuantileType::Type7).unwrap();
    let slack = base * 1.1 * (1.0 + 1e-9);
    for (&q, &est) in QS.iter().zip(&got) {
        let h = (sorted.len() - 1) as f64 * q;
        let below = sorted[h.floor() as usize];
        let above = sorted[(h.floor() as usize + 1).min(sorted.len() - 1)];
        assert!(
            est >= below / slack && est <= above * slack,
            "q={q}: estimate {est} outside [{below}, {above}] widened by {slack}"
        );
        let exact = exact_quantile(sorted, q);
        assert!(exact >= below && exact <= above);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn native_conversion_keeps_every_sample(h in native_strategy()) {
        let NativeCounts::Integer { count, .. } = h.counts else { unreachable!() };
        let c = from_native(&h).unwrap();
        prop_assert_eq!(c.histogram.sample_count(), count);
        c.histogram.assert_invariants();
    }

    #[test]
    fn arbitrary_native_input_never_panics(
        schema in prop_oneof![-6i32..=10, Just(-53)],
        spans in prop::collection::vec((any::<i32>(), prop_oneof![0u32..4, any::<u32>()]), 0..4),
        deltas in prop::collection::vec(prop_oneof![-3i64..10, any::<i64>()], 0..10),
        custom_values in prop::collection::vec(-5.0f64..5.0, 0..4),
        count in any::<u64>(),
    ) {
        let spans: Vec<Span> = spans.into_iter().map(|(offset, length)| span(offset, length)).collect();
        let mut h = integer_native(schema, spans, deltas, count);
        h.custom_values = custom_values;
        if let Ok(c) = from_native(&h) {
            prop_assert_eq!(c.histogram.sample_count(), count);
        }
    }

    #[test]
    fn float_counts_keep_the_rounded_total(
        counts in prop::collection::vec(0.0f64..50.0, 1..40),
        schema in -4i32..=8,
        zero in 0.0f64..3.0,
    ) {
        let total: f64 = counts.iter().sum::<f64>() + zero;
        let h = NativeHistogram {
            schema,
            positive_spans: vec![span(-10, counts.len() as u32)],
            counts: NativeCounts::Float {
                count: total,
                zero_count: zero,
                positive_counts: counts.clone(),
                negative_counts: vec![],
            },
            ..Default::default()
        };
        let c = from_native(&h).unwrap();
        // The running float total in conversion order (zero first) is the one rounded.
        let running = counts.iter().fold(zero, |a, &x| a + x);
        prop_assert_eq!(c.histogram.sample_count(), running.round() as u64);
    }

    #[test]
    fn exponential_and_explicit_keep_every_sample(
        scale in -10i32..=20,
        offset in -3000i32..3000,
        pos in prop::collection::vec(0u64..u64::MAX / 4096, 0..20),
        neg in prop::collection::vec(0u64..1000, 0..20),
        bounds in prop::collection::btree_set(-1000i32..1000, 0..12),
    ) {
        let total: u64 = pos.iter().chain(&neg).sum();
        let h = ExponentialHistogram {
            scale,
            count: total,
            positive: ExponentialBuckets { offset, bucket_counts: pos.clone() },
            negative: ExponentialBuckets { offset: -offset, bucket_counts: neg.clone() },
            ..Default::default()
        };
        prop_assert_eq!(from_exponential(&h).unwrap().histogram.sample_count(), total);
        let explicit_bounds: Vec<f64> = bounds.iter().map(|&b| f64::from(b) / 7.0).collect();
        let bucket_counts: Vec<u64> =
            (0..=explicit_bounds.len()).map(|i| pos.get(i).copied().unwrap_or(3)).collect();
        let count = bucket_counts.iter().sum();
        let e = ExplicitHistogram { explicit_bounds, bucket_counts, count, ..Default::default() };
        prop_assert_eq!(from_explicit(&e).unwrap().histogram.sample_count(), count);
        // The same bounds as classic cumulative `le` buckets (small counts: exact in f64).
        let mut cumulative = 0.0;
        let mut buckets = Vec::new();
        for (i, le) in e.explicit_bounds.iter().chain([&f64::INFINITY]).enumerate() {
            cumulative += neg.get(i).copied().unwrap_or(2) as f64;
            buckets.push(CumulativeBucket { le: *le, count: cumulative });
        }
        let classic = ClassicHistogram { buckets, count: None, sum: None };
        prop_assert_eq!(
            from_classic(&classic).unwrap().histogram.sample_count(),
            cumulative as u64
        );
    }

    #[test]
    fn prometheus_quantiles_within_bucket_width(
        seed in any::<u64>(),
        schema in 0i32..=8,
        n in 1usize..3000,
    ) {
        let samples = lognormal_samples(seed, n);
        let c = from_native(&prometheus_buckets(&samples, schema)).unwrap();
        prop_assert_eq!(c.histogram.sample_count(), n as u64);
        assert_quantiles_close(&c.histogram, &samples, 2f64.powf(2f64.powi(-schema)));
    }

    #[test]
    fn otel_quantiles_within_bucket_width(
        seed in any::<u64>(),
        scale in -2i32..=10,
        n in 1usize..3000,
    ) {
        let samples = lognormal_samples(seed, n);
        let c = from_exponential(&otel_buckets(&samples, scale)).unwrap();
        prop_assert_eq!(c.histogram.sample_count(), n as u64);
        assert_quantiles_close(&c.histogram, &samples, 2f64.powf(2f64.powi(-scale)));
    }
}

// ---------------------------------------------------------------------------------------------
// Split vs midpoint, as spec §11 measured them.

/// The midpoint method: each bucket's samples at its harmonic midpoint 2ab/(a+b).
fn midpoint_conversion(h: &NativeHistogram) -> Histogram {
    let NativeCounts::Integer {
        positive_deltas, ..
    } = &h.counts
    else {
        unreachable!()
    };
    let step = 2f64.powi(-h.schema);
    let mut out = Histogram::new();
    let (mut next, mut count) = (0i64, 0i64);
    for (k, (s, d)) in h.positive_spans.iter().zip(positive_deltas).enumerate() {
        let i = if k == 0 {
            i64::from(s.offset)
        } else {
            next + i64::from(s.offset)
        };
        next = i + 1;
        count += d;
        let (a, b) = (((i - 1) as f64 * step).exp2(), (i as f64 * step).exp2());
        out.insert_n(2.0 * a * b / (a + b), count as u64);
    }
    out
}

/// Signed relative error of each type-7 quantile of `h` against the samples' exact quantile.
fn relative_errors(h: &Histogram, sorted: &[f64], qs: &[f64]) -> Vec<f64> {
    let got = h.quantiles(qs, QuantileType::Type7).unwrap();
    qs.iter()
        .zip(got)
        .map(|(&q, est)| est / exact_quantile(sorted, q) - 1.0)
        .collect()
}

fn worst(errors: &[f64]) -> f64 {
    errors.iter().fold(0.0, |a, e| a.max(e.abs()))
}

/// Spec §11's measurement: 200k lognormal latencies (μ=−3, σ=1.5) in Prometheus schema 3 and 8
/// buckets, converted by the log-width split and by the midpoint method, against the exact
/// quantiles — and against llhist fed the raw samples ("direct"), whose own bin interpolation is
/// the floor any conversion can reach. Run with `--nocapture` for the table in FORMAT.md.
#[test]
fn split_beats_midpoint_on_200k_lognormal_latencies() {
    let samples = lognormal_samples(20_261_122, 200_000);
    let qs = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999];
    let mut direct = Histogram::new();
    for &x in &samples {
        direct.insert(x);
    }
    let e_direct = relative_errors(&direct, &samples, &qs);
    // (schema, split worst, split's largest excess over direct, midpoint worst at least)
    for (schema, split_max, excess_max, midpoint_min) in
        [(3, 0.007, 0.003, 0.02), (8, 0.004, 0.0002, 0.001)]
    {
        let source = prometheus_buckets(&samples, schema);
        let split = from_native(&source).unwrap().histogram;
        let midpoint = midpoint_conversion(&source);
        assert_eq!(split.sample_count(), 200_000);
        assert_eq!(midpoint.sample_count(), 200_000);
        let e_split = relative_errors(&split, &samples, &qs);
        let e_mid = relative_errors(&midpoint, &samples, &qs);
        for (i, q) in qs.iter().enumerate() {
            println!(
                "schema {schema} q={q}: split {:+.3}% midpoint {:+.3}% direct {:+.3}%",
                e_split[i] * 100.0,
                e_mid[i] * 100.0,
                e_direct[i] * 100.0
            );
        }
        let excess = e_split
            .iter()
            .zip(&e_direct)
            .map(|(s, d)| (s - d).abs())
            .fold(0.0, f64::max);
        println!(
            "schema {schema}: worst split {:.3}%, midpoint {:.3}%, direct {:.3}%; \
             split - direct <= {:.3}%",
            worst(&e_split) * 100.0,
            worst(&e_mid) * 100.0,
            worst(&e_direct) * 100.0,
            excess * 100.0
        );
        assert!(worst(&e_split) <= split_max, "schema {schema}: {e_split:?}");
        assert!(
            excess <= excess_max,
            "schema {schema}: {e_split:?} vs {e_direct:?}"
        );
        assert!(worst(&e_mid) >= midpoint_min, "schema {schema}: {e_mid:?}");
    }
}
