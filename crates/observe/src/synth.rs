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
