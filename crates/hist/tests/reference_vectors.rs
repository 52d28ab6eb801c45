//! Every case, bin and merge in `testdata/llhist-reference.json` (produced by libcircllhist, the
//! C reference) must come out bit for bit. Two deliberate differences are asserted explicitly:
//! minimal count widths where C writes [2^32, 2^36) and [2^48, 2^52) one byte short, and NaN-bin
//! samples never counted as "above" a threshold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hist::{Bin, Histogram, QuantileType};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/llhist-reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A `[number, "0x<bits>"]` pair → the exact double.
fn exact(v: &Value) -> f64 {
    let hex = v[1].as_str().unwrap().trim_start_matches("0x");
    f64::from_bits(u64::from_str_radix(hex, 16).unwrap())
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        _ => v.as_f64().unwrap(),
    }
}

fn assert_bits(what: &str, ours: f64, theirs: f64) {
    // C's NaN is 0x7fff_ffff_ffff_ffff; any NaN is the same answer.
    if theirs.is_nan() {
        assert!(ours.is_nan(), "{what}: expected NaN, got {ours:e}");
    } else {
        assert_eq!(
            ours.to_bits(),
            theirs.to_bits(),
            "{what}: ours {ours:e}, C {theirs:e}"
        );
    }
}

fn build(inserts: &Value) -> Histogram {
    let mut h = Histogram::new();
    for ins in inserts.as_array().unwrap() {
        match ins[0].as_str().unwrap() {
            "d" => h.insert_n(number(&ins[1]), ins[2].as_u64().unwrap()),
            "i" => h.insert_intscale(
                ins[1].as_i64().unwrap(),
                ins[2].as_i64().unwrap() as i32,
                ins[3].as_u64().unwrap(),
            ),
            other => panic!("unknown insert kind {other}"),
        }
    }
    h
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// C writes counts in [2^32, 2^36) and [2^48, 2^52) one byte too short.
fn c_width_bug(count: u64) -> bool {
    (1u64 << 32..1u64 << 36).contains(&count) || (1u64 << 48..1u64 << 52).contains(&count)
}

fn check(name: &str, h: &Histogram, expected: &Value, qs: &[f64], thresholds: &[f64]) {
    let bins: Vec<(i64, i64, u64)> = h
        .bins()
        .map(|(b, c)| (i64::from(b.val()), i64::from(b.exp()), c))
        .collect();
    let want: Vec<(i64, i64, u64)> = expected["bins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b[0].as_i64().unwrap(),
                b[1].as_i64().unwrap(),
                b[2].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(bins, want, "{name}: bins");
    assert_eq!(
        h.bin_count() as u64,
        expected["bin_count"].as_u64().unwrap(),
        "{name}"
    );
    assert_eq!(
        h.sample_count(),
        expected["sample_count"].as_u64().unwrap(),
        "{name}"
    );

    let c_bug = h.bins().any(|(_, c)| c_width_bug(c));
    if c_bug {
        // Ours: minimal widths, lossless. C's bytes lose the short-written bins on read.
        assert_ne!(
            hex(&h.to_bytes()),
            expected["hex"].as_str().unwrap(),
            "{name}"
        );
        let from_c = Histogram::decode(&unhex(expected["hex"].as_str().unwrap())).unwrap();
        let survivors = Histogram::from_bins(h.bins().filter(|&(_, c)| !c_width_bug(c)));
        assert_eq!(
            from_c, survivors,
            "{name}: reading C's bytes drops exactly the buggy bins"
        );
    } else {
        assert_eq!(
            hex(&h.to_bytes()),
            expected["hex"].as_str().unwrap(),
            "{name}: hex"
        );
        assert_eq!(
            h.to_base64(),
            expected["b64"].as_str().unwrap(),
            "{name}: base64"
        );
    }
    assert_eq!(
        &Histogram::decode(&h.to_bytes()).unwrap(),
        h,
        "{name}: binary round trip"
    );
    assert_eq!(
        &Histogram::from_base64(&h.to_base64()).unwrap(),
        h,
        "{name}: b64 round trip"
    );

    let text_c: Vec<String> = serde_json::from_value(expected["text_c"].clone()).unwrap();
    let text_go: Vec<String> = serde_json::from_value(expected["text_go"].clone()).unwrap();
    assert_eq!(h.to_c_text(), text_c, "{name}: C text");
    assert_eq!(h.to_text(), text_go, "{name}: Go text");
    let reparsed = Histogram::from_text_entries(text_go.iter().map(String::as_str)).unwrap();
    assert_eq!(&reparsed, h, "{name}: Go text re-parses");
    let reparsed = Histogram::from_text_entries(text_c.iter().map(String::as_str)).unwrap();
    assert_eq!(&reparsed, h, "{name}: C text re-parses");

    assert_bits(&format!("{name}: mean"), h.mean(), exact(&expected["mean"]));
    assert_bits(&format!("{name}: sum"), h.sum(), exact(&expected["sum"]));
    assert_bits(
        &format!("{name}: stddev"),
        h.stddev(),
        exact(&expected["stddev"]),
    );

    for (ty, key) in [(QuantileType::Type1, "q1"), (QuantileType::Type7, "q7")] {
        let ours = h.quantiles(qs, ty).unwrap();
        for (i, (o, e)) in ours
            .iter()
            .zip(expected[key].as_array().unwrap())
            .enumerate()
        {
            let what = format!("{name}: {key}[{}]", qs[i]);
            let theirs = exact(e);
            if theirs.is_infinite() {
                // Deliberate difference: C computes count + 1 in u64, which wraps to 0 for a
                // saturated bin and divides by it. Ours stays inside the bin that holds the rank.
                let saturated = h.bins().find(|&(_, c)| c == u64::MAX).unwrap().0;
                assert!(
                    saturated.lower() <= *o && *o <= saturated.upper(),
                    "{what}: {o}"
                );
            } else {
                assert_bits(&what, *o, theirs);
            }
        }
    }
    let inv = h.inverse_quantiles(thresholds).unwrap();
    // C sums the finite counts in u64 for inverse quantiles; past 2^64 the total wraps.
    let finite: Vec<u64> = h
        .bins()
        .filter(|(b, _)| !b.is_nan())
        .map(|(_, c)| c)
        .collect();
    let wrapped_total = finite.iter().fold(0u64, |a, &c| a.wrapping_add(c));
    let overflowed = finite
        .iter()
        .try_fold(0u64, |a, &c| a.checked_add(c))
        .is_none();
    let total = h
        .bins()
        .filter(|(b, _)| !b.is_nan())
        .fold(0.0, |a, (_, c)| a + c as f64);
    for (i, (o, e)) in inv
        .iter()
        .zip(expected["inverse_q"].as_array().unwrap())
        .enumerate()
    {
        let what = format!("{name}: inverse_q[{}]", thresholds[i]);
        let theirs = exact(e);
        if overflowed && !(*o == theirs && (theirs == 0.0 || theirs == 1.0)) {
            // Deliberate difference: the same numerator, divided by the true total.
            let (ours_num, c_num) = (o * total, theirs * wrapped_total as f64);
            assert!(
                (ours_num - c_num).abs() <= 1e-9 * c_num,
                "{what}: {ours_num} vs {c_num}"
            );
        } else {
            assert_bits(&what, *o, theirs);
        }
    }
    let rc = &expected["rc"];
    assert_eq!(
        (
            rc["q1"].as_i64(),
            rc["q7"].as_i64(),
            rc["inverse_q"].as_i64()
        ),
        (Some(0), Some(0), Some(0))
    );

    let counts = &expected["counts"];
    let nan = h.nan_count();
    for (i, &t) in thresholds.iter().enumerate() {
        let ours = h.threshold_counts(t);
        let c = |k: &str| counts[k][i].as_u64().unwrap();
        let at = format!("{name}: threshold {t}");
        if overflowed {
            // Deliberate difference: C's running counts wrap past 2^64; ours saturate.
            let tb = Bin::from_f64(t);
            let sum = |keep: &dyn Fn(Bin) -> bool| -> u128 {
                h.bins()
                    .filter(|&(b, _)| !b.is_nan() && keep(b))
                    .map(|(_, c)| c as u128)
                    .sum()
            };
            let sat = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
            let (le, lt, all) = (sum(&|b| b <= tb), sum(&|b| b < tb), sum(&|_| true));
            assert_eq!(ours.below_inclusive, sat(le), "{at}");
            assert_eq!(c("below_inclusive"), le as u64, "{at}: C wraps");
            assert_eq!(ours.below_exclusive, sat(lt), "{at}");
            assert_eq!(c("below_exclusive"), lt as u64, "{at}: C wraps");
            assert_eq!(
                ours.above_inclusive,
                sat(all).saturating_sub(sat(lt)),
                "{at}"
            );
            assert_eq!(
                ours.above_exclusive,
                sat(all).saturating_sub(sat(le)),
                "{at}"
            );
            assert_eq!(ours.nearby, c("nearby"), "{at}: nearby");
            continue;
        }
        assert_eq!(
            ours.below_inclusive,
            c("below_inclusive"),
            "{at}: below_inclusive"
        );
        assert_eq!(ours.below_inclusive, c("below"), "{at}: below");
        assert_eq!(
            ours.below_exclusive,
            c("below_exclusive"),
            "{at}: below_exclusive"
        );
        assert_eq!(ours.nearby, c("nearby"), "{at}: nearby");
        // Deliberate difference: C starts "above" from sample_count, which includes NaN samples.
        let c_above = |k: &str| c(k).saturating_sub(nan);
        assert_eq!(
            ours.above_inclusive,
            c_above("above_inclusive"),
            "{at}: above_inclusive"
        );
        assert_eq!(ours.above_inclusive, c_above("above"), "{at}: above");
        assert_eq!(
            ours.above_exclusive,
            c_above("above_exclusive"),
            "{at}: above_exclusive"
        );
    }
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(number).collect()
}

#[test]
fn every_case_matches_c() {
    let v = vectors();
    let (qs, ts) = (floats(&v["quantiles"]), floats(&v["thresholds"]));
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let h = build(&case["inserts"]);
        check(name, &h, case, &qs, &ts);
    }
}

#[test]
fn the_nan_quirk_is_really_exercised() {
    let v = vectors();
    let case = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "nan_inf")
        .unwrap();
    let h = build(&case["inserts"]);
    assert_eq!(h.nan_count(), 4);
    assert_eq!(
        case["counts"]["above"][0].as_u64(),
        Some(7),
        "C counts NaN as above"
    );
    assert_eq!(h.threshold_counts(-1000.0).above_inclusive, 3, "we do not");
}

#[test]
fn every_merge_and_subtract_matches_c() {
    let v = vectors();
    let (qs, ts) = (floats(&v["quantiles"]), floats(&v["thresholds"]));
    let case = |name: &str| {
        let c = v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        build(&c["inserts"])
    };
    let merges = v["merges"].as_array().unwrap();
    assert_eq!(merges.len(), 4);
    for m in merges {
        let (a, b) = (
            case(m["a"].as_str().unwrap()),
            case(m["b"].as_str().unwrap()),
        );
        let name = format!("merge {} + {}", m["a"], m["b"]);
        let mut merged = a.clone();
        merged.merge(&b);
        check(&name, &merged, &m["merged"], &qs, &ts);
        assert_eq!(
            Histogram::merge_many(&[&a, &b]),
            merged,
            "{name}: merge_many"
        );
        assert_eq!(
            Histogram::merge_many(&[&b, &a]),
            merged,
            "{name}: commutative"
        );

        let mut minus = merged.clone();
        let exact_ok = minus.subtract(&b);
        let c_rc = m["merged_minus_b_rc"].as_i64().unwrap();
        assert_eq!(exact_ok, c_rc == 0, "{name}: subtract flag");
        let c_b64 = m["merged_minus_b_b64"].as_str().unwrap();
        if minus.bins().any(|(_, c)| c_width_bug(c)) {
            let survivors = Histogram::from_bins(minus.bins().filter(|&(_, c)| !c_width_bug(c)));
            let from_c = Histogram::from_base64(c_b64).unwrap();
            assert_eq!(
                from_c, survivors,
                "{name}: merged − b, less C's short-written bins"
            );
        } else {
            assert_eq!(minus.to_base64(), c_b64, "{name}: merged − b");
        }
    }
}

#[test]
fn every_reference_bin_matches_c() {
    let v = vectors();
    let buckets = v["buckets"].as_array().unwrap();
    assert!(buckets.len() >= 30);
    for b in buckets {
        let bin = if let Some(is) = b.get("intscale") {
            Bin::from_intscale(is[0].as_i64().unwrap(), is[1].as_i64().unwrap() as i32)
        } else {
            let value = exact(&b["value"]);
            assert_eq!(Bin::from_f64(value), Bin::from_f64_reference(value));
            Bin::from_f64(value)
        };
        let what = format!("bin of {b}");
        assert_eq!(
            i64::from(bin.val()),
            b["val"].as_i64().unwrap(),
            "{what}: val"
        );
        assert_eq!(
            i64::from(bin.exp()),
            b["exp"].as_i64().unwrap(),
            "{what}: exp"
        );
        assert_eq!(bin.c_text(), b["string"].as_str().unwrap(), "{what}: text");
        if b.get("edge").is_some() {
            assert_bits(&format!("{what}: edge"), bin.edge(), exact(&b["edge"]));
            assert_bits(&format!("{what}: width"), bin.width(), exact(&b["width"]));
            assert_bits(
                &format!("{what}: midpoint"),
                bin.midpoint(),
                exact(&b["midpoint"]),
            );
        }
    }
}
