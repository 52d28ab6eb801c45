//! `redis`: a timed `PING`, every `INFO` field (numbers as numerics, the rest as text;
//! keyspace and replica lines split into tagged numerics), and `LATENCY HISTOGRAM` per command
//! where the server has it (Redis 7+), as cumulative histograms over fixed power-of-two bounds.

pub mod resp;

use std::time::Duration;

use hist::convert::{Cumulative, ExplicitHistogram};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::CheckError;
use crate::measure::{Out, Value};
use crate::spec::{self, CheckSpec};
use resp::Reply;

/// Most bytes one reply may take (a bulk string plus framing).
pub const REPLY_BYTES_MAX: usize = resp::BULK_BYTES_MAX + (64 << 10);
/// Most INFO fields kept.
pub const INFO_FIELDS_MAX: usize = 2_000;
/// Most commands whose latency histograms are kept.
pub const COMMANDS_MAX: usize = 1_000;
/// Latency histogram bounds: 2^0 .. 2^LATENCY_BOUNDS_LOG2 µs (1 µs to about 12.7 days).
/// Redis's buckets are these powers of two; one fixed layout for every run keeps the
/// cumulative histograms comparable from one run to the next.
const LATENCY_BOUNDS_LOG2: u32 = 40;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// `AUTH` with this password (and `username`, Redis 6 ACLs) before anything else.
    password: Option<String>,
    username: Option<String>,
    /// Read `LATENCY HISTOGRAM` (default true).
    latency_histograms: Option<bool>,
}

pub(crate) struct Config {
    host: String,
    port: u16,
    password: Option<String>,
    username: Option<String>,
    latency_histograms: bool,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let (host, port) = spec::host_port(&spec.target, Some(6379))?;
    let o: Options = spec::options(spec)?;
    if o.username.is_some() && o.password.is_none() {
        return Err(CheckError::field(
            "config.username",
            "needs config.password",
        ));
    }
    Ok(Config {
        host,
        port,
        password: o.password,
        username: o.username,
        latency_histograms: o.latency_histograms.unwrap_or(true),
    })
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let stream = match crate::tcp::connect(&c.host, c.port, out).await {
        Ok(s) => s,
        Err(status) => {
            out.fail(status);
            return Ok(());
        }
    };
    let mut conn = Conn {
        stream,
        buf: Vec::with_capacity(16 << 10),
    };
    if let Err(status) = session(c, &mut conn, out).await {
        out.fail(status);
    }
    Ok(())
}

async fn session(c: &Config, conn: &mut Conn, out: &mut Out) -> Result<(), String> {
    if let Some(password) = &c.password {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(user) = &c.username {
            args.push(user.as_bytes());
        }
        args.push(password.as_bytes());
        expect_ok(conn.call(&args).await?, "AUTH")?;
    }
    let started = Instant::now();
    let pong = conn.call(&[b"PING"]).await?;
    let elapsed: Duration = started.elapsed();
    match pong.as_text() {
        Some("PONG") => out.seconds("ping_time", elapsed),
        _ => return Err(format!("PING answered {}", describe(&pong))),
    }
    let info = conn.call(&[b"INFO"]).await?;
    let Some(text) = info.as_text() else {
        return Err(format!("INFO answered {}", describe(&info)));
    };
    info_fields(text, out);
    if c.latency_histograms {
        let reply = conn.call(&[b"LATENCY", b"HISTOGRAM"]).await?;
        // Before Redis 7 the subcommand does not exist: nothing to record.
        if !matches!(reply, Reply::Error(_)) {
            latency_histograms(&reply, out);
        }
    }
    out.ok();
    Ok(())
}

fn expect_ok(reply: Reply, what: &str) -> Result<(), String> {
    match reply {
        Reply::Simple(s) if s == "OK" => Ok(()),
        other => Err(format!("{what} answered {}", describe(&other))),
    }
}

/// A reply in a status: an error's text, or what kind of reply it was.
fn describe(r: &Reply) -> String {
    match r {
        Reply::Error(e) => format!("error: {}", spec::excerpt(e)),
        Reply::Simple(s) => format!("\"{}\"", spec::excerpt(s)),
        _ => "an unexpected reply".to_owned(),
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let io =
            |e: std::io::Error| format!("Redis connection failed: {}", crate::error::io_reason(&e));
        self.stream
            .write_all(&resp::encode(args))
            .await
            .map_err(io)?;
        loop {
            if let Some((reply, used)) = resp::parse(&self.buf).map_err(|e| e.to_string())? {
                self.buf.drain(..used);
                return Ok(reply);
            }
            if self.buf.len() >= REPLY_BYTES_MAX {
                return Err(format!("a reply larger than {REPLY_BYTES_MAX} bytes"));
            }
            let mut chunk = [0u8; 16 << 10];
            let n = self.stream.read(&mut chunk).await.map_err(io)?;
            if n == 0 {
                return Err("the server closed the connection".to_owned());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// `INFO` lines `field:value` under `# Section` headings.
pub(crate) fn info_fields(text: &str, out: &mut Out) {
    let mut kept = 0;
    for line in text.lines() {
        let line = line.trim_end();
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        if line.starts_with('#') || field.is_empty() {
            continue;
        }
        if kept >= INFO_FIELDS_MAX {
            break;
        }
        kept += 1;
        info_field(field, value, out);
    }
}

fn info_field(field: &str, value: &str, out: &mut Out) {
    // `db0:keys=1,expires=0,avg_ttl=0`, `slave0:ip=…,port=…,state=online,offset=…,lag=0`.
    let (tag, prefix) = if field.starts_with("db") && field[2..].bytes().all(|b| b.is_ascii_digit())
    {
        ("db", "")
    } else if field.starts_with("slave") && field[5..].bytes().all(|b| b.is_ascii_digit()) {
        ("replica", "replica_")
    } else {
        match value.parse::<f64>() {
            Ok(v) if v.is_finite() => out.numeric(field, v),
            _ => out.text(field, value),
        }
        return;
    };
    let tags = vec![(tag.to_owned(), field.to_owned())];
    for pair in value.split(',') {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        let name = format!("{prefix}{k}");
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() => out.push(&name, tags.clone(), Value::Numeric(n)),
            _ => out.push(&name, tags.clone(), Value::Text(v.to_owned())),
        }
    }
}

/// `LATENCY HISTOGRAM`: `[command, [calls, n, histogram_usec, [bucket, cumulative, …]], …]`.
pub(crate) fn latency_histograms(reply: &Reply, out: &mut Out) {
    let Some(items) = reply.as_array() else {
        return;
    };
    for pair in items.chunks(2).take(COMMANDS_MAX) {
        let [command, detail] = pair else { continue };
        let (Some(command), Some(detail)) = (command.as_text(), detail.as_array()) else {
            continue;
        };
        let Some((calls, histogram)) = command_latency(detail) else {
            continue;
        };
        let tags = vec![("command".to_owned(), command.to_owned())];
        out.push("calls", tags.clone(), Value::Numeric(calls as f64));
        out.push("command_latency", tags, Value::Cumulative(histogram));
    }
}

fn command_latency(detail: &[Reply]) -> Option<(u64, Cumulative)> {
    let mut calls = None;
    let mut buckets = None;
    for kv in detail.chunks(2) {
        match (kv[0].as_text(), kv.get(1)) {
            (Some("calls"), Some(v)) => calls = v.as_integer().and_then(|n| u64::try_from(n).ok()),
            (Some("histogram_usec"), Some(v)) => buckets = v.as_array(),
            _ => {}
        }
    }
    let calls = calls?;
    let histogram = power_of_two_histogram(buckets?, calls)?;
    Some((calls, histogram))
}

/// Cumulative `(bucket µs, count)` pairs onto the fixed bounds 2^0 .. 2^40 µs, in seconds.
fn power_of_two_histogram(pairs: &[Reply], calls: u64) -> Option<Cumulative> {
    let n = LATENCY_BOUNDS_LOG2 as usize + 1;
    let mut cumulative = vec![None::<u64>; n];
    for kv in pairs.chunks(2) {
        let bucket = u64::try_from(kv[0].as_integer()?).ok()?;
        let count = u64::try_from(kv.get(1)?.as_integer()?).ok()?;
        // Buckets are powers of two as hdr_histogram reports them: an edge within its precision
        // above the power (66 for 64), so each maps to the power of two at or below it.
        let log2 = bucket.checked_ilog2()?;
        *cumulative.get_mut(log2 as usize)? = Some(count);
    }
    let mut counts = Vec::with_capacity(n + 1);
    let mut before = 0u64;
    for c in cumulative {
        // An unlisted bucket gained nothing: its cumulative count is the one before.
        let now = c.unwrap_or(before);
        counts.push(now.checked_sub(before)?);
        before = now;
    }
    counts.push(calls.checked_sub(before)?);
    let h = ExplicitHistogram {
        explicit_bounds: (0..n).map(|i| (1u64 << i) as f64 * 1e-6).collect(),
        bucket_counts: counts,
        count: calls,
        sum: None,
        min: None,
        max: None,
    };
    Cumulative::from_explicit(&h).ok()
}
