//! `strata maintenance add | list | rm`: maintenance windows on a running core (its
//! `/api/strata/v1/maintenance` API). Windows from the notify file are listed and read-only.
//!
//! Exit codes: 0 ok, 1 the server could not be reached or failed, 2 bad usage or a window the
//! server refused.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::cli_rules::{encode, http, json_answer, Failure, ServerArgs};

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum MaintenanceCommand {
    /// Add (or replace) a window: one-off (--start with --end or --duration), weekly (--at,
    /// --days, --duration) or cron (--cron, --duration).
    Add(AddArgs),
    /// Every window, whether it is active now and when it next starts.
    List {
        /// Print the JSON answer instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Remove a window made with `add`.
    Rm {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Args)]
pub struct AddArgs {
    name: String,
    /// One-off: the start (RFC 3339, or a duration from now such as 10m; default now).
    #[arg(long)]
    start: Option<String>,
    /// One-off: the end (RFC 3339, or a duration from now).
    #[arg(long)]
    end: Option<String>,
    /// How long each occurrence lasts (one-off: instead of --end).
    #[arg(long)]
    duration: Option<String>,
    /// Weekly: the local start time, e.g. 02:30.
    #[arg(long)]
    at: Option<String>,
    /// Weekly: the days, comma-separated (mon,tue,…); default every day.
    #[arg(long, value_delimiter = ',')]
    days: Vec<String>,
    /// Cron: five fields, local time, e.g. "30 2 * * 1-5".
    #[arg(long)]
    cron: Option<String>,
    /// IANA time zone of --at and --cron (default UTC).
    #[arg(long)]
    timezone: Option<String>,
    /// Alert label matcher (Alertmanager syntax), repeatable: --matcher 'team="db"'.
    #[arg(long = "matcher")]
    matchers: Vec<String>,
    /// Ruleset name, repeatable.
    #[arg(long = "ruleset")]
    rulesets: Vec<String>,
    /// key:value tag the alert must carry, repeatable.
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Only these severities, comma-separated (default all).
    #[arg(long, value_delimiter = ',')]
    severities: Vec<u8>,
    #[arg(long)]
    comment: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(command: MaintenanceCommand) -> ExitCode {
    let result = match command {
        MaintenanceCommand::Add(a) => add(&a),
        MaintenanceCommand::List { json, server } => list(json, &server),
        MaintenanceCommand::Rm { name, server } => rm(&name, &server),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("strata maintenance: {message}");
            ExitCode::from(code)
        }
    }
}

fn add(a: &AddArgs) -> Result<(), Failure> {
    let recurring = a.at.is_some() || !a.days.is_empty() || a.cron.is_some();
    let start = match (&a.start, recurring) {
        (Some(s), _) => Some(crate::cli_alerts::time_or_in(s)?),
        (None, false) => Some(alert::util::rfc3339(alert::util::wall_ms())),
        (None, true) => None,
    };
    let end = a
        .end
        .as_deref()
        .map(crate::cli_alerts::time_or_in)
        .transpose()?;
    let mut body = json!({
        "name": a.name,
        "start": start,
        "end": end,
        "duration": a.duration,
        "days": a.days,
        "at": a.at,
        "cron": a.cron,
        "timezone": a.timezone,
        "matchers": a.matchers,
        "rulesets": a.rulesets,
        "tags": a.tags,
        "severities": a.severities,
        "comment": a.comment,
    });
    if let Some(m) = body.as_object_mut() {
        m.retain(|_, v| !(v.is_null() || v.as_array().is_some_and(Vec::is_empty)));
    }
    let path = format!("/api/strata/v1/maintenance/{}", encode(&a.name));
    let ans = http(
        &a.server,
        "PUT",
        &path,
        &body.to_string(),
        &[("Content-Type", "application/json")],
    )?;
    let v = json_answer(ans.status, &ans.body)?;
    let verb = if v["replaced"].as_bool() == Some(true) {
        "replaced"
    } else {
        "added"
    };
    println!("maintenance window '{}' {verb}", a.name);
    Ok(())
}

fn schedule(w: &Value) -> String {
    let s = |k: &str| w[k].as_str().unwrap_or("").to_string();
    let tz = w["timezone"].as_str().unwrap_or("UTC");
    if w["cron"].is_string() {
        format!("cron {:?} for {} ({tz})", s("cron"), s("duration"))
    } else if w["at"].is_string() {
        let days: Vec<&str> = w["days"]
            .as_array()
            .map(|d| d.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let days = if days.is_empty() {
            "every day".to_string()
        } else {
            days.join(",")
        };
        format!("{days} at {} for {} ({tz})", s("at"), s("duration"))
    } else if w["end"].is_string() {
        format!("{} to {}", s("start"), s("end"))
    } else {
        format!("{} for {}", s("start"), s("duration"))
    }
}

fn list(as_json: bool, server: &ServerArgs) -> Result<(), Failure> {
    let a = http(server, "GET", "/api/strata/v1/maintenance", "", &[])?;
    let v = json_answer(a.status, &a.body)?;
    if as_json {
        println!("{v}");
        return Ok(());
    }
    let mut out = String::from("name\tsource\tactive\tnext start\tschedule\tscope\n");
    for w in v["windows"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let mut scope: Vec<String> = Vec::new();
        for k in ["matchers", "rulesets", "tags", "severities"] {
            if let Some(list) = w[k].as_array() {
                let items: Vec<String> = list
                    .iter()
                    .map(|x| x.as_str().map_or(x.to_string(), str::to_string))
                    .collect();
                scope.push(format!("{k}={}", items.join(",")));
            }
        }
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\n",
            w["name"].as_str().unwrap_or(""),
            w["source"].as_str().unwrap_or(""),
            if w["active"].as_bool() == Some(true) {
                "yes"
            } else {
                "no"
            },
            w["next_start"].as_str().unwrap_or("-"),
            schedule(w),
            if scope.is_empty() {
                "every alert".to_string()
            } else {
                scope.join(" ")
            }
        ));
    }
    print!("{out}");
    Ok(())
}

fn rm(name: &str, server: &ServerArgs) -> Result<(), Failure> {
    let path = format!("/api/strata/v1/maintenance/{}", encode(name));
    let a = http(server, "DELETE", &path, "", &[])?;
    if a.status != 204 {
        json_answer(a.status, &a.body)?;
    }
    println!("maintenance window '{name}' removed");
    Ok(())
}
