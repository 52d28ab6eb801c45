//! The plugins of `strata install agent` against real servers. `postgres` against Debian's
//! PostgreSQL (a private
//! cluster: initdb in a temporary directory, on a free loopback port): the installer defines the
//! broker's `postgres` check, a Postgres worksheet and a connections rule on the core, owned by
//! the host; a real `strata broker --checks-from-core` runs the check and the core receives the
//! server's connections; the observer the installer configured (`etc/strata/observe.toml`) sees
//! every query of that check on the wire and the core gets their latency histograms under the
//! host's own check; a second run changes nothing; `uninstall --purge` removes them all.
//! `redis` and `http` against Debian's redis-server and Python's `http.server`: the broker's
//! checks run, the one observer watches both ports, and the core gets each one's latency.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod serve_common;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use serve_common::{client, eventually, strata, Server};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn pg_bin() -> PathBuf {
    if !Path::new("/usr/lib/postgresql").exists() && is_root() {
        serve_common::apt_install(&["postgresql"]);
    }
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Debian's PostgreSQL (apt-get install postgresql)")
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    PathBuf::from(format!(
        "/usr/lib/postgresql/{}/bin",
        versions.last().expect("a PostgreSQL version")
    ))
}

/// PostgreSQL refuses to run as root: as root the server runs as Debian's `postgres` user.
fn as_server_user(cmd: &mut Command) -> &mut Command {
    if is_root() {
        let id = |flag: &str| {
            let out = Command::new("id")
                .args([flag, "postgres"])
                .output()
                .unwrap();
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse::<u32>()
                .unwrap()
        };
        cmd.uid(id("-u")).gid(id("-g"));
    }
    cmd
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn postgres(dir: &Path) -> (Kill, u16) {
    let bin = pg_bin();
    let data = dir.join("pg");
    std::fs::create_dir_all(&data).unwrap();
    if is_root() {
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&data)
            .status()
            .unwrap();
    }
    let ok = as_server_user(
        Command::new(bin.join("initdb")).args(["-A", "trust", "-U", "postgres", "-D"]),
    )
    .arg(&data)
    .stdout(Stdio::null())
    .status()
    .unwrap()
    .success();
    assert!(ok, "initdb failed");
    let port = free_port();
    let child = as_server_user(Command::new(bin.join("postgres")).arg("-D").arg(&data))
        .args(["-p", &port.to_string(), "-k"])
        .arg(&data)
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Kill(child), port)
}

fn redis_server(dir: &Path) -> (Kill, u16) {
    if !Path::new("/usr/bin/redis-server").exists() && is_root() {
        serve_common::apt_install(&["redis-server"]);
    }
    let port = free_port();
    let child = Command::new("/usr/bin/redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    (Kill(child), port)
}

fn web_server(dir: &Path) -> (Kill, u16) {
    let port = free_port();
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (Kill(child), port)
}

fn observer(root: &Path) -> Option<Kill> {
    if !is_root() {
        eprintln!("observer part skipped: capturing needs root (CAP_NET_RAW)");
        return None;
    }
    // The unit runs `strata observe --config …`; here the test runs it, with 1 s periods so the
    // broker's check requests (every 10 s) arrive within seconds.
    Some(Kill(
        strata()
            .args(["observe", "--period", "1", "--config"])
            .arg(root.join("etc/strata/observe.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ))
}

fn found(server: &Server, query: &str) -> Option<Value> {
    let url = server.url(&format!("/api/strata/v1/find?query={query}"));
    let found: Value = client().get(url).send().ok()?.json().ok()?;
    (!found.as_array()?.is_empty()).then_some(found)
}

fn broker(dir: &Path, core: &str, id: &str) -> Kill {
    Kill(
        strata()
            .args(["broker", "--id", id, "--data-dir"])
            .arg(dir.join(format!("broker-{id}")))
            .args(["--core-url", core, "--checks-from-core"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn install(core: &str, root: &Path, pg: &str, extra: &[&str]) -> Output {
    strata()
        .args(["install", "agent", "--core", core, "--root"])
        .arg(root)
        .args(["--init", "none", "--statsd", "", "--wait-s", "0", "--json"])
        .args([
            "--plugins",
            "host,postgres",
            "--postgres-target",
            pg,
            // The installer creates the monitoring role as the cluster's administrator.
            "--postgres-user",
            "strata_monitor",
            "--postgres-admin-user",
            "postgres",
            "--broker",
            "edge-pg",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn step<'a>(report: &'a Value, name: &str) -> &'a str {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == name)
        .and_then(|s| s["outcome"].as_str())
        .unwrap_or("missing")
}

#[test]
fn the_postgres_plugin_checks_debians_postgresql_through_a_broker() {
    let dir = tempfile::tempdir().unwrap();
    let (_pg, port) = postgres(dir.path());
    let server = Server::start(&dir.path().join("data"), &["--statsd", "off"]);
    let core = server.url("");
    let core = core.trim_end_matches('/');
    let root = dir.path().join("root");
    let pg = format!("127.0.0.1:{port}");
    let first = report(&install(core, &root, &pg, &[]));
    assert_eq!(step(&first, "postgres"), "created", "{first}");
    assert_eq!(step(&first, "postgres-role"), "created", "{first}");
    let host = first["host_id"].as_str().unwrap().to_string();
    let check = format!("host-{host}-postgres");
    let _broker = Kill(
        strata()
            .args(["broker", "--id", "edge-pg", "--data-dir"])
            .arg(dir.path().join("broker"))
            .args(["--core-url", core, "--checks-from-core"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let connections = eventually("the server's connections at the core", || {
        let url = server.url(&format!(
            "/api/strata/v1/find?query=and(__name:connections,check:{check})"
        ));
        let found: Value = client().get(url).send().ok()?.json().ok()?;
        (!found.as_array()?.is_empty()).then_some(found)
    });
    let tags = connections[0]["tags"].to_string();
    assert!(tags.contains(&format!("host:{host}")), "{tags}");
    assert_eq!(step(&first, "observer"), "created", "{first}");
    let observe_toml = std::fs::read_to_string(root.join("etc/strata/observe.toml")).unwrap();
    assert!(
        observe_toml.contains(&format!("\"postgres:{port}\"")),
        "{observe_toml}"
    );
    // The unit runs `strata observe --config …`; here the test runs it (with 1 s periods, so
    // the broker's check queries, every 10 s, arrive within seconds). Capturing needs root.
    if is_root() {
        let _observer = Kill(
            strata()
                .args(["observe", "--period", "1", "--config"])
                .arg(root.join("etc/strata/observe.toml"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let observed = eventually("query latency observed on the wire at the core", || {
            let url = server.url(&format!(
                "/api/strata/v1/find?query=and(__name:observe.latency,__check:host-{host}-observe,proto:postgres,port:{port})"
            ));
            let found: Value = client().get(url).send().ok()?.json().ok()?;
            (!found.as_array()?.is_empty()).then_some(found)
        });
        assert!(observed.to_string().contains("kind:"), "{observed}");
    } else {
        eprintln!("observer part skipped: capturing needs root (CAP_NET_RAW)");
    }
    let ws: Value = client()
        .get(server.url(&format!("/api/strata/v1/worksheets/host-{host}-postgres")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(ws["graphs"].to_string().contains("\"connections\""), "{ws}");
    assert!(ws["graphs"].to_string().contains("observe.latency"), "{ws}");
    let again = report(&install(core, &root, &pg, &[]));
    assert_eq!(again["changed"], 0, "{again}");
    assert_eq!(step(&again, "postgres"), "unchanged");
    assert_eq!(step(&again, "observer"), "unchanged");
    assert_eq!(step(&again, "postgres-role"), "unchanged");
    let purge = strata()
        .args(["uninstall", "agent", "--init", "none", "--purge", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        purge.status.success(),
        "{}",
        String::from_utf8_lossy(&purge.stderr)
    );
    let left: Value = client()
        .get(server.url(&format!("/api/strata/v1/checks?owner=host%3A{host}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(left, serde_json::json!([]));
    assert!(!root.join("etc/strata/observe.toml").exists());
}

#[test]
fn the_redis_and_http_plugins_check_and_observe_real_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, redis_port) = redis_server(dir.path());
    let (_web, web_port) = web_server(dir.path());
    let server = Server::start(&dir.path().join("data"), &["--statsd", "off"]);
    let core = server.url("");
    let core = core.trim_end_matches('/');
    let root = dir.path().join("root");
    let redis_target = format!("127.0.0.1:{redis_port}");
    let web = web_port.to_string();
    let args = [
        "--plugins",
        "host,redis,http",
        "--redis-target",
        &redis_target,
        "--http-port",
        &web,
        "--broker",
        "edge-rh",
    ];
    let run = || {
        strata()
            .args(["install", "agent", "--core", core, "--root"])
            .arg(&root)
            .args(["--init", "none", "--statsd", "", "--wait-s", "0", "--json"])
            .args(args)
            .output()
            .unwrap()
    };
    let first = report(&run());
    for s in ["redis", "http", "observer"] {
        assert_eq!(step(&first, s), "created", "{s}: {first}");
    }
    let host = first["host_id"].as_str().unwrap().to_string();
    let _broker = broker(dir.path(), core, "edge-rh");
    let clients = format!("and(__name:connected_clients,check:host-{host}-redis)");
    eventually("redis INFO at the core", || found(&server, &clients));
    let code = format!("and(__name:code,check:host-{host}-http)");
    eventually("the web server's status code at the core", || {
        found(&server, &code)
    });
    if let Some(_observer) = observer(&root) {
        let check = format!("host-{host}-observe");
        for (proto, port, tag) in [
            ("redis", redis_port, "command:"),
            ("http", web_port, "route:"),
        ] {
            let query =
                format!("and(__name:observe.latency,__check:{check},proto:{proto},port:{port})");
            let observed = eventually("latency observed on the wire at the core", || {
                found(&server, &query)
            });
            assert!(observed.to_string().contains(tag), "{proto}: {observed}");
        }
    }
    let again = report(&run());
    assert_eq!(again["changed"], 0, "{again}");
    let purge = strata()
        .args(["uninstall", "agent", "--init", "none", "--purge", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        purge.status.success(),
        "{}",
        String::from_utf8_lossy(&purge.stderr)
    );
    let rules: Value = client()
        .get(server.url(&format!("/api/strata/v1/rules?owner=host%3A{host}")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(rules["rules"], serde_json::json!([]), "{rules}");
}
