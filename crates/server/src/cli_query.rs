//! `strata query '<caql>' [--start T] [--end T] [--period P] [--json]`: evaluates an analytics
//! query and prints a table (one row per period, one column per stream) or the endpoint's JSON.
//!
//! By default it asks a running server (`--server`, default `http://127.0.0.1:8112`) through
//! `GET /api/strata/v1/caql`, so it is safe beside `strata serve`. With `--data-dir` it opens the
//! store itself instead (for a stopped server's data: opening replays the WAL, so never point it
//! at a directory a server is using). Exit codes: 0 ok, 1 the query failed or the server/store
//! could not be reached, 2 bad usage.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::Value;
use store::{Store, StoreError, StoreOptions};

/// Largest answer read from a server.
const RESPONSE_SIZE_MAX_BYTES: u64 = 256 << 20;
/// Connect, read and write timeout against a server.
const HTTP_TIMEOUT_MS: u64 = 60_000;

#[derive(Args)]
pub struct QueryArgs {
    /// The query, e.g. `find:histogram("login_latency") | histogram:percentile(99)`.
    query: String,
    /// Start: unix seconds or RFC 3339 (default: one hour before --end).
    #[arg(long)]
    start: Option<String>,
    /// End: unix seconds or RFC 3339 (default: now).
    #[arg(long)]
    end: Option<String>,
    /// Period: seconds or a duration like 1m (default: the store's base period).
    #[arg(long)]
    period: Option<String>,
    /// Print the endpoint's JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// The server to ask (plain HTTP).
    #[arg(long, env = "STRATA_SERVER", default_value = "http://127.0.0.1:8112")]
    server: String,
    /// Bearer token, when the server requires one.
    #[arg(long, env = "STRATA_TOKEN")]
    token: Option<String>,
    /// Evaluate over this store directory instead of asking a server (not one a server uses).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

fn encode(s: &str) -> String {
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

pub fn run(args: QueryArgs) -> ExitCode {
    let result = match &args.data_dir {
        Some(dir) => run_local(&args, dir),
        None => run_remote(&args),
    };
    match result {
        Ok(answer) => {
            if args.json {
                println!("{answer}");
            } else {
                print!("{}", table(&answer));
            }
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("strata query: {message}");
            ExitCode::from(code)
        }
    }
}

pub(crate) type Failure = (u8, String);

fn run_local(args: &QueryArgs, dir: &std::path::Path) -> Result<Value, Failure> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let time = |t: &Option<String>, default: i64, what: &str| -> Result<i64, Failure> {
        t.as_deref()
            .map_or(Ok(default), query::output::parse_time_ms)
            .map_err(|e| (2, format!("--{what}: {e}")))
    };
    let end_ms = time(&args.end, now_ms, "end")?;
    let start_ms = time(&args.start, end_ms - query::http::DEFAULT_RANGE_MS, "start")?;
    let mut options = StoreOptions {
        background_flush: false,
        ..StoreOptions::default()
    };
    let store = match Store::open(dir, options.clone()) {
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
    .map_err(|e| (1, format!("{}: {e}", dir.display())))?;
    let period_ms = match &args.period {
        Some(p) => query::output::parse_period_ms(p).map_err(|e| (2, format!("--period: {e}")))?,
        None => store.options().base_period_ms,
    };
    let cancel = AtomicBool::new(false);
    let out = query::run(
        &store,
        &args.query,
        start_ms,
        end_ms,
        period_ms,
        query::Limits::default(),
        &cancel,
    );
    let closed = store.close();
    let out = out.map_err(|e| (1, e.to_string()))?;
    closed.map_err(|e| (1, format!("closing the store: {e}")))?;
    Ok(query::output::to_json_value(&out))
}

fn run_remote(args: &QueryArgs) -> Result<Value, Failure> {
    let Some(rest) = args.server.strip_prefix("http://") else {
        return Err((
            2,
            format!(
                "--server {}: only http:// is supported here (use curl for https)",
                args.server
            ),
        ));
    };
    let host = rest.trim_end_matches('/');
    let mut path = format!("/api/strata/v1/caql?query={}", encode(&args.query));
    for (k, v) in [
        ("start", &args.start),
        ("end", &args.end),
        ("period", &args.period),
    ] {
        if let Some(v) = v {
            path.push_str(&format!("&{k}={}", encode(v)));
        }
    }
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
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(t) = &args.token {
        request.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    request.push_str("\r\n");
    conn.write_all(request.as_bytes()).map_err(io)?;
    let (status, _head, body) = read_response(conn, host, RESPONSE_SIZE_MAX_BYTES)?;
    let value: Result<Value, _> = serde_json::from_slice(&body);
    match (status, value) {
        (200, Ok(v)) => Ok(v),
        (s, Ok(v)) => {
            let msg = v["error"].as_str().unwrap_or("error").to_string();
            Err((if s == 400 { 2 } else { 1 }, format!("HTTP {s}: {msg}")))
        }
        (s, Err(_)) => Err((
            1,
            format!("HTTP {s}: {}", String::from_utf8_lossy(&body).trim()),
        )),
    }
}

/// Reads a `Connection: close` HTTP/1.1 answer of at most `size_max_bytes`: its status, its
/// header block and its body (de-chunked). Shared by the CLI's plain-HTTP clients.
pub(crate) fn read_response(
    conn: TcpStream,
    host: &str,
    size_max_bytes: u64,
) -> Result<(u16, String, Vec<u8>), Failure> {
    let mut raw = Vec::new();
    conn.take(size_max_bytes)
        .read_to_end(&mut raw)
        .map_err(|e| (1, format!("talking to {host}: {e}")))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| (1, format!("{host}: not an HTTP answer")))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body).ok_or_else(|| (1, format!("{host}: bad chunked body")))?;
    }
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| (1, format!("{host}: no status line")))?;
    Ok((status, head, body))
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Number(n) => n.to_string(),
        Value::Object(o) => {
            let n: u64 = o["bins"]
                .as_array()
                .map_or(0, |b| b.iter().filter_map(|x| x[2].as_u64()).sum());
            format!("hist(n={n})")
        }
        other => other.to_string(),
    }
}

/// One row per period (RFC 3339 time), one column per stream (its label).
fn table(answer: &Value) -> String {
    let empty = Vec::new();
    let series = answer["series"].as_array().unwrap_or(&empty);
    let mut out = String::from("time");
    for s in series {
        out.push('\t');
        out.push_str(s["label"].as_str().unwrap_or(""));
    }
    out.push('\n');
    let rows = series
        .first()
        .and_then(|s| s["values"].as_array())
        .map_or(0, Vec::len);
    for i in 0..rows {
        let t = series[0]["values"][i][0].as_f64().unwrap_or(0.0);
        out.push_str(&query::output::rfc3339((t * 1000.0) as i64));
        for s in series {
            out.push('\t');
            out.push_str(&cell(&s["values"][i][1]));
        }
        out.push('\n');
    }
    if series.is_empty() {
        out.push_str("(no streams)\n");
    }
    out
}
