//! `ping`: ICMP echo to one address, IPv4 or IPv6 — every reply's round trip a sample of one
//! histogram, and the share lost. Uses the unprivileged ICMP datagram socket where
//! `net.ipv4.ping_group_range` allows it, a raw socket otherwise.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::error::CheckError;
use crate::measure::Out;
use crate::spec::{self, CheckSpec};

/// Most echo requests one run sends.
pub const COUNT_MAX: u32 = 100;
/// Largest echo payload (fits an Ethernet frame with either IP header).
pub const PAYLOAD_BYTES_MAX: usize = 1400;
/// Smallest payload: the run's token and the send sequence must fit.
const PAYLOAD_BYTES_MIN: usize = 16;
/// Datagrams read per request sent before the run stops reading (a raw socket also sees our
/// own requests on loopback and every other echo reply from the target).
const DATAGRAMS_PER_REQUEST_MAX: u32 = 8;
const RECV_BYTES_MAX: usize = PAYLOAD_BYTES_MAX + 128;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// Echo requests to send (default 5).
    count: Option<u32>,
    /// Time between requests (default 100 ms).
    interval_ms: Option<u64>,
    /// Echo payload size (default 56, as ping(8)).
    payload_bytes: Option<usize>,
}

pub(crate) struct Config {
    host: String,
    count: u32,
    interval: Duration,
    payload_bytes: usize,
    timeout: Duration,
}

pub(crate) fn config(spec: &CheckSpec) -> Result<Config, CheckError> {
    let o: Options = spec::options(spec)?;
    let host = spec
        .target
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if host.is_empty() || host.contains(['/', ' ']) {
        return Err(CheckError::field(
            "target",
            "expected a host name or IP address",
        ));
    }
    let count = o.count.unwrap_or(5);
    if !(1..=COUNT_MAX).contains(&count) {
        return Err(CheckError::field(
            "config.count",
            format!("must be 1 to {COUNT_MAX}"),
        ));
    }
    let interval_ms = o.interval_ms.unwrap_or(100);
    if !(1..=10_000).contains(&interval_ms) {
        return Err(CheckError::field(
            "config.interval_ms",
            "must be 1 to 10000",
        ));
    }
    if u64::from(count - 1) * interval_ms >= spec.timeout_ms {
        return Err(CheckError::field(
            "config.count",
            format!(
                "{count} requests {interval_ms} ms apart do not fit in timeout_ms ({} ms)",
                spec.timeout_ms
            ),
        ));
    }
    let payload_bytes = o.payload_bytes.unwrap_or(56);
    if !(PAYLOAD_BYTES_MIN..=PAYLOAD_BYTES_MAX).contains(&payload_bytes) {
        return Err(CheckError::field(
            "config.payload_bytes",
            format!("must be {PAYLOAD_BYTES_MIN} to {PAYLOAD_BYTES_MAX}"),
        ));
    }
    Ok(Config {
        host,
        count,
        interval: Duration::from_millis(interval_ms),
        payload_bytes,
        timeout: Duration::from_millis(spec.timeout_ms),
    })
}

pub(crate) async fn run(c: &Config, out: &mut Out) -> Result<(), CheckError> {
    let started = Instant::now();
    let ip = match crate::tcp::resolve(&c.host, 0, out).await {
        Ok(addr) => addr.ip(),
        Err(status) => {
            out.fail(status);
            return Ok(());
        }
    };
    let (socket, kind) = open(ip)?;
    // Replies are awaited until just before the run's own deadline, so loss is reported as loss
    // rather than as a timeout.
    let margin = (c.timeout / 10).min(Duration::from_millis(50));
    let deadline = started + c.timeout - margin;
    let mut echo = Echo::new(c, ip, kind);
    if let Err(e) = echo.exchange(&socket, deadline).await {
        out.fail(format!("ping failed: {}", crate::error::io_reason(&e)));
        return Ok(());
    }
    echo.report(out);
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// SOCK_DGRAM/IPPROTO_ICMP: the kernel owns the identifier and strips the IP header.
    Datagram,
    /// SOCK_RAW: IPv4 replies arrive with their IP header.
    Raw,
}

/// An ICMP socket connected to `ip`: the datagram kind if allowed, else raw, else an error that
/// names both refusals and what would allow each.
fn open(ip: IpAddr) -> Result<(UdpSocket, Kind), CheckError> {
    let (domain, protocol) = match ip {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6),
    };
    let (socket, kind) = match Socket::new(domain, Type::DGRAM, Some(protocol)) {
        Ok(s) => (s, Kind::Datagram),
        Err(dgram) => match Socket::new(domain, Type::RAW, Some(protocol)) {
            Ok(s) => (s, Kind::Raw),
            Err(raw) => return Err(no_socket(&dgram, &raw)),
        },
    };
    let setup =
        |e: std::io::Error| CheckError::setup(format!("ping: cannot set up the ICMP socket: {e}"));
    socket.set_nonblocking(true).map_err(setup)?;
    // Connected: only datagrams from the target reach this socket.
    socket
        .connect(&SocketAddr::new(ip, 0).into())
        .map_err(setup)?;
    let socket = UdpSocket::from_std(socket.into()).map_err(setup)?;
    Ok((socket, kind))
}

fn no_socket(dgram: &std::io::Error, raw: &std::io::Error) -> CheckError {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range")
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unreadable".to_owned());
    CheckError::setup(format!(
        "ping needs an ICMP socket and this system allows neither kind: the unprivileged \
         datagram socket was refused ({dgram}; net.ipv4.ping_group_range is \"{range}\" and must \
         include a group of this process), and the raw socket was refused ({raw}; it needs root \
         or CAP_NET_RAW)"
    ))
}

/// One run's requests and replies.
struct Echo {
    ip: IpAddr,
    kind: Kind,
    count: u32,
    interval: Duration,
    payload_bytes: usize,
    /// Distinguishes this run's replies from other pings to the same target.
    token: [u8; 8],
    /// Identifier for raw sockets (the kernel picks it for datagram sockets).
    id: u16,
    sent_at: Vec<Option<Instant>>,
    rtt: Vec<Option<Duration>>,
}

impl Echo {
    fn new(c: &Config, ip: IpAddr, kind: Kind) -> Echo {
        let token = token();
        Echo {
            ip,
            kind,
            count: c.count,
            interval: c.interval,
            payload_bytes: c.payload_bytes,
            token,
            id: u16::from_le_bytes([token[0], token[1]]),
            sent_at: vec![None; c.count as usize],
            rtt: vec![None; c.count as usize],
        }
    }

    /// Sends the requests `interval` apart and reads replies until all came or `deadline`.
    async fn exchange(&mut self, socket: &UdpSocket, deadline: Instant) -> std::io::Result<()> {
        let mut buf = vec![0u8; RECV_BYTES_MAX];
        let mut sent = 0u32;
        let mut next_send = Instant::now();
        let mut reads_left = self.count * DATAGRAMS_PER_REQUEST_MAX;
        loop {
            if sent < self.count && Instant::now() >= next_send {
                let seq = sent as u16;
                socket.send(&self.request(seq)).await?;
                self.sent_at[usize::from(seq)] = Some(Instant::now());
                sent += 1;
                next_send += self.interval;
                continue;
            }
            if self.received() == self.count || reads_left == 0 {
                return Ok(());
            }
            let wake = if sent < self.count {
                next_send.min(deadline)
            } else {
                deadline
            };
            tokio::select! {
                r = socket.recv(&mut buf) => {
                    let n = r?;
                    reads_left -= 1;
                    self.take_reply(&buf[..n]);
                }
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= deadline {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn request(&self, seq: u16) -> Vec<u8> {
        let request_type = if self.ip.is_ipv4() { 8 } else { 128 };
        let mut p = vec![0u8; 8 + self.payload_bytes];
        p[0] = request_type;
        p[4..6].copy_from_slice(&self.id.to_be_bytes());
        p[6..8].copy_from_slice(&seq.to_be_bytes());
        p[8..16].copy_from_slice(&self.token);
        for (i, b) in p[16..].iter_mut().enumerate() {
            *b = i as u8;
        }
        // ICMPv6 checksums cover a pseudo-header and are always the kernel's.
        if self.ip.is_ipv4() {
            let sum = checksum(&p);
            p[2..4].copy_from_slice(&sum.to_be_bytes());
        }
        p
    }

    fn take_reply(&mut self, datagram: &[u8]) {
        let Some(seq) = parse_reply(
            datagram,
            self.ip.is_ipv4(),
            self.kind == Kind::Raw,
            &self.token,
        ) else {
            return;
        };
        let i = usize::from(seq);
        if let (Some(Some(at)), Some(slot @ None)) = (self.sent_at.get(i), self.rtt.get_mut(i)) {
            *slot = Some(at.elapsed());
        }
    }

    fn received(&self) -> u32 {
        self.rtt.iter().filter(|r| r.is_some()).count() as u32
    }

    fn report(&self, out: &mut Out) {
        let received = self.received();
        let mut h = hist::Histogram::new();
        for rtt in self.rtt.iter().flatten() {
            h.insert(rtt.as_secs_f64());
        }
        out.push("rtt", Vec::new(), crate::Value::Histogram(h));
        out.numeric("sent", f64::from(self.count));
        out.numeric("received", f64::from(received));
        out.numeric(
            "loss",
            f64::from(self.count - received) / f64::from(self.count),
        );
        match received {
            0 => out.fail("no reply"),
            n if n == self.count => out.ok(),
            n => out.partly(format!("{} of {} replies lost", self.count - n, self.count)),
        }
    }
}

/// The sequence number of an echo reply carrying `token`, if `datagram` is one. IPv4 raw
/// sockets deliver the IP header first; every other kind starts at the ICMP header.
pub(crate) fn parse_reply(datagram: &[u8], v4: bool, raw: bool, token: &[u8; 8]) -> Option<u16> {
    let icmp = if v4 && raw {
        let header = usize::from(datagram.first()? & 0x0f) * 4;
        datagram.get(header..)?
    } else {
        datagram
    };
    let reply_type = if v4 { 0 } else { 129 };
    if icmp.len() < 16 || icmp[0] != reply_type || icmp[1] != 0 || icmp[8..16] != token[..] {
        return None;
    }
    Some(u16::from_be_bytes([icmp[6], icmp[7]]))
}

/// The Internet checksum (RFC 1071) of an ICMPv4 message whose checksum field is zero.
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in bytes.chunks(2) {
        let word = u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn token() -> [u8; 8] {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish().to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_known_echo_request() {
        // Type 8, id 1, seq 1, no payload: 0x0800 + 0x0001 + 0x0001 = 0x0802 → !0x0802.
        let p = [8, 0, 0, 0, 0, 1, 0, 1];
        assert_eq!(checksum(&p), !0x0802);
    }

    #[test]
    fn replies_parse_by_socket_kind() {
        let token = [7u8; 8];
        let mut icmp = vec![0u8, 0, 0, 0, 0, 9, 0, 3];
        icmp.extend_from_slice(&token);
        assert_eq!(parse_reply(&icmp, true, false, &token), Some(3));
        let mut ip = vec![0x45u8];
        ip.extend_from_slice(&[0u8; 19]);
        ip.extend_from_slice(&icmp);
        assert_eq!(parse_reply(&ip, true, true, &token), Some(3));
        assert_eq!(parse_reply(&icmp, true, false, &[0u8; 8]), None);
        icmp[0] = 129;
        assert_eq!(parse_reply(&icmp, false, true, &token), Some(3));
        assert_eq!(parse_reply(&[], true, true, &token), None);
    }
}
