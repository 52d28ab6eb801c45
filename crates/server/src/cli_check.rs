//! `strata check test <spec>`: runs one check once, now, and prints what a broker would record,
//! one JSON object per line (`name`, `tags`, and `value`: a number, a text, or a histogram as
//! `{count, bins: [[val, exp, count], …]}`).
//!
//! `strata check add|list|show|rm --core URL`: checks defined on a core
//! (`/api/strata/v1/checks`), each at an id the caller chooses and assigned to a broker.

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
    /// Create or replace a check on a core, at an id you choose (unchanged when identical).
    Add {
        /// The check's id (A-Z a-z 0-9 - _, at most 64 bytes).
        id: String,
        /// The spec: TOML or JSON, as for `strata check test` (its `id` is ignored).
        spec: PathBuf,
        /// A name shown in lists (default: the id).
        #[arg(long)]
        name: Option<String>,
        /// The broker that runs it.
        #[arg(long, default_value = "default")]
        broker: String,
        /// Who manages it (`host:<id>` for an installed agent's checks).
        #[arg(long)]
        owner: Option<String>,
        #[command(flatten)]
        core: CoreArgs,
    },
    /// List a core's checks (id, name, broker's assignment with --broker).
    List {
        /// Only the checks assigned to this broker, in full (JSON).
        #[arg(long)]
        broker: Option<String>,
        /// Only the checks this owner manages.
        #[arg(long)]
        owner: Option<String>,
        #[command(flatten)]
        core: CoreArgs,
    },
    /// Print one check as the core holds it (JSON).
    Show {
        id: String,
        #[command(flatten)]
        core: CoreArgs,
    },
    /// Delete a check from a core.
    Rm {
        id: String,
        #[command(flatten)]
        core: CoreArgs,
    },
}

#[derive(clap::Args)]
pub struct CoreArgs {
    /// The core (plain HTTP).
    #[arg(long, env = "STRATA_SERVER", default_value = "http://127.0.0.1:8112")]
    core: String,
    /// A file holding the core's bearer token.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// Longest token file read.
const TOKEN_BYTES_MAX: u64 = 4096;

impl CoreArgs {
    pub fn server(&self) -> Result<crate::cli_rules::ServerArgs, (u8, String)> {
        let token = match &self.token_file {
            None => None,
            Some(p) => {
                let len = std::fs::metadata(p)
                    .map_err(|e| (2, format!("--token-file {}: {e}", p.display())))?
                    .len();
                if len > TOKEN_BYTES_MAX {
                    return Err((2, format!("--token-file {}: too long", p.display())));
                }
                let t = std::fs::read_to_string(p)
                    .map_err(|e| (2, format!("--token-file {}: {e}", p.display())))?;
                Some(t.trim().to_string())
            }
        };
        Ok(crate::cli_rules::ServerArgs {
            server: self.core.trim_end_matches('/').to_string(),
            token,
        })
    }
}

pub fn run(command: CheckCommand) -> ExitCode {
    let remote = |r: Result<String, (u8, String)>| match r {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("strata check: {message}");
            ExitCode::from(code)
        }
    };
    match command {
        CheckCommand::Add {
            id,
            spec,
            name,
            broker,
            owner,
            core,
        } => remote(add(&id, &spec, name, &broker, owner, &core)),
        CheckCommand::List {
            broker,
            owner,
            core,
        } => remote(list(broker, owner, &core)),
        CheckCommand::Show { id, core } => remote(show(&id, &core)),
        CheckCommand::Rm { id, core } => remote(rm(&id, &core)),
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

fn add(
    id: &str,
    path: &PathBuf,
    name: Option<String>,
    broker: &str,
    owner: Option<String>,
    core: &CoreArgs,
) -> Result<String, (u8, String)> {
    let spec = read_spec(path).map_err(|e| (2, e))?;
    let mut spec =
        serde_json::to_value(&spec).map_err(|e| (2, format!("{}: {e}", path.display())))?;
    if let Some(m) = spec.as_object_mut() {
        m.remove("id");
    }
    let mut body =
        json!({ "name": name.unwrap_or_else(|| id.to_string()), "broker": broker, "spec": spec });
    if let Some(o) = owner {
        body["owner"] = json!(o);
    }
    let server = core.server()?;
    let a = crate::cli_rules::http(
        &server,
        "PUT",
        &format!("/api/strata/v1/checks/{}", crate::cli_rules::encode(id)),
        &body.to_string(),
        &[("Content-Type", "application/json")],
    )?;
    crate::cli_rules::json_answer(a.status, &a.body)?;
    let what = match a.status {
        201 => "created",
        _ if a.unchanged => "unchanged",
        _ => "replaced",
    };
    Ok(format!("{what} check {id}\n"))
}

fn list(
    broker: Option<String>,
    owner: Option<String>,
    core: &CoreArgs,
) -> Result<String, (u8, String)> {
    let q = crate::cli_rules::query_string(&[("broker", broker.clone()), ("owner", owner)]);
    let server = core.server()?;
    let a = crate::cli_rules::http(
        &server,
        "GET",
        &format!("/api/strata/v1/checks{q}"),
        "",
        &[],
    )?;
    let v = crate::cli_rules::json_answer(a.status, &a.body)?;
    if broker.is_some() {
        return Ok(format!("{v}\n"));
    }
    let mut out = String::from("id\tname\towner\n");
    for c in v.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{}\t{}\t{}\n",
            c["id"].as_str().unwrap_or(""),
            c["name"].as_str().unwrap_or(""),
            c["owner"].as_str().unwrap_or("-")
        ));
    }
    Ok(out)
}

fn show(id: &str, core: &CoreArgs) -> Result<String, (u8, String)> {
    let server = core.server()?;
    let path = format!("/api/strata/v1/checks/{}", crate::cli_rules::encode(id));
    let a = crate::cli_rules::http(&server, "GET", &path, "", &[])?;
    let v = crate::cli_rules::json_answer(a.status, &a.body)?;
    Ok(format!("{v}\n"))
}

fn rm(id: &str, core: &CoreArgs) -> Result<String, (u8, String)> {
    let server = core.server()?;
    let path = format!("/api/strata/v1/checks/{}", crate::cli_rules::encode(id));
    let a = crate::cli_rules::http(&server, "DELETE", &path, "", &[])?;
    crate::cli_rules::json_answer(a.status, &a.body)?;
    Ok(format!("deleted check {id}\n"))
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
