//! NRPE packets, versions 2, 3 and 4, as the NRPE daemon and `check_nrpe` lay them out: a
//! 10-byte header (version, type, CRC-32, result code; big-endian) and then, for version 2, a
//! fixed 1024-byte NUL-terminated buffer and 2 bytes of struct padding, or, for versions 3 and
//! 4, 2 bytes of alignment, a 4-byte buffer length and the buffer. The CRC covers the whole
//! packet with its own field zeroed. Version 3 counts 3 bytes of the C struct's trailing
//! padding into its size and CRC (as zeros); version 4 is the same layout without them.

use std::fmt;

/// `packet_type` values.
pub const QUERY: u16 = 1;
pub const RESPONSE: u16 = 2;
/// Version 2's fixed buffer and whole packet size (the C struct with its padding).
pub const V2_BUFFER_BYTES: usize = 1024;
pub const V2_PACKET_BYTES: usize = 1036;
/// Header of versions 3 and 4 up to the buffer.
pub const V3_HEADER_BYTES: usize = 16;
/// Largest buffer accepted, as `check_nrpe` bounds it.
pub const BUFFER_BYTES_MAX: usize = 65_536;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V2,
    V3,
    V4,
}

impl Version {
    pub fn number(self) -> u16 {
        match self {
            Version::V2 => 2,
            Version::V3 => 3,
            Version::V4 => 4,
        }
    }

    /// Bytes of C struct padding a version counts after its buffer.
    fn tail(self) -> usize {
        match self {
            Version::V3 => 3,
            _ => 0,
        }
    }
}

/// A daemon's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub version: u16,
    /// The plugin's exit status (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
    pub result_code: i16,
    /// The plugin's output up to the buffer's first NUL.
    pub output: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketError(pub String);

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad NRPE packet: {}", self.0)
    }
}

impl std::error::Error for PacketError {}

/// A query packet for `command` (`name!arg!arg`). `None` if it does not fit the version
/// (1023 bytes for version 2) or holds a NUL.
pub fn encode_query(version: Version, command: &str) -> Option<Vec<u8>> {
    let text = command.as_bytes();
    if text.contains(&0) {
        return None;
    }
    let mut packet = match version {
        Version::V2 => {
            if text.len() >= V2_BUFFER_BYTES {
                return None;
            }
            let mut p = vec![0u8; V2_PACKET_BYTES];
            p[10..10 + text.len()].copy_from_slice(text);
            p
        }
        Version::V3 | Version::V4 => {
            if text.len() + 1 > BUFFER_BYTES_MAX {
                return None;
            }
            // check_nrpe sends at least a version 2 packet's size, NUL-padded.
            let size = (V3_HEADER_BYTES + text.len() + 1 + version.tail()).max(V2_PACKET_BYTES);
            let buffer_length = (size - V3_HEADER_BYTES - version.tail()) as u32;
            let mut p = vec![0u8; size];
            p[12..16].copy_from_slice(&buffer_length.to_be_bytes());
            p[16..16 + text.len()].copy_from_slice(text);
            p
        }
    };
    packet[0..2].copy_from_slice(&version.number().to_be_bytes());
    packet[2..4].copy_from_slice(&QUERY.to_be_bytes());
    let crc = crc32fast::hash(&packet);
    packet[4..8].copy_from_slice(&crc.to_be_bytes());
    Some(packet)
}

/// A response of `version` from the front of `buf`: `Ok(None)` when more bytes are needed.
pub fn decode_response(buf: &[u8], version: Version) -> Result<Option<Response>, PacketError> {
    if buf.len() < 10 {
        return Ok(None);
    }
    let got = u16::from_be_bytes([buf[0], buf[1]]);
    if got != version.number() {
        return Err(PacketError(format!(
            "version {got} in answer to a version {} query",
            version.number()
        )));
    }
    let kind = u16::from_be_bytes([buf[2], buf[3]]);
    if kind != RESPONSE {
        return Err(PacketError(format!(
            "packet type {kind}, expected a response"
        )));
    }
    let (size, buffer_at, buffer_len) = match version {
        Version::V2 => (V2_PACKET_BYTES, 10, V2_BUFFER_BYTES),
        Version::V3 | Version::V4 => {
            if buf.len() < V3_HEADER_BYTES {
                return Ok(None);
            }
            let len = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]) as usize;
            if len > BUFFER_BYTES_MAX {
                return Err(PacketError(format!(
                    "a buffer of {len} bytes, over {BUFFER_BYTES_MAX}"
                )));
            }
            (V3_HEADER_BYTES + len, V3_HEADER_BYTES, len)
        }
    };
    let Some(packet) = buf.get(..size) else {
        return Ok(None);
    };
    check_crc(packet, version)?;
    let buffer = &packet[buffer_at..buffer_at + buffer_len];
    let text = buffer.split(|&b| b == 0).next().unwrap_or(&[]);
    Ok(Some(Response {
        version: got,
        result_code: i16::from_be_bytes([packet[8], packet[9]]),
        output: String::from_utf8_lossy(text).into_owned(),
    }))
}

fn check_crc(packet: &[u8], version: Version) -> Result<(), PacketError> {
    let sent = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
    let mut h = crc32fast::Hasher::new();
    h.update(&packet[..4]);
    h.update(&[0; 4]);
    match version {
        Version::V2 => h.update(&packet[8..]),
        // The reader zeroes the alignment field before checking, as check_nrpe does.
        Version::V3 | Version::V4 => {
            h.update(&packet[8..10]);
            h.update(&[0; 2]);
            h.update(&packet[12..]);
        }
    }
    // Version 3's struct padding: not on the wire as read, zeros in the CRC.
    h.update(&[0u8; 3][..version.tail()]);
    let computed = h.finalize();
    match sent == computed {
        true => Ok(()),
        false => Err(PacketError("CRC-32 mismatch".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response as the daemon builds one.
    pub fn response(version: Version, code: i16, output: &str) -> Vec<u8> {
        let mut p = match version {
            Version::V2 => {
                let mut p = vec![0u8; V2_PACKET_BYTES];
                p[10..10 + output.len()].copy_from_slice(output.as_bytes());
                p
            }
            _ => {
                let len = output.len() + 1;
                let mut p = vec![0u8; V3_HEADER_BYTES + len + version.tail()];
                p[12..16].copy_from_slice(&(len as u32).to_be_bytes());
                p[16..16 + output.len()].copy_from_slice(output.as_bytes());
                p
            }
        };
        p[0..2].copy_from_slice(&version.number().to_be_bytes());
        p[2..4].copy_from_slice(&RESPONSE.to_be_bytes());
        p[8..10].copy_from_slice(&code.to_be_bytes());
        let crc = crc32fast::hash(&p);
        p[4..8].copy_from_slice(&crc.to_be_bytes());
        p
    }

    #[test]
    fn queries_have_the_daemons_sizes() {
        assert_eq!(encode_query(Version::V2, "check_load").unwrap().len(), 1036);
        let v4 = encode_query(Version::V4, "check_load").unwrap();
        assert_eq!((v4.len(), &v4[12..16]), (1036, &1020u32.to_be_bytes()[..]));
        let v3 = encode_query(Version::V3, "check_load").unwrap();
        assert_eq!(&v3[12..16], &1017u32.to_be_bytes()[..]);
        let long = "x".repeat(2000);
        assert_eq!(encode_query(Version::V4, &long).unwrap().len(), 16 + 2001);
        assert!(encode_query(Version::V2, &long).is_none());
        assert!(encode_query(Version::V4, "a\0b").is_none());
    }

    #[test]
    fn responses_round_trip_and_are_checked() {
        for v in [Version::V2, Version::V3, Version::V4] {
            let p = response(v, 1, "WARNING - load|load1=2;1;3");
            for cut in 0..p.len() - v.tail() {
                assert_eq!(decode_response(&p[..cut], v), Ok(None), "{v:?} cut {cut}");
            }
            let r = decode_response(&p, v).unwrap().unwrap();
            assert_eq!(
                (r.result_code, r.output.as_str()),
                (1, "WARNING - load|load1=2;1;3")
            );
            let mut bad = p.clone();
            bad[20] ^= 1;
            assert!(decode_response(&bad, v).is_err());
        }
        let p = response(Version::V4, 0, "OK");
        assert!(decode_response(&p, Version::V2).is_err());
    }
}
