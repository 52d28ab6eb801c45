//! Classic BPF: the port filter the ring's socket runs in the kernel, and an interpreter for it.
//!
//! The filter keeps IPv4 and IPv6 TCP segments (Ethernet framing, which Linux `lo` also uses
//! through `AF_PACKET`) whose source or destination port is one of the observed ports, and drops
//! everything else in the kernel, so that unrelated traffic never costs a ring slot. IPv4
//! fragments after the first are dropped (they carry no TCP header); IPv6 extension headers are
//! not walked (TCP must be the first next header), which is what Linux sends for plain TCP.

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// Most ports one filter tests; each costs two instructions, and jumps are 8-bit.
pub const PORTS_MAX: usize = 48;
/// Bytes of a packet the filter keeps: all of it (the protocol parsers need the payload).
pub const SNAP_LEN: u32 = 262_144;

const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
/// The kernel's ancillary offset for the packet type (`SKF_AD_OFF + SKF_AD_PKTTYPE`).
const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
/// `PACKET_OUTGOING`: a copy of a packet this host sends.
const OUTGOING: u32 = 4;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// A jump target while the program is assembled: resolved to 8-bit offsets at the end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Next,
    Accept,
    Drop,
    Label(usize),
}

struct Asm {
    code: Vec<(u16, Target, Target, u32)>,
    labels: Vec<usize>,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, Target::Next, Target::Next, k));
    }

    fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.code.push((code, jt, jf, k));
    }

    fn label(&mut self) -> usize {
        self.labels.push(usize::MAX);
        self.labels.len() - 1
    }

    fn place(&mut self, label: usize) {
        if let Some(slot) = self.labels.get_mut(label) {
            *slot = self.code.len();
        }
    }

    /// Tests the half-word just loaded against every port: a match accepts.
    fn ports(&mut self, ports: &[u16]) {
        for &p in ports {
            self.jump(JEQ_K, u32::from(p), Target::Accept, Target::Next);
        }
    }

    fn finish(mut self) -> Option<Vec<Insn>> {
        let accept = self.code.len();
        self.op(RET_K, SNAP_LEN);
        let drop = self.code.len();
        self.op(RET_K, 0);
        let resolve = |at: usize, t: Target, labels: &[usize]| -> Option<u8> {
            let to = match t {
                Target::Next => at + 1,
                Target::Accept => accept,
                Target::Drop => drop,
                Target::Label(l) => *labels.get(l)?,
            };
            u8::try_from(to.checked_sub(at + 1)?).ok()
        };
        let mut out = Vec::with_capacity(self.code.len());
        for (at, &(code, jt, jf, k)) in self.code.iter().enumerate() {
            let (jt, jf) = if code & 0x07 == 0x05 {
                (
                    resolve(at, jt, &self.labels)?,
                    resolve(at, jf, &self.labels)?,
                )
            } else {
                (0, 0)
            };
            out.push(Insn { code, jt, jf, k });
        }
        Some(out)
    }
}

/// The program that keeps TCP to or from any of `ports` (at most [`PORTS_MAX`]), or `None` when
/// there are too many ports for 8-bit jumps.
pub fn tcp_ports(ports: &[u16]) -> Option<Vec<Insn>> {
    if ports.is_empty() || ports.len() > PORTS_MAX {
        return None;
    }
    let mut a = Asm {
        code: Vec::new(),
        labels: Vec::new(),
    };
    let v6 = a.label();
    let v4_dst = a.label();
    let v6_dst = a.label();
    // This host's own transmissions are seen again on the way in (on `lo`, every packet): the
    // outgoing copies are dropped in the kernel, so each packet costs one ring slot.
    a.op(LD_W_ABS, AD_PKTTYPE);
    a.jump(JEQ_K, OUTGOING, Target::Drop, Target::Next);
    a.op(LD_H_ABS, 12);
    a.jump(JEQ_K, 0x0800, Target::Next, Target::Label(v6));
    a.op(LD_B_ABS, 23);
    a.jump(JEQ_K, 6, Target::Next, Target::Drop);
    a.op(LD_H_ABS, 20);
    a.jump(JSET_K, 0x1fff, Target::Drop, Target::Next);
    a.op(LDX_MSH, 14);
    a.op(LD_H_IND, 14);
    a.ports(ports);
    a.jump(JEQ_K, 0x1_0000, Target::Drop, Target::Label(v4_dst));
    a.place(v4_dst);
    a.op(LD_H_IND, 16);
    a.ports(ports);
    a.jump(JEQ_K, 0x1_0000, Target::Drop, Target::Drop);
    a.place(v6);
    a.jump(JEQ_K, 0x86dd, Target::Next, Target::Drop);
    a.op(LD_B_ABS, 20);
    a.jump(JEQ_K, 6, Target::Next, Target::Drop);
    a.op(LD_H_ABS, 54);
    a.ports(ports);
    a.jump(JEQ_K, 0x1_0000, Target::Drop, Target::Label(v6_dst));
    a.place(v6_dst);
    a.op(LD_H_ABS, 56);
    a.ports(ports);
    a.jump(JEQ_K, 0x1_0000, Target::Drop, Target::Drop);
    a.finish()
}

/// Runs a program over a packet as the kernel would: the number of bytes to keep (0 = drop);
/// `pkttype` is what the kernel would give for the packet type (0 = to this host).
/// Supports the instructions [`tcp_ports`] emits; anything else, or a read past the packet's end,
/// drops the packet, as in the kernel.
pub fn run(prog: &[Insn], pkt: &[u8], pkttype: u32) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let half = |at: usize| -> Option<u32> {
        let b = pkt.get(at..at.checked_add(2)?)?;
        Some(u32::from(u16::from_be_bytes([b[0], b[1]])))
    };
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let k = i.k as usize;
        let step = match i.code {
            LD_W_ABS if i.k == AD_PKTTYPE => {
                a = pkttype;
                Some(())
            }
            LD_H_ABS => half(k).map(|v| a = v),
            LD_B_ABS => pkt.get(k).map(|&b| a = u32::from(b)),
            LD_H_IND => half(x as usize + k).map(|v| a = v),
            LDX_MSH => pkt.get(k).map(|&b| x = 4 * u32::from(b & 0x0f)),
            JEQ_K | JSET_K => {
                let hit = if i.code == JEQ_K {
                    a == i.k
                } else {
                    a & i.k != 0
                };
                pc += usize::from(if hit { i.jt } else { i.jf });
                Some(())
            }
            RET_K => return i.k,
            _ => None,
        };
        if step.is_none() {
            return 0;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth_ipv4_tcp(sport: u16, dport: u16, ihl: u8) -> Vec<u8> {
        let mut p = vec![0u8; 14];
        p[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = vec![0u8; usize::from(ihl) * 4];
        ip[0] = 0x40 | ihl;
        ip[9] = 6;
        p.extend_from_slice(&ip);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0u8; 16]);
        p
    }

    fn eth_ipv6_tcp(sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 14];
        p[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[6] = 6;
        p.extend_from_slice(&ip);
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&[0u8; 16]);
        p
    }

    #[test]
    fn keeps_only_the_ports() {
        let prog = tcp_ports(&[8080, 5432]).unwrap();
        assert_eq!(run(&prog, &eth_ipv4_tcp(40000, 8080, 5), 0), SNAP_LEN);
        assert_eq!(run(&prog, &eth_ipv4_tcp(40000, 8080, 5), OUTGOING), 0);
        assert_eq!(run(&prog, &eth_ipv4_tcp(5432, 40000, 5), 0), SNAP_LEN);
        assert_eq!(run(&prog, &eth_ipv4_tcp(5432, 40000, 8), 0), SNAP_LEN);
        assert_eq!(run(&prog, &eth_ipv4_tcp(40000, 40001, 5), 0), 0);
        assert_eq!(run(&prog, &eth_ipv6_tcp(40000, 5432), 0), SNAP_LEN);
        assert_eq!(run(&prog, &eth_ipv6_tcp(8080, 1), 0), SNAP_LEN);
        assert_eq!(run(&prog, &eth_ipv6_tcp(1, 2), 0), 0);
        let mut udp = eth_ipv4_tcp(40000, 8080, 5);
        udp[23] = 17;
        assert_eq!(run(&prog, &udp, 0), 0);
        let mut frag = eth_ipv4_tcp(40000, 8080, 5);
        frag[21] = 8;
        assert_eq!(run(&prog, &frag, 0), 0);
        assert_eq!(run(&prog, &[0u8; 10], 0), 0);
    }

    #[test]
    fn bounds_the_port_list() {
        assert!(tcp_ports(&[]).is_none());
        let many: Vec<u16> = (1..=PORTS_MAX as u16).collect();
        let prog = tcp_ports(&many).unwrap();
        assert_eq!(
            run(&prog, &eth_ipv4_tcp(9, PORTS_MAX as u16, 5), 0),
            SNAP_LEN
        );
        assert_eq!(run(&prog, &eth_ipv6_tcp(PORTS_MAX as u16 + 1, 60000), 0), 0);
        let too_many: Vec<u16> = (1..=PORTS_MAX as u16 + 1).collect();
        assert!(tcp_ports(&too_many).is_none());
    }
}
