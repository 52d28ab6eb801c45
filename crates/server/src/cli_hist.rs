//! `strata hist …`: encode, inspect, merge and decode log-linear histograms from the shell.
//!
//! Output is JSON on stdout; floats are printed in shortest round-trip form and the non-finite
//! ones as the strings "NaN", "Infinity", "-Infinity" (JSON has no literal for them). Bad input
//! gets one line on stderr naming what was wrong and exit code 2.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use hist::{Histogram, QuantileType, Recorder};
use serde_json::{json, Value};

/// Lines longer than this on `hist encode`'s stdin are rejected rather than buffered.
const LINE_BYTES_MAX: usize = 4096;

#[derive(Subcommand)]
pub enum HistCommand {
    /// Read values on stdin and print the base64 histogram of them.
    ///
    /// Each line is `value` or `value count` (with --intscale: `mantissa scale [count]`, the value
    /// mantissa·10^scale binned exactly in integers). Blank lines and lines starting with `#` are
    /// skipped.
    Encode {
        /// Lines are `mantissa scale [count]` instead of `value [count]`.
        #[arg(long)]
        intscale: bool,
    },
    /// Print count, mean, sum, stddev, quantiles, inverse quantiles, threshold counts and bins.
    Stats {
        /// The histogram, base64 (padded or not).
        histogram: String,
        /// Quantiles to compute, ascending, each in [0, 1].
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "0,0.25,0.5,0.9,0.99,0.999,1"
        )]
        quantiles: Vec<f64>,
        /// Quantile definition: 1 (libcircllhist default) or 7.
        #[arg(long = "type", value_enum, default_value = "1")]
        quantile_type: TypeArg,
        /// Thresholds (ascending) whose inverse quantile (share of samples ≤ t) to print.
        #[arg(long, value_delimiter = ',')]
        inverse: Vec<f64>,
        /// A threshold for the below/above inclusive/exclusive and nearby counts.
        #[arg(long)]
        counts_at: Option<f64>,
    },
    /// Merge histograms and print the merged base64.
    Merge {
        /// Base64 histograms to merge.
        #[arg(required = true)]
        histograms: Vec<String>,
    },
    /// Print a histogram's bins and its `H[edge]=count` text form.
    Decode {
        /// The histogram, base64 (padded or not).
        histogram: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum TypeArg {
    #[value(name = "1")]
    One,
    #[value(name = "7")]
    Seven,
}

/// A failure to report: the message names what was wrong and where.
struct BadInput(String);

pub fn run(cmd: HistCommand) -> ExitCode {
    let result = match cmd {
        HistCommand::Encode { intscale } => encode(intscale),
        HistCommand::Stats {
            histogram,
            quantiles,
            quantile_type,
            inverse,
            counts_at,
        } => stats(&histogram, &quantiles, quantile_type, &inverse, counts_at),
        HistCommand::Merge { histograms } => merge(&histograms),
        HistCommand::Decode { histogram } => decode(&histogram),
    };
    match result {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            match writeln!(out, "{text}") {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("strata hist: cannot write output: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(BadInput(msg)) => {
            eprintln!("strata hist: {msg}");
            ExitCode::from(2)
        }
    }
}

fn parse_b64(text: &str, what: &str) -> Result<Histogram, BadInput> {
    Histogram::from_base64(text.trim()).map_err(|e| BadInput(format!("{what}: {e}")))
}

fn encode(intscale: bool) -> Result<String, BadInput> {
    let mut recorder = Recorder::new();
    let stdin = std::io::stdin().lock();
    for (index, line) in stdin.lines().enumerate() {
        let n = index + 1;
        let line = line.map_err(|e| BadInput(format!("stdin line {n}: {e}")))?;
        if line.len() > LINE_BYTES_MAX {
            return Err(BadInput(format!(
                "stdin line {n}: longer than {LINE_BYTES_MAX} bytes"
            )));
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if intscale {
            encode_intscale_line(&mut recorder, &fields, n)?;
        } else {
            encode_value_line(&mut recorder, &fields, n)?;
        }
    }
    Ok(recorder.to_histogram().to_base64())
}

fn field<T: std::str::FromStr>(
    fields: &[&str],
    i: usize,
    n: usize,
    what: &str,
) -> Result<T, BadInput> {
    let text = fields[i];
    text.parse()
        .map_err(|_| BadInput(format!("stdin line {n}: {what} '{text}' is not valid")))
}

fn encode_value_line(r: &mut Recorder, fields: &[&str], n: usize) -> Result<(), BadInput> {
    if !(1..=2).contains(&fields.len()) {
        return Err(BadInput(format!(
            "stdin line {n}: expected 'value' or 'value count'"
        )));
    }
    let value: f64 = field(fields, 0, n, "value")?;
    let count: u64 = if fields.len() == 2 {
        field(fields, 1, n, "count")?
    } else {
        1
    };
    r.insert_n(value, count);
    Ok(())
}

fn encode_intscale_line(r: &mut Recorder, fields: &[&str], n: usize) -> Result<(), BadInput> {
    if !(2..=3).contains(&fields.len()) {
        return Err(BadInput(format!(
            "stdin line {n}: expected 'mantissa scale [count]'"
        )));
    }
    let mantissa: i64 = field(fields, 0, n, "mantissa")?;
    let scale: i32 = field(fields, 1, n, "scale")?;
    let count: u64 = if fields.len() == 3 {
        field(fields, 2, n, "count")?
    } else {
        1
    };
    r.insert_intscale_n(mantissa, scale, count);
    Ok(())
}

/// A float as JSON: shortest round-trip number, or a string for the non-finite values.
fn float(x: f64) -> Value {
    if x.is_nan() {
        Value::from("NaN")
    } else if x == f64::INFINITY {
        Value::from("Infinity")
    } else if x == f64::NEG_INFINITY {
        Value::from("-Infinity")
    } else {
        Value::from(x)
    }
}

fn floats(xs: &[f64]) -> Value {
    Value::Array(xs.iter().map(|&x| float(x)).collect())
}

fn bins_json(h: &Histogram) -> Value {
    Value::Array(
        h.bins()
            .map(|(b, c)| json!([b.val(), b.exp(), c]))
            .collect(),
    )
}

fn stats(
    b64: &str,
    quantiles: &[f64],
    quantile_type: TypeArg,
    inverse: &[f64],
    counts_at: Option<f64>,
) -> Result<String, BadInput> {
    let h = parse_b64(b64, "histogram")?;
    let ty = match quantile_type {
        TypeArg::One => QuantileType::Type1,
        TypeArg::Seven => QuantileType::Type7,
    };
    let qs = h
        .quantiles(quantiles, ty)
        .map_err(|e| BadInput(format!("--quantiles: {e}")))?;
    let inv = h
        .inverse_quantiles(inverse)
        .map_err(|e| BadInput(format!("--inverse: {e}")))?;
    let counts = counts_at.map(|t| {
        let c = h.threshold_counts(t);
        json!({
            "below_inclusive": c.below_inclusive,
            "below_exclusive": c.below_exclusive,
            "above_inclusive": c.above_inclusive,
            "above_exclusive": c.above_exclusive,
            "nearby": c.nearby,
        })
    });
    let out = json!({
        "count": h.sample_count(),
        "mean": float(h.mean()),
        "sum": float(h.sum()),
        "stddev": float(h.stddev()),
        "quantiles": floats(&qs),
        "inverse_quantiles": floats(&inv),
        "counts": counts,
        "bins": bins_json(&h),
    });
    Ok(out.to_string())
}

fn merge(b64s: &[String]) -> Result<String, BadInput> {
    let mut parts = Vec::with_capacity(b64s.len());
    for (i, b64) in b64s.iter().enumerate() {
        parts.push(parse_b64(b64, &format!("histogram {}", i + 1))?);
    }
    let refs: Vec<&Histogram> = parts.iter().collect();
    Ok(Histogram::merge_many(&refs).to_base64())
}

fn decode(b64: &str) -> Result<String, BadInput> {
    let h = parse_b64(b64, "histogram")?;
    Ok(json!({ "bins": bins_json(&h), "text": h.to_text() }).to_string())
}
