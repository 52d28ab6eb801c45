//! A real collectd (Debian's `collectd-core`) sends its binary network protocol to a real
//! `strata broker` (forwarding to a core) and to a real `strata serve`'s collectd listener at
//! once: plugins cpu, memory, load and interface every second, and the csv plugin writing the
//! same values to files as the oracle. Every value in the CSV files reaches each core under its
//! documented name and tags (`collectd.<plugin>.<type>`, `host`, `plugin_instance`,
//! `type_instance`, `ds`) at its time, with its value, and nothing else arrives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_common::{apt_install, client, now_s, urlencode, Server};

const COLLECTD: &str = "/usr/sbin/collectd";
/// How long collectd runs (at a 1 s interval).
const COLLECTD_RUN_MS: u64 = 6_000;
/// Bound on waiting for a process's start line or for the data to arrive.
const WAIT_S_MAX: u64 = 60;
const PLUGINS: [&str; 4] = ["cpu", "memory", "load", "interface"];

/// A series as the core names it: metric name and tags (the broker's `check` tag left out).
type SeriesKey = (String, BTreeMap<String, String>);
/// Values by series, then by time in ms.
type Values = BTreeMap<SeriesKey, BTreeMap<i64, f64>>;

struct Broker {
    child: Child,
    collectd: String,
}

impl Broker {
    fn start(data: &Path, core: &Server) -> Broker {
        let (child, line) = serve_common::forwarding_broker(
            "edge-collectd",
            data,
            core,
            &["--collectd", "127.0.0.1:0"],
        );
        let collectd = serve_common::ready_address(&line, "collectd");
        Broker { child, collectd }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// collectd's configuration: the four plugins every second, the csv plugin as the oracle, and
/// the network plugin sending to every address in `servers`.
fn collectd_conf(dir: &Path, host: &str, servers: &[&str]) -> String {
    let mut conf = format!(
        "Hostname \"{host}\"\nFQDNLookup false\nInterval 1\nBaseDir \"{d}\"\n\
         PIDFile \"{d}/collectd.pid\"\nTypesDB \"/usr/share/collectd/types.db\"\n\
         LoadPlugin logfile\n<Plugin logfile>\n  LogLevel info\n  File \"{d}/collectd.log\"\n\
         </Plugin>\nLoadPlugin csv\n<Plugin csv>\n  DataDir \"{d}/csv\"\n  StoreRates false\n\
         </Plugin>\nLoadPlugin network\n<Plugin network>\n",
        d = dir.display()
    );
    for server in servers {
        let (ip, port) = server.rsplit_once(':').unwrap();
        conf.push_str(&format!("  Server \"{ip}\" \"{port}\"\n"));
    }
    conf.push_str("</Plugin>\n");
    for plugin in PLUGINS {
        conf.push_str(&format!("LoadPlugin {plugin}\n"));
    }
    conf
}

/// Runs collectd for `COLLECTD_RUN_MS`, then stops it with SIGTERM (it sends what it holds).
fn run_collectd(dir: &Path, conf: &str) {
    let path = dir.join("collectd.conf");
    std::fs::write(&path, conf).unwrap();
    let mut child = Command::new(COLLECTD)
        .args(["-f", "-C"])
        .arg(&path)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(COLLECTD_RUN_MS));
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(WAIT_S_MAX);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "collectd exited {status}");
            break;
        }
        assert!(Instant::now() < deadline, "collectd did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `name-instance` as collectd's csv plugin names directories and files.
fn split_instance(text: &str) -> (&str, &str) {
    text.split_once('-').unwrap_or((text, ""))
}

/// Every value the csv plugin wrote for `host`.
fn csv_values(csv: &Path, host: &str) -> Values {
    let mut out = Values::new();
    for plugin_dir in std::fs::read_dir(csv.join(host)).unwrap() {
        let plugin_dir = plugin_dir.unwrap().path();
        let dir_name = plugin_dir.file_name().unwrap().to_str().unwrap().to_owned();
        let (plugin, plugin_instance) = split_instance(&dir_name);
        for file in std::fs::read_dir(&plugin_dir).unwrap() {
            let file = file.unwrap().path();
            let file_name = file.file_name().unwrap().to_str().unwrap().to_owned();
            // `<type>[-<type_instance>]-YYYY-MM-DD`.
            let stem = &file_name[..file_name.len() - "-YYYY-MM-DD".len()];
            let (kind, type_instance) = split_instance(stem);
            let text = std::fs::read_to_string(&file).unwrap();
            let mut lines = text.lines();
            let header: Vec<&str> = lines.next().unwrap().split(',').collect();
            assert_eq!(header[0], "epoch", "{}", file.display());
            let ds_names = &header[1..];
            for line in lines {
                let fields: Vec<&str> = line.split(',').collect();
                assert_eq!(fields.len(), header.len(), "{}: {line}", file.display());
                let ts_ms = (fields[0].parse::<f64>().unwrap() * 1000.0).round() as i64;
                for (i, ds) in ds_names.iter().enumerate() {
                    let mut tags = BTreeMap::new();
                    tags.insert("host".to_owned(), host.to_owned());
                    if !plugin_instance.is_empty() {
                        tags.insert("plugin_instance".to_owned(), plugin_instance.to_owned());
                    }
                    if !type_instance.is_empty() {
                        tags.insert("type_instance".to_owned(), type_instance.to_owned());
                    }
                    if ds_names.len() > 1 {
                        tags.insert("ds".to_owned(), (*ds).to_owned());
                    }
                    let name = format!("collectd.{plugin}.{kind}");
                    let value: f64 = fields[1 + i].parse().unwrap();
                    out.entry((name, tags)).or_default().insert(ts_ms, value);
                }
            }
        }
    }
    out
}

/// Every sample the core holds for `names` of `host` over the last 10 minutes, by the
/// Prometheus API (raw samples of a range selector).
fn core_values(core: &Server, names: &[&String], host: &str) -> Values {
    let mut out = Values::new();
    for name in names {
        let query = format!("{{\"{name}\",host=\"{host}\"}}[10m]");
        let url = core.url(&format!(
            "/api/v1/query?query={}&time={}",
            urlencode(&query),
            now_s() + 1
        ));
        let Ok(response) = client().get(&url).send() else {
            continue;
        };
        let doc: Value = response.json().unwrap();
        assert_eq!(doc["status"], "success", "{query}: {doc}");
        for series in doc["data"]["result"].as_array().unwrap() {
            let mut tags = BTreeMap::new();
            for (k, v) in series["metric"].as_object().unwrap() {
                if k != "__name__" && k != "check" {
                    tags.insert(k.clone(), v.as_str().unwrap().to_owned());
                }
            }
            let values = out.entry(((*name).clone(), tags)).or_default();
            for pair in series["values"].as_array().unwrap() {
                let ts_ms = (pair[0].as_f64().unwrap() * 1000.0).round() as i64;
                let value: f64 = pair[1].as_str().unwrap().parse().unwrap();
                values.insert(ts_ms, value);
            }
        }
    }
    out
}

/// The csv plugin prints gauges with six decimals; counters exactly. Times agree within the
/// millisecond collectd rounds them to.
fn same(expected: &Values, got: &Values) -> Result<(), String> {
    let expected_keys: Vec<_> = expected.keys().collect();
    let got_keys: Vec<_> = got.keys().collect();
    if expected_keys != got_keys {
        let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
        let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
        return Err(format!("series missing {missing:?}, unexpected {extra:?}"));
    }
    for (key, values) in expected {
        let held = &got[key];
        if values.len() != held.len() {
            return Err(format!(
                "{key:?}: {} values in the CSV, {held:?}",
                values.len()
            ));
        }
        for ((&ts, &value), (&held_ts, &held_value)) in values.iter().zip(held) {
            let tolerance = 5e-7 * value.abs().max(1.0);
            if (ts - held_ts).abs() > 1 || (value - held_value).abs() > tolerance {
                return Err(format!(
                    "{key:?}: CSV {ts} {value}, core {held_ts} {held_value}"
                ));
            }
        }
    }
    Ok(())
}

/// Waits until `core` holds exactly what the CSV says, or fails naming the difference.
fn assert_core_matches(core: &Server, expected: &Values, host: &str, what: &str) {
    let names: Vec<&String> = expected
        .keys()
        .map(|(name, _)| name)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let deadline = Instant::now() + Duration::from_secs(WAIT_S_MAX);
    loop {
        let got = core_values(core, &names, host);
        match same(expected, &got) {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

#[test]
fn collectd_values_reach_the_core_through_the_broker_and_serve_exactly_as_its_csv_says() {
    if !Path::new(COLLECTD).exists() {
        apt_install(&["collectd-core"]);
    }
    // collectd's csv plugin refuses any path with a directory starting with a dot.
    let dir = tempfile::Builder::new()
        .prefix("strata-collectd-")
        .tempdir()
        .unwrap();
    let direct = Server::start(&dir.path().join("direct"), &["--collectd", "127.0.0.1:0"]);
    let direct_addr = direct
        .line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("collectd="))
        .expect("collectd listener in the start line")
        .to_owned();
    let core = Server::start(&dir.path().join("core"), &[]);
    let broker = Broker::start(&dir.path().join("broker"), &core);

    let host = format!("e2e-{}", std::process::id());
    let collectd_dir = dir.path().join("collectd");
    std::fs::create_dir_all(&collectd_dir).unwrap();
    let conf = collectd_conf(&collectd_dir, &host, &[&broker.collectd, &direct_addr]);
    run_collectd(&collectd_dir, &conf);

    let csv = collectd_dir.join("csv");
    if !csv.join(&host).is_dir() {
        let log = std::fs::read_to_string(collectd_dir.join("collectd.log")).unwrap_or_default();
        panic!("collectd wrote no CSV for {host}; its log:\n{log}");
    }
    let expected = csv_values(&csv, &host);
    // Every plugin wrote, and at least a few seconds of each.
    for plugin in PLUGINS {
        let prefix = format!("collectd.{plugin}.");
        let rows = expected
            .iter()
            .filter(|((name, _), _)| name.starts_with(&prefix))
            .map(|(_, v)| v.len())
            .max()
            .unwrap_or(0);
        assert!(rows >= 3, "{plugin}: {rows} rows in the CSV");
    }
    // The types.db names of the multi-value types are the CSV's column names.
    let load = expected.keys().filter(|(n, _)| n == "collectd.load.load");
    let ds: Vec<&str> = load.map(|(_, t)| t["ds"].as_str()).collect();
    assert_eq!(ds, ["longterm", "midterm", "shortterm"]);

    assert_core_matches(&direct, &expected, &host, "strata serve --collectd");
    assert_core_matches(&core, &expected, &host, "strata broker --collectd → core");
    drop(broker);
}
