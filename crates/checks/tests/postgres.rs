//! postgres against Debian's PostgreSQL (installed when missing), a fresh cluster made by
//! initdb in a temp dir and started on a free loopback port: statistics compared with what the
//! server itself reports through psql, before and after a known workload.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// The newest installed PostgreSQL's bin directory.
fn pg_bin() -> PathBuf {
    ensure_packages("/usr/lib/postgresql", &["postgresql"]);
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    let v = versions
        .last()
        .expect("a PostgreSQL version under /usr/lib/postgresql");
    PathBuf::from(format!("/usr/lib/postgresql/{v}/bin"))
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

struct Cluster {
    _server: Service,
    port: u16,
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

fn cluster() -> Cluster {
    let bin = pg_bin();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    if is_root() {
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
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
        .arg(dir.path())
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=37",
            "-c",
            "fsync=off",
        ])
        // No background worker may add transactions to the counts the tests compare.
        .args(["-c", "autovacuum=off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Service(child);
    wait_for_port(port, "postgres");
    let c = Cluster {
        _server: server,
        port,
        bin,
        _dir: dir,
    };
    // The server accepts before it finishes starting up: wait until it answers.
    for _ in 0..100 {
        if c.try_psql("postgres", "SELECT 1").is_some() {
            return c;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("postgres did not answer");
}

impl Cluster {
    fn try_psql(&self, db: &str, sql: &str) -> Option<String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string(), "-d", db, "-c", sql])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
    }

    /// Each statement as its own `-c`: its own transaction, in one session.
    fn psql_each(&self, db: &str, statements: &[String]) {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args(["-X", "-q", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string(), "-d", db]);
        for s in statements {
            cmd.args(["-c", s]);
        }
        assert!(cmd.stdout(Stdio::null()).status().unwrap().success());
    }

    fn psql(&self, db: &str, sql: &str) -> String {
        self.try_psql(db, sql)
            .unwrap_or_else(|| panic!("psql failed: {sql}"))
    }

    /// Waits until `db`'s commit count stops moving: a backend reports its counts as it exits,
    /// which can be after its client (psql) has already returned.
    fn settle(&self, db: &str) {
        let sql = format!("SELECT xact_commit FROM pg_stat_database WHERE datname = '{db}'");
        let mut last = self.psql("postgres", &sql);
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let now = self.psql("postgres", &sql);
            if now == last {
                return;
            }
            last = now;
        }
        panic!("the commit count of {db} never settled");
    }

    fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

#[tokio::test]
async fn postgres_statistics_follow_a_known_workload() {
    let pg = cluster();
    pg.psql("postgres", "CREATE DATABASE strata");
    pg.psql("strata", "CREATE TABLE t (i int PRIMARY KEY)");
    pg.settle("strata");
    let before = run_ok(&spec("postgres", &pg.target(), json!({}))).await;
    assert_eq!(text(&before, "status"), "ok");
    let db = [("database", "strata")];
    let commits = numeric_tagged(&before, "xact_commit", &db);
    let inserted = numeric_tagged(&before, "tup_inserted", &db);
    // Ten transactions, each one INSERT, in one session that ends (and so reports) before the
    // next run.
    let inserts: Vec<String> = (0..10)
        .map(|i| format!("INSERT INTO t VALUES ({i})"))
        .collect();
    pg.psql_each("strata", &inserts);
    pg.settle("strata");
    let after = run_ok(&spec("postgres", &pg.target(), json!({}))).await;
    // Ten, plus the session's start: connecting reads the catalog in a transaction of its own.
    assert_eq!(
        numeric_tagged(&after, "xact_commit", &db) - commits,
        10.0 + 1.0
    );
    assert_eq!(numeric_tagged(&after, "tup_inserted", &db) - inserted, 10.0);
    // Equal to what the server reports itself.
    let size: f64 = pg
        .psql("postgres", "SELECT pg_database_size('strata')")
        .parse()
        .unwrap();
    assert_eq!(numeric_tagged(&after, "database_size", &db), size);
    assert_eq!(numeric(&after, "max_connections"), 37.0);
    assert_eq!(
        text(&after, "server_version"),
        pg.psql("postgres", "SHOW server_version")
    );
    assert!(numeric(&after, "connections") >= 1.0);
    assert_eq!(numeric(&after, "is_replica"), 0.0);
    assert_eq!(numeric(&after, "replicas"), 0.0);
    assert!(numeric_tagged(&after, "locks", &[("mode", "AccessShareLock")]) >= 1.0);
    assert_eq!(samples(&after, "query_time"), 1);
    assert_eq!(samples(&after, "connect_time"), 1);
    assert_eq!(numeric(&after, "query_rows"), 1.0);
    assert_spec_tags(&after);
}

#[tokio::test]
async fn postgres_scans_in_the_checked_database_and_a_custom_query() {
    let pg = cluster();
    pg.psql(
        "postgres",
        "CREATE TABLE s (i int PRIMARY KEY); INSERT INTO s SELECT generate_series(1, 100)",
    );
    for _ in 0..3 {
        pg.psql("postgres", "SELECT count(*) FROM s");
    }
    pg.psql(
        "postgres",
        "SET enable_seqscan = off; SELECT i FROM s WHERE i = 7",
    );
    let config = json!({"query": "SELECT i FROM s WHERE i < 6"});
    let ms = run_ok(&spec("postgres", &pg.target(), config)).await;
    assert_eq!(text(&ms, "status"), "ok");
    assert_eq!(numeric(&ms, "query_rows"), 5.0);
    let own = pg.psql(
        "postgres",
        "SELECT sum(seq_scan) || ' ' || sum(idx_scan) FROM pg_stat_user_tables",
    );
    let (seq, idx) = own.split_once(' ').unwrap();
    let tags = [("database", "postgres")];
    assert_eq!(
        numeric_tagged(&ms, "seq_scan", &tags),
        seq.parse::<f64>().unwrap()
    );
    assert_eq!(
        numeric_tagged(&ms, "idx_scan", &tags),
        idx.parse::<f64>().unwrap()
    );
    assert!(numeric_tagged(&ms, "seq_scan", &tags) >= 3.0);
    assert!(numeric_tagged(&ms, "idx_scan", &tags) >= 1.0);
}

#[tokio::test]
async fn postgres_failures_are_measured() {
    let pg = cluster();
    let ms = run_ok(&spec(
        "postgres",
        &pg.target(),
        json!({"query": "SELECT nope"}),
    ))
    .await;
    assert_eq!(numeric(&ms, "up"), 0.0);
    let status = text(&ms, "status");
    assert!(
        status.starts_with("query failed: ERROR: column \"nope\" does not exist"),
        "{status}"
    );
    // The statistics were still read.
    assert!(has(&ms, "xact_commit"));
    let ms = run_ok(&spec("postgres", &pg.target(), json!({"dbname": "absent"}))).await;
    assert_eq!(
        text(&ms, "status"),
        "FATAL: database \"absent\" does not exist"
    );
    let ms = run_ok(&spec(
        "postgres",
        &format!("127.0.0.1:{}", free_port()),
        json!({}),
    ))
    .await;
    assert_eq!(text(&ms, "status"), "connect refused");
}
