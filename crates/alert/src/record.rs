//! The alert journal's records, byte by byte as `FORMAT.md` documents them.
//!
//! Every integer is little-endian; a string is a `u32` byte length and UTF-8 bytes. A decoder
//! checks every length against what is left before it allocates, so a damaged record is an
//! error, never a panic or a large allocation (the journal's frame CRC catches damage first).

use crate::flap::History;
use crate::state::{Instance, State};

/// Record format version (byte 0 of every record).
pub const VERSION: u8 = 1;
pub const TYPE_EVAL: u8 = 1;
pub const TYPE_CYCLE: u8 = 2;
pub const TYPE_FORGET: u8 = 3;
/// Largest record decoded.
pub const RECORD_BYTES_MAX: usize = 64 << 20;
/// Active instances one Cycle record lists (the rest are counted, not listed).
pub const CYCLE_ACTIVE_MAX: usize = 100_000;
/// Labels or annotations on one instance.
pub const PAIRS_MAX: usize = 1024;

/// Eval record flags.
pub const FLAG_LATE: u8 = 1;
pub const FLAG_EAGER: u8 = 2;
pub const FLAG_BACKFILL: u8 = 4;
/// More of this evaluation's updates follow in the next Eval record: the evaluation is done
/// (its period complete) with the part that lacks this flag.
pub const FLAG_PART: u8 = 8;
/// Bytes of one Eval record at most when an evaluation's updates are split into parts: well
/// under the alert journal's record bound (about its segment size, 4 MiB by default). Ten
/// thousand sources going silent at once made one record of 7.5 MB, which the journal refused,
/// so the cycle was retried every tick and never applied: no alert moved again.
pub const EVAL_PART_BYTES_MAX: usize = 1 << 20;

const INSTANCE_FLAPPING: u8 = 1;
const INSTANCE_SUPPRESSED: u8 = 2;
const UPDATE_NEW: u8 = 1;

/// One instance's change: where it was, and everything it is now.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    pub from_state: State,
    pub from_severity: u8,
    /// No instance existed before (it was `ok` and forgotten, or never seen).
    pub new: bool,
    pub instance: Instance,
}

/// One ruleset's updates at one evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Eval {
    pub flags: u8,
    /// The period end evaluated (an eager evaluation: the time it ran).
    pub t_ms: i64,
    pub written_ms: i64,
    pub ruleset: String,
    pub updates: Vec<Update>,
}

impl Eval {
    /// This evaluation as Eval records of at most `bytes_max` bytes each (an update larger
    /// than that alone in its part), every part but the last flagged [`FLAG_PART`]. An
    /// evaluation without updates is one record.
    pub fn into_parts(self, bytes_max: usize) -> Vec<Record> {
        let head_bytes = 24 + 4 + self.ruleset.len();
        let mut parts: Vec<Vec<Update>> = vec![Vec::new()];
        let mut bytes = head_bytes;
        // Each update measured by encoding it into one reused buffer.
        let mut e = Enc::default();
        for u in self.updates {
            e.0.clear();
            encode_instance(&mut e, &u.instance);
            let size = 4 + e.0.len();
            let last = parts
                .last_mut()
                .filter(|p| p.is_empty() || bytes + size <= bytes_max);
            match last {
                Some(part) => part.push(u),
                None => {
                    bytes = head_bytes;
                    parts.push(vec![u]);
                }
            }
            bytes += size;
        }
        let n = parts.len();
        parts
            .into_iter()
            .enumerate()
            .map(|(i, updates)| {
                let part = if i + 1 < n { FLAG_PART } else { 0 };
                Record::Eval(Eval {
                    flags: self.flags | part,
                    t_ms: self.t_ms,
                    written_ms: self.written_ms,
                    ruleset: self.ruleset.clone(),
                    updates,
                })
            })
            .collect()
    }
}

/// Every ruleset due at `t_ms` was evaluated; the instances active after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cycle {
    pub flags: u8,
    pub t_ms: i64,
    pub written_ms: i64,
    pub rulesets: u32,
    pub active_total: u32,
    /// (fingerprint, state, severity), at most [`CYCLE_ACTIVE_MAX`].
    pub active: Vec<(u64, State, u8)>,
}

/// Instances dropped because their ruleset was deleted.
#[derive(Clone, Debug, PartialEq)]
pub struct Forget {
    pub t_ms: i64,
    pub written_ms: i64,
    pub ruleset: String,
    pub fps: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Eval(Eval),
    Cycle(Cycle),
    Forget(Forget),
}

/// Why bytes are not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "alert record: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// Appends little-endian fields.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn str(&mut self, s: &str) {
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(s.as_bytes());
    }
    fn pairs(&mut self, pairs: &[(String, String)]) {
        let n = pairs.len().min(PAIRS_MAX);
        self.u16(n as u16);
        for (k, v) in &pairs[..n] {
            self.str(k);
            self.str(v);
        }
    }
}

/// Reads little-endian fields, never past the end.
pub struct Dec<'a> {
    pub b: &'a [u8],
    pub pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, pos: 0 }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(DecodeError(format!(
                "{what}: ends at byte {}",
                self.b.len()
            )));
        };
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn i64(&mut self, what: &str) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array(what)?))
    }
    pub fn f64(&mut self, what: &str) -> Result<f64, DecodeError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }
    pub fn str(&mut self, what: &str) -> Result<String, DecodeError> {
        let n = self.u32(what)? as usize;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError(format!("{what}: not UTF-8")))
    }
    fn pairs(&mut self, what: &str) -> Result<Vec<(String, String)>, DecodeError> {
        let n = usize::from(self.u16(what)?);
        if n > PAIRS_MAX {
            return Err(DecodeError(format!(
                "{what}: {n} pairs, more than {PAIRS_MAX}"
            )));
        }
        (0..n)
            .map(|_| Ok((self.str(what)?, self.str(what)?)))
            .collect()
    }
    /// A count of items at least `item_bytes` each: refused when they cannot fit.
    pub fn count(&mut self, what: &str, item_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(item_bytes) > self.b.len() - self.pos {
            return Err(DecodeError(format!("{what}: {n} items cannot fit")));
        }
        Ok(n)
    }
    pub fn done(&self) -> Result<(), DecodeError> {
        if self.pos == self.b.len() {
            Ok(())
        } else {
            Err(DecodeError(format!(
                "{} bytes after the end",
                self.b.len() - self.pos
            )))
        }
    }
}

fn state(b: u8, what: &str) -> Result<State, DecodeError> {
    State::from_u8(b).ok_or_else(|| DecodeError(format!("{what}: unknown state {b}")))
}

/// The instance layout shared by records and the snapshot (60 fixed bytes, then strings).
pub fn encode_instance(e: &mut Enc, i: &Instance) {
    e.u64(i.fp);
    e.u8(i.state as u8);
    e.u8(i.severity);
    let mut flags = 0;
    if i.flapping {
        flags |= INSTANCE_FLAPPING;
    }
    if i.suppressed {
        flags |= INSTANCE_SUPPRESSED;
    }
    e.u8(flags);
    e.u8(i.history.len);
    e.u64(i.history.codes);
    e.i64(i.since_ms);
    e.i64(i.active_ms);
    e.i64(i.fired_ms);
    e.i64(i.last_t_ms);
    e.f64(i.value);
    e.str(&i.stream);
    e.pairs(&i.labels);
    e.pairs(&i.annotations);
}

pub fn decode_instance(d: &mut Dec<'_>, ruleset: &str) -> Result<Instance, DecodeError> {
    let fp = d.u64("fingerprint")?;
    let st = state(d.u8("state")?, "state")?;
    let severity = d.u8("severity")?;
    let flags = d.u8("instance flags")?;
    let len = d.u8("history length")?;
    let codes = d.u64("history")?;
    Ok(Instance {
        fp,
        ruleset: ruleset.to_string(),
        state: st,
        severity,
        flapping: flags & INSTANCE_FLAPPING != 0,
        suppressed: flags & INSTANCE_SUPPRESSED != 0,
        history: History { codes, len },
        since_ms: d.i64("since")?,
        active_ms: d.i64("active since")?,
        fired_ms: d.i64("fired")?,
        last_t_ms: d.i64("last evaluation")?,
        value: d.f64("value")?,
        stream: d.str("stream")?,
        labels: d.pairs("labels")?,
        annotations: d.pairs("annotations")?,
    })
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u8(VERSION);
        match self {
            Record::Eval(r) => {
                e.u8(TYPE_EVAL);
                e.u8(r.flags);
                e.u8(0);
                e.i64(r.t_ms);
                e.i64(r.written_ms);
                e.u32(r.updates.len() as u32);
                e.str(&r.ruleset);
                for u in &r.updates {
                    e.u8(u.from_state as u8);
                    e.u8(u.from_severity);
                    e.u8(if u.new { UPDATE_NEW } else { 0 });
                    e.u8(0);
                    encode_instance(&mut e, &u.instance);
                }
            }
            Record::Cycle(c) => {
                e.u8(TYPE_CYCLE);
                e.u8(c.flags);
                e.u8(0);
                e.i64(c.t_ms);
                e.i64(c.written_ms);
                e.u32(c.rulesets);
                e.u32(c.active_total);
                let listed = &c.active[..c.active.len().min(CYCLE_ACTIVE_MAX)];
                e.u32(listed.len() as u32);
                for (fp, s, sev) in listed {
                    e.u64(*fp);
                    e.u8(*s as u8);
                    e.u8(*sev);
                }
            }
            Record::Forget(f) => {
                e.u8(TYPE_FORGET);
                e.u16(0);
                e.i64(f.t_ms);
                e.i64(f.written_ms);
                e.str(&f.ruleset);
                e.u32(f.fps.len() as u32);
                for fp in &f.fps {
                    e.u64(*fp);
                }
            }
        }
        e.0
    }

    pub fn decode(b: &[u8]) -> Result<Record, DecodeError> {
        if b.len() > RECORD_BYTES_MAX {
            return Err(DecodeError(format!(
                "{} bytes, more than {RECORD_BYTES_MAX}",
                b.len()
            )));
        }
        let mut d = Dec::new(b);
        let v = d.u8("version")?;
        if v != VERSION {
            return Err(DecodeError(format!(
                "version {v}, this build reads {VERSION}"
            )));
        }
        let r = match d.u8("type")? {
            TYPE_EVAL => Record::Eval(decode_eval(&mut d)?),
            TYPE_CYCLE => Record::Cycle(decode_cycle(&mut d)?),
            TYPE_FORGET => Record::Forget(decode_forget(&mut d)?),
            t => return Err(DecodeError(format!("unknown record type {t}"))),
        };
        d.done()?;
        Ok(r)
    }

    pub fn t_ms(&self) -> i64 {
        match self {
            Record::Eval(r) => r.t_ms,
            Record::Cycle(r) => r.t_ms,
            Record::Forget(r) => r.t_ms,
        }
    }
}

/// Fixed bytes of one update before its strings.
const UPDATE_FIXED_BYTES: usize = 4 + 60 + 4 + 2 + 2;

fn decode_eval(d: &mut Dec<'_>) -> Result<Eval, DecodeError> {
    let flags = d.u8("flags")?;
    d.u8("reserved")?;
    let t_ms = d.i64("t")?;
    let written_ms = d.i64("written")?;
    let n = d.count("updates", UPDATE_FIXED_BYTES)?;
    let ruleset = d.str("ruleset")?;
    let mut updates = Vec::with_capacity(n);
    for _ in 0..n {
        let from_state = state(d.u8("from state")?, "from state")?;
        let from_severity = d.u8("from severity")?;
        let uflags = d.u8("update flags")?;
        d.u8("reserved")?;
        updates.push(Update {
            from_state,
            from_severity,
            new: uflags & UPDATE_NEW != 0,
            instance: decode_instance(d, &ruleset)?,
        });
    }
    Ok(Eval {
        flags,
        t_ms,
        written_ms,
        ruleset,
        updates,
    })
}

fn decode_cycle(d: &mut Dec<'_>) -> Result<Cycle, DecodeError> {
    let flags = d.u8("flags")?;
    d.u8("reserved")?;
    let t_ms = d.i64("t")?;
    let written_ms = d.i64("written")?;
    let rulesets = d.u32("rulesets")?;
    let active_total = d.u32("active total")?;
    let n = d.count("active", 10)?;
    let mut active = Vec::with_capacity(n);
    for _ in 0..n {
        let fp = d.u64("fingerprint")?;
        let s = state(d.u8("state")?, "state")?;
        active.push((fp, s, d.u8("severity")?));
    }
    Ok(Cycle {
        flags,
        t_ms,
        written_ms,
        rulesets,
        active_total,
        active,
    })
}

fn decode_forget(d: &mut Dec<'_>) -> Result<Forget, DecodeError> {
    d.u16("reserved")?;
    let t_ms = d.i64("t")?;
    let written_ms = d.i64("written")?;
    let ruleset = d.str("ruleset")?;
    let n = d.count("fingerprints", 8)?;
    let fps = (0..n)
        .map(|_| d.u64("fingerprint"))
        .collect::<Result<_, _>>()?;
    Ok(Forget {
        t_ms,
        written_ms,
        ruleset,
        fps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample_instance() -> Instance {
        let mut i = Instance::new(0x0123_4567_89ab_cdef, "login-slow", "login|ST[app:web]");
        i.state = State::Firing;
        i.severity = 1;
        i.since_ms = 1_700_000_000_000;
        i.fired_ms = 1_700_000_000_000;
        i.last_t_ms = 1_700_000_060_000;
        i.value = 523.0;
        i.history = History::filled(1, 3);
        i.flapping = true;
        i.labels = vec![("alertname".into(), "login-slow".into())];
        i.annotations = vec![("summary".into(), "523 people".into())];
        i
    }

    #[test]
    fn records_round_trip() {
        let recs = [
            Record::Eval(Eval {
                flags: FLAG_LATE,
                t_ms: 1_700_000_060_000,
                written_ms: 1_700_000_065_000,
                ruleset: "login-slow".into(),
                updates: vec![Update {
                    from_state: State::Pending,
                    from_severity: 1,
                    new: false,
                    instance: sample_instance(),
                }],
            }),
            Record::Cycle(Cycle {
                flags: 0,
                t_ms: 60_000,
                written_ms: 65_000,
                rulesets: 3,
                active_total: 1,
                active: vec![(7, State::Firing, 2)],
            }),
            Record::Forget(Forget {
                t_ms: 1,
                written_ms: 2,
                ruleset: "gone".into(),
                fps: vec![1, 2, 3],
            }),
        ];
        for r in recs {
            let bytes = r.encode();
            assert_eq!(Record::decode(&bytes).unwrap(), r);
            // Every truncation is an error, never a panic.
            for cut in 0..bytes.len() {
                assert!(Record::decode(&bytes[..cut]).is_err());
            }
        }
    }

    #[test]
    fn the_documented_eval_bytes() {
        // FORMAT.md's example: header and the first fixed fields of an update.
        let r = Record::Eval(Eval {
            flags: 0,
            t_ms: 60_000,
            written_ms: 65_000,
            ruleset: "r".into(),
            updates: vec![],
        });
        let b = r.encode();
        assert_eq!(
            b,
            [
                1, 1, 0, 0, 0x60, 0xEA, 0, 0, 0, 0, 0, 0, 0xE8, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                1, 0, 0, 0, b'r'
            ]
        );
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        let mut b = Record::Cycle(Cycle {
            flags: 0,
            t_ms: 0,
            written_ms: 0,
            rulesets: 0,
            active_total: 0,
            active: vec![],
        })
        .encode();
        let n = b.len();
        b[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Record::decode(&b).unwrap_err().0.contains("cannot fit"));
    }
}
