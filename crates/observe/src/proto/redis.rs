//! Redis (RESP2 and RESP3): a request is an array of bulk strings (or an inline command line), a
//! response any one value; answered in order. RESP3 push messages (`>`) answer nothing, and an
//! attribute (`|`) is read as part of the value it precedes. After `SUBSCRIBE`, `PSUBSCRIBE`,
//! `SSUBSCRIBE` or `MONITOR` is answered, the server sends without being asked: the connection
//! is no longer parsed.
//!
//! Tags: `command` (upper case, from a fixed list, `OTHER` otherwise), `status` (`ok` / `error`).
//! Rows: the element count of an array, set or map reply.

use super::{crlf, line_starts};
use crate::pair::Fifo;
use crate::stream::{Dir, Proto, Span, Step};
use crate::Sink;

/// Deepest nesting of aggregates read.
pub const DEPTH_MAX: usize = 32;
/// Longest line (a simple string, an error, a length) read.
const LINE_MAX: usize = 16 * 1024;

const COMMANDS: &[&str] = &[
    "GET",
    "SET",
    "DEL",
    "EXISTS",
    "EXPIRE",
    "TTL",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "MGET",
    "MSET",
    "SETEX",
    "SETNX",
    "GETSET",
    "GETDEL",
    "APPEND",
    "STRLEN",
    "HGET",
    "HSET",
    "HDEL",
    "HGETALL",
    "HMGET",
    "HMSET",
    "HINCRBY",
    "HKEYS",
    "HVALS",
    "HLEN",
    "HEXISTS",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LRANGE",
    "LLEN",
    "LINDEX",
    "LREM",
    "LTRIM",
    "BLPOP",
    "BRPOP",
    "LMOVE",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SCARD",
    "SPOP",
    "SUNION",
    "SINTER",
    "ZADD",
    "ZREM",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREVRANGE",
    "ZSCORE",
    "ZINCRBY",
    "ZCARD",
    "ZRANK",
    "ZCOUNT",
    "XADD",
    "XREAD",
    "XRANGE",
    "XLEN",
    "XACK",
    "XREADGROUP",
    "SCAN",
    "HSCAN",
    "SSCAN",
    "ZSCAN",
    "KEYS",
    "TYPE",
    "RENAME",
    "PING",
    "ECHO",
    "AUTH",
    "HELLO",
    "SELECT",
    "INFO",
    "CONFIG",
    "CLIENT",
    "COMMAND",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "EVAL",
    "EVALSHA",
    "SCRIPT",
    "FUNCTION",
    "FCALL",
    "PUBLISH",
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "UNSUBSCRIBE",
    "MONITOR",
    "FLUSHDB",
    "FLUSHALL",
    "DBSIZE",
    "QUIT",
    "RESET",
    "UNLINK",
    "PEXPIRE",
    "PTTL",
    "PERSIST",
    "SETRANGE",
    "GETRANGE",
    "BITCOUNT",
    "SETBIT",
    "GETBIT",
    "PFADD",
    "PFCOUNT",
    "GEOADD",
    "GEORADIUS",
    "GEOSEARCH",
    "OBJECT",
    "MEMORY",
    "SLOWLOG",
    "LATENCY",
    "WAIT",
    "TIME",
    "CLUSTER",
    "READONLY",
    "COPY",
    "DUMP",
    "RESTORE",
    "SORT",
    "TOUCH",
];

#[derive(Default)]
struct Walk {
    /// Elements still to read at each open aggregate level.
    stack: Vec<u64>,
    /// The value is a top-level error, a push, the top-level element count.
    error: bool,
    push: bool,
    rows: Option<u64>,
    /// A request's first element is its command name.
    command: Option<&'static str>,
    started: bool,
    /// A top-level attribute was read: the value it annotates is the reply.
    attributed: bool,
}

#[derive(Default)]
pub struct Redis {
    pending: Fifo<&'static str>,
    walk: [Walk; 2],
    streaming: bool,
}

fn number(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn command_of(name: &[u8]) -> &'static str {
    let mut up = [0u8; 16];
    if name.is_empty() || name.len() > up.len() {
        return "OTHER";
    }
    for (d, s) in up.iter_mut().zip(name) {
        *d = s.to_ascii_uppercase();
    }
    let up = &up[..name.len()];
    COMMANDS
        .iter()
        .find(|c| c.as_bytes() == up)
        .copied()
        .unwrap_or("OTHER")
}

impl Walk {
    /// One element finished: pops finished aggregates; `true` when the whole value is done.
    fn complete_one(&mut self) -> bool {
        while let Some(top) = self.stack.last_mut() {
            *top -= 1;
            if *top > 0 {
                return false;
            }
            self.stack.pop();
        }
        true
    }

    fn step(&mut self, dir: Dir, buf: &[u8]) -> Step {
        let Some(eol) = crlf(buf) else {
            return if buf.len() > LINE_MAX {
                Step::Bad
            } else {
                Step::Need
            };
        };
        let top = !self.started || (self.attributed && self.stack.len() == 1);
        self.started = true;
        if top && dir == Dir::Request && buf.first() != Some(&b'*') {
            let word = buf[..eol].split(|&b| b == b' ').next().unwrap_or_default();
            self.command = Some(command_of(word));
            return Step::Eat {
                take: eol + 2,
                skip: 0,
                end: true,
            };
        }
        let Some((&t, rest)) = buf[..eol].split_first() else {
            return Step::Bad;
        };
        let take = eol + 2;
        match t {
            b'*' | b'%' | b'~' | b'>' | b'|' => self.aggregate(t, number(rest), top, take),
            b'$' | b'=' | b'!' => self.bulk(dir, t, number(rest), top, buf, take),
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => {
                self.error |= top && t == b'-';
                Step::Eat {
                    take,
                    skip: 0,
                    end: self.complete_one(),
                }
            }
            _ => Step::Bad,
        }
    }

    fn aggregate(&mut self, t: u8, n: Option<i64>, top: bool, take: usize) -> Step {
        let Some(n) = n else { return Step::Bad };
        let n = if matches!(t, b'%' | b'|') {
            n.saturating_mul(2)
        } else {
            n
        };
        if top && t == b'|' {
            self.attributed = true;
        } else if top {
            self.push = t == b'>';
            self.rows = Some(if matches!(t, b'%' | b'|') { n / 2 } else { n }.max(0) as u64);
        }
        if t == b'|' {
            // An attribute counts as one more element in front of the value it annotates.
            match self.stack.last_mut() {
                Some(parent) => *parent += 1,
                None => self.stack.push(2),
            }
        }
        if n <= 0 {
            return Step::Eat {
                take,
                skip: 0,
                end: self.complete_one(),
            };
        }
        if self.stack.len() >= DEPTH_MAX {
            return Step::Bad;
        }
        self.stack.push(n as u64);
        Step::Eat {
            take,
            skip: 0,
            end: false,
        }
    }

    fn bulk(
        &mut self,
        dir: Dir,
        t: u8,
        n: Option<i64>,
        top: bool,
        buf: &[u8],
        take: usize,
    ) -> Step {
        let Some(n) = n else { return Step::Bad };
        self.error |= top && t == b'!';
        if n < 0 {
            return Step::Eat {
                take,
                skip: 0,
                end: self.complete_one(),
            };
        }
        let n = n as u64;
        let first_of_request =
            dir == Dir::Request && self.command.is_none() && self.stack.len() == 1;
        if first_of_request && n <= 32 {
            let Some(name) = buf.get(take..take + n as usize) else {
                return Step::Need;
            };
            if buf.len() < take + n as usize + 2 {
                return Step::Need;
            }
            self.command = Some(command_of(name));
            return Step::Eat {
                take: take + n as usize + 2,
                skip: 0,
                end: self.complete_one(),
            };
        }
        if first_of_request {
            self.command = Some("OTHER");
        }
        Step::Eat {
            take,
            skip: n + 2,
            end: self.complete_one(),
        }
    }
}

impl Proto for Redis {
    fn parse(&mut self, dir: Dir, buf: &[u8]) -> Step {
        self.walk[dir as usize].step(dir, buf)
    }

    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn Sink) {
        let w = std::mem::take(&mut self.walk[dir as usize]);
        match dir {
            Dir::Request => {
                if !self.pending.push(span, w.command.unwrap_or("OTHER")) {
                    out.unpaired(1);
                }
            }
            Dir::Response if w.push => {}
            Dir::Response => {
                let Some((req, command)) = self.pending.answer(span.first_ns) else {
                    out.orphan();
                    return;
                };
                let status = if w.error { "error" } else { "ok" };
                out.pair(
                    &req,
                    &span,
                    &[("command", command), ("status", status)],
                    w.rows,
                );
                self.streaming |= matches!(
                    command,
                    "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "MONITOR"
                );
            }
        }
    }

    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize> {
        self.walk[dir as usize] = Walk::default();
        line_starts(buf).find(|&i| plausible(dir, &buf[i..]))
    }

    fn gap(&mut self, dir: Dir, out: &mut dyn Sink) {
        if dir == Dir::Response {
            out.unpaired(self.pending.clear() as u64);
        }
    }

    fn opaque(&self) -> bool {
        self.streaming
    }
}

/// A line that can start a value: a request array of bulk strings, or any reply type.
fn plausible(dir: Dir, b: &[u8]) -> bool {
    let Some(eol) = crlf(b) else { return false };
    let Some((&t, rest)) = b[..eol].split_first() else {
        return false;
    };
    match dir {
        Dir::Request => {
            t == b'*' && number(rest).is_some_and(|n| n > 0) && b.get(eol + 2) == Some(&b'$')
        }
        Dir::Response => match t {
            b'*' | b'%' | b'~' | b'$' | b'=' | b'!' | b':' => number(rest).is_some(),
            b'+' | b'-' => rest.iter().all(|c| c.is_ascii_graphic() || *c == b' '),
            _ => false,
        },
    }
}
