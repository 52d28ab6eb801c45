//! `tcp`: connect time, optionally TLS, a line sent and a banner read and matched. Also the
//! resolve-and-connect step every TCP-based kind shares.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::CheckError;
use crate::measure::Out;
use crate::spec::{self, CheckSpec};
use crate::tls;

/// Most banner bytes read (a banner is a line; this bounds a server that never ends one).
pub const BANNER_BYTES_MAX: usize = 4096;
/// Longest `send` text.
pub const SEND_BYTES_MAX: usize = 4096;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// Text written right after connecting (e.g. "PING\r\n").
    send: Option<String>,
    /// Read a banner (the first line the server sends); implied by `banner_regex`.
    banner: Option<bool>,
    banner_regex: Option<String>,
    /// Start TLS right after connecting.
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
    send: Option<String>,
    banner: bool,
    banner_regex: Option<regex::bytes::Regex>,
    tls: Option<tls::Options>,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let (host, port) = spec::host_port(&spec.target, None)?;
    let o: Options = spec::options(spec)?;
    if o.send.as_ref().is_some_and(|s| s.len() > SEND_BYTES_MAX) {
        return Err(CheckError::field(
            "config.send",
            format!("at most {SEND_BYTES_MAX} bytes"),
        ));
    }
    let banner_regex = match &o.banner_regex {
        Some(p) => Some(spec::regex("banner_regex", p)?),
        None => None,
    };
    let tls = tls_options(
        o.tls.unwrap_or(false),
        tls::Options {
            tls_verify: o.tls_verify,
            ca_file: o.ca_file,
            cert_file: o.cert_file,
            key_file: o.key_file,
            server_name: o.server_name,
        },
    )?;
    Ok(Config {
        host,
        port,
        send: o.send,
        banner: o.banner.unwrap_or(false) || banner_regex.is_some(),
        banner_regex,
        tls,
    })
}

/// The TLS options when TLS is on; given without it they are a mistake worth naming.
pub(crate) fn tls_options(on: bool, o: tls::Options) -> Result<Option<tls::Options>, CheckError> {
    o.check()?;
    if !on && o != tls::Options::default() {
        return Err(CheckError::field(
            "config.tls",
            "TLS options are given but `tls` is not true",
        ));
    }
    Ok(on.then_some(o))
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let connector = match &c.tls {
        Some(o) => Some((tls::connector(o, &[])?, o.name_for(&c.host)?)),
        None => None,
    };
    let tcp = match connect(&c.host, c.port, out).await {
        Ok(tcp) => tcp,
        Err(status) => {
            out.fail(status);
            return Ok(());
        }
    };
    match connector {
        None => converse(c, tcp, out).await,
        Some((connector, name)) => match tls::handshake(&connector, name, tcp).await {
            Ok(session) => {
                out.seconds("tls_time", session.handshake);
                if let Some(days) = tls::expiry_days(&session) {
                    out.numeric("cert_expiry_days", days);
                }
                converse(c, session.stream, out).await;
            }
            Err(status) => out.fail(status),
        },
    }
    Ok(())
}

/// Sends `send`, reads and matches the banner.
async fn converse<S: AsyncRead + AsyncWrite + Unpin>(c: &Config, mut stream: S, out: &mut Out) {
    let started = Instant::now();
    if let Some(text) = &c.send {
        if let Err(e) = stream.write_all(text.as_bytes()).await {
            return out.fail(format!("send failed: {}", tls::io_reason(&e)));
        }
    }
    if !c.banner {
        return out.ok();
    }
    let banner = match read_line(&mut stream, BANNER_BYTES_MAX).await {
        Ok(b) => b,
        Err(e) => return out.fail(format!("banner read failed: {}", tls::io_reason(&e))),
    };
    out.seconds("banner_time", started.elapsed());
    out.text(
        "banner",
        String::from_utf8_lossy(trim_eol(&banner)).into_owned(),
    );
    match &c.banner_regex {
        Some(re) if !re.is_match(&banner) => {
            out.numeric("banner_match", 0.0);
            out.fail("banner does not match banner_regex");
        }
        Some(_) => {
            out.numeric("banner_match", 1.0);
            out.ok();
        }
        None if banner.is_empty() => out.fail("the server closed without a banner"),
        None => out.ok(),
    }
}

/// Reads up to and including the first `\n`, the end of the stream, or `max` bytes.
pub(crate) async fn read_line<S: AsyncRead + Unpin>(
    stream: &mut S,
    max: usize,
) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    while line.len() < max {
        let want = chunk.len().min(max - line.len());
        let n = stream.read(&mut chunk[..want]).await?;
        if n == 0 {
            break;
        }
        let got = &chunk[..n];
        if let Some(end) = got.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&got[..=end]);
            break;
        }
        line.extend_from_slice(got);
    }
    Ok(line)
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Resolves `host` (recording `dns_time` when it is a name) and connects (recording
/// `connect_time`). `Err` is the failure as a status.
pub(crate) async fn connect(host: &str, port: u16, out: &mut Out) -> Result<TcpStream, String> {
    let addr = resolve(host, port, out).await?;
    let started = Instant::now();
    match TcpStream::connect(addr).await {
        Ok(s) => {
            out.seconds("connect_time", started.elapsed());
            // Requests are one write each; Nagle would hold back the last segment.
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Err(e) => Err(crate::error::io_reason(&e)),
    }
}

/// The first address of `host`; a name is looked up with the system resolver and timed.
pub(crate) async fn resolve(host: &str, port: u16, out: &mut Out) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let started = Instant::now();
    let found = tokio::net::lookup_host((host, port)).await;
    let elapsed: Duration = started.elapsed();
    match found.map(|mut addrs| addrs.next()) {
        Ok(Some(addr)) => {
            out.seconds("dns_time", elapsed);
            Ok(addr)
        }
        Ok(None) => Err(format!("DNS lookup of {host} found no address")),
        Err(e) => Err(format!("DNS lookup of {host} failed: {e}")),
    }
}
