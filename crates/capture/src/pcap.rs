//! Classic pcap files: a 24-byte file header, then per packet a 16-byte record header and the
//! captured bytes. Read: both byte orders, micro- and nanosecond stamps (magic `a1b2c3d4` /
//! `a1b23c4d`). Written: nanosecond stamps, little-endian. pcapng is not read.

use std::io::{self, Read, Write};

use crate::Packet;

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Largest record this reader accepts: a bound on the buffer a damaged length could ask for.
pub const RECORD_BYTES_MAX: u32 = 1 << 20;

/// Why a pcap file could not be read.
#[derive(Debug)]
pub enum Error {
    Io(io::Error),
    /// The first four bytes are not a pcap magic number (pcapng is not read).
    NotPcap,
    /// A record header names more bytes than [`RECORD_BYTES_MAX`].
    RecordTooLarge(u32),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::NotPcap => f.write_str("not a pcap file (pcapng is not read)"),
            Error::RecordTooLarge(n) => write!(f, "a packet record of {n} bytes (damaged file?)"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}

/// Reads packets one at a time into a buffer it keeps.
pub struct Reader<R> {
    input: R,
    swapped: bool,
    nanos: bool,
    linktype: u32,
    buf: Vec<u8>,
}

impl<R: Read> Reader<R> {
    /// Reads the file header.
    pub fn new(mut input: R) -> Result<Reader<R>, Error> {
        let mut h = [0u8; 24];
        input.read_exact(&mut h)?;
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            MAGIC_US => (false, false),
            MAGIC_NS => (false, true),
            m if m.swap_bytes() == MAGIC_US => (true, false),
            m if m.swap_bytes() == MAGIC_NS => (true, true),
            _ => return Err(Error::NotPcap),
        };
        let mut r = Reader {
            input,
            swapped,
            nanos,
            linktype: 0,
            buf: Vec::new(),
        };
        r.linktype = r.u32_at(&h, 20);
        Ok(r)
    }

    /// The file's link-layer type (see [`crate::linktype`]).
    pub fn linktype(&self) -> u32 {
        self.linktype
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&b[at..at + 4]);
        if self.swapped {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        }
    }

    /// The next packet, or `None` at the end of the file (a torn last record also ends it).
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, Error> {
        let mut h = [0u8; 16];
        if !read_full(&mut self.input, &mut h)? {
            return Ok(None);
        }
        let (sec, frac) = (self.u32_at(&h, 0), self.u32_at(&h, 4));
        let (incl, orig) = (self.u32_at(&h, 8), self.u32_at(&h, 12));
        if incl > RECORD_BYTES_MAX {
            return Err(Error::RecordTooLarge(incl));
        }
        self.buf.resize(incl as usize, 0);
        if !read_full(&mut self.input, &mut self.buf)? {
            return Ok(None);
        }
        let frac_ns = if self.nanos {
            u64::from(frac)
        } else {
            u64::from(frac) * 1000
        };
        let ts_ns = u64::from(sec) * 1_000_000_000 + frac_ns;
        Ok(Some(Packet {
            ts_ns,
            wire_len: orig,
            data: &self.buf,
        }))
    }
}

/// Fills `buf`; `false` if the input ended before the first byte or part way (a torn record).
fn read_full<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes a nanosecond-stamped pcap file.
pub struct Writer<W> {
    out: W,
}

impl<W: Write> Writer<W> {
    /// Writes the file header for `linktype` with a snap length of [`crate::bpf::SNAP_LEN`].
    pub fn new(mut out: W, linktype: u32) -> io::Result<Writer<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&crate::bpf::SNAP_LEN.to_le_bytes());
        h.extend_from_slice(&linktype.to_le_bytes());
        out.write_all(&h)?;
        Ok(Writer { out })
    }

    /// Appends one packet record.
    pub fn write(&mut self, p: &Packet<'_>) -> io::Result<()> {
        let incl = u32::try_from(p.data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet over 4 GiB"))?;
        let mut h = [0u8; 16];
        let sec = u32::try_from(p.ts_ns / 1_000_000_000).unwrap_or(u32::MAX);
        h[0..4].copy_from_slice(&sec.to_le_bytes());
        h[4..8].copy_from_slice(&((p.ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&incl.to_le_bytes());
        h[12..16].copy_from_slice(&p.wire_len.max(incl).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(p.data)
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linktype;

    #[test]
    fn round_trip() {
        let mut w = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
        w.write(&Packet {
            ts_ns: 1_700_000_000_123_456_789,
            wire_len: 3,
            data: b"abc",
        })
        .unwrap();
        w.write(&Packet {
            ts_ns: 5,
            wire_len: 0,
            data: b"",
        })
        .unwrap();
        let bytes = w.finish().unwrap();
        let mut r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.linktype(), linktype::ETHERNET);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.ts_ns, p.data), (1_700_000_000_123_456_789, &b"abc"[..]));
        assert_eq!(r.next_packet().unwrap().unwrap().ts_ns, 5);
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn reads_microsecond_big_endian_files_and_stops_at_a_torn_record() {
        let mut f = Vec::new();
        f.extend_from_slice(&MAGIC_US.to_be_bytes());
        f.extend_from_slice(&[
            0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 101,
        ]);
        f.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0x45]);
        f.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 9, 1]);
        let mut r = Reader::new(&f[..]).unwrap();
        assert_eq!(r.linktype(), linktype::RAW);
        assert_eq!(r.next_packet().unwrap().unwrap().ts_ns, 2_000_007_000);
        assert!(r.next_packet().unwrap().is_none());
        assert!(matches!(Reader::new(&[0u8; 24][..]), Err(Error::NotPcap)));
    }
}
