//! `strata alerts list`: the alert instances a running server holds, as a table or its JSON.
//! With `--wait` it long-polls: it returns when the answer changes (or the wait ends).
//!
//! Exit codes: 0 ok, 1 the server could not be reached or failed, 2 bad usage.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::cli_rules::{http, json_answer, query_string, Failure, ServerArgs};

#[derive(Subcommand)]
pub enum AlertsCommand {
    /// Alert instances that are not ok (pending, firing, recovering, resolved, nodata, error).
    List(ListArgs),
}

#[derive(Args)]
pub struct ListArgs {
    /// Only these states (comma-separated), e.g. `firing,pending`.
    #[arg(long)]
    state: Option<String>,
    /// Only these severities (comma-separated), e.g. `1,2`.
    #[arg(long)]
    severity: Option<String>,
    /// Only this ruleset.
    #[arg(long)]
    rule: Option<String>,
    /// Wait up to this long for the list to change from the one printed last (`--etag`).
    #[arg(long)]
    wait: Option<String>,
    /// The ETag of the list already known (with --wait).
    #[arg(long)]
    etag: Option<String>,
    /// Print the JSON answer instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(command: AlertsCommand) -> ExitCode {
    let AlertsCommand::List(args) = command;
    match list(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("strata alerts: {message}");
            ExitCode::from(code)
        }
    }
}

fn list(args: &ListArgs) -> Result<(), Failure> {
    let q = query_string(&[
        ("state", args.state.clone()),
        ("severity", args.severity.clone()),
        ("rule", args.rule.clone()),
        ("wait", args.wait.clone()),
    ]);
    let path = format!("/api/strata/v1/alerts{q}");
    let known: Vec<(&str, &str)> = args
        .etag
        .as_deref()
        .map(|e| ("If-None-Match", e))
        .into_iter()
        .collect();
    let a = http(&args.server, "GET", &path, "", &known)?;
    if let Some(etag) = &a.etag {
        // For the next `--wait --etag`.
        eprintln!("etag: {etag}");
    }
    if a.status == 304 {
        println!("unchanged");
        return Ok(());
    }
    let v = json_answer(a.status, &a.body)?;
    if args.json {
        println!("{v}");
        return Ok(());
    }
    let mut out = String::from("state\tseverity\trule\tstream\tsince\tsummary\n");
    for a in v["alerts"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let mut state = a["state"].as_str().unwrap_or("").to_string();
        for flag in ["flapping", "suppressed"] {
            if a[flag].as_bool() == Some(true) {
                state.push_str(&format!(" ({flag})"));
            }
        }
        out.push_str(&format!(
            "{state}\t{}\t{}\t{}\t{}\t{}\n",
            a["severity"],
            a["rule"].as_str().unwrap_or(""),
            a["stream"].as_str().unwrap_or(""),
            alert::util::rfc3339(a["since"].as_i64().unwrap_or(0)),
            a["annotations"]["summary"].as_str().unwrap_or("")
        ));
    }
    print!("{out}");
    Ok(())
}
