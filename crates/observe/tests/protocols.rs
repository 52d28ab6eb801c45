//! Each protocol's parser and pairing on made-up captures: every request paired with its own
//! response (the `OBSID` each carries), latencies from the packets' times, tags as documented.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use observe::route::Routes;
use observe::synth::{Capture, Conn};
use observe::{Limits, Observer, PairLog, Protocol};

fn observer(p: Protocol, port: u16) -> Observer {
    let limits = Limits {
        pair_log_max: 100_000,
        ..Limits::default()
    };
    Observer::new(
        &[(p, port)],
        Routes::new(&["login=/login".into()]).unwrap(),
        limits,
    )
}

fn replay(obs: &mut Observer, cap: &Capture) -> Vec<String> {
    let mut docs = Vec::new();
    observe::run::replay(&cap.pcap()[..], obs, &mut docs).unwrap();
    docs
}

fn check_pairs(log: &[PairLog], n: usize) {
    assert_eq!(log.len(), n, "pairs");
    for p in log {
        assert!(p.req.probe.is_some(), "request without id: {p:?}");
        assert_eq!(p.req.probe, p.resp.probe, "mis-pair: {p:?}");
        assert!(p.resp.last_ns >= p.req.first_ns);
    }
}

#[test]
fn http_keep_alive_pipelined_chunked_and_head() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40000, 8080);
    cap.open(&mut c);
    for i in 0..50 {
        cap.request(
            &mut c,
            format!("GET /login?OBSID{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
        cap.wait(100_000);
        let body = format!("OBSID{i}");
        cap.response(
            &mut c,
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }
    // Pipelined: three requests, then three responses (chunked, HEAD, 404 with a large body).
    cap.request(&mut c, b"POST /a?OBSID100 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloHEAD /b?OBSID101 HTTP/1.1\r\n\r\nGET /c?OBSID102 HTTP/1.1\r\n\r\n");
    cap.wait(50_000);
    cap.response(&mut c, b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nOBSID100 \r\n0\r\n\r\n");
    cap.response(
        &mut c,
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nX-Id: OBSID101\r\n\r\n",
    );
    let big = vec![b'z'; 100_000];
    cap.response(
        &mut c,
        format!(
            "HTTP/1.1 404 Not Found\r\nX-Id: OBSID102\r\nContent-Length: {}\r\n\r\n",
            big.len()
        )
        .as_bytes(),
    );
    cap.response(&mut c, &big);
    cap.close(&mut c);
    let mut obs = observer(Protocol::Http, 8080);
    let docs = replay(&mut obs, &cap);
    check_pairs(&obs.pair_log, 53);
    assert_eq!(obs.pair_log[0].tags, "method:GET,route:login,status:2xx");
    assert_eq!(
        obs.pair_log[0].resp.last_ns - obs.pair_log[0].req.first_ns,
        101_000
    );
    assert_eq!(obs.pair_log[50].tags, "method:POST,route:other,status:2xx");
    assert_eq!(obs.pair_log[51].tags, "method:HEAD,route:other,status:2xx");
    assert_eq!(obs.pair_log[52].tags, "method:GET,route:other,status:4xx");
    assert_eq!(obs.pair_log[52].resp.bytes as usize, 66 + big.len());
    assert_eq!(
        obs.counters.unpaired + obs.counters.orphans + obs.counters.gaps,
        0,
        "{:?}",
        obs.counters
    );
    assert_eq!(docs.len(), 1);
    assert!(docs[0].contains(
        "\"observe.latency|ST[proto:http,port:8080,method:GET,route:login,status:2xx]\""
    ));
}

fn pg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![t];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

#[test]
fn postgres_simple_extended_and_errors() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40001, 5432);
    cap.open(&mut c);
    let mut startup = Vec::new();
    startup.extend_from_slice(&16u32.to_be_bytes());
    startup.extend_from_slice(&196_608u32.to_be_bytes());
    startup.extend_from_slice(b"user\0x\0\0");
    cap.request(&mut c, &startup);
    let mut r = pg(b'R', &[0, 0, 0, 0]);
    r.extend(pg(b'S', b"a\0b\0"));
    r.extend(pg(b'Z', b"I"));
    cap.response(&mut c, &r);
    for i in 0..20 {
        cap.request(&mut c, &pg(b'Q', format!("SELECT 'OBSID{i}'\0").as_bytes()));
        cap.wait(30_000);
        let mut resp = pg(b'T', b"..");
        resp.extend(pg(b'D', format!("OBSID{i}").as_bytes()));
        resp.extend(pg(b'C', b"SELECT 1\0"));
        resp.extend(pg(b'Z', b"I"));
        cap.response(&mut c, &resp);
    }
    // Extended: Parse (named) / Bind / Execute / Sync, then a Bind of the named statement alone.
    let mut ext = pg(b'P', b"s1\0INSERT INTO t VALUES ('OBSID50')\0\0\0");
    ext.extend(pg(b'B', b"\0s1\0\0\0\0\0\0\0"));
    ext.extend(pg(b'E', b"\0\0\0\0\0"));
    ext.extend(pg(b'S', b""));
    cap.request(&mut c, &ext);
    let mut resp = pg(b'1', b"");
    resp.extend(pg(b'2', b""));
    resp.extend(pg(b'C', b"INSERT 0 1\0"));
    resp.extend(pg(b'Z', b"I"));
    resp.extend(b"OBSID50".iter());
    cap.response(&mut c, &resp[..resp.len() - 7]);
    let mut ext = pg(b'B', b"\0s1\0\0\0\0\0\0\0");
    ext.extend(pg(b'E', b"\0OBSID51\0\0\0\0\0"));
    ext.extend(pg(b'S', b""));
    cap.request(&mut c, &ext);
    let mut resp = pg(b'2', b"");
    resp.extend(pg(b'E', b"SERROR\0C23505\0Mdup OBSID51\0\0"));
    resp.extend(pg(b'Z', b"I"));
    cap.response(&mut c, &resp);
    cap.close(&mut c);
    let mut obs = observer(Protocol::Postgres, 5432);
    replay(&mut obs, &cap);
    assert_eq!(obs.pair_log.len(), 22);
    check_pairs(&obs.pair_log[..20], 20);
    assert_eq!(obs.pair_log[0].tags, "kind:SELECT,status:ok");
    assert_eq!(obs.pair_log[0].rows, Some(1));
    assert_eq!(obs.pair_log[20].tags, "kind:INSERT,status:ok");
    assert_eq!(obs.pair_log[21].tags, "kind:INSERT,status:error");
    assert_eq!(obs.pair_log[21].resp.probe, Some(51));
}

#[test]
fn redis_resp2_resp3_pipelined() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40002, 6379);
    cap.open(&mut c);
    for i in 0..30 {
        let id = format!("OBSID{i}");
        cap.request(
            &mut c,
            format!("*2\r\n$4\r\nECHO\r\n${}\r\n{id}\r\n", id.len()).as_bytes(),
        );
        cap.wait(10_000);
        cap.response(&mut c, format!("${}\r\n{id}\r\n", id.len()).as_bytes());
    }
    cap.request(&mut c, b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$8\r\nOBSID101\r\n*3\r\n$5\r\nHGETA\r\n$1\r\nk\r\n$8\r\nOBSID102\r\n");
    cap.response(&mut c, b">2\r\n+push\r\n:1\r\n+PONG\r\n");
    cap.response(
        &mut c,
        b"|1\r\n+key\r\n+OBSID101\r\n%2\r\n+a\r\n*2\r\n:1\r\n$8\r\nOBSID101\r\n+b\r\n_\r\n",
    );
    cap.response(&mut c, b"-ERR unknown OBSID102\r\n");
    cap.close(&mut c);
    let mut obs = observer(Protocol::Redis, 6379);
    replay(&mut obs, &cap);
    assert_eq!(obs.pair_log.len(), 33);
    check_pairs(&obs.pair_log[..30], 30);
    assert_eq!(obs.pair_log[0].tags, "command:ECHO,status:ok");
    assert_eq!(obs.pair_log[30].tags, "command:PING,status:ok");
    assert_eq!(obs.pair_log[31].tags, "command:GET,status:ok");
    assert_eq!(obs.pair_log[31].rows, Some(2));
    assert_eq!(obs.pair_log[32].tags, "command:OTHER,status:error");
    check_pairs(&obs.pair_log[31..], 2);
}

fn my(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    p.push(seq);
    p.extend_from_slice(payload);
    p
}

fn column_def() -> Vec<u8> {
    let mut d = vec![3];
    d.extend_from_slice(b"def");
    d.extend_from_slice(&[
        0, 0, 0, 1, b'c', 1, b'c', 0x0c, 0x21, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0,
    ]);
    d
}

#[test]
fn mysql_queries_prepared_and_errors() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40003, 3306);
    cap.open(&mut c);
    // Greeting with CLIENT_DEPRECATE_EOF, a client that asks for it too, and OK.
    let mut g = vec![10];
    g.extend_from_slice(b"10.11.6-MariaDB\0");
    g.extend_from_slice(&[1, 0, 0, 0]);
    g.extend_from_slice(b"abcdefgh\0");
    g.extend_from_slice(&0xf7ffu16.to_le_bytes());
    g.extend_from_slice(&[8, 2, 0]);
    g.extend_from_slice(&0x0100u16.to_le_bytes());
    g.extend_from_slice(&[21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    cap.response(&mut c, &my(0, &g));
    let mut hs = (0x01aa_a20du32 | 1 << 24).to_le_bytes().to_vec();
    hs.extend_from_slice(&[0; 28]);
    cap.request(&mut c, &my(1, &hs));
    cap.response(&mut c, &my(2, &[0, 0, 0, 2, 0, 0, 0]));
    for i in 0..10 {
        cap.request(&mut c, &my(0, format!("\x03SELECT 'OBSID{i}'").as_bytes()));
        cap.wait(20_000);
        let mut r = my(1, &[1]);
        r.extend(my(2, &column_def()));
        let v = format!("OBSID{i}");
        let mut row = vec![v.len() as u8];
        row.extend_from_slice(v.as_bytes());
        r.extend(my(3, &row));
        r.extend(my(4, &[0xfe, 0, 0, 2, 0, 0, 0]));
        cap.response(&mut c, &r);
    }
    // Prepare (1 param, 1 column), execute, close (no response), then an error.
    cap.request(
        &mut c,
        &my(0, b"\x16SELECT c FROM t WHERE id = ? -- OBSID20"),
    );
    let mut r = my(1, &[0, 7, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0]);
    r.extend(my(2, &column_def()));
    r.extend(my(3, b"\x03defOBSID20"));
    cap.response(&mut c, &r);
    cap.request(
        &mut c,
        &my(
            0,
            &[
                0x17, 7, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0x08, 0, 21, 0, 0, 0, 0, 0, 0, 0,
            ],
        ),
    );
    let mut r = my(1, &[1]);
    r.extend(my(2, &column_def()));
    r.extend(my(3, &[0, 0, 1, b'x']));
    r.extend(my(4, &[0, 0, 1, b'y']));
    r.extend(my(5, &[0xfe, 0, 0, 2, 0, 0, 0]));
    cap.response(&mut c, &r);
    cap.request(&mut c, &my(0, &[0x19, 7, 0, 0, 0]));
    cap.request(&mut c, &my(0, b"\x03SELEC OBSID30"));
    cap.response(&mut c, &my(1, b"\xff\x28\x04#42000syntax OBSID30"));
    cap.close(&mut c);
    let mut obs = observer(Protocol::Mysql, 3306);
    replay(&mut obs, &cap);
    assert_eq!(obs.pair_log.len(), 13, "{:?}", obs.pair_log);
    check_pairs(&obs.pair_log[..10], 10);
    assert_eq!(obs.pair_log[0].tags, "kind:SELECT,status:ok");
    assert_eq!(obs.pair_log[0].rows, Some(1));
    assert_eq!(obs.pair_log[10].tags, "kind:SELECT,status:ok");
    assert_eq!(obs.pair_log[11].tags, "kind:SELECT,status:ok");
    assert_eq!(obs.pair_log[11].rows, Some(2));
    assert_eq!(obs.pair_log[12].tags, "kind:OTHER,status:error");
    check_pairs(&obs.pair_log[12..], 1);
    assert_eq!(obs.counters.unpaired + obs.counters.orphans, 0);
}

fn kafka_request(key: u16, version: u16, corr: i32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&key.to_be_bytes());
    m.extend_from_slice(&version.to_be_bytes());
    m.extend_from_slice(&corr.to_be_bytes());
    m.extend_from_slice(&4u16.to_be_bytes());
    m.extend_from_slice(b"test");
    m.extend_from_slice(body);
    let mut out = (m.len() as u32).to_be_bytes().to_vec();
    out.extend(m);
    out
}

fn kafka_response(corr: i32, body: &[u8]) -> Vec<u8> {
    let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&corr.to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[test]
fn kafka_pairs_by_correlation_id_out_of_order() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40004, 9092);
    cap.open(&mut c);
    cap.request(&mut c, &kafka_request(18, 3, 1, b"\x00\x00"));
    cap.response(&mut c, &kafka_response(1, &[0; 40]));
    // Produce v8 to topic "orders" and v9 (flexible) to "audit"; Fetch v11 of "orders".
    let mut p8 = vec![0xff, 0xff, 0, 1, 0, 0, 0x75, 0x30, 0, 0, 0, 1, 0, 6];
    p8.extend_from_slice(b"orders");
    p8.extend_from_slice(&[0; 8]);
    let mut p9 = vec![0, 0, 0, 1, 0, 0, 0x75, 0x30, 2, 6];
    p9.extend_from_slice(b"audit");
    let mut f11 = vec![
        0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0xf4, 0, 0, 0, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 1, 0, 6,
    ];
    f11.extend_from_slice(b"orders");
    cap.request(&mut c, &kafka_request(0, 8, 2, &p8));
    cap.request(&mut c, &kafka_request(0, 9, 3, &p9));
    cap.request(&mut c, &kafka_request(1, 11, 4, &f11));
    cap.wait(40_000);
    cap.response(&mut c, &kafka_response(4, &[7; 3000]));
    cap.response(&mut c, &kafka_response(3, &[0; 10]));
    cap.response(&mut c, &kafka_response(2, &[0; 10]));
    // acks=0: no response expected.
    let mut p0 = vec![0xff, 0xff, 0, 0, 0, 0, 0x75, 0x30, 0, 0, 0, 1, 0, 1, b'x'];
    p0.extend_from_slice(&[0; 8]);
    cap.request(&mut c, &kafka_request(0, 7, 5, &p0));
    cap.close(&mut c);
    let mut obs = observer(Protocol::Kafka, 9092);
    replay(&mut obs, &cap);
    let tags: Vec<&str> = obs.pair_log.iter().map(|p| p.tags.as_str()).collect();
    assert_eq!(
        tags,
        [
            "api:ApiVersions",
            "api:Fetch,topic:orders",
            "api:Produce,topic:audit",
            "api:Produce,topic:orders"
        ]
    );
    assert_eq!(obs.counters.unpaired + obs.counters.orphans, 0);
    assert_eq!(obs.pair_log[1].resp.bytes, 3008);
}

#[test]
fn kafka_topic_ids_learnt_from_metadata_name_produce_and_fetch() {
    let id: [u8; 16] = *b"0123456789abcdef";
    // A client asks for metadata on one connection (v12: flexible, topic ids)…
    let mut meta = Conn::new(40005, 9092);
    let mut r = vec![
        0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 2, b'h', 0, 0, 0x23, 0x84, 0, 0,
    ];
    r.extend_from_slice(&[2, b'c', 0, 0, 0, 1, 3]);
    // "orders" with the id and one partition …
    r.extend_from_slice(&[0, 0, 7]);
    r.extend_from_slice(b"orders");
    r.extend_from_slice(&id);
    r.extend_from_slice(&[0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    r.extend_from_slice(&[2, 0, 0, 0, 1, 2, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]);
    // … and an unknown topic, whose zero id is not learnt.
    r.extend_from_slice(&[0, 3, 7]);
    r.extend_from_slice(b"OBSID9");
    r.extend_from_slice(&[0; 16]);
    r.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    let meta_req = kafka_request(3, 12, 1, &[0, 2, 0, 0, 0, 0]);
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    cap.open(&mut meta);
    cap.request(&mut meta, &meta_req);
    cap.response(&mut meta, &kafka_response(1, &r));
    // … then produces (v13) and fetches (v16) by topic id on another.
    let mut c = Conn::new(40006, 9092);
    cap.open(&mut c);
    let mut p13 = vec![0, 0, 0, 1, 0, 0, 0x75, 0x30, 2];
    p13.extend_from_slice(&id);
    p13.extend_from_slice(&[1, 0]);
    let mut unknown = p13.clone();
    unknown[9] = b'X';
    // Header tags, max_wait_ms, min_bytes, max_bytes, isolation_level, session id and epoch.
    let mut f16 = vec![
        0, 0, 0, 1, 0xf4, 0, 0, 0, 1, 3, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    f16.push(2);
    f16.extend_from_slice(&id);
    cap.request(&mut c, &kafka_request(0, 13, 2, &p13));
    cap.response(&mut c, &kafka_response(2, &[0; 30]));
    cap.request(&mut c, &kafka_request(0, 13, 3, &unknown));
    cap.response(&mut c, &kafka_response(3, &[0; 30]));
    cap.request(&mut c, &kafka_request(1, 16, 4, &f16));
    cap.response(&mut c, &kafka_response(4, &[0; 30]));
    let mut obs = observer(Protocol::Kafka, 9092);
    replay(&mut obs, &cap);
    let tags: Vec<&str> = obs.pair_log.iter().map(|p| p.tags.as_str()).collect();
    assert_eq!(
        tags,
        [
            "api:Metadata",
            "api:Produce,topic:orders",
            "api:Produce",
            "api:Fetch,topic:orders"
        ]
    );
    assert_eq!(obs.counters.unpaired + obs.counters.orphans, 0);
}

#[test]
fn tls_is_counted_not_parsed() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    // HTTPS on the HTTP port: a ClientHello record first.
    let mut https = Conn::new(40010, 8443);
    cap.open(&mut https);
    let hello = [&[0x16, 0x03, 0x01, 0x00, 0x05][..], b"GET /"].concat();
    cap.request(&mut https, &hello);
    cap.response(&mut https, &[0x16, 0x03, 0x03, 0x00, 0x02, 1, 2]);
    cap.close(&mut https);
    let mut obs = observer(Protocol::Http, 8443);
    replay(&mut obs, &cap);
    assert_eq!(obs.counters.tls_conns, 1);
    assert_eq!(obs.counters.tls_bytes, (hello.len() + 7) as u64);
    assert_eq!(obs.counters.pairs, 0);

    // PostgreSQL: an SSLRequest answered `S`, then TLS records.
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut pg = Conn::new(40011, 5432);
    cap.open(&mut pg);
    cap.request(&mut pg, &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    cap.response(&mut pg, b"S");
    cap.request(&mut pg, &[0x16, 0x03, 0x01, 0x00, 0x01, 0]);
    cap.response(&mut pg, &[0x16, 0x03, 0x03, 0x00, 0x01, 0]);
    cap.close(&mut pg);
    let mut obs = observer(Protocol::Postgres, 5432);
    replay(&mut obs, &cap);
    assert_eq!(obs.counters.tls_conns, 1);
    assert_eq!(obs.counters.pairs, 0);
    assert_eq!(obs.counters.unpaired + obs.counters.orphans, 0);
}

fn cql(version: u8, stream: u16, op: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![version, 0];
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(op);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn long_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

/// Cassandra's CRC24 (the protocol's v5 segment header check), written out independently of
/// the parser's.
fn crc24(bytes: &[u8]) -> u32 {
    let mut crc: u32 = 0x875060;
    for &b in bytes {
        crc ^= u32::from(b) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x1000000 != 0 {
                crc ^= 0x1974f0b;
            }
        }
    }
    crc & 0xffffff
}

/// A v5 segment (uncompressed) around `payload`; the payload CRC32 is not checked by the parser.
fn segment(payload: &[u8], whole: bool) -> Vec<u8> {
    let v = payload.len() as u32 | if whole { 1 << 17 } else { 0 };
    let h = [v as u8, (v >> 8) as u8, (v >> 16) as u8];
    let c = crc24(&h);
    let mut out = h.to_vec();
    out.extend_from_slice(&[c as u8, (c >> 8) as u8, (c >> 16) as u8]);
    out.extend_from_slice(payload);
    out.extend_from_slice(&[0; 4]);
    out
}

#[test]
fn cassandra_v4_by_stream_id_prepared_and_errors() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40020, 9042);
    cap.open(&mut c);
    cap.request(&mut c, &cql(4, 0, 0x05, b""));
    cap.response(&mut c, &cql(0x84, 0, 0x06, &[0, 0]));
    // Two queries in flight, answered out of order.
    let q = |s: &str| [long_string(s), vec![0, 1, 0]].concat();
    cap.request(&mut c, &cql(4, 1, 0x07, &q("SELECT 'OBSID1' FROM t")));
    cap.request(
        &mut c,
        &cql(4, 2, 0x07, &q("insert into t (k) values ('OBSID2')")),
    );
    cap.wait(30_000);
    cap.response(&mut c, &cql(0x84, 2, 0x08, b"\0\0\0\x01OBSID2"));
    cap.response(&mut c, &cql(0x84, 1, 0x08, b"\0\0\0\x02OBSID1"));
    // PREPARE, then EXECUTE by the id the answer gave.
    cap.request(
        &mut c,
        &cql(4, 3, 0x09, &long_string("UPDATE t SET v = ? -- OBSID3")),
    );
    cap.response(&mut c, &cql(0x84, 3, 0x08, b"\0\0\0\x04\0\x02idOBSID3"));
    cap.request(&mut c, &cql(4, 4, 0x0a, b"\0\x02id\0\x01OBSID4"));
    cap.response(&mut c, &cql(0x84, 4, 0x08, b"\0\0\0\x01OBSID4"));
    // An error, and a server event (stream -1) that answers nothing.
    cap.request(&mut c, &cql(4, 5, 0x07, &q("SELECT * FROM nope OBSID5")));
    cap.response(
        &mut c,
        &cql(0xff - 0x7b, 0xffff, 0x0c, b"\0\x0dSCHEMA_CHANGE"),
    );
    cap.response(&mut c, &cql(0x84, 5, 0x00, b"\0\0\x22\0\0\x05OBSID5"));
    cap.close(&mut c);
    let mut obs = observer(Protocol::Cassandra, 9042);
    replay(&mut obs, &cap);
    let tags: Vec<&str> = obs.pair_log.iter().map(|p| p.tags.as_str()).collect();
    assert_eq!(
        tags,
        [
            "op:OPTIONS,status:ok",
            "op:QUERY,kind:INSERT,status:ok",
            "op:QUERY,kind:SELECT,status:ok",
            "op:PREPARE,kind:UPDATE,status:ok",
            "op:EXECUTE,kind:UPDATE,status:ok",
            "op:QUERY,kind:SELECT,status:error",
        ]
    );
    check_pairs(&obs.pair_log[1..], 5);
    assert_eq!(obs.counters.unpaired + obs.counters.orphans, 0);
    // Sent at t and t + 1 µs; answered 30 µs after the second, the second answer 1 µs later.
    assert_eq!(
        obs.pair_log[2].resp.last_ns - obs.pair_log[2].req.first_ns,
        33_000
    );
}

#[test]
fn cassandra_v5_segments_after_startup() {
    let mut cap = Capture::new(1_700_000_000_000_000_000);
    let mut c = Conn::new(40021, 9042);
    cap.open(&mut c);
    // STARTUP (plain envelope) answered READY: segments from then on, both ways.
    cap.request(
        &mut c,
        &cql(5, 0, 0x01, b"\0\x01\0\x0bCQL_VERSION\0\x053.0.0"),
    );
    cap.response(&mut c, &cql(0x85, 0, 0x02, b""));
    let q = |s: &str| [long_string(s), vec![0, 1, 0, 0, 0, 0]].concat();
    // Two queries in one self-contained segment, their answers in another (in the other order:
    // the statement kinds tell which request each was paired with).
    let both = [
        cql(5, 1, 0x07, &q("SELECT 1 FROM t")),
        cql(5, 2, 0x07, &q("INSERT INTO t (k) VALUES (2)")),
    ]
    .concat();
    cap.request(&mut c, &segment(&both, true));
    cap.wait(20_000);
    let answers = [
        cql(0x85, 2, 0x08, b"\0\0\0\x01"),
        cql(0x85, 1, 0x08, b"\0\0\0\x02"),
    ]
    .concat();
    cap.response(&mut c, &segment(&answers, true));
    // A large answer split over three segments that are not self-contained.
    cap.request(
        &mut c,
        &segment(&cql(5, 3, 0x07, &q("SELECT v FROM big OBSID3")), true),
    );
    let mut body = b"\0\0\0\x02OBSID3".to_vec();
    body.resize(300_000, 7);
    let big = cql(0x85, 3, 0x08, &body);
    for part in big.chunks(131_071) {
        cap.response(&mut c, &segment(part, false));
    }
    cap.close(&mut c);
    let mut obs = observer(Protocol::Cassandra, 9042);
    replay(&mut obs, &cap);
    let tags: Vec<&str> = obs.pair_log.iter().map(|p| p.tags.as_str()).collect();
    assert_eq!(
        tags,
        [
            "op:STARTUP,status:ok",
            "op:QUERY,kind:INSERT,status:ok",
            "op:QUERY,kind:SELECT,status:ok",
            "op:QUERY,kind:SELECT,status:ok",
        ]
    );
    check_pairs(&obs.pair_log[3..], 1);
    assert_eq!(obs.counters.unpaired + obs.counters.orphans, 0);
    assert!(obs.pair_log[3].resp.bytes > 300_000);
}
