//! Made-up captures: TCP conversations of given request and response bytes, as Ethernet frames
//! with timestamps, for tests, fuzz seeds and the replay benchmark.

use capture::{linktype, pcap, Packet};

use crate::decode::{build_frame, ACK, FIN, SYN};

/// One TCP connection being written.
pub struct Conn {
    pub client: ([u8; 4], u16),
    pub server: ([u8; 4], u16),
    cseq: u32,
    sseq: u32,
}

impl Conn {
    pub fn new(client_port: u16, server_port: u16) -> Conn {
        Conn {
            client: ([127, 0, 0, 1], client_port),
            server: ([127, 0, 0, 2], server_port),
            cseq: 1000,
            sseq: 900_000,
        }
    }
}

/// Frames with capture times; time moves only when told.
#[derive(Default)]
pub struct Capture {
    pub frames: Vec<(u64, Vec<u8>)>,
    pub now: u64,
    /// Largest payload per segment.
    pub mss: usize,
}

impl Capture {
    pub fn new(start_ns: u64) -> Capture {
        Capture {
            frames: Vec::new(),
            now: start_ns,
            mss: 1460,
        }
    }

    pub fn wait(&mut self, ns: u64) {
        self.now += ns;
    }

    fn frame(&mut self, f: Vec<u8>) {
        self.frames.push((self.now, f));
    }

    pub fn open(&mut self, c: &mut Conn) {
        self.frame(build_frame(c.client, c.server, c.cseq, 0, SYN, b""));
        c.cseq = c.cseq.wrapping_add(1);
        self.frame(build_frame(
            c.server,
            c.client,
            c.sseq,
            c.cseq,
            SYN | ACK,
            b"",
        ));
        c.sseq = c.sseq.wrapping_add(1);
        self.frame(build_frame(c.client, c.server, c.cseq, c.sseq, ACK, b""));
    }

    /// Client → server bytes, split at the segment size, 1 µs apart.
    pub fn request(&mut self, c: &mut Conn, bytes: &[u8]) {
        for chunk in bytes.chunks(self.mss.max(1)) {
            self.frame(build_frame(c.client, c.server, c.cseq, c.sseq, ACK, chunk));
            c.cseq = c.cseq.wrapping_add(chunk.len() as u32);
            self.now += 1_000;
        }
    }

    /// Server → client bytes, split at the segment size, 1 µs apart.
    pub fn response(&mut self, c: &mut Conn, bytes: &[u8]) {
        for chunk in bytes.chunks(self.mss.max(1)) {
            self.frame(build_frame(c.server, c.client, c.sseq, c.cseq, ACK, chunk));
            c.sseq = c.sseq.wrapping_add(chunk.len() as u32);
            self.now += 1_000;
        }
    }

    pub fn close(&mut self, c: &mut Conn) {
        self.frame(build_frame(
            c.client,
            c.server,
            c.cseq,
            c.sseq,
            FIN | ACK,
            b"",
        ));
        c.cseq = c.cseq.wrapping_add(1);
        self.frame(build_frame(
            c.server,
            c.client,
            c.sseq,
            c.cseq,
            FIN | ACK,
            b"",
        ));
        c.sseq = c.sseq.wrapping_add(1);
        self.frame(build_frame(c.client, c.server, c.cseq, c.sseq, ACK, b""));
    }

    /// The capture as a pcap file (Ethernet).
    pub fn pcap(&self) -> Vec<u8> {
        write_pcap(&self.frames)
    }
}

/// Frames as a pcap file (Ethernet).
pub fn write_pcap(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut w = match pcap::Writer::new(Vec::new(), linktype::ETHERNET) {
        Ok(w) => w,
        Err(_) => return Vec::new(),
    };
    for (ts, f) in frames {
        let _ = w.write(&Packet {
            ts_ns: *ts,
            wire_len: f.len() as u32,
            data: f,
        });
    }
    w.finish().unwrap_or_default()
}

/// A small deterministic generator (xorshift64*), so an impaired capture is the same every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A capture with loss, reordering and duplicates: of the frames that carry TCP payload, 1 % are
/// dropped, 1 % swapped with the next frame and 1 % sent twice. Returns the new frames and the
/// `OBSID` of every request or response whose segments were touched.
pub fn impair(
    frames: &[(u64, Vec<u8>)],
    seed: u64,
) -> (Vec<(u64, Vec<u8>)>, std::collections::HashSet<u64>) {
    let mut rng = Rng::new(seed);
    let mut out: Vec<(u64, Vec<u8>)> = Vec::with_capacity(frames.len() + frames.len() / 50);
    let mut touched = std::collections::HashSet::new();
    let has_payload = |f: &[u8]| {
        crate::decode::segment(linktype::ETHERNET, f).is_some_and(|s| !s.payload.is_empty())
    };
    let mut mark = |f: &[u8], touched: &mut std::collections::HashSet<u64>| {
        if let Some(id) = crate::stream::find_probe(f) {
            touched.insert(id);
        }
    };
    let mut i = 0;
    while i < frames.len() {
        let (ts, f) = &frames[i];
        if !has_payload(f) {
            out.push((*ts, f.clone()));
            i += 1;
            continue;
        }
        match rng.next() % 100 {
            0 => mark(f, &mut touched),
            1 if i + 1 < frames.len() => {
                let (ts2, f2) = &frames[i + 1];
                mark(f, &mut touched);
                mark(f2, &mut touched);
                out.push((*ts, f2.clone()));
                out.push((*ts2, f.clone()));
                i += 1;
            }
            2 => {
                mark(f, &mut touched);
                out.push((*ts, f.clone()));
                out.push((*ts, f.clone()));
            }
            _ => out.push((*ts, f.clone())),
        }
        i += 1;
    }
    (out, touched)
}
