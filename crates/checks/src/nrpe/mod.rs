//! `nrpe`: runs a named command on an NRPE daemon (protocol versions 2, 3 and 4, over TLS by
//! default) and records the plugin's state (0–3 and OK/WARNING/CRITICAL/UNKNOWN), its output
//! and its performance data as numerics.
//!
//! NRPE's default TLS is anonymous Diffie-Hellman, which rustls does not implement (it has no
//! unauthenticated cipher suites at all): the daemon needs a certificate (`ssl_cert_file`,
//! `ssl_privatekey_file`; NRPE 3 and 4), and then certificate suites are negotiated. The
//! README says what to configure.

pub mod packet;

use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::error::CheckError;
use crate::measure::{Out, Value};
use crate::perfdata::{self, Perf};
use crate::spec::{self, CheckSpec};
use crate::{tcp, tls};
use packet::Version;

/// Longest command line sent (`command!arg!…`); the daemon reads at most 1 KiB in version 2.
pub const COMMAND_BYTES_MAX: usize = 1023;
/// Most arguments.
pub const ARGS_MAX: usize = 16;
/// Largest response read: the largest buffer and its header.
const RESPONSE_BYTES_MAX: usize = packet::BUFFER_BYTES_MAX + 32;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// The command name the daemon defines (`command[check_load]=…`).
    command: Option<String>,
    /// Arguments, sent as `command!a!b` (the daemon needs `dont_blame_nrpe=1`).
    args: Option<Vec<String>>,
    /// 2, 3 or 4; default: 4, then 3, then 2 if the daemon closes without answering, as
    /// check_nrpe does.
    packet_version: Option<u16>,
    /// TLS (default true): NRPE speaks TLS from the first byte unless started with `-n`.
    tls: Option<bool>,
    tls_verify: Option<bool>,
    ca_file: Option<std::path::PathBuf>,
    cert_file: Option<std::path::PathBuf>,
    key_file: Option<std::path::PathBuf>,
    server_name: Option<String>,
}

pub(crate) struct Config {
    host: String,
    port: u16,
    command: String,
    versions: Vec<Version>,
    tls: Option<tls::Options>,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let (host, port) = spec::host_port(&spec.target, Some(5666))?;
    let o: Options = spec::options(spec)?;
    let command = command_line(o.command.as_deref(), o.args.as_deref().unwrap_or(&[]))?;
    let versions = match o.packet_version {
        None => vec![Version::V4, Version::V3, Version::V2],
        Some(2) => vec![Version::V2],
        Some(3) => vec![Version::V3],
        Some(4) => vec![Version::V4],
        Some(_) => return Err(CheckError::field("config.packet_version", "2, 3 or 4")),
    };
    let tls_options = tls::Options {
        tls_verify: o.tls_verify,
        ca_file: o.ca_file,
        cert_file: o.cert_file,
        key_file: o.key_file,
        server_name: o.server_name,
    };
    let tls = tcp::tls_options(o.tls.unwrap_or(true), tls_options)?;
    Ok(Config {
        host,
        port,
        command,
        versions,
        tls,
    })
}

fn command_line(command: Option<&str>, args: &[String]) -> Result<String, CheckError> {
    let command = command.ok_or_else(|| {
        CheckError::field(
            "config.command",
            "required: the command name the daemon defines",
        )
    })?;
    let bad = |s: &str| s.is_empty() || s.contains(['!', '\0', '\n', '\r']);
    if bad(command) {
        return Err(CheckError::field(
            "config.command",
            "a non-empty name without ! or line breaks",
        ));
    }
    if args.len() > ARGS_MAX || args.iter().any(|a| a.contains(['!', '\0', '\n', '\r'])) {
        return Err(CheckError::field(
            "config.args",
            format!("at most {ARGS_MAX} arguments without ! or line breaks"),
        ));
    }
    let line = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("!");
    if line.len() > COMMAND_BYTES_MAX {
        return Err(CheckError::field(
            "config.command",
            format!("the command line with its arguments is over {COMMAND_BYTES_MAX} bytes"),
        ));
    }
    Ok(line)
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let connector = match &c.tls {
        Some(o) => Some((tls::connector(o, &[])?, o.name_for(&c.host)?)),
        None => None,
    };
    for (i, &version) in c.versions.iter().enumerate() {
        let last = i + 1 == c.versions.len();
        match attempt(c, version, connector.as_ref(), out).await {
            Attempt::Answered(r, took) => record(&r, took, out),
            // A daemon that does not speak this version closes without a word: try the next.
            Attempt::Closed if !last => continue,
            Attempt::Closed => out.fail(
                "the daemon closed the connection without answering (NRPE drops a query it \
                 refuses: a packet version it does not take, arguments it was built without, \
                 a host outside allowed_hosts)",
            ),
            Attempt::Failed(status) => out.fail(status),
        }
        break;
    }
    Ok(())
}

enum Attempt {
    Answered(packet::Response, Duration),
    Closed,
    Failed(String),
}

async fn attempt(
    c: &Config,
    version: Version,
    connector: Option<&(
        tokio_rustls::TlsConnector,
        tokio_rustls::rustls::pki_types::ServerName<'static>,
    )>,
    out: &mut Out,
) -> Attempt {
    let tcp = match tcp::connect(&c.host, c.port, out).await {
        Ok(s) => s,
        Err(status) => return Attempt::Failed(status),
    };
    let Some((connector, name)) = connector else {
        return exchange(tcp, version, &c.command).await;
    };
    match tls::handshake(connector, name.clone(), tcp).await {
        Ok(session) => {
            out.seconds("tls_time", session.handshake);
            if let Some(days) = tls::expiry_days(&session) {
                out.numeric("cert_expiry_days", days);
            }
            exchange(session.stream, version, &c.command).await
        }
        Err(status) => Attempt::Failed(format!(
            "{status} (NRPE's default anonymous-DH TLS is not supported: the daemon needs \
             ssl_cert_file and ssl_privatekey_file)"
        )),
    }
}

/// Sends the query and reads the one response.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    version: Version,
    command: &str,
) -> Attempt {
    let Some(query) = packet::encode_query(version, command) else {
        return Attempt::Failed("the command line does not fit this packet version".to_owned());
    };
    let started = Instant::now();
    if let Err(e) = s.write_all(&query).await {
        return Attempt::Failed(format!("send failed: {}", tls::io_reason(&e)));
    }
    let mut buf = Vec::with_capacity(packet::V2_PACKET_BYTES);
    let mut chunk = [0u8; 4096];
    loop {
        match packet::decode_response(&buf, version) {
            Ok(Some(r)) => return Attempt::Answered(r, started.elapsed()),
            Ok(None) => {}
            Err(e) => return Attempt::Failed(e.to_string()),
        }
        if buf.len() >= RESPONSE_BYTES_MAX {
            return Attempt::Failed("a response over the largest NRPE packet".to_owned());
        }
        match s.read(&mut chunk).await {
            Ok(0) if buf.is_empty() => return Attempt::Closed,
            Ok(0) => {
                return Attempt::Failed("the daemon closed the connection mid-response".to_owned())
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            // A TLS daemon refusing the version resets or ends the session without a packet.
            Err(_) if buf.is_empty() => return Attempt::Closed,
            Err(e) => return Attempt::Failed(format!("read failed: {}", tls::io_reason(&e))),
        }
    }
}

const STATES: [&str; 4] = ["OK", "WARNING", "CRITICAL", "UNKNOWN"];

fn record(r: &packet::Response, took: Duration, out: &mut Out) {
    out.seconds("response_time", took);
    // Codes outside 0..=3 are UNKNOWN, as Nagios reads them.
    let state = if (0..=3).contains(&r.result_code) {
        r.result_code
    } else {
        3
    };
    out.numeric("state", f64::from(state));
    out.text("state_text", STATES[state as usize]);
    out.numeric("packet_version", f64::from(r.version));
    let parsed = perfdata::parse_output(&r.output);
    out.text("output", parsed.summary.clone());
    if !parsed.long_text.is_empty() {
        out.text("long_output", parsed.long_text.clone());
    }
    for p in &parsed.perf {
        perf(p, out);
    }
    out.numeric("perfdata_skipped", parsed.skipped as f64);
    out.ok();
}

/// One item: `label` (the value), and `label_warn`, `_crit`, `_min`, `_max` where given as
/// numbers; the unit as tag `uom`.
fn perf(p: &Perf, out: &mut Out) {
    let tags: Vec<(String, String)> = match p.uom.is_empty() {
        true => Vec::new(),
        false => vec![("uom".to_owned(), p.uom.clone())],
    };
    let mut put = |suffix: &str, v: Option<f64>| {
        if let Some(v) = v {
            out.push(
                &format!("{}{suffix}", p.label),
                tags.clone(),
                Value::Numeric(v),
            );
        }
    };
    put("", p.value);
    put(
        "_warn",
        p.warn.as_deref().and_then(perfdata::threshold_number),
    );
    put(
        "_crit",
        p.crit.as_deref().and_then(perfdata::threshold_number),
    );
    put("_min", p.min);
    put("_max", p.max);
}
