//! PostgreSQL (protocol 3.0): the simple query protocol (`Query`) and the extended one (`Parse`,
//! `Bind`, `Describe`, `Execute` … up to `Sync`); each request ends with the server's
//! `ReadyForQuery`. Errors are paired and recorded with `status:error`, never dropped.
//!
//! Tags: `kind` (the statement's first keyword, from `Parse` or `Query`; a `Bind` of a named
//! statement uses the kind its `Parse` had), `status` (`ok` / `error`). Rows: the count in the
//! last `CommandComplete` tag (`SELECT 5`, `UPDATE 3`). A connection that asks for TLS and gets
//! it (`SSLRequest` → `S`) is reported as TLS and not parsed.

use std::collections::HashMap;

use super::{be32, sql_kind, PEEK};
use crate::pair::Fifo;
use crate::stream::{Dir, Proto, Span, Step};
use crate::Sink;

/// Most named prepared statements remembered per connection.
pub const STATEMENTS_MAX: usize = 1024;
/// Longest message accepted: larger lengths are taken as a misread.
const MESSAGE_MAX: u32 = 1 << 30;
const SSL_REQUEST: u32 = 80_877_103;
const GSS_REQUEST: u32 = 80_877_104;

struct Req {
    kind: &'static str,
}

#[derive(Default)]
struct Response {
    span: Span,
    error: bool,
    rows: Option<u64>,
}

pub struct Postgres {
    /// The next client message is untyped (startup, SSL request): the connection was seen open.
    startup: bool,
    /// The server's next byte answers an SSL or GSS request.
    tls_answer: bool,
    tls: bool,
    pending: Fifo<Req>,
    /// An extended-protocol request being gathered until `Sync`.
    open: Option<(Span, &'static str)>,
    response: Option<Response>,
    /// Named statements → their kind (the unnamed one under "").
    statements: HashMap<Vec<u8>, &'static str>,
    /// The message just framed: its type and what was read of it.
    msg: (u8, &'static str, Option<u64>, bool),
}

impl Postgres {
    pub fn new(seen_open: bool) -> Postgres {
        Postgres {
            startup: seen_open,
            tls_answer: false,
            tls: false,
            pending: Fifo::default(),
            open: None,
            response: None,
            statements: HashMap::new(),
            msg: (0, "", None, false),
        }
    }

    fn untyped(&mut self, buf: &[u8]) -> Step {
        let (Some(len), Some(code)) = (be32(buf, 0), be32(buf, 4)) else {
            return Step::Need;
        };
        if !(8..=10_000).contains(&len) {
            return Step::Bad;
        }
        self.tls_answer = code == SSL_REQUEST || code == GSS_REQUEST;
        self.startup = self.tls_answer;
        self.msg = (0, "", None, false);
        Step::Eat {
            take: 8,
            skip: u64::from(len) - 8,
            end: true,
        }
    }

    fn typed(&mut self, dir: Dir, buf: &[u8]) -> Step {
        let (Some(&t), Some(len)) = (buf.first(), be32(buf, 1)) else {
            return Step::Need;
        };
        if !(4..=MESSAGE_MAX).contains(&len) || !known(dir, t) {
            return Step::Bad;
        }
        let total = u64::from(len) + 1;
        let peek = (total as usize).min(5 + PEEK);
        let Some(body) = buf.get(5..peek) else {
            return Step::Need;
        };
        self.msg = (t, "", None, false);
        self.read(dir, t, body);
        Step::Eat {
            take: peek,
            skip: total - peek as u64,
            end: true,
        }
    }

    /// Reads what a message's start says (a statement's kind, an error, a row count).
    fn read(&mut self, dir: Dir, t: u8, body: &[u8]) {
        match (dir, t) {
            (Dir::Request, b'Q') => self.msg.1 = sql_kind(body),
            (Dir::Request, b'P') => {
                let name = cstr(body);
                let kind = sql_kind(body.get(name.len() + 1..).unwrap_or_default());
                self.msg.1 = kind;
                if self.statements.len() < STATEMENTS_MAX || self.statements.contains_key(name) {
                    self.statements.insert(name.to_vec(), kind);
                }
            }
            (Dir::Request, b'B') => {
                let portal = cstr(body);
                let stmt = cstr(body.get(portal.len() + 1..).unwrap_or_default());
                self.msg.1 = self.statements.get(stmt).copied().unwrap_or("OTHER");
            }
            (Dir::Response, b'C') => {
                let tag = cstr(body);
                let last = tag.rsplit(|&b| b == b' ').next().unwrap_or_default();
                self.msg.2 = std::str::from_utf8(last).ok().and_then(|n| n.parse().ok());
            }
            _ => {}
        }
    }
}

fn cstr(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

/// Message types each side sends (protocol 3.0).
fn known(dir: Dir, t: u8) -> bool {
    match dir {
        Dir::Request => b"QPBEDCHSFXpdcf".contains(&t),
        Dir::Response => b"RSKZTDCEIN1233ntsAGHWdcfVv".contains(&t),
    }
}

impl Proto for Postgres {
    fn parse(&mut self, dir: Dir, buf: &[u8]) -> Step {
        match dir {
            Dir::Request if self.startup => self.untyped(buf),
            Dir::Response if self.tls_answer => {
                let Some(&b) = buf.first() else {
                    return Step::Need;
                };
                self.tls_answer = false;
                self.tls = b == b'S' || b == b'G';
                self.startup = !self.tls;
                self.msg = (0, "", None, false);
                Step::Eat {
                    take: 1,
                    skip: 0,
                    end: true,
                }
            }
            _ => self.typed(dir, buf),
        }
    }

    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn Sink) {
        let (t, kind, rows, _) = self.msg;
        match dir {
            Dir::Request => self.request(t, kind, span, out),
            Dir::Response => self.response_message(t, rows, span, out),
        }
    }

    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize> {
        self.startup = false;
        self.tls_answer = false;
        match dir {
            Dir::Request => {
                self.open = None;
                (0..buf.len()).find(|&i| plausible_request(&buf[i..]))
            }
            Dir::Response => {
                self.response = None;
                (0..buf.len()).find(|&i| server_chain(&buf[i..]))
            }
        }
    }

    fn gap(&mut self, dir: Dir, out: &mut dyn Sink) {
        if dir == Dir::Response {
            out.unpaired(self.pending.clear() as u64);
        }
    }

    fn opaque(&self) -> bool {
        self.tls
    }

    fn tls(&self) -> bool {
        self.tls
    }
}

impl Postgres {
    fn request(&mut self, t: u8, kind: &'static str, span: Span, out: &mut dyn Sink) {
        let done = match t {
            b'Q' => Some((span, kind)),
            b'F' => Some((span, "FUNCTION")),
            b'P' | b'B' | b'E' | b'D' | b'C' | b'H' => {
                let open = self.open.get_or_insert((Span::default(), ""));
                open.0.join(&span);
                if open.1.is_empty() || t == b'B' {
                    open.1 = kind;
                }
                None
            }
            b'S' => {
                let (mut s, k) = self.open.take().unwrap_or((Span::default(), "SYNC"));
                s.join(&span);
                Some((s, if k.is_empty() { "OTHER" } else { k }))
            }
            _ => None,
        };
        if let Some((s, kind)) = done {
            if !self.pending.push(s, Req { kind }) {
                out.unpaired(1);
            }
        }
    }

    fn response_message(&mut self, t: u8, rows: Option<u64>, span: Span, out: &mut dyn Sink) {
        // Asynchronous messages (notices, parameter changes, notifications) start no response.
        if self.response.is_none() && matches!(t, b'N' | b'S' | b'A' | 0) {
            return;
        }
        let r = self.response.get_or_insert_with(Response::default);
        r.span.join(&span);
        match t {
            b'E' => r.error = true,
            b'C' => r.rows = rows.or(r.rows),
            b'Z' => {
                let Some(r) = self.response.take() else {
                    return;
                };
                self.answer(r, out);
            }
            _ => {}
        }
    }

    fn answer(&mut self, r: Response, out: &mut dyn Sink) {
        let Some((req_span, req)) = self.pending.answer(r.span.first_ns) else {
            // The start-up exchange ends with ReadyForQuery too; it answers no request.
            return;
        };
        let status = if r.error { "error" } else { "ok" };
        out.pair(
            &req_span,
            &r.span,
            &[("kind", req.kind), ("status", status)],
            r.rows,
        );
    }
}

/// Server messages follow each other validly from the start of `b` up to a `ReadyForQuery` or
/// to the end of what is buffered (at least one whole message).
fn server_chain(b: &[u8]) -> bool {
    let mut at = 0;
    let mut whole = 0;
    while let (Some(&t), Some(len)) = (b.get(at), be32(b, at + 1)) {
        if !known(Dir::Response, t) || !(4..=1 << 24).contains(&len) {
            return false;
        }
        at += len as usize + 1;
        if at > b.len() {
            return whole > 0;
        }
        whole += 1;
        if t == b'Z' {
            return len == 5;
        }
    }
    whole > 0 && at == b.len()
}

/// A `Query` or `Parse` header with a sane length and text after it.
fn plausible_request(b: &[u8]) -> bool {
    let (Some(&t), Some(len)) = (b.first(), be32(b, 1)) else {
        return false;
    };
    let text_ok = b
        .get(5)
        .is_some_and(|&c| c.is_ascii_graphic() || c.is_ascii_whitespace() || c == 0);
    matches!(t, b'Q' | b'P') && (5..=1 << 20).contains(&len) && text_ok
}
