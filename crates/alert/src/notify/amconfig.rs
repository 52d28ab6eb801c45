//! Moving from Alertmanager: an `alertmanager.yml`'s `route:` tree, `inhibit_rules:` and
//! webhook receivers turned into this crate's TOML, one to one (`strata rules
//! import-alertmanager FILE` prints it; `alertmanager_yml = "path"` in the notify file reads the
//! YAML itself through the same conversion).
//!
//! | alertmanager.yml | notify TOML |
//! |---|---|
//! | `route.receiver`, `group_by`, `continue`, `routes` | the same keys under `[route]`, `[[route.routes]]` |
//! | `group_wait`, `group_interval`, `repeat_interval` | the same keys (the top route gets Alertmanager's defaults, 30s, 5m, 4h, for those it leaves out) |
//! | `matchers: ['a="b"']` | `matchers = ['a="b"']` |
//! | `match: {a: b}`, `match_re: {a: b}` (deprecated) | `matchers = ['a="b"']`, `['a=~"b"']` |
//! | `inhibit_rules: [{source_matchers, target_matchers, equal}]` | `[[inhibit_rules]]`, same keys |
//! | `source_match(_re)`, `target_match(_re)` (deprecated) | `source_matchers`, `target_matchers` |
//! | `receivers: [{name, webhook_configs: [{url}]}]` | `[[receiver]] name, webhook` |
//!
//! Not converted (each named in the notes): other receiver kinds (define a receiver of that
//! name in the TOML file), `mute_time_intervals`/`active_time_intervals` (use `[[maintenance]]`
//! windows), `global`, `templates`.

use std::path::Path;

use serde_norway::Value as Yaml;
use toml::{Table, Value as Toml};

/// Bytes of an alertmanager.yml read.
pub const AM_FILE_BYTES_MAX: u64 = 16 << 20;
/// How deep a route tree may nest in the YAML (checked again by the TOML reader).
const DEPTH_MAX: usize = 32;

/// The TOML of an alertmanager.yml and what could not be carried over.
pub struct Converted {
    pub toml: String,
    pub notes: Vec<String>,
}

/// Reads an alertmanager.yml and returns its TOML (notes are logged, not fatal).
pub fn read_file(path: &Path) -> Result<String, String> {
    let c = convert_file(path)?;
    for n in &c.notes {
        tracing::warn!(file = %path.display(), note = %n, "alertmanager.yml: not carried over");
    }
    Ok(c.toml)
}

pub fn convert_file(path: &Path) -> Result<Converted, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > AM_FILE_BYTES_MAX {
        return Err(format!("{}: larger than 16 MiB", path.display()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    convert(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn str_of(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn strings(what: &str, v: Option<&Yaml>) -> Result<Vec<String>, String> {
    match v {
        None | Some(Yaml::Null) => Ok(Vec::new()),
        Some(Yaml::Sequence(s)) => s
            .iter()
            .map(|x| str_of(x).ok_or_else(|| format!("{what}: expected a list of strings")))
            .collect(),
        Some(_) => Err(format!("{what}: expected a list of strings")),
    }
}

/// `match`/`match_re` maps as matchers.
fn map_matchers(
    what: &str,
    v: Option<&Yaml>,
    op: &str,
    out: &mut Vec<String>,
) -> Result<(), String> {
    match v {
        None | Some(Yaml::Null) => Ok(()),
        Some(Yaml::Mapping(m)) => {
            for (k, v) in m {
                let (Some(k), Some(v)) = (str_of(k), str_of(v)) else {
                    return Err(format!("{what}: expected name: value pairs"));
                };
                out.push(format!("{k}{op}\"{}\"", v.replace('"', "\\\"")));
            }
            Ok(())
        }
        Some(_) => Err(format!("{what}: expected name: value pairs")),
    }
}

fn list(v: Vec<String>) -> Toml {
    Toml::Array(v.into_iter().map(Toml::String).collect())
}

fn route(y: &Yaml, id: &str, depth: usize, notes: &mut Vec<String>) -> Result<Table, String> {
    let what = format!("route {id}");
    if depth > DEPTH_MAX {
        return Err(format!("{what}: nested deeper than {DEPTH_MAX}"));
    }
    let Yaml::Mapping(m) = y else {
        return Err(format!("{what}: expected a mapping"));
    };
    let mut t = Table::new();
    let mut matchers = strings(&format!("{what} matchers"), m.get("matchers"))?;
    map_matchers(&format!("{what} match"), m.get("match"), "=", &mut matchers)?;
    map_matchers(
        &format!("{what} match_re"),
        m.get("match_re"),
        "=~",
        &mut matchers,
    )?;
    for (k, v) in m {
        let key = str_of(k).unwrap_or_default();
        match key.as_str() {
            "receiver" | "group_wait" | "group_interval" | "repeat_interval" => {
                let s = str_of(v).ok_or_else(|| format!("{what} {key}: expected a string"))?;
                t.insert(key, Toml::String(s));
            }
            "group_by" => {
                t.insert(key, list(strings(&format!("{what} group_by"), Some(v))?));
            }
            "continue" => {
                let Yaml::Bool(b) = v else {
                    return Err(format!("{what} continue: expected true or false"));
                };
                t.insert(key, Toml::Boolean(*b));
            }
            "matchers" | "match" | "match_re" | "routes" => {}
            "mute_time_intervals" | "active_time_intervals" => notes.push(format!(
                "{what} {key}: not converted (use [[maintenance]] windows)"
            )),
            other => notes.push(format!("{what} {other}: not converted")),
        }
    }
    if !matchers.is_empty() {
        t.insert("matchers".into(), list(matchers));
    }
    if let Some(Yaml::Sequence(children)) = m.get("routes") {
        let mut out = Vec::with_capacity(children.len());
        for (n, c) in children.iter().enumerate() {
            out.push(Toml::Table(route(
                c,
                &format!("{id}.{n}"),
                depth + 1,
                notes,
            )?));
        }
        t.insert("routes".into(), Toml::Array(out));
    }
    Ok(t)
}

fn inhibit(n: usize, y: &Yaml) -> Result<Table, String> {
    let what = format!("inhibit rule {n}");
    let Yaml::Mapping(m) = y else {
        return Err(format!("{what}: expected a mapping"));
    };
    let mut t = Table::new();
    for side in ["source", "target"] {
        let mut ms = strings(
            &format!("{what} {side}_matchers"),
            m.get(format!("{side}_matchers")),
        )?;
        map_matchers(&what, m.get(format!("{side}_match")), "=", &mut ms)?;
        map_matchers(&what, m.get(format!("{side}_match_re")), "=~", &mut ms)?;
        t.insert(format!("{side}_matchers"), list(ms));
    }
    let equal = strings(&format!("{what} equal"), m.get("equal"))?;
    if !equal.is_empty() {
        t.insert("equal".into(), list(equal));
    }
    Ok(t)
}

fn receiver(y: &Yaml, notes: &mut Vec<String>) -> Result<Option<Table>, String> {
    let Yaml::Mapping(m) = y else {
        return Err("receivers: expected a list of mappings".into());
    };
    let name = m
        .get("name")
        .and_then(str_of)
        .ok_or_else(|| "receivers: a receiver without a name".to_string())?;
    let mut url = None;
    for (k, v) in m {
        let key = str_of(k).unwrap_or_default();
        match (key.as_str(), v) {
            ("name", _) => {}
            ("webhook_configs", Yaml::Sequence(list)) => {
                for (n, c) in list.iter().enumerate() {
                    match (n, c.get("url").and_then(str_of)) {
                        (0, Some(u)) => url = Some(u),
                        (0, None) => notes.push(format!(
                            "receiver '{name}': a webhook without url (url_file) is not converted"
                        )),
                        _ => notes.push(format!(
                            "receiver '{name}': only the first of its webhook_configs is converted"
                        )),
                    }
                }
            }
            (other, _) => notes.push(format!(
                "receiver '{name}' {other}: not converted (define receiver '{name}' in the TOML file)"
            )),
        }
    }
    let Some(url) = url else {
        return Ok(None);
    };
    let mut t = Table::new();
    t.insert("name".into(), Toml::String(name));
    t.insert("webhook".into(), Toml::String(url));
    Ok(Some(t))
}

/// Converts the text of an alertmanager.yml.
pub fn convert(text: &str) -> Result<Converted, String> {
    let y: Yaml = serde_norway::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let Yaml::Mapping(top) = &y else {
        return Err("expected a mapping at the top".into());
    };
    let mut notes = Vec::new();
    let mut out = Table::new();
    let r = top
        .get("route")
        .ok_or_else(|| "no route: block".to_string())?;
    let mut top_route = route(r, "0", 0, &mut notes)?;
    // Alertmanager's defaults for what the top route leaves out (this crate's are 0: notify
    // at each record), so that the file behaves as it did under Alertmanager.
    for (k, v) in [
        ("group_wait", "30s"),
        ("group_interval", "5m"),
        ("repeat_interval", "4h"),
    ] {
        top_route.entry(k).or_insert_with(|| Toml::String(v.into()));
    }
    out.insert("route".into(), Toml::Table(top_route));
    if let Some(Yaml::Sequence(rules)) = top.get("inhibit_rules") {
        let list = rules
            .iter()
            .enumerate()
            .map(|(n, r)| inhibit(n, r).map(Toml::Table))
            .collect::<Result<Vec<_>, _>>()?;
        out.insert("inhibit_rules".into(), Toml::Array(list));
    }
    if let Some(Yaml::Sequence(rs)) = top.get("receivers") {
        let mut list = Vec::new();
        for r in rs {
            if let Some(t) = receiver(r, &mut notes)? {
                list.push(Toml::Table(t));
            }
        }
        if !list.is_empty() {
            out.insert("receiver".into(), Toml::Array(list));
        }
    }
    for (k, _) in top {
        let key = str_of(k).unwrap_or_default();
        if !matches!(key.as_str(), "route" | "inhibit_rules" | "receivers") {
            notes.push(format!("{key}: not converted"));
        }
    }
    let toml = toml::to_string(&out).map_err(|e| format!("writing TOML: {e}"))?;
    Ok(Converted { toml, notes })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const AM: &str = r#"
global:
  resolve_timeout: 5m
route:
  receiver: team
  group_by: [alertname, cluster]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  routes:
    - matchers: ['severity="critical"']
      receiver: pager
      continue: true
      group_wait: 10s
    - match:
        team: db
      match_re:
        service: "mysql|pg"
      receiver: db
      mute_time_intervals: [nights]
inhibit_rules:
  - source_matchers: [severity="critical"]
    target_matchers: [severity="warning"]
    equal: [alertname, cluster]
  - source_match: { alertname: NodeDown }
    target_match_re: { alertname: ".+" }
    equal: [instance]
receivers:
  - name: team
    webhook_configs:
      - url: http://127.0.0.1:5001/team
  - name: pager
    webhook_configs:
      - url: http://127.0.0.1:5001/pager
  - name: db
    slack_configs:
      - channel: '#db'
"#;

    #[test]
    fn an_alertmanager_yml_converts_one_to_one() {
        let c = convert(AM).unwrap();
        let t: Table = toml::from_str(&c.toml).unwrap();
        let r = t["route"].as_table().unwrap();
        assert_eq!(r["group_wait"].as_str(), Some("30s"));
        let kids = r["routes"].as_array().unwrap();
        assert_eq!(
            kids[0]["matchers"][0].as_str(),
            Some("severity=\"critical\"")
        );
        assert_eq!(kids[0]["continue"].as_bool(), Some(true));
        assert_eq!(kids[1]["matchers"][0].as_str(), Some("team=\"db\""));
        assert_eq!(
            kids[1]["matchers"][1].as_str(),
            Some("service=~\"mysql|pg\"")
        );
        let inh = t["inhibit_rules"].as_array().unwrap();
        assert_eq!(
            inh[1]["source_matchers"][0].as_str(),
            Some("alertname=\"NodeDown\"")
        );
        assert_eq!(
            inh[1]["target_matchers"][0].as_str(),
            Some("alertname=~\".+\"")
        );
        assert_eq!(t["receiver"].as_array().unwrap().len(), 2);
        assert!(c.notes.iter().any(|n| n.contains("mute_time_intervals")));
        assert!(c
            .notes
            .iter()
            .any(|n| n.contains("receiver 'db' slack_configs")));
        assert!(c.notes.iter().any(|n| n == "global: not converted"));
        // The top route's timers left out: Alertmanager's defaults.
        let bare = convert("route:\n  receiver: team\n  group_wait: 1m\n").unwrap();
        let t: Table = toml::from_str(&bare.toml).unwrap();
        assert_eq!(t["route"]["group_wait"].as_str(), Some("1m"));
        assert_eq!(t["route"]["group_interval"].as_str(), Some("5m"));
        assert_eq!(t["route"]["repeat_interval"].as_str(), Some("4h"));
    }
}
