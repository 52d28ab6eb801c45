//! Real servers for the end-to-end tests, each on a free loopback port in a temporary directory,
//! installed from Debian's packages when missing; and the Python clients' virtual environment.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// A child process killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_port(port: u16, what: &str) {
    wait_port_for(port, what, Duration::from_secs(60));
}

fn wait_port_for(port: u16, what: &str, wait: Duration) {
    let deadline = Instant::now() + wait;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `apt-get install` of `packages` unless `probe` exists (once `apt-get update`).
pub fn ensure_debian(probe: &str, packages: &[&str]) {
    if Path::new(probe).exists() {
        return;
    }
    run(Command::new("apt-get").args(["update", "-qq"]));
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive"));
}

pub fn cache_dir() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let d = PathBuf::from(home).join(".cache/strata-tests");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The clients' Python, with psycopg and mariadb from PyPI.
pub fn python() -> PathBuf {
    let venv = cache_dir().join("venv");
    let py = venv.join("bin/python");
    let ready = venv.join("observe-clients-3");
    if !ready.exists() {
        // MariaDB's Python connector builds against Connector/C.
        ensure_debian("/usr/bin/mariadb_config", &["libmariadb-dev"]);
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
        run(Command::new(venv.join("bin/pip")).args([
            "install",
            "-q",
            "psycopg[binary]",
            "redis",
            "hiredis",
            "mariadb",
        ]));
        std::fs::write(&ready, "").unwrap();
    }
    py
}

pub fn redis() -> Server {
    ensure_debian("/usr/bin/redis-server", &["redis-server"]);
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new("/usr/bin/redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_port(port, "redis-server");
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}

fn pg_bin() -> PathBuf {
    ensure_debian("/usr/lib/postgresql", &["postgresql"]);
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    versions.sort();
    versions.pop().unwrap().join("bin")
}

/// PostgreSQL runs as the `postgres` user (it refuses root), trusting local connections.
pub fn postgres() -> Server {
    let bin = pg_bin();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    run(Command::new("chown")
        .args(["postgres:postgres"])
        .arg(dir.path()));
    run(Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin.join("initdb"))
        .args(["-A", "trust", "-U", "postgres", "-D"])
        .arg(&data));
    let child = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(bin.join("postgres"))
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(dir.path())
        .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_port(port, "postgres");
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}

/// MariaDB with grant tables skipped (the test connects as root with no password).
pub fn mariadb() -> Server {
    ensure_debian("/usr/sbin/mariadbd", &["mariadb-server"]);
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    run(Command::new("mariadb-install-db")
        .args(["--user=root", "--auth-root-authentication-method=normal"])
        .arg(format!("--datadir={}", data.display())));
    let child = Command::new("/usr/sbin/mariadbd")
        .args([
            "--no-defaults",
            "--user=root",
            "--skip-grant-tables",
            "--bind-address=127.0.0.1",
        ])
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--socket={}", dir.path().join("sock").display()))
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_port(port, "mariadbd");
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}

/// Kafka's jars (broker and client library, with their dependencies) from Maven Central, cached;
/// and the test's client compiled against them into `classes`.
pub fn kafka_jars(classes: &Path) -> PathBuf {
    ensure_debian("/usr/bin/javac", &["openjdk-17-jdk-headless"]);
    ensure_debian("/usr/bin/mvn", &["maven"]);
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live/kafka");
    let lib = cache_dir().join("kafka-4.1.0/lib");
    let ready = lib.join(".complete");
    if !ready.exists() {
        run(Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(here.join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display())));
        std::fs::write(&ready, "").unwrap();
    }
    run(Command::new("javac")
        .arg("-d")
        .arg(classes)
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg(here.join("Client.java")));
    lib
}

/// A Kafka broker in KRaft mode (broker and controller in one process), topics not created on
/// demand (so a Metadata request for an unknown topic is answered with an error naming it).
pub fn kafka(lib: &Path) -> Server {
    let port = free_port();
    let controller = free_port();
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("server.properties");
    std::fs::write(
        &props,
        format!(
            "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
num.partitions=1
",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let cp = format!("{}/*", lib.display());
    run(Command::new("java")
        .args(["-cp", &cp, "kafka.tools.StorageTool", "format"])
        .args(["-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c"])
        .arg(&props));
    let child = Command::new("java")
        .args(["-Xms256m", "-Xmx512m", "-cp", &cp, "kafka.Kafka"])
        .arg(&props)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_port(port, "kafka");
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}

/// Cassandra's jars (with their dependencies) from Maven Central, cached; and the test's client
/// compiled against them into `classes`.
pub fn cassandra_jars(classes: &Path) -> PathBuf {
    ensure_debian("/usr/bin/javac", &["openjdk-17-jdk-headless"]);
    ensure_debian("/usr/bin/mvn", &["maven"]);
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live/cassandra");
    let lib = cache_dir().join("cassandra-5.0.4/lib");
    let ready = lib.join(".complete");
    if !ready.exists() {
        run(Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(here.join("pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display())));
        std::fs::write(&ready, "").unwrap();
    }
    run(Command::new("javac")
        .arg("-d")
        .arg(classes)
        .arg("-cp")
        .arg(format!("{}/*", lib.display()))
        .arg(here.join("Client.java")));
    lib
}

/// What Cassandra's own launch scripts give Java 17 (`conf/jvm17-server.options`): the JDK
/// internals it reaches into.
pub const CASSANDRA_JAVA17: &[&str] = &[
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports=java.sql/java.sql=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.math=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
];

/// A single-node Cassandra on free loopback ports, its data in a temporary directory.
pub fn cassandra(lib: &Path) -> Server {
    let (port, storage, jmx) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let yaml = dir.path().join("cassandra.yaml");
    std::fs::write(
        &yaml,
        format!(
            "cluster_name: observe
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
commitlog_sync: periodic
commitlog_sync_period: 10000ms
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: \"127.0.0.1:{storage}\"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: {storage}
native_transport_port: {port}
endpoint_snitch: SimpleSnitch
data_file_directories: [{d}/data]
commitlog_directory: {d}/commitlog
saved_caches_directory: {d}/saved_caches
hints_directory: {d}/hints
cdc_raw_directory: {d}/cdc
local_system_data_file_directory: {d}/system
start_native_transport: true
"
        ),
    )
    .unwrap();
    let child = Command::new("java")
        .args(["-Xms512m", "-Xmx1g"])
        .args(CASSANDRA_JAVA17)
        .arg("-Dcassandra-foreground=yes")
        .arg(format!("-Dcassandra.config=file://{}", yaml.display()))
        .arg(format!("-Dcassandra.jmx.local.port={jmx}"))
        .arg(format!("-Dcassandra.logdir={d}"))
        .args(["-cp", &format!("{}/*", lib.display())])
        .arg("org.apache.cassandra.service.CassandraDaemon")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_port_for(port, "cassandra", Duration::from_secs(300));
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}
