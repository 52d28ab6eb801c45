//! `strata check test <spec>`: runs one check once, now, and prints what a broker would record,
//! one JSON object per line (`name`, `tags`, and `value`: a number, a text, or a histogram as
//! `{count, bins: [[val, exp, count], …]}`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{json, Value};

/// Longest spec file read.
const SPEC_BYTES_MAX: u64 = 1 << 20;

#[derive(Subcommand)]
pub enum CheckCommand {
    /// Run a check spec (a TOML or JSON file) once and print its measurements.
    Test {
        /// The spec: TOML (`kind = "tcp"` …) or JSON (`{"kind": "tcp", …}`).
        spec: PathBuf,
    },
}

pub fn run(command: CheckCommand) -> ExitCode {
    match command {
        CheckCommand::Test { spec } => match test(&spec) {
            Ok(lines) => {
                for line in lines {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err((code, message)) => {
                eprintln!("strata check test: {message}");
                ExitCode::from(code)
            }
        },
    }
}

fn read_spec(path: &PathBuf) -> Result<checks::CheckSpec, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if len > SPEC_BYTES_MAX {
        return Err(format!(
            "{}: {len} bytes, more than the {SPEC_BYTES_MAX} a spec may have",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| format!("{} (JSON): {e}", path.display()))
    } else {
        toml::from_str(&text).map_err(|e| format!("{} (TOML): {e}", path.display()))
    }
}

fn test(path: &PathBuf) -> Result<Vec<String>, (u8, String)> {
    let spec = read_spec(path).map_err(|e| (2, e))?;
    checks::validate(&spec).map_err(|e| (2, format!("{}: {e}", path.display())))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (1, format!("cannot start the runtime: {e}")))?;
    let measured = runtime
        .block_on(checks::run(&spec))
        .map_err(|e| (1, e.to_string()))?;
    Ok(measured
        .iter()
        .map(|m| line(&spec.id, m).to_string())
        .collect())
}

fn line(id: &str, m: &checks::Measurement) -> Value {
    let mut tags: Vec<Value> = vec![json!(format!("check:{id}"))];
    tags.extend(m.tags.iter().map(|(c, v)| json!(format!("{c}:{v}"))));
    let histogram = |h: &hist::Histogram| {
        let bins: Vec<Value> = h
            .bins()
            .map(|(b, c)| json!([b.val(), b.exp(), c]))
            .collect();
        json!({ "count": h.sample_count(), "bins": bins })
    };
    let value = match &m.value {
        checks::Value::Numeric(v) => json!(v),
        checks::Value::Text(t) => json!(t),
        checks::Value::Histogram(h) => histogram(h),
        checks::Value::Cumulative(c) => histogram(&c.to_histogram()),
    };
    json!({ "name": m.name, "tags": tags, "value": value })
}
