//! Message framing for one direction: bytes in, whole messages (with their capture times) out.
//!
//! A protocol parser looks at the buffered bytes and says how much of them belongs to the
//! current message ([`Step::Eat`]): bytes to take (read, in the buffer), bytes to skip (a body it
//! needs no more of, which may run past the buffer and is then counted down as data arrives
//! without being kept), and whether the message ends there. The engine keeps each buffered
//! byte's capture time, so a message's first and last byte times are the packets', never the
//! parser's clock. A parser that cannot frame (a protocol violation, a header over the buffer
//! bound) says [`Step::Bad`]; so does a gap. The engine then asks the parser to find the next
//! plausible message start ([`Proto::resync`]), dropping the bytes before it.

use std::collections::VecDeque;

/// Most bytes buffered per direction: the largest header a parser may need to see whole.
pub const BUF_MAX: usize = 64 * 1024;
/// Most capture-time marks kept per direction (one per buffered packet).
pub const MARKS_MAX: usize = 4096;
/// Most bytes kept while no message start has been found.
const RESYNC_KEEP: usize = 256;

/// Client to server, or server to client.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dir {
    Request,
    Response,
}

/// What a parser makes of the buffered bytes.
pub enum Step {
    /// Not enough bytes yet to decide.
    Need,
    /// Not this protocol here: resynchronise.
    Bad,
    /// `take` buffered bytes belong to the message, then `skip` more (buffered or not); the
    /// message ends after them when `end`.
    Eat { take: usize, skip: u64, end: bool },
}

/// One message's place on the wire.
#[derive(Clone, Copy, Default, Debug)]
pub struct Span {
    /// Capture time of the packet carrying its first byte (ns since the epoch).
    pub first_ns: u64,
    /// Capture time of the packet carrying its last byte.
    pub last_ns: u64,
    pub bytes: u64,
    /// The first `OBSID<digits>` seen in its bytes (tests only: checks pairing).
    pub probe: Option<u64>,
}

impl Span {
    /// Joins a later message into this one (a request or response made of several messages).
    pub fn join(&mut self, later: &Span) {
        if self.bytes == 0 {
            *self = *later;
            return;
        }
        self.last_ns = later.last_ns;
        self.bytes += later.bytes;
        self.probe = self.probe.or(later.probe);
    }
}

/// A protocol: one parser for both directions and the pairing of their messages.
pub trait Proto {
    fn parse(&mut self, dir: Dir, buf: &[u8]) -> Step;
    /// A message ended.
    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn crate::Sink);
    /// Where the next message plausibly starts in `buf` (and forget any half-parsed one).
    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize>;
    /// Bytes were lost in `dir`: requests in flight cannot be paired any more.
    fn gap(&mut self, dir: Dir, out: &mut dyn crate::Sink);
    /// Stop parsing this connection (TLS, an upgraded protocol) from now on.
    fn opaque(&self) -> bool {
        false
    }
    /// The connection turned out to be TLS (reported as such, not parsed).
    fn tls(&self) -> bool {
        false
    }
}

#[derive(Default)]
pub struct Stream {
    buf: Vec<u8>,
    pos: usize,
    /// Stream offset just past the buffer's last byte.
    end_offset: u64,
    /// (stream offset just past a packet's bytes, its capture time), oldest first.
    marks: VecDeque<(u64, u64)>,
    skip: u64,
    end_after_skip: bool,
    msg: Option<Span>,
    resyncing: bool,
    pub probe: bool,
    pub bad: u64,
}

impl Stream {
    pub fn new(resyncing: bool, probe: bool) -> Stream {
        Stream {
            resyncing,
            probe,
            ..Stream::default()
        }
    }

    /// Bytes held (for the memory bound's accounting).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// In-order bytes captured at `ts`.
    pub fn data(
        &mut self,
        dir: Dir,
        mut data: &[u8],
        ts: u64,
        p: &mut dyn Proto,
        out: &mut dyn crate::Sink,
    ) {
        while !data.is_empty() {
            if p.opaque() {
                return;
            }
            if self.skip > 0 {
                let n = self.skip.min(data.len() as u64) as usize;
                self.skipped(&data[..n], ts);
                data = &data[n..];
                if self.skip == 0 && self.end_after_skip {
                    self.finish(dir, p, out);
                }
                self.run(dir, p, out);
                continue;
            }
            if self.pos == self.buf.len() && !self.resyncing {
                // Nothing buffered: parse the packet in place and keep only what is left over.
                let (used, bad) = self.direct(dir, data, ts, p, out);
                data = &data[used..];
                if bad {
                    self.append(data, ts);
                    data = &[];
                    self.bad();
                    self.run(dir, p, out);
                }
                if data.is_empty() || self.skip > 0 {
                    continue;
                }
            }
            let room = BUF_MAX.saturating_sub(self.buf.len() - self.pos).max(1);
            let n = room.min(data.len());
            self.append(&data[..n], ts);
            data = &data[n..];
            self.run(dir, p, out);
        }
    }

    /// Frames messages straight from one packet's bytes (all captured at `ts`): how many bytes
    /// were used, and whether the parser said `Bad` at that point.
    fn direct(
        &mut self,
        dir: Dir,
        data: &[u8],
        ts: u64,
        p: &mut dyn Proto,
        out: &mut dyn crate::Sink,
    ) -> (usize, bool) {
        let mut at = 0;
        while at < data.len() && !p.opaque() {
            let rest = &data[at..];
            let (take, skip, end) = match p.parse(dir, rest) {
                Step::Eat { take, skip, end } => (take, skip, end),
                Step::Need => return (at, false),
                Step::Bad => return (at, true),
            };
            if (take == 0 && skip == 0 && (!end || self.msg.is_none())) || take > rest.len() {
                return (at, true);
            }
            let now = (take as u64).saturating_add(skip).min(rest.len() as u64) as usize;
            let m = self.msg.get_or_insert(Span {
                first_ns: ts,
                last_ns: ts,
                bytes: 0,
                probe: None,
            });
            m.bytes += now as u64;
            m.last_ns = ts;
            if self.probe && m.probe.is_none() {
                m.probe = find_probe(&rest[..now]);
            }
            at += now;
            self.end_offset += now as u64;
            self.skip = (take as u64).saturating_add(skip) - now as u64;
            self.end_after_skip = end;
            if self.skip > 0 {
                return (data.len(), false);
            }
            if end {
                self.finish(dir, p, out);
            }
        }
        (at, false)
    }

    fn skipped(&mut self, bytes: &[u8], ts: u64) {
        self.skip -= bytes.len() as u64;
        self.end_offset += bytes.len() as u64;
        if let Some(m) = self.msg.as_mut() {
            m.bytes += bytes.len() as u64;
            m.last_ns = ts;
            if self.probe && m.probe.is_none() {
                m.probe = find_probe(bytes);
            }
        }
    }

    fn append(&mut self, bytes: &[u8], ts: u64) {
        if self.pos > 0 && (self.pos == self.buf.len() || self.pos >= BUF_MAX / 2) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
        self.end_offset += bytes.len() as u64;
        let full = self.marks.len() >= MARKS_MAX;
        match self.marks.back_mut() {
            // Past the bound the newest mark grows: its bytes keep the earlier time.
            Some(last) if last.1 == ts || full => last.0 = self.end_offset,
            _ => self.marks.push_back((self.end_offset, ts)),
        }
    }

    /// Capture time of the byte at stream offset `off` (of the buffered ones).
    fn ts_at(&mut self, off: u64) -> u64 {
        while self.marks.len() > 1 && self.marks.front().is_some_and(|m| m.0 <= off) {
            self.marks.pop_front();
        }
        self.marks.front().map_or(0, |m| m.1)
    }

    fn offset_of(&self, pos: usize) -> u64 {
        self.end_offset - (self.buf.len() - pos) as u64
    }

    fn run(&mut self, dir: Dir, p: &mut dyn Proto, out: &mut dyn crate::Sink) {
        while self.skip == 0 && !p.opaque() {
            if self.resyncing && !self.resync(dir, p, out) {
                return;
            }
            let avail = self.buf.len() - self.pos;
            match p.parse(dir, &self.buf[self.pos..]) {
                Step::Need if avail >= BUF_MAX => self.bad(),
                Step::Need => return,
                Step::Bad => self.bad(),
                Step::Eat { take, skip, end } => {
                    if (take == 0 && skip == 0 && (!end || self.msg.is_none())) || take > avail {
                        self.bad();
                        continue;
                    }
                    self.eat(take, skip, end);
                    if self.skip > 0 {
                        return;
                    }
                    if end {
                        self.finish(dir, p, out);
                    }
                }
            }
        }
    }

    fn eat(&mut self, take: usize, skip: u64, end: bool) {
        let avail = self.buf.len() - self.pos;
        let now = (take as u64).saturating_add(skip).min(avail as u64) as usize;
        if self.msg.is_none() {
            let first = self.ts_at(self.offset_of(self.pos));
            self.msg = Some(Span {
                first_ns: first,
                last_ns: first,
                bytes: 0,
                probe: None,
            });
        }
        let probe = if self.probe {
            find_probe(&self.buf[self.pos..self.pos + now])
        } else {
            None
        };
        self.pos += now;
        let last = if now > 0 {
            Some(self.ts_at(self.offset_of(self.pos) - 1))
        } else {
            None
        };
        if let Some(m) = self.msg.as_mut() {
            m.bytes += now as u64;
            if let Some(t) = last {
                m.last_ns = t;
            }
            m.probe = m.probe.or(probe);
        }
        self.skip = (take as u64).saturating_add(skip) - now as u64;
        self.end_after_skip = end;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    fn finish(&mut self, dir: Dir, p: &mut dyn Proto, out: &mut dyn crate::Sink) {
        self.end_after_skip = false;
        if let Some(span) = self.msg.take() {
            p.end(dir, span, out);
        }
    }

    fn bad(&mut self) {
        self.bad += 1;
        self.msg = None;
        self.skip = 0;
        self.resyncing = true;
        self.pos = (self.pos + 1).min(self.buf.len());
    }

    /// Looks for a message start; `false` when none is buffered yet. Bytes passed over may have
    /// held answers to requests in flight: those requests can no longer be paired in order.
    fn resync(&mut self, dir: Dir, p: &mut dyn Proto, out: &mut dyn crate::Sink) -> bool {
        match p.resync(dir, &self.buf[self.pos..]) {
            Some(at) => {
                if at > 0 {
                    p.gap(dir, out);
                }
                self.pos += at.min(self.buf.len() - self.pos);
                self.resyncing = false;
                true
            }
            None => {
                let keep = (self.buf.len() - self.pos).min(RESYNC_KEEP);
                if self.buf.len() - self.pos > keep {
                    p.gap(dir, out);
                }
                self.pos = self.buf.len() - keep;
                false
            }
        }
    }

    /// Bytes were lost before the next data: drop everything half-read and resynchronise.
    pub fn gap(&mut self, dir: Dir, p: &mut dyn Proto, out: &mut dyn crate::Sink) {
        self.buf.clear();
        self.pos = 0;
        self.marks.clear();
        self.skip = 0;
        self.end_after_skip = false;
        self.msg = None;
        self.resyncing = true;
        p.gap(dir, out);
    }

    /// The direction closed: a message whose end is the close (an HTTP body without a length)
    /// ends now.
    pub fn fin(&mut self, dir: Dir, p: &mut dyn Proto, out: &mut dyn crate::Sink) {
        if self.skip > 0 && self.end_after_skip {
            self.skip = 0;
            self.finish(dir, p, out);
        }
    }
}

/// The number after the first `OBSID` in `bytes`.
pub fn find_probe(bytes: &[u8]) -> Option<u64> {
    let at = bytes.windows(5).position(|w| w == b"OBSID")?;
    let digits = bytes[at + 5..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .take(19);
    let mut v: u64 = 0;
    let mut any = false;
    for d in digits {
        v = v * 10 + u64::from(d - b'0');
        any = true;
    }
    any.then_some(v)
}
