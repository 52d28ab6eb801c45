//! The installer's conversation with a core: one plain HTTP/1.1 request per connection
//! (`Connection: close`), bounded in time and size, the bearer token from the token file.
//! Objects are compared with what the core holds before anything is sent, so a re-run sends
//! no write at all.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value;

/// Longest answer read from the core, in bytes.
const RESPONSE_BYTES_MAX: u64 = 8 << 20;
/// Connect, read and write timeout of one request.
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// A core's address and the token sent to it.
pub struct Core {
    /// `http://host:port` as given, without a trailing slash.
    pub url: String,
    authority: String,
    token: Option<String>,
}

/// A core's answer.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The core's `error` text, or the body's first line.
    pub fn error_text(&self) -> String {
        match self.json() {
            Some(v) if v["error"].is_string() => v["error"].as_str().unwrap_or("").to_string(),
            _ => String::from_utf8_lossy(&self.body)
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect(),
        }
    }
}

impl Core {
    pub fn new(url: &str, token: Option<String>) -> Result<Core, String> {
        let url = url.trim_end_matches('/').to_string();
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(format!(
                "--core {url}: only http:// cores are supported by the installer"
            ));
        };
        let authority = rest.split('/').next().unwrap_or("").to_string();
        if authority.is_empty() {
            return Err(format!("--core {url}: no host"));
        }
        Ok(Core {
            url,
            authority,
            token,
        })
    }

    pub fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Answer, String> {
        let host = &self.authority;
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let addr = host
            .to_socket_addrs()
            .map_err(|e| format!("core {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("core {host}: no address"))?;
        let mut conn = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("core {host} is not reachable: {e}"))?;
        let io = |e: std::io::Error| format!("talking to core {host}: {e}");
        conn.set_read_timeout(Some(timeout)).map_err(io)?;
        conn.set_write_timeout(Some(timeout)).map_err(io)?;
        let body = body.unwrap_or_default();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Length: {}\r\nContent-Type: application/json\r\n",
            body.len()
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        conn.write_all(head.as_bytes()).map_err(io)?;
        conn.write_all(body).map_err(io)?;
        let mut raw = Vec::new();
        conn.take(RESPONSE_BYTES_MAX + 1)
            .read_to_end(&mut raw)
            .map_err(io)?;
        if raw.len() as u64 > RESPONSE_BYTES_MAX {
            return Err(format!(
                "core {host}: answer larger than {RESPONSE_BYTES_MAX} bytes"
            ));
        }
        parse_answer(&raw).ok_or_else(|| format!("core {host}: not an HTTP answer"))
    }

    /// GET a JSON document; `None` on 404.
    pub fn get_json(&self, path: &str) -> Result<Option<Value>, String> {
        let a = self.request("GET", path, None)?;
        match a.status {
            200 => a
                .json()
                .map(Some)
                .ok_or_else(|| format!("GET {path}: the answer is not JSON")),
            404 => Ok(None),
            s => Err(format!("GET {path}: HTTP {s}: {}", a.error_text())),
        }
    }

    /// Sends a write; any answer but 2xx is an error naming the core's reason.
    pub fn write(&self, method: &str, path: &str, body: &[u8]) -> Result<Answer, String> {
        let a = self.request(method, path, Some(body))?;
        if (200..300).contains(&a.status) {
            Ok(a)
        } else {
            Err(format!(
                "{method} {path}: HTTP {}: {}",
                a.status,
                a.error_text()
            ))
        }
    }
}

fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Some(Answer { status, body })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(rest.len());
    // Each chunk consumes at least its size line, so the loop ends within `rest.len()` rounds.
    for _ in 0..=rest.len() {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
    None
}

/// Percent-encodes a query value.
pub fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn answers_plain_and_chunked() {
        let a = parse_answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!(a.status, 404);
        assert_eq!(a.body, b"{}");
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(a.body, b"abcde");
        assert!(parse_answer(b"garbage").is_none());
    }

    #[test]
    fn urls_and_query_values() {
        assert!(Core::new("https://x", None).is_err());
        assert_eq!(Core::new("http://h:1/", None).unwrap().url, "http://h:1");
        assert_eq!(encode("host:ab"), "host%3Aab");
    }
}
