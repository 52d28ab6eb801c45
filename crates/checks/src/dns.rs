//! `dns`: one query to one server — query time, response code, answer count and the answers as
//! text. UDP with EDNS, and TCP when the answer comes back truncated (or `tcp: true`). The wire
//! format is hickory-proto's; the exchange, its bounds and its checks are here.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

use crate::error::CheckError;
use crate::measure::Out;
use crate::spec::{self, excerpt, CheckSpec};

/// Largest UDP answer we advertise (EDNS) and read.
pub const UDP_PAYLOAD_MAX: u16 = 4096;
/// Datagrams not answering our query that we skip before giving up (stray or spoofed).
pub const STRAY_DATAGRAMS_MAX: usize = 16;
/// Most answers listed in the `answers` text.
pub const ANSWERS_LISTED_MAX: usize = 64;
/// Where the system's resolvers are listed.
const RESOLV_CONF: &str = "/etc/resolv.conf";
const RESOLV_CONF_BYTES_MAX: u64 = 64 << 10;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// Record type (A, AAAA, MX, TXT, …; default A).
    #[serde(rename = "type")]
    record_type: Option<String>,
    /// `ip` or `ip:port` of the server; default the first nameserver in /etc/resolv.conf.
    server: Option<String>,
    /// Ask the server to recurse (default true).
    recursion_desired: Option<bool>,
    /// Query over TCP instead of UDP.
    tcp: Option<bool>,
    /// Response code that counts as up (default NOERROR).
    expected_rcode: Option<String>,
}

pub(crate) struct Config {
    name: Name,
    record_type: RecordType,
    server: Option<SocketAddr>,
    recursion_desired: bool,
    tcp: bool,
    expected_rcode: u16,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let o: Options = spec::options(spec)?;
    let type_text = o.record_type.as_deref().unwrap_or("A").to_ascii_uppercase();
    let record_type = RecordType::from_str(&type_text)
        .ok()
        .filter(|t| !matches!(t, RecordType::Unknown(_)))
        .ok_or_else(|| {
            CheckError::field(
                "config.type",
                format!("unknown record type \"{}\"", excerpt(&type_text)),
            )
        })?;
    let name = query_name(&spec.target, record_type)?;
    let server = match &o.server {
        Some(s) => Some(server_addr(s).ok_or_else(|| {
            CheckError::field(
                "config.server",
                "expected an IP address, optionally with :port",
            )
        })?),
        None => None,
    };
    let expected = o.expected_rcode.as_deref().unwrap_or("NOERROR");
    let expected_rcode = rcode_from_name(expected).ok_or_else(|| {
        CheckError::field(
            "config.expected_rcode",
            "one of NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED",
        )
    })?;
    Ok(Config {
        name,
        record_type,
        server,
        recursion_desired: o.recursion_desired.unwrap_or(true),
        tcp: o.tcp.unwrap_or(false),
        expected_rcode,
    })
}

/// The name to ask about; for PTR an IP address becomes its reverse name.
fn query_name(target: &str, t: RecordType) -> Result<Name, CheckError> {
    if t == RecordType::PTR {
        if let Ok(ip) = target.parse::<IpAddr>() {
            return Ok(Name::from(ip));
        }
    }
    let mut name = Name::from_utf8(target).map_err(|_| {
        CheckError::field(
            "target",
            format!("\"{}\" is not a domain name", excerpt(target)),
        )
    })?;
    name.set_fqdn(true);
    Ok(name)
}

fn server_addr(s: &str) -> Option<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>().ok()
}

/// The first `nameserver` of /etc/resolv.conf, as the system resolver would ask first.
fn system_server() -> Result<SocketAddr, CheckError> {
    let missing = |why: String| {
        CheckError::setup(format!(
            "dns: no server given (config.server) and {why} in {RESOLV_CONF}"
        ))
    };
    let meta =
        std::fs::metadata(RESOLV_CONF).map_err(|e| missing(format!("cannot read it ({e})")))?;
    if meta.len() > RESOLV_CONF_BYTES_MAX {
        return Err(missing("it is too large to read".to_owned()));
    }
    let text = std::fs::read_to_string(RESOLV_CONF)
        .map_err(|e| missing(format!("cannot read it ({e})")))?;
    first_nameserver(&text).ok_or_else(|| missing("no nameserver line".to_owned()))
}

fn first_nameserver(text: &str) -> Option<SocketAddr> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("nameserver"))
            .then(|| words.next())
            .flatten()
            // A scoped IPv6 address (fe80::1%eth0) is not a plain IP: skipped.
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, 53))
    })
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let server = match c.server {
        Some(s) => s,
        None => system_server()?,
    };
    let id = query_id();
    let query = encode(c, id)?;
    let started = Instant::now();
    let answer = match c.tcp {
        true => over_tcp(server, &query, id).await,
        false => match over_udp(server, &query, id).await {
            Ok(m) if m.metadata.truncation => over_tcp(server, &query, id).await,
            other => other,
        },
    };
    match answer {
        Ok(message) => {
            out.seconds("query_time", started.elapsed());
            report(c, &message, out);
        }
        Err(status) => out.fail(status),
    }
    Ok(())
}

/// A query id no off-path sender can guess from the previous one.
fn query_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded per process from the OS; the hasher mixes in the time.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() as u16
}

fn encode(c: &Config, id: u16) -> Result<Vec<u8>, CheckError> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = c.recursion_desired;
    m.add_query(Query::query(c.name.clone(), c.record_type));
    let mut edns = Edns::new();
    edns.set_max_payload(UDP_PAYLOAD_MAX);
    m.set_edns(edns);
    m.to_vec()
        .map_err(|e| CheckError::field("target", format!("cannot encode the query: {e}")))
}

async fn over_udp(server: SocketAddr, query: &[u8], id: u16) -> Result<Message, String> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => ([0u16; 8], 0).into(),
    };
    let io = |e: std::io::Error| format!("DNS query failed: {}", crate::error::io_reason(&e));
    let socket = UdpSocket::bind(local).await.map_err(io)?;
    // Connected: the kernel drops datagrams from any other address.
    socket.connect(server).await.map_err(io)?;
    socket.send(query).await.map_err(io)?;
    let mut buf = vec![0u8; usize::from(UDP_PAYLOAD_MAX)];
    for _ in 0..STRAY_DATAGRAMS_MAX {
        let n = socket.recv(&mut buf).await.map_err(io)?;
        if let Some(m) = decode_answer(&buf[..n], id) {
            return Ok(m);
        }
    }
    Err("no valid answer among the datagrams received".to_owned())
}

async fn over_tcp(server: SocketAddr, query: &[u8], id: u16) -> Result<Message, String> {
    let io =
        |e: std::io::Error| format!("DNS query over TCP failed: {}", crate::error::io_reason(&e));
    let mut s = TcpStream::connect(server).await.map_err(io)?;
    let len = u16::try_from(query.len()).map_err(|_| "query too long".to_owned())?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(query);
    s.write_all(&framed).await.map_err(io)?;
    let n = s.read_u16().await.map_err(io)?;
    // A u16 length: at most 64 KiB, the protocol's own bound.
    let mut buf = vec![0u8; usize::from(n)];
    s.read_exact(&mut buf).await.map_err(io)?;
    decode_answer(&buf, id).ok_or_else(|| "the server's answer does not decode or match".to_owned())
}

/// The message if it is a response to our query id.
fn decode_answer(bytes: &[u8], id: u16) -> Option<Message> {
    let m = Message::from_vec(bytes).ok()?;
    (m.metadata.id == id && m.metadata.message_type == MessageType::Response).then_some(m)
}

fn report(c: &Config, m: &Message, out: &mut Out) {
    let code = u16::from(m.metadata.response_code);
    out.text("rcode", rcode_name(code));
    out.numeric("answer_count", m.answers.len() as f64);
    out.numeric("authority_count", m.authorities.len() as f64);
    let mut answers: Vec<String> = m
        .answers
        .iter()
        .take(ANSWERS_LISTED_MAX)
        .map(|r| format!("{} {}", r.record_type(), r.data))
        .collect();
    // Round-robin servers rotate the order; sorted, the text changes only when the set does.
    answers.sort_unstable();
    out.text("answers", answers.join("\n"));
    if code == c.expected_rcode {
        out.ok();
    } else {
        out.fail(format!(
            "rcode {} (expected {})",
            rcode_name(code),
            rcode_name(c.expected_rcode)
        ));
    }
}

const RCODES: [&str; 11] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET",
    "NXRRSET", "NOTAUTH", "NOTZONE",
];

fn rcode_name(code: u16) -> String {
    match RCODES.get(usize::from(code)) {
        Some(name) => (*name).to_owned(),
        None if code == 16 => "BADVERS".to_owned(),
        None => format!("RCODE{code}"),
    }
}

fn rcode_from_name(name: &str) -> Option<u16> {
    let upper = name.to_ascii_uppercase();
    RCODES
        .iter()
        .position(|n| *n == upper)
        .and_then(|i| u16::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_first_plain_nameserver() {
        let text =
            "# c\nsearch x\nnameserver fe80::1%eth0\nnameserver 10.0.0.2\nnameserver 1.1.1.1\n";
        assert_eq!(first_nameserver(text), Some("10.0.0.2:53".parse().unwrap()));
        assert_eq!(first_nameserver("search x\n"), None);
    }

    #[test]
    fn rcodes_by_name() {
        assert_eq!(rcode_from_name("nxdomain"), Some(3));
        assert_eq!(rcode_name(3), "NXDOMAIN");
        assert_eq!(rcode_name(99), "RCODE99");
    }
}
