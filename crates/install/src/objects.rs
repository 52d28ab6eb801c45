//! The objects an installed host owns on the core — its agent record (a check), its worksheet
//! and its default alert rules — and their upsert: read what the core holds, compare, and write
//! only what differs. Every object carries `owner = "host:<id>"`, so uninstall deletes them by
//! owner and a lost local file never duplicates them.

use serde_json::{json, Map, Value};

use crate::core::{encode, Core};
use crate::layout::Mode;
use crate::report::Outcome;

/// The document collections an owner's objects may be in (uninstall clears them all).
pub const COLLECTIONS: [&str; 3] = ["checks", "worksheets", "dashboards"];

/// One object on the core.
pub enum Object {
    /// A JSON document in a collection (`checks`, `worksheets`, `dashboards`).
    Doc {
        collection: &'static str,
        id: String,
        body: Value,
    },
    /// An alert ruleset (TOML, one ruleset).
    Rule { name: String, toml: String },
}

impl Object {
    pub fn label(&self) -> String {
        match self {
            Object::Doc { collection, id, .. } => format!("{collection}/{id}"),
            Object::Rule { name, .. } => format!("rules/{name}"),
        }
    }
}

pub fn owner(host_id: &str) -> String {
    format!("host:{host_id}")
}

/// What the host's objects are built from.
pub struct Host<'a> {
    pub id: &'a str,
    pub mode: Mode,
    pub listen: &'a str,
    pub broker: &'a str,
}

/// The agent's record: a check document saying how the agent is reached. In pull mode it is
/// the broker's scrape of the agent; otherwise the agent sends by itself and the record is
/// paused (kept so the core lists every installed host and how it connects).
pub fn agent_check(h: &Host) -> Object {
    let id = h.id;
    Object::Doc {
        collection: "checks",
        id: format!("host-{id}-agent"),
        body: json!({
            "name": format!("agent {id}"),
            "owner": owner(id),
            "broker": h.broker,
            "mode": h.mode.word(),
            "paused": h.mode != Mode::Pull,
            "spec": {
                "kind": "prometheus",
                "target": format!("http://{}/metrics", h.listen),
                // The agent makes its samples every 10 s (`agent::PERIOD_S_DEFAULT`).
                "period_ms": 10_000,
                "timeout_ms": 5_000,
                "tags": [["host", id]],
            },
        }),
    }
}

fn graph(host: &str, name: &str, title: &str, extra: &[&str]) -> Value {
    let mut tags: Vec<String> = extra.iter().map(|t| t.to_string()).collect();
    tags.push(format!("host:{host}"));
    json!({
        "query": format!("and(host:{host})"),
        "name": name,
        "tags": tags,
        "title": title,
    })
}

/// The host worksheet: CPU, memory, disk latency heatmaps and network.
pub fn worksheet(h: &Host) -> Object {
    let id = h.id;
    Object::Doc {
        collection: "worksheets",
        id: format!("host-{id}"),
        body: json!({
            "name": format!("host {id}"),
            "owner": owner(id),
            "graphs": [
                graph(id, "cpu_busy_ratio", "CPU busy (share of each second)", &["cpu:total"]),
                graph(id, "mem_available_bytes", "memory available", &[]),
                graph(id, "disk_op_seconds", "disk latency per operation", &[]),
                graph(id, "net_bytes_total", "network bytes", &[]),
                graph(id, "fs_used_ratio", "filesystem used", &[]),
                graph(id, "agent_backlog_bytes", "agent backlog", &[]),
            ],
        }),
    }
}

/// Where the worksheet opens in the core's UI.
pub fn worksheet_url(core: &str, ws: &Object) -> Option<String> {
    let Object::Doc { id, body, .. } = ws else {
        return None;
    };
    let state = json!({
        "view": "explore",
        "ws": id,
        "wsName": body["name"],
        "graphs": body["graphs"],
    });
    Some(format!("{core}/?s={}", encode(&state.to_string())))
}

fn ruleset(name: String, owner: &str, body: &str) -> Object {
    let toml = format!("[[ruleset]]\nname = \"{name}\"\nowner = \"{owner}\"\n{body}");
    Object::Rule { name, toml }
}

/// The default rules: CPU saturated, filesystem nearly full or forecast to fill within 7 days,
/// host silent, agent backlog growing.
pub fn rules(h: &Host) -> Vec<Object> {
    let id = h.id;
    let o = owner(id);
    let host = format!("and(host:{id})");
    vec![
        ruleset(
            format!("host-{id}-cpu"),
            &o,
            &format!(
                "expr = 'find:histogram(\"cpu_busy_ratio\", \"and(host:{id},cpu:total)\")'\n\
                 window = \"rolling:merge(5m)\"\n\
                 for = \"5m\"\n\
                 annotations = {{ summary = \"CPU of host {id} was over 90 % busy in {{{{ ratio_above(0.9) | percent }}}} of the last 5 minutes' seconds\" }}\n\
                 [[ruleset.severity]]\nlevel = 2\nwhen = \"ratio_above(0.9) >= 0.8\"\nclear = \"ratio_above(0.9) < 0.6\"\n"
            ),
        ),
        ruleset(
            format!("host-{id}-fs-full"),
            &o,
            &format!(
                "expr = 'find(\"fs_used_ratio\", \"{host}\")'\n\
                 window = \"rolling:max(5m)\"\n\
                 annotations = {{ summary = \"filesystem {{{{ tag.mountpoint }}}} of host {id} is {{{{ value | percent }}}} full\" }}\n\
                 [[ruleset.severity]]\nlevel = 1\nwhen = \"> 0.95\"\n\
                 [[ruleset.severity]]\nlevel = 2\nwhen = \"> 0.9\"\n"
            ),
        ),
        ruleset(
            format!("host-{id}-fs-forecast"),
            &o,
            &format!(
                "expr = '(find(\"fs_avail_bytes\", \"{host}\") | forecasting:regression(6h)) + \
                 (find(\"fs_avail_bytes\", \"{host}\") | forecasting:slope(6h)) * 604800'\n\
                 window = \"rolling:last(15m)\"\n\
                 for = \"30m\"\n\
                 annotations = {{ summary = \"a filesystem of host {id} is forecast to fill within 7 days (linear fit over 6 h)\" }}\n\
                 [[ruleset.severity]]\nlevel = 3\nwhen = \"< 0\"\n"
            ),
        ),
        ruleset(
            format!("host-{id}-silent"),
            &o,
            &format!(
                "absent = \"cpu_busy_ratio\"\n\
                 tags = \"{host}\"\n\
                 silent_for = \"5m\"\n\
                 annotations = {{ summary = \"host {id} has sent nothing for 5 minutes\" }}\n\
                 [[ruleset.severity]]\nlevel = 2\n"
            ),
        ),
        ruleset(
            format!("host-{id}-backlog"),
            &o,
            &format!(
                "expr = 'find(\"agent_backlog_bytes\", \"{host}\") | forecasting:slope(15m)'\n\
                 window = \"rolling:last(5m)\"\n\
                 for = \"15m\"\n\
                 annotations = {{ summary = \"the agent of host {id} is not getting its data to the core: its backlog grows\" }}\n\
                 [[ruleset.severity]]\nlevel = 3\nwhen = \"> 0\"\n"
            ),
        ),
    ]
}

/// A document as the core stores it, for comparison: without `id`, `updated_ms`, and with the
/// format version the core adds.
fn comparable(mut doc: Map<String, Value>) -> Map<String, Value> {
    doc.remove("id");
    doc.remove("updated_ms");
    doc.entry("version").or_insert(json!(1));
    if let Some(Value::Object(spec)) = doc.get_mut("spec") {
        spec.remove("id");
    }
    doc
}

/// A ruleset's TOML as a value: the core's `definition` and ours compare equal when they say
/// the same thing, however each is laid out.
fn rule_value(text: &str) -> Option<toml::Value> {
    toml::from_str::<toml::Value>(text).ok()
}

/// Upserts one object: reads it, compares, writes only when it differs (or is missing).
pub fn upsert(core: &Core, obj: &Object, dry_run: bool) -> Result<Outcome, String> {
    match obj {
        Object::Doc {
            collection,
            id,
            body,
        } => {
            let path = format!("/api/strata/v1/{collection}/{id}");
            let held = core.get_json(&path)?;
            let outcome = match (&held, body) {
                (None, _) => Outcome::Created,
                (Some(Value::Object(h)), Value::Object(b))
                    if comparable(h.clone()) == comparable(b.clone()) =>
                {
                    Outcome::Unchanged
                }
                _ => Outcome::Updated,
            };
            if !dry_run && outcome != Outcome::Unchanged {
                core.write("PUT", &path, body.to_string().as_bytes())?;
            }
            Ok(outcome)
        }
        Object::Rule { name, toml } => {
            let path = format!("/api/strata/v1/rules/{name}");
            let held = core.get_json(&path)?;
            let outcome = match held {
                None => Outcome::Created,
                Some(h) => {
                    let theirs = h["definition"].as_str().and_then(rule_value);
                    if theirs.is_some() && theirs == rule_value(toml) {
                        Outcome::Unchanged
                    } else {
                        Outcome::Updated
                    }
                }
            };
            if !dry_run && outcome != Outcome::Unchanged {
                core.write("PUT", &path, toml.as_bytes())?;
            }
            Ok(outcome)
        }
    }
}

/// Deletes every object `owner` has on the core; returns how many there were.
pub fn delete_owned(core: &Core, owner: &str, dry_run: bool) -> Result<usize, String> {
    let q = encode(owner);
    let mut n = 0;
    for c in COLLECTIONS {
        let path = format!("/api/strata/v1/{c}?owner={q}");
        if dry_run {
            n += core
                .get_json(&path)?
                .and_then(|v| v.as_array().map(Vec::len))
                .unwrap_or(0);
        } else {
            let a = core.write("DELETE", &path, b"")?;
            n += a
                .json()
                .and_then(|v| v["deleted"].as_array().map(Vec::len))
                .unwrap_or(0);
        }
    }
    let path = format!("/api/strata/v1/rules?owner={q}");
    if dry_run {
        n += core
            .get_json(&path)?
            .and_then(|v| v["rules"].as_array().map(Vec::len))
            .unwrap_or(0);
    } else {
        let a = core.write("DELETE", &path, b"")?;
        n += a
            .json()
            .and_then(|v| v["deleted"].as_array().map(Vec::len))
            .unwrap_or(0);
    }
    Ok(n)
}

/// The httptrap check the host's observer writes as (its streams carry `__check:<this>`).
pub fn observe_check(host_id: &str) -> String {
    format!("host-{host_id}-observe")
}

/// The port of a `host:port` target (the observer watches it).
pub fn target_port(target: &str) -> Result<u16, String> {
    target
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("`{target}`: expected HOST:PORT"))
}

/// A graph of the observer's histograms for one protocol on one port.
fn observed(host_id: &str, proto: &str, port: u16, name: &str, title: &str) -> Value {
    let check = observe_check(host_id);
    json!({
        "query": format!("and(__check:{check},proto:{proto},port:{port})"),
        "name": name,
        "tags": [format!("__check:{check}"), format!("proto:{proto}"), format!("port:{port}")],
        "title": title,
    })
}

/// A rule on what the observed requests' users felt: the share of requests slower than
/// `slow_s` over five minutes, and how many they were.
fn slow_requests_rule(h: &Host, plugin: &str, proto: &str, port: u16, slow_s: f64) -> Object {
    let id = h.id;
    let check = observe_check(id);
    ruleset(
        format!("host-{id}-{plugin}-slow"),
        &owner(id),
        &format!(
            "expr = 'find:histogram(\"observe.latency\", \"and(__check:{check},proto:{proto},port:{port})\")'\n\
             window = \"rolling:merge(5m)\"\n\
             for = \"5m\"\n\
             annotations = {{ summary = \"{plugin} on host {id}: {{{{ count_above({slow_s}) }}}} requests ({{{{ ratio_above({slow_s}) | percent }}}}) took longer than {slow_s} s in 5 minutes\" }}\n\
             [[ruleset.severity]]\nlevel = 3\nwhen = \"ratio_above({slow_s}) > 0.05\"\nclear = \"ratio_above({slow_s}) < 0.02\"\n"
        ),
    )
}

/// A graph of one of a plugin check's streams.
fn check_graph(host_id: &str, check: &str, name: &str, title: &str) -> Value {
    json!({
        "query": format!("and(check:{check})"),
        "name": name,
        "tags": [format!("check:{check}"), format!("host:{host_id}")],
        "title": title,
    })
}

/// A broker check document owned by the host.
fn check_doc(
    h: &Host,
    check: &str,
    name: String,
    kind: &str,
    target: &str,
    config: Value,
) -> Object {
    Object::Doc {
        collection: "checks",
        id: check.to_string(),
        body: json!({
            "name": name,
            "owner": owner(h.id),
            "broker": h.broker,
            "spec": {
                "kind": kind,
                "target": target,
                "period_ms": 10_000,
                "timeout_ms": 5_000,
                "config": config,
                "tags": [["host", h.id]],
            },
        }),
    }
}

/// The `postgres` plugin: a broker's `postgres` check of the local server (connections,
/// transactions, scans, tuples, locks, replication; `crates/checks/README.md`) as the
/// monitoring role, per-query latency from the host's observer on the server's port, a
/// Postgres worksheet and rules.
pub fn postgres(h: &Host, target: &str, user: &str) -> Result<Vec<Object>, String> {
    let id = h.id;
    let port = target_port(target)?;
    let check = format!("host-{id}-postgres");
    let tags = format!("and(host:{id},check:{check})");
    let graph = |name: &str, title: &str| check_graph(id, &check, name, title);
    let spec = json!({ "user": user });
    Ok(vec![
        check_doc(h, &check, format!("postgres {id}"), "postgres", target, spec),
        Object::Doc {
            collection: "worksheets",
            id: format!("host-{id}-postgres"),
            body: json!({
                "name": format!("postgres on host {id}"),
                "owner": owner(id),
                "graphs": [
                    observed(id, "postgres", port, "observe.latency", "query latency (every query, observed on the wire)"),
                    observed(id, "postgres", port, "observe.rows", "rows per query"),
                    graph("connections", "connections"),
                    graph("connections_active", "active connections"),
                    graph("xact_commit", "transactions committed"),
                    graph("locks", "locks by mode"),
                    graph("seq_scan", "sequential scans"),
                ],
            }),
        },
        ruleset(
            format!("host-{id}-pg-connections"),
            &owner(id),
            &format!(
                "expr = 'find(\"connections\", \"{tags}\") / find(\"max_connections\", \"{tags}\")'\n\
                 window = \"rolling:max(5m)\"\n\
                 annotations = {{ summary = \"postgres on host {id} uses {{{{ value | percent }}}} of its connections\" }}\n\
                 [[ruleset.severity]]\nlevel = 2\nwhen = \"> 0.9\"\n"
            ),
        ),
        slow_requests_rule(h, "postgres", "postgres", port, 1.0),
    ])
}

/// The `redis` plugin: a broker's `redis` check (INFO, the server's own latency histograms),
/// per-command latency from the host's observer, a worksheet and a slow-commands rule.
pub fn redis(h: &Host, target: &str) -> Result<Vec<Object>, String> {
    let id = h.id;
    let port = target_port(target)?;
    let check = format!("host-{id}-redis");
    let graph = |name: &str, title: &str| check_graph(id, &check, name, title);
    Ok(vec![
        check_doc(h, &check, format!("redis {id}"), "redis", target, json!({})),
        Object::Doc {
            collection: "worksheets",
            id: format!("host-{id}-redis"),
            body: json!({
                "name": format!("redis on host {id}"),
                "owner": owner(id),
                "graphs": [
                    observed(id, "redis", port, "observe.latency", "command latency (every command, observed on the wire)"),
                    graph("command_latency", "command latency (the server's own histograms)"),
                    graph("connected_clients", "clients"),
                    graph("used_memory", "memory used"),
                    graph("instantaneous_ops_per_sec", "operations per second"),
                ],
            }),
        },
        slow_requests_rule(h, "redis", "redis", port, 0.01),
    ])
}

/// The `http` plugin: the host's observer on a local web server's port (latency by method,
/// route and status), a broker's `http` check of `url`, a worksheet and a slow-requests rule.
pub fn http(h: &Host, port: u16, url: &str) -> Vec<Object> {
    let id = h.id;
    let check = format!("host-{id}-http");
    let graph = |name: &str, title: &str| check_graph(id, &check, name, title);
    vec![
        check_doc(h, &check, format!("http {id}"), "http", url, json!({})),
        Object::Doc {
            collection: "worksheets",
            id: format!("host-{id}-http"),
            body: json!({
                "name": format!("web server on host {id}"),
                "owner": owner(id),
                "graphs": [
                    observed(id, "http", port, "observe.latency", "request latency (every request, observed on the wire)"),
                    observed(id, "http", port, "observe.ttfb", "time to first byte"),
                    observed(id, "http", port, "observe.response_bytes", "response size"),
                    graph("total_time", "check: total time"),
                    graph("code", "check: status code"),
                ],
            }),
        },
        slow_requests_rule(h, "http", "http", port, 1.5),
    ]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn rules_are_toml_and_owned() {
        let h = Host {
            id: "0123456789abcdef0123456789abcdef",
            mode: Mode::Push,
            listen: "127.0.0.1:2609",
            broker: "default",
        };
        for r in rules(&h) {
            let Object::Rule { toml, name } = &r else {
                panic!("a rule")
            };
            let v = rule_value(toml).unwrap_or_else(|| panic!("{name}: {toml}"));
            assert_eq!(
                v["ruleset"][0]["owner"].as_str(),
                Some("host:0123456789abcdef0123456789abcdef")
            );
            assert!(name.len() <= 64);
        }
        let ws = worksheet(&h);
        let url = worksheet_url("http://c:1", &ws).unwrap();
        assert!(url.starts_with("http://c:1/?s=%7B"), "{url}");
    }

    #[test]
    fn stored_documents_compare_equal_to_what_was_sent() {
        let sent = json!({"name": "a", "owner": "host:x", "spec": {"kind": "tcp"}});
        let held = json!({"id": "x", "updated_ms": 5, "version": 1, "name": "a",
            "owner": "host:x", "spec": {"kind": "tcp"}});
        let (Value::Object(s), Value::Object(h)) = (sent, held) else {
            panic!()
        };
        assert_eq!(comparable(s), comparable(h));
    }
}
