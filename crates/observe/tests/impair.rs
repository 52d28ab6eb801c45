//! Replayed captures with injected loss, reordering and duplicates (made from clean made-up
//! captures of every protocol): requests whose segments were not touched are still paired
//! (≥ 99 %), none is mis-paired, nothing panics, and waiting memory stays within its bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use observe::route::Routes;
use observe::synth::{impair, workload, write_pcap, Rng};
use observe::{Limits, Observer, Protocol};

const PROTOCOLS: [(Protocol, u16); 6] = [
    (Protocol::Http, 8080),
    (Protocol::Postgres, 5432),
    (Protocol::Redis, 6379),
    (Protocol::Mysql, 3306),
    (Protocol::Kafka, 9092),
    (Protocol::Cassandra, 9042),
];

fn observer(p: Protocol, port: u16) -> Observer {
    let limits = Limits {
        pair_log_max: 1_000_000,
        ..Limits::default()
    };
    Observer::new(&[(p, port)], Routes::new(&[]).unwrap(), limits)
}

#[test]
fn clean_captures_pair_every_request() {
    for (p, port) in PROTOCOLS {
        let cap = workload(p, port, 20, 100, 1);
        let mut obs = observer(p, port);
        observe::run::replay(&cap.pcap()[..], &mut obs, &mut Vec::new()).unwrap();
        let good = obs
            .pair_log
            .iter()
            .filter(|x| x.req.probe.is_some() && x.req.probe == x.resp.probe)
            .count();
        assert_eq!(good, 2000, "{}: {:?}", p.name(), obs.counters);
        assert_eq!(
            obs.counters.unpaired + obs.counters.orphans + obs.counters.gaps,
            0,
            "{}",
            p.name()
        );
    }
}

#[test]
fn impaired_captures_keep_untouched_requests() {
    for (p, port) in PROTOCOLS {
        for seed in [3, 11] {
            let cap = workload(p, port, 20, 200, seed);
            let (frames, touched) = impair(&cap.frames, seed);
            let mut obs = observer(p, port);
            observe::run::replay(&write_pcap(&frames)[..], &mut obs, &mut Vec::new()).unwrap();
            let paired: std::collections::HashSet<u64> = obs
                .pair_log
                .iter()
                .filter(|x| x.req.probe == x.resp.probe)
                .filter_map(|x| x.req.probe)
                .collect();
            let mispairs = obs
                .pair_log
                .iter()
                .filter(|x| {
                    x.req.probe.is_some() && x.resp.probe.is_some() && x.req.probe != x.resp.probe
                })
                .count();
            let untouched: Vec<u64> = (0..4000).filter(|id| !touched.contains(id)).collect();
            let kept = untouched.iter().filter(|id| paired.contains(id)).count();
            eprintln!(
                "{} seed {seed}: {} touched, {kept} of {} untouched paired, {mispairs} mis-pairs, {} gaps, {} resyncs",
                p.name(),
                touched.len(),
                untouched.len(),
                obs.counters.gaps,
                obs.counters.resyncs
            );
            assert!(kept * 100 >= untouched.len() * 99, "{}", p.name());
            assert_eq!(mispairs, 0, "{}", p.name());
            assert_eq!(obs.pending_bytes(), 0);
        }
    }
}

/// Segments that never fill their holes, across many connections: the waiting bytes never pass
/// the total bound, the connection table never passes its bound.
#[test]
fn waiting_memory_is_bounded() {
    let limits = Limits {
        pending_total_max: 1 << 20,
        conns_max: 300,
        ..Limits::default()
    };
    let mut obs = Observer::new(&[(Protocol::Http, 80)], Routes::new(&[]).unwrap(), limits);
    let mut rng = Rng::new(5);
    let payload = vec![b'x'; 1400];
    let mut ts = 1_700_000_000_000_000_000u64;
    for n in 0..200_000u32 {
        let port = 1024 + (rng.draw() % 500) as u16;
        let seq = 1_000 + (rng.draw() % 1000) as u32 * 2000;
        let f = observe::decode::build_frame(
            ([10, 0, 0, 1], port),
            ([10, 0, 0, 2], 80),
            seq,
            1,
            0,
            &payload,
        );
        ts += 1_000;
        obs.packet(capture::linktype::ETHERNET, ts, &f);
        assert!(
            obs.pending_bytes() <= 1 << 20,
            "packet {n}: {} bytes waiting",
            obs.pending_bytes()
        );
        assert!(obs.conns() <= 300);
    }
    assert!(obs.counters.conns_refused > 0);
}
