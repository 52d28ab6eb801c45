//! RESP, the Redis protocol: commands out as arrays of bulk strings, replies in (RESP2, and the
//! RESP3 types a server may send anyway), every length and nesting bounded. Ours because a check
//! sends four commands and reads their replies: a client library's pooling and reconnects would
//! be all cost.

use std::fmt;

/// Longest bulk string accepted (an INFO reply is a few KB).
pub const BULK_BYTES_MAX: usize = 4 << 20;
/// Most elements in one array, map or set.
pub const ARRAY_LEN_MAX: usize = 100_000;
/// Most elements in one reply, all levels together.
pub const ELEMENTS_MAX: usize = 1_000_000;
/// Deepest nesting of arrays in one reply.
pub const DEPTH_MAX: usize = 8;
/// Longest line (a simple string, an error, a number).
const LINE_BYTES_MAX: usize = 64 << 10;

#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    /// RESP3 doubles (`,`).
    Double(f64),
    /// `None` is the null bulk string (and RESP3 `_` null).
    Bulk(Option<Vec<u8>>),
    /// Arrays; RESP3 maps (flattened key, value, …), sets and pushes too. `None` is the null
    /// array.
    Array(Option<Vec<Reply>>),
}

/// Why bytes are not a RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespError(pub String);

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad Redis reply: {}", self.0)
    }
}

impl std::error::Error for RespError {}

/// A command as a RESP array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One reply from the front of `buf`: `Ok(Some((reply, bytes used)))`, `Ok(None)` when more
/// bytes are needed, `Err` when the bytes cannot be a reply.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    let mut p = Parser {
        buf,
        at: 0,
        elements: 0,
    };
    match p.reply(0) {
        Ok(reply) => Ok(Some((reply, p.at))),
        Err(Stop::More) => Ok(None),
        Err(Stop::Bad(why)) => Err(RespError(why)),
    }
}

enum Stop {
    More,
    Bad(String),
}

fn bad<T>(why: impl Into<String>) -> Result<T, Stop> {
    Err(Stop::Bad(why.into()))
}

struct Parser<'a> {
    buf: &'a [u8],
    at: usize,
    elements: usize,
}

impl<'a> Parser<'a> {
    fn reply(&mut self, depth: usize) -> Result<Reply, Stop> {
        let kind = *self.buf.get(self.at).ok_or(Stop::More)?;
        self.at += 1;
        let line = self.line()?;
        match kind {
            b'+' => Ok(Reply::Simple(text(line)?)),
            b'-' | b'!' => Ok(Reply::Error(text(line)?)),
            b':' => Ok(Reply::Integer(integer(line)?)),
            b',' => Ok(Reply::Double(double(line)?)),
            b'#' => match line {
                b"t" => Ok(Reply::Integer(1)),
                b"f" => Ok(Reply::Integer(0)),
                _ => bad("a boolean other than t or f"),
            },
            b'_' => Ok(Reply::Bulk(None)),
            // A RESP3 big number, kept as its digits.
            b'(' => Ok(Reply::Simple(text(line)?)),
            b'$' | b'=' => self.bulk(integer(line)?),
            b'*' | b'~' | b'>' => self.array(integer(line)?, 1, depth),
            b'%' | b'|' => self.array(integer(line)?, 2, depth),
            other => bad(format!("unknown reply type byte 0x{other:02x}")),
        }
    }

    /// The bytes up to the next CRLF, which is skipped.
    fn line(&mut self) -> Result<&'a [u8], Stop> {
        let buf: &'a [u8] = self.buf;
        let rest = &buf[self.at..];
        let window = &rest[..rest.len().min(LINE_BYTES_MAX + 2)];
        let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
            return match rest.len() > LINE_BYTES_MAX {
                true => bad(format!("a line longer than {LINE_BYTES_MAX} bytes")),
                false => Err(Stop::More),
            };
        };
        self.at += end + 2;
        Ok(&rest[..end])
    }

    fn bulk(&mut self, len: i64) -> Result<Reply, Stop> {
        if len == -1 {
            return Ok(Reply::Bulk(None));
        }
        let len = usize::try_from(len).or_else(|_| bad("a negative bulk length"))?;
        if len > BULK_BYTES_MAX {
            return bad(format!("a bulk string longer than {BULK_BYTES_MAX} bytes"));
        }
        let rest = &self.buf[self.at..];
        if rest.len() < len + 2 {
            return Err(Stop::More);
        }
        if &rest[len..len + 2] != b"\r\n" {
            return bad("a bulk string not followed by CRLF");
        }
        self.at += len + 2;
        Ok(Reply::Bulk(Some(rest[..len].to_vec())))
    }

    /// `n` entries of `per` replies each (maps have two per entry).
    fn array(&mut self, n: i64, per: usize, depth: usize) -> Result<Reply, Stop> {
        if n == -1 {
            return Ok(Reply::Array(None));
        }
        let n = usize::try_from(n).or_else(|_| bad("a negative array length"))?;
        let len = n.saturating_mul(per);
        if len > ARRAY_LEN_MAX {
            return bad(format!("an array longer than {ARRAY_LEN_MAX}"));
        }
        if depth >= DEPTH_MAX {
            return bad(format!("arrays nested deeper than {DEPTH_MAX}"));
        }
        self.elements += len;
        if self.elements > ELEMENTS_MAX {
            return bad(format!("more than {ELEMENTS_MAX} elements in one reply"));
        }
        // Every element takes at least 3 bytes: reserve no more than the input can hold.
        let mut items = Vec::with_capacity(len.min((self.buf.len() - self.at) / 3));
        for _ in 0..len {
            items.push(self.reply(depth + 1)?);
        }
        Ok(Reply::Array(Some(items)))
    }
}

fn text(line: &[u8]) -> Result<String, Stop> {
    String::from_utf8(line.to_vec()).or_else(|_| bad("a status line that is not UTF-8"))
}

fn integer(line: &[u8]) -> Result<i64, Stop> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .map_or_else(|| bad("a length or integer that is not a number"), Ok)
}

fn double(line: &[u8]) -> Result<f64, Stop> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or_else(|| bad("a double that is not a number"), Ok)
}

impl Reply {
    /// The reply as text when it is a string of any kind.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Reply::Simple(s) => Some(s),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Reply::Integer(i) => Some(*i),
            Reply::Bulk(Some(_)) | Reply::Simple(_) => self.as_text()?.parse().ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_of_every_kind() {
        let all = b"*6\r\n+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*1\r\n,1.5\r\n";
        let (r, used) = parse(all).unwrap().unwrap();
        assert_eq!(used, all.len());
        let items = r.as_array().unwrap();
        assert_eq!(items[0], Reply::Simple("OK".into()));
        assert_eq!(items[1], Reply::Error("ERR no".into()));
        assert_eq!(items[2].as_integer(), Some(42));
        assert_eq!(items[3].as_text(), Some("abc"));
        assert_eq!(items[4], Reply::Bulk(None));
        assert_eq!(items[5], Reply::Array(Some(vec![Reply::Double(1.5)])));
        for cut in 0..all.len() {
            assert_eq!(parse(&all[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn bounds_and_garbage() {
        assert!(parse(b"$99999999\r\n").is_err());
        assert!(parse(b"*-2\r\n").is_err());
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b"$3\r\nabcXY").is_err());
        let deep = "*1\r\n".repeat(DEPTH_MAX + 1) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
        assert_eq!(encode(&[b"GET", b"k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
}
