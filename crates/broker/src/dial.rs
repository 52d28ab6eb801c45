//! Opening a link's TCP connection: straight to the peer, or through an HTTP CONNECT proxy
//! (a broker behind a firewall that lets only its proxy out). Every step has a deadline.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest wait for a TCP connect, a proxy's answer, or a TLS handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest proxy response head read.
pub const PROXY_RESPONSE_BYTES_MAX: usize = 8192;

/// Connects to `address` (`host:port`), through `proxy` (`http://host:port` or `host:port`)
/// when given.
pub async fn connect(address: &str, proxy: Option<&str>) -> Result<TcpStream, String> {
    let hop = match proxy {
        Some(p) => p.strip_prefix("http://").unwrap_or(p).trim_end_matches('/'),
        None => address,
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(hop))
        .await
        .map_err(|_| format!("connecting to {hop}: timed out"))?
        .map_err(|e| format!("connecting to {hop}: {e}"))?;
    let _ = stream.set_nodelay(true);
    match proxy {
        None => Ok(stream),
        Some(_) => tokio::time::timeout(CONNECT_TIMEOUT, tunnel(stream, address))
            .await
            .map_err(|_| format!("proxy {hop}: no answer to CONNECT"))?,
    }
}

/// Asks the proxy for a tunnel and reads its answer's head (nothing past it: the proxy says
/// nothing more until the peer does).
async fn tunnel(mut stream: TcpStream, address: &str) -> Result<TcpStream, String> {
    let request = format!("CONNECT {address} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("proxy: {e}"))?;
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= PROXY_RESPONSE_BYTES_MAX {
            return Err("proxy: answer head too long".to_owned());
        }
        let n = stream
            .read(&mut byte)
            .await
            .map_err(|e| format!("proxy: {e}"))?;
        if n == 0 {
            return Err("proxy closed the connection".to_owned());
        }
        head.push(byte[0]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let code = line.split_whitespace().nth(1).unwrap_or("");
    if code != "200" {
        return Err(format!("proxy refused the tunnel to {address}: {line}"));
    }
    Ok(stream)
}
