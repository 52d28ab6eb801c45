//! Every collector against the kernel's own counters, read independently: the `procfs` crate
//! (another parser of the same files) and `df` (another statvfs caller). Counters must lie
//! between an oracle read before the collector's and one after; gauges within what they can
//! move in between; the 1 s histograms must agree with the rate the oracle computes over the
//! same seconds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agent::collect::Collector;
use broker::record::{Sample, Value};
use procfs::{Current, CurrentSI};

const TICKS: usize = 4;

fn value(samples: &[Sample], name: &str, tags: &[(&str, &str)]) -> Option<f64> {
    let s = samples.iter().find(|s| {
        s.name == name
            && tags
                .iter()
                .all(|(c, v)| s.tags.iter().any(|(a, b)| a == c && b == v))
    })?;
    match &s.value {
        Value::Numeric(v) => Some(*v),
        _ => None,
    }
}

fn histogram(samples: &[Sample], name: &str, tags: &[(&str, &str)]) -> Option<hist::Histogram> {
    let s = samples.iter().find(|s| {
        s.name == name
            && tags
                .iter()
                .all(|(c, v)| s.tags.iter().any(|(a, b)| a == c && b == v))
    })?;
    match &s.value {
        Value::Histogram(h) => Some(h.clone()),
        _ => None,
    }
}

fn between(what: &str, before: f64, mine: f64, after: f64) {
    assert!(
        before <= mine && mine <= after,
        "{what}: {mine} not within the oracle's {before} ..= {after}"
    );
}

fn near(what: &str, oracle: f64, mine: f64, tolerance: f64) {
    assert!(
        (oracle - mine).abs() <= tolerance,
        "{what}: {mine}, the oracle says {oracle} (± {tolerance})"
    );
}

/// Busy CPU: keeps one core partly busy so the ratios are not all zero.
fn burn(until: Instant) {
    std::thread::spawn(move || {
        while Instant::now() < until {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(30) {
                std::hint::black_box(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

/// Runs the collector for `TICKS` seconds between two oracle reads of /proc/stat.
fn run() -> (
    procfs::KernelStats,
    Vec<Sample>,
    procfs::KernelStats,
    Duration,
) {
    burn(Instant::now() + Duration::from_secs(TICKS as u64 + 2));
    let mut c = Collector::new("oracle-host");
    c.tick();
    let before = procfs::KernelStats::current().unwrap();
    let started = Instant::now();
    for _ in 0..TICKS {
        std::thread::sleep(Duration::from_secs(1));
        c.tick();
    }
    let elapsed = started.elapsed();
    let samples = c.emit(0);
    let after = procfs::KernelStats::current().unwrap();
    (before, samples, after, elapsed)
}

fn busy(t: &procfs::CpuTime) -> (u64, u64) {
    let (io, irq, soft, steal) = (
        t.iowait.unwrap_or(0),
        t.irq.unwrap_or(0),
        t.softirq.unwrap_or(0),
        t.steal.unwrap_or(0),
    );
    let total = t.user + t.nice + t.system + t.idle + io + irq + soft + steal;
    (total - t.idle - io, total)
}

#[test]
fn cpu_and_scheduler_counters_match_proc_stat() {
    let (before, samples, after, _) = run();
    // The histograms: one sample per second, and their mean the oracle's busy share.
    let h = histogram(&samples, "cpu_busy_ratio", &[("cpu", "total")]).unwrap();
    assert_eq!(h.sample_count(), TICKS as u64);
    let (b0, t0) = busy(&before.total);
    let (b1, t1) = busy(&after.total);
    let oracle = (b1 - b0) as f64 / (t1 - t0) as f64;
    near("cpu_busy_ratio mean", oracle, h.mean(), 0.15);
    for (n, _) in after.cpu_time.iter().enumerate() {
        let h = histogram(&samples, "cpu_busy_ratio", &[("cpu", &n.to_string())]).unwrap();
        assert_eq!(h.sample_count(), TICKS as u64, "cpu {n}");
    }
    let steal = histogram(&samples, "cpu_steal_ratio", &[]).unwrap();
    let s = |k: &procfs::KernelStats| k.total.steal.unwrap_or(0);
    let total = (t1 - t0) as f64;
    near(
        "cpu_steal_ratio mean",
        (s(&after) - s(&before)) as f64 / total,
        steal.mean(),
        0.1,
    );
    let tps = 100.0;
    for (mode, b, a) in [
        ("user", before.total.user, after.total.user),
        ("system", before.total.system, after.total.system),
        ("idle", before.total.idle, after.total.idle),
        (
            "iowait",
            before.total.iowait.unwrap_or(0),
            after.total.iowait.unwrap_or(0),
        ),
    ] {
        let mine = value(&samples, "cpu_seconds_total", &[("mode", mode)]).unwrap();
        between(mode, b as f64 / tps, mine, a as f64 / tps);
    }
    let mine = value(&samples, "context_switches_total", &[]).unwrap();
    between(
        "context switches",
        before.ctxt as f64,
        mine,
        after.ctxt as f64,
    );
    let mine = value(&samples, "forks_total", &[]).unwrap();
    between(
        "forks",
        before.processes as f64,
        mine,
        after.processes as f64,
    );
    let rq = histogram(&samples, "run_queue", &[]).unwrap();
    assert_eq!(rq.sample_count(), TICKS as u64);
    let cpus = after.cpu_time.len() as f64;
    assert!(
        rq.mean() >= 0.0 && rq.mean() <= 64.0 * cpus,
        "run queue {}",
        rq.mean()
    );
}

#[test]
fn pressure_stalls_match_proc_pressure() {
    let Ok(cpu0) = procfs::CpuPressure::current() else {
        // No PSI on this kernel: the collector must then have no such series either.
        let mut c = Collector::new("h");
        c.tick();
        c.tick();
        assert!(c.emit(0).iter().all(|s| s.name != "pressure_some_ratio"));
        return;
    };
    let io0 = procfs::IoPressure::current().unwrap();
    let mut c = Collector::new("h");
    c.tick();
    let started = Instant::now();
    for _ in 0..TICKS {
        std::thread::sleep(Duration::from_secs(1));
        c.tick();
    }
    let elapsed_us = started.elapsed().as_micros() as f64;
    let samples = c.emit(0);
    let cpu1 = procfs::CpuPressure::current().unwrap();
    let io1 = procfs::IoPressure::current().unwrap();
    let mine = histogram(&samples, "pressure_some_ratio", &[("resource", "cpu")]).unwrap();
    let oracle = (cpu1.some.total - cpu0.some.total) as f64 / elapsed_us;
    near("cpu pressure", oracle, mine.mean(), 0.1);
    let mine = histogram(&samples, "pressure_some_ratio", &[("resource", "io")]).unwrap();
    let oracle = (io1.some.total - io0.some.total) as f64 / elapsed_us;
    near("io pressure", oracle, mine.mean(), 0.1);
    let mine = histogram(&samples, "pressure_full_ratio", &[("resource", "io")]).unwrap();
    let oracle = (io1.full.total - io0.full.total) as f64 / elapsed_us;
    near("io full pressure", oracle, mine.mean(), 0.1);
}

#[test]
fn memory_load_processes_and_uptime_match() {
    let m0 = procfs::Meminfo::current().unwrap();
    let l0 = procfs::LoadAverage::current().unwrap();
    let f0 = procfs::sys::fs::file_nr().unwrap();
    let procs0 = procfs::process::all_processes().unwrap().count() as f64;
    let up0 = procfs::Uptime::current().unwrap().uptime;
    let mut c = Collector::new("h");
    c.tick();
    let samples = c.emit(0);
    let m1 = procfs::Meminfo::current().unwrap();
    let l1 = procfs::LoadAverage::current().unwrap();
    let up1 = procfs::Uptime::current().unwrap().uptime;
    let v = |n: &str| value(&samples, n, &[]).unwrap();
    assert_eq!(v("mem_total_bytes"), m0.mem_total as f64);
    let (a0, a1) = (
        m0.mem_available.unwrap() as f64,
        m1.mem_available.unwrap() as f64,
    );
    // Memory moves between the reads: within 64 MiB of the span the oracle saw.
    let slack = 64.0 * 1024.0 * 1024.0;
    between(
        "mem_available",
        a0.min(a1) - slack,
        v("mem_available_bytes"),
        a0.max(a1) + slack,
    );
    let used = |m: &procfs::Meminfo| (m.swap_total - m.swap_free) as f64;
    let (s0, s1) = (used(&m0), used(&m1));
    between(
        "swap_used",
        s0.min(s1) - slack,
        v("swap_used_bytes"),
        s0.max(s1) + slack,
    );
    for (name, a, b) in [
        ("load1", l0.one, l1.one),
        ("load5", l0.five, l1.five),
        ("load15", l0.fifteen, l1.fifteen),
    ] {
        let (lo, hi) = (f64::from(a.min(b)), f64::from(a.max(b)));
        between(name, lo - 0.01, v(name), hi + 0.01);
    }
    near("threads", f64::from(l0.max), v("threads"), 200.0);
    near("processes", procs0, v("processes"), 50.0);
    near(
        "fds_open",
        (f0.allocated - f0.free) as f64,
        v("fds_open"),
        500.0,
    );
    between("uptime", up0, v("uptime_seconds"), up1);
}

#[test]
fn disks_and_interfaces_match() {
    let d0 = procfs::diskstats().unwrap();
    let n0 = procfs::net::dev_status().unwrap();
    let r0 = procfs::net::snmp().unwrap().tcp_retrans_segs;
    let mut c = Collector::new("h");
    c.tick();
    std::thread::sleep(Duration::from_secs(1));
    c.tick();
    let samples = c.emit(0);
    let d1 = procfs::diskstats().unwrap();
    let n1 = procfs::net::dev_status().unwrap();
    let r1 = procfs::net::snmp().unwrap().tcp_retrans_segs;
    let disks: Vec<&str> = samples
        .iter()
        .filter(|s| s.name == "disk_ops_total")
        .filter_map(|s| {
            s.tags
                .iter()
                .find(|(c, _)| c == "device")
                .map(|(_, v)| v.as_str())
        })
        .collect();
    let whole: Vec<&procfs::DiskStat> = d0
        .iter()
        .filter(|d| std::path::Path::new("/sys/block").join(&d.name).exists())
        .filter(|d| !d.name.starts_with("loop") && !d.name.starts_with("ram"))
        .collect();
    assert_eq!(
        disks.len(),
        2 * whole.len(),
        "one read and one write series per whole disk"
    );
    for d in whole {
        let a = d1.iter().find(|x| x.name == d.name).unwrap();
        let dev = d.name.as_str();
        let r = |dir| {
            value(
                &samples,
                "disk_ops_total",
                &[("device", dev), ("direction", dir)],
            )
            .unwrap()
        };
        between("disk reads", d.reads as f64, r("read"), a.reads as f64);
        between("disk writes", d.writes as f64, r("write"), a.writes as f64);
        let b = value(
            &samples,
            "disk_bytes_total",
            &[("device", dev), ("direction", "write")],
        )
        .unwrap();
        between(
            "disk bytes written",
            (d.sectors_written * 512) as f64,
            b,
            (a.sectors_written * 512) as f64,
        );
        let busy = value(&samples, "disk_io_seconds_total", &[("device", dev)]).unwrap();
        between(
            "disk io time",
            d.time_in_progress as f64 / 1e3,
            busy,
            a.time_in_progress as f64 / 1e3,
        );
        let ops = (a.reads + a.writes) - (d.reads + d.writes);
        if let Some(h) = histogram(&samples, "disk_op_seconds", &[("device", dev)]) {
            assert!(
                h.sample_count() <= ops,
                "{dev}: {} operations timed, {ops} done",
                h.sample_count()
            );
        }
        let q = histogram(&samples, "disk_queue_depth", &[("device", dev)]).unwrap();
        assert_eq!(q.sample_count(), 1);
    }
    for (name, d) in &n0 {
        let a = &n1[name];
        let v = |n: &str, dir: &str| {
            value(
                &samples,
                n,
                &[("interface", name.as_str()), ("direction", dir)],
            )
            .unwrap()
        };
        between(
            "rx bytes",
            d.recv_bytes as f64,
            v("net_bytes_total", "rx"),
            a.recv_bytes as f64,
        );
        between(
            "tx bytes",
            d.sent_bytes as f64,
            v("net_bytes_total", "tx"),
            a.sent_bytes as f64,
        );
        between(
            "rx packets",
            d.recv_packets as f64,
            v("net_packets_total", "rx"),
            a.recv_packets as f64,
        );
        between(
            "tx packets",
            d.sent_packets as f64,
            v("net_packets_total", "tx"),
            a.sent_packets as f64,
        );
        between(
            "rx errors",
            d.recv_errs as f64,
            v("net_errors_total", "rx"),
            a.recv_errs as f64,
        );
        between(
            "rx drops",
            d.recv_drop as f64,
            v("net_drops_total", "rx"),
            a.recv_drop as f64,
        );
    }
    let mine = value(&samples, "tcp_retransmits_total", &[]).unwrap();
    between("tcp retransmits", r0 as f64, mine, r1 as f64);
}

#[test]
fn tcp_states_match_proc_net_tcp() {
    // A listener and an established pair of our own, so the counts are not all zero.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let _client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let _server = l.accept().unwrap();
    let count = || {
        let mut by: HashMap<String, f64> = HashMap::new();
        let entries = procfs::net::tcp()
            .unwrap()
            .into_iter()
            .chain(procfs::net::tcp6().unwrap_or_default());
        for e in entries {
            *by.entry(format!("{:?}", e.state).to_lowercase())
                .or_default() += 1.0;
        }
        by
    };
    let before = count();
    let mut c = Collector::new("h");
    c.tick();
    let samples = c.emit(0);
    let after = count();
    for (state, oracle) in [
        ("established", "established"),
        ("listen", "listen"),
        ("time_wait", "timewait"),
    ] {
        let mine = value(&samples, "tcp_connections", &[("state", state)]).unwrap();
        let (a, b) = (
            before.get(oracle).copied().unwrap_or(0.0),
            after.get(oracle).copied().unwrap_or(0.0),
        );
        between(state, a.min(b) - 20.0, mine, a.max(b) + 20.0);
    }
    assert!(value(&samples, "tcp_connections", &[("state", "listen")]).unwrap() >= 1.0);
    assert!(value(&samples, "tcp_connections", &[("state", "established")]).unwrap() >= 2.0);
}

#[test]
fn filesystems_match_df() {
    let mounts: Vec<procfs::MountEntry> = procfs::mounts().unwrap();
    let mut c = Collector::new("h");
    c.tick();
    let samples = c.emit(0);
    let out = std::process::Command::new("df")
        .args([
            "-B1",
            "--output=target,size,avail",
            "-x",
            "tmpfs",
            "-x",
            "devtmpfs",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let df = String::from_utf8(out.stdout).unwrap();
    let mut checked = 0;
    for m in mounts.iter().filter(|m| m.fs_spec.starts_with("/dev/")) {
        let Some(row) = df
            .lines()
            .skip(1)
            .find(|l| l.split_ascii_whitespace().next() == Some(&m.fs_file))
        else {
            continue;
        };
        let f: Vec<f64> = row
            .split_ascii_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect();
        let tags = [("mountpoint", m.fs_file.as_str())];
        let size = value(&samples, "fs_size_bytes", &tags).unwrap();
        assert_eq!(size, f[0], "{}", m.fs_file);
        let slack = 256.0 * 1024.0 * 1024.0;
        near(
            &m.fs_file,
            f[1],
            value(&samples, "fs_avail_bytes", &tags).unwrap(),
            slack,
        );
        let ratio = value(&samples, "fs_used_ratio", &tags).unwrap();
        assert!((0.0..=1.0).contains(&ratio), "{ratio}");
        checked += 1;
    }
    assert!(checked > 0, "no device-backed filesystem compared:\n{df}");
}
