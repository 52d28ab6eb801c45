//! Host collectors: every second (`tick`) the fast-moving counters are read and their one-second
//! rates recorded into per-period histograms (CPU busy, steal and I/O wait, run queue, pressure
//! stalls, time per disk operation, disk queue depth); at the period's end (`emit`) the gauges
//! and counters are read once and everything becomes samples. Names and tags: `METRICS.md`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use broker::record::{Mode, Sample, Value};
use hist::Histogram;

use crate::kernel::{self, CpuTimes, Disk, Stat};

/// The pressure resources, in the order kept.
const PSI: [&str; 3] = ["cpu", "memory", "io"];

/// One second's raw readings, kept to difference the next against.
struct Tick {
    at: Instant,
    stat: Stat,
    disks: Vec<Disk>,
    psi: [(u64, Option<u64>); 3],
}

/// What one period's ticks recorded.
#[derive(Default)]
struct Period {
    cpu_busy: BTreeMap<String, Histogram>,
    cpu_steal: Histogram,
    cpu_iowait: Histogram,
    run_queue: Histogram,
    blocked: Histogram,
    psi_some: [Histogram; 3],
    psi_full: [Histogram; 3],
    disk_op: BTreeMap<String, Histogram>,
    disk_queue: BTreeMap<String, Histogram>,
}

/// Reads the host under a `/proc` and `/sys` root (the real ones outside tests).
pub struct Collector {
    proc_dir: PathBuf,
    host: String,
    prev: Option<Tick>,
    period: Period,
    /// Ticks recorded in the period, and in the agent's life.
    pub period_ticks: u64,
    pub ticks_total: u64,
    /// Kernel files that could not be read (a kernel without PSI, a container).
    pub read_errors: u64,
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 / whole as f64).clamp(0.0, 1.0))
}

fn busy_ratio(now: &CpuTimes, prev: &CpuTimes) -> Option<f64> {
    let total = now.total().saturating_sub(prev.total());
    ratio(now.busy().saturating_sub(prev.busy()), total)
}

impl Collector {
    pub fn new(host: &str) -> Collector {
        Collector {
            proc_dir: PathBuf::from("/proc"),
            host: host.to_owned(),
            prev: None,
            period: Period::default(),
            period_ticks: 0,
            ticks_total: 0,
            read_errors: 0,
        }
    }

    fn read(&mut self, rel: &str) -> String {
        match kernel::read(&self.proc_dir.join(rel)) {
            Ok(t) => t,
            Err(_) => {
                self.read_errors += 1;
                String::new()
            }
        }
    }

    fn read_tick(&mut self) -> Tick {
        let stat = kernel::parse_stat(&self.read("stat"));
        let disks = kernel::parse_diskstats(&self.read("diskstats"), &kernel::is_block_device);
        let mut psi = [(0, None); 3];
        for (slot, resource) in psi.iter_mut().zip(PSI) {
            // Optional: kernels without PSI (or with it off) have no such files.
            if let Ok(t) = kernel::read(&self.proc_dir.join("pressure").join(resource)) {
                *slot = kernel::parse_pressure(&t);
            }
        }
        Tick {
            at: Instant::now(),
            stat,
            disks,
            psi,
        }
    }

    /// Reads the one-second counters and records their rates since the previous tick.
    pub fn tick(&mut self) {
        let now = self.read_tick();
        if let Some(prev) = self.prev.take() {
            self.record(&prev, &now);
            self.period_ticks += 1;
            self.ticks_total += 1;
        }
        self.prev = Some(now);
    }

    fn record(&mut self, prev: &Tick, now: &Tick) {
        let p = &mut self.period;
        if let Some(r) = busy_ratio(&now.stat.total, &prev.stat.total) {
            p.cpu_busy.entry("total".into()).or_default().insert(r);
        }
        let total = now
            .stat
            .total
            .total()
            .saturating_sub(prev.stat.total.total());
        if let Some(r) = ratio(
            now.stat.total.steal.saturating_sub(prev.stat.total.steal),
            total,
        ) {
            p.cpu_steal.insert(r);
        }
        let iowait = now.stat.total.iowait.saturating_sub(prev.stat.total.iowait);
        if let Some(r) = ratio(iowait, total) {
            p.cpu_iowait.insert(r);
        }
        for (n, t) in &now.stat.cpus {
            let before = prev.stat.cpus.iter().find(|(m, _)| m == n);
            if let Some(r) = before.and_then(|(_, b)| busy_ratio(t, b)) {
                p.cpu_busy.entry(n.to_string()).or_default().insert(r);
            }
        }
        p.run_queue.insert(now.stat.procs_running as f64);
        p.blocked.insert(now.stat.procs_blocked as f64);
        let elapsed_us = now.at.duration_since(prev.at).as_micros() as u64;
        for i in 0..PSI.len() {
            let (some, full) = (now.psi[i], prev.psi[i]);
            if let Some(r) = ratio(some.0.saturating_sub(full.0), elapsed_us) {
                p.psi_some[i].insert(r);
            }
            if let (Some(a), Some(b)) = (some.1, full.1) {
                if let Some(r) = ratio(a.saturating_sub(b), elapsed_us) {
                    p.psi_full[i].insert(r);
                }
            }
        }
        let elapsed_ms = (elapsed_us / 1000).max(1);
        for d in &now.disks {
            let Some(b) = prev.disks.iter().find(|b| b.name == d.name) else {
                continue;
            };
            let ops = (d.reads + d.writes).saturating_sub(b.reads + b.writes);
            let ms = (d.read_ms + d.write_ms).saturating_sub(b.read_ms + b.write_ms);
            if ops > 0 {
                let per_op_s = ms as f64 / ops as f64 / 1000.0;
                p.disk_op
                    .entry(d.name.clone())
                    .or_default()
                    .insert_n(per_op_s, ops);
            }
            let queue = d.weighted_ms.saturating_sub(b.weighted_ms) as f64 / elapsed_ms as f64;
            p.disk_queue
                .entry(d.name.clone())
                .or_default()
                .insert(queue);
        }
    }

    fn tags(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut tags = vec![("host".to_owned(), self.host.clone())];
        tags.extend(
            extra
                .iter()
                .map(|(c, v)| ((*c).to_owned(), (*v).to_owned())),
        );
        tags
    }

    /// The period's samples, stamped `ts_ms`; the period starts again empty.
    pub fn emit(&mut self, ts_ms: i64) -> Vec<Sample> {
        let period = std::mem::take(&mut self.period);
        self.period_ticks = 0;
        let mut out = Out {
            ts_ms,
            samples: Vec::with_capacity(256),
        };
        for (cpu, h) in period.cpu_busy {
            out.hist("cpu_busy_ratio", self.tags(&[("cpu", &cpu)]), h);
        }
        let total = self.tags(&[("cpu", "total")]);
        out.hist("cpu_steal_ratio", total.clone(), period.cpu_steal);
        out.hist("cpu_iowait_ratio", total, period.cpu_iowait);
        out.hist("run_queue", self.tags(&[]), period.run_queue);
        out.hist("procs_blocked", self.tags(&[]), period.blocked);
        for (i, (some, full)) in period.psi_some.into_iter().zip(period.psi_full).enumerate() {
            out.hist(
                "pressure_some_ratio",
                self.tags(&[("resource", PSI[i])]),
                some,
            );
            out.hist(
                "pressure_full_ratio",
                self.tags(&[("resource", PSI[i])]),
                full,
            );
        }
        for (dev, h) in period.disk_op {
            out.hist("disk_op_seconds", self.tags(&[("device", &dev)]), h);
        }
        for (dev, h) in period.disk_queue {
            out.hist("disk_queue_depth", self.tags(&[("device", &dev)]), h);
        }
        self.emit_counters(&mut out);
        self.emit_memory_and_load(&mut out);
        self.emit_net(&mut out);
        self.emit_fs(&mut out);
        out.samples
    }

    fn emit_counters(&mut self, out: &mut Out) {
        let Some(prev) = self.prev.as_ref() else {
            return;
        };
        let (stat, disks) = (prev.stat.clone(), prev.disks.clone());
        let t = stat.total;
        for (mode, ticks) in [
            ("user", t.user),
            ("nice", t.nice),
            ("system", t.system),
            ("idle", t.idle),
            ("iowait", t.iowait),
            ("irq", t.irq),
            ("softirq", t.softirq),
            ("steal", t.steal),
        ] {
            let tags = self.tags(&[("mode", mode)]);
            out.num("cpu_seconds_total", tags, ticks as f64 / kernel::USER_HZ);
        }
        out.num(
            "context_switches_total",
            self.tags(&[]),
            stat.context_switches as f64,
        );
        out.num("forks_total", self.tags(&[]), stat.forks as f64);
        out.num("interrupts_total", self.tags(&[]), stat.interrupts as f64);
        for d in &disks {
            for (dir, ops, sectors) in [
                ("read", d.reads, d.read_sectors),
                ("write", d.writes, d.write_sectors),
            ] {
                let tags = self.tags(&[("device", &d.name), ("direction", dir)]);
                out.num("disk_ops_total", tags.clone(), ops as f64);
                // diskstats counts 512-byte sectors whatever the device's own sector size.
                out.num("disk_bytes_total", tags, (sectors * 512) as f64);
            }
            let tags = self.tags(&[("device", &d.name)]);
            out.num("disk_io_seconds_total", tags, d.io_ms as f64 / 1000.0);
        }
    }

    fn emit_memory_and_load(&mut self, out: &mut Out) {
        let m = kernel::parse_meminfo(&self.read("meminfo"));
        let none = self.tags(&[]);
        out.num("mem_total_bytes", none.clone(), m.total as f64);
        out.num("mem_available_bytes", none.clone(), m.available as f64);
        out.num("mem_free_bytes", none.clone(), m.free as f64);
        out.num("mem_cached_bytes", none.clone(), m.cached as f64);
        out.num("mem_buffers_bytes", none.clone(), m.buffers as f64);
        out.num("swap_total_bytes", none.clone(), m.swap_total as f64);
        let swap_used = m.swap_total.saturating_sub(m.swap_free);
        out.num("swap_used_bytes", none.clone(), swap_used as f64);
        let l = kernel::parse_loadavg(&self.read("loadavg"));
        out.num("load1", none.clone(), l.one);
        out.num("load5", none.clone(), l.five);
        out.num("load15", none.clone(), l.fifteen);
        out.num("threads", none.clone(), l.threads as f64);
        let procs = kernel::count_processes(&self.proc_dir);
        out.num("processes", none.clone(), procs as f64);
        let fds = kernel::parse_file_nr(&self.read("sys/fs/file-nr"));
        out.num("fds_open", none.clone(), fds as f64);
        let up = kernel::parse_uptime(&self.read("uptime"));
        out.num("uptime_seconds", none, up);
    }

    fn emit_net(&mut self, out: &mut Out) {
        for n in kernel::parse_net_dev(&self.read("net/dev")) {
            for (dir, bytes, packets, errors, drops) in [
                ("rx", n.rx_bytes, n.rx_packets, n.rx_errors, n.rx_drops),
                ("tx", n.tx_bytes, n.tx_packets, n.tx_errors, n.tx_drops),
            ] {
                let tags = self.tags(&[("interface", &n.name), ("direction", dir)]);
                out.num("net_bytes_total", tags.clone(), bytes as f64);
                out.num("net_packets_total", tags.clone(), packets as f64);
                out.num("net_errors_total", tags.clone(), errors as f64);
                out.num("net_drops_total", tags, drops as f64);
            }
        }
        let mut states = [0u64; 12];
        for file in ["net/tcp", "net/tcp6"] {
            kernel::count_tcp_states(&self.read(file), &mut states);
        }
        for (state, count) in kernel::TCP_STATES.iter().zip(states) {
            out.num(
                "tcp_connections",
                self.tags(&[("state", state)]),
                count as f64,
            );
        }
        let snmp = self.read("net/snmp");
        if let Some(v) = kernel::table_value(&snmp, "Tcp", "RetransSegs") {
            out.num("tcp_retransmits_total", self.tags(&[]), v as f64);
        }
        let netstat = self.read("net/netstat");
        if let Some(v) = kernel::table_value(&netstat, "TcpExt", "ListenOverflows") {
            out.num("tcp_listen_overflows_total", self.tags(&[]), v as f64);
        }
    }

    fn emit_fs(&mut self, out: &mut Out) {
        for m in kernel::parse_mounts(&self.read("self/mounts")) {
            let Some(s) = kernel::statvfs(&m.mountpoint) else {
                continue;
            };
            let tags = self.tags(&[("mountpoint", &m.mountpoint), ("fstype", &m.fstype)]);
            out.num("fs_size_bytes", tags.clone(), s.size_bytes as f64);
            out.num("fs_avail_bytes", tags.clone(), s.avail_bytes as f64);
            // As df: used over what a user could have (used + available).
            let used = s.size_bytes.saturating_sub(s.free_bytes);
            let usable = used + s.avail_bytes;
            let used_ratio = if usable > 0 {
                used as f64 / usable as f64
            } else {
                0.0
            };
            out.num("fs_used_ratio", tags.clone(), used_ratio);
            out.num("fs_inodes", tags.clone(), s.inodes as f64);
            out.num("fs_inodes_free", tags, s.inodes_free as f64);
        }
    }
}

/// Samples being made for one period.
pub struct Out {
    pub ts_ms: i64,
    pub samples: Vec<Sample>,
}

impl Out {
    pub fn num(&mut self, name: &str, tags: Vec<(String, String)>, v: f64) {
        self.push(name, tags, Value::Numeric(v));
    }

    /// An empty histogram is left out: no tick saw that series this period.
    pub fn hist(&mut self, name: &str, tags: Vec<(String, String)>, h: Histogram) {
        if !h.is_empty() {
            self.push(name, tags, Value::Histogram(h));
        }
    }

    fn push(&mut self, name: &str, tags: Vec<(String, String)>, value: Value) {
        self.samples.push(Sample {
            name: name.to_owned(),
            tags,
            ts_ms: self.ts_ms,
            value,
            mode: Mode::Set,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_of_ticks_becomes_histograms_with_one_sample_per_second() {
        let mut c = Collector::new("h1");
        for _ in 0..4 {
            c.tick();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(c.period_ticks, 3);
        let samples = c.emit(1000);
        let busy = samples
            .iter()
            .find(|s| {
                s.name == "cpu_busy_ratio" && s.tags.contains(&("cpu".into(), "total".into()))
            })
            .unwrap();
        let Value::Histogram(h) = &busy.value else {
            panic!("not a histogram")
        };
        assert_eq!(h.sample_count(), 3);
        assert!(samples
            .iter()
            .all(|s| s.tags[0] == ("host".into(), "h1".into())));
        for name in [
            "mem_total_bytes",
            "load1",
            "net_bytes_total",
            "uptime_seconds",
        ] {
            assert!(samples.iter().any(|s| s.name == name), "{name}");
        }
        assert_eq!(c.period_ticks, 0);
    }
}
