//! `strata clock …`: what the clock chose on this machine and why, and what it costs — the check
//! an operator runs on a new machine type. Exit codes: 0 ok, 1 `now()` stepped backwards in the
//! self-test, 2 bad usage or input.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use clock::{check, Choice, Clock, Config};
use serde_json::json;

#[derive(Subcommand)]
pub enum ClockCommand {
    /// Print one JSON line: the source (tsc or os) and why, the cost per read in ns of now(),
    /// raw(), wall() and the OS clock, and the backward steps of now() seen by two threads
    /// swapping CPUs. Exits 1 if now() ever stepped backwards.
    Check(CheckArgs),
}

#[derive(Args)]
pub struct CheckArgs {
    /// Which source to allow: auto (the TSC where safe), os or tsc.
    #[arg(long, env = clock::ENV_VAR, default_value = "auto")]
    source: String,
    /// Reads of now() in the cross-thread self-test (and again of raw(), for comparison).
    #[arg(long, default_value_t = 2_000_000,
          value_parser = clap::value_parser!(u64).range(1_000..=1_000_000_000))]
    reads: u64,
}

pub fn run(command: ClockCommand) -> ExitCode {
    match command {
        ClockCommand::Check(args) => run_check(&args),
    }
}

fn run_check(args: &CheckArgs) -> ExitCode {
    let source = match Choice::parse(&args.source) {
        Ok(source) => source,
        Err(error) => {
            eprintln!(
                "strata clock check: --source (or {}) {:?} is not one of auto, os, tsc",
                clock::ENV_VAR,
                error.value
            );
            return ExitCode::from(2);
        }
    };
    if let Err(error) = clock::init(Config { source }) {
        eprintln!("strata clock check: {error}");
        return ExitCode::from(1);
    }
    let clock = Clock::global();
    let report = check::run(clock, args.reads);
    // Unordered reads across threads, to show what the ordering in now() buys on this machine.
    let raw = check::cross_thread(|| clock.raw(), args.reads, args.reads / 64);
    let line = json!({
        "source": report.source.as_str(),
        "reason": report.reason,
        "config": source.as_str(),
        "now_ns": round2(report.now_ns),
        "raw_ns": round2(report.raw_ns),
        "wall_ns": round2(report.wall_ns),
        "os_ns": round2(report.os_ns),
        "backwards": report.backwards,
        "backwards_ns_max": report.backwards_ns_max,
        "reads": report.reads,
        "cpus": report.cpus,
        "raw_backwards": raw.backwards,
        "now_error_ns": report.now_error_ns,
        "tracking_error_ns_max": clock::TRACKING_ERROR_NS_MAX,
        "wall_error_ns": report.wall_error_ns,
        "wall_error_ns_max": clock::WALL_ERROR_NS_MAX,
        "tsc_hz": report.tsc_hz,
    });
    println!("{line}");
    if report.backwards > 0 {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn round2(ns: f64) -> f64 {
    (ns * 100.0).round() / 100.0
}
