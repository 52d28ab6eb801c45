//! The checks the observer's fuzz targets run, shared with `tests/fuzz_corpus.rs`, which replays
//! the checked-in corpora on stable in `cargo test`.
//!
//! Protocol targets read the input as a conversation of records `[dir, len, bytes…]` (`dir` bit
//! 0: 0 client, 1 server), sent in order on one connection seen from its SYN (and, with bit 1 of
//! the first byte, picked up part way). The reassembler target reads records
//! `[flags, offset (u16), len, bytes…]`: segments at arbitrary sequence offsets, either
//! direction, with arbitrary TCP flags. Checks: no panic, pairs never more than requests
//! framed, and waiting bytes within their bound after every packet.

use observe::decode::{build_frame, ACK, SYN};
use observe::route::Routes;
use observe::{Limits, Observer, Protocol};

const CLIENT: ([u8; 4], u16) = ([10, 0, 0, 1], 40000);
const SERVER: ([u8; 4], u16) = ([10, 0, 0, 2], 7000);

fn observer(p: Protocol) -> Observer {
    let limits = Limits {
        pending_total_max: 1 << 20,
        pair_log_max: 0,
        ..Limits::default()
    };
    Observer::new(
        &[(p, SERVER.1)],
        Routes::new(&["r=/a/:x/**".into()]).unwrap_or_else(|_| Routes::new(&[]).unwrap()),
        limits,
    )
}

fn conversation(p: Protocol, data: &[u8]) {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let mut obs = observer(p);
    let (mut cseq, mut sseq) = (1000u32, 5000u32);
    let mut ts = 1_700_000_000_000_000_000u64;
    if mode & 2 == 0 {
        obs.packet(1, ts, &build_frame(CLIENT, SERVER, cseq - 1, 0, SYN, b""));
        obs.packet(
            1,
            ts,
            &build_frame(SERVER, CLIENT, sseq - 1, cseq, SYN | ACK, b""),
        );
    }
    let mut records = 0u64;
    while let [dir, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        ts += 1000;
        records += 1;
        if dir & 1 == 0 {
            obs.packet(1, ts, &build_frame(CLIENT, SERVER, cseq, sseq, ACK, bytes));
            cseq = cseq.wrapping_add(n as u32);
        } else {
            obs.packet(1, ts, &build_frame(SERVER, CLIENT, sseq, cseq, ACK, bytes));
            sseq = sseq.wrapping_add(n as u32);
        }
    }
    obs.finish();
    let framed_bytes = data.len() as u64;
    assert!(obs.counters.pairs <= framed_bytes, "more pairs than bytes");
    assert!(obs.counters.pairs <= records.max(1) * 64);
    let _ = obs.agg.close(u64::MAX, true);
}

pub fn http(data: &[u8]) {
    conversation(Protocol::Http, data);
}

pub fn postgres(data: &[u8]) {
    conversation(Protocol::Postgres, data);
}

pub fn redis(data: &[u8]) {
    conversation(Protocol::Redis, data);
}

pub fn mysql(data: &[u8]) {
    conversation(Protocol::Mysql, data);
}

pub fn kafka(data: &[u8]) {
    conversation(Protocol::Kafka, data);
}

pub fn cassandra(data: &[u8]) {
    conversation(Protocol::Cassandra, data);
}

/// Segments anywhere in sequence space, in both directions, any flags.
pub fn reasm(data: &[u8]) {
    let mut obs = observer(Protocol::Http);
    let mut rest = data;
    let mut ts = 1_700_000_000_000_000_000u64;
    while let [flags, hi, lo, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        ts += u64::from(*hi) * 10_000_000;
        let off = u32::from(u16::from_be_bytes([*hi, *lo]));
        let frame = if flags & 0x80 == 0 {
            build_frame(
                CLIENT,
                SERVER,
                1000u32.wrapping_add(off),
                5000,
                flags & 0x1f,
                bytes,
            )
        } else {
            build_frame(
                SERVER,
                CLIENT,
                5000u32.wrapping_add(off),
                1000,
                flags & 0x1f,
                bytes,
            )
        };
        obs.packet(1, ts, &frame);
        assert!(obs.pending_bytes() <= 1 << 20);
    }
    obs.finish();
    assert_eq!(obs.pending_bytes(), 0);
}
