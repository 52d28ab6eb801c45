//! TCP reassembly for one direction of one connection.
//!
//! Bytes are handed on in sequence order, each chunk with the capture time of the segment that
//! carried it. Segments that arrive early wait (bounded per direction and in total); a hole that
//! cannot be filled becomes a gap: the stream jumps over it and the parser resynchronises.
//!
//! A hole is declared as soon as it is known to be lost: when the peer acknowledges bytes past
//! it (the peer got them, the capture did not), when the waiting bytes exceed their bound, or
//! when the oldest waiting segment is older than the wait limit. Bytes already handed on
//! (retransmissions, duplicates) are dropped, and partial overlaps trimmed.

use std::collections::BTreeMap;

/// Most bytes one direction keeps waiting for a hole to fill.
pub const PENDING_BYTES_MAX: usize = 256 * 1024;
/// Most waiting segments per direction (a bound on map entries, whatever their size).
pub const PENDING_SEGMENTS_MAX: usize = 512;
/// A segment further ahead than this is taken as the sign of a large loss, not kept.
pub const AHEAD_MAX: u32 = 1 << 24;

/// What the reassembler hands on.
pub enum Chunk<'a> {
    /// In-order bytes and their segment's capture time (ns).
    Data(&'a [u8], u64),
    /// Bytes were lost here; the time is that of the segment that revealed it.
    Gap(u64),
}

/// Shared bound on waiting bytes across every connection.
pub struct Budget {
    pub used: usize,
    pub max: usize,
}

#[derive(Default)]
pub struct Reasm {
    /// The next expected sequence number, once known.
    next: Option<u32>,
    pending: BTreeMap<u64, (u64, Vec<u8>)>,
    pending_bytes: usize,
    /// The stream offset of `next` (bytes handed on or skipped).
    offset: u64,
    /// The connection was picked up part way (no SYN seen): the parser must resynchronise.
    pub midstream: bool,
    pub fin: bool,
    pub duplicates: u64,
}

/// How far `a` is ahead of `b` in sequence space (negative when behind).
fn seq_diff(a: u32, b: u32) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

impl Reasm {
    pub fn syn(&mut self, seq: u32) {
        self.next = Some(seq.wrapping_add(1));
    }

    /// Bytes waiting in this direction.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// One segment's payload (`fin` when it carries FIN).
    pub fn segment(
        &mut self,
        seq: u32,
        payload: &[u8],
        fin: bool,
        ts: u64,
        budget: &mut Budget,
        emit: &mut dyn FnMut(Chunk<'_>),
    ) {
        let next = match self.next {
            Some(n) => n,
            None => {
                self.midstream = true;
                self.next = Some(seq);
                seq
            }
        };
        if fin && seq_diff(seq.wrapping_add(payload.len() as u32), next) <= 0 {
            self.fin = true;
        }
        if payload.is_empty() {
            return;
        }
        let rel = seq_diff(seq, next);
        let len = payload.len() as i64;
        if rel + len <= 0 {
            self.duplicates += 1;
            return;
        }
        if rel <= 0 {
            self.hand_on(&payload[(-rel) as usize..], ts, emit);
            self.drain(budget, emit);
        } else if rel > i64::from(AHEAD_MAX) {
            self.skip_to(self.offset + rel as u64, ts, budget, emit);
            self.hand_on(payload, ts, emit);
            self.drain(budget, emit);
        } else {
            self.keep(self.offset + rel as u64, payload, ts, budget, emit);
        }
        if fin {
            self.fin = true;
        }
    }

    fn hand_on(&mut self, bytes: &[u8], ts: u64, emit: &mut dyn FnMut(Chunk<'_>)) {
        emit(Chunk::Data(bytes, ts));
        self.advance(bytes.len() as u64);
    }

    fn advance(&mut self, n: u64) {
        self.offset += n;
        self.next = self.next.map(|s| s.wrapping_add(n as u32));
    }

    fn keep(
        &mut self,
        at: u64,
        payload: &[u8],
        ts: u64,
        budget: &mut Budget,
        emit: &mut dyn FnMut(Chunk<'_>),
    ) {
        let full = self.pending_bytes + payload.len() > PENDING_BYTES_MAX
            || self.pending.len() >= PENDING_SEGMENTS_MAX
            || budget.used + payload.len() > budget.max;
        if full {
            // No room to wait: the hole before the first waiting byte is taken as lost.
            let first = self.pending.keys().next().copied().unwrap_or(at).min(at);
            self.skip_to(first, ts, budget, emit);
            if at <= self.offset {
                let trim = (self.offset - at) as usize;
                if trim < payload.len() {
                    self.hand_on(&payload[trim..], ts, emit);
                }
                self.drain(budget, emit);
                return;
            }
            if self.pending_bytes + payload.len() > PENDING_BYTES_MAX
                || budget.used + payload.len() > budget.max
            {
                self.skip_to(at, ts, budget, emit);
                self.hand_on(payload, ts, emit);
                self.drain(budget, emit);
                return;
            }
        }
        if let Some((_, old)) = self.pending.get(&at) {
            if old.len() >= payload.len() {
                self.duplicates += 1;
                return;
            }
        }
        budget.used += payload.len();
        self.pending_bytes += payload.len();
        if let Some((_, old)) = self.pending.insert(at, (ts, payload.to_vec())) {
            budget.used -= old.len();
            self.pending_bytes -= old.len();
        }
    }

    /// Hands on every waiting segment that now follows on.
    fn drain(&mut self, budget: &mut Budget, emit: &mut dyn FnMut(Chunk<'_>)) {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > self.offset {
                return;
            }
            let at = *entry.key();
            let (ts, bytes) = entry.remove();
            budget.used -= bytes.len();
            self.pending_bytes -= bytes.len();
            let trim = (self.offset - at) as usize;
            if trim < bytes.len() {
                self.hand_on(&bytes[trim..], ts, emit);
            }
        }
    }

    /// Declares bytes up to stream offset `to` lost, then hands on what follows.
    fn skip_to(&mut self, to: u64, ts: u64, budget: &mut Budget, emit: &mut dyn FnMut(Chunk<'_>)) {
        if to <= self.offset {
            return;
        }
        emit(Chunk::Gap(ts));
        self.advance(to - self.offset);
        self.drain(budget, emit);
    }

    /// The peer acknowledged up to `ack`: bytes before it that never arrived are lost.
    pub fn acked(
        &mut self,
        ack: u32,
        ts: u64,
        budget: &mut Budget,
        emit: &mut dyn FnMut(Chunk<'_>),
    ) {
        let Some(next) = self.next else { return };
        let ahead = seq_diff(ack, next) - i64::from(self.fin);
        // (A FIN takes one sequence number of its own: acknowledging it loses nothing.)
        if ahead <= 0 || ahead > i64::from(AHEAD_MAX) {
            return;
        }
        let acked_to = self.offset + ahead as u64;
        let first = self.pending.keys().next().copied().unwrap_or(u64::MAX);
        self.skip_to(first.min(acked_to), ts, budget, emit);
    }

    /// Gives up on a hole whose oldest waiting segment is older than `wait_ns` at `now`.
    pub fn expire(
        &mut self,
        now: u64,
        wait_ns: u64,
        budget: &mut Budget,
        emit: &mut dyn FnMut(Chunk<'_>),
    ) {
        let Some((&first, &(ts, _))) = self.pending.iter().next() else {
            return;
        };
        if ts.saturating_add(wait_ns) < now {
            self.skip_to(first, now, budget, emit);
        }
    }

    /// Releases every waiting byte (the connection is going away).
    pub fn release(&mut self, budget: &mut Budget) {
        budget.used -= self.pending_bytes;
        self.pending_bytes = 0;
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(r: &mut Reasm, segs: &[(u32, &[u8])], b: &mut Budget) -> Vec<String> {
        let mut out = Vec::new();
        for &(seq, p) in segs {
            r.segment(seq, p, false, u64::from(seq), b, &mut |c| match c {
                Chunk::Data(d, _) => out.push(String::from_utf8_lossy(d).into_owned()),
                Chunk::Gap(_) => out.push("<gap>".into()),
            });
        }
        out
    }

    #[test]
    fn orders_trims_and_drops_duplicates() {
        let mut b = Budget {
            used: 0,
            max: 1 << 20,
        };
        let mut r = Reasm::default();
        r.syn(99);
        let out = run(
            &mut r,
            &[
                (100, b"abc"),
                (106, b"ghi"),
                (103, b"def"),
                (100, b"abc"),
                (104, b"efgh"),
                (109, b"jk"),
            ],
            &mut b,
        );
        assert_eq!(out.concat(), "abcdefghijk");
        assert_eq!(b.used, 0);
        assert_eq!(r.duplicates, 2);
    }

    #[test]
    fn an_ack_past_a_hole_declares_it_lost() {
        let mut b = Budget {
            used: 0,
            max: 1 << 20,
        };
        let mut r = Reasm::default();
        r.syn(u32::MAX - 1);
        let mut out = run(&mut r, &[(u32::MAX, b"ab"), (4, b"zz")], &mut b);
        r.acked(6, 50, &mut b, &mut |c| {
            if let Chunk::Data(d, _) = c {
                out.push(String::from_utf8_lossy(d).into_owned())
            } else {
                out.push("<gap>".into())
            }
        });
        assert_eq!(out, ["ab", "<gap>", "zz"]);
        assert_eq!(b.used, 0);
    }

    #[test]
    fn waiting_bytes_are_bounded() {
        let mut b = Budget {
            used: 0,
            max: 1 << 30,
        };
        let mut r = Reasm::default();
        r.syn(0);
        let big = vec![b'x'; 1000];
        let segs: Vec<(u32, &[u8])> = (0..1000u32).map(|i| (2 + i * 1000, &big[..])).collect();
        let out = run(&mut r, &segs, &mut b);
        assert!(r.pending_bytes() <= PENDING_BYTES_MAX);
        assert_eq!(out[0], "<gap>");
        assert!(out.len() > 100);
    }
}
