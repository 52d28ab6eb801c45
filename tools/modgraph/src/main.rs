//! `modgraph [--allow FILE] [--verbose] PATH...`: checks that within every module of every crate found under
//! each PATH (a directory searched for packages, or a crate's root `.rs` file) the child modules
//! form an acyclic graph. Prints each cycle (its modules, and one reference per edge as
//! file:line) and exits 1 if there is one, or if an allowlist entry no longer closes a cycle;
//! 2 on bad usage or a file that cannot be read. `--verbose` also lists every edge among the
//! modules of each cycle's strongly connected component (what is left to untangle).
//! `scripts/test` runs it on the workspace.

use std::path::PathBuf;
use std::process::ExitCode;

use modgraph::{check, find_crates, read_allowlist, CrateRoot};

const USAGE: &str = "usage: modgraph [--allow FILE] [--verbose] PATH...";

fn run() -> Result<bool, String> {
    let mut args = std::env::args().skip(1);
    let mut allow: Option<PathBuf> = None;
    let mut paths = Vec::new();
    let mut verbose = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--verbose" => verbose = true,
            "--allow" => allow = Some(args.next().ok_or(USAGE)?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(true);
            }
            _ if arg.starts_with('-') => return Err(format!("unknown option {arg}; {USAGE}")),
            _ => paths.push(PathBuf::from(arg)),
        }
    }
    if paths.is_empty() {
        return Err(USAGE.to_owned());
    }
    let mut roots = Vec::new();
    for path in &paths {
        if path.is_dir() {
            roots.extend(find_crates(path).map_err(|e| e.to_string())?);
        } else {
            let label = path
                .parent()
                .and_then(|p| p.parent())
                .and_then(|p| p.file_name())
                .map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into(),
                );
            roots.push(CrateRoot {
                label,
                root: path.clone(),
            });
        }
    }
    let allowed = match &allow {
        Some(path) => read_allowlist(path).map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    let report = check(&roots, &allowed).map_err(|e| e.to_string())?;
    for (entry, cycle) in &report.allowed {
        println!(
            "modgraph: allowed by {}: {} {}: {}",
            entry.source,
            cycle.krate,
            cycle.parent,
            cycle.names()
        );
    }
    for cycle in &report.cycles {
        print!("modgraph: {cycle}");
        if verbose {
            for e in &cycle.component_edges {
                println!("      edge {} -> {}: {}", e.from, e.to, e.at);
            }
        }
    }
    for entry in &report.stale {
        println!(
            "modgraph: {}: `{} {}: {} -> {}` no longer closes a cycle; delete the entry",
            entry.source, entry.krate, entry.parent, entry.from, entry.to
        );
    }
    println!(
        "modgraph: {} crates, {} modules: {} cycles, {} allowed, {} stale allowlist entries",
        report.crates,
        report.modules,
        report.cycles.len(),
        report.allowed.len(),
        report.stale.len()
    );
    Ok(report.ok())
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("modgraph: {message}");
            ExitCode::from(2)
        }
    }
}
