//! Cassandra's native protocol (CQL, versions 3 to 5): every message is an envelope `version,
//! flags, stream, opcode, length, body`, and a response carries its request's stream id, so
//! responses are paired by stream id, not by order. From version 5 on, once `STARTUP` is answered
//! (`READY` or `AUTHENTICATE`), envelopes travel inside checksummed segments (a 3-byte header with
//! the payload length and a self-contained flag, its CRC24, the payload, its CRC32): a
//! self-contained segment holds whole envelopes, others carry one large envelope in parts.
//! Compressed envelopes and segments are timed but their bodies are not read.
//!
//! Tags: `op` (the request's opcode: QUERY, EXECUTE, PREPARE, BATCH, STARTUP, OPTIONS, REGISTER,
//! AUTH_RESPONSE), `kind` (the statement's first keyword for QUERY and PREPARE, and for EXECUTE
//! that of the statement prepared on the same connection; `OTHER` when unknown), `status` (`ok`,
//! `error`). No rows.

use std::collections::HashMap;

use super::{be16, be32, sql_kind, PEEK};
use crate::pair::IN_FLIGHT_MAX;
use crate::stream::{Dir, Proto, Span, Step};
use crate::Sink;

/// The largest envelope accepted (Cassandra's default native_transport_max_frame_size is 16 MiB).
const ENVELOPE_MAX: u32 = 256 << 20;
/// Envelope header bytes.
const HEADER: usize = 9;
/// Segment header bytes (uncompressed: 3 bytes of length and flag, 3 of CRC24).
const SEGMENT_HEADER: usize = 6;
/// A segment's payload is at most 128 KiB − 1.
const SEGMENT_PAYLOAD_MAX: usize = (1 << 17) - 1;
/// Envelopes read from one self-contained segment.
const ENVELOPES_PER_SEGMENT_MAX: usize = 64;
/// Prepared statements remembered per connection (id → kind).
const PREPARED_MAX: usize = 4096;

const OP_ERROR: u8 = 0x00;
const OP_STARTUP: u8 = 0x01;
const OP_READY: u8 = 0x02;
const OP_AUTHENTICATE: u8 = 0x03;
const OP_QUERY: u8 = 0x07;
const OP_RESULT: u8 = 0x08;
const OP_PREPARE: u8 = 0x09;
const OP_EXECUTE: u8 = 0x0a;
const OP_EVENT: u8 = 0x0c;
/// The highest opcode (AUTH_SUCCESS).
const OP_MAX: u8 = 0x10;
/// Flag bit: the body is compressed.
const FLAG_COMPRESSED: u8 = 0x01;
/// `RESULT` kind: a statement was prepared.
const RESULT_PREPARED: u32 = 0x0004;

fn op_name(op: u8) -> &'static str {
    match op {
        0x01 => "STARTUP",
        0x05 => "OPTIONS",
        0x07 => "QUERY",
        0x09 => "PREPARE",
        0x0a => "EXECUTE",
        0x0b => "REGISTER",
        0x0d => "BATCH",
        0x0f => "AUTH_RESPONSE",
        _ => "OTHER",
    }
}

/// One envelope's facts, as its header and the start of its body give them.
#[derive(Clone, Copy)]
struct Envelope {
    stream: i16,
    op: u8,
    kind: Option<&'static str>,
}

struct Req {
    span: Span,
    op: u8,
    kind: Option<&'static str>,
}

#[derive(Default)]
pub struct Cassandra {
    pending: HashMap<i16, Req>,
    /// Per direction: envelopes travel in segments (version 5 after STARTUP is answered).
    framed: [bool; 2],
    /// Per direction: bytes of a large envelope still to come in later segments.
    rest: [u64; 2],
    /// Per direction: the envelopes of the message just framed.
    found: [Vec<Envelope>; 2],
    /// A version 5 STARTUP was sent: its answer turns framing on.
    startup_v5: bool,
    prepared: HashMap<Box<[u8]>, &'static str>,
}

/// Cassandra's CRC24 over the 3 header bytes (little-endian), as the protocol's v5 framing
/// computes it.
fn crc24(bytes: &[u8]) -> u32 {
    let mut crc: u32 = 0x0087_5060;
    for &b in bytes {
        crc ^= u32::from(b) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x0100_0000 != 0 {
                crc ^= 0x0197_4f0b;
            }
        }
    }
    crc & 0x00ff_ffff
}

/// An uncompressed segment header at the start of `b`: (payload length, self-contained).
fn segment_header(b: &[u8]) -> Option<(usize, bool)> {
    let h = b.get(..SEGMENT_HEADER)?;
    let v = u32::from(h[0]) | u32::from(h[1]) << 8 | u32::from(h[2]) << 16;
    let crc = u32::from(h[3]) | u32::from(h[4]) << 8 | u32::from(h[5]) << 16;
    (crc24(&h[..3]) == crc).then_some(((v & 0x1_ffff) as usize, v & (1 << 17) != 0))
}

/// A plausible envelope header at the start of `b`: its total length.
fn envelope_len(dir: Dir, b: &[u8]) -> Option<u64> {
    let (&version, &flags, &op) = (b.first()?, b.get(1)?, b.get(4)?);
    let len = be32(b, 5)?;
    let want = match dir {
        Dir::Request => 3..=5,
        Dir::Response => 0x83..=0x85,
    };
    (want.contains(&version) && flags <= 0x1f && op <= OP_MAX && len <= ENVELOPE_MAX)
        .then_some(HEADER as u64 + u64::from(len))
}

impl Cassandra {
    /// The envelope starting `b` (its body possibly cut short).
    fn envelope(&mut self, dir: Dir, b: &[u8]) -> Envelope {
        let stream = be16(b, 2).unwrap_or(0) as i16;
        let op = b.get(4).copied().unwrap_or(0);
        let compressed = b.get(1).is_some_and(|f| f & FLAG_COMPRESSED != 0);
        let body = b.get(HEADER..).unwrap_or(&[]);
        let kind = match (dir, op) {
            _ if compressed => None,
            (Dir::Request, OP_QUERY | OP_PREPARE) => long_string(body).map(sql_kind),
            (Dir::Request, OP_EXECUTE) => Some(
                short_bytes(body)
                    .and_then(|id| self.prepared.get(id).copied())
                    .unwrap_or("OTHER"),
            ),
            _ => None,
        };
        if dir == Dir::Request && op == OP_STARTUP && b.first() == Some(&5) {
            self.startup_v5 = true;
        }
        Envelope { stream, op, kind }
    }

    /// A request's or response's envelope read outside segments.
    fn plain(&mut self, dir: Dir, buf: &[u8]) -> Step {
        if buf.len() < HEADER {
            return Step::Need;
        }
        let Some(total) = envelope_len(dir, buf) else {
            return Step::Bad;
        };
        let peek = (total as usize).min(HEADER + PEEK);
        let Some(msg) = buf.get(..peek) else {
            return Step::Need;
        };
        let e = self.envelope(dir, msg);
        if dir == Dir::Response && e.op == OP_RESULT {
            self.learn_prepared(e.stream, msg);
        }
        self.found[dir as usize].push(e);
        Step::Eat {
            take: peek,
            skip: total - peek as u64,
            end: true,
        }
    }

    /// One segment: the envelopes it holds whole, or a part of a large one.
    fn segment(&mut self, dir: Dir, buf: &[u8]) -> Step {
        if buf.len() < SEGMENT_HEADER {
            return Step::Need;
        }
        let Some((len, whole)) = segment_header(buf) else {
            return Step::Bad;
        };
        let total = SEGMENT_HEADER + len + 4;
        let d = dir as usize;
        if !whole {
            // A part of one large envelope: its header starts the first part.
            let Some(payload) = buf.get(SEGMENT_HEADER..(SEGMENT_HEADER + len).min(buf.len()))
            else {
                return Step::Need;
            };
            if self.rest[d] == 0 {
                if payload.len() < HEADER.min(len) {
                    return Step::Need;
                }
                let Some(env_total) = envelope_len(dir, payload) else {
                    return Step::Bad;
                };
                let e = self.envelope(dir, &payload[..payload.len().min(HEADER + PEEK)]);
                self.found[d].push(e);
                self.rest[d] = env_total;
            }
            self.rest[d] = self.rest[d].saturating_sub(len as u64);
            let take = buf.len().min(total).min(SEGMENT_HEADER + HEADER + PEEK);
            return Step::Eat {
                take,
                skip: (total - take) as u64,
                end: self.rest[d] == 0,
            };
        }
        // Whole envelopes: read them all (a segment is at most 128 KiB; the buffer holds half
        // that, so a larger one is read up to what fits and the envelopes past it are lost).
        let fits = total.min(crate::stream::BUF_MAX / 2);
        let Some(seg) = buf.get(..fits) else {
            return Step::Need;
        };
        let payload = &seg[SEGMENT_HEADER..(SEGMENT_HEADER + len).min(fits)];
        let mut at = 0;
        while at + HEADER <= payload.len() && self.found[d].len() < ENVELOPES_PER_SEGMENT_MAX {
            let Some(env_total) = envelope_len(dir, &payload[at..]) else {
                return Step::Bad;
            };
            let end = (at as u64 + env_total).min(payload.len() as u64) as usize;
            let e = self.envelope(dir, &payload[at..end]);
            if dir == Dir::Response && e.op == OP_RESULT {
                self.learn_prepared(e.stream, &payload[at..end]);
            }
            self.found[d].push(e);
            at = at.saturating_add(env_total as usize);
        }
        Step::Eat {
            take: fits,
            skip: (total - fits) as u64,
            end: true,
        }
    }

    /// A `RESULT` of kind Prepared answering a PREPARE: remember its id's statement kind.
    fn learn_prepared(&mut self, stream: i16, msg: &[u8]) {
        let Some(req) = self.pending.get(&stream) else {
            return;
        };
        if req.op != OP_PREPARE || msg.get(1).is_some_and(|f| f & FLAG_COMPRESSED != 0) {
            return;
        }
        let body = msg.get(HEADER..).unwrap_or(&[]);
        if be32(body, 0) != Some(RESULT_PREPARED) {
            return;
        }
        let Some(id) = short_bytes(&body[4..]) else {
            return;
        };
        if self.prepared.len() < PREPARED_MAX || self.prepared.contains_key(id) {
            self.prepared
                .insert(Box::from(id), req.kind.unwrap_or("OTHER"));
        }
    }
}

/// A `[long string]`: an int length, then the bytes (what fits).
fn long_string(b: &[u8]) -> Option<&[u8]> {
    let n = be32(b, 0)? as usize;
    let rest = b.get(4..)?;
    Some(&rest[..n.min(rest.len())])
}

/// A `[short bytes]`: a short length, then the bytes (all of them).
fn short_bytes(b: &[u8]) -> Option<&[u8]> {
    let n = usize::from(be16(b, 0)?);
    b.get(2..2 + n)
}

impl Proto for Cassandra {
    fn parse(&mut self, dir: Dir, buf: &[u8]) -> Step {
        if self.framed[dir as usize] {
            return self.segment(dir, buf);
        }
        match self.plain(dir, buf) {
            // Picked up part way through a version 5 connection: segments, if the CRC says so.
            Step::Bad if segment_header(buf).is_some_and(|(len, _)| len <= SEGMENT_PAYLOAD_MAX) => {
                self.framed[dir as usize] = true;
                self.segment(dir, buf)
            }
            step => step,
        }
    }

    fn end(&mut self, dir: Dir, span: Span, out: &mut dyn Sink) {
        let found = std::mem::take(&mut self.found[dir as usize]);
        for e in found {
            match dir {
                Dir::Request => {
                    if self.pending.len() >= IN_FLIGHT_MAX {
                        out.unpaired(1);
                        continue;
                    }
                    let req = Req {
                        span,
                        op: e.op,
                        kind: e.kind,
                    };
                    if self.pending.insert(e.stream, req).is_some() {
                        out.unpaired(1);
                    }
                    if e.op == OP_STARTUP && self.startup_v5 {
                        self.framed[Dir::Request as usize] = true;
                    }
                }
                Dir::Response if e.op == OP_EVENT || e.stream < 0 => {}
                Dir::Response => {
                    let req = match self.pending.remove(&e.stream) {
                        Some(r) if r.span.first_ns <= span.first_ns => r,
                        _ => {
                            out.orphan();
                            continue;
                        }
                    };
                    if req.op == OP_STARTUP
                        && self.startup_v5
                        && matches!(e.op, OP_READY | OP_AUTHENTICATE)
                    {
                        self.framed[Dir::Response as usize] = true;
                    }
                    let status = if e.op == OP_ERROR { "error" } else { "ok" };
                    let op = op_name(req.op);
                    match req.kind {
                        Some(kind) => out.pair(
                            &req.span,
                            &span,
                            &[("op", op), ("kind", kind), ("status", status)],
                            None,
                        ),
                        None => out.pair(&req.span, &span, &[("op", op), ("status", status)], None),
                    }
                }
            }
        }
    }

    fn resync(&mut self, dir: Dir, buf: &[u8]) -> Option<usize> {
        let d = dir as usize;
        self.found[d].clear();
        self.rest[d] = 0;
        (0..buf.len()).find(|&i| {
            let b = &buf[i..];
            if self.framed[d] {
                segment_header(b).is_some_and(|(len, whole)| {
                    whole
                        && b.len() >= SEGMENT_HEADER + HEADER
                        && envelope_len(dir, &b[SEGMENT_HEADER..]).is_some()
                        && len >= HEADER
                })
            } else {
                envelope_len(dir, b).is_some()
                    && (dir == Dir::Request
                        || self.pending.contains_key(&(be16(b, 2).unwrap_or(0) as i16)))
            }
        })
    }

    fn gap(&mut self, dir: Dir, out: &mut dyn Sink) {
        if dir == Dir::Response {
            out.unpaired(self.pending.len() as u64);
            self.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_headers_check_their_crc() {
        // A self-contained segment of 13 payload bytes: 13 | 1 << 17, little-endian.
        let v: u32 = 13 | 1 << 17;
        let h = [v as u8, (v >> 8) as u8, (v >> 16) as u8];
        let crc = crc24(&h);
        let mut seg = h.to_vec();
        seg.extend_from_slice(&[crc as u8, (crc >> 8) as u8, (crc >> 16) as u8]);
        assert_eq!(segment_header(&seg), Some((13, true)));
        seg[3] ^= 1;
        assert_eq!(segment_header(&seg), None);
    }
}
