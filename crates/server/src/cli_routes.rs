//! `strata rules routes test --config F labels…`: the routing tree of a notify file and where an
//! example alert goes (receivers, group keys, timers, inhibition); `strata rules
//! import-alertmanager FILE`: an alertmanager.yml as notify TOML.

use std::collections::BTreeMap;
use std::path::Path;

use alert::notify::config::Route;
use alert::notify::group::Timing;
use alert::notify::Config;

/// (exit code, message), as the other `strata rules` commands answer.
type Failure = (u8, String);

fn timing_text(t: &Timing) -> String {
    if !t.timed() {
        return "at once".into();
    }
    let d = alert::util::format_duration;
    format!(
        "group_wait {}, group_interval {}, repeat_interval {}",
        d(t.wait_ms),
        d(t.interval_ms),
        t.repeat_ms.map_or("none".into(), d)
    )
}

fn tree(r: &Route, depth: usize, out: &mut String) {
    let matchers: Vec<String> = r.matchers.iter().map(|m| m.to_string()).collect();
    out.push_str(&format!(
        "{}{} receiver={} matchers=[{}] group_by=[{}]{} ({})\n",
        "  ".repeat(depth),
        r.id,
        r.receiver,
        matchers.join(", "),
        r.group_by.join(", "),
        if r.cont { " continue" } else { "" },
        timing_text(&r.timing)
    ));
    for c in &r.routes {
        tree(c, depth + 1, out);
    }
}

fn labels(args: &[String]) -> Result<BTreeMap<String, String>, Failure> {
    args.iter()
        .map(|a| {
            let (k, v) = a
                .split_once('=')
                .ok_or_else(|| (2, format!("'{a}' is not name=value")))?;
            Ok((k.to_string(), v.trim_matches('"').to_string()))
        })
        .collect()
}

/// The text `routes test` prints (`Config::explain`, as the routes API answers it).
pub fn routes_text(c: &Config, l: &BTreeMap<String, String>) -> String {
    let mut out = String::from("routing tree:\n");
    tree(&c.route, 1, &mut out);
    let pairs: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    out.push_str(&format!("alert {{{}}} goes to:\n", pairs.join(", ")));
    let e = c.explain(l, c.maintenance.iter());
    for d in &e.dests {
        let group: Vec<String> = d
            .group_labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        out.push_str(&format!(
            "  {} via route {}, group key {}/{}:{{{}}} ({})\n",
            d.receiver,
            d.route,
            d.receiver,
            d.route,
            group.join(","),
            timing_text(&d.timing)
        ));
    }
    for w in &e.windows {
        out.push_str(&format!(
            "  in scope of maintenance window '{w}' (muted while it is active)\n"
        ));
    }
    for n in &e.inhibit {
        out.push_str(&format!(
            "  a target of inhibit rule {n} (muted while a matching source alert fires)\n"
        ));
    }
    out
}

pub fn test(config: &Path, args: &[String]) -> Result<(), Failure> {
    let c = Config::load(config).map_err(|e| (2, format!("{}: {e}", config.display())))?;
    let l = labels(args)?;
    print!("{}", routes_text(&c, &l));
    Ok(())
}

pub fn import_alertmanager(file: &Path) -> Result<(), Failure> {
    let c = alert::notify::amconfig::convert_file(file).map_err(|e| (2, e))?;
    println!(
        "# Converted from {} by strata rules import-alertmanager.",
        file.display()
    );
    for n in &c.notes {
        println!("# not converted: {n}");
    }
    print!("{}", c.toml);
    Ok(())
}
