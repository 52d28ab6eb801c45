//! HTTP/1.0 and 1.1: keep-alive and pipelining; bodies by length, chunked or to the close.
//!
//! Tags: `method` (a fixed list, `OTHER` otherwise), `route` (from the configured patterns) and
//! `status` (`2xx` …). Informational responses (1xx) do not answer a request, except `101`,
//! after which the connection speaks another protocol and is no longer parsed.

use std::sync::Arc;

use super::{crlf, line_starts};
use crate::pair::Fifo;
use crate::route::Routes;
use crate::stream::{Dir, Proto, Span, Step, BUF_MAX};
use crate::Sink;

const METHODS: &[&str] = &[
    "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE",
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    ChunkSize,
    Trailers,
}

struct Req {
    method: &'static str,
    route: Arc<str>,
}

pub struct Http {
    routes: Arc<Routes>,
    pending: Fifo<Req>,
    state: [State; 2],
    /// The request being read (method, route) and the response's status.
    req: Option<Req>,
    status: u16,
    upgraded: bool,
}

impl Http {
    pub fn new(routes: Arc<Routes>) -> Http {
        Http {
            routes,
            pending: Fifo::default(),
            state: [State::Head; 2],
            req: None,
            status: 0,
            upgraded: false,
        }
    }

    fn head(&mut self, dir: Dir, buf: &[u8]) -> Step {
        let Some(end) = head_end(buf) else {
            return if plausible_start(dir, buf) {
                Step::Need
            } else {
                Step::Bad
            };
        };
        let head = &buf[..end + 2];
        let mut lines = head.split(|&b| b == b'\n');
        let first = lines.next().unwrap_or_default();
        let ok = match dir {
            Dir::Request => self.request_line(first),
            Dir::Response => self.status_line(first),
        };
        if !ok {
            return Step::Bad;
        }
        let (mut length, mut chunked) = (None, false);
        for line in lines {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
            if name.eq_ignore_ascii_case(b"content-length") {
                length = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok());
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                chunked =
                    value.len() >= 7 && value[value.len() - 7..].eq_ignore_ascii_case(b"chunked");
            }
        }
        let take = end + 4;
        if dir == Dir::Response && self.bodiless() {
            return Step::Eat {
                take,
                skip: 0,
                end: true,
            };
        }
        if chunked {
            self.state[dir as usize] = State::ChunkSize;
            return Step::Eat {
                take,
                skip: 0,
                end: false,
            };
        }
        match (length, dir) {
            (Some(n), _) => Step::Eat {
                take,
                skip: n,
                end: true,
            },
            (None, Dir::Request) => Step::Eat {
                take,
                skip: 0,
                end: true,
            },
            (None, Dir::Response) => Step::Eat {
                take,
                skip: u64::MAX,
                end: true,
            },
        }
    }

    fn request_line(&mut self, line: &[u8]) -> bool {
        let mut parts = line.split(|&b| b == b' ');
        let (Some(method), Some(target), Some(version)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if !version.starts_with(b"HTTP/1.") {
            return false;
        }
        let method = METHODS
            .iter()
            .find(|m| m.as_bytes() == method)
            .copied()
            .unwrap_or("OTHER");
        self.req = Some(Req {
            method,
            route: self.routes.route(target),
        });
        true
    }

    fn status_line(&mut self, line: &[u8]) -> bool {
        let code = line
            .get(9..12)
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.parse().ok());
        match (line.starts_with(b"HTTP/1."), code) {
            (true, Some(c)) => {
                self.status = c;
                true
            }
            _ => false,
        }
    }

    /// Whether the response being read has no body: to HEAD, 1xx, 204, 304.
    fn bodiless(&self) -> bool {
        let head = self.pending.front().is_some_and(|r| r.method == "HEAD");
        head || self.status < 200 || self.status == 204 || self.status == 304
    }

    fn chunk_size(&mut self, dir: Dir, buf: &[u8]) -> Step {
        let Some(eol) = crlf(buf) else {
            return if buf.len() > 1024 {
                Step::Bad
            } else {
                Step::Need
            };
        };
        let digits = buf[..eol].split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(trim(digits))
            .ok()
            .and_then(|d| u64::from_str_radix(d, 16).ok());
        match size {
            None => Step::Bad,
            Some(0) => {
                self.state[dir as usize] = State::Trailers;
                Step::Eat {
                    take: eol + 2,
                    skip: 0,
                    end: false,
                }
            }
            Some(n) => Step::Eat {
                take: eol + 2,
                skip: n.saturating_add(2),
                end: false,
            },
        }
    }

    fn trailers(&mut self, dir: Dir, buf: &[u8]) -> Step {
        match crlf(buf) {
            Some(0) => {
                self.state[dir as usize] = State::Head;
                Step::Eat {
                    take: 2,
                    skip: 0,
                    end: true,
                }
            }
            Some(eol) => Step::Eat {
                take: eol + 2,
                skip: 0,
                end: false,
            },
            None if buf.len() > BUF_MAX / 2 => Step::Bad,
            None => Step::Need,
        }
    }
}

/// Where the blank line ending a head starts (`\r\n\r\n`), looking only at line ends.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
        let at = from + i;
        if at >= 3 && &buf[at - 3..=at] == b"\r\n\r\n" {
            return Some(at - 3);
        }
        from = at + 1;
    }
    None
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &v[start..end.max(start)]
}

/// Whether `buf` could be the start of a request line or status line (checked on what is there).
fn plausible_start(dir: Dir, buf: &[u8]) -> bool {
    match dir {
        Dir::Request => buf
            .iter()
            .take(16)
            .take_while(|&&b| b != b' ')
            .all(|b| b.is_ascii_uppercase()),
        Dir::Response => {
            let n = buf.len().min(7);
            buf[..n] == b"HTTP/1."[..n]
        }
    }
}

fn starts_message(dir: Dir, at: &[u8]) -> bool {
    match dir {
        Dir::Request => METHODS
            .iter()
            .any(|m| at.len() > m.len() && at.starts_with(m.as_bytes()) && at[m.len()] == b' '),
        Dir::Response => at.starts_with(b"HTTP/1."),
    }
}

impl Proto for Http {
    fn parse(&mut self, dir: Dir, buf: &[u8]) -> Step {
        match self.state[dir as usize] {
            State::Head => self.head(dir, buf),
            State::ChunkSize => self.chunk_size(dir, buf),
            State::Trailers => self.trailers(dir, buf),
        }
    }

    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn Sink) {
        self.state[dir as usize] = State::Head;
        match dir {
            Dir::Request => {
                if let Some(req) = self.req.take() {
                    if !self.pending.push(span, req) {
                        out.unpaired(1);
                    }
                }
            }
            Dir::Response => self.response(span, out),
        }
    }

    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize> {
        self.state[dir as usize] = State::Head;
        line_starts(buf).find(|&i| starts_message(dir, &buf[i..]))
    }

    fn gap(&mut self, dir: Dir, out: &mut dyn Sink) {
        if dir == Dir::Response {
            out.unpaired(self.pending.clear() as u64);
        }
    }

    fn opaque(&self) -> bool {
        self.upgraded
    }
}

impl Http {
    fn response(&mut self, span: Span, out: &mut dyn Sink) {
        let status = self.status;
        if (100..200).contains(&status) && status != 101 {
            return;
        }
        let Some((req_span, req)) = self.pending.answer(span.first_ns) else {
            out.orphan();
            return;
        };
        if status == 101 {
            self.upgraded = true;
        }
        let class = match status / 100 {
            1 => "1xx",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            5 => "5xx",
            _ => "other",
        };
        let tags = [
            ("method", req.method),
            ("route", &*req.route),
            ("status", class),
        ];
        out.pair(&req_span, &span, &tags, None);
    }
}
