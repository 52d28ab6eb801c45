//! The observer's benchmarks (figures in `crates/observe/README.md`).
//!
//! ```text
//! observe_bench pcap FILE PROTO CONNS PER_CONN      write a made-up capture
//! observe_bench replay FILE PROTO:PORT…             replay it; packets per CPU-second
//! observe_bench live SECONDS PROTO:PORT…            capture on lo; CPU, drops, memory samples
//! observe_bench load redis PORT RATE SECONDS        a paced Redis client (PING at RATE/s)
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use observe::config::parse_wire;
use observe::route::Routes;
use observe::run::Output;
use observe::{Limits, Observer, Protocol};

struct Count(usize);

impl Output for Count {
    fn document(&mut self, _body: String) {
        self.0 += 1;
    }
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn observer(wires: &[String]) -> Observer {
    let wires: Vec<(Protocol, u16)> = wires.iter().map(|w| parse_wire(w).unwrap()).collect();
    Observer::new(
        &wires,
        Routes::new(&[]).unwrap(),
        Limits {
            period_ms: 10_000,
            ..Limits::default()
        },
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("pcap") => {
            let p = Protocol::from_name(&args[2]).unwrap();
            let port = match p {
                Protocol::Http => 8080,
                Protocol::Postgres => 5432,
                Protocol::Redis => 6379,
                Protocol::Mysql => 3306,
                Protocol::Kafka => 9092,
                Protocol::Cassandra => 9042,
            };
            let cap = observe::synth::workload(
                p,
                port,
                args[3].parse().unwrap(),
                args[4].parse().unwrap(),
                1,
            );
            std::fs::write(&args[1], cap.pcap()).unwrap();
            println!("{} packets", cap.frames.len());
        }
        Some("replay") => {
            let mut obs = observer(&args[2..]);
            let bytes = std::fs::read(&args[1]).unwrap();
            let s = observe::run::replay(&bytes[..], &mut obs, &mut Count(0)).unwrap();
            println!(
                "replay: {} packets, {} pairs, {:.3} CPU-s, {:.0} packets per CPU-second",
                s.counters.packets,
                s.counters.pairs,
                s.cpu_ns as f64 / 1e9,
                s.packets_per_cpu_second()
            );
        }
        Some("live") => live(&args),
        Some("load") => load(&args),
        _ => eprintln!("usage: see the source"),
    }
}

fn live(args: &[String]) {
    let secs: u64 = args[1].parse().unwrap();
    let mut obs = observer(&args[2..]);
    let ports: Vec<u16> = args[2..].iter().map(|w| parse_wire(w).unwrap().1).collect();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut out = Count(0);
    // Sample resident memory once per period as documents come out.
    struct Sampled<'a>(&'a mut Vec<(u64, u64)>, Instant, &'a mut Count);
    impl Output for Sampled<'_> {
        fn document(&mut self, body: String) {
            self.0.push((self.1.elapsed().as_secs(), rss_kib()));
            self.2.document(body);
        }
    }
    let live = observe::run::Live {
        iface: "lo",
        ring: Default::default(),
        ports: &ports,
        duration: Some(Duration::from_secs(secs)),
        tee: None,
    };
    let s = observe::run::live(
        live,
        &mut obs,
        &stop,
        &mut Sampled(&mut samples, started, &mut out),
    )
    .unwrap();
    println!(
        "live: {} packets in {:.1} s, {} pairs, {} kernel drops, {:.3} CPU-s ({:.2} % of a core), {:.0} packets per CPU-second",
        s.counters.packets,
        s.wall_ns as f64 / 1e9,
        s.counters.pairs,
        s.counters.kernel_drops,
        s.cpu_ns as f64 / 1e9,
        s.cpu_ns as f64 / s.wall_ns as f64 * 100.0,
        s.packets_per_cpu_second()
    );
    println!("rss KiB by period: {samples:?}");
}

/// PING at a steady rate on one connection; prints what it sent.
fn load(args: &[String]) {
    let port: u16 = args[2].parse().unwrap();
    let rate: u64 = args[3].parse().unwrap();
    let secs: u64 = args[4].parse().unwrap();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        let due = start + Duration::from_nanos(sent * 1_000_000_000 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        sent += 1;
    }
    println!(
        "load: {sent} requests in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
