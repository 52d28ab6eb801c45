//! Link, IP and TCP headers: from a captured frame to one TCP segment.

use capture::linktype;

/// An endpoint: an IPv6 address (IPv4 mapped into `::ffff:a.b.c.d`) and a port.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: [u8; 16],
    pub port: u16,
}

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// One TCP segment as captured.
pub struct Segment<'a> {
    pub src: Endpoint,
    pub dst: Endpoint,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: &'a [u8],
}

/// The TCP segment in a frame of `link` type, or `None` for anything else (or a damaged header).
pub fn segment(link: u32, frame: &[u8]) -> Option<Segment<'_>> {
    let ip = match link {
        linktype::ETHERNET => ethernet(frame)?,
        linktype::LINUX_SLL => frame.get(16..)?,
        linktype::RAW => frame,
        linktype::NULL => frame.get(4..)?,
        _ => return None,
    };
    match ip.first()? >> 4 {
        4 => ipv4(ip),
        6 => ipv6(ip),
        _ => None,
    }
}

/// The payload of an Ethernet II frame, past up to two VLAN tags.
fn ethernet(frame: &[u8]) -> Option<&[u8]> {
    let mut at = 12;
    for _ in 0..3 {
        let ty = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
        match ty {
            0x8100 | 0x88a8 => at += 4,
            0x0800 | 0x86dd => return frame.get(at + 2..),
            _ => return None,
        }
    }
    None
}

fn ipv4(ip: &[u8]) -> Option<Segment<'_>> {
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let frag = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]);
    if *ip.get(9)? != 6 || frag & 0x3fff != 0 || ihl < 20 {
        return None;
    }
    // A zero total length is what segmentation offload leaves on large captured segments.
    let end = if total == 0 {
        ip.len()
    } else {
        total.min(ip.len())
    };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src[10..12].copy_from_slice(&[0xff, 0xff]);
    dst[10..12].copy_from_slice(&[0xff, 0xff]);
    src[12..].copy_from_slice(ip.get(12..16)?);
    dst[12..].copy_from_slice(ip.get(16..20)?);
    tcp(src, dst, ip.get(ihl..end)?)
}

fn ipv6(ip: &[u8]) -> Option<Segment<'_>> {
    if *ip.get(6)? != 6 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
    let end = if len == 0 {
        ip.len()
    } else {
        (40 + len).min(ip.len())
    };
    let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
    let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
    tcp(src, dst, ip.get(40..end)?)
}

fn tcp(src: [u8; 16], dst: [u8; 16], t: &[u8]) -> Option<Segment<'_>> {
    let be16 =
        |at: usize| -> Option<u16> { Some(u16::from_be_bytes([*t.get(at)?, *t.get(at + 1)?])) };
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(t.get(at..at + 4)?.try_into().ok()?))
    };
    let off = usize::from(t.get(12)? >> 4) * 4;
    if off < 20 {
        return None;
    }
    Some(Segment {
        src: Endpoint {
            addr: src,
            port: be16(0)?,
        },
        dst: Endpoint {
            addr: dst,
            port: be16(2)?,
        },
        seq: be32(4)?,
        ack: be32(8)?,
        flags: *t.get(13)?,
        payload: t.get(off..)?,
    })
}

/// Test frames: Ethernet + IPv4 + TCP with the given payload.
pub fn build_frame(
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + 20 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.1.to_be_bytes());
    f.extend_from_slice(&dst.1.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ethernet_ipv4_tcp() {
        let f = build_frame(
            ([127, 0, 0, 1], 40000),
            ([127, 0, 0, 1], 80),
            7,
            9,
            ACK,
            b"hi",
        );
        let s = segment(linktype::ETHERNET, &f).unwrap();
        assert_eq!(
            (s.src.port, s.dst.port, s.seq, s.ack, s.payload),
            (40000, 80, 7, 9, &b"hi"[..])
        );
        assert!(segment(linktype::RAW, &f[14..]).is_some());
        assert!(segment(linktype::ETHERNET, &f[..30]).is_none());
        assert!(segment(99, &f).is_none());
    }
}
