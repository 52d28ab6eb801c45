//! Property tests: the algebra of merges, round trips of every encoding, and the agreement of the
//! fast paths with the reference algorithm on arbitrary input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::{Bin, Histogram, QuantileType, Recorder};
use proptest::prelude::*;

/// Values that hit every kind of bin: specials, extremes, edges and ordinary magnitudes.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => (-30.0f64..30.0).prop_map(|e| 10f64.powf(e)),
        2 => (-30.0f64..30.0).prop_map(|e| -(10f64.powf(e))),
        2 => any::<f64>(),
        1 => (10i32..100, -130i32..130).prop_map(|(v, e)| f64::from(v) * 10f64.powi(e - 1)),
        1 => prop::sample::select(vec![
            0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e-128, 9.9e-129, 1e128,
            f64::MIN_POSITIVE, 5e-324, f64::MAX, 0.11, 0.3, 1.0, 99.99,
        ]),
    ]
}

fn histogram() -> impl Strategy<Value = Histogram> {
    prop::collection::vec((value(), 1u64..1_000), 0..60).prop_map(|pairs| {
        let mut h = Histogram::new();
        for (v, n) in pairs {
            h.insert_n(v, n);
        }
        h
    })
}

fn merged(a: &Histogram, b: &Histogram) -> Histogram {
    let mut out = a.clone();
    out.merge(b);
    out
}

/// The integer-scale rule written the slow way, straight from the spec.
fn intscale_model(value: i64, scale: i32) -> Bin {
    if value == 0 {
        return Bin::ZERO;
    }
    let mut scale = i64::from(scale) + 1;
    let negative = value < 0;
    let mut v = if value == i64::MIN {
        i64::MAX
    } else {
        value.abs()
    };
    if v < 10 {
        v *= 10;
        scale -= 1;
    }
    while v >= 100 {
        v /= 10;
        scale += 1;
    }
    if scale < -128 {
        return Bin::ZERO;
    }
    if scale > 127 {
        return Bin::NAN;
    }
    let v = if negative { -v } else { v };
    Bin::new(v as i8, scale as i8).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn key_vecs_round_trip(h in histogram()) {
        let (keys, counts) = h.clone().into_key_vecs();
        prop_assert_eq!(keys.as_slice(), h.keys());
        prop_assert_eq!(counts.as_slice(), h.counts());
        prop_assert_eq!(Histogram::from_sorted_key_vecs(keys, counts), h);
    }

    #[test]
    fn fast_bin_equals_reference_bin(bits in any::<u64>()) {
        let d = f64::from_bits(bits);
        prop_assert_eq!(Bin::from_f64(d), Bin::from_f64_reference(d));
    }

    #[test]
    fn fast_bin_equals_reference_bin_on_values(d in value()) {
        prop_assert_eq!(Bin::from_f64(d), Bin::from_f64_reference(d));
    }

    #[test]
    fn intscale_matches_the_spec_loop(v in any::<i64>(), scale in -300i32..300) {
        prop_assert_eq!(Bin::from_intscale(v, scale), intscale_model(v, scale));
    }

    #[test]
    fn merge_is_commutative(a in histogram(), b in histogram()) {
        prop_assert_eq!(merged(&a, &b), merged(&b, &a));
    }

    #[test]
    fn merge_is_associative(a in histogram(), b in histogram(), c in histogram()) {
        let left = merged(&merged(&a, &b), &c);
        prop_assert_eq!(&left, &merged(&a, &merged(&b, &c)));
        prop_assert_eq!(&left, &Histogram::merge_many(&[&a, &b, &c]));
        prop_assert_eq!(left.sample_count(), a.sample_count() + b.sample_count() + c.sample_count());
    }

    #[test]
    fn subtract_undoes_merge(a in histogram(), b in histogram()) {
        let mut m = merged(&a, &b);
        prop_assert!(m.subtract(&b));
        prop_assert_eq!(m, a);
    }

    #[test]
    fn binary_and_base64_round_trip(h in histogram()) {
        let bytes = h.to_bytes();
        prop_assert_eq!(bytes.len(), h.encoded_len());
        prop_assert_eq!(&Histogram::decode(&bytes).unwrap(), &h);
        let b64 = h.to_base64();
        prop_assert_eq!(&Histogram::from_base64(&b64).unwrap(), &h);
        prop_assert_eq!(&Histogram::from_base64(b64.trim_end_matches('=')).unwrap(), &h);
    }

    #[test]
    fn text_forms_round_trip(h in histogram()) {
        let go = h.to_text();
        prop_assert_eq!(&Histogram::from_text_entries(go.iter().map(String::as_str)).unwrap(), &h);
        let c = h.to_c_text();
        prop_assert_eq!(&Histogram::from_text_entries(c.iter().map(String::as_str)).unwrap(), &h);
        prop_assert_eq!(&Histogram::from_json_map(&h.to_json_map()).unwrap(), &h);
    }

    #[test]
    fn decoding_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(h) = Histogram::decode(&bytes) {
            h.assert_invariants();
            prop_assert_eq!(Histogram::decode(&h.to_bytes()).unwrap(), h);
        }
    }

    #[test]
    fn shuffled_and_duplicated_bins_decode_to_the_merge(h in histogram(), seed in any::<u64>()) {
        // Write the bins twice, in a scrambled order: readers must merge them.
        let mut bins: Vec<(Bin, u64)> = h.bins().chain(h.bins()).collect();
        let n = bins.len();
        for i in 0..n {
            let j = (seed.wrapping_mul(i as u64 + 1) % n as u64) as usize;
            bins.swap(i, j);
        }
        let mut bytes = (n as u16).to_be_bytes().to_vec();
        for (b, c) in &bins {
            bytes.extend_from_slice(&[b.val() as u8, b.exp() as u8, 7]);
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        prop_assert_eq!(Histogram::decode(&bytes).unwrap(), merged(&h, &h));
    }

    #[test]
    fn quantiles_are_monotone(h in histogram(), mut qs in prop::collection::vec(0.0f64..=1.0, 1..20)) {
        qs.sort_by(f64::total_cmp);
        for ty in [QuantileType::Type1, QuantileType::Type7] {
            let out = h.quantiles(&qs, ty).unwrap();
            if h.finite_count() == 0 {
                prop_assert!(out.iter().all(|x| x.is_nan()));
                continue;
            }
            prop_assert!(out.windows(2).all(|w| w[0] <= w[1]), "{:?} -> {:?}", qs, out);
        }
    }

    #[test]
    fn inverse_quantiles_are_monotone_shares(h in histogram(), mut ts in prop::collection::vec(-1e6f64..1e6, 1..20)) {
        ts.sort_by(f64::total_cmp);
        let out = h.inverse_quantiles(&ts).unwrap();
        if h.finite_count() == 0 {
            prop_assert!(out.iter().all(|x| x.is_nan()));
        } else {
            prop_assert!(out.iter().all(|x| (0.0..=1.0).contains(x)));
            prop_assert!(out.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    /// The shares equal a bin-by-bin model: every bin wholly below a threshold counts, the
    /// bin holding it counts in proportion (the zero bin not at all), in the same doubles.
    #[test]
    fn inverse_quantiles_equal_a_bin_by_bin_model(
        h in histogram(),
        mut ts in prop::collection::vec(prop_oneof![value(), -1e3f64..1e3], 1..6),
    ) {
        ts.retain(|t| !t.is_nan());
        ts.sort_by(f64::total_cmp);
        let bins: Vec<(Bin, u64)> = h.bins().filter(|(b, _)| !b.is_nan()).collect();
        let total = bins.iter().fold(0.0, |a, &(_, c)| a + c as f64);
        let model: Vec<f64> = ts
            .iter()
            .map(|&t| {
                if total == 0.0 {
                    return f64::NAN;
                }
                let mut below = 0.0;
                for &(b, c) in &bins {
                    let (lo, hi) = if b.is_zero() { (-1e-128, 1e-128) } else { (b.lower(), b.upper()) };
                    if t < lo {
                        return below / total;
                    }
                    if t < hi {
                        let inside = if b.is_zero() { 0.0 } else { (t - lo) / (hi - lo) * c as f64 };
                        return (below + inside) / total;
                    }
                    below += c as f64;
                }
                1.0
            })
            .collect();
        let got = h.inverse_quantiles(&ts).unwrap();
        prop_assert_eq!(got.len(), model.len());
        for (g, m) in got.iter().zip(&model) {
            prop_assert!(g.to_bits() == m.to_bits(), "{:?}: {:?} vs model {:?}", ts, got, model);
        }
    }

    #[test]
    fn threshold_counts_partition_the_finite_samples(h in histogram(), t in value()) {
        let c = h.threshold_counts(t);
        let finite = h.finite_count();
        if !t.is_nan() {
            prop_assert_eq!(c.below_inclusive + c.above_exclusive, finite);
            prop_assert_eq!(c.below_exclusive + c.above_inclusive, finite);
            prop_assert!(c.below_exclusive <= c.below_inclusive);
        }
    }

    #[test]
    fn insert_n_equals_repeated_insert(v in value(), k in 0u64..50) {
        let mut once = Histogram::new();
        once.insert_n(v, k);
        let mut many = Histogram::new();
        for _ in 0..k {
            many.insert(v);
        }
        prop_assert_eq!(once, many);
    }

    #[test]
    fn recorder_agrees_with_sorted_form(values in prop::collection::vec((value(), 1u64..5), 0..200)) {
        let mut r = Recorder::new();
        let mut h = Histogram::new();
        for &(v, n) in &values {
            r.insert_n(v, n);
            h.insert_n(v, n);
        }
        prop_assert_eq!(r.to_histogram(), h.clone());
        prop_assert_eq!(r.sample_count(), h.sample_count());
        let mut again = Recorder::from_histogram(&h);
        again.merge_recorder(&r);
        prop_assert_eq!(again.to_histogram(), merged(&h, &h));
        r.clear();
        prop_assert!(r.to_histogram().is_empty());
    }

    #[test]
    fn recorder_intscale_agrees_with_sorted_form(vs in prop::collection::vec((any::<i64>(), -20i32..20), 0..100)) {
        let mut r = Recorder::new();
        let mut h = Histogram::new();
        for &(v, s) in &vs {
            r.insert_intscale(v, s);
            h.insert_intscale(v, s, 1);
        }
        prop_assert_eq!(r.to_histogram(), h);
    }
}

#[test]
fn every_bin_edge_text_reparses_to_its_bin() {
    let mut checked = 0;
    for val in (-99i8..=-10).chain(10..=99) {
        for exp in i8::MIN..=i8::MAX {
            let bin = Bin::new(val, exp).unwrap();
            let (parsed, count) = hist::parse_entry(&format!("H[{}]=3", bin.edge_text())).unwrap();
            assert_eq!((parsed, count), (bin, 3), "{}", bin.edge_text());
            let (parsed, _) = hist::parse_entry(&format!("{}=1", bin.c_text())).unwrap();
            assert_eq!(parsed, bin, "{}", bin.c_text());
            checked += 1;
        }
    }
    assert_eq!(checked, 46_080);
}

#[test]
fn bad_input_gets_a_typed_error_naming_the_place() {
    use hist::DecodeError;
    assert_eq!(
        Histogram::decode(&[0]),
        Err(DecodeError::Truncated {
            offset: 0,
            needed: 2,
            available: 1
        })
    );
    // Declares two bins, holds one.
    let err = Histogram::decode(&[0, 2, 10, 0, 0, 1]).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Truncated {
            offset: 6,
            needed: 3,
            available: 0
        }
    );
    assert_eq!(
        Histogram::decode(&[0, 1, 10, 0, 8, 1]),
        Err(DecodeError::BadCountWidth {
            offset: 4,
            width: 8
        })
    );
    assert_eq!(
        Histogram::decode(&[0, 1, 10, 0, 0, 1, 99]),
        Err(DecodeError::TrailingBytes { offset: 6, len: 7 })
    );
    assert_eq!(
        Histogram::from_base64("AAEK*AAB"),
        Err(DecodeError::Base64 { position: 4 })
    );
    let msg = Histogram::from_base64("AA").unwrap_err().to_string();
    assert!(msg.contains("truncated"), "{msg}");
    let e = hist::parse_entry("H[abc]=5").unwrap_err();
    assert_eq!(e.expected, "a number");
    let e = hist::parse_entry("H[1.0]=-5").unwrap_err();
    assert_eq!(
        (e.position, e.expected),
        (7, "a non-negative integer count")
    );
    assert!(Histogram::from_json_map("{\"1.0\":5,}").is_err());
    assert!(Histogram::from_json_map("{\"1.0\" 5}").is_err());
}

#[test]
fn invalid_and_zero_bins_are_dropped_but_nan_is_kept() {
    // (5, 0) invalid, (20, 0) count 0, (-1, 0) NaN with 2, (10, 0) with 1.
    let bytes = [0, 4, 5, 0, 0, 9, 20, 0, 0, 0, 0xff, 0, 0, 2, 10, 0, 0, 1];
    let h = Histogram::decode(&bytes).unwrap();
    let bins: Vec<(i8, i8, u64)> = h.bins().map(|(b, c)| (b.val(), b.exp(), c)).collect();
    assert_eq!(bins, vec![(-1, 0, 2), (10, 0, 1)]);
}

#[test]
fn one_sample_quantiles_sit_in_the_middle_of_the_bin() {
    let mut h = Histogram::new();
    h.insert(1.04);
    for ty in [QuantileType::Type1, QuantileType::Type7] {
        let q = h.quantiles(&[0.0, 0.5, 1.0], ty).unwrap();
        assert!(q.iter().all(|&x| (x - 1.05).abs() < 1e-12), "{q:?}");
    }
    assert!(h.quantiles(&[0.5, 0.1], QuantileType::Type1).is_err());
    assert!(h.quantiles(&[1.5], QuantileType::Type1).is_err());
}

#[test]
fn counts_saturate_instead_of_wrapping() {
    let mut h = Histogram::new();
    h.insert_n(1.0, u64::MAX);
    h.insert_n(1.0, 5);
    assert_eq!(h.sample_count(), u64::MAX);
    let mut r = Recorder::new();
    r.insert_n(1.0, u64::MAX);
    r.insert_n(1.0, u64::MAX);
    assert_eq!(r.to_histogram(), h);
}
