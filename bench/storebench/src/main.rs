//! `storebench`: the store benchmark's command line (see `README.md`).
//!
//! ```text
//! storebench --shape numeric-int|numeric-float|histogram|churn [--dir D] [--series N]
//!            [--hours H] [--seed S] [--batch N] [--gen-chunk N] [--run N]
//!            [--flush-every B] [--api keys|ids]
//!            [--generate inline|first] [--order time|backfill]
//! storebench crash-loss [--iterations N] [--dir D] [--seed S] [--kill-ms-min MS]
//!            [--kill-ms-max MS] [--per-store N] [--threads N]
//! ```
//! Each prints one JSON line on stdout; errors go to stderr with exit status 2. A benchmark whose
//! reopened store misses data, or a crash-loss run that lost or invented a sample, exits with 1.

use std::path::PathBuf;
use std::process::ExitCode;

use storebench::crash::{self, CrashOptions};
use storebench::run::{self, RunOptions, BATCH_SAMPLES_DEFAULT, GEN_SAMPLES_DEFAULT};
use storebench::workload::{self, Config, Shape};

const USAGE: &str = "usage:
  storebench --shape numeric-int|numeric-float|histogram|churn [--dir D] [--series N] [--hours H]
             [--seed S] [--batch N] [--gen-chunk N] [--run N] [--flush-every B] [--api keys|ids]
             [--generate inline|first] [--order time|backfill]
  storebench crash-loss [--iterations N] [--dir D] [--seed S] [--kill-ms-min MS] [--kill-ms-max MS]
             [--per-store N] [--threads N]";

/// `--name value` pairs after the command word; every name must be in `allowed`.
struct Args {
    pairs: Vec<(String, String)>,
}

impl Args {
    fn parse(args: &[String], allowed: &[&str]) -> Result<Args, String> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(name) = it.next() {
            if !allowed.contains(&name.as_str()) {
                return Err(format!("unknown argument {name:?}"));
            }
            let value = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            pairs.push((name.clone(), value.clone()));
        }
        Ok(Args { pairs })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => text
                .parse()
                .map_err(|_| format!("{name}: {text:?} is not a valid number")),
        }
    }
}

fn bench(args: &[String]) -> Result<ExitCode, String> {
    let args = Args::parse(
        args,
        &[
            "--shape",
            "--dir",
            "--series",
            "--hours",
            "--generate",
            "--seed",
            "--batch",
            "--gen-chunk",
            "--run",
            "--flush-every",
            "--api",
            "--order",
        ],
    )?;
    let shape_name = args.get("--shape").ok_or("--shape is required")?;
    let shape = Shape::parse(shape_name).ok_or_else(|| {
        format!("--shape {shape_name:?}: expected numeric-int, numeric-float, histogram or churn")
    })?;
    let mut config = Config::issue(shape);
    config.series = args.number("--series", config.series)?;
    config.seed = args.number("--seed", config.seed)?;
    config.run_samples = args.number("--run", config.run_samples)?;
    if let Some(text) = args.get("--hours") {
        let hours: f64 = text
            .parse()
            .map_err(|_| format!("--hours: {text:?} is not a number"))?;
        config.steps = workload::steps_for_hours(hours)
            .ok_or_else(|| format!("--hours {text}: must be positive and at most ~27,000 h"))?;
    }
    let now_ms = i64::try_from(clock::wall() / 1_000_000).unwrap_or(i64::MAX);
    config.start_ms = workload::recent_start_ms(now_ms, &config);
    let opts = RunOptions {
        config,
        dir: args.get("--dir").map(PathBuf::from),
        batch_samples: args.number("--batch", BATCH_SAMPLES_DEFAULT)?,
        gen_samples: args.number("--gen-chunk", GEN_SAMPLES_DEFAULT)?,
        flush_every_batches: args.number("--flush-every", 0)?,
        pregen: match args.get("--generate").unwrap_or("inline") {
            "inline" => false,
            "first" => true,
            other => return Err(format!("--generate {other:?}: expected inline or first")),
        },
        by_id: match args.get("--api").unwrap_or("keys") {
            "keys" => false,
            "ids" => true,
            other => return Err(format!("--api {other:?}: expected keys or ids")),
        },
        backfill: match args.get("--order").unwrap_or("time") {
            "time" => false,
            "backfill" => true,
            other => return Err(format!("--order {other:?}: expected time or backfill")),
        },
    };
    let (json, ok) = run::run(&opts)?;
    println!("{json}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("storebench: the reopened store does not hold what was written (see \"check\")");
        ExitCode::from(1)
    })
}

fn crash_loss(args: &[String]) -> Result<ExitCode, String> {
    let args = Args::parse(
        args,
        &[
            "--iterations",
            "--dir",
            "--seed",
            "--kill-ms-min",
            "--kill-ms-max",
            "--per-store",
            "--threads",
        ],
    )?;
    let opts = CrashOptions {
        iterations: args.number("--iterations", 10)?,
        dir: args.get("--dir").map(PathBuf::from),
        // A new seed each run unless given; it is printed, so a run can be repeated.
        seed: args.number("--seed", clock::wall())?,
        kill_ms_min: args.number("--kill-ms-min", 0)?,
        kill_ms_max: args.number("--kill-ms-max", 800)?,
        iterations_per_store: args.number("--per-store", 3)?,
        threads: args.number("--threads", 2)?,
    };
    let (json, ok) = crash::run(&opts)?;
    println!("{json}");
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn crash_child(args: &[String]) -> Result<ExitCode, String> {
    let args = Args::parse(args, &["--dir", "--base-ms", "--base", "--threads"])?;
    let dir = args.get("--dir").ok_or("--dir is required")?;
    crash::child(
        std::path::Path::new(dir),
        args.number("--base-ms", 0)?,
        args.number("--base", 0)?,
        args.number("--threads", 2)?,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The `strata` binary's allocator (crates/server/Cargo.toml says why), so the store is measured
/// as it runs there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // As `strata serve` runs the store: without transparent huge pages (crates/server says why).
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        eprintln!("storebench: transparent huge pages stay enabled: {e}");
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("crash-loss") => crash_loss(&args[1..]),
        Some("crash-child") => crash_child(&args[1..]),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(_) => bench(&args),
        None => Err("no arguments".to_string()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("storebench: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
