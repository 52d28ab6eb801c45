//! Instruction-count probe for the recorder hot path: `valgrind --tool=cachegrind` on two sample
//! counts gives instructions per insert as the difference. Usage: insert_loop <f64|ns|sorted> <n>
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[2].parse().unwrap();
    // A cheap deterministic lognormal-ish stream: exp of a sum of uniforms.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        (-3.0 + 1.5 * 3.4 * (u - 0.5)).exp()
    };
    let values: Vec<f64> = (0..n).map(|_| next()).collect();
    let mut r = hist::Recorder::new();
    let mut h = hist::Histogram::new();
    match args[1].as_str() {
        "f64" => values.iter().for_each(|&v| r.insert(black_box(v))),
        "ns" => values
            .iter()
            .for_each(|&v| r.insert_intscale(black_box((v * 1e9) as i64), -9)),
        "sorted" => values.iter().for_each(|&v| h.insert(black_box(v))),
        "encode" | "decode" | "b64enc" | "b64dec" | "quantiles" => {
            values.iter().for_each(|&v| r.insert(v));
            let big = r.to_histogram();
            let (bytes, b64) = (big.to_bytes(), big.to_base64());
            let mut out = [0.0; 7];
            let qs = [0.0, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];
            let ops: usize = args[3].parse().unwrap();
            for _ in 0..ops {
                match args[1].as_str() {
                    "encode" => drop(black_box(black_box(&big).to_bytes())),
                    "decode" => drop(black_box(hist::Histogram::decode(black_box(&bytes)))),
                    "b64enc" => drop(black_box(black_box(&big).to_base64())),
                    "b64dec" => drop(black_box(hist::Histogram::from_base64(black_box(&b64)))),
                    _ => drop(big.quantiles_into(&qs, hist::QuantileType::Type7, &mut out)),
                }
            }
            r.clear();
        }
        "none" => values.iter().for_each(|&v| {
            black_box(v);
        }),
        _ => panic!("mode"),
    }
    println!("{}", r.sample_count() + h.sample_count());
}
