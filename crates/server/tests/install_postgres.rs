//! The `postgres` plugin of `strata install agent` against Debian's PostgreSQL (a private
//! cluster: initdb in a temporary directory, on a free loopback port): the installer defines the
//! broker's `postgres` check, a Postgres worksheet and a connections rule on the core, owned by
//! the host; a real `strata broker --checks-from-core` runs the check and the core receives the
//! server's connections; a second run changes nothing; `uninstall --purge` removes them all.
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
    let ws: Value = client()
        .get(server.url(&format!("/api/strata/v1/worksheets/host-{host}-postgres")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(ws["graphs"].to_string().contains("\"connections\""), "{ws}");
    let again = report(&install(core, &root, &pg, &[]));
    assert_eq!(again["changed"], 0, "{again}");
    assert_eq!(step(&again, "postgres"), "unchanged");
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
}
