//! The init system: `systemctl` found on `PATH` (tests put a stand-in that records its calls
//! first), asked before it is told, so a re-run of an enabled, running agent calls nothing that
//! changes state.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::report::Outcome;

/// Most `PATH` entries searched.
const PATH_ENTRIES_MAX: usize = 64;

pub fn systemctl_path() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .take(PATH_ENTRIES_MAX)
        .map(|d| d.join("systemctl"))
        .find(|p| p.is_file())
        .ok_or_else(|| "--init systemd: no systemctl on PATH (use --init none)".to_string())
}

/// Runs `systemctl <args>`; returns whether it exited 0.
fn systemctl(args: &[&str]) -> Result<bool, String> {
    let bin = systemctl_path()?;
    let status = Command::new(&bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    Ok(status.success())
}

fn must(args: &[&str]) -> Result<(), String> {
    if systemctl(args)? {
        Ok(())
    } else {
        Err(format!("systemctl {} failed", args.join(" ")))
    }
}

pub fn daemon_reload() -> Result<(), String> {
    must(&["daemon-reload"])
}

/// Enables and starts a unit; reloads the unit files first when the unit changed, and
/// restarts a running service whose unit changed.
pub fn enable_start(unit: &str, unit_changed: bool, dry_run: bool) -> Result<Outcome, String> {
    let enabled = systemctl(&["is-enabled", "--quiet", unit])?;
    let active = systemctl(&["is-active", "--quiet", unit])?;
    let outcome = match (enabled, active, unit_changed) {
        (true, true, false) => Outcome::Unchanged,
        (true, true, true) => Outcome::Updated,
        _ => Outcome::Created,
    };
    if dry_run || outcome == Outcome::Unchanged {
        return Ok(outcome);
    }
    if unit_changed {
        daemon_reload()?;
    }
    if !enabled {
        must(&["enable", unit])?;
    }
    if !active {
        must(&["start", unit])?;
    } else if unit_changed {
        must(&["restart", unit])?;
    }
    Ok(outcome)
}

/// Stops and disables a unit (whatever it was).
pub fn disable_stop(unit: &str, dry_run: bool) -> Result<Outcome, String> {
    let enabled = systemctl(&["is-enabled", "--quiet", unit])?;
    let active = systemctl(&["is-active", "--quiet", unit])?;
    if !enabled && !active {
        return Ok(Outcome::Absent);
    }
    if !dry_run {
        must(&["disable", "--now", unit])?;
    }
    Ok(Outcome::Removed)
}
