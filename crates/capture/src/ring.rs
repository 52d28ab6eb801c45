//! An `AF_PACKET` socket with a `TPACKET_V3` receive ring (Linux).
//!
//! The kernel writes packets into fixed-size blocks of a ring shared with this process by `mmap`,
//! stamps each with its receive time (nanoseconds), and hands a whole block over by setting its
//! status word to `TP_STATUS_USER`; the reader walks the block in place and gives it back by
//! storing `TP_STATUS_KERNEL`. A block is handed over when full or when its retire timeout runs
//! out, so a quiet link still delivers within [`RingConfig::retire_ms`].
//!
//! Packets this host sends are seen twice on `lo` (once leaving, once arriving); the port filter
//! drops the copies the kernel marks `PACKET_OUTGOING` (and the ring skips any that reach it), so
//! each is counted once.
//!
//! Headers are read from the block's bytes at the offsets of the kernel's `struct
//! tpacket_block_desc`, `struct tpacket3_hdr` and `struct sockaddr_ll` (`linux/if_packet.h`).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::bpf::Insn;
use crate::Packet;

const TPACKET_V3: libc::c_int = 2;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_OUTGOING: u8 = 4;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const ETH_P_ALL: u16 = 0x0003;
/// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))`: where the `sockaddr_ll` follows each header.
const SLL_OFFSET: usize = 48;
/// Bytes of a block header the reader needs before it trusts the block's own offsets.
const BLOCK_HEADER: usize = 48;

/// Ring geometry. The ring's memory is `block_bytes × blocks`.
#[derive(Clone, Copy)]
pub struct RingConfig {
    /// Bytes per block; a power of two, a multiple of the page size.
    pub block_bytes: u32,
    /// Blocks in the ring.
    pub blocks: u32,
    /// Milliseconds after which the kernel hands over a block that is not full.
    pub retire_ms: u32,
}

impl Default for RingConfig {
    fn default() -> RingConfig {
        RingConfig {
            block_bytes: 1 << 20,
            blocks: 64,
            retire_ms: 20,
        }
    }
}

/// The kernel's counters since the previous call (reading them resets them).
#[derive(Clone, Copy, Default)]
pub struct Stats {
    /// Packets the filter passed to the socket, dropped ones included.
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
}

/// The shared ring: unmapped when dropped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what a successful `mmap` returned, unmapped once here;
        // no `Block` borrowing it can outlive the `Ring` that owns this mapping.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// A live capture on one interface.
pub struct Ring {
    fd: OwnedFd,
    map: Mapping,
    cfg: RingConfig,
    next: u32,
}

// SAFETY: the mapping is owned by the `Ring` (no aliasing `Ring` exists) and all access to it goes
// through `&mut self`, so moving the `Ring` to another thread moves sole access with it.
unsafe impl Send for Ring {}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` points to a live `T` of `len` bytes for the duration of the call; the kernel
    // copies it and keeps no pointer.
    check(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (v as *const T).cast(), len) })
        .map(|_| ())
}

/// The kernel's `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const Insn,
}

/// The kernel's `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

impl Ring {
    /// Opens a ring on `iface` (`"lo"`, `"eth0"`; `"any"` is not supported) with `filter`
    /// attached before any packet is queued. Needs `CAP_NET_RAW`.
    pub fn open(iface: &str, filter: &[Insn], cfg: RingConfig) -> io::Result<Ring> {
        let ifindex = ifindex(iface)?;
        let proto = ETH_P_ALL.to_be();
        // SAFETY: a plain system call with constant arguments; the result is checked.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                proto.into(),
            )
        })?;
        // SAFETY: `raw` is a descriptor the call above just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        attach_filter(&fd, filter)?;
        setsockopt(&fd, libc::SOL_PACKET, PACKET_VERSION, &TPACKET_V3)?;
        let req = TpacketReq3 {
            block_size: cfg.block_bytes,
            block_nr: cfg.blocks,
            frame_size: 2048,
            frame_nr: cfg.block_bytes / 2048 * cfg.blocks,
            retire_blk_tov: cfg.retire_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(&fd, libc::SOL_PACKET, PACKET_RX_RING, &req)?;
        let map = map_ring(&fd, cfg)?;
        bind(&fd, ifindex, proto)?;
        let ring = Ring {
            fd,
            map,
            cfg,
            next: 0,
        };
        // Packets queued before the filter or the bind took effect are not wanted: reset the
        // counters so the first `stats` reports only this capture's own.
        ring.stats()?;
        Ok(ring)
    }

    /// Waits up to `timeout_ms` for the next block and gives it to `each` packet by packet, then
    /// returns the block to the kernel. Returns the packets seen (0 on a timeout).
    pub fn next_block(
        &mut self,
        timeout_ms: i32,
        each: &mut dyn FnMut(Packet<'_>),
    ) -> io::Result<usize> {
        let status = self.block_status(self.next);
        if status.load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            self.wait(timeout_ms)?;
            if status.load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                return Ok(0);
            }
        }
        let n = walk_block(self.block(self.next), each);
        status.store(TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.cfg.blocks;
        Ok(n)
    }

    fn wait(&self, timeout_ms: i32) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one live `pollfd`, the count passed is 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        match check(rc) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// The status word of block `i`, shared with the kernel.
    fn block_status(&self, i: u32) -> &AtomicU32 {
        let at = i as usize * self.cfg.block_bytes as usize + 8;
        // SAFETY: `at` is inside the mapping (i < blocks) and 4-byte aligned (blocks are page
        // aligned, the field is at offset 8); the kernel and this process access the word
        // concurrently, which is what an atomic is for, and the mapping outlives `&self`.
        unsafe { &*self.map.ptr.add(at).cast::<AtomicU32>() }
    }

    /// Block `i`'s bytes. Only called while its status is `TP_STATUS_USER`: the kernel does not
    /// write a block it has handed over until the reader stores `TP_STATUS_KERNEL`.
    fn block(&self, i: u32) -> &[u8] {
        let size = self.cfg.block_bytes as usize;
        // SAFETY: the range is one whole block inside the mapping; while the block is ours (see
        // above) no one writes it, and the slice does not outlive the status store in
        // `next_block` (it is borrowed only by `walk_block`, before that store).
        unsafe { std::slice::from_raw_parts(self.map.ptr.add(i as usize * size), size) }
    }

    /// The kernel's packet and drop counters since the last call.
    pub fn stats(&self) -> io::Result<Stats> {
        let mut v = [0u32; 3];
        let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
        // SAFETY: `v` is a writable 12-byte buffer and `len` says so; the kernel writes at most
        // `len` bytes (`struct tpacket_stats_v3`) and updates `len`.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                v.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        Ok(Stats {
            packets: u64::from(v[0]),
            drops: u64::from(v[1]),
        })
    }
}

fn ifindex(iface: &str) -> io::Result<libc::c_int> {
    let name = CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name holds NUL"))?;
    // SAFETY: `name` is a NUL-terminated string that lives across the call.
    let idx = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if idx == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface `{iface}`"),
        ));
    }
    libc::c_int::try_from(idx).map_err(|_| io::Error::other("interface index out of range"))
}

fn attach_filter(fd: &OwnedFd, filter: &[Insn]) -> io::Result<()> {
    let len = u16::try_from(filter.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    let prog = SockFprog {
        len,
        filter: filter.as_ptr(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
}

fn map_ring(fd: &OwnedFd, cfg: RingConfig) -> io::Result<Mapping> {
    let len = cfg.block_bytes as usize * cfg.blocks as usize;
    // SAFETY: maps the ring the kernel just allocated for this socket (PACKET_RX_RING), at an
    // address of the kernel's choosing; the result is checked against MAP_FAILED.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping {
        ptr: ptr.cast(),
        len,
    })
}

fn bind(fd: &OwnedFd, ifindex: libc::c_int, proto: u16) -> io::Result<()> {
    // SAFETY: `sockaddr_ll` is plain data for which all-zero bytes are a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `sll` is a live `sockaddr_ll` of `len` bytes; the kernel copies it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            len,
        )
    })
    .map(|_| ())
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Walks one block's packets (safe code: every offset is checked against the block).
fn walk_block(block: &[u8], each: &mut dyn FnMut(Packet<'_>)) -> usize {
    if block.len() < BLOCK_HEADER {
        return 0;
    }
    let num = u32_at(block, 12).unwrap_or(0);
    let mut at = u32_at(block, 16).unwrap_or(0) as usize;
    let mut seen = 0;
    for _ in 0..num {
        let Some(hdr) = block.get(at..) else { break };
        let Some((pkt, outgoing)) = packet_at(hdr) else {
            break;
        };
        if !outgoing {
            each(pkt);
            seen += 1;
        }
        match u32_at(hdr, 0) {
            Some(0) | None => break,
            Some(next) => at += next as usize,
        }
    }
    seen
}

/// One `tpacket3_hdr` and its packet: the packet and whether this host sent it.
fn packet_at(hdr: &[u8]) -> Option<(Packet<'_>, bool)> {
    let sec = u64::from(u32_at(hdr, 4)?);
    let nsec = u64::from(u32_at(hdr, 8)?);
    let snap = u32_at(hdr, 12)? as usize;
    let wire_len = u32_at(hdr, 16)?;
    let mac = usize::from(u16_at(hdr, 24)?);
    let pkttype = *hdr.get(SLL_OFFSET + 10)?;
    let data = hdr.get(mac..mac.checked_add(snap)?)?;
    let ts_ns = sec * 1_000_000_000 + nsec;
    Some((
        Packet {
            ts_ns,
            wire_len,
            data,
        },
        pkttype == PACKET_OUTGOING,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn walks_a_block_and_skips_outgoing_copies() {
        let mut block = vec![0u8; 4096];
        put(&mut block, 12, 3);
        put(&mut block, 16, 64);
        for (i, (at, pkttype)) in [(64usize, 0u8), (192, PACKET_OUTGOING), (320, 0)]
            .iter()
            .enumerate()
        {
            let h = &mut block[*at..];
            put(h, 0, if i < 2 { 128 } else { 0 });
            put(h, 4, 10 + i as u32);
            put(h, 8, 5);
            put(h, 12, 4);
            put(h, 16, 60);
            h[24..26].copy_from_slice(&80u16.to_ne_bytes());
            h[SLL_OFFSET + 10] = *pkttype;
            h[80..84].copy_from_slice(&[i as u8; 4]);
        }
        let mut got = Vec::new();
        let n = walk_block(&block, &mut |p| {
            got.push((p.ts_ns, p.data.to_vec(), p.wire_len))
        });
        assert_eq!(n, 2);
        assert_eq!(got[0], (10_000_000_005, vec![0; 4], 60));
        assert_eq!(got[1], (12_000_000_005, vec![2; 4], 60));
    }

    #[test]
    fn a_damaged_block_ends_the_walk() {
        let mut block = vec![0u8; 256];
        put(&mut block, 12, 1000);
        put(&mut block, 16, 250);
        assert_eq!(walk_block(&block, &mut |_| panic!("no packet fits")), 0);
    }
}
