//! The host's stable identity: chosen once and kept in `<root>/etc/strata/host-id`, so wiping
//! the agent's state directory (or losing any receipt) never makes the host a new one.
//!
//! Order: the kept file; else derived from `<root>/etc/machine-id` (hashed with an
//! application key, as systemd advises, so the machine id itself is never sent); else 16 random
//! bytes. The id is 32 lower-case hex digits.

use std::fs;
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Length of a host id, in hex digits.
pub const HOST_ID_CHARS: usize = 32;
/// Mixed into the machine id so the host id cannot be turned back into it.
const MACHINE_ID_KEY: &[u8] = b"strata-agent host id v1";

pub fn valid(id: &str) -> bool {
    id.len() == HOST_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the id came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Kept,
    MachineId,
    Random,
}

/// The host id: the kept one, or a new one (not yet written).
pub fn choose(root: &Path) -> Result<(String, Origin), String> {
    let kept = root.join("etc/strata/host-id");
    match fs::read_to_string(&kept) {
        Ok(text) if valid(text.trim()) => return Ok((text.trim().to_string(), Origin::Kept)),
        Ok(_) => {
            return Err(format!(
                "{}: not a host id ({HOST_ID_CHARS} lower-case hex digits); remove it to choose a \
                 new one",
                kept.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", kept.display())),
    }
    let machine = root.join("etc/machine-id");
    match fs::read_to_string(&machine) {
        Ok(text) if text.trim().len() >= 16 => {
            let mut h = Sha256::new();
            h.update(MACHINE_ID_KEY);
            h.update(text.trim().as_bytes());
            let digest = h.finalize();
            return Ok((hex(&digest[..HOST_ID_CHARS / 2]), Origin::MachineId));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", machine.display())),
    }
    let mut bytes = [0u8; HOST_ID_CHARS / 2];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok((hex(&bytes), Origin::Random))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn kept_then_machine_id_then_random() {
        let root = tempfile::tempdir().unwrap();
        let (a, o) = choose(root.path()).unwrap();
        assert!(valid(&a), "{a}");
        assert_eq!(o, Origin::Random);
        let (b, _) = choose(root.path()).unwrap();
        assert_ne!(a, b, "nothing kept yet: a new random id each time");
        fs::create_dir_all(root.path().join("etc/strata")).unwrap();
        fs::write(
            root.path().join("etc/machine-id"),
            "0123456789abcdef0123456789abcdef\n",
        )
        .unwrap();
        let (m1, o) = choose(root.path()).unwrap();
        let (m2, _) = choose(root.path()).unwrap();
        assert_eq!((m1.as_str(), o), (m2.as_str(), Origin::MachineId));
        assert!(!m1.contains("0123456789abcdef"));
        fs::write(root.path().join("etc/strata/host-id"), format!("{a}\n")).unwrap();
        assert_eq!(choose(root.path()).unwrap(), (a, Origin::Kept));
        fs::write(root.path().join("etc/strata/host-id"), "nope").unwrap();
        assert!(choose(root.path()).unwrap_err().contains("not a host id"));
    }
}
