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

    pub fn draw(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.draw() % 100 < percent
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
    let mark = |f: &[u8], touched: &mut std::collections::HashSet<u64>| {
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
        match rng.draw() % 100 {
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

fn pg_msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![t];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn my_packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    p
}

/// What a connection of `proto` sends before its first request: (client, server) bytes.
fn opening(proto: crate::Protocol) -> Vec<(bool, Vec<u8>)> {
    match proto {
        crate::Protocol::Postgres => {
            let mut s = 16u32.to_be_bytes().to_vec();
            s.extend_from_slice(&196_608u32.to_be_bytes());
            s.extend_from_slice(b"user\0x\0\0");
            let mut r = pg_msg(b'R', &[0, 0, 0, 0]);
            r.extend(pg_msg(b'Z', b"I"));
            vec![(true, s), (false, r)]
        }
        crate::Protocol::Mysql => {
            let mut g = vec![10];
            g.extend_from_slice(b"10.11.6-MariaDB\0\x01\0\0\0abcdefgh\0\xff\xf7\x08\x02\0\0\x01\x15\0\0\0\0\0\0\0\0\0\0");
            vec![
                (false, my_packet(0, &g)),
                (true, my_packet(1, &[0x0d, 0xa2, 0xaa, 0x01, 0, 0, 0, 0])),
                (false, my_packet(2, &[0, 0, 0, 2, 0, 0, 0])),
            ]
        }
        _ => Vec::new(),
    }
}

/// Request `i` and its response in `proto`, each carrying `OBSID<i>`.
pub fn exchange(proto: crate::Protocol, i: u64) -> (Vec<u8>, Vec<u8>) {
    let id = format!("OBSID{i}");
    match proto {
        crate::Protocol::Http => (
            format!("GET /echo?{id} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{id}",
                id.len()
            )
            .into_bytes(),
        ),
        crate::Protocol::Postgres => {
            let mut r = pg_msg(b'T', b"..");
            r.extend(pg_msg(b'D', id.as_bytes()));
            r.extend(pg_msg(b'C', b"SELECT 1\0"));
            r.extend(pg_msg(b'Z', b"I"));
            (pg_msg(b'Q', format!("SELECT '{id}'\0").as_bytes()), r)
        }
        crate::Protocol::Redis => (
            format!("*2\r\n$4\r\nECHO\r\n${}\r\n{id}\r\n", id.len()).into_bytes(),
            format!("${}\r\n{id}\r\n", id.len()).into_bytes(),
        ),
        crate::Protocol::Mysql => {
            let mut r = my_packet(1, &[1]);
            r.extend(my_packet(
                2,
                b"\x03def\0\0\0\x01c\x01c\x0c\x21\0\0\0\0\xfd\0\0\0\0\0",
            ));
            let mut row = vec![id.len() as u8];
            row.extend_from_slice(id.as_bytes());
            r.extend(my_packet(3, &row));
            r.extend(my_packet(4, &[0xfe, 0, 0, 2, 0]));
            (my_packet(0, format!("\x03SELECT '{id}'").as_bytes()), r)
        }
        crate::Protocol::Kafka => {
            let mut q = Vec::new();
            q.extend_from_slice(&[0, 3, 0, 1]);
            q.extend_from_slice(&(i as i32).to_be_bytes());
            q.extend_from_slice(&(id.len() as u16).to_be_bytes());
            q.extend_from_slice(id.as_bytes());
            q.extend_from_slice(&[0, 0, 0, 0]);
            let mut req = (q.len() as u32).to_be_bytes().to_vec();
            req.extend(q);
            let mut resp = ((8 + id.len()) as u32).to_be_bytes().to_vec();
            resp.extend_from_slice(&(i as i32).to_be_bytes());
            resp.extend_from_slice(&[0, 0, 0, 0]);
            resp.extend_from_slice(id.as_bytes());
            (req, resp)
        }
        crate::Protocol::Cassandra => {
            // Protocol v4: QUERY (long string, consistency ONE, no flags) and a Rows RESULT of
            // one text cell, on stream `i` (mod 2^15).
            let stream = (i % 32_768) as u16;
            let text = format!("SELECT '{id}' FROM t");
            let mut q = (text.len() as u32).to_be_bytes().to_vec();
            q.extend_from_slice(text.as_bytes());
            q.extend_from_slice(&[0, 1, 0]);
            let mut r = vec![0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 1];
            r.extend_from_slice(&(id.len() as u32).to_be_bytes());
            r.extend_from_slice(id.as_bytes());
            (
                cql_envelope(0x04, stream, 0x07, &q),
                cql_envelope(0x84, stream, 0x08, &r),
            )
        }
    }
}

fn cql_envelope(version: u8, stream: u16, op: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![version, 0];
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(op);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// `conns` connections of `proto` on `port`, each sending `per_conn` requests one at a time,
/// interleaved; every request answered 50–250 µs later (ids unique across the capture).
pub fn workload(
    proto: crate::Protocol,
    port: u16,
    conns: u16,
    per_conn: u64,
    seed: u64,
) -> Capture {
    let mut rng = Rng::new(seed);
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut cs: Vec<Conn> = (0..conns).map(|k| Conn::new(20_000 + k, port)).collect();
    for c in cs.iter_mut() {
        cap.open(c);
        for (client, bytes) in opening(proto) {
            if client {
                cap.request(c, &bytes);
            } else {
                cap.response(c, &bytes);
            }
        }
    }
    for round in 0..per_conn {
        for (k, c) in cs.iter_mut().enumerate() {
            let (req, resp) = exchange(proto, round * u64::from(conns) + k as u64);
            cap.request(c, &req);
            cap.wait(50_000 + rng.draw() % 200_000);
            cap.response(c, &resp);
        }
    }
    for c in cs.iter_mut() {
        cap.close(c);
    }
    cap
}
