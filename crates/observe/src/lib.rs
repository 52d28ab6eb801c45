//! `observe`: every request's latency, read off the wire.
//!
//! Captured packets (live from [`capture::ring`] or from a pcap file) are decoded to TCP
//! segments ([`decode`]), reassembled per direction with bounded memory ([`reasm`]), framed into
//! messages by one parser per protocol ([`stream`], [`proto`]), paired request with response, and
//! recorded into per-period histograms ([`agg`]) that are sent to the core ([`send`]). Every time
//! is a packet's capture time, never the parser's clock.
#![forbid(unsafe_code)]

pub mod agg;
pub mod config;
pub mod decode;
pub mod output;
pub mod pair;
pub mod proto;
pub mod reasm;
pub mod route;
pub mod run;
pub mod send;
pub mod stream;
pub mod synth;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use decode::{Endpoint, ACK, FIN, RST, SYN};
use reasm::{Budget, Chunk, Reasm};
use stream::{Dir, Proto, Span, Stream};

/// Where paired requests and pairing failures go.
pub trait Sink {
    fn pair(&mut self, req: &Span, resp: &Span, tags: &[(&'static str, &str)], rows: Option<u64>);
    /// Requests that will never be paired (lost in a gap, too many in flight, connection gone).
    fn unpaired(&mut self, n: u64);
    /// A response to no request this observer saw.
    fn orphan(&mut self);
}

/// The protocols the observer parses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Protocol {
    Http,
    Postgres,
    Redis,
    Mysql,
    Kafka,
    Cassandra,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Postgres => "postgres",
            Protocol::Redis => "redis",
            Protocol::Mysql => "mysql",
            Protocol::Kafka => "kafka",
            Protocol::Cassandra => "cassandra",
        }
    }

    pub fn from_name(s: &str) -> Option<Protocol> {
        [
            Protocol::Http,
            Protocol::Postgres,
            Protocol::Redis,
            Protocol::Mysql,
            Protocol::Kafka,
            Protocol::Cassandra,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }
}

/// Bounds and knobs of an observer.
#[derive(Clone)]
pub struct Limits {
    /// Most connections tracked at once; new ones beyond are counted and ignored.
    pub conns_max: usize,
    /// Most out-of-order bytes waiting across every connection.
    pub pending_total_max: usize,
    /// How long (capture time) a hole may wait for its bytes before it is a gap.
    pub gap_wait_ns: u64,
    /// A connection with no packet for this long (capture time) is forgotten.
    pub idle_ns: u64,
    pub period_ms: u64,
    pub tag_values_max: usize,
    pub streams_max: usize,
    /// Keep a log of every pair with its `OBSID` probes (tests), at most this many.
    pub pair_log_max: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            conns_max: 16_384,
            pending_total_max: 64 << 20,
            gap_wait_ns: 500_000_000,
            idle_ns: 600_000_000_000,
            period_ms: 60_000,
            tag_values_max: 100,
            streams_max: 4096,
            pair_log_max: 0,
        }
    }
}

/// One paired request, as logged for tests.
#[derive(Clone, Debug)]
pub struct PairLog {
    pub proto: &'static str,
    pub req: Span,
    pub resp: Span,
    pub tags: String,
    pub rows: Option<u64>,
}

/// Totals since start (the sender reports per-period differences).
#[derive(Clone, Copy, Default, Debug)]
pub struct Counters {
    pub packets: u64,
    pub bytes: u64,
    pub kernel_drops: u64,
    pub not_tcp: u64,
    pub conns: u64,
    pub conns_refused: u64,
    pub gaps: u64,
    pub unpaired: u64,
    pub orphans: u64,
    pub resyncs: u64,
    pub duplicates: u64,
    pub pairs: u64,
    pub tls_conns: u64,
    pub tls_bytes: u64,
    pub late: u64,
}

type Key = (Endpoint, Endpoint);

struct Conn {
    proto: Box<dyn Proto + Send>,
    name: &'static str,
    port: u16,
    reasm: [Reasm; 2],
    streams: [Stream; 2],
    last_ns: u64,
    /// Whether the client's first bytes were seen, and whether they (or the parser) said TLS.
    first_seen: bool,
    tls: bool,
    released: bool,
}

pub struct Observer {
    wires: HashMap<u16, Protocol>,
    routes: Arc<route::Routes>,
    /// Kafka topic names by id, learnt on any connection, used on every one.
    kafka_topics: proto::kafka::TopicIds,
    limits: Limits,
    conns: HashMap<Key, Conn>,
    budget: Budget,
    pub agg: agg::Agg,
    pub counters: Counters,
    pub pair_log: Vec<PairLog>,
    last_sweep_ns: u64,
}

/// Where one connection's parsers report: the aggregator, the counters, the test log.
struct ConnSink<'a> {
    name: &'static str,
    port: u16,
    agg: &'a mut agg::Agg,
    counters: &'a mut Counters,
    log: &'a mut Vec<PairLog>,
    log_max: usize,
}

impl Sink for ConnSink<'_> {
    fn pair(&mut self, req: &Span, resp: &Span, tags: &[(&'static str, &str)], rows: Option<u64>) {
        self.counters.pairs += 1;
        let r = agg::Record {
            proto: self.name,
            port: self.port,
            tags,
            req,
            resp,
            rows,
        };
        self.agg.record(&r);
        if self.log.len() < self.log_max {
            let tags = tags
                .iter()
                .map(|(c, v)| format!("{c}:{v}"))
                .collect::<Vec<_>>()
                .join(",");
            self.log.push(PairLog {
                proto: self.name,
                req: *req,
                resp: *resp,
                tags,
                rows,
            });
        }
    }

    fn unpaired(&mut self, n: u64) {
        self.counters.unpaired += n;
    }

    fn orphan(&mut self) {
        self.counters.orphans += 1;
    }
}

fn new_proto(
    p: Protocol,
    routes: &Arc<route::Routes>,
    topics: &proto::kafka::TopicIds,
    seen_open: bool,
) -> Box<dyn Proto + Send> {
    match p {
        Protocol::Http => Box::new(proto::http::Http::new(routes.clone())),
        Protocol::Postgres => Box::new(proto::postgres::Postgres::new(seen_open)),
        Protocol::Redis => Box::new(proto::redis::Redis::default()),
        Protocol::Mysql => Box::new(proto::mysql::Mysql::default()),
        Protocol::Kafka => Box::new(proto::kafka::Kafka::new(topics.clone())),
        Protocol::Cassandra => Box::new(proto::cassandra::Cassandra::default()),
    }
}

impl Observer {
    /// An observer of `wires` (protocol on a server port), HTTP routes from `routes`.
    pub fn new(wires: &[(Protocol, u16)], routes: route::Routes, limits: Limits) -> Observer {
        Observer {
            wires: wires.iter().map(|&(p, port)| (port, p)).collect(),
            routes: Arc::new(routes),
            kafka_topics: proto::kafka::TopicIds::default(),
            agg: agg::Agg::new(limits.period_ms, limits.tag_values_max, limits.streams_max),
            budget: Budget {
                used: 0,
                max: limits.pending_total_max,
            },
            limits,
            conns: HashMap::new(),
            counters: Counters::default(),
            pair_log: Vec::new(),
            last_sweep_ns: 0,
        }
    }

    /// Connections tracked now.
    pub fn conns(&self) -> usize {
        self.conns.len()
    }

    /// Out-of-order bytes waiting now, across every connection.
    pub fn pending_bytes(&self) -> usize {
        self.budget.used
    }

    /// One captured frame of link type `link`, captured at `ts_ns`.
    pub fn packet(&mut self, link: u32, ts_ns: u64, frame: &[u8]) {
        self.counters.packets += 1;
        self.counters.bytes += frame.len() as u64;
        let Some(seg) = decode::segment(link, frame) else {
            self.counters.not_tcp += 1;
            return;
        };
        let (dir, key, proto) = if let Some(&p) = self.wires.get(&seg.dst.port) {
            (Dir::Request, (seg.src, seg.dst), p)
        } else if let Some(&p) = self.wires.get(&seg.src.port) {
            (Dir::Response, (seg.dst, seg.src), p)
        } else {
            self.counters.not_tcp += 1;
            return;
        };
        let opening = seg.flags & (SYN | ACK) == SYN && dir == Dir::Request;
        if opening {
            self.close(&key);
        }
        if !self.conns.contains_key(&key) && !self.open(key, proto, opening, ts_ns, &seg) {
            return;
        }
        self.segment(key, dir, &seg, ts_ns);
        if ts_ns >= self.last_sweep_ns + 1_000_000_000 {
            self.sweep(ts_ns);
        }
    }

    fn open(
        &mut self,
        key: Key,
        proto: Protocol,
        opening: bool,
        ts: u64,
        seg: &decode::Segment<'_>,
    ) -> bool {
        // Pick a connection up part way only where there is data to read.
        if !opening && seg.payload.is_empty() && seg.flags & SYN == 0 {
            return false;
        }
        if self.conns.len() >= self.limits.conns_max {
            self.counters.conns_refused += 1;
            return false;
        }
        self.counters.conns += 1;
        let resync = !opening;
        self.conns.insert(
            key,
            Conn {
                proto: new_proto(proto, &self.routes, &self.kafka_topics, opening),
                name: proto.name(),
                port: key.1.port,
                reasm: [Reasm::default(), Reasm::default()],
                streams: [
                    Stream::new(resync, self.limits.pair_log_max > 0),
                    Stream::new(resync, self.limits.pair_log_max > 0),
                ],
                last_ns: ts,
                first_seen: false,
                tls: false,
                released: false,
            },
        );
        true
    }

    fn segment(&mut self, key: Key, dir: Dir, seg: &decode::Segment<'_>, ts: u64) {
        let Some(conn) = self.conns.get_mut(&key) else {
            return;
        };
        conn.last_ns = ts;
        let mut sink = ConnSink {
            name: conn.name,
            port: conn.port,
            agg: &mut self.agg,
            counters: &mut self.counters,
            log: &mut self.pair_log,
            log_max: self.limits.pair_log_max,
        };
        let budget = &mut self.budget;
        if seg.flags & SYN != 0 {
            conn.reasm[dir as usize].syn(seg.seq);
            return;
        }
        let other = match dir {
            Dir::Request => Dir::Response,
            Dir::Response => Dir::Request,
        };
        let Conn {
            proto,
            reasm,
            streams,
            first_seen,
            tls,
            ..
        } = &mut *conn;
        if seg.flags & ACK != 0 {
            let (r, s) = (&mut reasm[other as usize], &mut streams[other as usize]);
            r.acked(seg.ack, ts, budget, &mut |c| {
                on_chunk(other, c, s, proto.as_mut(), first_seen, tls, &mut sink)
            });
        }
        let (r, s) = (&mut reasm[dir as usize], &mut streams[dir as usize]);
        r.segment(
            seg.seq,
            seg.payload,
            seg.flags & FIN != 0,
            ts,
            budget,
            &mut |c| on_chunk(dir, c, s, proto.as_mut(), first_seen, tls, &mut sink),
        );
        let done = seg.flags & RST != 0 || (reasm[0].fin && reasm[1].fin);
        if reasm[dir as usize].fin {
            streams[dir as usize].fin(dir, proto.as_mut(), &mut sink);
        }
        if !conn.tls && conn.proto.tls() {
            conn.tls = true;
        }
        if conn.tls && !conn.released {
            conn.released = true;
            self.counters.tls_conns += 1;
        }
        if conn.tls {
            self.counters.tls_bytes += seg.payload.len() as u64;
        }
        if done {
            self.close(&key);
        }
    }

    /// Forgets a connection; its requests still in flight are counted unpaired.
    fn close(&mut self, key: &Key) {
        let Some(mut conn) = self.conns.remove(key) else {
            return;
        };
        for r in &mut conn.reasm {
            r.release(&mut self.budget);
            self.counters.duplicates += r.duplicates;
        }
        self.counters.resyncs += conn.streams[0].bad + conn.streams[1].bad;
        let mut sink = ConnSink {
            name: conn.name,
            port: conn.port,
            agg: &mut self.agg,
            counters: &mut self.counters,
            log: &mut self.pair_log,
            log_max: self.limits.pair_log_max,
        };
        conn.proto.gap(Dir::Response, &mut sink);
    }

    /// Gives up on holes waited for too long and forgets idle connections (capture time).
    pub fn sweep(&mut self, now_ns: u64) {
        self.last_sweep_ns = now_ns;
        let idle: Vec<Key> = self
            .conns
            .iter()
            .filter(|(_, c)| c.last_ns.saturating_add(self.limits.idle_ns) < now_ns)
            .map(|(k, _)| *k)
            .collect();
        for k in idle {
            self.close(&k);
        }
        let wait = self.limits.gap_wait_ns;
        for conn in self.conns.values_mut() {
            if conn.reasm.iter().all(|r| r.pending_bytes() == 0) {
                continue;
            }
            let mut sink = ConnSink {
                name: conn.name,
                port: conn.port,
                agg: &mut self.agg,
                counters: &mut self.counters,
                log: &mut self.pair_log,
                log_max: self.limits.pair_log_max,
            };
            let Conn {
                proto,
                reasm,
                streams,
                first_seen,
                tls,
                ..
            } = conn;
            for dir in [Dir::Request, Dir::Response] {
                let (r, s) = (&mut reasm[dir as usize], &mut streams[dir as usize]);
                r.expire(now_ns, wait, &mut self.budget, &mut |c| {
                    on_chunk(dir, c, s, proto.as_mut(), first_seen, tls, &mut sink)
                });
            }
        }
    }

    /// Ends the capture: every connection is closed (their requests in flight count unpaired).
    pub fn finish(&mut self) {
        let keys: Vec<Key> = self.conns.keys().copied().collect();
        for k in keys {
            self.close(&k);
        }
        self.counters.late = self.agg.late;
    }
}

/// One reassembled chunk (or gap) of one direction into its stream.
fn on_chunk(
    dir: Dir,
    c: Chunk<'_>,
    s: &mut Stream,
    proto: &mut (dyn Proto + Send),
    first_seen: &mut bool,
    tls: &mut bool,
    sink: &mut ConnSink<'_>,
) {
    match c {
        Chunk::Data(bytes, ts) => {
            if dir == Dir::Request && !*first_seen {
                *first_seen = true;
                *tls = looks_like_tls(bytes);
            }
            if !*tls {
                s.data(dir, bytes, ts, proto, sink);
            }
        }
        Chunk::Gap(_) => {
            sink.counters.gaps += 1;
            s.gap(dir, proto, sink);
        }
    }
}

/// A TLS record header: handshake (a connection seen from its start) or application data (one
/// picked up part way), version 3.x.
fn looks_like_tls(b: &[u8]) -> bool {
    matches!(b, [0x16 | 0x17, 0x03, 0x00..=0x04, ..])
}
