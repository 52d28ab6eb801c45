//! What the integration tests share: specs, a test CA, free ports, measurement lookups, and
//! installing and starting Debian's services.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use checks::{CheckSpec, Measurement, Value};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};

pub fn spec(kind: &str, target: &str, config: serde_json::Value) -> CheckSpec {
    CheckSpec {
        id: format!("test-{kind}"),
        kind: kind.to_owned(),
        target: target.to_owned(),
        period_ms: 60_000,
        timeout_ms: 5_000,
        config,
        tags: vec![("env".to_owned(), "test".to_owned())],
    }
}

pub async fn run_ok(spec: &CheckSpec) -> Vec<Measurement> {
    match checks::run(spec).await {
        Ok(m) => m,
        Err(e) => panic!("{} did not run: {e}", spec.kind),
    }
}

/// The measurement named `name` whose own tags include `tags` (spec tags are ignored).
pub fn find<'a>(
    ms: &'a [Measurement],
    name: &str,
    tags: &[(&str, &str)],
) -> Option<&'a Measurement> {
    ms.iter().find(|m| {
        m.name == name
            && tags
                .iter()
                .all(|(k, v)| m.tags.iter().any(|(a, b)| a == k && b == v))
    })
}

pub fn numeric(ms: &[Measurement], name: &str) -> f64 {
    numeric_tagged(ms, name, &[])
}

pub fn numeric_tagged(ms: &[Measurement], name: &str, tags: &[(&str, &str)]) -> f64 {
    match find(ms, name, tags).map(|m| &m.value) {
        Some(Value::Numeric(v)) => *v,
        other => panic!(
            "{name} {tags:?}: expected a numeric, got {other:?}\nall: {}",
            names(ms)
        ),
    }
}

pub fn text(ms: &[Measurement], name: &str) -> String {
    match find(ms, name, &[]).map(|m| &m.value) {
        Some(Value::Text(v)) => v.clone(),
        other => panic!("{name}: expected text, got {other:?}\nall: {}", names(ms)),
    }
}

/// The samples of a histogram measurement.
pub fn samples(ms: &[Measurement], name: &str) -> u64 {
    match find(ms, name, &[]).map(|m| &m.value) {
        Some(Value::Histogram(h)) => h.sample_count(),
        other => panic!(
            "{name}: expected a histogram, got {other:?}\nall: {}",
            names(ms)
        ),
    }
}

pub fn has(ms: &[Measurement], name: &str) -> bool {
    ms.iter().any(|m| m.name == name)
}

pub fn names(ms: &[Measurement]) -> String {
    let mut n: Vec<&str> = ms.iter().map(|m| m.name.as_str()).collect();
    n.dedup();
    n.join(", ")
}

/// Every measurement carries the spec's tags.
pub fn assert_spec_tags(ms: &[Measurement]) {
    for m in ms {
        assert!(
            m.tags.iter().any(|(k, v)| k == "env" && v == "test"),
            "{} lacks the spec tag",
            m.name
        );
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A CA and a server certificate for localhost / 127.0.0.1 / ::1 valid until 2030-01-01,
/// written as PEM files into `dir`.
pub struct TestPki {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    pub cert_pem: String,
    pub key_pem: String,
}

/// 2030-01-01T00:00:00Z, the test certificates' notAfter.
pub const NOT_AFTER_UNIX: i64 = 1_893_456_000;

pub fn pki(dir: &Path) -> TestPki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "strata test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf = |names: Vec<String>| {
        let mut p = CertificateParams::new(names).unwrap();
        p.subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        p.subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
        p.not_after = rcgen::date_time_ymd(2030, 1, 1);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (cert_pem, key_pem) = leaf(vec!["localhost".to_owned()]);
    let (client_pem, client_key_pem) = leaf(vec!["strata-client".to_owned()]);
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    TestPki {
        ca_file: write("ca.pem", &ca.pem()),
        cert_file: write("server.pem", &cert_pem),
        key_file: write("server.key", &key_pem),
        client_cert_file: write("client.pem", &client_pem),
        client_key_file: write("client.key", &client_key_pem),
        cert_pem,
        key_pem,
    }
}

/// Days from now to the test certificates' notAfter.
pub fn days_to_not_after() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    (NOT_AFTER_UNIX as f64 - now) / 86_400.0
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Installs Debian packages when `probe` (a file they provide) is missing: as root,
/// `apt-get update` once per test process, then `apt-get install -y`. Tests in one binary may
/// run in parallel, so installs are serialised.
pub fn ensure_packages(probe: &str, packages: &[&str]) {
    static APT: OnceLock<Mutex<bool>> = OnceLock::new();
    let mut updated = APT
        .get_or_init(|| Mutex::new(false))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if Path::new(probe).exists() {
        return;
    }
    assert!(
        is_root(),
        "{probe} is missing and installing {packages:?} needs root"
    );
    if !*updated {
        let ok = Command::new("apt-get")
            .arg("update")
            .status()
            .unwrap()
            .success();
        assert!(ok, "apt-get update failed");
        *updated = true;
    }
    let ok = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .unwrap()
        .success();
    assert!(ok, "apt-get install {packages:?} failed");
    assert!(
        Path::new(probe).exists(),
        "{probe} still missing after installing {packages:?}"
    );
}

/// A child process killed when dropped (a failing test still stops its service).
pub struct Service(pub std::process::Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
pub fn wait_for_port(port: u16, what: &str) {
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{what} did not listen on port {port} within 15 s");
}

/// Builds the Go program in `tests/<dir>` with the Go module proxy, caching the binary (and
/// Go's module and build caches) under ~/.cache/strata-tests, keyed by the sources' hash.
pub fn go_build(dir: &str) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for file in ["main.go", "go.mod", "go.sum"] {
        std::fs::read(src.join(file)).unwrap().hash(&mut hasher);
    }
    let cache = cache_dir();
    let bin = cache.join(format!("{dir}-{:016x}", hasher.finish()));
    static BUILD: OnceLock<Mutex<()>> = OnceLock::new();
    let _one_at_a_time = BUILD
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if bin.exists() {
        return bin;
    }
    let status = Command::new("go")
        .args(["build", "-mod=readonly", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOCACHE", cache.join("gocache"))
        .env("GOFLAGS", "-buildvcs=false")
        .status()
        .expect("the go command (tests build Go programs with the Go module proxy)");
    assert!(status.success(), "go build of tests/{dir} failed");
    bin
}

pub fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let dir = home.join(".cache/strata-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
