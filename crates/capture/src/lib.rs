//! `capture`: packets with the kernel's timestamps, live or from a file.
//!
//! - [`ring`]: an `AF_PACKET` socket with a `TPACKET_V3` memory-mapped ring (Linux): the kernel
//!   stamps each packet as it is queued and fills whole blocks that are read in place, with no
//!   copy and no system call per packet. The only `unsafe` code of the workspace outside generated
//!   code lives there; each block states the invariant it relies on.
//! - [`bpf`]: classic BPF programs that keep TCP segments to or from a set of ports, attached to
//!   the socket so that the kernel drops everything else before it reaches the ring, and an
//!   interpreter that runs them in tests.
//! - [`pcap`]: the classic pcap file format (read and write, micro- or nanosecond stamps).
#![deny(unsafe_code)]

pub mod bpf;
pub mod pcap;
pub mod ring;

/// Link-layer types (pcap `LINKTYPE_*` numbers) this workspace reads.
pub mod linktype {
    /// BSD loopback: a 4-byte host-order address family, then the IP packet.
    pub const NULL: u32 = 0;
    /// Ethernet II (also Linux `lo` through `AF_PACKET`: a 14-byte header of zero addresses).
    pub const ETHERNET: u32 = 1;
    /// The IP packet with no link header.
    pub const RAW: u32 = 101;
    /// Linux "cooked" capture v1 (16-byte header), what `tcpdump -i any` writes.
    pub const LINUX_SLL: u32 = 113;
}

/// One captured packet: the kernel's receive time and the bytes kept (at most the snap length).
#[derive(Clone, Copy)]
pub struct Packet<'a> {
    /// Nanoseconds since the Unix epoch, as the kernel (or the file) stamped it.
    pub ts_ns: u64,
    /// The packet's length on the wire; `data` may be shorter when the snap length cut it.
    pub wire_len: u32,
    /// The bytes from the link-layer header on.
    pub data: &'a [u8],
}
