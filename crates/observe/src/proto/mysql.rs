//! MySQL and MariaDB (client/server protocol 10): commands (`COM_QUERY`, prepared statements
//! with `COM_STMT_PREPARE` / `COM_STMT_EXECUTE` / `COM_STMT_FETCH`, `COM_PING` …) paired in order
//! with their responses (OK, ERR, result sets in text or binary rows, with or without the EOF
//! packets that `CLIENT_DEPRECATE_EOF` removes, and multi-result responses). Commands that get no
//! response (`COM_STMT_CLOSE`, `COM_STMT_SEND_LONG_DATA`, `COM_QUIT`) are not waited for.
//!
//! Tags: `kind` (the statement's first keyword for queries and prepares, the prepared
//! statement's kind for executes, else the command's name), `status` (`ok` / `error`). Rows:
//! rows of a result set, or the affected rows of an OK.

use std::collections::HashMap;

use crate::pair::Fifo;
use crate::stream::{Dir, Proto, Span, Step};
use crate::Sink;

/// Most prepared statements remembered per connection.
pub const STATEMENTS_MAX: usize = 1024;
const PEEK: usize = 256;
const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;
const MORE_RESULTS: u16 = 0x0008;
const CLIENT_SSL: u32 = 0x0800;

const COM_QUIT: u8 = 0x01;
const COM_QUERY: u8 = 0x03;
const COM_STMT_PREPARE: u8 = 0x16;
const COM_STMT_EXECUTE: u8 = 0x17;
const COM_STMT_SEND_LONG_DATA: u8 = 0x18;
const COM_STMT_CLOSE: u8 = 0x19;
const COM_STMT_FETCH: u8 = 0x1c;

#[derive(Clone, Copy)]
struct Req {
    cmd: u8,
    kind: &'static str,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The first packet of a response (or of the next result of a multi-result one).
    First,
    Columns(u64),
    /// Just after the column definitions: an EOF packet here is the old protocol's separator.
    AfterColumns,
    Rows,
    /// Parameter and column definitions of a prepare's answer, and its EOF packets if any.
    Defs(u64),
}

pub struct Mysql {
    pending: Fifo<Req>,
    statements: HashMap<u32, &'static str>,
    server_caps: Option<u32>,
    client_caps: Option<u32>,
    phase: Phase,
    response: Option<(Span, bool, u64)>,
    /// The packet just framed: sequence id and its first bytes (up to `PEEK`), and its length.
    seq: u8,
    head: Vec<u8>,
    len: u32,
    tls: bool,
}

impl Default for Mysql {
    fn default() -> Self {
        Mysql {
            pending: Fifo::default(),
            statements: HashMap::new(),
            server_caps: None,
            client_caps: None,
            phase: Phase::First,
            response: None,
            seq: 0,
            head: Vec::with_capacity(PEEK),
            len: 0,
            tls: false,
        }
    }
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// A length-encoded integer at `at`: its value and its size.
fn lenenc(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *b.get(at)?;
    let wide = |n: usize| -> Option<(u64, usize)> {
        let mut v = 0u64;
        for i in 0..n {
            v |= u64::from(*b.get(at + 1 + i)?) << (8 * i);
        }
        Some((v, n + 1))
    };
    match first {
        0..=0xfa => Some((u64::from(first), 1)),
        0xfc => wide(2),
        0xfd => wide(3),
        0xfe => wide(8),
        _ => None,
    }
}

fn command_name(cmd: u8) -> &'static str {
    match cmd {
        0x02 => "INIT_DB",
        0x04 => "FIELD_LIST",
        0x08 => "SHUTDOWN",
        0x09 => "STATISTICS",
        0x0d => "DEBUG",
        0x0e => "PING",
        0x11 => "CHANGE_USER",
        0x1a => "STMT_RESET",
        0x1b => "SET_OPTION",
        0x1c => "STMT_FETCH",
        0x1f => "RESET_CONNECTION",
        _ => "OTHER",
    }
}

impl Mysql {
    fn deprecate_eof(&self) -> Option<bool> {
        match (self.server_caps, self.client_caps) {
            (Some(s), Some(c)) => Some(s & c & CLIENT_DEPRECATE_EOF != 0),
            _ => None,
        }
    }

    /// The command a client packet starts (sequence 0), if it is one.
    fn command(&mut self, p: &[u8]) -> Option<Req> {
        let &cmd = p.first()?;
        let kind = match cmd {
            COM_QUERY | COM_STMT_PREPARE => super::sql_kind(&p[1..]),
            COM_STMT_EXECUTE | COM_STMT_FETCH => le32(p, 1)
                .and_then(|id| self.statements.get(&id).copied())
                .unwrap_or("OTHER"),
            COM_STMT_CLOSE => {
                if let Some(id) = le32(p, 1) {
                    self.statements.remove(&id);
                }
                return None;
            }
            COM_QUIT | COM_STMT_SEND_LONG_DATA => return None,
            0x00 | 0x20..=0xff => return None,
            c => command_name(c),
        };
        Some(Req { cmd, kind })
    }

    /// The server's greeting (protocol 10): its capability flags.
    fn greeting(&mut self, p: &[u8]) {
        if p.first() != Some(&10) {
            return;
        }
        let Some(nul) = p.iter().skip(1).position(|&b| b == 0) else {
            return;
        };
        let at = 1 + nul + 1 + 4 + 8 + 1;
        let low = le16(p, at).map(u32::from);
        let high = le16(p, at + 5).map(u32::from);
        if let (Some(l), Some(h)) = (low, high) {
            self.server_caps = Some(l | h << 16);
        }
    }
}

impl Proto for Mysql {
    fn parse(&mut self, _dir: Dir, buf: &[u8]) -> Step {
        let Some(h) = buf.get(..4) else {
            return Step::Need;
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]);
        let peek = 4 + (len as usize).min(PEEK);
        let Some(p) = buf.get(4..peek) else {
            return Step::Need;
        };
        self.seq = h[3];
        self.len = len;
        self.head.clear();
        self.head.extend_from_slice(p);
        Step::Eat {
            take: peek,
            skip: u64::from(len) - (peek as u64 - 4),
            end: true,
        }
    }

    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn Sink) {
        let head = std::mem::take(&mut self.head);
        match dir {
            Dir::Request => self.client_packet(&head, span, out),
            Dir::Response => self.server_packet(&head, span, out),
        }
        self.head = head;
    }

    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize> {
        self.phase = Phase::First;
        self.response = None;
        (0..buf.len()).find(|&i| plausible(dir, &buf[i..]))
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

impl Mysql {
    fn client_packet(&mut self, p: &[u8], span: Span, out: &mut dyn Sink) {
        if self.seq == 1 && self.client_caps.is_none() && self.pending.is_empty() {
            self.client_caps = le32(p, 0);
            self.tls = self.client_caps.is_some_and(|c| c & CLIENT_SSL != 0);
            return;
        }
        if self.seq != 0 {
            return;
        }
        if let Some(req) = self.command(p) {
            if !self.pending.push(span, req) {
                out.unpaired(1);
            }
        }
    }

    fn server_packet(&mut self, p: &[u8], span: Span, out: &mut dyn Sink) {
        let Some(&req) = self.pending.front() else {
            if self.seq == 0 {
                self.greeting(p);
            }
            return;
        };
        let r = self.response.get_or_insert((Span::default(), false, 0));
        r.0.join(&span);
        let done = self.advance(req, p);
        if done {
            self.phase = Phase::First;
            if let Some((span, error, rows)) = self.response.take() {
                let Some((req_span, req)) = self.pending.answer(span.first_ns) else {
                    out.orphan();
                    return;
                };
                let status = if error { "error" } else { "ok" };
                out.pair(
                    &req_span,
                    &span,
                    &[("kind", req.kind), ("status", status)],
                    Some(rows),
                );
            }
        }
    }

    /// Moves the response state machine over one packet; `true` when the response is complete.
    fn advance(&mut self, req: Req, p: &[u8]) -> bool {
        let first = p.first().copied().unwrap_or(0);
        let terminator = first == 0xfe && self.len < 0xff_ffff;
        match self.phase {
            Phase::First => self.first_packet(req, p),
            Phase::Columns(n) => {
                self.phase = if n <= 1 {
                    Phase::AfterColumns
                } else {
                    Phase::Columns(n - 1)
                };
                false
            }
            Phase::AfterColumns
                if first == 0xfe && self.len < 9 && self.deprecate_eof() != Some(true) =>
            {
                self.phase = Phase::Rows;
                false
            }
            Phase::AfterColumns | Phase::Rows if first == 0xff => self.set_error(),
            Phase::AfterColumns | Phase::Rows if terminator => {
                let status = if self.len < 9 {
                    le16(p, 3)
                } else {
                    ok_status(p)
                };
                self.more_or_done(status)
            }
            Phase::AfterColumns | Phase::Rows => {
                self.phase = Phase::Rows;
                if let Some(r) = self.response.as_mut() {
                    r.2 += 1;
                }
                false
            }
            Phase::Defs(n) => {
                self.phase = Phase::Defs(n.saturating_sub(1));
                n <= 1
            }
        }
    }

    fn first_packet(&mut self, req: Req, p: &[u8]) -> bool {
        match p.first().copied().unwrap_or(0) {
            0xff => self.set_error(),
            0x00 if req.cmd == COM_STMT_PREPARE => self.prepared(req, p),
            0x00 => {
                if let (Some(r), Some((rows, _))) = (self.response.as_mut(), lenenc(p, 1)) {
                    r.2 += rows;
                }
                self.more_or_done(ok_status(p))
            }
            _ if req.cmd == COM_STMT_FETCH => {
                self.phase = Phase::Rows;
                self.advance(req, p)
            }
            _ if req.cmd == COM_QUERY || req.cmd == COM_STMT_EXECUTE => match lenenc(p, 0) {
                Some((n, _)) if n > 0 => {
                    self.phase = Phase::Columns(n);
                    false
                }
                _ => true,
            },
            _ => true,
        }
    }

    fn prepared(&mut self, req: Req, p: &[u8]) -> bool {
        let (Some(id), Some(cols), Some(params)) = (le32(p, 1), le16(p, 5), le16(p, 7)) else {
            return true;
        };
        if self.statements.len() < STATEMENTS_MAX {
            self.statements.insert(id, req.kind);
        }
        let eofs = if self.deprecate_eof() == Some(true) {
            0
        } else {
            u64::from(params > 0) + u64::from(cols > 0)
        };
        let defs = u64::from(cols) + u64::from(params) + eofs;
        if defs == 0 {
            return true;
        }
        // With the EOF mode unknown (the handshake was not seen) the old protocol is assumed.
        self.phase = Phase::Defs(defs);
        false
    }

    fn set_error(&mut self) -> bool {
        if let Some(r) = self.response.as_mut() {
            r.1 = true;
        }
        true
    }

    fn more_or_done(&mut self, status: Option<u16>) -> bool {
        if status.is_some_and(|s| s & MORE_RESULTS != 0) {
            self.phase = Phase::First;
            return false;
        }
        true
    }
}

/// The status flags of an OK packet (after its two length-encoded integers).
fn ok_status(p: &[u8]) -> Option<u16> {
    let (_, a) = lenenc(p, 1)?;
    let (_, b) = lenenc(p, 1 + a)?;
    le16(p, 1 + a + b)
}

/// A packet header that plausibly starts a command (client) or a response (server).
fn plausible(dir: Dir, b: &[u8]) -> bool {
    let (Some(h), Some(&first)) = (b.get(..4), b.get(4)) else {
        return false;
    };
    let len = u32::from_le_bytes([h[0], h[1], h[2], 0]);
    if !(1..=1 << 20).contains(&len) {
        return false;
    }
    match dir {
        Dir::Request => {
            let text = b
                .get(5)
                .is_none_or(|c| c.is_ascii_graphic() || c.is_ascii_whitespace());
            h[3] == 0
                && matches!(
                    first,
                    COM_QUERY | COM_STMT_PREPARE | COM_STMT_EXECUTE | 0x0e | 0x02
                )
                && text
        }
        Dir::Response => h[3] == 1 && (first == 0x00 || first == 0xff || (1..=64).contains(&first)),
    }
}
