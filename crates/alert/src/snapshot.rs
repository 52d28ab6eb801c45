//! The state file: every instance and each ruleset's progress as of a journal offset
//! (`FORMAT.md`). Written to `snapshot.tmp`, synced, renamed over `snapshot`, directory synced:
//! a reader finds the old file or the new one, whole.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::record::{decode_instance, encode_instance, Dec, DecodeError, Enc};
use crate::state::Instance;

pub const MAGIC: [u8; 8] = *b"STRALSNP";
pub const VERSION: u16 = 1;
/// Largest snapshot read (a million instances of ~1 KiB).
pub const SNAPSHOT_BYTES_MAX: u64 = 2 << 30;
const HEADER_BYTES: usize = 56;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The first journal record this state does not reflect.
    pub offset: u64,
    pub epoch: u64,
    /// The newest Cycle record's period end reflected.
    pub last_cycle_ms: i64,
    pub written_ms: i64,
    /// (ruleset, newest period end evaluated).
    pub progress: Vec<(String, i64)>,
    pub instances: Vec<Instance>,
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.0.extend_from_slice(&MAGIC);
        e.u16(VERSION);
        e.u16(0);
        e.u32(0);
        e.u64(self.offset);
        e.u64(self.epoch);
        e.i64(self.last_cycle_ms);
        e.i64(self.written_ms);
        e.u32(self.progress.len() as u32);
        e.u32(self.instances.len() as u32);
        for (r, t) in &self.progress {
            e.str(r);
            e.i64(*t);
        }
        for i in &self.instances {
            e.str(&i.ruleset);
            encode_instance(&mut e, i);
        }
        let crc = crc32c::crc32c(&e.0);
        e.u32(crc);
        e.0
    }

    pub fn decode(b: &[u8]) -> Result<Snapshot, DecodeError> {
        if b.len() < HEADER_BYTES + 4 {
            return Err(DecodeError("snapshot shorter than its header".into()));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        let mut c = [0u8; 4];
        c.copy_from_slice(crc);
        if crc32c::crc32c(body) != u32::from_le_bytes(c) {
            return Err(DecodeError("snapshot checksum mismatch".into()));
        }
        if body[..8] != MAGIC {
            return Err(DecodeError("not a snapshot (magic)".into()));
        }
        let mut d = Dec::new(body);
        d.pos = 8;
        let v = d.u16("version")?;
        if v != VERSION {
            return Err(DecodeError(format!(
                "snapshot version {v}, this build reads {VERSION}"
            )));
        }
        d.u16("reserved")?;
        d.u32("reserved")?;
        let mut s = Snapshot {
            offset: d.u64("offset")?,
            epoch: d.u64("epoch")?,
            last_cycle_ms: d.i64("last cycle")?,
            written_ms: d.i64("written")?,
            ..Snapshot::default()
        };
        let progress = d.count("progress", 12)?;
        let instances = d.count("instances", 68)?;
        for _ in 0..progress {
            s.progress.push((d.str("ruleset")?, d.i64("progress")?));
        }
        s.instances.reserve(instances);
        for _ in 0..instances {
            let ruleset = d.str("ruleset")?;
            s.instances.push(decode_instance(&mut d, &ruleset)?);
        }
        d.done()?;
        Ok(s)
    }

    /// Writes `dir/snapshot` atomically.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join("snapshot.tmp");
        let bytes = self.encode();
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        fs::rename(&tmp, dir.join("snapshot"))?;
        File::open(dir)?.sync_all()
    }

    /// Reads `dir/snapshot`: `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Snapshot>, String> {
        let path = dir.join("snapshot");
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        if meta.len() > SNAPSHOT_BYTES_MAX {
            return Err(format!(
                "{}: larger than {SNAPSHOT_BYTES_MAX} bytes",
                path.display()
            ));
        }
        let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Snapshot::decode(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    #[test]
    fn round_trip_and_damage() {
        let mut i = Instance::new(9, "r", "s|ST[a:b]");
        i.state = State::Pending;
        i.active_ms = 60_000;
        let s = Snapshot {
            offset: 42,
            epoch: 7,
            last_cycle_ms: 120_000,
            written_ms: 125_000,
            progress: vec![("r".into(), 120_000)],
            instances: vec![i],
        };
        let b = s.encode();
        assert_eq!(Snapshot::decode(&b).unwrap(), s);
        for byte in [0, 20, b.len() / 2, b.len() - 1] {
            let mut bad = b.clone();
            bad[byte] ^= 1;
            assert!(Snapshot::decode(&bad).is_err());
        }
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Snapshot::read(dir.path()).unwrap(), None);
        s.write(dir.path()).unwrap();
        assert_eq!(Snapshot::read(dir.path()).unwrap(), Some(s));
    }
}
