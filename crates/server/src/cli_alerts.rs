//! `strata alerts list`: the alert instances a running server holds, as a table or its JSON.
//! With `--wait` it long-polls: it returns when the answer changes (or the wait ends).
//! `strata alerts ack FP --note … [--until …]` acknowledges a firing alert (no reminders, no
//! escalation); `strata alerts unack FP` takes that back.
//!
//! Exit codes: 0 ok, 1 the server could not be reached or failed, 2 bad usage.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::cli_rules::{http, json_answer, query_string, Failure, ServerArgs};

#[derive(Subcommand)]
pub enum AlertsCommand {
    /// Alert instances that are not ok (pending, firing, recovering, resolved, nodata, error).
    List(ListArgs),
    /// Acknowledge a firing alert: no reminders and no escalation for this firing episode.
    Ack(AckArgs),
    /// Take an acknowledgement back.
    Unack {
        /// The alert's fingerprint (16 hex digits, as `strata alerts list --json` shows).
        fp: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Args)]
pub struct AckArgs {
    /// The alert's fingerprint (16 hex digits, as `strata alerts list --json` shows).
    fp: String,
    /// Why, for the others on call.
    #[arg(long, default_value = "")]
    note: String,
    /// Until when (RFC 3339, or a duration from now such as 2h); default: until it resolves.
    #[arg(long)]
    until: Option<String>,
    /// Who (default: $USER).
    #[arg(long)]
    by: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
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
    let result = match command {
        AlertsCommand::List(args) => list(&args),
        AlertsCommand::Ack(args) => ack(&args),
        AlertsCommand::Unack { fp, server } => unack(&fp, &server),
    };
    match result {
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

fn fp_arg(fp: &str) -> Result<String, Failure> {
    let ok = fp.len() == 16 && fp.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(fp.to_ascii_lowercase())
    } else {
        Err((2, format!("'{fp}' is not a fingerprint (16 hex digits)")))
    }
}

/// An absolute time, or a duration from now.
pub fn time_or_in(text: &str) -> Result<String, Failure> {
    if let Ok(ms) = alert::util::parse_duration_ms(text) {
        // Whole seconds: easier to read back.
        let t = alert::util::align_down(alert::util::wall_ms() + ms, 1000);
        return Ok(alert::util::rfc3339(t));
    }
    alert::notify::config::parse_time_ms(text)
        .map(alert::util::rfc3339)
        .map_err(|e| (2, e))
}

fn ack(args: &AckArgs) -> Result<(), Failure> {
    let fp = fp_arg(&args.fp)?;
    let until = args.until.as_deref().map(time_or_in).transpose()?;
    let by = args
        .by
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_default();
    let body = serde_json::json!({ "note": args.note, "by": by, "until": until }).to_string();
    let path = format!("/api/strata/v1/alerts/{fp}/ack");
    let a = http(
        &args.server,
        "POST",
        &path,
        &body,
        &[("Content-Type", "application/json")],
    )?;
    json_answer(a.status, &a.body)?;
    match until {
        Some(u) => println!("acknowledged {fp} until {u}"),
        None => println!("acknowledged {fp} until it resolves"),
    }
    Ok(())
}

fn unack(fp: &str, server: &ServerArgs) -> Result<(), Failure> {
    let fp = fp_arg(fp)?;
    let a = http(
        server,
        "DELETE",
        &format!("/api/strata/v1/alerts/{fp}/ack"),
        "",
        &[],
    )?;
    if a.status != 204 {
        json_answer(a.status, &a.body)?;
    }
    println!("acknowledgement of {fp} removed");
    Ok(())
}
