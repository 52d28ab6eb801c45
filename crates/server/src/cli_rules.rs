//! `strata rules check | test | backtest`: rulesets checked, unit-tested on a virtual clock, and
//! backtested over stored data (a running server's, or a stopped server's data directory).
//!
//! Exit codes: 0 ok, 1 a test failed or the server/store could not be reached, 2 a file or an
//! argument is wrong.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use alert::rule::{self, Ruleset, Source};
use alert::testfile;
use clap::{Args, Subcommand};
use serde_json::Value;
use store::{Store, StoreError, StoreOptions};

/// Largest answer read from a server.
const RESPONSE_SIZE_MAX_BYTES: u64 = 64 << 20;
/// Connect, read and write timeout against a server (a long poll waits up to a minute).
const HTTP_TIMEOUT_MS: u64 = 90_000;

#[derive(Subcommand)]
pub enum RulesCommand {
    /// Check rules files: syntax, expressions, conditions, templates, depends_on.
    Check {
        files: Vec<PathBuf>,
        /// The store's base period the rulesets will run at (seconds or a duration).
        #[arg(long, default_value = "60s")]
        base_period: String,
    },
    /// Run test files (promtool's format in TOML) on a virtual clock.
    Test { files: Vec<PathBuf> },
    /// The transitions a rules file would have made over a past range.
    Backtest(BacktestArgs),
    /// The notification routing tree of a notify file.
    Routes {
        #[command(subcommand)]
        command: RoutesCommand,
    },
    /// Print an alertmanager.yml's route, inhibit rules and webhook receivers as notify TOML.
    ImportAlertmanager { file: PathBuf },
    /// The notification receivers of a running core (`test NAME`).
    Receivers {
        #[command(subcommand)]
        command: ReceiversCommand,
    },
}

#[derive(Subcommand)]
pub enum ReceiversCommand {
    /// Send a test notification to receiver NAME of a running core; says whether it was
    /// delivered, or the receiver's error.
    Test {
        name: String,
        /// The core (`strata serve`), e.g. http://core:8112.
        #[arg(
            long,
            visible_alias = "server",
            env = "STRATA_SERVER",
            default_value = "http://127.0.0.1:8112"
        )]
        core: String,
        /// Bearer token, when the core requires one.
        #[arg(long, env = "STRATA_TOKEN")]
        token: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum RoutesCommand {
    /// Print the tree and where an example alert goes: `--config notify.toml alertname=x …`.
    Test {
        #[arg(long)]
        config: PathBuf,
        /// The example alert's labels, name=value.
        labels: Vec<String>,
    },
}

#[derive(Args)]
pub struct BacktestArgs {
    file: PathBuf,
    /// Start: unix seconds or RFC 3339 (default: one hour before --end).
    #[arg(long)]
    start: Option<String>,
    /// End: unix seconds or RFC 3339 (default: now).
    #[arg(long)]
    end: Option<String>,
    /// Print the JSON answer instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArgs,
    /// Backtest over this store directory instead of asking a server (not one a server uses).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Where a running server is.
#[derive(Args, Clone)]
pub struct ServerArgs {
    /// The server to ask (plain HTTP).
    #[arg(long, env = "STRATA_SERVER", default_value = "http://127.0.0.1:8112")]
    pub server: String,
    /// Bearer token, when the server requires one.
    #[arg(long, env = "STRATA_TOKEN")]
    pub token: Option<String>,
}

pub type Failure = (u8, String);

pub fn run(command: RulesCommand) -> ExitCode {
    let result = match command {
        RulesCommand::Check { files, base_period } => check(&files, &base_period),
        RulesCommand::Test { files } => test(&files),
        RulesCommand::Backtest(args) => backtest(&args),
        RulesCommand::Routes {
            command: RoutesCommand::Test { config, labels },
        } => crate::cli_routes::test(&config, &labels),
        RulesCommand::ImportAlertmanager { file } => crate::cli_routes::import_alertmanager(&file),
        RulesCommand::Receivers {
            command: ReceiversCommand::Test { name, core, token },
        } => receiver_test(
            &name,
            ServerArgs {
                server: core,
                token,
            },
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("strata rules: {message}");
            ExitCode::from(code)
        }
    }
}

fn read_rulesets(path: &Path, base_ms: i64) -> Result<Vec<Arc<Ruleset>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let specs = rule::parse_file_text(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if specs.is_empty() {
        return Err(format!("{}: no [[ruleset]] in the file", path.display()));
    }
    specs
        .into_iter()
        .map(|s| {
            rule::compile(s, Source::File(path.to_path_buf()), base_ms)
                .map(Arc::new)
                .map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect()
}

fn check(files: &[PathBuf], base_period: &str) -> Result<(), Failure> {
    if files.is_empty() {
        return Err((2, "no rules files given".into()));
    }
    let base = alert_duration(base_period).map_err(|e| (2, format!("--base-period: {e}")))?;
    let mut all = Vec::new();
    let mut bad = 0;
    for f in files {
        match read_rulesets(f, base) {
            Ok(rs) => {
                println!("{}: {} rulesets ok", f.display(), rs.len());
                all.extend(rs);
            }
            Err(e) => {
                println!("{e}");
                bad += 1;
            }
        }
    }
    if bad == 0 {
        if let Err(e) = rule::order(all) {
            println!("{e}");
            bad += 1;
        }
    }
    if bad > 0 {
        return Err((2, format!("{bad} problem(s) found")));
    }
    Ok(())
}

fn alert_duration(text: &str) -> Result<i64, String> {
    query::output::parse_period_ms(text)
}

/// A directory under the system temporary directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Scratch, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("strata-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn alerts_text(alerts: &[testfile::ExpAlert]) -> String {
    if alerts.is_empty() {
        return "(none)".into();
    }
    alerts
        .iter()
        .map(|a| {
            let labels: Vec<String> = a.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            let ann: Vec<String> = a
                .annotations
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            let state = a
                .state
                .as_deref()
                .map_or(String::new(), |s| format!(" {s}"));
            format!("{{{}}} {{{}}}{state}", labels.join(", "), ann.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n              ")
}

fn test(files: &[PathBuf]) -> Result<(), Failure> {
    if files.is_empty() {
        return Err((2, "no test files given".into()));
    }
    let (mut failed, mut checks) = (0, 0);
    for f in files {
        let scratch = Scratch::new("rules-test").map_err(|e| (1, e))?;
        let report = testfile::run_file(f, &scratch.0).map_err(|e| (2, e))?;
        checks += report.checks;
        for fail in &report.failures {
            failed += 1;
            println!(
                "FAILED {}: eval_time {}, alertname {}\n  expected: {}\n  got:      {}",
                f.display(),
                alert::util::format_duration(fail.eval_time_ms),
                fail.alertname,
                alerts_text(&fail.expected),
                alerts_text(&fail.got)
            );
        }
        for fail in &report.notify_failures {
            failed += 1;
            let list = |l: &[testfile::ExpNotification]| {
                if l.is_empty() {
                    return "(none)".to_string();
                }
                l.iter()
                    .map(testfile::ExpNotification::text)
                    .collect::<Vec<_>>()
                    .join("\n              ")
            };
            println!(
                "FAILED {}: notifications up to eval_time {}\n  expected: {}\n  got:      {}",
                f.display(),
                alert::util::format_duration(fail.eval_time_ms),
                list(&fail.expected),
                list(&fail.got)
            );
        }
        if report.failures.is_empty() && report.notify_failures.is_empty() {
            println!("{}: {} checks passed", f.display(), report.checks);
        }
    }
    if failed > 0 {
        return Err((1, format!("{failed} of {checks} checks failed")));
    }
    Ok(())
}

pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `name=value` pairs as a query string (values percent-encoded).
/// `strata rules receivers test NAME`: the core sends one test notification (exit 0 when
/// delivered, 1 with the receiver's error in one line otherwise).
fn receiver_test(name: &str, server: ServerArgs) -> Result<(), Failure> {
    let path = format!("/api/strata/v1/receivers/{}/test", encode(name));
    let a = http(&server, "POST", &path, "", &[])?;
    let v: Value = serde_json::from_str(&a.body)
        .map_err(|_| (1, format!("HTTP {}: {}", a.status, a.body.trim())))?;
    if a.status == 200 && v["delivered"] == true {
        println!("receiver '{name}': test notification delivered");
        return Ok(());
    }
    Err((1, v["error"].as_str().unwrap_or("error").to_string()))
}

pub fn query_string(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// A server's answer.
pub struct Answer {
    pub status: u16,
    pub etag: Option<String>,
    /// The core answered a create-or-replace with `x-strata-unchanged: true`.
    pub unchanged: bool,
    pub body: String,
}

/// One plain-HTTP request with extra headers.
pub fn http(
    server: &ServerArgs,
    method: &str,
    path_and_query: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Result<Answer, Failure> {
    let Some(rest) = server.server.strip_prefix("http://") else {
        return Err((
            2,
            format!(
                "--server {}: only http:// is supported here (use curl for https)",
                server.server
            ),
        ));
    };
    let host = rest.trim_end_matches('/');
    let timeout = Duration::from_millis(HTTP_TIMEOUT_MS);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)
        .map_err(|e| (1, format!("{host}: {e}")))?
        .next()
        .ok_or_else(|| (1, format!("{host}: no address")))?;
    let mut conn = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| (1, format!("connecting to {host}: {e}")))?;
    let io = |e: std::io::Error| (1, format!("talking to {host}: {e}"));
    conn.set_read_timeout(Some(timeout)).map_err(io)?;
    conn.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut request = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = &server.token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    conn.write_all(request.as_bytes()).map_err(io)?;
    let (status, head, bytes) =
        crate::cli_query::read_response(conn, host, RESPONSE_SIZE_MAX_BYTES)?;
    let etag = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("etag")
            .then(|| v.trim().to_string())
    });
    let unchanged = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("x-strata-unchanged") && v.trim() == "true"
        })
    });
    Ok(Answer {
        status,
        etag,
        unchanged,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// A JSON answer, or the server's `error` as a failure.
pub fn json_answer(status: u16, body: &str) -> Result<Value, Failure> {
    let v: Result<Value, _> = serde_json::from_str(body);
    match (status, v) {
        (200..=299, Ok(v)) => Ok(v),
        (s, Ok(v)) => {
            let msg = v["error"].as_str().unwrap_or("error").to_string();
            Err((if s == 400 { 2 } else { 1 }, format!("HTTP {s}: {msg}")))
        }
        (s, Err(_)) => Err((1, format!("HTTP {s}: {}", body.trim()))),
    }
}

fn open_store(dir: &Path) -> Result<Store, Failure> {
    let mut options = StoreOptions {
        background_flush: false,
        background_maintenance: false,
        ..StoreOptions::default()
    };
    match Store::open(dir, options.clone()) {
        // The store keeps its own layout: open it with that.
        Err(StoreError::LayoutMismatch {
            stored_base_period_ms,
            stored_partition_ms,
        }) => {
            options.base_period_ms = stored_base_period_ms;
            options.partition_ms = stored_partition_ms;
            Store::open(dir, options)
        }
        other => other,
    }
    .map_err(|e| (1, format!("{}: {e}", dir.display())))
}

fn backtest_local(args: &BacktestArgs, dir: &Path, start: i64, end: i64) -> Result<Value, Failure> {
    let store = open_store(dir)?;
    let base = store.options().base_period_ms;
    let rulesets = read_rulesets(&args.file, base).map_err(|e| (2, e))?;
    let records = alert::backtest::backtest(&store, rulesets, start, end);
    let closed = store.close();
    let records = records.map_err(|e| (2, e))?;
    closed.map_err(|e| (1, format!("closing the store: {e}")))?;
    let ts: Vec<Value> = alert::http::transitions_of(&records)
        .iter()
        .map(alert::http::transition_json)
        .collect();
    Ok(serde_json::json!({ "start": start, "end": end, "transitions": ts }))
}

fn backtest(args: &BacktestArgs) -> Result<(), Failure> {
    let now = alert::util::wall_ms();
    let time = |t: &Option<String>, default: i64, what: &str| -> Result<i64, Failure> {
        t.as_deref()
            .map_or(Ok(default), query::output::parse_time_ms)
            .map_err(|e| (2, format!("--{what}: {e}")))
    };
    let end = time(&args.end, now, "end")?;
    let start = time(&args.start, end - 3_600_000, "start")?;
    let answer = match &args.data_dir {
        Some(dir) => backtest_local(args, dir, start, end)?,
        None => {
            let text = std::fs::read_to_string(&args.file)
                .map_err(|e| (2, format!("{}: {e}", args.file.display())))?;
            let q = query_string(&[
                ("start", Some(format!("{}", start as f64 / 1000.0))),
                ("end", Some(format!("{}", end as f64 / 1000.0))),
            ]);
            let a = http(
                &args.server,
                "POST",
                &format!("/api/strata/v1/rules/evaluate{q}"),
                &text,
                &[],
            )?;
            json_answer(a.status, &a.body)?
        }
    };
    if args.json {
        println!("{answer}");
    } else {
        print!("{}", transitions_table(&answer["transitions"]));
    }
    Ok(())
}

/// One line per transition: time, rule, stream, from → to, severity, flags, summary.
pub fn transitions_table(ts: &Value) -> String {
    let mut out = String::from("time\trule\tstream\tfrom\tto\tseverity\tvalue\tsummary\n");
    for t in ts.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let time = alert::util::rfc3339(t["t"].as_i64().unwrap_or(0));
        let mut to = t["state"].as_str().unwrap_or("").to_string();
        for flag in ["late", "eager", "backfill", "flapping", "suppressed"] {
            if t[flag].as_bool() == Some(true) {
                to.push_str(&format!(" ({flag})"));
            }
        }
        out.push_str(&format!(
            "{time}\t{}\t{}\t{}\t{to}\t{}\t{}\t{}\n",
            t["rule"].as_str().unwrap_or(""),
            t["stream"].as_str().unwrap_or(""),
            t["from"].as_str().unwrap_or(""),
            t["severity"],
            t["value"],
            t["annotations"]["summary"].as_str().unwrap_or("")
        ));
    }
    out
}
