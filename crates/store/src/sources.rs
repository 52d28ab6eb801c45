//! Exactly-once effect for resent batches: which sequence numbers each sender has had applied.
//!
//! A sender that retries (a broker forwarding its journal, an agent, a client library, a
//! cluster front) names itself and numbers its batches: an [`Origin`] of source id, epoch and
//! sequence. The store keeps, per source, the sequences it applied — in the WAL record of the
//! batch itself and, at each flush, in the checkpoint's state file — so a batch delivered any
//! number of times, in any order, across crashes, is applied once.
//!
//! Per source the state is bounded: an epoch, a *floor* (every sequence below it counts as
//! applied) and a window of [`SEQ_WINDOW`] bits above it (applied, and being written). The
//! sender's side of the contract is at most [`IN_FLIGHT_MAX`] batches in flight: it does not
//! send sequence `s + IN_FLIGHT_MAX` before `s` was acknowledged. So when sequence `x` arrives,
//! every sequence at or below `x − IN_FLIGHT_MAX` was acknowledged (applied) or abandoned, and
//! the window may slide up to `x` without forgetting anything that can still arrive; the window
//! is 16 times wider than the contract needs, for senders that overrun it a little.
//!
//! Epochs order a sender's lives: a sender that lost its sequence state (a restart without its
//! journal) starts a higher epoch, and its sequences start again. A batch of a lower epoch than
//! the source's newest is refused ([`Admission::StaleEpoch`]), never applied: the life that sent
//! it is over, and the store cannot tell whether it was applied.
//!
//! Sources idle for [`SOURCE_IDLE_MS`] (by the receipt times the records carry, so replay and
//! every replica expire the same ones) are forgotten. A sender that comes back later is a new
//! source: its batches are applied as new, so a resend of a batch first delivered before the
//! expiry would count again. At most [`SOURCES_MAX`] sources are kept; past it the
//! longest-idle one is forgotten if it has been idle for [`SOURCE_EVICT_IDLE_MS`], and a new
//! source is refused otherwise ([`Admission::TooManySources`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Longest source id, in bytes.
pub const SOURCE_ID_BYTES_MAX: usize = 64;
/// Batches of one source a sender may have in flight (sent, not acknowledged).
pub const IN_FLIGHT_MAX: u64 = 64;
/// Sequences tracked above a source's floor.
pub const SEQ_WINDOW: u64 = 1024;
const WINDOW_WORDS: usize = (SEQ_WINDOW / 64) as usize;
/// Sources kept at most.
pub const SOURCES_MAX: usize = 65_536;
/// A source not heard from for this long (7 days) is forgotten.
pub const SOURCE_IDLE_MS: i64 = 7 * 24 * 3600 * 1000;
/// With `SOURCES_MAX` sources kept, the longest-idle one makes room for a new one once it has
/// been idle this long (one hour).
pub const SOURCE_EVICT_IDLE_MS: i64 = 3600 * 1000;

/// A sender's name: 1 to [`SOURCE_ID_BYTES_MAX`] bytes of printable ASCII without spaces (so it
/// travels in an HTTP header and a log line as it is).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(Arc<str>);

/// Why a source id is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceIdError {
    Empty,
    TooLong { len_bytes: usize },
    BadByte { at: usize },
}

impl fmt::Display for SourceIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceIdError::Empty => write!(f, "source id is empty"),
            SourceIdError::TooLong { len_bytes } => write!(
                f,
                "source id is {len_bytes} bytes long, at most {SOURCE_ID_BYTES_MAX} allowed"
            ),
            SourceIdError::BadByte { at } => write!(
                f,
                "source id has a byte that is not printable ASCII (or is a space) at byte {at}"
            ),
        }
    }
}

impl SourceId {
    pub fn new(text: &str) -> Result<SourceId, SourceIdError> {
        if text.is_empty() {
            return Err(SourceIdError::Empty);
        }
        if text.len() > SOURCE_ID_BYTES_MAX {
            return Err(SourceIdError::TooLong {
                len_bytes: text.len(),
            });
        }
        if let Some(at) = text.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(SourceIdError::BadByte { at });
        }
        Ok(SourceId(Arc::from(text)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who sent a batch, and which of its batches it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub source: SourceId,
    pub epoch: u64,
    pub seq: u64,
    /// When the store received it, ms since the epoch: the source's activity for expiry.
    pub received_ms: i64,
}

/// What the state says of a batch about to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Not applied yet: now marked as being written; [`Sources::finish`] must follow.
    Proceed,
    /// Applied before: acknowledge again, apply nothing.
    Duplicate,
    /// The same batch is being written by another request: wait, then ask again.
    Wait,
    /// The source has a newer epoch: refuse.
    StaleEpoch { newest: u64 },
    /// No room for another source.
    TooManySources,
}

/// One source's applied sequences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SourceState {
    pub epoch: u64,
    /// Every sequence below it counts as applied.
    pub floor: u64,
    /// Bit `s % SEQ_WINDOW` for sequence `s` in `floor..floor + SEQ_WINDOW`: applied.
    pub applied: [u64; WINDOW_WORDS],
    /// The same for sequences being written (never persisted).
    pub writing: [u64; WINDOW_WORDS],
    /// Newest receipt time of a batch of this source.
    pub last_ms: i64,
}

fn bit(seq: u64) -> (usize, u64) {
    let i = seq % SEQ_WINDOW;
    ((i / 64) as usize, 1u64 << (i % 64))
}

impl SourceState {
    fn new(epoch: u64, first_seq: u64, now_ms: i64) -> SourceState {
        SourceState {
            epoch,
            // Nothing of a new source is applied: batches sent before this one (up to the
            // window below it) may still arrive.
            floor: first_seq.saturating_sub(SEQ_WINDOW - 1),
            applied: [0; WINDOW_WORDS],
            writing: [0; WINDOW_WORDS],
            last_ms: now_ms,
        }
    }

    fn is_set(bits: &[u64; WINDOW_WORDS], seq: u64) -> bool {
        let (w, m) = bit(seq);
        bits[w] & m != 0
    }

    fn set(bits: &mut [u64; WINDOW_WORDS], seq: u64, on: bool) {
        let (w, m) = bit(seq);
        if on {
            bits[w] |= m;
        } else {
            bits[w] &= !m;
        }
    }

    fn is_applied(&self, seq: u64) -> bool {
        seq < self.floor || (seq - self.floor < SEQ_WINDOW && Self::is_set(&self.applied, seq))
    }

    /// Whether a sequence the window would slide past is still being written.
    fn writing_below(&self, new_floor: u64) -> bool {
        let end = new_floor.min(self.floor.saturating_add(SEQ_WINDOW));
        (self.floor..end).any(|s| Self::is_set(&self.writing, s))
    }

    /// Moves the floor up to `new_floor`: sequences below it count as applied.
    fn slide_to(&mut self, new_floor: u64) {
        if new_floor <= self.floor {
            return;
        }
        if new_floor - self.floor >= SEQ_WINDOW {
            self.applied = [0; WINDOW_WORDS];
            self.writing = [0; WINDOW_WORDS];
        } else {
            for s in self.floor..new_floor {
                Self::set(&mut self.applied, s, false);
                Self::set(&mut self.writing, s, false);
            }
        }
        self.floor = new_floor;
    }

    /// Advances the floor over applied sequences at its bottom, so the window stays ahead.
    fn settle(&mut self) {
        let mut steps = 0;
        while steps < SEQ_WINDOW && Self::is_set(&self.applied, self.floor) {
            Self::set(&mut self.applied, self.floor, false);
            self.floor += 1;
            steps += 1;
        }
    }

    /// Marks `seq` applied (the window slid so that it fits).
    fn mark_applied(&mut self, seq: u64) {
        if seq < self.floor {
            return;
        }
        if seq - self.floor >= SEQ_WINDOW {
            self.slide_to(seq + 1 - SEQ_WINDOW);
        }
        Self::set(&mut self.writing, seq, false);
        Self::set(&mut self.applied, seq, true);
        self.settle();
    }
}

/// Every source's state.
#[derive(Default)]
pub(crate) struct Sources {
    by_id: HashMap<SourceId, SourceState>,
    /// Newest receipt time of any record applied: the clock expiry is measured by.
    newest_ms: i64,
}

impl Sources {
    pub fn from_entries(entries: Vec<(SourceId, SourceState)>) -> Sources {
        let newest_ms = entries.iter().map(|(_, s)| s.last_ms).max().unwrap_or(0);
        Sources {
            by_id: entries.into_iter().collect(),
            newest_ms,
        }
    }

    /// The applied state of every source, by id (what a flush persists).
    pub fn entries(&self) -> Vec<(SourceId, SourceState)> {
        let mut out: Vec<(SourceId, SourceState)> = self
            .by_id
            .iter()
            .map(|(id, s)| {
                let mut s = s.clone();
                s.writing = [0; WINDOW_WORDS];
                (id.clone(), s)
            })
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Decides about a batch from `origin`; on `Proceed` it is marked as being written.
    pub fn admit(&mut self, origin: &Origin) -> Admission {
        if !self.by_id.contains_key(&origin.source) && !self.make_room(origin.received_ms) {
            return Admission::TooManySources;
        }
        let state = self
            .by_id
            .entry(origin.source.clone())
            .or_insert_with(|| SourceState::new(origin.epoch, origin.seq, origin.received_ms));
        if origin.epoch < state.epoch {
            return Admission::StaleEpoch {
                newest: state.epoch,
            };
        }
        if origin.epoch > state.epoch {
            if state.writing.iter().any(|w| *w != 0) {
                return Admission::Wait;
            }
            *state = SourceState::new(origin.epoch, origin.seq, origin.received_ms);
        }
        let seq = origin.seq;
        if state.is_applied(seq) {
            return Admission::Duplicate;
        }
        if seq - state.floor >= SEQ_WINDOW {
            let new_floor = seq + 1 - SEQ_WINDOW;
            if state.writing_below(new_floor) {
                return Admission::Wait;
            }
            state.slide_to(new_floor);
        }
        if SourceState::is_set(&state.writing, seq) {
            return Admission::Wait;
        }
        SourceState::set(&mut state.writing, seq, true);
        Admission::Proceed
    }

    /// The batch admitted for `origin` was written (`applied`) or failed.
    pub fn finish(&mut self, origin: &Origin, applied: bool) {
        if applied {
            self.record(origin);
        } else if let Some(state) = self.by_id.get_mut(&origin.source) {
            if state.epoch == origin.epoch
                && origin.seq >= state.floor
                && origin.seq - state.floor < SEQ_WINDOW
            {
                SourceState::set(&mut state.writing, origin.seq, false);
            }
        }
    }

    /// Marks `origin` applied: after a write, and for each record replayed.
    pub fn record(&mut self, origin: &Origin) {
        self.newest_ms = self.newest_ms.max(origin.received_ms);
        let state = self
            .by_id
            .entry(origin.source.clone())
            .or_insert_with(|| SourceState::new(origin.epoch, origin.seq, origin.received_ms));
        if origin.epoch > state.epoch {
            *state = SourceState::new(origin.epoch, origin.seq, origin.received_ms);
        }
        if origin.epoch == state.epoch {
            state.mark_applied(origin.seq);
            state.last_ms = state.last_ms.max(origin.received_ms);
        }
    }

    /// Forgets sources idle for [`SOURCE_IDLE_MS`] (by the newest receipt time seen) that have
    /// nothing being written.
    pub fn expire(&mut self) {
        let cutoff = self.newest_ms.saturating_sub(SOURCE_IDLE_MS);
        self.by_id
            .retain(|_, s| s.last_ms >= cutoff || s.writing.iter().any(|w| *w != 0));
    }

    /// Whether a new source fits (forgetting the longest-idle one if it must and may).
    fn make_room(&mut self, now_ms: i64) -> bool {
        if self.by_id.len() < SOURCES_MAX {
            return true;
        }
        self.expire();
        if self.by_id.len() < SOURCES_MAX {
            return true;
        }
        let idle = self
            .by_id
            .iter()
            .filter(|(_, s)| s.writing.iter().all(|w| *w == 0))
            .min_by_key(|(_, s)| s.last_ms)
            .map(|(id, s)| (id.clone(), s.last_ms));
        match idle {
            Some((id, last_ms)) if now_ms.saturating_sub(last_ms) >= SOURCE_EVICT_IDLE_MS => {
                self.by_id.remove(&id);
                true
            }
            _ => false,
        }
    }
}

/// The state file's sources section: `count u32`, then per source `id len u8 | id | epoch u64 |
/// floor u64 | last_ms i64 | SEQ_WINDOW/8 bytes of applied bits` (little-endian;
/// `FORMAT.md`, "Checkpoint state").
pub(crate) fn encode(entries: &[(SourceId, SourceState)], out: &mut Vec<u8>) {
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (id, s) in entries {
        let text = id.as_str().as_bytes();
        out.push(text.len() as u8);
        out.extend_from_slice(text);
        out.extend_from_slice(&s.epoch.to_le_bytes());
        out.extend_from_slice(&s.floor.to_le_bytes());
        out.extend_from_slice(&s.last_ms.to_le_bytes());
        for word in s.applied {
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
}

/// Reads a sources section from `bytes` at `*pos`; `Err` names what is wrong.
pub(crate) fn decode(
    bytes: &[u8],
    pos: &mut usize,
) -> Result<Vec<(SourceId, SourceState)>, &'static str> {
    let mut take = |n: usize| -> Result<&[u8], &'static str> {
        let end = pos.checked_add(n).ok_or("sources section truncated")?;
        let slice = bytes.get(*pos..end).ok_or("sources section truncated")?;
        *pos = end;
        Ok(slice)
    };
    let u64_of = |b: &[u8]| {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(b);
        u64::from_le_bytes(raw)
    };
    let mut raw = [0u8; 4];
    raw.copy_from_slice(take(4)?);
    let count = u32::from_le_bytes(raw) as usize;
    if count > SOURCES_MAX {
        return Err("more sources than SOURCES_MAX");
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let len = take(1)?[0] as usize;
        let text = std::str::from_utf8(take(len)?).map_err(|_| "source id not UTF-8")?;
        let id = SourceId::new(text).map_err(|_| "invalid source id")?;
        let epoch = u64_of(take(8)?);
        let floor = u64_of(take(8)?);
        let last_ms = u64_of(take(8)?) as i64;
        let mut applied = [0u64; WINDOW_WORDS];
        for word in &mut applied {
            *word = u64_of(take(8)?);
        }
        out.push((
            id,
            SourceState {
                epoch,
                floor,
                applied,
                writing: [0; WINDOW_WORDS],
                last_ms,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn origin(source: &str, epoch: u64, seq: u64) -> Origin {
        Origin {
            source: SourceId::new(source).unwrap(),
            epoch,
            seq,
            received_ms: 1_000,
        }
    }

    fn apply(sources: &mut Sources, o: &Origin) -> bool {
        match sources.admit(o) {
            Admission::Proceed => {
                sources.finish(o, true);
                true
            }
            Admission::Duplicate => false,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn source_ids_are_checked() {
        assert!(SourceId::new("broker-1/core").is_ok());
        assert_eq!(SourceId::new(""), Err(SourceIdError::Empty));
        assert_eq!(
            SourceId::new(&"x".repeat(65)),
            Err(SourceIdError::TooLong { len_bytes: 65 })
        );
        assert_eq!(SourceId::new("a b"), Err(SourceIdError::BadByte { at: 1 }));
        assert_eq!(SourceId::new("é"), Err(SourceIdError::BadByte { at: 0 }));
    }

    #[test]
    fn each_sequence_applies_once_in_any_order() {
        let mut s = Sources::default();
        for seq in [5, 3, 4, 0, 1, 2, 6] {
            assert!(apply(&mut s, &origin("a", 1, seq)), "first {seq}");
        }
        for seq in 0..7 {
            assert!(!apply(&mut s, &origin("a", 1, seq)), "again {seq}");
        }
        assert!(apply(&mut s, &origin("a", 1, 7)));
        // Another source has its own sequences.
        assert!(apply(&mut s, &origin("b", 1, 3)));
    }

    #[test]
    fn a_batch_being_written_makes_its_resend_wait_and_a_failure_frees_it() {
        let mut s = Sources::default();
        let o = origin("a", 1, 9);
        assert_eq!(s.admit(&o), Admission::Proceed);
        assert_eq!(s.admit(&o), Admission::Wait);
        s.finish(&o, false);
        assert_eq!(s.admit(&o), Admission::Proceed);
        s.finish(&o, true);
        assert_eq!(s.admit(&o), Admission::Duplicate);
    }

    #[test]
    fn the_window_slides_without_forgetting_what_can_still_arrive() {
        let mut s = Sources::default();
        // A sender with 64 in flight: every sequence 64 below the newest was acknowledged.
        let mut pending: Vec<u64> = Vec::new();
        for seq in 0..10_000u64 {
            pending.push(seq);
            if pending.len() == IN_FLIGHT_MAX as usize {
                // Acknowledge them in reverse order.
                for p in pending.drain(..).rev() {
                    assert!(apply(&mut s, &origin("a", 1, p)));
                }
            }
        }
        for p in pending {
            assert!(apply(&mut s, &origin("a", 1, p)));
        }
        for seq in (0..10_000).step_by(7) {
            assert!(!apply(&mut s, &origin("a", 1, seq)));
        }
        let state = &s.by_id[&SourceId::new("a").unwrap()];
        assert_eq!(state.floor, 10_000);
    }

    #[test]
    fn a_far_sequence_waits_for_one_being_written_below_it() {
        let mut s = Sources::default();
        let low = origin("a", 1, 2000);
        assert_eq!(s.admit(&low), Admission::Proceed);
        let far = origin("a", 1, 2000 + SEQ_WINDOW);
        assert_eq!(s.admit(&far), Admission::Wait);
        s.finish(&low, true);
        assert_eq!(s.admit(&far), Admission::Proceed);
    }

    #[test]
    fn epochs_order_a_senders_lives() {
        let mut s = Sources::default();
        assert!(apply(&mut s, &origin("a", 5, 100)));
        // A new life starts its sequences again.
        assert!(apply(&mut s, &origin("a", 6, 0)));
        assert!(!apply(&mut s, &origin("a", 6, 0)));
        assert_eq!(
            s.admit(&origin("a", 5, 101)),
            Admission::StaleEpoch { newest: 6 }
        );
    }

    #[test]
    fn idle_sources_expire_and_a_full_table_refuses_busy_newcomers() {
        let mut s = Sources::default();
        let mut old = origin("old", 1, 0);
        old.received_ms = 0;
        assert!(apply(&mut s, &old));
        let mut new = origin("new", 1, 0);
        new.received_ms = SOURCE_IDLE_MS + 1;
        assert!(apply(&mut s, &new));
        s.expire();
        assert_eq!(s.len(), 1);
        // Back after expiry: a new source, its batch applies again.
        assert!(apply(&mut s, &old));

        let mut full = Sources::default();
        for i in 0..SOURCES_MAX {
            let mut o = origin(&format!("s{i}"), 1, 0);
            o.received_ms = 10;
            full.record(&o);
        }
        let mut late = origin("late", 1, 0);
        late.received_ms = 20;
        assert_eq!(full.admit(&late), Admission::TooManySources);
        late.received_ms = 10 + SOURCE_EVICT_IDLE_MS;
        assert_eq!(full.admit(&late), Admission::Proceed);
        assert_eq!(full.len(), SOURCES_MAX);
    }

    #[test]
    fn the_section_round_trips_and_refuses_damage() {
        let mut s = Sources::default();
        for seq in [0, 1, 5, 900] {
            assert!(apply(&mut s, &origin("a", 3, seq)));
        }
        assert!(apply(&mut s, &origin("b", 1, 77)));
        let entries = s.entries();
        let mut bytes = Vec::new();
        encode(&entries, &mut bytes);
        let mut pos = 0;
        assert_eq!(decode(&bytes, &mut pos).unwrap(), entries);
        assert_eq!(pos, bytes.len());
        for cut in 0..bytes.len() {
            let mut pos = 0;
            assert!(decode(&bytes[..cut], &mut pos).is_err(), "cut {cut}");
        }
        let back = Sources::from_entries(decode(&bytes, &mut 0).unwrap());
        let mut back = back;
        assert!(!apply(&mut back, &origin("a", 3, 5)));
        assert!(apply(&mut back, &origin("a", 3, 6)));
    }
}
