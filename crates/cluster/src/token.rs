//! The read-after token: what a front's 2xx to a write says about where its records went, and
//! what a read passes back to be answered only from owners that applied them.
//!
//! Text form: `<partition>:<offset>` pairs joined by `,` (`0:17,3:5`), partitions ascending,
//! each the Kafka offset of the write's record in that partition. A reader waits until an
//! owner's next offset is past it. Tokens of several writes combine by keeping each
//! partition's largest offset (`ReadAfter::join`).

use std::collections::BTreeMap;

/// Most partitions one token may name (a topic's partition count is far below this).
pub const TOKEN_PARTITIONS_MAX: usize = 4_096;

/// Partition → the offset a read must see applied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadAfter {
    pub offsets: BTreeMap<u32, i64>,
}

impl ReadAfter {
    /// The token of produced `(partition, offset)` pairs.
    pub fn of(produced: &[(u32, i64)]) -> ReadAfter {
        let mut out = ReadAfter::default();
        for &(p, o) in produced {
            out.add(p, o);
        }
        out
    }

    fn add(&mut self, partition: u32, offset: i64) {
        if offset < 0 {
            return;
        }
        let e = self.offsets.entry(partition).or_insert(offset);
        *e = (*e).max(offset);
    }

    /// Both tokens' offsets, each partition's largest.
    pub fn join(&mut self, other: &ReadAfter) {
        for (&p, &o) in &other.offsets {
            self.add(p, o);
        }
    }

    /// Parses the text form; every partition must be below `partitions`. The error names
    /// the part that is wrong.
    pub fn parse(text: &str, partitions: u32) -> Result<ReadAfter, String> {
        let mut out = ReadAfter::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if out.offsets.len() >= TOKEN_PARTITIONS_MAX {
                return Err(format!("more than {TOKEN_PARTITIONS_MAX} partitions"));
            }
            let bad = || format!("`{part}` is not <partition>:<offset>");
            let (p, o) = part.split_once(':').ok_or_else(bad)?;
            let p: u32 = p.trim().parse().map_err(|_| bad())?;
            let o: i64 = o.trim().parse().map_err(|_| bad())?;
            if o < 0 {
                return Err(bad());
            }
            if p >= partitions {
                return Err(format!(
                    "`{part}`: partition {p} does not exist (the topic has {partitions})"
                ));
            }
            out.add(p, o);
        }
        if out.offsets.is_empty() {
            return Err("the token names no partition".into());
        }
        Ok(out)
    }
}

impl std::fmt::Display for ReadAfter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (p, o)) in self.offsets.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}:{o}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_prints_and_parses_back() {
        let t = ReadAfter::of(&[(3, 5), (0, 17), (3, 2)]);
        assert_eq!(t.to_string(), "0:17,3:5");
        assert_eq!(ReadAfter::parse("0:17,3:5", 8).unwrap(), t);
    }

    #[test]
    fn malformed_tokens_name_the_part() {
        assert!(ReadAfter::parse("0:x", 8).unwrap_err().contains("`0:x`"));
        assert!(ReadAfter::parse("9:1", 8)
            .unwrap_err()
            .contains("partition 9"));
        assert!(ReadAfter::parse("1:-4", 8).is_err());
        assert!(ReadAfter::parse("", 8).is_err());
    }
}
